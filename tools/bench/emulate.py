#!/usr/bin/python3
"""Will this storage keep the accelerators fed? gpufs-emulate over a cold plain tree and a
cold gpufs mount of the same dataset, on a throttled local volume and on an S3 store
behind an emulated cloud link.

    sudo /usr/bin/python3 tools/bench/emulate.py [--setups local,store] [--files 2000]

One generated dataset of real JPEGs (benchlib.sample_tree), packed in 4 MiB groups, in two
setups:

  local  on an ext4 volume throttled by cgroup v1 blkio (benchlib.SlowVolume, --iops 150,
         --mbps 150: an emulated cloud HDD). plain: the ImageFolder tree on that volume,
         read by the emulator inside the throttle; gpufs: a gpufsd mount of the pack on the
         same volume, gpufsd inside the throttle
  store  in a one-node Ceph store (radosgw over a memstore OSD) reached through an nginx
         FaultProxy that adds --delay-ms (20) to every request and limits each connection
         to --rate-mb (80) MB/s. plain: s3fs (and rclone) mounts of the tree stored as one
         object per file; gpufs: a gpufsd mount of the pack in the bucket

Every run is cold: a fresh mount (the ext4 volume stays mounted: its cache is the page
cache), the page cache dropped after mounting, gpufs with no disk tier and its default
cache size (a quarter of RAM: it holds the dataset). Each run is one epoch of
`gpufs-emulate --json --no-progress` (its ranks, loaders and prep pass) as a subprocess.

First the plain tree's cold rate R: the emulator with a demand no storage meets
(--images-per-second 1e6 per accelerator) over the first plain tree. Then each tree at
--multiples of R (0.5 and 3: total demand over --gpus accelerators), --transform raw (the
read is the work), and a --decode row per setup. Prints a table (images/s reached, share
of demand, the accelerators' waiting, fetch and prep stall, the ranks' wait for their
first batch, and on gpufs the tiers the fetch stall came from and how long after its first
byte the source had delivered the whole pack) and the goals: at 3 R gpufs's fetch stall
under 5% where that of the plain tree R was measured on is over 50%. Writes results.json
(each row with its ranks' steps) to --out.
"""
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from advise import pack_tree  # noqa: E402
from benchlib import (PYTHON, ROOT, Sampler, SlowVolume, add_options,  # noqa: E402
                      arg_parser, begin_run, cloud_link, drop_caches, need_root, save_results,
                      sh, versions)
from benchmount import GPUFSD, gpufs_fuse_mount, gpufs_source_bytes, mount_point  # noqa: E402
from remote_store import (BUCKET, VERSIONS, Peers, check_tools,  # noqa: E402
                          stored_dataset)

EMULATE = os.environ.get("GPUFS_EMULATE", os.path.join(ROOT, "build", "cli", "gpufs-emulate"))
UNMET = 1e6  # images/s per accelerator: a demand no storage here meets
FETCH_GOAL, PLAIN_FLOOR = 0.05, 0.50  # at the top multiple: gpufs under, plain over


# --- one run of the emulator --------------------------------------------------------------

def emulate(path, per_accelerator, transform, args, wrap=None):
    """One cold epoch of gpufs-emulate over `path` at `per_accelerator` images/s each: its
    JSON (the run), or {"error": ...}. The page cache is dropped first."""
    argv = [PYTHON, EMULATE, path, "--gpus", str(args.gpus), "--batch", str(args.batch),
            "--workers", str(args.workers), "--transform", transform,
            "--images-per-second", repr(per_accelerator), "--epochs", "1",
            "--prep-steps", str(args.prep_steps), "--json", "--no-progress"]
    drop_caches()
    start = time.monotonic()
    try:
        done = subprocess.run(wrap(argv) if wrap else argv, capture_output=True, text=True,
                              timeout=args.run_timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"no answer in {args.run_timeout} s", "run_s": args.run_timeout}
    if done.returncode != 0:
        return {"error": (done.stderr.strip() or f"exit {done.returncode}")[-2000:],
                "run_s": time.monotonic() - start}
    return dict(json.loads(done.stdout), run_s=time.monotonic() - start)


def pack_loaded(samples, pack_bytes):
    """Seconds from the first byte gpufs's source delivered to the sample at which it had
    delivered the whole pack once (None where it never did): `samples` of
    benchlib.gpufs_source_bytes taken while the emulator ran."""
    if not samples:
        return None
    base = samples[0][1]
    grown = [(t, v - base) for t, v in samples if v > base]
    whole = [t for t, v in grown if v >= pack_bytes]
    return whole[0] - grown[0][0] if whole else None


