#!/usr/bin/python3
"""The Debian package, as a user meets it: built from a clean copy of the tree
(tools/build_deb.sh), installed with apt-get, used from the installed paths only (man
pages, bash completion, mount -t fuse.gpufs and an fstab line, --version, the peer cache's
account), checked with lintian, and purged without a trace but that account, which Debian
leaves.

  GPUFS_DEB=build-deb/gpufs_0.1.0_amd64.deb tests/package/test_package.py

Without GPUFS_DEB the package is built first (minutes). Skips, with the reason, where it
cannot run: not root, no dpkg-buildpackage or debhelper, no FUSE, or gpufs already
installed from elsewhere (it would be replaced, then purged).
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "mount"))
import gpufs_testlib as lib  # noqa: E402

PAGES = ["gpufsd", "gpufs-stat", "gpufs-emulate", "mount.gpufs", "gpufs-peer-config"]
PEER_USER = "_gpufs-peer"  # the account of the peer cache's nginx workers (the postinst's)
# Only what a package installs: no build folder, no /usr/local.
ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8",
       "MANWIDTH": "200"}


def run(argv, check=True, **kw):
    result = subprocess.run(argv, capture_output=True, text=True, env=ENV, **kw)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(argv)}: exit {result.returncode}\n{result.stderr}")
    return result


def meson_version():
    with open(os.path.join(ROOT, "meson.build")) as f:
        return re.search(r"^\s*version: '([^']+)'", f.read(), re.M)[1]


def skip_reason():
    if os.geteuid() != 0:
        return "installing a package needs root"
    for tool in ("dpkg-buildpackage", "dh", "apt-get", "man", "lintian"):
        if not shutil.which(tool, path=ENV["PATH"]):
            return f"{tool} is not installed (tools/install_deps.sh installs it)"
    if run(["dpkg-query", "-W", "-f", "${Status}", "gpufs"], check=False).stdout.startswith(
            "install ok"):
        return "a gpufs package is installed already; this test would replace and purge it"
    return None


class Package(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        reason = skip_reason()
        if reason:
            raise unittest.SkipTest(reason)
        cls.work = tempfile.mkdtemp(prefix="gpufs-package-")
        cls.deb = os.environ.get("GPUFS_DEB")
        if not cls.deb:
            out = os.path.join(cls.work, "deb")
            subprocess.run([os.path.join(ROOT, "tools", "build_deb.sh"), out], check=True,
                           env={**os.environ, "DEB_BUILD_OPTIONS": "nocheck"},
                           capture_output=True)
            cls.deb = glob.glob(os.path.join(out, "gpufs_*.deb"))[0]
        cls.deb = os.path.abspath(cls.deb)
        run(["apt-get", "install", "-y", "-q", cls.deb])
        cls.files = [f for f in run(["dpkg", "-L", "gpufs"]).stdout.splitlines()
                     if os.path.isfile(f) or os.path.islink(f)]

    @classmethod
    def tearDownClass(cls):
        if run(["dpkg-query", "-W", "-f", "${Status}", "gpufs"], check=False).stdout.startswith(
                "install ok"):
            run(["apt-get", "purge", "-y", "-q", "gpufs"], check=False)
        shutil.rmtree(cls.work, ignore_errors=True)

    def test_binaries_and_helpers_are_in_the_system_paths(self):
        for path in ("/usr/bin/gpufsd", "/usr/bin/gpufs-stat", "/usr/bin/gpufs-emulate",
                     "/usr/bin/gpufs-peer-config", "/usr/sbin/mount.gpufs",
                     "/usr/sbin/mount.fuse.gpufs", "/usr/share/doc/gpufs/copyright",
                     "/usr/share/gpufs/slurm/prolog.sh", "/usr/share/gpufs/nginx/gpufs-peer.conf",
                     "/usr/lib/systemd/system/gpufs@.service"):
            with self.subTest(path=path):
                self.assertIn(path, self.files)
        self.assertEqual(run(["gpufsd", "--version"]).stdout.strip(), f"gpufsd {meson_version()}")
        help_text = run(["gpufs-emulate", "--help"]).stdout
        self.assertIn("usage: gpufs-emulate", help_text)
        self.assertEqual(run(["gpufs-emulate", "--version"]).stdout.strip(),
                         f"gpufs-emulate {meson_version()}")
        # The guide that --help, the man pages and the README point to.
        self.assertTrue([f for f in self.files if f.startswith("/usr/share/doc/gpufs/guide.md")])
        # Root's runs leave no bytecode in the package's folders (purge would leave it).
        run(["gpufs-emulate", "--list-profiles"])
        self.assertEqual(glob.glob("/usr/share/gpufs/**/__pycache__", recursive=True), [])

    def test_man_finds_every_page_and_gpufsd8_has_every_mount_option(self):
        for page in PAGES:
            with self.subTest(page=page):
                self.assertTrue(run(["man", "-w", page]).stdout.strip())
        page = run(["man", "-P", "cat", "gpufsd"]).stdout
        options = set(re.findall(r"^\s+(?:-\w,)?(--[\w-]+)", run(["gpufsd", "mount", "--help"])
                                 .stdout, re.M))
        self.assertGreater(len(options), 40)
        for option in sorted(options):
            with self.subTest(option=option):
                self.assertIn(option, page)
        for section in ("EXAMPLES", "FILES", "ENVIRONMENT", "EXIT STATUS", "SEE ALSO"):
            self.assertIn(f"\n{section}\n", page)
        self.assertIn("AWS_WEB_IDENTITY_TOKEN_FILE", page)

    def test_bash_completes_gpufsd_options(self):
        script = r'''
source /usr/share/bash-completion/bash_completion
source /usr/share/bash-completion/completions/gpufsd
COMP_LINE="gpufsd mount --ca"; COMP_POINT=${#COMP_LINE}
COMP_WORDS=(gpufsd mount --ca); COMP_CWORD=2
_gpufsd
echo "${COMPREPLY[*]}"
'''
        self.assertEqual(run(["bash", "-c", script]).stdout.split(),
                         ["--cache-size", "--ca-bundle"])

    def test_the_peer_caches_account_is_made_and_named_by_default(self):
        # The postinst's (or, had it been there before, kept by it).
        name, _, uid, _, _, home, shell = run(["getent", "passwd", PEER_USER]).stdout \
            .strip().split(":")
        self.assertLess(int(uid), 1000)
        self.assertEqual((home, shell), ("/nonexistent", "/usr/sbin/nologin"))
        self.assertTrue(run(["getent", "group", PEER_USER]).stdout)
        secret = os.path.join(self.work, "peer.secret")
        with open(os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
            f.write("0123456789abcdef0123456789abcdef\n")
        conf = run(["gpufs-peer-config", "--main", "--listen", "127.0.0.1:3128", "--origin",
                    "http://127.0.0.1:8080", "--cache-dir", "/var/cache/gpufs-peer/slices",
                    "--secret-file", secret]).stdout
        self.assertIn(f"\nuser {PEER_USER} {PEER_USER};\n", conf)

    def test_mount_t_fuse_gpufs_and_an_fstab_line_read_byte_exact(self):
        tree, _ = lib.make_dataset(os.path.join(self.work, "data"), classes=3, per_class=6,
                                   group_size=4)
        expected = lib.files_below(tree)
        pack = os.path.join(self.work, "pack")
        run(["gpufsd", "pack", tree, pack])
        mnt = os.path.join(self.work, "mnt")
        os.mkdir(mnt)
        run(["mount", "-t", "fuse.gpufs", pack, mnt, "-o",
             "allow_other,cache_size=64MiB,_netdev,nofail"])
        try:
            self.assertEqual(lib.files_below(mnt), expected)
        finally:
            run(["umount", mnt])
        fstab = os.path.join(self.work, "fstab")
        with open(fstab, "w") as f:
            f.write(f"{pack}  {mnt}  fuse.gpufs  cache_size=64MiB,noauto,x-systemd.automount  0 0\n")
        run(["mount", "-T", fstab, mnt])
        try:
            self.assertEqual(lib.files_below(mnt), expected)
        finally:
            run(["gpufsd", "unmount", mnt])

    def test_the_end_to_end_trainers_run_on_the_installed_gpufsd(self):
        # tests/e2e against /usr/bin: unmodified torchvision loaders (and DDP with peers)
        # through the package's gpufsd, gpufs-stat and gpufs-emulate.
        env = {**os.environ, "GPUFSD": "/usr/bin/gpufsd", "GPUFS_STAT": "/usr/bin/gpufs-stat",
               "GPUFS_EMULATE": "/usr/bin/gpufs-emulate", "PYTHONDONTWRITEBYTECODE": "1"}
        for test in ("test_torchvision.py", "test_peers_ddp.py"):
            with self.subTest(test=test):
                result = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "tests", "e2e",
                                                                          test)],
                                        capture_output=True, text=True, env=env, timeout=900)
                if result.returncode == 77:
                    self.skipTest(f"{test}: {result.stdout.strip()}")
                self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

    def test_dependencies_are_runtime_libraries_only(self):
        depends = run(["dpkg-query", "-W", "-f", "${Depends}", "gpufs"]).stdout
        self.assertIn("fuse3", depends)
        for word in ("-dev", "ceph", "radosgw", "torch", "nginx"):
            with self.subTest(word=word):
                self.assertNotIn(word, depends)

    def test_lintian_finds_no_error(self):
        result = run(["lintian", "--no-tag-display-limit", self.deb], check=False)
        errors = [ln for ln in result.stdout.splitlines() if ln.startswith("E:")]
        self.assertEqual(errors, [], result.stdout)

    def test_zz_purge_removes_every_file_it_installed(self):
        # Bytecode from a run of the modules other than gpufs-emulate's own.
        run(["python3", "-c", "import sys; sys.path.insert(0, '/usr/share/gpufs/python'); "
             "import gpufs_emulate.main"])
        # As a detached daemon of root's leaves it where there is no syslog.
        os.makedirs("/var/log/gpufs", mode=0o700, exist_ok=True)
        with open("/var/log/gpufs/gpufsd.log", "a") as f:
            f.write("gpufsd: info: serving\n")
        result = run(["apt-get", "purge", "-y", "-q", "gpufs"])
        left = [f for f in self.files if os.path.lexists(f)]
        self.assertEqual(left, [])
        for folder in ("/var/log/gpufs", "/usr/share/gpufs", "/usr/share/doc/gpufs"):
            self.assertFalse(os.path.exists(folder), folder)
        self.assertNotIn("not empty", result.stdout + result.stderr)


if __name__ == "__main__":
    lib.exit_unless_fuse_usable()
    unittest.main(verbosity=2)
