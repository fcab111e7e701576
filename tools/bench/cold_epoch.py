#!/usr/bin/python3
"""A cold epoch against the volume's bound, for several loader widths and file sizes.

    sudo /usr/bin/python3 tools/bench/cold_epoch.py [--widths 2,4,8] [--sides 560,720]
        [--files 8000] [--iops 120] [--mbps 150] [--peers tree,squashfuse,gpufs] [--rounds 3]

An emulated cloud HDD volume (ext4 on a loop device, reads throttled with cgroup v1 blkio,
as slow_disk.py) holds each generated dataset of real JPEGs three ways: an ImageFolder
tree, a squashfs image (squashfuse_ll) and a gpufs pack (`gpufsd pack`, default 16 MiB
groups). For each mean file size (--sides: the longest side of the generated images,
560 px ~80 KB, 720 px ~130 KB) and each loader width (DataLoader workers), one cold epoch
(page cache dropped, fresh mount) of an unmodified torchvision ImageFolder + DataLoader
reading raw bytes runs over each; gpufsd runs with its default options and its disk tier
off (--no-disk-cache, said although a local source has none unless asked for). The bound
is the volume's bandwidth over the mean file size.

Besides files/s it reports what the volume did during the epoch, from the loop device's
/sys/block/*/stat: requests completed and their mean size (the volume charges one I/O per
request, so small requests make an epoch IOPS-bound), and where the epoch's time went,
from the device sampled every 20 ms: the start (epoch start to the first read on the
volume), the volume's span (first to last read) and the tail (last read to the epoch's
end, the loader consuming what it could not while the volume read); and, for every peer,
"consumed while reading": the fraction of the epoch's files the loader had returned (its
--progress lines, one per batch) by the last time the volume's sectors read grew. For
gpufs a second epoch follows, all from gpufsd's memory: the loader's own time for the
epoch, which no storage can go below. gpufs runs --rounds times per cell and the median
epoch is reported; the baselines, ten times slower, once.
Prints one table; writes results.json to --out.
"""
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (Sampler, SlowVolume, add_options, arg_parser, chart_text,  # noqa: E402
                      loader_epochs, need_root, pyplot, reading_split, sample_tree,
                      save_results, sh, tree_bytes, version_line, versions)
from benchmount import (GPUFSD, GPUFSD_EPILOG, gpufs_mounted,  # noqa: E402
                        gpufs_tier_argv, squashfuse_mounted)


def sample(cache, files, classes, side):
    """A generated tree of `files` JPEGs whose longest side is at most `side`, made once."""
    return sample_tree(cache, files, classes, side, name=f"tree-{files}-{classes}-{side}")


def device_stat(loop):
    """(reads completed, sectors read) of the loop device."""
    with open(f"/sys/block/{os.path.basename(loop)}/stat") as f:
        fields = [int(x) for x in f.read().split()]
    return fields[0], fields[2]


class Cell:
    """One dataset on one volume: the three ways to read it, one cold epoch each. gpufs
    mounts with `tier_argv` (its disk tier off)."""

    def __init__(self, volume, tree, pack, image, tier_argv):
        self.volume, self.tree, self.pack, self.image = volume, tree, pack, image
        self.tier_argv = tier_argv

    def throttled(self):
        return lambda: self.volume.enter(os.getpid())

    def epoch(self, root, workers, warm=False):
        """The first epoch of a fresh loader over `root` (page cache dropped), the volume's
        sectors read sampled every 20 ms throughout; with `warm`, a second one follows."""
        before = device_stat(self.volume.loop)
        progress_dir = tempfile.mkdtemp(prefix="gpufs-cold-progress-")
        progress = os.path.join(progress_dir, "lines")
        try:
            with Sampler(lambda: device_stat(self.volume.loop)[1]) as sampler:
                epochs = loader_epochs(root, "raw", 2 if warm else 1, workers=workers,
                                       preexec_fn=self.throttled(),
                                       extra=["--blkio-group", self.volume.group,
                                              "--device", self.volume.device,
                                              "--progress", progress])
            samples = sampler.samples
            e = epochs[0]
            e.update(reading_split(samples, progress, e))
        finally:
            shutil.rmtree(progress_dir)
        if warm:  # the loader's own time: every file already in gpufsd's memory
            e["loader_s"] = epochs[1]["seconds"]
        after = device_stat(self.volume.loop)
        reads = after[0] - before[0]
        e["device_reads"] = reads
        e["request_kib"] = (after[1] - before[1]) * 512 / 1024 / reads if reads else 0
        e.update(time_split(samples, e["monotonic_start"], e["seconds"]))
        return e

    def run(self, peer, workers):
        if peer == "tree":
            return self.epoch(self.tree, workers)
        prefix = f"gpufs-cold-{peer}-"
        if peer == "squashfuse":
            with squashfuse_mounted(self.image, prefix, self.throttled()) as mnt:
                return self.epoch(mnt, workers)
        with gpufs_mounted(self.pack, *self.tier_argv, prefix=prefix,
                           preexec_fn=self.throttled(), quiet=False) as mnt:
            return self.epoch(mnt, workers, warm=True)


