"""A real one-node Ceph object store (monitor, one memstore OSD, radosgw) on 127.0.0.1.

Tests and benchmarks of the S3 source need a server that behaves like the real thing
(SigV4, ETags, ranged GETs, 503s) without a network or systemd; this brings one up in a fresh
temp dir, all daemons in the foreground as children of this process, and takes it down again
by pid. The OSD keeps objects in memory (memstore), so bring-up is quick and nothing is left
on disk; `memstore_bytes` caps how much it holds.

    with CephS3() as s3:
        s3.make_bucket("data")
        s3.put("data", "a/b", b"bytes")
        subprocess.run([...], env={**os.environ, **s3.env()})
"""
import atexit
import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
import uuid

from .procs import LOOPBACK, Daemon, ServerError, free_port, wait_for
from .s3client import S3Client

BINARIES = ("ceph-mon", "ceph-osd", "radosgw", "radosgw-admin", "monmaptool",
            "ceph-authtool", "ceph")
RGW_NAME = "client.rgw.gpufs"
REGION = "us-east-1"  # radosgw signs with any region; us-east-1 sends no LocationConstraint


def skip_reason():
    """Why a Ceph store cannot run here (a missing program), or None when it can."""
    missing = [b for b in BINARIES if shutil.which(b) is None]
    if missing:
        return f"Ceph programs not installed: {', '.join(missing)} (apt install radosgw " \
               "ceph-mon ceph-osd ceph-common)"
    return None


def _conf(tmp, fsid, mon_port, rgw_port, memstore_bytes, extra):
    """ceph.conf for the store: everything on loopback and inside `tmp`, one replica, few
    placement groups and a short Paxos interval so that pools are usable in seconds."""
    opts = {
        "fsid": fsid,
        "mon_host": f"[v2:{LOOPBACK}:{mon_port}]",
        "public_addr": LOOPBACK, "cluster_addr": LOOPBACK,
        "ms_bind_ipv4": "true", "ms_bind_ipv6": "false",
        "auth_cluster_required": "cephx", "auth_service_required": "cephx",
        "auth_client_required": "cephx",
        "keyring": f"{tmp}/keyring",
        "run_dir": f"{tmp}/run", "crash_dir": f"{tmp}/crash",
        "admin_socket": "",  # only daemons get one (below): CLI calls would clash on it
        "mon_data": f"{tmp}/mon", "osd_data": f"{tmp}/osd", "rgw_data": f"{tmp}/rgw",
        "mon_allow_pool_size_one": "true", "mon_warn_on_pool_no_redundancy": "false",
        "mon_warn_on_insecure_global_id_reclaim_allowed": "false",
        "mon_data_avail_warn": "1",
        "osd_pool_default_size": "1", "osd_pool_default_min_size": "1",
        "osd_pool_default_pg_num": "8", "osd_pool_default_pgp_num": "8",
        "osd_pool_default_pg_autoscale_mode": "off",
        "osd_crush_chooseleaf_type": "0",
        "paxos_propose_interval": "0.1",
        "osd_objectstore": "memstore",
        "memstore_device_bytes": str(memstore_bytes),
        # Without tcp_nodelay, a response's last partial segment waits for the client's
        # delayed ACK whenever a kept-alive connection is reused: ~40 ms added to about
        # half the GETs of small objects, a stall that cloud stores do not have.
        "rgw_frontends": f"beast endpoint={LOOPBACK}:{rgw_port} tcp_nodelay=1",
        "rgw_thread_pool_size": "128",
        "rgw_enable_usage_log": "false",
    }
    opts.update({k: str(v) for k, v in (extra or {}).items()})
    lines = ["[global]"] + [f"{k} = {v}" for k, v in opts.items()]
    for section in ("mon", "osd", RGW_NAME):
        lines += [f"[{section}]", f"admin_socket = {tmp}/run/$name.asok",
                  f"log_file = {tmp}/log/$name.log", f"pid_file = {tmp}/run/$name.pid"]
    return "\n".join(lines) + "\n"


_shared = None


def shared():
    """One store for the whole process, brought up on the first call and closed at exit.

    A bring-up takes seconds, so test modules share one (call this in setUpClass) and keep
    apart by bucket name (unique_bucket). A test that stops radosgw starts it again. Raises
    ServerError when the store cannot run; check skip_reason() first."""
    global _shared
    if _shared is None:
        store = CephS3()
        store.up_or_close()
        atexit.register(store.close)
        _shared = store
    return _shared


