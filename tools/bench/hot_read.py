#!/usr/bin/python3
"""Reads served by the daemon from its pinned memory: the group cache's hot path.

    sudo tools/bench/hot_read.py [--files 3000] [--base OTHER_GPUFSD]... [--drop 1]

The sample of warm_read.py (real JPEGs, ~110 KB mean, mytar groups). Each gpufs row mounts
with the defaults, reads every file once (so every group is in pinned memory), and then,
before every timed pass, drops the kernel's caches (--drop: 1 the page cache, 3 dentries
and inodes too), so every read reaches the daemon and is a hit there. Passes read every
file once in random order with Python's open().read() and with os.open/os.read, by 1, 2
and 4 reader processes, and with open(buffering=1 MiB).read() (no isatty check) by one; the best of --repeats passes is kept. The ext4 row reads the
source tree with its page cache warm: the rate to match. --base adds a row for another
gpufsd binary (an older build) in the same run, in the same state. The last column is the time of one
ioctl(TCGETS) on an open file, the isatty() check Python's open() makes: the kernel
forwards it to the FUSE server every time.
"""
import fcntl
import os
import sys
import tempfile
import termios
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import arg_parser, drop_caches  # noqa: E402
from warm_read import (add_sample_args, files_per_second, lib, os_open,  # noqa: E402
                       python_open, sample_of)


def buffered_open(paths):
    """open() with `buffering` given, which skips its isatty() check: no IOCTL per file."""
    for path in paths:
        with open(path, "rb", buffering=1 << 20) as f:
            f.read()
    return len(paths)


COLUMNS = [(python_open, 1, "open 1r"), (python_open, 2, "open 2r"), (python_open, 4, "open 4r"),
           (buffered_open, 1, "buffered 1r"),
           (os_open, 1, "os.open 1r"), (os_open, 2, "os.open 2r"), (os_open, 4, "os.open 4r")]


def measure(root, rel, repeats, level):
    """files/s per column; level None: nothing dropped between passes (page cache warm)."""
    row = []
    for reader, readers, _ in COLUMNS:
        best = 0.0
        for seed in range(repeats):
            if level:
                drop_caches(level)
            best = max(best, files_per_second(reader, root, rel, readers, seed))
        row.append(best)
    return row


def isatty_us(path, count=20000):
    """Microseconds per ioctl(TCGETS) on an open file: what Python's open() adds per file."""
    fd = os.open(path, os.O_RDONLY)
    try:
        start = time.perf_counter()
        for _ in range(count):
            try:
                fcntl.ioctl(fd, termios.TCGETS, bytes(64))
            except OSError:
                pass
        return (time.perf_counter() - start) / count * 1e6
    finally:
        os.close(fd)


def mounted_row(binary, src, rel, args):
    lib.GPUFSD = binary
    with lib.Mount(src) as mnt:
        python_open([os.path.join(mnt, r) for r in rel])  # every group into pinned memory
        return measure(mnt, rel, args.repeats, args.drop), isatty_us(os.path.join(mnt, rel[0]))


def main():
    parser = arg_parser(__doc__)
    add_sample_args(parser)
    parser.add_argument("--drop", type=int, choices=(1, 3), default=1)
    parser.add_argument("--base", action="append", default=[],
                        help="another gpufsd binary to compare with (repeatable)")
    parser.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "gpufs-bench"))
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("hot_read.py drops the page cache: run it as root")

    tree, src, rel = sample_of(args, f"; gpufs rows: drop_caches {args.drop} before each pass")

    python_open([os.path.join(tree, r) for r in rel])  # the tree's page cache warm
    rows = [("ext4 tree, page cache warm",
             (measure(tree, rel, args.repeats, None), isatty_us(os.path.join(tree, rel[0]))))]
    rows.append(("gpufs, pinned, page cache dropped", mounted_row(lib.GPUFSD, src, rel, args)))
    for binary in args.base:
        rows.append((f"  {binary[-34:]}", mounted_row(binary, src, rel, args)))

    print(f"{'':36}" + "".join(f"{title:>12}" for _, _, title in COLUMNS) + "  isatty us")
    base, us = rows[0][1]
    print(f"{rows[0][0]:36}" + "".join(f"{v:>12.0f}" for v in base) + f"{us:>11.1f}")
    for name, (row, us) in rows[1:]:
        print(f"{name:36}" + "".join(f"{v:>7.0f} {v / b:.2f}x" for v, b in zip(row, base)) +
              f"{us:>11.1f}")


if __name__ == "__main__":
    main()
