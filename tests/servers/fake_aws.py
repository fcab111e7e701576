"""Fakes of the AWS credential endpoints on 127.0.0.1, handing out real keys (of radosgw
users, say): IMDSv2 (a session token required), a container credential endpoint (its
Authorization checked) and STS (AssumeRole, whose SigV4 Authorization must name the
source keys, and AssumeRoleWithWebIdentity, whose token must match).

    with FakeAws([(ak1, sk1), (ak2, sk2)], lifetime_s=20) as aws:  # or (uid, ak, sk)
        env = {"AWS_EC2_METADATA_SERVICE_ENDPOINT": aws.url, ...}
        aws.rotate()        # from now on, the next user's keys
        aws.requests["imds"]

One server answers all three: PUT and GET under /latest/ are IMDS, GET /container is the
container endpoint, POST is STS."""
import datetime
import http.server
import json
import threading
import urllib.parse
from xml.sax.saxutils import escape

from .procs import ThreadServer

IMDS_TOKEN = "imds-session-token"
ROLE = "gpufs-test-role"


def _expiration(lifetime_s):
    when = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=lifetime_s)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


class FakeAws:
    def __init__(self, users, lifetime_s=3600, container_token="container-secret",
                 web_token="web-identity-token", source_key=None):
        self.users = list(users)
        self.current = 0
        self.lifetime_s = lifetime_s
        self.container_token = container_token
        self.web_token = web_token
        self.source_key = source_key  # AssumeRole must be signed with this access key id
        self.deny = None  # (code, message): STS refuses with 403
        self.requests = {"imds": 0, "container": 0, "sts": 0}
        self.lock = threading.Lock()

    def __enter__(self):
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_PUT(self):
                fake._imds_token(self)

            def do_GET(self):
                if self.path.startswith("/latest/"):
                    fake._imds(self)
                elif self.path.startswith("/container"):
                    fake._container(self)
                else:
                    fake._send(self, 404, "text/plain", "no such path")

            def do_POST(self):
                fake._sts(self)

        self.server = ThreadServer(Handler)
        self.url = self.server.url
        return self

    def __exit__(self, *exc):
        self.server.close()
        return False

    def rotate(self):
        """Hands out the next user's keys from now on."""
        with self.lock:
            self.current += 1

    def count(self, kind):
        with self.lock:
            return self.requests[kind]

    def _keys(self, kind):
        """(access key id, secret) of the current user: the last two of its tuple."""
        with self.lock:
            self.requests[kind] += 1
            return tuple(self.users[self.current][-2:])

    @staticmethod
    def _send(handler, status, content_type, text):
        body = text.encode()
        handler.send_response(status)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    def _imds_token(self, h):
        if h.path != "/latest/api/token" or not h.headers.get(
                "X-aws-ec2-metadata-token-ttl-seconds"):
            return self._send(h, 400, "text/plain", "a token needs its ttl header")
        self._send(h, 200, "text/plain", IMDS_TOKEN)

    def _imds(self, h):
        if h.headers.get("X-aws-ec2-metadata-token") != IMDS_TOKEN:
            return self._send(h, 401, "text/plain", "IMDSv2 needs a session token")
        base = "/latest/meta-data/iam/security-credentials/"
        if h.path == base:
            return self._send(h, 200, "text/plain", ROLE)
        if h.path != base + ROLE:
            return self._send(h, 404, "text/plain", "no such role")
        self._send(h, 200, "application/json", self._json("imds"))

    def _json(self, kind):
        ak, sk = self._keys(kind)
        return json.dumps({"Code": "Success", "Type": "AWS-HMAC", "AccessKeyId": ak,
                           "SecretAccessKey": sk, "Token": "",
                           "Expiration": _expiration(self.lifetime_s)})

    def _container(self, h):
        if h.headers.get("Authorization") != self.container_token:
            return self._send(h, 401, "text/plain", "wrong Authorization")
        self._send(h, 200, "application/json", self._json("container"))

    def _sts(self, h):
        length = int(h.headers.get("Content-Length", "0"))
        form = dict(urllib.parse.parse_qsl(h.rfile.read(length).decode()))
        action = form.get("Action", "")
        if self.deny:
            return self._sts_error(h, *self.deny)
        if action == "AssumeRoleWithWebIdentity":
            if form.get("WebIdentityToken") != self.web_token:
                return self._sts_error(h, "InvalidIdentityToken", "the token is not valid")
        elif action == "AssumeRole":
            auth = h.headers.get("Authorization", "")
            if self.source_key and f"Credential={self.source_key}/" not in auth:
                return self._sts_error(h, "SignatureDoesNotMatch", "not signed by the source")
        else:
            return self._sts_error(h, "InvalidAction", f"no action {action}")
        ak, sk = self._keys("sts")
        self._send(h, 200, "text/xml",
                   f'<{action}Response xmlns="https://sts.amazonaws.com/doc/2011-06-15/">'
                   f"<{action}Result><Credentials><AccessKeyId>{escape(ak)}</AccessKeyId>"
                   f"<SecretAccessKey>{escape(sk)}</SecretAccessKey><SessionToken/>"
                   f"<Expiration>{_expiration(self.lifetime_s)}</Expiration></Credentials>"
                   f"</{action}Result></{action}Response>")

    def _sts_error(self, h, code, message):
        self._send(h, 403, "text/xml",
                   "<ErrorResponse><Error><Type>Sender</Type>"
                   f"<Code>{escape(code)}</Code><Message>{escape(message)}</Message>"
                   "</Error></ErrorResponse>")
