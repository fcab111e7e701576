"""The datasets a rank loads: torchvision's ImageFolder over the path as any training
script builds it, and the same samples held in memory for the prep pass."""
import concurrent.futures
import io

import torch
from PIL import Image
from torchvision import datasets, transforms

def _pipeline(kind: str, size: int):
    """What the workers do to each image once loaded. raw: nothing past reading it (a
    tensor of its length); decode: a fixed-size centre crop; train: the usual ImageNet
    augmentation (random resized crop, flip, normalize)."""
    if kind == "raw":
        return _Raw()
    if kind == "decode":
        return transforms.Compose([transforms.Resize(size * 8 // 7), transforms.CenterCrop(size),
                                   transforms.PILToTensor()])
    return transforms.Compose([
        transforms.RandomResizedCrop(size), transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])


def _decode(data: bytes):
    with Image.open(io.BytesIO(data)) as img:
        return img.convert("RGB")


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


class _Raw:
    """raw: a sample is its bytes' length (the read is the work)."""

    def __call__(self, data: bytes):
        return torch.tensor(len(data))


def image_folder(path: str, kind: str, size: int):
    """ImageFolder over `path`; raw reads the bytes instead of decoding them."""
    if kind == "raw":
        return datasets.ImageFolder(path, loader=_read, transform=_pipeline(kind, size))
    return datasets.ImageFolder(path, transform=_pipeline(kind, size))


class Resident(torch.utils.data.Dataset):
    """Samples whose bytes were read into memory first: the loader's work without storage."""

    def __init__(self, samples, kind: str, size: int):
        self.samples = samples  # [(bytes, target)]
        self.load = (lambda data: data) if kind == "raw" else _decode  # as image_folder's
        self.transform = _pipeline(kind, size)

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        data, target = self.samples[i]
        return self.transform(self.load(data)), target


def resident(folder, indices, kind: str, size: int, threads: int = 8) -> Resident:
    """The files at `indices` of an ImageFolder, read now (outside any timed step), several
    at once: on a store each read is a round trip."""
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        data = list(pool.map(lambda i: _read(folder.samples[i][0]), indices))
    return Resident([(d, folder.samples[i][1]) for d, i in zip(data, indices)], kind, size)
