"""The GPU client library through a real mount: bytes read into device memory (or host
memory where there is no GPU, which is said) equal plain reads; the libtorch example
decodes what it read."""
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpufs_testlib as lib  # noqa: E402

BUILD = os.path.join(lib.ROOT, "build")
CHECK = os.environ.get("GPUFS_BATCH_CHECK", os.path.join(BUILD, "gpu", "gpufs-batch-check"))
DECODE = os.environ.get("GPUFS_DECODE_EXAMPLE", "")


class ClientLibrary(lib.MountedSampleCase):
    CLASSES, PER_CLASS, GROUP_SIZE = 4, 10, 8

    def files(self):
        return sorted(os.path.join(d, n) for d, _, names in os.walk(self.mnt) for n in names)

    def test_a_batch_reads_byte_exact_through_host_memory(self):
        files = self.files()
        result = subprocess.run([CHECK, "--host", *files], capture_output=True, text=True)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn(f"{len(files)} of {len(files)} files identical via host", result.stdout)

    def test_small_staging_buffers_split_members_and_still_match(self):
        files = self.files()[::3]
        result = subprocess.run([CHECK, "--host", "--buffer-kib", "4", *files],
                                capture_output=True, text=True)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

    def test_the_device_path_matches_or_says_there_is_no_gpu(self):
        files = self.files()[:20]
        result = subprocess.run([CHECK, *files], capture_output=True, text=True)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        if "via cuda" not in result.stdout:
            # The fallback said why; the device path itself did not run, so say so.
            self.assertIn("no GPU (", result.stdout)
            self.skipTest(result.stdout.splitlines()[0])

    def test_a_file_off_the_mount_is_named(self):
        result = subprocess.run([CHECK, "--host", os.path.join(self.tree, os.listdir(self.tree)[0])],
                                capture_output=True, text=True)
        self.assertEqual(result.returncode, 1)
        self.assertIn("not a file of a gpufs mount", result.stderr)

    def test_libtorch_example_decodes_the_batch(self):
        if not DECODE:
            self.skipTest("built without libtorch (meson -Dtorch)")
        files = [f for f in self.files() if f.endswith(".JPEG")][:5]
        result = subprocess.run([DECODE, *files], capture_output=True, text=True)
        self.assertEqual(result.returncode, 0, result.stderr)
        for path in files:
            self.assertRegex(result.stdout, rf"{path}: {os.path.getsize(path)} bytes on cpu -> "
                                            r"\d+x\d+x3, mean")


if __name__ == "__main__":
    lib.exit_unless_fuse_usable()
    unittest.main(verbosity=2)
