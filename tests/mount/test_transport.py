#!/usr/bin/python3
"""How the kernel's requests reach gpufsd: FUSE over io_uring where the kernel has it on,
the read/write loop on /dev/fuse otherwise or when asked for; the bytes are the same on
both, and the mount says which it uses."""
import concurrent.futures
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest
import urllib.request

import gpufs_testlib as lib

PARAMETER = "/sys/module/fuse/parameters/enable_uring"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kernel_stats(mnt):
    return json.loads(os.getxattr(mnt, "user.gpufs.stats"))["kernel"]


def read_all(mnt, expected, files, threads=8):
    """Reads `files` through the mount from `threads` threads; those whose bytes differ
    from `expected` ({path: bytes})."""
    def differs(rel):
        with open(os.path.join(mnt, rel), "rb") as got:
            return rel if got.read() != expected[rel] else None
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        return [rel for rel in pool.map(differs, files) if rel]


class Parameter:
    """`with Parameter("Y"):` sets the fuse module's enable_uring for the block, then puts
    back what it was."""

    def __init__(self, value):
        self.value = value

    def __enter__(self):
        with open(PARAMETER) as f:
            self.old = f.read().strip()
        with open(PARAMETER, "w") as f:
            f.write(self.value)
        return self

    def __exit__(self, *exc):
        with open(PARAMETER, "w") as f:
            f.write(self.old)
        return False


def skip_reason():
    if not os.path.exists(PARAMETER):
        return f"this kernel has no FUSE over io_uring ({PARAMETER} is missing)"
    if not os.access(PARAMETER, os.W_OK):
        return f"{PARAMETER} can be set by root only"
    return None


class Transports(unittest.TestCase):
    CLASSES, PER_CLASS, GROUP_SIZE = 4, 60, 16

    @classmethod
    def setUpClass(cls):
        if reason := skip_reason():
            raise unittest.SkipTest(reason)
        cls.work = tempfile.mkdtemp(prefix="gpufs-transport-test-")
        cls.tree, cls.src = lib.make_dataset(cls.work, cls.CLASSES, cls.PER_CLASS,
                                             cls.GROUP_SIZE)
        cls.expected = lib.files_below(cls.tree)
        cls.files = sorted(cls.expected)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.work)

    def test_io_uring_serves_the_same_bytes_and_says_so(self):
        port = free_port()
        with Parameter("Y"), lib.Mount(self.src, "--metrics", f"127.0.0.1:{port}") as mnt:
            self.assertEqual(read_all(mnt, self.expected, self.files), [])
            kernel = kernel_stats(mnt)
            self.assertEqual(kernel["transport"], "io_uring")
            # Every lookup and read came through the rings, none through /dev/fuse's loop.
            self.assertGreaterEqual(kernel["ring_requests"], len(self.files))
            self.assertEqual(lib.watch(mnt, json_lines=True)[0]["fuse_transport"], "io_uring")
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                series = dict(line.rsplit(" ", 1) for line in r.read().decode().splitlines()
                              if line and not line.startswith("#"))
            self.assertGreaterEqual(int(series["gpufs_fuse_ring_requests_total"]), len(self.files))

    def test_a_second_pass_and_listings_through_the_rings(self):
        with Parameter("Y"), lib.Mount(self.src, "--fuse-transport", "io_uring") as mnt:
            self.assertEqual(lib.files_below(mnt), self.expected)
            self.assertEqual(read_all(mnt, self.expected, self.files), [])
            lib.drop_page_cache()
            self.assertEqual(read_all(mnt, self.expected, self.files[::-1], threads=32), [])
            self.assertEqual(os.listxattr(os.path.join(mnt, self.files[0])).count(
                "user.gpufs.group"), 1)

    def test_dev_fuse_when_asked_for(self):
        with Parameter("Y"), lib.Mount(self.src, "--fuse-transport", "dev_fuse") as mnt:
            self.assertEqual(read_all(mnt, self.expected, self.files[:40]), [])
            kernel = kernel_stats(mnt)
            self.assertEqual(kernel["transport"], "dev_fuse")
            self.assertNotIn("ring_requests", kernel)

    def test_auto_takes_dev_fuse_where_the_kernel_has_it_off_and_says_why(self):
        with Parameter("N"):
            mount = lib.Mount(self.src)
            with mount as mnt:
                self.assertEqual(read_all(mnt, self.expected, self.files[:40]), [])
                self.assertEqual(kernel_stats(mnt)["transport"], "dev_fuse")
                self.assertIn("enable_uring is N", mount.stderr())

    def test_without_memory_for_the_rings_it_is_dev_fuse(self):
        if not (shutil.which("setpriv") and shutil.which("prlimit")):
            self.skipTest("needs setpriv and prlimit to take away CAP_IPC_LOCK")
        mnt = tempfile.mkdtemp(dir=self.work)
        log = os.path.join(self.work, "no-rings.log")
        # No CAP_IPC_LOCK and 64 KiB of locked memory, which the rings count against: the
        # kernel must not be told io_uring, or it would hold every request for queues that
        # never come.
        with Parameter("Y"):
            result = subprocess.run(
                ["setpriv", "--bounding-set", "-ipc_lock", "--inh-caps", "-ipc_lock", "prlimit",
                 "--memlock=65536:65536", lib.GPUFSD, "mount", "--log-file", log, self.src, mnt],
                capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 0, result.stderr)
        try:
            self.assertEqual(lib.bounded(30, "reads", read_all, mnt, self.expected, self.files), [])
            self.assertTrue(kernel_stats(mnt)["transport"].startswith("dev_fuse (cannot set up"))
        finally:
            self.assertEqual(lib.run_gpufsd("unmount", mnt).returncode, 0)
        with open(log) as f:
            self.assertIn("ulimit -l", f.read())

    def test_io_uring_asked_for_where_it_is_off_is_refused(self):
        mnt = tempfile.mkdtemp(dir=self.work)
        with Parameter("N"):
            result = lib.run_gpufsd("mount", "--fuse-transport", "io_uring", self.src, mnt)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("--fuse-transport io_uring", result.stderr)
        self.assertIn(PARAMETER, result.stderr)
        self.assertFalse(lib.is_mounted(mnt))

    def test_a_signal_ends_a_daemon_on_the_rings_cleanly(self):
        mnt = tempfile.mkdtemp(dir=self.work)
        with Parameter("Y"):
            daemon = subprocess.Popen([lib.GPUFSD, "mount", "-f", self.src, mnt],
                                      stderr=subprocess.PIPE, text=True)
            lib.bounded(30, "the mount", self._wait_mounted, mnt)
            self.assertEqual(read_all(mnt, self.expected, self.files[:20]), [])
            self.assertEqual(kernel_stats(mnt)["transport"], "io_uring")
            daemon.send_signal(signal.SIGTERM)
            _, err = daemon.communicate(timeout=30)
        self.assertEqual(daemon.returncode, 0, err)
        self.assertFalse(lib.is_mounted(mnt))
        self.assertIn("unmounted", err)

    @staticmethod
    def _wait_mounted(mnt):
        while not lib.is_mounted(mnt):
            time.sleep(0.05)


if __name__ == "__main__":
    lib.exit_unless_fuse_usable()
    unittest.main()
