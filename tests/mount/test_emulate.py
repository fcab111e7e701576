#!/usr/bin/python3
"""gpufs-emulate end to end: two ranks (gloo on loopback) with a tiny profile run
torchvision's loader through a real gpufs mount; every rank's busy and waiting time add up
to its wall time, every image of the epoch is consumed once, the mount's counters for the
epoch are those gpufs-stat --advise reports, and the plot is drawn. The same over a plain
folder has no gpufs part, and bad input is refused naming it."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpufs_testlib as lib  # noqa: E402

EMULATE = os.environ.get("GPUFS_EMULATE", os.path.join(lib.ROOT, "build", "cli", "gpufs-emulate"))
TIERS = ("memory", "disk_tier", "source_group", "source_member")
CLASSES, PER_CLASS, GROUP = 4, 16, 4  # 64 images: 2 ranks x 4 steps of 8


def emulate(*args, timeout=240):
    return subprocess.run([sys.executable, EMULATE, *args], capture_output=True, text=True,
                          timeout=timeout)


class Emulate(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="gpufs-emulate-")
        cls.tree, cls.src = lib.make_dataset(cls.work, CLASSES, PER_CLASS, GROUP)
        cls.images = CLASSES * PER_CLASS
        cls.tree_bytes = sum(len(b) for b in lib.files_below(cls.tree).values())

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.work)

    def run_json(self, path, *extra):
        run = emulate("--gpus", "2", "--batch", "8", "--workers", "2", "--images-per-second",
                      "400", "--image-size", "32", "--prep-steps", "2", "--json",
                      "--no-progress", *extra, path)
        self.assertEqual(run.returncode, 0, run.stderr)
        return json.loads(run.stdout)

    def assert_adds_up(self, result, epochs):
        self.assertEqual(len(result["epochs"]), epochs)
        for e in result["epochs"]:
            self.assertEqual(e["images"], self.images)
            for r in e["ranks"]:
                where = f"epoch {e['epoch']} rank {r['rank']}"
                self.assertAlmostEqual(r["busy_s"] + r["waiting_s"], r["wall_s"], delta=1e-3,
                                       msg=where)
                self.assertAlmostEqual(r["data_wait_s"] + r["sync_wait_s"], r["waiting_s"],
                                       delta=1e-3, msg=where)
                self.assertAlmostEqual(r["fetch_stall_s"] + r["prep_stall_s"], r["waiting_s"],
                                       delta=1e-3, msg=where)
                self.assertEqual(r["steps"], self.images // 2 // 8, where)
                self.assertEqual(len(r["timeline"]), r["steps"], where)
                # The accelerator was busy at least its profiled step each time.
                self.assertGreaterEqual(r["busy_s"], r["steps"] * 8 / 400 - 1e-3, where)
            self.assertTrue(e["prep_measured"])
        self.assertEqual(result["prep_pass"]["images"], 2 * 2 * 8)

    def test_two_ranks_through_a_mount_add_up_and_agree_with_the_advice(self):
        plot = os.path.join(self.work, "timeline.png")
        # Streaming: every read of both epochs reaches the daemon, none the page cache.
        with lib.Mount(self.src, "--cache-size", "1MiB", "--streaming", "on") as mnt:
            # raw: each file is read whole in one read, so the counts are exact.
            result = self.run_json(mnt, "--epochs", "2", "--transform", "raw", "--plot", plot)
        self.assert_adds_up(result, 2)
        self.assertEqual(os.path.realpath(result["gpufs_mount"]), os.path.realpath(mnt))
        for e in result["epochs"]:
            reads = sum(e["gpufs"]["from"][t]["reads"] for t in TIERS)
            self.assertEqual(reads, self.images, f"epoch {e['epoch']}: {e['gpufs']}")
            self.assertEqual(e["gpufs"]["bytes_served"], self.tree_bytes, e["gpufs"])
        first = result["epochs"][0]["gpufs"]["from"]
        self.assertGreater(first["source_group"]["reads"] + first["source_member"]["reads"], 0,
                           "a fresh mount's first epoch reads the source")
        measured = result["advise"]["measured"]["from"]
        last = result["epochs"][-1]["gpufs"]["from"]
        for t in TIERS:
            self.assertEqual(measured[t]["reads"], last[t]["reads"], t)
            self.assertEqual(measured[t]["bytes"], last[t]["bytes"], t)
        with open(plot, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")

    def test_a_plain_folder_has_no_gpufs_part(self):
        result = self.run_json(self.tree, "--transform", "train", "--sync", "none")
        self.assert_adds_up(result, 1)
        self.assertIsNone(result["gpufs_mount"])
        self.assertNotIn("gpufs", result["epochs"][0])
        self.assertIsNone(result["advise"])
        for r in result["epochs"][0]["ranks"]:
            self.assertEqual(r["sync_wait_s"], 0.0)

    def test_training_for_real_in_place_of_the_sleep_adds_up_too(self):
        run = emulate("--train-on", "cpu", "--model", "resnet18", "--batch", "4", "--workers", "1",
                      "--image-size", "32", "--steps", "3", "--prep-steps", "2", "--json",
                      "--no-progress", self.tree)
        self.assertEqual(run.returncode, 0, run.stderr)
        result = json.loads(run.stdout)
        self.assertEqual(result["trained_on"], "cpu")
        rank = result["epochs"][0]["ranks"][0]
        self.assertEqual(rank["steps"], 3)
        self.assertGreater(rank["busy_s"], 0)
        self.assertAlmostEqual(rank["busy_s"] + rank["waiting_s"], rank["wall_s"], delta=1e-3)

    def test_the_text_report_names_the_profile_and_its_source(self):
        run = emulate("--model", "resnet50", "--gpu", "h100", "--batch", "8", "--workers", "1",
                      "--steps", "1", "--prep-steps", "0", "--transform", "raw", self.tree)
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertIn("resnet50 on 1 x h100", run.stdout)
        self.assertIn("MLPerf Training", run.stdout)
        self.assertRegex(run.stdout, r"epoch 1: .* accelerators waited [0-9.]+% \(fetch and prep")

    def test_an_image_that_does_not_decode_stops_the_job_naming_it(self):
        tree = os.path.join(self.work, "broken-tree")
        shutil.copytree(self.tree, tree)
        victim = sorted(lib.files_below(tree))[5]
        with open(os.path.join(tree, victim), "r+b") as f:
            f.write(b"not a JPEG at all")
        # Two ranks all-reducing each step: the other rank must not keep the job waiting.
        run = emulate("--gpus", "2", "--batch", "4", "--workers", "1", "--images-per-second",
                      "1000", "--transform", "decode", "--image-size", "32", "--no-progress",
                      tree)
        self.assertEqual(run.returncode, 2, run.stdout)
        self.assertIn("failed", run.stderr)
        self.assertIn(os.path.basename(victim), run.stderr)

    def test_bad_input_is_refused_naming_it(self):
        missing = os.path.join(self.work, "no-such-folder")
        for args, message in (([missing], f"{missing}: not a folder"),
                              ([self.src], "not an ImageFolder tree"),
                              (["--gpu", "tpu9", self.tree], "no profile for --model resnet50 --gpu tpu9"),
                              (["--gpus", "0", self.tree], "--gpus must be at least 1"),
                              (["--train-on", "cpu", "--transform", "raw", self.tree],
                               "--train-on needs images")):
            run = emulate(*args)
            self.assertEqual(run.returncode, 2, f"{args}: {run.stdout}")
            self.assertIn(message, run.stderr, args)


if __name__ == "__main__":
    lib.exit_unless_fuse_usable()
    unittest.main()
