#!/usr/bin/python3
"""Zip archives and gzip-compressed tars served in place, through real mounts of the real
gpufsd: each archive is made here, at test time, by the tools people use (Info-ZIP's zip,
7-Zip, bsdtar, Python's zipfile and tarfile, GNU tar with gzip, pigz, bgzip), and every
regular file the mount shows is compared (path, size, SHA-256) with what `unzip` or
`tar -x` leaves of the same archive.

Then what a saved index brings (a second mount lists nothing; its decode plan beside it),
the same archives by URL from nginx and a Ceph S3 store on 127.0.0.1, and the faults:
archives cut short, a local header that disagrees with the central directory, a deflated
member's data damaged (EIO for its files, the rest read right, the daemon alive), an
archive changed after its first mount, streams gpufs cannot read at random (zstd, xz,
bzip2, 7-Zip) refused saying what works, and member names that would leave the dataset.
A case whose tool is not installed is skipped, saying which.
"""
import errno
import glob
import hashlib
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
import time
import unittest
import zipfile

import gpufs_testlib as lib
from gpufs_testlib import digest_files

sys.path.insert(0, lib.ROOT)
from tests.servers import ceph_s3, nginx  # noqa: E402

JPEG_START = b"\xff\xd8\xff\xe0"
WORDS = [w.encode() for w in (
    "the quick brown fox jumps over lazy dog image label class train val batch epoch "
    "tensor loader worker shard group cache page block stream member archive index plan "
    "zebra tiger goldfish tench bird frog truck ship horse deer cat car airplane").split()]


def tool(name):
    """The program's path, or None."""
    return shutil.which(name)


def text_bytes(rng, size):
    """Compressible bytes: words and line ends."""
    out = bytearray()
    while len(out) < size:
        out += b" ".join(rng.choice(WORDS) for _ in range(12)) + b"\n"
    return bytes(out[:size])


def make_tree(root, classes, per_class, seed, max_kib):
    """An ImageFolder tree: per class, mostly random bytes behind a JPEG marker (which
    deflate cannot shrink), every sixth file compressible text, one empty file, one name
    with a space, and a symbolic link; sizes from 1 KiB to max_kib KiB."""
    rng = random.Random(seed)
    for c in range(classes):
        cls = f"n{c:08d}"
        folder = os.path.join(root, cls)
        os.makedirs(folder)
        for i in range(per_class):
            name = f"{cls}_{i}.JPEG" if i != 3 else f"{cls}_{i} copy-1.JPEG"
            size = rng.randint(1024, max_kib * 1024)
            if i == 7:
                data = b""
            elif i % 6 == 0:
                data = text_bytes(rng, size)
            else:
                data = JPEG_START + rng.randbytes(size - len(JPEG_START))
            with open(os.path.join(folder, name), "wb") as f:
                f.write(data)
        os.symlink(f"{cls}_1.JPEG", os.path.join(folder, "link.JPEG"))
    return root


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def write_bytes(path, data):
    with open(path, "wb") as f:
        f.write(data)
    return path


def flip(path, offset, count=16):
    """Inverts `count` bytes of the file at `offset`, its size kept."""
    with open(path, "r+b") as f:
        f.seek(offset)
        data = f.read(count)
        f.seek(offset)
        f.write(bytes(b ^ 0xFF for b in data))


def zip_data_offset(path, info):
    """Where a zip member's stored data start: past its local header."""
    with open(path, "rb") as f:
        f.seek(info.header_offset)
        head = f.read(30)
    name_size, extra_size = struct.unpack("<HH", head[26:30])
    return info.header_offset + 30 + name_size + extra_size


def top_names(tree):
    return sorted(os.listdir(tree))


class Unseekable:
    """A file that can only be written on: zipfile then writes data descriptors."""

    def __init__(self, f):
        self.f = f

    def write(self, data):
        return self.f.write(data)

    def flush(self):
        self.f.flush()


