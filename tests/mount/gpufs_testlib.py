"""Shared helpers of the mount and end-to-end tests: a sample dataset and a real mount.

A mount is started in the foreground with --ready-fd and is waited for on that pipe, not
with sleeps; leaving the context unmounts it and checks that the daemon exited 0.
"""
import json
import hashlib
import os
import select
import shlex
import subprocess
import sys
import shutil
import tempfile
import threading
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPUFSD = os.environ.get("GPUFSD", os.path.join(ROOT, "build", "cli", "gpufsd"))
GPUFS_STAT = os.environ.get("GPUFS_STAT", os.path.join(ROOT, "build", "cli", "gpufs-stat"))
SKIP = 77  # meson's exit status for a skipped test
# A mount that finds no keys would ask the instance metadata service (169.254.169.254) last:
# tests talk to loopback only, so it is off unless a test points it at a loopback fake.
os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")

sys.path.insert(0, os.path.join(ROOT, "tools"))
import make_sample  # noqa: E402


def exit_unless_fuse_usable():
    """Skips the whole test program, loudly, where no FUSE mount can be made."""
    if not os.path.exists("/dev/fuse"):
        print("SKIP: /dev/fuse is missing; mount tests need a real FUSE mount")
        sys.exit(SKIP)
    try:
        os.close(os.open("/dev/fuse", os.O_RDWR))
    except OSError as e:
        print(f"SKIP: /dev/fuse cannot be opened ({e}); mount tests need a real FUSE mount")
        sys.exit(SKIP)


def make_dataset(root, classes, per_class, group_size, awkward=True, seed=1):
    """Returns (tree, mytar group folder) of a fresh sample under root."""
    tree = os.path.join(root, "tree")
    make_sample.make_tree(tree, classes, per_class, seed, awkward, max_side=160)
    folder = make_sample.group_mytar(tree, os.path.join(root, "mytar"), group_size, seed)
    return tree, folder


def make_split_tree(tree, train, val):
    """An ImageFolder tree with train/ and val/ splits of awkward names; (classes, per
    class) for each split."""
    make_sample.make_tree(os.path.join(tree, "train"), *train, 1, True, 160)
    make_sample.make_tree(os.path.join(tree, "val"), *val, 2, True, 160)
    return tree


def files_below(root):
    """{relative path: bytes} of every regular file below root."""
    out = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root)] = f.read()
    return out


def digest_files(root):
    """{relative path: (size, sha256)} of the regular files below root (links not followed)."""
    out = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            with open(path, "rb") as f:
                data = f.read()
            out[os.path.relpath(path, root)] = (len(data), hashlib.sha256(data).hexdigest())
    return out


def is_mounted(path):
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        return any(line.split()[4] == path for line in f)


def is_running(pid):
    """False once pid has exited, even while it waits as a zombie for a reaper."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


STATS = "user.gpufs.stats"


def stats_of(mnt):
    """The daemon's counters, as user.gpufs.stats has them."""
    return json.loads(os.getxattr(mnt, STATS))


def settled_stats(mnt, done, what, timeout=30):
    """The daemon's counters once done(stats) holds: a group's load finishes after the
    files in its first pieces were already served."""
    deadline = time.monotonic() + timeout
    while True:
        stats = stats_of(mnt)
        if done(stats):
            return stats
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s; the counters are {stats}")
        time.sleep(0.02)


def watch(mnt, count=1, json_lines=False, interval=0.1):
    """`gpufs-stat -w` off a terminal for `count` refreshes: a {key: value} per refresh,
    from its key=value lines (values as printed, "-" where not measured) or, with
    json_lines, from its --json objects (null where not measured)."""
    args = [GPUFS_STAT, "-w", "--interval", str(interval), "--count", str(count), mnt]
    if json_lines:
        args.insert(1, "--json")
    run = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert len(lines) == count, run.stdout
    if json_lines:
        return [json.loads(line) for line in lines]
    return [dict(item.split("=", 1) for item in shlex.split(line)) for line in lines]


def drop_page_cache():
    """So that the next pass reads through the daemon again, not from the kernel."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")


def pack_to_serve(tree, served, group_bytes):
    """`gpufsd pack` of tree into served/pack, the folder a web server then serves (made
    if need be); the pack's path."""
    os.makedirs(served, exist_ok=True)
    pack = os.path.join(served, "pack")
    result = run_gpufsd("pack", tree, pack, "--group-bytes", group_bytes)
    assert result.returncode == 0, result.stderr
    return pack


def pack_in_s3(cls, prefix, train, val, group_bytes, served=None):
    """For a setUpClass: a split tree of `train`/`val` shapes in a fresh cls.work, packed
    (into cls.work/`served` when given) and uploaded under pack/ of a fresh bucket of the
    shared S3 store. Sets cls.work, cls.expected, cls.s3 and cls.bucket; the pack's path."""
    from tests.servers import ceph_s3  # the mount tests that need no store do not load it
    cls.work = tempfile.mkdtemp(prefix=f"gpufs-{prefix}-")
    tree = make_split_tree(os.path.join(cls.work, "tree"), train, val)
    cls.expected = files_below(tree)
    pack = pack_to_serve(tree, os.path.join(cls.work, served or ""), group_bytes)
    cls.s3 = ceph_s3.shared()
    cls.bucket = ceph_s3.unique_bucket(prefix)
    cls.s3.make_bucket(cls.bucket)
    cls.s3.upload_tree(pack, cls.bucket, "pack/")
    return pack


