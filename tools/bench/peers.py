#!/usr/bin/python3
"""Four training nodes over one emulated cloud store, with and without gpufsd --peers.

    sudo /usr/bin/python3 tools/bench/peers.py [--files 8000] [--epochs 2] [--rounds 1]
                              [--modes alone,peers,peers-members,one-node] [--decode]

One generated dataset of real JPEGs (benchlib.sample_tree), packed with `gpufsd pack`
(16 MiB groups), is served by an nginx origin behind a FaultProxy: +20 ms per request and
80 MB/s per connection (--delay-ms, --rate-mb: the "cloud" link of disk_tier.py). Four
nodes are simulated on this machine: each is a gpufsd mount of that store with its own
caches (its own XDG_CACHE_HOME, no disk tier, the default RAM budget, which holds the whole
pack) and one rank of a torch.distributed job (gloo, CPU: tools/bench/dist_loader.py)
reading torchvision ImageFolder through its own mount, DistributedSampler(num_replicas=4,
rank=r, shuffle=True, seed=0) with set_epoch(e), 4 DataLoader workers, batches of 32, raw
bytes (--decode to decode), and one all_reduce per batch as DDP's gradient all-reduce
(--no-step-sync: none). The page cache is dropped before every epoch, as for a dataset much
larger than memory. The modes, each with fresh mounts (and fresh peers), run side by side:

  alone          four nodes, no --peers: each reads every group it needs from the store
  peers          four nginx peer caches (deploy/nginx/gpufs-peer.conf, tests/servers'
                 NginxPeer) on loopback ports, each in front of the store; every mount gets
                 --peers with all four: each 4 MiB block goes through the one peer that
                 rendezvous hashing picks. Default cache: whole groups, consume-once
  peers-members  the same with --cache-size 0: only the files read, each through its peer
  one-node       one node, one rank reading the whole dataset (num_replicas=1), no peers

and, when named in --modes, peers-nopush-on and peers-members-nopush-on: the two peer
modes with the peers' `tcp_nopush off` turned on again (see CorkedPeer).

Per mode and epoch it records the ranks' epoch times, what the store served (the origin's
access log: blob requests and body bytes), what the peers served the nodes (their access
logs, with nginx's cache status of each request), what the nodes read from the store
directly (the io.bytes of their stats xattr), and checks every rank's (index, SHA-256) pairs
against the same sampler over the source tree; it also sums the CPU time the ranks, the
daemons, the peers and the store used. Before the modes it times what one member read costs
at a warm peer: 200 ranged GETs of 60-200 KB on one kept-alive connection, to the shipped
config and to it with `tcp_nopush on`. With --rounds N every mode runs N times (in turn
with the others) and the median epoch (by the job's files/s) is shown.

Prints a table per epoch with ratios (store bytes / pack bytes, job files/s against alone
and against one-node), writes results.json, chart.txt and peers.png to --out (a new
temporary folder unless given), with the daemons', ranks' and peers' logs under --out/logs.
Every server, mount and process it starts is stopped on the way out, on an error or
Ctrl-C too.
"""
import collections
import contextlib
import hashlib
import http.client
import json
import os
import queue
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from benchlib import (PYTHON, add_options, arg_parser, begin_run, chart_text,  # noqa: E402
                      cloud_link, cpu_now, drop_caches, middle, need_root,
                      own_group_dying_with_parent, packed_work, print_dataset, pyplot,
                      save_results, versions)
from benchmount import (GPUFSD, GPUFSD_EPILOG, gpufs_fuse_mount, gpufs_stats,  # noqa: E402
                        mount_has)
from servers import nginx  # noqa: E402
from servers.procs import free_port, wait_for  # noqa: E402

MODES = ("alone", "peers", "peers-members", "one-node")
# The peer modes again with the peers' nginx answering under TCP_CORK (not run unless
# named in --modes): see CorkedPeer.
NOPUSH_ON = "-nopush-on"
EXTRA_MODES = tuple(m + NOPUSH_ON for m in MODES if m.startswith("peers"))
NODES = 4
BLOBS = "/pack/blob"  # the part of a blob's request path: the index and HEADs are not data


