#!/usr/bin/python3
"""The systemd units of deploy/systemd run as systemd would run them, without systemd:
each Exec line with its variables expanded as systemd expands them, under the unit's
capability bounding set and NoNewPrivileges= (setpriv), and for gpufs-peer.service in a
mount namespace where everything but its runtime and cache folders is read-only, as
ProtectSystem=strict leaves it. The folders the units own (/run/gpufs-peer,
/var/cache/...) are moved into a work folder. systemd-analyze verifies the units in
test_deploy.py."""
import os
import pwd
import random
import re
import shlex
import shutil
import signal
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
from tests.servers.procs import LOOPBACK, bindable, free_port, wait_for  # noqa: E402

UNITS = os.path.join(lib.ROOT, "deploy", "systemd")
PEER_CONFIG = os.path.join(lib.ROOT, "deploy", "gpufs-peer-config")
# Settings that give a unit a mount namespace of its own, in which a mount is hidden from
# the host, or that close devices (ProtectClock= implies DeviceAllow=char-rtc).
HIDE_MOUNTS = ("ProtectSystem", "ProtectHome", "PrivateTmp", "PrivateDevices", "PrivateMounts",
               "PrivateIPC", "ProtectKernelTunables", "ProtectKernelModules",
               "ProtectKernelLogs", "ProtectControlGroups", "ProtectProc", "ProcSubset",
               "ReadWritePaths", "ReadOnlyPaths", "InaccessiblePaths", "ExecPaths",
               "NoExecPaths", "BindPaths", "BindReadOnlyPaths", "TemporaryFileSystem",
               "RootDirectory", "RootImage", "MountImages", "MountFlags", "LogNamespace",
               "ProtectClock", "DeviceAllow", "DevicePolicy")


def service_settings(unit):
    """{key: [values]} of the [Service] section of deploy/systemd/`unit`, continuation lines
    joined."""
    with open(os.path.join(UNITS, unit)) as f:
        text = re.sub(r"\\\n", " ", f.read())
    settings, section = {}, None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line
        elif section == "[Service]" and line and not line.startswith("#"):
            key, value = line.split("=", 1)
            settings.setdefault(key, []).append(value)
    return settings


def exec_argv(line, env):
    """(argv, may it fail) of an Exec line as systemd makes it: words split as a shell
    splits them, $$ a '$', ${X} X's value as one word, a word $X its value split at
    whitespace, and the prefix '-' (its failure is ignored) taken off."""
    prefix = re.match(r"^[-@:+!]*", line)[0]
    argv = []
    for word in shlex.split(line[len(prefix):]):
        if re.fullmatch(r"\$[A-Za-z_]\w*", word):
            argv += env.get(word[1:], "").split()
        else:
            argv.append(re.sub(r"\$\$|\$\{(\w+)\}",
                               lambda m: "$" if m[0] == "$$" else env.get(m[1], ""), word))
    return argv, "-" in prefix


