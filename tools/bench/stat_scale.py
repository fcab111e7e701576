#!/usr/bin/python3
"""gpufs-stat at ImageNet scale, against vmtouch on the same files, in one run.

    sudo tools/bench/stat_scale.py [--work /var/tmp] [--files 1281167]

Uses the tree and pack of scale.py (made once). On a fresh mount of the pack:
  daemon request  one residency request for the whole mount (the daemon's tiers)
  summary, fresh  `gpufs-stat MNT` before the kernel holds any inode: the daemon's
                  answer alone, no file opened
  summary, walked `gpufs-stat MNT` after `find` (every inode known) and 1% of the files
                  read, vs `vmtouch MNT` on the same state; both agree on the pages
  tree            `gpufs-stat TREE` vs `vmtouch TREE` on the ext4 tree (kernel tier only)
Each figure is the best of 3 runs; ratios are vmtouch's time over gpufs-stat's.
"""
import json
import os
import random
import re
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import run  # noqa: E402
from benchmount import GPUFS_STAT, gpufs_control, gpufs_mounted  # noqa: E402
from scale import scale_sample  # noqa: E402


def best_of(n, fn):
    best, result = float("inf"), None
    for _ in range(n):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def resident(text):
    m = re.search(r"Resident Pages: (\d+)/(\d+)", text)
    return int(m.group(1)), int(m.group(2))


def output(cmd):
    return run(cmd).stdout


def daemon_request(mnt):
    path = gpufs_control(mnt)
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(path)
        s.sendall(b'{"op":"residency","list":"none"}\n')
        reply = b"".join(iter(lambda: s.recv(1 << 16), b""))
    return json.loads(reply.splitlines()[0])


def main():
    _, tree, pack = scale_sample(__doc__)
    rows = []
    with gpufs_mounted(pack, prefix="gpufs-stat-scale-") as mnt:
        t, header = best_of(3, lambda: daemon_request(mnt))
        rows.append(("daemon request, whole mount", None, t))
        t, out = best_of(3, lambda: output([GPUFS_STAT, mnt]))
        rows.append(("gpufs-stat MNT, fresh mount", None, t))
        files = header["files"]
        output(["sh", "-c", f"find '{mnt}' -type f > {mnt}.list"])
        with open(f"{mnt}.list") as f:
            paths = f.read().splitlines()
        os.unlink(f"{mnt}.list")
        for path in random.Random(1).sample(paths, len(paths) // 100):
            with open(path, "rb") as f:
                f.read()
        # Agreement is checked on back-to-back runs: the kernel may reclaim pages while the
        # timed runs go on.
        ours, theirs = output([GPUFS_STAT, mnt]), output(["vmtouch", mnt])
        t_ours, _ = best_of(3, lambda: output([GPUFS_STAT, mnt]))
        t_vm, _ = best_of(3, lambda: output(["vmtouch", mnt]))
        rows.append(("gpufs-stat MNT vs vmtouch MNT, walked", t_vm, t_ours))
        ours_tree, theirs_tree = output([GPUFS_STAT, tree]), output(["vmtouch", tree])
        t_ours, _ = best_of(3, lambda: output([GPUFS_STAT, tree]))
        t_vm, _ = best_of(3, lambda: output(["vmtouch", tree]))
        rows.append(("gpufs-stat TREE vs vmtouch TREE (ext4)", t_vm, t_ours))
    print(f"{files} files; {os.cpu_count()} CPUs; seconds, best of 3\n")
    print(f"{'':42}{'vmtouch':>9}{'gpufs-stat':>12}{'ratio':>8}")
    for title, vm, t in rows:
        vm_text = f"{vm:9.2f}" if vm else f"{'':9}"
        ratio = f"{vm / t:8.2f}" if vm else ""
        print(f"{title:42}{vm_text}{t:12.3f}{ratio}")
    print(f"\nkernel pages, gpufs-stat vs vmtouch: mount {resident(ours)} vs "
          f"{resident(theirs)}, tree {resident(ours_tree)} vs {resident(theirs_tree)}")
    print(f"\n$ gpufs-stat MNT (after the walk and the 1% read)\n{ours}")


if __name__ == "__main__":
    main()
