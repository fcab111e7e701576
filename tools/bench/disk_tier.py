#!/usr/bin/python3
"""Epochs 1-3 of an unmodified torchvision loader with gpufs's disk tier, against the ways
people read a remote or slow dataset today.

    sudo /usr/bin/python3 tools/bench/disk_tier.py [--files 8000] [--modes decode,raw]
                              [--slow-modes raw] [--scenarios cloud,slow] [--rounds 1]

One generated dataset of real JPEGs (benchlib.sample_tree) is used in two scenarios; every
peer is a fresh mount with empty caches, and the page cache is dropped before every epoch
(each epoch is one run of tools/bench/epoch_loader.py: ImageFolder + DataLoader, 4 workers,
batch 32, shuffled anew each epoch, decoding with RandomResizedCrop(160) + ToTensor, or
reading raw bytes: --modes for the cloud, --slow-modes for the slow volume, where a
decoding epoch of the tree takes minutes). Every folder a peer writes (disk tier, rclone's
cache, the copy) is on the local disk under --work.

cloud   An nginx origin serves the dataset twice, as a gpufs pack (`gpufsd pack`, 16 MiB
        groups) under pack/ and as the plain tree (one object per file, with listings)
        under tree/, behind an nginx FaultProxy that delays every request (--delay-ms, 20)
        and limits each connection's rate (--rate-mb, 80 MB/s, as remote_store.py's
        emulated link). Peers:
          gpufs         gpufsd mount http://.../pack/ --cache-size <--budget of the pack>
                        --disk-cache <fresh folder>
          rclone        rclone mount :http: of tree/ --vfs-cache-mode full (files kept in
                        its cache folder and read back from there), read-only
          copied tree   the tree downloaded first (rclone copy over the same link, 32
                        transfers; its time is reported), then the epochs on the copy
slow    The pack and the tree on benchlib.SlowVolume (ext4 on a loop device, reads
        throttled by cgroup v1 blkio to --iops / --mbps; the loader and gpufsd are both in
        the throttled group). Peers: the tree itself, gpufsd with --cache-size at --budget
        and no disk tier (a local source has none unless asked for), and the same with
        --disk-cache on a folder of the fast local disk.

For gpufs each epoch also records the daemon's counters (its stats xattr: source requests
and bytes, pinned hits and member reads, the tier's hits, slice hits, fills, writes); for
rclone and the copy, the requests that reached the proxy. With --rounds N every peer runs N
times (in turn with the others) and the median of each epoch is shown.

Prints a table per scenario and mode with ratios (cloud: gpufs / copied tree and gpufs /
rclone; slow: tier / no tier and tier / tree), and writes results.json, chart.txt and
disk_tier.png to --out (a new temporary folder unless given), with the daemons' logs under
--out/logs. Every server, mount and volume it starts is stopped on the way out, on an
error or Ctrl-C too.
"""
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (SlowVolume, add_options, arg_parser, begin_run,  # noqa: E402
                      chart_text, cloud_link, drop_caches, install_bench_deps, loader_epochs,
                      middle, need_root, packed_work, print_dataset, pyplot, save_results,
                      tree_bytes, versions)
from benchmount import GPUFSD, GPUFSD_EPILOG, FuseMount, gpufs_fuse_mount, mount_has  # noqa: E402
from slow_disk import budget_for  # noqa: E402
from servers import nginx  # noqa: E402
EPOCHS = 3
CLOUD_PEERS = ("gpufs", "rclone", "copied tree")
SLOW_PEERS = ("gpufs + tier", "gpufs, no tier", "tree")

RCLONE_FLAGS = [
    "--read-only", "--vfs-cache-mode", "full",  # whole files kept in --cache-dir
    "--vfs-cache-max-age", "24h",
    "--dir-cache-time", "1h", "--attr-timeout", "1h",  # one listing for all epochs
    "--checkers", "32",                          # the listing's HEADs, 32 at a time
]
COPY_FLAGS = ["--transfers", "32", "--checkers", "32"]


class ListedOrigin(nginx.NginxOrigin):
    """NginxOrigin with folder listings, which rclone's HTTP backend reads to list."""

    def _http_body(self):
        return super()._http_body().replace("autoindex off;", "autoindex on;")


# --- epochs ---------------------------------------------------------------------------