class ArchiveCase(unittest.TestCase):
    """Trees made once per class (cls.flat: 3 classes of 40 files up to 300 KiB, ~18 MB;
    cls.split: train/ and val/ of smaller ones); each test a folder of its own (self.dir)
    and an environment whose cache and state folders are in it (self.env)."""

    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="gpufs-archives-")
        cls.flat = make_tree(os.path.join(cls.work, "flat"), 3, 40, 1, 300)
        cls.split = os.path.join(cls.work, "split")
        make_tree(os.path.join(cls.split, "train"), 3, 8, 2, 64)
        make_tree(os.path.join(cls.split, "val"), 3, 3, 3, 64)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.work)

    def setUp(self):
        self.dir = tempfile.mkdtemp(dir=self.work)
        self.env = {**os.environ, "XDG_CACHE_HOME": os.path.join(self.dir, "xdg-cache"),
                    "XDG_STATE_HOME": os.path.join(self.dir, "xdg-state")}

    def path(self, name):
        return os.path.join(self.dir, name)

    def need(self, program, package):
        path = tool(program)
        if not path:
            self.skipTest(f"{program} is not installed (apt-get install {package})")
        return path

    # Writers.

    def zip_cli(self, name, tree, *options, pipe=False):
        """Info-ZIP's zip -r of tree's top folders; through a pipe (data descriptors) if
        asked."""
        self.need("zip", "zip")
        archive = self.path(name)
        if pipe:
            with open(archive, "wb") as out:
                zip_proc = subprocess.Popen(["zip", "-q", "-r", *options, "-", *top_names(tree)],
                                            cwd=tree, stdout=subprocess.PIPE)
                subprocess.run(["cat"], stdin=zip_proc.stdout, stdout=out, check=True)
                zip_proc.stdout.close()
                self.assertEqual(zip_proc.wait(), 0)
        else:
            subprocess.run(["zip", "-q", "-r", *options, archive, *top_names(tree)], cwd=tree,
                           check=True)
        return archive

    def zipfile_of(self, name, tree, compression, force_zip64=False, unseekable=False):
        """Python's zipfile, every file of tree in path order."""
        archive = self.path(name)
        with open(archive, "wb") as f:
            target = Unseekable(f) if unseekable else f
            with zipfile.ZipFile(target, "w", compression=compression) as zf:
                for folder, dirs, names in os.walk(tree):
                    dirs.sort()
                    for n in sorted(names):
                        full = os.path.join(folder, n)
                        arcname = os.path.relpath(full, tree)
                        if force_zip64:
                            with zf.open(arcname, "w", force_zip64=True) as w:
                                w.write(read_bytes(full))
                        else:
                            zf.write(full, arcname)
        return archive

    def plain_tar(self, tree):
        archive = self.path("plain.tar")
        subprocess.run(["tar", "-cf", archive, "-C", tree, *top_names(tree)], check=True)
        return archive

    def compress(self, name, tar, *command):
        """`command < tar > name`: a stream compressor's output, as from a pipe."""
        archive = self.path(name)
        with open(tar, "rb") as src, open(archive, "wb") as out:
            subprocess.run(command, stdin=src, stdout=out, check=True)
        return archive

    def two_gzip_members(self, name, tree):
        """A tar cut in two at an odd byte, each half gzipped, the two concatenated."""
        data = read_bytes(self.plain_tar(tree))
        cut = len(data) // 2 + 77
        out = b""
        for part in (data[:cut], data[cut:]):
            out += subprocess.run(["gzip", "-c"], input=part, capture_output=True,
                                  check=True).stdout
        return write_bytes(self.path(name), out)

    # Checks.

    def extracted(self, archive):
        """What unzip (a zip) or GNU tar (anything else) leaves of archive."""
        dest = tempfile.mkdtemp(dir=self.dir)
        if zipfile.is_zipfile(archive):
            self.need("unzip", "unzip")
            result = subprocess.run(["unzip", "-qq", "-d", dest, archive], capture_output=True,
                                    text=True)
        else:
            result = subprocess.run(["tar", "-xf", archive, "-C", dest], capture_output=True,
                                    text=True)
        self.assertEqual(result.returncode, 0, f"{archive}: {result.stderr}")
        files = digest_files(dest)
        shutil.rmtree(dest)
        return files

    def assert_served_as_extracted(self, archive, fmt, *options, wrapper="", env=None,
                                   want=None):
        """Mounts archive (a path or URL) and checks that it serves what extraction leaves;
        the daemon's log."""
        if want is None:
            files = self.extracted(archive)
            want = {k[len(wrapper):]: v for k, v in files.items() if k.startswith(wrapper)}
        self.assertTrue(want, f"{archive}: extraction left no files")
        mount = lib.Mount(archive, *options, env=env or self.env)
        with mount as mnt:
            self.assertEqual(os.getxattr(mnt, "user.gpufs.format").decode(), fmt, archive)
            self.assertEqual(digest_files(mnt), want, archive)
            log = mount.stderr()
        return log

    def refused(self, archive, *needles):
        """Mounts archive, which must be refused (exit 1) with a message holding each of
        needles, and nothing left mounted; the message."""
        mnt = tempfile.mkdtemp(dir=self.dir)
        result = lib.run_gpufsd("mount", archive, mnt, timeout=120, env=self.env)
        mounted = lib.is_mounted(mnt)
        if mounted:
            lib.run_gpufsd("unmount", mnt)
        os.rmdir(mnt)
        self.assertFalse(mounted, f"{archive} was mounted: {result.stderr}")
        self.assertEqual(result.returncode, 1, f"{archive}: {result.stderr}")
        for needle in needles:
            self.assertIn(needle, result.stderr)
        return result.stderr


