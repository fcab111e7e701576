"""The emulator's findings: one dict per run (--json prints it) and its text."""
import textwrap
from typing import Dict, List, Optional

from .stall import JobEpoch, PrepRate, job_split, split


def _round(x, digits=4):
    return round(x, digits)


def rank_json(epoch, prep: Optional[PrepRate], t0: float) -> dict:
    s = split(epoch, prep)
    out = {"rank": epoch.rank, "steps": len(epoch.steps), "images": epoch.images,
           "wall_s": _round(s.wall), "busy_s": _round(s.busy), "waiting_s": _round(s.waiting),
           "data_wait_s": _round(epoch.data_wait), "sync_wait_s": _round(epoch.sync_wait),
           "fetch_stall_s": _round(s.fetch), "prep_stall_s": _round(s.prep)}
    # Each step's instants in seconds from the run's start, and its images.
    out["timeline"] = [[_round(x - t0, 5) for x in (st.start, st.ready, st.busy_end, st.end)]
                       + [st.images] for st in epoch.steps]
    return out


def epoch_json(number: int, job: JobEpoch, prep_rates: Dict[int, PrepRate], demand: float,
               t0: float) -> dict:
    s = job_split(job, prep_rates)
    out = {"epoch": number, "wall_s": _round(job.wall), "images": job.images,
           "start_monotonic": job.start,  # CLOCK_MONOTONIC, to line up outside samples
           "images_per_second": _round(job.images_per_second, 1),
           "of_demand": _round(job.images_per_second / demand if demand else 0.0),
           "waiting_fraction": _round(s.fraction(s.waiting)),
           "fetch_stall_fraction": _round(s.fraction(s.fetch)),
           "prep_stall_fraction": _round(s.fraction(s.prep)),
           "prep_measured": bool(prep_rates),
           "ranks": [rank_json(r, prep_rates.get(r.rank), t0) for r in job.ranks]}
    return out


def prep_json(job: JobEpoch, rates: Dict[int, PrepRate]) -> dict:
    s = job_split(job, None)
    return {"wall_s": _round(job.wall), "images": job.images,
            "steps_per_rank": max(len(r.steps) for r in job.ranks),
            "images_per_second": _round(job.images_per_second, 1),
            "waiting_fraction": _round(s.fraction(s.waiting)),
            "per_rank": [{"rank": r, "first_wait_s": _round(p.first_wait),
                          "per_step_wait_s": _round(p.per_step_wait, 5)}
                         for r, p in sorted(rates.items())]}


def _pct(x):
    return f"{100 * x:.1f}%"


def epoch_text(e: dict) -> List[str]:
    split_text = (f"fetch {_pct(e['fetch_stall_fraction'])}, prep {_pct(e['prep_stall_fraction'])}"
                  if e["prep_measured"] else
                  "fetch and prep together; prep was not measured")
    if e.get("fetch_stall_bounded_by_daemon"):
        split_text += "; fetch no more than gpufsd measured its readers waiting"
    lines = [f"epoch {e['epoch']}: {e['wall_s']:.1f} s, {e['images']:,} images, "
             f"{e['images_per_second']:,.0f} images/s = {_pct(e['of_demand'])} of demand; "
             f"accelerators waited {_pct(e['waiting_fraction'])} ({split_text})"]
    g = e.get("gpufs")
    if g and not any(v["reads"] for v in g["from"].values()):
        lines.append("  gpufs: no read reached the daemon (the kernel's page cache served them)")
    elif g:
        tiers = ", ".join(f"{t} {v['reads']:,} reads" +
                          (f" (fetch stall {_pct(v['fetch_stall_fraction'])})"
                           if v["fetch_stall_fraction"] >= 0.001 else "")
                          for t, v in g["from"].items() if v["reads"])
        hit = "-" if g["hit_ratio"] is None else f"{g['hit_ratio']:.2f}"
        lines.append(f"  gpufs: {tiers}; hit ratio {hit}; readers waited "
                     f"{g['readers_stalled_s']:.1f} s")
    for r in e["ranks"]:
        lines.append(f"  rank {r['rank']}: busy {r['busy_s']:.1f} s + waiting {r['waiting_s']:.1f} s "
                     f"(data {r['data_wait_s']:.1f}, sync {r['sync_wait_s']:.1f}) = "
                     f"{r['wall_s']:.1f} s, {r['steps']} steps")
    return lines


def header_text(run: dict) -> List[str]:
    p = run["profile"]
    source = p["source"]
    own = p["file"] == ""  # --images-per-second
    what = (f"{run['model']} trained for real on {run['gpus']} x {run['trained_on']}"
            if run["trained_on"] else f"{run['gpus']} accelerators" if own
            else f"{run['model']} on {run['gpus']} x {run['accelerator']}")
    cite = f"{source['title']}, {source['date']}" if source.get("date") else source["title"]
    batch_note = (f" (profiled at batch {p['batch']})" if p["batch"] != run["batch"] else "")
    return [f"gpufs-emulate: {what}, batch {run['batch']}: {p['images_per_second']:,.0f} "
            f"images/s each{batch_note}, demand {run['demand_images_per_second']:,.0f} images/s",
            f"  profile: {cite}",
            f"  {run['path']}: {run['dataset']['images']:,} images in "
            f"{run['dataset']['classes']:,} classes; {run['workers']} workers per rank, "
            f"transform {run['transform']}" + ("; a gpufs mount" if run["gpufs_mount"] else "")]


def advise_text(advice: Optional[dict]) -> List[str]:
    if not advice:
        return []
    if "error" in advice:
        return [f"gpufs-stat --advise: {advice['error']}"]
    return textwrap.wrap(f"gpufs-stat --advise: {advice.get('text', '')}", 96,
                         subsequent_indent="  ")


def text(run: dict) -> str:
    lines = header_text(run)
    for e in run["epochs"]:
        lines += epoch_text(e)
    if run.get("prep_pass"):
        p = run["prep_pass"]
        lines.append(f"prep pass (data in memory, {p['steps_per_rank']} steps per rank): "
                     f"{p['images']:,} images, "
                     f"{p['images_per_second']:,.0f} images/s, accelerators waited "
                     f"{_pct(p['waiting_fraction'])}")
        lines += prep_warning(run)
    lines += advise_text(run.get("advise"))
    return "\n".join(lines) + "\n"


def prep_warning(run: dict) -> List[str]:
    """A warning where the prep pass ran slower than a measured epoch: with the data in
    memory it should be the faster, so its waits are no bound on that epoch's prep (the
    machine was busier, or the sample too small to warm the loaders), and the split of
    that epoch's stall into fetch and prep is not to be trusted."""
    rate = run["prep_pass"]["images_per_second"]
    slower = [e for e in run["epochs"] if e["prep_measured"] and e["images_per_second"] > rate]
    if not slower:
        return []
    worst = max(slower, key=lambda e: e["images_per_second"])
    return [f"warning: the prep pass ({rate:,.0f} images/s) ran slower than epoch "
            f"{worst['epoch']} ({worst['images_per_second']:,.0f} images/s), with its data in "
            "memory: its fetch/prep split is not to be trusted; rerun with more --prep-steps "
            "on a quieter machine"]
