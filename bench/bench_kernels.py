"""Per-kernel times of one realize, its kernels replayed back to back: where a step's time goes, without Python.

    python bench/bench_kernels.py [--rounds N] [CASE]

CASE is one of `mlp-sgd`, `mlp-adam` (bench_train.py's training steps), `matmul1024`, `matmul2048`, `conv2d` and
`softmax` (bench_cpu.py's rows). The case is realized once with every kernel launch recorded (the runner and its
buffers), then the recorded launches run again in order `--rounds` times; each kernel's median, its worker shares
(global size) and the median of the whole sequence are printed. Replayed back to back, the pool's threads are awake
between kernels, as in a TinyJit replay: the figures leave out Python, scheduling and the wake-up after a pause.
Comparing two heuristics this way (the same ASTs compiled both ways in one process, replayed in rotation) gave the
paired ratios in bench/README.md; on a shared machine that is far steadier than timing two runs apart.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("DEV", "CPU")


def _case(name: str) -> Callable[[], Any]:
    """A callable that realizes the case once."""
    from tinycore import Tensor
    if name in ("mlp-sgd", "mlp-adam"):
        import bench_train
        return bench_train.tinycore_step("SGD" if name == "mlp-sgd" else "Adam")
    if name.startswith("matmul"):
        size = int(name.removeprefix("matmul"))
        left, right = Tensor.rand(size, size).realize(), Tensor.rand(size, size).realize()
        return lambda: (left @ right).realize()
    if name == "conv2d":
        images, weight = Tensor.rand(32, 16, 64, 64).realize(), Tensor.rand(32, 16, 3, 3).realize()
        return lambda: images.conv2d(weight).realize()
    if name == "softmax":
        rows = Tensor.rand(4096, 1024).realize()
        return lambda: rows.softmax(-1).realize()
    raise SystemExit(f"unknown case {name!r}: choose mlp-sgd, mlp-adam, matmul1024, matmul2048, conv2d or softmax")


def record(run: Callable[[], Any]) -> tuple[list[tuple[Any, list[Any], dict[Any, int]]], Any]:
    """Call `run` for the first time recording every kernel launch: (launches, its result, kept alive so the recorded
    buffers stay allocated). Only a first call launches every kernel through its runner; later ones run from a
    cached launch plan or a TinyJit's replay."""
    import tinycore.engine.realize as realize
    launches: list[tuple[Any, list[Any], dict[Any, int]]] = []
    launch = realize.Runner.__call__

    def recording(runner: Any, buffers: Any, var_vals: dict[Any, int], wait: bool = False) -> float | None:
        launches.append((runner, list(buffers), var_vals))
        return launch(runner, buffers, var_vals, wait)

    realize.Runner.__call__ = recording  # type: ignore[method-assign,assignment]
    try:
        result = run()
    finally:
        realize.Runner.__call__ = launch  # type: ignore[method-assign]
    return launches, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("case", nargs="?", default="mlp-sgd")
    parser.add_argument("--rounds", type=int, default=100)
    arguments = parser.parse_args()
    from tinycore import Context
    with Context(TRAINING=1):
        launches, kept = record(_case(arguments.case))
    if not launches:
        raise SystemExit("no kernel launch was recorded (the case ran from a launch plan)")
    times: list[list[float]] = [[] for _ in launches]
    totals = []
    for _ in range(arguments.rounds):
        started = time.perf_counter()
        for position, (runner, buffers, var_vals) in enumerate(launches):
            before = time.perf_counter()
            runner(buffers, var_vals)
            times[position].append(time.perf_counter() - before)
        totals.append(time.perf_counter() - started)
    print(f"{arguments.case}: {len(launches)} kernels, medians of {arguments.rounds} back-to-back replays")
    print(f"{'kernel':32s} {'shares':>6s} {'us':>10s}")
    for (runner, _, _), measured in zip(launches, times, strict=True):
        print(f"{runner.name:32s} {runner.spec.global_size[0]!s:>6s} {statistics.median(measured) * 1e6:10.1f}")
    print(f"{'whole sequence':32s} {'':>6s} {statistics.median(totals) * 1e6:10.1f}")
    del kept


if __name__ == "__main__":
    main()
