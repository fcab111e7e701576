#!/usr/bin/python3
"""Files of groups the budget cannot pin, read through the kernel's page cache.

A budget smaller than every group pins none: each file is then read without its group.
Where the dataset lies on a disk, its whole group is read ahead into the page cache and
its siblings are found there (cache/miss_reads.h); the mount's bytes equal the tree's
either way. A dataset larger than the memory cgroup the daemon runs in is read exactly,
with a default budget sized from the cgroup's limit, and the daemon survives it.
"""
import os
import random
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpufs_testlib as lib  # noqa: E402

TMPFS_MAGIC = 0x01021994


def miss_reads(mnt):
    return lib.stats_of(mnt)["miss_reads"]


def resident_bytes(path):
    """Bytes of `path` the page cache holds (util-linux fincore)."""
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", path],
                         capture_output=True, text=True, check=True).stdout
    return int(out.split()[0])


def read_all(mnt, rel, threads=4, seed=3):
    """{path: bytes} of every file in `rel` read through mnt by `threads` readers in a
    shuffled order, as a loader's workers do."""
    order = list(rel)
    random.Random(seed).shuffle(order)
    got, lock = {}, threading.Lock()

    def reader(chunk):
        for path in chunk:
            with open(os.path.join(mnt, path), "rb") as f:
                data = f.read()
            with lock:
                got[path] = data
    workers = [threading.Thread(target=reader, args=(order[i::threads],)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return got


class ThroughThePageCache(lib.WorkFolderCase):
    PREFIX = "gpufs-miss-"

    def setUp(self):
        super().setUp()
        self.tree = os.path.join(self.work, "tree")
        lib.make_sample.make_tree(self.tree, 6, 40, 1, False, 320)
        self.pack = os.path.join(self.work, "pack")
        made = lib.run_gpufsd("pack", self.tree, self.pack, "--group-bytes", "512KiB")
        self.assertEqual(made.returncode, 0, made.stderr)
        if self._on_tmpfs(self.pack):
            self.skipTest(f"{self.pack} is on tmpfs: its files are the page cache already")
        self.files = lib.files_below(self.tree)

    @staticmethod
    def _on_tmpfs(path):
        out = subprocess.run(["stat", "-f", "-c", "%t", path], capture_output=True, text=True)
        return int(out.stdout.strip() or "0", 16) == TMPFS_MAGIC

    def mount(self, *options):
        # 64 KiB pins no 512 KiB group: every file is a miss.
        return lib.Mount(self.pack, "--cache-size", "64KiB", "--no-prefetch", "--no-disk-cache",
                         *options, env=self.env)

    def test_a_file_alone_brings_its_whole_group_into_the_page_cache(self):
        with self.mount() as mnt:
            before = miss_reads(mnt)
            self.assertEqual(before["mode"], "auto")
            self.assertEqual(before["choice"], "groups", before)
            path = sorted(self.files)[5]
            blob = os.getxattr(os.path.join(mnt, path), "user.gpufs.blob").decode()
            lib.drop_page_cache()
            with open(os.path.join(mnt, path), "rb") as f:
                self.assertEqual(f.read(), self.files[path])
            size = os.path.getsize(blob)
            deadline = time.monotonic() + 20
            while resident_bytes(blob) < size * 0.9 and time.monotonic() < deadline:
                time.sleep(0.05)
            self.assertGreaterEqual(resident_bytes(blob), size * 0.9, f"{blob} of {size} bytes")
            after = miss_reads(mnt)
            self.assertEqual(after["groups_read_ahead"], 1)
            self.assertGreater(after["bytes_read_ahead"], size // 2)

    def test_an_epoch_reads_each_file_exactly_and_most_from_the_page_cache(self):
        with self.mount() as mnt:
            lib.drop_page_cache()
            self.assertEqual(read_all(mnt, self.files), self.files)
            m = miss_reads(mnt)
            stats = lib.stats_of(mnt)
        self.assertEqual(stats["member_reads"], len(self.files))
        self.assertGreaterEqual(m["groups_read_ahead"], 1)
        # The first file of each group waits on its group's read; most of the rest were
        # in the page cache by the time they were asked for.
        self.assertGreater(m["page_cache_hits"], len(self.files) // 2, m)

    def test_members_reads_each_file_alone(self):
        with self.mount("--miss-reads", "members") as mnt:
            self.assertEqual(miss_reads(mnt)["choice"], "members")
            lib.drop_page_cache()
            self.assertEqual(read_all(mnt, self.files), self.files)
            m = miss_reads(mnt)
        self.assertEqual(m["groups_read_ahead"], 0)
        self.assertEqual(m["page_cache_hits"], 0)


class InAMemoryCgroup(lib.WorkFolderCase):
    """The daemon and its reader in a memory cgroup smaller than the dataset, as a
    container or a Slurm job is."""

    PREFIX = "gpufs-memcg-"
    LIMIT = 384 << 20
    FILE = 2 << 20

    def setUp(self):
        super().setUp()
        root = "/sys/fs/cgroup/memory"
        if os.geteuid() != 0 or not os.path.isfile(os.path.join(root, "cgroup.procs")):
            self.skipTest("needs root and the cgroup v1 memory controller at " + root)
        self.group = os.path.join(root, f"gpufs-test-{os.getpid()}")
        os.mkdir(self.group)
        self.addCleanup(self.remove_group)
        with open(os.path.join(self.group, "memory.limit_in_bytes"), "w") as f:
            f.write(str(self.LIMIT))
        with open("/proc/self/cgroup") as f:
            line = next(l for l in f if l.split(":")[1].split(",").count("memory"))
        self.home = os.path.join(root, line.strip().split(":", 2)[2].lstrip("/"))

    def enter(self, folder):
        with open(os.path.join(folder, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))

    def remove_group(self):
        self.enter(self.home)
        deadline = time.monotonic() + 10
        while True:
            try:
                os.rmdir(self.group)
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def test_a_dataset_larger_than_the_cgroup_reads_exactly(self):
        tree = os.path.join(self.work, "tree")
        rng = random.Random(5)
        for c in range(3):
            os.makedirs(os.path.join(tree, f"class{c}"))
            for i in range(3 * self.LIMIT // self.FILE // 6):  # half again the limit
                with open(os.path.join(tree, f"class{c}", f"{i:04}.JPEG"), "wb") as f:
                    f.write(rng.randbytes(self.FILE - i * 4096))
        pack = os.path.join(self.work, "pack")
        made = lib.run_gpufsd("pack", tree, pack, "--group-bytes", "8MiB")
        self.assertEqual(made.returncode, 0, made.stderr)
        rel = sorted(os.path.relpath(os.path.join(d, n), tree)
                     for d, _, names in os.walk(tree) for n in names)
        self.enter(self.group)  # the daemon started now is the cgroup's, and so are reads
        # A sanitizer's quarantine keeps freed memory for a while (256 MiB by default):
        # memory a release build hands back at once.
        asan = os.environ.get("ASAN_OPTIONS", "")
        env = {**self.env, "ASAN_OPTIONS": f"{asan}:quarantine_size_mb=16".lstrip(":")}
        with lib.Mount(pack, "--no-disk-cache", env=env) as mnt:
            budget = lib.stats_of(mnt)["budget_bytes"]
            lib.drop_page_cache()
            for path in rng.sample(rel, len(rel)):
                with open(os.path.join(mnt, path), "rb") as f, \
                        open(os.path.join(tree, path), "rb") as g:
                    self.assertTrue(f.read() == g.read(), path)
            self.enter(self.home)
        self.assertLessEqual(budget, self.LIMIT // 4)
        with open(os.path.join(self.group, "memory.oom_control")) as f:
            oom = dict(line.split() for line in f)
        self.assertEqual(oom.get("oom_kill", "0"), "0")


if __name__ == "__main__":
    lib.exit_unless_fuse_usable()
    unittest.main()
