#!/usr/bin/python3
"""Reaching a store as deployments do: behind TLS with a private CA (nginx with a CA the
test makes), in another region than configured (a proxy that answers as AWS does), and in a
requester-pays bucket (radosgw enforces it). Every mount reads byte-exact; every refusal
says what to do."""
import json
import os
import shutil
import sys
import tempfile
import unittest

import gpufs_testlib as lib
from gpufs_testlib import files_below, stats_of

sys.path.insert(0, lib.ROOT)
from tests.servers import ceph_s3, nginx  # noqa: E402
from tests.servers.procs import ServerError  # noqa: E402
from tests.servers.region_proxy import RegionProxy  # noqa: E402
from tests.servers.s3client import S3Client  # noqa: E402

GROUP_BYTES = "64KiB"


class StoreAccess(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        reason = ceph_s3.skip_reason() or nginx.NginxOrigin.skip_reason()
        if reason:
            raise unittest.SkipTest(reason)
        lib.pack_in_s3(cls, "access", (3, 6), (2, 3), GROUP_BYTES, served="www")
        cls.served = os.path.join(cls.work, "www")
        cls.home = os.path.join(cls.work, "home")  # no ~/.aws of the machine's
        os.mkdir(cls.home)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.work)

    def env(self, endpoint=None, **extra):
        env = {**os.environ, **self.s3.env(), "HOME": self.home,
               "XDG_CACHE_HOME": tempfile.mkdtemp(prefix="xdg-", dir=self.work), **extra}
        for name in ("AWS_CA_BUNDLE", "SSL_CERT_FILE", "CURL_CA_BUNDLE", "AWS_CONFIG_FILE"):
            if name not in extra:
                env.pop(name, None)
        if endpoint:
            env["AWS_ENDPOINT_URL"] = endpoint
        return env

    def reads_exactly(self, url, *options, env):
        mount = lib.Mount(url, "--no-disk-cache", *options, env=env)
        with mount as mnt:
            self.assertEqual(files_below(mnt), self.expected, (url, options))
            io = stats_of(mnt)["io"]
            log = mount.stderr()
        self.assertEqual(io["errors"], 0, io)
        return io, log

    def refused(self, url, *options, env):
        """The daemon's words when a mount of url fails."""
        with self.assertRaises(RuntimeError) as failed:
            with lib.Mount(url, "--no-disk-cache", *options, env=env):
                pass
        return str(failed.exception)


class PrivateCa(StoreAccess):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        try:
            cls.ca = nginx.make_private_ca(tempfile.mkdtemp(prefix="ca-", dir=cls.work))
        except ServerError as e:
            raise unittest.SkipTest(str(e))
        cls.tls_s3 = nginx.NginxTls(cls.ca["cert"], cls.ca["key"], upstream=cls.s3.endpoint)
        cls.tls_web = nginx.NginxTls(cls.ca["cert"], cls.ca["key"], root=cls.served)
        cls.tls_s3.__enter__()
        cls.tls_web.__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.tls_s3.close()
        cls.tls_web.close()
        super().tearDownClass()

    def s3_url(self):
        return f"s3://{self.bucket}/pack/"

    def test_an_unknown_ca_is_refused_at_mount_naming_the_problem(self):
        for url, env in ((self.s3_url(), self.env(self.tls_s3.url)),
                         (self.tls_web.url + "/pack/", self.env())):
            words = self.refused(url, env=env)
            self.assertIn("SSL certificate problem: unable to get local issuer certificate",
                          words)
            self.assertIn("--ca-bundle", words)

    def test_s3_reads_with_the_ca_from_the_option_the_variable_or_the_profile(self):
        ca = self.ca["ca"]
        self.reads_exactly(self.s3_url(), "--ca-bundle", ca, env=self.env(self.tls_s3.url))
        self.reads_exactly(self.s3_url(), env=self.env(self.tls_s3.url, AWS_CA_BUNDLE=ca))
        config = os.path.join(self.work, "aws-config")
        with open(config, "w") as f:
            f.write(f"[default]\nca_bundle = {ca}\n")
        io, _ = self.reads_exactly(self.s3_url(),
                                   env=self.env(self.tls_s3.url, AWS_CONFIG_FILE=config))
        self.assertTrue(io["tls_verify"])

    def test_https_reads_with_the_ca_from_ssl_cert_file_or_the_option(self):
        url = self.tls_web.url + "/pack/"
        self.reads_exactly(url, env=self.env(SSL_CERT_FILE=self.ca["ca"]))
        self.reads_exactly(url, "--ca-bundle", self.ca["ca"], env=self.env())

    def test_a_bundle_that_cannot_be_read_is_refused_naming_it(self):
        missing = os.path.join(self.work, "no-such.pem")
        words = self.refused(self.s3_url(), "--ca-bundle", missing,
                             env=self.env(self.tls_s3.url))
        self.assertIn(f"cannot read the CA bundle {missing} (--ca-bundle)", words)
        words = self.refused(self.s3_url(), env=self.env(self.tls_s3.url,
                                                         AWS_CA_BUNDLE=self.ca["key"]))
        self.assertIn(f"{self.ca['key']} (AWS_CA_BUNDLE): it holds no PEM certificate", words)

    def test_no_verify_tls_mounts_and_says_so(self):
        io, log = self.reads_exactly(self.s3_url(), "--no-verify-tls",
                                     env=self.env(self.tls_s3.url))
        self.assertIn("--no-verify-tls: the certificate of", log)
        self.assertIn("NOT checked", log)
        self.assertFalse(io["tls_verify"])


