"""Helpers shared by the benchmarks."""
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
from servers.procs import Daemon, exit_on_sigterm, wait_for  # noqa: E402

_LIBC = ctypes.CDLL(None, use_errno=True)  # for the CPU clocks of other processes


def drop_caches():
    """Empties the page, dentry and inode caches; False (and nothing done) unless root."""
    if os.geteuid() != 0:
        return False
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")
    return True


def sh(*cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()


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


def sample_tree(cache, files, classes, max_side=720):
    """A generated ImageFolder tree of real JPEGs (longest side `max_side`: 720 gives
    ImageNet-like sizes, a mean of ~130 KB; 440 ~50 KB) under `cache`, made once per (files,
    classes, max_side) and reused by later runs; its path."""
    # The default's folder keeps its old name, so that trees made before stay reused.
    tree = os.path.join(cache, f"tree-{files}-{classes}"
                        + ("" if max_side == 720 else f"-{max_side}"))
    if not os.path.isdir(tree):
        make_sample.make_tree(tree + ".part", classes, files // classes, 0, False, max_side)
        os.rename(tree + ".part", tree)
    return tree


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


def begin_run(cache, out, files, classes):
    """What a benchmark that starts servers and mounts does first: Ctrl-C and SIGTERM made
    to unwind through its `with` blocks, which stop all of them (SIGINT too when a shell
    started it in the background with SIGINT ignored); the folders `cache` and `out` made;
    the sample tree of `files` in `classes`. Returns (tree, files, bytes)."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    exit_on_sigterm()
    os.makedirs(cache, exist_ok=True)
    os.makedirs(out, exist_ok=True)
    tree = sample_tree(cache, files, classes)
    return (tree, *tree_bytes(tree))


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


def gpufs_stats(mnt):
    """The daemon's counters (user.gpufs.stats on the mount's root) as a dict."""
    return json.loads(os.getxattr(mnt, "user.gpufs.stats"))


def gpufs_source_bytes(mnt):
    """Bytes the mount's source has delivered so far (the "io" counters)."""
    return gpufs_stats(mnt)["io"]["bytes"]


def gpufs_tier_argv(gpufsd, tier, fresh_folder):
    """(mount options, label) that give a gpufsd mount the disk tier asked for: "off" (no
    tier, also for a remote source) or "fresh" (a new empty folder from `fresh_folder()`).
    A build from before the tier has none to turn off."""
    usage = subprocess.run([gpufsd, "mount", "--help"], capture_output=True, text=True).stdout
    if "--disk-cache" not in usage:
        return [], "off (this gpufsd has no disk tier)"
    if tier == "off":
        return ["--no-disk-cache"], "off"
    if tier == "fresh":
        return ["--disk-cache", fresh_folder()], "fresh empty folder"
    raise ValueError(tier)


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


def is_mounted(path):
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        return any(line.split()[4] == path for line in f)


class FuseMount:
    """A FUSE daemon run in the foreground (`argv` mounts at `mnt`), waited for in the mount
    table and stopped by pid: `with FuseMount(...) as m:` ... m.pid, m.log.

    `unmount` is the command that unmounts it (fusermount3 -u by default); a busy mount is
    detached lazily, and a daemon that does not exit is killed. The daemon gets SIGTERM if
    this process dies first, so an interrupted benchmark leaves no mount behind."""

    def __init__(self, name, argv, mnt, env=None, unmount=None, timeout=60):
        self.name, self.mnt, self.timeout = name, mnt, timeout
        self.unmount = unmount or ["fusermount3", "-u", mnt]
        self.log = os.path.join(os.path.dirname(mnt), os.path.basename(mnt) + ".log")
        self.daemon = Daemon(name, argv, self.log, env=env)

    def __enter__(self):
        try:
            self.daemon.start()
            wait_for(f"{self.name} to mount {self.mnt}", lambda: is_mounted(self.mnt),
                     time.monotonic() + self.timeout, [self.daemon])
        except BaseException:
            self.close()
            raise
        return self

    @property
    def pid(self):
        return self.daemon.pid

    def close(self):
        if is_mounted(self.mnt):
            if subprocess.run(self.unmount, capture_output=True).returncode != 0:
                subprocess.run(["fusermount3", "-uz", self.mnt], capture_output=True)
        self.daemon.stop(timeout=30, sig=signal.SIGTERM)

    def __exit__(self, *exc):
        self.close()


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
