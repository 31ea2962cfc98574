"""WEBGPU benchmark: elementwise, reduce and matmul on the WEBGPU device next to the CPU device, in one run.

Run: `python bench/bench_webgpu.py [--repeats N] [--json]` from the repository root (needs tiny-webgpu, wgpu and an
adapter; without a GPU, Mesa's lavapipe from mesa-vulkan-drivers). Each case assigns its result into a realized
output, so every repeat launches the compiled kernel again; the time is the median wall time of a
repeat, device synchronisation included. The first run (schedule, WGSL compile, pipeline creation) is reported
apart. Every result is checked against numpy. The ratio is WEBGPU time / CPU time (below 1: WEBGPU is faster).
The "launch" row times a TinyJit replay of ten tiny kernels per call (median of 200 calls), the per-launch cost.
Not part of the test suite.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tinycore.device.registry import Device  # noqa: E402
from tinycore.engine.jit import TinyJit  # noqa: E402
from tinycore.tensor import Tensor  # noqa: E402

DEVICES = ("CPU", "WEBGPU")


@dataclass
class Workload:
    """One benchmark: input shapes, the tensor computation, numpy's answer and the work done (for rates)."""

    name: str
    shapes: list[tuple[int, ...]]
    compute: Callable[..., Tensor]
    reference: Callable[..., numpy.ndarray]
    flops: int
    bytes_moved: int


def workloads() -> list[Workload]:
    """A fused elementwise kernel, a full and a row reduction, and a matmul."""
    count, rows, size = 1 << 20, 1024, 256
    return [
        Workload("elementwise a*b+c (1M)", [(count,)] * 3, lambda a, b, c: a * b + c, lambda a, b, c: a * b + c,
                 2 * count, 16 * count),
        Workload("sum (1M -> 1)", [(count,)], lambda a: a.sum(), lambda a: a.sum(dtype=numpy.float64), count,
                 4 * count),
        Workload("row sums (1024x1024)", [(rows, rows)], lambda a: a.sum(1), lambda a: a.sum(1), rows * rows,
                 4 * rows * (rows + 1)),
        Workload("matmul (256x256x256)", [(size, size)] * 2, lambda a, b: a @ b, lambda a, b: a @ b,
                 2 * size ** 3, 12 * size * size),
    ]


def measure(workload: Workload, device: str, arrays: list[numpy.ndarray], repeats: int) -> dict[str, Any]:
    """First-run time and the median of `repeats` timed runs of `workload` on `device`, checked against numpy.

    Each run assigns the result into one realized output, so the kernel runs again every time (a graph realized
    before would otherwise be served from its earlier result).
    """
    inputs = [Tensor(array, device=device).realize() for array in arrays]
    expected = workload.reference(*arrays)
    shape = expected.shape if expected.shape else (1,)
    output = Tensor.empty(*shape, device=device).realize()
    opened = Device[device]

    def run_once() -> float:
        started = time.perf_counter()
        output.assign(workload.compute(*inputs).reshape(shape)).realize()
        opened.synchronize()
        return time.perf_counter() - started

    first = run_once()
    numpy.testing.assert_allclose(output.numpy().reshape(expected.shape), expected, rtol=2e-3, atol=2e-3)
    median = statistics.median(run_once() for _ in range(repeats))
    return {"first_s": first, "median_s": median, "gflops": workload.flops / median / 1e9,
            "gbps": workload.bytes_moved / median / 1e9}


def measure_launch(device: str, calls: int = 200, kernels: int = 10) -> dict[str, Any]:
    """Median time of one call of a TinyJit function launching `kernels` tiny kernels on `device`, checked against
    numpy: the per-launch overhead (bind groups, uniform writes, submits) with next to no work per kernel."""
    array = numpy.arange(16, dtype=numpy.float32)
    source = Tensor(array, device=device).realize()

    def step(value: Tensor) -> Tensor:
        for _ in range(kernels):
            value = (value + 1).realize()
        return value

    jitted = TinyJit(step)
    opened = Device[device]
    times = []
    for _ in range(calls + 3):
        started = time.perf_counter()
        result = jitted(source)
        opened.synchronize()
        times.append(time.perf_counter() - started)
    numpy.testing.assert_allclose(result.numpy(), array + kernels)
    median = statistics.median(times[3:])
    return {"median_s": median, "per_kernel_s": median / kernels}


def codegen_tuning(renderer: Any) -> dict[str, Any]:
    """The GPU codegen settings the WGSL renderer took from its adapter (None where the core's default applies)."""
    return {name: getattr(renderer, name, None) for name in ("max_local_total", "local_max", "register_tile",
                                                             "group_size", "group_max_outputs", "shared_max")}


def main() -> None:
    """Run every workload on CPU and WEBGPU and print a table (or JSON) with the WEBGPU / CPU ratios."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per case (default 5)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    arguments = parser.parse_args()
    generator = numpy.random.default_rng(0)
    rows = []
    for workload in workloads():
        arrays = [generator.standard_normal(shape).astype(numpy.float32) for shape in workload.shapes]
        row: dict[str, Any] = {"case": workload.name}
        for device in DEVICES:
            row[device] = measure(workload, device, arrays, arguments.repeats)
        row["ratio"] = row["WEBGPU"]["median_s"] / row["CPU"]["median_s"]
        rows.append(row)
    launch = {device: measure_launch(device) for device in DEVICES}
    adapter = getattr(Device["WEBGPU"], "description", "?")
    tuning = codegen_tuning(Device["WEBGPU"].renderer)
    if arguments.json:
        print(json.dumps({"adapter": adapter, "codegen": tuning, "results": rows, "launch": launch}, indent=2))
        return
    print(f"WEBGPU adapter: {adapter}")
    print("WEBGPU codegen: " + ", ".join(f"{key} {value}" for key, value in tuning.items()))
    print(f"{'case':<24} {'CPU ms':>9} {'WEBGPU ms':>10} {'ratio':>7} {'WEBGPU GFLOPS':>14} {'first ms':>9}")
    for row in rows:
        print(f"{row['case']:<24} {row['CPU']['median_s'] * 1e3:9.2f} {row['WEBGPU']['median_s'] * 1e3:10.2f} "
              f"{row['ratio']:7.2f} {row['WEBGPU']['gflops']:14.2f} {row['WEBGPU']['first_s'] * 1e3:9.1f}")
    print(f"{'launch (jit, 10 kernels)':<24} {launch['CPU']['median_s'] * 1e3:9.3f} "
          f"{launch['WEBGPU']['median_s'] * 1e3:10.3f} {launch['WEBGPU']['median_s'] / launch['CPU']['median_s']:7.2f}"
          f"   ({launch['WEBGPU']['per_kernel_s'] * 1e6:.0f} us per WEBGPU kernel, median of 200 calls)")


if __name__ == "__main__":
    main()
