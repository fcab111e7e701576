#!/usr/bin/python3
"""Datasets in a real S3 store (Ceph's radosgw) and on a real HTTP server (nginx), through
real mounts: every byte equal to the source, and each fault an error or a retry, never
other bytes, a hang or a dead daemon."""
import errno
import os
import shutil
import sys
import tarfile
import tempfile
import time
import unittest

import gpufs_testlib as lib
from gpufs_testlib import files_below, stats_of

sys.path.insert(0, lib.ROOT)
from tests.servers import ceph_s3, nginx  # noqa: E402

BUCKET = "gpufs-data"



def make_datasets(work):
    """{name: (local path, expected files)}: a native pack, a mytar folder and a tar, each
    of real JPEGs with awkward names."""
    tree = lib.make_split_tree(os.path.join(work, "tree"), (4, 7), (3, 4))
    expected = files_below(tree)
    pack = os.path.join(work, "pack")
    result = lib.run_gpufsd("pack", tree, pack, "--group-bytes", "96KiB")
    assert result.returncode == 0, result.stderr
    mtree, mytar = lib.make_dataset(os.path.join(work, "m"), classes=3, per_class=8,
                                    group_size=4)
    archive = os.path.join(work, "archive", "train.tar")
    os.makedirs(os.path.dirname(archive))
    with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as t:
        t.add(tree, arcname="dataset")
    nested = os.path.join(work, "archive", "nested.tar")  # like ILSVRC2012_img_train.tar
    train = os.path.join(tree, "train")
    with tarfile.open(nested, "w") as outer:
        for cls in sorted(os.listdir(train)):
            inner = os.path.join(work, "archive", cls + ".tar")
            with tarfile.open(inner, "w") as t:
                for name in sorted(os.listdir(os.path.join(train, cls))):
                    t.add(os.path.join(train, cls, name), arcname=name)
            outer.add(inner, arcname=cls + ".tar")
    return {"pack": (pack, expected), "mytar": (mytar, files_below(mtree)),
            "tar": (archive, expected), "nested": (nested, files_below(train))}


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


class Remote(unittest.TestCase):
    """Shared: a scratch folder with the three datasets."""

    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="gpufs-remote-")
        cls.datasets = make_datasets(cls.work)
        cls.cache = os.path.join(cls.work, "xdg-cache")  # tar indexes of this run only

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.work)

    def env(self, **extra):
        return {**os.environ, "XDG_CACHE_HOME": self.cache, **extra}

    def check_every_file(self, url, expected, *options, env=None):
        """Mounts url and compares every file; returns the source stats."""
        with lib.Mount(url, *options, env=env or self.env()) as mnt:
            self.assertEqual(files_below(mnt), expected, (url, options))
            # A folder's URL is reported with its slash.
            self.assertEqual(os.getxattr(mnt, "user.gpufs.source").decode(),
                             url if url.endswith((".tar", "/")) else url + "/")
            io = stats_of(mnt)["io"]
        self.assertGreater(io["requests"], 0)
        self.assertEqual(io["errors"], 0)
        return io


