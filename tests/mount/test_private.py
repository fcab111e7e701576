#!/usr/bin/python3
"""Private state through real mounts and real users (nobody, and a throwaway user made and
removed here): another user reads nothing gpufs keeps, links planted where gpufs writes
change nothing outside, a tier root or an index beside the data that others control is
refused or ignored, and a squatted /tmp/gpufs-UID does not turn gpufs-stat off."""
import io
import os
import shutil
import stat
import struct
import subprocess
import sys
import tarfile
import tempfile
import unittest
import uuid

import gpufs_testlib as lib
from gpufs_testlib import files_below

sys.path.insert(0, lib.ROOT)
from tests.servers import nginx  # noqa: E402

GPUFS_STAT = os.environ.get("GPUFS_STAT", os.path.join(lib.ROOT, "build", "cli", "gpufs-stat"))
NOBODY = 65534
SECRET = b"root only\n"
TIER_FIX = "give each user a folder of their own (--disk-cache DIR)"


def as_user(uid, *argv, env=None, timeout=60):
    """argv run as uid (its own group, no others), through setpriv."""
    return subprocess.run(
        ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *argv],
        capture_output=True, text=True, env=env, timeout=timeout)


def nobody_opens(path):
    """How opening path (a file: reading it; a folder: listing it) ends for nobody: "ok"
    or the exception's name."""
    code = ("import os, sys\n"
            "p = sys.argv[1]\n"
            "try:\n"
            "    os.listdir(p) if os.path.isdir(p) else open(p, 'rb').read(1)\n"
            "    print('ok')\n"
            "except OSError as e:\n"
            "    print(type(e).__name__)\n")
    return as_user(NOBODY, "/usr/bin/python3", "-c", code, path).stdout.strip()


def plant_link(target, link, uid=NOBODY):
    """A symbolic link made by uid (nobody by default), as an attacker would."""
    result = as_user(uid, "/usr/bin/python3", "-c",
                     "import os, sys; os.symlink(sys.argv[1], sys.argv[2])", target, link)
    assert result.returncode == 0, result.stderr


def next_pids(count=400):
    """The pids the next processes will most likely get: old writers named their temporary
    files after the pid."""
    with open("/proc/sys/kernel/ns_last_pid") as f:
        last = int(f.read())
    return range(last + 1, last + 1 + count)


def plant_pid_links(target, prefix, count=2000):
    """Links to target at prefix + each pid the next processes will most likely get, made
    by nobody in one process (each process started here would take a pid)."""
    code = ("import os, sys\n"
            "last = int(open('/proc/sys/kernel/ns_last_pid').read())\n"
            "for pid in range(last + 1, last + 1 + int(sys.argv[3])):\n"
            "    os.symlink(sys.argv[1], sys.argv[2] + str(pid))\n")
    result = as_user(NOBODY, "/usr/bin/python3", "-c", code, target, prefix, str(count))
    assert result.returncode == 0, result.stderr


def make_class_tar(path, classes, per_class=3, mtime=1_600_000_000):
    """An uncompressed tar of class folders, each member's bytes naming its class:
    {tree path: bytes} as the mount must show it."""
    expected = {}
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        for cls in classes:
            for i in range(per_class):
                data = f"{cls} image {i}\n".encode() * 50
                info = tarfile.TarInfo(f"{cls}/{i}.jpg")
                info.size, info.mtime = len(data), mtime
                tar.addfile(info, io.BytesIO(data))
                expected[f"{cls}/{i}.jpg"] = data
    return expected


def refused(test, source, *options, env=None):
    """The daemon's log of a mount that must be refused (and is unmounted if it was not)."""
    mount = lib.Mount(source, *options, env=env)
    try:
        mount.__enter__()
    except RuntimeError as e:
        mount.log.close()
        os.rmdir(mount.mountpoint)
        return str(e)
    mount.__exit__(None, None, None)
    test.fail(f"gpufsd mounted {source} with {options}: it should have refused")


