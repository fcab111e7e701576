"""Helpers shared by the benchmarks (their mounts: benchmount.py)."""
import argparse
import ctypes
import glob
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PYTHON = "/usr/bin/python3"  # the interpreter with torch and torchvision
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import make_sample  # noqa: E402
from servers import nginx  # noqa: E402
from servers.procs import exit_on_sigterm  # noqa: E402

_LIBC = ctypes.CDLL(None, use_errno=True)  # for the CPU clocks of other processes


def drop_caches(level=3):
    """Empties the page, dentry and inode caches (`level` 1: the page cache alone); False
    (and nothing done) unless root."""
    if os.geteuid() != 0:
        return False
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write(f"{level}\n")
    return True


def need_root(name, why):
    """Exits with "NAME: needs root (WHY)" unless this process is root's."""
    if os.geteuid() != 0:
        sys.exit(f"{name}: needs root ({why})")


def install_bench_deps():
    """tools/install_deps.sh bench: the servers and tools the benchmarks compare with."""
    subprocess.run(["bash", os.path.join(ROOT, "tools", "install_deps.sh"), "bench"],
                   check=True)


def sh(*cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()


def run(cmd, **kw):
    """`cmd` run to its end, its output captured as text; raises where it fails."""
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def timed(fn):
    """(seconds, result) of fn()."""
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


# Run by python_timed in a fresh interpreter: each prints "SECONDS COUNT".
WALK = ("import os, sys, time; t = time.perf_counter(); "
        "n = sum(len(f) for _, _, f in os.walk(sys.argv[1])); "
        "print(time.perf_counter() - t, n)")
IMAGEFOLDER = ("import sys, time; from torchvision import datasets; t = time.perf_counter(); "
               "d = datasets.ImageFolder(sys.argv[1]); print(time.perf_counter() - t, len(d))")


def python_timed(code, path):
    """(seconds, count) that `code` (WALK, IMAGEFOLDER) prints over `path`."""
    seconds, count = run([PYTHON, "-c", code, path]).stdout.split()
    return float(seconds), int(count)


def memory_kib(pid):
    """{"VmRSS", "RssAnon", "RssFile"}: process `pid`'s resident memory in KiB."""
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile"):
                fields[key] = int(value.split()[0])
    return fields


class SlowVolume:
    """An ext4 image on a loop device whose reads are throttled by a blkio cgroup."""

    def __init__(self, size_mb, iops, mbps):
        self.dir = tempfile.mkdtemp(prefix="gpufs-slow-")
        self.image = os.path.join(self.dir, "disk.img")
        self.mnt = os.path.join(self.dir, "mnt")
        os.mkdir(self.mnt)
        sh("truncate", "-s", f"{size_mb + 64}M", self.image)
        # Inode tables initialised now, not by a background thread competing with the runs.
        sh("mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", self.image)
        self.loop = sh("losetup", "--find", "--show", self.image)
        sh("mount", self.loop, self.mnt)
        # The throttle counts requests after the block layer splits them; a real volume
        # takes large requests whole, so let the loop device take them as large as it can.
        queue = f"/sys/block/{os.path.basename(self.loop)}/queue"
        with open(f"{queue}/max_hw_sectors_kb") as f:
            self.max_kb = int(f.read())
        with open(f"{queue}/max_sectors_kb", "w") as f:
            f.write(str(self.max_kb))
        major, minor = os.major(os.stat(self.loop).st_rdev), os.minor(os.stat(self.loop).st_rdev)
        self.device = f"{major}:{minor}"
        self.group = f"/sys/fs/cgroup/blkio/gpufs-bench-{os.getpid()}"
        os.makedirs(self.group, exist_ok=True)
        for knob, value in (("read_iops_device", iops), ("read_bps_device", mbps * 1000 * 1000)):
            with open(os.path.join(self.group, "blkio.throttle." + knob), "w") as f:
                f.write(f"{major}:{minor} {value}\n")

    def reads(self):
        """(read requests completed, bytes read) by the loop device so far: the requests
        the throttle counted (/sys/block/loopN/stat, after the block layer's splits)."""
        with open(f"/sys/block/{os.path.basename(self.loop)}/stat") as f:
            fields = f.read().split()
        return int(fields[0]), int(fields[2]) * 512

    def enter(self, pid):
        """Throttles the reads of process `pid` (and of the children it starts later)."""
        with open(os.path.join(self.group, "cgroup.procs"), "w") as f:
            f.write(str(pid))

    def wrap(self, argv):
        """`argv` run inside the throttle, with every process and thread it starts."""
        return ["sh", "-c", f'echo $$ > {self.group}/cgroup.procs && exec "$@"', "sh", *argv]

    def close(self):
        with open(os.path.join(self.group, "cgroup.procs")) as f:
            for pid in f.read().split():
                with open("/sys/fs/cgroup/blkio/cgroup.procs", "w") as root:
                    try:
                        root.write(pid)
                    except OSError:
                        pass  # exited meanwhile
        os.rmdir(self.group)
        sh("umount", self.mnt)
        sh("losetup", "-d", self.loop)
        sh("rm", "-rf", self.dir)


def sample_tree(cache, files, classes, max_side=720, name=None):
    """A generated ImageFolder tree of real JPEGs (longest side `max_side`: 720 gives
    ImageNet-like sizes, a mean of ~130 KB; 440 ~50 KB) under `cache` (in folder `name`
    where given), made once per (files, classes, max_side) and reused by later runs; its
    path."""
    # The default's folder keeps its old name, so that trees made before stay reused.
    tree = os.path.join(cache, name or f"tree-{files}-{classes}"
                        + ("" if max_side == 720 else f"-{max_side}"))
    if not os.path.isdir(tree):
        make_sample.make_tree(tree + ".part", classes, files // classes, 0, False, max_side)
        os.rename(tree + ".part", tree)
    return tree


def random_tree(tree, files, least, spread, classes=20):
    """`files` files of random bytes (`least` + up to `spread` bytes each, seeded: the same
    tree each time) in `classes` class folders of ImageFolder's shape under `tree`."""
    rng = random.Random(1)
    for i in range(files):
        folder = os.path.join(tree, f"n{i % classes:08d}")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"img_{i:06d}.JPEG"), "wb") as f:
            f.write(rng.randbytes(least + rng.randrange(spread)))


