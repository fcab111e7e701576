#!/usr/bin/python3
"""Makes a sample dataset of real JPEGs and groups it in the mytar layout.

    make_sample.py OUT [--classes 10] [--per-class 24] [--group-size 4] [--awkward]

writes OUT/tree/<class>/<file>.JPEG (an ImageFolder tree) and OUT/mytar/<G>/ (metadata.txt
and filegroup-<i>.mytar), grouped exactly as the original grouping tool does: a seeded
random permutation of the files, cut into groups of G; the last len % G files are left
out, as that tool leaves them out. --awkward adds names that stress a filesystem: spaces,
non-ASCII, commas, leading dashes, 255-byte names and subfolders.
"""
import argparse
import io
import os
import random
import sys

from PIL import Image

AWKWARD_CLASSES = ["café au lait", "-dash", "a,b"]


def jpeg_bytes(rng, width, height):
    """A real, decodable JPEG whose size tracks ImageNet's: noise compresses poorly."""
    image = Image.frombytes("RGB", (width, height), rng.randbytes(width * height * 3))
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=rng.randint(60, 95))
    return out.getvalue()


def file_names(rng, cls, count, awkward):
    names = [f"{cls}_{i:05d}.JPEG" for i in range(count)]
    if awkward and count >= 5:
        names[0] = "sub/inner/" + names[0]
        names[1] = "with space é ü.JPEG"
        names[2] = "-leading-dash.JPEG"
        names[3] = ("x" * (255 - len(".JPEG"))) + ".JPEG"
        names[4] = "comma,in,name.JPEG"
    return names


def make_tree(root, classes, per_class, seed, awkward, max_side):
    rng = random.Random(seed)
    class_names = [f"n{i:08d}" for i in range(classes)]
    if awkward:
        class_names[: len(AWKWARD_CLASSES)] = AWKWARD_CLASSES
    for cls in class_names:
        for name in file_names(rng, cls, per_class, awkward):
            path = os.path.join(root, cls, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            side = rng.randint(max_side // 3, max_side)
            with open(path, "wb") as f:
                f.write(jpeg_bytes(rng, side, side * 3 // 4))


def list_images(root):
    """(path, class) pairs in the order of torchvision's make_dataset."""
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
    items = []
    for cls in classes:
        for folder, _, files in sorted(os.walk(os.path.join(root, cls), followlinks=True)):
            for name in sorted(files):
                items.append((os.path.join(folder, name), cls))
    return classes, items


def group_mytar(root, out, group_size, seed):
    """Writes the mytar layout of `root` into out/<group_size>/; returns that folder."""
    classes, items = list_images(os.path.abspath(root))
    order = list(range(len(items)))
    random.Random(seed).shuffle(order)
    folder = os.path.join(out, str(group_size))
    os.makedirs(folder, exist_ok=True)
    lines = [str(len(classes))] + classes
    for g in range(len(order) // group_size):
        blob = f"filegroup-{g}.mytar"
        lines.append(f"{blob},{group_size}")
        offset = 0
        with open(os.path.join(folder, blob), "wb") as writer:
            for j in range(group_size):
                path, cls = items[order[g * group_size + j]]
                with open(path, "rb") as reader:
                    data = reader.read()
                writer.write(data)
                lines.append(f"{j},{cls},{offset},{len(data)},{path}")
                offset += len(data)
    with open(os.path.join(folder, "metadata.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return folder


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out")
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--per-class", type=int, default=24)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-side", type=int, default=320,
                        help="largest image side in pixels (320 gives ~110 KB files)")
    parser.add_argument("--awkward", action="store_true")
    args = parser.parse_args()
    tree = os.path.join(args.out, "tree")
    if os.path.exists(tree):
        sys.exit(f"make_sample: {tree} exists; remove it or choose another OUT")
    make_tree(tree, args.classes, args.per_class, args.seed, args.awkward, args.max_side)
    folder = group_mytar(tree, os.path.join(args.out, "mytar"), args.group_size, args.seed)
    total = args.classes * args.per_class
    print(f"make_sample: {total} JPEGs in {tree}, grouped by {args.group_size} in {folder}")


if __name__ == "__main__":
    main()
