#!/usr/bin/python3
"""Makes an ImageNet-shaped ImageFolder tree of many small files, quickly.

    gen_scale_tree.py OUT [--files 1281167] [--classes 1000] [--bytes 128]

OUT/train/<wnid>/<wnid>_<n>.JPEG, with ImageNet-1k's counts by default (1,281,167 files in
1,000 classes). Each file holds a few bytes unique to it, not an image: the point is the
number of names, for mount, walk and ImageFolder benchmarks at scale.
"""
import argparse
import os
import sys
import time


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out")
    parser.add_argument("--files", type=int, default=1_281_167)
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--bytes", type=int, default=128, help="size of each file")
    args = parser.parse_args()
    root = os.path.join(args.out, "train")
    if os.path.exists(root):
        sys.exit(f"gen_scale_tree: {root} exists; remove it or choose another OUT")
    start = time.perf_counter()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    for c in range(args.classes):
        wnid = f"n{c:08d}"
        folder = os.path.join(root, wnid)
        os.makedirs(folder)
        # Spread files as evenly as the counts allow, like ImageNet's 732..1300 per class.
        first = c * args.files // args.classes
        last = (c + 1) * args.files // args.classes
        for n in range(first, last):
            payload = f"{wnid}/{n}\n".encode().ljust(args.bytes, b".")
            fd = os.open(os.path.join(folder, f"{wnid}_{n}.JPEG"), flags, 0o644)
            os.write(fd, payload)
            os.close(fd)
        if c % 100 == 99:
            print(f"gen_scale_tree: {last} files in {time.perf_counter() - start:.0f} s",
                  file=sys.stderr)
    print(f"gen_scale_tree: {args.files} files in {args.classes} classes under {root}")


if __name__ == "__main__":
    main()
