"""Train a small CNN on scikit-learn's digits (or MNIST when its files are present) with a jitted step.

Run: python examples/train_digits.py [--steps N] [--min-accuracy A] [--mnist]
Prints the held-out test accuracy at the end; exits non-zero if it is below --min-accuracy.

Distributed (data-parallel over MPI processes, `pip install mpich mpi4py`):
    mpiexec -n 2 python examples/train_digits.py --distributed
Each process (rank) trains on its own block of the training set with a 1/N share of the global --batch; the
gradients are averaged across the ranks after each backward, so every rank takes the step one process would take
on the whole batch. The per-step time and the share of it spent communicating are printed.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from tqdm import trange

from tinycore import Context, Tensor, TinyJit, nn
from tinycore.helpers import cache_dir
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


MNIST_DIRECTORY = cache_dir() / "datasets" / "mnist"


def mnist_available() -> bool:
    """True when the four canonical MNIST files are in the cache directory (nothing is downloaded)."""
    return all((MNIST_DIRECTORY / name).is_file() for name in datasets.MNIST_FILES)


def load(use_mnist: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, str]:
    """Images (N, 1, S, S) float32 scaled to [0, 1] and int32 labels, train and test, plus the data set's name."""
    if use_mnist:
        splits = datasets.mnist(directory=MNIST_DIRECTORY, download=False)
        x_train, y_train, x_test, y_test = (split.numpy() for split in splits)
        return (x_train.astype(np.float32) / 255, y_train.astype(np.int32), x_test.astype(np.float32) / 255,
                y_test.astype(np.int32), "MNIST")
    x_train, y_train, x_test, y_test = (split.numpy() for split in datasets.digits())
    return x_train, y_train, x_test, y_test, "digits"


def count_correct(model: DigitsNet, images: np.ndarray, labels: np.ndarray, batch: int = 512) -> int:
    """How many of `images` `model` classifies correctly, in batches."""
    correct = 0
    for start in range(0, len(images), batch):
        logits = model(Tensor(images[start:start + batch]))
        correct += int((logits.argmax(axis=1).numpy() == labels[start:start + batch]).sum())
    return correct


def evaluate(model: DigitsNet, images: np.ndarray, labels: np.ndarray, batch: int = 512) -> float:
    """Accuracy of `model` on a data set, in batches."""
    return count_correct(model, images, labels, batch) / len(images)


def train_distributed(args: argparse.Namespace, data: tuple[np.ndarray, ...], name: str) -> int:
    """Data-parallel training over the MPI processes of this job (see the module docstring)."""
    from tinycore import distributed
    distributed.init()  # outside mpiexec this says how to launch; without mpi4py, what to install
    rank, world = distributed.rank(), distributed.world_size()
    if args.batch % world:
        print(f"train_digits.py: --batch {args.batch} does not split evenly over {world} processes: pass a multiple "
              f"of {world}", file=sys.stderr)
        return 2
    x_train, y_train, x_test, y_test = data
    part = distributed.shard_indices(len(x_train))
    x_local, y_local = x_train[part.start:part.stop], y_train[part.start:part.stop]
    Tensor.manual_seed(args.seed)
    model = DigitsNet(x_train.shape[-1])
    params = nn.state.get_parameters(model)
    distributed.broadcast_parameters(params)  # every rank starts from rank 0's weights
    optimizer = nn.optim.Adam(params, lr=args.lr)

    @TinyJit
    def compute_gradients(images: Tensor, labels: Tensor) -> tuple[Tensor, Tensor, list[Tensor]]:
        logits = model(images)
        loss = logits.sparse_categorical_crossentropy(labels)
        optimizer.zero_grad()
        loss.backward()
        accuracy = (logits.argmax(axis=1) == labels).float().mean()
        gradients = [param.grad for param in optimizer.params if param.grad is not None]
        Tensor.realize(loss, accuracy, *gradients)
        return loss, accuracy, gradients

    @TinyJit
    def apply_gradients(*gradients: Tensor) -> None:
        for param, gradient in zip(optimizer.params, gradients, strict=True):
            param.grad = gradient
        Tensor.realize(*optimizer.schedule_step())

    rng = np.random.default_rng(args.seed + rank)
    local_batch = args.batch // world
    pending: distributed.PendingAllreduce | None = None  # last step's gradients, in flight while a batch is drawn
    warmup = min(2, args.steps - 1)  # the jit compiles on its first two calls: time the steps after them
    started = time.perf_counter()
    with Context(TRAINING=1):
        progress = trange(args.steps, desc=f"train {name} (rank {rank} of {world})", disable=rank != 0)
        for step in progress:
            if step == warmup:
                distributed.barrier()
                distributed.reset_stats()
                started = time.perf_counter()
            indices = rng.integers(0, len(x_local), size=local_batch)
            images, labels = Tensor(x_local[indices]), Tensor(y_local[indices])  # while the last reduction flies
            if pending is not None:
                apply_gradients(*pending.wait())
            loss, accuracy, gradients = compute_gradients(images, labels)
            pending = distributed.start_allreduce(gradients, "mean", check_shapes=step == 0)
            if step % 10 == 0 or step == args.steps - 1:
                progress.set_postfix(loss=f"{loss.item():.3f}", acc=f"{accuracy.item():.2f}")
        if pending is not None:
            apply_gradients(*pending.wait())
    train_seconds = time.perf_counter() - started
    timed_steps = args.steps - warmup
    communication = distributed.stats.seconds
    test_part = distributed.shard_indices(len(x_test))
    correct = count_correct(model, x_test[test_part.start:test_part.stop], y_test[test_part.start:test_part.stop])
    total_correct = int(distributed.allreduce(Tensor([correct]), "sum").item())
    shares = distributed.allreduce(Tensor([communication / train_seconds]), "max").item()
    test_accuracy = total_correct / len(x_test)
    if rank == 0:
        print(f"{name}: test accuracy {test_accuracy * 100:.2f}% on {len(x_test)} held-out images after {args.steps} "
              f"steps of a global batch of {args.batch} over {world} processes; "
              f"{train_seconds / timed_steps * 1e3:.1f} ms per step after the first {warmup}, {shares * 100:.1f}% of "
              "it communicating (the most of any rank)")
    if test_accuracy < args.min_accuracy:
        if rank == 0:
            print(f"accuracy below the required {args.min_accuracy * 100:.1f}%", file=sys.stderr)
        return 1
    return 0


