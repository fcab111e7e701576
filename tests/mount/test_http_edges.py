#!/usr/bin/python3
"""The edges of reading over HTTP and S3, through real mounts of real servers on loopback:
names that need %-encoding, servers that ignore Range, redirects, basic auth from the URL
or a .netrc (and the password shown nowhere), a presigned URL, a mount without
s3:ListBucket, a second mount on a mount point, and the default disk tier on a FUSE home."""
import datetime
import hashlib
import hmac
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import unittest
import urllib.parse
import urllib.request
import uuid

import gpufs_testlib as lib
from gpufs_testlib import files_below, stats_of

sys.path.insert(0, lib.ROOT)
from tests.servers import ceph_s3, nginx  # noqa: E402
from tests.servers.procs import Daemon, free_port, wait_for  # noqa: E402
from tests.servers.s3client import S3Client, S3Error, _hmac, _quote  # noqa: E402

PASSWORD = "s3cr3t-pw-7f1"
USER = "trainer"
RANGE_REFUSED = ("the server ignores Range requests (it answered 200 with the whole file to "
                 "a ranged GET); serve it with nginx or another server that supports ranges "
                 "(nginx: max_ranges must not be 0)")


def make_tar(path, tree):
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as t:
        t.add(tree, arcname="dataset")


class Site(nginx.NginxOrigin):
    """nginx serving `root` on `host`, with `extra` lines in its server block and in its
    location; its log records each request's Authorization header."""

    name = "nginx-site"

    def __init__(self, root, host="127.0.0.1", extra="", location=""):
        super().__init__(root)
        self.host, self.extra, self.location = host, extra, location
        self.url = f"http://{host}:{self.port}"

    def _ready_url(self):
        return self.url + "/"

    def _http_body(self):
        log = os.path.join(self.prefix, "logs", "auth.log")
        return f"""  log_format auth '$request auth="$http_authorization"';
  server {{
    listen {self.host}:{self.port};
    root {nginx._q(self.root)};
    access_log {nginx._q(log)} auth;
{self.extra}
    location / {{ {self.location} }}
  }}
"""

    def auth_lines(self):
        path = os.path.join(self.prefix, "logs", "auth.log")
        with open(path) as f:
            return f.read().splitlines()


def presign(endpoint, bucket, key, access_key, secret_key, region, expires=3600):
    """A SigV4 query-signed GET URL of bucket/key, as `aws s3 presign` makes one."""
    host = urllib.parse.urlsplit(endpoint).netloc
    now = datetime.datetime.now(datetime.timezone.utc)
    amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    scope = f"{day}/{region}/s3/aws4_request"
    path = "/" + _quote(bucket) + "/" + _quote(key, safe="/-_.~")
    query = {"X-Amz-Algorithm": "AWS4-HMAC-SHA256", "X-Amz-Credential": f"{access_key}/{scope}",
             "X-Amz-Date": amz_date, "X-Amz-Expires": str(expires),
             "X-Amz-SignedHeaders": "host"}
    canonical_query = "&".join(f"{_quote(k)}={_quote(v)}" for k, v in sorted(query.items()))
    canonical = "\n".join(["GET", path, canonical_query, f"host:{host}\n", "host",
                           "UNSIGNED-PAYLOAD"])
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                         hashlib.sha256(canonical.encode()).hexdigest()])
    signing = _hmac(_hmac(_hmac(_hmac(("AWS4" + secret_key).encode(), day), region), "s3"),
                    "aws4_request")
    signature = hmac.new(signing, to_sign.encode(), hashlib.sha256).hexdigest()
    return f"{endpoint}{path}?{canonical_query}&X-Amz-Signature={signature}"


