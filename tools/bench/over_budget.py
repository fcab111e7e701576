#!/usr/bin/python3
"""Over the cache budget: datasets larger than gpufs's pinned cache that the page cache holds.

    sudo /usr/bin/python3 tools/bench/over_budget.py [--files 6000] [--classes 30] [--iops 120]
        [--mbps 150] [--rows tree,squashfuse,...] [--no-memory-cgroup] [--out DIR]

The emulated slow volume of slow_disk.py (ext4 on a loop device, reads throttled with
cgroup v1 blkio) holds one generated dataset of real JPEGs (~50 KB: --max-side 440) three
ways: an ImageFolder tree, a squashfs image (served by squashfuse_ll) and a gpufs pack (4 MiB
groups). The unmodified torchvision ImageFolder + DataLoader (4 workers) runs two epochs in
one process over each row; the page cache is dropped once, before the loader starts, so the
first epoch is cold and the second is served by whatever the page cache kept (warm).

Rows (--rows picks some by key): tree, squashfuse, gpufs with --cache-size 1/4, 1/2, 1 of
the pack (quarter, half, full) and 0 (zero), all without a disk tier, and gpufs at 1/4 with
--miss-reads members (members: each file read alone when its group is not cached, the
behaviour before --miss-reads; skipped where this gpufsd has no such option).

Then (--no-memory-cgroup skips it) the same rows' cold epochs inside a cgroup v1 memory
cgroup that holds the loader and every server process: tree, squashfuse, gpufs with its
default budget (default) and gpufs --miss-reads members (members). Its limit is half the
pack plus what the loader itself needs (its working set, measured first, + 64 MiB;
--cgroup-headroom sets it): with half the pack alone the loader's own memory (~350 MB of
anonymous memory for 4 workers) is over the limit of the default dataset and the kernel
kills it.

Prints a table per section (files/s, x squashfuse_ll of the same epoch, x the volume's
bandwidth bound, the volume's MB read, gpufsd's cache.miss_reads.choice) and writes
results.json to --out.
"""
import argparse
import errno
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (Sampler, SlowVolume, add_options, arg_parser,  # noqa: E402
                      begin_run, install_bench_deps, loader_epochs, need_root, sample_tree,
                      save_results, version_line)
from benchmount import GPUFSD, gpufs_tier_argv, mount_has  # noqa: E402
from slow_disk import Bench, budget_for, prepare  # noqa: E402

ROWS = ("tree", "squashfuse", "quarter", "half", "full", "zero", "default", "members")
FRACTIONS = (("quarter", "1/4", 0.25), ("half", "1/2", 0.5), ("full", "1", 1.0))
MEMBERS = ["--miss-reads", "members"]
# Beside the loader's measured working set: squashfuse_ll's or gpufsd's own memory and
# the batches in flight of a long epoch (the measure is of two short ones).
SERVERS_MB = 64
MEMORY = "/sys/fs/cgroup/memory"


class MemoryGroup:
    """A cgroup v1 memory cgroup, gpufs-bench-<pid>, that processes are put in."""

    def __init__(self):
        self.path = os.path.join(MEMORY, f"gpufs-bench-{os.getpid()}")
        os.mkdir(self.path)

    def read(self, knob):
        with open(os.path.join(self.path, knob)) as f:
            return f.read()

    def write(self, knob, value):
        with open(os.path.join(self.path, knob), "w") as f:
            f.write(f"{value}\n")

    def enter(self, pid):
        self.write("cgroup.procs", pid)

    def peak(self):
        return int(self.read("memory.max_usage_in_bytes"))

    def reset_peak(self):
        self.write("memory.max_usage_in_bytes", 0)

    def working_set(self):
        """Bytes charged that its processes cannot do without (anonymous, shared and mapped
        file memory); the rest is page cache that reclaim may take."""
        stat = dict(line.split() for line in self.read("memory.stat").splitlines())
        return sum(int(stat[k]) for k in ("total_rss", "total_shmem", "total_mapped_file"))

    def oom_kills(self):
        for line in self.read("memory.oom_control").splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
        return 0  # kernels before 4.13 do not count them

    def close(self):
        # A v1 cgroup is removed only once empty: strays (a daemon still exiting) go back
        # to the root first.
        for pid in self.read("cgroup.procs").split():
            try:
                with open(os.path.join(MEMORY, "cgroup.procs"), "w") as root:
                    root.write(pid)
            except OSError:
                pass  # exited meanwhile
        for _ in range(50):
            try:
                os.rmdir(self.path)
                return
            except OSError as e:
                if e.errno != errno.EBUSY:
                    raise
                time.sleep(0.1)
        os.rmdir(self.path)


