#!/usr/bin/python3
"""What a short outage of the S3 endpoint does to a training epoch: gpufs, s3fs, rclone.

    sudo /usr/bin/python3 tools/bench/outage.py [--files 2000] [--outages 1,3,10]
        [--baseline-gpufsd /work/wt-baseline/build/cli/gpufsd] [--out DIR]

The store and dataset are remote_store.py's: a one-node Ceph S3 store on loopback (radosgw
over a memstore OSD) holding one generated dataset of real JPEGs one object per file under
tree/ and as a gpufs pack under pack/. Every tool reaches radosgw through a TCP forwarder
(tests/servers/tcp_forwarder.py) that can be cut: closed, it refuses new connections and
resets the open ones, as a store that went away or a cut link does; opened, it listens on
the same port again.

For each tool -- gpufs (build/cli/gpufsd), the gpufs build given by --baseline-gpufsd (one
from before requests were retried until a deadline), s3fs and rclone, each mounted as
remote_store.py mounts it -- a fresh mount with its caches empty and the page cache
dropped runs one epoch of the unmodified torchvision ImageFolder + DataLoader (shuffled,
batch 32, 4 workers, raw bytes by default). First with no outage (the reference); then once
for each outage length D: --at (0.3) of the reference epoch's time into the epoch, the
forwarder closes for D seconds and opens again. An unmodified DataLoader raises on the first
read that fails, so an epoch either completes or ends at an EIO: recorded are whether it
completed, the error's line and how far the epoch got, the files read, the epoch's time and
its extra time over the reference.

Prints a table and writes results.json to --out. A tool that is not installed (or no
--baseline-gpufsd) is skipped, the reason in the table. Every server and mount it starts is
stopped by pid on the way out, on an error or Ctrl-C too; all of it listens on 127.0.0.1.
"""
import contextlib
import os
import re
import shutil
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (add_options, arg_parser, begin_run, loader_epochs,  # noqa: E402
                      need_root, print_dataset, read_progress, save_results, version_line,
                      versions)
from benchmount import GPUFSD, mount_has  # noqa: E402
from remote_store import (RCLONE_FLAGS, S3FS_OPTIONS, VERSIONS, Peers,  # noqa: E402
                          stored_dataset)
from servers import ceph_s3  # noqa: E402
from servers.procs import LOOPBACK, ServerError  # noqa: E402
from servers.tcp_forwarder import TcpForwarder  # noqa: E402

BASELINE = "gpufs baseline"
TOOLS = ("gpufs", BASELINE, "s3fs", "rclone")

# What each tool does about a failed request, as installed (none of it is set here).
RETRY_SETTINGS = {
    "gpufs": "--retry-seconds 20 (default): each request retried until 20 s have passed, "
             "backoff 100 ms..2 s with jitter",
    "s3fs": "retries=5 (default; 4 s sleep after a refused connection), connect_timeout=300, "
            "readwrite_timeout=120",
    "rclone": "--low-level-retries 10 (default), --contimeout 1m, --timeout 5m",
}


# --- following an epoch --------------------------------------------------------------

class Outage(threading.Thread):
    """Closes `forwarder` `after` seconds into the epoch that the progress file follows and
    opens it again `seconds` later. finish() ends it early if the epoch ended first; when it
    returns the forwarder is open. began/ended: monotonic times of the outage (None if it
    never began); files_at_start: files the loader had when it began."""

    def __init__(self, forwarder, progress, after, seconds):
        super().__init__(daemon=True)
        self.forwarder, self.progress = forwarder, progress
        self.after, self.seconds = after, seconds
        self.done = threading.Event()
        self.began = self.ended = self.files_at_start = None

    def run(self):
        try:
            points = read_progress(self.progress)
            while not points:
                if self.done.wait(0.005):
                    return
                points = read_progress(self.progress)
            if self.done.wait(max(0.0, points[0][1] + self.after - time.monotonic())):
                return
            self.files_at_start = read_progress(self.progress)[-1][0]
            self.began = time.monotonic()
            self.forwarder.close()
            self.done.wait(self.seconds)
        finally:
            self.forwarder.open()
            if self.began is not None:
                self.ended = time.monotonic()

    def finish(self):
        self.done.set()
        self.join()


def error_lines(stderr):
    """The first line of the error a loader died of, and the line that names its cause: the
    DataLoader re-raises a worker's error ("OSError: Caught OSError in DataLoader worker
    process 1.") with the worker's traceback inside, which ends with the worker's own
    error ("OSError: [Errno 5] Input/output error")."""
    lines = [line for line in stderr.splitlines()
             if re.match(r"^[A-Za-z_.]*(Error|Exception)\b.*:", line)]
    if not lines:
        lines = stderr.strip().splitlines()[-1:] or ["(no output)"]
    return lines[0], lines[-1]