class Unit:
    """One unit's [Service] commands run as systemd would (see the module docstring), with
    the paths in `moved` ({path in the unit: path here}) replaced and its EnvironmentFile
    given as `env_file`."""

    def __init__(self, unit, work, moved, env_file):
        self.settings = service_settings(unit)
        self.moved = moved
        self.bin = os.path.join(work, "bin")
        os.makedirs(self.bin, exist_ok=True)
        # systemd finds programs in its own PATH: these stand in for the installed ones.
        for name, target in (("gpufsd", lib.GPUFSD), ("gpufs-peer-config", PEER_CONFIG)):
            with open(os.path.join(self.bin, name), "w") as f:
                f.write(f'#!/bin/sh\nexec {shlex.quote(os.path.abspath(target))} "$@"\n')
            os.chmod(os.path.join(self.bin, name), 0o755)
        self.env = {"PATH": f"{self.bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:"
                            "/sbin:/bin", "LANG": "C.UTF-8", "AWS_EC2_METADATA_DISABLED": "true"}
        self.env.update((k, v) for k, v in os.environ.items() if k.endswith("SAN_OPTIONS"))
        for value in self.settings.get("Environment", []):
            key, value = self.move(value).split("=", 1)
            self.env[key] = value
        self.env.update(env_file)
        caps = self.settings["CapabilityBoundingSet"][0].split()
        self.limits = ["setpriv", "--bounding-set=" + ",".join(
            ["-all"] + [f"+{c.lower().removeprefix('cap_')}" for c in caps])]
        if self.settings.get("NoNewPrivileges") == ["yes"]:
            self.limits.append("--no-new-privs")
        self.writable = None
        if self.settings.get("ProtectSystem") == ["strict"]:
            self.writable = [self.move(f"/run/{d}") for d in self.settings["RuntimeDirectory"]]
            self.writable += [self.move(f"/var/cache/{d}") for d in self.settings["CacheDirectory"]]

    def move(self, text):
        for path, here in self.moved.items():
            text = text.replace(path, here)
        return text

    def run(self, key):
        """Runs the unit's `key` commands (e.g. ExecStartPre) in turn; asserts that each
        that may not fail exits 0. Returns the results."""
        results = []
        for line in self.settings.get(key, []):
            argv, may_fail = exec_argv(self.move(line), self.env)
            argv[0] = shutil.which(argv[0], path=self.env["PATH"]) or argv[0]
            argv = [*self.limits, "--", *argv]
            if self.writable is not None:  # ProtectSystem=strict: / read-only but these
                binds = "".join(f"mount --bind {shlex.quote(p)} {shlex.quote(p)} && "
                                for p in self.writable)
                argv = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
                        binds + 'mount -o remount,bind,ro / && exec "$@"', "sh", *argv]
            result = subprocess.run(argv, capture_output=True, text=True, env=self.env,
                                    timeout=120, stdin=subprocess.DEVNULL)
            if not may_fail:
                assert result.returncode == 0, f"{key}={line}: exit {result.returncode}\n" \
                                               f"{result.stdout}{result.stderr}"
            results.append(result)
        return results


class MountUnit(unittest.TestCase):
    """gpufs@.service: a mount the host sees, made with two capabilities."""

    def test_no_setting_hides_the_mount_from_the_host(self):
        # systemd makes every mount of a unit's own mount namespace a slave of the host's
        # (systemd.exec(5), MountFlags=): a mount made in one never reaches the host.
        settings = service_settings("gpufs@.service")
        for key in HIDE_MOUNTS:
            with self.subTest(setting=key):
                self.assertIn(settings.get(key, ["no"]), (["no"], ["false"]),
                              f"{key}= would hide gpufs@'s mount from the host, or close "
                              "/dev/fuse (see the unit's comments)")

    def test_the_commands_mount_a_source_of_another_user_and_unmount(self):
        work = tempfile.mkdtemp(prefix="gpufs-unit-")
        try:
            tree, _ = lib.make_dataset(os.path.join(work, "data"), classes=3, per_class=4,
                                       group_size=4)
            expected = lib.files_below(tree)
            pack = os.path.join(work, "pack")
            result = lib.run_gpufsd("pack", tree, pack)
            self.assertEqual(result.returncode, 0, result.stderr)
            # The dataset is another user's, and only theirs: CAP_DAC_READ_SEARCH reads it.
            nobody = pwd.getpwnam("nobody")
            for folder, _, files in os.walk(pack):
                for name in [folder, *(os.path.join(folder, f) for f in files)]:
                    os.chown(name, nobody.pw_uid, nobody.pw_gid)
                    os.chmod(name, 0o700 if name == folder else 0o600)
            cache = os.path.join(work, "cache")
            os.makedirs(os.path.join(cache, "gpufs"), mode=0o700)  # CacheDirectory=gpufs
            mnt = os.path.join(work, "mnt", "imagenet")  # made by an ExecStartPre
            unit = Unit("gpufs@.service", work, {"/var/cache": cache},
                        {"GPUFS_SOURCE": pack, "GPUFS_MOUNTPOINT": mnt,
                         "GPUFS_OPTIONS": "-o allow_other --cache-size 16MiB"})
            unit.run("ExecStartPre")  # its unmount of a dead mount fails: nothing is there
            unit.run("ExecStart")
            try:
                self.assertTrue(lib.is_mounted(mnt), "the host does not see the mount")
                self.assertEqual(lib.files_below(mnt), expected)
                pid = int(os.getxattr(mnt, "user.gpufs.pid"))
            finally:
                unit.run("ExecStop")
            self.assertFalse(lib.is_mounted(mnt))
            wait_for(f"gpufsd {pid} to exit", lambda: not lib.is_running(pid),
                     time.monotonic() + 30)
        finally:
            if lib.is_mounted(os.path.join(work, "mnt", "imagenet")):
                lib.run_gpufsd("unmount", os.path.join(work, "mnt", "imagenet"))
            shutil.rmtree(work)


