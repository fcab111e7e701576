#!/usr/bin/python3
"""The test servers themselves: the nginx origin, the fault-injecting proxy (alone and in
front of Ceph's S3 endpoint) and the Ceph store's restart. Each class skips, saying why,
where its programs are missing."""
import http.client
import os
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from servers import ceph_s3, nginx  # noqa: E402
from servers.procs import exit_on_sigterm  # noqa: E402
from servers.s3client import S3Error  # noqa: E402

SLOWDOWN = (b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate."
            b"</Message></Error>")


def fetch(url, headers=None):
    """(status, headers, body) of a GET; error statuses are answers, not exceptions."""
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def refused(url):
    """True when a connection to url's port is refused."""
    try:
        urllib.request.urlopen(url, timeout=10)
    except urllib.error.URLError as e:
        return isinstance(e.reason, ConnectionRefusedError)
    return False


class OriginAndProxy(unittest.TestCase):
    """One origin serving `cls.root` and one proxy in front of it, shared by the tests."""

    @classmethod
    def setUpClass(cls):
        reason = nginx.NginxOrigin.skip_reason() or nginx.FaultProxy.skip_reason()
        if reason:
            raise unittest.SkipTest(reason)
        # A TemporaryDirectory is removed at exit even when an interrupt skips cleanups.
        cls.root_dir = tempfile.TemporaryDirectory(prefix="gpufs-origin-root-")
        cls.addClassCleanup(cls.root_dir.cleanup)
        cls.root = cls.root_dir.name
        cls.data = os.urandom(3 << 20)
        with open(os.path.join(cls.root, "blob"), "wb") as f:
            f.write(cls.data)
        cls.origin = nginx.NginxOrigin(cls.root).__enter__()
        cls.addClassCleanup(cls.origin.close)
        cls.proxy = nginx.FaultProxy(cls.origin.url).__enter__()
        cls.addClassCleanup(cls.proxy.close)

    def tearDown(self):
        self.proxy.set(delay_ms=0, rate_bytes_per_s=0)


class OriginTest(OriginAndProxy):

    def test_serves_bytes_and_a_range(self):
        status, _, body = fetch(self.origin.url + "/blob")
        self.assertEqual(status, 200)
        self.assertEqual(body, self.data)
        status, headers, body = fetch(self.origin.url + "/blob",
                                      {"Range": "bytes=1000-1999"})
        self.assertEqual(status, 206)
        self.assertEqual(body, self.data[1000:2000])
        self.assertEqual(headers["Content-Range"], f"bytes 1000-1999/{len(self.data)}")
        self.assertTrue(headers["Last-Modified"])

    def test_etag_changes_with_the_file(self):
        path = os.path.join(self.root, "changing")
        with open(path, "wb") as f:
            f.write(b"first")
        _, headers, _ = fetch(self.origin.url + "/changing")
        first = headers["ETag"]
        self.assertTrue(first)
        # nginx's ETag is mtime (seconds) and size: move the mtime on, as a later write would.
        with open(path, "wb") as f:
            f.write(b"second")
        st = os.stat(path)
        os.utime(path, (st.st_atime, st.st_mtime + 2))
        _, headers, body = fetch(self.origin.url + "/changing")
        self.assertEqual(body, b"second")
        self.assertNotEqual(headers["ETag"], first)

    def test_stop_refuses_and_start_serves_again(self):
        self.origin.stop()
        try:
            self.assertTrue(refused(self.origin.url + "/blob"))
        finally:
            self.origin.start()
        self.assertEqual(fetch(self.origin.url + "/blob")[2], self.data)


