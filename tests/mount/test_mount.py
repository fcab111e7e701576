#!/usr/bin/python3
"""Real FUSE mounts of a mytar dataset: bytes, stat, listings, concurrency, life cycle."""
import errno
import json
import os
import random
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import unittest

import gpufs_testlib as lib


def walk(root):
    """{relative path: stat} of everything below root."""
    out = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(folder, name)
            out[os.path.relpath(path, root)] = os.lstat(path)
    return out


def concurrent_random_reads(mnt, sources, threads=8, reads=300):
    """Reads random ranges of random files from `threads` threads; the mismatches."""
    files = sorted(sources)
    failures = []

    def reader(seed):
        rng = random.Random(seed)
        for _ in range(reads):
            rel = rng.choice(files)
            data = sources[rel]
            offset = rng.randrange(len(data) + 10)
            length = rng.randrange(1, 200000)
            with open(os.path.join(mnt, rel), "rb") as f:
                f.seek(offset)
                got = f.read(length)
            if got != data[offset:offset + length]:
                failures.append(f"{rel} @{offset}+{length}")

    pool = [threading.Thread(target=reader, args=(seed,)) for seed in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return failures


def read_sources(tree, files):
    sources = {}
    for rel in files:
        with open(os.path.join(tree, rel), "rb") as f:
            sources[rel] = f.read()
    return sources


class MountedDataset(lib.MountedSampleCase):
    # 6 classes x 10 files grouped by 4: every file is kept, so the trees must match.
    CLASSES, PER_CLASS, GROUP_SIZE = 6, 10, 4

    def test_tree_and_stat_equal_the_source(self):
        source, mounted = walk(self.tree), walk(self.mnt)
        self.assertEqual(sorted(source), sorted(mounted))
        for path, st in mounted.items():
            want = source[path]
            self.assertEqual(stat.S_IFMT(st.st_mode), stat.S_IFMT(want.st_mode), path)
            self.assertEqual(st.st_uid, os.getuid())
            if stat.S_ISREG(st.st_mode):
                self.assertEqual(st.st_size, want.st_size, path)
                self.assertEqual(stat.S_IMODE(st.st_mode), 0o444, path)
            else:
                self.assertEqual(stat.S_IMODE(st.st_mode), 0o555, path)

    def test_listings_equal_the_source(self):
        for folder, _, _ in os.walk(self.tree):
            rel = os.path.relpath(folder, self.tree)
            self.assertEqual(sorted(os.listdir(folder)),
                             sorted(os.listdir(os.path.join(self.mnt, rel))), rel)

    def test_every_file_reads_byte_exact(self):
        count = 0
        for folder, _, files in os.walk(self.tree):
            for name in files:
                rel = os.path.relpath(os.path.join(folder, name), self.tree)
                with open(os.path.join(self.tree, rel), "rb") as a, \
                        open(os.path.join(self.mnt, rel), "rb") as b:
                    self.assertEqual(a.read(), b.read(), rel)
                count += 1
        self.assertEqual(count, 60)

    def test_odd_offsets_and_sizes_behave_like_a_regular_file(self):
        rng = random.Random(7)
        for rel in self.sample_files(12):
            size = os.path.getsize(os.path.join(self.tree, rel))
            src = os.open(os.path.join(self.tree, rel), os.O_RDONLY)
            mnt = os.open(os.path.join(self.mnt, rel), os.O_RDONLY)
            try:
                cases = [(0, 0), (0, 1), (size - 1, 10), (size, 10), (size + 4096, 1),
                         (1, size), (4095, 8193)]
                cases += [(rng.randrange(size + 100), rng.randrange(1, 70000)) for _ in range(20)]
                for offset, length in cases:
                    self.assertEqual(os.pread(src, length, offset), os.pread(mnt, length, offset),
                                     f"{rel} @{offset}+{length}")
                os.lseek(mnt, 0, os.SEEK_END)
                self.assertEqual(os.read(mnt, 10), b"")
            finally:
                os.close(src)
                os.close(mnt)

    def test_eight_threads_reading_random_ranges_get_correct_bytes(self):
        sources = read_sources(self.tree, self.sample_files(60))
        self.assertEqual(concurrent_random_reads(self.mnt, sources), [])

    def test_writes_fail_with_erofs(self):
        rel = self.sample_files(1)[0]
        path = os.path.join(self.mnt, rel)
        folder = os.path.dirname(path)
        attempts = [
            lambda: open(path, "r+b"),
            lambda: open(path, "wb"),
            lambda: open(os.path.join(folder, "new.jpg"), "wb"),
            lambda: os.mkdir(os.path.join(folder, "new")),
            lambda: os.rename(path, path + ".moved"),
            lambda: os.unlink(path),
            lambda: os.chmod(path, 0o644),
            lambda: os.utime(path, (0, 0)),
            lambda: os.truncate(path, 0),
            lambda: os.setxattr(path, "user.note", b"x"),
            lambda: os.symlink(path, os.path.join(folder, "link")),
        ]
        for attempt in attempts:
            with self.assertRaises(OSError) as caught:
                attempt()
            self.assertEqual(caught.exception.errno, errno.EROFS)

    def test_xattrs_locate_each_file_in_its_blob(self):
        for rel in self.sample_files(10):
            path = os.path.join(self.mnt, rel)
            blob = os.getxattr(path, "user.gpufs.blob").decode()
            offset = int(os.getxattr(path, "user.gpufs.offset"))
            size = int(os.getxattr(path, "user.gpufs.size"))
            self.assertEqual(os.getxattr(path, "user.gpufs.class").decode(), rel.split("/")[0])
            self.assertTrue(blob.startswith(self.src))
            with open(blob, "rb") as f:
                f.seek(offset)
                with open(os.path.join(self.tree, rel), "rb") as source:
                    self.assertEqual(f.read(size), source.read())
            self.assertIn("user.gpufs.group", os.listxattr(path))
        self.assertEqual(int(os.getxattr(self.mnt, "user.gpufs.pid")), self.mount.proc.pid)

    def test_forgets_balance_the_entries_the_kernel_was_given(self):
        if os.geteuid() != 0:
            self.skipTest("needs root to drop the kernel's inode cache")
        entries = len(walk(self.mnt))  # readdirplus hands the kernel every entry
        self.assertGreaterEqual(int(os.getxattr(self.mnt, "user.gpufs.inodes")), entries)
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("2\n")  # dentries and inodes: the kernel forgets them
        # Forgets are asynchronous messages; a getxattr on the root is answered after them
        # only once they are read, so ask until they are in (bounded by the entry count).
        for _ in range(entries + 100):
            if int(os.getxattr(self.mnt, "user.gpufs.inodes")) <= 1:
                break
        self.assertLessEqual(int(os.getxattr(self.mnt, "user.gpufs.inodes")), 1)

    def test_statfs_reports_the_dataset(self):
        st = os.statvfs(self.mnt)
        total = sum(os.path.getsize(os.path.join(self.tree, r)) for r in self.sample_files(60))
        self.assertGreaterEqual(st.f_blocks * st.f_frsize, total)
        self.assertEqual(st.f_bfree, 0)
        self.assertEqual(st.f_files, len(walk(self.tree)) + 1)
        self.assertEqual(st.f_namemax, 255)

    def sample_files(self, n):
        files = sorted(r for r, s in walk(self.tree).items() if stat.S_ISREG(s.st_mode))
        return random.Random(n).sample(files, min(n, len(files)))


class EveryCachePolicy(lib.MountedSampleCase):
    """Byte-exact reads, with concurrent readers, under each policy and engine, with a
    budget that holds only part of the dataset (so groups are evicted and members read
    alone) and with one that holds it all."""

    CLASSES, PER_CLASS, GROUP_SIZE = 6, 10, 4

    def check_mount(self, *options):
        with lib.Mount(self.src, *options) as mnt:
            files = sorted(r for r, s in walk(self.tree).items() if stat.S_ISREG(s.st_mode))
            sources = read_sources(self.tree, files)
            self.assertEqual(concurrent_random_reads(mnt, sources, reads=120), [], options)
            for rel in files:
                with open(os.path.join(mnt, rel), "rb") as f:
                    self.assertEqual(f.read(), sources[rel], (rel, options))
            stats = json.loads(os.getxattr(mnt, "user.gpufs.stats"))
            self.assertEqual(stats["io"]["errors"], 0)
            if "budget_bytes" in stats:
                self.assertEqual(stats["io_errors"], 0)
                self.assertLessEqual(stats["cached_bytes"], stats["budget_bytes"])
            return stats

    def test_every_policy_and_engine_reads_byte_exact(self):
        for policy in ("consume-once", "pin", "lru"):
            for engine in ("io_uring", "pread"):
                for budget in ("256KiB", "64MiB"):
                    stats = self.check_mount("--policy", policy, "--io-engine", engine,
                                             "--cache-size", budget)
                    self.assertEqual(stats["policy"], policy)
                    self.assertGreater(stats["hits"] + stats["member_reads"], 0)

    def test_no_cache_serves_from_the_blobs(self):
        for options in (("--cache-size", "0"),):
            stats = self.check_mount(*options)
            self.assertNotIn("hits", stats, options)  # no cache: every byte read for its reply
            self.assertGreater(stats["io"]["requests"], 0, options)
        self.check_mount("--cache-size", "1MiB", "--no-prefetch")


class LifeCycle(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="gpufs-life-test-")
        # 3 x 7 = 21 files by 4: the grouping tool leaves the last file out.
        cls.tree, cls.src = lib.make_dataset(cls.work, classes=3, per_class=7, group_size=4,
                                             awkward=False)
        cls.mnt = os.path.join(cls.work, "mnt")
        os.mkdir(cls.mnt)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.work)

    def test_background_mount_is_usable_at_once_and_unmount_ends_the_daemon(self):
        result = lib.run_gpufsd("mount", self.src, self.mnt)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertTrue(lib.is_mounted(self.mnt))
        self.assertEqual(len(os.listdir(self.mnt)), 3)
        pid = int(os.getxattr(self.mnt, "user.gpufs.pid"))
        result = lib.run_gpufsd("unmount", self.mnt)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertFalse(lib.is_mounted(self.mnt))
        self.assertFalse(lib.is_running(pid))

    def test_sigterm_and_sigint_unmount_cleanly(self):
        for sig in (signal.SIGTERM, signal.SIGINT):
            mount = lib.Mount(self.src)
            mnt = mount.__enter__()
            mount.proc.send_signal(sig)
            self.assertEqual(mount.proc.wait(timeout=30), 0)
            self.assertFalse(lib.is_mounted(mnt))
            mount.__exit__(None, None, None)

    def test_fusermount_unmount_ends_the_daemon_with_status_0(self):
        mount = lib.Mount(self.src)
        mnt = mount.__enter__()
        subprocess.run(["fusermount3", "-u", mnt], check=True)
        self.assertEqual(mount.proc.wait(timeout=30), 0)
        mount.__exit__(None, None, None)

    def test_only_files_listed_in_the_index_appear(self):
        listed = set()
        with open(os.path.join(self.src, "metadata.txt")) as f:
            for line in f.read().splitlines()[4:]:
                fields = line.split(",")
                if len(fields) == 5:
                    listed.add(os.path.relpath(fields[4], self.tree))
        self.assertEqual(len(listed), 20)
        with lib.Mount(self.src) as mnt:
            mounted = {r for r, s in walk(mnt).items() if stat.S_ISREG(s.st_mode)}
        self.assertEqual(mounted, listed)

    def test_group_size_picks_one_of_several(self):
        shutil.copytree(self.src, os.path.join(os.path.dirname(self.src), "8"))
        try:
            parent = os.path.dirname(self.src)
            result = lib.run_gpufsd("mount", parent, self.mnt)
            self.assertEqual(result.returncode, 1)
            self.assertIn("several group sizes (4, 8)", result.stderr)
            with lib.Mount(parent, "--group-size", "8") as mnt:
                self.assertEqual(len(os.listdir(mnt)), 3)
        finally:
            shutil.rmtree(os.path.join(os.path.dirname(self.src), "8"))

    def test_malformed_input_is_refused_before_mounting(self):
        bad = os.path.join(self.work, "bad")
        shutil.copytree(self.src, bad)
        index = os.path.join(bad, "metadata.txt")
        with open(index) as f:
            lines = f.read().splitlines()
        cases = {
            "unknown class": (5, lambda l: l.replace(",n", ",zz", 1), "line 6: unknown class"),
            "offset beyond blob": (5, lambda l: "0,{},{},{},{}".format(
                l.split(",")[1], 10**9, 5, l.split(",")[4]), "members need"),
            "dot-dot": (5, lambda l: l + "/../../x", "segment '..'"),
        }
        for name, (i, edit, expected) in cases.items():
            broken = list(lines)
            broken[i] = edit(broken[i])
            with open(index, "w") as f:
                f.write("\n".join(broken) + "\n")
            result = lib.run_gpufsd("mount", bad, self.mnt)
            self.assertEqual(result.returncode, 1, name)
            self.assertIn(expected, result.stderr, name)
            self.assertIn("metadata.txt", result.stderr, name)
            self.assertFalse(lib.is_mounted(self.mnt), name)
        os.remove(os.path.join(bad, "filegroup-1.mytar"))
        with open(index, "w") as f:
            f.write("\n".join(lines) + "\n")
        result = lib.run_gpufsd("mount", bad, self.mnt)
        self.assertEqual(result.returncode, 1)
        self.assertIn("filegroup-1.mytar", result.stderr)
        self.assertFalse(lib.is_mounted(self.mnt))
        shutil.rmtree(bad)

    def test_usage_errors_exit_2_naming_the_fix_and_sizes_mean_their_unit(self):
        cases = [(["--cache-size", "10"], "--cache-size: '10' is 10 bytes, too few to be meant; "
                   "write the unit, e.g. 10GiB or 10MiB"),
                 (["--cache-size", "8G"], "--cache-size: '8G' could mean either; write 8GiB "
                   "(powers of 2) or 8GB (of 10)"),
                 (["--cache-size", "2x"], "--cache-size: '2x' has no unit gpufs knows"),
                 (["--cache-sise", "8GiB"], "gpufsd: unknown option --cache-sise; did you mean "
                   "--cache-size?"),
                 (["--policy", "fifo"], "--policy: 'fifo' is not one of consume-once, pin, lru; "
                  "`gpufsd mount --help` lists the options")]
        for options, expected in cases:
            result = lib.run_gpufsd("mount", *options, self.src, self.mnt)
            self.assertEqual(result.returncode, 2, options)
            self.assertIn(expected, result.stderr, options)
            self.assertFalse(lib.is_mounted(self.mnt))
        for size, budget in (("1GB", 10**9), ("1GiB", 2**30), ("65536", 65536)):
            with lib.Mount(self.src, "--cache-size", size) as mnt:
                # The arena rounds up to whole pages (huge pages from 2 MiB).
                self.assertGreaterEqual(lib.stats_of(mnt)["budget_bytes"], budget)
                self.assertLess(lib.stats_of(mnt)["budget_bytes"], budget + (2 << 20))


if __name__ == "__main__":
    lib.exit_unless_fuse_usable()
    unittest.main(verbosity=2)
