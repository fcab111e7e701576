#!/usr/bin/python3
"""Bytes that crossed a trust boundary are checked against the SHA-256 digests of the
pack's index before they are served or kept: a peer cache (--peers) that rewrites bodies
can delay a read, never change it, and nothing it sent reaches the disk tier; a copy
planted in a shared disk cache, with block sums recomputed as anyone could, is not served.
Real mounts of a pack on a real origin (nginx), with the lying peer a small forwarding
proxy on loopback that flips bytes of every body it passes on."""
import ctypes
import os
import shutil
import struct
import sys
import tarfile
import tempfile
import time
import unittest

import gpufs_testlib as lib
from gpufs_testlib import files_below, stats_of

sys.path.insert(0, lib.ROOT)
from tests.servers import ceph_s3, nginx  # noqa: E402
from tests.servers.endless_listing import EndlessListing  # noqa: E402
from tests.servers.lying_peer import FlippingPeer  # noqa: E402

GROUP_BYTES = "64KiB"
BLOCK = 16 << 10  # --peer-block


def copies_below(folder):
    return sorted(os.path.join(d, f) for d, _, names in os.walk(folder) for f in names
                  if f.endswith(".grp"))


def wait_for_copies(mnt, tier_root):
    """The group copies the mount writes in the background, all on disk."""
    deadline = time.monotonic() + 30
    stats = stats_of(mnt)
    while len(copies_below(tier_root)) < stats["groups"] and time.monotonic() < deadline:
        time.sleep(0.05)
        stats = stats_of(mnt)
    return stats


_XXH = ctypes.CDLL("libxxhash.so.0")
_XXH.XXH3_64bits.restype = ctypes.c_uint64
_XXH.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]


def plant(copy):
    """Flips a byte in the middle of a tier copy's payload and writes the XXH3-64 of its
    block anew, as anyone who can write the folder could (cache/tier/disk_tier.cc's format: a
    32-byte fixed header, the name padded to 8, one sum per 64 KiB block, the payload at
    header_bytes)."""
    with open(copy, "rb") as f:
        data = bytearray(f.read())
    _, _, header_bytes, payload, block_bytes, name_bytes = struct.unpack_from("<8sIIQII", data)
    at = payload // 2
    data[header_bytes + at] ^= 0x01
    block = at // block_bytes
    start = header_bytes + block * block_bytes
    chunk = bytes(data[start:start + min(block_bytes, payload - block * block_bytes)])
    sums_at = 32 + (name_bytes + 7) // 8 * 8
    struct.pack_into("<Q", data, sums_at + 8 * block, _XXH.XXH3_64bits(chunk, len(chunk)))
    os.chmod(copy, 0o600)
    with open(copy, "wb") as f:
        f.write(data)