class ProxyTest(OriginAndProxy):

    def test_passes_bytes_and_ranges_through(self):
        status, headers, body = fetch(self.proxy.url + "/blob")
        self.assertEqual(status, 200)
        self.assertEqual(body, self.data)
        self.assertEqual(headers["ETag"], fetch(self.origin.url + "/blob")[1]["ETag"])
        for rng, want in (("bytes=0-0", self.data[:1]),
                          ("bytes=123456-2345677", self.data[123456:2345678]),
                          ("bytes=-100", self.data[-100:])):
            status, _, body = fetch(self.proxy.url + "/blob", {"Range": rng})
            self.assertEqual(status, 206, rng)
            self.assertEqual(body, want, rng)

    def test_delays_every_request(self):
        self.proxy.set(delay_ms=200)
        for _ in range(2):
            t0 = time.monotonic()
            self.assertEqual(fetch(self.proxy.url + "/blob", {"Range": "bytes=0-9"})[0], 206)
            self.assertGreaterEqual(time.monotonic() - t0, 0.2)

    def test_limits_the_rate(self):
        rate = 1 << 20
        self.proxy.set(rate_bytes_per_s=rate)
        t0 = time.monotonic()
        body = fetch(self.proxy.url + "/blob")[2]
        self.assertEqual(body, self.data)
        # nginx allows (seconds since the request's start second + 1) * rate: up to two
        # seconds' worth may go out at once, the rest keeps to the rate.
        self.assertGreaterEqual(time.monotonic() - t0, len(self.data) / rate - 2)

    def test_injects_failures_then_passes(self):
        injected, requests = self.proxy.injected(), self.proxy.requests()
        self.proxy.set(fail_next=3)
        for _ in range(3):
            status, headers, body = fetch(self.proxy.url + "/blob")
            self.assertEqual(status, 503)
            self.assertEqual(body, SLOWDOWN)
            self.assertEqual(headers["Content-Type"], "application/xml")
        self.assertEqual(fetch(self.proxy.url + "/blob")[2], self.data)
        self.assertEqual(self.proxy.injected() - injected, 3)
        self.assertEqual(self.proxy.requests() - requests, 4)

    def test_control_is_not_reachable_through_the_proxy(self):
        status, _, _ = fetch(self.proxy.url + "/set?fail_next=5")
        self.assertEqual(status, 404)  # the origin's answer
        self.assertEqual(fetch(self.proxy.url + "/blob")[0], 200)

    def test_settings_and_counts_survive_a_restart(self):
        self.proxy.set(fail_next=1, fail_status=500)
        injected = self.proxy.injected()
        self.proxy.stop()
        try:
            self.assertTrue(refused(self.proxy.url + "/blob"))
        finally:
            self.proxy.start()
        status, _, body = fetch(self.proxy.url + "/blob")
        self.assertEqual(status, 500)
        self.assertIn(b"<Code>InternalError</Code>", body)
        self.assertEqual(self.proxy.injected(), injected + 1)
        self.assertEqual(fetch(self.proxy.url + "/blob")[2], self.data)


class CephTest(unittest.TestCase):
    """The proxy in front of radosgw, and radosgw's restart, on the process's shared store."""

    @classmethod
    def setUpClass(cls):
        reason = ceph_s3.skip_reason() or nginx.FaultProxy.skip_reason()
        if reason:
            raise unittest.SkipTest(reason)
        cls.s3 = ceph_s3.shared()
        cls.bucket = ceph_s3.unique_bucket()
        cls.s3.make_bucket(cls.bucket)
        cls.data = os.urandom(1 << 20)
        cls.s3.put(cls.bucket, "dir/obj", cls.data)
        cls.proxy = nginx.FaultProxy(cls.s3.endpoint).__enter__()
        cls.addClassCleanup(cls.proxy.close)
        cls.via_proxy = cls.s3.client_for(cls.proxy.url)

    def test_signed_requests_pass_through_the_proxy(self):
        self.assertEqual(self.via_proxy.get(self.bucket, "dir/obj"), self.data)
        self.assertEqual(self.via_proxy.get(self.bucket, "dir/obj", 4096, 8191),
                         self.data[4096:8192])
        self.assertEqual(self.via_proxy.put(self.bucket, "dir/put", b"through the proxy"),
                         self.s3.client.head(self.bucket, "dir/put")["etag"].strip('"'))
        self.assertEqual(self.s3.get(self.bucket, "dir/put"), b"through the proxy")
        self.assertEqual([k for k, _, _ in self.via_proxy.list(self.bucket, "dir/")],
                         ["dir/obj", "dir/put"])

    def test_injected_503_reads_as_s3_slowdown(self):
        self.proxy.set(fail_next=1)
        with self.assertRaises(S3Error) as caught:
            self.via_proxy.get(self.bucket, "dir/obj")
        self.assertEqual((caught.exception.status, caught.exception.code), (503, "SlowDown"))
        self.assertEqual(self.via_proxy.get(self.bucket, "dir/obj"), self.data)

    def test_restart_keeps_objects(self):
        self.s3.stop()
        try:
            with self.assertRaises(ConnectionRefusedError):
                http.client.HTTPConnection("127.0.0.1", self.s3.rgw_port,
                                           timeout=10).request("GET", "/")
        finally:
            self.s3.start()
        self.assertEqual(self.s3.get(self.bucket, "dir/obj"), self.data)


if __name__ == "__main__":
    exit_on_sigterm()
    unittest.main(verbosity=2)
