#!/usr/bin/python3
"""Cold epochs of an unmodified torchvision loader through S3 mounts: gpufs, s3fs, rclone.

    sudo /usr/bin/python3 tools/bench/remote_store.py [--files 2000] [--out DIR]

Brings up a real S3 store on loopback (one-node Ceph: radosgw over a memstore OSD, so every
object lives in RAM) and stores one generated dataset of real JPEGs in it twice: one object
per file under tree/, and as a gpufs pack (index.gpufs and ~16 MiB blobs) under pack/.
Then, for each way of reaching the store -- directly, and through an emulated cloud link
(an nginx proxy that delays every request and limits each connection's rate) -- it times
one cold epoch of torchvision's ImageFolder + DataLoader (shuffled, batch 32, decoding as a
trainer does, and again reading raw bytes) over:

  gpufs   gpufsd mount s3://bench/pack/ (blobs fetched as whole groups, prefetched)
  s3fs    s3fs bench:/tree (one object per file)
  rclone  rclone mount bench/tree (one object per file)

Each is a fresh mount with its own caches empty (gpufs with its disk tier off, or with
--gpufs-tier fresh in a new empty folder), and the page cache is dropped before the epoch;
the ImageFolder scan before it is timed apart. Besides files/s the table has the mount
daemon's CPU seconds (and per GB of files read), and the fraction of the files the
loader had consumed by the time the store's last byte arrived (see LEGEND: gpufs on both
links, s3fs and rclone on the cloud-like one). With --rounds N each peer runs N such
epochs (in turn with the others) and the median is shown. Two references bound what any
mount can do: "local tree" is the same loader on the tree on local disk with everything in
the page cache (what the CPUs allow), and "bound" is the link's bandwidth bound: the pack's
bytes fetched as 8 MiB ranged GETs by 4 to 32 threads, each on one kept-alive connection,
best rate over the thread counts, divided by the mean file size (files/s).

Prints a table (ratios gpufs/s3fs, gpufs/rclone, each peer's fraction of the bound) and
writes results.json and a chart to --out. Every server and mount it starts is stopped by
pid on the way out, on an error or Ctrl-C too.
"""
import contextlib
import http.client
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (Sampler, Work, add_options, arg_parser, begin_run,  # noqa: E402
                      chart_text, cloud_link, cpu_seconds, install_bench_deps, loader_epochs,
                      middle, need_root, print_dataset, pyplot, reading_split, save_results,
                      versions)
from benchmount import (GPUFSD, GPUFSD_EPILOG, FuseMount, gpufs_fuse_mount,  # noqa: E402
                        gpufs_source_bytes, gpufs_tier_argv, mount_has)
from servers import ceph_s3, nginx  # noqa: E402
from servers.procs import ServerError  # noqa: E402
from servers.s3client import UNSIGNED, sign  # noqa: E402

BUCKET = "bench"
PEERS = ("gpufs", "s3fs", "rclone")
VERSIONS = ("gpufs", "s3fs", "rclone", "radosgw", "nginx")  # benchlib.versions' names
LOCAL = "local tree"  # the reference: the tree on local disk, page cache warm

# Each peer as tuned for this read pattern (many small objects, read once, read-only).
S3FS_OPTIONS = [
    "ro", "use_path_request_style", "sigv4", "endpoint=us-east-1",  # region, for SigV4
    "listobjectsv2",
    "parallel_count=16",          # parallel ranged GETs of one large object
    "multireq_max=64",            # parallel HEADs when a folder is listed
    "max_stat_cache_size=200000", "stat_cache_expire=3600", "enable_noobj_cache",
]
RCLONE_FLAGS = [
    "--read-only", "--vfs-cache-mode", "off",  # stream reads, no local file cache
    "--buffer-size", "16M",                    # read ahead of each open file, in memory
    "--dir-cache-time", "1h", "--attr-timeout", "1h",
    "--no-modtime", "--use-server-modtime",    # no HEAD per file for its mtime
    "--no-checksum",
]


def clean_env():
    """The environment without the caller's AWS_* variables: a CA bundle, profile or
    endpoint meant for another store would change what each tool does (rclone refuses to
    start with AWS_CA_BUNDLE set and a plain-HTTP endpoint)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}


def s3_env(store, endpoint):
    """clean_env() with the store's credentials and `endpoint` for gpufsd."""
    env = clean_env()
    env.update(store.env(), AWS_ENDPOINT_URL=endpoint)
    return env