def first_batch(ranks):
    """(the ranks' mean wait for their first batch, its share of all their data wait)."""
    firsts = [r["timeline"][0][1] - r["timeline"][0][0] for r in ranks if r["timeline"]]
    total = sum(ready - start for r in ranks for start, ready, *_ in r["timeline"])
    return sum(firsts) / len(firsts), sum(firsts) / total if total > 0 else 0.0


def row_of(setup, tree, multiple, demand, transform, run, loaded_s=None):
    """A table row from one run: its first epoch (each rank's steps too), and on gpufs the
    tiers' split and when the source had delivered the whole pack."""
    row = {"setup": setup, "tree": tree, "multiple": multiple, "demand": demand,
           "transform": transform, "run_s": run.get("run_s")}
    if "error" in run:
        return dict(row, error=run["error"])
    e = run["epochs"][0]
    row.update({k: e[k] for k in ("wall_s", "images", "images_per_second", "of_demand",
                                  "waiting_fraction", "fetch_stall_fraction",
                                  "prep_stall_fraction", "prep_measured", "ranks")})
    row["first_batch_s"], row["first_batch_share"] = first_batch(e["ranks"])
    if "gpufs" in e:
        row["gpufs"], row["pack_loaded_s"] = e["gpufs"], loaded_s
    row["prep_pass"] = run.get("prep_pass")
    return row


def row_line(r):
    multiple = "unmet" if r["multiple"] is None else f"{r['multiple']:g} R"
    multiple += " e2" if r.get("epoch") == 2 else ""
    head = (f"{r['setup']:6} {r['tree']:7} {r['transform']:6} {multiple:>9} "
            f"{r['demand']:>10,.0f}")
    if "error" in r:
        return f"{head}  failed: {r['error'].splitlines()[-1]}"
    return (f"{head} {r['images_per_second']:>9,.0f} {100 * r['of_demand']:>7.1f}% "
            f"{100 * r['waiting_fraction']:>8.1f}% {100 * r['fetch_stall_fraction']:>7.1f}% "
            f"{100 * r['prep_stall_fraction']:>7.1f}% {r['first_batch_s']:>6.2f} "
            f"{100 * r['first_batch_share']:>5.0f}%  {tiers_text(r)}")


def tiers_text(r):
    """Where a gpufs epoch's reads came from: reads per tier and its share of the
    accelerators' fetch stall (the emulator lays the stall on the tiers by their waits);
    and how long after its first byte the source had delivered the whole pack."""
    g = r.get("gpufs")
    if not g:
        return ""
    words = [f"{t} {v['reads']} reads {100 * v['fetch_stall_fraction']:.1f}%"
             for t, v in g["from"].items() if v["reads"]]
    if r.get("pack_loaded_s") is not None:
        words.append(f"whole pack in {r['pack_loaded_s']:.2f} s")
    return "; ".join(words)


# --- the setups ---------------------------------------------------------------------------

