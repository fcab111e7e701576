#!/usr/bin/python3
"""Where a detached daemon's log goes, through real mounts of a mytar folder whose blob is
cut short after mounting: the cause of the readers' EIO is in --log-file (or, with no
syslog, in the state folder's gpufsd.log, named at mount) and in gpufs-stat's report; a
burst of failing reads logs a few lines and counts the rest; --log-level leaves out what
is below it."""
import errno
import os
import re
import shutil
import socket
import subprocess
import time
import unittest

import gpufs_testlib as lib

GPUFS_STAT = os.environ.get("GPUFS_STAT", os.path.join(lib.ROOT, "build", "cli", "gpufs-stat"))


def syslog_answers():
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        try:
            s.connect("/dev/log")
            return True
        except OSError:
            return False


class DaemonLog(lib.WorkFolderCase):
    PREFIX = "gpufs-logs-"

    def setUp(self):
        super().setUp()
        self.tree, self.src = lib.make_dataset(os.path.join(self.work, "data"), 2, 4, 4)

    def mount(self, *options):
        result = lib.run_gpufsd("mount", "--cache-size", "0", *options, self.src, self.mnt,
                                env=self.env)
        self.assertEqual(result.returncode, 0, result.stderr)
        return result

    def cut_blob(self):
        """Cuts the first blob to half its size: the name of a file in it, and the blob."""
        blob = os.path.join(self.src, "filegroup-0.mytar")
        os.truncate(blob, os.path.getsize(blob) // 2)
        names = sorted(os.path.relpath(os.path.join(d, n), self.mnt)
                       for d, _, files in os.walk(self.mnt) for n in files)
        victims = [p for p in names
                   if os.getxattr(os.path.join(self.mnt, p), "user.gpufs.group") == b"0"]
        return victims[-1], blob

    def read_fails(self, name):
        with self.assertRaises(OSError) as failed, open(os.path.join(self.mnt, name), "rb") as f:
            f.read()
        self.assertEqual(failed.exception.errno, errno.EIO)

    def test_a_read_errors_cause_is_in_the_log_file_and_in_gpufs_stat(self):
        log = os.path.join(self.work, "gpufsd.log")
        self.mount("--log-file", log)
        victim, blob = self.cut_blob()
        for _ in range(40):  # 40 readers' EIO within a second: a few lines, the rest counted
            self.read_fails(victim)
        time.sleep(1.1)
        self.read_fails(victim)
        stat = subprocess.run([GPUFS_STAT, self.mnt], capture_output=True, text=True, timeout=60)
        self.assertEqual(stat.returncode, 0, stat.stderr)
        self.assertIn(f"{self.mnt}: the daemon logged: ", stat.stderr)
        self.assertIn(blob, stat.stderr)
        self.assertEqual(lib.run_gpufsd("unmount", self.mnt).returncode, 0)
        with open(log) as f:
            text = f.read()
        self.assertIn(f"warning: cannot read {victim}: cannot read blob {blob}: it changed "
                      "since the mount", text)
        errors = [ln for ln in text.splitlines() if blob in ln and " warning: " in ln]
        self.assertGreaterEqual(len(errors), 1, text)
        self.assertLessEqual(len(errors), 11, "every failing read logged a line")
        held = re.search(r"\((\d+) more error lines were held back\)", text)
        self.assertIsNotNone(held, text)
        # A read may take more than one request: each failed request is a line or counted.
        self.assertGreaterEqual(len(errors) + int(held[1]), 41, "lines lost from the count")
        self.assertRegex(text, r" info: serving \d+ files")
        self.assertEqual(os.stat(log).st_mode & 0o777, 0o600)

    def test_log_level_leaves_out_what_is_below_it(self):
        log = os.path.join(self.work, "errors-only.log")
        self.mount("--log-file", log, "--log-level", "error")
        self.assertEqual(lib.files_below(self.mnt), lib.files_below(self.tree))
        self.assertEqual(lib.run_gpufsd("unmount", self.mnt).returncode, 0)
        with open(log) as f:
            self.assertNotIn(" info: ", f.read())

    def test_without_syslog_a_detached_daemon_logs_in_the_state_folder(self):
        if syslog_answers():
            self.skipTest("/dev/log answers here: a detached daemon logs to syslog")
        result = self.mount()
        log = os.path.join(self.work, "state", "gpufs", "gpufsd.log")
        self.assertIn(f"gpufsd: no syslog at /dev/log: logging to {log}", result.stderr)
        victim, blob = self.cut_blob()
        self.read_fails(victim)
        self.assertEqual(lib.run_gpufsd("unmount", self.mnt).returncode, 0)
        with open(log) as f:
            text = f.read()
        self.assertIn(blob, text)
        self.assertEqual(os.stat(os.path.dirname(log)).st_mode & 0o777, 0o700)

    def test_a_cache_that_cannot_be_locked_is_a_warning_with_the_fix(self):
        if os.geteuid() != 0 or not (shutil.which("setpriv") and shutil.which("prlimit")):
            self.skipTest("needs root, setpriv and prlimit to take away CAP_IPC_LOCK")
        log = os.path.join(self.work, "unlocked.log")
        # No CAP_IPC_LOCK and 64 KiB of locked memory: as a user's mount would be.
        result = subprocess.run(
            ["setpriv", "--bounding-set", "-ipc_lock", "--inh-caps", "-ipc_lock", "prlimit",
             "--memlock=65536:65536", lib.GPUFSD, "mount", "--cache-size", "64MiB",
             "--log-file", log, self.src, self.mnt],
            capture_output=True, text=True, timeout=60, env=self.env)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(lib.files_below(self.mnt), lib.files_below(self.tree))
        self.assertEqual(lib.run_gpufsd("unmount", self.mnt).returncode, 0)
        with open(log) as f:
            self.assertIn("warning: the cache's 64.0 MiB are not locked in memory (locked memory "
                          "allowed: 64 KiB): the kernel may swap them out; allow it with "
                          "`ulimit -l unlimited`, LimitMEMLOCK=infinity in a systemd unit, or "
                          "CAP_IPC_LOCK", f.read())


if __name__ == "__main__":
    lib.exit_unless_fuse_usable()
    unittest.main()