class Edges(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="gpufs-edges-")
        cls.cache = os.path.join(cls.work, "xdg-cache")
        tree = lib.make_split_tree(os.path.join(cls.work, "tree"), (3, 4), (2, 3))
        cls.tree_files = files_below(tree)  # a tar's single top folder is not shown
        cls.www = os.path.join(cls.work, "www")
        os.makedirs(cls.www)
        for name in ("with space.tar", "a#b?.tar", "train.tar"):
            make_tar(os.path.join(cls.www, name), tree)
        cls.pack = lib.pack_to_serve(tree, cls.www, "64KiB")
        cls.pack_files = files_below(tree)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.work)

    def env(self, **extra):
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        return {**env, "XDG_CACHE_HOME": self.cache, **extra}

    def assertSameFiles(self, mnt, expected, what=""):
        """Every file below mnt equals expected's bytes (without a diff of megabytes)."""
        got = files_below(mnt)
        self.assertEqual(sorted(got), sorted(expected), what)
        self.assertTrue(all(got[k] == expected[k] for k in expected), what)

    def mountpoint(self):
        return tempfile.mkdtemp(dir=self.work, prefix="mnt-")

    def refused(self, url, *options, env=None):
        """The message of a mount that must fail."""
        result = lib.run_gpufsd("mount", *options, url, self.mountpoint(), env=env or self.env())
        self.assertEqual(result.returncode, 1, result.stderr)
        return result.stderr.strip()


class Http(Edges):
    @classmethod
    def setUpClass(cls):
        reason = nginx.NginxOrigin.skip_reason()
        if reason:
            raise unittest.SkipTest(reason)
        super().setUpClass()
        cls.origin = nginx.NginxOrigin(cls.www).__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.origin.__exit__(None, None, None)
        super().tearDownClass()

    def test_names_are_requested_as_typed(self):
        for typed in ("with%20space.tar", "a%23b%3F.tar"):
            url = f"{self.origin.url}/{typed}"
            with lib.Mount(url, env=self.env()) as mnt:
                self.assertSameFiles(mnt, self.tree_files)
                self.assertEqual(os.getxattr(mnt, "user.gpufs.source").decode(), url)
            self.assertGreater(self.origin.served("GET /" + typed)[0], 0)

    def test_a_missing_object_is_named_as_requested(self):
        url = f"{self.origin.url}/no%20such.tar"
        self.assertEqual(self.refused(url),
                         f"gpufsd: cannot stat {url}: not found (HTTP 404)")

    def test_a_fragment_is_refused(self):
        self.assertEqual(
            self.refused(f"{self.origin.url}/a#b?.tar"),
            f"gpufsd: cannot use {self.origin.url}/a: a '#' starts a fragment, which is never "
            "sent to the server; type a '#' in a file name as %23 (and a '?' as %3F)")

    def test_a_mount_point_already_mounted_is_refused_and_the_first_mount_works_on(self):
        url = f"{self.origin.url}/train.tar"
        with lib.Mount(url, env=self.env()) as mnt:
            result = lib.run_gpufsd("mount", url, mnt, env=self.env())
            self.assertEqual(result.returncode, 1)
            self.assertEqual(result.stderr.strip(),
                             f"gpufsd: cannot mount at {mnt}: it is already a mount (gpufs of "
                             f"{url}); unmount it first with `gpufsd unmount {mnt}`")
            self.assertSameFiles(mnt, self.tree_files)

    def test_the_default_disk_tier_on_a_fuse_folder_is_left_off(self):
        from faultlib import FAULTFS, FaultFs
        if not os.access(FAULTFS, os.X_OK):
            self.skipTest(f"faultfs is not built at {FAULTFS}")
        with FaultFs(tempfile.mkdtemp(dir=self.work)) as ff:
            # A tar: its index is then only not kept (faultfs is read-only), where a pack's
            # index must be.
            url = f"{self.origin.url}/train.tar"
            mount = lib.Mount(url, env=self.env(XDG_CACHE_HOME=ff.mnt))
            with mount as mnt:
                self.assertSameFiles(mnt, self.tree_files)
                self.assertNotIn("tier", stats_of(mnt))
                log = mount.stderr()
            self.assertIn(
                f"no disk cache: the default folder {ff.mnt}/gpufs/tier is on FUSE, a network "
                "filesystem, where a cache is slow and fills a quota; give --disk-cache DIR on "
                "a local disk to keep one", log)


