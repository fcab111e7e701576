#!/usr/bin/python3
"""Epochs of a dataset four times the pinned budget, from an S3 store through an emulated
cloud link, with gpufs's disk tier: the cold epoch stages what memory cannot hold into the
tier, and later epochs read it back from local disk.

    sudo /usr/bin/python3 tools/bench/staging.py [--files 2000] [--epochs 3] [--threads 8]

Brings up the store of remote_store.py (one-node Ceph, radosgw over a memstore OSD) with
the generated dataset as a gpufs pack, behind an nginx FaultProxy that delays every
request (--delay-ms, 20) and limits each connection's rate (--rate-mb, 80 MB/s). Each
scenario is a fresh gpufsd mount with --cache-size a quarter of the pack (--budget-share)
and a fresh, empty --disk-cache folder on the local disk:

  tier ample  --disk-cache with no size bound: epoch 1 is cold (the store), later
              epochs come from the tier (and the pinned budget)
  tier half   --disk-cache-size half the pack: the tier keeps what it filled first and
              serves that share of every later epoch; the rest comes from the store
  memory      the reference: --cache-size above the pack, no tier, one cold epoch (what
              the link and this machine's CPUs give when everything fits in memory)
  baseline    tier ample with another gpufsd (--baseline-gpufsd), e.g. a build before
              staging

An epoch is every file read once, in a new random order each epoch, by --threads reader
threads (raw bytes, no decoding: what is measured is the mount, not the CPUs); the page
cache is dropped before each. Two bounds frame the rates: the link's (the pack fetched as
8 MiB ranged GETs by 4-32 threads over the proxy, best rate; remote_store.py's) and the
tier volume's (dd of a 1 GiB file with O_DIRECT, 1 MiB reads, on the filesystem the tier
folder is on). The table has, per epoch: MB/s of files read, its fraction of the bound
that applies (the link for epoch 1, the volume later), the bytes from the store and from
the tier as fractions of the pack, and the stager's counters. Writes results.json to
--out. Every server and mount it starts is stopped on the way out.
"""
import contextlib
import mmap
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (add_options, arg_parser, begin_run, cloud_link,  # noqa: E402
                      drop_caches, files_of, need_root, read_shuffled, save_results, versions)
from benchmount import GPUFSD, gpufs_fuse_mount, gpufs_stats  # noqa: E402
from remote_store import (BUCKET, check_tools, measure_bound, s3_env,  # noqa: E402
                          stored_dataset)


def volume_bound(folder, read_bytes, threads, size_mb=1024):
    """Bytes/s of reading a `size_mb` file on `folder`'s filesystem with O_DIRECT: 1 MiB at
    a time (dd), and as the tier reads members alone: `read_bytes` (16 KiB-aligned) at
    random 16 KiB-aligned offsets by `threads` threads at once. Returns (dd, pattern)."""
    path = os.path.join(folder, "volume-bound.bin")
    subprocess.run(["dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={size_mb}",
                    "oflag=direct"], check=True, capture_output=True)
    out = subprocess.run(["dd", f"if={path}", "of=/dev/null", "bs=1M", "iflag=direct"],
                         check=True, capture_output=True, text=True).stderr
    m = re.search(r"(\d+) bytes .* copied, ([\d.]+) s", out)
    sequential = int(m.group(1)) / float(m.group(2))
    blocks = (size_mb << 20) // (16 << 10) - read_bytes // (16 << 10)
    per_thread = (size_mb << 20) // read_bytes // threads

    def reader(seed):
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        buf = mmap.mmap(-1, read_bytes)  # page-aligned, as O_DIRECT wants
        rng = random.Random(seed)
        try:
            for _ in range(per_thread):
                os.preadv(fd, [buf], rng.randrange(blocks) * (16 << 10))
        finally:
            os.close(fd)

    pool = [threading.Thread(target=reader, args=(i,)) for i in range(threads)]
    start = time.perf_counter()
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    pattern = per_thread * threads * read_bytes / (time.perf_counter() - start)
    os.unlink(path)
    return sequential, pattern


def read_epoch(mnt, paths, threads, seed, progress=None):
    """(seconds, bytes) of read_shuffled; `progress[0]` counts the files read so far."""
    progress = progress if progress is not None else [0]

    def count(_):
        progress[0] += 1

    return read_shuffled(mnt, paths, threads, seed, per_file=count)


def counters(mnt):
    s = gpufs_stats(mnt)
    tier = s.get("tier", {})
    staging = tier.get("staging", {})
    return {"store": s["io"]["bytes"], "tier_read": tier.get("read_bytes", 0),
            "tier_hits": tier.get("hits", 0), "slice_hits": tier.get("slice_hits", 0),
            "written": tier.get("write_bytes", 0), "skipped": tier.get("write_skipped", 0),
            "evictions": tier.get("evictions", 0), "staged": staging.get("staged", 0),
            "served_staging": staging.get("served", 0),
            "demand_reads": staging.get("demand_reads", 0),
            "full_skips": staging.get("full_skips", 0), "member_reads": s["member_reads"],
            "hits": s["hits"], "misses": s["misses"]}