class CorkedPeer(nginx.NginxPeer):
    """The shipped peer config without its `tcp_nopush off`, so that the http block around
    it (tests/servers/nginx.py, as Debian's stock nginx.conf: `sendfile on`, `tcp_nopush
    on`) decides: nginx then sends each answer under TCP_CORK, and on this kernel a ranged
    answer of ~100 KB on a kept-alive connection is held ~40 ms about half the time (a
    member read is one such answer)."""

    def _http_body(self):
        body = super()._http_body()
        corked = body.replace("tcp_nopush off;", "tcp_nopush on;", 1)
        if corked == body:
            raise RuntimeError("the peer config has no 'tcp_nopush off;' to turn on")
        return corked


def probe_answers(peer, host, blob, size, count=200):
    """Latencies (s) of `count` ranged GETs of 60-200 KB (a member read's size) at random
    offsets of `blob` from `peer`, one after another on one kept-alive connection with
    TCP_NODELAY, after one pass that fills the peer's cache."""
    url = urllib.parse.urlsplit(peer.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    conn.connect()
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rng, latencies = random.Random(0), []
    try:
        for n in range(2 * count):
            first = rng.randrange(0, size - 200_000)
            last = first + rng.randrange(60_000, 200_000) - 1
            start = time.perf_counter()
            conn.request("GET", blob, headers={"Host": host, "Range": f"bytes={first}-{last}",
                                               **peer.headers})
            resp = conn.getresponse()
            body = resp.read()
            if resp.status != 206 or len(body) != last - first + 1:
                raise RuntimeError(f"{peer.url}{blob} bytes={first}-{last}: HTTP "
                                   f"{resp.status}, {len(body)} bytes")
            if n >= count:
                latencies.append(time.perf_counter() - start)
    finally:
        conn.close()
    return sorted(latencies)


def probe(proxy, served, peer_block):
    """What one member read costs at a warm peer, shipped config against tcp_nopush on."""
    blob = "/pack/blob-000000.gpufs"
    size = os.path.getsize(os.path.join(served, blob.lstrip("/")))
    host = urllib.parse.urlsplit(proxy.url).netloc
    out = {}
    for name, kind in (("shipped", nginx.NginxPeer), ("tcp_nopush on", CorkedPeer)):
        with kind(proxy.url, slice_bytes=peer_block) as peer:
            lat = probe_answers(peer, host, blob, size)
        out[name] = {"p50_ms": lat[len(lat) // 2] * 1e3, "p90_ms": lat[len(lat) * 9 // 10] * 1e3,
                     "over_35ms": sum(x > 0.035 for x in lat) / len(lat)}
    return out


# --- the ranks --------------------------------------------------------------------------

class Job:
    """One rank of tools/bench/dist_loader.py per root (a node's mount), in one process
    group of the gloo backend; driven epoch by epoch over their stdin and stdout."""

    def __init__(self, roots, args, logs):
        port = free_port()
        self.procs, self.lines = [], queue.Queue()
        self.logs = [os.path.join(logs, f"rank{r}.log") for r in range(len(roots))]
        for rank, root in enumerate(roots):
            cmd = [PYTHON, os.path.join(HERE, "dist_loader.py"), root, "--rank", str(rank),
                   "--world", str(len(roots)), "--master-port", str(port),
                   "--workers", str(args.workers)]
            cmd += ["--decode"] if args.decode else []
            cmd += [] if args.step_sync else ["--no-step-sync"]
            with open(self.logs[rank], "ab") as log:
                proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=log, text=True,
                                        preexec_fn=own_group_dying_with_parent)
            self.procs.append(proc)
            threading.Thread(target=self._read, args=(rank, proc), daemon=True).start()

    def _read(self, rank, proc):
        for line in proc.stdout:
            if line.startswith("{"):
                self.lines.put((rank, json.loads(line)))
        self.lines.put((rank, None))  # end of output: the rank exited

    def _collect(self, what, timeout):
        """One JSON line from every rank, in rank order; fails naming a rank that exited
        or the timeout."""
        got, deadline = {}, time.monotonic() + timeout
        while len(got) < len(self.procs):
            try:
                rank, row = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise RuntimeError(f"timed out waiting {timeout} s for {what} of ranks "
                                   f"{sorted(set(range(len(self.procs))) - set(got))}")
            if row is None:
                with open(self.logs[rank]) as f:
                    tail = f.read()[-3000:]
                raise RuntimeError(f"rank {rank} exited during {what}:\n{tail}")
            got[rank] = row
        return [got[r] for r in range(len(self.procs))]

    def ready(self, timeout=300):
        return [row["ready"] for row in self._collect("start-up", timeout)]

    def epoch(self, epoch, timeout):
        for proc in self.procs:
            proc.stdin.write(f"go {epoch}\n")
            proc.stdin.flush()
        return self._collect(f"epoch {epoch}", timeout)

    def close(self):
        for proc in self.procs:
            with contextlib.suppress(OSError, ValueError):
                proc.stdin.write("quit\n")
                proc.stdin.close()
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


# --- what each server and mount counted -------------------------------------------------

def snapshot(origin, peers, mounts):
    """The counters this benchmark reports, as they are now."""
    requests, sent, _ = origin.served(BLOBS)
    snap = {"store_requests": requests, "store_bytes": sent, "peer_requests": 0,
            "peer_bytes": 0, "peer_status": collections.Counter(), "node_bytes": 0,
            "node_requests": 0, "node_peer_failures": 0, "node_peer_fallbacks": 0,
            "node_errors": 0}
    for p in peers:
        requests, sent, statuses = p.served(BLOBS)
        snap["peer_requests"] += requests
        snap["peer_bytes"] += sent
        snap["peer_status"].update(statuses)
    for mnt in mounts:
        io = gpufs_stats(mnt)["io"]
        snap["node_bytes"] += io["bytes"]
        snap["node_requests"] += io["requests"]
        snap["node_peer_failures"] += io.get("peer_failures", 0)
        snap["node_peer_fallbacks"] += io.get("peer_fallbacks", 0)
        snap["node_errors"] += io["errors"]
    return snap


def difference(after, before):
    return {k: (after[k] - before[k]) if not isinstance(after[k], collections.Counter)
            else dict(after[k] - before[k]) for k in after}


def settled(mounts):
    """True when no mount has a store or peer request or a prefetch in flight."""
    for mnt in mounts:
        s = gpufs_stats(mnt)
        if s["io"].get("in_flight", 0) or s.get("prefetch_in_flight", 0):
            return False
    return True


# --- one mode ---------------------------------------------------------------------------

def expected_samples(n, world, epochs):
    """{(epoch, rank): sorted [index, ...]} of DistributedSampler over n samples."""
    from torch.utils.data.distributed import DistributedSampler
    out = {}
    for epoch in range(epochs):
        for rank in range(world):
            sampler = DistributedSampler(range(n), num_replicas=world, rank=rank,
                                         shuffle=True, seed=0)
            sampler.set_epoch(epoch)
            out[(epoch, rank)] = list(sampler)
    return out


def mismatches(got, indices, digests):
    """How many (index, sha256) pairs differ between a rank's epoch and the sampler's over
    the source (the size of the multisets' symmetric difference)."""
    want = collections.Counter((i, digests[i]) for i in indices)
    have = collections.Counter((i, d) for i, d in got)
    return sum(((want - have) + (have - want)).values())


def run_mode(mode, n_round, args, work, origin, proxy, source):
    """Fresh peers and mounts for `mode`, the job's epochs over them; a result row."""
    nodes = 1 if mode == "one-node" else NODES
    peer_class = CorkedPeer if mode.endswith(NOPUSH_ON) else nginx.NginxPeer
    row = {"mode": mode, "round": n_round, "nodes": nodes, "epochs": []}
    with contextlib.ExitStack() as inner:
        peers = []
        if mode.startswith("peers"):
            for _ in range(NODES):
                peers.append(inner.enter_context(
                    peer_class(proxy.url, slice_bytes=args.peer_block)))
                # Runs before the peer's exit, which removes its folder.
                inner.callback(keep_peer_log, peers[-1], work,
                               f"{mode}-r{n_round}-peer{len(peers) - 1}")
        mounts, daemons = [], []
        for node in range(nodes):
            mnt = work.fresh(f"mnt-{mode}-{node}")
            argv = [GPUFSD, "mount", "-f", proxy.url + "/pack/", mnt, "--no-disk-cache"]
            if peers:
                argv += ["--peers", ",".join(p.url for p in peers),
                         "--peer-block", str(args.peer_block),
                         "--peer-secret-file", peers[0].secret_file]
            if mode.startswith("peers-members"):
                argv += ["--cache-size", "0"]
            env = dict(os.environ, XDG_CACHE_HOME=work.fresh(f"xdg-{mode}-{node}"))
            daemons.append(inner.enter_context(gpufs_fuse_mount(argv, mnt, env=env)))
            mounts.append(mnt)
        row["budget_bytes"] = gpufs_stats(mounts[0]).get("budget_bytes", 0)
        logs = work.fresh(f"ranks-{mode}-r{n_round}")
        job = Job(mounts, args, logs)
        inner.callback(shutil.copytree, logs, os.path.join(args.out, "logs",
                                                           os.path.basename(logs)),
                       dirs_exist_ok=True)
        inner.callback(job.close)
        for ready in job.ready():
            if (ready["files"], ready["listing"]) != (source["files"], source["listing"]):
                raise RuntimeError(f"{mode}: rank {ready['rank']} lists {ready['files']} "
                                   f"files, not the source tree's {source['files']} alike")
        expected = expected_samples(source["files"], nodes, args.epochs)
        # Whose CPU time is reported: nginx and the ranks each lead a process group.
        groups = {"ranks": [p.pid for p in job.procs], "peers": [p.daemon.pid for p in peers],
                  "store": [origin.daemon.pid, proxy.daemon.pid]}
        pids = {"gpufsd": [d.pid for d in daemons]}
        for epoch in range(args.epochs):
            before = snapshot(origin, peers, mounts)
            drop_caches()
            cpu_before, start = cpu_now(groups, pids), time.perf_counter()
            ranks = job.epoch(epoch, timeout=args.epoch_timeout)
            wall = time.perf_counter() - start
            cpu = {k: v - cpu_before[k] for k, v in cpu_now(groups, pids).items()}
            start = time.perf_counter()
            wait_for(f"{mode}: the mounts' reads to finish", lambda: settled(mounts),
                     time.monotonic() + 300)
            counters = difference(snapshot(origin, peers, mounts), before)
            seconds = [r["seconds"] for r in ranks]
            e = {"epoch": epoch + 1, "wall_s": wall, "settle_s": time.perf_counter() - start,
                 "rank_seconds": seconds, "max_s": max(seconds),
                 "mean_s": statistics.mean(seconds), "files": sum(r["files"] for r in ranks),
                 "mismatches": sum(mismatches(r["samples"], expected[(epoch, r["rank"])],
                                              source["digests"]) for r in ranks),
                 "cpu_s": cpu, "busy": cpu["busy"] / (wall * os.cpu_count()), **counters}
            e["files_per_s"] = e["files"] / e["max_s"]
            e["peer_store_bytes"] = e["store_bytes"] - e["node_bytes"]
            row["epochs"].append(e)
            print(f"    epoch {e['epoch']}: {e['max_s']:6.2f} s max, {e['mean_s']:6.2f} s mean,"
                  f" {e['files_per_s']:6.0f} files/s; store {e['store_bytes'] / 1e6:5.0f} MB"
                  f" in {e['store_requests']} req; from peers {e['peer_bytes'] / 1e6:5.0f} MB "
                  f"{status_words(e['peer_status'])}; CPU busy {e['busy']:.0%}; "
                  f"mismatches {e['mismatches']}", flush=True)
        row["io"] = [gpufs_stats(m)["io"] for m in mounts]
    return row


def keep_peer_log(peer, work, name):
    """The peer's access log (every request with its cache status), kept after it stops."""
    if peer.prefix and os.path.exists(peer.access_log):
        shutil.copy(peer.access_log, os.path.join(work.root, f"{name}.access.log"))


def status_words(statuses):
    return "(" + " ".join(f"{k} {v}" for k, v in sorted(statuses.items())) + ")" if statuses \
        else ""


def median_row(runs, epochs):
    """Each epoch the median round's (by the job's files/s), with every round's files/s."""
    out = dict(runs[0], epochs=[])
    for i in range(epochs):
        out["epochs"].append(dict(middle([r["epochs"][i] for r in runs]),
                                  rounds=[r["epochs"][i]["files_per_s"] for r in runs],
                                  all_mismatches=sum(r["epochs"][i]["mismatches"]
                                                     for r in runs)))
    return out


# --- output -----------------------------------------------------------------------------

def print_table(result):
    pack = result["pack_bytes"]
    rows = result["rows"]
    w = max(len(m) for m in rows) + 1
    print(f"\n{result['files']} files, mean {result['data_bytes'] / result['files'] / 1e3:.0f} KB;"
          f" pack {pack / 1e6:.0f} MB in {result['groups']} groups; {result['about']}")
    print(f"{result['setup']}")
    print(probe_text(result["probe"]))
    print(f"median of {result['rounds']} round(s) (each round's files/s at the end); MB are "
          "10^6 bytes; 'x data': store bytes over the pack's blob bytes; 'fetched': store bytes "
          "less what the nodes read from the store directly ('direct'); 'bad': (index, "
          "SHA-256) pairs unlike the source's, all rounds\n")
    print(f"  {'mode':{w}}{'ep':>3}{'max s':>7}{'mean s':>7}{'files/s':>8}{'x alone':>8}"
          f"{'x 1-node':>9}{'store MB':>9}{'x data':>7}{'store req':>10}{'peers MB':>9}"
          f"{'fetched':>8}{'direct':>7}  {'peer cache status':22}{'bad':>4}  rounds")
    for mode, row in rows.items():
        for e in row["epochs"]:
            i = e["epoch"] - 1
            ratio = {m: (f"{e['files_per_s'] / rows[m]['epochs'][i]['files_per_s']:.2f}"
                         if m in rows else "") for m in ("alone", "one-node")}
            peers = mode.startswith("peers")
            got = f"{e['peer_bytes'] / 1e6:.0f}" if peers else ""
            fetched = f"{e['peer_store_bytes'] / 1e6:.0f}" if peers else ""
            print(f"  {mode:{w}}{e['epoch']:>3}{e['max_s']:7.2f}{e['mean_s']:7.2f}"
                  f"{e['files_per_s']:8.0f}{ratio['alone']:>8}{ratio['one-node']:>9}"
                  f"{e['store_bytes'] / 1e6:9.0f}{e['store_bytes'] / pack:7.2f}"
                  f"{e['store_requests']:>10}{got:>9}{fetched:>8}"
                  f"{e['node_bytes'] / 1e6:7.0f}  {status_text(e['peer_status']):22}"
                  f"{e['all_mismatches']:>4}  {' '.join(f'{x:.0f}' for x in e['rounds'])}")
    print(f"\n  CPU seconds during each epoch (median round; {os.cpu_count()} CPUs, so at most "
          f"{os.cpu_count()} x wall): the ranks with their DataLoader workers, the gpufsd "
          "daemons, the peers' nginx, the store's nginx (origin and link); 'busy' is the "
          "whole machine's (/proc/stat, sampled by ticks: below the processes' exact sum when "
          "they run in short bursts)")
    print(f"  {'mode':{w}}{'ep':>3}{'wall s':>7}{'busy':>6}{'ranks':>7}{'gpufsd':>7}{'peers':>7}"
          f"{'store':>7}")
    for mode, row in rows.items():
        for e in row["epochs"]:
            c = e["cpu_s"]
            print(f"  {mode:{w}}{e['epoch']:>3}{e['wall_s']:7.2f}{e['busy']:6.0%}"
                  f"{c['ranks']:7.1f}{c['gpufsd']:7.1f}{c['peers']:7.1f}{c['store']:7.1f}")
    print(f"\n  {result['epochs']} epochs (median round by the slowest rank's total):")
    totals = {mode: total_of(runs) for mode, runs in result["runs"].items()}
    for mode, t in totals.items():
        vs = {m: f"{totals[m]['seconds'] / t['seconds']:.2f}x" if m in totals else "-"
              for m in ("alone", "one-node")}
        print(f"  {mode:{w}}{t['seconds']:7.2f} s, {t['files'] / t['seconds']:6.0f} files/s "
              f"(x alone {vs['alone']}, x one-node {vs['one-node']}); store "
              f"{t['store_bytes'] / 1e6:5.0f} MB = {t['store_bytes'] / pack:.2f}x the pack; "
              f"read errors, peer failures, fallbacks: {t['errors']}, {t['failures']}, "
              f"{t['fallbacks']}")


def total_of(runs):
    """Over every epoch of the round whose epochs took the median total (slowest rank's
    time per epoch, summed); errors, failures and fallbacks summed over every round."""
    def seconds(run):
        return sum(e["max_s"] for e in run["epochs"])
    run = sorted(runs, key=seconds)[(len(runs) - 1) // 2]
    every = [e for r in runs for e in r["epochs"]]
    return {"seconds": seconds(run), "files": sum(e["files"] for e in run["epochs"]),
            "store_bytes": sum(e["store_bytes"] for e in run["epochs"]),
            "errors": sum(e["node_errors"] for e in every),
            "failures": sum(e["node_peer_failures"] for e in every),
            "fallbacks": sum(e["node_peer_fallbacks"] for e in every)}


def probe_text(p):
    return ("a warm peer's answers to 200 ranged GETs of 60-200 KB, one after another on one "
            "kept-alive connection: " + "; ".join(
                f"{name}: p50 {v['p50_ms']:.2f} ms, p90 {v['p90_ms']:.1f} ms, "
                f"{v['over_35ms']:.0%} over 35 ms" for name, v in p.items()))


def status_text(statuses):
    return " ".join(f"{k}:{v}" for k, v in sorted(statuses.items()) if k != "-") or "-"


def chart(result, out):
    """chart.txt always; peers.png (files/s and store bytes per epoch) with matplotlib."""
    lines = []
    for mode, row in result["rows"].items():
        lines.append((f"{mode}:", None))
        for e in row["epochs"]:
            lines.append((f"  epoch {e['epoch']}", e["files_per_s"]))
    chart_text(out, lines, "job files/s per epoch")
    plt = pyplot(required=False)
    if plt is None:
        return "chart.txt"
    rows = result["rows"]
    fig, axes = plt.subplots(1, 2, figsize=(10.5, 4.2))
    width = 0.8 / len(rows)
    for panel, (key, scale, label) in zip(axes, (
            ("files_per_s", 1, "images/s of the whole job"),
            ("store_bytes", 1e-6, "MB served by the store"))):
        for i, (mode, row) in enumerate(rows.items()):
            xs = [e["epoch"] - 0.4 + width * (i + 0.5) for e in row["epochs"]]
            panel.bar(xs, [e[key] * scale for e in row["epochs"]], width, label=mode)
        if key == "store_bytes":
            panel.axhline(result["pack_bytes"] * scale, color="gray", linestyle="dotted",
                          label="the pack, once")
        panel.set_xticks(range(1, result["epochs"] + 1),
                         [f"epoch {n}" for n in range(1, result["epochs"] + 1)])
        panel.set_ylabel(label)
        panel.legend(fontsize=7)
    fig.suptitle(f"{NODES} nodes over one store (+{result['delay_ms']} ms, "
                 f"{result['rate_mb']:.0f} MB/s per connection): torchvision ImageFolder, "
                 f"{result['files']:,} JPEGs, {'decode' if result['decode'] else 'raw'}",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "peers.png"), dpi=100)
    return "chart.txt and peers.png"


# --- the run ----------------------------------------------------------------------------

def source_samples(tree):
    """What ImageFolder lists in the source tree: its size, the digest dist_loader.py prints
    of it, and the SHA-256 of every sample's bytes, by index."""
    import dist_loader
    from torchvision import datasets
    root = tree.rstrip("/") + "/"
    folder = datasets.ImageFolder(root, loader=lambda p: p)
    digests = []
    for path, _ in folder.samples:
        with open(path, "rb") as f:
            digests.append(hashlib.sha256(f.read()).hexdigest())
    return {"files": len(folder), "listing": dist_loader.listing_digest(folder, root),
            "digests": digests}


def check_tools():
    """Exits saying why where this machine cannot run the benchmark."""
    need_root("peers", "FUSE mounts, drop_caches")
    reasons = [f"missing: {t}" for t in ("fusermount3",) if not shutil.which(t)]
    for server in (nginx.FaultProxy, nginx.NginxPeer):
        if server.skip_reason():
            reasons.append(server.skip_reason())
    if reasons:
        sys.exit("peers: " + "; ".join(reasons) + " (tools/install_deps.sh bench)")
    if not mount_has("--peers"):
        sys.exit(f"peers: {GPUFSD} has no --peers; build a newer one")


def parse_args():
    parser = arg_parser(__doc__, GPUFSD_EPILOG)
    add_options(parser, files=8000, classes=40)
    parser.add_argument("--epochs", type=int, default=2,
                        help="epochs of the job per mode: the first is cold, later ones may "
                             "be served from the daemons' RAM")
    parser.add_argument("--modes", default=",".join(MODES),
                        help=f"of {', '.join(MODES + EXTRA_MODES)}, comma-separated")
    parser.add_argument("--rounds", type=int, default=1,
                        help="runs of each mode (fresh mounts and peers); median shown")
    parser.add_argument("--workers", type=int, default=4, help="DataLoader workers per rank")
    parser.add_argument("--decode", action="store_true",
                        help="decode every image (RandomResizedCrop(160), ToTensor): four "
                             "ranks decoding on this machine measure its CPUs")
    parser.add_argument("--no-step-sync", dest="step_sync", action="store_false",
                        help="no all_reduce per batch: ranks wait for each other only at "
                             "the end of an epoch")
    parser.add_argument("--peer-block", type=int, default=4 << 20,
                        help="gpufsd --peer-block and the peers' slice size")
    add_options(parser, delay_ms=(20, "emulated store: per request"),
                rate_mb=(80, "emulated store: MB/s per connection"))
    parser.add_argument("--epoch-timeout", type=int, default=900,
                        help="seconds an epoch of the job may take before it counts as failed")
    add_options(parser, cache="/var/tmp/gpufs-bench-src")
    parser.add_argument("--work", default="/var/tmp",
                        help="the local disk the mounts' folders and logs go to")
    add_options(parser, out=None)
    args = parser.parse_args()
    args.modes = args.modes.split(",")
    unknown = set(args.modes) - set(MODES + EXTRA_MODES)
    if unknown:
        parser.error(f"unknown modes {sorted(unknown)}: choose from "
                     f"{', '.join(MODES + EXTRA_MODES)}")
    args.out = args.out or tempfile.mkdtemp(prefix="gpufs-peers-results-")
    return args


def main():
    args = parse_args()
    check_tools()
    tree, files, data_bytes = begin_run(args.cache, os.path.join(args.out, "logs"),
                                        args.files, args.classes)
    source = source_samples(tree)
    result = {"files": files, "data_bytes": data_bytes, "epochs": args.epochs,
              "rounds": args.rounds, "workers": args.workers, "decode": args.decode,
              "step_sync": args.step_sync, "peer_block": args.peer_block,
              "delay_ms": args.delay_ms, "rate_mb": args.rate_mb,
              "versions": versions("gpufs", "nginx", "torch"),
              "about": f"store: nginx origin behind a proxy, +{args.delay_ms} ms per "
                       f"request, {args.rate_mb:.0f} MB/s per connection"}
    print_dataset(files, data_bytes)
    runs = {mode: [] for mode in args.modes}
    with contextlib.ExitStack() as stack:
        work, served = packed_work(stack, GPUFSD, tree, "gpufs-bench-peers-", args.work, args.out)
        blobs = [n for n in os.listdir(os.path.join(served, "pack")) if n.startswith("blob")]
        result["groups"] = len(blobs)
        result["pack_bytes"] = sum(os.path.getsize(os.path.join(served, "pack", n))
                                   for n in blobs)
        origin = stack.enter_context(nginx.NginxOrigin(served))
        proxy = cloud_link(stack, origin.url, args)
        print(f"packed: {len(blobs)} blobs, {result['pack_bytes'] / 1e6:.0f} MB; "
              f"{result['about']}", flush=True)
        result["probe"] = probe(proxy, served, args.peer_block)
        print(probe_text(result["probe"]), flush=True)
        for n in range(args.rounds):
            for mode in args.modes:
                print(f"  {mode} (round {n + 1}):", flush=True)
                runs[mode].append(run_mode(mode, n + 1, args, work, origin, proxy, source))
        budget = next((r[0]["budget_bytes"] for m, r in runs.items()
                       if not m.startswith("peers-members")), 0)
    result["setup"] = (
        f"{NODES} nodes (one-node: 1), each a gpufsd mount with its own XDG_CACHE_HOME, "
        f"--no-disk-cache (disk tier: off), RAM budget {budget / 2**30:.1f} GiB (the default; "
        "holds the pack), "
        f"peers-members --cache-size 0; --peer-block {args.peer_block >> 20} MiB; "
        f"{args.workers} DataLoader workers per rank, batch 32, "
        f"{'decode' if args.decode else 'raw bytes'}, "
        f"{'one all_reduce per batch' if args.step_sync else 'no per-batch sync'}; "
        "page cache dropped before each epoch")
    result["rows"] = {mode: median_row(r, args.epochs) for mode, r in runs.items()}
    result["runs"] = runs
    print_table(result)
    charts = chart(result, args.out)
    save_results(args.out, result, f" and {args.out}/{charts}", default=dict)


if __name__ == "__main__":
    main()
