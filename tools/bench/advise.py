#!/usr/bin/python3
"""Does gpufs-stat --advise predict what another budget does? The advice against measured
epochs, on a throttled local volume and on an S3 store behind an emulated cloud link.

    sudo /usr/bin/python3 tools/bench/advise.py [--setups local,store] [--files 2000]

Two setups, each with the same generated dataset of real JPEGs packed in 4 MiB groups:

  local  the pack on an ext4 volume throttled by cgroup v1 blkio (benchlib.SlowVolume,
         --iops 150, --mbps 150: an emulated cloud HDD); gpufsd runs inside the throttle
  store  the pack in a one-node Ceph store (radosgw over a memstore OSD) reached through an
         nginx FaultProxy that adds --delay-ms (20) to every request and limits each
         connection to --rate-mb (80) MB/s

For each: a fresh gpufsd mount with --cache-size a quarter of the pack (--small-share), no
disk tier and --streaming on (every read reaches gpufsd), runs 2 epochs: every file read
whole once per epoch, in a new random order, by --threads reader threads that hash each
file (a small CPU cost per file); the page cache is dropped before each epoch. One file of
a third epoch is read too (an epoch ends with its last file or, where the page cache
answered some, when one comes again), and `gpufs-stat --advise --json` gives the model's
advice from the second. Then the advice's budget and others that bracket it (0.5, 0.875 and 1.05 of
the pack, --shares) are each mounted fresh and run the same way, and the second
epoch's measured hit ratio, stalled seconds and wall seconds (cache.stall.last of the
stats) are set against the prediction the small-budget run made for that budget.

Prints a table per setup and whether the goals hold (hit ratio within 0.05, storage time
within 15%, or 0.01 s where the stall is near 0), each run's bytes and waits by kind, and
writes results.json (and with --plot, the small-budget run's advice drawn by gpufs-stat)
to --out.
"""
import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (SlowVolume, add_options, arg_parser, begin_run,  # noqa: E402
                      blob_bytes, cloud_link, drop_caches, files_of, need_root, read_shuffled,
                      save_results, sh, versions)
from benchmount import GPUFS_STAT, GPUFSD, gpufs_fuse_mount, gpufs_stats  # noqa: E402
from remote_store import BUCKET, check_tools, s3_env  # noqa: E402
from servers import ceph_s3  # noqa: E402
KINDS = ("disk_tier", "source_group", "source_member")
HIT_GOAL, STALL_GOAL = 0.05, 0.15
# Stalls this short are met by any prediction as close: the clock and FUSE's own noise.
STALL_FLOOR_S = 0.01


# --- one mount, its epochs ---------------------------------------------------------------

def read_epoch(mnt, paths, threads, seed, rounds=1):
    """Seconds to read every file once in the order `seed` shuffles, dealt out to
    `threads` readers that each hash every file they read `rounds` times (the loader's own
    work: hashlib lets go of the GIL, so the readers' work runs on every CPU, as a
    loader's worker processes' does)."""
    def work(data):
        for _ in range(rounds):
            hashlib.sha256(data).digest()

    return read_shuffled(mnt, paths, threads, seed, per_file=work)[0]


def ended_epochs(mnt, paths, threads, epochs, rounds):
    """Runs `epochs` epochs (page cache dropped before each), then reads one file of the
    next, so that the last has surely ended; returns (the stats' last epoch, the loader's
    seconds)."""
    seconds = []
    for epoch in range(1, epochs + 1):
        drop_caches()
        seconds.append(read_epoch(mnt, paths, threads, seed=epoch, rounds=rounds))
    with open(os.path.join(mnt, paths[0]), "rb") as f:  # begins the next epoch
        f.read()
    last = gpufs_stats(mnt)["stall"]["last"]  # the cache's stats are the xattr's top
    if not last or last["epoch"] != epochs:
        raise RuntimeError(f"epoch {epochs} did not end: the stats' last epoch is {last}")
    return last, seconds


def advise_json(mnt, plot=None):
    argv = [GPUFS_STAT, "--advise", "--json", mnt] + (["--plot", plot] if plot else [])
    return json.loads(subprocess.run(argv, check=True, capture_output=True, text=True).stdout)


class Setup:
    """How a setup mounts its pack (`source`, of `pack_bytes` in blobs): `mount(budget,
    policy)` gives a FuseMount; `wrap(argv)` puts the daemon where it must run (the
    throttled cgroup)."""

    def __init__(self, name, source, pack_bytes, extra=(), env=None, wrap=None):
        self.name, self.source, self.extra = name, source, list(extra)
        self.pack_bytes = pack_bytes
        self.env, self.wrap = env, wrap or (lambda argv: argv)
        self.work = tempfile.mkdtemp(prefix=f"gpufs-advise-{name}-", dir="/var/tmp")

    def mount(self, budget, policy):
        mnt = tempfile.mkdtemp(prefix="mnt-", dir=self.work)
        argv = [GPUFSD, "mount", "-f", self.source, mnt, "--cache-size", str(budget),
                "--policy", policy, "--streaming", "on", "--no-disk-cache", *self.extra]
        return gpufs_fuse_mount(self.wrap(argv), mnt, env=self.env)

    def close(self):
        shutil.rmtree(self.work, ignore_errors=True)