class Region(StoreAccess):
    def test_a_wrong_region_is_learned_and_the_mount_reads(self):
        for answer in (301, 400):
            with RegionProxy(self.s3.endpoint, "eu-test-1", answer=answer) as proxy:
                env = self.env(proxy.url, AWS_REGION="us-east-1", AWS_DEFAULT_REGION="us-east-1")
                io, log = self.reads_exactly(f"s3://{self.bucket}/pack/", env=env)
            self.assertEqual(io["region"], "eu-test-1")
            self.assertRegex(log, r"is in region eu-test-1, not us-east-1 \(HTTP " +
                             str(answer))
            # Once per mount process (the probe's and the server's store each learn it, or
            # the server's starts there), not once per request.
            self.assertLessEqual(proxy.refused, 2, answer)
            self.assertGreaterEqual(proxy.refused, 1, answer)


class RequesterPays(StoreAccess):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        s3 = cls.s3
        cls.reader_key, cls.reader_secret = "GPUFSPAYER" + os.urandom(4).hex().upper(), \
            os.urandom(16).hex()
        uid = "payer-" + cls.bucket
        s3._run("radosgw-admin", "-c", s3.conf_path, "-n", ceph_s3.RGW_NAME, "user", "create",
                "--uid", uid, "--display-name", "requester pays tests",
                "--access-key", cls.reader_key, "--secret-key", cls.reader_secret)
        policy = {"Version": "2012-10-17", "Statement": [{
            "Effect": "Allow", "Principal": {"AWS": [f"arn:aws:iam:::user/{uid}"]},
            "Action": ["s3:GetObject", "s3:ListBucket"],
            "Resource": [f"arn:aws:s3:::{cls.bucket}", f"arn:aws:s3:::{cls.bucket}/*"]}]}
        s3.client.request("PUT", cls.bucket, query={"policy": ""},
                          body=json.dumps(policy).encode())
        s3.client.request("PUT", cls.bucket, query={"requestPayment": ""}, body=(
            b'<RequestPaymentConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            b"<Payer>Requester</Payer></RequestPaymentConfiguration>"))
        # radosgw enforces it: the reader is refused without the header.
        reader = S3Client(s3.endpoint, cls.reader_key, cls.reader_secret)
        assert reader.request("HEAD", cls.bucket, "pack/index.gpufs", check=False).status == 403

    def reader_env(self, endpoint=None):
        return self.env(endpoint, AWS_ACCESS_KEY_ID=self.reader_key,
                        AWS_SECRET_ACCESS_KEY=self.reader_secret)

    def test_refused_without_the_option_with_a_hint_and_read_with_it(self):
        url = f"s3://{self.bucket}/pack/"
        words = self.refused(url, env=self.reader_env())
        self.assertIn("access denied", words)
        self.assertIn("--request-payer requester", words)
        with RegionProxy(self.s3.endpoint, "us-east-1") as proxy:
            self.reads_exactly(url, "--request-payer", "requester",
                               env=self.reader_env(proxy.url))
        self.assertTrue(proxy.payer)
        self.assertEqual(set(proxy.payer), {"requester"})


del StoreAccess  # a base, not a test class

if __name__ == "__main__":
    lib.exit_unless_fuse_usable()
    unittest.main()