def run_epochs(root, args, mode, proxy=None, volume=None):
    """EPOCHS epochs over root, each in a fresh loader process (page cache dropped before
    each); one row per epoch, with the requests that reached `proxy` during it."""
    rows = []
    extra = ["--blkio-group", volume.group, "--device", volume.device] if volume else []
    preexec = (lambda: volume.enter(os.getpid())) if volume else None
    for epoch in range(1, EPOCHS + 1):
        before = proxy.requests() if proxy else 0
        row = loader_epochs(root, mode, epochs=1, workers=args.workers, preexec_fn=preexec,
                            extra=extra + ["--first-epoch", str(epoch)], timeout=3600)[0]
        if proxy:
            row["requests"] = proxy.requests() - before
        rows.append(row)
        print(f"    epoch {epoch}: {row['files_per_s']:7.0f} files/s" + summary(row),
              flush=True)
    return rows


def summary(row):
    """The counters of one epoch in a few words."""
    g = row.get("gpufs")
    if not g:
        return f"  ({row['requests']} requests)" if "requests" in row else ""
    words = [f"hits {g['hits']}", f"member reads {g['member_reads']}"]
    if "io" in g:
        words.append(f"source {g['io']['requests']} req {g['io']['bytes'] / 1e6:.0f} MB")
    if "tier" in g:
        t = g["tier"]
        words.append(f"tier hits {t['hits']} slices {t['slice_hits']} fills {t['fills']} "
                     f"writes {t['writes']} misses {t['misses']}")
    if row.get("disk_bytes"):
        words.append(f"volume {row['disk_bytes'] / 1e6:.0f} MB")
    return "  (" + ", ".join(words) + ")"


def gpufs_mount(work, name, source, budget, tier, volume=None):
    """A fresh gpufsd mount of `source` (foreground, stopped by pid); with a `volume`, the
    daemon runs in its throttled group from its first read."""
    mnt = work.fresh(f"mnt-{name}")
    argv = [GPUFSD, "mount", "-f", source, mnt, "--cache-size", str(budget)]
    if tier:
        argv += ["--disk-cache", work.fresh(f"tier-{name}")]
    elif source.startswith("http"):
        argv.append("--no-disk-cache")
    if volume:
        procs = os.path.join(volume.group, "cgroup.procs")
        argv = ["sh", "-c", 'echo $$ > "$0" && exec "$@"', procs] + argv
    return gpufs_fuse_mount(argv, mnt)


def cloud_peer(peer, work, args, mode, proxy, budget):
    """One fresh peer of the cloud scenario, its epochs; a result row."""
    row = {"peer": peer, "mode": mode}
    if peer == "gpufs":
        with gpufs_mount(work, "gpufs", proxy.url + "/pack/", budget, True) as m:
            row["epochs"] = run_epochs(m.mnt, args, mode, proxy)
    elif peer == "rclone":
        mnt = work.fresh("mnt-rclone")
        argv = ["rclone", "mount", ":http:", mnt, "--http-url", proxy.url + "/tree/",
                "--cache-dir", work.fresh("rclone-cache"), *RCLONE_FLAGS]
        with FuseMount("rclone", argv, mnt) as m:
            row["epochs"] = run_epochs(m.mnt, args, mode, proxy)
    elif peer == "copied tree":
        copy = work.fresh("copy")
        drop_caches()
        before, start = proxy.requests(), time.perf_counter()
        subprocess.run(["rclone", "copy", ":http:", copy, "--http-url", proxy.url + "/tree/",
                        *COPY_FLAGS], check=True, capture_output=True)
        os.sync()
        row["copy_seconds"] = time.perf_counter() - start
        row["copy_requests"] = proxy.requests() - before
        print(f"    downloaded in {row['copy_seconds']:.1f} s "
              f"({row['copy_requests']} requests)", flush=True)
        try:
            row["epochs"] = run_epochs(copy, args, mode, proxy)
        finally:
            shutil.rmtree(copy)
    else:
        raise ValueError(peer)
    return row


