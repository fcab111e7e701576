#!/usr/bin/python3
"""The slow-disk benchmark: an unmodified torchvision loader over a throttled volume.

    sudo /usr/bin/python3 tools/bench/slow_disk.py [--files 4000] [--iops 150] [--mbps 150]

Builds an emulated cloud HDD volume (ext4 on a loop device, reads throttled with cgroup
v1 blkio), puts one generated dataset of real JPEGs (ImageNet-like sizes) on it three
ways -- an ImageFolder tree, a squashfs image, a gpufs pack -- and runs the same
torchvision ImageFolder + DataLoader for 3 epochs over: the tree, squashfuse_ll on the
image, and gpufsd with cache budgets of 25%, 50% and 100% of the dataset. Every process
that reads the volume (the loader, squashfuse_ll, gpufsd) is throttled, and the kernel
page cache is dropped before each epoch, as for a dataset much larger than memory; only
gpufsd's own pinned cache carries over. Then a warm run (nothing dropped) of the tree and
of gpufs measures FUSE overhead alone. Prints one table and writes results.json and a
PNG chart to --out.
"""
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (SlowVolume, add_options, arg_parser, begin_run,  # noqa: E402
                      blob_bytes, install_bench_deps, loader_epochs, need_root, pyplot,
                      save_results, sh)
from benchmount import GPUFSD, gpufs_mounted, gpufs_stats, squashfuse_mounted  # noqa: E402


class Bench:
    def __init__(self, volume, args, workers=2):
        self.volume = volume
        self.args = args
        self.workers = workers  # the loader's
        self.rows = []

    def throttled(self):
        return lambda: self.volume.enter(os.getpid())

    def load(self, name, root, mode, drop=True, epochs=3):
        epochs = loader_epochs(root, mode, epochs, self.workers, drop,
                               preexec_fn=self.throttled(),
                               extra=["--blkio-group", self.volume.group,
                                      "--device", self.volume.device])
        self.rows.append({"name": name, "mode": mode, "warm": not drop, "epochs": epochs})
        print(f"  {name:24} {mode:6} " + "  ".join(f"{e['files_per_s']:7.0f}" for e in epochs)
              + " files/s", flush=True)

    def squashfuse(self, image, mode, drop=True, epochs=3):
        with squashfuse_mounted(image, "gpufs-sqfs-", self.throttled()) as mnt:
            self.load("squashfuse_ll", mnt, mode, drop, epochs)

    def gpufs(self, pack, budget, label, mode, drop=True, epochs=3, extra=(), stats=False):
        """budget None: gpufsd's default; `extra`: more mount options; with `stats` the
        daemon's counters after the epochs are kept in the row ("stats")."""
        size = [] if budget is None else ["--cache-size", str(budget)]
        with gpufs_mounted(pack, *size, *extra, preexec_fn=self.throttled(),
                           quiet=False) as mnt:
            self.load(label, mnt, mode, drop, epochs)
            if stats:
                self.rows[-1]["stats"] = gpufs_stats(mnt)


def prepare(volume, source):
    """The dataset copied onto the volume as a tree, a gpufs pack and a squashfs image."""
    tree = os.path.join(volume.mnt, "tree")
    shutil.copytree(source, tree)
    pack = os.path.join(volume.mnt, "pack")
    # 4 MiB groups: this dataset is ~300x smaller than ImageNet, and budgets of 25% need
    # enough groups to be met closely (16 MiB would leave ~30 groups).
    sh(GPUFSD, "pack", tree, pack, "--group-bytes", "4MiB")
    image = os.path.join(volume.mnt, "tree.sqfs")
    sh("mksquashfs", tree, image, "-noappend", "-quiet")
    return {"tree": tree, "pack": pack, "image": image, "pack_bytes": blob_bytes(pack)[1]}


def budget_for(pack, fraction):
    blobs, total = blob_bytes(pack)
    return int(total * fraction) + 4096 * (len(blobs) + 1) + (1 << 20)