def store_done(samples, first, last, files):
    """When the store's last byte of the epoch arrived (seconds into it) and the fraction
    of the files read by then, from the sampler's (seconds, store bytes, files) points."""
    if last == first:
        return {"store_done_s": 0.0, "consumed_while_reading": 0.0}
    for t, store, read in samples:
        if store >= last:
            return {"store_done_s": t, "consumed_while_reading": read / files}
    return {"store_done_s": samples[-1][0] if samples else 0.0, "consumed_while_reading": 1.0}


def run_scenario(name, endpoint, store, work, budget, tier_bytes, epochs, threads, pack_bytes,
                 gpufsd=GPUFSD):
    """Epochs through a fresh mount: `tier_bytes` None is no tier, 0 an unbounded one."""
    tier_dir = tempfile.mkdtemp(prefix=f"tier-{name}-", dir=work)
    mnt = tempfile.mkdtemp(prefix=f"mnt-{name}-", dir=work)
    argv = [gpufsd, "mount", "-f", f"s3://{BUCKET}/pack/", mnt, "--endpoint", endpoint,
            "--cache-size", str(budget)]
    argv += ["--no-disk-cache"] if tier_bytes is None else ["--disk-cache", tier_dir]
    if tier_bytes:
        argv += ["--disk-cache-size", str(tier_bytes)]
    rows = []
    with gpufs_fuse_mount(argv, mnt, gpufsd, env=s3_env(store, endpoint)):
        paths = files_of(mnt)
        for epoch in range(1, epochs + 1):
            drop_caches()
            before = counters(mnt)
            progress, samples, done = [0], [], threading.Event()

            def sample():  # (seconds, store bytes, files read), every 20 ms
                start = time.perf_counter()
                while not done.wait(0.02):
                    samples.append((time.perf_counter() - start, counters(mnt)["store"],
                                    progress[0]))

            sampler = threading.Thread(target=sample)
            sampler.start()
            try:
                seconds, got = read_epoch(mnt, paths, threads, seed=epoch, progress=progress)
            finally:
                done.set()
                sampler.join()
            time.sleep(0.5)  # writes of the last staged groups settle into the counters
            after = counters(mnt)
            delta = {k: after[k] - before[k] for k in after}
            row = {"scenario": name, "epoch": epoch, "seconds": seconds, "bytes": got,
                   "mb_s": got / seconds / 1e6, "budget": budget, "tier_bytes": tier_bytes,
                   "store_share": delta["store"] / pack_bytes,
                   "hit_ratio": max(0.0, 1 - delta["store"] / pack_bytes),
                   **store_done(samples, before["store"], after["store"], len(paths)),
                   "tier_share": min(1.0, delta["tier_read"] / pack_bytes), **delta}
            rows.append(row)
            print(f"  {name:10} epoch {epoch}: {row['mb_s']:7.1f} MB/s in {seconds:.2f} s, store "
                  f"{row['store_share']:.2f} done at {row['store_done_s']:.2f} s with "
                  f"{row['consumed_while_reading']:.2f} read; tier {row['tier_share']:.2f}  "
                  f"staged {delta['staged']}  full_skips {delta['full_skips']}", flush=True)
    return rows


def member_share(result):
    """The share of a pattern read that is the member's own bytes."""
    return result["pack_bytes"] / result["files"] / result["pattern_read_bytes"]


def print_table(result):
    link, volume = result["link_bound"], result["volume_bound"]
    print(f"\nlink bound {link / 1e6:.0f} MB/s (8 MiB ranged GETs over the proxy, best of "
          f"{result['bound_threads']}); tier volume bound {volume / 1e6:.0f} MB/s (dd, "
          f"O_DIRECT, 1 MiB reads); {result['pattern_bound'] / 1e6:.0f} MB/s of "
          f"{result['pattern_read_bytes'] >> 10} KiB O_DIRECT reads at random offsets by "
          f"{result['threads']} threads, {result['pattern_bound'] * member_share(result) / 1e6:.0f}"
          " MB/s of the files in them")
    print(f"pack {result['pack_bytes'] / 1e6:.0f} MB, {result['files']} files; page cache "
          f"dropped before every epoch; {result['threads']} reader threads; fresh tier "
          "folder per scenario\n")
    print(f"reading the local tree from the page cache (warm, same readers): "
          f"{result['warm_tree'] / 1e6:.0f} MB/s: what the CPUs allow any mount\n")
    pattern = result["pattern_bound"] * member_share(result)
    head = (f"{'scenario':10} {'budget':>8} {'tier':>8} {'ep':>3} {'MB/s':>7} {'bound':>6} "
            f"{'of bnd':>6} {'of pat':>6} {'of cpu':>6} {'store':>6} {'hit':>5} {'tier':>6} {'staged':>6} "
            f"{'skip':>5}")
    print(head)
    print("-" * len(head))
    for r in result["rows"]:
        from_store = r["epoch"] == 1 or r["tier_bytes"] is None
        bound = link if from_store else volume
        tier = ("off" if r["tier_bytes"] is None else
                f"{r['tier_bytes'] / 1e6:.0f}MB" if r["tier_bytes"] else "ample")
        print(f"{r['scenario']:10} {r['budget'] / 1e6:6.0f}MB {tier:>8} {r['epoch']:3} "
              f"{r['mb_s']:7.1f} {'link' if from_store else 'disk':>6} "
              f"{r['mb_s'] * 1e6 / bound:6.2f} "
              f"{'' if from_store else format(r['mb_s'] * 1e6 / pattern, '6.2f'):>6} "
              f"{r['mb_s'] * 1e6 / result['warm_tree']:6.2f} "
              f"{r['store_share']:6.2f} {r['hit_ratio']:5.2f} {r['tier_share']:6.2f} "
              f"{r['staged']:6} {r['full_skips']:5}")
    print("\nstore: bytes from the store as a fraction of the pack; hit: 1 - store; tier: bytes "
          "read from the tier as slices, a fraction of the pack. of bnd: MB/s over the link's "
          "bound (epochs from the store) or the volume's dd rate (later epochs); of pat: over the "
          "files' bytes in the tier's own read pattern at the volume's rate; of cpu: over the "
          "warm local tree's rate.")