class RangeIgnoringServers(Edges):
    """A server that answers a ranged GET with the whole file is refused at mount."""

    def check_refused(self, base):
        self.assertEqual(self.refused(f"{base}/train.tar"),
                         f"gpufsd: cannot use {base}/train.tar: {RANGE_REFUSED}")
        message = self.refused(f"{base}/pack/")
        self.assertTrue(message.startswith(f"gpufsd: cannot use {base}/pack/"), message)
        self.assertTrue(message.endswith(RANGE_REFUSED), message)

    def test_nginx_with_max_ranges_0(self):
        reason = nginx.NginxOrigin.skip_reason()
        if reason:
            self.skipTest(reason)
        with Site(self.www, extra="    max_ranges 0;") as site:
            self.check_refused(site.url)

    def test_python_http_server(self):
        port = free_port()
        log = os.path.join(self.work, "http.server.log")
        server = Daemon("http.server", [sys.executable, "-m", "http.server", "--bind",
                                        "127.0.0.1", "--directory", self.www, str(port)], log)
        server.start()
        try:
            base = f"http://127.0.0.1:{port}"
            wait_for("http.server", lambda: _answers(base), time.monotonic() + 20, [server])
            self.check_refused(base)
        finally:
            server.stop()


def _answers(base):
    try:
        with urllib.request.urlopen(base + "/", timeout=2):
            return True
    except OSError:
        return False


