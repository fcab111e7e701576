#!/usr/bin/python3
"""What each file and each byte served by gpufsd cost the node, against the limits measured
in the same run.

    sudo GPUFSD=build/cli/gpufsd [BASE_GPUFSD=/tmp/gpufs-base/gpufsd] /usr/bin/python3 \
        tools/bench/cost.py [--rounds 3] [--mb 192] [--quick] [--perf OUTDIR]
        [--transports auto,dev_fuse,io_uring]

A tree of real JPEGs (~64 KB each, --mb in all, in class folders) is made on disk once
(--cache) and packed with `gpufsd pack` into /dev/shm, so that no device limits a pass:
only CPUs do. Every pass reads every file once in a shuffled order with two reader threads,
each file whole with os.open/os.read; the page cache (with dentries and inodes) is dropped
before each pass unless said otherwise. The limits, measured in every round:

  one copy    the pack's blobs read from /dev/shm with 16 MiB readv into one buffer per
              reader: the readers' CPU seconds per GB, best of 3 (the cost of a byte);
  warm tree   the tree read with its page cache warm (after a warm-up pass): files/s and
              the readers' CPU µs per file (the cost of a file).

Then, for each build (BASE_GPUFSD and GPUFSD in turn, round after round) and, where the
build has `mount --fuse-transport` and --transports names several, for each transport:

  cold, RAM pack      a fresh mount of the /dev/shm pack;
  hot                 the same mount again, every group in its pinned memory, so every READ
                      reaches the daemon and is a hit;
  warm through FUSE   the mount read once more without dropping, then timed with Python's
                      open().read() against the same on the warm tree (read just before);
  cold, HTTP          the pack served by nginx on 127.0.0.1, mounted over http:// with the
                      disk tier in a fresh empty folder on --tier-base (a disk);
  disk tier           unmounted, remounted with the same tier folder: reads from the tier.

For each: files/s (and × warm tree), gpufsd's CPU (utime + stime of the daemon over the
pass) per GB of files (and × one copy) and per file, and the readers' CPU per file. With
--perf OUTDIR each gpufs pass runs under `perf record -g -p <gpufsd>`; the last round's
profiles are kept there (.data, and perf report's top 40 symbols as .txt).
"""
import contextlib
import errno
import os
import random
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (Work, arg_parser, cpu_seconds, drop_caches, files_of,  # noqa: E402
                      need_root, packed_work, read_shuffled, sample_tree, save_results,
                      tree_bytes, unwind_on_signals, version_line)
from benchmount import (GPUFSD, gpufs_fuse_mount, gpufs_stats,  # noqa: E402
                        gpufs_tier_argv, mount_has)
from servers import nginx  # noqa: E402

BASE_GPUFSD = os.environ.get("BASE_GPUFSD")
MAX_SIDE = 500  # sample_tree's longest side that gives JPEGs of ~64 KB (440: ~50 KB)
FILE_KB = 64
CLASSES = 30
READERS = 2
PIECE = 16 << 20  # the one-copy reads: as large as gpufsd's own group pieces
URING = "/sys/module/fuse/parameters/enable_uring"

PASSES = [("cold-ram", "cold, RAM pack"), ("hot", "hot"),
          ("warm-fuse", "warm through FUSE, Python open()"), ("cold-http", "cold, HTTP"),
          ("disk-tier", "disk tier")]
COLUMNS = [("files/s", "files_s"), ("× warm tree", "x_warm"), ("gpufsd s/GB", "gpufsd_s_gb"),
           ("× one copy", "x_copy"), ("gpufsd µs/file", "gpufsd_us"),
           ("reader µs/file", "reader_us")]


# --- reading --------------------------------------------------------------------------