# --- the link's bandwidth bound -------------------------------------------------------------

def ranged_get_rate(store, endpoint, objects, threads, piece=8 << 20):
    """Bytes/s of fetching every (key, size) in `objects` as `piece`-sized ranged GETs by
    `threads` threads, each on one kept-alive connection to `endpoint`."""
    url = urllib.parse.urlsplit(endpoint)
    ranges = [(key, start, min(size, start + piece) - 1)
              for key, size in objects for start in range(0, size, piece)]
    lock, got, errors = threading.Lock(), [0], []

    def worker():
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=120)
        buf = memoryview(bytearray(1 << 20))
        try:
            while True:
                with lock:
                    if not ranges or errors:
                        return
                    key, first, last = ranges.pop()
                path = f"/{BUCKET}/{urllib.parse.quote(key)}"
                headers = {"Range": f"bytes={first}-{last}"}
                headers.update(sign("GET", url.netloc, path, {}, headers, UNSIGNED,
                                    store.access_key, store.secret_key, store.region))
                conn.request("GET", path, headers=headers)
                resp = conn.getresponse()
                if resp.status != 206:
                    raise RuntimeError(f"GET {path} {headers['Range']}: HTTP {resp.status}")
                n = 0
                while True:
                    k = resp.readinto(buf)
                    if not k:
                        break
                    n += k
                with lock:
                    got[0] += n
        except Exception as e:  # noqa: BLE001 - reported by the caller
            with lock:
                errors.append(e)
        finally:
            conn.close()

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    start = time.perf_counter()
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    seconds = time.perf_counter() - start
    if errors:
        raise errors[0]
    return got[0] / seconds


def measure_bound(store, endpoint, objects, thread_counts):
    rates = {n: ranged_get_rate(store, endpoint, objects, n) for n in thread_counts}
    best = max(rates, key=rates.get)
    return {"by_threads": rates, "threads": best, "bytes_per_s": rates[best]}


# --- the peers --------------------------------------------------------------------------

