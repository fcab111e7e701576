#!/usr/bin/python3
"""Archives mounted in place: one dataset as tar, zip (stored, deflated) and .tar.gz.

    sudo /usr/bin/python3 tools/bench/archives.py [--files 6000] [--side 560] [--rounds 3]
        [--slow [--skip-local]] [--iops 120] [--mbps 150] [--kinds tar,zip-stored,...]

One generated dataset of real JPEGs (longest side --side: 560 px, ~80-110 KB each) is
archived five ways in one folder: an uncompressed tar (`tar cf`), a zip of stored members
(`zip -0 -r -q`), a zip of deflated members (`zip -r -q`), a .tar.gz (`tar cf - | pigz -6`,
gzip -6 where pigz is missing) and, where bgzip is installed, a tar compressed by bgzip
(blocks of 64 KiB, each its own gzip member). Each is served in place by
`gpufsd mount ARCHIVE MNT`, with its disk tier off (--no-disk-cache) and a --cache-size
that holds the whole dataset.

Per archive and round (the archives take turns within a round):
  first listing   saved index removed (beside the archive and in the private cache, which
                  is $XDG_CACHE_HOME/gpufs with XDG_CACHE_HOME a fresh folder of this run),
                  page cache dropped; from the mount command's start until it returns with
                  the mount ready: for a .tar.gz the whole archive is inflated here
  cold epoch      every file read once, shuffled, by --threads reader threads, right after
                  that mount: files/s and MB/s, and the daemon's CPU seconds meanwhile
  second epoch    the same again in another order, the page cache dropped first (level 1:
                  the daemon's pinned cache is untouched), so every read is a READ the
                  daemon answers from its pinned groups; the source bytes it read meanwhile
                  should be 0
  remount         unmounted, page cache dropped, mounted again with the index the first
                  mount saved: the time until ready (the index's reuse)
The saved index's size (the index and its .plan) and the first listing's time are also
given per million files. Each figure is the median of --rounds; the ratios are to the
tar's median in the same run.

With --slow the same runs again with the archives on an emulated cloud HDD volume (ext4 on
a loop device, reads throttled by a cgroup v1 blkio group, as slow_disk.py), where the tar
and the zip should be bound by the volume's I/O and the .tar.gz by the CPU inflating it.
Under its table: the read requests the volume served in each kind's cold epoch and their
mean size (the throttle counts requests). --skip-local runs the slow volume alone.

Goals the table makes checkable: the stored zip's cold epoch within 10% of the tar's; the
.tar.gz's cold epoch at least 0.5x the tar's (2 cores); every kind's second epoch at the
tar's rate. Prints one table per volume; writes results.json (and the daemons' logs) to
--out.
"""
import contextlib
import glob
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (SlowVolume, add_options, arg_parser, cpu_seconds,  # noqa: E402
                      drop_caches, files_of, need_root, read_shuffled, sample_tree,
                      save_results, tree_bytes, unwind_on_signals, version_line, versions)
from benchmount import (GPUFSD, GPUFSD_EPILOG, gpufs_mounted, gpufs_pid,  # noqa: E402
                        gpufs_stats, is_mounted)

KINDS = ("tar", "zip-stored", "zip-deflated", "tar.gz", "bgzip")


def compressors():
    """{kind: (shell pipeline that writes the archive from the class folders, the tool's
    version)} for the kinds this machine can make: each command runs in the tree, with
    $CLASSES the class folders and $OUT the archive's path."""
    made = {
        "tar": ('tar cf "$OUT" $CLASSES', version_line("tar", "--version")),
        "zip-stored": ('zip -0 -r -q "$OUT" $CLASSES', zip_version()),
        "zip-deflated": ('zip -r -q "$OUT" $CLASSES', zip_version()),
    }
    if shutil.which("pigz"):
        made["tar.gz"] = ('tar cf - $CLASSES | pigz -6 > "$OUT"', version_line("pigz", "--version"))
    else:
        made["tar.gz"] = ('tar cf - $CLASSES | gzip -6 > "$OUT"', version_line("gzip", "--version"))
    if shutil.which("bgzip"):
        made["bgzip"] = ('tar cf - $CLASSES | bgzip -c -l 6 -@ 2 > "$OUT"',
                         version_line("bgzip", "--version"))
    return made


def zip_version():
    """Info-ZIP's version line ("This is Zip 3.0 ..."), which `zip -v` does not print first."""
    try:
        said = subprocess.run(["zip", "-v"], capture_output=True, text=True).stdout
    except OSError:
        return ""
    return next((line.strip() for line in said.splitlines() if line.startswith("This is Zip")),
                "")


ARCHIVE_NAME = {"tar": "data.tar", "zip-stored": "data-stored.zip",
                "zip-deflated": "data-deflated.zip", "tar.gz": "data.tar.gz",
                "bgzip": "data-bgzip.tar.gz"}


def make_archives(tree, folder, kinds, tools):
    """Each of `kinds` made from `tree` into `folder`: {kind: {"path", "bytes", "make_s",
    "command", "tool"}}."""
    classes = " ".join(sorted(os.listdir(tree)))
    made = {}
    for kind in kinds:
        path = os.path.join(folder, ARCHIVE_NAME[kind])
        command, tool = tools[kind]
        start = time.perf_counter()
        subprocess.run(["bash", "-c", "set -eo pipefail; " + command],
                       cwd=tree, check=True, env=dict(os.environ, OUT=path, CLASSES=classes))
        made[kind] = {"path": path, "bytes": os.path.getsize(path),
                      "make_s": time.perf_counter() - start,
                      "command": command.replace("$CLASSES", "CLASSES").replace('"$OUT"', "OUT"),
                      "tool": tool}
        print(f"  {kind:13} {made[kind]['bytes'] / 1e6:8.1f} MB in {made[kind]['make_s']:6.1f} s"
              f"  ({made[kind]['command']}; {tool})", flush=True)
    return made


def index_files(archive, cache_dir):
    """The saved index of `archive` and its plan, wherever they are: beside it, and in the
    private cache (ARCHIVE-HASH.gpufs-index)."""
    name = os.path.basename(archive)
    beside = [archive + ".gpufs-index", archive + ".gpufs-index.plan"]
    cached = glob.glob(os.path.join(cache_dir, "gpufs", glob.escape(name) + "-*.gpufs-index*"))
    return [p for p in beside if os.path.exists(p)] + cached


def remove_index(archive, cache_dir):
    for path in index_files(archive, cache_dir):
        os.remove(path)


class Runner:
    """The rounds over the archives of one volume (named `volume`): mounts with `options`,
    each gpufsd mount command started by `preexec_fn` (the volume's throttle) and logging
    to a file of its own in `logs`."""

    def __init__(self, volume, paths, data_bytes, options, cache_dir, logs, threads,
                 slow=None):
        self.volume, self.paths, self.data_bytes, self.options = volume, paths, data_bytes, options
        self.cache_dir, self.logs, self.threads = cache_dir, logs, threads
        self.slow = slow  # the SlowVolume the archives are on, if any
        self.preexec_fn = (lambda: slow.enter(os.getpid())) if slow else None

    @contextlib.contextmanager
    def mounted(self, archive, log):
        """`archive` mounted; yields (seconds until the mount command returned, MNT)."""
        argv = [*self.options, "--log-file", os.path.join(self.logs, f"{self.volume}-{log}")]
        start = time.perf_counter()
        with gpufs_mounted(archive, *argv, prefix="gpufs-archives-",
                           preexec_fn=self.preexec_fn) as mnt:
            seconds = time.perf_counter() - start
            if not is_mounted(mnt):
                raise RuntimeError(f"gpufsd mount {archive} returned, but {mnt} is not mounted")
            yield seconds, mnt

    def epoch(self, mnt, seed):
        """One shuffled pass over every file: files/s, MB/s, the daemon's CPU seconds and
        the bytes its source read meanwhile."""
        pid = gpufs_pid(mnt)
        cpu, io = cpu_seconds(pid), source_bytes(mnt)
        device = self.slow.reads() if self.slow else None
        seconds, got = read_shuffled(mnt, self.paths, self.threads, seed)
        if got != self.data_bytes:
            raise RuntimeError(f"read {got} bytes through {mnt}, the tree holds {self.data_bytes}")
        after = source_bytes(mnt)
        epoch = {"seconds": seconds, "files_per_s": len(self.paths) / seconds,
                 "mb_per_s": got / seconds / 1e6, "daemon_cpu_s": cpu_seconds(pid) - cpu,
                 "source_mb": None if io is None or after is None else (after - io) / 1e6}
        if device:
            requests, read = (b - a for a, b in zip(device, self.slow.reads()))
            epoch.update(device_requests=requests, device_mb=read / 1e6)
        return epoch

    def round(self, kind, archive, number):
        """One round of `archive`: first listing, cold epoch, second epoch, remount."""
        row = {"kind": kind, "round": number}
        remove_index(archive, self.cache_dir)
        drop_caches()
        with self.mounted(archive, f"{kind}-{number}-first.log") as (seconds, mnt):
            row["first_listing_s"] = seconds
            row["cold"] = self.epoch(mnt, seed=2 * number)
            drop_caches(1)
            row["second"] = self.epoch(mnt, seed=2 * number + 1)
        index = index_files(archive, self.cache_dir)
        row["index_files"] = index
        row["index_bytes"] = sum(os.path.getsize(p) for p in index)
        drop_caches()
        with self.mounted(archive, f"{kind}-{number}-remount.log") as (seconds, mnt):
            row["remount_s"] = seconds
            listed = sum(len(names) for _, _, names in os.walk(mnt))
        if listed != len(self.paths):
            raise RuntimeError(f"the remount of {archive} lists {listed} files, "
                               f"not {len(self.paths)}")
        return row