def process_cpu():
    """User + system CPU seconds of this process, all threads; the main thread only waits
    while readers run, so a delta over a pass is the readers' own."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def threaded(items, work, threads=READERS):
    """(wall seconds, this process's CPU seconds) of `work(chunk)` on `threads` threads,
    each given every threads-th item; the first read error raised once all have stopped."""
    errors = []

    def run(chunk):
        try:
            work(chunk)
        except OSError as e:
            errors.append(e)

    pool = [threading.Thread(target=run, args=(items[i::threads],)) for i in range(threads)]
    cpu, start = process_cpu(), time.perf_counter()
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    seconds, cpu = time.perf_counter() - start, process_cpu() - cpu
    if errors:
        raise errors[0]
    return seconds, cpu


def os_read(chunk):
    """Each (path, size) read whole by bare system calls: open, read, close (the size is
    known, so no fstat; a short read is continued, as a loader's read() would)."""
    for path, size in chunk:
        fd = os.open(path, os.O_RDONLY)
        try:
            got = len(os.read(fd, size))
            while got < size:
                n = len(os.read(fd, size - got))
                if not n:
                    raise OSError(errno.EIO, f"{got} of {size} bytes", path)
                got += n
        finally:
            os.close(fd)


def py_open(chunk):
    """What a loader does: builtins.open (with its isatty ioctl) and read()."""
    for path, _ in chunk:
        with open(path, "rb") as f:
            f.read()


def readv_blobs(chunk):
    """Each blob read in PIECE-sized readv calls into one reused buffer: one copy a byte."""
    buf = [bytearray(PIECE)]
    for path in chunk:
        fd = os.open(path, os.O_RDONLY)
        try:
            while os.readv(fd, buf):
                pass
        finally:
            os.close(fd)


class Dataset:
    """The files every pass reads (relative paths and sizes, from the tree) and their
    shuffled orders below a root."""

    def __init__(self, tree):
        self.tree = tree
        self.rel = files_of(tree)
        self.sizes = [os.path.getsize(os.path.join(tree, r)) for r in self.rel]
        self.files, self.bytes = len(self.rel), sum(self.sizes)

    def order(self, root, seed):
        """[(path, size)] below `root` in the order `seed` shuffles."""
        order = [(os.path.join(root, r), s) for r, s in zip(self.rel, self.sizes)]
        random.Random(seed).shuffle(order)
        return order

    def warm(self, root, seed):
        """One untimed pass: the page cache (and dentries) of `root` filled."""
        read_shuffled(root, self.rel, READERS, seed)

    def per_file(self, seconds, reader_cpu):
        return {"files_s": self.files / seconds, "reader_us": reader_cpu / self.files * 1e6}


# --- the limits -----------------------------------------------------------------------

def limits(data, blobs, seed):
    """One round's limits: one copy (best of 3) and the warm tree, read as the passes are."""
    blob_bytes = sum(os.path.getsize(b) for b in blobs)
    copies = []
    for i in range(3):
        shuffled = random.Random(seed + i).sample(blobs, len(blobs))
        seconds, cpu = threaded(shuffled, readv_blobs)
        copies.append((cpu / (blob_bytes / 1e9), blob_bytes / seconds / 1e9))
    s_gb, gb_s = min(copies)
    data.warm(data.tree, seed)
    seconds, cpu = threaded(data.order(data.tree, seed + 3), os_read)
    row = dict(data.per_file(seconds, cpu), one_copy_s_gb=s_gb, one_copy_gb_s=gb_s)
    print(f"  limits: one copy {s_gb:.3f} s/GB ({gb_s:.1f} GB/s); warm tree "
          f"{row['files_s']:.0f} files/s, {row['reader_us']:.1f} µs/file", flush=True)
    return row


# --- gpufs passes ---------------------------------------------------------------------

@contextlib.contextmanager
def perf_record(pid, data):
    """`perf record -g` of process `pid` over the `with` block (nothing when data is None)."""
    if data is None:
        yield
        return
    proc = subprocess.Popen(["perf", "record", "-g", "-q", "-p", str(pid), "-o", data],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)  # perf attaches to every thread of the daemon before the pass starts
    try:
        yield
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)


def transport_of(mnt):
    """The FUSE transport the mount uses, as its stats say ('?' where they do not)."""
    return gpufs_stats(mnt).get("kernel", {}).get("transport", "?")


class Build:
    """One gpufsd binary (copied, so that a rebuild during the run changes nothing), with
    the --fuse-transport it is mounted with (None: its default)."""

    def __init__(self, label, binary, transport, work):
        self.label, self.transport = label, transport
        self.key = re.sub(r"[^A-Za-z0-9_.-]+", "-", label)
        folder = work.fresh(f"bin-{self.key}")
        self.binary = shutil.copy2(binary, os.path.join(folder, "gpufsd"))
        self.origin = binary
        self.version = version_line(binary, "--version")

    def mount(self, source, mnt, options=()):
        argv = [self.binary, "mount", "-f", source, mnt, *options]
        if self.transport:
            argv += ["--fuse-transport", self.transport]
        return gpufs_fuse_mount(argv, mnt, self.binary)


class Run:
    """What every pass of a round shares: the data set, the pack, the origin, the folders
    and where profiles go."""

    def __init__(self, data, work, pack, url, tier_work, perf):
        self.data, self.work, self.pack, self.url = data, work, pack, url
        self.tier_work, self.perf = tier_work, perf
        self.limits = None

    def perf_path(self, build, key):
        return os.path.join(self.perf, f"{build.key}-{key}.data") if self.perf else None

    def gpufs_pass(self, build, m, key, seed, reader=os_read, warm_files_s=None):
        """One timed pass of every file below the mount, gpufsd's CPU measured over it; the
        page cache dropped first unless `warm_files_s` (the rate to compare with) is given.
        Its figures, with the ratios to this round's limits."""
        if warm_files_s is None:
            drop_caches()
        order = self.data.order(m.mnt, seed)
        with perf_record(m.pid, self.perf_path(build, key)):
            before = cpu_seconds(m.pid)
            seconds, cpu = threaded(order, reader)
            daemon = cpu_seconds(m.pid) - before
        row = self.data.per_file(seconds, cpu)
        row.update(transport=transport_of(m.mnt), gpufsd_s_gb=daemon / (self.data.bytes / 1e9),
                   gpufsd_us=daemon / self.data.files * 1e6)
        row["x_warm"] = row["files_s"] / (warm_files_s or self.limits["files_s"])
        row["x_copy"] = row["gpufsd_s_gb"] / self.limits["one_copy_s_gb"]
        return row

    def warm_fuse(self, build, m, seed):
        """Python's open() through the mount with the kernel holding every file, against
        the same on the warm tree, each warmed just before."""
        self.data.warm(m.mnt, seed)
        self.data.warm(self.data.tree, seed)
        seconds, cpu = threaded(self.data.order(self.data.tree, seed + 1), py_open)
        tree = self.data.per_file(seconds, cpu)
        row = self.gpufs_pass(build, m, "warm-fuse", seed + 1, reader=py_open,
                              warm_files_s=tree["files_s"])
        return dict(row, tree_open_files_s=tree["files_s"])

    def ram_passes(self, build, seed):
        """Cold, hot and warm-through-FUSE on one fresh mount of the /dev/shm pack."""
        rows = {}
        with build.mount(self.pack, self.work.fresh(f"mnt-{build.key}")) as m:
            rows["cold-ram"] = self.gpufs_pass(build, m, "cold-ram", seed)
            before = gpufs_stats(m.mnt)
            rows["hot"] = self.gpufs_pass(build, m, "hot", seed + 1)
            rows["hot"]["check"] = hot_check(before, gpufs_stats(m.mnt))
            rows["warm-fuse"] = self.warm_fuse(build, m, seed + 2)
        return rows

    def http_passes(self, build, seed):
        """Cold over HTTP into a fresh tier folder, then a fresh mount reading that tier."""
        rows = {}
        tier = self.tier_work.fresh(f"tier-{build.key}")
        options, _ = gpufs_tier_argv(build.binary, "fresh", lambda: tier)
        for n, key in enumerate(("cold-http", "disk-tier")):
            mnt = self.work.fresh(f"mnt-{key}-{build.key}")
            with build.mount(self.url, mnt, options) as m:
                before = gpufs_stats(m.mnt)
                rows[key] = self.gpufs_pass(build, m, key, seed + n)
                rows[key]["check"] = source_check(before, gpufs_stats(m.mnt))
        shutil.rmtree(tier, ignore_errors=True)
        return rows


def hot_check(before, after):
    """Whether the hot pass was served from pinned memory alone, in words."""
    d = {k: after.get(k, 0) - before.get(k, 0)
         for k in ("hits", "misses", "member_reads", "groups_loaded")}
    hot = not (d["misses"] or d["member_reads"] or d["groups_loaded"])
    return (f"{'hot' if hot else 'NOT HOT'}: {before.get('cached_groups')}/"
            f"{before.get('groups')} groups pinned before it; +{d['hits']} hits, "
            f"+{d['misses']} misses, +{d['member_reads']} member reads, "
            f"+{d['groups_loaded']} groups loaded")


def source_check(before, after):
    """Where a pass over HTTP got its bytes: the origin, the disk tier, in words."""
    io = after.get("io", {}).get("bytes", 0) - before.get("io", {}).get("bytes", 0)
    tier = {k: v - before.get("tier", {}).get(k, 0)
            for k, v in after.get("tier", {}).items() if isinstance(v, (int, float))}
    return (f"origin {io / 1e6:.0f} MB; tier hits +{tier.get('hits', '?')}, slice hits "
            f"+{tier.get('slice_hits', '?')}, writes +{tier.get('writes', '?')}")


def uring_state():
    """The fuse module's enable_uring (which --fuse-transport auto follows), or "absent"."""
    try:
        with open(URING) as f:
            return f.read().strip()
    except OSError:
        return "absent"


@contextlib.contextmanager
def fuse_uring(on):
    """FUSE over io_uring allowed (the module's enable_uring = Y) inside the block when
    `on`, the original value put back after."""
    if not on or not os.path.exists(URING):
        yield
        return
    with open(URING) as f:
        original = f.read().strip()
    try:
        with open(URING, "w") as f:
            f.write("Y")
        yield
    finally:
        with open(URING, "w") as f:
            f.write(original)


# --- output ---------------------------------------------------------------------------

def num(v):
    return (f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}" if v >= 1
            else f"{v:.3f}")