class S3(Remote):
    @classmethod
    def setUpClass(cls):
        reason = ceph_s3.skip_reason()
        if reason:
            raise unittest.SkipTest(reason)
        super().setUpClass()
        cls.s3 = ceph_s3.CephS3().__enter__()
        cls.s3.make_bucket(BUCKET)
        for name in ("pack", "mytar"):
            cls.s3.upload_tree(cls.datasets[name][0], BUCKET, name)
        cls.s3.put_file(BUCKET, "archives/train.tar", cls.datasets["tar"][0])
        cls.s3.put_file(BUCKET, "archives/nested.tar", cls.datasets["nested"][0])

    @classmethod
    def tearDownClass(cls):
        cls.s3.__exit__(None, None, None)
        super().tearDownClass()

    def env(self, **extra):
        return super().env(**{**self.s3.env(), **extra})

    def upload_copy(self, name, prefix):
        """A fresh copy of a dataset under prefix, for a test that changes it."""
        self.s3.upload_tree(self.datasets[name][0], BUCKET, prefix)
        return f"s3://{BUCKET}/{prefix}/"

    def test_every_format_reads_byte_exact_with_and_without_cache(self):
        urls = {"pack": f"s3://{BUCKET}/pack/", "mytar": f"s3://{BUCKET}/mytar/",
                "tar": f"s3://{BUCKET}/archives/train.tar",
                "nested": f"s3://{BUCKET}/archives/nested.tar"}
        for name, url in urls.items():
            for options in (("--cache-size", "64MiB"), ("--cache-size", "0")):
                io = self.check_every_file(url, self.datasets[name][1], *options)
                self.assertEqual(io["kind"], "s3")

    def test_tar_index_is_kept_and_reused_until_the_object_changes(self):
        cache = tempfile.mkdtemp(prefix="gpufs-xdg-", dir=self.work)
        url = f"s3://{BUCKET}/reindex/train.tar"
        self.s3.put_file(BUCKET, "reindex/train.tar", self.datasets["tar"][0])
        env = self.env(XDG_CACHE_HOME=cache)
        first = lib.Mount(url, env=env)
        with first:
            self.assertIn("listed", first.stderr())
        second = lib.Mount(url, env=env)
        with second as mnt:
            self.assertNotIn("listed", second.stderr())
            self.assertEqual(files_below(mnt), self.datasets["tar"][1])
        changed = os.path.join(self.work, "changed.tar")
        with tarfile.open(changed, "w", format=tarfile.PAX_FORMAT) as t:
            t.add(os.path.join(self.work, "tree"), arcname="dataset")
            extra = os.path.join(self.work, "tree", "train")
            first_class = sorted(os.listdir(extra))[0]
            src = os.path.join(extra, first_class, sorted(os.listdir(
                os.path.join(extra, first_class)))[0])
            t.add(src, arcname=f"dataset/train/{first_class}/added.JPEG")
        self.s3.put_file(BUCKET, "reindex/train.tar", changed)
        third = lib.Mount(url, env=env)
        with third as mnt:
            self.assertIn("listed", third.stderr())
            self.assertTrue(os.path.exists(os.path.join(mnt, "train", first_class, "added.JPEG")))

    def test_an_incomplete_upload_is_refused_naming_the_object(self):
        url = self.upload_copy("pack", "partial")
        keys = sorted(k for k, _, _ in self.s3.list(BUCKET, "partial/")
                      if not k.endswith("index.gpufs"))
        victim = keys[len(keys) // 2]
        data = self.s3.get(BUCKET, victim)
        self.s3.put(BUCKET, victim, data[: len(data) // 2])
        result = lib.run_gpufsd("mount", url, tempfile.mkdtemp(dir=self.work), env=self.env())
        self.assertEqual(result.returncode, 1)
        self.assertIn(f"s3://{BUCKET}/{victim} is {len(data) // 2} bytes", result.stderr)
        self.assertIn("incomplete", result.stderr)
        self.s3.delete(BUCKET, victim)
        result = lib.run_gpufsd("mount", url, tempfile.mkdtemp(dir=self.work), env=self.env())
        self.assertEqual(result.returncode, 1)
        self.assertIn(f"s3://{BUCKET}/{victim} is missing", result.stderr)

    def test_an_object_changed_or_deleted_after_mount_gives_eio_not_other_bytes(self):
        url = self.upload_copy("pack", "changing")
        mount = lib.Mount(url, "--cache-size", "0", env=self.env())
        with mount as mnt:
            by_blob = {}
            for rel in sorted(self.datasets["pack"][1]):
                blob = os.getxattr(os.path.join(mnt, rel), "user.gpufs.blob").decode()
                by_blob.setdefault(blob, []).append(rel)
            blobs = sorted(b for b in by_blob if len(by_blob[b]) >= 2)
            changed, deleted = blobs[0], blobs[1]
            key = changed[len(f"s3://{BUCKET}/"):]
            data = bytearray(self.s3.get(BUCKET, key))
            data[0] ^= 0xFF  # same size, other bytes: only the ETag tells
            self.s3.put(BUCKET, key, bytes(data))
            self.s3.delete(BUCKET, deleted[len(f"s3://{BUCKET}/"):])
            for blob in (changed, deleted):
                with self.assertRaises(OSError) as caught:
                    with open(os.path.join(mnt, by_blob[blob][0]), "rb") as f:
                        f.read()
                self.assertEqual(caught.exception.errno, errno.EIO)
            expected = self.datasets["pack"][1]
            for blob, rels in by_blob.items():
                if blob not in (changed, deleted):
                    for rel in rels:
                        with open(os.path.join(mnt, rel), "rb") as f:
                            self.assertEqual(f.read(), expected[rel], rel)
            log = mount.stderr()
        self.assertIn(changed, log)
        self.assertIn(deleted, log)

    def test_wrong_credentials_are_refused_with_the_store_message(self):
        # Another first character: the key is random and may itself begin with any one.
        wrong = ("y" if self.s3.secret_key.startswith("x") else "x") + self.s3.secret_key[1:]
        result = lib.run_gpufsd("mount", f"s3://{BUCKET}/pack/", tempfile.mkdtemp(dir=self.work),
                                env=self.env(AWS_SECRET_ACCESS_KEY=wrong))
        self.assertEqual(result.returncode, 1)
        self.assertIn("SignatureDoesNotMatch", result.stderr)
        self.assertNotIn(wrong, result.stderr)
        self.assertNotIn(self.s3.secret_key, result.stderr)

    def test_a_missing_bucket_or_prefix_is_refused_naming_it(self):
        mnt = tempfile.mkdtemp(dir=self.work)
        result = lib.run_gpufsd("mount", "s3://no-such-bucket/pack/", mnt, env=self.env())
        self.assertEqual(result.returncode, 1)
        self.assertIn("NoSuchBucket", result.stderr)
        self.assertIn("no-such-bucket", result.stderr)
        result = lib.run_gpufsd("mount", f"s3://{BUCKET}/nothing-here/", mnt, env=self.env())
        self.assertEqual(result.returncode, 1)
        self.assertIn(f"s3://{BUCKET}/nothing-here/", result.stderr)
        self.assertIn("neither", result.stderr)

    def test_the_store_down_mid_epoch_gives_eio_then_reads_work_again(self):
        url = f"s3://{BUCKET}/pack/"
        expected = self.datasets["pack"][1]
        rels = sorted(expected)
        half = len(rels) // 2
        with lib.Mount(url, "--cache-size", "0", "--retry-seconds", "2",
                       env=self.env()) as mnt:
            for rel in rels[:half]:
                with open(os.path.join(mnt, rel), "rb") as f:
                    self.assertEqual(f.read(), expected[rel])
            self.s3.stop()
            try:
                with self.assertRaises(OSError) as caught:
                    with open(os.path.join(mnt, rels[half]), "rb") as f:
                        f.read()
                self.assertEqual(caught.exception.errno, errno.EIO)
            finally:
                self.s3.start()
            for rel in rels[half:]:
                with open(os.path.join(mnt, rel), "rb") as f:
                    self.assertEqual(f.read(), expected[rel], rel)
            io = stats_of(mnt)["io"]
        self.assertGreater(io["retries"], 0)
        self.assertGreater(io["errors"], 0)

    def test_injected_503s_are_retried_and_counted(self):
        reason = nginx.FaultProxy.skip_reason()
        if reason:
            self.skipTest(reason)
        expected = self.datasets["pack"][1]
        with nginx.FaultProxy(self.s3.endpoint) as proxy:
            with lib.Mount(f"s3://{BUCKET}/pack/", "--cache-size", "0", "--endpoint", proxy.url,
                           env=self.env()) as mnt:
                proxy.set(fail_next=4, fail_status=503)  # to the daemon's reads
                self.assertEqual(files_below(mnt), expected)
                io = stats_of(mnt)["io"]
            self.assertEqual(proxy.injected(), 4)
        self.assertEqual(io["errors"], 0)
        self.assertGreaterEqual(io["retries"], 4)


class Http(Remote):
    @classmethod
    def setUpClass(cls):
        reason = nginx.NginxOrigin.skip_reason()
        if reason:
            raise unittest.SkipTest(reason)
        super().setUpClass()
        cls.root = os.path.join(cls.work, "www")
        for name in ("pack", "mytar"):
            shutil.copytree(cls.datasets[name][0], os.path.join(cls.root, name))
        shutil.copy(cls.datasets["tar"][0], os.path.join(cls.root, "train.tar"))
        cls.origin = nginx.NginxOrigin(cls.root).__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.origin.__exit__(None, None, None)
        super().tearDownClass()

    def test_every_format_reads_byte_exact_with_and_without_cache(self):
        urls = {"pack": f"{self.origin.url}/pack/", "mytar": f"{self.origin.url}/mytar",
                "tar": f"{self.origin.url}/train.tar"}
        for name, url in urls.items():
            for options in (("--cache-size", "64MiB"), ("--cache-size", "0")):
                io = self.check_every_file(url, self.datasets[name][1], *options)
                self.assertEqual(io["kind"], "http")

    def test_the_server_down_mid_epoch_gives_eio_then_reads_work_again(self):
        expected = self.datasets["pack"][1]
        rels = sorted(expected)
        with lib.Mount(f"{self.origin.url}/pack/", "--cache-size", "0", "--retry-seconds", "1",
                       env=self.env()) as mnt:
            self.origin.stop()
            try:
                with self.assertRaises(OSError) as caught:
                    with open(os.path.join(mnt, rels[0]), "rb") as f:
                        f.read()
                self.assertEqual(caught.exception.errno, errno.EIO)
            finally:
                self.origin.start()
            self.assertEqual(files_below(mnt), expected)

    def test_a_trickling_server_gives_eio_within_its_deadline_not_a_hang(self):
        reason = nginx.FaultProxy.skip_reason()
        if reason:
            self.skipTest(reason)
        expected = self.datasets["pack"][1]
        rel = sorted(expected)[0]
        # Each attempt: 1 s to connect, 1 s more, and its size (tens of KB) at 1 MiB/s.
        retry_s, deadline_s = 2, 1 + 1 + 1
        with nginx.FaultProxy(self.origin.url) as proxy:
            with lib.Mount(f"{proxy.url}/pack/", "--cache-size", "0", "--retry-seconds",
                           str(retry_s), "--connect-timeout", "1", "--deadline-allowance", "1",
                           "--min-rate", "1MiB", env=self.env()) as mnt:
                proxy.set(rate_bytes_per_s=2)  # a byte every half second: never idle
                start = time.monotonic()
                with self.assertRaises(OSError) as caught:
                    lib.bounded(120, "a read from a trickling server", read_file,
                                os.path.join(mnt, rel))
                elapsed = time.monotonic() - start
                self.assertEqual(caught.exception.errno, errno.EIO)
                # Generous: this checks that the read ends, not how fast.
                self.assertLess(elapsed, retry_s + deadline_s + 30)
                proxy.set(rate_bytes_per_s=0)
                self.assertEqual(files_below(mnt), expected)
                io = stats_of(mnt)["io"]
        self.assertGreater(io["errors"], 0)

    def test_a_slow_first_listing_of_a_tar_shows_its_progress(self):
        reason = nginx.FaultProxy.skip_reason()
        if reason:
            self.skipTest(reason)
        members = len(self.datasets["tar"][1])
        # A remote tar is listed a few headers a request, a round trip each (5 requests
        # here): 700 ms each makes it take longer than the 2 s after which progress shows.
        delay_ms = 700
        env = self.env(XDG_CACHE_HOME=tempfile.mkdtemp(prefix="gpufs-xdg-", dir=self.work))
        with nginx.FaultProxy(self.origin.url, delay_ms=delay_ms) as proxy:
            url = f"{proxy.url}/train.tar"
            mount = lib.Mount(url, "--cache-size", "0", env=env)
            with mount as mnt:
                self.assertTrue(os.listdir(mnt))  # the files are read in the other tests
                log = mount.stderr()
            # Off a terminal: a plain line every ten seconds, the first after 2 s, and the
            # last when done.
            lines = [ln for ln in log.splitlines() if ln.startswith(f"listing {url} [")]
            self.assertGreaterEqual(len(lines), 2, log)
            self.assertRegex(lines[-1], rf"100%  {members} files  .* ETA done$")
            # The index is kept: a second mount lists nothing and shows no progress.
            mount = lib.Mount(url, "--cache-size", "0", env=env)
            with mount:
                self.assertNotIn("listing ", mount.stderr())

    def test_a_folder_without_a_dataset_is_refused_naming_it(self):
        result = lib.run_gpufsd("mount", f"{self.origin.url}/nothing/",
                                tempfile.mkdtemp(dir=self.work), env=self.env())
        self.assertEqual(result.returncode, 1)
        self.assertIn(f"{self.origin.url}/nothing/", result.stderr)


if __name__ == "__main__":
    lib.exit_unless_fuse_usable()
    unittest.main()
