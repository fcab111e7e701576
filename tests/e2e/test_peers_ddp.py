#!/usr/bin/python3
"""Four nodes over one store, as a distributed training job sees them.

Four gpufsd mounts with their own caches (one per "node"), four nginx peer caches with the
config gpufs ships, one origin (nginx) holding a pack. Four ranks of torch.distributed
(gloo, CPU) each read ImageFolder through their own mount with DistributedSampler and
set_epoch, two epochs: every rank's bytes equal the same sampler over the source tree; with
--peers the origin serves each byte of the dataset about once over the whole job (about
four times without); a peer stopped mid-epoch leaves the epoch complete and byte-exact.
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "mount"))
import gpufs_testlib as lib  # noqa: E402

sys.path.insert(0, lib.ROOT)
from tests.servers import nginx  # noqa: E402
from tests.servers.procs import free_port  # noqa: E402

try:
    from torch.utils.data import DistributedSampler
    from torchvision import datasets
except ImportError as e:
    print(f"SKIP: torchvision is not importable ({e}); apt-get install python3-torchvision")
    sys.exit(lib.SKIP)

RANKS, EPOCHS = 4, 2
BLOCK = 16 << 10  # --peer-block and the peers' slice: many blocks on a small dataset
PAUSE_AFTER = 2   # batches each rank reads before a paused job waits for "go"
STATS = "user.gpufs.stats"


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def sampled(root, rank, epoch):
    """The indices DistributedSampler gives `rank` in `epoch` over ImageFolder(root)."""
    sampler = DistributedSampler(datasets.ImageFolder(root), num_replicas=RANKS, rank=rank,
                                 shuffle=True, seed=0)
    sampler.set_epoch(epoch)
    return list(sampler)


def rank_main(mnt, out, pause):
    """One rank: two epochs of ImageFolder + DistributedSampler through `mnt`."""
    import torch.distributed as dist
    from torch.utils.data import DataLoader
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    dataset = datasets.ImageFolder(mnt, loader=digest)
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    seen = []
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        loader = DataLoader(list(sampler), batch_size=4, num_workers=2,
                            collate_fn=lambda batch: [(i, dataset[i][0]) for i in batch])
        for n, batch in enumerate(loader):
            seen.extend((epoch, i, d) for i, d in batch)
            if pause and epoch == 0 and n + 1 == PAUSE_AFTER:
                open(f"{pause}.{rank}", "w").close()
                while not os.path.exists(pause + ".go"):
                    time.sleep(0.05)
        dist.barrier()
    with open(out, "w") as f:
        json.dump(seen, f)
    dist.destroy_process_group()


class FourNodes(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        reason = nginx.NginxPeer.skip_reason()
        if reason:
            raise unittest.SkipTest(reason)
        cls.work = tempfile.mkdtemp(prefix="gpufs-ddp-")
        cls.tree = os.path.join(cls.work, "tree")
        lib.make_sample.make_tree(cls.tree, 6, 30, 5, True, 160)
        served = os.path.join(cls.work, "served")
        cls.data_bytes = lib.blob_bytes(lib.pack_to_serve(cls.tree, served, "48KiB"))
        cls.origin = nginx.NginxOrigin(served).__enter__()
        source = datasets.ImageFolder(cls.tree, loader=digest)
        cls.digests = [digest(p) for p, _ in source.samples]
        cls.expected = [[(e, i, cls.digests[i]) for e in range(EPOCHS) for i in sampled(cls.tree, r, e)]
                        for r in range(RANKS)]

    @classmethod
    def tearDownClass(cls):
        cls.origin.__exit__(None, None, None)
        shutil.rmtree(cls.work)

    def run_job(self, with_peers, options=(), stop_peer=None):
        """Mounts four nodes, runs the four ranks; returns (per-rank samples, per-mount io
        stats, origin bytes)."""
        before = self.origin.served("/pack/")[1]
        peers = [nginx.NginxPeer(self.origin.url, slice_bytes=BLOCK) for _ in range(RANKS)]
        mounts, procs = [], []
        job = tempfile.mkdtemp(prefix="job-", dir=self.work)
        pause = os.path.join(job, "paused") if stop_peer is not None else ""
        try:
            for p in peers:
                p.start()
            peer_option = ("--peers", ",".join(p.url for p in peers), "--peer-secret-file",
                           peers[0].secret_file) if with_peers else ()
            for r in range(RANKS):
                env = {**os.environ, "XDG_CACHE_HOME": os.path.join(job, f"xdg{r}")}
                mounts.append(lib.Mount(self.origin.url + "/pack/", "--peer-block", str(BLOCK),
                                        *peer_option, *options, env=env))
            mnts = [m.__enter__() for m in mounts]
            port = free_port()
            for r in range(RANKS):
                env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                       "RANK": str(r), "WORLD_SIZE": str(RANKS)}
                procs.append(subprocess.Popen(
                    [sys.executable, __file__, "--rank", mnts[r], os.path.join(job, f"r{r}.json"),
                     pause], env=env))
            if stop_peer is not None:
                deadline = time.monotonic() + 120
                while not all(os.path.exists(f"{pause}.{r}") for r in range(RANKS)):
                    self.assertTrue(all(p.poll() is None for p in procs), "a rank ended early")
                    self.assertLess(time.monotonic(), deadline, "the ranks never paused")
                    time.sleep(0.05)
                peers[stop_peer].stop()
                open(pause + ".go", "w").close()
            for p in procs:
                self.assertEqual(p.wait(timeout=300), 0)
            io = [json.loads(os.getxattr(m, STATS))["io"] for m in mnts]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
            for m in mounts:
                if m.proc is not None:
                    m.__exit__(None, None, None)
            for p in peers:
                p.close()
        samples = []
        for r in range(RANKS):
            with open(os.path.join(job, f"r{r}.json")) as f:
                samples.append([tuple(s) for s in json.load(f)])
        return samples, io, self.origin.served("/pack/")[1] - before

    def assert_every_rank_read_the_source(self, samples):
        for r in range(RANKS):
            self.assertEqual(samples[r], self.expected[r], f"rank {r}")
        covered = {i for r in range(RANKS) for e, i, _ in samples[r] if e == 0}
        self.assertEqual(covered, set(range(len(self.digests))))

    def test_with_peers_the_origin_serves_the_dataset_about_once(self):
        samples, io, origin = self.run_job(True)
        self.assert_every_rank_read_the_source(samples)
        self.assertLessEqual(origin, 1.1 * self.data_bytes, (origin, self.data_bytes))
        self.assertTrue(all(node["bytes"] == 0 and node["peer_failures"] == 0 for node in io), io)

    def test_without_peers_each_node_fetches_the_dataset(self):
        samples, io, origin = self.run_job(False)
        self.assert_every_rank_read_the_source(samples)
        # Each node touches nearly every group in an epoch: about four times the dataset.
        self.assertGreaterEqual(origin, 3 * self.data_bytes, (origin, self.data_bytes))

    def test_a_peer_stopped_mid_epoch_leaves_the_epoch_complete_and_exact(self):
        # No prefetch: the groups after the pause are loaded on demand, through the peers.
        samples, io, _ = self.run_job(True, ("--no-prefetch",), stop_peer=1)
        self.assert_every_rank_read_the_source(samples)
        self.assertGreater(sum(node["peer_failures"] for node in io), 0, io)
        self.assertTrue(all(node["errors"] == 0 for node in io), io)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--rank":
        rank_main(*sys.argv[2:])
        sys.exit(0)
    lib.exit_unless_fuse_usable()
    unittest.main()
