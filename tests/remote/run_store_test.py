#!/usr/bin/python3
"""Runs the object store's integration test (store_test) against real servers on loopback:
a one-node Ceph S3 store, a fault-injecting nginx proxy in front of it, and an nginx
origin serving a folder.

    run_store_test.py STORE_TEST [GTEST-FLAGS...]

The test binary reads where the servers are from GPUFS_TEST_* variables (below) and acts
on them through a small control server on loopback (GPUFS_TEST_CONTROL_URL): storing and
deleting objects, stopping and starting radosgw or the origin, and setting the proxy's
faults. The S3 secret reaches the test in its environment, never on a command line.

Exits 77 (meson's "skipped"), saying why, where the servers' programs are missing.
"""
import http.server
import os
import subprocess
import sys
import tempfile
import threading
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from servers import ceph_s3, nginx  # noqa: E402
from servers.lying_peer import FlippingPeer  # noqa: E402
from servers.procs import LOOPBACK, exit_on_sigterm  # noqa: E402
from servers.region_proxy import RegionProxy  # noqa: E402

SKIP = 77


class Servers:
    """What the control server acts on."""

    def __init__(self, s3, bucket, proxy, origin):
        self.s3, self.bucket, self.proxy, self.origin = s3, bucket, proxy, origin


def control_handler(servers):
    """A request handler for the control server:

    PUT /s3/object/KEY (body)   store an object; answers its ETag
    DELETE /s3/object/KEY       delete it
    POST /s3/stop, /s3/start    radosgw (the objects stay)
    POST /http/stop, /http/start  the nginx origin
    POST /proxy/set?fail_next=N&fail_status=S&delay_ms=D   the proxy in front of radosgw
    GET /proxy/injected         failures the proxy has injected so far
    """

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _answer(self, status, text=""):
            body = text.encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _route(self, method):
            url = urllib.parse.urlsplit(self.path)
            path = urllib.parse.unquote(url.path)
            args = {k: int(v) for k, v in urllib.parse.parse_qsl(url.query)}
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            key = path[len("/s3/object/"):]
            if method == "PUT" and path.startswith("/s3/object/"):
                return servers.s3.put(servers.bucket, key, body)
            if method == "DELETE" and path.startswith("/s3/object/"):
                return servers.s3.delete(servers.bucket, key)
            actions = {
                ("POST", "/s3/stop"): servers.s3.stop,
                ("POST", "/s3/start"): servers.s3.start,
                ("POST", "/http/stop"): servers.origin.stop,
                ("POST", "/http/start"): servers.origin.start,
                ("POST", "/proxy/set"): lambda: servers.proxy.set(**args),
                ("GET", "/proxy/injected"): servers.proxy.injected,
            }
            if (method, path) not in actions:
                raise LookupError(f"no control {method} {path}")
            return actions[(method, path)]()

        def _handle(self, method):
            try:
                result = self._route(method)
            except Exception as e:  # noqa: BLE001 - the test reports it
                self._answer(500, f"{type(e).__name__}: {e}")
                return
            self._answer(200, "" if result is None else str(result))

        def do_GET(self):
            self._handle("GET")

        def do_PUT(self):
            self._handle("PUT")

        def do_POST(self):
            self._handle("POST")

        def do_DELETE(self):
            self._handle("DELETE")

    return Handler


def main():
    if len(sys.argv) < 2:
        print("usage: run_store_test.py STORE_TEST [GTEST-FLAGS...]", file=sys.stderr)
        return 2
    exit_on_sigterm()
    reason = (ceph_s3.skip_reason() or nginx.NginxOrigin.skip_reason()
              or nginx.FaultProxy.skip_reason())
    if reason:
        print(f"run_store_test: skipped: {reason}")
        return SKIP
    with tempfile.TemporaryDirectory(prefix="gpufs-store-origin-") as root, \
            ceph_s3.CephS3() as s3, \
            nginx.NginxOrigin(root) as origin, \
            nginx.FaultProxy(s3.endpoint) as proxy, \
            RegionProxy(s3.endpoint, "eu-test-1") as region_proxy:
        lying = FlippingPeer(origin.url)  # a peer that changes the bytes it passes on
        bucket = ceph_s3.unique_bucket("store")
        s3.make_bucket(bucket)
        # One thread serves every control request, for the life of the run: a daemon it
        # starts gets SIGTERM when the thread that started it exits (PR_SET_PDEATHSIG).
        control = http.server.HTTPServer(
            (LOOPBACK, 0), control_handler(Servers(s3, bucket, proxy, origin)))
        threading.Thread(target=control.serve_forever, daemon=True).start()
        env = {**os.environ,
               "GPUFS_TEST_S3_ENDPOINT": s3.endpoint,
               "GPUFS_TEST_S3_PROXY": proxy.url,
               # The bucket as AWS would answer for one in eu-test-1 (region_proxy.py).
               "GPUFS_TEST_S3_REGION_PROXY": region_proxy.url,
               "GPUFS_TEST_S3_REGION_PROXY_REGION": region_proxy.region,
               "GPUFS_TEST_S3_BUCKET": bucket,
               "GPUFS_TEST_S3_REGION": s3.region,
               "GPUFS_TEST_S3_ACCESS_KEY": s3.access_key,
               "GPUFS_TEST_S3_SECRET_KEY": s3.secret_key,
               "GPUFS_TEST_HTTP_URL": origin.url,
               "GPUFS_TEST_HTTP_ROOT": root,
               "GPUFS_TEST_HTTP_LYING_PEER": lying.url,
               "GPUFS_TEST_CONTROL_URL": f"http://{LOOPBACK}:{control.server_address[1]}"}
        try:
            return subprocess.run(sys.argv[1:], env=env, stdin=subprocess.DEVNULL).returncode
        finally:
            control.shutdown()
            control.server_close()


if __name__ == "__main__":
    sys.exit(main())