def run_budget(setup, budget, policy, args, plot=None):
    """A fresh mount at `budget`: its epochs, the measured last epoch and the advice."""
    drop_caches()
    with setup.mount(budget, policy) as m:
        paths = files_of(m.mnt)
        last, seconds = ended_epochs(m.mnt, paths, args.threads, args.epochs, args.hash_rounds)
        advice = advise_json(m.mnt, plot)
        arena = advice["settings"]["cache_bytes"]
    return {"budget": budget, "arena_bytes": arena, "policy": policy, "measured": last,
            "loader_s": seconds, "advice": advice}


# --- the comparison ----------------------------------------------------------------------

def point_for(advice, policy, budget):
    """The model's point for `policy` at `budget` with no tier (None when not in the grid)."""
    for p in advice.get("points", []):
        if p["policy"] == policy and p["cache_bytes"] == budget and p["tier_bytes"] == 0:
            return p
    return None


def budgets_to_try(small, shares):
    """(budget, policy, label): the advice's, and the grid's points at `shares` of the pack
    (consume-once, or the advice's policy), without repeats."""
    advice = small["advice"]
    dataset = advice["settings"]["dataset_bytes"]
    chosen = advice.get("advice")
    policy = chosen["policy"] if chosen else "consume-once"
    runs = [(chosen["cache_bytes"], policy, "advice")] if chosen else []
    for share in shares:
        budget = int(dataset * share)
        if point_for(advice, policy, budget) is None:
            print(f"  no model point at {share} of the pack; skipped", flush=True)
            continue
        if all(b != budget for b, _, _ in runs):
            runs.append((budget, policy, f"{share:g} x pack"))
    return sorted(runs)


def compare(small, run, label):
    """One table row: the small-budget run's prediction for `run`'s budget and the
    measured second epoch."""
    if run is small:
        predicted = small["advice"]["model"]
    else:
        predicted = point_for(small["advice"], run["policy"], run["budget"])
    m = run["measured"]
    row = {"label": label, "budget": run["budget"], "policy": run["policy"],
           "pred_hit": predicted["hit_ratio"], "hit": m["hit_ratio"],
           "pred_stall_s": predicted["stall_s"], "stall_s": m["stalled_s"],
           "pred_epoch_s": predicted["epoch_s"], "epoch_s": m["wall_s"],
           "bound": predicted.get("bound", False)}
    row["hit_diff"] = row["pred_hit"] - row["hit"]
    row["stall_diff"] = ((row["pred_stall_s"] - row["stall_s"]) / row["stall_s"]
                         if row["stall_s"] > 0 else None)
    row["hit_ok"] = abs(row["hit_diff"]) <= HIT_GOAL
    row["stall_ok"] = abs(row["pred_stall_s"] - row["stall_s"]) <= max(
        STALL_GOAL * row["stall_s"], STALL_FLOOR_S)
    return row


def kinds_line(measured):
    """Bytes fetched, summed waits and reads by kind of fetch, and the epoch's stall."""
    words = []
    for kind in KINDS:
        f = measured["from"][kind]
        if f["reads"]:
            words.append(f"{kind} {f['fetched_bytes'] / 1e6:.1f} MB fetched, {f['reads']} reads "
                         f"waited {f['wait_s']:.1f} s")
    return "; ".join(words) or "nothing fetched"


def print_setup(result):
    print(f"\n{result['name']}: {result['about']}")
    print(f"pack {result['dataset_bytes'] / 1e6:.0f} MB, {result['files']} files; fresh mount "
          f"per budget, --streaming on, no disk tier, page cache dropped before each epoch; "
          f"{result['threads']} reader threads hashing each file {result['hash_rounds']}x; epoch 2 measured, predicted from the "
          f"{result['small_budget'] / 1e6:.0f} MB run's epoch 2")
    print(f"advice: {result['advice_text']}\n")
    head = (f"{'budget':>10} {'':8} {'hit pred':>8} {'meas':>6} {'diff':>6} "
            f"{'stall s pred':>12} {'meas':>6} {'diff %':>7} {'epoch s pred':>12} {'meas':>6}  "
            "goals")
    print(head)
    print("-" * len(head))
    for r in result["rows"]:
        diff = "" if r["stall_diff"] is None else f"{100 * r['stall_diff']:+.0f}"
        goals = ("hit ok" if r["hit_ok"] else "HIT MISSED") + ", " + (
            "stall ok" if r["stall_ok"] else "STALL MISSED")
        print(f"{r['budget'] / 1e6:8.0f}MB {r['label']:8} {r['pred_hit']:8.2f} {r['hit']:6.2f} "
              f"{r['hit_diff']:+6.2f} {r['pred_stall_s']:12.2f} {r['stall_s']:6.2f} {diff:>7} "
              f"{r['pred_epoch_s']:12.2f} {r['epoch_s']:6.2f}  {goals}"
              f"{' (bound)' if r['bound'] else ''}")
    print("\nwhere epoch 2 was served from, per run:")
    for run in result["runs"]:
        m = run["measured"]
        print(f"  {run['budget'] / 1e6:6.0f} MB: {kinds_line(m)}; stalled {m['stalled_s']:.2f} s "
              f"of {m['wall_s']:.2f} s")


