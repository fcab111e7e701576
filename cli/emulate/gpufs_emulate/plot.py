"""--plot: each rank's accelerator over time (busy, waiting on data, waiting on the other
ranks) and the images/s reached against the accelerators' demand."""


def _throughput(epoch: dict, window_s: float):
    """Images/s over the last `window_s` at each step's end of an epoch, all ranks summed:
    spiky per step on few steps, so a window of a fraction of the run."""
    ends = sorted((st[3], st[4]) for r in epoch["ranks"] for st in r["timeline"])
    x, y, first, inside = [], [], 0, 0
    for t, images in ends:
        inside += images
        while ends[first][0] <= t - window_s:
            inside -= ends[first][1]
            first += 1
        x.append(t)
        y.append(inside / min(window_s, max(t, 1e-9)))
    return x, y


def draw(run: dict, path: str):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not any(r["timeline"] for e in run["epochs"] for r in e["ranks"]):
        raise ValueError("no step was made: nothing to plot")
    gpus = run["gpus"]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 2.2 + 0.35 * gpus + 2.6),
                                      gridspec_kw={"height_ratios": [max(1.2, 0.35 * gpus), 2]},
                                      sharex=True)
    colors = {"busy": "#2e7d32", "data": "#c62828", "sync": "#f9a825"}
    for e in run["epochs"]:
        for r in e["ranks"]:
            spans = {"busy": [], "data": [], "sync": []}
            for start, ready, busy_end, end, _images in r["timeline"]:
                spans["data"].append((start, ready - start))
                spans["busy"].append((ready, busy_end - ready))
                spans["sync"].append((busy_end, end - busy_end))
            for kind, bars in spans.items():
                top.broken_barh(bars, (r["rank"] - 0.4, 0.8), color=colors[kind], linewidth=0)
    top.set_yticks(range(gpus))
    top.set_yticklabels([f"rank {i}" for i in range(gpus)])
    top.invert_yaxis()
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colors.values()]
    top.legend(handles, ["busy (emulated step)", "waiting on data", "waiting on other ranks"],
               loc="lower center", bbox_to_anchor=(0.5, 1.0), fontsize=8, ncol=3, frameon=False)
    fig.suptitle(f"{run['model']} on {gpus} x {run['accelerator']}, batch {run['batch']}: "
                 f"{run['path']}")
    wall = max(st[3] for e in run["epochs"] for r in e["ranks"] for st in r["timeline"])
    for i, e in enumerate(run["epochs"]):  # no line across the pause between epochs
        x, y = _throughput(e, max(1e-3, wall / 15))
        bottom.plot(x, y, color="#1565c0",
                    label=f"images/s reached (over {wall / 15:.2g} s)" if i == 0 else None)
    bottom.axhline(run["demand_images_per_second"], color="#455a64", linestyle="--",
                   label="accelerators' demand")
    bottom.set_xlabel("seconds")
    bottom.set_ylabel("images/s")
    bottom.set_ylim(bottom=0)
    bottom.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