class Private(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="gpufs-private-")
        os.chmod(cls.work, 0o755)  # nobody may walk in: only gpufs's own modes stop them
        cls.tree, cls.mytar = lib.make_dataset(os.path.join(cls.work, "data"), 3, 8, 4)
        cls.expected = lib.files_below(cls.tree)
        secret_dir = os.path.join(cls.work, "secret")
        os.mkdir(secret_dir, 0o700)
        cls.secret = os.path.join(secret_dir, "secret")
        with open(cls.secret, "wb") as f:
            f.write(SECRET)
        os.chmod(cls.secret, 0o600)
        os.chmod(secret_dir, 0o755)  # the link's target is reachable; the file is not

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.work)

    def setUp(self):
        self.xdg = tempfile.mkdtemp(prefix="xdg-", dir=self.work)
        os.chmod(self.xdg, 0o755)
        self.env = {**os.environ, "XDG_CACHE_HOME": self.xdg}

    def assertSecretKept(self):
        st = os.lstat(self.secret)
        self.assertTrue(stat.S_ISREG(st.st_mode))
        self.assertEqual(stat.S_IMODE(st.st_mode), 0o600)
        with open(self.secret, "rb") as f:
            self.assertEqual(f.read(), SECRET, "a planted link was followed")

    def assertPrivate(self, root):
        """Every folder below root 0700 and every file 0600, none readable by nobody."""
        seen = 0
        for folder, dirs, names in os.walk(root):
            self.assertEqual(stat.S_IMODE(os.lstat(folder).st_mode), 0o700, folder)
            self.assertEqual(nobody_opens(folder), "PermissionError", folder)
            for name in names:
                path = os.path.join(folder, name)
                self.assertEqual(stat.S_IMODE(os.lstat(path).st_mode), 0o600, path)
                self.assertEqual(nobody_opens(path), "PermissionError", path)
                seen += 1
        return seen

    def tier_mount(self, tier, *options):
        return lib.Mount(self.mytar, "--disk-cache", tier, "--cache-size", "64MiB", *options,
                         env=self.env)

    # Finding: the tier and its ledger were world-readable, and shared by every user.

    def test_the_disk_tier_is_private_and_its_ledger_0600(self):
        tier = os.path.join(self.xdg, "tier")
        with self.tier_mount(tier) as mnt:
            self.assertEqual(files_below(mnt), self.expected)
            lib.settled_stats(mnt, lambda s: s["tier"]["writes"] >= s["groups"],
                              "every group on disk")
        self.assertEqual(stat.S_IMODE(os.stat(os.path.join(tier, ".ledger")).st_mode), 0o600)
        self.assertGreater(self.assertPrivate(tier), 1)

    def test_a_tier_root_of_another_uid_is_refused_naming_the_fix(self):
        tier = os.path.join(self.work, "theirs")
        os.mkdir(tier, 0o700)
        os.chown(tier, NOBODY, NOBODY)
        log = refused(self, self.mytar, "--disk-cache", tier, env=self.env)
        self.assertIn(f"cannot use disk cache {tier}: owned by uid {NOBODY}, not you (uid 0); "
                      f"{TIER_FIX}", log)
        self.assertEqual(os.listdir(tier), [])

    def test_a_world_writable_tier_root_is_refused_naming_the_fix(self):
        tier = os.path.join(self.work, "shared")
        os.mkdir(tier)
        os.chmod(tier, 0o777)
        log = refused(self, self.mytar, "--disk-cache", tier, env=self.env)
        self.assertIn(f"cannot use disk cache {tier}: writable by others (mode 0777); "
                      f"chmod 700 {tier}", log)
        self.assertEqual(os.listdir(tier), [])

    def assert_levels_refused(self, option, role, leaf):
        """`option` at a path through a level another user controls is refused, naming
        the level: a link planted in a sticky folder (as /tmp), and a folder of nobody's.
        Either would let them point root's path at a folder of root's. Returns the sticky
        folder and the folder of root's the link led to, both left empty."""
        roots = os.path.join(self.work, f"roots-{leaf}")
        os.mkdir(roots, 0o755)
        sticky = os.path.join(self.work, f"sticky-{leaf}")
        os.mkdir(sticky)
        os.chmod(sticky, 0o1777)  # as /tmp: anyone may add a name
        plant_link(roots, os.path.join(sticky, "level"))
        path = os.path.join(sticky, "level", leaf)
        said = refused(self, self.mytar, option, path, env=self.env)
        self.assertIn(f"cannot use {role} {path}: {sticky}/level: a symbolic link where "
                      "others may write", said)
        theirs = os.path.join(self.work, f"theirs-{leaf}")
        os.mkdir(theirs, 0o755)
        os.chown(theirs, NOBODY, NOBODY)
        path = os.path.join(theirs, leaf)
        said = refused(self, self.mytar, option, path, env=self.env)
        self.assertIn(f"cannot use {role} {path}: {theirs}: it is owned by uid {NOBODY}, "
                      "who could replace what lies beneath it", said)
        self.assertEqual(os.listdir(roots), [])
        self.assertEqual(os.listdir(theirs), [])
        return sticky, roots

    def test_a_tier_path_through_a_level_another_user_controls_is_refused(self):
        """An earlier level of --disk-cache that nobody may write: root would chmod and
        fill the folder a planted link leads to."""
        _, roots = self.assert_levels_refused("--disk-cache", "disk cache", "tier")
        self.assertEqual(stat.S_IMODE(os.stat(roots).st_mode), 0o755)

    def test_a_log_file_through_a_level_another_user_controls_is_refused(self):
        """Root's --log-file: root would create or append its log wherever a link planted
        above the file points."""
        sticky, _ = self.assert_levels_refused("--log-file", "log file", "gpufsd.log")
        # A log file in a folder of root's (or in a sticky one, as /tmp) is fine.
        ok = os.path.join(sticky, "gpufsd.log")
        with lib.Mount(self.mytar, "--log-file", ok, env=self.env) as mnt:
            self.assertEqual(files_below(mnt), self.expected)
        self.assertEqual(stat.S_IMODE(os.stat(ok).st_mode), 0o600)

    def test_an_older_tier_is_made_private_and_the_log_says_so(self):
        tier = os.path.join(self.xdg, "old")
        with self.tier_mount(tier):
            pass
        os.chmod(tier, 0o755)
        os.chmod(os.path.join(tier, ".ledger"), 0o644)
        mount = self.tier_mount(tier)
        with mount as mnt:
            self.assertEqual(files_below(mnt), self.expected)
            log = mount.stderr()
        self.assertIn(f"disk cache {tier} was readable by others (mode 0755); it is now 0700",
                      log)
        self.assertEqual(stat.S_IMODE(os.stat(tier).st_mode), 0o700)
        self.assertEqual(stat.S_IMODE(os.stat(os.path.join(tier, ".ledger")).st_mode), 0o600)

    # Finding: the tier's dataset folders and .ledger were opened through links.

    def test_links_at_the_tier_folder_and_ledger_change_nothing_outside(self):
        tier = os.path.join(self.xdg, "tier")
        with self.tier_mount(tier):
            pass
        (dataset,) = [n for n in os.listdir(tier) if n != ".ledger"]
        outside = os.path.join(self.work, "root-only")
        os.mkdir(outside, 0o700)
        shutil.rmtree(os.path.join(tier, dataset))
        os.symlink(outside, os.path.join(tier, dataset))
        log = refused(self, self.mytar, "--disk-cache", tier, "--cache-size", "64MiB",
                      env=self.env)
        self.assertIn(f"cannot use disk cache {os.path.join(tier, dataset)}: it is a symbolic "
                      "link", log)
        self.assertEqual(os.listdir(outside), [])
        self.assertEqual(stat.S_IMODE(os.stat(outside).st_mode), 0o700)
        os.unlink(os.path.join(tier, dataset))
        os.unlink(os.path.join(tier, ".ledger"))
        os.symlink(self.secret, os.path.join(tier, ".ledger"))
        log = refused(self, self.mytar, "--disk-cache", tier, "--cache-size", "64MiB",
                      env=self.env)
        self.assertIn(f"cannot open {os.path.join(tier, '.ledger')}: it is a symbolic link", log)
        self.assertSecretKept()

    # Finding: index writes followed links planted at their temporary and final names.

    def test_links_planted_at_a_tar_index_change_nothing_outside(self):
        folder = os.path.join(self.work, "group-writable")
        os.mkdir(folder)
        archive = os.path.join(folder, "a.tar")
        expected = make_class_tar(archive, ["cat", "dog"])
        os.chmod(folder, 0o777)  # as a folder a whole group may write
        index = archive + ".gpufs-index"
        plant_link(self.secret, index)
        plant_pid_links(self.secret, f"{index}.tmp-")
        mount = lib.Mount(archive, env=self.env)
        with mount as mnt:
            self.assertEqual(files_below(mnt), expected)
            log = mount.stderr()
        self.assertSecretKept()
        self.assertIn(f"not using {index}: it is a symbolic link", log)
        st = os.lstat(index)
        self.assertTrue(stat.S_ISREG(st.st_mode), "the planted link is still the index")
        self.assertEqual(st.st_uid, 0)

    def test_links_planted_at_a_gpufsd_index_output_change_nothing_outside(self):
        folder = os.path.join(self.work, "mytar-copy")
        shutil.copytree(os.path.dirname(self.mytar), folder)
        src = os.path.join(folder, os.path.basename(self.mytar))
        os.chmod(src, 0o777)
        index = os.path.join(src, "index.gpufs")
        plant_link(self.secret, index)
        plant_pid_links(self.secret, f"{index}.tmp-")
        result = lib.run_gpufsd("index", src)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertSecretKept()
        self.assertTrue(stat.S_ISREG(os.lstat(index).st_mode))
        with lib.Mount(src, env=self.env) as mnt:
            self.assertEqual(os.getxattr(mnt, "user.gpufs.format"), b"mytar+index")
            self.assertEqual(files_below(mnt), self.expected)

    # Finding: a tar index beside the archive was trusted on its size and time alone.

    def planted_index(self, archive, classes):
        """An index made from a tar of the same size and time as archive whose class
        folders are swapped: what a group member could put beside it."""
        other = os.path.join(self.work, f"other-{uuid.uuid4().hex[:8]}")
        os.mkdir(other)
        forged = os.path.join(other, os.path.basename(archive))
        make_class_tar(forged, classes)
        st = os.stat(archive)
        self.assertEqual(os.stat(forged).st_size, st.st_size)
        os.utime(forged, ns=(st.st_atime_ns, st.st_mtime_ns))
        with lib.Mount(forged, env=self.env):
            pass
        return forged + ".gpufs-index"

    def test_a_tar_index_planted_by_another_uid_is_ignored(self):
        folder = os.path.join(self.work, "planted-by-nobody")
        os.mkdir(folder)
        archive = os.path.join(folder, "a.tar")
        expected = make_class_tar(archive, ["cat", "dog"])
        forged = self.planted_index(archive, ["dog", "cat"])
        os.chmod(folder, 0o777)
        index = archive + ".gpufs-index"
        result = as_user(NOBODY, "cp", "--preserve=mode", forged, index)
        self.assertEqual(result.returncode, 0, result.stderr)
        mount = lib.Mount(archive, env=self.env)
        with mount as mnt:
            self.assertEqual(files_below(mnt), expected, "the planted labels were served")
            log = mount.stderr()
        self.assertIn(f"not using {index}: it is owned by uid {NOBODY}, neither you (uid 0) "
                      "nor root", log)

    def test_a_group_writable_tar_index_is_ignored(self):
        folder = os.path.join(self.work, "group-writable-index")
        os.mkdir(folder)
        archive = os.path.join(folder, "a.tar")
        expected = make_class_tar(archive, ["cat", "dog"])
        index = archive + ".gpufs-index"
        shutil.copyfile(self.planted_index(archive, ["dog", "cat"]), index)
        os.chmod(index, 0o664)
        mount = lib.Mount(archive, env=self.env)
        with mount as mnt:
            self.assertEqual(files_below(mnt), expected, "the planted labels were served")
            log = mount.stderr()
        self.assertIn(f"not using {index}: others may write it (mode 0664)", log)


