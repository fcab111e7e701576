"""Mounts for the benchmarks: gpufsd's (and the names of the xattrs a mount answers, read
from base/xattr_names.h, where the project spells them), FUSE daemons in the foreground,
squashfuse."""
import contextlib
import json
import os
import re
import signal
import subprocess
import tempfile
import time

from benchlib import ROOT
from servers.procs import Daemon, wait_for

GPUFSD = os.environ.get("GPUFSD", os.path.join(ROOT, "build", "cli", "gpufsd"))
GPUFS_STAT = os.environ.get("GPUFS_STAT", os.path.join(ROOT, "build", "cli", "gpufs-stat"))
GPUFSD_EPILOG = f"environment: GPUFSD, the gpufsd binary to run (now {GPUFSD})"


def _xattr_names(header=os.path.join(ROOT, "base", "xattr_names.h")):
    """{"stats": "user.gpufs.stats", ...}: every name the header spells, by its last part."""
    with open(header, encoding="utf-8") as f:
        names = re.findall(r'=\s*"(user\.gpufs\.[A-Za-z0-9_.]+)"', f.read())
    if "user.gpufs.stats" not in names:
        raise RuntimeError(f"{header}: no xattr names found")
    return {name.rsplit(".", 1)[1]: name for name in names}


XATTR = _xattr_names()


def gpufs_stats(mnt):
    """The daemon's counters (the stats xattr on the mount's root) as a dict."""
    return json.loads(os.getxattr(mnt, XATTR["stats"]))


def gpufs_source_bytes(mnt):
    """Bytes the mount's source has delivered so far (the "io" counters)."""
    return gpufs_stats(mnt)["io"]["bytes"]


def gpufs_pid(mnt):
    """The pid of the daemon behind the mount."""
    return int(os.getxattr(mnt, XATTR["pid"]))


def gpufs_control(mnt):
    """The path of the daemon's control socket."""
    return os.getxattr(mnt, XATTR["control"]).decode()


def mount_has(option, gpufsd=GPUFSD):
    """Whether `gpufsd mount --help` lists `option` (older builds lack some)."""
    usage = subprocess.run([gpufsd, "mount", "--help"], capture_output=True, text=True).stdout
    return option in usage


def gpufs_tier_argv(gpufsd, tier, fresh_folder):
    """(mount options, label) that give a gpufsd mount the disk tier asked for: "off" (no
    tier, also for a remote source) or "fresh" (a new empty folder from `fresh_folder()`).
    A build from before the tier has none to turn off."""
    if not mount_has("--disk-cache", gpufsd):
        return [], "off (this gpufsd has no disk tier)"
    if tier == "off":
        return ["--no-disk-cache"], "off"
    if tier == "fresh":
        return ["--disk-cache", fresh_folder()], "fresh empty folder"
    raise ValueError(tier)


@contextlib.contextmanager
def mount_point(prefix="gpufs-bench-", folder=None):
    """A new empty folder to mount at (in `folder`, else the temporary one), removed after
    the block; what is mounted there is the caller's to unmount."""
    mnt = tempfile.mkdtemp(prefix=prefix, dir=folder)
    try:
        yield mnt
    finally:
        os.rmdir(mnt)


def gpufs_unmount(mnt, gpufsd=GPUFSD, check=False, quiet=False):
    subprocess.run([gpufsd, "unmount", mnt], check=check, capture_output=quiet)


@contextlib.contextmanager
def gpufs_mounted(src, *options, prefix="gpufs-bench-", gpufsd=GPUFSD, preexec_fn=None,
                  quiet=True):
    """`gpufsd mount OPTIONS SRC MNT` (the daemon detaches) at a new folder, unmounted and
    removed after the block; yields MNT. `quiet`: the commands' output is kept from the
    terminal, and a failed unmount passes unremarked (else it raises)."""
    with mount_point(prefix) as mnt:
        subprocess.run([gpufsd, "mount", *options, src, mnt], check=True,
                       capture_output=quiet, preexec_fn=preexec_fn)
        try:
            yield mnt
        finally:
            gpufs_unmount(mnt, gpufsd, check=not quiet, quiet=quiet)


@contextlib.contextmanager
def squashfuse_mounted(image, prefix, preexec_fn=None):
    """squashfuse_ll serving `image` at a new folder (up to 30 s for the mount to appear),
    unmounted and removed after the block; yields the folder."""
    with mount_point(prefix) as mnt:
        proc = subprocess.Popen(["squashfuse_ll", "-f", image, mnt], preexec_fn=preexec_fn)
        try:
            deadline = time.time() + 30
            while not os.path.ismount(mnt) and time.time() < deadline:
                time.sleep(0.05)
            yield mnt
        finally:
            subprocess.run(["fusermount3", "-u", mnt])
            proc.wait()


def is_mounted(path):
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        return any(line.split()[4] == path for line in f)


class FuseMount:
    """A FUSE daemon run in the foreground (`argv` mounts at `mnt`), waited for in the mount
    table and stopped by pid: `with FuseMount(...) as m:` ... m.pid, m.log.

    `unmount` is the command that unmounts it (fusermount3 -u by default); a busy mount is
    detached lazily, and a daemon that does not exit is killed. The daemon gets SIGTERM if
    this process dies first, so an interrupted benchmark leaves no mount behind."""

    def __init__(self, name, argv, mnt, env=None, unmount=None, timeout=60):
        self.name, self.mnt, self.timeout = name, mnt, timeout
        self.unmount = unmount or ["fusermount3", "-u", mnt]
        self.log = os.path.join(os.path.dirname(mnt), os.path.basename(mnt) + ".log")
        self.daemon = Daemon(name, argv, self.log, env=env)

    def __enter__(self):
        try:
            self.daemon.start()
            wait_for(f"{self.name} to mount {self.mnt}", lambda: is_mounted(self.mnt),
                     time.monotonic() + self.timeout, [self.daemon])
        except BaseException:
            self.close()
            raise
        return self

    @property
    def pid(self):
        return self.daemon.pid

    def close(self):
        if is_mounted(self.mnt):
            if subprocess.run(self.unmount, capture_output=True).returncode != 0:
                subprocess.run(["fusermount3", "-uz", self.mnt], capture_output=True)
        self.daemon.stop(timeout=30, sig=signal.SIGTERM)

    def __exit__(self, *exc):
        self.close()


def gpufs_fuse_mount(argv, mnt, gpufsd=GPUFSD, env=None):
    """A FuseMount of `gpufsd mount -f ...` (argv), unmounted with `gpufsd unmount`."""
    return FuseMount("gpufsd", argv, mnt, env=env, unmount=[gpufsd, "unmount", mnt])
