#!/usr/bin/python3
"""gpufs-emulate's arithmetic and data, without a mount: the stall split over a fake loader
whose fetch and prep delays are known (on a fake clock, so the figures are exact), the
profile table (every entry names its source), the mount counters' epoch, and --record."""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest
import unittest.mock

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "cli", "emulate"))
from gpufs_emulate import mount_stats, profiles  # noqa: E402
from gpufs_emulate.loop import run_epoch  # noqa: E402
from gpufs_emulate.stall import JobEpoch, job_split, prep_rate_of, split  # noqa: E402

PROFILES = os.path.join(ROOT, "tools", "profiles")
EMULATE = os.environ.get("GPUFS_EMULATE", os.path.join(ROOT, "build", "cli", "gpufs-emulate"))


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds


class FakeLoader:
    """Yields `batches` batches of `size` images; before each the clock moves by the batch's
    fetch and prep delay (a loader with no workers ahead: every delay is a wait), the first
    also by a start-up delay (the workers' start)."""

    def __init__(self, clock, batches, size, fetch_s, prep_s, startup_s=0.0):
        self.clock, self.batches, self.size = clock, batches, size
        self.fetch_s, self.prep_s, self.startup_s = fetch_s, prep_s, startup_s

    def __iter__(self):
        self.clock.advance(self.startup_s)
        for _ in range(self.batches):
            self.clock.advance(self.fetch_s + self.prep_s)
            yield ([0] * self.size, [0] * self.size)


def epoch(clock, rank, loader, step_s, sync_s=0.0):
    return run_epoch(rank, loader, lambda _b: clock.advance(step_s),
                     (lambda: clock.advance(sync_s)) if sync_s else None, clock=clock)


class PrepPassWarning(unittest.TestCase):
    """A prep pass slower than an epoch it explains is said to be no bound on it."""

    def run_with(self, prep_rate):
        epoch = {"epoch": 1, "wall_s": 10.0, "images": 5000, "images_per_second": 500.0,
                 "of_demand": 0.5, "waiting_fraction": 0.2, "fetch_stall_fraction": 0.1,
                 "prep_stall_fraction": 0.1, "prep_measured": True, "ranks": []}
        prep = {"wall_s": 1.0, "images": 400, "steps_per_rank": 4,
                "images_per_second": prep_rate, "waiting_fraction": 0.1, "per_rank": []}
        return {"epochs": [epoch], "prep_pass": prep}

    def test_a_slower_prep_pass_is_warned_of_and_a_faster_one_is_not(self):
        from gpufs_emulate import report
        # The header needs a whole run's settings, which are not this test's.
        with unittest.mock.patch.object(report, "header_text", lambda run: []):
            self.assertIn("warning: the prep pass (400 images/s) ran slower than epoch 1 (500 "
                          "images/s)", report.text(self.run_with(400.0)))
            self.assertNotIn("warning", report.text(self.run_with(900.0)))


