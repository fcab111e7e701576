#!/usr/bin/python3
"""Reads through peer caches (--peers): real mounts of a dataset on a real origin (nginx,
and radosgw for S3 signing), each block read through the stock nginx peer cache that gpufs
ships (deploy/nginx/gpufs-peer.conf). Every byte equals the source; each slice leaves the
origin once however many nodes read it; a peer that dies, or serves an object that changed,
never costs a reader a wrong byte or an error."""
import concurrent.futures
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

import gpufs_testlib as lib
from gpufs_testlib import drop_page_cache, files_below, settled_stats, stats_of

sys.path.insert(0, lib.ROOT)
from tests.servers import ceph_s3, nginx  # noqa: E402

GPUFS_STAT = os.environ.get("GPUFS_STAT", os.path.join(lib.ROOT, "build", "cli", "gpufs-stat"))
GROUP_BYTES = "64KiB"
BLOCK = 16 << 10  # --peer-block, equal to the peers' slice size: ~35 blocks, on every peer




class Peers(unittest.TestCase):
    PEERS = 3

    @classmethod
    def setUpClass(cls):
        reason = nginx.NginxOrigin.skip_reason()
        if reason:
            raise unittest.SkipTest(reason)
        cls.work = tempfile.mkdtemp(prefix="gpufs-peers-")
        tree = lib.make_split_tree(os.path.join(cls.work, "tree"), (6, 12), (3, 4))
        cls.expected = files_below(tree)
        cls.served = os.path.join(cls.work, "served")
        cls.data_bytes = lib.blob_bytes(lib.pack_to_serve(tree, cls.served, GROUP_BYTES))
        cls.origin = nginx.NginxOrigin(cls.served).__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.origin.__exit__(None, None, None)
        shutil.rmtree(cls.work)

    def setUp(self):
        self.peers = [nginx.NginxPeer(self.origin.url, slice_bytes=BLOCK).__enter__()
                      for _ in range(self.PEERS)]
        self.origin_before = self.origin.served("/pack/")[1]

    def tearDown(self):
        for p in self.peers:
            p.close()

    def origin_bytes(self):
        return self.origin.served("/pack/")[1] - self.origin_before

    def mount(self, *options, cache="64MiB", peers=None, secret=True):
        """A mount through the peers, sending them the job's secret unless `secret` is
        false."""
        xdg = tempfile.mkdtemp(prefix="xdg-", dir=self.work)
        if "--peers-file" not in options:
            options += ("--peers", ",".join(p.url for p in (peers or self.peers)))
        if secret and "--peer-secret-file" not in options:
            options += ("--peer-secret-file", nginx.default_job_secret())
        return lib.Mount(self.origin.url + "/pack/", "--cache-size", cache, "--no-disk-cache",
                         "--peer-block", str(BLOCK), *options,
                         env={**os.environ, "XDG_CACHE_HOME": xdg})

    def test_every_file_reads_through_the_peers_and_each_slice_leaves_the_origin_once(self):
        ios = []
        for _ in range(3):  # three nodes, one after the other: the later ones hit
            with self.mount() as mnt:
                self.assertEqual(files_below(mnt), self.expected)
                ios.append(stats_of(mnt)["io"])
        for io in ios:
            self.assertEqual(io["bytes"], 0, io)  # nothing from the store itself
            self.assertGreaterEqual(io["peer_bytes"], self.data_bytes, io)
            self.assertEqual(io["peer_failures"], 0, io)
            # Every peer gets blocks: the routing spreads them.
            self.assertTrue(all(p["bytes"] > 0 for p in io["peers"]), io["peers"])
        # Each slice came from the origin once, for three nodes.
        self.assertLessEqual(self.origin_bytes(), self.data_bytes + BLOCK * 8)
        self.assertGreaterEqual(self.origin_bytes(), self.data_bytes)
        hits = sum(p.served("/pack/")[2].get("HIT", 0) for p in self.peers)
        self.assertGreater(hits, 0)

    def test_concurrent_nodes_collapse_their_misses(self):
        mounts = [self.mount() for _ in range(3)]
        mnts = [m.__enter__() for m in mounts]
        try:
            with concurrent.futures.ThreadPoolExecutor(len(mnts)) as pool:
                for tree in pool.map(files_below, mnts):
                    self.assertEqual(tree, self.expected)
        finally:
            for m in mounts:
                m.__exit__(None, None, None)
        self.assertLessEqual(self.origin_bytes(), self.data_bytes + BLOCK * 8)

    def test_a_dead_peer_is_skipped_then_used_again_when_it_answers(self):
        victim = self.peers[1]
        # Without a cache every read goes out, so the reads after the stop meet it.
        with self.mount(cache="0") as mnt:
            rels = sorted(self.expected)
            half = len(rels) // 2
            for rel in rels[:half]:
                with open(os.path.join(mnt, rel), "rb") as f:
                    self.assertEqual(f.read(), self.expected[rel], rel)
            victim.stop()
            for rel in rels[half:] + rels[:half]:
                with open(os.path.join(mnt, rel), "rb") as f:
                    self.assertEqual(f.read(), self.expected[rel], rel)
            io = stats_of(mnt)["io"]
            self.assertGreater(io["peer_failures"], 0, io)
            self.assertEqual(io["errors"], 0, io)
            self.assertFalse(io["peers"][1]["up"], io["peers"])
            victim.start()
            # It is tried again a few seconds after it failed: read until it answers.
            deadline = time.monotonic() + 30
            while not stats_of(mnt)["io"]["peers"][1]["up"] and time.monotonic() < deadline:
                drop_page_cache()
                for rel in rels:
                    with open(os.path.join(mnt, rel), "rb") as f:
                        self.assertEqual(f.read(), self.expected[rel], rel)
            self.assertTrue(stats_of(mnt)["io"]["peers"][1]["up"])

    def test_an_object_changed_behind_a_peer_is_read_from_the_store(self):
        # One peer: with more, the new ETag would route the object's blocks anew, most
        # likely to a peer without the old copy.
        with self.mount(peers=self.peers[:1]) as mnt:
            self.assertEqual(files_below(mnt), self.expected)
        # Same size, other bytes: the peers still hold the old slices under the same name.
        changed = os.path.join(self.served, "pack", sorted(
            n for n in os.listdir(os.path.join(self.served, "pack")) if n != "index.gpufs")[0])
        with open(changed, "rb") as f:
            original = f.read()
        try:
            # nginx's ETag is mtime-size: a new mtime is a new ETag for the same name.
            os.utime(changed, (time.time() + 5, time.time() + 5))
            m = self.mount(peers=self.peers[:1])
            with m as mnt:
                self.assertEqual(files_below(mnt), self.expected)
                io = stats_of(mnt)["io"]
                log = m.stderr()
            self.assertGreater(io["peer_fallbacks"], 0, io)
            self.assertGreater(io["bytes"], 0, io)
            self.assertIn("reading it from the store", log)
        finally:
            with open(changed, "wb") as f:
                f.write(original)

    def test_a_trickling_peer_is_left_for_the_store_within_the_deadline(self):
        reason = nginx.FaultProxy.skip_reason()
        if reason:
            self.skipTest(reason)
        # A peer that sends a byte every half second: never idle, never done.
        with nginx.FaultProxy(self.origin.url, rate_bytes_per_s=2) as trickler:
            m = self.mount("--connect-timeout", "1", "--deadline-allowance", "1",
                           "--min-rate", "1MiB", peers=[trickler])
            with m as mnt:
                start = time.monotonic()
                tree = lib.bounded(120, "reads past a trickling peer", files_below, mnt)
                elapsed = time.monotonic() - start
                io = stats_of(mnt)["io"]
                log = m.stderr()
        self.assertEqual(tree, self.expected)
        self.assertLess(elapsed, 60)  # generous: this checks that no read hangs
        self.assertGreater(io["peer_failures"], 0, io)
        self.assertGreater(io["bytes"], 0, io)  # the store served the blocks
        self.assertEqual(io["errors"], 0, io)
        self.assertIn("timed out", log)

    def test_peers_serve_only_mounts_with_the_jobs_secret(self):
        wrong = nginx.write_job_secret(os.path.join(tempfile.mkdtemp(dir=self.work), "s"))
        for options, secret in (((), False), (("--peer-secret-file", wrong), True)):
            with self.subTest(options=options):
                m = self.mount(*options, secret=secret)
                with m as mnt:
                    self.assertEqual(files_below(mnt), self.expected)
                    io = stats_of(mnt)["io"]
                    log = m.stderr()
                self.assertEqual(io["peer_bytes"], 0, io)
                self.assertGreater(io["peer_failures"], 0, io)
                self.assertGreaterEqual(io["bytes"], self.data_bytes, io)
                self.assertEqual(io["errors"], 0, io)
                self.assertIn("refused the request (HTTP 403)", log)
        with open(wrong) as f:
            self.assertNotIn(f.read().strip(), log, "the secret is never logged")
        # The job's secret opens them.
        with self.mount() as mnt:
            self.assertEqual(files_below(mnt), self.expected)
            io = stats_of(mnt)["io"]
        self.assertEqual((io["bytes"], io["peer_failures"]), (0, 0), io)

    def test_the_secret_is_in_no_stat_xattr_or_command_line(self):
        with open(nginx.default_job_secret()) as f:
            secret = f.read().strip()
        m = self.mount()
        with m as mnt:
            files_below(mnt)
            seen = [m.stderr(), str(stats_of(mnt))]
            seen += [os.getxattr(mnt, name).decode(errors="replace")
                     for name in os.listxattr(mnt)]
            pid = int(os.getxattr(mnt, "user.gpufs.pid"))
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                seen.append(f.read().decode(errors="replace"))
        for text in seen:
            self.assertNotIn(secret, text)

    def test_world_size_reads_files_alone_only_when_the_node_cannot_keep_the_dataset(self):
        for cache, whole in (("64MiB", True), ("256KiB", False)):
            m = self.mount("--world-size", "4", cache=cache)
            with m as mnt:
                self.assertEqual(files_below(mnt), self.expected)
                stats = settled_stats(mnt, lambda s: not whole or s["groups_loaded"] > 0,
                                      "a group read whole to finish loading")
                log = m.stderr()
            self.assertIn("--world-size 4: this node can keep", log)
            if whole:
                self.assertIn("reads whole groups", log)
                self.assertGreater(stats["groups_loaded"], 0)
            else:
                self.assertIn("reads each file alone", log)
                self.assertEqual(stats["groups_loaded"], 0)
                self.assertEqual(stats["member_reads"], len(self.expected))
            self.assertEqual(stats["io"]["bytes"], 0)

    def test_gpufs_stat_and_metrics_show_the_peers(self):
        with socket.socket() as probe:  # a free port, for the metrics endpoint
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.peers[2].stop()
        with self.mount("--metrics", f"127.0.0.1:{port}") as mnt:
            self.assertEqual(files_below(mnt), self.expected)
            io = stats_of(mnt)["io"]
            watch = subprocess.run([GPUFS_STAT, "-w", "--interval", "0.1", "--count", "1", mnt],
                                   capture_output=True, text=True, check=True).stdout
            self.assertIn("peers=3 peers_up=2 ", watch)
            self.assertIn(f"peer_failures={io['peer_failures']} ", watch)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                metrics = r.read().decode()
        self.assertIn("# TYPE gpufs_peer_bytes_total counter\n", metrics)
        self.assertIn(f'\ngpufs_peer_up{{peer="{self.peers[2].url}"}} 0\n', metrics)
        self.assertIn(f'\ngpufs_peer_up{{peer="{self.peers[0].url}"}} 1\n', metrics)
        self.assertIn(f'\ngpufs_peer_bytes_total{{peer="{self.peers[0].url}"}} '
                      f'{io["peers"][0]["bytes"]}\n', metrics)

    def test_bad_peer_lists_are_refused_naming_the_peer(self):
        mnt = tempfile.mkdtemp(dir=self.work)
        url = self.origin.url + "/pack/"
        for peers, message in (("ftp://h:1", "want http:// or https://"),
                               ("http://h:1/cache", "no path"),
                               ("http://h:1,http://h:1", "listed twice"),
                               ("http://h:x", "port")):
            result = lib.run_gpufsd("mount", url, mnt, "--peers", peers)
            self.assertEqual(result.returncode, 1, peers)
            self.assertIn(message, result.stderr)
        result = lib.run_gpufsd("mount", self.served, mnt, "--peers", self.peers[0].url)
        self.assertEqual(result.returncode, 1)
        self.assertIn("local", result.stderr)
        peers_file = os.path.join(self.work, "peers.txt")
        with open(peers_file, "w") as f:
            f.write("# the job's nodes\n" + "\n".join(p.url for p in self.peers) + "\n")
        with self.mount("--peers-file", peers_file) as mnt:
            self.assertEqual(files_below(mnt), self.expected)
            self.assertEqual([p["url"] for p in stats_of(mnt)["io"]["peers"]],
                             [p.url for p in self.peers])


