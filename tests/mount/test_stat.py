"""gpufs-stat against a real mount: each tier's residency, in every output form, equals what
was read; the kernel tier agrees with vmtouch; the watch view, the metrics endpoint, and
the messages for a path off any mount and for a dead or stopped daemon."""
import json
import os
import pty
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpufs_testlib as lib  # noqa: E402

GPUFS_STAT = os.environ.get("GPUFS_STAT", os.path.join(lib.ROOT, "build", "cli", "gpufs-stat"))
PAGE = 4096


def pages(size):
    return (size + PAGE - 1) // PAGE


def stat(*args, timeout=60):
    return subprocess.run([GPUFS_STAT, *args], capture_output=True, text=True, timeout=timeout)


def resident_lines(text):
    """{tier: (resident, total)} from the summary's "Resident Pages:" lines."""
    found = {}
    for m in re.finditer(r"Resident Pages: (\d+)/(\d+) .*?%\s+(.*)$", text, re.M):
        found[m.group(3).strip() or "kernel page cache"] = (int(m.group(1)), int(m.group(2)))
    return found


def vmtouch(path):
    out = subprocess.run(["vmtouch", path], capture_output=True, text=True, check=True).stdout
    m = re.search(r"Resident Pages: (\d+)/(\d+)", out)
    return int(m.group(1)), int(m.group(2))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Residency(unittest.TestCase):
    """One fresh mount (nothing in the kernel's cache yet) with prefetch off, so the pinned
    tier holds exactly the groups of the files read."""

    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="gpufs-test-")
        cls.tree, cls.src = lib.make_dataset(cls.work, 4, 12, 4)
        cls.mount = lib.Mount(cls.src, "--cache-size", "64MiB", "--no-prefetch")
        cls.mnt = cls.mount.__enter__()
        try:
            cls.survey_and_read()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def survey_and_read(cls):
        cls.files = {}  # mount path -> (size, group)
        cls.dirs = 0
        for folder, subdirs, names in os.walk(cls.mnt):
            cls.dirs += 1
            for name in names:
                path = os.path.join(folder, name)
                group = int(os.getxattr(path, "user.gpufs.group"))
                cls.files[path] = (os.stat(path).st_size, group)
        cls.classes = sorted(os.listdir(cls.mnt))
        first, second = (os.path.join(cls.mnt, c) for c in cls.classes[:2])
        cls.read = sorted(cls.under(first)) + sorted(cls.under(second))[:2]
        for path in cls.read:
            with open(path, "rb") as f:
                f.read()
        groups = {cls.files[p][1] for p in cls.read}
        cls.pinned = {p for p, (_, g) in cls.files.items() if g in groups}
        lib.settled_stats(cls.mnt, lambda s: s["groups_loaded"] >= len(groups),
                          "the groups read to finish loading")

    @classmethod
    def tearDownClass(cls):
        cls.mount.__exit__(None, None, None)
        shutil.rmtree(cls.work)

    def expect(self, paths):
        """(total, kernel, pinned) pages expected over paths."""
        total = sum(pages(self.files[p][0]) for p in paths)
        kernel = sum(pages(self.files[p][0]) for p in paths if p in self.read)
        pinned = sum(pages(self.files[p][0]) for p in paths if p in self.pinned)
        return total, kernel, pinned

    @classmethod
    def under(cls, folder):
        return [p for p in cls.files if p.startswith(folder + "/")]

    def test_summary_shows_each_tier_as_read(self):
        result = stat(self.mnt)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn(f"Files: {len(self.files)}\n", result.stdout)
        self.assertIn(f"Directories: {self.dirs}\n", result.stdout)
        total, kernel, pinned = self.expect(self.files)
        self.assertEqual(resident_lines(result.stdout), {
            "kernel page cache": (kernel, total), "gpufsd pinned cache": (pinned, total)})
        self.assertGreater(kernel, 0)
        self.assertLess(kernel, pinned)  # the rest of each group read came along
        self.assertIn("Elapsed:", result.stdout)

    def test_kv_line_has_each_tier(self):
        result = stat("--output", "kv", self.mnt)
        self.assertEqual(result.returncode, 0, result.stderr)
        kv = dict(item.split("=", 1) for item in result.stdout.split())
        total, kernel, pinned = self.expect(self.files)
        self.assertEqual(int(kv["Files"]), len(self.files))
        self.assertEqual(int(kv["Directories"]), self.dirs)
        self.assertEqual(int(kv["TotalPages"]), total)
        self.assertEqual(int(kv["KernelResidentPages"]), kernel)
        self.assertEqual(int(kv["PinnedResidentPages"]), pinned)
        self.assertEqual(int(kv["PinnedResidentSize"]), pinned * PAGE)

    def test_json_lists_every_file_with_each_tier(self):
        folder = os.path.join(self.mnt, self.classes[1])
        result = stat("--json", "-v", folder)
        self.assertEqual(result.returncode, 0, result.stderr)
        report = json.loads(result.stdout)
        listed = {f["path"]: f for f in report["file_list"]}
        self.assertEqual(sorted(listed), sorted(self.under(folder)))
        for path, entry in listed.items():
            total, kernel, pinned = self.expect([path])
            self.assertEqual(entry["total_pages"], total, path)
            self.assertEqual(entry["tiers"]["kernel"]["resident_pages"], kernel, path)
            self.assertEqual(entry["tiers"]["pinned"]["resident_pages"], pinned, path)
            self.assertEqual(entry["tiers"]["kernel"]["chart"], ("O" if kernel else " ") * total)
        total, kernel, pinned = self.expect(self.under(folder))
        self.assertEqual(report["tiers"]["kernel"]["resident_pages"], kernel)
        self.assertEqual(report["tiers"]["pinned"]["resident_pages"], pinned)
        self.assertEqual(report["total_pages"], total)

    def test_verbose_draws_a_chart_per_tier(self):
        read, unread = self.read[0], next(p for p in self.files if p not in self.pinned)
        result = stat("-v", read, unread)
        self.assertEqual(result.returncode, 0, result.stderr)
        for path, resident in ((read, True), (unread, False)):
            n = pages(self.files[path][0])
            chart = ("O" if resident else " ") * n
            have = n if resident else 0
            self.assertIn(f"{path}\n[{chart}] {have}/{n}  kernel page cache\n"
                          f"[{chart}] {have}/{n}  gpufsd pinned cache\n", result.stdout)
        self.assertIn("Files: 2\n", result.stdout)

    def test_by_class_and_by_group(self):
        report = json.loads(stat("--json", "--by", "class", self.mnt).stdout)
        self.assertEqual([c["name"] for c in report["classes"]], self.classes)
        for entry in report["classes"]:
            total, kernel, pinned = self.expect(self.under(os.path.join(self.mnt, entry["name"])))
            self.assertEqual(entry["total_pages"], total)
            self.assertEqual(entry["tiers"]["kernel"]["resident_pages"], kernel)
            self.assertEqual(entry["tiers"]["pinned"]["resident_pages"], pinned)
        report = json.loads(stat("--json", "--by", "group", self.mnt).stdout)
        for entry in report["groups"]:
            members = [p for p, (_, g) in self.files.items() if g == int(entry["name"])]
            self.assertEqual(entry["files"], len(members))
            self.assertEqual(entry["tiers"]["pinned"]["resident_pages"], self.expect(members)[2])
        text = stat("-c", self.mnt).stdout
        first = len(self.under(os.path.join(self.mnt, self.classes[0])))
        self.assertRegex(text, rf"\n{self.classes[0]}\s+{first}\s+\d+\s+100%\s+100%\n")

    def test_kernel_tier_agrees_with_vmtouch(self):
        if shutil.which("vmtouch") is None:
            self.skipTest("vmtouch is not installed")
        for path in (self.mnt, os.path.join(self.mnt, self.classes[1]), self.read[0]):
            ours = resident_lines(stat(path).stdout)["kernel page cache"]
            self.assertEqual(ours, vmtouch(path), path)
            # vmtouch opened every file: now the kernel holds every inode, and each is asked.
            self.assertEqual(resident_lines(stat(path).stdout)["kernel page cache"], ours, path)

    def test_a_path_off_any_gpufs_mount_gets_the_kernel_tier_only(self):
        result = stat(self.tree)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("is not on a gpufs mount: kernel page cache only", result.stderr)
        tiers = resident_lines(result.stdout)
        self.assertEqual(list(tiers), ["kernel page cache"])
        if shutil.which("vmtouch"):
            self.assertEqual(tiers["kernel page cache"], vmtouch(self.tree))
        missing = stat(os.path.join(self.tree, "nothing"))
        self.assertEqual(missing.returncode, 1)
        self.assertIn("cannot stat", missing.stderr)
        self.assertIn("nothing", missing.stderr)
        missing = stat(os.path.join(self.mnt, "nothing"))
        self.assertEqual(missing.returncode, 1)
        self.assertIn("no nothing in the mount", missing.stderr)

    def test_watch_prints_a_line_per_interval_off_a_terminal(self):
        result = stat("-w", "--interval", "0.1", "--count", "2", self.mnt)
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = result.stdout.splitlines()
        self.assertEqual(len(lines), 2)
        kv = dict(item.split("=", 1) for item in lines[-1].split())
        self.assertEqual(kv["epoch"], "1")
        self.assertAlmostEqual(float(kv["epoch_progress"]), len(self.read) / len(self.files),
                               places=3)
        self.assertEqual(kv["files_per_s"], "0")
        self.assertEqual(kv["in_memory_ratio"], "-")  # nothing read during the watch
        # A local folder's reads are not timed: not measured is "-", never 0.0.
        self.assertEqual(kv["source_latency_ms_p50"], "-")
        self.assertEqual(kv["source_latency_ms_p99"], "-")

    def test_watch_redraws_in_place_on_a_terminal(self):
        pid, fd = pty.fork()
        if pid == 0:
            os.execv(GPUFS_STAT, [GPUFS_STAT, "-w", "--interval", "0.1", "--count", "3", self.mnt])
        output = b""
        while True:
            ready, _, _ = select.select([fd], [], [], 30)
            try:
                chunk = os.read(fd, 65536) if ready else b""
            except OSError:
                chunk = b""
            if not chunk:
                break
            output += chunk
        _, status = os.waitpid(pid, 0)
        self.assertEqual(os.waitstatus_to_exitcode(status), 0, output)
        text = output.decode()
        self.assertTrue(text.startswith("\x1b[?25l\x1b[2J"))
        self.assertEqual(text.count("\x1b[H"), 3)  # each frame drawn over the last
        self.assertTrue(text.endswith("\x1b[?25h"))
        visible = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)
        for line in visible.splitlines():
            self.assertLessEqual(len(line), 80, line)
        self.assertIn("epoch 1   [", visible)
        self.assertIn("hit ratio", visible)