def source_bytes(mnt):
    """Bytes the mount's source has delivered so far; None where the stats lack them."""
    try:
        return gpufs_stats(mnt)["io"]["bytes"]
    except (OSError, KeyError, ValueError):
        return None


def run_volume(label, archives, runner, rounds):
    """--rounds rounds over `archives`, which take turns; the rows, failures included."""
    rows = []
    print(f"\n{label}:", flush=True)
    for number in range(rounds):
        for kind, made in archives.items():
            try:
                row = runner.round(kind, made["path"], number)
            except (subprocess.CalledProcessError, OSError, RuntimeError) as e:
                said = getattr(e, "stderr", None)
                row = {"kind": kind, "round": number,
                       "error": f"{e}" + (f": {said.strip()}" if said else "")}
                print(f"  round {number + 1} {kind:13} FAILED: {row['error']}", flush=True)
                rows.append(row)
                continue
            rows.append(row)
            print(f"  round {number + 1} {kind:13} first listing {row['first_listing_s']:6.2f} s, "
                  f"cold {row['cold']['files_per_s']:6.0f} files/s "
                  f"({row['cold']['mb_per_s']:5.0f} MB/s, daemon CPU "
                  f"{row['cold']['daemon_cpu_s']:5.1f} s), second "
                  f"{row['second']['files_per_s']:6.0f} files/s (source "
                  f"{fmt_mb(row['second']['source_mb'])} MB), index "
                  + (f"{row['index_bytes'] / 1e6:.2f} MB" if row["index_files"] else "NONE SAVED")
                  + f", remount {row['remount_s']:.2f} s",
                  flush=True)
    return rows


def fmt_mb(mb):
    return "?" if mb is None else f"{mb:.0f}"


def summarize(rows, archives, files):
    """Per kind: the medians of its rounds that did not fail."""
    summary = {}
    for kind, made in archives.items():
        ok = [r for r in rows if r["kind"] == kind and "error" not in r]
        s = {"archive_mb": made["bytes"] / 1e6, "command": made.get("command"), "rounds": len(ok),
             "failed": len([r for r in rows if r["kind"] == kind and "error" in r])}
        if ok:
            def med(get):
                return statistics.median(get(r) for r in ok)
            s.update(first_listing_s=med(lambda r: r["first_listing_s"]),
                     index_mb=med(lambda r: r["index_bytes"]) / 1e6,
                     cold_files_per_s=med(lambda r: r["cold"]["files_per_s"]),
                     cold_mb_per_s=med(lambda r: r["cold"]["mb_per_s"]),
                     cold_daemon_cpu_s=med(lambda r: r["cold"]["daemon_cpu_s"]),
                     second_files_per_s=med(lambda r: r["second"]["files_per_s"]),
                     remount_s=med(lambda r: r["remount_s"]))
            if all("device_requests" in r["cold"] for r in ok):
                s.update(cold_requests=med(lambda r: r["cold"]["device_requests"]),
                         cold_device_mb=med(lambda r: r["cold"]["device_mb"]))
            s["first_listing_s_per_m"] = s["first_listing_s"] * 1e6 / files
            s["index_mb_per_m"] = s["index_mb"] * 1e6 / files
        summary[kind] = s
    tar = summary.get("tar", {})
    for s in summary.values():
        for key in ("cold_files_per_s", "second_files_per_s"):
            if key in s and tar.get(key):
                s[key.replace("files_per_s", "x_tar")] = s[key] / tar[key]
    return summary