class Peers:
    """Builds each peer's mount of the store at one endpoint (direct or proxied); gpufs's
    disk tier as `tier` says (benchlib.gpufs_tier_argv: "off" or "fresh"), described by
    `tier_label` once a gpufs mount was made."""

    def __init__(self, store, work, tier="fresh"):
        self.store, self.work, self.tier, self.tier_label = store, work, tier, None
        self.passwd = os.path.join(work, "s3fs.passwd")
        with open(os.open(self.passwd, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write(f"{store.access_key}:{store.secret_key}\n")
        self.rclone_conf = store.rclone_config(os.path.join(work, "rclone.conf"))
        self.fresh = Work(work).fresh  # a new empty folder under the work folder

    def mount(self, peer, endpoint, gpufsd=GPUFSD):
        """A FuseMount of `peer` reaching the store at `endpoint`; gpufs through the
        `gpufsd` binary given, its disk tier off or in a fresh folder (self.tier)."""
        mnt = self.fresh(f"mnt-{peer}")
        env = clean_env()
        if peer == "gpufs":
            tier, self.tier_label = gpufs_tier_argv(gpufsd, self.tier,
                                                    lambda: self.fresh("gpufs-tier"))
            return gpufs_fuse_mount([gpufsd, "mount", "-f", f"s3://{BUCKET}/pack/", mnt,
                                     "--endpoint", endpoint, *tier], mnt, gpufsd,
                                    env=s3_env(self.store, endpoint))
        if peer == "s3fs":
            options = S3FS_OPTIONS + [f"url={endpoint}", f"passwd_file={self.passwd}",
                                      f"tmpdir={self.fresh('s3fs-tmp')}"]
            return FuseMount("s3fs", ["s3fs", f"{BUCKET}:/tree", mnt, "-f",
                                      "-o", ",".join(options)], mnt, env=env)
        if peer == "rclone":
            # The config names the direct endpoint; a connection-string option overrides it.
            remote = f"gpufs-test,endpoint='{endpoint}':{BUCKET}/tree"
            return FuseMount("rclone", ["rclone", "mount", remote, mnt, "--config",
                                        self.rclone_conf, *RCLONE_FLAGS,
                                        "--cache-dir", self.fresh("rclone-cache")],
                             mnt, env=env)
        raise ValueError(peer)


def warm_local_epoch(tree, mode, workers):
    """The loader's second epoch over the local tree, nothing dropped: what the CPUs allow.
    Run in every round, beside the peers, since this machine's speed drifts over time."""
    epoch = loader_epochs(tree, mode, epochs=2, workers=workers, drop=False)[-1]
    return dict(epoch, peer=LOCAL, mode=mode)


class LoggedBytes:
    """A probe: the body bytes an nginx access log has recorded so far, read on from where
    the last call stopped. nginx logs a request once its last byte has gone out, so the
    count grows as each answer ends."""

    def __init__(self, path):
        self.path, self.offset, self.total = path, 0, 0

    def __call__(self):
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            chunk = f.read()
        whole = chunk[:chunk.rfind(b"\n") + 1]  # a line being written is left for later
        self.offset += len(whole)
        for line in whole.decode(errors="replace").splitlines():
            m = nginx.ACCESS_LOG_LINE.match(line)
            if m:
                self.total += int(m["bytes"])
        return self.total


def source_probes(peer, mnt, proxy):
    """{name: probe} of what tells how many bytes `peer`'s mount at `mnt` has fetched so
    far: gpufs counts its source's bytes ("daemon"); through the cloud-like link, the
    proxy's access log tells it for every peer ("proxy"). s3fs and rclone count nothing,
    and radosgw's bytes on loopback mix with its own traffic to the OSD: on the direct
    link they have none."""
    probes = {"daemon": lambda: gpufs_source_bytes(mnt)} if peer == "gpufs" else {}
    if proxy:
        probes["proxy"] = LoggedBytes(proxy.access_log)
    return probes


def cold_epoch(peers, peer, endpoint, mode, workers, proxy):
    """One fresh mount of `peer`, one cold epoch through it (page cache dropped before
    it); a result row. Where the source's bytes can be followed (source_probes, sampled
    every 20 ms), the row also has `consumed_while_reading`: the fraction of the files the
    loader had returned by the last time that count grew (gpufs: its own count; others:
    the proxy's log), and `reading` with the split by each probe."""
    row = {"peer": peer, "mode": mode}
    requests = proxy.requests() if proxy else None
    try:
        with peers.mount(peer, endpoint) as m:
            progress = os.path.join(peers.fresh("progress"), "lines")
            daemon_cpu, store_cpu = cpu_seconds(m.pid), cpu_seconds(peers.store.rgw.pid)
            with contextlib.ExitStack() as sampling:
                samplers = {name: sampling.enter_context(Sampler(probe))
                            for name, probe in source_probes(peer, m.mnt, proxy).items()}
                epoch = loader_epochs(m.mnt, mode, epochs=1, workers=workers, timeout=3600,
                                      extra=["--progress", progress])[0]
            # The epoch's CPU, and the daemon's since it started: gpufsd faults its cache
            # memory in at mount (a thread of its own), which the epoch's figure leaves out.
            row.update(epoch, daemon_cpu_s=cpu_seconds(m.pid) - daemon_cpu,
                       daemon_cpu_since_mount_s=cpu_seconds(m.pid),
                       store_cpu_s=cpu_seconds(peers.store.rgw.pid) - store_cpu)
            row["reading"] = {name: reading_split(s.samples, progress, epoch)
                              for name, s in samplers.items()}
            if row["reading"]:
                row.update(row["reading"].get("daemon") or row["reading"]["proxy"])
    except (subprocess.SubprocessError, ServerError, OSError) as e:
        detail = getattr(e, "stderr", None) or ""
        row["error"] = f"{e}\n{detail[-2000:]}".strip()
    if proxy:
        row["requests"] = proxy.requests() - requests
    return row


def round_words(row):
    """What a round's line says beside files/s: when the source finished, and a warning
    where gpufs's disk tier served any of a cold epoch."""
    words = ""
    for name, split in row.get("reading", {}).items():
        if split["source_end_s"] is not None:
            words += (f"; by the {name}: source done {split['source_end_s']:.2f} s into "
                      f"{row['seconds']:.2f} s (first batch at {split['first_batch_s']:.2f} "
                      f"s), consumed while reading {split['consumed_while_reading']:.2f}")
    if "daemon_cpu_since_mount_s" in row and row.get("peer") == "gpufs":
        words += (f"; daemon CPU {row['daemon_cpu_s']:.2f} s in the epoch, "
                  f"{row['daemon_cpu_since_mount_s']:.2f} s since the mount")
    tier = row.get("gpufs", {}).get("tier", {})
    if tier.get("hits") or tier.get("slice_hits"):
        words += (f"; NOT COLD: {tier['hits']} groups and {tier['slice_hits']} slices came "
                  "from the disk tier")
    return words


def median_run(runs):
    """The run with the median files/s (the lower middle of an even count), with every
    round's files/s under "rounds"; the first failure when any round failed."""
    failed = [r for r in runs if "error" in r]
    if failed:
        return failed[0]
    return dict(middle(runs), rounds=[r["files_per_s"] for r in runs])


# --- output -----------------------------------------------------------------------------

LEGEND = """
CPU s/GB: the mount daemon's CPU seconds over the GB (10^9 bytes) of files the epoch read.
consumed while reading: the fraction of the epoch's files the loader had returned when the
source's last byte arrived, sampled every 20 ms: near 1.0 the loader kept up with the store;
low, the files were fetched early and the loader's own time came after. The last byte is
the last time gpufs's source byte count grew; for s3fs and rclone, the last time the cloud
link's proxy logged a request's end (results.json has both for gpufs there). Blank for s3fs
and rclone on the direct link: they count no bytes fetched, and radosgw's bytes on loopback
mix with its own traffic to the OSD."""


def by_peer(rows, link, mode):
    return {r["peer"]: r for r in rows if r["link"] == link and r["mode"] == mode}


def print_table(result):
    mean = result["data_bytes"] / result["files"]
    gb = result["data_bytes"] / 1e9
    print(f"\ngpufs disk tier: {result['gpufs_tier']}; every cold epoch on a fresh mount, the "
          "page cache dropped before it")
    for link in result["links"]:
        bound = link["bound"]
        print(f"\n{link['name']}: {link['about']}")
        print(f"  bound: {bound['bytes_per_s'] / 1e6:.0f} MB/s ({bound['threads']} threads of "
              f"8 MiB ranged GETs) / {mean / 1e3:.0f} KB per file = "
              f"{bound['files_per_s']:.0f} files/s")
        print(f"  {'mode':7}{'peer':13}{'files/s':>9}{'x s3fs':>8}{'x rclone':>9}"
              f"{'x bound':>8}{'scan s':>8}{'requests':>9}{'daemon CPU s':>13}"
              f"{'CPU s/GB':>9}{'store CPU s':>12}{'consumed while reading':>23}"
              f"{'rounds (files/s)':>18}")
        for mode in result["modes"]:
            rows = by_peer(result["rows"], link["name"], mode)
            local = rows[LOCAL]
            print(f"  {mode:7}{LOCAL:13}{local['files_per_s']:9.0f}"
                  f"{'   (page cache warm: what the CPUs allow)':99}{'':6}"
                  + " ".join(f"{x:.0f}" for x in local["rounds"]))
            for peer in result["peers"]:
                r = rows.get(peer)
                if r is None or "error" in r:
                    print(f"  {mode:7}{peer:13}   failed: "
                          f"{(r or {}).get('error', 'not run').splitlines()[0]}")
                    continue
                fps = r["files_per_s"]
                ratio = {p: fps / rows[p]["files_per_s"] if "files_per_s" in rows.get(p, {})
                         else None for p in ("s3fs", "rclone")}
                cells = "".join(f"{'' if v is None else f'{v:.2f}':>{w}}"
                                for v, w in ((ratio["s3fs"], 8), (ratio["rclone"], 9)))
                requests = r.get("requests", r.get("gpufs", {}).get("io", {}).get("requests"))
                consumed = r.get("consumed_while_reading")
                print(f"  {mode:7}{peer:13}{fps:9.0f}{cells}{fps / bound['files_per_s']:8.2f}"
                      f"{r['scan_seconds']:8.1f}{'' if requests is None else requests:>9}"
                      f"{r['daemon_cpu_s']:13.1f}{r['daemon_cpu_s'] / gb:9.1f}"
                      f"{r['store_cpu_s']:12.1f}"
                      f"{'' if consumed is None else f'{consumed:.2f}':>23}"
                      f"{' ' * 6}{' '.join(f'{x:.0f}' for x in r.get('rounds', []))}")
    print(LEGEND)


def chart(result, out):
    """A text chart always (chart.txt); a PNG too where matplotlib is installed."""
    lines = []
    for link in result["links"]:
        for mode in result["modes"]:
            lines.append((f"{link['name']}, {mode}:", None))
            rows = by_peer(result["rows"], link["name"], mode)
            for peer in result["peers"]:
                lines.append((f"  {peer}", rows.get(peer, {}).get("files_per_s", 0)))
            lines.append((f"  {LOCAL} (warm)", rows[LOCAL]["files_per_s"]))
    chart_text(out, lines, "files/s, cold epoch (median of the rounds)")
    plt = pyplot(required=False)
    if plt is None:
        return "chart.txt"
    # One panel per mode: raw reads reach rates that would flatten the decode bars.
    fig, axes = plt.subplots(1, len(result["modes"]), figsize=(5 * len(result["modes"]), 4.5),
                             squeeze=False)
    width = 0.8 / len(result["peers"])
    links = result["links"]
    for ax, mode in zip(axes[0], result["modes"]):
        for i, peer in enumerate(result["peers"]):
            values = [by_peer(result["rows"], link["name"], mode).get(peer, {})
                      .get("files_per_s", 0) for link in links]
            ax.bar([g - 0.4 + width * (i + 0.5) for g in range(len(links))], values, width,
                   label=peer)
        local = [by_peer(result["rows"], link["name"], mode)[LOCAL]["files_per_s"]
                 for link in links]
        ax.hlines(local, [g - 0.45 for g in range(len(links))],
                  [g + 0.45 for g in range(len(links))], colors="gray", linestyles="dotted",
                  label=f"{LOCAL}, page cache warm")
        ax.set_xticks(range(len(links)), [link["name"] for link in links])
        ax.set_title(f"{mode} ({result['workers']} loader workers)")
        ax.set_ylabel("images/s, cold epoch")
        ax.legend(fontsize=8)
    fig.suptitle(f"torchvision ImageFolder over S3 ({result['files']:,} JPEGs)")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "remote_store.png"), dpi=110)
    return "chart.txt and remote_store.png"


