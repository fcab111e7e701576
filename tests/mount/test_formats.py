#!/usr/bin/python3
"""Native packs, mytar indexes and tar archives, through real mounts: bytes, names, none lost."""
import contextlib
import ctypes
import io
import os
import re
import shutil
import signal
import stat
import struct
import subprocess
import tarfile
import tempfile
import time
import unittest

import gpufs_testlib as lib
from gpufs_testlib import files_below


def class_files(tree):
    """What an ImageFolder dataset holds: files inside class folders (not loose ones)."""
    return {k: v for k, v in files_below(tree).items() if k.count("/") >= 1}


def flip_byte(path, offset):
    os.chmod(path, 0o644)
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))


_XXH = ctypes.CDLL("libxxhash.so.0")
_XXH.XXH3_64bits.restype = ctypes.c_uint64
_XXH.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]


def set_root_parent(index, parent):
    """Writes `parent` as the root's parent in a native index and seals it again, as anyone
    could (docs/native_index.md: the folders' section is the fifth {u64 offset, u64 count}
    of the 240-byte header, from byte 56, and a folder's first u32 is its parent; the
    body's XXH3-64 is at byte 24, the header's own, taken with that field zero, at 232)."""
    os.chmod(index, 0o644)
    with open(index, "rb") as f:
        data = bytearray(f.read())
    (dirs_at,) = struct.unpack_from("<Q", data, 56 + 16 * 4)
    struct.pack_into("<I", data, dirs_at, parent)
    body = bytes(data[240:])
    struct.pack_into("<Q", data, 24, _XXH.XXH3_64bits(body, len(body)))
    struct.pack_into("<Q", data, 232, 0)
    struct.pack_into("<Q", data, 232, _XXH.XXH3_64bits(bytes(data[:240]), 240))
    with open(index, "wb") as f:
        f.write(data)


class Work(unittest.TestCase):
    """A scratch folder per test class holding a tree with splits and awkward names."""

    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="gpufs-formats-")
        cls.tree = lib.make_split_tree(os.path.join(cls.work, "tree"), (5, 9), (4, 5))
        with open(os.path.join(cls.tree, "README.txt"), "w") as f:
            f.write("not an image")
        cls.expected = {k: v for k, v in files_below(cls.tree).items() if k != "README.txt"}

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.work)

    def path(self, *parts):
        return os.path.join(self.work, *parts)

    def pack(self, out, *options, source=None):
        result = lib.run_gpufsd("pack", source or self.tree, self.path(out), *options)
        self.assertEqual(result.returncode, 0, result.stderr)
        return self.path(out)


