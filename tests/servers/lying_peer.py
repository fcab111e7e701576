"""A peer cache that lies: it forwards each GET to the origin and passes the answer on with
its status and headers (ETag, Content-Range) intact and bytes of the body flipped, which is
what a compromised proxy on another node could send. In-process (a thread serving
127.0.0.1), for the tests of what gpufs checks a peer's bytes against."""
import http.server
import threading
import urllib.error
import urllib.request

from .procs import ThreadServer


class FlippingPeer:
    """A peer that forwards each GET to `origin` with its Range and passes the answer on,
    status and headers (ETag, Content-Range) intact, every 97th byte of the body flipped:
    what a compromised proxy sends. Counts the bodies it changed and keeps the paths."""

    def __init__(self, origin):
        peer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                # The node's request as it came (a store checks its signature), to the origin.
                request = urllib.request.Request(origin + self.path)
                for name, value in self.headers.items():
                    if name.lower() not in ("host", "connection"):
                        request.add_header(name, value)
                try:
                    with urllib.request.urlopen(request, timeout=10) as r:
                        status, headers, body = r.status, r.headers, r.read()
                except urllib.error.HTTPError as e:
                    status, headers, body = e.code, e.headers, e.read()
                body = bytearray(body)
                for i in range(0, len(body), 97):
                    body[i] ^= 0x5A
                with peer.lock:
                    peer.paths.append(self.path)
                    peer.flipped += 1 if body else 0
                self.send_response(status)
                for name in ("ETag", "Content-Range", "Content-Type", "Last-Modified"):
                    if headers.get(name):
                        self.send_header(name, headers[name])
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(bytes(body))

        self.lock = threading.Lock()
        self.flipped = 0
        self.paths = []  # of every request
        self.server = ThreadServer(Handler)
        self.url = self.server.url

    def close(self):
        self.server.close()
