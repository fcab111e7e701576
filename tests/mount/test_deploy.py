#!/usr/bin/python3
"""The deployment pieces of deploy/ (docs/cluster.md), run for real: the mount(8) helper
called directly, through mount(8) and from an fstab line; the peer cache's nginx config;
the systemd units and shell scripts checked by systemd-analyze and shellcheck where those
are installed; the Kubernetes manifest. The Slurm prolog and epilog: test_slurm.py; the
units' commands run with their limits: test_units.py."""
import grp
import os
import pwd
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

import gpufs_testlib as lib

sys.path.insert(0, lib.ROOT)
from tests.servers import nginx  # noqa: E402
from tests.servers.procs import free_port, wait_for  # noqa: E402

DEPLOY = os.path.join(lib.ROOT, "deploy")
HELPER = os.path.join(DEPLOY, "mount.gpufs")
PEER_CONFIG = os.path.join(DEPLOY, "gpufs-peer-config")
PROLOG = os.path.join(DEPLOY, "slurm", "prolog.sh")
EPILOG = os.path.join(DEPLOY, "slurm", "epilog.sh")
INSTALLED_HELPER = "/sbin/mount.fuse.gpufs"  # where mount(8) looks for it
SLICE = 4 << 20  # the peer cache's slice (gpufs-peer.conf)


def run(argv, env=None, timeout=60):
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "GPUFSD": lib.GPUFSD, **(env or {})})