def cell(values):
    """The median, and the range where there are several rounds."""
    med = statistics.median(values)
    return num(med) if len(values) == 1 else f"{num(med)} ({num(min(values))}-{num(max(values))})"


def column(rounds, label, key, field):
    return [r["builds"][label][key][field] for r in rounds]


def print_limits(rounds, data, args, pack_bytes):
    lim = [r["limits"] for r in rounds]
    print(f"\n## Conditions\n\n{os.cpu_count()} cores ({cpu_model()}), kernel "
          f"{os.uname().release}; {data.files} files of mean {data.bytes / data.files / 1e3:.1f}"
          f" KB ({data.bytes / 1e6:.1f} MB) in {CLASSES} class folders; pack in /dev/shm "
          f"({pack_bytes / 1e6:.1f} MB); {READERS} reader threads, os.open/os.read of each "
          f"whole file in a shuffled order (the warm-through-FUSE pass: Python open().read());"
          f" {len(rounds)} round(s), builds in turn in each. Page cache dropped before each "
          "pass (drop_caches 3: dentries and inodes too) except the warm ones; disk tier pass "
          f"reads from a tier filled by the HTTP pass (tier folder on {args.tier_base}); the "
          "HTTP origin is nginx on 127.0.0.1 serving the /dev/shm pack. fuse's enable_uring: "
          f"{uring_state()} (Y only while io_uring runs where this run set it).")
    print(f"\n## Limits\n\n- one copy: {cell([x['one_copy_s_gb'] for x in lim])} s/GB of "
          f"reader CPU ({cell([x['one_copy_gb_s'] for x in lim])} GB/s; 16 MiB readv from "
          "/dev/shm, best of 3)\n- warm tree: "
          f"{cell([x['files_s'] for x in lim])} files/s, "
          f"{cell([x['reader_us'] for x in lim])} µs/file of reader CPU")


