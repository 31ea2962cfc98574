"""A small CNN on scikit-learn's 8x8 digits, written in plain PyTorch and run on the tiny device (tinycore through
the tiny-torch plugin). `python examples/torch_digits.py [--compile] [--device cpu]`; reaches >= 95% test accuracy
in a few seconds."""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import torch
from torch import nn


def load_digits_split(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Digits as (N, 1, 8, 8) float images scaled to [0, 1] and int64 labels, split 80/20."""
    from sklearn.datasets import load_digits
    digits = load_digits()
    images = torch.tensor(digits.images[:, None] / 16.0, dtype=torch.float32)
    labels = torch.tensor(digits.target, dtype=torch.int64)
    order = torch.from_numpy(np.random.default_rng(seed).permutation(len(labels)))
    cut = int(0.8 * len(labels))
    return images[order[:cut]], labels[order[:cut]], images[order[cut:]], labels[order[cut:]]


class DigitsNet(nn.Module):
    """conv-bn-relu-pool twice, then a linear classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Linear(32 * 2 * 2, 10)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits for a batch of (N, 1, 8, 8) images."""
        return self.classifier(self.features(images).flatten(1))


def train(device: str = "tiny", compile_model: bool = False, epochs: int = 6, batch_size: int = 128,
          seed: int = 0) -> float:
    """Train DigitsNet on `device` and return its test accuracy (a fraction)."""
    torch.manual_seed(seed)
    train_x, train_y, test_x, test_y = load_digits_split(seed)
    model = DigitsNet().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2, foreach=True)  # one schedule per update
    step_model = torch.compile(model, backend="tiny") if compile_model else model
    train_x, train_y = train_x.to(device), train_y.to(device)
    usable = (len(train_y) // batch_size) * batch_size  # equal batches: static shapes for the compiled model
    for _ in range(epochs):
        order = torch.randperm(len(train_y))[:usable].view(-1, batch_size)
        for batch in order:
            batch = batch.to(device)
            loss = nn.functional.cross_entropy(step_model(train_x[batch]), train_y[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    model.eval()
    with torch.no_grad():
        predictions = model(test_x.to(device)).argmax(dim=1).cpu()
    return float((predictions == test_y).float().mean())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="tiny")
    parser.add_argument("--compile", action="store_true", help="torch.compile(model, backend='tiny')")
    options = parser.parse_args()
    if options.device.startswith("tiny"):
        try:
            import tiny_torch
        except ImportError as error:  # a simple mistake: one line and status 2, as the `tiny` command does
            print(f"torch_digits.py: --device {options.device} needs tiny-torch ({error}): "
                  "pip install -e plugins/tiny-torch, or pass --device cpu", file=sys.stderr)
            sys.exit(2)
    start = time.perf_counter()
    accuracy = train(options.device, options.compile)
    print(f"test accuracy {accuracy:.3f} on {options.device} in {time.perf_counter() - start:.1f} s")
    if options.device.startswith("tiny"):
        print("operators run on the CPU fallback:", ", ".join(tiny_torch.fallbacks_hit()) or "none")
