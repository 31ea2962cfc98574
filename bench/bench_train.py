"""Training-step speed: an MLP 784-512-512-10 (batch 128) with SGD and Adam, and TinyJit replay overhead.

Side by side in one process: tinycore's jitted step, torch's eager step and tinygrad's jitted step (DEV=CPU), each
the median of N steps after warm-up. The jitted steps realize the loss together with the optimizer's updates
(`loss.realize(*optimizer.schedule_step())`, the idiom both libraries document): realizing the loss after `step()`
would compute the forward pass a second time, with the updated weights. The three libraries take turns, a few
steps each per round, so that load from other processes affects them alike, each library's turn after `settle()`
(bench/settle.py: torch's threads spin after a call and would share the cores with the next library). Then the
per-call time of a jitted function of 10 tiny kernels in tinycore and tinygrad. Prints a table of milliseconds and
ratios. Not run by CI: `python bench/bench_train.py [--steps N]`.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from settle import settle

os.environ.setdefault("DEV", "CPU")

BATCH, SIZES = 128, (784, 512, 512, 10)


def median_ms(step: Callable[[], Any], steps: int, warmup: int = 3) -> float:
    """Median wall time of `step` in milliseconds after `warmup` calls."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def data(seed: int = 0) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """A batch of inputs and labels and the initial weights, shared by every library."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((BATCH, SIZES[0])).astype(np.float32)
    y = rng.integers(0, SIZES[-1], BATCH).astype(np.int32)
    weights = [(rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in)).astype(np.float32)
               for fan_in, fan_out in zip(SIZES[:-1], SIZES[1:], strict=True)]
    return x, y, weights


def _forward(x: Any, weights: list[Any]) -> Any:
    hidden = x
    for position, weight in enumerate(weights):
        hidden = hidden @ weight
        if position < len(weights) - 1:
            hidden = hidden.relu()
    return hidden


def tinycore_step(optimizer_name: str) -> Callable[[], Any]:
    """A jitted tinycore training step."""
    from tinycore import Context, Tensor, TinyJit, nn
    x_np, y_np, weights_np = data()
    weights = [Tensor(weight, requires_grad=True) for weight in weights_np]
    optimizer = nn.optim.SGD(weights, lr=0.01) if optimizer_name == "SGD" else nn.optim.Adam(weights, lr=0.001)

    @TinyJit
    def step(x: Tensor, y: Tensor) -> Tensor:
        loss = _forward(x, weights).sparse_categorical_crossentropy(y)
        optimizer.zero_grad()
        loss.backward()
        return loss.realize(*optimizer.schedule_step())

    x, y = Tensor(x_np), Tensor(y_np)

    def train() -> Any:
        with Context(TRAINING=1):
            return step(x, y)
    return train


def torch_step(optimizer_name: str) -> Callable[[], Any]:
    """An eager torch training step."""
    import torch
    x_np, y_np, weights_np = data()
    weights = [torch.tensor(weight, requires_grad=True) for weight in weights_np]
    optimizer: Any = torch.optim.SGD(weights, lr=0.01) if optimizer_name == "SGD" else torch.optim.Adam(
        weights, lr=0.001)
    x, y = torch.tensor(x_np), torch.tensor(y_np).long()

    def step() -> None:
        loss = torch.nn.functional.cross_entropy(_forward(x, weights), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        loss.item()

    return step


def tinygrad_step(optimizer_name: str) -> Callable[[], Any]:
    """A jitted tinygrad training step."""
    from tinygrad import Context as TgContext
    from tinygrad import Tensor as TgTensor
    from tinygrad import TinyJit as TgJit
    from tinygrad.nn import optim as tg_optim
    x_np, y_np, weights_np = data()
    weights = [TgTensor(weight) for weight in weights_np]
    for weight in weights:
        weight.requires_grad = True
    optimizer = tg_optim.SGD(weights, lr=0.01) if optimizer_name == "SGD" else tg_optim.Adam(weights, lr=0.001)

    @TgJit
    def step(x: Any, y: Any) -> Any:
        loss = _forward(x, weights).sparse_categorical_crossentropy(y)
        optimizer.zero_grad()
        loss.backward()
        return loss.realize(*optimizer.schedule_step())

    x, y = TgTensor(x_np), TgTensor(y_np)

    def train() -> Any:
        with TgContext(TRAINING=1):
            return step(x, y)
    return train


def interleaved_median_ms(steps: dict[str, Callable[[], Any]], total: int, per_round: int = 5,
                          warmup: int = 3) -> dict[str, float]:
    """Median ms per call of each of `steps`, timed in rounds of `per_round` calls each until `total` calls.

    Each library's turn starts after `settle()`, so that the previous library's spinning threads are idle.
    """
    for step in steps.values():
        for _ in range(warmup):
            step()
    times: dict[str, list[float]] = {name: [] for name in steps}
    while min(len(values) for values in times.values()) < total:
        for name, step in steps.items():
            settle()
            for _ in range(per_round):
                started = time.perf_counter()
                step()
                times[name].append(time.perf_counter() - started)
    return {name: statistics.median(values) * 1000 for name, values in times.items()}


def replay_overhead(library: str, calls: int) -> float:
    """Median microseconds per call of a jitted function that runs 10 tiny kernels."""
    if library == "tinycore":
        from tinycore import Tensor, TinyJit
    else:
        from tinygrad import Tensor, TinyJit  # type: ignore[no-redef]

    @TinyJit
    def ten_kernels(x: Any) -> Any:
        for _ in range(10):
            x = (x + 1).contiguous()
        return x.realize()

    x = Tensor([1.0]).realize()
    return median_ms(lambda: ten_kernels(x), calls, warmup=5) * 1000


def main() -> None:
    """Run every case and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--calls", type=int, default=300)
    arguments = parser.parse_args()
    print(f"MLP {'-'.join(map(str, SIZES))}, batch {BATCH}: median ms per training step ({arguments.steps} steps)")
    print(f"{'optimizer':10} {'tinycore':>10} {'torch':>10} {'tinygrad':>10} {'tc/torch':>9} {'tinygrad/tc':>12}")
    for optimizer_name in ("SGD", "Adam"):
        figures = interleaved_median_ms({"tinycore": tinycore_step(optimizer_name), "torch": torch_step(optimizer_name),
                                         "tinygrad": tinygrad_step(optimizer_name)}, arguments.steps)
        ours, theirs, peer = figures["tinycore"], figures["torch"], figures["tinygrad"]
        print(f"{optimizer_name:10} {ours:10.2f} {theirs:10.2f} {peer:10.2f} {ours / theirs:9.2f} {peer / ours:12.2f}")
    ours_us = replay_overhead("tinycore", arguments.calls)
    peer_us = replay_overhead("tinygrad", arguments.calls)
    print(f"TinyJit replay of 10 tiny kernels: tinycore {ours_us:.1f} us/call, tinygrad {peer_us:.1f} us/call, "
          f"ratio tinycore/tinygrad {ours_us / peer_us:.2f}")


if __name__ == "__main__":
    main()
