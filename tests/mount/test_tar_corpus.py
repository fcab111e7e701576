#!/usr/bin/python3
"""Tar archives written by GNU tar, bsdtar and Python's tarfile, each mounted with the real
gpufsd and compared file by file (path, size, SHA-256) with what `tar -x` leaves of the
same archive. Only regular files count: the mount serves files and folders, nothing else.

The archives are made here, at test time, from small trees with hard links, symbolic
links, fifos, empty folders, long names and long link targets, and files with holes; the
odd ones GNU tar reads but few writers make (signed checksums, unknown types, v7 folders,
a pax header before a global one, a file replaced by a later member) are written header by
header. Sparse members are refused, and the refusal must name the member.
"""
import hashlib
import os
import random
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unittest

import gpufs_testlib as lib
from gpufs_testlib import digest_files

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fuzz"))
from make_corpus import header, member, pax  # noqa: E402  (archives written header by header)

BSDTAR = shutil.which("bsdtar")
LONG = "t" * 95  # "clsA/" + LONG is 100 bytes: what a header's name field holds


def others_below(root):
    """How many entries below root are neither regular files nor folders."""
    count = 0
    for folder, dirs, names in os.walk(root):
        for name in names + dirs:
            path = os.path.join(folder, name)
            if os.path.islink(path) or not (os.path.isfile(path) or os.path.isdir(path)):
                count += 1
    return count