class LyingPeer(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        reason = nginx.NginxOrigin.skip_reason()
        if reason:
            raise unittest.SkipTest(reason)
        cls.work = tempfile.mkdtemp(prefix="gpufs-untrusted-")
        tree = lib.make_split_tree(os.path.join(cls.work, "tree"), (4, 10), (2, 4))
        cls.expected = files_below(tree)
        cls.served = os.path.join(cls.work, "served")
        lib.pack_to_serve(tree, cls.served, GROUP_BYTES)
        with tarfile.open(os.path.join(cls.served, "set.tar"), "w") as tar:
            tar.add(tree, arcname=".")
        _, mytar = lib.make_dataset(os.path.join(cls.work, "m"), 2, 3, 2)
        shutil.copytree(mytar, os.path.join(cls.served, "mytar"))
        indexed = os.path.join(cls.served, "mytar-indexed")
        shutil.copytree(mytar, indexed)
        result = lib.run_gpufsd("index", indexed)
        assert result.returncode == 0, result.stderr
        cls.origin = nginx.NginxOrigin(cls.served).__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.origin.__exit__(None, None, None)
        shutil.rmtree(cls.work)

    def setUp(self):
        self.peer = FlippingPeer(self.origin.url)
        self.env = {**os.environ, "XDG_CACHE_HOME": tempfile.mkdtemp(prefix="xdg-", dir=self.work)}

    def tearDown(self):
        self.peer.close()

    def mount(self, *options, peers=True):
        via = ("--peers", self.peer.url, "--peer-block", str(BLOCK)) if peers else ()
        return lib.Mount(self.origin.url + "/pack/", *via, *options, env=self.env)

    def assert_caught(self, io, log):
        self.assertGreater(self.peer.flipped, 0)
        self.assertGreater(io["peer_mismatches"], 0, io)
        self.assertEqual(io["errors"], 0, io)
        self.assertIn(f"peer {self.peer.url}: it sent bytes of ", log)
        self.assertIn("do not match the SHA-256 of the index", log)

    def test_member_reads_never_serve_the_peers_bytes(self):
        for options in (("--cache-size", "0"),
                        ("--world-size", "4", "--cache-size", "256KiB", "--no-disk-cache")):
            with self.subTest(options=options):
                m = self.mount(*options)
                with m as mnt:
                    self.assertEqual(files_below(mnt), self.expected)
                    io = stats_of(mnt)["io"]
                    log = m.stderr()
                self.assert_caught(io, log)
                self.assertGreater(io["bytes"], 0, io)  # the store sent what the peer spoiled

    def test_whole_group_loads_never_serve_or_keep_the_peers_bytes(self):
        tier = os.path.join(self.work, "tier-groups")
        m = self.mount("--cache-size", "64MiB", "--disk-cache", tier)
        with m as mnt:
            self.assertEqual(files_below(mnt), self.expected)
            stats = wait_for_copies(mnt, tier)
            log = m.stderr()
        self.assert_caught(stats["io"], log)
        # The index, which the digests come from, came from the store alone.
        self.assertFalse([p for p in self.peer.paths if p.endswith("index.gpufs")])
        self.assertGreater(stats["groups_loaded"], 0, stats)
        self.assertGreater(len(copies_below(tier)), 0)
        # No peer at all now: the copies on disk are all a remount has, and each is checked
        # against the digests before it is served.
        self.peer.close()
        self.peer = FlippingPeer(self.origin.url)  # for tearDown
        with self.mount("--cache-size", "64MiB", "--disk-cache", tier, peers=False) as mnt:
            self.assertEqual(files_below(mnt), self.expected)
            stats = stats_of(mnt)
        self.assertEqual(stats["tier"]["hash_mismatches"], 0, stats["tier"])
        self.assertGreater(stats["tier"]["hits"], 0, stats["tier"])
        self.assertEqual(stats["io"]["bytes"], 0, stats["io"])

    def test_sources_without_digests_are_refused_with_peers_naming_the_way_to_add_them(self):
        mnt = tempfile.mkdtemp(dir=self.work)
        for url in (self.origin.url + "/set.tar", self.origin.url + "/mytar/"):
            result = lib.run_gpufsd("mount", url, mnt, "--peers", self.peer.url, env=self.env)
            self.assertEqual(result.returncode, 1, result.stderr)
            self.assertIn(f"cannot use --peers with {url}: its index has no SHA-256 of each "
                          "file, so a peer's bytes could not be checked", result.stderr)
            self.assertIn("gpufsd pack", result.stderr)
            self.assertIn("gpufsd index", result.stderr)
        self.assertEqual(self.peer.paths, [])


    def test_a_mytar_folder_with_digests_from_gpufsd_index_reads_through_peers(self):
        with lib.Mount(os.path.join(self.served, "mytar-indexed"), env=self.env) as mnt:
            expected = files_below(mnt)  # the folder mounted where it lies
        url = self.origin.url + "/mytar-indexed/"
        m = lib.Mount(url, "--cache-size", "0", "--peers", self.peer.url, env=self.env)
        with m as mnt:
            self.assertEqual(files_below(mnt), expected)
            self.assertEqual(os.getxattr(mnt, "user.gpufs.format"), b"mytar+index")
            io = stats_of(mnt)["io"]
            log = m.stderr()
        self.assert_caught(io, log)


    def test_a_mytar_folder_whose_index_cannot_be_kept_mounts_from_its_text(self):
        with lib.Mount(os.path.join(self.served, "mytar-indexed"), env=self.env) as mnt:
            expected = files_below(mnt)
        xdg = tempfile.mkdtemp(prefix="xdg-open-", dir=self.work)
        os.mkdir(os.path.join(xdg, "gpufs"))
        os.chmod(os.path.join(xdg, "gpufs"), 0o777)  # refused as a private cache folder
        m = lib.Mount(self.origin.url + "/mytar-indexed/", "--no-disk-cache",
                      env={**os.environ, "XDG_CACHE_HOME": xdg})
        with m as mnt:
            self.assertEqual(files_below(mnt), expected)
            self.assertEqual(os.getxattr(mnt, "user.gpufs.format"), b"mytar")
            log = m.stderr()
        self.assertIn("not using the index.gpufs beside", log)
        self.assertIn("writable by others", log)


class LyingS3Peer(unittest.TestCase):
    """The same through radosgw, which checks the SigV4 signature the peer passes on."""

    def test_signed_reads_through_a_lying_peer_are_the_stores_bytes(self):
        reason = ceph_s3.skip_reason()
        if reason:
            raise unittest.SkipTest(reason)
        work = tempfile.mkdtemp(prefix="gpufs-s3untrusted-")
        s3 = ceph_s3.shared()
        peer = FlippingPeer(s3.endpoint)
        try:
            tree = lib.make_split_tree(os.path.join(work, "tree"), (3, 8), (2, 3))
            expected = files_below(tree)
            pack = lib.pack_to_serve(tree, work, GROUP_BYTES)
            bucket = ceph_s3.unique_bucket("untrusted")
            s3.make_bucket(bucket)
            s3.upload_tree(pack, bucket, "pack/")
            env = {**os.environ, **s3.env(), "XDG_CACHE_HOME": os.path.join(work, "xdg")}
            for cache in ("0", "64MiB"):
                m = lib.Mount(f"s3://{bucket}/pack/", "--cache-size", cache, "--no-disk-cache",
                              "--peers", peer.url, "--peer-block", str(BLOCK), env=env)
                with m as mnt:
                    self.assertEqual(files_below(mnt), expected)
                    io = stats_of(mnt)["io"]
                    log = m.stderr()
                self.assertGreater(io["peer_mismatches"], 0, io)
                self.assertEqual(io["errors"], 0, io)
                self.assertIn(f"peer {peer.url}: it sent bytes of ", log)
        finally:
            peer.close()
            shutil.rmtree(work)


class PlantedTierCopy(unittest.TestCase):
    """A disk cache another user can write: a copy changed there, its XXH3 block sums
    recomputed, passes the tier's own checks but not the pack's SHA-256."""

    def test_a_planted_copy_is_deleted_and_read_from_the_source(self):
        work = tempfile.mkdtemp(prefix="gpufs-planted-")
        try:
            tree = lib.make_split_tree(os.path.join(work, "tree"), (3, 8), (2, 3))
            expected = files_below(tree)
            pack = lib.pack_to_serve(tree, os.path.join(work, "served"), GROUP_BYTES)
            tier = os.path.join(work, "tier")
            options = ("--cache-size", "64MiB", "--disk-cache", tier)
            with lib.Mount(pack, *options) as mnt:
                self.assertEqual(files_below(mnt), expected)
                wait_for_copies(mnt, tier)
            copies = copies_below(tier)
            self.assertGreater(len(copies), 1)
            for copy in copies:
                plant(copy)
            with lib.Mount(pack, *options) as mnt:
                self.assertEqual(files_below(mnt), expected)
                stats = stats_of(mnt)
            self.assertEqual(stats["tier"]["hash_mismatches"], len(copies), stats["tier"])
            self.assertEqual(stats["tier"]["damaged"], 0, stats["tier"])  # the sums were valid
        finally:
            shutil.rmtree(work)


class EndlessListingStore(unittest.TestCase):
    """A store whose listing never stops saying "truncated" stops the mount with an error
    naming what was listed, in bounded time and memory, rather than listing forever."""

    def mount_fails(self, keys_per_page):
        work = tempfile.mkdtemp(prefix="gpufs-endless-")
        try:
            os.mkdir(os.path.join(work, "mnt"))
            with EndlessListing(keys_per_page) as store:
                env = {"PATH": os.environ.get("PATH", ""), "HOME": work,
                       "XDG_CACHE_HOME": os.path.join(work, "xdg")}
                result = lib.run_gpufsd(
                    "mount", "-f", "--no-sign-request", "--endpoint", store.url,
                    "--cache-size", "16MiB", "--no-disk-cache", "s3://bucket/data/",
                    os.path.join(work, "mnt"), timeout=120, env=env)
                return result, store.pages
        finally:
            shutil.rmtree(work)

    def test_empty_pages_stop_at_the_page_bound(self):
        result, pages = self.mount_fails(0)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("cannot list s3://bucket/data/", result.stderr)
        self.assertIn("in 4096 pages", result.stderr)
        self.assertEqual(pages, 4096)

    def test_full_pages_stop_at_the_key_bound(self):
        result, pages = self.mount_fails(1000)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("cannot list s3://bucket/data/", result.stderr)
        self.assertIn("past 1049000 keys", result.stderr)
        self.assertEqual(pages, 1049)


if __name__ == "__main__":
    lib.exit_unless_fuse_usable()
    unittest.main()