def time_split(samples, start, seconds):
    """The epoch's start (to the volume's first read), the volume's span and the tail."""
    moving = [t for (t, sectors), (_, earlier) in zip(samples[1:], samples)
              if sectors > earlier and start < t <= start + seconds + 0.02]
    if not moving:
        return {"start_s": 0.0, "volume_s": 0.0, "tail_s": seconds}
    first, last = max(moving[0] - 0.02, start), moving[-1]
    return {"start_s": first - start, "volume_s": last - first,
            "tail_s": max(0.0, start + seconds - last)}


def ceiling(e):
    """The fraction of the bound a loader can reach that spends `loader_s` on the epoch's
    files once they are in memory: in random order nearly every file's bytes arrive only
    as the volume finishes, so the loader's own time follows the volume's."""
    volume_s = e["files"] / e["bound"]
    return volume_s / (volume_s + e["loader_s"])


def median_epoch(runs):
    """The run with the median files/s (the upper middle of an even count)."""
    return sorted(runs, key=lambda e: e["files_per_s"])[len(runs) // 2]


def main():
    parser = arg_parser(__doc__, GPUFSD_EPILOG)
    add_options(parser, files=(8000, "JPEGs per dataset"), classes=40)
    parser.add_argument("--sides", default="560,720",
                        help="longest sides of the generated images, one dataset each")
    parser.add_argument("--widths", default="2,4,8", help="DataLoader workers, one run each")
    parser.add_argument("--peers", default="tree,squashfuse,gpufs",
                        help="ways of reading the volume, comma-separated: tree, squashfuse, "
                             "gpufs")
    add_options(parser, iops=120, mbps=150)
    parser.add_argument("--rounds", type=int, default=3, help="cold epochs of gpufs per cell")
    add_options(parser, cache=("/var/tmp/gpufs-slow-disk-src",
                               "where the generated trees are kept between runs"),
                out=("/var/tmp/gpufs-cold-epoch-results",
                     "where results.json and the charts are written"))
    args = parser.parse_args()
    need_root("cold_epoch", "loop device, cgroups, drop_caches")
    os.makedirs(args.cache, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    widths = [int(w) for w in args.widths.split(",")]
    peers = args.peers.split(",")
    # A local source has no disk tier unless asked for; off is said anyway, to be sure.
    tier_argv, tier = gpufs_tier_argv(GPUFSD, "off", None)
    print("gpufs " + versions("gpufs")["gpufs"] + ", "
          + version_line("dpkg-query", "-W", "-f", "squashfuse ${Version}", "squashfuse"),
          flush=True)
    print(f"volume {args.iops} IOPS, {args.mbps} MB/s; {args.files} files per dataset; raw "
          f"bytes, default gpufsd options, disk tier: {tier}; page cache dropped before each "
          f"cold epoch; per cell the median of {args.rounds} cold epochs of gpufs, one of the "
          "others", flush=True)
    results = []
    for side in (int(s) for s in args.sides.split(",")):
        source = sample(args.cache, args.files, args.classes, side)
        files, data_bytes = tree_bytes(source)
        mean = data_bytes / files
        bound = args.mbps * 1e6 / mean
        volume = SlowVolume(3 * data_bytes // 1_000_000 + 300, args.iops, args.mbps)
        try:
            tree = os.path.join(volume.mnt, "tree")
            shutil.copytree(source, tree)
            pack = os.path.join(volume.mnt, "pack")
            sh(GPUFSD, "pack", tree, pack)
            image = os.path.join(volume.mnt, "tree.sqfs")
            if "squashfuse" in peers:
                sh("mksquashfs", tree, image, "-noappend", "-quiet")
            cell = Cell(volume, tree, pack, image, tier_argv)
            print(f"\nmean {mean / 1000:.0f} KB ({mean / 1024:.0f} KiB), bound "
                  f"{bound:.0f} files/s", flush=True)
            for workers in widths:
                for peer in peers:
                    rounds = args.rounds if peer == "gpufs" else 1
                    e = median_epoch([cell.run(peer, workers) for _ in range(rounds)])
                    row = {"side": side, "mean_bytes": mean, "bound": bound,
                           "workers": workers, "peer": peer, **e}
                    results.append(row)
                    print(f"  {workers} workers  {peer:11} {e['files_per_s']:7.0f} files/s "
                          f"{e['files_per_s'] / bound:5.2f} x bound   {e['device_reads']:6d} "
                          f"reads of {e['request_kib']:6.0f} KiB   start {e['start_s']:4.2f} s, "
                          f"volume {e['volume_s']:5.2f} s, tail {e['tail_s']:4.2f} s, "
                          f"first batch {e['first_batch_s']:.2f} s, "
                          f"consumed while reading {e['consumed_while_reading']:.2f}"
                          + (f", loader alone {e['loader_s']:.2f} s" if "loader_s" in e else ""),
                          flush=True)
        finally:
            volume.close()
    print_table(results, peers, tier)
    save_results(args.out, results, tell=False)
    chart(results, peers, args.out)
    print(f"\nwrote {args.out}/results.json, chart.txt and cold_epoch.png")


def chart(results, peers, out):
    """chart.txt always; cold_epoch.png: per mean size, each peer's fraction of the bound by
    loader width, with the goal and what the loader's own time leaves (the ceiling)."""
    sizes = sorted({r["mean_bytes"] for r in results})
    lines = []
    for mean in sizes:
        lines.append((f"mean {mean / 1000:.0f} KB, fraction of the bound x 100:", None))
        for r in (r for r in results if r["mean_bytes"] == mean):
            lines.append((f"  {r['workers']} workers {r['peer']}",
                          100 * r["files_per_s"] / r["bound"]))
    chart_text(out, lines)
    plt = pyplot()
    fig, axes = plt.subplots(1, len(sizes), figsize=(5.2 * len(sizes), 3.9), squeeze=False)
    for ax, mean in zip(axes.flat, sizes):
        rows = [r for r in results if r["mean_bytes"] == mean]
        widths = sorted({r["workers"] for r in rows})
        bar = 0.8 / len(peers)
        for i, peer in enumerate(peers):
            cells = {r["workers"]: r for r in rows if r["peer"] == peer}
            xs = [n - 0.4 + bar * (i + 0.5) for n in range(len(widths))]
            ax.bar(xs, [cells[w]["files_per_s"] / cells[w]["bound"] if w in cells else 0
                        for w in widths], bar, label=peer)
        gpufs = {r["workers"]: r for r in rows if r["peer"] == "gpufs" and "loader_s" in r}
        if gpufs:
            ax.plot([n for n, w in enumerate(widths) if w in gpufs],
                    [ceiling(gpufs[w]) for w in widths if w in gpufs], "k_", markersize=28,
                    label="loader's ceiling")
        ax.axhline(0.85, color="grey", linestyle="--", linewidth=0.8, label="goal 0.85")
        ax.set_xticks(range(len(widths)), [f"{w} workers" for w in widths])
        ax.set_ylim(0, 1.15)
        ax.set_ylabel("fraction of the volume's bound")
        ax.set_title(f"mean {mean / 1000:.0f} KB, bound {rows[0]['bound']:,.0f} files/s",
                     fontsize=10)
        ax.legend(fontsize=7, ncol=3, loc="upper center")
    fig.suptitle("A cold epoch on a 120 IOPS / 150 MB/s volume, torchvision ImageFolder, raw")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "cold_epoch.png"), dpi=100)


def print_table(results, peers, tier):
    others = [p for p in peers if p != "gpufs"]
    print(f"\ngpufs disk tier: {tier}; page cache dropped before each cold epoch")
    print(f"\n{'mean KB':>8}{'workers':>8}  " + "".join(f"{p:>12}" for p in peers)
          + "  (files/s, x bound)  " + "".join(f"{p:>11}" for p in peers)
          + "  (consumed while reading)" + "".join(f"{'x ' + p:>14}" for p in others))
    cells = {}
    for r in results:
        cells.setdefault((r["mean_bytes"], r["workers"]), {})[r["peer"]] = r
    for (mean, workers), by in sorted(cells.items()):
        line = f"{mean / 1000:8.0f}{workers:8d}  "
        for p in peers:
            r = by.get(p)
            line += f"{r['files_per_s']:6.0f} {r['files_per_s'] / r['bound']:4.2f} " if r else " " * 12
        line += " " * 21
        for p in peers:
            r = by.get(p)
            line += f"{r['consumed_while_reading']:11.2f}" if r else " " * 11
        line += " " * 26
        g = by.get("gpufs")
        for p in peers:
            if p != "gpufs" and g and p in by:
                line += f"{g['files_per_s'] / by[p]['files_per_s']:13.1f}x"
        if g:
            line += f"   gpufs: start {g['start_s']:.2f} s, volume {g['volume_s']:.2f} s, " \
                    f"tail {g['tail_s']:.2f} s; loader alone {g['loader_s']:.2f} s, " \
                    f"{ceiling(g):.2f} x bound at most"
        print(line)
    print("\nconsumed while reading: the fraction of the epoch's files the loader had "
          "returned when the volume's last\nsector arrived (the last time the loop device's "
          "sectors read grew, sampled every 20 ms).")


if __name__ == "__main__":
    main()