def unique_bucket(prefix="t"):
    """A bucket name no other caller of this process gets (S3 names: 3-63 chars, lower)."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


class CephS3:
    """A running Ceph S3 store; see the module docstring.

    endpoint, access_key, secret_key, region: how to reach it (path-style, SigV4).
    tmp: its folder (conf, keyring, logs in tmp/log, data); removed on exit unless `keep`.
    bringup_s: seconds the last full bring-up took.
    `conf` adds or overrides ceph.conf options (e.g. {"debug_rgw": 20})."""

    def __init__(self, memstore_bytes=4 << 30, timeout=90, conf=None, keep=False):
        self.memstore_bytes, self.timeout, self.extra_conf, self.keep = \
            memstore_bytes, timeout, conf, keep
        self.tmp = None
        self.mon = self.osd = self.rgw = None
        self.access_key = "GPUFS" + secrets.token_hex(8).upper()
        self.secret_key = secrets.token_urlsafe(30)
        self.region = REGION
        self.endpoint = None
        self.bringup_s = None

    # --- life cycle -------------------------------------------------------------------

    def __enter__(self):
        return self.up_or_close()

    def up_or_close(self):
        """up(), and on any failure (or an interrupt) close() before raising."""
        try:
            return self.up()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc):
        self.close()

    def up(self):
        """Creates the cluster and starts all daemons; returns when S3 answers."""
        reason = skip_reason()
        if reason:
            raise ServerError(reason)
        t0 = time.monotonic()
        deadline = t0 + self.timeout
        self.tmp = tempfile.mkdtemp(prefix="gpufs-ceph-")
        for d in ("mon", "osd", "rgw", "run", "log", "crash"):
            os.mkdir(os.path.join(self.tmp, d))
        self.conf_path = os.path.join(self.tmp, "ceph.conf")
        self.rgw_port = free_port()
        self.endpoint = f"http://{LOOPBACK}:{self.rgw_port}"
        fsid = str(uuid.uuid4())
        with open(self.conf_path, "w") as f:
            f.write(_conf(self.tmp, fsid, free_port(), self.rgw_port, self.memstore_bytes,
                          self.extra_conf))
        self._make_keyring()
        self._run("monmaptool", "--create", "--fsid", fsid, "--addv", "a",
                  self._mon_addr(), f"{self.tmp}/monmap")
        self._run("ceph-mon", "-c", self.conf_path, "--mkfs", "-i", "a",
                  "--monmap", f"{self.tmp}/monmap", "--keyring", f"{self.tmp}/keyring")
        self.mon = self._daemon("mon", "ceph-mon", "-i", "a", log="mon.a.log").start()
        osd_uuid = str(uuid.uuid4())
        self._run("ceph-osd", "-c", self.conf_path, "-i", "0", "--mkfs",
                  "--osd-uuid", osd_uuid)
        # The CLI waits for the monitor itself (up to the connect timeout).
        wait_for("the monitor to register osd.0",
                 lambda: self._ceph("osd", "new", osd_uuid, "0", timeout=10) == "0",
                 deadline, [self.mon])
        # SIGKILL when orphaned, for the reason close() gives.
        self.osd = self._daemon("osd", "ceph-osd", "-i", "0", log="osd.0.log",
                                death_sig=signal.SIGKILL).start()
        wait_for("osd.0 to be up", self._osd_up, deadline, [self.mon, self.osd])
        self._start_rgw(deadline)
        self._run("radosgw-admin", "-c", self.conf_path, "-n", RGW_NAME, "user", "create",
                  "--uid", "gpufs", "--display-name", "gpufs tests",
                  "--access-key", self.access_key, "--secret-key", self.secret_key)
        self.client = S3Client(self.endpoint, self.access_key, self.secret_key, self.region)
        self.bringup_s = time.monotonic() - t0
        return self

    def close(self):
        """Stops every daemon by pid and removes the temp dir (unless `keep`)."""
        if self.rgw:
            self.rgw.stop()
        if self.osd:
            # SIGKILL: on a clean stop memstore writes everything it holds to disk, only
            # for the folder to be removed.
            self.osd.stop(sig=signal.SIGKILL)
        if self.mon:
            self.mon.stop()
        if self.tmp and not self.keep:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None

    def stop(self):
        """Stops only radosgw (the S3 endpoint goes away; the stored objects stay)."""
        self.rgw.stop()

    def start(self):
        """Starts radosgw again on the same port; returns when it answers."""
        if not self.rgw.running():
            self._start_rgw(time.monotonic() + self.timeout)

    # --- S3 ---------------------------------------------------------------------------

    def client_for(self, endpoint):
        """An S3Client with this store's keys for another endpoint (e.g. a proxy)."""
        return S3Client(endpoint, self.access_key, self.secret_key, self.region)

    def make_bucket(self, name):
        self.client.make_bucket(name)

    def put(self, bucket, key, data):
        """Stores bytes; returns the ETag."""
        return self.client.put(bucket, key, data)

    def put_file(self, bucket, key, path):
        """Stores a local file (streamed); returns the ETag."""
        return self.client.put_file(bucket, key, path)

    def upload_tree(self, local_dir, bucket, prefix=""):
        """Uploads local_dir recursively to bucket/prefix/...; returns the keys."""
        return self.client.upload_tree(local_dir, bucket, prefix)

    def get(self, bucket, key, start=None, end=None):
        return self.client.get(bucket, key, start, end)

    def delete(self, bucket, key):
        self.client.delete(bucket, key)

    def list(self, bucket, prefix=""):
        """[(key, size, etag)] under prefix, in key order."""
        return self.client.list(bucket, prefix)

    def env(self):
        """Environment variables that point AWS SDKs and tools at this store."""
        return {"AWS_ACCESS_KEY_ID": self.access_key,
                "AWS_SECRET_ACCESS_KEY": self.secret_key,
                "AWS_ENDPOINT_URL": self.endpoint,
                "AWS_REGION": self.region, "AWS_DEFAULT_REGION": self.region,
                "AWS_EC2_METADATA_DISABLED": "true"}

    def rclone_config(self, path):
        """Writes an rclone config file with a remote `gpufs-test:` for this store."""
        with open(path, "w") as f:
            f.write("[gpufs-test]\ntype = s3\nprovider = Ceph\nenv_auth = false\n"
                    f"access_key_id = {self.access_key}\n"
                    f"secret_access_key = {self.secret_key}\n"
                    f"endpoint = {self.endpoint}\nregion = {self.region}\n"
                    "force_path_style = true\n")
        return path

    # --- helpers ----------------------------------------------------------------------

    def _mon_addr(self):
        with open(self.conf_path) as f:
            for line in f:
                if line.startswith("mon_host = "):
                    return line.split(" = ", 1)[1].strip()
        raise ServerError("no mon_host in ceph.conf")

    def _make_keyring(self):
        """One keyring for all: mon., client.admin, osd.0 and radosgw's own key. The
        monitor's mkfs imports every key in it, so no `ceph auth add` is needed."""
        keyring = f"{self.tmp}/keyring"
        caps = {"mon.": ["--cap", "mon", "allow *"],
                "client.admin": ["--cap", "mon", "allow *", "--cap", "osd", "allow *",
                                 "--cap", "mgr", "allow *"],
                "osd.0": ["--cap", "mon", "allow profile osd", "--cap", "osd", "allow *",
                          "--cap", "mgr", "allow profile osd"],
                RGW_NAME: ["--cap", "mon", "allow rw", "--cap", "osd", "allow rwx",
                           "--cap", "mgr", "allow rw"]}
        for i, (name, cap) in enumerate(caps.items()):
            self._run("ceph-authtool", *(["--create-keyring"] if i == 0 else []), keyring,
                      "--gen-key", "-n", name, *cap)

    def _run(self, *argv, timeout=60):
        """Runs a setup command; raises ServerError with its output when it fails."""
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            raise ServerError(f"{' '.join(argv)} failed ({r.returncode}):\n"
                              f"{r.stdout}{r.stderr}")
        return r.stdout

    def _ceph(self, *args, timeout=10):
        """Output of one `ceph` CLI command (stripped); raises on failure."""
        return self._run("ceph", "-c", self.conf_path, "--connect-timeout", str(timeout),
                         *args, timeout=timeout + 5).strip()

    def _osd_up(self):
        dump = json.loads(self._ceph("osd", "dump", "--format", "json"))
        return any(o["osd"] == 0 and o["up"] for o in dump["osds"])

    def _daemon(self, what, *argv, log, death_sig=signal.SIGTERM):
        return Daemon(what, [argv[0], "-f", "-c", self.conf_path, *argv[1:]],
                      f"{self.tmp}/log/{what}.out", logs=[f"{self.tmp}/log/{log}"],
                      death_sig=death_sig)

    def _start_rgw(self, deadline):
        self.rgw = self._daemon("radosgw", "radosgw", "-n", RGW_NAME,
                                log=f"{RGW_NAME}.log").start()
        wait_for(f"radosgw to answer on {self.endpoint}", self._rgw_answers, deadline,
                 [self.mon, self.osd, self.rgw])

    def _rgw_answers(self):
        with urllib.request.urlopen(self.endpoint + "/", timeout=2) as r:
            return r.status == 200
