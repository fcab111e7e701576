#!/usr/bin/python3
"""Memory a mount takes before and while it is read: the pinned arena taken as the cache
fills, against one faulted in whole at mount (an older gpufsd, --base), in one run.

    sudo tools/bench/arena_fill.py --base /path/to/older/gpufsd [--mib 2048] [--rounds 3]

A pack of --mib MiB of ~110 KB files (random bytes: the arena does not care what they
hold) in /dev/shm, so the source costs no disk time and the cache's own work shows. Each
gpufsd mounts it in the foreground with --cache-size 4GiB --no-disk-cache; the table has
the daemon's resident memory 2 s after the mount and after one cold epoch (the mount's
page cache dropped before it; every file read once in random order by 4 threads), the
epoch's files/s and the daemon's CPU seconds in it. Rows alternate between the binaries,
--rounds times; the median of each is shown, with the ratio this build / base.
"""
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402
from benchmount import GPUFSD, FuseMount  # noqa: E402


def make_pack(gpufsd, work, mib):
    tree = os.path.join(work, "tree")
    files = mib * 1024 // 110
    for i in range(files):
        folder = os.path.join(tree, f"c{i % 100:03d}")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"{i:07d}.JPEG"), "wb") as f:
            f.write(os.urandom(110 * 1024))
    pack = os.path.join(work, "pack")
    benchlib.sh(gpufsd, "pack", tree, pack)
    return pack, benchlib.files_of(tree)


def rss_mib(pid):
    return benchlib.memory_kib(pid).get("VmRSS", 0) / 1024


def one(name, gpufsd, pack, paths, work):
    mnt = tempfile.mkdtemp(prefix="mnt-", dir=work)
    argv = [gpufsd, "mount", "-f", "--cache-size", "4GiB", "--no-disk-cache", pack, mnt]
    with FuseMount(name, argv, mnt) as m:
        time.sleep(2)
        at_mount = rss_mib(m.pid)
        benchlib.drop_caches()
        cpu = benchlib.cpu_seconds(m.pid)
        seconds, _ = benchlib.read_in_random_order(mnt, paths, threads=4)
        row = {"rss_mount": at_mount, "rss_epoch": rss_mib(m.pid),
               "files_s": len(paths) / seconds, "cpu": benchlib.cpu_seconds(m.pid) - cpu}
    os.rmdir(mnt)
    return row


def main():
    parser = benchlib.arg_parser(__doc__)
    parser.add_argument("--base", required=True, help="an older gpufsd to compare with")
    parser.add_argument("--gpufsd", default=GPUFSD)
    parser.add_argument("--mib", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="gpufs-arena-", dir="/dev/shm")
    try:
        pack, paths = make_pack(args.gpufsd, work, args.mib)
        rows = {"this build": [], "base": []}
        for _ in range(args.rounds):
            for name, binary in (("this build", args.gpufsd), ("base", args.base)):
                rows[name].append(one(name, binary, pack, paths, work))
    finally:
        benchlib.sh("rm", "-rf", work)
    keys = ("rss_mount", "rss_epoch", "files_s", "cpu")
    median = {n: {k: statistics.median(r[k] for r in rs) for k in keys} for n, rs in rows.items()}
    print(f"{len(paths)} files, {args.mib} MiB pack in /dev/shm, --cache-size 4GiB, "
          f"median of {args.rounds} rounds")
    print("| gpufsd | RSS 2 s after mount (MiB) | RSS after epoch (MiB) | cold epoch files/s "
          "| daemon CPU s in epoch |")
    print("|---|---:|---:|---:|---:|")
    for name in rows:
        m = median[name]
        print(f"| {name} | {m['rss_mount']:.0f} | {m['rss_epoch']:.0f} | {m['files_s']:,.0f} "
              f"| {m['cpu']:.2f} |")
    ratio = {k: median["this build"][k] / max(median["base"][k], 1e-9) for k in keys}
    print(f"| this build / base | {ratio['rss_mount']:.2f}x | {ratio['rss_epoch']:.2f}x "
          f"| {ratio['files_s']:.2f}x | {ratio['cpu']:.2f}x |")


if __name__ == "__main__":
    main()
