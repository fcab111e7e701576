#!/usr/bin/python3
"""The deployment pieces of deploy/ (docs/cluster.md), run for real: the mount(8) helper
called directly, through mount(8) and from an fstab line; the Slurm prolog and epilog on
loopback, with real nginx peer caches in front of a real nginx origin; the peer cache's
nginx config; the systemd units and shell scripts checked by systemd-analyze and
shellcheck where those are installed."""
import os
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
        result = run([HELPER, self.src, self.mnt, "-o", "cache_size=64M,ro,allow_other,_netdev"])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("allow_other", self.check_mounted_and_unmount())

    def test_options_translate_into_gpufsd_arguments(self):
        result = run([HELPER, self.src, self.mnt, "-sfnv", "-t", "fuse.gpufs", "-o",
                      "defaults,cache-size=1G,disk_cache_size=2G,no_disk_cache,nodev,"
                      "x-systemd.automount,nofail,peers_file=/etc/gpufs/peers,bogus,noatime"])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("mount.gpufs: ignoring unknown option 'bogus'", result.stderr)
        self.assertIn(f"mount.gpufs: {lib.GPUFSD} mount --cache-size 1G --disk-cache-size 2G "
                      f"--no-disk-cache --peers-file /etc/gpufs/peers -o nodev,noatime "
                      f"{self.src} {self.mnt}\n", result.stderr)
        self.assertFalse(lib.is_mounted(self.mnt))  # -f: nothing mounted

    def test_bad_options_are_refused_naming_them(self):
        cases = [("cache_sise=1G", 1, "unknown option 'cache_sise'"),
                 ("cache_size", 1, "cache_size needs a value"),
                 ("no_disk_cache=yes", 1, "no_disk_cache takes no value"),
                 ("allow_other=1", 1, "allow_other takes no value"),
                 ("peers=http://a:3128", 1, "peers_file=FILE"),
                 ("policy=fifo", 32, "--policy: fifo not in")]  # gpufsd's own check
        for options, status, message in cases:
            with self.subTest(options=options):
                result = run([HELPER, self.src, self.mnt, "-o", options])
                self.assertEqual(result.returncode, status, result.stderr)
                self.assertIn(message, result.stderr)
                self.assertFalse(lib.is_mounted(self.mnt))
        result = run([HELPER, self.src])
        self.assertEqual(result.returncode, 1)
        self.assertIn("usage: mount.gpufs SRC MNT", result.stderr)

    def test_every_gpufs_option_of_the_helper_is_one_of_gpufsd(self):
        with open(HELPER) as f:
            table = re.search(r"^GPUFS_OPTIONS='(.*?)'", f.read(), re.S | re.M)[1].split()
        self.assertIn("cache_size=", table)
        known = gpufsd_options()
        for key in table:
            flag = "--" + key.rstrip("=").replace("_", "-")
            with self.subTest(option=key):
                if flag == "--peers-file" and peers_missing():
                    self.skipTest(peers_missing())
                self.assertIn(flag, known)
                self.assertEqual(known[flag], key.endswith("="), "a value or a flag alike")

    def installed_helper(self):
        if not os.path.exists(INSTALLED_HELPER):
            self.skipTest(f"{INSTALLED_HELPER} is not installed, and mount(8) looks for "
                          "helpers in /sbin only (meson install with --prefix /usr, or link "
                          "it to deploy/mount.gpufs)")

    def test_mount_t_fuse_gpufs_runs_the_helper(self):
        self.installed_helper()
        result = run(["mount", "-t", "fuse.gpufs", self.src, self.mnt, "-o",
                      "cache_size=64M,allow_other,_netdev,nofail"])
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


