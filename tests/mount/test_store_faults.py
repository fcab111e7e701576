#!/usr/bin/python3
"""Outages of the store under a mount: radosgw behind a TCP forwarder that the test cuts
(new connections refused, open ones reset) and restores. --retry-seconds is a deadline per
read: an outage shorter than it costs time, never an error; a longer one is EIO after about
the deadline, and the mount reads again once the store is back."""
import errno
import os
import shutil
import sys
import tempfile
import threading
import time
import unittest
from urllib.parse import urlsplit

import gpufs_testlib as lib
from gpufs_testlib import files_below, stats_of

sys.path.insert(0, lib.ROOT)
from tests.servers import ceph_s3  # noqa: E402
from tests.servers.tcp_forwarder import TcpForwarder  # noqa: E402

GROUP_BYTES = "48KiB"


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


class StoreOutage(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        reason = ceph_s3.skip_reason()
        if reason:
            raise unittest.SkipTest(reason)
        lib.pack_in_s3(cls, "outage", (4, 8), (2, 4), GROUP_BYTES)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.work)

    def mount(self, forwarder, *options):
        """A mount through the forwarder whose every read goes to the store once the
        kernel's page cache is dropped: no group cache, no disk cache."""
        env = {**os.environ, **self.s3.env(), "AWS_ENDPOINT_URL": forwarder.url,
               "XDG_CACHE_HOME": tempfile.mkdtemp(prefix="xdg-", dir=self.work)}
        return lib.Mount(f"s3://{self.bucket}/pack/", "--cache-size", "0", "--no-disk-cache",
                         *options, env=env)

    def forwarder(self):
        target = urlsplit(self.s3.endpoint)
        return TcpForwarder(target.hostname, target.port)

    def test_an_outage_shorter_than_the_deadline_costs_no_read(self):
        names = sorted(self.expected)
        with self.forwarder() as fwd, self.mount(fwd) as mnt:
            outage = {"start": None, "end": None}
            errors, reads_in_outage = [], [0]

            def epochs():
                # Reads until a second after the outage: an epoch, then the next.
                while outage["end"] is None or time.monotonic() < outage["end"] + 1:
                    lib.drop_page_cache()
                    for name in names:
                        began = time.monotonic()
                        try:
                            data = read_bytes(os.path.join(mnt, name))
                        except OSError as e:
                            errors.append(f"{name}: {e}")
                            continue
                        if data != self.expected[name]:
                            errors.append(f"{name}: other bytes")
                        if outage["start"] is not None and outage["end"] is None or \
                                outage["end"] is not None and began < outage["end"]:
                            reads_in_outage[0] += 1

            reader = threading.Thread(target=epochs)
            reader.start()
            time.sleep(0.5)  # reads are under way
            fwd.close()
            outage["start"] = time.monotonic()
            time.sleep(3)  # the outage: what is measured is its length
            fwd.open()
            outage["end"] = time.monotonic()
            reader.join(60)
            self.assertFalse(reader.is_alive(), "the reads did not end")
            io = stats_of(mnt)["io"]
        self.assertEqual(errors, [])
        self.assertGreater(reads_in_outage[0], 0)
        self.assertGreater(io["retries"], 0, io)
        self.assertEqual(io["errors"], 0, io)

    def test_an_outage_past_the_deadline_is_eio_then_reads_work_again(self):
        name = sorted(self.expected)[3]
        with self.forwarder() as fwd:
            mount = self.mount(fwd, "--retry-seconds", "3")
            with mount as mnt:
                path = os.path.join(mnt, name)
                self.assertEqual(read_bytes(path), self.expected[name])
                lib.drop_page_cache()
                fwd.close()
                reopen = threading.Timer(8, fwd.open)  # an 8 s outage
                reopen.start()
                try:
                    began = time.monotonic()
                    with self.assertRaises(OSError) as failed:
                        read_bytes(path)
                    took = time.monotonic() - began
                finally:
                    reopen.join()
                self.assertEqual(failed.exception.errno, errno.EIO, failed.exception)
                # About the deadline: not before it, and not two of them (3 s each): the
                # kernel asks once more for a page whose readahead failed, and that read
                # makes one attempt, the store having just given up.
                self.assertGreaterEqual(took, 2.9)
                self.assertLess(took, 5.5)
                self.assertEqual(read_bytes(path), self.expected[name])
                self.assertEqual(files_below(mnt), self.expected)
                io = stats_of(mnt)["io"]
                log = mount.stderr()
        self.assertGreaterEqual(io["errors"], 1, io)
        # The last reason, the attempts and the time.
        self.assertRegex(log, r"gave up after \d+ attempts in 3\.\d s, the retry deadline")


if __name__ == "__main__":
    lib.exit_unless_fuse_usable()
    unittest.main()
