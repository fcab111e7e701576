#!/usr/bin/python3
"""A mount carries out its plan once, through real mounts of a pack on a real HTTP server
(nginx) with a disk tier: the store's URL is resolved once (the CA bundle it names is read
once), the tier's folder and ledger are opened once (by the daemon), and each line that
says what the mount is (the kernel's limits, the cache, the disk cache, the tier's opening)
is logged once, in the foreground and from a detached daemon alike."""
import ctypes
import ctypes.util
import os
import struct
import tempfile
import unittest

import gpufs_testlib as lib
from gpufs_testlib import files_below

IN_OPEN = 0x20
# Watched beside the opens: identical events in a row are merged into one, so two opens of
# a file are told apart only by its close between them.
IN_CLOSE = 0x08 | 0x10
IN_NONBLOCK = os.O_NONBLOCK
PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


class Opens:
    """Counts the files opened in some folders, by name, from inotify's IN_OPEN events:
    what a process opened, without tracing it."""

    def __init__(self, *folders):
        self.libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        self.fd = self.libc.inotify_init1(IN_NONBLOCK)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.folders = {}
        for folder in folders:
            wd = self.libc.inotify_add_watch(self.fd, os.fsencode(folder), IN_OPEN | IN_CLOSE)
            if wd < 0:
                raise OSError(ctypes.get_errno(), f"inotify_add_watch {folder}")
            self.folders[wd] = folder
        self.counts = {}

    def read(self):
        """{path: opens} of the files opened in the folders since the last read."""
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return self.counts
            at = 0
            while at < len(data):
                wd, mask, _, length = struct.unpack_from("iIII", data, at)
                name = data[at + 16:at + 16 + length].rstrip(b"\0").decode()
                at += 16 + length
                if mask & IN_OPEN and name:
                    path = os.path.join(self.folders[wd], name)
                    self.counts[path] = self.counts.get(path, 0) + 1

    def close(self):
        os.close(self.fd)


class MountPlan(lib.ServedPackCase):
    TRAIN, VAL, PREFIX = (3, 6), (2, 3), "gpufs-plan-"

    def setUp(self):
        super().setUp()
        self.folder = tempfile.mkdtemp(prefix="once-", dir=self.work)
        self.ca = os.path.join(self.folder, "ca.pem")  # read by the resolver; curl needs
        with open(self.ca, "w") as f:                  # none for http://
            f.write(PEM)
        # A tier folder others may read, made by hand: its opening tightens it, and says so.
        self.tier = os.path.join(self.folder, "tier")
        os.mkdir(self.tier)
        os.chmod(self.tier, 0o755)
        self.opens = Opens(self.folder, self.tier)
        self.addCleanup(self.opens.close)
        # Without its '/': the mount settles that it names a folder.
        self.source = self.url.rstrip("/")
        self.options = ("--cache-size", "64MiB", "--ca-bundle", self.ca, "--disk-cache",
                        self.tier)

    def assert_once(self, text, line, where):
        self.assertEqual(text.count(line), 1, f"{line!r} in {where}:\n{text}")

    def assert_opened_once(self):
        opens = self.opens.read()
        self.assertEqual(opens.get(self.ca), 1, f"the store's URL resolved again: {opens}")
        ledger = os.path.join(self.tier, ".ledger")
        self.assertEqual(opens.get(ledger), 1, f"the tier opened again: {opens}")

    def assert_logged_once(self, log, where):
        self.assertEqual(len([ln for ln in log.splitlines() if "kernel: {" in ln]), 1, log)
        self.assert_once(log, "taken as it fills", where)  # the cache's line
        self.assert_once(log, f"disk cache: {self.tier} (up to ", where)
        self.assert_once(log, f"disk cache {self.tier} was readable by others (mode 0755); it "
                              "is now 0700", where)
        self.assert_once(log, "serving ", where)

    def test_a_foreground_mount_resolves_opens_and_says_each_once(self):
        mount = lib.Mount(self.source, *self.options, env=self.env)
        with mount as mnt:
            self.assertEqual(files_below(mnt), self.expected)
            stderr = mount.stderr()
        self.assert_logged_once(stderr, "stderr")
        self.assert_once(stderr, f"gpufsd: disk cache {self.tier} holds up to ", "stderr")
        self.assertEqual(os.stat(self.tier).st_mode & 0o777, 0o700)
        self.assert_opened_once()

    def test_a_detached_daemon_logs_each_once_and_tells_the_terminal(self):
        log = os.path.join(self.folder, "gpufsd.log")
        mnt = tempfile.mkdtemp(prefix="gpufs-mnt-", dir=self.work)
        result = lib.run_gpufsd("mount", "--log-file", log, *self.options, self.source, mnt,
                                env=self.env)
        try:
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertEqual(files_below(mnt), self.expected)
        finally:
            self.assertEqual(lib.run_gpufsd("unmount", mnt).returncode, 0)
        with open(log) as f:
            text = f.read()
        self.assert_logged_once(text, "the log file")
        # What a person starting the mount is told, on the terminal, before it returns.
        self.assert_once(result.stderr, f"gpufsd: disk cache {self.tier} holds up to ",
                         "stderr")
        self.assert_once(result.stderr, f"gpufsd: warning: disk cache {self.tier} was readable "
                         "by others", "stderr")
        self.assert_opened_once()

    def test_a_default_tier_that_cannot_be_used_is_said_once(self):
        os.makedirs(os.path.join(self.xdg, "gpufs"))
        open(os.path.join(self.xdg, "gpufs", "tier"), "w").close()  # a file, not a folder
        mount = lib.Mount(self.url, "--cache-size", "64MiB", env=self.env)
        with mount as mnt:
            self.assertEqual(files_below(mnt), self.expected)
            stderr = mount.stderr()
            self.assertNotIn("tier", lib.stats_of(mnt))
        self.assert_once(stderr, "no disk cache: ", "stderr")


if __name__ == "__main__":
    lib.exit_unless_fuse_usable()
    unittest.main(verbosity=2)
