"""What a gpufs mount's daemon counted while an epoch ran: its stall account (the
`stall` object of the root's `user.gpufs.stats`, docs/guide.md), and
`gpufs-stat --advise` on the same counters."""
import json
import os
import shutil
import subprocess
from typing import Optional

STATS_XATTR = "user.gpufs.stats"  # on the mount's root (fs/filesystem.cc)
_COUNTERS = ("reads", "bytes", "wait_s", "fetched_bytes")


def mount_root(path: str) -> Optional[str]:
    """The gpufs mount that holds `path`, or None where it is another filesystem."""
    path = os.path.realpath(path)
    while True:
        try:
            os.getxattr(path, STATS_XATTR)
            return path
        except OSError:
            pass
        parent = os.path.dirname(path)
        if parent == path or os.stat(parent).st_dev != os.stat(path).st_dev:
            return None
        path = parent


def stall_totals(root: str) -> Optional[dict]:
    """The daemon's cumulative stall counters now."""
    try:
        stats = json.loads(os.getxattr(root, STATS_XATTR))
    except (OSError, ValueError):
        return None
    stall = stats.get("stall")
    return stall.get("totals") if isinstance(stall, dict) else None


def epoch_of(before: dict, after: dict, wall_s: float, fetch_stall: float) -> dict:
    """The epoch's share of the daemon's counters, with the accelerators' fetch stall (a
    fraction of their time) laid on the tiers in proportion to the readers' waits on each."""
    tiers = {}
    for t, a in after["from"].items():  # the daemon's own names for its tiers
        b = before["from"].get(t, {})
        tiers[t] = {k: a.get(k, 0) - b.get(k, 0) for k in _COUNTERS}
    waits = sum(v["wait_s"] for v in tiers.values())
    for v in tiers.values():
        v["fetch_stall_fraction"] = fetch_stall * v["wait_s"] / waits if waits > 0 else 0.0
    stalled = after.get("stalled_s", 0.0) - before.get("stalled_s", 0.0)
    served = sum(v["bytes"] for v in tiers.values())
    # The daemon's own hit ratio (stall_account.h): the bytes served that the source did not
    # send for their epoch, counted apart from those it did. None: nothing served.
    hits = after.get("hit_bytes", 0) - before.get("hit_bytes", 0)
    misses = after.get("miss_bytes", 0) - before.get("miss_bytes", 0)
    return {"from": tiers, "bytes_served": served,
            "hit_ratio": hits / (hits + misses) if hits + misses > 0 else None,
            "readers_stalled_s": stalled,
            "readers_stall_fraction": stalled / wall_s if wall_s > 0 else 0.0}


def bound_fetch_stall(e: dict, ranks: int) -> None:
    """Caps epoch `e`'s fetch stall at what the daemon measured its readers waiting: a rank
    cannot have waited on storage longer than some reader waited in the daemon. The rest
    of its wait (its loader's start-up, which varies between runs, and CPU work) is prep.
    Fractions are of all ranks' time, so the bound is ranks x the daemon's waiting time."""
    g = e.get("gpufs")
    if not g or e["wall_s"] <= 0:
        return
    most = ranks * g["readers_stalled_s"] / (ranks * e["wall_s"])
    if e["fetch_stall_fraction"] <= most:
        return
    moved = e["fetch_stall_fraction"] - most
    e["fetch_stall_fraction"] = round(most, 4)
    e["prep_stall_fraction"] = round(e["prep_stall_fraction"] + moved, 4)
    e["fetch_stall_bounded_by_daemon"] = True


def gpufs_stat_program(here: str) -> Optional[str]:
    """gpufs-stat beside this program (installed or built together), else on PATH."""
    beside = os.path.join(here, "gpufs-stat")
    return beside if os.access(beside, os.X_OK) else shutil.which("gpufs-stat")


def advise(program: Optional[str], root: str) -> dict:
    """`gpufs-stat --advise --json ROOT`, or {"error": why} where it cannot answer."""
    if not program:
        return {"error": "gpufs-stat not found"}
    run = subprocess.run([program, "--advise", "--json", root], capture_output=True,
                         text=True, timeout=300)
    if run.returncode != 0:
        return {"error": run.stderr.strip() or f"gpufs-stat exited {run.returncode}"}
    return json.loads(run.stdout)