def main() -> int:
    """Train, report progress with tqdm, print the test accuracy."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--min-accuracy", type=float, default=0.0)
    parser.add_argument("--mnist", action="store_true", help="use MNIST (needs its files in the cache directory)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--distributed", action="store_true",
                        help="data-parallel over the processes of an MPI job: mpiexec -n 2 python train_digits.py "
                        "--distributed (needs `pip install mpich mpi4py`)")
    args = parser.parse_args()

    use_mnist = args.mnist or mnist_available()
    x_train, y_train, x_test, y_test, name = load(use_mnist)
    if args.distributed:
        return train_distributed(args, (x_train, y_train, x_test, y_test), name)
    Tensor.manual_seed(args.seed)
    model = DigitsNet(x_train.shape[-1])
    optimizer = nn.optim.Adam(nn.state.get_parameters(model), lr=args.lr)

    @TinyJit
    def train_step(images: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
        logits = model(images)
        loss = logits.sparse_categorical_crossentropy(labels)
        optimizer.zero_grad()
        loss.backward()
        accuracy = (logits.argmax(axis=1) == labels).float().mean()
        # one schedule: the loss and accuracy of this batch, then the parameter updates
        Tensor.realize(loss, accuracy, *optimizer.schedule_step())
        return loss, accuracy

    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    with Context(TRAINING=1):
        progress = trange(args.steps, desc=f"train {name}")
        for step in progress:
            indices = rng.integers(0, len(x_train), size=args.batch)
            loss, accuracy = train_step(Tensor(x_train[indices]), Tensor(y_train[indices]))
            if step % 10 == 0 or step == args.steps - 1:
                progress.set_postfix(loss=f"{loss.item():.3f}", acc=f"{accuracy.item():.2f}")
    train_seconds = time.perf_counter() - started
    test_accuracy = evaluate(model, x_test, y_test)
    print(f"{name}: test accuracy {test_accuracy * 100:.2f}% on {len(x_test)} held-out images "
          f"after {args.steps} steps in {train_seconds:.1f} s ({train_seconds / args.steps * 1e3:.1f} ms per step)")
    if test_accuracy < args.min_accuracy:
        print(f"accuracy below the required {args.min_accuracy * 100:.1f}%", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    from tinycore.cli import run_program
    sys.exit(run_program("train_digits.py", main))  # a mistake (--distributed outside mpiexec): one line, status 2