class Zips(ArchiveCase):
    def test_zip_stored(self):
        archive = self.zip_cli("stored.zip", self.flat, "-0")
        self.assertEqual({i.compress_type for i in zipfile.ZipFile(archive).infolist()},
                         {zipfile.ZIP_STORED})
        self.assert_served_as_extracted(archive, "zip")

    def test_a_stored_zip_whose_data_end_in_its_last_4_kib(self):
        """A small central directory: the last member's data end within the archive's last
        aligned block (4 KiB), which a read of whole blocks reaches past."""
        archive = self.path("small-stored.zip")
        rng = random.Random(11)
        with zipfile.ZipFile(archive, "w") as zf:
            for c in range(3):
                for i in range(2):
                    zf.writestr(f"c{c}/{i}.JPEG",
                                JPEG_START + rng.randbytes(rng.randint(5000, 50000)))
        data = read_bytes(archive)
        end = data.rfind(b"PK\x05\x06")
        central_size = struct.unpack("<I", data[end + 12:end + 16])[0]
        self.assertLess(len(data) - end + central_size, 4096)
        self.assert_served_as_extracted(archive, "zip")

    def test_zip_deflated_mixed_with_stored(self):
        """zip deflates what shrinks (text) and stores what does not (random bytes)."""
        archive = self.zip_cli("mixed.zip", self.flat)
        methods = {i.compress_type for i in zipfile.ZipFile(archive).infolist()
                   if not i.is_dir() and i.file_size}
        self.assertEqual(methods, {zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED})
        for options in ((), ("--cache-size", "0")):
            with self.subTest(options=options):
                self.assert_served_as_extracted(archive, "zip", *options)

    def test_only_members_served_as_they_lie_say_where_in_the_archive(self):
        """user.gpufs.blob and user.gpufs.offset let a client (the GPU library) read a
        member from the archive itself: a stored zip's members give them, and the archive
        holds their bytes there; a deflated member (and a stored one amid deflated ones,
        copied out with them), or any of a .tar.gz, has no such place."""
        stored = self.zip_cli("stored.zip", self.flat, "-0")
        with lib.Mount(stored, env=self.env) as mnt:
            for info in zipfile.ZipFile(stored).infolist():
                if info.is_dir():
                    continue
                path = os.path.join(mnt, info.filename)
                offset = int(os.getxattr(path, "user.gpufs.offset"))
                with open(stored, "rb") as f:
                    f.seek(offset)
                    self.assertEqual(f.read(info.file_size), read_bytes(path), info.filename)
        mixed = self.zip_cli("mixed.zip", self.flat)
        gz = self.compress("flat.tar.gz", self.plain_tar(self.flat), "gzip", "-c")
        for archive in (mixed, gz):
            with lib.Mount(archive, env=self.env) as mnt:
                for rel in digest_files(mnt):
                    path = os.path.join(mnt, rel)
                    try:
                        os.getxattr(path, "user.gpufs.offset")
                    except OSError as e:
                        self.assertEqual(e.errno, errno.ENODATA, (archive, rel))
                        continue
                    info = zipfile.ZipFile(mixed).getinfo(rel)  # only a zip's may lie so
                    self.assertEqual(info.compress_type, zipfile.ZIP_STORED, rel)
                if archive == gz:  # nothing of a .tar.gz lies as stored
                    with self.assertRaises(OSError):
                        os.getxattr(os.path.join(mnt, min(digest_files(mnt))), "user.gpufs.blob")

    def test_zip_forced_zip64(self):
        archive = self.zip_cli("fz.zip", self.flat, "-fz")
        self.assertIn(b"PK\x06\x06", read_bytes(archive))  # the zip64 end record
        self.assert_served_as_extracted(archive, "zip")

    def test_zip_written_to_a_pipe_has_data_descriptors(self):
        archive = self.zip_cli("pipe.zip", self.split, pipe=True)
        self.assertTrue(all(i.flag_bits & 8 for i in zipfile.ZipFile(archive).infolist()
                            if not i.is_dir()))
        self.assert_served_as_extracted(archive, "zip")

    def test_zip_of_splits_and_of_a_wrapper_folder(self):
        self.assert_served_as_extracted(self.zip_cli("split.zip", self.split), "zip")
        archive = self.path("wrapped.zip")
        subprocess.run(["zip", "-q", "-r", archive, "split"], cwd=self.work, check=True)
        log = self.assert_served_as_extracted(archive, "zip", wrapper="split/")
        self.assertIn("all files of the archive lie in the folder split/", log)

    def test_zipfile_stored_and_deflated(self):
        for compression in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            with self.subTest(compression=compression):
                archive = self.zipfile_of(f"py-{compression}.zip", self.flat, compression)
                self.assert_served_as_extracted(archive, "zip")

    def test_zipfile_force_zip64_local_headers(self):
        archive = self.zipfile_of("py-zip64.zip", self.flat, zipfile.ZIP_DEFLATED,
                                  force_zip64=True)
        with zipfile.ZipFile(archive) as zf:
            info = next(i for i in zf.infolist() if i.file_size)
        with open(archive, "rb") as f:
            f.seek(zip_data_offset(archive, info) - 20)
            self.assertEqual(f.read(4), b"\x01\x00\x10\x00")  # a zip64 field, both sizes
        self.assert_served_as_extracted(archive, "zip")

    def test_zipfile_unseekable_writes_data_descriptors(self):
        for compression in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            with self.subTest(compression=compression):
                archive = self.zipfile_of(f"py-stream-{compression}.zip", self.split,
                                          compression, unseekable=True)
                self.assertTrue(all(i.flag_bits & 8
                                    for i in zipfile.ZipFile(archive).infolist()))
                self.assert_served_as_extracted(archive, "zip")

    def test_7z_zip(self):
        program = self.need("7z", "p7zip-full")
        for method in ("Copy", "Deflate"):
            with self.subTest(method=method):
                archive = self.path(f"7z-{method}.zip")
                subprocess.run([program, "a", "-tzip", f"-mm={method}", "-bd", archive,
                                *top_names(self.flat)], cwd=self.flat, check=True,
                               capture_output=True)
                self.assert_served_as_extracted(archive, "zip")

    def test_bsdtar_zip(self):
        program = self.need("bsdtar", "libarchive-tools")
        for options in ((), ("--options", "zip:compression=store")):
            with self.subTest(options=options):
                archive = self.path(f"bsdtar-{len(options)}.zip")
                subprocess.run([program, "--format", "zip", *options, "-cf", archive, "-C",
                                self.flat, *top_names(self.flat)], check=True)
                self.assert_served_as_extracted(archive, "zip")

    def test_more_members_than_a_zip_end_record_counts(self):
        """65,536 members and more need the zip64 end record (ImageNet's train set has
        1.28 million)."""
        archive = self.path("many.zip")
        count = 66000
        want = {}
        with zipfile.ZipFile(archive, "w") as zf:
            for k in range(count):
                name, data = f"c{k % 3}/{k:05d}.JPEG", b"%d" % k
                zf.writestr(name, data)
                want[name] = (len(data), hashlib.sha256(data).hexdigest())
        self.assertIn(b"PK\x06\x06", read_bytes(archive))
        self.assertEqual(self.extracted(archive), want)
        self.assert_served_as_extracted(archive, "zip", want=want)