class S3Peers(unittest.TestCase):
    """radosgw checks every request's SigV4 signature: the peer forwards the node's signed
    request with its own Range, and a later node's request, signed at another time, hits
    the copy the first one left."""

    @classmethod
    def setUpClass(cls):
        reason = ceph_s3.skip_reason() or nginx.NginxPeer.skip_reason()
        if reason:
            raise unittest.SkipTest(reason)
        lib.pack_in_s3(cls, "peers", (4, 10), (2, 4), GROUP_BYTES)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.work)

    def test_signed_requests_go_through_the_peers_and_hit_the_copy(self):
        with nginx.NginxPeer(self.s3.endpoint, slice_bytes=BLOCK) as a, \
                nginx.NginxPeer(self.s3.endpoint, slice_bytes=BLOCK) as b:
            ios = []
            for _ in range(2):
                xdg = tempfile.mkdtemp(prefix="xdg-", dir=self.work)
                env = {**os.environ, **self.s3.env(), "XDG_CACHE_HOME": xdg}
                with lib.Mount(f"s3://{self.bucket}/pack/", "--no-disk-cache",
                               "--peers", f"{a.url},{b.url}", "--peer-block", str(BLOCK),
                               "--peer-secret-file", a.secret_file,
                               env=env) as mnt:
                    self.assertEqual(files_below(mnt), self.expected)
                    ios.append(stats_of(mnt)["io"])
            for io in ios:
                self.assertEqual(io["bytes"], 0, io)
                self.assertEqual(io["peer_failures"], 0, io)
                self.assertEqual(io["peer_fallbacks"], 0, io)
            statuses = {}
            for p in (a, b):
                for k, v in p.served(f"/{self.bucket}/")[2].items():
                    statuses[k] = statuses.get(k, 0) + v
            self.assertGreater(statuses.get("HIT", 0), 0, statuses)
            self.assertGreater(statuses.get("MISS", 0), 0, statuses)


if __name__ == "__main__":
    lib.exit_unless_fuse_usable()
    unittest.main()