# --- one epoch ----------------------------------------------------------------------

def outage_epoch(peers, tool, binary, fwd, files, outage_s, after_s, args):
    """One fresh mount of `tool` through the forwarder and one epoch through it, with an
    outage of `outage_s` seconds (0: none) `after_s` into the epoch; a result row."""
    row = {"tool": tool, "outage_s": outage_s}
    progress = os.path.join(peers.fresh("progress"), "lines")
    outage = Outage(fwd, progress, after_s, outage_s) if outage_s else None
    peer = "gpufs" if tool in ("gpufs", BASELINE) else tool
    connections = fwd.accepted
    try:
        with peers.mount(peer, fwd.url, gpufsd=binary) as m:
            if outage:
                outage.start()
            try:
                epoch = loader_epochs(m.mnt, args.mode, epochs=1, workers=args.workers,
                                      extra=["--progress", progress], timeout=args.timeout)[0]
                row.update(completed=True, files=epoch["files"], epoch_s=epoch["seconds"],
                           gpufs=epoch.get("gpufs"))
            except subprocess.CalledProcessError as e:
                points = read_progress(progress) or [(0, time.monotonic())]
                # Up to the error (its line in the progress file), not the teardown after.
                first, cause = error_lines(e.stderr)
                row.update(completed=False, error_first_line=first, error=cause,
                           stderr_tail=e.stderr[-3000:], files=points[-1][0],
                           epoch_s=points[-1][1] - points[0][1])
            finally:
                if outage:
                    outage.finish()
            log = m.log
    except (subprocess.SubprocessError, ServerError, OSError) as e:
        detail = getattr(e, "stderr", None) or ""
        row["failed"] = f"{e}\n{detail[-2000:]}".strip()
        return row
    row["fraction"] = row["files"] / files
    row["connections"] = fwd.accepted - connections  # the listing included
    points = read_progress(progress)
    if outage and outage.began is not None and points:
        row.update(outage_began_s=outage.began - points[0][1],
                   outage_lasted_s=outage.ended - outage.began,
                   outage_began_fraction=outage.files_at_start / files)
    elif outage:
        row["outage_missed"] = True  # the epoch ended before the outage was due
    with open(log, errors="replace") as f:
        row["daemon_log_tail"] = f.read()[-2000:]
    return row


# --- output -------------------------------------------------------------------------

def completed_cell(row):
    if "failed" in row:
        return "failed: " + row["failed"].splitlines()[0]
    if row["completed"]:
        return "yes"
    errno = re.search(r"\[Errno (\d+)\] ([^:']+)", row["error"])
    what = "EIO" if errno and errno.group(1) == "5" else (errno.group(2) if errno else
                                                            row["error"].split(":")[0])
    return f"{what} at {row['fraction']:.0%}"


def print_table(result):
    print(f"\n{result['files']:,} files ({result['data_bytes'] / 1e6:.0f} MB), one epoch each "
          f"({result['mode']}, {result['workers']} loader workers); the outage begins "
          f"{result['at']:.0%} of the tool's no-outage epoch time into the epoch\n")
    print(f"{'tool':16}{'outage s':>9}  {'completed':18}{'files':>7}{'epoch s':>9}"
          f"{'extra s':>9}  outage began")
    for tool in result["tools"]:
        if tool in result["skipped"]:
            print(f"{tool:16}{'':9}  skipped: {result['skipped'][tool]}")
            continue
        rows = [r for r in result["rows"] if r["tool"] == tool]
        ref = rows[0] if rows and rows[0].get("completed") else None
        for r in rows:
            if "failed" in r:
                print(f"{tool:16}{r['outage_s']:9}  {completed_cell(r)}")
                continue
            extra = (f"{r['epoch_s'] - ref['epoch_s']:9.1f}"
                     if ref and r["completed"] and r["outage_s"] else f"{'':9}")
            began = (f"{r['outage_began_s']:.1f} s in, at {r['outage_began_fraction']:.0%} "
                     f"of the files" if "outage_began_s" in r else
                     "(epoch ended first)" if r.get("outage_missed") else "")
            if not r["completed"] and "outage_began_s" in r:
                began += f"; the error {r['epoch_s'] - r['outage_began_s']:.1f} s after"
            elif r.get("outage_lasted_s", r["outage_s"]) < r["outage_s"] - 0.05:
                began += f"; the epoch ended {r['outage_lasted_s']:.1f} s into it"
            print(f"{tool:16}{r['outage_s']:9}  {completed_cell(r):18}{r['files']:7}"
                  f"{r['epoch_s']:9.1f}{extra}  {began}")
    print()
    for line in ratio_lines(result):
        print(line)


