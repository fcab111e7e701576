#!/usr/bin/python3
"""What the kernel is told at mount, measured: readdirplus modes, streaming, max_background.

    sudo /usr/bin/python3 tools/bench/kernel_choices.py [--work /var/tmp] [--names 256000]

Three parts, each side by side in one run:
  readdirplus  a tree of N small files (tools/gen_scale_tree.py, packed): page cache dropped,
               mount, a plain os.walk (names only, as ImageFolder lists), then the first
               epoch's opens (open + read of every file, 4 threads, random order), for
               --readdirplus auto / always / never, against the ext4 tree.
  streaming    real JPEGs (a dataset four times --cache-size, on the local disk): two epochs
               of 4 readers with open().read(), --streaming on against off; files/s, and
               what the page cache holds of the dataset afterwards (fincore). Twice: with
               the machine's memory, and with the readers in a memory cgroup of half the
               dataset (a node whose memory cannot hold it: their page cache is charged
               to them).
  background   the dataset in pinned memory, page cache dropped, 8 readers: the kernel's
               default max_background (12) against the default (--threads).
"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (PYTHON, ROOT, arg_parser, drop_caches, files_of,  # noqa: E402
                      read_in_random_order, run, sample_tree, tree_bytes)
from benchmount import GPUFSD, gpufs_mounted, gpufs_stats  # noqa: E402


def mounted(src, *options):
    return gpufs_mounted(src, *options, prefix="gpufs-kc-")


def plain_walk(root):
    start = time.perf_counter()
    names = sum(len(d) + len(f) for _, d, f in os.walk(root))
    return time.perf_counter() - start, names


def first_opens(root, paths):
    seconds, _ = read_in_random_order(root, paths, threads=4)
    return seconds


def readdirplus_part(work, names):
    tree = os.path.join(work, f"kc-tree-{names}")
    pack = tree + "-pack"
    if not os.path.isdir(tree):
        run([PYTHON, os.path.join(ROOT, "tools", "gen_scale_tree.py"), tree, "--files",
             str(names), "--classes", str(max(1, names // 1281))])
    if not os.path.isdir(pack):
        run([GPUFSD, "pack", tree, pack])
    paths = files_of(tree)
    rows = []
    drop_caches()
    walk, count = plain_walk(tree)
    rows.append(("ext4 tree", walk, first_opens(tree, paths), count))
    for mode in ("auto", "always", "never"):
        drop_caches()
        with mounted(pack, "--readdirplus", mode) as mnt:
            walk, count = plain_walk(mnt)
            rows.append((f"gpufs --readdirplus {mode}", walk, first_opens(mnt, paths), count))
    print(f"\n{len(paths):,} files of {os.path.getsize(paths and os.path.join(tree, paths[0]))} B, "
          f"page cache dropped before each walk; opens: 4 threads, random order, right after")
    print(f"{'':30}{'walk s':>9}{'x ext4':>8}{'opens s':>9}{'x ext4':>8}{'walk+opens':>12}")
    base = rows[0]
    for name, walk, opens, count in rows:
        assert count == base[3], (name, count)
        print(f"{name:30}{walk:9.2f}{walk / base[1]:8.2f}{opens:9.2f}{opens / base[2]:8.2f}"
              f"{walk + opens:12.2f}")


def cached_bytes(mnt, paths):
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES",
                          *[os.path.join(mnt, p) for p in paths]],
                         capture_output=True, text=True).stdout
    return sum(int(x) for x in out.split())


READER = """
import os, random, sys, threading, time
mnt, threads, epochs = sys.argv[1], 4, 2
paths = sys.stdin.read().split()
for epoch in range(epochs):
    order = paths[:]
    random.Random(epoch).shuffle(order)
    def read(chunk):
        for rel in chunk:
            with open(os.path.join(mnt, rel), "rb") as f:
                f.read()
    pool = [threading.Thread(target=read, args=(order[i::threads],)) for i in range(threads)]
    start = time.perf_counter()
    for t in pool: t.start()
    for t in pool: t.join()
    print(len(paths) / (time.perf_counter() - start))
