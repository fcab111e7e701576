#!/usr/bin/python3
"""A plain torchvision training loop: nothing in it knows about gpufs.

    train_demo.py DATA_DIR [--epochs 2] [--workers 2]

Trains a small CNN on DATA_DIR (an ImageFolder tree, e.g. a gpufs mount) on the CPU and
prints per-epoch loss and images/s.
"""
import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader
from torchvision import datasets, transforms


def model_for(num_classes):
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, num_classes))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("data")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    torch.manual_seed(0)
    transform = transforms.Compose([
        transforms.RandomResizedCrop(64), transforms.RandomHorizontalFlip(), transforms.ToTensor()])
    dataset = datasets.ImageFolder(args.data, transform=transform)
    loader = DataLoader(dataset, batch_size=32, shuffle=True, num_workers=args.workers)
    print(f"train_demo: {len(dataset)} images in {len(dataset.classes)} classes from {args.data}")

    model = model_for(len(dataset.classes))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(args.epochs):
        start, seen, total_loss = time.perf_counter(), 0, 0.0
        for images, targets in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(images), targets)
            loss.backward()
            optimizer.step()
            seen += len(targets)
            total_loss += loss.item() * len(targets)
        elapsed = time.perf_counter() - start
        print(f"train_demo: epoch {epoch}: loss {total_loss / seen:.3f}, "
              f"{seen} images in {elapsed:.2f}s ({seen / elapsed:.0f} images/s)")


if __name__ == "__main__":
    main()
