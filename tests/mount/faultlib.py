"""The harness of the fault tests: a reader child with deadlines, a tapped gpufsd, faultfs.

Every read of a mount that may hang is made by a child process (fault_reader.py) whose
threads report as they go and which is killed when its deadline passes, or by a thread
(bounded) for quick calls; a hung read is a failure that names the file, never a hung suite.
Leaving a Daemon or a FaultFs kills what still runs and detaches what is still mounted.
"""
import errno
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time

import gpufs_testlib as lib

FAULTFS = os.environ.get("FAULTFS", os.path.join(lib.ROOT, "build", "tests", "faultfs"))
READER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fault_reader.py")
READ_TIMEOUT = 10  # seconds a reader may take before it counts as hung
WAIT_TIMEOUT = 20  # seconds for a mount, an unmount or a daemon's exit
STRAGGLERS = []  # reader children stuck in a mount past a kill: reaped once its server dies


def describe(result, want):
    """What a reader got, in words: byte-exact, wrong bytes, an errno name, or timeout."""
    if result is None:
        return "timeout (the read hung)"
    if result[0] == "err":
        return f"{errno.errorcode.get(result[1], result[1])}"
    return "byte-exact" if result[1] == want else f"wrong bytes ({result[2]} bytes read)"


def bounded(fn, timeout=READ_TIMEOUT):
    """fn() on a thread, for calls into a FUSE mount: its value, or TimeoutError when it has
    not returned in time (the thread is left blocked until the mount's server is killed)."""
    box = {}

    def call():
        try:
            box["value"] = fn()
        except BaseException as e:  # handed to the caller
            box["error"] = e

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise TimeoutError(f"no answer in {timeout} s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


def wait_for_mount(path, proc, timeout=WAIT_TIMEOUT):
    """Waits on the mount table (poll wakes on each change) until path is a mount point;
    False when proc exits first or the time runs out."""
    path = os.path.realpath(path)
    deadline = time.monotonic() + timeout
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as table:
        poller = select.poll()
        poller.register(table, select.POLLPRI | select.POLLERR)
        while True:
            table.seek(0)
            if any(line.split()[4] == path for line in table.read().splitlines()):
                return True
            left = deadline - time.monotonic()
            if proc.poll() is not None or left <= 0:
                return False
            poller.poll(min(left, 0.5) * 1000)  # also looks at proc twice a second


class Readers:
    """A child process whose threads read files of a mount (fault_reader.py); every wait on it
    is bounded, and leaving kills it, so a read that hangs fails a test, not the suite."""

    def __init__(self, jobs, loop=False, expect=None, stop="", limit=60):
        spec = {"jobs": jobs, "loop": loop, "expect": expect or {}, "stop": stop,
                "limit": limit}
        self.threads = len(jobs)
        self.events = []
        self.cond = threading.Condition()
        self.proc = subprocess.Popen([sys.executable, READER, json.dumps(spec)],
                                     stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        with self.proc.stdout:
            for line in self.proc.stdout:
                with self.cond:
                    self.events.append(json.loads(line))
                    self.cond.notify_all()

    def wait_for(self, predicate, timeout):
        """True once predicate(events) holds, False when timeout seconds pass first."""
        with self.cond:
            return self.cond.wait_for(lambda: predicate(self.events), timeout)

    def wait_ended(self, timeout):
        return self.wait_for(lambda ev: sum("end" in e for e in ev) == self.threads, timeout)

    def snapshot(self):
        with self.cond:
            return list(self.events)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            STRAGGLERS.append(self.proc)  # blocked in the mount: killing its server frees it
        return False


def reap_stragglers():
    while STRAGGLERS:
        try:
            STRAGGLERS.pop().wait(timeout=WAIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            pass


def read_concurrently(mnt, jobs, timeout=READ_TIMEOUT):
    """Reads jobs (lists of paths below mnt, one thread each) once through; returns
    {(thread, index): result}, result None where the read did not finish in time."""
    results = {(t, i): None for t, paths in enumerate(jobs) for i in range(len(paths))}
    with Readers([[os.path.join(mnt, p) for p in paths] for paths in jobs]) as readers:
        readers.wait_ended(timeout)
        for event in readers.snapshot():
            if "result" in event:
                results[(event["t"], event["i"])] = event["result"]
    return results


def read_files(mnt, rels, timeout=READ_TIMEOUT):
    """{rel: result} of reading each file once, each on its own thread, all at once."""
    rels = sorted(rels)
    results = read_concurrently(mnt, [[rel] for rel in rels], timeout)
    return {rel: results[(t, 0)] for t, rel in enumerate(rels)}


class LogTap:
    """Reads a daemon's log (stdout and stderr together) as it comes: keeps its head and
    counts the lines that name each watched string, so that a storm of millions of lines
    neither fills the disk nor stalls the daemon on a full pipe."""

    HEAD = 64 * 1024

    def __init__(self, fd):
        self.fd = fd
        self.cond = threading.Condition()
        self.head = b""
        self.counts = {}  # watched string: lines naming it so far
        self.thread = threading.Thread(target=self._pump, daemon=True)
        self.thread.start()

    def watch(self, text):
        with self.cond:
            self.counts.setdefault(text.encode(), 0)

    def mentions(self, text):
        with self.cond:
            return self.counts.get(text.encode(), 0)

    def wait_mentioned(self, text, timeout=5):
        key = text.encode()
        with self.cond:
            return self.cond.wait_for(lambda: self.counts.get(key, 0) > 0, timeout)

    def text(self):
        with self.cond:
            return self.head.decode(errors="replace")

    def _count(self, complete):
        with self.cond:
            for key in self.counts:
                self.counts[key] += complete.count(key)
            if len(self.head) < self.HEAD:
                self.head += complete[: self.HEAD - len(self.head)]
            self.cond.notify_all()

    def _pump(self):
        carry = b""
        while chunk := os.read(self.fd, 1 << 20):
            data = carry + chunk
            cut = data.rfind(b"\n") + 1
            carry = data[cut:]
            self._count(data[:cut])
        self._count(carry + b"\n" if carry else b"")
        os.close(self.fd)


class Daemon:
    """`with Daemon(src, *options) as d:` runs `gpufsd mount -f` of src at d.mnt with its
    log tapped (d.log). Leaving unmounts it and checks that it exited 0, unless the test
    ended the daemon itself (d.ended = True); whatever happened, a daemon still running is
    killed and its mount detached."""

    def __init__(self, source, *options):
        self.source = source
        self.options = list(options)
        self.mnt = tempfile.mkdtemp(prefix="gpufs-fault-mnt-")
        self.proc = None
        self.log = None
        self.ended = False

    def __enter__(self):
        ready_r, ready_w = os.pipe()
        log_r, log_w = os.pipe()
        try:
            self.proc = subprocess.Popen(
                [lib.GPUFSD, "mount", "-f", "--ready-fd", str(ready_w), *self.options,
                 self.source, self.mnt],
                pass_fds=[ready_w], stdin=subprocess.DEVNULL, stdout=log_w, stderr=log_w)
        finally:
            os.close(ready_w)
            os.close(log_w)
        self.log = LogTap(log_r)
        ready, _, _ = select.select([ready_r], [], [], WAIT_TIMEOUT)
        message = os.read(ready_r, 16) if ready else b""
        os.close(ready_r)
        if message != b"ready\n":
            self.cleanup()
            raise RuntimeError(f"gpufsd did not become ready: {self.log.text()}")
        return self

    def __exit__(self, exc_type, *_):
        try:
            if exc_type is None and not self.ended:
                self.unmount_cleanly()
        finally:
            self.cleanup()
        return False

    def unmount_cleanly(self):
        if lib.is_mounted(self.mnt):
            result = lib.run_gpufsd("unmount", self.mnt, timeout=WAIT_TIMEOUT)
            assert result.returncode == 0, f"gpufsd unmount failed: {result.stderr}"
        try:
            status = self.proc.wait(timeout=WAIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"gpufsd did not exit in {WAIT_TIMEOUT} s after unmount")
        assert status == 0, f"gpufsd exited {status}: {self.log.text()[-4000:]}"

    def cleanup(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # a stopped daemon dies only once running
            self.proc.kill()
            self.proc.wait(timeout=WAIT_TIMEOUT)
        reap_stragglers()
        if lib.is_mounted(self.mnt):
            subprocess.run(["fusermount3", "-u", "-z", "--", self.mnt], timeout=WAIT_TIMEOUT)
        self.log.thread.join(timeout=WAIT_TIMEOUT)
        try:
            os.rmdir(self.mnt)
        except OSError:
            pass

    def alive_and_answering(self):
        """Whether the daemon runs and its mount still answers a listing in time."""
        if not lib.is_running(self.proc.pid):
            return False
        try:
            bounded(lambda: os.listdir(self.mnt))
            return True
        except (TimeoutError, OSError):
            return False


class FaultFs:
    """`with FaultFs(root) as ff:` serves ff.src read-only at ff.mnt through faultfs;
    ff.rules(...) replaces its rules at once. Leaving unmounts it (checking that faultfs
    exited 0) or, failing that, kills it and detaches the mount."""

    def __init__(self, root):
        self.src = os.path.join(root, "faultfs-src")
        self.mnt = os.path.join(root, "faultfs-mnt")
        self.rules_file = os.path.join(root, "faultfs-rules")
        self.log_file = os.path.join(root, "faultfs.log")
        self.proc = None

    def __enter__(self):
        os.makedirs(self.src, exist_ok=True)
        os.makedirs(self.mnt, exist_ok=True)
        self.rules()
        with open(self.log_file, "w") as log:
            self.proc = subprocess.Popen(
                [FAULTFS, "-f", "--rules", self.rules_file, self.src, self.mnt],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        if not wait_for_mount(self.mnt, self.proc):
            self.cleanup()
            raise RuntimeError(f"faultfs did not mount: {self.read_log()}")
        return self

    def rules(self, *lines):
        """Replaces the rules (by rename, so faultfs sees the change at its next call)."""
        with open(self.rules_file + ".new", "w") as f:
            f.write("".join(line + "\n" for line in lines))
        os.replace(self.rules_file + ".new", self.rules_file)

    def read_log(self):
        with open(self.log_file, errors="replace") as f:
            return f.read()

    def __exit__(self, exc_type, *_):
        try:
            if exc_type is None and lib.is_mounted(self.mnt):
                result = subprocess.run(["fusermount3", "-u", "--", self.mnt],
                                        capture_output=True, text=True, timeout=WAIT_TIMEOUT)
                assert result.returncode == 0, f"cannot unmount faultfs: {result.stderr}"
                status = self.proc.wait(timeout=WAIT_TIMEOUT)
                assert status == 0, f"faultfs exited {status}: {self.read_log()}"
        finally:
            self.cleanup()
        return False

    def cleanup(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=WAIT_TIMEOUT)
        reap_stragglers()
        if lib.is_mounted(self.mnt):
            subprocess.run(["fusermount3", "-u", "-z", "--", self.mnt], timeout=WAIT_TIMEOUT)
