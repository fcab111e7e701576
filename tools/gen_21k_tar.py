#!/usr/bin/python3
"""Writes an ImageNet-21k-shaped tar of tiny members straight to disk, quickly.

    gen_21k_tar.py OUT.tar [--classes 21841] [--per-class 641] [--max-bytes 64]

<wnid>/<wnid>_<n>.JPEG in class order, with ImageNet-21k's class count and its mean
members per class by default (21,841 x 641 = 14,000,081 files). Each member holds 0 to
--max-bytes bytes of its own name, not an image: the point is the number of names, for the
catalog's build, remount, walk and memory at scale. The headers are ustar, written here
rather than by tarfile (which would take an hour at this count). With the defaults the
archive is about 14 GB: most of it is the 512-byte header and 512-byte data block of each
member. `--classes 1000 --per-class 1281` gives ImageNet-1k's shape (1,281,000 files).
"""
import argparse
import os
import sys
import time

BLOCK = 512


def header_template():
    h = bytearray(BLOCK)
    h[100:108] = b"0000644\0"  # mode
    h[108:116] = b"0001750\0"  # uid 1000
    h[116:124] = b"0001750\0"  # gid 1000
    h[136:148] = b"14523373000\0"  # mtime 1700000000
    h[156:157] = b"0"  # a regular file
    h[257:265] = b"ustar\x0000"
    return h


def member(template, name, size):
    h = bytearray(template)
    h[0:len(name)] = name
    h[124:136] = b"%011o\0" % size
    h[148:156] = b"        "
    h[148:156] = b"%06o\0 " % sum(h)
    if size == 0:
        return bytes(h)
    data = (name * (size // len(name) + 1))[:size]
    return bytes(h) + data + bytes(-size % BLOCK)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out")
    parser.add_argument("--classes", type=int, default=21_841)
    parser.add_argument("--per-class", type=int, default=641)
    parser.add_argument("--max-bytes", type=int, default=64)
    args = parser.parse_args()
    if os.path.exists(args.out):
        sys.exit(f"gen_21k_tar: {args.out} exists; remove it or choose another OUT")
    template = header_template()
    start = time.perf_counter()
    written = 0
    with open(args.out + ".part", "wb", buffering=16 << 20) as f:
        for c in range(args.classes):
            wnid = b"n%08d" % (1_000_000 + c * 4567 % 98_000_000)
            chunk = []
            for i in range(args.per_class):
                n = 10_000 + i * 17 + c % 17  # unique within the class, ImageNet-like
                name = b"%s/%s_%d.JPEG" % (wnid, wnid, n)
                size = (c * 31 + i * 7) % (args.max_bytes + 1)
                chunk.append(member(template, name, size))
            block = b"".join(chunk)
            f.write(block)
            written += len(block)
            if c % 2000 == 1999:
                rate = (c + 1) * args.per_class / (time.perf_counter() - start)
                print(f"{c + 1} classes, {written / 1e9:.1f} GB, {rate:,.0f} members/s",
                      file=sys.stderr)
        f.write(bytes(2 * BLOCK))  # the end-of-archive marker
    os.rename(args.out + ".part", args.out)
    files = args.classes * args.per_class
    print(f"{files} members in {args.classes} classes, {(written + 2 * BLOCK) / 1e9:.2f} GB, "
          f"in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