def read_whole(path):
    with open(path, "rb") as f:
        return f.read()


def metrics_of(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return r.read().decode()


class Figures(unittest.TestCase):
    """What gpufs-stat -w, --advise and /metrics say of a mount, as a user sees them: the
    hit ratio lies in [0, 1] or is not measured ("-", null, no sample), -w --json prints a
    JSON object per refresh, and an epoch the kernel's page cache serves is told."""

    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="gpufs-test-")
        cls.tree, cls.src = lib.make_dataset(cls.work, 5, 20, 4)  # 100 files, groups of 4

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.work)

    @staticmethod
    def files(mnt):
        return sorted(os.path.join(d, n) for d, _, names in os.walk(mnt) for n in names)

    def test_a_cold_first_epoch_hits_nothing_and_no_view_says_less(self):
        port = free_port()
        with lib.Mount(self.src, "--cache-size", "64MiB", "--metrics",
                       f"127.0.0.1:{port}") as mnt:
            # Nothing read: the ratio is not measured, in every view.
            self.assertEqual(lib.watch(mnt)[0]["hit_ratio"], "-")
            self.assertIsNone(lib.watch(mnt, json_lines=True)[0]["hit_ratio"])
            self.assertNotIn("gpufs_stall_hit_ratio{", metrics_of(port))
            for path in self.files(mnt)[:10]:
                read_whole(path)
            # Whole groups, prefetched ahead: the source sent more than was served.
            current = lib.stats_of(mnt)["stall"]["current"]
            fetched = sum(v["fetched_bytes"] for t, v in current["from"].items()
                          if t.startswith("source"))
            self.assertGreater(fetched, current["bytes_served"])
            # Every byte of this first epoch came from the source: 0, never below.
            self.assertEqual(lib.watch(mnt)[0]["hit_ratio"], "0.0000")
            for j in lib.watch(mnt, count=2, json_lines=True):
                self.assertEqual((j["epoch"], j["hit_ratio"]), (1, 0.0))
            ratio = re.search(r'\ngpufs_stall_hit_ratio\{epoch="current"\} (\S+)\n',
                              metrics_of(port))
            self.assertEqual(float(ratio.group(1)), 0.0)
            advice = json.loads(stat("--advise", "--json", mnt, timeout=120).stdout)
            self.assertEqual(advice["measured"]["hit_ratio"], 0.0)
            self.assertGreaterEqual(advice["model"]["hit_ratio"], 0.0)
            for p in advice["points"]:
                self.assertTrue(0.0 <= p["hit_ratio"] <= 1.0, p)
            screen = stat("--advise", mnt, timeout=120).stdout
            self.assertIn("hit ratio 0.00: ", screen)
            self.assertNotRegex(screen, r"hit ratio\s+-\d")

    def test_a_warm_epoch_from_memory_hits_everything(self):
        # Streaming: each read reaches the daemon (no page cache).
        with lib.Mount(self.src, "--cache-size", "64MiB", "--streaming", "on") as mnt:
            files = self.files(mnt)
            for path in files:  # epoch 1 ends with its last file
                read_whole(path)
            for path in files[:-1]:  # epoch 2, all but its last file
                read_whole(path)
            self.assertEqual(lib.watch(mnt)[0]["hit_ratio"], "1.0000")
            (j,) = lib.watch(mnt, json_lines=True)
            self.assertEqual((j["epoch"], j["hit_ratio"]), (2, 1.0))
            self.assertIsNotNone(j["last_stall_fraction"])

    def test_watch_json_prints_a_json_object_per_refresh_with_the_lines_keys(self):
        with lib.Mount(self.src, "--cache-size", "64MiB") as mnt:
            for path in self.files(mnt)[:5]:
                read_whole(path)
            objects = lib.watch(mnt, count=3, json_lines=True)
            (kv,) = lib.watch(mnt)
        self.assertEqual(len(objects), 3)
        for j in objects:
            self.assertEqual(list(j), list(kv))
            self.assertEqual(j["epoch"], 1)
            self.assertIsInstance(j["served_mb_per_s"], (int, float))
            self.assertIsNone(j["source_latency_ms_p50"])  # "-" in the line: not measured
        self.assertEqual(kv["source_latency_ms_p50"], "-")

    def test_an_epoch_the_kernels_page_cache_serves_is_told(self):
        with lib.Mount(self.src, "--cache-size", "64MiB") as mnt:
            files = self.files(mnt)
            (fresh,) = lib.watch(mnt)
            self.assertEqual(float(fresh["page_cache_ratio"]), 0.0)  # nothing read yet
            for _ in range(2):  # epoch 1 through gpufsd, then again: the kernel answers
                for path in files:
                    read_whole(path)
            (kv,) = lib.watch(mnt)
            (j,) = lib.watch(mnt, json_lines=True)
            screen = stat("--advise", mnt, timeout=120).stdout
        self.assertEqual((kv["epoch"], kv["files_per_s"]), ("2", "0"))
        self.assertGreater(float(kv["page_cache_ratio"]), 0.9)
        self.assertGreater(j["page_cache_ratio"], 0.9)
        self.assertIn("its page cache holds", screen)
        self.assertIn("so epoch 1 is the last gpufsd saw, not necessarily the last trained",
                      screen)

    def test_a_plot_before_any_epoch_is_refused_with_what_to_do(self):
        png = os.path.join(self.work, "early.png")
        with lib.Mount(self.src, "--cache-size", "64MiB") as mnt:
            out = stat("--advise", "--plot", png, mnt, timeout=120)
        self.assertEqual(out.returncode, 1, out.stderr)
        self.assertIn("nothing to plot yet: read an epoch through", out.stderr)
        self.assertIn("Nothing has been read through this mount yet", out.stdout)
        self.assertFalse(os.path.exists(png))