def print_table(label, summary, files, rounds):
    print(f"\n{label}: {files} files; medians of {rounds} rounds; x tar: to the tar's median\n"
          "cold: page cache dropped before each epoch's mount, disk tier off; second epoch: "
          "page cache dropped (level 1), served from the daemon's pinned cache")
    print(f"{'archive':13}{'MB':>8}{'first list s':>13}{'s/M files':>10}{'index MB':>9}"
          f"{'MB/M files':>11}{'cold files/s':>13}{'MB/s':>6}{'x tar':>7}{'CPU s':>7}"
          f"{'2nd files/s':>12}{'x tar':>7}{'remount s':>10}")
    for kind, s in summary.items():
        line = f"{kind:13}{s['archive_mb']:8.0f}"
        if "cold_files_per_s" not in s:
            print(line + f"   failed in all {s['failed']} rounds")
            continue
        line += (f"{s['first_listing_s']:13.2f}{s['first_listing_s_per_m']:10.0f}"
                 f"{s['index_mb']:9.2f}{s['index_mb_per_m']:11.1f}"
                 f"{s['cold_files_per_s']:13.0f}{s['cold_mb_per_s']:6.0f}"
                 f"{s.get('cold_x_tar', 0):6.2f}x{s['cold_daemon_cpu_s']:7.1f}"
                 f"{s['second_files_per_s']:12.0f}{s.get('second_x_tar', 0):6.2f}x"
                 f"{s['remount_s']:10.2f}")
        if s["failed"]:
            line += f"   ({s['failed']} rounds failed)"
        print(line)
    for kind, s in summary.items():
        if s.get("cold_requests"):
            print(f"{kind}: the volume served the cold epoch {s['cold_requests']:.0f} read "
                  f"requests, {s['cold_device_mb']:.0f} MB, "
                  f"{s['cold_device_mb'] * 1e6 / s['cold_requests'] / 1024:.0f} KiB each")
    print("CPU s: the daemon's CPU seconds during the cold epoch; made by: "
          + "; ".join(f"{kind} `{s['command']}`" for kind, s in summary.items()))
    for text in goals(summary):
        print(text)


def goals(summary):
    """One line per goal: what it asks, the figure, and whether it is met."""
    lines = []

    def check(what, kind, key, test):
        value = summary.get(kind, {}).get(key)
        if value is None:
            lines.append(f"goal: {what}: not measured")
        else:
            lines.append(f"goal: {what}: {value:.2f}x, {'met' if test(value) else 'NOT met'}")

    check("stored zip cold epoch within 10% of tar's", "zip-stored", "cold_x_tar",
          lambda x: x >= 0.9)
    check(".tar.gz cold epoch >= 0.5x tar's", "tar.gz", "cold_x_tar", lambda x: x >= 0.5)
    for kind in summary:
        if kind != "tar":
            check(f"{kind} second epoch at tar's rate (within 10%)", kind, "second_x_tar",
                  lambda x: x >= 0.9)
    return lines


