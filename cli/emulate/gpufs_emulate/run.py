"""One emulated run: the measured epochs, the mount's counters around each, the advice,
and the pass over data in memory that tells prep stall from fetch stall."""
import os
import random
import time

from . import mount_stats
from .profiles import own_profile
from .progress import Bar
from .ranks import Job, Ranks, RankFailed, steps_per_epoch
from .report import epoch_json, prep_json
from .stall import JobEpoch, prep_rates


def _job(args, profile) -> Job:
    return Job(gpus=args.gpus, batch=args.batch, workers=args.workers,
               step_s=profile.step_seconds(args.batch) if profile else 0.0, epochs=args.epochs,
               transform=args.transform, image_size=args.image_size,
               sync=args.sync == "step", max_steps=args.steps, prep_steps=args.prep_steps,
               seed=args.seed, train_on=args.train_on, model=args.model)


def _available_memory() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def prep_steps_that_fit(folder, job: Job, memory: int) -> int:
    """The resident pass holds its sample's bytes in memory: at most a quarter of what is
    available (file sizes from stat, which reads nothing)."""
    if not job.prep_steps:
        return 0
    sizes = [os.stat(folder.samples[i][0]).st_size
             for i in random.Random(job.seed).sample(range(len(folder)), min(64, len(folder)))]
    per_step = job.batch * job.gpus * max(1.0, sum(sizes) / len(sizes))
    return max(1, min(job.prep_steps, int(memory / 4 // per_step)))


def _folder(args):
    from .data import image_folder
    try:
        folder = image_folder(args.path, args.transform, args.image_size)
    except (FileNotFoundError, RuntimeError) as e:  # no class folder, or no image in one
        raise ValueError(f"{args.path}: not an ImageFolder tree ({e})") from e
    if len(folder) == 0:
        raise ValueError(f"{args.path}: no images")
    return folder


def _pass(ranks: Ranks, bar: Bar, kind: str, label: str, total_steps: int) -> JobEpoch:
    bar.begin(label, total_steps)
    try:
        got = ranks.run(kind, lambda: bar.draw([ranks.rank_progress(r)
                                                for r in range(ranks.job.gpus)]))
    finally:
        bar.end()
    return JobEpoch([got[r] for r in sorted(got)])


def _measured_profile(args, epochs):
    """--train-on with no profile in the table: the accelerator's rate is what its real
    steps took in this run."""
    ranks = [r for e in epochs for r in e.ranks]
    busy = sum(r.busy for r in ranks)
    rate = sum(r.images for r in ranks) / busy if busy > 0 else 0.0
    p = own_profile(rate or 1.0, args.model, args.batch)
    p.accelerator = args.train_on
    p.source = dict(p.source, title=f"measured during this run (--train-on {args.train_on})")
    return p


def emulate(args, profile, here: str) -> dict:
    folder = _folder(args)
    job = _job(args, profile)
    job.prep_steps = prep_steps_that_fit(folder, job, _available_memory())
    demand = args.gpus * profile.images_per_second if profile else 0.0
    root = mount_stats.mount_root(args.path)
    bar = Bar(not args.no_progress, demand)
    epochs, counters, advice, prep = [], [], None, None
    ranks = Ranks(job, folder)
    try:
        steps = steps_per_epoch(job, len(folder)) * job.gpus
        for e in range(job.epochs):
            before = mount_stats.stall_totals(root) if root else None
            epochs.append(_pass(ranks, bar, "epoch", f"epoch {e + 1}/{job.epochs}", steps))
            after = mount_stats.stall_totals(root) if root else None
            counters.append((before, after))
        if root:  # before the resident pass reads anything
            advice = mount_stats.advise(mount_stats.gpufs_stat_program(here), root)
        if job.prep_steps:
            prep = _pass(ranks, bar, "prep", "prep pass (data in memory)",
                         job.prep_steps * job.gpus)
    except RankFailed as e:
        raise RuntimeError(str(e)) from e
    finally:
        ranks.close()
    if profile is None:
        profile = _measured_profile(args, epochs)
        demand = args.gpus * profile.images_per_second
    rates = prep_rates(prep) if prep else {}
    t0 = epochs[0].start
    run = {"path": args.path, "model": args.model, "accelerator": profile.accelerator,
           "gpus": args.gpus, "batch": args.batch, "workers": args.workers,
           "transform": args.transform, "image_size": args.image_size,
           "sync": args.sync, "trained_on": args.train_on,
           "profile": {"images_per_second": profile.images_per_second, "batch": profile.batch,
                       "precision": profile.precision, "step_s": job.step_s,
                       "source": profile.source, "file": profile.path},
           "demand_images_per_second": demand,
           "dataset": {"images": len(folder), "classes": len(folder.classes)},
           "prep_steps": job.prep_steps,
           "gpufs_mount": root, "epochs": [], "prep_pass": prep_json(prep, rates) if prep else None,
           "advise": advice, "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    for i, (job_epoch, (before, after)) in enumerate(zip(epochs, counters)):
        e = epoch_json(i + 1, job_epoch, rates, demand, t0)
        if before and after:
            e["gpufs"] = mount_stats.epoch_of(before, after, job_epoch.wall,
                                              e["fetch_stall_fraction"])
            mount_stats.bound_fetch_stall(e, len(job_epoch.ranks))
            for v in e["gpufs"]["from"].values():  # laid on the tiers as bounded
                waits = sum(t["wait_s"] for t in e["gpufs"]["from"].values())
                v["fetch_stall_fraction"] = (e["fetch_stall_fraction"] * v["wait_s"] / waits
                                             if waits > 0 else 0.0)
        run["epochs"].append(e)
    return run