def privileged_port():
    """A port below 1024 that nothing on 127.0.0.1 listens on now, else None."""
    for port in random.sample(range(600, 700), 100):
        if bindable(LOOPBACK, port):
            return port
    return None


class PeerUnit(unittest.TestCase):
    """gpufs-peer.service: nginx as root with four capabilities, its workers as the peer
    account, everything read-only but its runtime and cache folders."""

    def test_the_commands_serve_cache_reload_and_stop(self):
        reason = nginx.NginxOrigin.skip_reason() or nginx.peer_account()
        if reason:
            self.skipTest(reason)
        work = tempfile.mkdtemp(prefix="gpufs-peer-unit-")
        os.chmod(work, 0o755)  # the workers reach the cache folder through it
        try:
            blob = os.urandom(4 << 20 | 1000)
            www = os.path.join(work, "www")
            os.mkdir(www)
            with open(os.path.join(www, "blob"), "wb") as f:
                f.write(blob)
            run_dir, cache = os.path.join(work, "run"), os.path.join(work, "cache")
            for folder in (run_dir, cache):  # RuntimeDirectory= and CacheDirectory=
                os.mkdir(folder)
                os.chmod(folder, 0o755)
            with nginx.NginxOrigin(www) as origin:
                port = privileged_port() or free_port()
                unit = Unit("gpufs-peer.service", work,
                            {"/run/gpufs-peer": run_dir, "/var/cache/gpufs-peer": cache},
                            {"GPUFS_PEER_LISTEN": f"{LOOPBACK}:{port}",
                             "GPUFS_PEER_ORIGIN": origin.url,
                             "GPUFS_PEER_SECRET_FILE": nginx.write_job_secret(
                                 os.path.join(work, "secret"))})
                self.serve(unit, origin, port, blob, run_dir)
            # The slices are the workers' account's, in a folder of the cache directory.
            slices = os.stat(os.path.join(cache, "slices"))
            self.assertEqual(slices.st_uid, pwd.getpwnam(nginx.PEER_USER).pw_uid)
            self.assertEqual(os.stat(cache).st_uid, 0)
        finally:
            shutil.rmtree(work)

    def serve(self, unit, origin, port, blob, run_dir):
        unit.run("ExecStartPre")
        unit.run("ExecStart")
        with open(os.path.join(run_dir, "nginx.pid")) as f:  # PIDFile=
            master = int(f.read())
        try:
            headers = {"Host": origin.url.split("//")[1],
                       **nginx.secret_headers(unit.env["GPUFS_PEER_SECRET_FILE"])}

            def get():
                request = urllib.request.Request(f"http://{LOOPBACK}:{port}/blob",
                                                 headers=headers)
                with urllib.request.urlopen(request, timeout=10) as r:
                    self.assertEqual(r.read(), blob)
                    return r.headers["X-Gpufs-Peer-Cache"]

            self.assertEqual([get(), get()], ["MISS", "HIT"])
            workers = [p for p in os.listdir("/proc") if p.isdigit() and self.parent(p) == master]
            self.assertTrue(workers)
            for pid in workers:
                with self.subTest(worker=pid):
                    self.assertEqual(os.stat(f"/proc/{pid}").st_uid,
                                     pwd.getpwnam(nginx.PEER_USER).pw_uid)
            unit.run("ExecReload")
            wait_for("the reloaded workers", lambda: get() == "HIT", time.monotonic() + 30)
        finally:
            os.kill(master, getattr(signal, unit.settings["KillSignal"][0]))
            wait_for("the peer's nginx to stop", lambda: not lib.is_running(master),
                     time.monotonic() + 30)

    @staticmethod
    def parent(pid):
        try:
            with open(f"/proc/{pid}/stat") as f:
                return int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            return None


if __name__ == "__main__":
    lib.exit_unless_fuse_usable()
    unittest.main(verbosity=2)
