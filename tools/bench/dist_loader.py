#!/usr/bin/python3
"""One rank of a data-parallel job: torchvision ImageFolder + DistributedSampler + DataLoader
over ROOT, epoch by epoch when told to, as tools/bench/peers.py drives it.

    dist_loader.py ROOT --rank R --world W --master-port P [--workers 2] [--decode]
                   [--no-step-sync]

Joins a gloo process group on 127.0.0.1:P (CPU only), lists ROOT with ImageFolder, then
prints {"ready": ...} (the listing's size and a digest of its names and classes) and, for
each line "go EPOCH" read on stdin, runs that epoch: DistributedSampler(num_replicas=W,
rank=R, shuffle=True, seed=0) with set_epoch(EPOCH), batches of 32, a barrier of the whole
job before the first batch. Each sample is the file's bytes read whole (raw) or decoded
(--decode: RandomResizedCrop(160), ToTensor), and with it the SHA-256 of the bytes read, so
the driver can check every file against the source. By default every batch ends with an
all_reduce of one number, as a DDP step's gradient all-reduce makes every rank wait for the
slowest; --no-step-sync leaves the ranks free until the end of the epoch.

After each epoch one JSON line: {"rank", "epoch", "files", "seconds" (from the barrier to
this rank's last batch), "samples": [[index, sha256 hex], ...]}. "quit" (or end of input)
leaves the group and exits.
"""
import argparse
import hashlib
import io
import json
import sys
import time

import torch
import torch.distributed as dist
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler
from torchvision import datasets, transforms


def raw_bytes(path):
    with open(path, "rb") as f:
        return f.read()


class Hashed(Dataset):
    """ImageFolder's samples as (index, sha256 of the bytes, bytes' length or the image)."""

    def __init__(self, folder, decode):
        self.folder = folder
        self.transform = (transforms.Compose([transforms.RandomResizedCrop(160),
                                              transforms.ToTensor()]) if decode else None)

    def __len__(self):
        return len(self.folder)

    def __getitem__(self, index):
        data, _ = self.folder[index]
        digest = hashlib.sha256(data).hexdigest()
        if self.transform is None:
            return index, digest, len(data)
        with Image.open(io.BytesIO(data)) as image:
            return index, digest, self.transform(image.convert("RGB"))


def collate(batch):
    return batch


def listing_digest(folder, root):
    """A digest of ImageFolder's (relative path, class) list: the same tree lists alike."""
    h = hashlib.sha256()
    for path, target in folder.samples:
        h.update(f"{path[len(root):]}\0{target}\n".encode())
    return h.hexdigest()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("root")
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--master-port", type=int, required=True)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--decode", action="store_true")
    parser.add_argument("--no-step-sync", dest="step_sync", action="store_false")
    args = parser.parse_args()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.master_port}",
                            rank=args.rank, world_size=args.world)
    root = args.root.rstrip("/") + "/"
    folder = datasets.ImageFolder(root, loader=raw_bytes)
    dataset = Hashed(folder, args.decode)
    sampler = DistributedSampler(dataset, num_replicas=args.world, rank=args.rank,
                                 shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=args.batch, sampler=sampler,
                        num_workers=args.workers, collate_fn=collate)
    step = torch.zeros(1)
    print(json.dumps({"ready": {"rank": args.rank, "files": len(folder),
                                "listing": listing_digest(folder, root)}}), flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] != "go":
            break
        epoch = int(words[1])
        sampler.set_epoch(epoch)
        dist.barrier()
        start = time.perf_counter()
        samples = []
        for batch in loader:
            samples += [(index, digest) for index, digest, _ in batch]
            if args.step_sync:
                dist.all_reduce(step)
        seconds = time.perf_counter() - start
        dist.barrier()
        print(json.dumps({"rank": args.rank, "epoch": epoch, "files": len(samples),
                          "seconds": seconds, "samples": samples}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