def main():
    parser = arg_parser(__doc__, GPUFSD_EPILOG)
    add_options(parser, files=(6000, "JPEGs in the dataset"), classes=40)
    parser.add_argument("--side", type=int, default=560,
                        help="longest side of the generated images (560: ~80-110 KB each)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per archive; medians shown")
    parser.add_argument("--threads", type=int, default=4, help="reader threads of an epoch")
    parser.add_argument("--kinds", default=",".join(KINDS),
                        help="archives to make and mount, comma-separated: " + ", ".join(KINDS)
                        + " (bgzip only where bgzip is installed)")
    parser.add_argument("--skip-local", action="store_true",
                        help="with --slow: the slow volume's runs alone")
    parser.add_argument("--slow", action="store_true",
                        help="also run with the archives on the throttled volume")
    add_options(parser, iops=120, mbps=150,
                cache=("/var/tmp/gpufs-slow-disk-src",
                       "where the generated tree is kept between runs"),
                work=("/var/tmp", "the local disk the archives are made on"),
                out=("/var/tmp/gpufs-archives-results", "where results.json and the logs go"))
    args = parser.parse_args()
    need_root("archives", "drop_caches, loop device, cgroups")
    unwind_on_signals()
    tools = compressors()
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        parser.error(f"--kinds: unknown {', '.join(unknown)}; choose from {', '.join(KINDS)}")
    missing = [k for k in kinds if k not in tools]
    kinds = [k for k in kinds if k in tools]
    os.makedirs(args.cache, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    tree = sample_tree(args.cache, args.files, args.classes, args.side,
                       name=f"tree-{args.files}-{args.classes}-{args.side}")
    files, data_bytes = tree_bytes(tree)
    paths = files_of(tree)
    print("gpufs " + versions("gpufs")["gpufs"] + f", {GPUFSD}", flush=True)
    print(f"{files} files, mean {data_bytes / files / 1e3:.0f} KB, {data_bytes / 1e6:.0f} MB; "
          f"{args.threads} reader threads; {os.cpu_count()} CPUs"
          + (f"; not made here: {', '.join(missing)} (bgzip not installed)" if missing else ""),
          flush=True)
    work = tempfile.mkdtemp(prefix="gpufs-archives-", dir=args.work)
    logs = os.path.join(work, "logs")
    os.mkdir(logs)
    # The daemons' private index cache: a fresh folder, so that nothing of other runs is
    # found and nothing of this one is left behind.
    cache_dir = os.path.join(work, "xdg-cache")
    os.mkdir(cache_dir)
    os.environ["XDG_CACHE_HOME"] = cache_dir
    budget = data_bytes * 5 // 4 + (256 << 20)
    options = ["--no-disk-cache", "--cache-size", str(budget)]
    result = {"files": files, "data_bytes": data_bytes, "threads": args.threads,
              "rounds": args.rounds, "gpufsd": GPUFSD, "gpufs": versions("gpufs")["gpufs"],
              "options": options, "volumes": {}}
    volume = None
    try:
        print("making the archives:", flush=True)
        local = os.path.join(work, "archives")
        os.mkdir(local)
        archives = make_archives(tree, local, kinds, tools)
        result["archives"] = {k: {key: v for key, v in m.items() if key != "path"}
                              for k, m in archives.items()}
        if not args.skip_local:
            runner = Runner("local", paths, data_bytes, options, cache_dir, logs, args.threads)
            label = f"local disk ({args.work})"
            rows = run_volume(label, archives, runner, args.rounds)
            result["volumes"]["local"] = {"label": label, "rows": rows,
                                          "summary": summarize(rows, archives, files)}
        if args.slow:
            total = sum(m["bytes"] for m in archives.values())
            volume = SlowVolume(total * 11 // 10 // 1_000_000 + 300, args.iops, args.mbps)
            on_volume = {}
            for kind, made in archives.items():
                on_volume[kind] = dict(made, path=os.path.join(volume.mnt, ARCHIVE_NAME[kind]))
                shutil.copyfile(made["path"], on_volume[kind]["path"])
            throttled = Runner("slow", paths, data_bytes, options, cache_dir, logs, args.threads,
                               slow=volume)
            label = f"slow volume ({args.iops} IOPS, {args.mbps} MB/s)"
            rows = run_volume(label, on_volume, throttled, args.rounds)
            result["volumes"]["slow"] = {"label": label, "rows": rows,
                                         "summary": summarize(rows, on_volume, files)}
    finally:
        if volume:
            volume.close()
        shutil.copytree(logs, os.path.join(args.out, "logs"), dirs_exist_ok=True)
        shutil.rmtree(work, ignore_errors=True)
    for v in result["volumes"].values():
        print_table(v["label"], v["summary"], files, args.rounds)
    save_results(args.out, result, f" and the daemons' logs in {args.out}/logs")


if __name__ == "__main__":
    main()