def print_build(rounds, build):
    label = build.label
    used = sorted({r["builds"][label][k]["transport"] for r in rounds for k, _ in PASSES})
    print(f"\n## {label}: {build.origin}\n\n{build.version}; "
          f"--fuse-transport {build.transport or '(not passed)'}; transport used: "
          f"{', '.join(used)}\n")
    print("| pass | " + " | ".join(title for title, _ in COLUMNS) + " |")
    print("|---" * (len(COLUMNS) + 1) + "|")
    for key, name in PASSES:
        print(f"| {name} | " + " | ".join(cell(column(rounds, label, key, field))
                                          for _, field in COLUMNS) + " |")
    tree_open = column(rounds, label, "warm-fuse", "tree_open_files_s")
    print(f"\nwarm through FUSE: × warm tree is against the warm tree read with open() "
          f"({cell(tree_open)} files/s).")
    for key in ("hot", "cold-http", "disk-tier"):
        checks = column(rounds, label, key, "check")
        print(f"{key} (last round): {checks[-1]}")
        for n, check in enumerate(checks[:-1]):
            if check.startswith("NOT HOT"):
                print(f"{key} (round {n + 1}): {check}")


def print_ratios(rounds, builds):
    base = builds[0]
    fields = [(t, f) for t, f in COLUMNS if not t.startswith("×")]
    for b in builds[1:]:
        print(f"\n## {b.label} / {base.label} (ratio of the medians; below 1 is less CPU, "
              "or fewer files/s)\n")
        print("| pass | " + " | ".join(t for t, _ in fields) + " |")
        print("|---" * (len(fields) + 1) + "|")
        for key, name in PASSES:
            cells = []
            for _, f in fields:
                old = statistics.median(column(rounds, base.label, key, f))
                new = statistics.median(column(rounds, b.label, key, f))
                cells.append(f"{new / old:.2f}" if old else "-")
            print(f"| {name} | " + " | ".join(cells) + " |")


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "?"