"""


class MemoryCgroup:
    """A cgroup v1 memory group limited to `limit` bytes, for the readers alone."""

    def __init__(self, limit):
        self.path = f"/sys/fs/cgroup/memory/gpufs-kc-{os.getpid()}"
        os.makedirs(self.path, exist_ok=True)
        with open(os.path.join(self.path, "memory.limit_in_bytes"), "w") as f:
            f.write(str(limit))

    def join(self):
        with open(os.path.join(self.path, "tasks"), "w") as f:
            f.write(str(os.getpid()))

    def close(self):
        os.rmdir(self.path)


def epochs_in(mnt, paths, cgroup):
    out = subprocess.run([PYTHON, "-c", READER, mnt], input="\n".join(paths), text=True,
                         capture_output=True, check=True,
                         preexec_fn=cgroup.join if cgroup else None).stdout
    return [float(x) for x in out.split()]


def streaming_part(work, files):
    tree = sample_tree(os.path.join(work, "gpufs-bench-src"), files, 40)
    pack = tree + "-pack"
    if not os.path.isdir(pack):
        run([GPUFSD, "pack", tree, pack])
    count, total = tree_bytes(tree)
    paths = files_of(tree)
    budget = total // 4
    print(f"\n{count:,} JPEGs, {total / 1e6:.0f} MB, --cache-size {budget // 2**20} MiB "
          f"(a quarter), 4 readers, page cache dropped before the first epoch")
    print(f"{'':44}{'epoch 1 files/s':>16}{'epoch 2 files/s':>16}{'page cache after':>18}")
    for limit in (None, total // 2):
        cgroup = MemoryCgroup(limit) if limit else None
        where = f"readers in {limit // 2**20} MiB" if limit else "readers unconstrained"
        try:
            for mode in ("off", "on"):
                drop_caches()
                with mounted(pack, "--cache-size", str(budget), "--streaming", mode) as mnt:
                    rates = epochs_in(mnt, paths, cgroup)
                    held = cached_bytes(mnt, paths)
                print(f"{where + ', --streaming ' + mode:44}{rates[0]:16,.0f}{rates[1]:16,.0f}"
                      f"{held / 1e6:15.0f} MB")
        finally:
            if cgroup:
                cgroup.close()


def background_part(work, files):
    tree = sample_tree(os.path.join(work, "gpufs-bench-src"), files, 40)
    pack = tree + "-pack"
    count, total = tree_bytes(tree)
    paths = files_of(tree)
    print(f"\n{count:,} JPEGs in pinned memory (--cache-size 2x), page cache dropped, "
          f"8 readers, best of 3 epochs")
    print(f"{'':36}{'files/s':>10}")
    for name, options in (("--max-background 12 (kernel's)", ["--max-background", "12"]),
                          ("default (= --threads)", [])):
        with mounted(pack, "--cache-size", str(2 * total), *options) as mnt:
            read_in_random_order(mnt, paths, threads=8)
            best = 0
            for _ in range(3):
                drop_caches()
                best = max(best, count / read_in_random_order(mnt, paths, threads=8)[0])
            k = gpufs_stats(mnt)["kernel"]
        print(f"{name:36}{best:10,.0f}   ({k['max_background']} background, "
              f"{k['threads']} threads)")


def main():
    parser = arg_parser(__doc__)
    parser.add_argument("--work", default="/var/tmp")
    parser.add_argument("--names", type=int, default=256_000)
    parser.add_argument("--files", type=int, default=2000, help="JPEGs for the other parts")
    parser.add_argument("--parts", default="readdirplus,streaming,background")
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs; {run([GPUFSD, '--version']).stdout.strip()}")
    parts = args.parts.split(",")
    if "readdirplus" in parts:
        readdirplus_part(args.work, args.names)
    if "streaming" in parts:
        streaming_part(args.work, args.files)
    if "background" in parts:
        background_part(args.work, args.files)


if __name__ == "__main__":
    main()
