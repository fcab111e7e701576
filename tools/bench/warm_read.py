#!/usr/bin/python3
"""Warm and cold re-read rates through a gpufs mount vs the same reads on the source tree.

    sudo tools/bench/warm_read.py [--files 3000] [--max-side 720] [--work /var/tmp/gpufs-bench]
                                  [--variants defaults,streaming]

Makes a sample (real JPEGs, ~110 KB mean), groups it in the mytar layout, and times, in one
run and side by side:
  warm open    every file read whole with Python's open() in random order, all data in
               the page cache, by 1 and by 2 reader processes;
  warm os.open the same with bare system calls (no isatty ioctl);
  decode 2r    torchvision's default loader (PIL decode) in 2 processes, 300 files;
  cold 1r      one random-order pass after dropping the page cache (needs root);
  cold walk    os.walk + stat of every file after dropping dentries and inodes (needs root);
  warm walk    the same again, everything cached (walks/s).
for the source tree on ext4 and for gpufsd with its defaults and with each caching choice
switched off in turn, so the table shows what each choice buys (--streaming on: every read
served by gpufsd from its group cache, none by the page cache). Ratios are against the
tree in the same run.
"""
import multiprocessing as mp
import os
import random
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import ROOT, arg_parser, drop_caches, sample_mytar  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "tests", "mount"))
import gpufs_testlib as lib  # noqa: E402

VARIANTS = [
    ("gpufs defaults", []),
    ("  --cache-size 0 (no group cache)", ["--cache-size", "0"]),
    ("  entry/attr timeout 0", ["--entry-timeout", "0", "--attr-timeout", "0"]),
    ("  --open-calls", ["--open-calls"]),
    ("  --open-calls --no-keep-cache", ["--open-calls", "--no-keep-cache"]),
    ("  --no-readdirplus", ["--no-readdirplus"]),
    ("  --max-readahead 0 (128K)", ["--max-readahead", "0"]),
    # Past the page cache: every warm read is served by gpufsd from its group cache.
    ("  --streaming on", ["--streaming", "on"]),
]


def python_open(paths):
    """What a loader does: builtins.open (whose isatty check is one FUSE_IOCTL) + read."""
    for path in paths:
        with open(path, "rb") as f:
            f.read()
    return len(paths)


def os_open(paths):
    """The same bytes through bare system calls: open, fstat, read, close."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.read(fd, os.fstat(fd).st_size)
        finally:
            os.close(fd)
    return len(paths)


def pil_decode(paths):
    """torchvision's default loader: PIL open + convert to RGB."""
    from torchvision.datasets.folder import pil_loader
    for path in paths:
        pil_loader(path)
    return len(paths)


def files_per_second(reader, root, rel_paths, readers, seed):
    paths = [os.path.join(root, r) for r in rel_paths]
    random.Random(seed).shuffle(paths)
    chunks = [paths[i::readers] for i in range(readers)]
    with mp.get_context("fork").Pool(readers) as pool:
        pool.map(len, [[]] * readers)  # start the workers before the clock
        start = time.perf_counter()
        done = sum(pool.map(reader, chunks))
        return done / (time.perf_counter() - start)


def walk_seconds(root):
    start = time.perf_counter()
    for folder, _, files in os.walk(root):
        for name in files:
            os.stat(os.path.join(folder, name))
    return time.perf_counter() - start


def measure(root, rel_paths, repeats):
    """One row: walk (cold dentries), cold read, then warm reads in several ways."""
    row = {"walk_cold": 1 / walk_seconds(root) if drop_caches() else float("nan")}
    row["walk"] = 1 / walk_seconds(root)
    row["cold"] = (files_per_second(python_open, root, rel_paths, 1, 99) if drop_caches()
                   else float("nan"))
    python_open([os.path.join(root, r) for r in rel_paths])  # warm the page cache

    def best(reader, readers, paths):
        return max(files_per_second(reader, root, paths, readers, s) for s in range(repeats))
    row["open1"] = best(python_open, 1, rel_paths)
    row["open2"] = best(python_open, 2, rel_paths)
    row["sys1"] = best(os_open, 1, rel_paths)
    row["decode2"] = best(pil_decode, 2, rel_paths[:300])
    return row


COLUMNS = [("open1", "warm open 1r"), ("open2", "warm open 2r"), ("sys1", "warm os.open"),
           ("decode2", "decode 2r"), ("cold", "cold 1r"), ("walk_cold", "cold walk"),
           ("walk", "warm walk")]


def print_table(rows):
    """Baseline in files/s (walk: walks/s); every other row as a ratio to it."""
    print(f"{'':32}" + "".join(f"{title:>14}" for _, title in COLUMNS))
    base = rows[0][1]
    print(f"{rows[0][0]:32}" + "".join(f"{base[key]:>14.1f}" if key.startswith("walk") else
                                       f"{base[key]:>14.0f}" for key, _ in COLUMNS))
    for name, row in rows[1:]:
        print(f"{name:32}" + "".join(f"{row[key] / base[key]:>13.2f}x" for key, _ in COLUMNS))


def add_sample_args(parser):
    """The options of the sample and of the passes over it (hot_read.py's too)."""
    parser.add_argument("--files", type=int, default=3000)
    parser.add_argument("--classes", type=int, default=30)
    parser.add_argument("--max-side", type=int, default=720)
    parser.add_argument("--group-size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)


def sample_of(args, said=""):
    """The sample's (tree, mytar folder, grouped files), once its line is printed."""
    tree, src, rel, mean_kb = sample_mytar(args.work, args.files, args.classes, args.max_side,
                                           args.group_size)
    print(f"{len(rel)} files, mean {mean_kb:.0f} KB, group size {args.group_size}, "
          f"{os.cpu_count()} CPUs{said}\n")
    return tree, src, rel


def main():
    parser = arg_parser(__doc__)
    add_sample_args(parser)
    parser.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "gpufs-bench"))
    parser.add_argument("--variants", default="",
                        help="run only the gpufsd rows whose names hold one of these "
                             "comma-separated words (e.g. defaults,streaming); all by default")
    args = parser.parse_args()
    words = [w for w in args.variants.split(",") if w]
    variants = [v for v in VARIANTS if not words or any(w in v[0] for w in words)]

    tree, src, rel = sample_of(args)

    rows = [("ext4 tree (baseline)", measure(tree, rel, args.repeats))]
    for name, options in variants:
        with lib.Mount(src, *options) as mnt:
            rows.append((name, measure(mnt, rel, args.repeats)))

    print_table(rows)


if __name__ == "__main__":
    main()
