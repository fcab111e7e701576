"""A small S3 client (AWS Signature Version 4, path-style URLs) on the standard library.

The test servers need only a handful of S3 calls, and python3-boto3 is not part of the
project's dependencies; signing by hand also lets a test send a request through a proxy
with exactly the headers it wants. Every request carries `x-amz-content-sha256` (radosgw
refuses SigV4 requests without it): the body's SHA-256, or UNSIGNED-PAYLOAD for streamed
files.
"""
import concurrent.futures
import datetime
import hashlib
import hmac
import http.client
import os
import urllib.parse
import xml.etree.ElementTree as ET

UNSIGNED = "UNSIGNED-PAYLOAD"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


class S3Error(RuntimeError):
    """An S3 error answer: HTTP `status`, S3 `code` (e.g. NoSuchKey, SlowDown) and body."""

    def __init__(self, method, path, status, body):
        self.status, self.body = status, body
        self.code = _find(body, "Code") or ""
        super().__init__(f"{method} {path}: HTTP {status} {self.code}".rstrip())


class Response:
    """What a request got: `status`, `headers` (lower-case names) and `body` bytes."""

    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body

    @property
    def etag(self):
        return self.headers.get("etag", "").strip('"')


def _find(body, tag):
    """Text of the first element named `tag` (any namespace) in an XML body, or None."""
    try:
        root = ET.fromstring(body)
    except ET.ParseError:
        return None
    for el in root.iter():
        if el.tag.rsplit("}", 1)[-1] == tag:
            return el.text
    return None


def _quote(s, safe="-_.~"):
    return urllib.parse.quote(s, safe=safe)


