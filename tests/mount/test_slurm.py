#!/usr/bin/python3
"""The Slurm prolog and epilog of deploy/slurm (docs/cluster.md, "Slurm") run for real on
loopback: two nodes with real nginx peer caches in front of a real nginx origin, real
gpufsd mounts, and a stub scontrol; jobs alone on a node and jobs sharing one."""
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import unittest
import urllib.error
import urllib.request

import gpufs_testlib as lib
from test_deploy import EPILOG, PEER_CONFIG, PROLOG, SLICE, daemon_pid, peers_missing, refused, run

sys.path.insert(0, lib.ROOT)
from tests.servers import nginx  # noqa: E402
from tests.servers.procs import bindable, free_port_run  # noqa: E402


class Slurm(unittest.TestCase):
    """The prolog and epilog of two nodes, 127.0.0.1 and 127.0.0.2 (both loopback), each
    with its own peer cache, mount and folders; scontrol is a stub naming those two."""

    NODES = ("127.0.0.1", "127.0.0.2")
    NODELIST = "node[1-2]"

    @classmethod
    def setUpClass(cls):
        reason = nginx.NginxOrigin.skip_reason() or nginx.peer_account()
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
        cls.pack = pack  # also a dataset on a cluster file system, as the nodes see it
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
        # Two ports from here on both nodes: per-job ports are this one plus the job's offset.
        self.port = free_port_run(2, self.NODES)
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

    def test_a_second_job_at_a_shared_mount_point_mounts_nothing_and_the_node_stays_up(self):
        """A prolog that fails drains the node for every job on it: a second job at the
        first one's mount point (settings that give jobs one) mounts nothing and runs."""
        reason = peers_missing()
        if reason:
            self.skipTest(reason)
        node = self.node(self.NODES[0], f"{self.origin.url}/pack/")
        result = self.script(PROLOG, node, "42")
        self.assertEqual(result.returncode, 0, result.stderr)
        first = self.job_state(node, "42")
        second = self.script(PROLOG, node, "43")
        self.assertEqual(second.returncode, 0, second.stderr)
        self.assertIn(f"gpufs prolog: job 43 mounts nothing at {node['mnt']}: something is "
                      "mounted there already", second.stderr)
        self.assert_job_intact(node, "42", node["mnt"], first)
        # slurmd runs the epilog of the second job too.
        result = self.script(EPILOG, node, "43")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assert_job_intact(node, "42", node["mnt"], first)
        self.assertEqual(os.listdir(node["run"]), ["42"])
        result = self.script(EPILOG, node, "42")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertFalse(lib.is_mounted(node["mnt"]))
        self.assertFalse(lib.is_running(first[0]))

    def test_a_taken_peer_port_costs_the_job_its_cache_on_that_node_not_the_node(self):
        """Whoever holds a node's peer port first (on an unprivileged port, any user): that
        node runs the job without its own peer cache, reading through the other's."""
        reason = peers_missing()
        if reason:
            self.skipTest(reason)
        nodes = [self.node(n, f"{self.origin.url}/pack/") for n in self.NODES]
        squatter = socket.socket()
        squatter.bind((self.NODES[0], self.port))
        squatter.listen()
        try:
            results = [self.script(PROLOG, node) for node in nodes]
            for result in results:
                self.assertEqual(result.returncode, 0, result.stderr)
            self.assertIn(f"gpufs prolog: job 42 has no peer cache on {self.NODES[0]}: nginx "
                          f"cannot listen on {self.NODES[0]}:{self.port}", results[0].stderr)
            self.assertNotIn("no peer cache", results[1].stderr)
            for node in nodes:
                self.assertEqual(lib.files_below(node["mnt"]), self.expected)
            self.assertFalse(os.path.exists(os.path.join(self.job_run(nodes[0]), "nginx")))
            for node in nodes:
                result = self.script(EPILOG, node)
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertFalse(lib.is_mounted(node["mnt"]))
                self.assertEqual(os.listdir(node["run"]), [])
        finally:
            squatter.close()

    def test_the_default_peer_port_is_a_privileged_one_per_job(self):
        """No user's process can listen on a port below 1024 before the prolog does."""
        reason = peers_missing()
        if reason:
            self.skipTest(reason)
        port = 700 + 42 % 100
        if not all(bindable(n, port) for n in self.NODES):
            self.skipTest(f"port {port} is taken on this machine")
        node = self.node(self.NODES[0], f"{self.origin.url}/pack/")
        with open(node["conf"]) as f:
            settings = f.read()
        with open(node["conf"], "w") as f:
            f.write(re.sub(r"^GPUFS_PEER_PORT=.*\n", "", settings, flags=re.M))
        result = self.script(PROLOG, node)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertNotIn("warning", result.stderr)
        with open(os.path.join(self.job_run(node), "nginx", "nginx.conf")) as f:
            self.assertIn(f"listen {node['name']}:{port};", f.read())
        with open(os.path.join(self.job_run(node), "peers")) as f:
            self.assertIn(f"http://{self.NODES[1]}:{port}", f.read())
        result = self.script(EPILOG, node)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertTrue(refused(node["name"], port))

    def test_a_mount_another_user_sits_in_is_forced_by_the_epilog(self):
        """A user's shell in another job's mount (allow_other) when the job ends: the
        epilog still succeeds, and the job's mount, daemon and folder are gone."""
        node = self.node(self.NODES[0], self.pack, per_job=True)
        mnt = f"{node['mnt']}-42"
        result = self.script(PROLOG, node)
        self.assertEqual(result.returncode, 0, result.stderr)
        pid = daemon_pid(mnt)
        holder = subprocess.Popen(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sleep", "300"],
            cwd=mnt)
        try:
            result = self.script(EPILOG, node)
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertIn(f"gpufs epilog: {mnt} is still in use: forcing it", result.stderr)
            self.assertFalse(lib.is_mounted(mnt))
            self.assertFalse(lib.is_running(pid), "the job's daemon stayed")
            self.assertEqual(os.listdir(node["run"]), [])
        finally:
            holder.kill()
            holder.wait()

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
        # The mount points the prologs made went with their jobs.
        self.assertEqual([m for m in mnts.values() if os.path.exists(m)], [])

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

    def datasets(self, node, confs):
        """A folder of settings, one file per dataset ({name: settings}), as the node's
        GPUFS_SLURM_CONF; returns {name: mount point}."""
        folder = os.path.join(node["dir"], "slurm.d")
        os.makedirs(folder)
        mnts = {}
        for name, settings in confs.items():
            mnts[name] = os.path.join(node["dir"], f"mnt-{name}")
            with open(os.path.join(folder, f"{name}.conf"), "w") as f:
                f.write(f"GPUFS_MOUNTPOINT={mnts[name]}\nGPUFS_RUN_DIR={node['run']}\n"
                        "GPUFS_MOUNT_OPTIONS='--cache-size 16MiB --no-disk-cache'\n" + settings)
        node["conf"] = folder
        return mnts

    def test_a_dataset_on_a_cluster_file_system_mounts_without_peers(self):
        node = self.node(self.NODES[0], self.pack)
        # No peers for a path: no site key, no nginx, no port.
        with open(node["conf"], "a") as f:
            f.write(f"GPUFS_PEER_KEY_FILE={node['dir']}/absent.key\n")
        result = self.script(PROLOG, node, NGINX="/nonexistent/nginx")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(lib.files_below(node["mnt"]), self.expected)
        self.assertEqual(sorted(os.listdir(self.job_run(node))), ["made_mountpoint", "mount"])
        self.assertTrue(refused(node["name"], self.port))
        result = self.script(EPILOG, node)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertFalse(lib.is_mounted(node["mnt"]))
        self.assertEqual(os.listdir(node["run"]), [])

    def test_several_datasets_mount_for_each_job_and_go_with_it(self):
        node = self.node(self.NODES[0], self.pack)
        mnts = self.datasets(node, {
            "train": f"GPUFS_SOURCE={self.pack}\n",
            "val": f"GPUFS_SOURCE={self.origin.url}/pack/\nGPUFS_PEERS=no\n"})
        result = self.script(PROLOG, node)
        self.assertEqual(result.returncode, 0, result.stderr)
        for mnt in mnts.values():
            self.assertEqual(lib.files_below(mnt), self.expected)
        self.assertEqual(sorted(os.listdir(node["run"])), ["42.train", "42.val"])
        result = self.script(EPILOG, node)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual([m for m in mnts.values() if lib.is_mounted(m)], [])
        self.assertEqual(os.listdir(node["run"]), [])

    def test_a_dataset_that_fails_undoes_the_jobs_others(self):
        node = self.node(self.NODES[0], self.pack)
        mnts = self.datasets(node, {
            "a-train": f"GPUFS_SOURCE={self.pack}\n",
            "b-val": f"GPUFS_SOURCE={self.work}/absent\n"})
        result = self.script(PROLOG, node)
        self.assertEqual(result.returncode, 1)
        self.assertIn(f"gpufs prolog: cannot mount {self.work}/absent at {mnts['b-val']}",
                      result.stderr)
        self.assertEqual([m for m in mnts.values() if lib.is_mounted(m)], [])
        self.assertEqual(os.listdir(node["run"]), [])

    @staticmethod
    def start_time(pid):
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1].split()[19]


if __name__ == "__main__":
    lib.exit_unless_fuse_usable()
    unittest.main()