class StallArithmetic(unittest.TestCase):
    def test_known_fetch_and_prep_stall_come_out_of_a_fake_loader(self):
        clock = FakeClock()
        cold = epoch(clock, 0, FakeLoader(clock, 50, 32, 0.030, 0.010, startup_s=0.5), 0.020)
        resident = epoch(clock, 0, FakeLoader(clock, 10, 32, 0.0, 0.010, startup_s=0.5), 0.020)
        s = split(cold, prep_rate_of(resident))
        # 50 steps: 1 s busy, 1.5 s fetch, 0.5 s + 0.5 s prep (the start-up counts as prep).
        self.assertAlmostEqual(s.wall, 3.5, places=9)
        self.assertAlmostEqual(s.busy, 1.0, places=9)
        self.assertAlmostEqual(s.fetch, 1.5, places=9)
        self.assertAlmostEqual(s.prep, 1.0, places=9)
        self.assertAlmostEqual(s.fraction(s.fetch), 1.5 / 3.5, places=9)
        self.assertEqual(cold.images, 50 * 32)

    def test_busy_and_both_waits_add_up_to_the_wall_with_a_per_step_sync(self):
        clock = FakeClock()
        e = epoch(clock, 1, FakeLoader(clock, 7, 4, 0.013, 0.002), 0.011, sync_s=0.004)
        self.assertAlmostEqual(e.busy + e.data_wait + e.sync_wait, e.wall, places=9)
        self.assertAlmostEqual(e.sync_wait, 7 * 0.004, places=9)
        self.assertAlmostEqual(e.data_wait, 7 * 0.015, places=9)

    def test_prep_never_exceeds_the_wait_and_no_resident_pass_counts_all_as_fetch(self):
        clock = FakeClock()
        fed = epoch(clock, 0, FakeLoader(clock, 20, 8, 0.0, 0.001), 0.010)
        slow_prep = epoch(clock, 0, FakeLoader(clock, 5, 8, 0.0, 0.050), 0.010)
        s = split(fed, prep_rate_of(slow_prep))
        self.assertAlmostEqual(s.prep, s.waiting, places=9)
        self.assertEqual(s.fetch, 0.0)
        self.assertAlmostEqual(split(fed, None).fetch, fed.waiting, places=9)

    def test_the_job_is_the_sum_of_its_ranks_and_its_wall_the_slowest(self):
        clock = FakeClock()
        start = clock.now
        ranks = [epoch(clock, 0, FakeLoader(clock, 4, 8, 0.1, 0.0), 0.1)]
        clock.now = start  # rank 1 ran at the same time, slower
        ranks.append(epoch(clock, 1, FakeLoader(clock, 4, 8, 0.3, 0.0), 0.1))
        job = JobEpoch(ranks)
        self.assertAlmostEqual(job.wall, 1.6, places=9)
        self.assertAlmostEqual(job.images_per_second, 64 / 1.6, places=9)
        s = job_split(job, None)
        self.assertAlmostEqual(s.fetch, 0.4 + 1.2, places=9)
        self.assertAlmostEqual(s.fraction(s.fetch), 1.6 / 2.4, places=9)

    def test_a_step_cap_ends_the_epoch(self):
        clock = FakeClock()
        e = run_epoch(0, FakeLoader(clock, 10, 2, 0.01, 0.0), lambda _b: None, max_steps=3,
                      clock=clock)
        self.assertEqual(len(e.steps), 3)


class ProfileTable(unittest.TestCase):
    def test_every_entry_loads_and_names_its_source(self):
        table = profiles.load_table([PROFILES])
        self.assertGreater(len(table), 0)
        for p in table:
            where = f"{p.path}: {p.model}/{p.accelerator}/{p.batch}"
            self.assertTrue(p.source["title"] and p.source["date"], where)
            self.assertIn(p.source["kind"], profiles.KINDS, where)
            if p.source["kind"] != "measured":
                self.assertTrue(p.source.get("url", "").startswith("https://"), where)
                self.assertTrue(p.quote, f"{where}: no quote of the source")
            self.assertGreater(p.images_per_second, 0, where)
        self.assertIn(("resnet50", "h100"), {(p.model, p.accelerator) for p in table})

    def test_the_nearest_batch_is_chosen_and_an_unknown_pair_lists_the_table(self):
        table = profiles.load_table([PROFILES])
        p = profiles.choose(table, "resnet50", "v100", 100)
        self.assertEqual(p.batch, 112)
        with self.assertRaisesRegex(profiles.ProfileError, r"no profile for .*resnet50/h100"):
            profiles.choose(table, "resnet50", "tpu9", 256)

    def test_a_malformed_file_is_refused_naming_it_and_the_field(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "bad.json")
            with open(path, "w") as f:
                json.dump({"source": {"title": "t", "date": "2024", "kind": "paper"},
                           "entries": [{"model": "resnet50", "accelerator": "a100",
                                        "batch": 256}]}, f)
            with self.assertRaisesRegex(profiles.ProfileError,
                                        r"bad\.json: entries\[0\]: 'images_per_second'"):
                profiles.load_table([d])


def totals(reads, wait_s, fetched, stalled, hit_bytes=0, miss_bytes=0):
    return {"stalled_s": stalled, "hit_bytes": hit_bytes, "miss_bytes": miss_bytes,
            "from": {t: {"reads": reads.get(t, 0), "bytes": 100 * reads.get(t, 0),
                         "wait_s": wait_s.get(t, 0.0), "fetched_bytes": fetched.get(t, 0)}
                     for t in ("memory", "disk_tier", "source_group", "source_member")}}