class Pack(Work):
    def test_pack_mount_reads_every_file_byte_exact_with_splits(self):
        out = self.pack("p1", "--group-bytes", "64KiB")
        with lib.Mount(out) as mnt:
            self.assertEqual(sorted(os.listdir(mnt)), ["train", "val"])
            self.assertEqual(files_below(mnt), self.expected)
            self.assertEqual(os.getxattr(mnt, "user.gpufs.format"), b"native")
            st = os.stat(os.path.join(mnt, "train"))
            self.assertEqual(stat.S_IMODE(st.st_mode), 0o555)

    def test_pack_is_reproducible_and_seeded(self):
        a = files_below(self.pack("seed-a", "--seed", "7", "--group-size", "4"))
        b = files_below(self.pack("seed-b", "--seed", "7", "--group-size", "4"))
        c = files_below(self.pack("seed-c", "--seed", "8", "--group-size", "4"))
        self.assertEqual(a, b)
        self.assertNotEqual(a, c)
        self.assertEqual(len([k for k in a if k.startswith("blob-")]), 17)  # 65 files by 4

    def test_align_puts_every_member_on_a_boundary(self):
        out = self.pack("aligned", "--align", "4096", "--order", "class")
        with lib.Mount(out) as mnt:
            for rel in self.expected:
                offset = int(os.getxattr(os.path.join(mnt, rel), "user.gpufs.offset"))
                self.assertEqual(offset % 4096, 0, rel)
            self.assertEqual(files_below(mnt), self.expected)

    def test_a_file_larger_than_the_group_limit_gets_its_own_group(self):
        tree = self.path("big-tree")
        os.makedirs(os.path.join(tree, "cls"))
        blobs = {"big.bin": os.urandom(300_000), "small.bin": b"x" * 10}
        for name, data in blobs.items():
            with open(os.path.join(tree, "cls", name), "wb") as f:
                f.write(data)
        out = self.pack("big", "--group-bytes", "64KiB", source=tree)
        with lib.Mount(out) as mnt:
            self.assertEqual(files_below(mnt), {"cls/" + k: v for k, v in blobs.items()})

    def test_refuses_an_existing_output_a_tree_without_classes_and_unreadable_files(self):
        os.makedirs(self.path("full"))
        open(self.path("full", "x"), "w").close()
        result = lib.run_gpufsd("pack", self.tree, self.path("full"))
        self.assertEqual(result.returncode, 1)
        self.assertIn("exists and is not an empty folder", result.stderr)

        flat = self.path("flat")
        os.makedirs(flat)
        open(os.path.join(flat, "a.jpg"), "w").close()
        result = lib.run_gpufsd("pack", flat, self.path("flat-out"))
        self.assertEqual(result.returncode, 1)
        self.assertIn("no class folders", result.stderr)

        broken = self.path("broken")
        shutil.copytree(os.path.join(self.tree, "train"), broken)
        os.symlink("/nonexistent/target.jpg", os.path.join(broken, "n00000004", "dangling.jpg"))
        result = lib.run_gpufsd("pack", broken, self.path("broken-out"))
        self.assertEqual(result.returncode, 1)
        self.assertIn("dangling.jpg", result.stderr)
        self.assertFalse(os.path.exists(self.path("broken-out")))

    def test_a_full_disk_leaves_nothing_behind(self):
        if os.geteuid() != 0:
            self.skipTest("needs root to mount a small tmpfs")
        small = self.path("small")
        os.makedirs(small)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", small], check=True)
        try:
            result = lib.run_gpufsd("pack", self.tree, os.path.join(small, "out"))
            self.assertEqual(result.returncode, 1)
            self.assertIn("No space left on device", result.stderr)
            self.assertEqual(os.listdir(small), [])
        finally:
            subprocess.run(["umount", small], check=True)

    def test_an_interrupted_pack_leaves_nothing_behind(self):
        tree = self.path("many")
        for c in range(4):
            os.makedirs(os.path.join(tree, f"c{c}"))
            for i in range(1500):
                with open(os.path.join(tree, f"c{c}", f"{i}.jpg"), "wb") as f:
                    f.write(os.urandom(512))
        out = self.path("interrupted")
        # One blob per image, each synced, on one thread: slow enough to interrupt.
        proc = subprocess.Popen([lib.GPUFSD, "pack", tree, out, "--group-size", "1",
                                 "--threads", "1"], stderr=subprocess.PIPE, text=True)
        partial = os.path.join(self.work, f".interrupted.partial-{proc.pid}")
        # Interrupt once the first blob exists: the pack has begun writing, not just scanning.
        while not os.path.isdir(partial) or not os.listdir(partial):
            self.assertIsNone(proc.poll(), "the pack ended before it could be interrupted")
            time.sleep(0.001)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 130, stderr)
        self.assertIn("interrupted", stderr)
        self.assertFalse(os.path.exists(out))
        self.assertFalse(os.path.exists(partial))

    def test_verify_names_a_damaged_file_and_mount_verify_refuses_it(self):
        out = self.pack("damaged", "--group-size", "8")
        self.assertEqual(lib.run_gpufsd("verify", out).returncode, 0)
        victim = "train/a,b/comma,in,name.JPEG"
        with lib.Mount(out) as mnt:
            blob = os.getxattr(os.path.join(mnt, victim), "user.gpufs.blob").decode()
            offset = int(os.getxattr(os.path.join(mnt, victim), "user.gpufs.offset"))
        flip_byte(blob, offset + 100)
        result = lib.run_gpufsd("verify", out)
        self.assertEqual(result.returncode, 1)
        self.assertIn(f"damaged: {victim}: checksum mismatch", result.stdout)
        self.assertEqual(result.stdout.count("damaged: train/"), 1)
        # With and without the cache: the no-cache path checks the bytes it serves too.
        for options in ((), ("--cache-size", "0")):
            with lib.Mount(out, "--verify", *options) as mnt:
                with self.assertRaises(OSError), open(os.path.join(mnt, victim), "rb") as f:
                    f.read()
                for rel, data in self.expected.items():
                    if rel != victim:
                        with open(os.path.join(mnt, rel), "rb") as f:
                            self.assertEqual(f.read(), data, (rel, options))


