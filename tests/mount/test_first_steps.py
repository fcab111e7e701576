#!/usr/bin/python3
"""What a new user meets first, through real mounts: paths typed relative to the folder
gpufsd was started in mean what they meant there, whichever folder the daemon works from;
the first mistakes (an ImageFolder tree, a URL gpufs does not read, no mount point, a cache
larger than the machine, a value out of range, a typo, an -o value) are answered with the
fix."""
import os
import subprocess
import sys
import unittest

import gpufs_testlib as lib

sys.path.insert(0, lib.ROOT)
from tests.servers.procs import free_port  # noqa: E402


def read_ahead_kb(path):
    """The read-ahead of the device holding `path` (its bdi), or None where it has none."""
    st = os.stat(path)
    knob = f"/sys/class/bdi/{os.major(st.st_dev)}:{os.minor(st.st_dev)}/read_ahead_kb"
    try:
        with open(knob) as f:
            return int(f.read())
    except OSError:
        return None


class FirstSteps(lib.WorkFolderCase):
    PREFIX = "gpufs-first-"

    def setUp(self):
        super().setUp()
        self.tree, self.src = lib.make_dataset(os.path.join(self.work, "data"), 2, 4, 4)

    def test_relative_paths_mean_what_they_meant_where_they_were_typed(self):
        for stray in ("/reltier", "/rel.log", "/mnt-rel"):
            self.assertFalse(os.path.exists(stray), f"{stray} is there before the test")
        root_read_ahead = read_ahead_kb("/")
        source = os.path.relpath(self.src, self.work)
        result = subprocess.run(
            [lib.GPUFSD, "mount", "--disk-cache", "reltier", "--log-file", "rel.log",
             "--max-readahead", "1024", source, "mnt"],
            cwd=self.work, capture_output=True, text=True, timeout=60, env=self.env)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertTrue(lib.is_mounted(self.mnt))
        self.assertEqual(lib.files_below(self.mnt), lib.files_below(self.tree))
        lib.settled_stats(self.mnt, lambda s: s["tier"]["writes"] >= s["groups"],
                          "every group in the tier")
        tier = os.path.join(self.work, "reltier")
        self.assertTrue([f for _, _, files in os.walk(tier) for f in files if f.endswith(".grp")],
                        "no copies in ./reltier")
        self.assertEqual(read_ahead_kb(self.mnt), 1024, "the mount's own read-ahead")
        self.assertEqual(read_ahead_kb("/"), root_read_ahead, "the root disk's read-ahead")
        self.assertEqual(lib.run_gpufsd("unmount", self.mnt).returncode, 0)
        with open(os.path.join(self.work, "rel.log")) as f:
            self.assertIn(f"at {self.mnt}", f.read())
        for stray in ("/reltier", "/rel.log"):
            self.assertFalse(os.path.exists(stray), f"the daemon wrote {stray}")

    def refused(self, *args, status=1):
        """gpufsd's stderr for `args`, which must fail with `status` and mount nothing."""
        result = lib.run_gpufsd(*args, env=self.env)
        self.assertEqual(result.returncode, status, result.stderr)
        self.assertFalse(lib.is_mounted(self.mnt))
        self.assertNotIn("Run with --help", result.stderr)
        return result.stderr

    def test_first_mistakes_are_answered_with_the_fix(self):
        said = self.refused("mount", self.tree, self.mnt)
        self.assertIn(f"cannot open dataset {self.tree}: it is an ImageFolder tree", said)
        self.assertIn(f"`gpufsd pack {self.tree} {self.tree}.gpufs`", said)
        self.assertIn(f"`tar cf {self.tree}.tar -C {self.tree} .`", said)
        said = self.refused("mount", "s3:/bucket/imagenet", self.mnt)
        self.assertIn("gpufs reads a local path, s3://BUCKET/PREFIX/ or http(s)://HOST/PATH/; "
                      "did you mean s3://bucket/imagenet?", said)
        said = self.refused("mount", "ftp://host/imagenet", self.mnt)
        self.assertIn("cannot open dataset ftp://host/imagenet: gpufs reads", said)
        for missing in ("gone", "gone.tar", "gone.tar.zst"):
            gone = os.path.join(self.work, missing)
            said = self.refused("mount", gone, self.mnt)
            self.assertIn(f"cannot open dataset {gone}: no such file or folder", said)
        absent = os.path.join(self.work, "absent")
        said = self.refused("mount", self.src, absent)
        self.assertIn(f"cannot mount at {absent}: No such file or directory; make the folder "
                      f"first (mkdir -p {absent})", said)
        said = self.refused("mount", "--cache-size", "100TiB", "--dry-run", self.src, self.mnt)
        self.assertIn("cannot use --cache-size 100 TiB: more than the memory this process may use", said)
        said = self.refused("mount", "--prefetch-depth", "0", self.src, self.mnt, status=2)
        self.assertIn("--prefetch-depth: 0 is out of range: give 1 to 64; `gpufsd mount --help` "
                      "lists the options", said)
        said = self.refused("mount", "--cache-sise", "1GiB", self.src, self.mnt, status=2)
        self.assertEqual(said, "gpufsd: unknown option --cache-sise; did you mean --cache-size?\n")
        said = self.refused("mount", "-o", "cache_size=8G", self.src, self.mnt, status=2)
        self.assertIn("gpufsd mount: -o cache_size=8G: '8G' could mean either; write 8GiB", said)
        said = self.refused("mount", "-o", "prefetch_depth=99", self.src, self.mnt, status=2)
        self.assertIn("-o prefetch_depth=99: 99 is out of range: give 1 to 64", said)
        # A size with its unit is held to the option's bounds alike from both.
        said = self.refused("mount", "--peer-block", "1KiB", self.src, self.mnt, status=2)
        self.assertIn("--peer-block: 1024 bytes is out of range: give 4 KiB to 1 GiB", said)
        said = self.refused("mount", "-o", "peer_block=1KiB", self.src, self.mnt, status=2)
        self.assertIn("-o peer_block=1KiB: 1KiB is out of range: give 4 KiB to 1 GiB", said)
        dry = lib.run_gpufsd("mount", "--cache-size", "1KiB", "--dry-run", self.src, self.mnt)
        self.assertEqual(dry.returncode, 0, dry.stderr)
        archive = os.path.join(self.work, "tree.tar")
        subprocess.run(["tar", "cf", archive, "-C", self.tree, "."], check=True)
        said = self.refused("index", archive)
        self.assertIn(f"cannot index {archive}: a tar needs no `gpufsd index`: its first mount "
                      f"lists it and keeps the index (`gpufsd mount {archive} MNT`)", said)
        said = self.refused("verify", archive)
        self.assertIn(f"cannot verify {archive}: it has no checksums: a tar records none for its "
                      "members (only for its headers); `gpufsd pack` of its mount", said)

    def test_a_server_that_is_down_is_said_at_once_not_at_the_deadline(self):
        url = f"http://127.0.0.1:{free_port()}/pack/"
        mount = subprocess.Popen([lib.GPUFSD, "mount", "--retry-seconds", "5", url, self.mnt],
                                 stderr=subprocess.PIPE, text=True, env=self.env)
        try:
            first = mount.stderr.readline()
            self.assertIsNone(mount.poll(), "the first line came only with the refusal")
            self.assertIn(f"gpufsd: warning: cannot stat {url}", first)
            self.assertIn("retrying for up to 5 s (--retry-seconds)", first)
            rest = mount.stderr.read()
            self.assertEqual(mount.wait(timeout=60), 1)
            self.assertIn("the retry deadline", rest)
        finally:
            mount.kill()
            mount.wait()
        self.assertFalse(lib.is_mounted(self.mnt))


if __name__ == "__main__":
    lib.exit_unless_fuse_usable()
    unittest.main()
