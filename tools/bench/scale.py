#!/usr/bin/python3
"""ImageNet-scale names: mount time, daemon memory, walk and ImageFolder vs the tree.

    sudo tools/bench/scale.py [--work /var/tmp] [--files 1281167]

Makes (once) an ImageNet-shaped tree of 1,281,167 small files (tools/gen_scale_tree.py)
and its gpufs pack, then measures side by side in one run:
  mount        `gpufsd mount` until the mount answers, index in page cache / dropped
  memory       the daemon's anonymous resident memory per file (beyond the mapped index)
  find         `find ROOT -type f | wc -l`, warm (second run) and cold (after drop_caches)
  ImageFolder  torchvision ImageFolder(ROOT/train) construction, warm
Ratios are gpufs over ext4 (lower is better for times).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (IMAGEFOLDER, PYTHON, ROOT, arg_parser, drop_caches,  # noqa: E402
                      memory_kib, python_timed, run, timed)
from benchmount import GPUFSD, gpufs_pid, gpufs_unmount, mount_point  # noqa: E402


def find_count(root):
    out = run(["sh", "-c", f"find '{root}' -type f | wc -l"]).stdout
    return int(out)


def mount_seconds(src, mnt, cold):
    if cold and not drop_caches():
        return float("nan")
    seconds, _ = timed(lambda: run([GPUFSD, "mount", src, mnt]))
    return seconds


def prepare(work, files):
    tree = os.path.join(work, "scale-tree")
    pack = os.path.join(work, "scale-pack")
    if not os.path.isdir(tree):
        run([PYTHON, os.path.join(ROOT, "tools", "gen_scale_tree.py"), tree, "--files", str(files)])
    if not os.path.isdir(pack):
        run([GPUFSD, "pack", tree, pack])
    return tree, pack


def measure_tree(tree):
    row = {}
    if drop_caches():
        row["find_cold"], row["count"] = timed(lambda: find_count(tree))
    find_count(tree)
    row["find_warm"], row["count"] = timed(lambda: find_count(tree))
    python_timed(IMAGEFOLDER, os.path.join(tree, "train"))
    row["imagefolder"], _ = python_timed(IMAGEFOLDER, os.path.join(tree, "train"))
    return row


def measure_mount(pack):
    row = {}
    with mount_point("gpufs-scale-") as mnt:
        try:
            mount_walked(pack, mnt, row)
        finally:
            gpufs_unmount(mnt)
    return row


def mount_walked(pack, mnt, row):
    """Mount times, then the daemon's memory before and after the walks, into `row`."""
    row["mount_cold"] = mount_seconds(pack, mnt, cold=True)
    run([GPUFSD, "unmount", mnt])
    row["mount_warm"] = mount_seconds(pack, mnt, cold=False)
    pid = gpufs_pid(mnt)
    row["mem_mounted"] = memory_kib(pid)
    if drop_caches():
        row["find_cold"], _ = timed(lambda: find_count(mnt))
    find_count(mnt)
    row["find_warm"], row["count"] = timed(lambda: find_count(mnt))
    python_timed(IMAGEFOLDER, os.path.join(mnt, "train"))
    row["imagefolder"], _ = python_timed(IMAGEFOLDER, os.path.join(mnt, "train"))
    row["mem_walked"] = memory_kib(pid)


def scale_sample(doc):
    """The options of scale.py and stat_scale.py (their docstring `doc`) parsed, and the
    tree and pack they name, made once: (args, tree, pack)."""
    parser = arg_parser(doc)
    parser.add_argument("--work", default="/var/tmp")
    parser.add_argument("--files", type=int, default=1_281_167)
    args = parser.parse_args()
    return (args, *prepare(args.work, args.files))


def main():
    args, tree, pack = scale_sample(__doc__)
    index_mb = os.path.getsize(os.path.join(pack, "index.gpufs")) / 1e6
    t = measure_tree(tree)
    m = measure_mount(pack)
    n = m["count"]
    assert n == t["count"] == args.files, (n, t["count"])
    print(f"{n} files in 1000 classes; native index {index_mb:.0f} MB; {os.cpu_count()} CPUs\n")
    print(f"{'':34}{'ext4 tree':>12}{'gpufs':>12}{'ratio':>8}")
    for key, title in (("find_cold", "find | wc -l, cold (s)"), ("find_warm", "find | wc -l, warm (s)"),
                       ("imagefolder", "ImageFolder(train), warm (s)")):
        if key in t and key in m:
            print(f"{title:34}{t[key]:12.2f}{m[key]:12.2f}{m[key] / t[key]:8.2f}")
    print(f"{'mount ready, index cached (s)':34}{'':>12}{m['mount_warm']:12.3f}")
    print(f"{'mount ready, caches dropped (s)':34}{'':>12}{m['mount_cold']:12.3f}")
    for when in ("mounted", "walked"):
        mem = m[f"mem_{when}"]
        print(f"{'daemon anon memory, ' + when:34}{'':>12}{mem['RssAnon'] / 1024:10.1f} MB"
              f"  ({mem['RssAnon'] * 1024 / n:.1f} B/file; mapped index {mem['RssFile'] / 1024:.0f} MB)")


if __name__ == "__main__":
    main()