class CgroupBench(Bench):
    """slow_disk's Bench whose loaders and servers also enter a memory cgroup."""

    def __init__(self, volume, args, group):
        super().__init__(volume, args, args.workers)
        self.group = group

    def throttled(self):
        def enter():
            self.volume.enter(os.getpid())
            self.group.enter(os.getpid())
        return enter


def plan(data, mode, cgroup, tier_off):
    """The rows of a section: (key, label, run), run(bench, label, epochs) measuring one."""
    def tree(bench, label, epochs):
        bench.load(label, data["tree"], mode, drop=False, epochs=epochs)

    def squashfuse(bench, label, epochs):
        bench.squashfuse(data["image"], mode, drop=False, epochs=epochs)

    def gpufs(budget, extra):
        return lambda bench, label, epochs: bench.gpufs(
            data["pack"], budget, label, mode, drop=False, epochs=epochs,
            extra=[*tier_off, *extra], stats=True)

    rows = [("tree", "ext4 tree", tree), ("squashfuse", "squashfuse_ll", squashfuse)]
    if cgroup:
        return rows + [("default", "gpufs default budget", gpufs(None, [])),
                       ("members", "gpufs default, members", gpufs(None, MEMBERS))]
    quarter = budget_for(data["pack"], 0.25)
    rows += [(key, f"gpufs {name} budget", gpufs(budget_for(data["pack"], fraction), []))
             for key, name, fraction in FRACTIONS]
    return rows + [("zero", "gpufs 0 budget", gpufs(0, [])),
                   ("members", "gpufs 1/4, members", gpufs(quarter, MEMBERS))]


def failure(e):
    """One line on why a row's command failed."""
    if isinstance(e, subprocess.CalledProcessError):
        how = (f"killed by signal {-e.returncode}" if e.returncode < 0
               else f"exited {e.returncode}")
        err = (e.stderr or "").strip().splitlines()
        return f"{os.path.basename(e.cmd[0])} {how}" + (f": {err[-1][:120]}" if err else "")
    return f"{type(e).__name__}: {e}"


def run_section(bench, rows, wanted, epochs, has_members, group=None):
    """Measures each row of `rows` that `wanted` names, into bench.rows; a row that fails
    is kept with its "error" and the others still run. In a memory cgroup each row also
    gets the cgroup's peak and the OOM kills it saw."""
    for key, label, run in rows:
        if key not in wanted:
            continue
        if key == "members" and not has_members:
            bench.rows.append({"key": key, "name": label,
                               "error": "skipped: this gpufsd has no --miss-reads"})
            continue
        before = len(bench.rows)
        if group:
            group.reset_peak()
            kills = group.oom_kills()
        try:
            run(bench, label, epochs)
        except (subprocess.CalledProcessError, OSError) as e:
            if len(bench.rows) == before:
                bench.rows.append({"name": label})
            bench.rows[-1]["error"] = failure(e)
            print(f"  {label:24} failed: {failure(e)}", flush=True)
        row = bench.rows[-1]
        row["key"] = key
        # Bench's "warm" says that nothing was dropped between epochs; here the first
        # epoch is cold in any case.
        row.pop("warm", None)
        if group:
            row["peak_bytes"] = group.peak()
            row["oom_kills"] = group.oom_kills() - kills
    return bench.rows


def loader_footprint(group, args):
    """The loader's own working set at its peak in the (still unlimited) cgroup: two
    epochs over a small tree of the same files, off the throttled volume. Not the cgroup's
    peak usage: that counts the page cache of torch's libraries, which reclaim may take,
    and then the dataset's pages or gpufsd's pinned cache would have it."""
    small = sample_tree(args.cache, 256, 2, args.max_side)
    with Sampler(group.working_set, interval=0.01) as sampled:
        loader_epochs(small, args.mode, 2, args.workers,
                      preexec_fn=lambda: group.enter(os.getpid()))
    return max((v for _, v in sampled.samples), default=0)


