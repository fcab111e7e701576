#!/usr/bin/python3
"""Draws gpufs-stat --advise's model: predicted hit ratio and epoch time against the pinned
budget (and the disk tier's size), today's budget and the advice marked. Reads the advice's
JSON on stdin; writes the PNG named by its argument."""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

MIB = 1 << 20


def series(points, policy, tier):
    rows = sorted((p for p in points if p["policy"] == policy and p["tier_bytes"] == tier
                   and p["hit_ratio"] is not None), key=lambda p: p["cache_bytes"])
    return ([p["cache_bytes"] / MIB for p in rows], [p["hit_ratio"] for p in rows],
            [p["epoch_s"] for p in rows])


def main():
    advice = json.load(sys.stdin)
    if advice.get("verdict") == "no_epoch":  # gpufs-stat refuses before: no curve to draw
        sys.exit("nothing to plot yet: read an epoch through the mount first")
    settings = advice["settings"]
    points = advice.get("points", [])
    fig, (hit_ax, time_ax) = plt.subplots(1, 2, figsize=(12, 4.5))
    for policy in ("consume-once", "pin"):
        x, hit, epoch = series(points, policy, settings["tier_bytes"])
        if x:
            hit_ax.plot(x, hit, marker="o", label=f"{policy} (replayed)")
            time_ax.plot(x, epoch, marker="o", label=f"{policy}: predicted epoch")
    lru = advice.get("lru_curve", [])
    if lru:
        hit_ax.step([p["cache_bytes"] / MIB for p in lru], [p["hit_ratio"] for p in lru],
                    where="post", label="lru (reads, stack distances)", alpha=0.6)
    measured = advice["measured"]
    for ax in (hit_ax, time_ax):
        ax.axvline(settings["cache_bytes"] / MIB, color="gray", linestyle="--",
                   label="today's --cache-size")
        ax.axvline(settings["dataset_bytes"] / MIB, color="gray", linestyle=":",
                   label="the dataset")
    if measured.get("hit_ratio") is not None:  # null: nothing served
        hit_ax.scatter([settings["cache_bytes"] / MIB], [measured["hit_ratio"]], color="black",
                       zorder=5, label="measured")
    time_ax.scatter([settings["cache_bytes"] / MIB], [measured["wall_s"]], color="black",
                    zorder=5, label="measured")
    chosen = advice.get("advice")
    if chosen:
        if chosen["hit_ratio"] is not None:
            hit_ax.scatter([chosen["cache_bytes"] / MIB], [chosen["hit_ratio"]], marker="*",
                           s=250, color="red", zorder=6, label="advice")
        time_ax.scatter([chosen["cache_bytes"] / MIB], [chosen["epoch_s"]], marker="*", s=250,
                        color="red", zorder=6, label="advice")
    # The epoch with no stall (advice.h); an older daemon sent only the time nobody waited.
    loader = advice.get("loader_s", measured["wall_s"] - measured["stalled_s"])
    time_ax.axhline(loader, color="green", linestyle="-.", label="no stall (loader's own time)")
    hit_ax.set(xlabel="--cache-size (MiB)", ylabel="hit ratio (bytes not from the source)",
               title="Hit ratio by budget", ylim=(-0.05, 1.05))
    time_ax.set(xlabel="--cache-size (MiB)", ylabel="epoch time (s)",
                title=f"Epoch time: {advice['verdict']}")
    hit_ax.legend(fontsize=7)
    time_ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(sys.argv[1], dpi=110)


if __name__ == "__main__":
    main()
