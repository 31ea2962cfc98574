"""Engine benchmark: tinycore's CPU device side by side with numpy, torch and tinygrad (DEV=CPU) in one run.

Run: `python bench/bench_engine.py [--rounds N] [--json]` from the repository root. Every measure runs for every
library in turn, `--rounds` times (interleaved, so machine noise hits all alike), each after `settle()`
(bench/settle.py: numpy's and torch's threads spin after a call and would share the cores with the next case), and
the best round counts.

Measures (the speed gates of the engine, see bench/README.md):
- fused `relu(a*b+c)*d` on 16M float32, and the same followed by `.sum()`: wall time, Gelem/s;
- matmul 1024x1024 float32: GFLOPS;
- eager `(Tensor([1.0]) + 1).realize()` on new tensors: wall and CPU time per op;
- a jitted function of 10 tiny kernels: wall and CPU time per call (TinyJit replay overhead), and its fixed cost
  (the call's time less its kernels': twice the 10-kernel call less a 20-kernel call, so the per-kernel cost cancels);
- cold first op (the first realize in the process, device start included) and compile time per new kernel
  (a graph with a constant never seen before, so no compile cache can answer).
Ratios are tinycore / tinygrad in the sense of the gate: throughput ratios (higher is better for tinycore) for
the first three, time ratios (lower is better) for the others.
"""
from __future__ import annotations

import abc
import argparse
import json
import os
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("DEV", "CPU")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "plugins" / "tiny-cpu"))

import numpy as np  # noqa: E402
from settle import settle  # noqa: E402

ELEMENTS = 1 << 24
MATMUL_SIZE = 1024
EAGER_OPS = 200
JIT_CALLS = 200
JIT_KERNELS = 10


def best_time(function: Callable[[], Any], repeats: int, clock: Callable[[], float] = time.perf_counter) -> float:
    """The smallest of `repeats` timings of `function` (after one warm-up call)."""
    function()
    timings = []
    for _ in range(repeats):
        started = clock()
        function()
        timings.append(clock() - started)
    return min(timings)


def repeat(function: Callable[[], None], times: int) -> Callable[[], None]:
    """A function calling `function` `times` times."""
    def repeated() -> None:
        for _ in range(times):
            function()
    return repeated


class Side(abc.ABC):
    """One library's way of building and running the benchmark graphs."""

    name = ""

    @abc.abstractmethod
    def setup(self, arrays: list[np.ndarray], left: np.ndarray, right: np.ndarray) -> None:
        """Move the inputs onto the library's device."""

    @abc.abstractmethod
    def fused(self) -> None:
        """relu(a*b+c)*d, computed to completion."""

    @abc.abstractmethod
    def fused_sum(self) -> None:
        """relu(a*b+c)*d summed to a scalar, computed to completion."""

    @abc.abstractmethod
    def matmul(self) -> None:
        """left @ right, computed to completion."""

    @abc.abstractmethod
    def eager(self) -> None:
        """One tiny operation on new tensors."""

    @abc.abstractmethod
    def jit_call(self) -> None:
        """One call of the jitted 10-kernel function (None when the library has no JIT)."""


class NumpySide(Side):
    """numpy (single-threaded elementwise, BLAS matmul)."""

    name = "numpy"

    def setup(self, arrays: list[np.ndarray], left: np.ndarray, right: np.ndarray) -> None:
        self.a, self.b, self.c, self.d = arrays
        self.left, self.right = left, right

    def fused(self) -> None:
        np.maximum(self.a * self.b + self.c, 0) * self.d

    def fused_sum(self) -> None:
        (np.maximum(self.a * self.b + self.c, 0) * self.d).sum()

    def matmul(self) -> None:
        self.left @ self.right

    def eager(self) -> None:
        np.array([1.0], dtype=np.float32) + 1

    jit_call = None  # type: ignore[assignment]


