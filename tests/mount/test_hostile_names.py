#!/usr/bin/python3
"""Names reach people and parsers escaped (dataset/printable.h), through real mounts of a
tar whose class and member names hold ESC, CR, BEL, TAB and other C0 bytes, and a class
named `a Files=0`: a failed read's log line, the daemon's problems in gpufs-stat, a mount's
refusal of a name with a newline, and gpufs-stat's class names and paths in text, kv and
JSON. (A holder's process name on an unmount refused as busy: test_mount_point.py.)"""
import io
import json
import os
import subprocess
import tarfile
import unittest

import gpufs_testlib as lib

GPUFS_STAT = os.environ.get("GPUFS_STAT", os.path.join(lib.ROOT, "build", "cli", "gpufs-stat"))
# Every C0 byte but NUL, '/' and newline (which no name may hold), and DEL.
C0 = "".join(chr(c) for c in range(1, 32) if c != 10) + "\x7f"
HOSTILE_CLASS = "c\x1b]0;pwned\x07"
HOSTILE_FILE = f"img\r\x1b[2J{C0}.JPEG"
FORGING_CLASS = "a Files=0"


def escaped(text):
    """`text` as Printable writes it."""
    return "".join(c if 0x20 <= ord(c) < 0x7f and c != "\\" else f"\\x{ord(c):02x}"
                   for c in text)


def raw_controls(text):
    """The control bytes in `text` other than the line ends that separate its lines."""
    return sorted({c for c in text if (ord(c) < 0x20 and c != "\n") or ord(c) == 0x7f})


class HostileNames(lib.WorkFolderCase):
    PREFIX = "gpufs-names-"

    def make_tar(self, members):
        """A tar of {path: bytes}, in that order."""
        path = os.path.join(self.work, "data.tar")
        with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
            for name, data in members.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, fileobj=io.BytesIO(data))
        return path

    def sample(self):
        """Two plain classes, the forging one and the hostile file last in the archive."""
        members = {f"plain{c}/p{i}.JPEG": os.urandom(3000) for c in range(2) for i in range(3)}
        members[f"{FORGING_CLASS}/f.JPEG"] = os.urandom(3000)
        members[f"{HOSTILE_CLASS}/{HOSTILE_FILE}"] = os.urandom(200000)
        return self.make_tar(members), members

    def mount(self, source, *options):
        result = lib.run_gpufsd("mount", *options, source, self.mnt, env=self.env)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(raw_controls(result.stderr), [])

    def test_a_failed_reads_log_line_and_gpufs_stat_carry_the_name_escaped(self):
        archive, members = self.sample()
        log = os.path.join(self.work, "gpufsd.log")
        self.mount(archive, "--cache-size", "0", "--log-file", log)
        os.truncate(archive, os.path.getsize(archive) - 100000)  # into the hostile file
        with self.assertRaises(OSError):
            with open(os.path.join(self.mnt, HOSTILE_CLASS, HOSTILE_FILE), "rb") as f:
                f.read()
        stat = subprocess.run([GPUFS_STAT, self.mnt], capture_output=True, text=True,
                              timeout=60)
        self.assertEqual(stat.returncode, 0, stat.stderr)
        self.assertIn("the daemon logged: ", stat.stderr)
        self.assertIn(escaped(f"{HOSTILE_CLASS}/{HOSTILE_FILE}"), stat.stderr)
        self.assertEqual(raw_controls(stat.stderr), [])
        self.assertEqual(lib.run_gpufsd("unmount", self.mnt).returncode, 0)
        with open(log, newline="") as f:
            text = f.read()
        self.assertIn(f"warning: cannot read {escaped(HOSTILE_CLASS + '/' + HOSTILE_FILE)}: ",
                      text)
        self.assertEqual(raw_controls(text), [])

    def test_gpufs_stat_escapes_names_and_quotes_kv_values(self):
        archive, members = self.sample()
        self.mount(archive)
        self.assertEqual(lib.files_below(self.mnt), members)

        def stat(*args):
            result = subprocess.run([GPUFS_STAT, *args, self.mnt], capture_output=True,
                                    text=True, timeout=60)
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertEqual(raw_controls(result.stdout + result.stderr), [])
            return result.stdout

        kv = stat("-c", "--output", "kv")
        self.assertIn(f'Class="{FORGING_CLASS}" Files=1 ', kv)
        self.assertIn(f"Class={escaped(HOSTILE_CLASS)} Files=1 ", kv)
        self.assertNotIn("\nFiles=0", kv)
        text = stat("-c", "-v")
        self.assertIn(escaped(f"{HOSTILE_CLASS}/{HOSTILE_FILE}"), text)
        self.assertIn(escaped(HOSTILE_CLASS), text)
        # JSON keeps the names as they are, in its own escapes.
        report = json.loads(stat("-c", "--json"))
        self.assertIn(HOSTILE_CLASS, [c["name"] for c in report["classes"]])

    def test_a_refused_name_with_a_newline_is_one_line(self):
        archive = self.make_tar({"cls/ok.JPEG": b"x" * 100,
                                 "cls/forged\ngpufsd: serving 0 files.JPEG": b"y" * 100})
        result = lib.run_gpufsd("mount", archive, self.mnt, env=self.env)
        self.assertEqual(result.returncode, 1)
        self.assertEqual(result.stderr.count("\n"), 1, result.stderr)
        self.assertIn("forged\\x0agpufsd: serving 0 files.JPEG", result.stderr)
        self.assertEqual(raw_controls(result.stderr), [])


if __name__ == "__main__":
    lib.exit_unless_fuse_usable()
    unittest.main()