def write_random(path, size, seed):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data = hashlib.sha256(str(seed).encode()).digest() * (size // 32 + 1)
    with open(path, "wb") as f:
        f.write(data[:size])


def make_plain_tree(root):
    """Short names: files, an empty file and folder, a hard link, a symbolic link, a fifo."""
    write_random(os.path.join(root, "clsA", "a.jpg"), 3000, 1)
    write_random(os.path.join(root, "clsA", "sub", "b.jpg"), 700, 2)
    write_random(os.path.join(root, "clsB", "c.jpg"), 1500, 3)
    open(os.path.join(root, "clsA", "empty.jpg"), "wb").close()
    os.makedirs(os.path.join(root, "clsA", "emptydir"))
    os.link(os.path.join(root, "clsA", "a.jpg"), os.path.join(root, "clsA", "hard.jpg"))
    os.symlink("a.jpg", os.path.join(root, "clsA", "sym.jpg"))
    os.mkfifo(os.path.join(root, "clsA", "fifo"))


def make_long_tree(root):
    """Names and link targets past 100 bytes. clsA is archived first (it is named first), so
    the hard link in clsB points to a long name whose first 100 bytes name another file."""
    target = os.path.join(root, "clsA", LONG + "-target.jpg")
    write_random(os.path.join(root, "clsA", LONG), 100, 4)  # the first 100 bytes' namesake
    write_random(target, 2000, 5)
    write_random(os.path.join(root, "clsA", "d" * 80, "n" * 90 + ".jpg"), 300, 6)
    write_random(os.path.join(root, "clsB", "d.jpg"), 400, 7)
    os.link(target, os.path.join(root, "clsB", "link.jpg"))
    os.link(target, os.path.join(root, "clsB", "l" * 120 + ".jpg"))
    os.symlink("../clsA/" + LONG + "-target.jpg", os.path.join(root, "clsB", "longsym.jpg"))


def make_holes_tree(root):
    """A file with holes (1 MiB, 4 bytes of data in the middle) beside a plain one."""
    holes = os.path.join(root, "clsA", "holes.bin")
    write_random(os.path.join(root, "clsA", "a.jpg"), 900, 8)
    write_random(os.path.join(root, "clsB", "b.jpg"), 600, 10)
    subprocess.run(["truncate", "-s", "1M", holes], check=True)
    subprocess.run(["dd", "of=" + holes, "bs=1", "seek=300000", "conv=notrunc", "status=none"],
                   input=b"data", check=True)


RANDOM_PATHS = [b"cls/a", b"./cls/b", b"cls//c", b"/cls/d", b"cls/d/e", b"cls/7",
                b"cls/" + b"L" * 110, b"cls/" + b"M" * 120]


def random_member(rng, path, earlier):
    """One member at path, of a random kind, behind the extended headers it needs; a hard
    link points to one of the earlier paths."""
    pre, name = b"", path
    if len(path) > 100 or rng.random() < 0.15:
        name = b"cls/header-name"
        if rng.random() < 0.5:
            pre = pax([(b"path", path)], rng.choice([b"x", b"X"]))
        else:
            pre = member(b"././@LongLink", path + b"\0", b"L")
        if rng.random() < 0.3:
            pre += pax([(b"comment", b"global")], b"g")
    data = rng.randbytes(rng.randint(0, 700))
    signed = rng.random() < 0.2
    k = rng.random()
    if k < 0.25:
        return pre + member(name, data, rng.choice([b"0", b"\0", b"7"]), signed=signed)
    if k < 0.32:
        return pre + member(name, typeflag=b"2", linkname=b"nowhere")
    if k < 0.47 and earlier:
        target = rng.choice(earlier)
        if len(target) > 100:
            pre += (pax([(b"linkpath", target)]) if rng.random() < 0.5
                    else member(b"././@LongLink", target + b"\0", b"K"))
        return pre + member(name, typeflag=b"1", linkname=target[:100])
    if k < 0.53:
        return pre + member(name, typeflag=rng.choice([b"5", b"D"]))
    if k < 0.60 and len(name) < 100:
        return pre + member(name + b"/", typeflag=rng.choice([b"0", b"\0"]))
    if k < 0.67:
        return pre + member(name, typeflag=b"6")
    if k < 0.72:
        return member(b"label", typeflag=b"V")
    return pre + member(name, data, rng.choice([b"Z", b"N", b"A", b"I"]), signed=signed)


def random_archive(rng):
    """A second class folder first, so that cls/ is never taken for a wrapper folder."""
    out, earlier = member(b"other/x.jpg", b"x"), []
    for _ in range(rng.randint(1, 9)):
        path = rng.choice(RANDOM_PATHS)
        out += random_member(rng, path, earlier)
        earlier.append(path)
    return out


class TarCorpus(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="gpufs-tar-corpus-")
        cls.plain = os.path.join(cls.work, "plain")
        cls.long = os.path.join(cls.work, "long")
        cls.holes = os.path.join(cls.work, "holes")
        make_plain_tree(cls.plain)
        make_long_tree(cls.long)
        make_holes_tree(cls.holes)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.work)

    def path(self, name):
        return os.path.join(self.work, name)

    def write(self, name, data):
        with open(self.path(name), "wb") as f:
            f.write(data + bytes(1024))
        return self.path(name)

    def gnu_tar(self, name, tree, *options):
        archive = self.path(name)
        subprocess.run(["tar", *options, "-cf", archive, "-C", tree, "clsA", "clsB"], check=True,
                       capture_output=True)
        return archive

    def bsdtar(self, name, tree, *options):
        if not BSDTAR:
            self.skipTest("bsdtar is not installed (apt-get install libarchive-tools)")
        archive = self.path(name)
        subprocess.run([BSDTAR, *options, "-cf", archive, "-C", tree, "clsA", "clsB"],
                       check=True, capture_output=True)
        return archive

    def extracted(self, archive):
        """What `tar -x` leaves: (regular files, how many other non-folders). GNU tar may
        exit 2 after a member it cannot make (a hard link to a folder); the rest stands."""
        dest = tempfile.mkdtemp(dir=self.work)
        result = subprocess.run(["tar", "-xf", archive, "-C", dest], capture_output=True,
                                text=True)
        self.assertIn(result.returncode, (0, 2), result.stderr)
        files, others = digest_files(dest), others_below(dest)
        shutil.rmtree(dest)
        return files, others

    def assert_served_as_extracted(self, archive, wrapper=""):
        """Mounts archive and checks it serves what `tar -x` leaves; the daemon's log."""
        files, others = self.extracted(archive)
        want = {k[len(wrapper):]: v for k, v in files.items() if k.startswith(wrapper)}
        self.assertTrue(want, f"{archive}: tar -x left no files")
        mount = lib.Mount(archive)
        with mount as mnt:
            self.assertEqual(digest_files(mnt), want, archive)
            log = mount.stderr()  # the notes come before the mount is ready
        skipped = re.search(r"(\d+) symbolic links, devices or fifos", log)
        self.assertEqual(int(skipped.group(1)) if skipped else 0, others, f"{archive}: {log}")
        self.assertNotIn("GNUSparseFile", log)
        return log

    def refused(self, archive, pattern):
        mnt = tempfile.mkdtemp()
        try:
            result = lib.run_gpufsd("mount", archive, mnt, timeout=30)
        finally:
            os.rmdir(mnt)
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertRegex(result.stderr, pattern)
        return result.stderr

    # GNU tar.

    def test_gnu_tar_formats(self):
        for fmt in ("gnu", "oldgnu", "posix", "ustar", "v7"):
            with self.subTest(fmt=fmt):
                excluded = ["--exclude=fifo"] if fmt == "v7" else []
                self.assert_served_as_extracted(
                    self.gnu_tar(f"gnu-{fmt}.tar", self.plain, f"--format={fmt}", *excluded))

    def test_gnu_tar_long_names_and_link_targets(self):
        for fmt in ("gnu", "oldgnu", "posix"):
            with self.subTest(fmt=fmt):
                archive = self.gnu_tar(f"gnu-long-{fmt}.tar", self.long, f"--format={fmt}")
                self.assert_served_as_extracted(archive)

    def test_gnu_tar_hard_dereference(self):
        for fmt in ("gnu", "posix"):
            self.assert_served_as_extracted(self.gnu_tar(
                f"gnu-deref-{fmt}.tar", self.long, f"--format={fmt}", "--hard-dereference"))

    def test_gnu_tar_incremental_dumpdirs_are_folders(self):
        snapshot = self.path("snapshot")
        archive = self.gnu_tar("gnu-incremental.tar", self.plain, "--format=gnu",
                               f"--listed-incremental={snapshot}")
        with open(archive, "rb") as f:
            self.assertEqual(f.read(512)[156:157], b"D")  # the first member is a dumpdir
        self.assert_served_as_extracted(archive)

    def test_gnu_tar_appended_members_replace_earlier_ones(self):
        tree = self.path("appended")
        subprocess.run(["cp", "-a", self.plain, tree], check=True)  # with its fifo
        archive = self.gnu_tar("gnu-appended.tar", tree, "--format=posix")
        # Now clsA/a.jpg is a symbolic link, clsB/c.jpg a fifo, clsA/sub a file.
        os.remove(os.path.join(tree, "clsA", "a.jpg"))
        os.symlink("hard.jpg", os.path.join(tree, "clsA", "a.jpg"))
        os.remove(os.path.join(tree, "clsB", "c.jpg"))
        os.mkfifo(os.path.join(tree, "clsB", "c.jpg"))
        write_random(os.path.join(tree, "clsB", "new.jpg"), 10, 9)
        subprocess.run(["tar", "--format=posix", "-rf", archive, "-C", tree, "clsA/a.jpg",
                        "clsB/c.jpg", "clsB/new.jpg"], check=True)
        log = self.assert_served_as_extracted(archive)
        self.assertRegex(log, r"2 members of the archive are replaced by a later member")

    def test_files_with_holes_written_whole_are_served(self):
        self.assert_served_as_extracted(self.gnu_tar("holes-gnu.tar", self.holes, "--format=gnu"))
        self.assert_served_as_extracted(self.bsdtar("holes-bsd.tar", self.holes,
                                                    "--format", "gnutar"))

    def test_sparse_members_are_refused_naming_the_member(self):
        archives = [self.gnu_tar("sparse-gnu.tar", self.holes, "--format=gnu", "--sparse")]
        for version in ("0.0", "0.1", "1.0"):
            archives.append(self.gnu_tar(f"sparse-{version}.tar", self.holes, "--format=posix",
                                         "--sparse", f"--sparse-version={version}"))
        archives.append(self.bsdtar("sparse-bsd.tar", self.holes))  # pax GNU.sparse 1.0
        for archive in archives:
            with self.subTest(archive=os.path.basename(archive)):
                log = self.refused(archive, r"'clsA/holes\.bin' is a sparse file")
                self.assertIn(archive, log)
                self.assertNotIn("GNUSparseFile", log)

    # bsdtar.

    def test_bsdtar_formats(self):
        for fmt in ("pax", "ustar", "v7tar", "gnutar"):
            with self.subTest(fmt=fmt):
                excluded = ["--exclude", "fifo"] if fmt == "v7tar" else []
                self.assert_served_as_extracted(
                    self.bsdtar(f"bsd-{fmt}.tar", self.plain, "--format", fmt, *excluded))

    def test_bsdtar_v7_folders_are_folders(self):
        archive = self.bsdtar("bsd-v7-folders.tar", self.plain, "--format", "v7tar",
                              "--exclude", "fifo")
        with open(archive, "rb") as f:
            first = f.read(512)
        self.assertEqual((first[:5], first[156:157]), (b"clsA/", b"\0"))  # a v7 folder
        log = self.assert_served_as_extracted(archive)
        self.assertNotIn("is a file", log)

    def test_bsdtar_long_names_and_link_targets(self):
        for fmt in ("pax", "gnutar"):
            with self.subTest(fmt=fmt):
                self.assert_served_as_extracted(
                    self.bsdtar(f"bsd-long-{fmt}.tar", self.long, "--format", fmt))

    # Python's tarfile, and headers written one by one.

    def test_tarfile_long_link_names_and_pax_linkpaths(self):
        for fmt in (tarfile.GNU_FORMAT, tarfile.PAX_FORMAT):
            archive = self.path(f"py-long-{fmt}.tar")
            with tarfile.open(archive, "w", format=fmt) as tar:
                tar.add(os.path.join(self.long, "clsA"), arcname="clsA")
                tar.add(os.path.join(self.long, "clsB"), arcname="clsB")
            with self.subTest(fmt=fmt):
                self.assert_served_as_extracted(archive)

    def test_an_extended_header_applies_to_the_member_after_a_global_one(self):
        archive = self.write("x-then-g.tar",
                             pax([(b"path", b"clsA/" + b"p" * 120 + b".jpg")])
                             + pax([(b"comment", b"global")], b"g")
                             + member(b"clsA/short.jpg", b"bytes of the long name")
                             + member(b"clsB/b.jpg", b"bee"))
        self.assert_served_as_extracted(archive)

    def test_members_of_unknown_types_are_regular_files(self):
        archive = self.write("unknown.tar", member(b"clsA/z.jpg", b"zed", b"Z")
                             + member(b"clsA/i.jpg", b"inode", b"I") + member(b"clsB/b", b"b"))
        self.assert_served_as_extracted(archive)

    def test_signed_checksums_are_accepted(self):
        name = "clsA/\u00e9t\u00e9.jpg".encode()  # bytes past 0x7f: the sums differ
        archive = self.write("signed.tar", member(name, b"summer", signed=True)
                             + member(b"clsB/b.jpg", b"bee", signed=True))
        with open(archive, "rb") as f:
            self.assertNotEqual(f.read(512), header(name, size=6))
        self.assert_served_as_extracted(archive)

    def test_the_last_member_of_a_path_decides_what_it_is(self):
        archive = self.write("last-wins.tar",
                             member(b"clsA/sym.jpg", b"gone") + member(b"clsA/sym.jpg", b"", b"2",
                                                                       b"t.jpg")
                             + member(b"clsA/fifo.jpg", b"gone") + member(b"clsA/fifo.jpg",
                                                                          typeflag=b"6")
                             + member(b"clsA/dir", b"gone") + member(b"clsA/dir/", typeflag=b"0")
                             + member(b"clsA/t.jpg", b"target")
                             + member(b"clsA/s.jpg", typeflag=b"2", linkname=b"t.jpg")
                             + member(b"clsA/h.jpg", typeflag=b"1", linkname=b"clsA/s.jpg")
                             + member(b"clsB/b.jpg", b"bee"))
        log = self.assert_served_as_extracted(archive)
        self.assertIn("3 members of the archive are replaced by a later member", log)

    def test_v7_folder_entries_are_folders(self):
        archive = self.write("v7-folders.tar",
                             member(b"clsA/", typeflag=b"\0") + member(b"clsA/sub/", typeflag=b"0")
                             + member(b"clsA/sub/a.jpg", b"a", b"\0")
                             + member(b"clsB/", typeflag=b"0") + member(b"clsB/b.jpg", b"b"))
        log = self.assert_served_as_extracted(archive)
        self.assertNotIn("outside class folders", log)

    def test_a_wrapper_folder_is_named_in_the_log(self):
        archive = self.path("wrapped.tar")
        with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
            tar.add(self.plain, arcname="dataset")
        log = self.assert_served_as_extracted(archive, wrapper="dataset/")
        self.assertIn("all files of the archive lie in the folder dataset/", log)
        self.assertNotIn("replaced", log)

    def test_random_archives_are_served_as_tar_x_leaves_them(self):
        """Members of every kind at a few paths, in a random order: each archive that
        `tar -x` extracts without an error must be served alike."""
        rng = random.Random(20261124)
        served = 0
        for i in range(60):
            archive = self.write(f"random-{i}.tar", random_archive(rng))
            dest = tempfile.mkdtemp(dir=self.work)
            clean = subprocess.run(["tar", "-xf", archive, "-C", dest],
                                   capture_output=True).returncode == 0
            shutil.rmtree(dest)
            if clean:
                with self.subTest(archive=i):
                    self.assert_served_as_extracted(archive)
                served += 1
        self.assertGreater(served, 20)


if __name__ == "__main__":
    lib.exit_unless_fuse_usable()
    unittest.main(verbosity=2)