class PrivateRemote(unittest.TestCase):
    """The default tier and the index cache of mounts from a real HTTP server (nginx)."""

    @classmethod
    def setUpClass(cls):
        reason = nginx.NginxOrigin.skip_reason()
        if reason:
            raise unittest.SkipTest(reason)
        cls.work = tempfile.mkdtemp(prefix="gpufs-private-remote-")
        os.chmod(cls.work, 0o755)
        tree = lib.make_split_tree(os.path.join(cls.work, "tree"), (3, 6), (2, 3))
        cls.expected = files_below(tree)
        served = os.path.join(cls.work, "served")
        lib.pack_to_serve(tree, served, "64KiB")
        cls.tar_expected = make_class_tar(os.path.join(served, "a.tar"), ["cat", "dog"])
        cls.origin = nginx.NginxOrigin(served).__enter__()
        cls.secret = os.path.join(cls.work, "secret")
        with open(cls.secret, "wb") as f:
            f.write(SECRET)
        os.chmod(cls.secret, 0o600)

    @classmethod
    def tearDownClass(cls):
        cls.origin.__exit__(None, None, None)
        shutil.rmtree(cls.work)

    def setUp(self):
        self.xdg = tempfile.mkdtemp(prefix="xdg-", dir=self.work)
        os.chmod(self.xdg, 0o755)
        self.env = {**os.environ, "XDG_CACHE_HOME": self.xdg}

    def read_all(self, url, expected):
        with lib.Mount(url, "--cache-size", "64MiB", env=self.env) as mnt:
            self.assertEqual(files_below(mnt), expected)
            if "tier" in lib.stats_of(mnt):
                lib.settled_stats(
                    mnt, lambda s: s["tier"]["writes"] + s["tier"]["hits"] >= s["groups"],
                    "every group on disk")

    def test_another_user_reads_no_tier_or_index_cache_file(self):
        self.read_all(self.origin.url + "/pack/", self.expected)
        self.read_all(self.origin.url + "/a.tar", self.tar_expected)
        root = os.path.join(self.xdg, "gpufs")
        self.assertTrue(os.listdir(os.path.join(root, "tier")))
        self.assertEqual(len(os.listdir(os.path.join(root, "remote"))), 2)
        Private.assertPrivate(self, root)

    def test_links_at_the_index_cache_files_change_nothing_outside(self):
        self.read_all(self.origin.url + "/pack/", self.expected)
        self.read_all(self.origin.url + "/a.tar", self.tar_expected)
        remote = os.path.join(self.xdg, "gpufs", "remote")
        kept = sorted(os.listdir(remote))
        for name in kept:
            path = os.path.join(remote, name)
            os.unlink(path)
            os.symlink(self.secret, path)
            for pid in next_pids(100):
                os.symlink(self.secret, f"{path}.tmp-{pid}")
        self.read_all(self.origin.url + "/pack/", self.expected)
        self.read_all(self.origin.url + "/a.tar", self.tar_expected)
        Private.assertSecretKept(self)
        for name in kept:
            path = os.path.join(remote, name)
            self.assertTrue(stat.S_ISREG(os.lstat(path).st_mode), path)
            self.assertEqual(stat.S_IMODE(os.lstat(path).st_mode), 0o600, path)