class Credentials(Edges):
    """Basic auth from user:password@ or ~/.netrc, never shown, never sent elsewhere."""

    @classmethod
    def setUpClass(cls):
        reason = nginx.NginxOrigin.skip_reason()
        if reason:
            raise unittest.SkipTest(reason)
        super().setUpClass()
        hashed = subprocess.run(["openssl", "passwd", "-apr1", PASSWORD], capture_output=True,
                                text=True, check=True).stdout.strip()
        cls.htpasswd = os.path.join(cls.work, "htpasswd")
        with open(cls.htpasswd, "w") as f:
            f.write(f"{USER}:{hashed}\n")
        auth = f'auth_basic "gpufs"; auth_basic_user_file {nginx._q(cls.htpasswd)};'
        cls.site = Site(cls.www, location=auth).__enter__()
        # Another host for curl (127.0.0.2), without auth; and a redirector to it.
        cls.target = Site(cls.www, host="127.0.0.2").__enter__()
        cls.redirector = Site(cls.www, extra=f"    return 302 {cls.target.url}$request_uri;"
                              ).__enter__()

    @classmethod
    def tearDownClass(cls):
        for server in (cls.site, cls.target, cls.redirector):
            server.__exit__(None, None, None)
        super().tearDownClass()

    def with_password(self, url):
        return url.replace("http://", f"http://{USER}:{PASSWORD}@")

    def check_hidden(self, mnt, proc):
        self.assertNotIn(PASSWORD, os.getxattr(mnt, "user.gpufs.source").decode())
        with open("/proc/self/mountinfo") as f:
            self.assertNotIn(PASSWORD, f.read())
        with open(f"/proc/{proc.pid}/cmdline", "rb") as f:
            self.assertNotIn(PASSWORD.encode(), f.read())
        ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        self.assertNotIn(PASSWORD, ps)

    def test_user_and_password_in_the_url(self):
        for name in ("train.tar", "pack/"):
            url = f"{self.site.url}/{name}"
            mount = lib.Mount(self.with_password(url), env=self.env())
            with mount as mnt:
                self.assertSameFiles(
                    mnt, self.tree_files if name.endswith(".tar") else self.pack_files)
                self.assertEqual(os.getxattr(mnt, "user.gpufs.source").decode(), url)
                self.check_hidden(mnt, mount.proc)
            self.assertNotIn(PASSWORD, mount_log(mount))

    def test_a_private_netrc_in_home(self):
        home = tempfile.mkdtemp(dir=self.work)
        netrc = os.path.join(home, ".netrc")
        with open(netrc, "w") as f:
            f.write(f"machine 127.0.0.1 login {USER} password {PASSWORD}\n")
        os.chmod(netrc, 0o644)
        url = f"{self.site.url}/train.tar"
        message = self.refused(url, env=self.env(HOME=home))
        self.assertIn(f"not using {netrc} for HTTP credentials: others may read or change it "
                      f"(mode 0644); `chmod 600 {netrc}` makes it private", message)
        os.chmod(netrc, 0o600)
        with lib.Mount(url, env=self.env(HOME=home)) as mnt:
            self.assertSameFiles(mnt, self.tree_files)

    def test_a_wrong_password_is_refused_without_showing_it(self):
        url = f"{self.site.url}/train.tar"
        message = self.refused(url.replace("http://", f"http://{USER}:wrong-{PASSWORD}@"))
        self.assertEqual(message, f"gpufsd: cannot stat {url}: the server wants credentials or "
                         "refused them (HTTP 401); give them as https://USER:PASSWORD@HOST/... "
                         "or in ~/.netrc")
        self.assertEqual(self.refused(url),
                         f"gpufsd: cannot stat {url}: the server wants credentials or refused "
                         "them (HTTP 401); give them as https://USER:PASSWORD@HOST/... or in "
                         "~/.netrc")

    def test_redirects_are_followed_and_credentials_stay_with_their_host(self):
        url = f"{self.redirector.url}/train.tar"
        with lib.Mount(self.with_password(url), env=self.env()) as mnt:
            self.assertSameFiles(mnt, self.tree_files)
        sent = [line for line in self.redirector.auth_lines() if "train.tar" in line]
        got = [line for line in self.target.auth_lines() if "train.tar" in line]
        self.assertTrue(sent and got, (sent, got))
        self.assertTrue(all('auth="Basic ' in line for line in sent), sent)
        self.assertTrue(all(line.endswith('auth="-"') for line in got), got)  # none
        # HEADs of a pack's blobs are redirected too.
        with lib.Mount(f"{self.redirector.url}/pack/", env=self.env()) as mnt:
            self.assertSameFiles(mnt, self.pack_files)


def mount_log(mount):
    try:
        return mount.stderr()
    except ValueError:  # closed on exit
        return ""


