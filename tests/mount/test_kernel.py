#!/usr/bin/python3
"""What the kernel is told at mount: listings with or without attributes, streaming reads
past the page cache, and the limits chosen from the machine."""
import json
import os
import shutil
import subprocess
import tempfile
import unittest

import gpufs_testlib as lib


def files_below(root):
    return sorted(os.path.relpath(os.path.join(folder, name), root)
                  for folder, _, names in os.walk(root) for name in names)


def plain_walk(root):
    """Names below root, as os.walk lists them: no stat of any file."""
    return sum(len(dirs) + len(names) for _, dirs, names in os.walk(root))


def inodes(mnt):
    return int(os.getxattr(mnt, "user.gpufs.inodes"))


def kernel_stats(mnt):
    return json.loads(os.getxattr(mnt, "user.gpufs.stats"))["kernel"]


def resident_bytes(paths):
    """Bytes of `paths` in the kernel's page cache (util-linux fincore)."""
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", *paths],
                         capture_output=True, text=True, check=True).stdout
    return sum(int(x) for x in out.split())


class KernelChoices(unittest.TestCase):
    # Folders of 700 files: a listing takes several replies, so the kernel's adaptive
    # mode shows (the first reply of each folder comes with attributes, the rest not).
    CLASSES, PER_CLASS, GROUP_SIZE = 2, 700, 50

    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="gpufs-kernel-test-")
        cls.tree, cls.src = lib.make_dataset(cls.work, cls.CLASSES, cls.PER_CLASS,
                                             cls.GROUP_SIZE, awkward=False)
        cls.files = files_below(cls.tree)
        cls.dataset_bytes = sum(os.path.getsize(os.path.join(cls.tree, f)) for f in cls.files)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.work)

    def test_a_plain_walk_makes_inodes_as_the_readdirplus_mode_says(self):
        entries = self.CLASSES + len(self.files)
        seen = {}
        for mode in ("auto", "always", "never"):
            with lib.Mount(self.src, "--readdirplus", mode) as mnt:
                self.assertEqual(plain_walk(mnt), entries, mode)
                seen[mode] = inodes(mnt)
                self.assertEqual(kernel_stats(mnt)["readdirplus"], mode)
                # Whatever the listing gave, every file opens and reads.
                for rel in self.files[::97]:
                    with open(os.path.join(mnt, rel), "rb") as f, \
                            open(os.path.join(self.tree, rel), "rb") as want:
                        self.assertEqual(f.read(), want.read(), (mode, rel))
        self.assertGreaterEqual(seen["always"], entries)
        # Without attributes the kernel knows only the root and the folders walked into.
        self.assertLessEqual(seen["never"], self.CLASSES + 1)
        self.assertGreater(seen["auto"], 2 * self.CLASSES)  # first replies come with attributes
        self.assertLess(seen["auto"], entries // 2)  # the rest do not
        # A first reply is one page, whatever the kernel offers: a plus entry takes at least
        # 152 bytes (its attributes and a name), so a page holds at most 26 of them.
        self.assertLessEqual(seen["auto"], self.CLASSES * (4096 // 152) + self.CLASSES + 1)

    def test_no_readdirplus_is_never(self):
        with lib.Mount(self.src, "--no-readdirplus") as mnt:
            self.assertEqual(kernel_stats(mnt)["readdirplus"], "never")

    def test_streaming_reads_past_the_page_cache(self):
        # auto: this dataset is larger than the budget but fits the page cache beside it,
        # so the kernel keeps caching (tests/unit/kernel_limits_test.cc has the rule).
        budget = self.dataset_bytes // 4
        for streaming, expect in (("auto", False), ("off", False), ("on", True)):
            with lib.Mount(self.src, "--cache-size", str(budget), "--streaming",
                           streaming) as mnt:
                self.assertEqual(kernel_stats(mnt)["streaming"], expect, streaming)
                paths = [os.path.join(mnt, rel) for rel in self.files[:200]]
                for rel, path in zip(self.files, paths):
                    with open(path, "rb") as f, open(os.path.join(self.tree, rel), "rb") as w:
                        self.assertEqual(f.read(), w.read(), (streaming, rel))
                cached = resident_bytes(paths)
                if expect:
                    self.assertEqual(cached, 0, streaming)
                else:
                    self.assertGreater(cached, 0, streaming)

    def test_a_dataset_within_the_budget_keeps_the_page_cache(self):
        with lib.Mount(self.src, "--cache-size", str(4 * self.dataset_bytes)) as mnt:
            self.assertFalse(kernel_stats(mnt)["streaming"])

    def test_limits_follow_the_threads(self):
        with lib.Mount(self.src) as mnt:
            k = kernel_stats(mnt)
            self.assertGreaterEqual(k["threads"], 16)
            self.assertEqual(k["max_background"], k["threads"])
            self.assertEqual(k["congestion_threshold"], k["threads"] * 3 // 4)
        with lib.Mount(self.src, "--threads", "24", "--max-background", "40") as mnt:
            k = kernel_stats(mnt)
            self.assertEqual((k["threads"], k["max_background"], k["congestion_threshold"]),
                             (24, 40, 30))


if __name__ == "__main__":
    lib.exit_unless_fuse_usable()
    unittest.main(verbosity=2)
