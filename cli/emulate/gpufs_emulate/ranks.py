"""N ranks on one node, as torchrun starts them: each a process with its own
DistributedSampler shard and DataLoader (and its workers), all-reducing once per step over
gloo on loopback. The parent steps them through the epochs, snapshots the mount's
counters between epochs and draws the progress."""
import datetime
import math
import multiprocessing
import queue
import random
import os
import socket
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Callable, Optional

from .loop import run_epoch, sleeping_step


@dataclass
class Job:
    gpus: int
    batch: int
    workers: int
    step_s: float  # the emulated accelerator's step (0 with train_on)
    epochs: int
    transform: str
    image_size: int
    sync: bool  # an all-reduce per step
    max_steps: int = 0  # per rank and epoch (0: the whole shard)
    prep_steps: int = 0  # steps per rank of the resident pass (0: none)
    seed: int = 0
    train_on: Optional[str] = None  # a torch device: really train this model there
    model: str = "resnet50"

    @property
    def synced(self) -> bool:
        """The ranks all-reduce each step (and start the resident pass together)."""
        return self.gpus > 1 and self.sync


class RankFailed(Exception):
    pass


# How long a rank waits for the start of its next pass (the parent asks gpufs-stat
# between passes) before it takes the parent for gone.
_PARENT_WAIT_S = 3600

# Slots of the shared progress array, per rank.
_STEPS, _IMAGES, _WAITING, _SLOTS = 0, 1, 2, 3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def steps_per_epoch(job: Job, dataset_len: int) -> int:
    """What each rank's loader yields: DistributedSampler pads the shards to equal size."""
    per_rank = math.ceil(dataset_len / job.gpus)
    steps = math.ceil(per_rank / job.batch)
    return min(steps, job.max_steps) if job.max_steps else steps


def resident_indices(job: Job, dataset_len: int, rank: int):
    """The prep pass's files of this rank: a seeded sample of the dataset, dealt out."""
    count = min(dataset_len, job.prep_steps * job.batch * job.gpus)
    chosen = random.Random(job.seed + 1).sample(range(dataset_len), count)
    return chosen[rank::job.gpus]


def _exit_with(parent: int):
    """A rank has workers of its own (so it cannot be a daemonic process): it ends itself
    once the parent is gone, rather than wait on the next pass."""
    def watch():
        while os.getppid() == parent:
            time.sleep(1)
        os._exit(1)
    threading.Thread(target=watch, daemon=True).start()


class _Rank:
    """The body of one rank's process."""

    def __init__(self, job: Job, rank: int, folder, port: int, go, progress, results):
        self.job, self.rank, self.folder = job, rank, folder
        self.port, self.go, self.progress, self.results = port, go, progress, results

    def run(self):
        _exit_with(os.getppid())
        try:
            import torch
            torch.set_num_threads(1)  # the workers, not the step, use the CPUs
            self._join()
            step = self._step()
            for epoch in range(self.job.epochs):
                self._ready()
                self._send("epoch", epoch, self._epoch(self._loader(self.folder, epoch), step))
            if self.job.prep_steps:
                self._ready()
                self._send("prep", -1, self._resident_pass(step))
        except BaseException:  # everything reaches the parent, which stops the job
            self.results.put(("error", self.rank, traceback.format_exc()))

    def _ready(self):
        """Tells the parent this rank is ready for its next pass and waits for the start."""
        self.results.put(("ready", self.rank))
        if not self.go.acquire(timeout=_PARENT_WAIT_S):
            os._exit(1)

    def _send(self, kind, epoch, rank_epoch):
        self.results.put((kind, self.rank, epoch, rank_epoch))

    def _join(self):
        if self.job.synced:
            import torch.distributed as dist
            dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{self.port}",
                                    world_size=self.job.gpus, rank=self.rank,
                                    timeout=datetime.timedelta(minutes=30))

    def _sync(self):
        if not self.job.synced:
            return None
        import torch
        import torch.distributed as dist
        grad = torch.zeros(1)
        return lambda: dist.all_reduce(grad)

    def _step(self) -> Callable:
        if not self.job.train_on:
            return sleeping_step(self.job.step_s)
        from .record import trainer
        device = self.job.train_on
        if device.startswith("cuda") and ":" not in device and self.job.gpus > 1:
            device = f"cuda:{self.rank}"
        return trainer(self.job.model, len(self.folder.classes), device)

    def _loader(self, dataset, epoch, shuffle_only=False):
        import torch
        from torch.utils.data import DataLoader, DistributedSampler, RandomSampler
        g = torch.Generator()
        g.manual_seed(self.job.seed + epoch)
        if shuffle_only or self.job.gpus == 1:
            sampler = RandomSampler(dataset, generator=g)
        else:
            sampler = DistributedSampler(dataset, num_replicas=self.job.gpus, rank=self.rank,
                                         shuffle=True, seed=self.job.seed)
            sampler.set_epoch(epoch)
        return DataLoader(dataset, batch_size=self.job.batch, sampler=sampler,
                          num_workers=self.job.workers)

    def _epoch(self, loader, step, max_steps=None):
        base = self.rank * _SLOTS
        for i in range(_SLOTS):
            self.progress[base + i] = 0

        def on_step(s):
            self.progress[base + _STEPS] += 1
            self.progress[base + _IMAGES] += s.images
            self.progress[base + _WAITING] += s.data_wait + s.sync_wait

        return run_epoch(self.rank, loader, step, self._sync(),
                         self.job.max_steps if max_steps is None else max_steps, on_step)

    def _resident_pass(self, step):
        from .data import resident
        indices = resident_indices(self.job, len(self.folder), self.rank)
        dataset = resident(self.folder, indices, self.job.transform, self.job.image_size)
        if self.job.synced:
            import torch.distributed as dist
            dist.barrier()  # every rank has read its share: start together
        return self._epoch(self._loader(dataset, 0, shuffle_only=True), step, 0)


