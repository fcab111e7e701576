"""An S3 endpoint on 127.0.0.1 whose every listing page says "truncated", with a new
continuation token each time: what a hostile or broken store could send forever. Each
ListObjectsV2 page holds `keys_per_page` keys under the prefix asked for (0: none); every
other request is answered 404 NoSuchKey.

    with EndlessListing(keys_per_page=1000) as store:
        ... --endpoint store.url ...
        store.pages  # listing pages served so far
"""
import http.server
import threading
import urllib.parse
from xml.sax.saxutils import escape

from .procs import ThreadServer

_NOT_FOUND = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>NoSuchKey</Code>'
              b"<Message>no such key</Message></Error>")


class EndlessListing:
    def __init__(self, keys_per_page):
        self.keys_per_page = keys_per_page
        self.pages = 0
        self.lock = threading.Lock()

    def __enter__(self):
        store = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive: thousands of pages, one connection
            disable_nagle_algorithm = True  # headers and body written apart, sent at once

            def log_message(self, *args):
                pass

            def do_HEAD(self):
                self.answer(404, _NOT_FOUND, send_body=False)

            def do_GET(self):
                query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
                if query.get("list-type") != ["2"]:
                    self.answer(404, _NOT_FOUND)
                    return
                with store.lock:
                    store.pages += 1
                    page = store.pages
                self.answer(200, store.page(query.get("prefix", [""])[0], page))

            def answer(self, status, body, send_body=True):
                self.send_response(status)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if send_body:
                    self.wfile.write(body)

        self.server = ThreadServer(Handler)
        self.url = self.server.url
        return self

    def __exit__(self, *exc):
        self.server.close()

    def page(self, prefix, number):
        contents = "".join(
            f"<Contents><Key>{escape(prefix)}x{number:07d}-{i:04d}</Key><Size>1</Size>"
            f'<ETag>"0"</ETag></Contents>' for i in range(self.keys_per_page))
        return ('<?xml version="1.0" encoding="UTF-8"?><ListBucketResult>'
                f"<IsTruncated>true</IsTruncated>{contents}"
                f"<NextContinuationToken>t{number}</NextContinuationToken>"
                "</ListBucketResult>").encode()
