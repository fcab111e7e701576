#!/usr/bin/python3
"""Where a mount goes and how it leaves, through real mounts: a folder with files in it is
refused unless asked for (gpufsd --allow-non-empty, fstab nonempty); a mount whose daemon
was killed is cleared by the next mount or unmount rather than stacked over or left
behind; an unmount refused because the mount is in use names who holds it, --lazy
detaches it and --force cuts it off; copies in other mount namespaces are named."""
import errno
import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

import gpufs_testlib as lib

HELPER = os.path.join(lib.ROOT, "deploy", "mount.gpufs")


def mounts_at(path):
    """How many entries of the mount table are at `path` (stacked mounts count each)."""
    with open("/proc/self/mountinfo") as f:
        return sum(1 for line in f if line.split()[4] == path)


def wait_namespace(pid, seconds=10):
    """The mount namespace of `pid` ("mnt:[INODE]") once it has left ours (unshare)."""
    ours = os.readlink("/proc/self/ns/mnt")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        ns = os.readlink(f"/proc/{pid}/ns/mnt")
        if ns != ours and os.readlink(f"/proc/{pid}/exe").endswith("sleep"):
            return ns
        time.sleep(0.02)
    raise AssertionError(f"pid {pid} did not enter a namespace of its own")


def wait_gone(pid, seconds=30):
    deadline = time.monotonic() + seconds
    while lib.is_running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not lib.is_running(pid)