class TorchSide(Side):
    """torch on the CPU (its own thread pool)."""

    name = "torch"

    def __init__(self) -> None:
        import torch
        self.torch = torch

    def setup(self, arrays: list[np.ndarray], left: np.ndarray, right: np.ndarray) -> None:
        self.a, self.b, self.c, self.d = (self.torch.from_numpy(array) for array in arrays)
        self.left, self.right = self.torch.from_numpy(left), self.torch.from_numpy(right)

    def fused(self) -> None:
        self.torch.relu(self.a * self.b + self.c) * self.d

    def fused_sum(self) -> None:
        (self.torch.relu(self.a * self.b + self.c) * self.d).sum()

    def matmul(self) -> None:
        self.left @ self.right

    def eager(self) -> None:
        self.torch.tensor([1.0]) + 1

    jit_call = None  # type: ignore[assignment]


class TensorLibrarySide(Side):
    """tinycore or tinygrad: the same lazy Tensor API, realized explicitly."""

    def __init__(self, name: str):
        self.name = name
        library: Any
        if name == "tinycore":
            import tinycore as library
        else:
            import tinygrad as library
        self.Tensor, self.TinyJit = library.Tensor, library.TinyJit
        started = time.perf_counter()
        (self.Tensor([random.random()]) + 1).realize()
        self.cold_first_op = time.perf_counter() - started

    def setup(self, arrays: list[np.ndarray], left: np.ndarray, right: np.ndarray) -> None:
        tensor = self.Tensor
        self.a, self.b, self.c, self.d = (tensor(array).realize() for array in arrays)
        self.left, self.right = tensor(left).realize(), tensor(right).realize()

        def kernels(count: int) -> Callable[[Any], Any]:
            def chain(value: Any) -> Any:
                for _ in range(count):
                    value = (value + 1).contiguous()
                return value.realize()
            return chain

        self.jitted = self.TinyJit(kernels(JIT_KERNELS))
        self.jitted_twice = self.TinyJit(kernels(2 * JIT_KERNELS))
        self.jit_input = tensor.rand(4).realize()
        for _ in range(3):
            self.jitted(self.jit_input)
            self.jitted_twice(self.jit_input)

    def fused(self) -> None:
        ((self.a * self.b + self.c).relu() * self.d).realize()

    def fused_sum(self) -> None:
        ((self.a * self.b + self.c).relu() * self.d).sum().realize()

    def matmul(self) -> None:
        (self.left @ self.right).realize()

    def eager(self) -> None:
        (self.Tensor([1.0]) + 1).realize()

    def jit_call(self) -> None:
        self.jitted(self.jit_input)

    def jit_call_twice(self) -> None:
        """One call of the jitted 20-kernel function."""
        self.jitted_twice(self.jit_input)

    def compile_seconds(self) -> float:
        """Wall time of realizing a small graph never seen before (codegen and compile) minus running it warm."""
        constant = random.random()
        a, b = self.Tensor.rand(64, 64).realize(), self.Tensor.rand(64, 64).realize()
        started = time.perf_counter()
        ((a * constant + b).exp2() * 3.5).realize()
        cold = time.perf_counter() - started
        warm = best_time(lambda: ((a * constant + b).exp2() * 3.5).realize(), 3)
        return cold - warm


def jit_fixed_us(side: Side) -> float:
    """The fixed cost of a TinyJit call in us: 2 x (10-kernel call) - (20-kernel call), in the calling thread's CPU
    time (spinning worker threads do not count; kernels run on this thread or not, their time cancels out)."""
    assert isinstance(side, TensorLibrarySide)
    ten = best_time(repeat(side.jit_call, JIT_CALLS), 5, time.thread_time) / JIT_CALLS
    twenty = best_time(repeat(side.jit_call_twice, JIT_CALLS), 5, time.thread_time) / JIT_CALLS
    return max(2 * ten - twenty, 0.0) * 1e6