# --- the run ----------------------------------------------------------------------------

def stored_dataset(stack, tree, data_bytes, name, pack_args=()):
    """A Ceph store holding `tree` twice, one object per file under tree/ and as a gpufs
    pack (`gpufsd pack` with `pack_args`) under pack/ of bucket BUCKET, and a work folder;
    both go when `stack` closes. Returns (store, work folder)."""
    work = tempfile.mkdtemp(prefix=f"gpufs-bench-{name}-", dir="/var/tmp")
    stack.callback(shutil.rmtree, work, ignore_errors=True)
    pack = os.path.join(work, "pack")
    subprocess.run([GPUFSD, "pack", tree, pack, *pack_args], check=True, capture_output=True)
    store = stack.enter_context(ceph_s3.CephS3(memstore_bytes=3 * data_bytes + (1 << 30)))
    store.make_bucket(BUCKET)
    start = time.perf_counter()
    store.upload_tree(tree, BUCKET, "tree")
    store.upload_tree(pack, BUCKET, "pack")
    print(f"store up in {store.bringup_s:.1f} s at {store.endpoint}; both copies "
          f"uploaded in {time.perf_counter() - start:.0f} s", flush=True)
    return store, work


def check_tools(peers):
    missing = [t for t, needed in (("s3fs", "s3fs" in peers), ("rclone", "rclone" in peers),
                                   ("fusermount3", True)) if needed and not shutil.which(t)]
    reason = ceph_s3.skip_reason() or nginx.FaultProxy.skip_reason()
    if missing or reason:
        sys.exit(f"remote_store: {reason or ''} {'missing: ' + ', '.join(missing) if missing else ''}"
                 " (tools/install_deps.sh bench)")
    if "gpufs" in peers:
        if not mount_has("--endpoint"):
            sys.exit(f"remote_store: {GPUFSD} cannot mount an S3 store (no --endpoint); "
                     "build a newer one or leave gpufs out with --peers s3fs,rclone")