PERF_LINE = re.compile(r"^\s*([\d.]+)%\s+(\S+)\s+\[.\]\s+(.*?)(\s+-\s+-)?\s*$")


def top_symbols(report, count=10):
    """The `count` largest shares of a `perf report --sort dso,symbol`, as "symbol share";
    the addresses of a library without symbols (libcrypto, libxxhash) summed as one."""
    shares = {}
    for m in filter(None, map(PERF_LINE.match, report.splitlines())):
        share, dso, symbol = float(m[1]), m[2], m[3]
        name = f"{dso} (no symbols)" if symbol.startswith("0x") else symbol
        shares[name] = shares.get(name, 0.0) + share
    top = sorted(shares.items(), key=lambda kv: -kv[1])[:count]
    return "; ".join(f"{name} {share:.1f}%" for name, share in top)


def perf_reports(out, builds):
    """perf report's top 40 symbols of each kept profile as .txt (while the copied binaries
    are there to resolve symbols in); lines that say the top 10 of each."""
    said = []
    for b in builds:
        for key, name in PASSES:
            data = os.path.join(out, f"{b.key}-{key}.data")
            if not os.path.exists(data):
                continue
            # dso beside symbol: a stripped library's samples then say whose they are.
            report = subprocess.run(["perf", "report", "--stdio", "--no-children", "--sort",
                                     "dso,symbol", "-g", "none", "-i", data],
                                    capture_output=True, text=True).stdout
            with open(data[:-len(".data")] + ".txt", "w") as f:
                f.write("\n".join(report.splitlines()[:40]) + "\n")
            said.append(f"{b.label}, {name}: {top_symbols(report)}")
    return said


# --- the run --------------------------------------------------------------------------