ACL_XATTR = "system.posix_acl_access"


class ThrowawayUser:
    """A user made for one test and removed after it, allowed to open /dev/fuse (by an ACL
    entry naming it alone, removed after) so that it can mount as users do."""

    def __enter__(self):
        self.name = f"gpufst{uuid.uuid4().hex[:8]}"
        subprocess.run(["useradd", "--no-create-home", "--user-group", "--shell", "/bin/false",
                        self.name], check=True, capture_output=True)
        self.uid = int(subprocess.run(["id", "-u", self.name], check=True, capture_output=True,
                                      text=True).stdout)
        self.fuse_mode = os.stat("/dev/fuse").st_mode
        entries = [(0x01, 6, 0xFFFFFFFF), (0x02, 6, self.uid), (0x04, 0, 0xFFFFFFFF),
                   (0x10, 6, 0xFFFFFFFF), (0x20, 0, 0xFFFFFFFF)]
        acl = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries)
        try:
            os.setxattr("/dev/fuse", ACL_XATTR, acl)
        except OSError as e:
            self.__exit__()
            raise unittest.SkipTest(f"cannot let a test user open /dev/fuse: {e}")
        return self

    def __exit__(self, *exc):
        try:
            os.removexattr("/dev/fuse", ACL_XATTR)
        except OSError:
            pass
        os.chmod("/dev/fuse", stat.S_IMODE(self.fuse_mode))  # the ACL's mask set group bits
        subprocess.run(["userdel", self.name], capture_output=True)
        return False