class GzipTars(ArchiveCase):
    def test_tar_czf(self):
        archive = self.path("czf.tar.gz")
        subprocess.run(["tar", "-czf", archive, "-C", self.flat, *top_names(self.flat)],
                       check=True)
        self.assert_served_as_extracted(archive, "tar.gz")

    def test_gpufs_stat_watch_shows_the_decoding_and_a_tar_shows_none(self):
        archive = self.path("watched.tar.gz")
        subprocess.run(["tar", "-czf", archive, "-C", self.flat, *top_names(self.flat)],
                       check=True)
        with lib.Mount(archive, env=self.env) as mnt:
            self.assertEqual(digest_files(mnt), self.extracted(archive))
            io = json.loads(os.getxattr(mnt, "user.gpufs.stats"))["io"]
            frame = lib.watch(mnt, json_lines=True)[0]
            self.assertGreaterEqual(io["decoded_groups"], 1)
            self.assertEqual(frame["decoded_groups"], io["decoded_groups"])
            self.assertEqual(frame["decode_errors"], 0)
            self.assertGreaterEqual(frame["decode_cores"], 0)
        with lib.Mount(self.plain_tar(self.flat), env=self.env) as mnt:
            self.assertNotIn("decoded_groups", lib.watch(mnt, json_lines=True)[0])

    def test_gzip_with_a_file_name_in_its_header(self):
        tar = self.plain_tar(self.flat)
        subprocess.run(["gzip", "-k", tar], check=True)
        self.assert_served_as_extracted(tar + ".gz", "tar.gz")

    def test_pigz(self):
        self.need("pigz", "pigz")
        tar = self.plain_tar(self.flat)
        self.assert_served_as_extracted(self.compress("pigz.tgz", tar, "pigz", "-c"), "tar.gz")

    def test_pigz_independent_blocks(self):
        self.need("pigz", "pigz")
        tar = self.plain_tar(self.flat)
        archive = self.compress("pigz-i.tar.gz", tar, "pigz", "-i", "-c")
        for options in ((), ("--cache-size", "0")):
            with self.subTest(options=options):
                self.assert_served_as_extracted(archive, "tar.gz", *options)

    def test_bgzip(self):
        self.need("bgzip", "tabix")
        tar = self.plain_tar(self.flat)
        archive = self.compress("bgzip.tar.gz", tar, "bgzip", "-c")
        self.assertGreater(read_bytes(archive).count(b"\x1f\x8b\x08\x04"), 100)  # BGZF blocks
        self.assert_served_as_extracted(archive, "tar.gz")

    def test_two_gzip_members_concatenated(self):
        self.assert_served_as_extracted(self.two_gzip_members("two.tar.gz", self.flat),
                                        "tar.gz")

    def test_tarfile_w_gz(self):
        for fmt in (tarfile.GNU_FORMAT, tarfile.PAX_FORMAT):
            with self.subTest(fmt=fmt):
                archive = self.path(f"py-{fmt}.tar.gz")
                with tarfile.open(archive, "w:gz", format=fmt) as tar:
                    for name in top_names(self.flat):
                        tar.add(os.path.join(self.flat, name), arcname=name)
                self.assert_served_as_extracted(archive, "tar.gz")

    def test_bsdtar_czf(self):
        program = self.need("bsdtar", "libarchive-tools")
        archive = self.path("bsdtar.tgz")
        subprocess.run([program, "-czf", archive, "-C", self.flat, *top_names(self.flat)],
                       check=True)
        self.assert_served_as_extracted(archive, "tar.gz")

    def test_splits_in_a_wrapper_folder(self):
        archive = self.path("wrapped.tar.gz")
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(self.split, arcname="dataset")
        log = self.assert_served_as_extracted(archive, "tar.gz", wrapper="dataset/")
        self.assertIn("all files of the archive lie in the folder dataset/", log)


