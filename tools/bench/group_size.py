#!/usr/bin/python3
"""Why 16 MiB groups: read throughput against group size on an emulated slow volume.

    sudo tools/bench/group_size.py [--iops 150] [--mbps 150] [--file-mb 768]

Builds an ext4 image on a loop device, throttles reads of it with cgroup v1 blkio (like a
cloud HDD volume: 150 IOPS, 150 MB/s by default; the IOPS limit counts requests after the
device splits them at max_sectors_kb), and reads whole "groups" of each size at random
aligned offsets with O_DIRECT, as a cache miss would: as one request, and as consecutive
1 MiB requests. Prints MB/s and the fraction of the bandwidth bound, next to what a
spinning disk with one seek per group would give (the same IOPS and bandwidth, i.e.
1/IOPS of positioning per group).
"""
import mmap
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import SlowVolume, add_options, arg_parser, sh  # noqa: E402

GROUPS = [(128 << 10, "128 KiB"), (1 << 20, "1 MiB"), (4 << 20, "4 MiB"), (16 << 20, "16 MiB"),
          (64 << 20, "64 MiB")]


def read_groups(path, size, total_bytes, seed, request):
    """MB/s reading whole groups at random, each as consecutive requests of `request` bytes."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    request = min(request, size)
    buffer = mmap.mmap(-1, request)  # page-aligned, as O_DIRECT wants
    slots = os.fstat(fd).st_size // size
    rng = random.Random(seed)
    reads = max(3, total_bytes // size)
    start = time.perf_counter()
    for _ in range(reads):
        group = rng.randrange(slots) * size
        for offset in range(group, group + size, request):
            os.preadv(fd, [buffer], offset)
    elapsed = time.perf_counter() - start
    os.close(fd)
    return reads * size / elapsed / 1e6


def main():
    parser = arg_parser(__doc__)
    add_options(parser, iops=150, mbps=150)
    parser.add_argument("--file-mb", type=int, default=768)
    parser.add_argument("--seconds", type=float, default=4, help="roughly, per group size")
    args = parser.parse_args()
    volume = SlowVolume(args.file_mb, args.iops, args.mbps)
    try:
        data = os.path.join(volume.mnt, "blob")
        sh("dd", "if=/dev/urandom", f"of={data}", "bs=1M", f"count={args.file_mb}", "oflag=direct")
        volume.enter(os.getpid())
        print(f"emulated volume: {args.iops} IOPS, {args.mbps} MB/s, requests up to "
              f"{volume.max_kb} KiB; random whole-group reads\n")
        print(f"{'group':>8} {'one request':>22} {'1 MiB requests':>22} {'HDD model':>10}")
        print(f"{'':>8} {'MB/s':>11} {'of bound':>10} {'MB/s':>11} {'of bound':>10} "
              f"{'of bound':>10}")
        for size, name in GROUPS:
            budget = int(args.seconds * min(args.mbps * 1e6, args.iops * size))
            whole = read_groups(data, size, budget, size, size)
            split = read_groups(data, size, budget, size + 1, 1 << 20)
            seek_model = size / (size + args.mbps * 1e6 / args.iops)  # transfer / (transfer+seek)
            print(f"{name:>8} {whole:11.1f} {whole / args.mbps:10.2f} {split:11.1f} "
                  f"{split / args.mbps:10.2f} {seek_model:10.2f}")
    finally:
        volume.close()


if __name__ == "__main__":
    main()