class MountCounters(unittest.TestCase):
    def test_an_epoch_is_the_difference_and_the_fetch_stall_is_laid_on_the_waits(self):
        before = totals({"memory": 5}, {}, {}, 1.0, hit_bytes=500)
        # Whole groups fetched ahead of the reads: more bytes came than were served, yet the
        # ratio counts served bytes only, hits apart from misses.
        after = totals({"memory": 15, "source_group": 6, "source_member": 2},
                       {"source_group": 3.0, "source_member": 1.0},
                       {"source_group": 6000, "source_member": 200}, 3.0,
                       hit_bytes=1000, miss_bytes=1300)
        e = mount_stats.epoch_of(before, after, 4.0, 0.4)
        self.assertEqual(e["from"]["memory"]["reads"], 10)
        self.assertAlmostEqual(e["from"]["source_group"]["fetch_stall_fraction"], 0.3)
        self.assertAlmostEqual(e["from"]["source_member"]["fetch_stall_fraction"], 0.1)
        self.assertAlmostEqual(e["readers_stall_fraction"], 0.5)
        self.assertAlmostEqual(e["hit_ratio"], 500 / 1800)
        self.assertIsNone(mount_stats.epoch_of(after, after, 1.0, 0.0)["hit_ratio"])

    def test_fetch_stall_is_no_more_than_the_daemons_readers_waited(self):
        # An epoch served wholly from memory: no reader waited in the daemon, so the 7%
        # the ranks waited (their loaders' start-up) is not storage's.
        quiet = totals({"memory": 2000}, {}, {}, 0.0)
        e = {"wall_s": 10.0, "fetch_stall_fraction": 0.07, "prep_stall_fraction": 0.01,
             "gpufs": mount_stats.epoch_of(totals({}, {}, {}, 0.0), quiet, 10.0, 0.07)}
        mount_stats.bound_fetch_stall(e, ranks=2)
        self.assertEqual(e["fetch_stall_fraction"], 0.0)
        self.assertAlmostEqual(e["prep_stall_fraction"], 0.08)
        self.assertTrue(e["fetch_stall_bounded_by_daemon"])
        # Readers waited 0.5 s of a 10 s epoch: two ranks, at most 1 s of their 20 s.
        slow = totals({"source_group": 4}, {"source_group": 0.5}, {"source_group": 400}, 0.5)
        e = {"wall_s": 10.0, "fetch_stall_fraction": 0.2, "prep_stall_fraction": 0.0,
             "gpufs": mount_stats.epoch_of(totals({}, {}, {}, 0.0), slow, 10.0, 0.2)}
        mount_stats.bound_fetch_stall(e, ranks=2)
        self.assertAlmostEqual(e["fetch_stall_fraction"], 0.05)
        self.assertAlmostEqual(e["prep_stall_fraction"], 0.15)
        # Within the bound: left as measured.
        e = {"wall_s": 10.0, "fetch_stall_fraction": 0.04, "prep_stall_fraction": 0.0,
             "gpufs": mount_stats.epoch_of(totals({}, {}, {}, 0.0), slow, 10.0, 0.04)}
        mount_stats.bound_fetch_stall(e, ranks=2)
        self.assertEqual(e["fetch_stall_fraction"], 0.04)
        self.assertNotIn("fetch_stall_bounded_by_daemon", e)

    def test_a_plain_folder_is_no_mount(self):
        with tempfile.TemporaryDirectory() as d:
            self.assertIsNone(mount_stats.mount_root(d))


class Record(unittest.TestCase):
    def test_a_measured_step_is_added_to_a_profile_file_that_loads(self):
        if importlib.util.find_spec("torchvision") is None:
            self.skipTest("torchvision is missing: --record trains a torchvision model")
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "measured.json")
            for batch in (2, 4):
                run = subprocess.run(
                    [sys.executable, EMULATE, "--record", out, "--model", "resnet18", "--gpu",
                     "cpu-test", "--batch", str(batch), "--device", "cpu", "--image-size", "32",
                     "--record-steps", "2"], capture_output=True, text=True, timeout=300)
                self.assertEqual(run.returncode, 0, run.stderr)
            table = profiles.load_table([d])
            self.assertEqual(sorted(p.batch for p in table), [2, 4])
            self.assertTrue(all(p.source["kind"] == "measured" for p in table))
            self.assertEqual(os.listdir(d), ["measured.json"])  # no temporary left


if __name__ == "__main__":
    unittest.main()