class Slurm(unittest.TestCase):
    """The prolog and epilog of two nodes, 127.0.0.1 and 127.0.0.2 (both loopback), each
    with its own peer cache, mount and folders; scontrol is a stub naming those two."""

    NODES = ("127.0.0.1", "127.0.0.2")
    NODELIST = "node[1-2]"

    @classmethod
    def setUpClass(cls):
        reason = nginx.NginxOrigin.skip_reason()
        if reason:
            raise unittest.SkipTest(reason)
        cls.work = tempfile.mkdtemp(prefix="gpufs-slurm-")
        # As root, nginx's workers run as another user, who must reach the peers' caches.
        os.chmod(cls.work, 0o755)
        tree, _ = lib.make_dataset(os.path.join(cls.work, "data"), classes=3, per_class=8,
                                   group_size=4)
        cls.expected = lib.files_below(tree)
        www = os.path.join(cls.work, "www")
        # A pack: --peers needs the SHA-256 digests its index records.
        pack = lib.pack_to_serve(tree, www, "32KiB")
        cls.blobs = sorted(n for n in os.listdir(pack) if n != "index.gpufs")
        cls.origin = nginx.NginxOrigin(www).__enter__()
        cls.scontrol = os.path.join(cls.work, "scontrol")
        with open(cls.scontrol, "w") as f:
            f.write(f'#!/bin/sh\n[ "$*" = "show hostnames {cls.NODELIST}" ] || exit 1\n'
                    f"printf '%s\\n' {' '.join(cls.NODES)}\n")
        os.chmod(cls.scontrol, 0o755)
        # The site's peer key, the same on every node.
        cls.key_file = nginx.write_job_secret(os.path.join(cls.work, "peer.key"))

    @classmethod
    def tearDownClass(cls):
        cls.origin.__exit__(None, None, None)
        shutil.rmtree(cls.work)

    def setUp(self):
        self.port = free_port()
        self.nodes = []

    def tearDown(self):
        for node in self.nodes:  # after a failure: nothing may stay mounted or running
            for job in os.listdir(node["run"]) if os.path.isdir(node["run"]) else []:
                self.script(EPILOG, node, job)
            for mnt in [os.path.join(node["dir"], n) for n in os.listdir(node["dir"])]:
                if os.path.basename(mnt).startswith("mnt") and lib.is_mounted(mnt):
                    lib.run_gpufsd("unmount", mnt)
            shutil.rmtree(node["dir"])

    @staticmethod
    def job_run(node, job="42"):
        """The job's run folder on `node`."""
        return os.path.join(node["run"], job)

    def node(self, name, source, options="--cache-size 16MiB --no-disk-cache", per_job=False):
        """The folders and the settings file (/etc/gpufs/slurm.conf) of one node. With
        `per_job`, each job gets its own mount point, port and peer cache folder, made
        from $SLURM_JOB_ID as a site with shared nodes would write it."""
        d = tempfile.mkdtemp(prefix=f"node-{name}-", dir=self.work)
        os.chmod(d, 0o755)
        node = {"name": name, "dir": d, "mnt": os.path.join(d, "mnt"),
                "run": os.path.join(d, "run"), "cache": os.path.join(d, "peer-cache"),
                "conf": os.path.join(d, "slurm.conf")}
        mnt, port, cache = node["mnt"], str(self.port), node["cache"]
        if per_job:
            mnt, port = mnt + "-$SLURM_JOB_ID", f"$(({self.port} + SLURM_JOB_ID - 42))"
            cache += "-$SLURM_JOB_ID"
        with open(node["conf"], "w") as f:
            f.write(f"GPUFS_SOURCE={source}\nGPUFS_MOUNTPOINT={mnt}\n"
                    f"GPUFS_MOUNT_OPTIONS='{options}'\nGPUFS_PEER_PORT={port}\n"
                    f"GPUFS_PEER_CACHE_DIR={cache}\nGPUFS_PEER_CACHE_SIZE=1g\n"
                    f"GPUFS_RUN_DIR={node['run']}\nGPUFS_PEER_KEY_FILE={self.key_file}\n")
        self.nodes.append(node)
        return node

    def script(self, path, node, job="42", **env):
        """Runs the prolog or epilog of `job` as slurmd would on `node`."""
        return run([path], env={
            "GPUFS_SLURM_CONF": node["conf"], "SLURM_JOB_ID": job,
            "SLURM_JOB_NODELIST": self.NODELIST, "SLURMD_NODENAME": node["name"],
            "SCONTROL": self.scontrol, "NGINX": nginx.nginx_binary(),
            "PEER_CONFIG": PEER_CONFIG,
            "XDG_CACHE_HOME": os.path.join(node["dir"], "xdg"), **env})

    def peer_get(self, host, path, secret_file):
        """The peer cache status of a GET of `path` through the peer at host, sent as
        gpufsd sends it: with the origin's Host and the job's secret (none: without)."""
        headers = {"Host": self.origin.url.split("//")[1]}
        if secret_file:
            headers.update(nginx.secret_headers(secret_file))
        request = urllib.request.Request(f"http://{host}:{self.port}{path}", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=10) as r:
                r.read()
                return r.headers["X-Gpufs-Peer-Cache"]
        except urllib.error.HTTPError as e:
            return e.code

    def check_rendered(self, node):
        peers = [f"http://{n}:{self.port}" for n in self.NODES]
        with open(os.path.join(self.job_run(node), "peers")) as f:
            self.assertEqual([ln for ln in f.read().splitlines() if not ln.startswith("#")],
                             peers)
        with open(os.path.join(self.job_run(node), "nginx", "nginx.conf")) as f:
            conf = f.read()
        self.assertIn(f"listen {node['name']}:{self.port};", conf)
        self.assertIn(f"server {self.origin.url.split('//')[1]};", conf)
        self.assertIn(f"proxy_cache_path {node['cache']} ", conf)

    def origin_slices(self):
        """Blob GETs the origin answered for whole aligned slices: only the peers ask so."""
        count = 0
        with open(self.origin.access_log) as f:
            for line in f:
                m = re.search(r'"GET /pack/blob\S+ [^"]*" 20\d .*range="bytes=(\d+)-(\d+)"',
                              line)
                if m and int(m[1]) % SLICE == 0 and int(m[2]) - int(m[1]) + 1 == SLICE:
                    count += 1
        return count

    def test_prolog_mounts_through_the_peers_and_epilog_undoes_it(self):
        reason = peers_missing()
        if reason:
            self.skipTest(reason)
        nodes = [self.node(n, f"{self.origin.url}/pack/") for n in self.NODES]
        for node in nodes:
            result = self.script(PROLOG, node)
            self.assertEqual(result.returncode, 0, result.stderr)
            self.check_rendered(node)
            self.assertTrue(lib.is_mounted(node["mnt"]))
        for node in nodes:
            self.assertEqual(lib.files_below(node["mnt"]), self.expected)
        self.assertGreater(self.origin_slices(), 0)
        secrets = [os.path.join(self.job_run(node), "secret") for node in nodes]
        with open(secrets[0]) as a, open(secrets[1]) as b:
            self.assertEqual(a.read(), b.read(), "one secret for the job's nodes")
        self.assertEqual(os.stat(secrets[0]).st_mode & 0o777, 0o600)
        for blob in self.blobs:  # each blob was read through one of the peers
            statuses = [self.peer_get(n, f"/pack/{blob}", secrets[0]) for n in self.NODES]
            self.assertIn("HIT", statuses, blob)
            # Not for whoever else reaches the port: refused before the cache is read.
            self.assertEqual([self.peer_get(n, f"/pack/{blob}", None) for n in self.NODES],
                             [403, 403])

        pids = []
        for node in nodes:
            with open(os.path.join(self.job_run(node), "nginx", "nginx.pid")) as f:
                pids.append(int(f.read()))
            pids.append(daemon_pid(node["mnt"]))
        for node in nodes:
            result = self.script(EPILOG, node)
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertFalse(lib.is_mounted(node["mnt"]))
            self.assertFalse(os.path.exists(self.job_run(node)))
            self.assertTrue(refused(node["name"], self.port))
            self.assertTrue(os.listdir(node["cache"]), "the peer's slices stay for the next job")
        self.assertEqual([p for p in pids if lib.is_running(p)], [])

    def test_a_failed_mount_fails_the_prolog_and_leaves_nothing_running(self):
        node = self.node(self.NODES[0], f"{self.origin.url}/pack/")
        # gpufsd stands in: it records what it was given and what it saw, then fails.
        stub = os.path.join(node["dir"], "gpufsd-stub")
        record = os.path.join(node["dir"], "record")
        with open(stub, "w") as f:
            f.write(f'#!/bin/sh\n[ "$1" = mount ] || exec {lib.GPUFSD} "$@"\n'
                    f'{{ echo "$*"; cat "{self.job_run(node)}/peers" '
                    f'"{self.job_run(node)}/nginx/nginx.pid"; }}'
                    f' > {record}\necho "gpufsd stub: cannot mount" >&2\nexit 1\n')
        os.chmod(stub, 0o755)
        result = self.script(PROLOG, node, GPUFSD=stub)
        self.assertEqual(result.returncode, 1)
        self.assertIn(f"gpufs prolog: cannot mount {self.origin.url}/pack/ at {node['mnt']}",
                      result.stderr)
        with open(record) as f:
            args, *peers, pid = f.read().splitlines()
        self.assertEqual(args, f"mount --peers-file {self.job_run(node)}/peers "
                         f"--peer-secret-file {self.job_run(node)}/secret -o allow_other "
                         f"--cache-size 16MiB --no-disk-cache {self.origin.url}/pack/ "
                         f"{node['mnt']}")
        self.assertEqual(peers[1:], [f"http://{n}:{self.port}" for n in self.NODES])
        self.assertFalse(lib.is_running(int(pid)))
        self.assertFalse(os.path.exists(self.job_run(node)))
        self.assertTrue(refused(node["name"], self.port))

    def job_state(self, node, job):
        """What a job's prolog started on `node`: (its nginx's pid, its secret)."""
        with open(os.path.join(self.job_run(node, job), "nginx", "nginx.pid")) as f:
            pid = int(f.read())
        with open(os.path.join(self.job_run(node, job), "secret")) as f:
            return pid, f.read()

    def assert_job_intact(self, node, job, mnt, state):
        self.assertTrue(lib.is_mounted(mnt), f"job {job}'s mount is gone")
        self.assertEqual(lib.files_below(mnt), self.expected)
        self.assertEqual(self.job_state(node, job), state, f"job {job}'s state changed")
        self.assertTrue(lib.is_running(state[0]), f"job {job}'s peer cache is gone")

    def test_a_second_job_on_the_node_is_refused_and_leaves_the_first_intact(self):
        reason = peers_missing()
        if reason:
            self.skipTest(reason)
        node = self.node(self.NODES[0], f"{self.origin.url}/pack/")
        result = self.script(PROLOG, node, "42")
        self.assertEqual(result.returncode, 0, result.stderr)
        first = self.job_state(node, "42")
        second = self.script(PROLOG, node, "43")
        self.assertEqual(second.returncode, 1)
        self.assertIn(f"gpufs prolog: cannot mount at {node['mnt']}: something is mounted there "
                      "already", second.stderr)
        self.assert_job_intact(node, "42", node["mnt"], first)
        # slurmd runs the epilog of the refused job too.
        result = self.script(EPILOG, node, "43")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assert_job_intact(node, "42", node["mnt"], first)
        self.assertEqual(os.listdir(node["run"]), ["42"])
        result = self.script(EPILOG, node, "42")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertFalse(lib.is_mounted(node["mnt"]))
        self.assertFalse(lib.is_running(first[0]))

    def test_jobs_with_their_own_mount_point_and_port_share_a_node(self):
        reason = peers_missing()
        if reason:
            self.skipTest(reason)
        node = self.node(self.NODES[0], f"{self.origin.url}/pack/", per_job=True)
        mnts = {job: f"{node['mnt']}-{job}" for job in ("42", "43")}
        for job in mnts:
            result = self.script(PROLOG, node, job)
            self.assertEqual(result.returncode, 0, result.stderr)
        states = {job: self.job_state(node, job) for job in mnts}
        self.assertNotEqual(states["42"][1], states["43"][1], "one secret per job")
        for job, mnt in mnts.items():
            self.assert_job_intact(node, job, mnt, states[job])
        result = self.script(EPILOG, node, "42")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertFalse(lib.is_mounted(mnts["42"]))
        self.assertFalse(lib.is_running(states["42"][0]))
        self.assert_job_intact(node, "43", mnts["43"], states["43"])
        result = self.script(EPILOG, node, "43")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertFalse(lib.is_mounted(mnts["43"]))
        self.assertFalse(lib.is_running(states["43"][0]))
        self.assertEqual(os.listdir(node["run"]), [])

    def test_a_job_without_the_site_key_fails_the_prolog(self):
        node = self.node(self.NODES[0], f"{self.origin.url}/mytar/")
        with open(node["conf"], "a") as f:
            f.write(f"GPUFS_PEER_KEY_FILE={node['dir']}/absent.key\n")
        result = self.script(PROLOG, node)
        self.assertEqual(result.returncode, 1)
        self.assertIn("cannot make the job's peer secret", result.stderr)
        self.assertFalse(lib.is_mounted(node["mnt"]))
        self.assertTrue(refused(node["name"], self.port))

    def test_the_epilog_leaves_alone_a_process_that_took_the_peers_pid(self):
        node = self.node(self.NODES[0], f"{self.origin.url}/mytar/")
        nginx_dir = os.path.join(self.job_run(node), "nginx")
        started = os.path.join(self.job_run(node), "nginx.started")

        def leave(record):
            """The run folder as a prolog leaves it: nginx.pid, and what it recorded."""
            os.makedirs(nginx_dir, exist_ok=True)
            with open(os.path.join(nginx_dir, "nginx.pid"), "w") as f:
                f.write(f"{bystander.pid}\n")
            if record:
                with open(started, "w") as f:
                    f.write(record)

        # The peer's nginx exited, and its pid now names an unrelated process.
        bystander = subprocess.Popen(["sleep", "300"])
        try:
            for record in (None,  # only nginx.pid names it
                           f"{bystander.pid} 1 {nginx.nginx_binary()}\n",  # started earlier
                           f"{bystander.pid} {self.start_time(bystander.pid)} /usr/sbin/nginx\n"):
                with self.subTest(record=record):
                    leave(record)
                    self.script(EPILOG, node)
                    self.assertIsNone(bystander.poll(), "the epilog signalled a stranger")
            # The process the record names is signalled.
            identity = run([EPILOG, "--identity", str(bystander.pid)])
            self.assertEqual(identity.returncode, 0, identity.stderr)
            self.assertEqual(identity.stdout.split()[:2],
                             [str(bystander.pid), self.start_time(bystander.pid)])
            leave(identity.stdout)
            result = self.script(EPILOG, node)
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertEqual(bystander.wait(timeout=30), -15)
        finally:
            bystander.kill()
            bystander.wait()

    @staticmethod
    def start_time(pid):
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1].split()[19]


class PeerConfigValidation(unittest.TestCase):
    """gpufs-peer-config checks each value before it goes into nginx's config: a value that
    is not what it should be exits 2 naming the option, and prints and runs nothing."""

    def setUp(self):
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
                 ("secret_file", os.path.join(self.work, "absent"))]
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
        reason = nginx.NginxOrigin.skip_reason()
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
        result = run([analyze, "verify", os.path.join(units, "gpufs@imagenet.service"),
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
        result = run([shellcheck, "-s", "sh", HELPER, PEER_CONFIG, PROLOG, EPILOG])
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

    def test_the_kubernetes_manifest_parses(self):
        try:
            import yaml
        except ImportError:
            self.skipTest("PyYAML is not installed (apt install python3-yaml)")
        with open(os.path.join(DEPLOY, "kubernetes", "gpufs-daemonset.yaml")) as f:
            kinds = [d["kind"] for d in yaml.safe_load_all(f) if d]
        self.assertEqual(kinds, ["Namespace", "ConfigMap", "Service", "DaemonSet"])


if __name__ == "__main__":
    lib.exit_unless_fuse_usable()
    unittest.main(verbosity=2)
