#!/usr/bin/python3
"""The bash completion (deploy/completion/make_completion.py) against real gpufs mounts:
`gpufsd unmount` and gpufs-stat offer the mount points of the mount table. One mount is at
a folder with a plain name, the others at folders whose names are shell code, as any user
who can mount may name them (`d$(touch pwned)`): those are offered literally, quoted, and
their code never runs, neither in the shell of whoever presses TAB nor in the command line
the completion leaves. The names hold a space, a backslash and "a 7", which the mount table
writes as octal escapes (\\040, \\134) for the completion to decode."""
import os
import pty
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import gpufs_testlib as lib

sys.path.insert(0, lib.ROOT)
from tests.servers.procs import wait_for  # noqa: E402

GPUFS_STAT = os.environ.get("GPUFS_STAT", os.path.join(lib.ROOT, "build", "cli", "gpufs-stat"))
MAKE_COMPLETION = os.path.join(lib.ROOT, "deploy", "completion", "make_completion.py")
BASH_COMPLETION = "/usr/share/bash-completion/bash_completion"
# Folder names that are shell code: each touches a file in the shell's working folder.
HOSTILE = ["d$(touch pwned)", "a 7\\c`touch pwned`"]
MARKER = "pwned"


def gpufs_mount_points():
    """The mount points of the fuse.gpufs mounts, their octal escapes decoded."""
    points = []
    with open("/proc/self/mountinfo", "rb") as f:
        for line in f:
            fields = line.split()
            if fields[fields.index(b"-") + 1] == b"fuse.gpufs":
                path = re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m[1], 8)]), fields[4])
                points.append(os.fsdecode(path))
    return points