class SquattedRuntimeFolder(unittest.TestCase):
    def test_a_squatted_tmp_folder_leaves_gpufs_stat_working(self):
        work = tempfile.mkdtemp(prefix="gpufs-squat-")
        os.chmod(work, 0o755)
        try:
            with ThrowawayUser() as user:
                self.check_squatted(work, user.uid)
        finally:
            shutil.rmtree(work)

    def check_squatted(self, work, uid):
        _, src = lib.make_dataset(os.path.join(work, "data"), 2, 4, 4)
        mnt = os.path.join(work, "mnt")
        home = os.path.join(work, "home")
        for folder in (mnt, home):
            os.mkdir(folder)
            os.chown(folder, uid, uid)
        squatted = f"/tmp/gpufs-{uid}"
        result = as_user(NOBODY, "mkdir", "-m", "0777", squatted)
        self.assertEqual(result.returncode, 0, result.stderr)
        env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
        env.update(HOME=home, XDG_CACHE_HOME=os.path.join(home, ".cache"))
        daemon = None
        try:
            read_end, write_end = os.pipe()
            log = self.enterContext(tempfile.TemporaryFile(mode="w+"))
            daemon = subprocess.Popen(
                ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", lib.GPUFSD,
                 "mount", "-f", "--ready-fd", str(write_end), src, mnt],
                pass_fds=[write_end], stderr=log, text=True, env=env)
            os.close(write_end)
            ready = os.read(read_end, 16)
            os.close(read_end)
            log.seek(0)
            self.assertEqual(ready, b"ready\n", log.read())
            stat_result = as_user(uid, GPUFS_STAT, mnt, env=env)
            self.assertEqual(stat_result.returncode, 0, stat_result.stderr)
            self.assertIn("pinned", stat_result.stdout + stat_result.stderr)
            self.assertNotIn("no control socket", stat_result.stderr)
            socket = as_user(uid, "/usr/bin/python3", "-c",
                             "import os, sys; print(os.getxattr(sys.argv[1], "
                             "'user.gpufs.control').decode())", mnt).stdout.strip()
            self.assertTrue(socket, "the mount names no control socket")
            self.assertFalse(socket.startswith(squatted + "/"), socket)
            unmount = as_user(uid, lib.GPUFSD, "unmount", mnt, env=env)
            self.assertEqual(unmount.returncode, 0, unmount.stderr)
            self.assertEqual(daemon.wait(timeout=30), 0)
            log.seek(0)
            self.assertIn(f"cannot use runtime folder {squatted}", log.read())
            self.assertEqual(os.listdir(squatted), [])
            self.assertFalse(os.path.exists(os.path.dirname(socket)), "left behind")
        finally:
            if daemon and daemon.poll() is None:
                subprocess.run(["umount", "-l", mnt], capture_output=True)
                daemon.kill()
                daemon.wait()
            shutil.rmtree(squatted, ignore_errors=True)


if __name__ == "__main__":
    lib.exit_unless_fuse_usable()
    unittest.main()