class MytarIndex(Work):
    def test_index_is_used_until_metadata_changes(self):
        _, src = lib.make_dataset(self.path("m"), classes=4, per_class=6, group_size=4)
        result = lib.run_gpufsd("index", src)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertTrue(os.path.exists(os.path.join(src, "index.gpufs")))
        tree = self.path("m", "tree")
        with lib.Mount(src) as mnt:
            self.assertEqual(os.getxattr(mnt, "user.gpufs.format"), b"mytar+index")
            self.assertEqual(files_below(mnt), class_files(tree))
        self.assertEqual(lib.run_gpufsd("verify", src).returncode, 0)
        os.utime(os.path.join(src, "metadata.txt"), (1, 1))
        with lib.Mount(src) as mnt:
            self.assertEqual(os.getxattr(mnt, "user.gpufs.format"), b"mytar")
            self.assertEqual(files_below(mnt), class_files(tree))


class TarArchives(Work):
    def make_tar(self, name, fmt, entries_root=None, wrapper="dataset"):
        path = self.path(name)
        with tarfile.open(path, "w", format=fmt) as tar:
            tar.add(entries_root or self.tree, arcname=wrapper)
        return path

    def test_gnu_and_pax_archives_with_a_wrapper_folder_and_splits(self):
        for fmt in (tarfile.GNU_FORMAT, tarfile.PAX_FORMAT):
            archive = self.make_tar(f"a{fmt}.tar", fmt)
            with lib.Mount(archive) as mnt:
                self.assertEqual(os.getxattr(mnt, "user.gpufs.format"), b"tar")
                self.assertEqual(files_below(mnt), self.expected)
            self.assertTrue(os.path.exists(archive + ".gpufs-index"))
            before = os.stat(archive + ".gpufs-index").st_mtime_ns
            with lib.Mount(archive) as mnt:  # the saved index is reused, not rebuilt
                self.assertEqual(len(files_below(mnt)), len(self.expected))
            self.assertEqual(os.stat(archive + ".gpufs-index").st_mtime_ns, before)

    def test_two_archives_side_by_side_are_each_named_as_themselves(self):
        archives = [self.make_tar(f"{n}.tar", tarfile.GNU_FORMAT) for n in ("train", "val")]
        with contextlib.ExitStack() as stack:
            mnts = [stack.enter_context(lib.Mount(a)) for a in archives]
            for archive, mnt in zip(archives, mnts):
                self.assertEqual(os.getxattr(mnt, "user.gpufs.source").decode(), archive)
                with open("/proc/self/mountinfo") as f:
                    entry = next(ln.split() for ln in f if ln.split()[4] == mnt)
                self.assertEqual(entry[entry.index("-") + 2], archive)
            result = lib.run_gpufsd("mount", archives[1], mnts[0])
            self.assertIn(f"it is already a mount (gpufs of {archives[0]})", result.stderr)

    def test_a_tar_of_per_class_tars(self):
        outer = self.path("ilsvrc.tar")
        train = os.path.join(self.tree, "train")
        with tarfile.open(outer, "w") as tar:
            for cls in sorted(os.listdir(train)):
                buffer = io.BytesIO()
                with tarfile.open(fileobj=buffer, mode="w") as inner:
                    for name in sorted(os.listdir(os.path.join(train, cls))):
                        inner.add(os.path.join(train, cls, name), arcname=name)
                info = tarfile.TarInfo(cls + ".tar")
                info.size = buffer.tell()
                buffer.seek(0)
                tar.addfile(info, buffer)
        want = {k[len("train/"):]: v for k, v in self.expected.items() if k.startswith("train/")}
        with lib.Mount(outer) as mnt:
            self.assertEqual(files_below(mnt), want)
        out = self.pack("from-tar", source=outer)
        with lib.Mount(out) as mnt:
            self.assertEqual(files_below(mnt), want)

    def test_links_duplicates_and_sparse_entries(self):
        archive = self.path("odd.tar")
        with tarfile.open(archive, "w", format=tarfile.GNU_FORMAT) as tar:
            def add(name, data, kind=tarfile.REGTYPE, link=""):
                info = tarfile.TarInfo(name)
                info.type, info.linkname = kind, link
                info.size = len(data) if kind == tarfile.REGTYPE else 0
                tar.addfile(info, io.BytesIO(data) if info.size else None)
            add("cls/a.jpg", b"first")
            add("cls/b.jpg", b"bee")
            add("cls/a.jpg", b"second wins")
            add("cls/hard.jpg", b"", tarfile.LNKTYPE, "cls/b.jpg")
            add("cls/soft.jpg", b"", tarfile.SYMTYPE, "b.jpg")
        with lib.Mount(archive) as mnt:
            self.assertEqual(files_below(mnt), {"cls/a.jpg": b"second wins", "cls/b.jpg": b"bee",
                                                "cls/hard.jpg": b"bee"})
        sparse = self.path("sparse.tar")
        with tarfile.open(sparse, "w", format=tarfile.GNU_FORMAT) as tar:
            info = tarfile.TarInfo("cls/s.jpg")
            info.type = tarfile.GNUTYPE_SPARSE
            tar.addfile(info)
        mnt = tempfile.mkdtemp()
        result = lib.run_gpufsd("mount", sparse, mnt)
        os.rmdir(mnt)
        self.assertEqual(result.returncode, 1)
        self.assertIn("sparse", result.stderr)
        self.assertIn("cls/s.jpg", result.stderr)

    def test_the_index_goes_to_the_cache_when_the_folder_is_read_only(self):
        if os.geteuid() != 0:
            self.skipTest("needs root to make a read-only mount")
        ro = self.path("ro")
        os.makedirs(ro)
        archive = self.make_tar(os.path.join("ro", "ro.tar"), tarfile.PAX_FORMAT)
        subprocess.run(["mount", "--bind", ro, ro], check=True)
        subprocess.run(["mount", "-o", "remount,bind,ro", ro], check=True)
        cache = self.path("cache")
        os.environ["XDG_CACHE_HOME"] = cache
        try:
            with lib.Mount(archive) as mnt:
                self.assertEqual(files_below(mnt), self.expected)
            self.assertEqual(len(os.listdir(os.path.join(cache, "gpufs"))), 1)
        finally:
            del os.environ["XDG_CACHE_HOME"]
            subprocess.run(["umount", ro], check=True)

    def test_a_truncated_or_damaged_archive_is_refused_naming_the_byte(self):
        archive = self.make_tar("whole.tar", tarfile.GNU_FORMAT)
        with open(archive, "rb") as f:
            data = f.read()
        cut = self.path("cut.tar")
        with open(cut, "wb") as f:
            f.write(data[: len(data) // 2 + 100])
        damaged = self.path("damaged.tar")
        with open(damaged, "wb") as f:
            f.write(data[:512] + bytes([data[512] ^ 0xFF]) + data[513:])
        second_header = 512 + (int(data[124:136].strip(b"\0 ") or b"0", 8) + 511) // 512 * 512
        with open(damaged, "r+b") as f:
            f.seek(second_header + 10)
            f.write(b"\xff")
        for path, expected in ((cut, "ends in the middle|runs past the end"),
                               (damaged, "bad header checksum")):
            mnt = tempfile.mkdtemp()
            result = lib.run_gpufsd("mount", path, mnt)
            os.rmdir(mnt)
            self.assertEqual(result.returncode, 1, path)
            self.assertIn(path, result.stderr)
            self.assertRegex(result.stderr, expected)

    def test_a_tar_gz_is_served_and_an_xz_stream_refused_naming_what_works(self):
        gz = self.path("x.tar.gz")
        with tarfile.open(gz, "w:gz") as tar:
            tar.add(self.tree, arcname="dataset")
        with lib.Mount(gz) as mnt:
            self.assertEqual(os.getxattr(mnt, "user.gpufs.format"), b"tar.gz")
            self.assertEqual(files_below(mnt), self.expected)
        xz = self.path("x.tar.xz")
        with tarfile.open(xz, "w:xz") as tar:
            tar.add(self.tree, arcname="dataset")
        mnt = tempfile.mkdtemp()
        result = lib.run_gpufsd("mount", xz, mnt)
        os.rmdir(mnt)
        self.assertEqual(result.returncode, 1)
        self.assertIn(xz, result.stderr)
        self.assertIn("an xz stream, which cannot be read at random; recompress", result.stderr)


def tar_header(name, size_field, typeflag=b"0"):
    """A ustar header block with a raw 12-byte size field and a correct checksum."""
    block = bytearray(512)
    block[0:len(name)] = name
    block[100:108] = b"0000644\0"
    block[124:136] = size_field
    block[136:148] = b"00000000000\0"
    block[156:157] = typeflag
    block[257:265] = b"ustar\x0000"
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block)
    return bytes(block)


def pax_archive(records):
    """A pax header carrying `records` verbatim, then one small file."""
    return (tar_header(b"PaxHeader", b"%011o\0" % len(records), b"x")
            + records.ljust((len(records) + 511) // 512 * 512, b"\0")
            + tar_header(b"c/a.jpg", b"%011o\0" % 3) + b"abc".ljust(512, b"\0") + bytes(1024))


class Hostile(Work):
    """Datasets are untrusted: each of these is refused, naming what is wrong, quickly."""

    def refused(self, source, pattern):
        mnt = tempfile.mkdtemp()
        try:
            result = lib.run_gpufsd("mount", source, mnt, timeout=30)
        finally:
            os.rmdir(mnt)
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertRegex(result.stderr, pattern)
        return result.stderr

    def write(self, name, data):
        with open(self.path(name), "wb") as f:
            f.write(data)
        return self.path(name)

    def test_tar_numbers_that_wrap_or_are_not_numbers(self):
        file = b"abc".ljust(512, b"\0") + bytes(1024)
        cases = {
            "wrap.tar": b"\x80" + b"\xff" * 11,       # base-256 that wraps the walk
            "negative.tar": b"\xff" * 12,             # negative base-256
            "garbage.tar": b"12x4567\0    ",           # not octal
        }
        for name, field in cases.items():
            archive = self.write(name, tar_header(b"c/a.jpg", field) + file)
            message = self.refused(archive, "size field is not a valid number|runs past the end")
            self.assertIn(archive, message)
            self.assertRegex(message, "at byte 0")

    def test_pax_records_that_lie_about_their_length_or_size(self):
        for name, records in {
            "zero.tar": b"0 path=x\n",
            "long.tar": b"999 path=x\n",
            "word.tar": b"ab path=x\n",
            "size.tar": b"32 size=99999999999999999999999\n",
            "neg.tar": b"13 size=-100\n",
        }.items():
            self.refused(self.write(name, pax_archive(records)), "at byte 0: .*pax")

    def test_a_blob_that_links_out_of_the_dataset_is_refused(self):
        _, src = lib.make_dataset(self.path("links"), classes=2, per_class=4, group_size=4)
        blob = os.path.join(src, "filegroup-0.mytar")
        outside = self.path("outside.bin")
        shutil.copy(blob, outside)
        os.remove(blob)
        os.symlink(outside, blob)
        self.refused(src, "filegroup-0.mytar .*leads outside the dataset folder")
        # A link that stays inside the folder is fine.
        os.remove(blob)
        os.makedirs(os.path.join(src, "store"))
        shutil.move(outside, os.path.join(src, "store", "real.bin"))
        os.symlink("store/real.bin", blob)
        with lib.Mount(src) as mnt:
            self.assertEqual(files_below(mnt), class_files(self.path("links", "tree")))

    def test_an_index_whose_root_has_another_parent_is_refused_by_mount_and_verify(self):
        # A listing of the root stats its '..': a parent beyond the folders and files once
        # had the daemon read past the mapped index, and verify accept it.
        for parent in (0x7FFFFFFF, 1):
            out = self.pack(f"root-parent-{parent}", "--group-size", "8")
            index = os.path.join(out, "index.gpufs")
            set_root_parent(index, parent)
            problem = f"cannot use index {index}: the root names folder {parent} as its parent"
            result = lib.run_gpufsd("verify", out)
            self.assertEqual(result.returncode, 1, result.stderr)
            self.assertIn(problem, result.stderr)
            self.refused(out, re.escape(problem))

    def test_an_index_that_is_a_folder_is_named(self):
        folder = self.path("odd-pack")
        os.makedirs(os.path.join(folder, "index.gpufs"))
        self.refused(folder, "index.gpufs is not a regular file")


if __name__ == "__main__":
    lib.exit_unless_fuse_usable()
    unittest.main(verbosity=2)