def cgroup_section(volume, data, args, has_members, tier_off):
    """The rows' cold epochs in a memory cgroup of half the pack plus the loader's own."""
    group = MemoryGroup()
    try:
        if args.cgroup_headroom is None:
            footprint = loader_footprint(group, args)
            headroom = footprint + (SERVERS_MB << 20)
        else:
            footprint, headroom = None, int(args.cgroup_headroom * 1e6)
        limit = data["pack_bytes"] // 2 + headroom
        group.write("memory.limit_in_bytes", limit)
        print(f"\nmemory cgroup {group.path}: limit {limit / 1e6:.0f} MB = half the pack "
              f"{data['pack_bytes'] / 2e6:.0f} MB + headroom {headroom / 1e6:.0f} MB"
              + (f" (loader's working set {footprint / 1e6:.0f} MB + {SERVERS_MB} MiB)"
                 if footprint else "") + "; cold epochs (files/s):", flush=True)
        bench = CgroupBench(volume, args, group)
        rows = run_section(bench, plan(data, args.mode, True, tier_off), args.rows,
                           args.cgroup_epochs, has_members, group)
        return {"limit_bytes": limit, "headroom_bytes": headroom,
                "loader_peak_bytes": footprint, "rows": rows}
    finally:
        group.close()


def miss_reads_choice(row):
    """gpufsd's cache.miss_reads.choice in the row's stats, "-" where this build has none.
    The xattr holds the cache's keys at its top level (gpufs-stat's reply nests them under
    "cache"): both are looked in."""
    stats = row.get("stats") or {}
    for where in (stats.get("cache"), stats):
        choice = where.get("miss_reads") if isinstance(where, dict) else None
        if isinstance(choice, dict) and "choice" in choice:
            return str(choice["choice"])
    return "-"


def times(value, base):
    return f"{value / base:.2f}" if base else "-"


def print_table(title, rows, bound, epochs, cgroup=False):
    """One line per row: per epoch files/s, x squashfuse_ll's same epoch, x the bandwidth
    bound and the volume's MB; the second epoch against the tree's second; the choice."""
    by_key = {r["key"]: r.get("epochs") or [] for r in rows}
    sqfs, tree = by_key.get("squashfuse", []), by_key.get("tree", [])
    print(f"\n{title}\n")
    head = f"{'':24}" + "".join(f"{f'ep{n} files/s':>13}{'x sqfs':>7}{'x bound':>8}{'MB':>6}"
                                for n in range(1, epochs + 1))
    head += f"{'/ tree ep2':>11}" if epochs >= 2 else ""
    print(head + f"{'miss reads':>11}" + (f"{'peak MB':>9}{'OOM kills':>10}" if cgroup else ""))
    for r in rows:
        line = f"{r['name']:24}"
        if "epochs" not in r:
            # A row that failed before its epochs: why, and what the cgroup saw meanwhile.
            seen = (f"peak {r['peak_bytes'] / 1e6:.0f} MB, {r['oom_kills']} OOM kills; "
                    if "peak_bytes" in r else "")
            print(f"{line}{seen}{r['error']}")
            continue
        for i, e in enumerate(r["epochs"][:epochs]):
            fps = e["files_per_s"]
            line += (f"{fps:13.0f}{times(fps, sqfs[i]['files_per_s'] if i < len(sqfs) else 0):>7}"
                     f"{fps / bound:8.2f}{e['disk_bytes'] / 1e6:6.0f}")
        line += " " * 34 * (epochs - len(r["epochs"][:epochs]))
        if epochs >= 2:
            warm = tree[1]["files_per_s"] if len(tree) >= 2 else 0
            mine = r["epochs"][1]["files_per_s"] if len(r["epochs"]) >= 2 else 0
            line += f"{times(mine, warm) if mine else '-':>11}"
        line += f"{miss_reads_choice(r) if r['key'] not in ('tree', 'squashfuse') else '':>11}"
        if cgroup and "peak_bytes" in r:
            line += f"{r['peak_bytes'] / 1e6:9.0f}{r['oom_kills']:10}"
        print(line + (f"  {r['error']}" if "error" in r else ""))