def blob_bytes(pack):
    """Bytes in a pack's blobs, its index left out: what a full read fetches."""
    return sum(os.path.getsize(os.path.join(pack, n)) for n in os.listdir(pack)
               if n != "index.gpufs")


def bounded(seconds, what, fn, *args):
    """fn(*args), or an AssertionError when it has not returned within `seconds`: a test
    that a read does not hang must not hang itself. (On a failure the call's thread is
    left behind, a daemon thread.)"""
    box = {}

    def call():
        try:
            box["value"] = fn(*args)
        except BaseException as e:  # raised again in the caller's thread
            box["error"] = e

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise AssertionError(f"{what} did not finish within {seconds} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def run_gpufsd(*args, timeout=60, env=None):
    return subprocess.run([GPUFSD, *args], capture_output=True, text=True, timeout=timeout,
                          env=env)


class Mount:
    """`with Mount(src) as mnt:` serves src at a fresh folder for the duration."""

    def __init__(self, source, *options, env=None):
        self.source = source
        self.options = list(options)
        self.env = env  # of the daemon; None: this process's
        self.mountpoint = tempfile.mkdtemp(prefix="gpufs-mnt-")
        self.proc = None

    def __enter__(self):
        read_end, write_end = os.pipe()
        # A file, not a pipe: nobody reads the log until the end, and a full pipe would
        # stop the daemon at its next log line.
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            [GPUFSD, "mount", "-f", "--ready-fd", str(write_end), *self.options,
             self.source, self.mountpoint],
            pass_fds=[write_end], stderr=self.log, text=True, env=self.env)
        os.close(write_end)
        ready, _, _ = select.select([read_end], [], [], 30)
        message = os.read(read_end, 16) if ready else b""
        os.close(read_end)
        if message != b"ready\n":
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError(f"gpufsd did not become ready: {self.stderr()}")
        return self.mountpoint

    def __exit__(self, *exc):
        if is_mounted(self.mountpoint):
            result = run_gpufsd("unmount", self.mountpoint)
            assert result.returncode == 0, result.stderr
        status = self.proc.wait(timeout=30)
        stderr = self.stderr()
        self.log.close()
        os.rmdir(self.mountpoint)
        assert status == 0, f"gpufsd exited {status}: {stderr}"
        return False

    def stderr(self):
        """What the daemon has logged so far."""
        self.log.seek(0)
        return self.log.read()


class WorkFolderCase(unittest.TestCase):
    """A test class whose tests each get a folder of their own (self.work, removed after),
    an empty mount point in it (self.mnt, unmounted after) and an environment whose state
    and cache folders are in it (self.env). The folder's prefix is a class attribute."""

    PREFIX = "gpufs-work-"

    def setUp(self):
        self.work = tempfile.mkdtemp(prefix=self.PREFIX)
        self.mnt = os.path.join(self.work, "mnt")
        os.mkdir(self.mnt)
        self.env = {**os.environ, "XDG_STATE_HOME": os.path.join(self.work, "state"),
                    "XDG_CACHE_HOME": os.path.join(self.work, "cache")}

    def tearDown(self):
        if is_mounted(self.mnt):
            run_gpufsd("unmount", self.mnt)
        shutil.rmtree(self.work)


class MountedSampleCase(unittest.TestCase):
    """A test class whose tests share one sample (self.tree, self.src) mounted at self.mnt.

    Sizes are class attributes; with PER_CLASS * CLASSES a multiple of GROUP_SIZE every
    file of the tree is grouped, so the mount must show exactly the tree.
    """

    CLASSES, PER_CLASS, GROUP_SIZE = 6, 10, 4

    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="gpufs-test-")
        cls.tree, cls.src = make_dataset(cls.work, cls.CLASSES, cls.PER_CLASS, cls.GROUP_SIZE)
        cls.mount = Mount(cls.src)
        cls.mnt = cls.mount.__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.mount.__exit__(None, None, None)
        shutil.rmtree(cls.work)


class ServedPackCase(unittest.TestCase):
    """A test class whose tests mount one pack served by a real nginx (self.url, files
    self.expected), each test with a cache folder of its own (self.env's XDG_CACHE_HOME).

    The split tree's sizes, the group size and the work folder's prefix are class
    attributes."""

    TRAIN, VAL, GROUP_BYTES, PREFIX = (4, 12), (2, 4), "64KiB", "gpufs-served-"

    @classmethod
    def setUpClass(cls):
        sys.path.insert(0, ROOT)
        from tests.servers import nginx
        reason = nginx.NginxOrigin.skip_reason()
        if reason:
            raise unittest.SkipTest(reason)
        cls.work = tempfile.mkdtemp(prefix=cls.PREFIX)
        tree = make_split_tree(os.path.join(cls.work, "tree"), cls.TRAIN, cls.VAL)
        cls.expected = files_below(tree)
        served = os.path.join(cls.work, "served")
        pack_to_serve(tree, served, cls.GROUP_BYTES)
        cls.origin = nginx.NginxOrigin(served).__enter__()
        cls.url = cls.origin.url + "/pack/"

    @classmethod
    def tearDownClass(cls):
        cls.origin.__exit__(None, None, None)
        shutil.rmtree(cls.work)

    def setUp(self):
        self.xdg = tempfile.mkdtemp(prefix="xdg-", dir=self.work)
        self.env = {**os.environ, "XDG_CACHE_HOME": self.xdg}