def ratio_lines(result):
    """One line a tool: epochs completed through an outage, and each completed epoch's
    time over the tool's no-outage epoch."""
    lines = []
    for tool in result["tools"]:
        rows = [r for r in result["rows"] if r["tool"] == tool]
        if not rows or not rows[0].get("completed"):
            continue
        ref, outages = rows[0], rows[1:]
        done = [r for r in outages if r.get("completed")]
        ratios = ", ".join(f"{r['epoch_s'] / ref['epoch_s']:.1f}x ({r['outage_s']} s)"
                           for r in done)
        lines.append(f"{tool}: {len(done)} of {len(outages)} epochs completed through the "
                     f"outage" + (f"; epoch time over no outage: {ratios}" if done else ""))
    return lines


# --- the run ------------------------------------------------------------------------

def skip_reasons(tools, baseline):
    """{tool: why it cannot run here} for the tools that cannot."""
    reasons = {}
    for tool in tools:
        if tool in ("s3fs", "rclone") and not shutil.which(tool):
            reasons[tool] = f"{tool} not installed (tools/install_deps.sh bench)"
        elif tool in ("gpufs", BASELINE):
            binary = GPUFSD if tool == "gpufs" else baseline
            if not binary:
                reasons[tool] = "no --baseline-gpufsd given"
            elif not os.access(binary, os.X_OK):
                reasons[tool] = f"{binary} not built"
            elif not mount_has("--endpoint", binary):
                reasons[tool] = f"{binary} cannot mount an S3 store (no --endpoint)"
    return reasons


def main():
    parser = arg_parser(__doc__)
    add_options(parser, files=2000, classes=40, workers=4)
    parser.add_argument("--mode", choices=["raw", "decode"], default="raw")
    parser.add_argument("--outages", default="1,3,10", help="outage lengths, seconds")
    parser.add_argument("--at", type=float, default=0.3,
                        help="when the outage begins, as a fraction of the tool's "
                             "no-outage epoch time")
    parser.add_argument("--tools", default=",".join(TOOLS))
    parser.add_argument("--baseline-gpufsd", default="",
                        help="a gpufsd from before the retry deadline (82ecd81), built "
                             "apart; without it that row is skipped")
    parser.add_argument("--timeout", type=int, default=600, help="seconds, per epoch")
    add_options(parser, cache="/var/tmp/gpufs-bench-src", out="/var/tmp/gpufs-outage-results")
    args = parser.parse_args()
    tools, outages = args.tools.split(","), [int(d) for d in args.outages.split(",")]
    need_root("outage", "FUSE mounts, drop_caches")
    if ceph_s3.skip_reason() or not shutil.which("fusermount3"):
        sys.exit(f"outage: {ceph_s3.skip_reason() or 'fusermount3 missing'} "
                 "(tools/install_deps.sh bench)")
    skipped = skip_reasons(tools, args.baseline_gpufsd)
    if "gpufs" in skipped:
        sys.exit(f"outage: {skipped['gpufs']}: it makes the pack")
    tree, files, data_bytes = begin_run(args.cache, args.out, args.files, args.classes)
    baseline_dir = os.path.dirname(os.path.abspath(args.baseline_gpufsd or "."))
    result = {"files": files, "data_bytes": data_bytes, "mode": args.mode,
              "workers": args.workers, "at": args.at, "outages": outages, "tools": tools,
              "skipped": skipped, "rows": [], "retry_settings": RETRY_SETTINGS,
              "config": {"s3fs": S3FS_OPTIONS, "rclone": RCLONE_FLAGS, "gpufs": "defaults",
                         "baseline_gpufsd": args.baseline_gpufsd},
              "versions": dict(versions(*VERSIONS), baseline=version_line(
                  "git", "-C", baseline_dir, "describe", "--always", "--dirty"))}
    print_dataset(files, data_bytes)
    with contextlib.ExitStack() as stack:
        store, work = stored_dataset(stack, tree, data_bytes, "outage")
        fwd = stack.enter_context(TcpForwarder(LOOPBACK, store.rgw_port))
        print(f"every tool reaches it through a forwarder at {fwd.url}", flush=True)
        peers = Peers(store, work)
        for tool in tools:
            if tool in skipped:
                continue
            binary = args.baseline_gpufsd if tool == BASELINE else GPUFSD
            ref = None
            for outage_s in [0, *outages]:
                after_s = args.at * ref["epoch_s"] if ref else 0
                row = outage_epoch(peers, tool, binary, fwd, files, outage_s, after_s, args)
                result["rows"].append(row)
                print(f"  {tool:16}{outage_s:4} s: " + (
                    completed_cell(row) if "failed" in row else
                    f"{completed_cell(row)}, {row['files']} files in {row['epoch_s']:.1f} s"),
                    flush=True)
                if ref is None:
                    if not row.get("completed"):
                        break  # no reference: the outages would say nothing
                    ref = row
    print_table(result)
    save_results(args.out, result)


if __name__ == "__main__":
    main()