class Completion(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.path.exists(BASH_COMPLETION):
            raise unittest.SkipTest(f"{BASH_COMPLETION} is missing (apt install bash-completion)")
        cls.work = tempfile.mkdtemp(prefix="gpufs-completion-")
        cls.script = os.path.join(cls.work, "gpufsd.bash")
        subprocess.run(["/usr/bin/python3", MAKE_COMPLETION, "--gpufsd", lib.GPUFSD,
                        "--gpufs-stat", GPUFS_STAT, cls.script], check=True)
        tree, _ = lib.make_dataset(os.path.join(cls.work, "data"), classes=2, per_class=4,
                                   group_size=4)
        cls.pack = os.path.join(cls.work, "pack")
        result = lib.run_gpufsd("pack", tree, cls.pack)
        assert result.returncode == 0, result.stderr
        # Where the shells run: a command that got out of a name would touch a file here.
        cls.shell_dir = os.path.join(cls.work, "shell")
        os.mkdir(cls.shell_dir)
        cls.mnt = os.path.join(cls.work, "mnt") + "/"
        cls.plain = cls.mnt + "plain"
        cls.hostile = [cls.mnt + name for name in HOSTILE]
        cls.env = {**os.environ, "XDG_CACHE_HOME": os.path.join(cls.work, "xdg")}
        for mnt in [cls.plain, *cls.hostile]:
            os.makedirs(mnt)
            result = lib.run_gpufsd("mount", "--cache-size", "16MiB", "--no-disk-cache",
                                    cls.pack, mnt, env=cls.env)
            if result.returncode != 0:
                cls.tearDownClass()
                raise AssertionError(f"cannot mount at {mnt!r}: {result.stderr}")

    @classmethod
    def tearDownClass(cls):
        for mnt in gpufs_mount_points():
            if mnt.startswith(cls.mnt):
                pid = int(os.getxattr(mnt, "user.gpufs.pid"))
                result = lib.run_gpufsd("unmount", mnt)
                assert result.returncode == 0, result.stderr
                wait_for(f"gpufsd {pid} to exit", lambda: not lib.is_running(pid),
                         time.monotonic() + 30)
        shutil.rmtree(cls.work)

    def tearDown(self):
        self.assertEqual(os.listdir(self.shell_dir), [], "a mount point's name ran a command")

    def complete(self, words):
        """COMPREPLY of the completion of the command line `words` (its last word the one
        being completed), as bash-completion computes it on TAB."""
        script = f'''
source {BASH_COMPLETION}
source "$COMPLETION"
COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1))
printf -v COMP_LINE '%s ' "$@"; COMP_LINE=${{COMP_LINE% }}; COMP_POINT=${{#COMP_LINE}}
case $1 in gpufsd) _gpufsd ;; gpufs-stat) _gpufs_stat ;; esac
((${{#COMPREPLY[@]}} == 0)) || printf '%s\\0' "${{COMPREPLY[@]}}"
'''
        result = subprocess.run(["bash", "-c", script, "bash", *words], capture_output=True,
                                env={**os.environ, "COMPLETION": self.script},
                                cwd=self.shell_dir, timeout=60)
        self.assertEqual(result.returncode, 0, result.stderr)
        return [os.fsdecode(w) for w in result.stdout.split(b"\0")[:-1]]

    def as_shell_reads(self, word):
        """What the shell makes of `word` in a command line: the arguments it stands for."""
        result = subprocess.run(["bash", "-c", f"printf '%s\\0' {word}"], capture_output=True,
                                cwd=self.shell_dir, timeout=60)
        self.assertEqual(result.returncode, 0, result.stderr)
        return [os.fsdecode(w) for w in result.stdout.split(b"\0")[:-1]]

    def test_the_script_passes_shellcheck(self):
        shellcheck = shutil.which("shellcheck")
        if shellcheck is None:
            self.skipTest("shellcheck is not installed (apt install shellcheck)")
        # SC2207: COMPREPLY=($(compgen -W ...)) splits the words the script itself wrote.
        result = subprocess.run([shellcheck, "-s", "bash", "-e", "SC2207", self.script],
                                capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

    def test_o_completes_the_key_after_the_last_comma(self):
        # As bash splits `gpufsd mount -o cache_size=1GiB,pol`: '=' is a word break, and
        # readline replaces what follows the last one.
        script = f'''
source {BASH_COMPLETION}
source "$COMPLETION"
COMP_LINE="gpufsd mount -o cache_size=1GiB,pol"; COMP_POINT=${{#COMP_LINE}}
COMP_WORDS=(gpufsd mount -o cache_size = 1GiB,pol); COMP_CWORD=5
_gpufsd
printf '%s\\n' "${{COMPREPLY[@]}}"
'''
        result = subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                                env={**os.environ, "COMPLETION": self.script}, timeout=60)
        self.assertEqual(result.stdout.split(), ["1GiB,policy="], result.stderr)
        self.assertEqual(self.complete(["gpufsd", "mount", "-o", "allow_other,cache_s"]),
                         ["allow_other,cache_size="])
        self.assertIn("prefetch_depth=", self.complete(["gpufsd", "mount", "-o", "pre"]))

    def test_the_names_are_shell_code(self):
        # What the completion did before: the mount points as compgen -W's list, which
        # expands it. Each name runs its command there; it is what the tests guard against.
        for name in HOSTILE:
            with self.subTest(name=name):
                subprocess.run(["bash", "-c", 'compgen -W "$NAME" -- ""'], capture_output=True,
                               env={**os.environ, "NAME": name}, cwd=self.shell_dir, timeout=60)
                self.assertEqual(os.listdir(self.shell_dir), [MARKER])
                os.remove(os.path.join(self.shell_dir, MARKER))

    def test_unmount_offers_every_mount_point_quoted(self):
        offered = self.complete(["gpufsd", "unmount", self.mnt])
        self.assertEqual(len(offered), 3, offered)
        # Each word, read back by the shell, is one argument: the mount point itself.
        self.assertEqual(sorted(a for w in offered for a in self.as_shell_reads(w)),
                         sorted([self.plain, *self.hostile]))
        self.assertIn(self.plain, offered)  # a plain name needs no quoting

    def test_unmount_filters_by_what_was_typed_plain_or_quoted(self):
        self.assertEqual(self.complete(["gpufsd", "unmount", self.mnt + "pl"]), [self.plain])
        for typed in (self.mnt + "d$", self.mnt + "d\\$\\(tou"):
            with self.subTest(typed=typed):
                offered = self.complete(["gpufsd", "unmount", typed])
                self.assertEqual([self.as_shell_reads(w) for w in offered], [[self.hostile[0]]])
        self.assertEqual(self.complete(["gpufsd", "unmount", self.mnt + "x"]), [])
        self.assertEqual(self.complete(["gpufsd", "unmount", "/pro"]), [])  # not gpufs

    def test_gpufs_stat_offers_the_mount_points_literally(self):
        # Literal words: the completion sets -o filenames, so readline quotes them as it
        # quotes the files _filedir offers beside them.
        offered = self.complete(["gpufs-stat", self.mnt])
        for mnt in [self.plain, *self.hostile]:
            with self.subTest(mnt=mnt):
                self.assertIn(mnt, offered)
        self.assertEqual(set(self.complete(["gpufs-stat", self.mnt + "a"])), {self.hostile[1]})

    def test_tab_then_enter_unmounts_the_hostile_mount_and_runs_nothing(self):
        # An interactive bash on a terminal: TAB completes `gpufsd unmount .../d` to the
        # hostile mount point as readline inserts it, and Enter runs the line.
        target = self.hostile[0]
        bin_dir = os.path.join(self.work, "bin")
        os.makedirs(bin_dir, exist_ok=True)
        if not os.path.exists(os.path.join(bin_dir, "gpufsd")):
            os.symlink(os.path.abspath(lib.GPUFSD), os.path.join(bin_dir, "gpufsd"))
        env = {**self.env, "PATH": f"{bin_dir}:{os.environ['PATH']}", "TERM": "dumb",
               "INPUTRC": "/dev/null", "HISTFILE": "/dev/null", "PS1": "$ "}
        pid, fd = pty.fork()
        if pid == 0:
            os.chdir(self.shell_dir)
            os.execve("/bin/bash", ["bash", "--norc", "--noprofile", "-i"], env)
        screen = b""

        def until(text, seconds=30):
            nonlocal screen
            deadline = time.monotonic() + seconds
            while text not in screen:
                ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
                self.assertTrue(ready, f"no {text!r} on the terminal: {screen!r}")
                try:
                    screen += os.read(fd, 4096)
                except OSError:  # the shell exited
                    self.fail(f"no {text!r} on the terminal: {screen!r}")

        try:
            os.write(fd, f"source {BASH_COMPLETION}; source {self.script}; echo sour''ced\n"
                     .encode())
            until(b"sourced")
            os.write(fd, f"gpufsd unmount {self.mnt}d\t".encode())
            until(b"touch\\ pwned\\)")
            os.write(fd, b"\necho exit=$?\n")
            until(b"exit=0")
            os.write(fd, b"exit\n")
        finally:
            os.close(fd)
            os.waitpid(pid, 0)
        self.assertIn(b"gpufsd unmount " + os.fsencode(self.mnt) + b"d\\$\\(touch\\ pwned\\)",
                      screen)
        self.assertNotIn(target, gpufs_mount_points())
        # Mounted again for the other tests.
        result = lib.run_gpufsd("mount", "--cache-size", "16MiB", "--no-disk-cache", self.pack,
                                target, env=self.env)
        self.assertEqual(result.returncode, 0, result.stderr)


if __name__ == "__main__":
    lib.exit_unless_fuse_usable()
    unittest.main(verbosity=2)
