"""Train a small CNN on scikit-learn's digits (or MNIST when its files are present) with a jitted step.

Run: python examples/train_digits.py [--steps N] [--min-accuracy A] [--mnist]
Prints the held-out test accuracy at the end; exits non-zero if it is below --min-accuracy.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from tqdm import trange

from tinycore import Context, Tensor, TinyJit, nn
from tinycore.nn import datasets


class DigitsNet:
    """conv(1->c1) relu pool, conv(c1->c2) relu pool, linear to 10 classes."""

    def __init__(self, image_size: int, channels: tuple[int, int] = (16, 32)):
        first, second = channels
        self.conv1 = nn.Conv2d(1, first, 3, padding=1)
        self.conv2 = nn.Conv2d(first, second, 3, padding=1)
        self.fc = nn.Linear(second * (image_size // 4) ** 2, 10)

    def __call__(self, images: Tensor) -> Tensor:
        """Logits for a batch of images shaped (batch, 1, size, size)."""
        hidden = self.conv1(images).relu().max_pool2d((2, 2))
        hidden = self.conv2(hidden).relu().max_pool2d((2, 2))
        return self.fc(hidden.flatten(1))


def load(use_mnist: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, str]:
    """Images (N, 1, S, S) float32 scaled to [0, 1] and int labels, train and test, plus the data set's name."""
    if use_mnist:
        x_train, y_train, x_test, y_test = datasets.mnist()
        return x_train, y_train, x_test, y_test, "MNIST"
    x_train, y_train, x_test, y_test = datasets.digits()
    return x_train, y_train, x_test, y_test, "digits"


def evaluate(model: DigitsNet, images: np.ndarray, labels: np.ndarray, batch: int = 512) -> float:
    """Accuracy of `model` on a data set, in batches."""
    correct = 0
    for start in range(0, len(images), batch):
        logits = model(Tensor(images[start:start + batch]))
        correct += int((logits.argmax(axis=1).numpy() == labels[start:start + batch]).sum())
    return correct / len(images)


def main() -> int:
    """Train, report progress with tqdm, print the test accuracy."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--min-accuracy", type=float, default=0.0)
    parser.add_argument("--mnist", action="store_true", help="use MNIST (needs its files in the cache directory)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    use_mnist = args.mnist or datasets.mnist_available()
    x_train, y_train, x_test, y_test, name = load(use_mnist)
    Tensor.manual_seed(args.seed)
    model = DigitsNet(x_train.shape[-1])
    optimizer = nn.optim.Adam(nn.state.get_parameters(model), lr=args.lr)
    images_all, labels_all = Tensor(x_train), Tensor(y_train)

    @TinyJit
    def train_step(indices: Tensor) -> tuple[Tensor, Tensor]:
        images, labels = images_all[indices], labels_all[indices]
        logits = model(images)
        loss = logits.sparse_categorical_crossentropy(labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        accuracy = (logits.argmax(axis=1) == labels).float().mean()
        return loss.realize(), accuracy.realize()

    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    with Context(TRAINING=1):
        progress = trange(args.steps, desc=f"train {name}")
        for step in progress:
            indices = Tensor(rng.integers(0, len(x_train), size=args.batch, dtype=np.int32))
            loss, accuracy = train_step(indices)
            if step % 10 == 0 or step == args.steps - 1:
                progress.set_postfix(loss=f"{loss.item():.3f}", acc=f"{accuracy.item():.2f}")
    train_seconds = time.perf_counter() - started
    test_accuracy = evaluate(model, x_test, y_test)
    print(f"{name}: test accuracy {test_accuracy * 100:.2f}% on {len(x_test)} held-out images "
          f"after {args.steps} steps in {train_seconds:.1f} s")
    if test_accuracy < args.min_accuracy:
        print(f"accuracy below the required {args.min_accuracy * 100:.1f}%", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