class Ranks:
    """The rank processes of one job, driven epoch by epoch."""

    def __init__(self, job: Job, folder):
        self.job = job
        ctx = multiprocessing.get_context("fork")  # the ranks share the parent's listing
        self.progress = ctx.Array("d", job.gpus * _SLOTS, lock=False)
        self.go = ctx.Semaphore(0)  # one release per rank starts a pass
        self.early_ready = []
        self.results = ctx.Queue()
        port = free_port()
        self.procs = [ctx.Process(target=_Rank(job, r, folder, port, self.go, self.progress,
                                               self.results).run)
                      for r in range(job.gpus)]
        for p in self.procs:
            p.start()

    def rank_progress(self, rank):
        base = rank * _SLOTS
        return tuple(self.progress[base + i] for i in range(_SLOTS))

    def run(self, kind: str, tick: Callable[[], None]):
        """Starts the ranks on their next pass once all are ready, and returns
        {rank: RankEpoch} when all have sent theirs; `tick` draws the progress meanwhile. A
        failed or dead rank stops the job with its error (never a wait for it)."""
        self._collect("ready", tick)
        for _ in range(self.job.gpus):
            self.go.release()
        got = self._collect(kind, tick)
        tick()
        return got

    def _collect(self, kind: str, tick: Callable[[], None]):
        # A fast rank says it is ready for the next pass before a slow one sends this one.
        got = {r: None for r in self.early_ready} if kind == "ready" else {}
        if kind == "ready":
            self.early_ready = []
        while len(got) < self.job.gpus:
            try:
                msg = self.results.get(timeout=0.25)
            except queue.Empty:
                tick()
                dead = [p for p in self.procs if p.exitcode not in (None, 0)]
                if dead:
                    raise RankFailed(f"rank {self.procs.index(dead[0])} died "
                                     f"(exit code {dead[0].exitcode})")
                continue
            if msg[0] == "error":  # the exception's own line: it names the file
                last = [line for line in msg[2].splitlines() if line.strip()][-1]
                raise RankFailed(f"rank {msg[1]} failed: {last}")
            if msg[0] == "ready" and kind != "ready":
                self.early_ready.append(msg[1])
                continue
            if msg[0] != kind:
                raise RankFailed(f"rank {msg[1]} sent {msg[0]} while the job waited for {kind}")
            got[msg[1]] = msg[3] if len(msg) > 3 else None
        return got

    def close(self):
        for p in self.procs:
            if p.is_alive():
                p.terminate()
        for p in self.procs:
            p.join(timeout=10)