def hit_ratio(epoch):
    g = epoch.get("gpufs")
    if not g:
        return None
    asked = g["hits"] + g["misses"] + g["member_reads"]
    return g["hits"] / asked if asked else 0.0


def print_table(rows, data_bytes, bound):
    base = {r["mode"]: r for r in rows if r["name"] == "ext4 tree" and not r["warm"]}
    print(f"\nbandwidth bound: {bound:.0f} files/s; data per epoch {data_bytes / 1e6:.0f} MB\n")
    print(f"{'':26}{'mode':7}{'epoch':>6}{'files/s':>9}{'x tree':>8}{'x bound':>9}"
          f"{'disk MB':>9}{'x data':>8}{'hit ratio':>10}")
    for r in rows:
        for e in r["epochs"]:
            tree = base.get(r["mode"])
            ratio = e["files_per_s"] / tree["epochs"][e["epoch"] - 1]["files_per_s"] if tree else 0
            hr = hit_ratio(e)
            name = r["name"] + (" (warm)" if r["warm"] else "")
            print(f"{name:26}{r['mode']:7}{e['epoch']:>6}{e['files_per_s']:9.0f}{ratio:8.2f}"
                  f"{e['files_per_s'] / bound:9.2f}{e['disk_bytes'] / 1e6:9.0f}"
                  f"{e['disk_bytes'] / data_bytes:8.2f}{'' if hr is None else f'{hr:10.2f}'}")


def chart(rows, path):
    plt = pyplot()
    raw = [r for r in rows if r["mode"] == "raw" and not r["warm"]]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.8 / len(raw)
    for i, r in enumerate(raw):
        xs = [e["epoch"] - 0.4 + width * (i + 0.5) for e in r["epochs"]]
        ax.bar(xs, [e["files_per_s"] for e in r["epochs"]], width, label=r["name"])
    ax.set_xticks([1, 2, 3], ["epoch 1 (cold)", "epoch 2", "epoch 3"])
    ax.set_ylabel("images/s (raw bytes, 2 loader workers)")
    ax.set_title("torchvision ImageFolder on a 150 IOPS / 150 MB/s volume")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    parser = arg_parser(__doc__)
    add_options(parser, files=4000, classes=30, iops=150, mbps=150,
                cache="/var/tmp/gpufs-slow-disk-src",
                out=("/var/tmp/gpufs-slow-disk-results", "where results.json and the chart "
                     "are written"))
    args = parser.parse_args()
    need_root("slow_disk", "loop device, cgroups, drop_caches")
    install_bench_deps()
    source, files, data_bytes = begin_run(args.cache, args.out, args.files, args.classes)
    volume = SlowVolume(3 * data_bytes // 1_000_000 + 300, args.iops, args.mbps)
    try:
        made = prepare(volume, source)
        tree, pack, image = made["tree"], made["pack"], made["image"]
        bench = Bench(volume, args)
        print(f"{files} files, mean {data_bytes / files / 1000:.0f} KB; volume {args.iops} IOPS, "
              f"{args.mbps} MB/s; epochs (files/s):", flush=True)
        for mode in ("raw", "decode"):
            bench.load("ext4 tree", tree, mode)
            bench.squashfuse(image, mode)
            for fraction in ((0.25, 0.5, 1.0) if mode == "raw" else (0.5,)):
                bench.gpufs(pack, budget_for(pack, fraction), f"gpufs {fraction:.0%} budget", mode)
        bench.load("ext4 tree", tree, "raw", drop=False, epochs=2)
        bench.gpufs(pack, budget_for(pack, 1.0), "gpufs 100% budget", "raw", drop=False, epochs=2)
    finally:
        volume.close()
    bound = args.mbps * 1e6 / (data_bytes / files)
    print_table(bench.rows, data_bytes, bound)
    chart(bench.rows, os.path.join(args.out, "slow_disk.png"))
    save_results(args.out, {"files": files, "data_bytes": data_bytes, "bound_files_per_s": bound,
                            "rows": bench.rows}, f" and {args.out}/slow_disk.png")


if __name__ == "__main__":
    main()