class S3(Edges):
    """A presigned URL, and mounts with credentials that may GetObject but not ListBucket."""

    @classmethod
    def setUpClass(cls):
        reason = ceph_s3.skip_reason()
        if reason:
            raise unittest.SkipTest(reason)
        super().setUpClass()
        cls.s3 = ceph_s3.shared()
        cls.bucket = ceph_s3.unique_bucket("edges")
        cls.s3.make_bucket(cls.bucket)
        cls.s3.put_file(cls.bucket, "private/train.tar", os.path.join(cls.www, "train.tar"))
        cls.s3.put_file(cls.bucket, "private/train-v2", os.path.join(cls.www, "train.tar"))
        cls.s3.upload_tree(cls.pack, cls.bucket, "pack")
        mtree, cls.mytar = lib.make_dataset(os.path.join(cls.work, "m"), 3, 8, 4)
        cls.mytar_files = files_below(mtree)
        cls.s3.upload_tree(cls.mytar, cls.bucket, "mytar")
        cls.s3.upload_tree(os.path.dirname(cls.mytar), cls.bucket, "groups")
        cls.reader = cls.make_user("reader")
        cls.stranger = cls.make_user("stranger")
        policy = {"Version": "2012-10-17", "Statement": [{
            "Effect": "Allow", "Principal": {"AWS": [f"arn:aws:iam:::user/{cls.reader[0]}"]},
            "Action": ["s3:GetObject"], "Resource": [f"arn:aws:s3:::{cls.bucket}/*"]}]}
        cls.s3.client.request("PUT", cls.bucket, query={"policy": ""},
                              body=json.dumps(policy).encode())

    @classmethod
    def make_user(cls, role):
        uid = f"{role}-{uuid.uuid4().hex[:8]}"
        access, secret = "K" + uuid.uuid4().hex[:19].upper(), uuid.uuid4().hex
        cls.s3._run("radosgw-admin", "-c", cls.s3.conf_path, "-n", ceph_s3.RGW_NAME, "user",
                    "create", "--uid", uid, "--display-name", uid, "--access-key", access,
                    "--secret-key", secret)
        return uid, access, secret

    def env_of(self, user):
        return self.env(AWS_ACCESS_KEY_ID=user[1], AWS_SECRET_ACCESS_KEY=user[2],
                        AWS_ENDPOINT_URL=self.s3.endpoint, AWS_REGION=self.s3.region)

    def test_a_presigned_url_mounts_without_credentials(self):
        url = presign(self.s3.endpoint, self.bucket, "private/train.tar", self.s3.access_key,
                      self.s3.secret_key, self.s3.region)
        shown = f"{self.s3.endpoint}/{self.bucket}/private/train.tar?…"
        signature = url.rsplit("X-Amz-Signature=", 1)[1]
        for options in ((), ("--no-sign-request",)):
            mount = lib.Mount(url, *options, env=self.env())
            with mount as mnt:
                self.assertSameFiles(mnt, self.tree_files)
                self.assertEqual(os.getxattr(mnt, "user.gpufs.source").decode(), shown)
                with open(f"/proc/{mount.proc.pid}/cmdline", "rb") as f:
                    self.assertNotIn(signature.encode(), f.read())
                self.assertNotIn(signature, mount.stderr())
        unsigned = url.split("?")[0]
        self.assertEqual(self.refused(unsigned),
                         f"gpufsd: cannot stat {unsigned}: access denied (HTTP 403, AccessDenied)")

    def test_a_presigned_url_names_its_object_whatever_its_name(self):
        url = presign(self.s3.endpoint, self.bucket, "private/train-v2", self.s3.access_key,
                      self.s3.secret_key, self.s3.region)
        with lib.Mount(url, env=self.env()) as mnt:
            self.assertSameFiles(mnt, self.tree_files)

    def test_getobject_without_listbucket_mounts(self):
        reader = S3Client(self.s3.endpoint, self.reader[1], self.reader[2], self.s3.region)
        with self.assertRaises(S3Error) as listing:  # what the mounts below do without
            reader.list(self.bucket, "pack/")
        self.assertEqual(listing.exception.status, 403)
        cases = ((f"s3://{self.bucket}/pack/", (), self.pack_files),
                 (f"s3://{self.bucket}/mytar/", (), self.mytar_files),
                 (f"s3://{self.bucket}/groups/", ("--group-size", "4"), self.mytar_files))
        for url, options, expected in cases:
            with lib.Mount(url, *options, env=self.env_of(self.reader)) as mnt:
                self.assertSameFiles(mnt, expected, url)

    def test_without_getobject_the_missing_permission_is_named(self):
        url = f"s3://{self.bucket}/pack/"
        self.assertEqual(
            self.refused(url, env=self.env_of(self.stranger)),
            f"gpufsd: cannot open dataset {url}: access denied (HTTP 403 AccessDenied) to "
            f"{url}metadata.txt and {url}index.gpufs; check that your credentials may "
            f"s3:GetObject on {url}* (s3:ListBucket is not needed); if the bucket is "
            "requester-pays, mount with --request-payer requester")


if __name__ == "__main__":
    lib.exit_unless_fuse_usable()
    unittest.main(verbosity=2)