class LocalSetup:
    """The tree and its pack on one throttled ext4 volume. `trees` maps a name to a
    context manager giving (path, wrap): where the emulator reads and what puts it in the
    throttle (the plain tree's reads are its own; gpufs's are gpufsd's)."""
    name = "local"

    def __init__(self, stack, tree, tree_bytes, args):
        self.volume = SlowVolume(2 * tree_bytes // 1_000_000 + 300, args.iops, args.mbps)
        stack.callback(self.volume.close)
        self.tree = os.path.join(self.volume.mnt, "tree")
        shutil.copytree(tree, self.tree)
        self.pack = os.path.join(self.volume.mnt, "pack")
        self.pack_bytes = pack_tree(tree, self.pack)
        sh("sync")
        self.about = (f"ext4 volume throttled to {args.iops} IOPS and {args.mbps} MB/s "
                      "(cgroup v1 blkio); plain: the tree on it (the emulator in the "
                      "throttle); gpufs: gpufsd mount of the pack on it (gpufsd in the throttle)")
        self.trees = {"ext4": self.plain, "gpufs": self.gpufs}

    @contextlib.contextmanager
    def plain(self):
        yield self.tree, self.volume.wrap

    @contextlib.contextmanager
    def gpufs(self):
        with mount_point("gpufs-emulate-mnt-", "/var/tmp") as mnt:
            argv = [GPUFSD, "mount", "-f", self.pack, mnt, "--no-disk-cache"]
            with gpufs_fuse_mount(self.volume.wrap(argv), mnt):
                yield mnt, None


class StoreSetup:
    """The tree (one object per file) and its pack in radosgw behind the cloud-like
    proxy; `trees` as LocalSetup's, each a fresh mount of remote_store.Peers."""
    name = "store"

    def __init__(self, stack, tree, tree_bytes, args):
        store, work = stored_dataset(stack, tree, tree_bytes, "emulate",
                                     pack_args=["--group-bytes", "4MiB"])
        proxy = cloud_link(stack, store.endpoint, args)
        self.peers, self.endpoint = Peers(store, work, tier="off"), proxy.url
        self.pack_bytes = sum(size for key, size, _ in store.list(BUCKET, "pack/")
                              if "/blob-" in key)
        self.about = (f"radosgw (memstore) through an nginx proxy: +{args.delay_ms} ms per "
                      f"request, {args.rate_mb:g} MB/s per connection; plain: "
                      f"{' and '.join(args.store_plain)} of the tree as one object per file; "
                      "gpufs: gpufsd mount of the pack in the bucket")
        self.trees = {peer: self.mounted(peer) for peer in args.store_plain + ["gpufs"]}

    def mounted(self, peer):
        @contextlib.contextmanager
        def mount():
            with self.peers.mount(peer, self.endpoint) as m:
                yield m.mnt, None
        return mount


# --- the runs -----------------------------------------------------------------------------

def cold_run(setup, tree, multiple, demand, transform, args, next_epoch=False):
    """One cold epoch on a fresh mount; with `next_epoch`, another on the same mount after
    dropping the page cache again (as memory pressure would): its rows."""
    loaded, rows = None, []
    with setup.trees[tree]() as (path, wrap):
        if tree != "gpufs":
            run = emulate(path, demand / args.gpus, transform, args, wrap)
        else:
            with Sampler(lambda: gpufs_source_bytes(path)) as source:
                run = emulate(path, demand / args.gpus, transform, args, wrap)
            loaded = pack_loaded(source.samples, setup.pack_bytes)
        rows.append(row_of(setup.name, tree, multiple, demand, transform, run, loaded))
        print("  " + row_line(rows[-1]), flush=True)
        if next_epoch and "error" not in run:
            run = emulate(path, demand / args.gpus, transform, args, wrap)
            rows.append(dict(row_of(setup.name, tree, multiple, demand, transform, run),
                             epoch=2))
            print("  " + row_line(rows[-1]), flush=True)
    return rows


def run_setup(setup, args):
    """R from the first plain tree, then every tree at each multiple of it (at the last,
    the R tree and gpufs also for a next epoch), and the decode rows: the setup's rows."""
    print(f"\n{setup.name}: {setup.about}", flush=True)
    plain = [t for t in setup.trees if t != "gpufs"]
    rows = cold_run(setup, plain[0], None, UNMET * args.gpus, "raw", args)
    if "error" in rows[0]:
        return rows, None
    rate = rows[0]["images_per_second"]
    for multiple in args.multiples:
        for tree in setup.trees:
            again = args.next_epoch and multiple == args.multiples[-1] and tree in (plain[0],
                                                                                    "gpufs")
            rows += cold_run(setup, tree, multiple, multiple * rate, "raw", args, again)
    for tree in args.decode:
        rows += cold_run(setup, tree if tree == "gpufs" else plain[0], args.multiples[-1],
                         args.multiples[-1] * rate, "decode", args)
    return rows, rate


def goals(rows, top):
    """At the top multiple (raw): is gpufs's fetch stall under FETCH_GOAL where the plain
    tree that R was measured on stalls over PLAIN_FLOOR? For the cold epoch and, where it
    ran, the next one. (setup, words, holds) each; other plain trees are named beside it."""
    out = []
    for setup in dict.fromkeys(r["setup"] for r in rows):
        mine = [r for r in rows if r["setup"] == setup]
        ref = mine[0]["tree"]  # the R run's
        for epoch, label in ((1, "cold epoch"), (2, "next epoch")):
            at = {r["tree"]: r for r in mine if r["multiple"] == top and r["transform"] == "raw"
                  and "error" not in r and r.get("epoch", 1) == epoch}
            if "gpufs" not in at or ref not in at:
                if epoch == 1:
                    out.append((setup, "not measured", False))
                continue
            g, plain = at["gpufs"]["fetch_stall_fraction"], at[ref]["fetch_stall_fraction"]
            others = "".join(f"; {t} {100 * r['fetch_stall_fraction']:.1f}%"
                             for t, r in at.items() if t not in ("gpufs", ref))
            holds = g < FETCH_GOAL and plain > PLAIN_FLOOR
            out.append((setup, f"{label} at {top:g} R fetch stall: gpufs {100 * g:.1f}% (goal < "
                        f"{100 * FETCH_GOAL:.0f}%), {ref} {100 * plain:.1f}% (goal > "
                        f"{100 * PLAIN_FLOOR:.0f}%){others}", holds))
    return out


def print_table(result):
    print(f"\n{result['files']} JPEGs ({result['data_bytes'] / 1e6:.0f} MB, mean "
          f"{result['data_bytes'] / result['files'] / 1e3:.0f} KB), pack of 4 MiB groups; "
          f"{result['gpus']} accelerators x batch {result['batch']}, {result['workers']} "
          f"workers each; one cold epoch per row: fresh mount, page cache dropped, no disk "
          f"tier, gpufs cache {result['gpufs_cache']}; prep stall from a {result['prep_steps']}"
          "-step pass over data in memory; 1st s: the ranks' mean wait for their first batch, "
          "share: its part of all their data wait")
    for s in result["setups"]:
        print(f"  {s['name']}: {s['about']}; R = "
              + ("not measured" if s["rate"] is None else f"{s['rate']:,.0f} images/s"))
    head = (f"{'setup':6} {'tree':7} {'work':6} {'demand':>9} {'images/s':>10} {'reached':>9} "
            f"{'of dem.':>8} {'waiting':>9} {'fetch':>8} {'prep':>8} {'1st s':>6} {'share':>6}"
            "  gpufs: reads and fetch stall by tier")
    print("\n" + head + "\n" + "-" * len(head))
    for r in result["rows"]:
        print(row_line(r))
    print("\ngoals:")
    for setup, words, holds in result["goals"]:
        print(f"  {setup}: {words}: {'holds' if holds else 'MISSED'}")


def main():
    parser = arg_parser(__doc__)
    add_options(parser, setups="local,store", files=2000, classes=40)
    parser.add_argument("--gpus", type=int, default=2, help="emulated accelerators")
    parser.add_argument("--batch", type=int, default=32, help="images per step per accelerator")
    add_options(parser, workers=(8, "DataLoader workers per rank"))
    parser.add_argument("--prep-steps", type=int, default=6,
                        help="steps per rank of the emulator's pass over data in memory")
    parser.add_argument("--multiples", default="0.5,3",
                        help="total demands run, as multiples of R; the last is the goals'")
    parser.add_argument("--decode", default="gpufs",
                        help="trees (gpufs, plain) also run with --transform decode at the "
                             "last multiple; empty for none")
    parser.add_argument("--store-plain", default="s3fs,rclone",
                        help="plain mounts of the store: s3fs, rclone (R is the first's)")
    parser.add_argument("--no-next-epoch", dest="next_epoch", action="store_false",
                        help="no second epoch (page cache dropped) of the R tree and gpufs at "
                             "the last multiple")
    add_options(parser, iops=150, mbps=150, delay_ms=20, rate_mb=80)
    parser.add_argument("--run-timeout", type=int, default=300, help="seconds per emulator run")
    add_options(parser, cache="/var/tmp/gpufs-bench-src", out="/var/tmp/gpufs-emulate-results")
    args = parser.parse_args()
    args.multiples = [float(m) for m in args.multiples.split(",")]
    args.decode = [t for t in args.decode.split(",") if t]
    args.store_plain = args.store_plain.split(",")
    setups = args.setups.split(",")
    need_root("emulate", "loop device, cgroups, FUSE mounts, drop_caches")
    if "store" in setups:
        check_tools(["gpufs"] + args.store_plain)
    tree, files, data_bytes = begin_run(args.cache, args.out, args.files, args.classes)
    result = {"files": files, "data_bytes": data_bytes, "gpus": args.gpus,
              "batch": args.batch, "workers": args.workers, "prep_steps": args.prep_steps,
              "multiples": args.multiples, "gpufs_cache": "default (a quarter of RAM; "
              "holds the dataset), consume-once", "setups": [], "rows": [],
              "versions": versions(*VERSIONS)}
    start = time.monotonic()
    for name in setups:
        with contextlib.ExitStack() as stack:
            setup = {"local": LocalSetup, "store": StoreSetup}[name](stack, tree, data_bytes,
                                                                    args)
            rows, rate = run_setup(setup, args)
            result["setups"].append({"name": name, "about": setup.about, "rate": rate})
            result["rows"] += rows
    result["seconds"] = time.monotonic() - start
    result["goals"] = goals(result["rows"], args.multiples[-1])
    print_table(result)
    path = save_results(args.out, result, tell=False)
    print(f"\n{result['seconds']:.0f} s; wrote {path}")


if __name__ == "__main__":
    main()