def run_setup(setup, about, args, dataset_bytes, files):
    print(f"\n{setup.name}: {about}", flush=True)
    small_budget = int(dataset_bytes * args.small_share)
    plot = os.path.join(args.out, f"advise-{setup.name}.png") if args.plot else None
    small = run_budget(setup, small_budget, "consume-once", args, plot)
    print(f"  {small_budget / 1e6:.0f} MB: {kinds_line(small['measured'])}\n  advice: "
          f"{small['advice']['text']}", flush=True)
    runs, rows = [small], [compare(small, small, "small")]
    for budget, policy, label in budgets_to_try(small, args.shares):
        run = run_budget(setup, budget, policy, args)
        runs.append(run)
        rows.append(compare(small, run, label))
        print(f"  {budget / 1e6:.0f} MB ({label}): {kinds_line(run['measured'])}", flush=True)
    return {"name": setup.name, "about": about, "dataset_bytes": dataset_bytes, "files": files,
            "threads": args.threads, "hash_rounds": args.hash_rounds, "small_budget": small_budget,
            "advice_text": small["advice"]["text"], "rows": rows, "runs": runs}


# --- the setups --------------------------------------------------------------------------

def pack_tree(tree, pack):
    """Packs `tree` in 4 MiB groups (enough of them that a quarter of a 250 MB pack is met
    closely); the blobs' bytes."""
    sh(GPUFSD, "pack", tree, pack, "--group-bytes", "4MiB")
    return blob_bytes(pack)[1]


def local_setup(stack, tree, args):
    volume = SlowVolume(2 * args.tree_bytes // 1_000_000 + 300, args.iops, args.mbps)
    stack.callback(volume.close)
    pack = os.path.join(volume.mnt, "pack")
    pack_bytes = pack_tree(tree, pack)
    # The daemon enters the throttled cgroup before it runs, with every thread it starts.
    setup = Setup("local", pack, pack_bytes, wrap=volume.wrap)
    stack.callback(setup.close)
    return setup, (f"native pack on an ext4 volume throttled to {args.iops} IOPS and "
                   f"{args.mbps} MB/s (cgroup v1 blkio, gpufsd inside it)")


def store_setup(stack, tree, args):
    check_tools(["gpufs"])
    pack = os.path.join(tempfile.mkdtemp(prefix="gpufs-advise-pack-", dir="/var/tmp"), "pack")
    stack.callback(shutil.rmtree, os.path.dirname(pack), ignore_errors=True)
    pack_bytes = pack_tree(tree, pack)
    store = stack.enter_context(ceph_s3.CephS3(memstore_bytes=2 * pack_bytes + (1 << 30)))
    store.make_bucket(BUCKET)
    store.upload_tree(pack, BUCKET, "pack")
    proxy = cloud_link(stack, store.endpoint, args)
    setup = Setup("store", f"s3://{BUCKET}/pack/", pack_bytes, ["--endpoint", proxy.url],
                  env=s3_env(store, proxy.url))
    stack.callback(setup.close)
    return setup, (f"pack in radosgw (memstore) through an nginx proxy: +{args.delay_ms} ms "
                   f"per request, {args.rate_mb:.0f} MB/s per connection")


def main():
    parser = arg_parser(__doc__)
    add_options(parser, setups="local,store", files=2000, classes=40)
    parser.add_argument("--threads", type=int, default=8, help="reader threads")
    parser.add_argument("--epochs", type=int, default=2, help="the last is measured")
    parser.add_argument("--hash-rounds", type=int, default=1,
                        help="SHA-256 passes over each file read: the loader's own work")
    parser.add_argument("--small-share", type=float, default=0.25,
                        help="the first run's --cache-size, a fraction of the pack")
    parser.add_argument("--shares", default="0.5,0.875,1.05",
                        help="budgets run besides the advice's, fractions of the pack "
                             "(points of the model's grid)")
    add_options(parser, iops=150, mbps=150, delay_ms=20, rate_mb=80)
    parser.add_argument("--plot", action="store_true",
                        help="draw each small-budget run's advice (gpufs-stat --plot) in --out")
    add_options(parser, cache="/var/tmp/gpufs-bench-src", out="/var/tmp/gpufs-advise-results")
    args = parser.parse_args()
    args.shares = [float(s) for s in args.shares.split(",")]
    need_root("advise", "loop device, cgroups, FUSE mounts, drop_caches")
    tree, files, args.tree_bytes = begin_run(args.cache, args.out, args.files, args.classes)
    result = {"version": versions("gpufs")["gpufs"], "setups": []}
    for name in args.setups.split(","):
        with contextlib.ExitStack() as stack:
            setup, about = {"local": local_setup, "store": store_setup}[name](stack, tree, args)
            result["setups"].append(run_setup(setup, about, args, setup.pack_bytes, files))
    for r in result["setups"]:
        print_setup(r)
    save_results(args.out, result)


if __name__ == "__main__":
    main()