def _hmac(key, msg):
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def sign(method, host, path, query, headers, payload_hash, access_key, secret_key, region,
         now=None, service="s3"):
    """The headers a SigV4 request needs (x-amz-date, x-amz-content-sha256, Authorization).

    `path` is the already URI-encoded path, `query` a dict, `headers` the extra headers to
    sign (their names are signed along with host and the x-amz-* ones)."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    signed = {k.lower(): " ".join(str(v).split()) for k, v in headers.items()}
    signed.update({"host": host, "x-amz-date": amz_date, "x-amz-content-sha256": payload_hash})
    names = sorted(signed)
    canonical_query = "&".join(f"{_quote(k)}={_quote(str(v))}"
                               for k, v in sorted(query.items()))
    canonical = "\n".join([method, path, canonical_query,
                           "".join(f"{n}:{signed[n]}\n" for n in names),
                           ";".join(names), payload_hash])
    scope = f"{day}/{region}/{service}/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                         hashlib.sha256(canonical.encode()).hexdigest()])
    key = _hmac(_hmac(_hmac(_hmac(("AWS4" + secret_key).encode(), day), region), service),
                "aws4_request")
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    return {"x-amz-date": amz_date, "x-amz-content-sha256": payload_hash,
            "Authorization": f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, "
                             f"SignedHeaders={';'.join(names)}, Signature={signature}"}


class S3Client:
    """Signed path-style requests to one endpoint ("http://127.0.0.1:PORT").

    A fresh connection per request: slower than keep-alive, but a client survives the
    server being stopped and started again between two calls."""

    def __init__(self, endpoint, access_key, secret_key, region="us-east-1", timeout=60):
        url = urllib.parse.urlsplit(endpoint)
        if url.scheme != "http":
            raise ValueError(f"only http endpoints: {endpoint}")
        self.host, self.port = url.hostname, url.port or 80
        self.netloc = url.netloc
        self.access_key, self.secret_key, self.region = access_key, secret_key, region
        self.timeout = timeout

    def request(self, method, bucket="", key="", query=None, body=b"", headers=None,
                payload_hash=None, check=True):
        """Sends one signed request; raises S3Error on a status >= 300 when `check`.

        `body` is bytes or a binary file object (then give its length as Content-Length in
        `headers`, and payload_hash=UNSIGNED unless you hashed it)."""
        path = "/" + _quote(bucket) + ("/" + _quote(key, safe="/-_.~") if key else "")
        query, headers = dict(query or {}), dict(headers or {})
        if payload_hash is None:
            payload_hash = hashlib.sha256(body).hexdigest() if body else EMPTY_SHA256
        headers.update(sign(method, self.netloc, path, query, headers, payload_hash,
                            self.access_key, self.secret_key, self.region))
        target = path + ("?" + "&".join(f"{_quote(k)}={_quote(str(v))}" if v != "" else
                                        _quote(k) for k, v in sorted(query.items()))
                         if query else "")
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            conn.request(method, target, body=body if body else None, headers=headers)
            resp = conn.getresponse()
            answer = Response(resp.status, {k.lower(): v for k, v in resp.getheaders()},
                              resp.read())
        finally:
            conn.close()
        if check and answer.status >= 300:
            raise S3Error(method, path, answer.status, answer.body)
        return answer

    def make_bucket(self, bucket):
        """Creates `bucket`; one that this user already owns is fine."""
        r = self.request("PUT", bucket, check=False)
        if r.status >= 300 and _find(r.body, "Code") != "BucketAlreadyOwnedByYou":
            raise S3Error("PUT", "/" + bucket, r.status, r.body)

    def put(self, bucket, key, data):
        """Stores `data` (bytes) as bucket/key; returns the ETag (no quotes)."""
        return self.request("PUT", bucket, key, body=bytes(data)).etag

    def put_file(self, bucket, key, path):
        """Streams the file at `path` to bucket/key (UNSIGNED-PAYLOAD); returns the ETag."""
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            return self.request("PUT", bucket, key, body=f if size else b"",
                                headers={"Content-Length": str(size)},
                                payload_hash=UNSIGNED if size else None).etag

    def get(self, bucket, key, start=None, end=None):
        """The object's bytes, or bytes start..end (inclusive) when a range is given."""
        headers = {}
        if start is not None:
            headers["Range"] = f"bytes={start}-{'' if end is None else end}"
        return self.request("GET", bucket, key, headers=headers).body

    def head(self, bucket, key):
        """The object's headers (lower-case names), or None when it does not exist."""
        r = self.request("HEAD", bucket, key, check=False)
        if r.status == 404:
            return None
        if r.status >= 300:
            raise S3Error("HEAD", f"/{bucket}/{key}", r.status, r.body)
        return r.headers

    def delete(self, bucket, key):
        """Deletes bucket/key (S3 answers success for a missing key too)."""
        self.request("DELETE", bucket, key)

    def list(self, bucket, prefix=""):
        """Every object under `prefix` as (key, size, etag without quotes), in key order."""
        out, token = [], None
        while True:
            query = {"list-type": "2", "prefix": prefix, "max-keys": "1000"}
            if token:
                query["continuation-token"] = token
            root = ET.fromstring(self.request("GET", bucket, query=query).body)
            ns = root.tag[:root.tag.index("}") + 1] if root.tag.startswith("{") else ""
            for c in root.iter(ns + "Contents"):
                out.append((c.findtext(ns + "Key"), int(c.findtext(ns + "Size")),
                            (c.findtext(ns + "ETag") or "").strip('"')))
            token = root.findtext(ns + "NextContinuationToken")
            if root.findtext(ns + "IsTruncated") != "true" or not token:
                return out

    def upload_tree(self, local_dir, bucket, prefix="", workers=8):
        """Uploads every file below `local_dir` to bucket/prefix/<relative path>, a few at a
        time; returns the keys, sorted. `prefix` may be "" (the bucket's root)."""
        prefix = prefix.strip("/")
        jobs = []
        for folder, dirs, names in os.walk(local_dir):
            dirs.sort()
            for name in sorted(names):
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, local_dir).replace(os.sep, "/")
                jobs.append((f"{prefix}/{rel}" if prefix else rel, path))
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            list(pool.map(lambda job: self.put_file(bucket, *job), jobs))
        return sorted(key for key, _ in jobs)
