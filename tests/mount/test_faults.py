#!/usr/bin/python3
"""Faults in a dataset's blobs after mount, through real mounts: readers get EIO, never a
hang nor wrong bytes, and the daemon lives on, logs the blob without a storm, and unmounts.

Blobs are broken by the test itself (truncated, deleted, rewritten, renamed over) or, for
read errors, by faultfs: the dataset folder sits on a FUSE passthrough that fails chosen
byte ranges or opens with EIO. Every read of a gpufs mount is made with a deadline (see
faultlib), so a hung read fails the case that made it, naming the file.
"""
import collections
import errno
import hashlib
import mmap
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import gpufs_testlib as lib
from faultlib import (FAULTFS, WAIT_TIMEOUT, Daemon, FaultFs, Readers, bounded, describe,
                      read_concurrently, read_files)

CLASSES, PER_CLASS, GROUP_SIZE = 4, 6, 4  # 24 files in 6 blobs of 4
STORM = 300  # most log lines that may name one bad blob: more is a retry storm

# Each case runs with the group cache and without it (reads straight from the blobs).
CONFIGS = [("cache", ()), ("no cache", ("--cache-size", "0"))]
VERIFY = ("verify", ("--verify",))


def sha(data):
    return hashlib.sha256(data).hexdigest()


def setUpModule():
    """One sample for every test: its tree, a mytar grouping and a native pack of it."""
    global WORK, TREE, MYTAR, PACK, EXPECT
    WORK = tempfile.mkdtemp(prefix="gpufs-faults-")
    TREE, MYTAR = lib.make_dataset(WORK, CLASSES, PER_CLASS, GROUP_SIZE)
    PACK = os.path.join(WORK, "pack")
    result = lib.run_gpufsd("pack", TREE, PACK, "--group-size", str(GROUP_SIZE))
    assert result.returncode == 0, result.stderr
    EXPECT = {}
    for folder, _, names in os.walk(TREE):
        for name in names:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                EXPECT[os.path.relpath(path, TREE)] = sha(f.read())


def tearDownModule():
    shutil.rmtree(WORK)


class FaultCase(unittest.TestCase):
    """Helpers shared by the fault tests: fresh copies of the sample, the blob of each file,
    and assertions that list every file that broke the rule, with what it got."""

    def setUp(self):
        self.work = tempfile.mkdtemp(prefix=f"{self._testMethodName}-", dir=WORK)

    def tearDown(self):
        shutil.rmtree(self.work, ignore_errors=True)

    def fresh(self, fmt, under=None):
        """A fresh copy of the sample in format 'native' or 'mytar', below `under`."""
        dest = tempfile.mkdtemp(prefix=f"{fmt}-", dir=under or self.work)
        os.rmdir(dest)
        shutil.copytree(PACK if fmt == "native" else MYTAR, dest)
        return dest

    def layout(self, mnt):
        """{rel: (blob path, offset, size)} of every file of the mount (metadata only)."""
        out = {}
        for folder, _, names in os.walk(mnt):
            for name in names:
                path = os.path.join(folder, name)
                out[os.path.relpath(path, mnt)] = (
                    os.getxattr(path, "user.gpufs.blob").decode(),
                    int(os.getxattr(path, "user.gpufs.offset")),
                    int(os.getxattr(path, "user.gpufs.size")))
        self.assertEqual(sorted(out), sorted(EXPECT), "the mount shows the sample")
        return out

    def pick_victim(self, layout):
        """(victim blob, its files, the files of every other blob)."""
        blob = layout[sorted(layout)[0]][0]
        mine = sorted(rel for rel, (b, _, _) in layout.items() if b == blob)
        others = sorted(rel for rel in layout if rel not in mine)
        self.assertGreater(len(mine), 1)
        return blob, mine, others

    def check(self, results, rels, allowed, what):
        bad = [f"{rel}: {describe(results[rel], EXPECT[rel])}" for rel in rels
               if describe(results[rel], EXPECT[rel]) not in allowed]
        self.assertFalse(bad, f"{what}; got instead:\n  " + "\n  ".join(bad))

    def assert_eio(self, results, rels):
        self.check(results, rels, {"EIO"}, "these files must read as EIO")

    def assert_exact(self, results, rels):
        self.check(results, rels, {"byte-exact"}, "these files must read byte-exact")

    def assert_logged(self, daemon, blob):
        self.assertTrue(daemon.log.wait_mentioned(blob),
                        f"no log line names {blob}; the log begins:\n{daemon.log.text()[:3000]}")

    def assert_lives(self, daemon):
        self.assertTrue(daemon.alive_and_answering(), "the daemon died or stopped answering")


