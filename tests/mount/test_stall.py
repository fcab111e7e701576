#!/usr/bin/python3
"""Stall accounting and sizing advice through real mounts of a pack on a real HTTP server
(nginx): each read is counted once, where it was served from (memory, the disk tier, the
source as a group or a member alone, or the kernel's page cache by its absence), and
gpufs-stat --advise turns from "raise the cache" to "storage is not the bottleneck" once
the budget holds the dataset."""
import concurrent.futures
import importlib
import json
import os
import random
import re
import subprocess
import sys
import unittest

import gpufs_testlib as lib
from gpufs_testlib import stats_of

sys.path.insert(0, lib.ROOT)
from tests.servers import nginx  # noqa: E402

GPUFS_STAT = os.environ.get("GPUFS_STAT", os.path.join(lib.ROOT, "build", "cli", "gpufs-stat"))
TIERS = ("memory", "disk_tier", "source_group", "source_member")


def totals(mnt):
    """{tier: (reads, wait seconds)} since the mount."""
    stall = stats_of(mnt)["stall"]["totals"]["from"]
    return {t: (stall[t]["reads"], stall[t]["wait_s"]) for t in TIERS}


def read_whole(path):
    with open(path, "rb") as f:
        return f.read()


class StallAccounting(lib.ServedPackCase):
    TRAIN, VAL, GROUP_BYTES, PREFIX = (4, 12), (2, 4), "64KiB", "gpufs-stall-"

    def mount(self, *options, url=None):
        return lib.Mount(url or self.url, *options, env=self.env)

    def read_counted(self, mnt, name):
        """Reads one file whole and returns how each tier's count moved."""
        before = totals(mnt)
        self.assertEqual(read_whole(os.path.join(mnt, name)), self.expected[name])
        after = totals(mnt)
        return {t: (after[t][0] - before[t][0], after[t][1] - before[t][1]) for t in TIERS}

    def assert_counted_at(self, moved, tier, waited):
        for t in TIERS:
            self.assertEqual(moved[t][0], 1 if t == tier else 0, f"{t} in {moved}")
        if waited:
            self.assertGreater(moved[tier][1], 0, moved)
        else:
            self.assertEqual(moved[tier][1], 0, moved)

    def test_a_read_from_each_tier_is_counted_once_in_its_place(self):
        # Every file is smaller than one read (streaming: no page cache, no read-ahead).
        name = sorted(n for n in self.expected if len(self.expected[n]) < 128 << 10)[0]
        tier_dir = os.path.join(self.work, "tier-each")
        with self.mount("--cache-size", "64MiB", "--streaming", "on", "--disk-cache",
                        tier_dir) as mnt:
            self.assert_counted_at(self.read_counted(mnt, name), "source_group", waited=True)
            self.assert_counted_at(self.read_counted(mnt, name), "memory", waited=False)
            # The loaded group is written back to the tier in the background.
            lib.settled_stats(mnt, lambda s: s["tier"]["writes"] >= 1, "a write-back")
        # A budget too small for any group: the member alone, from the tier's copy.
        with self.mount("--cache-size", "4KiB", "--streaming", "on", "--disk-cache",
                        tier_dir) as mnt:
            self.assert_counted_at(self.read_counted(mnt, name), "disk_tier", waited=True)
        with self.mount("--cache-size", "4KiB", "--streaming", "on", "--no-disk-cache") as mnt:
            self.assert_counted_at(self.read_counted(mnt, name), "source_member", waited=True)

    def test_the_page_cache_answers_without_a_count_and_an_epoch_names_what_it_never_asked(self):
        names = sorted(self.expected)
        with self.mount("--cache-size", "64MiB", "--no-disk-cache") as mnt:
            for name in names:
                self.assertEqual(read_whole(os.path.join(mnt, name)), self.expected[name])
            before = totals(mnt)
            stall = stats_of(mnt)["stall"]
            self.assertEqual(stall["last"]["files"], len(names))  # a whole pass: epoch 1
            self.assertEqual(stall["last"]["not_requested"], 0)
            # Again: the kernel's page cache answers; the daemon sees nothing.
            for name in names[:3]:
                self.assertEqual(read_whole(os.path.join(mnt, name)), self.expected[name])
            self.assertEqual(totals(mnt), before)
            stall = stats_of(mnt)["stall"]
            self.assertEqual((stall["epoch"], stall["current"]["files"]), (2, 0))
            # Every view says so: one definition of an epoch.
            self.assertEqual((stats_of(mnt)["epoch"], stats_of(mnt)["epoch_files_served"]),
                             (2, 0))
            (kv,) = lib.watch(mnt)
            self.assertEqual((kv["epoch"], kv["last_stall_fraction"] != "-"), ("2", True))
            # Nothing of epoch 2 reached gpufsd: its hit ratio is not measured, and the
            # kernel's page cache, which holds the files, is named as what serves them.
            self.assertEqual(kv["hit_ratio"], "-")
            self.assertGreater(float(kv["page_cache_ratio"]), 0.9)
            self.assertTrue(0.0 <= stall["last"]["hit_ratio"] <= 1.0, stall["last"])
        # Streaming, so that each read reaches the daemon: an epoch that skips 3 files
        # ends when a file comes again, and counts those 3 as never asked for.
        with self.mount("--cache-size", "64MiB", "--no-disk-cache", "--streaming",
                        "on") as mnt:
            for name in names[3:] + names[3:4]:
                read_whole(os.path.join(mnt, name))
            stall = stats_of(mnt)["stall"]
            self.assertEqual(stall["epoch"], 2)
            self.assertEqual(stall["last"]["files"], len(names) - 3)
            self.assertEqual(stall["last"]["not_requested"], 3)
            self.assertEqual(stall["current"]["files"], 1)

    def epochs(self, mnt, count):
        """`count` epochs of every file read whole in a random order by 4 readers, then one
        file of the next (which ends the last)."""
        names = sorted(self.expected)
        rng = random.Random(7)
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            for _ in range(count):
                rng.shuffle(names)
                for name, data in zip(names, pool.map(
                        lambda n: read_whole(os.path.join(mnt, n)), names)):
                    self.assertEqual(data, self.expected[name], name)
        read_whole(os.path.join(mnt, names[0]))

    def advise(self, mnt):
        out = subprocess.run([GPUFS_STAT, "--advise", "--json", mnt], capture_output=True,
                             text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr)
        return json.loads(out.stdout)

    def test_the_advice_turns_once_the_budget_holds_the_dataset(self):
        dataset = sum(len(b) for b in self.expected.values())
        with nginx.FaultProxy(self.origin.url, delay_ms=20) as proxy:
            url = proxy.url + "/pack/"
            with self.mount("--cache-size", "128KiB", "--no-disk-cache", "--streaming", "on",
                            url=url) as mnt:
                self.assertEqual(self.advise(mnt)["verdict"], "no_epoch")
                self.epochs(mnt, 2)
                small = self.advise(mnt)
            with self.mount("--cache-size", "64MiB", "--no-disk-cache", "--streaming", "on",
                            url=url) as mnt:
                self.epochs(mnt, 2)
                ample = self.advise(mnt)
        # Members read alone at 20 ms each: readers wait most of the epoch, and a budget
        # that holds the dataset's groups is the advice.
        self.assertTrue(small["ended"])
        self.assertGreater(small["measured"]["stall_fraction"], 0.05, small["text"])
        self.assertEqual(small["verdict"], "raise_cache", small["text"])
        self.assertGreater(small["advice"]["cache_bytes"], 128 << 10)
        self.assertLess(small["advice"]["stall_fraction"], 0.05)
        self.assertIn("--cache-size", small["text"])
        for advice in (small, ample):  # every hit ratio a share: in [0, 1]
            for point in [advice["measured"], advice["model"], *advice["points"]]:
                self.assertTrue(0.0 <= point["hit_ratio"] <= 1.0, point)
        for advice in (small, ample):  # one row per budget, and every mark explained
            rows = [tuple(t for t in ln.split() if t != "*")[:3]
                    for ln in advice["text"].splitlines() if re.search(r"%( <=)?( |$)", ln)
                    and re.match(r"\s+\*?\s*[\d.]+MiB", ln)]
            self.assertEqual(len(rows), len(set(rows)), advice["text"])
            if " <=" in advice["text"]:
                self.assertIn("<= at most this", advice["text"])
        self.assertGreaterEqual(small["settings"]["dataset_bytes"], dataset)
        # Every file of epoch 2 from memory: nothing waited, storage is not the bottleneck.
        self.assertEqual(ample["verdict"], "fed", ample["text"])
        self.assertLess(ample["measured"]["stall_fraction"], 0.05)
        self.assertEqual(ample["measured"]["from"]["source_member"]["reads"], 0)
        self.assertIn("not the bottleneck", ample["text"])

    def test_a_plot_named_with_quotes_is_drawn_at_that_name_and_runs_nothing(self):
        try:
            importlib.import_module("matplotlib")
        except ImportError:
            self.skipTest("python3-matplotlib is not installed: --plot cannot draw")
        marker = os.path.join(self.work, "injected")  # what a shell would make, in cwd
        png = os.path.join(self.work, "advice' \"$(touch injected)\"`touch injected`'.png")
        with self.mount("--cache-size", "64MiB", "--no-disk-cache") as mnt:
            self.epochs(mnt, 1)
            out = subprocess.run([GPUFS_STAT, "--advise", "--plot", png, mnt],
                                 capture_output=True, text=True, timeout=120, cwd=self.work)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertFalse(os.path.exists(marker), "the PNG's name ran a command")
        with open(png, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        os.unlink(png)


if __name__ == "__main__":
    lib.exit_unless_fuse_usable()
    unittest.main(verbosity=2)