def blob_bytes(pack):
    """(blob files, their bytes) of a native pack."""
    blobs = [os.path.join(pack, n) for n in os.listdir(pack) if n.startswith("blob-")]
    return blobs, sum(os.path.getsize(b) for b in blobs)


def grouped_files(src, tree):
    """Files the index lists (the grouping tool leaves len % G out), relative to the tree."""
    with open(os.path.join(src, "metadata.txt"), encoding="utf-8") as f:
        lines = f.read().splitlines()
    members = [line.split(",", 4) for line in lines[int(lines[0]) + 1:]]
    return [os.path.relpath(m[4], tree) for m in members if len(m) == 5]


def sample_mytar(work, files, classes, max_side, group_size):
    """A tree of real JPEGs and its mytar grouping under `work`, each made once and reused:
    (tree, mytar folder, the grouped files relative to the tree, their mean size in KB)."""
    tree = os.path.join(work, "tree")
    if not os.path.isdir(tree):
        make_sample.make_tree(tree, classes, files // classes, 0, False, max_side)
    src = os.path.join(work, "mytar", str(group_size))
    if not os.path.isfile(os.path.join(src, "metadata.txt")):
        make_sample.group_mytar(tree, os.path.join(work, "mytar"), group_size, 0)
    rel = grouped_files(src, tree)
    mean_kb = sum(os.path.getsize(os.path.join(tree, r)) for r in rel) / len(rel) / 1000
    return tree, src, rel, mean_kb


class Work:
    """Fresh folders under one work folder; the daemons' logs are kept apart."""

    def __init__(self, root):
        self.root = root
        self.serial = 0

    def fresh(self, what):
        self.serial += 1
        path = os.path.join(self.root, f"{what.replace(' ', '-')}-{self.serial}")
        os.mkdir(path)
        return path

    def keep_logs(self, out):
        logs = os.path.join(out, "logs")
        os.makedirs(logs, exist_ok=True)
        for path in glob.glob(os.path.join(self.root, "*.log")):
            shutil.copy(path, logs)


def packed_work(stack, gpufsd, tree, prefix, base, out):
    """A work folder under `base` for one run, removed when `stack` closes (the daemons'
    logs kept in `out` first), and a folder in it that holds `tree` packed as "pack".
    Returns (work, that folder)."""
    work = Work(tempfile.mkdtemp(prefix=prefix, dir=base))
    stack.callback(shutil.rmtree, work.root, ignore_errors=True)
    stack.callback(work.keep_logs, out)
    served = work.fresh("served")
    subprocess.run([gpufsd, "pack", tree, os.path.join(served, "pack")], check=True,
                   capture_output=True)
    return work, served


def unwind_on_signals():
    """Ctrl-C and SIGTERM made to unwind through the `with` blocks and finally clauses, which
    stop every server and mount (SIGINT too when a shell started this in the background
    with SIGINT ignored)."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    exit_on_sigterm()


def begin_run(cache, out, files, classes, max_side=720):
    """What a benchmark that starts servers and mounts does first: unwind_on_signals(); the
    folders `cache` and `out` made; the sample tree of `files` in `classes` (sample_tree's
    `max_side`). Returns (tree, files, bytes)."""
    unwind_on_signals()
    os.makedirs(cache, exist_ok=True)
    os.makedirs(out, exist_ok=True)
    tree = sample_tree(cache, files, classes, max_side)
    return (tree, *tree_bytes(tree))


def print_dataset(files, data_bytes):
    print(f"{files} files, mean {data_bytes / files / 1e3:.0f} KB, "
          f"{data_bytes / 1e6:.0f} MB", flush=True)


def tree_bytes(root):
    """(files, bytes) below root."""
    total = files = 0
    for folder, _, names in os.walk(root):
        for name in names:
            total += os.path.getsize(os.path.join(folder, name))
            files += 1
    return files, total


def loader_epochs(root, mode, epochs=1, workers=2, drop=True, extra=(), preexec_fn=None,
                  timeout=None):
    """Runs tools/bench/epoch_loader.py (the unmodified torchvision loader) over root in a
    fresh process; one dict per epoch (files, seconds, files_per_s, scan_seconds, ...)."""
    cmd = [PYTHON, os.path.join(HERE, "epoch_loader.py"), root, "--epochs", str(epochs),
           "--mode", mode, "--workers", str(workers), *extra]
    if drop:
        cmd.append("--drop-caches")
    drop_caches()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True,
                         preexec_fn=preexec_fn, timeout=timeout).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def read_progress(path):
    """[(files, monotonic seconds)] that epoch_loader.py --progress wrote so far; the last
    is when the loader raised, if it did."""
    try:
        with open(path) as f:
            whole = f.read().split("\n")[:-1]  # the last line is not whole until its \n
    except FileNotFoundError:
        return []
    points = []
    for line in whole:
        fields = line.split()
        points.append((int(fields[0]), float(fields[1])))
    return points


def progress_epochs(points):
    """read_progress's points split into one list per epoch: each epoch starts at 0 files
    and no batch is empty, so a 0 begins the next one."""
    epochs = []
    for files, t in points:
        if files == 0 or not epochs:
            epochs.append([])
        epochs[-1].append((files, t))
    return epochs


class Sampler:
    """`probe()` sampled every `interval` seconds on a thread while in the `with` block:
    `samples`, a list of (monotonic seconds, value); a probe that raises OSError (a mount
    going away) leaves a gap."""

    def __init__(self, probe, interval=0.02):
        self.probe, self.interval, self.samples = probe, interval, []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._done.is_set():
            try:
                self.samples.append((time.monotonic(), self.probe()))
            except OSError:
                pass
            self._done.wait(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        self._thread.join()


def last_growth(samples, start, end, slack=0.02):
    """The time of the last of `samples` in (start, end + slack] at which the value had
    grown since the sample before; None where it never grew there. A sample is taken after
    the growth it sees, so this is when the source's last byte had surely arrived."""
    grew = [t for (t, value), (_, earlier) in zip(samples[1:], samples)
            if value > earlier and start < t <= end + slack]
    return grew[-1] if grew else None


def consumed_while_reading(points, until):
    """The fraction of an epoch's files that the loader had returned by monotonic time
    `until` (the source's last byte): 1.0 when the source read to the epoch's end, 0.0 when
    it had finished before the first batch. `points` is one epoch of progress_epochs."""
    total = points[-1][0]
    if not total:
        return None
    return max((files for files, t in points if t <= until), default=0) / total


def reading_split(samples, progress, epoch, index=0):
    """How an epoch lined up with its source's reads: `source_end_s`, when the source's
    last byte arrived (seconds into the epoch; None where the count never grew in it),
    `first_batch_s`, when the loader returned its first batch, and
    `consumed_while_reading`, the fraction of the epoch's files the loader had returned by
    the source's last byte (0.0 where the source read nothing). `samples`: the source's
    byte count over time (a Sampler's); `progress`: the epoch_loader.py --progress file of
    the run; `epoch`: the run's row of epoch number `index` (from 0)."""
    start = epoch["monotonic_start"]
    points = progress_epochs(read_progress(progress))[index]
    # When the loader's first batch came: a source done before it has a fraction of 0.
    split = {"first_batch_s": points[1][1] - start if len(points) > 1 else None}
    end = last_growth(samples, start, start + epoch["seconds"])
    if end is None:
        return dict(split, source_end_s=None, consumed_while_reading=0.0)
    return dict(split, source_end_s=end - start,
                consumed_while_reading=consumed_while_reading(points, end))


def files_of(root):
    """Every file below root, relative to it, sorted."""
    return sorted(os.path.relpath(os.path.join(f, n), root)
                  for f, _, names in os.walk(root) for n in names)


def read_shuffled(mnt, paths, threads, seed, per_file=None):
    """(seconds, bytes) of reading every file of `paths` (relative to `mnt`) once, in the
    order `seed` shuffles, dealt out to `threads` readers as a loader's workers are.
    `per_file(data)` runs on each file's bytes in its reader (the loader's own work). The
    first read error is raised once every reader has stopped."""
    order = paths[:]
    random.Random(seed).shuffle(order)
    total, lock, errors = [0], threading.Lock(), []

    def reader(chunk):
        got = 0
        try:
            for rel in chunk:
                with open(os.path.join(mnt, rel), "rb") as f:
                    data = f.read()
                got += len(data)
                if per_file:
                    per_file(data)
        except OSError as e:
            errors.append(e)
        with lock:
            total[0] += got

    readers = [threading.Thread(target=reader, args=(order[i::threads],))
               for i in range(threads)]
    start = time.perf_counter()
    for t in readers:
        t.start()
    for t in readers:
        t.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - start, total[0]


def read_in_random_order(mnt, paths, threads=4):
    """read_shuffled in one seeded order, with no work of the loader's own."""
    return read_shuffled(mnt, paths, threads, seed=len(paths))


def cpu_seconds(pid):
    """User + system CPU seconds that process `pid` has used so far, every thread (exited
    ones too): from its CPU clock, to the nanosecond, else from /proc, in clock ticks (10
    ms, a tenth of a small pass's)."""
    clock = ctypes.c_int()
    if _LIBC.clock_getcpuclockid(pid, ctypes.byref(clock)) == 0:
        return time.clock_gettime(clock.value)
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_group_dying_with_parent():
    """A preexec_fn: SIGTERM when this process dies, and a process group of its own, so
    that the child's own children (a DataLoader's workers) are stopped with it."""
    _LIBC.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    os.setpgid(0, 0)


def cpu_now(groups, pids):
    """CPU seconds used so far: {name: seconds} for each name's process groups in `groups`
    (every live member, with the children it reaped: a DataLoader's workers), each name's
    single processes in `pids` (gpufsd, with its threads), and "busy" for the whole machine
    (/proc/stat: all but idle and iowait)."""
    tick = os.sysconf("SC_CLK_TCK")
    owner = {pgid: name for name, pgids in groups.items() for pgid in pgids}
    used = dict.fromkeys(list(groups) + list(pids), 0.0)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited meanwhile
        name = owner.get(int(fields[2]))
        if name:
            used[name] += sum(int(x) for x in fields[11:15]) / tick
    for name, members in pids.items():
        used[name] += sum(cpu_seconds(pid) for pid in members)
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    used["busy"] = (sum(ticks) - ticks[3] - ticks[4]) / tick
    return used


def text_bars(rows, width=50):
    """A bar chart in text: rows of (label, value), or (label, None) for a heading."""
    top = max((v for _, v in rows if v), default=1)
    pad = max(len(label) for label, _ in rows)
    lines = []
    for label, value in rows:
        if value is None:
            lines.append(label)
        else:
            lines.append(f"{label:{pad}}  {'#' * max(1, round(width * value / top)):{width}}"
                         f" {value:,.0f}")
    return "\n".join(lines)


def version_line(*argv):
    """The first line a program prints about its version ('' where it is missing)."""
    try:
        r = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    except OSError:
        return ""
    return (r.stdout or r.stderr).strip().split("\n")[0]


VERSION_OF = {"gpufs": ("git", "describe", "--always", "--dirty"), "s3fs": ("s3fs", "--version"),
              "rclone": ("rclone", "version"), "radosgw": ("radosgw", "--version"),
              "nginx": ("nginx", "-v"),
              "torch": (PYTHON, "-c", "import torch; print(torch.__version__)")}


def versions(*names):
    """{name: its version line} for the programs of VERSION_OF named ("gpufs": this tree's
    git describe), in that order."""
    return {name: version_line(*VERSION_OF[name]) for name in names}


# --- arguments, results and charts ------------------------------------------------------

# The options many benchmarks take: their type and help (each benchmark gives the default).
OPTIONS = {
    "files": (int, "JPEGs in the dataset"),
    "classes": (int, "class folders they are in"),
    "setups": (None, "local, store or both"),
    "workers": (int, "DataLoader workers"),
    "iops": (int, "the volume's read IOPS"),
    "mbps": (int, "the volume's read MB/s"),
    "delay_ms": (int, "emulated link: per request"),
    "rate_mb": (float, "emulated link: MB/s per connection"),
    "cache": (None, "where the generated tree is kept between runs"),
    "work": (None, "the local disk the benchmark's folders go to"),
    "out": (None, "where results.json is written"),
}


def arg_parser(doc, epilog=None):
    """The parser of a benchmark whose docstring is `doc` (its first line describes it)."""
    return argparse.ArgumentParser(description=doc.split("\n")[0], epilog=epilog)


def add_options(parser, **defaults):
    """--NAME for each keyword of OPTIONS (files=2000 adds --files, 2000 by default), in the
    order given; a (default, help) pair gives a help of its own. --out defaulting to None:
    a new temporary folder (the benchmark makes it)."""
    for key, default in defaults.items():
        kind, text = OPTIONS[key]
        if isinstance(default, tuple):
            default, text = default
        elif key == "out" and default is None:
            text = "results (default: a new temp folder)"
        parser.add_argument("--" + key.replace("_", "-"), type=kind, default=default, help=text)


def cloud_link(stack, url, args):
    """An nginx FaultProxy in front of `url` for as long as `stack` is open: +args.delay_ms
    per request, args.rate_mb MB/s per connection (the emulated cloud link)."""
    return stack.enter_context(nginx.FaultProxy(
        url, delay_ms=args.delay_ms, rate_bytes_per_s=int(args.rate_mb * 1e6)))


def middle(rows, key="files_per_s"):
    """The row with the median `key` (the lower middle of an even count)."""
    return sorted(rows, key=lambda r: r[key])[(len(rows) - 1) // 2]


def save_results(out, result, said="", default=None, tell=True):
    """`result` as out/results.json; with `tell`, "wrote PATH" and `said` printed after a
    blank line. Returns the path."""
    path = os.path.join(out, "results.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1, default=default)
    if tell:
        print(f"\nwrote {path}{said}")
    return path


def chart_text(out, lines, heading=None):
    """text_bars(lines) as out/chart.txt, and printed under `heading` where given."""
    text = text_bars(lines)
    with open(os.path.join(out, "chart.txt"), "w") as f:
        f.write(text + "\n")
    if heading:
        print(f"\n{heading}:\n" + text)


def pyplot(required=True):
    """matplotlib.pyplot, drawing to files; None where matplotlib is not installed and not
    `required`."""
    try:
        import matplotlib
    except ImportError:
        if required:
            raise
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt
