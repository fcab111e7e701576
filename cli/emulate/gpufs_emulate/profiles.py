"""The accelerator profile table: training images/s per model, accelerator and batch, each
figure with its source (tools/profiles/*.json; README.md there lists them)."""
import glob
import json
import os
from dataclasses import dataclass
from typing import List, Optional

# Where a figure comes from; "measured" last (--record writes it).
KINDS = ("mlperf", "nvidia-dle", "nvidia-perf-page", "model-zoo", "seed", "paper", "measured")


class ProfileError(Exception):
    pass


@dataclass
class Profile:
    model: str
    accelerator: str
    batch: int
    precision: str
    images_per_second: float  # per accelerator: forward, backward and optimizer
    source: dict  # title, url, date, kind, notes
    path: str  # the file it came from
    quote: str = ""

    def step_seconds(self, batch: int) -> float:
        """One step of `batch` images at this throughput."""
        return batch / self.images_per_second

    def cite(self) -> str:
        s = self.source
        return f"{s['title']} ({s['date']})" + (f", {s['url']}" if s.get("url") else "")


def _require(obj, key, kind, where):
    if key not in obj or not isinstance(obj[key], kind) or obj[key] in ("", None):
        what = "number" if kind == (int, float) else kind.__name__
        raise ProfileError(f"{where}: '{key}' is missing or not a {what}")
    return obj[key]


def load_file(path: str) -> List[Profile]:
    """One source's file; a malformed one is an error naming the file and the field."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise ProfileError(f"{path}: {e}") from e
    source = _require(doc, "source", dict, path)
    for key in ("title", "date", "kind"):
        _require(source, key, str, f"{path}: source")
    if source["kind"] not in KINDS:
        raise ProfileError(f"{path}: source kind '{source['kind']}' is not one of {KINDS}")
    out = []
    for i, e in enumerate(_require(doc, "entries", list, path)):
        where = f"{path}: entries[{i}]"
        ips = _require(e, "images_per_second", (int, float), where)
        batch = _require(e, "batch", int, where)
        if ips <= 0 or batch <= 0:
            raise ProfileError(f"{where}: images_per_second and batch must be positive")
        out.append(Profile(_require(e, "model", str, where).lower(),
                           _require(e, "accelerator", str, where).lower(), batch,
                           e.get("precision", ""), float(ips), source, path,
                           e.get("quote", "")))
    return out


def load_table(dirs) -> List[Profile]:
    """Every *.json of the folders that exist, in a stable order."""
    table = []
    for d in dirs:
        for path in sorted(glob.glob(os.path.join(d, "*.json"))):
            table.extend(load_file(path))
    return table


def choose(table: List[Profile], model: str, accelerator: str, batch: int,
           precision: Optional[str] = None) -> Profile:
    """The figure for this model and accelerator at the batch nearest to `batch` (a
    throughput per image changes little between large batches; the report names the
    batch used); among equals the fastest precision, as training runs are tuned."""
    rows = [p for p in table if p.model == model.lower() and p.accelerator == accelerator.lower()
            and (precision is None or p.precision == precision)]
    if not rows:
        known = sorted({(p.model, p.accelerator) for p in table})
        raise ProfileError(
            f"no profile for --model {model} --gpu {accelerator}"
            + (f" --precision {precision}" if precision else "")
            + "; the table has: " + ", ".join(f"{m}/{a}" for m, a in known)
            + " (or give --images-per-second)")
    return min(rows, key=lambda p: (abs(p.batch - batch), -p.images_per_second))


def own_profile(images_per_second: float, model: str, batch: int) -> Profile:
    """--images-per-second: a profile of one's own."""
    return Profile(model, "custom", batch, "", images_per_second,
                   {"title": "--images-per-second", "date": "", "kind": "measured", "url": ""},
                   "")