class BlobChangedAfterMount(FaultCase):
    """A blob truncated, deleted or replaced while mounted: its files read as EIO (the log
    names the blob), every other file byte-exact, and the daemon unmounts cleanly."""

    def run_case(self, fmt, configs, fault):
        for label, options in configs:
            with self.subTest(config=label):
                with Daemon(self.fresh(fmt), *options) as daemon:
                    blob, mine, others = self.pick_victim(self.layout(daemon.mnt))
                    daemon.log.watch(blob)
                    fault(blob, fmt)
                    results = read_files(daemon.mnt, mine + others)
                    self.assert_eio(results, mine)
                    self.assert_exact(results, others)
                    self.assert_logged(daemon, blob)
                    self.assert_lives(daemon)

    @staticmethod
    def truncate(blob, fmt):
        os.truncate(blob, os.path.getsize(blob) // 2)

    @staticmethod
    def delete(blob, fmt):
        os.unlink(blob)

    @staticmethod
    def changed_bytes(blob):
        with open(blob, "rb") as f:
            return bytes(b ^ 0x5A for b in f.read())

    @staticmethod
    def bump_mtime(path, old):
        """A mytar dataset knows its blobs by size and mtime: a write moves the mtime."""
        os.utime(path, ns=(old.st_atime_ns, old.st_mtime_ns + 1000 * 10**9))

    @classmethod
    def rewrite_in_place(cls, blob, fmt):
        old = os.stat(blob)
        data = cls.changed_bytes(blob)
        with open(blob, "r+b") as f:
            f.write(data)
        if fmt == "mytar":
            cls.bump_mtime(blob, old)

    @classmethod
    def rename_over(cls, blob, fmt):
        old = os.stat(blob)
        with open(blob + ".new", "wb") as f:
            f.write(cls.changed_bytes(blob))
        if fmt == "mytar":
            cls.bump_mtime(blob + ".new", old)
        os.replace(blob + ".new", blob)

    def test_truncated_blob_native(self):
        self.run_case("native", CONFIGS, self.truncate)

    def test_truncated_blob_mytar(self):
        self.run_case("mytar", CONFIGS, self.truncate)

    def test_deleted_blob_native(self):
        self.run_case("native", CONFIGS, self.delete)

    def test_deleted_blob_mytar(self):
        self.run_case("mytar", CONFIGS, self.delete)

    def test_blob_rewritten_in_place_native(self):
        self.run_case("native", CONFIGS + [VERIFY], self.rewrite_in_place)

    def test_blob_rewritten_in_place_mytar(self):
        self.run_case("mytar", CONFIGS, self.rewrite_in_place)

    def test_blob_renamed_over_native(self):
        self.run_case("native", CONFIGS + [VERIFY], self.rename_over)

    def test_blob_renamed_over_mytar(self):
        self.run_case("mytar", CONFIGS, self.rename_over)


class BlobReadFails(FaultCase):
    """A blob whose open or some bytes fail with EIO (the dataset on faultfs)."""

    def mount_on_faultfs(self, fmt, options):
        """(faultfs, daemon) contexts serving a fresh copy of the sample from faultfs."""
        faultfs = FaultFs(self.work)
        os.makedirs(faultfs.src, exist_ok=True)
        name = os.path.basename(self.fresh(fmt, under=faultfs.src))
        return faultfs, lambda: Daemon(os.path.join(faultfs.mnt, name), *options)

    def relative(self, faultfs, blob):
        return os.path.relpath(blob, faultfs.mnt)

    def unopenable(self, fmt):
        for label, options in CONFIGS:
            with self.subTest(config=label):
                faultfs, daemon_of = self.mount_on_faultfs(fmt, options)
                with faultfs, daemon_of() as daemon:
                    blob, mine, others = self.pick_victim(self.layout(daemon.mnt))
                    daemon.log.watch(blob)
                    faultfs.rules(f"{self.relative(faultfs, blob)} open")
                    results = read_files(daemon.mnt, mine + others)
                    self.assert_eio(results, mine)
                    self.assert_exact(results, others)
                    self.assert_logged(daemon, blob)
                    self.assert_lives(daemon)

    def test_unopenable_blob_native(self):
        self.unopenable("native")

    def test_unopenable_blob_mytar(self):
        self.unopenable("mytar")

    def failing_range(self, layout, mine):
        """The victim file (the middle member of its blob) and a rule failing its bytes."""
        victim = sorted(mine, key=lambda rel: layout[rel][1])[len(mine) // 2]
        _, offset, size = layout[victim]
        return victim, offset, offset + size

    def test_failing_byte_range_then_healed(self):
        for label, options in CONFIGS:
            with self.subTest(config=label):
                faultfs, daemon_of = self.mount_on_faultfs("native", options)
                with faultfs, daemon_of() as daemon:
                    layout = self.layout(daemon.mnt)
                    blob, mine, others = self.pick_victim(layout)
                    victim, start, end = self.failing_range(layout, mine)
                    faultfs.rules(f"{self.relative(faultfs, blob)} {start} {end}")
                    results = read_files(daemon.mnt, mine + others)
                    self.assert_eio(results, [victim])
                    # A whole group is loaded at once with the cache, and buffered reads
                    # of faultfs fail whole pages without it, so other files of the blob may
                    # fail too; they must never hang nor read wrong bytes.
                    self.check(results, mine, {"EIO", "byte-exact"},
                               "files of the bad blob must read as EIO or byte-exact")
                    self.assert_exact(results, others)
                    faultfs.rules()
                    self.assert_exact(read_files(daemon.mnt, mine), mine)
                    self.assert_lives(daemon)

    def test_a_failed_demand_read_fails_its_reader_and_the_group_reads_on(self):
        # Pieces of 4 KiB: a reader's own (demand) read of a group covers just its file's
        # blocks, so bytes failing inside one file fail that reader, not its siblings.
        piece = 4096
        faultfs, daemon_of = self.mount_on_faultfs("native", ("--io-size", str(piece)))
        with faultfs, daemon_of() as daemon:
            layout = self.layout(daemon.mnt)
            blob, mine, others = self.pick_victim(layout)
            victim = max(mine, key=lambda rel: layout[rel][2])
            _, offset, size = layout[victim]
            start = -(-offset // piece) * piece  # blocks wholly inside the victim
            end = (offset + size) // piece * piece
            self.assertLess(start, end, f"{victim} ({size} bytes) spans no whole block")
            faultfs.rules(f"{self.relative(faultfs, blob)} {start} {end}")
            self.assert_eio(read_files(daemon.mnt, [victim]), [victim])
            siblings = [rel for rel in mine if rel != victim]
            self.assert_exact(read_files(daemon.mnt, siblings + others), siblings + others)
            faultfs.rules()
            self.assert_exact(read_files(daemon.mnt, mine), mine)
            self.assert_lives(daemon)

    def test_concurrent_readers_of_a_failing_blob_all_get_eio_without_a_log_storm(self):
        # All that went wrong is reported together: a hang, a storm, a deaf daemon.
        readers, rounds = 6, 3
        for label, options in CONFIGS:
            with self.subTest(config=label):
                faultfs, daemon_of = self.mount_on_faultfs("native", options)
                with faultfs, daemon_of() as daemon:
                    layout = self.layout(daemon.mnt)
                    blob, mine, _ = self.pick_victim(layout)
                    daemon.log.watch(blob)
                    victim, start, end = self.failing_range(layout, mine)
                    faultfs.rules(f"{self.relative(faultfs, blob)} {start} {end}")
                    results = read_concurrently(daemon.mnt, [[victim] * rounds] * readers)
                    got = collections.Counter(describe(r, EXPECT[victim])
                                              for r in results.values())
                    problems = [] if set(got) == {"EIO"} else [
                        f"{readers} threads reading {victim} {rounds} times got {dict(got)}"]
                    problems += self.storm(daemon, blob, "once the reads ended")
                    daemon.ended = True
                    daemon.proc.send_signal(signal.SIGTERM)
                    try:
                        status = daemon.proc.wait(timeout=WAIT_TIMEOUT)
                        if status != 0:
                            problems.append(f"gpufsd exited {status} on SIGTERM")
                    except subprocess.TimeoutExpired:
                        problems.append(f"gpufsd ignored SIGTERM for {WAIT_TIMEOUT} s")
                    if lib.is_mounted(daemon.mnt):
                        problems.append("the mount outlived SIGTERM")
                    problems += self.storm(daemon, blob, "by the daemon's end")
                    self.assertFalse(problems, "\n  ".join([""] + problems))

    @staticmethod
    def storm(daemon, blob, when):
        count = daemon.log.mentions(blob)
        if count <= STORM:
            return []
        return [f"a retry storm: {count} log lines named {blob} {when} (at most {STORM})"]


class StagingFails(FaultCase):
    """Memory too small for any group and a disk tier: every group is staged into the tier
    (tier_staging.h) and some of its bytes fail meanwhile."""

    mount_on_faultfs = BlobReadFails.mount_on_faultfs
    relative = BlobReadFails.relative
    failing_range = BlobReadFails.failing_range

    def test_a_failed_staging_never_serves_wrong_bytes_and_is_fetched_again_later(self):
        tier = os.path.join(self.work, "tier")
        options = ("--cache-size", "4KiB", "--io-size", "4096", "--disk-cache", tier)
        faultfs, daemon_of = self.mount_on_faultfs("native", options)
        with faultfs, daemon_of() as daemon:
            layout = self.layout(daemon.mnt)
            blob, mine, others = self.pick_victim(layout)
            victim, start, end = self.failing_range(layout, mine)
            faultfs.rules(f"{self.relative(faultfs, blob)} {start} {end}")
            results = read_files(daemon.mnt, mine + others)
            self.assert_eio(results, [victim])
            # Its siblings are served from the staging's landed blocks or read alone; a
            # page they share with the victim may fail them too, but never with wrong bytes.
            self.check(results, mine, {"EIO", "byte-exact"},
                       "files of the bad blob must read as EIO or byte-exact")
            self.assert_exact(results, others)
            staging = lib.stats_of(daemon.mnt)["tier"]["staging"]
            self.assertGreater(staging["failed"], 0, "no staging failed")
            faultfs.rules()
            # Healed: reads are exact at once, and a later miss stages the group again once
            # its back-off has passed, so that it ends on disk like the others.
            groups = lib.stats_of(daemon.mnt)["groups"]
            deadline = time.monotonic() + 30
            while True:
                self.assert_exact(read_files(daemon.mnt, mine), mine)
                copies = [f for _, _, names in os.walk(tier) for f in names
                          if f.endswith(".grp")]
                if len(copies) == groups or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            self.assertEqual(len(copies), groups, "the failed group was never staged again")
            self.assert_lives(daemon)


class DaemonStopped(FaultCase):
    """The daemon killed, or stopped and continued, while threads read in a loop."""

    def looping_readers(self, mnt, threads=4):
        rels = sorted(EXPECT)
        jobs = [random.Random(t).sample(rels, len(rels)) for t in range(threads)]
        stop = os.path.join(tempfile.mkdtemp(dir=self.work), "stop")
        readers = Readers([[os.path.join(mnt, r) for r in job] for job in jobs], loop=True,
                          expect={os.path.join(mnt, r): EXPECT[r] for r in rels}, stop=stop)
        return readers, stop

    @staticmethod
    def passes(events):
        done = {}
        for e in events:
            if "passes" in e:
                done[e["t"]] = e["passes"]
        return done

    def settled_passes(self, readers, quiet=0.3, limit=3.0):
        """The passes once those reported before now have arrived. The readers' events come
        through a pipe read on a thread of this process, so a snapshot taken the moment the
        daemon stops can lag what the readers did just before (passes served from memory
        take milliseconds). A reader that goes on while the daemon is stopped keeps changing
        them: then this returns at `limit`, and the check after it still sees it go on."""
        last, since = self.passes(readers.snapshot()), time.monotonic()
        end = since + limit
        while time.monotonic() < end:
            time.sleep(0.05)
            now = self.passes(readers.snapshot())
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= quiet:
                break
        return last

    def wait_all_looping(self, readers, threads=4):
        ok = readers.wait_for(lambda ev: len(self.passes(ev)) == threads or
                              any("error" in e or "end" in e for e in ev), WAIT_TIMEOUT)
        events = readers.snapshot()
        self.assertTrue(ok and len(self.passes(events)) == threads,
                        f"the readers never got going: {events[-8:]}")

    def test_killed_daemon_gives_enotconn_and_unmount_cleans_up(self):
        # The kernel ends a read in flight when the daemon dies with ECONNABORTED, and
        # answers every later one ENOTCONN: each reader's next read must be ENOTCONN.
        with Daemon(self.fresh("native")) as daemon:
            readers, _ = self.looping_readers(daemon.mnt)
            with readers:
                self.wait_all_looping(readers)
                daemon.ended = True
                killed_at = time.monotonic()
                daemon.proc.kill()
                daemon.proc.wait(timeout=WAIT_TIMEOUT)
                readers.wait_ended(WAIT_TIMEOUT)
                events = readers.snapshot()
            errors = {e["t"]: e for e in events if "error" in e}
            self.assertEqual(sorted(errors), [0, 1, 2, 3], f"readers still reading: {events[-8:]}")
            for t, e in errors.items():
                # Over io_uring, a request in a ring entry when the daemon dies ends with
                # ECANCELED, as the kernel cancels the entry's command, and one queued while
                # the rings are torn down with ECONNABORTED; then ENOTCONN, as on /dev/fuse.
                # A reader quick enough to read again before the teardown ends can meet
                # either of the first two once more, so its next read may too.
                ended = ("ENOTCONN", "ECONNABORTED", "ECANCELED")
                self.assertIn(errno.errorcode.get(e["error"]), ended, e)
                self.assertEqual(e["then"][0], "err", e)
                self.assertIn(errno.errorcode.get(e["then"][1]), ended, e)
            with self.assertRaises(OSError) as dead:  # statfs always reaches the daemon
                os.statvfs(daemon.mnt)
            self.assertEqual(dead.exception.errno, errno.ENOTCONN)
            for t, e in errors.items():
                self.assertLess(e["at"] - killed_at, 5, f"reader {t} took this long to fail")
            result = lib.run_gpufsd("unmount", daemon.mnt, timeout=WAIT_TIMEOUT)
            self.assertEqual(result.returncode, 0,
                             f"gpufsd unmount after SIGKILL: {result.stderr.strip()}")
            self.assertFalse(lib.is_mounted(daemon.mnt), "the dead mount is still there")

    def test_stopped_daemon_blocks_readers_until_continued(self):
        for label, options in CONFIGS:
            with self.subTest(config=label), Daemon(self.fresh("native"), *options) as daemon:
                readers, stop = self.looping_readers(daemon.mnt)
                with readers:
                    self.wait_all_looping(readers)
                    daemon.proc.send_signal(signal.SIGSTOP)
                    try:
                        before = self.settled_passes(readers)
                        # While stopped nothing may fail: watch for an error or an end.
                        failed = readers.wait_for(
                            lambda ev: any("error" in e or "end" in e for e in ev), 1.5)
                        during = self.passes(readers.snapshot())
                    finally:
                        daemon.proc.send_signal(signal.SIGCONT)
                    self.assertFalse(failed, f"a reader failed while stopped: "
                                             f"{readers.snapshot()[-4:]}")
                    for t in before:
                        self.assertLessEqual(during[t] - before[t], 1,
                                             f"reader {t} went on while the daemon was stopped")
                    open(stop, "w").close()
                    ended = readers.wait_ended(WAIT_TIMEOUT)
                    events = readers.snapshot()
                self.assertTrue(ended, f"readers did not finish after SIGCONT: {events[-8:]}")
                self.assertEqual([e for e in events if "error" in e], [])
                self.assertEqual([e for e in events if e.get("bad")], [])
                final = self.passes(events)
                for t in before:
                    self.assertGreater(final[t], during[t], f"reader {t} did not go on")


class FaultFsSelfCheck(unittest.TestCase):
    """faultfs itself: a faithful read-only passthrough, failing exactly what it is told."""

    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="faultfs-check-")
        cls.faultfs = FaultFs(cls.work)
        os.makedirs(os.path.join(cls.faultfs.src, "sub dir"))
        rng = random.Random(3)
        cls.files = {"big.bin": rng.randbytes(700_000), "sub dir/small.txt": b"hello\n",
                     "empty": b""}
        for rel, data in cls.files.items():
            with open(os.path.join(cls.faultfs.src, rel), "wb") as f:
                f.write(data)
        cls.faultfs.__enter__()

    @classmethod
    def tearDownClass(cls):
        try:
            cls.faultfs.__exit__(None, None, None)
        finally:
            shutil.rmtree(cls.work)

    def tearDown(self):
        self.faultfs.rules()

    def path(self, rel):
        return os.path.join(self.faultfs.mnt, rel)

    def pread(self, rel, size, offset, flags=0):
        def call():
            fd = os.open(self.path(rel), os.O_RDONLY | flags)
            try:
                return os.pread(fd, size, offset)
            finally:
                os.close(fd)
        return bounded(call)

    def test_listing_stat_and_bytes_equal_the_source(self):
        self.assertEqual(sorted(bounded(lambda: os.listdir(self.faultfs.mnt))),
                         ["big.bin", "empty", "sub dir"])
        self.assertEqual(bounded(lambda: os.listdir(self.path("sub dir"))), ["small.txt"])
        rng = random.Random(5)
        for rel, data in self.files.items():
            self.assertEqual(bounded(lambda: os.stat(self.path(rel))).st_size, len(data))
            self.assertEqual(self.pread(rel, len(data) + 10, 0), data, rel)
            for _ in range(20):
                offset, size = rng.randrange(len(data) + 5), rng.randrange(1, 300_000)
                self.assertEqual(self.pread(rel, size, offset), data[offset:offset + size])
        big = self.files["big.bin"]
        self.assertEqual(self.pread("big.bin", 8192, 4096, os.O_DIRECT), big[4096:12288])
        self.assertEqual(self.pread("big.bin", 1000, 12345, os.O_DIRECT), big[12345:13345])

    def test_writes_are_refused(self):
        with self.assertRaises(OSError) as caught:
            bounded(lambda: open(self.path("big.bin"), "r+b"))
        self.assertIn(caught.exception.errno, (errno.EROFS, errno.EACCES))

    def test_a_ruled_range_fails_with_eio_until_the_rule_goes(self):
        big = self.files["big.bin"]
        self.faultfs.rules("# a comment", "", "big.bin 100000 100001")
        # O_DIRECT reads fail byte-exactly; buffered ones a page at a time (and a read that
        # begins before the bad page returns short, as on a disk).
        direct = os.O_DIRECT
        for offset, size, flags in ((99_000, 1001, direct), (100_000, 1, direct),
                                    (99_999, 2, direct), (98_304, 8192, 0), (99_000, 1000, 0)):
            with self.assertRaises(OSError) as caught:
                self.pread("big.bin", size, offset, flags)
            self.assertEqual(caught.exception.errno, errno.EIO, (offset, size, flags))
        for offset, size, flags in ((0, 100_000, direct), (100_001, 5000, direct),
                                    (99_000, 1000, direct), (0, 65536, 0), (200_000, 4096, 0)):
            self.assertEqual(self.pread("big.bin", size, offset, flags),
                             big[offset:offset + size], (offset, size, flags))
        self.assertEqual(self.pread("sub dir/small.txt", 100, 0), b"hello\n")
        self.faultfs.rules()
        self.assertEqual(self.pread("big.bin", len(big), 0), big)

    def test_a_rule_holds_for_a_direct_handle_already_open_and_mmap_works(self):
        big = self.files["big.bin"]
        fd = bounded(lambda: os.open(self.path("big.bin"), os.O_RDONLY | os.O_DIRECT))
        try:
            self.assertEqual(bounded(lambda: os.pread(fd, 4096, 0)), big[:4096])
            self.faultfs.rules("big.bin 0 1")
            with self.assertRaises(OSError) as caught:
                bounded(lambda: os.pread(fd, 4096, 0))
            self.assertEqual(caught.exception.errno, errno.EIO)
            self.faultfs.rules()
            self.assertEqual(bounded(lambda: os.pread(fd, 4096, 0)), big[:4096])
        finally:
            os.close(fd)

        def mapped():
            with open(self.path("big.bin"), "rb") as f, \
                    mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                return m[1000:300_000]
        self.assertEqual(bounded(mapped), big[1000:300_000])

    def test_an_open_rule_fails_opens_with_eio(self):
        self.faultfs.rules("/sub dir/small.txt open")
        with self.assertRaises(OSError) as caught:
            self.pread("sub dir/small.txt", 10, 0)
        self.assertEqual(caught.exception.errno, errno.EIO)
        self.assertEqual(bounded(lambda: os.stat(self.path("sub dir/small.txt"))).st_size, 6)
        self.assertEqual(self.pread("big.bin", 10, 0), self.files["big.bin"][:10])
        self.faultfs.rules()
        self.assertEqual(self.pread("sub dir/small.txt", 10, 0), b"hello\n")


if __name__ == "__main__":
    lib.exit_unless_fuse_usable()
    if not os.access(FAULTFS, os.X_OK):
        print(f"FAIL: faultfs is not built at {FAULTFS}; set FAULTFS or build the tests")
        sys.exit(1)
    unittest.main(verbosity=2)