class MountPoints(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="gpufs-mountpoint-")
        cls.tree, cls.src = lib.make_dataset(os.path.join(cls.work, "data"), 2, 4, 4)
        cls.expected = lib.files_below(cls.tree)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.work)

    def setUp(self):
        self.mnt = tempfile.mkdtemp(prefix="mnt-", dir=self.work)

    def tearDown(self):
        while mounts_at(self.mnt):
            subprocess.run(["fusermount3", "-uz", self.mnt], capture_output=True)
        shutil.rmtree(self.mnt)

    def mount(self, *options):
        return lib.run_gpufsd("mount", *options, self.src, self.mnt)

    def test_a_folder_with_files_is_refused_unless_asked_for(self):
        with open(os.path.join(self.mnt, "keep.txt"), "w") as f:
            f.write("mine\n")
        result = self.mount()
        self.assertEqual(result.returncode, 1)
        self.assertIn(f"gpufsd: cannot mount at {self.mnt}: it is not empty (it holds keep.txt, "
                      "which the mount would hide); name an empty folder, or give "
                      "--allow-non-empty (fstab: nonempty)", result.stderr)
        self.assertEqual(mounts_at(self.mnt), 0)
        for argv in ([lib.GPUFSD, "mount", "--allow-non-empty", self.src, self.mnt],
                     [HELPER, self.src, self.mnt, "-o", "nonempty"]):
            result = subprocess.run(argv, capture_output=True, text=True, timeout=60,
                                    env={**os.environ, "GPUFSD": lib.GPUFSD})
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertEqual(lib.files_below(self.mnt), self.expected)
            result = lib.run_gpufsd("unmount", self.mnt)
            self.assertEqual(result.returncode, 0, result.stderr)
            with open(os.path.join(self.mnt, "keep.txt")) as f:
                self.assertEqual(f.read(), "mine\n")

    def kill_daemon(self):
        """Mounts in the background and kills the daemon (-9): the mount stays, dead."""
        result = self.mount()
        self.assertEqual(result.returncode, 0, result.stderr)
        pid = int(os.getxattr(self.mnt, "user.gpufs.pid"))
        os.kill(pid, signal.SIGKILL)
        self.assertTrue(wait_gone(pid))
        with self.assertRaises(OSError) as dead:  # a stat may come from the kernel's cache
            os.statvfs(self.mnt)
        # ECANCELED: over io_uring, while the dead daemon's ring is being cancelled.
        self.assertIn(dead.exception.errno, (errno.ENOTCONN, errno.ECONNABORTED, errno.ECANCELED))

    def test_a_dead_mount_is_cleared_by_the_next_mount_and_by_unmount(self):
        self.kill_daemon()
        result = self.mount()
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn(f"cleared a gpufs mount of {self.src} at {self.mnt} whose daemon had "
                      "exited", result.stderr)
        self.assertEqual(mounts_at(self.mnt), 1, "a mount stacked over the dead one")
        self.assertEqual(lib.files_below(self.mnt), self.expected)
        result = lib.run_gpufsd("unmount", self.mnt)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(mounts_at(self.mnt), 0, "the dead mount was left behind")
        self.kill_daemon()
        result = lib.run_gpufsd("unmount", self.mnt)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(mounts_at(self.mnt), 0)

    def test_a_busy_unmount_names_who_holds_it_and_lazy_detaches(self):
        result = self.mount()
        self.assertEqual(result.returncode, 0, result.stderr)
        pid = int(os.getxattr(self.mnt, "user.gpufs.pid"))
        holder = subprocess.Popen(["sleep", "120"], cwd=self.mnt)
        try:
            result = lib.run_gpufsd("unmount", self.mnt)
            self.assertEqual(result.returncode, 1)
            self.assertIn(f"gpufsd: cannot unmount {self.mnt}: in use by {holder.pid} (sleep); "
                          f"stop them, or `gpufsd unmount --lazy {self.mnt}` detaches it now",
                          result.stderr)
            self.assertEqual(mounts_at(self.mnt), 1)
            result = lib.run_gpufsd("unmount", "--lazy", self.mnt)
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertEqual(mounts_at(self.mnt), 0)
            self.assertTrue(lib.is_running(pid), "the daemon went while the mount was in use")
        finally:
            holder.kill()
            holder.wait()
        self.assertTrue(wait_gone(pid), "the daemon stayed after its last user let go")

    def test_force_cuts_off_its_users_and_the_daemon_exits(self):
        """What the Slurm epilog does with a mount another user's shell sits in: the
        holder's process name (its owner's to set, here with ESC and BEL) reaches the
        terminal escaped; --force leaves no mount and no daemon, and the holder gets errors."""
        result = self.mount()
        self.assertEqual(result.returncode, 0, result.stderr)
        pid = int(os.getxattr(self.mnt, "user.gpufs.pid"))
        code = ("import ctypes, os, sys, time\n"
                "ctypes.CDLL(None).prctl(15, b'\\x1b]0;pwned\\x07', 0, 0, 0)\n"
                "print('ready', flush=True)\n"
                "sys.stdin.readline()\n"
                "try:\n"
                "    os.statvfs('.')\n"
                "    print('listed')\n"
                "except OSError as e:\n"
                "    print(e.errno)\n")
        holder = subprocess.Popen(["/usr/bin/python3", "-c", code], cwd=self.mnt, text=True,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        try:
            self.assertEqual(holder.stdout.readline(), "ready\n")
            result = lib.run_gpufsd("unmount", self.mnt)
            self.assertEqual(result.returncode, 1)
            self.assertNotIn("\x1b", result.stderr)
            self.assertNotIn("\x07", result.stderr)
            self.assertIn(f"in use by {holder.pid} (\\x1b]0;pwned\\x07)", result.stderr)
            result = lib.run_gpufsd("unmount", "--force", self.mnt)
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertIn(f"gpufsd: {self.mnt} was in use by {holder.pid} (\\x1b]0;pwned\\x07): "
                          "cut off and detached", result.stderr)
            self.assertEqual(mounts_at(self.mnt), 0)
            self.assertFalse(lib.is_running(pid), "the daemon outlived a forced unmount")
            out, _ = holder.communicate("\n", timeout=30)
            self.assertEqual(out.strip(), str(errno.ENOTCONN))
        finally:
            holder.kill()
            holder.wait()

    def test_a_copy_in_another_namespace_is_named_and_fails_the_unmount(self):
        """A copy of the mount in a private mount namespace (unshare -m, a container) keeps
        the daemon serving after the unmount here: said, with the namespace and pid, and
        non-zero; --force ends it everywhere."""
        if os.geteuid() != 0 or not shutil.which("unshare"):
            self.skipTest("needs root and unshare(1) for a private mount namespace")
        for force in (False, True):
            with self.subTest(force=force):
                result = self.mount()
                self.assertEqual(result.returncode, 0, result.stderr)
                pid = int(os.getxattr(self.mnt, "user.gpufs.pid"))
                copy = subprocess.Popen(["unshare", "-m", "--propagation", "private",
                                         "sleep", "300"])
                try:
                    ns = wait_namespace(copy.pid)
                    args = ["unmount", "--force", self.mnt] if force else ["unmount", self.mnt]
                    result = lib.run_gpufsd(*args)
                    self.assertEqual(mounts_at(self.mnt), 0)
                    if force:
                        self.assertEqual(result.returncode, 0, result.stderr)
                        self.assertTrue(wait_gone(pid, 10), "the daemon outlived --force")
                        continue
                    self.assertEqual(result.returncode, 1)
                    self.assertIn(f"gpufsd: unmounted {self.mnt} here, but its daemon (pid {pid}) "
                                  "serves on: copies of the mount remain in other mount "
                                  f"namespaces: {ns} (pid {copy.pid} (sleep))", result.stderr)
                    self.assertTrue(lib.is_running(pid))
                finally:
                    copy.kill()
                    copy.wait()
                self.assertTrue(wait_gone(pid), "the daemon stayed after the last copy went")

    def test_without_dev_fuse_the_cause_and_the_fix_are_named(self):
        """As in a container started without /dev/fuse: a mount namespace whose /dev is an
        empty tmpfs."""
        if os.geteuid() != 0 or not shutil.which("unshare"):
            self.skipTest("needs root and unshare(1) to hide /dev/fuse")
        script = 'mount -t tmpfs none /dev && exec "$0" mount -f "$1" "$2"'
        result = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script,
                                 lib.GPUFSD, self.src, self.mnt],
                                capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 1)
        self.assertIn(f"gpufsd: cannot mount at {self.mnt}: there is no /dev/fuse here: a "
                      "container needs it passed in (docker run --device /dev/fuse", result.stderr)
        self.assertEqual(mounts_at(self.mnt), 0)


if __name__ == "__main__":
    lib.exit_unless_fuse_usable()
    unittest.main()