def parse_args():
    parser = arg_parser(
        __doc__,
        epilog=f"environment: GPUFSD (now {GPUFSD}), BASE_GPUFSD (now {BASE_GPUFSD}): the "
               "builds; BASE_GPUFSD unset, GPUFSD alone")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every build")
    parser.add_argument("--mb", type=int, default=192, help="MB of ~64 KB JPEGs")
    parser.add_argument("--quick", action="store_true", help="1 round of 48 MB")
    parser.add_argument("--perf", metavar="OUTDIR", help="profile each gpufs pass there")
    parser.add_argument("--transports", default="auto",
                        help="GPUFSD's --fuse-transport values, comma-separated, where it "
                             "has the option: auto, io_uring, dev_fuse")
    parser.add_argument("--cache", default="/var/tmp/gpufs-cost-src",
                        help="where the generated tree is kept between runs")
    parser.add_argument("--tier-base", default="/var/tmp", help="the disk tier's file system")
    parser.add_argument("--out", help="results.json and the daemons' logs (default: new "
                                      "folder under /var/tmp)")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.mb = 1, 48
    args.transports = [t for t in args.transports.split(",") if t]
    args.out = args.out or tempfile.mkdtemp(prefix="gpufs-cost-results-", dir="/var/tmp")
    return args


def builds_of(args, work):
    """The builds run in each round, in turn: the base, then the new one per transport."""
    transports = args.transports if mount_has("--fuse-transport") else [None]
    builds = [Build("base", BASE_GPUFSD, None, work)] if BASE_GPUFSD else []
    for t in transports:
        label = f"new {t}" if len(transports) > 1 else "new"
        builds.append(Build(label, GPUFSD, t, work))
    return builds


def one_round(run, builds, n, blobs):
    """A round: the limits, then every build's passes; {"limits", "builds"}."""
    print(f"round {n + 1}:", flush=True)
    run.limits = limits(run.data, blobs, 1000 * n)
    result = {"limits": run.limits, "builds": {}}
    for b in builds:
        seed = 1000 * n + 10
        with fuse_uring(b.transport == "io_uring"):
            rows = dict(run.ram_passes(b, seed), **run.http_passes(b, seed + 5))
        result["builds"][b.label] = rows
        print(f"  {b.label}: " + "; ".join(
            f"{k} {r['files_s']:.0f} files/s {r['gpufsd_us']:.0f} µs/file [{r['transport']}]"
            for k, r in rows.items()), flush=True)
    return result


def main():
    args = parse_args()
    need_root("cost.py", "FUSE mounts, drop_caches")
    if nginx.NginxOrigin.skip_reason():
        sys.exit(f"cost.py: {nginx.NginxOrigin.skip_reason()}")
    unwind_on_signals()  # SIGTERM unwinds the `with` blocks too: no mount left behind
    files = args.mb * 1000 // FILE_KB
    tree = sample_tree(args.cache, files - files % CLASSES, CLASSES, MAX_SIDE)
    data = Dataset(tree)
    if args.perf:
        os.makedirs(args.perf, exist_ok=True)
    with contextlib.ExitStack() as stack:
        work, served = packed_work(stack, GPUFSD, tree, "gpufs-cost-", "/dev/shm", args.out)
        tier_work = Work(tempfile.mkdtemp(prefix="gpufs-cost-tier-", dir=args.tier_base))
        stack.callback(shutil.rmtree, tier_work.root, ignore_errors=True)
        pack = os.path.join(served, "pack")
        blobs = sorted(os.path.join(pack, n) for n in os.listdir(pack) if n.startswith("blob-"))
        origin = stack.enter_context(nginx.NginxOrigin(served))
        run = Run(data, work, pack, origin.url + "/pack/", tier_work, args.perf)
        builds = builds_of(args, work)
        print(f"{data.files} files, mean {data.bytes / data.files / 1e3:.1f} KB; builds: "
              + ", ".join(f"{b.label} ({b.origin})" for b in builds), flush=True)
        rounds = [one_round(run, builds, n, blobs) for n in range(args.rounds)]
        pack_bytes = tree_bytes(pack)[1]
        profiles = perf_reports(args.perf, builds) if args.perf else []
    print_limits(rounds, data, args, pack_bytes)
    for b in builds:
        print_build(rounds, b)
    print_ratios(rounds, builds)
    if profiles:
        print(f"\n## Profiles of gpufsd (last round; perf report in {args.perf})\n")
        print("\n".join(f"- {line}" for line in profiles))
    save_results(args.out, {"files": data.files, "bytes": data.bytes, "rounds": rounds},
                 f" (daemons' logs in {args.out}/logs)")


if __name__ == "__main__":
    main()