def slow_peer(peer, work, args, mode, volume, budget):
    """One fresh peer of the slow-volume scenario, its epochs; a result row."""
    row = {"peer": peer, "mode": mode}
    if peer == "tree":
        row["epochs"] = run_epochs(os.path.join(volume.mnt, "tree"), args, mode,
                                   volume=volume)
        return row
    pack = os.path.join(volume.mnt, "pack")
    with gpufs_mount(work, "slow", pack, budget, peer == "gpufs + tier", volume) as m:
        row["epochs"] = run_epochs(m.mnt, args, mode, volume=volume)
    return row


def median_row(runs):
    """One row whose epochs are the median (by files/s) of each epoch over the rounds;
    each epoch keeps every round's files/s under "rounds"."""
    epochs = []
    for i in range(EPOCHS):
        epochs.append(dict(middle([r["epochs"][i] for r in runs]),
                           rounds=[r["epochs"][i]["files_per_s"] for r in runs]))
    row = dict(runs[0], epochs=epochs)
    if "copy_seconds" in row:
        row["copy_seconds"] = statistics.median(r["copy_seconds"] for r in runs)
    return row


def rounds_of(peers, run_one, rounds):
    """Each peer run `rounds` times, in turn with the others; {peer: median row}."""
    runs = {peer: [] for peer in peers}
    for n in range(rounds):
        for peer in peers:
            print(f"  {peer} (round {n + 1}):", flush=True)
            runs[peer].append(run_one(peer))
    return {peer: median_row(r) for peer, r in runs.items()}


# --- scenarios --------------------------------------------------------------------------

def cloud(args, stack, work, served, pack_bytes, result):
    origin = stack.enter_context(ListedOrigin(served))
    proxy = cloud_link(stack, origin.url, args)
    budget = budget_for(os.path.join(served, "pack"), args.budget)
    result["cloud"] = {"about": f"nginx origin behind a proxy: +{args.delay_ms} ms per "
                                f"request, {args.rate_mb:.0f} MB/s per connection",
                       "delay_ms": args.delay_ms, "budget_bytes": budget,
                       "pack_bytes": pack_bytes, "rows": {}}
    print(f"\ncloud: {result['cloud']['about']}; gpufs budget {budget / 2**20:.0f} MiB",
          flush=True)
    for mode in args.modes:
        print(f" {mode}:", flush=True)
        result["cloud"]["rows"][mode] = rounds_of(
            CLOUD_PEERS, lambda p: cloud_peer(p, work, args, mode, proxy, budget), args.rounds)


