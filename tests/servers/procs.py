"""Child processes for the test servers: free loopback ports, daemons started in the
foreground with their output in a log file, readiness by polling with a deadline, and a stop
by pid (terminate, wait, kill) that never leaves a process behind.

Every daemon is started with PR_SET_PDEATHSIG, so if the Python process that started it dies
without cleaning up (SIGKILL, a crash) the kernel stops the daemon too.
"""
import ctypes
import http.server
import os
import random
import signal
import socket
import subprocess
import threading
import time

LOOPBACK = "127.0.0.1"


class ServerError(RuntimeError):
    """A server did not come up, or stopped working; the message holds the log's tail."""


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now (bind to port 0, read, close).

    The port is free when returned, not reserved: a daemon started right after takes it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def free_port_run(count, hosts=(LOOPBACK,)):
    """The first of `count` consecutive TCP ports that nothing listens on now, on each of
    `hosts`, for a configuration that derives ports from one (a port per Slurm job).

    Drawn below the kernel's ephemeral range, where connections and free_port() take
    theirs, so that only another test doing the same can collide with them."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low = int(f.read().split()[0])
    for _ in range(200):
        base = random.randrange(max(1024, low - 12000), low - count)
        if all(bindable(h, p) for h in hosts for p in range(base, base + count)):
            return base
    raise ServerError(f"no {count} consecutive free ports below {low}")


def bindable(host, port):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
            return True
        except OSError:
            return False


def tail(path, lines=30):
    """The last `lines` lines of a text file, or a note that it is missing."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode("utf-8", "replace")
    except OSError as e:
        return f"(no log: {e})"
    return "\n".join(text.splitlines()[-lines:])


def _die_with_parent(sig, own_group):
    """What the child runs before exec: `sig` when the parent thread exits, and with
    `own_group` a process group of its own, so that its children can be killed with it."""
    def setup():
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, sig)  # PR_SET_PDEATHSIG
        if own_group:
            os.setpgid(0, 0)
    return setup


def exit_on_sigterm():
    """Turns SIGTERM (what `meson test` sends on a timeout) into SystemExit, so that `with`
    blocks and atexit handlers stop the servers and remove their folders on the way out."""
    def handler(signum, frame):
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, handler)


class ThreadServer:
    """An http.server on 127.0.0.1 at a free port, `handler` answering on a thread of this
    process: for servers a test plays itself (fakes of AWS endpoints, hostile stores)."""

    def __init__(self, handler):
        self.server = http.server.ThreadingHTTPServer((LOOPBACK, 0), handler)
        self.url = f"http://{LOOPBACK}:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


class Daemon:
    """One foreground server process; stdout and stderr go to `log`.

    `name` names it in errors; `logs` are the files whose tails an error shows (the
    daemon's own log file first, then its output). `death_sig` is what the daemon gets when
    this process dies. `own_group` is for daemons that fork workers (nginx): they share a
    process group whose id is the daemon's pid, and a stop that has to kill kills the group.
    """

    def __init__(self, name, argv, log, logs=(), env=None, cwd=None,
                 death_sig=signal.SIGTERM, own_group=False):
        self.name, self.argv, self.log = name, list(argv), log
        self.logs = list(logs) + [log]
        self.env, self.cwd = env, cwd
        self.death_sig, self.own_group = death_sig, own_group
        self.proc = None

    def start(self):
        out = open(self.log, "ab")
        try:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, env=self.env, cwd=self.cwd,
                                         preexec_fn=_die_with_parent(self.death_sig,
                                                                        self.own_group))
        finally:
            out.close()
        return self

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def check(self):
        """Raises ServerError, with the log tail, when the process has exited."""
        if self.proc is not None and self.proc.poll() is not None:
            raise ServerError(f"{self.name} exited with status {self.proc.returncode}\n"
                              + self.describe())

    def describe(self):
        return "\n".join(f"--- {p} (tail) ---\n{tail(p)}" for p in self.logs)

    def stop(self, timeout=10, sig=signal.SIGTERM):
        """Stops the process by pid: `sig` (SIGTERM), wait up to `timeout` s, then SIGKILL."""
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            try:
                proc.send_signal(sig)
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                # The group id cannot be reused before the leader is reaped (below).
                if self.own_group:
                    os.killpg(proc.pid, signal.SIGKILL)
                else:
                    proc.kill()
                proc.wait()


def wait_for(what, ready, deadline, daemons=(), interval=0.05, max_interval=0.5):
    """Polls `ready()` until it returns a true value, which is returned.

    Fails with ServerError naming `what` when `deadline` (a time.monotonic() value) passes or
    one of `daemons` exits; the error carries the tail of their logs. Exceptions raised by
    `ready` count as "not yet"; the last one is quoted in the error."""
    last = None
    while True:
        for d in daemons:
            d.check()
        try:
            value = ready()
            if value:
                return value
        except Exception as e:  # noqa: BLE001 - any failure means "not ready yet"
            last = e
        if time.monotonic() > deadline:
            detail = f" (last error: {last})" if last else ""
            logs = "\n".join(d.describe() for d in daemons)
            raise ServerError(f"timed out waiting for {what}{detail}\n{logs}")
        time.sleep(interval)
        interval = min(interval * 1.5, max_interval)