def report(result, out):
    """The tables of the sections measured so far, and results.json."""
    bound = result["bound_files_per_s"]
    print(f"\n{result['files']} files, mean {result['mean_file_bytes'] / 1e3:.0f} KB, pack "
          f"{result['pack_bytes'] / 1e6:.0f} MB; bandwidth bound {bound:.0f} files/s")
    rows = result["page_cache"]
    warm = [r["epochs"][1]["files_per_s"] for r in rows
            if r["key"] == "tree" and len(r.get("epochs", [])) >= 2]
    if warm:
        print(f"warm tree (ext4 tree, epoch 2): {warm[0]:.0f} files/s")
    print_table("Within the page cache: epoch 1 cold, epoch 2 warm", rows, bound, 2)
    if "memory_cgroup" in result:
        cg = result["memory_cgroup"]
        print_table(f"In a memory cgroup of {cg['limit_bytes'] / 1e6:.0f} MB", cg["rows"],
                    bound, result["cgroup_epochs"], cgroup=True)
    save_results(out, result)


def parse_args():
    parser = arg_parser(__doc__)
    add_options(parser, files=6000, classes=30)
    parser.add_argument("--max-side", type=int, default=440,
                        help="longest side of the JPEGs: 440 gives a mean of ~50 KB")
    add_options(parser, iops=120, mbps=150, workers=(4, "the DataLoader's"))
    parser.add_argument("--mode", choices=["raw", "decode"], default="raw")
    parser.add_argument("--rows", default=",".join(ROWS),
                        help=f"comma-separated, of {','.join(ROWS)} [default: all]")
    parser.add_argument("--memory-cgroup", action=argparse.BooleanOptionalAction, default=True,
                        help="also the section in a memory cgroup")
    parser.add_argument("--cgroup-headroom", type=float, default=None,
                        help="MB of the cgroup's limit beyond half the pack [default: the "
                             "loader's working set, measured, + 64 MiB]")
    parser.add_argument("--cgroup-epochs", type=int, default=1,
                        help="epochs per row in the memory cgroup (the first cold)")
    add_options(parser, cache="/var/tmp/gpufs-over-budget-src",
                out="/var/tmp/gpufs-over-budget-results")
    args = parser.parse_args()
    args.rows = set(args.rows.split(","))
    if args.rows - set(ROWS):
        parser.error(f"--rows: unknown {','.join(sorted(args.rows - set(ROWS)))}")
    return args


def measure(args, source, result):
    """Both sections on a fresh slow volume, which is gone again when this returns."""
    files, data_bytes = result["files"], result["data_bytes"]
    has_members = mount_has("--miss-reads")
    tier_off, _ = gpufs_tier_argv(GPUFSD, "off", None)
    volume = SlowVolume(3 * data_bytes // 1_000_000 + 300, args.iops, args.mbps)
    try:
        data = prepare(volume, source)
        result["pack_bytes"] = data["pack_bytes"]
        print(f"{files} files, mean {data_bytes / files / 1e3:.0f} KB; volume {args.iops} IOPS, "
              f"{args.mbps} MB/s; {args.workers} workers; epochs 1 (cold) and 2 (warm), "
              "files/s:", flush=True)
        bench = Bench(volume, args, args.workers)
        result["page_cache"] = run_section(bench, plan(data, args.mode, False, tier_off),
                                           args.rows, 2, has_members)
        if args.memory_cgroup:
            result["memory_cgroup"] = cgroup_section(volume, data, args, has_members, tier_off)
    finally:
        volume.close()


def main():
    args = parse_args()
    need_root("over_budget", "loop device, cgroups, drop_caches")
    install_bench_deps()
    # Ctrl-C and SIGTERM unwind through the finally blocks: every mount, the loop device
    # and the cgroups go.
    source, files, data_bytes = begin_run(args.cache, args.out, args.files, args.classes,
                                          args.max_side)
    result = {"files": files, "data_bytes": data_bytes, "mean_file_bytes": data_bytes / files,
              "bound_files_per_s": args.mbps * 1e6 / (data_bytes / files),
              "gpufsd": version_line(GPUFSD, "--version"), "cgroup_epochs": args.cgroup_epochs,
              "args": {k: sorted(v) if isinstance(v, set) else v
                       for k, v in vars(args).items()}}
    try:
        measure(args, source, result)
    finally:
        if "page_cache" in result:
            report(result, args.out)


if __name__ == "__main__":
    main()
