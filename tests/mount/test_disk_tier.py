#!/usr/bin/python3
"""The disk tier through real mounts of a dataset on a real HTTP server (nginx): a remount
reads from disk and fetches nothing, a damaged copy is never served, and a full disk or a
removed folder leaves every read working."""
import concurrent.futures
import contextlib
import json
import os
import random
import re
import shutil
import socket
import subprocess
import tempfile
import time
import unittest
import urllib.request

import gpufs_testlib as lib
from gpufs_testlib import drop_page_cache, files_below, stats_of


GPUFS_STAT = os.environ.get("GPUFS_STAT", os.path.join(lib.ROOT, "build", "cli", "gpufs-stat"))
GROUP_BYTES = "64KiB"  # several groups of several members each




def approx_size(n):
    """A size as gpufsd prints it for a person (base/sizes.h, FormatSize)."""
    units = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
    value, unit = float(n), 0
    while value >= 1024 and unit + 1 < len(units):
        value /= 1024
        unit += 1
    if unit == 0 or value >= 100 or value == int(value):
        return f"{value:.0f} {units[unit]}"
    return f"{value:.1f} {units[unit]}"


def copies_below(folder):
    """Paths of the group copies the tier keeps under folder."""
    return sorted(os.path.join(d, f) for d, _, names in os.walk(folder) for f in names
                  if f.endswith(".grp"))