def mount_entry(mnt):
    """(file system type, mount options, superblock options) of the mount at mnt."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4] == os.path.realpath(mnt):
                after = fields[fields.index("-") + 1:]
                return after[0], fields[5].split(","), after[2].split(",")
    return None


def daemon_pid(mnt):
    return int(os.getxattr(mnt, "user.gpufs.pid"))


def gpufsd_options():
    """{--flag: whether it takes a value} of `gpufsd mount --help`."""
    text = lib.run_gpufsd("mount", "--help").stdout
    found = re.findall(r"^\s+(?:-\w,)?(--[\w-]+)( [A-Z])?", text, re.M)
    return {flag: bool(value) for flag, value in found}


def peers_missing():
    """Why gpufsd cannot mount with peers yet, or None when it can."""
    if "--peers-file" not in gpufsd_options():
        return f"{lib.GPUFSD} has no --peers-file (see gpufsd mount --help)"
    return None


def refused(host, port):
    try:
        socket.create_connection((host, port), timeout=5).close()
        return False
    except ConnectionRefusedError:
        return True


class MountHelper(unittest.TestCase):
    """deploy/mount.gpufs on a packed sample, and through mount(8) where it is installed."""

    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="gpufs-deploy-")
        tree, _ = lib.make_dataset(cls.work, classes=3, per_class=8, group_size=4)
        cls.expected = lib.files_below(tree)
        cls.src = os.path.join(cls.work, "pack")
        result = lib.run_gpufsd("pack", tree, cls.src)
        assert result.returncode == 0, result.stderr

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.work)

    def setUp(self):
        self.mnt = tempfile.mkdtemp(prefix="gpufs-mnt-", dir=self.work)

    def tearDown(self):
        if lib.is_mounted(self.mnt):
            lib.run_gpufsd("unmount", self.mnt)
        os.rmdir(self.mnt)

    def check_mounted_and_unmount(self, umount=None):
        """The mount at self.mnt serves the sample; unmounts it (with `umount`, else gpufsd
        unmount) and checks that its daemon exited."""
        fstype, options, super_options = mount_entry(self.mnt)
        self.assertEqual(fstype, "fuse.gpufs")
        self.assertIn("ro", options)
        self.assertEqual(lib.files_below(self.mnt), self.expected)
        pid = daemon_pid(self.mnt)
        result = run(umount or [lib.GPUFSD, "unmount", self.mnt])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertFalse(lib.is_mounted(self.mnt))
        wait_for(f"gpufsd {pid} to exit", lambda: not lib.is_running(pid),
                 time.monotonic() + 30)
        return super_options

    def test_helper_mounts_with_gpufs_and_generic_options(self):
        result = run([HELPER, self.src, self.mnt, "-o", "cache_size=64MiB,ro,allow_other,_netdev"])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("allow_other", self.check_mounted_and_unmount())

    def test_options_translate_into_gpufsd_arguments(self):
        result = run([HELPER, self.src, self.mnt, "-sfnv", "-t", "fuse.gpufs", "-o",
                      "defaults,cache-size=1GiB,disk_cache_size=2GiB,no_disk_cache,nodev,"
                      "x-systemd.automount,nofail,peers_file=/etc/gpufs/peers,bogus,noatime"])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("gpufsd: ignoring unknown option 'bogus'", result.stderr)
        self.assertIn(f"mount.gpufs: {lib.GPUFSD} mount --sloppy --dry-run -o defaults,",
                      result.stderr)
        # -f: gpufsd --dry-run prints what the options amount to, and mounts nothing.
        self.assertEqual(result.stdout,
                         "gpufsd mount --cache-size 1GiB --disk-cache-size 2GiB "
                         "--no-disk-cache --peers-file /etc/gpufs/peers -o nodev,noatime "
                         f"{self.src} {self.mnt}\n")
        self.assertFalse(lib.is_mounted(self.mnt))

    def test_bad_options_are_refused_naming_them(self):
        cases = [("cache_sise=1G", "unknown option 'cache_sise' in -o (did you mean cache_size?)"),
                 ("cache_size", "cache_size needs a value"),
                 ("cache_size=10", "'10' is 10 bytes, too few to be meant"),
                 ("no_disk_cache=yes", "no_disk_cache takes no value"),
                 ("allow_other=1", "allow_other takes no value"),
                 ("peers=http://a:3128", "peers_file=FILE"),
                 ("policy=fifo", "-o policy=fifo: 'fifo' is not one of consume-once, pin, lru")]
        for options, message in cases:
            with self.subTest(options=options):
                result = run([HELPER, self.src, self.mnt, "-o", options])
                self.assertEqual(result.returncode, 1, result.stderr)
                self.assertIn(message, result.stderr)
                self.assertFalse(lib.is_mounted(self.mnt))
        result = run([HELPER, self.src])
        self.assertEqual(result.returncode, 1)
        self.assertIn("usage: mount.gpufs SRC MNT", result.stderr)
        # A failed mount (not a bad option) is mount(8)'s 32.
        result = run([HELPER, os.path.join(self.work, "absent"), self.mnt])
        self.assertEqual(result.returncode, 32, result.stderr)

    def test_every_option_listed_has_a_key_the_helper_takes(self):
        listing = lib.run_gpufsd("options").stdout
        keys = re.findall(r"^  (?:-\w, )?--([\w-]+)(?: (\S+))?\s+(?:-o (\S+)|\(command line only\))$",
                          listing, re.M)
        self.assertGreater(len(keys), 40)
        samples = {"N": "3", "SIZE": "8MiB", "SECONDS": "7", "PATH": "/x", "TEXT": "x",
                   "URL": "http://127.0.0.1:1"}
        for name, value, key in keys:
            if not key:
                continue
            with self.subTest(option=name):
                self.assertEqual(key.split("=")[0], name.replace("-", "_"))
                if value.startswith("{"):
                    value = value[1:-1].split(",")[-1]
                else:
                    value = samples.get(value, "")
                item = f"{key.split('=')[0]}={value}" if value else key
                result = run([HELPER, self.src, self.mnt, "-f", "-o", item])
                self.assertEqual(result.returncode, 0, result.stderr)
                if name != "sloppy":  # the one that changes nothing once -o is read
                    self.assertIn(f" --{name}", result.stdout)

    def installed_helper(self):
        if not os.path.exists(INSTALLED_HELPER):
            self.skipTest(f"{INSTALLED_HELPER} is not installed, and mount(8) looks for "
                          "helpers in /sbin only (meson install with --prefix /usr, or link "
                          "it to deploy/mount.gpufs)")

    def test_mount_t_fuse_gpufs_runs_the_helper(self):
        self.installed_helper()
        result = run(["mount", "-t", "fuse.gpufs", self.src, self.mnt, "-o",
                      "cache_size=64MiB,allow_other,_netdev,nofail"])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("allow_other", self.check_mounted_and_unmount(umount=["umount", self.mnt]))

    def test_an_fstab_line_mounts(self):
        self.installed_helper()
        fstab = os.path.join(self.work, "fstab")
        with open(fstab, "w") as f:
            f.write(f"{self.src} {self.mnt} fuse.gpufs "
                    "ro,noauto,cache_size=32M,policy=pin,_netdev,x-systemd.automount 0 0\n")
        result = run(["mount", "--fstab", fstab, self.mnt])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.check_mounted_and_unmount()


class PeerConfigValidation(unittest.TestCase):
    """gpufs-peer-config checks each value before it goes into nginx's config: a value that
    is not what it should be exits 2 naming the option, and prints and runs nothing."""

    def setUp(self):
        reason = nginx.peer_account()  # --main's default --user
        if reason:
            self.skipTest(reason)
        self.work = tempfile.mkdtemp(prefix="gpufs-peer-config-")
        self.secret = nginx.write_job_secret(os.path.join(self.work, "secret"))
        self.marker = os.path.join(self.work, "injected")
        self.good = {"--listen": "127.0.0.1:3128", "--origin": "http://127.0.0.1:8080",
                     "--cache-dir": os.path.join(self.work, "cache"),
                     "--secret-file": self.secret}

    def tearDown(self):
        shutil.rmtree(self.work)

    def config(self, **changes):
        values = {**self.good, **{"--" + k.replace("_", "-"): v for k, v in changes.items()}}
        return run([PEER_CONFIG, "--main", *(x for kv in values.items() for x in kv)])

    def test_good_values_make_a_config(self):
        result = self.config(cache_size="500g", slice="512k", listen="[::1]:3128",
                             origin="https://s3.example.com")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("listen [::1]:3128;", result.stdout)
        self.assertIn("server s3.example.com:443;", result.stdout)
        self.assertIn("proxy_pass https://gpufs_store;", result.stdout)
        # The workers run as an account of their own, with its group, never nobody.
        self.assertIn(f"\nuser {nginx.PEER_USER} {nginx.PEER_USER};\n", result.stdout)

    def test_the_workers_account_is_named_with_its_group_and_must_exist(self):
        nobody = pwd.getpwnam("nobody")
        result = self.config(user="nobody")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn(f"\nuser nobody {grp.getgrgid(nobody.pw_gid).gr_name};\n", result.stdout)
        result = self.config(user="gpufs-no-such-account")
        self.assertEqual(result.returncode, 2, result.stdout)
        self.assertIn("no such account: create it with `adduser --system --group "
                      "--no-create-home --home /nonexistent gpufs-no-such-account`",
                      result.stderr)
        # Without --main the site's nginx runs the workers: --user has no say there.
        values = [x for kv in self.good.items() for x in kv]
        result = run([PEER_CONFIG, *values, "--user", nginx.PEER_USER])
        self.assertEqual(result.returncode, 2, result.stdout)
        self.assertIn("only with --main", result.stderr)
        self.assertNotIn("\nuser ", run([PEER_CONFIG, *values]).stdout)

    def test_injections_and_bad_values_exit_2_and_run_nothing(self):
        sed_e = f"|;e touch {self.marker};#"
        cases = [("origin", "http://x;}"),
                 ("origin", "http://x:80;} server { listen 9999; }"),
                 ("origin", "http://a/b"),
                 ("origin", "ftp://a"),
                 ("origin", "http://user@a"),
                 ("listen", "127.0.0.1:1" + sed_e),
                 ("listen", "127.0.0.1"),
                 ("listen", "127.0.0.1:99999"),
                 ("cache_dir", "relative/cache"),
                 ("cache_dir", "/var/cache/x" + sed_e),
                 ("cache_dir", "/var/cache/x levels=1"),
                 ("cache_size", "500q"),
                 ("cache_size", "1g" + sed_e),
                 ("cache_size", "0"),
                 ("slice", "4m;"),
                 ("secret_file", os.path.join(self.work, "absent")),
                 ("user", "x; daemon off"),
                 ("user", "-x"),
                 ("user", "")]
        for key, value in cases:
            with self.subTest(option=key, value=value):
                result = self.config(**{key: value})
                self.assertEqual(result.returncode, 2, result.stdout)
                self.assertIn(f"--{key.replace('_', '-')} '{value}'", result.stderr)
                self.assertEqual(result.stdout, "")
                self.assertFalse(os.path.exists(self.marker), "a value ran a command")

    def test_a_secret_others_may_read_or_a_bad_secret_is_refused(self):
        os.chmod(self.secret, 0o644)
        result = self.config()
        self.assertEqual(result.returncode, 2)
        self.assertIn("chmod 600", result.stderr)
        for bad in ("", "short", "has a quote\" in it 0123456789", "x;}" * 10):
            with self.subTest(secret=bad):
                with open(self.secret, "w") as f:
                    f.write(bad)
                os.chmod(self.secret, 0o600)
                result = self.config()
                self.assertEqual(result.returncode, 2, result.stdout)
                self.assertIn("--secret-file", result.stderr)
                self.assertEqual(result.stdout, "")


class PeerCacheConfig(unittest.TestCase):
    def test_the_main_config_loads_and_proxies_the_origin(self):
        reason = nginx.NginxOrigin.skip_reason() or nginx.peer_account()
        if reason:
            self.skipTest(reason)
        work = tempfile.mkdtemp(prefix="gpufs-peer-")
        os.chmod(work, 0o755)
        try:
            blob = os.urandom(SLICE + 1000)  # two slices
            with open(os.path.join(work, "blob"), "wb") as f:
                f.write(blob)
            with nginx.NginxOrigin(work) as origin:
                port = free_port()
                prefix = os.path.join(work, "peer")
                os.mkdir(prefix)
                secret = nginx.write_job_secret(os.path.join(work, "secret"))
                conf = run([PEER_CONFIG, "--main", "--listen", f"127.0.0.1:{port}", "--origin",
                            origin.url, "--cache-dir", os.path.join(work, "cache"),
                            "--secret-file", secret])
                self.assertEqual(conf.returncode, 0, conf.stderr)
                with open(os.path.join(prefix, "nginx.conf"), "w") as f:
                    f.write(conf.stdout)
                argv = [nginx.nginx_binary(), "-p", prefix + "/", "-c", "nginx.conf", "-e",
                        os.path.join(prefix, "error.log")]
                result = run(argv)  # returns once it listens
                self.assertEqual(result.returncode, 0, result.stderr)
                try:
                    def get(headers):
                        request = urllib.request.Request(
                            f"http://127.0.0.1:{port}/blob",
                            headers={"Host": origin.url.split("//")[1], "Range": "bytes=10-",
                                     **headers})
                        try:
                            with urllib.request.urlopen(request, timeout=10) as r:
                                self.assertEqual(r.read(), blob[10:])
                                return r.headers["X-Gpufs-Peer-Cache"]
                        except urllib.error.HTTPError as e:
                            return e.code
                    job = nginx.secret_headers(secret)
                    other = {"Cookie": f"{nginx.SECRET_COOKIE}={'0' * 64}"}
                    self.assertEqual([get({}), get(other), get(job), get(job), get({})],
                                     [403, 403, "MISS", "HIT", 403])
                    # The secret went no further than the peer: the origin was asked twice
                    # (two slices), and no request reached it without being the job's.
                    self.assertEqual(origin.served("/blob")[0], 2)
                    with open(origin.access_log) as f:
                        self.assertNotIn(nginx.SECRET_COOKIE, f.read())
                finally:
                    stop = run(argv + ["-s", "stop"])
                    self.assertEqual(stop.returncode, 0, stop.stderr)
                    wait_for("the peer's nginx to stop", lambda: refused("127.0.0.1", port),
                             time.monotonic() + 30)
        finally:
            shutil.rmtree(work)


class StaticChecks(unittest.TestCase):
    def test_systemd_units_verify(self):
        analyze = shutil.which("systemd-analyze")
        if analyze is None:
            self.skipTest("systemd-analyze is not installed")
        units = os.path.join(DEPLOY, "systemd")
        # --man=no: the pages Documentation= names are the package's (tests/package checks
        # that man finds them); this tree's are not installed.
        result = run([analyze, "verify", "--man=no", os.path.join(units, "gpufs@imagenet.service"),
                      os.path.join(units, "gpufs-peer.service"),
                      os.path.join(units, "mnt-imagenet.mount")])
        problems = (result.stdout + result.stderr).splitlines()
        # systemd finds gpufsd in its own search path: installed, not in this build.
        path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        if shutil.which("gpufsd", path=path) is None:
            problems = [p for p in problems if "Command gpufsd is not executable" not in p]
        self.assertEqual(problems, [])

    def test_shell_scripts_pass_shellcheck(self):
        shellcheck = shutil.which("shellcheck")
        if shellcheck is None:
            self.skipTest("shellcheck is not installed (apt install shellcheck)")
        result = run([shellcheck, "-s", "sh", HELPER, PEER_CONFIG, PROLOG, EPILOG,
                      os.path.join(lib.ROOT, "debian", "gpufs.postinst")])
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

    def test_the_kubernetes_manifest_passes_named_keys_only(self):
        try:
            import yaml
        except ImportError:
            self.skipTest("PyYAML is not installed (apt install python3-yaml)")
        with open(os.path.join(DEPLOY, "kubernetes", "gpufs-daemonset.yaml")) as f:
            docs = {d["kind"]: d for d in yaml.safe_load_all(f) if d}
        self.assertEqual(list(docs), ["Namespace", "ConfigMap", "Service", "DaemonSet"])
        pod = docs["DaemonSet"]["spec"]["template"]["spec"]
        containers = pod["initContainers"] + pod["containers"]
        keys = set(docs["ConfigMap"]["data"])
        used = set()
        for c in containers:
            with self.subTest(container=c["name"]):
                # envFrom would let whoever edits the ConfigMap or a Secret set any variable
                # (LD_PRELOAD, ...) in a privileged container: each is named instead.
                self.assertNotIn("envFrom", c)
                for env in c.get("env", []):
                    ref = env.get("valueFrom", {}).get("configMapKeyRef")
                    if ref:
                        self.assertEqual((ref["name"], ref["key"]), ("gpufs", env["name"]))
                        self.assertIn(ref["key"], keys)
                        used.add(ref["key"])
        self.assertEqual(used, keys, "a key of the ConfigMap that no container reads")
        # One image for the config, the peer and the mount: the peer's account (the
        # package's) is the one the config names.
        self.assertEqual(len({c["image"] for c in containers}), 1)


if __name__ == "__main__":
    lib.exit_unless_fuse_usable()
    unittest.main(verbosity=2)
