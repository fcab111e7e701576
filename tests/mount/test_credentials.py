#!/usr/bin/python3
"""Where a mount's S3 keys come from, and keys that change under it: real mounts of a real
radosgw, whose users' keys are handed out by loopback fakes of IMDSv2, a container
endpoint and STS (tests/servers/fake_aws.py), by a credential_process program, by the AWS
files, and by radosgw's own STS (AssumeRole with 15 s sessions). Nothing here asks
169.254.x: every daemon gets AWS_EC2_METADATA_SERVICE_ENDPOINT on loopback, and HOME is
an empty folder with every AWS_* variable cleared."""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

import gpufs_testlib as lib
from gpufs_testlib import files_below, stats_of

sys.path.insert(0, lib.ROOT)
from tests.servers import ceph_s3  # noqa: E402
from tests.servers.fake_aws import FakeAws  # noqa: E402
from tests.servers.procs import free_port  # noqa: E402

BUCKET = "gpufs-creds"
ROLE_ARN = "arn:aws:iam::123456789012:role/gpufs-reader"
# radosgw's STS: sessions may be this short (rgw_sts_min_session_duration).
GPUFS_STAT = os.environ.get("GPUFS_STAT", os.path.join(lib.ROOT, "build", "cli", "gpufs-stat"))
STS_CONF = {"rgw_sts_key": "gpufsstskey12345", "rgw_s3_auth_use_sts": "true",
            "rgw_sts_min_session_duration": "10"}
SESSION_S = 15
NOBODY = 65534

# A credential_process program: AssumeRole on radosgw, signed with the keys in its
# environment; prints the keys as JSON Version 1, with their Expiration unless told not to.
ASSUME_ROLE_PROGRAM = r'''
import hashlib, http.client, json, os, re, sys, urllib.parse
sys.path.insert(0, os.environ["GPUFS_TEST_ROOT"])
from tests.servers.s3client import sign
endpoint = urllib.parse.urlsplit(os.environ["GPUFS_TEST_STS"])
body = urllib.parse.urlencode({"Action": "AssumeRole", "DurationSeconds": sys.argv[1],
    "RoleArn": "arn:aws:iam:::role/gpufs-reader", "RoleSessionName": "process",
    "Version": "2011-06-15"}).encode()
headers = {"content-type": "application/x-www-form-urlencoded"}
headers.update(sign("POST", endpoint.netloc, "/", {}, headers, hashlib.sha256(body).hexdigest(),
    os.environ["GPUFS_TEST_SOURCE_KEY"], os.environ["GPUFS_TEST_SOURCE_SECRET"], "us-east-1",
    service="sts"))
conn = http.client.HTTPConnection(endpoint.hostname, endpoint.port)
conn.request("POST", "/", body=body, headers=headers)
answer = conn.getresponse().read().decode()
field = lambda name: re.search(f"<{name}>(.*?)</{name}>", answer, re.S).group(1)
keys = {"Version": 1, "AccessKeyId": field("AccessKeyId"),
        "SecretAccessKey": field("SecretAccessKey"), "SessionToken": field("SessionToken")}
if sys.argv[2] == "with-expiration":
    keys["Expiration"] = field("Expiration")
print(json.dumps(keys))
'''


