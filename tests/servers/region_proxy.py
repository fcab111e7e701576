"""A proxy on 127.0.0.1 in front of an S3 endpoint that plays a bucket in another region.

radosgw accepts a signature for any region; AWS does not. This proxy answers as AWS does
when a request is signed for a region other than `region`: 301 PermanentRedirect (or, with
answer=400, 400 AuthorizationHeaderMalformed "the region 'X' is wrong; expecting 'Y'"),
with an x-amz-bucket-region header and, except for a HEAD, an error body naming the region.
A request signed for `region` goes upstream unchanged, its Host header included, so the
signature stays valid. It also records each request's x-amz-request-payer header.

    with RegionProxy(s3.endpoint, "eu-test-1") as proxy:
        ... AWS_ENDPOINT_URL=proxy.url ...
"""
import http.client
import http.server
import re
import threading
import urllib.parse

from .procs import LOOPBACK

SCOPE = re.compile(r"Credential=[^/,]+/\d{8}/([^/,]+)/s3/aws4_request")
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
              "proxy-connection"}


class RegionProxy:
    def __init__(self, upstream, region, answer=301):
        url = urllib.parse.urlsplit(upstream)
        self.upstream = (url.hostname, url.port or 80)
        self.region, self.answer = region, answer
        self.lock = threading.Lock()
        self.refused = 0  # guarded by lock: wrong-region answers sent
        self.payer = []   # guarded by lock: each forwarded request's x-amz-request-payer
        self.server = http.server.ThreadingHTTPServer((LOOPBACK, 0), self._handler())
        self.server.daemon_threads = True
        self.url = f"http://{LOOPBACK}:{self.server.server_address[1]}"

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def _handler(self):
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                self._serve(head=False)

            def do_HEAD(self):
                self._serve(head=True)

            def _serve(self, head):
                m = SCOPE.search(self.headers.get("Authorization", ""))
                signed_for = m.group(1) if m else ""
                if signed_for != proxy.region:
                    return self._wrong_region(head, signed_for)
                with proxy.lock:
                    proxy.payer.append(self.headers.get("x-amz-request-payer"))
                conn = http.client.HTTPConnection(*proxy.upstream, timeout=30)
                try:
                    headers = {k: v for k, v in self.headers.items()
                               if k.lower() not in HOP_BY_HOP}
                    conn.putrequest(self.command, self.path, skip_host=True,
                                    skip_accept_encoding=True)
                    for k, v in headers.items():
                        conn.putheader(k, v)
                    conn.endheaders()
                    resp = conn.getresponse()
                    body = b"" if head else resp.read()
                    self.send_response(resp.status)
                    for k, v in resp.getheaders():
                        if k.lower() not in HOP_BY_HOP and k.lower() != "content-length":
                            self.send_header(k, v)
                    length = resp.getheader("Content-Length") if head else str(len(body))
                    self.send_header("Content-Length", length or "0")
                    self.end_headers()
                    if not head:
                        self.wfile.write(body)
                finally:
                    conn.close()

            def _wrong_region(self, head, signed_for):
                with proxy.lock:
                    proxy.refused += 1
                if proxy.answer == 301:
                    code, message = "PermanentRedirect", (
                        "The bucket you are attempting to access must be addressed using "
                        "the specified endpoint.")
                else:
                    code, message = "AuthorizationHeaderMalformed", (
                        "The authorization header is malformed; the region "
                        f"'{signed_for}' is wrong; expecting '{proxy.region}'")
                body = (f"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{code}</Code>"
                        f"<Message>{message}</Message><Region>{proxy.region}</Region>"
                        "</Error>").encode()
                self.send_response(proxy.answer)
                self.send_header("x-amz-bucket-region", proxy.region)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", "0" if head else str(len(body)))
                self.end_headers()
                if not head:
                    self.wfile.write(body)

        return Handler
