"""Real training steps: `--record` measures a model's step on a device (synthetic
images, no storage) and writes it to the profile table; `--train-on` runs the same steps
in the loop in place of the emulated ones, to check the emulator against real training."""
import datetime
import json
import os
import socket
import time

import torch
from torchvision import models

from .profiles import KINDS, load_file


def _synchronize(device: torch.device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _model(name: str, classes: int, device: torch.device):
    try:
        build = getattr(models, name)
    except AttributeError:
        raise ValueError(f"torchvision has no model '{name}'") from None
    return build(num_classes=classes).to(device).train()


def trainer(name: str, classes: int, device_name: str, amp: bool = False):
    """A step(batch) that trains `name` on the batch for real: forward, backward, SGD, and
    a synchronize so that the step's time is the device's."""
    device = torch.device(device_name)
    model = _model(name, classes, device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    scaler = torch.cuda.amp.GradScaler(enabled=amp and device.type == "cuda")

    def step(batch):
        images, targets = batch
        if images.dtype == torch.uint8:
            images = images.float().div_(255)
        if images.dim() != 4:
            raise ValueError("training needs images: use --transform decode or train")
        images = images.to(device, non_blocking=True)
        targets = targets.to(device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, enabled=amp and device.type == "cuda"):
            loss = loss_fn(model(images), targets)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        _synchronize(device)
    return step


def device_title(device_name: str) -> str:
    device = torch.device(device_name)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{device.type} of {socket.gethostname()} ({os.cpu_count()} CPUs)"


def measure(model: str, batch: int, device_name: str, size: int, steps: int,
            amp: bool) -> float:
    """Training images/s of `model` on the device, after warm-up steps."""
    step = trainer(model, 1000, device_name, amp)
    images = torch.randn(batch, 3, size, size)
    targets = torch.randint(0, 1000, (batch,))
    for _ in range(max(2, steps // 5)):
        step((images, targets))
    start = time.perf_counter()
    for _ in range(steps):
        step((images, targets))
    return batch * steps / (time.perf_counter() - start)


def record(output: str, model: str, accelerator: str, batch: int, device_name: str, size: int,
           steps: int, amp: bool) -> dict:
    """Measures and adds the entry to `output` (a profile file of kind "measured"), written
    whole to a new file and renamed over the old, so a failed run leaves it as it was."""
    ips = measure(model, batch, device_name, size, steps, amp)
    entry = {"model": model, "accelerator": accelerator, "batch": batch,
             "precision": "amp" if amp else "fp32", "images_per_second": round(ips, 2),
             "gpus_measured": 1,
             "quote": f"gpufs-emulate --record: {steps} steps of {batch} synthetic "
                      f"{size}x{size} images on {device_title(device_name)}"}
    doc = {"source": {"title": f"measured with gpufs-emulate --record on {socket.gethostname()}",
                      "url": "", "date": datetime.date.today().isoformat(),
                      "kind": KINDS[-1], "notes": "synthetic data, torchvision model, SGD"},
           "entries": []}
    if os.path.exists(output):
        load_file(output)  # refuses a malformed file before it is extended
        with open(output, encoding="utf-8") as f:
            doc = json.load(f)
    doc["entries"] = [e for e in doc["entries"] if (e["model"], e["accelerator"], e["batch"],
                      e.get("precision")) != (model, accelerator, batch, entry["precision"])]
    doc["entries"].append(entry)
    tmp = f"{output}.{os.getpid()}.tmp"
    with open(tmp, "x", encoding="utf-8") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    os.replace(tmp, output)
    return entry