def sockets_held(pid):
    """How many of the process's descriptors are sockets."""
    fds = f"/proc/{pid}/fd"
    held = 0
    for fd in os.listdir(fds):
        try:
            held += os.readlink(os.path.join(fds, fd)).startswith("socket:")
        except FileNotFoundError:  # closed meanwhile
            pass
    return held


class Daemon(unittest.TestCase):
    """Metrics, and what gpufs-stat says when the daemon is gone or stopped."""

    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="gpufs-test-")
        cls.tree, cls.src = lib.make_dataset(cls.work, 2, 4, 4)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.work)

    def test_metrics_endpoint_counts_what_was_served(self):
        port = free_port()
        with lib.Mount(self.src, "--metrics", f"127.0.0.1:{port}") as mnt:
            names = sorted(os.listdir(os.path.join(mnt, os.listdir(mnt)[0])))[:3]
            for name in names:
                with open(os.path.join(mnt, os.listdir(mnt)[0], name), "rb") as f:
                    f.read()
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                text = r.read().decode()
            self.assertIn("# TYPE gpufs_served_files_total counter\n", text)
            self.assertIn("\ngpufs_served_files_total 3\n", text)
            files = sum(len(names) for _, _, names in os.walk(mnt))
            self.assertIn(f"\ngpufs_dataset_files {files}\n", text)
            self.assertRegex(text, r"\ngpufs_cache_misses_total [1-9]")

    def test_a_flood_of_metrics_connections_fails_no_read(self):
        """Hundreds of idle and trickling connections to the metrics port, with the daemon's
        descriptors capped at 128: every read succeeds meanwhile, the daemon holds no more
        than a few of them, and once they go the metrics answer."""
        port = free_port()
        flood = []
        mount = lib.Mount(self.src, "--cache-size", "0", "--metrics", f"127.0.0.1:{port}")
        with mount as mnt:
            pid = mount.proc.pid
            result = subprocess.run(["prlimit", f"--pid={pid}", "--nofile=128:128"],
                                    capture_output=True, text=True)
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertEqual(lib.files_below(mnt), lib.files_below(self.tree))
            before = sockets_held(pid)
            try:
                for i in range(300):  # more than the daemon may hold
                    c = socket.socket()
                    c.setblocking(False)
                    c.connect_ex(("127.0.0.1", port))
                    flood.append(c)
                deadline = time.monotonic() + 8
                while time.monotonic() < deadline:  # a byte now and then: never a whole head
                    for c in flood[:20]:
                        try:
                            c.send(b"G")
                        except OSError:
                            pass
                    lib.drop_page_cache()
                    self.assertEqual(lib.files_below(mnt), lib.files_below(self.tree))
                    self.assertLessEqual(sockets_held(pid), before + 4,
                                         "the flood took the daemon's descriptors")
                    time.sleep(0.5)
            finally:
                for c in flood:
                    c.close()
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
                self.assertIn("\ngpufs_source_errors_total 0\n", r.read().decode())

    def test_bad_or_busy_metrics_address_refuses_the_mount(self):
        mnt = tempfile.mkdtemp(prefix="gpufs-mnt-")
        try:
            result = lib.run_gpufsd("mount", "--metrics", "nowhere", self.src, mnt)
            self.assertEqual(result.returncode, 1)
            self.assertIn("cannot serve metrics at 'nowhere': use HOST:PORT", result.stderr)
            with socket.socket() as busy:
                busy.bind(("127.0.0.1", 0))
                busy.listen()
                port = busy.getsockname()[1]
                result = lib.run_gpufsd("mount", "--metrics", f"127.0.0.1:{port}", self.src, mnt)
            self.assertEqual(result.returncode, 1)
            self.assertIn(f"cannot serve metrics at 127.0.0.1:{port}", result.stderr)
            self.assertFalse(lib.is_mounted(mnt))
        finally:
            os.rmdir(mnt)

    def test_a_dead_or_stopped_daemon_gets_a_message_not_a_hang(self):
        mount = lib.Mount(self.src)
        mnt = mount.__enter__()
        try:
            mount.proc.send_signal(signal.SIGSTOP)
            start = time.monotonic()
            result = stat("--timeout", "1", mnt, timeout=30)
            self.assertEqual(result.returncode, 1)
            self.assertIn("does not answer", result.stderr)
            self.assertLess(time.monotonic() - start, 20)  # bounded, not a measurement
            mount.proc.send_signal(signal.SIGCONT)
            mount.proc.kill()
            mount.proc.wait(timeout=30)
            for args in ([mnt], ["-w", mnt]):
                result = stat(*args, timeout=30)
                self.assertEqual(result.returncode, 1)
                self.assertIn(f"{mnt}: the gpufsd serving this mount has exited", result.stderr)
                self.assertIn(f"fusermount3 -u {mnt}", result.stderr)
        finally:
            mount.proc.kill()
            mount.proc.wait(timeout=30)
            mount.log.close()
            subprocess.run(["fusermount3", "-u", "-z", mnt], capture_output=True)
            os.rmdir(mnt)


if __name__ == "__main__":
    lib.exit_unless_fuse_usable()
    unittest.main(verbosity=2)
