#!/usr/bin/python3
"""Runs epochs of an unmodified torchvision ImageFolder + DataLoader and reports each.

    epoch_loader.py ROOT --epochs 3 --mode raw|decode [--blkio-group G --device MAJ:MIN]
                    [--drop-caches] [--workers 2] [--first-epoch 1] [--progress FILE]

One JSON line per epoch on stdout: files, seconds, files/s, the seconds ImageFolder took
to list the tree (once, before the first epoch), bytes read from the device (from the
blkio group's counters), and the gpufs cache and source counters when ROOT is a gpufs
mount (its disk tier's too, where it has one). With --drop-caches the kernel page cache is emptied before each epoch, as if the
dataset were much larger than memory; only a daemon's own cache survives. With --progress
FILE a line "FILES MONOTONIC_SECONDS" is appended to FILE as each epoch starts (0 files) and
after each batch, so that a caller can follow an epoch as it runs; when the loader raises,
a last line "FILES MONOTONIC_SECONDS raised".
"""
import json
import os
import sys
import time

import torch
from torch.utils.data import DataLoader
from torchvision import datasets, transforms

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import arg_parser, drop_caches  # noqa: E402
from benchmount import gpufs_stats  # noqa: E402


# The disk tier's counters reported per epoch (see cache/tier/disk_tier.h).
TIER_COUNTERS = ("hits", "slice_hits", "misses", "damaged", "read_bytes", "writes",
                 "write_bytes", "write_skipped", "write_errors", "evictions", "fills")


def raw_loader(path):
    with open(path, "rb") as f:
        return f.read()


def collate_raw(batch):
    return batch


def device_read_bytes(group, device):
    if not group:
        return 0
    with open(os.path.join(group, "blkio.throttle.io_service_bytes")) as f:
        for line in f:
            fields = line.split()
            if len(fields) == 3 and fields[0] == device and fields[1] == "Read":
                return int(fields[2])
    return 0


def stats_of(root):
    """The counters of the gpufs mount that `root` is in; None where it is in none."""
    mount = root
    while mount != "/" and not os.path.ismount(mount):
        mount = os.path.dirname(mount)
    try:
        return gpufs_stats(mount)
    except OSError:
        return None


def note_progress(progress, files, what=""):
    if progress:
        progress.write(f"{files} {time.monotonic():.6f}{' ' + what if what else ''}\n")


def main():
    parser = arg_parser(__doc__)
    parser.add_argument("root")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--mode", choices=["raw", "decode"], default="raw")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--blkio-group", default="")
    parser.add_argument("--device", default="")
    parser.add_argument("--drop-caches", action="store_true")
    parser.add_argument("--first-epoch", type=int, default=1,
                        help="number of the first epoch (it seeds the shuffle): a run of "
                             "one epoch per process still shuffles each epoch anew")
    parser.add_argument("--progress", default="",
                        help="append 'files monotonic_seconds' here at each epoch's start "
                             "and after each batch")
    args = parser.parse_args()
    progress = open(args.progress, "a", buffering=1) if args.progress else None
    start = time.perf_counter()
    if args.mode == "raw":
        dataset = datasets.ImageFolder(args.root, loader=raw_loader)
        collate = collate_raw
    else:
        transform = transforms.Compose([transforms.RandomResizedCrop(160), transforms.ToTensor()])
        dataset = datasets.ImageFolder(args.root, transform=transform)
        collate = None
    scan_seconds = time.perf_counter() - start
    for epoch in range(args.first_epoch - 1, args.first_epoch - 1 + args.epochs):
        if args.drop_caches:
            drop_caches()
        loader = DataLoader(dataset, batch_size=32, shuffle=True, num_workers=args.workers,
                            generator=torch.Generator().manual_seed(epoch), collate_fn=collate)
        before = device_read_bytes(args.blkio_group, args.device)
        stats_before = stats_of(args.root)
        start = time.perf_counter()
        files = 0
        note_progress(progress, files)
        try:
            for batch in loader:
                files += len(batch) if args.mode == "raw" else len(batch[1])
                note_progress(progress, files)
        except Exception:
            note_progress(progress, files, "raised")
            raise
        seconds = time.perf_counter() - start
        # The clock is system-wide: a caller lines the epoch up with what it sampled.
        row = {"epoch": epoch + 1, "files": files, "seconds": seconds,
               "monotonic_start": time.monotonic() - (time.perf_counter() - start),
               "files_per_s": files / seconds, "scan_seconds": scan_seconds,
               "disk_bytes": device_read_bytes(args.blkio_group, args.device) - before}
        stats = stats_of(args.root)
        if stats and stats_before:
            # A mount without a cache (--cache-size 0) has only the source's counters.
            row["gpufs"] = {k: stats[k] - stats_before[k] for k in
                            ("hits", "misses", "member_reads", "bytes_from_source", "bytes_served",
                             "prefetch_issued", "prefetch_used", "prefetch_wasted")
                            if k in stats and k in stats_before}
            if "io" in stats and "io" in stats_before:
                row["gpufs"]["io"] = {k: stats["io"][k] - stats_before["io"][k]
                                      for k in ("requests", "bytes", "errors")}
            if "tier" in stats and "tier" in stats_before:
                row["gpufs"]["tier"] = {k: stats["tier"][k] - stats_before["tier"][k]
                                        for k in TIER_COUNTERS}
                row["gpufs"]["tier"]["used_bytes"] = stats["tier"]["used_bytes"]
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
