#!/usr/bin/python3
"""ImageNet-21k scale from a tar: index build, remount, first walk and daemon memory; at
ImageNet-1k scale, the first walk against archivemount and ImageFolder against ext4.

    sudo tools/bench/scale21k.py [--work /var/tmp] [--skip-21k] [--skip-1k]
                                 [--mount-option=--readdirplus=auto ...]

21k: makes (once) WORK/scale21k.tar, 21,841 classes x 641 tiny members (14.0 M files,
tools/gen_21k_tar.py), then in one run:
  disk         `cat TAR > /dev/null` after drop_caches: the disk's sequential read speed
  first mount  `gpufsd mount TAR` with no saved index, page cache dropped: the index is
               built from the headers; the peak RSS of that process (which builds before it
               detaches) and the saved index's size
  remount      with the saved index, page cache dropped
  first walk   os.walk of the fresh remount, counting files
  memory       the daemon's RSS after the walk (anonymous and mapped-file parts)
1k: makes (once) WORK/scale1k.tar (1,000 x 1,281) and the ext4 tree of tools/gen_scale_tree.py
(WORK/scale-tree, shared with scale.py), then: first os.walk of gpufs and of archivemount
over the same tar (each mounted fresh, page cache dropped before the mount), and torchvision
ImageFolder construction over gpufs against the ext4 tree (warm). Ratios are gpufs over the
other (lower is better).
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (IMAGEFOLDER, PYTHON, ROOT, WALK, arg_parser,  # noqa: E402
                      drop_caches, memory_kib, python_timed, run, timed)
from benchmount import (GPUFSD, gpufs_mounted, gpufs_pid, gpufs_unmount,  # noqa: E402
                        mount_point)


def cold():
    if not drop_caches():
        sys.exit("scale21k: cannot drop the page cache (run as root)")


# Runs argv and prints the seconds it took and the peak RSS (KiB) of the process it waited
# for: `gpufsd mount` builds the catalog before it detaches the daemon.
PEAK = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
        "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL); "
        "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")


def gpufs_mount(src, mnt, options):
    """Seconds until the mount is ready, and the peak RSS (KiB) of the mounting process."""
    seconds, peak = run([PYTHON, "-c", PEAK, GPUFSD, "mount", *options, src, mnt]).stdout.split()
    return float(seconds), int(peak)


def saved_index(tar):
    return os.path.join(os.path.dirname(tar), os.path.basename(tar) + ".gpufs-index")


def make_tar(path, classes, per_class):
    if not os.path.exists(path):
        run([PYTHON, os.path.join(ROOT, "tools", "gen_21k_tar.py"), path, "--classes",
             str(classes), "--per-class", str(per_class)])


def measure_21k(work, options, classes, per_class):
    tar = os.path.join(work, "scale21k.tar" if classes == 21_841 else f"scale{classes}x{per_class}.tar")
    make_tar(tar, classes, per_class)
    files = classes * per_class
    row = {"tar_gb": os.path.getsize(tar) / 1e9}
    cold()
    row["cat"], _ = timed(lambda: run(["sh", "-c", f"cat '{tar}' > /dev/null"]))
    if os.path.exists(saved_index(tar)):
        os.remove(saved_index(tar))
    with mount_point("gpufs-21k-") as mnt:
        try:
            cold()
            row["build"], row["build_peak_kib"] = gpufs_mount(tar, mnt, options)
            run([GPUFSD, "unmount", mnt])
            row["index_mb"] = os.path.getsize(saved_index(tar)) / 1e6
            cold()
            row["remount"], _ = gpufs_mount(tar, mnt, options)
            pid = gpufs_pid(mnt)
            row["walk"], row["count"] = python_timed(WALK, mnt)
            row["mem"] = memory_kib(pid)
        finally:
            gpufs_unmount(mnt)
    assert row["count"] == files, row["count"]
    gb = row["tar_gb"]
    print(f"21k: {files:,} files in {classes:,} classes; tar {gb:.1f} GB; saved index "
          f"{row['index_mb']:.0f} MB ({row['index_mb'] * 1e6 / files:.1f} B/file); "
          f"mount options {' '.join(options) or '(defaults)'}\n")
    print(f"{'cat TAR > /dev/null, cold (s)':44}{row['cat']:10.1f}   {gb / row['cat']:.2f} GB/s")
    print(f"{'first mount: index built, cold (s)':44}{row['build']:10.1f}   "
          f"{gb / row['build']:.2f} GB/s ({row['cat'] / row['build']:.2f}x the disk's speed)")
    print(f"{'  peak RSS of the build':44}{row['build_peak_kib'] / 1024:10.0f} MB  "
          f"({row['build_peak_kib'] * 1024 / files:.0f} B/file)")
    print(f"{'remount, saved index, cold (s)':44}{row['remount']:10.2f}")
    print(f"{'first os.walk of the remount (s)':44}{row['walk']:10.1f}")
    mem = row["mem"]
    print(f"{'daemon RSS after the walk':44}{mem['VmRSS'] / 1024:10.0f} MB  "
          f"(anon {mem['RssAnon'] / 1024:.0f} MB, mapped {mem['RssFile'] / 1024:.0f} MB; "
          f"{mem['VmRSS'] * 1024 / files:.0f} B/file)")


def first_walk(mount, tar, options=()):
    """Mounts `tar` with `mount` ("gpufs" or "archivemount") after dropping the page cache;
    returns (mount seconds, first os.walk seconds, files)."""
    with mount_point(f"scale1k-{mount}-") as mnt:
        try:
            cold()
            if mount == "gpufs":
                seconds, _ = gpufs_mount(tar, mnt, options)
            else:
                seconds, _ = timed(lambda: run(["archivemount", "-o", "ro,readonly", tar, mnt]))
            walk, count = python_timed(WALK, mnt)
        finally:
            if mount == "gpufs":
                gpufs_unmount(mnt)
            else:
                subprocess.run(["fusermount3", "-u", mnt])
    return seconds, walk, count


def measure_1k(work, options, classes, per_class):
    tar = os.path.join(work, "scale1k.tar" if classes == 1000 else f"scale{classes}x{per_class}.tar")
    make_tar(tar, classes, per_class)
    default = (classes, per_class) == (1000, 1281)  # the tree scale.py makes too
    tree = os.path.join(work, "scale-tree" if default else f"scale-tree-{classes}x{per_class}")
    if not os.path.isdir(tree):
        counts = [] if default else ["--files", str(classes * per_class), "--classes", str(classes)]
        run([PYTHON, os.path.join(ROOT, "tools", "gen_scale_tree.py"), tree, *counts])
    if not os.path.exists(saved_index(tar)):  # the walk is measured, not the first build
        with mount_point("scale1k-index-") as mnt:
            run([GPUFSD, "mount", *options, tar, mnt])
            run([GPUFSD, "unmount", mnt])
    g_mount, g_walk, g_count = first_walk("gpufs", tar, options)
    a_mount, a_walk, a_count = first_walk("archivemount", tar)
    assert g_count == a_count == classes * per_class, (g_count, a_count)
    with gpufs_mounted(tar, *options, prefix="scale1k-if-") as mnt:
        python_timed(IMAGEFOLDER, mnt)
        g_if, g_n = python_timed(IMAGEFOLDER, mnt)
    python_timed(IMAGEFOLDER, os.path.join(tree, "train"))
    e_if, e_n = python_timed(IMAGEFOLDER, os.path.join(tree, "train"))
    print(f"\n1k: {g_count:,} files in {classes:,} classes (tar; ext4 tree of {e_n:,} files)\n")
    print(f"{'':40}{'gpufs':>10}{'other':>14}{'ratio':>8}")
    print(f"{'mount, cold (s) vs archivemount':40}{g_mount:10.2f}{a_mount:14.2f}"
          f"{g_mount / a_mount:8.2f}")
    print(f"{'first os.walk (s) vs archivemount':40}{g_walk:10.2f}{a_walk:14.2f}"
          f"{g_walk / a_walk:8.2f}")
    print(f"{'ImageFolder, warm (s) vs ext4':40}{g_if:10.2f}{e_if:14.2f}{g_if / e_if:8.2f}")


def main():
    parser = arg_parser(__doc__)
    parser.add_argument("--work", default="/var/tmp")
    parser.add_argument("--skip-21k", action="store_true")
    parser.add_argument("--skip-1k", action="store_true")
    parser.add_argument("--shape-21k", default="21841x641", help="classes x members (a check)")
    parser.add_argument("--shape-1k", default="1000x1281")
    parser.add_argument("--mount-option", action="append", default=[],
                        help="passed to gpufsd mount, e.g. --mount-option=--readdirplus=auto")
    args = parser.parse_args()
    shape = lambda text: tuple(int(n) for n in text.split("x"))  # noqa: E731
    if not args.skip_21k:
        measure_21k(args.work, args.mount_option, *shape(args.shape_21k))
    if not args.skip_1k:
        measure_1k(args.work, args.mount_option, *shape(args.shape_1k))


if __name__ == "__main__":
    main()