def main():
    parser = arg_parser(__doc__)
    add_options(parser, files=2000, classes=40)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=8, help="reader threads")
    parser.add_argument("--budget-share", type=float, default=0.25,
                        help="--cache-size as a fraction of the pack")
    parser.add_argument("--scenarios", default="memory,ample,half",
                        help="memory (all in budget, no tier: one cold epoch), ample, half, "
                             "baseline and baseline-half (ample and half with "
                             "--baseline-gpufsd)")
    parser.add_argument("--baseline-gpufsd", default="/work/main/build/cli/gpufsd",
                        help="the gpufsd of the baseline scenario")
    add_options(parser, delay_ms=20, rate_mb=80)
    parser.add_argument("--bound-threads", default="4,8,16,32")
    add_options(parser, cache="/var/tmp/gpufs-bench-src", out="/var/tmp/gpufs-staging-results")
    args = parser.parse_args()
    need_root("staging", "FUSE mounts, drop_caches")
    check_tools(["gpufs"])
    tree, files, data_bytes = begin_run(args.cache, args.out, args.files, args.classes)
    result = {"files": files, "threads": args.threads, "rows": [],
              "bound_threads": args.bound_threads,
              "version": versions("gpufs")["gpufs"]}
    with contextlib.ExitStack() as stack:
        store, work = stored_dataset(stack, tree, data_bytes, "staging")
        blobs = [(k, s) for k, s, _ in store.list(BUCKET, "pack/") if "/blob-" in k]
        pack_bytes = sum(s for _, s in blobs)
        result["pack_bytes"] = pack_bytes
        proxy = cloud_link(stack, store.endpoint, args)
        bound = measure_bound(store, proxy.url, blobs,
                              [int(n) for n in args.bound_threads.split(",")])
        result["link_bound"] = bound["bytes_per_s"]
        result["link_bound_by_threads"] = bound["by_threads"]
        # A member alone reads the 16 KiB blocks that hold it: on average its size rounded
        # up to 16 KiB, and one block more.
        member = data_bytes / files
        read_bytes = int(-(-member // (16 << 10)) + 1) * (16 << 10)
        result["volume_bound"], result["pattern_bound"] = volume_bound(work, read_bytes,
                                                                       args.threads)
        result["pattern_read_bytes"] = read_bytes
        print(f"link {bound['bytes_per_s'] / 1e6:.0f} MB/s, volume "
              f"{result['volume_bound'] / 1e6:.0f} MB/s (dd), "
              f"{result['pattern_bound'] / 1e6:.0f} MB/s ({read_bytes >> 10} KiB reads at "
              f"random, {args.threads} threads), pack {pack_bytes / 1e6:.0f} MB", flush=True)
        paths = files_of(tree)
        read_epoch(tree, paths, args.threads, seed=0)
        seconds, got = read_epoch(tree, paths, args.threads, seed=1)
        result["warm_tree"] = got / seconds
        budget = int(pack_bytes * args.budget_share)
        for name in args.scenarios.split(","):
            gpufsd, scenario_budget, tier_bytes, epochs = GPUFSD, budget, 0, args.epochs
            if name == "half":
                tier_bytes = int(pack_bytes / 2)
            elif name == "memory":  # the reference: it all fits in memory, no tier
                scenario_budget, tier_bytes, epochs = int(pack_bytes * 1.2), None, 1
            elif name == "baseline":  # another build, e.g. before staging
                gpufsd = args.baseline_gpufsd
            elif name == "baseline-half":
                gpufsd, tier_bytes = args.baseline_gpufsd, int(pack_bytes / 2)
            result["rows"] += run_scenario(name, proxy.url, store, work, scenario_budget,
                                           tier_bytes, epochs, args.threads, pack_bytes,
                                           gpufsd=gpufsd)
    print_table(result)
    save_results(args.out, result)


if __name__ == "__main__":
    main()