def run(rounds: int) -> dict[str, dict[str, float]]:
    """Every measure for every library, `rounds` times interleaved; the best round of each."""
    generator = np.random.default_rng(0)
    arrays = [generator.standard_normal(ELEMENTS, dtype=np.float32) for _ in range(4)]
    left = generator.standard_normal((MATMUL_SIZE, MATMUL_SIZE), dtype=np.float32)
    right = generator.standard_normal((MATMUL_SIZE, MATMUL_SIZE), dtype=np.float32)
    sides: list[Side] = [NumpySide(), TorchSide(), TensorLibrarySide("tinycore"), TensorLibrarySide("tinygrad")]
    results: dict[str, dict[str, float]] = {side.name: {} for side in sides}
    for side in sides:
        side.setup(arrays, left, right)
        if isinstance(side, TensorLibrarySide):
            results[side.name]["cold first op ms"] = side.cold_first_op * 1e3
            results[side.name]["compile per kernel ms"] = min(side.compile_seconds() for _ in range(2)) * 1e3
    measures: dict[str, Callable[[Side], float]] = {
        "fused Gelem/s": lambda side: ELEMENTS / best_time(side.fused, 3) / 1e9,
        "fused+sum Gelem/s": lambda side: ELEMENTS / best_time(side.fused_sum, 3) / 1e9,
        "matmul GFLOPS": lambda side: 2 * MATMUL_SIZE ** 3 / best_time(side.matmul, 3) / 1e9,
        "eager us": lambda side: best_time(repeat(side.eager, EAGER_OPS), 3) / EAGER_OPS * 1e6,
        "eager cpu us": lambda side: best_time(repeat(side.eager, EAGER_OPS), 3, time.process_time) / EAGER_OPS * 1e6,
        "jit call us": lambda side: best_time(repeat(side.jit_call, JIT_CALLS), 3) / JIT_CALLS * 1e6,
        "jit call cpu us": lambda side: best_time(repeat(side.jit_call, JIT_CALLS), 3, time.process_time) / JIT_CALLS
        * 1e6,
        "jit fixed us": jit_fixed_us,
    }
    higher_is_better = {"fused Gelem/s", "fused+sum Gelem/s", "matmul GFLOPS"}
    for _ in range(rounds):
        for measure, function in measures.items():
            for side in sides:
                if measure.startswith("jit") and side.jit_call is None:
                    continue
                settle()
                value = function(side)
                previous = results[side.name].get(measure)
                if previous is None or (value > previous if measure in higher_is_better else value < previous):
                    results[side.name][measure] = value
    return results


GATES = {  # measure: (required tinycore / tinygrad ratio, True when higher is better)
    "fused Gelem/s": (1.0, True),
    "fused+sum Gelem/s": (2.0, True),
    "matmul GFLOPS": (5.0, True),
    "eager us": (0.1, False),
    "eager cpu us": (0.1, False),
    "jit call us": (0.2, False),
    "jit call cpu us": (0.2, False),
    "jit fixed us": (0.2, False),
}


def table(results: dict[str, dict[str, float]]) -> str:
    """A markdown table: one row per measure, one column per library, the tinycore / tinygrad ratio and gate."""
    names = list(results)
    measures = list(dict.fromkeys(measure for values in results.values() for measure in values))
    lines = ["| measure | " + " | ".join(names) + " | tinycore / tinygrad | gate |",
             "|---" * (len(names) + 3) + "|"]
    for measure in measures:
        cells = [f"{results[name][measure]:.3g}" if measure in results[name] else "-" for name in names]
        ratio = results["tinycore"].get(measure, 0.0) / max(results["tinygrad"].get(measure, 0.0), 1e-12)
        gate = GATES.get(measure)
        verdict = "-" if gate is None else (
            f"{'>=' if gate[1] else '<='} {gate[0]:g}: " +
            ("pass" if (ratio >= gate[0] if gate[1] else ratio <= gate[0]) else "FAIL"))
        lines.append(f"| {measure} | " + " | ".join(cells) + f" | {ratio:.3g} | {verdict} |")
    return "\n".join(lines)


def main() -> int:
    """Run the benchmark and print the table (or JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = run(args.rounds)
    print(json.dumps(results, indent=1) if args.json else table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
