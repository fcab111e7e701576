#!/usr/bin/python3
"""What checking bytes against the pack's SHA-256 digests costs the daemon, side by side.

    tools/bench/verify_cost.py [--baseline OLD_GPUFSD] [--files 1500] [--size 131072]
                               [--rounds 3]

A pack of random files (about 200 MB by default, written by `gpufsd pack`, so with SHA-256
digests) is served by an nginx origin on loopback; a peer cache (the shipped nginx config,
tests/servers' NginxPeer) sits in front of it, primed by one read before the rounds. Each
round mounts afresh (so the kernel's page cache holds nothing of it) and reads every file
once on 4 threads, in each of the modes:

  store   no --peers, no disk tier: nothing untrusted crosses, so nothing is hashed
  peers   --peers: every member is hashed before its read is done
  tier    a disk tier filled by a first mount, then read back by a second (measured):
          every copy is hashed before it is served

Printed per mode: GB served, the daemon's CPU seconds (user + system, /proc/PID/stat) per GB
served, files/s, and the ratio of CPU per GB to the store's. With --baseline (a gpufsd
built without the checks, e.g. the commit before them), every mode runs with it too, on a
version 1 copy of the same pack's index (no digests, which it cannot read), and the table
adds the ratio to the baseline's same mode: the cost of the checks alone. Best of --rounds.
"""
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (ROOT, arg_parser, cpu_seconds, files_of, random_tree,  # noqa: E402
                      read_in_random_order)
from benchmount import GPUFSD, gpufs_fuse_mount  # noqa: E402
from servers import nginx  # noqa: E402


def mounted_read(gpufsd, url, options, paths, env):
    """(seconds, bytes, daemon CPU seconds) of one read of every file through a fresh mount."""
    mnt = tempfile.mkdtemp(prefix="gpufs-bench-mnt-")
    try:
        argv = [gpufsd, "mount", "-f", *options, url, mnt]
        with gpufs_fuse_mount(argv, mnt, gpufsd, env=env) as m:
            cpu = cpu_seconds(m.pid)
            seconds, served = read_in_random_order(mnt, paths)
            cpu = cpu_seconds(m.pid) - cpu
    finally:
        os.rmdir(mnt)
        if os.path.exists(mnt + ".log"):  # FuseMount's log of the daemon, beside the mount
            os.unlink(mnt + ".log")
    return seconds, served, cpu


class OpenPeer(nginx.NginxPeer):
    """The shipped peer config without its check of the job's secret: the baseline gpufsd
    predates --peer-secret-file, and its reads through peers must not fall back to the
    store on a 403."""

    def _http_body(self):
        body = super()._http_body()
        check = re.search(r"\n *if \(\$cookie_gpufs_peer_secret[^}]*\}\n", body)
        if not check:
            raise RuntimeError("the peer config has no secret check to leave out")
        return body[:check.start()] + "\n" + body[check.end():]


def run_mode(mode, gpufsd, url, through, paths, work):
    """`through`: the options that read through the peers."""
    env = {**os.environ, "XDG_CACHE_HOME": tempfile.mkdtemp(dir=work)}
    base = ["--cache-size", "1GiB"]
    if mode == "store":
        return mounted_read(gpufsd, url, base + ["--no-disk-cache"], paths, env)
    if mode == "peers":
        return mounted_read(gpufsd, url, base + ["--no-disk-cache", *through], paths, env)
    tier = ["--disk-cache", tempfile.mkdtemp(dir=work)]
    mounted_read(gpufsd, url, base + tier, paths, env)  # fills the tier
    time.sleep(1)  # the last copies are written as the first mount ends
    return mounted_read(gpufsd, url, base + tier, paths, env)


def version1_copy(pack, old):
    """The pack's blobs (linked) with its index in version 1, which the baseline reads."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "fuzz"))
    from make_corpus import version1_index  # only the baseline needs it
    os.makedirs(old)
    for name in os.listdir(pack):
        if name != "index.gpufs":
            os.link(os.path.join(pack, name), os.path.join(old, name))
    with open(os.path.join(pack, "index.gpufs"), "rb") as f:
        v1 = version1_index(f.read())
    with open(os.path.join(old, "index.gpufs"), "wb") as f:
        f.write(v1)


def main():
    parser = arg_parser(__doc__)
    parser.add_argument("--gpufsd", default=GPUFSD)
    parser.add_argument("--baseline", help="a gpufsd without the checks (reads index v1)")
    parser.add_argument("--files", type=int, default=1500)
    parser.add_argument("--size", type=int, default=131072, help="mean file size")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="gpufs-bench-verify-", dir="/var/tmp")
    try:
        tree = os.path.join(work, "tree")
        random_tree(tree, args.files, args.size // 2, args.size)
        served = os.path.join(work, "served")
        pack = os.path.join(served, "pack")
        os.makedirs(served)
        subprocess.run([args.gpufsd, "pack", tree, pack], check=True, capture_output=True)
        if args.baseline:
            version1_copy(pack, os.path.join(served, "pack-v1"))
        paths = files_of(tree)
        data = os.urandom(256 << 20)
        start = time.perf_counter()
        hashlib.sha256(data).digest()
        sha_rate = len(data) / (time.perf_counter() - start) / 1e9
        with nginx.NginxOrigin(served) as origin, \
                nginx.NginxPeer(origin.url, slice_bytes=4 << 20) as peer, \
                OpenPeer(origin.url, slice_bytes=4 << 20) as open_peer:
            runs = [("checked", args.gpufsd, origin.url + "/pack/",
                     ["--peers", peer.url, "--peer-secret-file", peer.secret_file])]
            if args.baseline:
                runs.append(("baseline", args.baseline, origin.url + "/pack-v1/",
                             ["--peers", open_peer.url]))
            for _, gpufsd, url, through in runs:  # primes the peer's cache with each pack
                run_mode("peers", gpufsd, url, through, paths, work)
            best = {}
            for _ in range(args.rounds):
                for mode in ("store", "peers", "tier"):
                    for name, gpufsd, url, through in runs:
                        seconds, got, cpu = run_mode(mode, gpufsd, url, through, paths, work)
                        key = (mode, name)
                        row = (cpu / (got / 1e9), len(paths) / seconds, got / 1e9)
                        if key not in best or row[0] < best[key][0]:
                            best[key] = row
        print(f"{len(paths)} files, {best[('store', 'checked')][2]:.2f} GB per read, "
              f"best of {args.rounds}; SHA-256 here: {sha_rate:.2f} GB/s on one core")
        print(f"{'mode':7s} {'gpufsd':9s} {'CPU s/GB':>9s} {'files/s':>9s} "
              f"{'vs store':>9s} {'vs baseline':>12s}")
        for (mode, name), (cpu, rate, _) in best.items():
            store = best[("store", name)][0]
            base = best.get((mode, "baseline"))
            vs_base = f"{cpu / base[0]:.2f}x" if base and name == "checked" else ""
            print(f"{mode:7s} {name:9s} {cpu:9.3f} {rate:9.0f} {cpu / store:8.2f}x "
                  f"{vs_base:>12s}")
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
