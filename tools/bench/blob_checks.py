#!/usr/bin/python3
"""What the daemon's checks of changed blobs cost: cold epochs through a pack, side by side.

    sudo tools/bench/blob_checks.py --baseline OLD_GPUFSD [--files 3000] [--rounds 3]

The gpufsd under test checks every blob's size and modification time before each read of
it (one fstat) and the XXH3 checksum of every group it loads. The baseline is a gpufsd
built without those checks (e.g. an earlier commit's). Both mount the same pack in turn;
each round drops the page cache, then 4 threads read every file once in a shuffled order.
Printed per gpufsd: files/s, and the daemon's CPU seconds per GB served; then the ratios.
"""
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (arg_parser, cpu_seconds, drop_caches, files_of,  # noqa: E402
                      random_tree, read_in_random_order)
from benchmount import GPUFSD  # noqa: E402


def cold_epoch(mnt, paths):
    drop_caches()
    return read_in_random_order(mnt, paths)


def run(gpufsd, pack, paths):
    mnt = tempfile.mkdtemp(prefix="gpufs-bench-mnt-")
    read_end, write_end = os.pipe()
    proc = subprocess.Popen([gpufsd, "mount", "-f", "--ready-fd", str(write_end), pack, mnt],
                            pass_fds=[write_end], stderr=subprocess.DEVNULL)
    os.close(write_end)
    if os.read(read_end, 16) != b"ready\n":
        raise RuntimeError(f"{gpufsd} did not mount {pack}")
    os.close(read_end)
    try:
        cpu = cpu_seconds(proc.pid)
        seconds, served = cold_epoch(mnt, paths)
        cpu = cpu_seconds(proc.pid) - cpu
    finally:
        subprocess.run([gpufsd, "unmount", mnt], check=True, capture_output=True)
        proc.wait(timeout=60)
        os.rmdir(mnt)
    return len(paths) / seconds, cpu / (served / 1e9)


def main():
    parser = arg_parser(__doc__)
    parser.add_argument("--gpufsd", default=GPUFSD)
    parser.add_argument("--baseline", required=True, help="a gpufsd without the blob checks")
    parser.add_argument("--files", type=int, default=3000)
    parser.add_argument("--size", type=int, default=110_000, help="mean file size")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("blob_checks.py drops the page cache between epochs: run it as root")
    work = tempfile.mkdtemp(prefix="gpufs-bench-checks-", dir="/var/tmp")
    try:
        tree = os.path.join(work, "tree")
        random_tree(tree, args.files, args.size, args.size // 4)
        pack = os.path.join(work, "pack")
        subprocess.run([args.gpufsd, "pack", tree, pack], check=True, capture_output=True)
        paths = files_of(tree)
        results = {"checked": [], "baseline": []}
        for _ in range(args.rounds):
            results["checked"].append(run(args.gpufsd, pack, paths))
            results["baseline"].append(run(args.baseline, pack, paths))
        best = {k: (max(r[0] for r in v), min(r[1] for r in v)) for k, v in results.items()}
        print(f"{args.files} files, {args.rounds} cold epochs each, best of each:")
        for name, (rate, cpu) in best.items():
            print(f"  {name:9s} {rate:9.0f} files/s   daemon CPU {cpu:6.2f} s/GB")
        print(f"  ratio checked/baseline: files/s {best['checked'][0] / best['baseline'][0]:.3f}x,"
              f" daemon CPU {best['checked'][1] / best['baseline'][1]:.3f}x")
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