class DiskTier(lib.ServedPackCase):
    TRAIN, VAL, GROUP_BYTES, PREFIX = (5, 12), (3, 4), GROUP_BYTES, "gpufs-tier-"

    def mount(self, *options):
        budget = () if "--cache-size" in options else ("--cache-size", "64MiB")
        return lib.Mount(self.url, *budget, *options, env=self.env)

    @contextlib.contextmanager
    def small_disk(self, name, size):
        """A tmpfs of `size` at folder `name` of the work folder, unmounted after. Private
        (mode=0700): a tier root others may write into is refused."""
        folder = os.path.join(self.work, name)
        os.makedirs(folder, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", folder],
                       check=True)
        try:
            yield folder
        finally:
            subprocess.run(["umount", folder], check=True)

    def read_all(self, *options):
        """Every file through a fresh mount, compared, and (with a tier) every group on
        disk before the unmount; returns (source io, tier) stats."""
        with self.mount(*options) as mnt:
            self.assertEqual(files_below(mnt), self.expected)
            stats = stats_of(mnt)
            deadline = time.monotonic() + 30
            # Groups go to disk in the background; wait for them, by what the tier says.
            while "tier" in stats and time.monotonic() < deadline and (
                    len(copies_below(stats["tier"]["root"])) < stats["groups"]):
                time.sleep(0.05)
                stats = stats_of(mnt)
        return stats["io"], stats.get("tier")

    def test_remount_reads_from_disk_fetching_nothing(self):
        io, tier = self.read_all()
        self.assertGreater(io["bytes"], 0)
        root = os.path.join(self.xdg, "gpufs", "tier")
        self.assertEqual(tier["root"], root)
        self.assertGreater(tier["writes"], 0)
        groups = len(copies_below(root))
        self.assertEqual(groups, tier["writes"])
        io, tier = self.read_all()
        self.assertEqual(io["requests"], 0, "a remount fetched from the server")
        self.assertEqual(tier["hits"], groups)
        self.assertEqual(tier["damaged"], 0)

    def test_shuffled_readers_get_exact_bytes_from_demand_prefetch_and_the_tier(self):
        # Pieces of 16 KiB: each 64 KiB group is four blocks, so four readers in shuffled
        # orders send demand reads of single files' blocks while prefetch reads the rest.
        rels = sorted(self.expected)

        def shuffled_pass(mnt):
            orders = [random.Random(seed).sample(rels, len(rels)) for seed in range(4)]

            def read(order):
                got = {}
                for rel in order:
                    with open(os.path.join(mnt, rel), "rb") as f:
                        got[rel] = f.read()
                return got

            with concurrent.futures.ThreadPoolExecutor(4) as pool:
                for got in pool.map(read, orders):
                    self.assertEqual(got, {rel: self.expected[rel] for rel in got})

        with self.mount("--io-size", "16KiB") as mnt:
            drop_page_cache()
            shuffled_pass(mnt)
            stats = stats_of(mnt)
            self.assertGreater(stats["demand_reads"], 0)
            self.assertEqual(stats["io_errors"], 0)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and (
                    len(copies_below(stats["tier"]["root"])) < stats["groups"]):
                time.sleep(0.05)
                stats = stats_of(mnt)
        with self.mount("--io-size", "16KiB") as mnt:  # now from the tier's copies
            drop_page_cache()
            shuffled_pass(mnt)
            stats = stats_of(mnt)
            self.assertEqual(stats["io"]["requests"], 0, "a remount fetched from the server")
            self.assertGreater(stats["tier"]["hits"], 0)

    def test_a_tier_nobody_sized_is_bounded_by_a_quarter_of_its_disk_and_says_so(self):
        mount = self.mount()
        with mount as mnt:
            self.assertEqual(files_below(mnt), self.expected)
            stats = stats_of(mnt)
            log = mount.stderr()
        root = os.path.join(self.xdg, "gpufs", "tier")
        vfs = os.statvfs(root)
        quarter = vfs.f_blocks * vfs.f_frsize // 4
        self.assertEqual(stats["tier"]["bound_bytes"], quarter)
        notes = re.findall(r"gpufsd: disk cache (\S+) holds up to (.+?) \((.+?); this dataset "
                           r"takes .+?\); --disk-cache-size changes it", log)
        self.assertEqual(len(notes), 1, log)  # once a mount
        self.assertEqual(len(re.findall(r"kernel: \{", log)), 1, log)
        where, room, why = notes[0]
        self.assertEqual(where, root)
        # The tier's room: what it uses, and the disk's free space less what it leaves free.
        # The disk is shared with whatever else runs here, so its free space moves between the
        # daemon's look and this one; within 1 GiB of the bound either reason is right.
        tier = stats["tier"]
        room_now = tier["used_bytes"] + vfs.f_bavail * vfs.f_frsize - tier["keep_free_bytes"]
        if quarter < room_now - (1 << 30):
            self.assertEqual((room, why), (approx_size(quarter), "a quarter of its file system"))
        elif quarter > room_now + (1 << 30):
            self.assertTrue(why.startswith("its disk's free space less the "), why)
        else:
            self.assertTrue(why == "a quarter of its file system" or
                            why.startswith("its disk's free space less the "), why)

    def test_a_tier_nobody_sized_on_a_full_disk_says_what_it_can_hold(self):
        with self.small_disk("nearly-full", "64m") as small:
            with open(os.path.join(small, "filler"), "wb") as f:  # someone else's 50 MiB
                f.write(b"\0" * (50 << 20))
            mount = self.mount("--disk-cache", small)
            with mount as mnt:
                vfs = os.statvfs(small)  # the tier has written nothing yet
                log = mount.stderr()
                self.assertEqual(files_below(mnt), self.expected)
        total = vfs.f_blocks * vfs.f_frsize
        keep_free = total // 10
        room = vfs.f_bavail * vfs.f_frsize - keep_free  # 14 MiB free less 6.4 MiB
        note = re.search(r"gpufsd: disk cache \S+ holds up to ([\d.]+) MiB \(its disk's free "
                         r"space less the (.+?) it leaves free; a quarter of its file system, "
                         r"(.+?), once there is room; this dataset takes", log)
        self.assertIsNotNone(note, log)
        self.assertAlmostEqual(float(note.group(1)), room / 2**20, delta=0.15)
        self.assertEqual(note.group(2), approx_size(keep_free))
        self.assertEqual(note.group(3), approx_size(total // 4))
        self.assertEqual(log.count("gpufsd: disk cache "), 1, log)
        self.assertIn(f"disk cache: {small} (up to {note.group(1)} MiB)", log)

    def test_gpufs_stat_and_metrics_show_the_tier(self):
        self.read_all()  # every group on disk
        with socket.socket() as probe:  # a free port, for the metrics endpoint
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        with self.mount("--metrics", f"127.0.0.1:{port}") as mnt:
            summary = subprocess.run([GPUFS_STAT, mnt], capture_output=True, text=True,
                                     check=True).stdout
            disk = [line for line in summary.splitlines() if line.endswith("gpufsd disk cache")]
            self.assertEqual(len(disk), 1, summary)
            self.assertIn("100%", disk[0])
            by_group = json.loads(subprocess.run([GPUFS_STAT, "--json", "--by", "group", mnt],
                                                 capture_output=True, text=True,
                                                 check=True).stdout)
            self.assertEqual(by_group["tiers"]["disk"]["percent"], 100)
            watch = subprocess.run([GPUFS_STAT, "-w", "--interval", "0.1", "--count", "1", mnt],
                                   capture_output=True, text=True, check=True).stdout
            self.assertIn("tier_used_bytes=", watch)
            files_below(mnt)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                metrics = r.read().decode()
            self.assertIn("# TYPE gpufs_disk_tier_hits_total counter\n", metrics)
            hits = stats_of(mnt)["tier"]["hits"]
            self.assertGreater(hits, 0)
            self.assertIn(f"\ngpufs_disk_tier_hits_total {hits}\n", metrics)
        with self.mount("--no-disk-cache") as mnt:
            summary = subprocess.run([GPUFS_STAT, mnt], capture_output=True, text=True,
                                     check=True).stdout
            self.assertNotIn("disk cache", summary)

    def test_two_mounts_at_once_share_one_copy_of_each_group(self):
        with self.mount() as one, self.mount() as two:
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                read = list(pool.map(files_below, [one, two]))
            self.assertEqual(read, [self.expected, self.expected])
            groups = stats_of(one)["groups"]
        copies = copies_below(os.path.join(self.xdg, "gpufs", "tier"))
        self.assertEqual(len(copies), groups)
        io, tier = self.read_all()
        self.assertEqual(io["requests"], 0)
        self.assertEqual(tier["damaged"], 0)

    def test_no_disk_cache_keeps_nothing(self):
        _, tier = self.read_all("--no-disk-cache")
        self.assertIsNone(tier)
        self.assertFalse(os.path.exists(os.path.join(self.xdg, "gpufs", "tier")))

    def test_a_damaged_copy_is_never_served(self):
        self.read_all()
        copies = copies_below(os.path.join(self.xdg, "gpufs", "tier"))
        for path in copies[::2]:  # flip a byte in the payload of every second copy
            with open(path, "r+b") as f:
                f.seek(os.path.getsize(path) - 5000)
                byte = f.read(1)
                f.seek(-1, os.SEEK_CUR)
                f.write(bytes([byte[0] ^ 0xFF]))
        with open(copies[1], "r+b") as f:  # and tear another
            f.truncate(os.path.getsize(copies[1]) // 2)
        io, tier = self.read_all()
        self.assertEqual(tier["damaged"], len(copies[::2]) + 1)
        self.assertGreater(io["requests"], 0)

    def test_member_reads_come_from_disk_when_memory_is_short(self):
        # A budget of one group: most reads bypass memory; their groups are fetched to
        # disk in the background and later members read from there.
        self.read_all("--cache-size", "160KiB")
        io, tier = self.read_all("--cache-size", "160KiB")
        self.assertEqual(io["requests"], 0, "the second pass fetched from the server")
        self.assertGreater(tier["slice_hits"], 0)

    def test_a_dataset_larger_than_memory_and_the_tier_reads_exact_bytes_every_epoch(self):
        # Memory for two groups, disk for half the dataset: the groups memory cannot take
        # are staged into the tier until it is full; then the tier keeps what it has (no
        # evictions, the same copies every epoch) and the rest is read from the server.
        rels = sorted(self.expected)
        bound = sum(len(b) for b in self.expected.values()) // 2
        folder = os.path.join(self.work, "half-tier")

        def epoch(mnt, seed):
            drop_page_cache()
            orders = [random.Random(seed * 10 + t).sample(rels, len(rels)) for t in range(4)]

            def read(order):
                got = {}
                for rel in order:
                    with open(os.path.join(mnt, rel), "rb") as f:
                        got[rel] = f.read()
                return got

            with concurrent.futures.ThreadPoolExecutor(4) as pool:
                for got in pool.map(read, orders):
                    self.assertEqual(got, {rel: self.expected[rel] for rel in got})

        with self.mount("--cache-size", "160KiB", "--io-size", "16KiB", "--disk-cache", folder,
                        "--disk-cache-size", str(bound)) as mnt:
            epoch(mnt, 1)
            stats = stats_of(mnt)
            staging = stats["tier"]["staging"]
            self.assertGreater(staging["staged"], 0)
            self.assertGreater(staging["full_skips"], 0, json.dumps(stats))
            self.assertEqual(staging["failed"], 0)
            kept = copies_below(folder)
            for seed in (2, 3):
                epoch(mnt, seed)
                self.assertEqual(copies_below(folder), kept, "the tier's copies changed")
            tier = stats_of(mnt)["tier"]
            self.assertEqual(tier["evictions"], 0)
            self.assertLessEqual(tier["used_bytes"], bound,
                                 json.dumps(tier) + str([(c, os.path.getsize(c)) for c in kept]))
            self.assertGreater(tier["slice_hits"], 0)
            self.assertEqual(stats_of(mnt)["io_errors"], 0)

    def test_a_full_disk_keeps_reads_working(self):
        # Smaller than the dataset: copies come and go within the folder's room.
        with self.small_disk("small", "256k") as small:
            with self.mount("--disk-cache", small, "--cache-size", "160KiB") as mnt:
                for _ in range(2):
                    drop_page_cache()
                    self.assertEqual(files_below(mnt), self.expected)
                tier = stats_of(mnt)["tier"]
                self.assertGreater(tier["write_skipped"] + tier["evictions"], 0)
                self.assertLessEqual(tier["used_bytes"], 256 << 10)
                # Now the disk is full to the last block, by someone else.
                fd = os.open(os.path.join(small, "filler"), os.O_WRONLY | os.O_CREAT)
                try:
                    while os.write(fd, b"\0" * 65536):
                        pass
                except OSError:
                    pass
                os.close(fd)
                drop_page_cache()
                self.assertEqual(files_below(mnt), self.expected)
                after = stats_of(mnt)["tier"]
            # Kept out: a write with no room, an eviction, or a group not staged at all
            # because the tier was full.
            def kept_out(t):
                return t["write_skipped"] + t["evictions"] + t["staging"]["full_skips"]
            self.assertGreater(kept_out(after), kept_out(tier))
            self.assertIn("filler", os.listdir(small), "the tier deleted a file not its own")

    def test_a_removed_folder_turns_the_tier_off(self):
        folder = os.path.join(self.work, "vanishing")
        m = self.mount("--disk-cache", folder, "--cache-size", "160KiB")
        with m as mnt:
            shutil.rmtree(folder)
            self.assertEqual(files_below(mnt), self.expected)
            self.assertEqual(files_below(mnt), self.expected)
            tier = stats_of(mnt)["tier"]
            self.assertFalse(tier["enabled"])
            self.assertIn("disk cache off", m.stderr())

    def test_a_changed_dataset_never_reads_old_copies(self):
        self.read_all()
        copies = set(copies_below(os.path.join(self.xdg, "gpufs", "tier")))
        blob = sorted(f for f in os.listdir(os.path.join(self.origin.root, "pack"))
                      if f != "index.gpufs")[0]
        path = os.path.join(self.origin.root, "pack", blob)
        stat = os.stat(path)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5 * 10**9))  # a new ETag
        try:
            io, tier = self.read_all()
            self.assertGreater(io["requests"], 0)
            new = set(copies_below(os.path.join(self.xdg, "gpufs", "tier"))) - copies
            self.assertGreater(len(new), 0, "the changed blob was served from its old copy")
        finally:
            os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))

    def test_an_unusable_folder_is_refused_naming_it(self):
        blocker = os.path.join(self.work, "a-file")
        open(blocker, "w").close()
        mnt = tempfile.mkdtemp(prefix="gpufs-mnt-")
        try:
            result = lib.run_gpufsd("mount", "-f", "--disk-cache", os.path.join(blocker, "x"),
                                    self.url, mnt, env=self.env)
        finally:
            os.rmdir(mnt)
        self.assertEqual(result.returncode, 1)
        self.assertIn(f"cannot use disk cache {blocker}/x", result.stderr)


if __name__ == "__main__":
    lib.exit_unless_fuse_usable()
    unittest.main(verbosity=2)