def slow(args, stack, work, served, data_bytes, result):
    pack, tree = os.path.join(served, "pack"), os.path.join(served, "tree")
    volume = SlowVolume(2 * data_bytes // 1_000_000 + 300, args.iops, args.mbps)
    stack.callback(volume.close)
    start = time.perf_counter()
    shutil.copytree(os.path.realpath(tree), os.path.join(volume.mnt, "tree"))
    shutil.copytree(pack, os.path.join(volume.mnt, "pack"))
    os.sync()
    budget = budget_for(pack, args.budget)
    result["slow"] = {"about": f"ext4 on a loop device, reads throttled to {args.iops} IOPS "
                               f"and {args.mbps} MB/s", "budget_bytes": budget, "rows": {}}
    print(f"\nslow: {result['slow']['about']} (filled in {time.perf_counter() - start:.0f} s);"
          f" gpufs budget {budget / 2**20:.0f} MiB", flush=True)
    for mode in args.slow_modes:
        print(f" {mode}:", flush=True)
        result["slow"]["rows"][mode] = rounds_of(
            SLOW_PEERS, lambda p: slow_peer(p, work, args, mode, volume, budget), args.rounds)


# --- output -----------------------------------------------------------------------------

# Per scenario: the peer whose ratios are shown, and (peer, column heading) for each.
RATIOS = {"cloud": ("gpufs", (("copied tree", "x copied"), ("rclone", "x rclone"))),
          "slow": ("gpufs + tier", (("gpufs, no tier", "x no tier"), ("tree", "x tree")))}


def counters(e):
    """The columns of counters for one epoch row: source or volume, and the tier."""
    g = e.get("gpufs", {})
    io, tier = g.get("io"), g.get("tier")
    source = (f"{io['requests']:>7} {io['bytes'] / 1e6:7.0f}" if io else
              f"{e['requests']:>7} {'':7}" if "requests" in e else
              f"{'':7} {e['disk_bytes'] / 1e6:7.0f}" if e.get("disk_bytes") else f"{'':15}")
    mem = f"{g['hits']:>6} {g['member_reads']:>7}" if g else f"{'':14}"
    tiers = (f"{tier['hits']:>5} {tier['slice_hits']:>7} {tier['fills']:>6} {tier['writes']:>7}"
             if tier else "")
    return f"{source}  {mem}  {tiers}"


def print_tables(result):
    files, mean = result["files"], result["data_bytes"] / result["files"]
    print(f"\n{files} files, mean {mean / 1e3:.0f} KB; {result['workers']} loader workers; "
          f"files/s per epoch, page cache dropped before each; every mount fresh, a gpufs "
          "disk tier in a new empty folder: epoch 1 is cold, later epochs may read the tier")
    for scenario in ("cloud", "slow"):
        if scenario not in result:
            continue
        s = result[scenario]
        ours, others = RATIOS[scenario]
        print(f"\n{scenario}: {s['about']}; gpufs --cache-size {s['budget_bytes'] / 2**20:.0f}"
              " MiB")
        head = "".join(f"{label:>11}" for _, label in others)
        print(f"  {'mode':7}{'peer':16}{'epoch':>5}{'files/s':>9}{head}{'scan s':>8}   "
              f"{'req':>7} {'MB':>7}  {'hits':>6} {'members':>7}  {'tier':>5} {'slices':>7} "
              f"{'fills':>6} {'writes':>7}")
        for mode, rows in s["rows"].items():
            for peer, row in rows.items():
                for e in row["epochs"]:
                    fps = e["files_per_s"]
                    cells = "".join(
                        f"{fps / rows[o]['epochs'][e['epoch'] - 1]['files_per_s']:11.2f}"
                        if peer == ours and o in rows else f"{'':11}" for o, _ in others)
                    print(f"  {mode:7}{peer:16}{e['epoch']:>5}{fps:9.0f}{cells}"
                          f"{e['scan_seconds']:8.1f}   {counters(e)}")
            totals = ", ".join(f"{peer} {seconds:.0f} s" for peer, seconds in
                               ((p, sum(e["seconds"] for e in r["epochs"])
                                 + r.get("copy_seconds", 0)) for p, r in rows.items()))
            print(f"  {mode}: {EPOCHS} epochs took {totals}")
            for peer, row in rows.items():
                if "copy_seconds" in row:
                    print(f"  {mode}: {peer}: downloaded before epoch 1 in "
                          f"{row['copy_seconds']:.1f} s ({row['copy_requests']} requests; "
                          "in the total above)")


def chart(result, out):
    """chart.txt always; disk_tier.png: one panel per scenario and mode, bars per epoch."""
    panels = [(scenario, mode, rows) for scenario in ("cloud", "slow") if scenario in result
              for mode, rows in result[scenario]["rows"].items()]
    lines = []
    for scenario, mode, rows in panels:
        lines.append((f"{scenario}, {mode}:", None))
        for peer, row in rows.items():
            for e in row["epochs"]:
                lines.append((f"  {peer} epoch {e['epoch']}", e["files_per_s"]))
    chart_text(out, lines, "files/s per epoch")
    plt = pyplot()
    cols = min(2, len(panels))
    grid = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(grid, cols, figsize=(5.2 * cols, 3.9 * grid), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax, (scenario, mode, rows) in zip(axes.flat, panels):
        width = 0.8 / len(rows)
        for i, (peer, row) in enumerate(rows.items()):
            xs = [e["epoch"] - 0.4 + width * (i + 0.5) for e in row["epochs"]]
            ax.bar(xs, [e["files_per_s"] for e in row["epochs"]], width, label=peer)
            if "copy_seconds" in row:
                ax.annotate(f"after a {row['copy_seconds']:.0f} s download",
                            (xs[0], row["epochs"][0]["files_per_s"] * 0.97), ha="center",
                            va="top", rotation=90, color="white", fontsize=7)
        ax.set_xticks(range(1, EPOCHS + 1), [f"epoch {n}" for n in range(1, EPOCHS + 1)])
        title = (f"HTTP store, +{result['cloud']['delay_ms']} ms per request"
                 if scenario == "cloud" else "slow volume") + f", {mode}"
        ax.set_title(title, fontsize=10)
        ax.set_ylabel("images/s (page cache dropped)")
        ax.set_ylim(top=ax.get_ylim()[1] * 1.15)  # room for the legend above the bars
        ax.legend(fontsize=7, ncol=3, loc="upper center")
    fig.suptitle(f"gpufs disk tier: torchvision ImageFolder, {result['files']:,} JPEGs, "
                 f"{result['workers']} workers")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "disk_tier.png"), dpi=100)