class SavedIndex(ArchiveCase):
    """The first mount lists the archive and keeps its index and decode plan beside it."""

    def archives(self):
        self.need("pigz", "pigz")
        return [(self.zip_cli("mixed.zip", self.flat), "zip"),
                (self.compress("pigz-i.tgz", self.plain_tar(self.flat), "pigz", "-i", "-c"),
                 "tar.gz")]

    def first_mount(self, archive, fmt):
        self.assert_served_as_extracted(archive, fmt)
        index = archive + ".gpufs-index"
        plan = index + ".plan"
        self.assertTrue(os.path.isfile(index), index)
        self.assertTrue(os.path.isfile(plan), plan)
        return index, plan

    def test_a_second_mount_uses_the_saved_index_and_plan(self):
        for archive, fmt in self.archives():
            with self.subTest(archive=os.path.basename(archive)):
                index, plan = self.first_mount(archive, fmt)
                before = [os.stat(p).st_mtime_ns for p in (index, plan)]
                self.assert_served_as_extracted(archive, fmt)
                self.assertEqual([os.stat(p).st_mtime_ns for p in (index, plan)], before,
                                 "the archive was listed again")

    def test_a_missing_or_damaged_plan_makes_the_next_mount_list_again(self):
        for archive, fmt in self.archives():
            for damage in ("missing", "damaged"):
                with self.subTest(archive=os.path.basename(archive), damage=damage):
                    index, plan = self.first_mount(archive, fmt)
                    os.utime(index, ns=(10**9, 10**9))
                    if damage == "missing":
                        os.remove(plan)
                    else:
                        flip(plan, os.path.getsize(plan) // 2, 4)
                    self.assert_served_as_extracted(archive, fmt)
                    self.assertNotEqual(os.stat(index).st_mtime_ns, 10**9,
                                        "the index was not made again")
                    self.assertTrue(os.path.isfile(plan))


class Packs(ArchiveCase):
    """`gpufsd pack` of an archive says to pack its mount; a pack of the mount serves what
    extraction leaves, and verifies."""

    def test_an_archive_is_packed_from_its_mount(self):
        self.need("pigz", "pigz")
        for archive, kind in ((self.zip_cli("mixed.zip", self.flat), "a zip"),
                              (self.compress("t.tgz", self.plain_tar(self.flat), "pigz", "-c"),
                               "a gzip-compressed tar")):
            with self.subTest(archive=os.path.basename(archive)):
                out = archive + ".gpufs"
                result = lib.run_gpufsd("pack", archive, out, env=self.env)
                self.assertEqual(result.returncode, 1, result.stderr)
                self.assertIn(f"cannot pack {archive}: {kind} is packed from what its mount "
                              f"shows: `gpufsd mount {archive} MNT`, then `gpufsd pack MNT OUT`",
                              result.stderr)
                self.assertFalse(os.path.exists(out), "a refused pack left its output")
                with lib.Mount(archive, env=self.env) as mnt:
                    result = lib.run_gpufsd("pack", mnt, out, env=self.env)
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertEqual(lib.run_gpufsd("verify", out, env=self.env).returncode, 0)
                self.assert_served_as_extracted(out, "native", want=self.extracted(archive))


class Remote(ArchiveCase):
    """The same archives by URL; their indexes and plans in the private cache."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.served = os.path.join(cls.work, "www")
        os.makedirs(cls.served)
        if tool("zip"):
            subprocess.run(["zip", "-q", "-r", os.path.join(cls.served, "mixed.zip"),
                            *top_names(cls.flat)], cwd=cls.flat, check=True)
        subprocess.run(["tar", "-czf", os.path.join(cls.served, "train.tar.gz"), "-C",
                        cls.flat, *top_names(cls.flat)], check=True)

    def served_archives(self):
        names = [("train.tar.gz", "tar.gz")]
        if tool("zip"):
            names.insert(0, ("mixed.zip", "zip"))
        else:
            print("note: zip is not installed (apt-get install zip); no zip by URL")
        return names

    def check_by_url(self, url_of, env, kind):
        for name, fmt in self.served_archives():
            want = self.extracted(os.path.join(self.served, name))
            url = url_of(name)
            for options in (("--cache-size", "64MiB"), ("--cache-size", "0")):
                with self.subTest(url=url, options=options):
                    with lib.Mount(url, *options, env=env) as mnt:
                        self.assertEqual(os.getxattr(mnt, "user.gpufs.format").decode(), fmt)
                        self.assertEqual(os.getxattr(mnt, "user.gpufs.source").decode(), url)
                        self.assertEqual(digest_files(mnt), want, (url, options))
                        io = lib.stats_of(mnt)["io"]
                    self.assertEqual(io["kind"], kind)
                    self.assertEqual(io["errors"], 0)
            with self.subTest(url=url, saved_index=True):
                cache = env["XDG_CACHE_HOME"]
                index = glob.glob(os.path.join(cache, "**", f"{name}-*.gpufs-index"),
                                  recursive=True)
                self.assertEqual(len(index), 1, f"no single index of {name} in {cache}")
                plan = index[0] + ".plan"
                self.assertTrue(os.path.isfile(plan), plan)
                before = [os.stat(p).st_mtime_ns for p in (index[0], plan)]
                with lib.Mount(url, env=env) as mnt:
                    self.assertEqual(digest_files(mnt), want, url)
                self.assertEqual([os.stat(p).st_mtime_ns for p in (index[0], plan)], before,
                                 "the archive was listed again")


class Http(Remote):
    @classmethod
    def setUpClass(cls):
        reason = nginx.NginxOrigin.skip_reason()
        if reason:
            raise unittest.SkipTest(reason)
        super().setUpClass()
        cls.origin = nginx.NginxOrigin(cls.served).__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.origin.__exit__(None, None, None)
        super().tearDownClass()

    def test_a_zip_and_a_tar_gz_by_url_read_byte_exact(self):
        self.check_by_url(lambda name: f"{self.origin.url}/{name}", self.env, "http")


class S3(Remote):
    @classmethod
    def setUpClass(cls):
        reason = ceph_s3.skip_reason()
        if reason:
            raise unittest.SkipTest(reason)
        super().setUpClass()
        cls.s3 = ceph_s3.shared()
        cls.bucket = ceph_s3.unique_bucket("archives")
        cls.s3.make_bucket(cls.bucket)
        for name in os.listdir(cls.served):
            cls.s3.put_file(cls.bucket, f"data/{name}", os.path.join(cls.served, name))

    def test_a_zip_and_a_tar_gz_in_s3_read_byte_exact(self):
        env = {**self.env, **self.s3.env()}
        self.check_by_url(lambda name: f"s3://{self.bucket}/data/{name}", env, "s3")


class Faults(ArchiveCase):
    def small_zip(self, name, compression=zipfile.ZIP_STORED):
        return self.zipfile_of(name, self.split, compression)

    def test_a_zip_cut_short_is_refused_naming_it(self):
        for keep in ("half", "all but 10 bytes"):
            with self.subTest(keep=keep):
                archive = self.small_zip(f"cut-{len(keep)}.zip")
                size = os.path.getsize(archive)
                os.truncate(archive, size // 2 if keep == "half" else size - 10)
                self.refused(archive, archive)

    def test_a_local_header_naming_another_file_is_refused_naming_the_member(self):
        archive = self.small_zip("renamed.zip")
        with zipfile.ZipFile(archive) as zf:
            member = zf.infolist()[1].filename
        data = bytearray(read_bytes(archive))
        central = struct.unpack("<I", data[data.rfind(b"PK\x05\x06") + 16:][:4])[0]
        at = data.find(member.encode(), data.find(b"PK\x03\x04"))
        self.assertLess(at, central)  # a local header's name, not the central directory's
        letter = at + member.rindex("/") + 1
        data[letter] = ord("x") if data[letter] != ord("x") else ord("y")
        write_bytes(archive, bytes(data))
        self.refused(archive, archive, member)

    def damaged_zip(self):
        """A zip of stored files (one group) and deflated text files (another), one of
        whose compressed data is damaged in the middle; (archive, files, the member)."""
        rng = random.Random(5)
        files = {f"stored/s{i}.JPEG": JPEG_START + rng.randbytes(60000) for i in range(8)}
        files.update({f"text/t{i}.JPEG": text_bytes(rng, 200000) for i in range(4)})
        archive = self.path("damaged.zip")
        with zipfile.ZipFile(archive, "w") as zf:
            for name, data in files.items():
                zf.writestr(name, data, compress_type=zipfile.ZIP_STORED if
                            name.startswith("stored/") else zipfile.ZIP_DEFLATED)
        victim = "text/t1.JPEG"
        with zipfile.ZipFile(archive) as zf:
            info = zf.getinfo(victim)
        self.assertEqual(info.compress_type, zipfile.ZIP_DEFLATED)
        self.assertGreater(info.compress_size, 1000)
        flip(archive, zip_data_offset(archive, info) + info.compress_size // 2)
        return archive, files, victim

    def test_a_damaged_deflated_member_reads_eio_and_the_rest_reads_right(self):
        archive, files, victim = self.damaged_zip()
        mount = lib.Mount(archive, env=self.env)
        with mount as mnt:
            def group(rel):
                return os.getxattr(os.path.join(mnt, rel), "user.gpufs.group")

            for attempt in range(2):  # a second read fails alike: no other bytes
                with self.assertRaises(OSError) as caught:
                    read_bytes(os.path.join(mnt, victim))
                self.assertEqual(caught.exception.errno, errno.EIO, attempt)
            others = [rel for rel in files if group(rel) != group(victim)]
            self.assertGreaterEqual(len(others), 8)
            later = others.pop()  # read once the failures are behind
            for rel in sorted(set(files) - {later}):
                try:
                    data = read_bytes(os.path.join(mnt, rel))
                except OSError as e:
                    self.assertNotIn(rel, others, f"{rel}: {e}")
                    self.assertEqual(e.errno, errno.EIO, rel)
                    continue
                self.assertEqual(data, files[rel], rel)  # exactly the original, or EIO
            self.assertIsNone(mount.proc.poll(), "the daemon died")
            self.assertEqual(read_bytes(os.path.join(mnt, later)), files[later])
            lib.stats_of(mnt)  # the daemon still answers
            deadline = time.monotonic() + 10
            while victim not in mount.stderr() and time.monotonic() < deadline:
                time.sleep(0.05)
            self.assertIn(victim, mount.stderr())
            with self.subTest(program="gpufs-stat"):
                if not os.path.exists(lib.GPUFS_STAT):
                    self.skipTest(f"no gpufs-stat at {lib.GPUFS_STAT} (set GPUFS_STAT)")
                stat = subprocess.run([lib.GPUFS_STAT, mnt], capture_output=True, text=True,
                                      timeout=60)
                self.assertEqual(stat.returncode, 0, stat.stderr)
                self.assertIn(victim, stat.stdout + stat.stderr)

    def test_a_tar_gz_cut_short_is_refused_naming_it(self):
        for cut in ("half", "its trailer"):
            with self.subTest(cut=cut):
                archive = self.path(f"cut-{len(cut)}.tar.gz")
                with tarfile.open(archive, "w:gz") as tar:
                    tar.add(self.split, arcname=".")
                size = os.path.getsize(archive)
                os.truncate(archive, size // 2 if cut == "half" else size - 8)
                self.refused(archive, archive)

    def test_a_tar_gz_changed_after_its_first_mount_is_never_served_stale(self):
        archive = self.path("changed.tar.gz")
        subprocess.run(["tar", "-czf", archive, "-C", self.flat, *top_names(self.flat)],
                       check=True)
        want = {rel: read_bytes(os.path.join(self.flat, rel)) for rel in digest_files(self.flat)}
        with lib.Mount(archive, env=self.env) as mnt:
            self.assertEqual(len(digest_files(mnt)), len(want))
        size, mtime = os.path.getsize(archive), os.stat(archive).st_mtime_ns
        flip(archive, size // 2, 1)
        os.utime(archive, ns=(mtime + 5 * 10**9, mtime + 5 * 10**9))
        self.assertEqual(os.path.getsize(archive), size)
        mnt = self.path("mnt")
        os.mkdir(mnt)
        result = lib.run_gpufsd("mount", archive, mnt, timeout=120, env=self.env)
        if result.returncode != 0:  # listed again, and refused: its CRC-32 does not match
            self.assertFalse(lib.is_mounted(mnt))
            self.assertEqual(result.returncode, 1, result.stderr)
            self.assertIn(archive, result.stderr)
            return
        try:
            for folder, _, names in os.walk(mnt):
                for n in names:
                    rel = os.path.relpath(os.path.join(folder, n), mnt)
                    self.assertIn(rel, want)
                    try:
                        data = read_bytes(os.path.join(folder, n))
                    except OSError as e:
                        self.assertEqual(e.errno, errno.EIO, rel)
                        continue
                    self.assertEqual(data, want[rel], rel)
        finally:
            self.assertEqual(lib.run_gpufsd("unmount", mnt).returncode, 0)

    def test_streams_that_cannot_be_read_at_random_are_refused_saying_what_works(self):
        tar = self.plain_tar(self.split)
        for program, package, suffix, options in (
                ("zstd", "zstd", ".tar.zst", ("-q", "-c")), ("xz", "xz-utils", ".tar.xz", ("-c",)),
                ("bzip2", "bzip2", ".tar.bz2", ("-c",))):
            with self.subTest(program=program):
                self.need(program, package)
                archive = self.compress("data" + suffix, tar, program, *options)
                self.refused(archive, archive, "recompress")

    def test_a_7z_archive_is_refused_saying_what_works(self):
        program = self.need("7z", "p7zip-full")
        archive = self.path("data.7z")
        subprocess.run([program, "a", "-t7z", "-bd", archive, *top_names(self.split)],
                       cwd=self.split, check=True, capture_output=True)
        self.refused(archive, archive, "recompress")

    def test_a_gzip_stream_that_holds_no_tar_is_refused_naming_it(self):
        data = subprocess.run(["gzip", "-c"], input=random.Random(9).randbytes(100000),
                              capture_output=True, check=True).stdout
        archive = write_bytes(self.path("notatar.tar.gz"), data)
        self.refused(archive, archive)

    def test_members_gpufs_cannot_decode_are_refused_naming_them(self):
        self.need("zip", "zip")
        train = os.path.join(self.split, "train")
        member = "n00000000/n00000000_0.JPEG"
        secret = self.path("secret.zip")
        subprocess.run(["zip", "-q", "-P", "password", secret, member], cwd=train, check=True)
        self.refused(secret, secret, member, "encrypted")
        if not tool("7z"):
            self.skipTest("7z is not installed (apt-get install p7zip-full): no bzip2 member")
        bzip2 = self.path("bzip2.zip")
        subprocess.run(["7z", "a", "-tzip", "-mm=BZip2", "-bd", bzip2, member], cwd=train,
                       check=True, capture_output=True)
        self.refused(bzip2, bzip2, member, "bzip2")


class Names(ArchiveCase):
    """As for a tar (test_tar_corpus.py, tests/unit/tar_test.cc): a name that climbs out
    with '..' is refused naming it; a leading '/' is dropped, as unzip and tar -x do."""

    def zip_of(self, name, members):
        archive = self.path(name)
        with zipfile.ZipFile(archive, "w") as zf:
            for member, data in members.items():
                zf.writestr(zipfile.ZipInfo(member), data)
        return archive

    def test_a_member_that_climbs_out_is_refused_naming_it(self):
        for evil in ("../evil.JPEG", "cls/../../evil.JPEG"):
            with self.subTest(evil=evil):
                archive = self.zip_of(f"evil-{len(evil)}.zip",
                                      {"cls/a.JPEG": b"a" * 100, "cls/b.JPEG": b"b" * 100,
                                       evil: b"evil"})
                self.refused(archive, archive, evil)

    def test_an_absolute_member_name_is_served_below_the_mount(self):
        archive = self.zip_of("absolute.zip", {"cls/a.JPEG": b"a" * 100, "/abs/x.JPEG": b"x"})
        dest = tempfile.mkdtemp(dir=self.dir)
        unzip = subprocess.run([self.need("unzip", "unzip"), "-qq", "-d", dest, archive],
                               capture_output=True, text=True)
        self.assertIn(unzip.returncode, (0, 1), unzip.stderr)  # 1: a warning, the '/' dropped
        want = digest_files(dest)
        self.assertEqual(sorted(want), ["abs/x.JPEG", "cls/a.JPEG"])
        self.assert_served_as_extracted(archive, "zip", want=want)


if __name__ == "__main__":
    lib.exit_unless_fuse_usable()
    unittest.main(verbosity=2)