def main():
    parser = arg_parser(__doc__, GPUFSD_EPILOG)
    add_options(parser, files=2000, classes=40, workers=4)
    parser.add_argument("--modes", default="decode,raw", help="decode, raw or both")
    parser.add_argument("--peers", default=",".join(PEERS),
                        help="mounts compared, comma-separated: " + ", ".join(PEERS))
    parser.add_argument("--rounds", type=int, default=1,
                        help="cold epochs of each peer (fresh mounts); the median is shown")
    add_options(parser, delay_ms=20, rate_mb=80)
    parser.add_argument("--bound-threads", default="4,8,16,32",
                        help="thread counts of ranged GETs tried for the link's bound")
    parser.add_argument("--gpufs-tier", choices=["off", "fresh"], default="off",
                        help="gpufs's disk tier: off (cold epochs from the store alone), or "
                             "in a fresh empty folder per mount (the default of a remote "
                             "mount: its first epoch also writes the tier)")
    add_options(parser, cache="/var/tmp/gpufs-bench-src",
                out=("/var/tmp/gpufs-remote-store-results",
                     "where results.json and the charts are written"))
    args = parser.parse_args()
    modes, peers = args.modes.split(","), args.peers.split(",")
    need_root("remote_store", "FUSE mounts, drop_caches")
    install_bench_deps()
    check_tools(peers)
    tree, files, data_bytes = begin_run(args.cache, args.out, args.files, args.classes)
    result = {"files": files, "data_bytes": data_bytes, "workers": args.workers,
              "modes": modes, "peers": peers, "links": [], "rows": [],
              "config": {"s3fs": S3FS_OPTIONS, "rclone": RCLONE_FLAGS,
                         "gpufs": f"defaults, disk tier {args.gpufs_tier}"},
              "versions": versions(*VERSIONS)}
    print_dataset(files, data_bytes)
    with contextlib.ExitStack() as stack:
        store, work = stored_dataset(stack, tree, data_bytes, "remote")
        blobs = [(k, s) for k, s, _ in store.list(BUCKET, "pack/") if "/blob-" in k]
        peers_at = Peers(store, work, tier=args.gpufs_tier)
        proxy = cloud_link(stack, store.endpoint, args)
        links = [("direct", store.endpoint, None,
                  "radosgw on loopback, no delay, no rate limit"),
                 ("cloud-like", proxy.url, proxy,
                  f"nginx proxy: +{args.delay_ms} ms per request, {args.rate_mb:.0f} MB/s per "
                  "connection")]
        for name, endpoint, via, about in links:
            bound = measure_bound(store, endpoint, blobs,
                                  [int(n) for n in args.bound_threads.split(",")])
            bound["files_per_s"] = bound["bytes_per_s"] / (data_bytes / files)
            result["links"].append({"name": name, "endpoint": endpoint, "about": about,
                                    "bound": bound})
            print(f"{name}: bound {bound['bytes_per_s'] / 1e6:.0f} MB/s = "
                  f"{bound['files_per_s']:.0f} files/s", flush=True)
            for mode in modes:
                runs = {peer: [] for peer in (LOCAL, *peers)}
                # Rounds go peer after peer, so that a drift of the machine touches all.
                for _ in range(args.rounds):
                    runs[LOCAL].append(warm_local_epoch(tree, mode, args.workers))
                    for peer in peers:
                        row = cold_epoch(peers_at, peer, endpoint, mode, args.workers, via)
                        runs[peer].append(row)
                        print(f"  {mode:7}{peer:8}" + (f"{row['files_per_s']:8.0f} files/s"
                              + round_words(row)
                              if "error" not in row else "failed: " + row["error"]),
                              flush=True)
                result["rows"] += [dict(median_run(r), link=name) for r in runs.values()]
        result["gpufs_tier"] = peers_at.tier_label or args.gpufs_tier
    print_table(result)
    charts = chart(result, args.out)
    save_results(args.out, result, f" and {args.out}/{charts}")


if __name__ == "__main__":
    main()