class Credentials(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        reason = ceph_s3.skip_reason()
        if reason:
            raise unittest.SkipTest(reason)
        cls.work = tempfile.mkdtemp(prefix="gpufs-creds-")
        tree = lib.make_split_tree(os.path.join(cls.work, "tree"), (4, 6), (2, 3))
        cls.expected = files_below(tree)
        pack = os.path.join(cls.work, "pack")
        result = lib.run_gpufsd("pack", tree, pack, "--group-bytes", "48KiB")
        assert result.returncode == 0, result.stderr
        cls.s3 = ceph_s3.CephS3(memstore_bytes=1 << 30, conf=STS_CONF).__enter__()
        cls.s3.make_bucket(BUCKET)
        cls.s3.upload_tree(pack, BUCKET, "pack")
        cls.url = f"s3://{BUCKET}/pack/"
        cls.users = [cls.make_user(f"reader{i}") for i in (1, 2)]
        cls.grant_read([uid for uid, _, _ in cls.users])
        cls.make_role()

    @classmethod
    def tearDownClass(cls):
        cls.s3.__exit__(None, None, None)
        shutil.rmtree(cls.work)

    @classmethod
    def admin(cls, *args):
        return cls.s3._run("radosgw-admin", "-c", cls.s3.conf_path, "-n", ceph_s3.RGW_NAME, *args)

    @classmethod
    def make_user(cls, uid):
        key = "GPUFS" + hashlib.sha256(uid.encode()).hexdigest()[:15].upper()
        secret = hashlib.sha256(("secret" + uid).encode()).hexdigest()[:40]
        cls.admin("user", "create", "--uid", uid, "--display-name", uid, "--access-key", key,
                  "--secret-key", secret)
        return uid, key, secret

    @classmethod
    def grant_read(cls, uids):
        policy = {"Version": "2012-10-17", "Statement": [{
            "Effect": "Allow", "Principal": {"AWS": [f"arn:aws:iam:::user/{u}" for u in uids]},
            "Action": ["s3:GetObject", "s3:ListBucket"],
            "Resource": [f"arn:aws:s3:::{BUCKET}", f"arn:aws:s3:::{BUCKET}/*"]}]}
        cls.s3.client.request("PUT", BUCKET, query={"policy": ""},
                              body=json.dumps(policy).encode())

    @classmethod
    def make_role(cls):
        trust = {"Version": "2012-10-17", "Statement": [{
            "Effect": "Allow", "Principal": {"AWS": ["arn:aws:iam:::user/gpufs"]},
            "Action": ["sts:AssumeRole"]}]}
        cls.admin("role", "create", "--role-name", "gpufs-reader",
                  "--assume-role-policy-doc", json.dumps(trust))
        policy = {"Version": "2012-10-17", "Statement": [{
            "Effect": "Allow", "Action": ["s3:*"], "Resource": ["arn:aws:s3:::*"]}]}
        cls.admin("role-policy", "put", "--role-name", "gpufs-reader", "--policy-name", "read",
                  "--policy-doc", json.dumps(policy))

    def setUp(self):
        self.home = tempfile.mkdtemp(dir=self.work)
        os.makedirs(os.path.join(self.home, ".aws"))
        self.suspended = []

    def tearDown(self):
        for uid in self.suspended:
            self.admin("user", "enable", "--uid", uid)

    def suspend(self, user):
        self.admin("user", "suspend", "--uid", user[0])
        self.suspended.append(user[0])

    def env(self, **extra):
        """No keys anywhere: AWS_* cleared, HOME empty, IMDS on a loopback port that
        refuses connections."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update({"HOME": self.home, "XDG_CACHE_HOME": os.path.join(self.home, "cache"),
                    "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": self.s3.endpoint,
                    "AWS_EC2_METADATA_SERVICE_ENDPOINT": f"http://127.0.0.1:{free_port()}"})
        env.update(extra)
        return env

    def write_aws(self, name, text):
        """Writes HOME/.aws/NAME afresh (a new inode, as editors and tools do)."""
        path = os.path.join(self.home, ".aws", name)
        with open(path + ".new", "w") as f:
            f.write(text)
        os.rename(path + ".new", path)
        return path

    def keys_profile(self, user, name="default"):
        return f"[{name}]\naws_access_key_id = {user[1]}\naws_secret_access_key = {user[2]}\n"

    def program(self, name, text):
        path = os.path.join(self.home, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def read_pass(self, mnt):
        """Every file through the daemon again: the kernel's page cache dropped."""
        lib.drop_page_cache()
        self.assertEqual(files_below(mnt), self.expected)

    def rotated_between_passes(self, aws, mnt, what):
        """A read pass; the endpoint rotated to user 2 and a refresh awaited; user 1
        suspended; a read pass again. The daemon's io counters."""
        self.read_pass(mnt)
        aws.rotate()
        lib.settled_stats(mnt, lambda s: s["io"]["credentials"]["refreshes"] >= 1, what,
                          timeout=20)
        self.suspend(self.users[0])
        self.read_pass(mnt)
        return stats_of(mnt)["io"]

    def credentials_of(self, mnt):
        return stats_of(mnt)["io"]["credentials"]

    def check_mount(self, env, source_words, *options):
        with lib.Mount(self.url, "--cache-size", "0", *options, env=env) as m:
            self.read_pass(m)
            stats = self.credentials_of(m)
            io = stats_of(m)["io"]
        self.assertEqual(io["errors"], 0)
        for word in source_words:
            self.assertIn(word, stats["source"])
        return stats

    # --- each source ------------------------------------------------------------------

    def test_imds_v2_hands_out_the_keys(self):
        with FakeAws(self.users, lifetime_s=3600) as aws:
            env = self.env(AWS_EC2_METADATA_SERVICE_ENDPOINT=aws.url)
            stats = self.check_mount(env, ["instance metadata", "gpufs-test-role", aws.url])
            self.assertGreaterEqual(aws.count("imds"), 1)
        self.assertGreater(stats["expires_in_s"], 3000)

    def test_container_endpoint_with_a_token_file(self):
        with FakeAws(self.users) as aws:
            token = self.program("token", aws.container_token + "\n")
            env = self.env(AWS_CONTAINER_CREDENTIALS_FULL_URI=aws.url + "/container",
                           AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE=token)
            self.check_mount(env, ["container endpoint", aws.url])
            self.assertGreaterEqual(aws.count("container"), 1)

    def test_web_identity_through_sts(self):
        with FakeAws(self.users) as aws:
            token = self.program("web-token", aws.web_token)
            env = self.env(AWS_WEB_IDENTITY_TOKEN_FILE=token, AWS_ROLE_ARN=ROLE_ARN,
                           AWS_ENDPOINT_URL_STS=aws.url)
            mount = lib.Mount(self.url, "--cache-size", "0", env=env)
            with mount as m:
                self.read_pass(m)
                log = mount.stderr()
            self.assertIn(f"credentials: web identity (role {ROLE_ARN}) via STS {aws.url}, "
                          "expire ", log)
            self.assertNotIn(self.users[0][2], log)
            self.assertGreaterEqual(aws.count("sts"), 1)

    def test_credential_process_prints_the_keys(self):
        user = self.users[0]
        script = self.program("keys.py", "import json\nprint(json.dumps({'Version': 1, "
                              f"'AccessKeyId': '{user[1]}', 'SecretAccessKey': '{user[2]}'}}))\n")
        self.write_aws("config", f"[default]\ncredential_process = '{sys.executable}' {script}\n")
        self.check_mount(self.env(), ["credential_process of profile 'default'"])

    def test_role_arn_with_source_profile_and_a_services_section(self):
        base = self.users[0]
        with FakeAws(self.users[1:], source_key=base[1]) as aws:
            self.write_aws("credentials", self.keys_profile(base, "base"))
            self.write_aws("config", f"[profile team]\nrole_arn = {ROLE_ARN}\n"
                           "source_profile = base\nservices = local\n\n[services local]\n"
                           f"s3 =\n  endpoint_url = {self.s3.endpoint}\n"
                           f"sts =\n  endpoint_url = {aws.url}\n")
            env = self.env(AWS_PROFILE="team")
            del env["AWS_ENDPOINT_URL"]  # the services section names the store
            self.check_mount(env, [f"role {ROLE_ARN} of profile 'team'", aws.url])
            self.assertGreaterEqual(aws.count("sts"), 1)

    # --- keys that change under a mount ---------------------------------------------

    def test_keys_rotated_and_suspended_mid_epoch(self):
        with FakeAws(self.users, lifetime_s=30) as aws:
            env = self.env(AWS_EC2_METADATA_SERVICE_ENDPOINT=aws.url)
            with lib.Mount(self.url, "--cache-size", "0", env=env) as m:
                files = sorted(self.expected)
                lib.drop_page_cache()
                for i, rel in enumerate(files):
                    if i == len(files) // 2:  # mid-epoch: user 1 is gone
                        aws.rotate()
                        self.suspend(self.users[0])
                    with open(os.path.join(m, rel), "rb") as f:
                        self.assertEqual(f.read(), self.expected[rel], rel)
                self.read_pass(m)
                io = stats_of(m)["io"]
        self.assertEqual(io["errors"], 0)
        self.assertGreaterEqual(io["credentials"]["refreshes"], 1)

    def test_keys_are_refreshed_before_they_expire(self):
        with FakeAws(self.users, lifetime_s=20) as aws:
            token = self.program("token", aws.container_token)
            env = self.env(AWS_CONTAINER_CREDENTIALS_FULL_URI=aws.url + "/container",
                           AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE=token)
            port = free_port()
            with lib.Mount(self.url, "--cache-size", "0", "--metrics", f"127.0.0.1:{port}",
                           env=env) as m:
                # Halfway through a 20 s lifetime, before any refusal.
                io = self.rotated_between_passes(aws, m, "a refresh before expiry")
                watch = subprocess.run([GPUFS_STAT, "-w", "--interval", "0.1", "--count", "1", m],
                                       capture_output=True, text=True, timeout=30)
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                    metrics = r.read().decode()
        self.assertEqual(io["errors"], 0)
        self.assertIn(f'credentials_source="container endpoint {aws.url}/container"',
                      watch.stdout)
        self.assertIn("credentials_refreshes=", watch.stdout)
        self.assertIn(f'gpufs_credentials_info{{source="container endpoint {aws.url}/container"}} 1',
                      metrics)
        self.assertIn("gpufs_credentials_refreshes ", metrics)

    def test_a_detached_daemon_refreshes_its_keys(self):
        """The refresher's thread does not survive the fork that detaches gpufsd: the
        daemon starts its own, so keys still change under a mount made without -f."""
        mnt = tempfile.mkdtemp(dir=self.work)
        with FakeAws(self.users, lifetime_s=20) as aws:
            env = self.env(AWS_CONTAINER_CREDENTIALS_FULL_URI=aws.url + "/container",
                           AWS_CONTAINER_AUTHORIZATION_TOKEN=aws.container_token)
            done = subprocess.run([lib.GPUFSD, "mount", self.url, mnt, "--cache-size", "0"],
                                  env=env, capture_output=True, text=True, timeout=60)
            self.assertEqual(done.returncode, 0, done.stderr)
            try:
                io = self.rotated_between_passes(aws, mnt, "a refresh in the detached daemon")
            finally:
                lib.run_gpufsd("unmount", mnt)
        self.assertEqual(io["errors"], 0)

    def test_a_rewritten_credentials_file_takes_effect(self):
        self.write_aws("credentials", self.keys_profile(self.users[0]))
        with lib.Mount(self.url, "--cache-size", "0", env=self.env()) as m:
            self.read_pass(m)
            self.write_aws("credentials", self.keys_profile(self.users[1]))
            self.suspend(self.users[0])
            self.read_pass(m)
            io = stats_of(m)["io"]
        self.assertEqual(io["errors"], 0)
        self.assertGreaterEqual(io["credentials"]["refreshes"], 1)
        self.assertIsNone(io["credentials"]["expires_in_s"])

    def sts_program_env(self, mode):
        script = self.program("assume.py", ASSUME_ROLE_PROGRAM)
        self.write_aws("config", "[default]\ncredential_process = "
                       f"{sys.executable} {script} {SESSION_S} {mode}\n")
        return self.env(GPUFS_TEST_ROOT=lib.ROOT, GPUFS_TEST_STS=self.s3.endpoint,
                        GPUFS_TEST_SOURCE_KEY=self.s3.access_key,
                        GPUFS_TEST_SOURCE_SECRET=self.s3.secret_key)

    def epoch_past_expiry(self, env):
        """Passes over the dataset until the first keys have expired; the stats after."""
        with lib.Mount(self.url, "--cache-size", "0", env=env) as m:
            until = time.monotonic() + SESSION_S + 3
            while time.monotonic() < until:
                self.read_pass(m)
                time.sleep(0.5)
            self.read_pass(m)
            return stats_of(m)["io"]

    def test_radosgw_sts_keys_are_renewed_before_expiry(self):
        io = self.epoch_past_expiry(self.sts_program_env("with-expiration"))
        self.assertEqual(io["errors"], 0)
        self.assertGreaterEqual(io["credentials"]["refreshes"], 1)

    def test_radosgw_refusing_expired_sts_keys_renews_them(self):
        # No Expiration: only radosgw's refusal of the expired session says to renew.
        io = self.epoch_past_expiry(self.sts_program_env("without-expiration"))
        self.assertEqual(io["errors"], 0)
        self.assertGreaterEqual(io["credentials"]["refreshes"], 1)

    # --- failures name the source -------------------------------------------------------

    def mount_error(self, env):
        mnt = tempfile.mkdtemp(dir=self.work)
        result = lib.run_gpufsd("mount", self.url, mnt, env=env)
        self.assertEqual(result.returncode, 1, result.stderr)
        return result.stderr

    def test_a_failing_credential_process_is_named_with_its_stderr(self):
        script = self.program("fail.sh", "echo 'no keys today' >&2\necho more >&2\nexit 3\n")
        config = self.write_aws("config", f"[default]\ncredential_process = sh {script}\n")
        self.assertIn("cannot get credentials from credential_process of profile 'default' in "
                      f"{config}: the program exited with status 3: no keys today",
                      self.mount_error(self.env()))

    def test_another_users_profile_is_refused_and_runs_nothing_as_root(self):
        """HOME names another user's AWS files (sudo -E, su -m): their credential_process
        would run as root. Refused naming the file and the fix; the same file of root's is
        used."""
        if os.geteuid() != 0:
            self.skipTest("not root: the rule protects a daemon run as root")
        user = self.users[0]
        marker = os.path.join(self.home, "ran")
        script = self.program("keys.sh", f"touch {marker}\nprintf '%s' '{{\"Version\": 1, "
                              f'"AccessKeyId": "{user[1]}", "SecretAccessKey": "{user[2]}"}}'
                              "'\n")
        config = self.write_aws("config", f"[default]\ncredential_process = sh {script}\n")
        os.chown(config, NOBODY, NOBODY)
        self.assertIn(f"cannot use the AWS config file {config}: it is owned by uid {NOBODY}, "
                      "neither you (uid 0) nor root; run gpufsd as the file's owner",
                      self.mount_error(self.env()))
        self.assertFalse(os.path.exists(marker), "root ran another user's credential_process")
        os.chown(config, 0, 0)
        os.chmod(config, 0o664)
        self.assertIn(f"others may write it (mode 0664); chmod go-w {config}",
                      self.mount_error(self.env()))
        self.assertFalse(os.path.exists(marker))
        os.chmod(config, 0o644)
        self.check_mount(self.env(), ["credential_process of profile 'default'"])
        self.assertTrue(os.path.exists(marker))

    def test_sts_refusing_the_web_identity_is_named(self):
        with FakeAws(self.users) as aws:
            aws.deny = ("AccessDenied", "the role trusts no such identity")
            token = self.program("web-token", aws.web_token)
            error = self.mount_error(self.env(AWS_WEB_IDENTITY_TOKEN_FILE=token,
                                              AWS_ROLE_ARN=ROLE_ARN,
                                              AWS_ENDPOINT_URL_STS=aws.url))
        self.assertIn(f"cannot assume role {ROLE_ARN} with web identity from {token} "
                      "(AWS_WEB_IDENTITY_TOKEN_FILE): STS answered 403 AccessDenied: the role "
                      "trusts no such identity", error)
        self.assertNotIn(aws.web_token, error)

    def test_no_credentials_anywhere_lists_where_it_looked(self):
        env = self.env()
        error = self.mount_error(env)
        for place in (f"cannot sign requests to {self.url}: no credentials",
                      "AWS_ACCESS_KEY_ID", os.path.join(self.home, ".aws", "credentials"),
                      "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                      env["AWS_EC2_METADATA_SERVICE_ENDPOINT"], "--no-sign-request"):
            self.assertIn(place, error)


if __name__ == "__main__":
    lib.exit_unless_fuse_usable()
    unittest.main()