# --- the run ----------------------------------------------------------------------------

def check_tools(scenarios):
    reasons = [f"missing: {t} (tools/install_deps.sh bench)"
               for t in ("fusermount3", "rclone") if not shutil.which(t)]
    if "cloud" in scenarios and nginx.FaultProxy.skip_reason():
        reasons.append(nginx.FaultProxy.skip_reason())
    if "slow" in scenarios and not os.path.isdir("/sys/fs/cgroup/blkio"):
        reasons.append("no cgroup v1 blkio hierarchy for the slow volume")
    if reasons:
        sys.exit("disk_tier: " + "; ".join(reasons))
    if not mount_has("--disk-cache"):
        sys.exit(f"disk_tier: {GPUFSD} has no --disk-cache; build a newer one")


def parse_args():
    parser = arg_parser(__doc__, GPUFSD_EPILOG)
    add_options(parser, files=8000, classes=40, workers=4)
    parser.add_argument("--modes", default="decode,raw",
                        help="the cloud's loader modes: decode, raw or both (comma)")
    parser.add_argument("--slow-modes", default="raw",
                        help="the slow volume's modes (decoding, the tree and gpufs without "
                             "the tier run at ~40 files/s there: ~15 min more for 8,000 files)")
    parser.add_argument("--scenarios", default="cloud,slow", help="cloud, slow or both")
    parser.add_argument("--rounds", type=int, default=1,
                        help="runs of each peer (fresh mounts); the median epoch is shown")
    parser.add_argument("--budget", type=float, default=0.25,
                        help="gpufs --cache-size as a fraction of the pack's bytes")
    add_options(parser, delay_ms=20, rate_mb=80, iops=(120, "slow volume: read IOPS"),
                mbps=(150, "slow volume: read MB/s"), cache="/var/tmp/gpufs-bench-src")
    parser.add_argument("--work", default="/var/tmp",
                        help="the local disk the peers' caches and copies go to")
    add_options(parser, out=None)
    args = parser.parse_args()
    args.modes, args.slow_modes = args.modes.split(","), args.slow_modes.split(",")
    args.scenarios = args.scenarios.split(",")
    args.out = args.out or tempfile.mkdtemp(prefix="gpufs-disk-tier-results-")
    return args


def main():
    args = parse_args()
    need_root("disk_tier", "FUSE mounts, loop device, cgroups, drop_caches")
    install_bench_deps()
    check_tools(args.scenarios)
    tree, files, data_bytes = begin_run(args.cache, args.out, args.files, args.classes)
    result = {"files": files, "data_bytes": data_bytes, "workers": args.workers,
              "epochs": EPOCHS, "budget": args.budget,
              "versions": versions("gpufs", "rclone", "nginx"),
              "config": {"rclone mount": RCLONE_FLAGS, "rclone copy": COPY_FLAGS}}
    print_dataset(files, data_bytes)
    with contextlib.ExitStack() as stack:
        start = time.perf_counter()
        work, served = packed_work(stack, GPUFSD, tree, "gpufs-bench-tier-", args.work, args.out)
        os.symlink(tree, os.path.join(served, "tree"))
        pack_files, pack_bytes = tree_bytes(os.path.join(served, "pack"))
        result.update(pack_bytes=pack_bytes, pack_files=pack_files)
        print(f"packed in {time.perf_counter() - start:.0f} s: {pack_files} files, "
              f"{pack_bytes / 1e6:.0f} MB", flush=True)
        if "cloud" in args.scenarios:
            cloud(args, stack, work, served, pack_bytes, result)
        if "slow" in args.scenarios:
            slow(args, stack, work, served, data_bytes, result)
    print_tables(result)
    save_results(args.out, result, tell=False)
    chart(result, args.out)
    print(f"\nwrote {args.out}/results.json, chart.txt and disk_tier.png")


if __name__ == "__main__":
    main()
