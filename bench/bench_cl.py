"""CL benchmark: elementwise, reduce and matmul on the CL device next to the CPU device, in one run.

Run: `python bench/bench_cl.py [--repeats N] [--json]` from the repository root (needs tiny-cl and an OpenCL
driver, e.g. `pip install pyopencl pocl-binary-distribution`). Each case writes into a realized output with
`assign`, so every repeat runs the kernel again (the schedule and the compiled program are reused); the time is
the median wall time of a repeat including the device synchronisation. The first run of each case (compilation)
is reported apart. Results are checked against numpy. The ratio is CL time / CPU time (below 1: CL is faster).
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
from tinycore.tensor import Tensor  # noqa: E402

DEVICES = ("CPU", "CL")


@dataclass
class Case:
    """One benchmark: input shapes, the computation, numpy's answer, and the work for rates."""

    name: str
    inputs: list[tuple[int, ...]]
    compute: Callable[..., Tensor]
    reference: Callable[..., numpy.ndarray]
    flops: int
    bytes_moved: int


def cases() -> list[Case]:
    """The benchmark cases: a fused elementwise kernel, two reductions and a matmul."""
    count, rows, size = 1 << 22, 2048, 512
    return [
        Case("elementwise a*b+c (4M)", [(count,)] * 3, lambda a, b, c: a * b + c, lambda a, b, c: a * b + c,
             2 * count, 4 * 4 * count),
        Case("sum (4M -> 1)", [(count,)], lambda a: a.sum(), lambda a: a.sum(dtype=numpy.float64), count, 4 * count),
        Case("row sums (2048x2048)", [(rows, rows)], lambda a: a.sum(1), lambda a: a.sum(1), rows * rows,
             4 * rows * (rows + 1)),
        Case("matmul (512x512x512)", [(size, size)] * 2, lambda a, b: a @ b, lambda a, b: a @ b,
             2 * size ** 3, 3 * 4 * size * size),
    ]


def run_case(case: Case, device: str, arrays: list[numpy.ndarray], repeats: int) -> dict[str, Any]:
    """Time `case` on `device`: first run (with compilation) and the median of `repeats` further runs."""
    inputs = [Tensor(array, device=device).realize() for array in arrays]
    expected = case.reference(*arrays)
    output = Tensor.empty(*expected.shape, device=device).realize() if expected.shape else \
        Tensor.empty(1, device=device).realize()
    opened = Device[device]

    def once() -> float:
        started = time.perf_counter()
        value = case.compute(*inputs)
        output.assign(value.reshape(output.shape)).realize()
        opened.synchronize()
        return time.perf_counter() - started

    first = once()
    result = output.numpy().reshape(expected.shape)
    tolerance = 1e-3 if "sum" in case.name or "matmul" in case.name else 1e-6
    correct = bool(numpy.allclose(result, expected, rtol=tolerance, atol=tolerance))
    times = [once() for _ in range(repeats)]
    median = statistics.median(times)
    return {"device": device, "first_s": first, "median_s": median, "min_s": min(times), "correct": correct,
            "gflops": case.flops / median / 1e9, "gbps": case.bytes_moved / median / 1e9}


def main() -> int:
    """Run every case on CPU and CL and print the table (or JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10, help="timed runs per case and device (default 10)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    arguments = parser.parse_args()
    generator = numpy.random.default_rng(0)
    description = Device["CL"].description  # type: ignore[attr-defined]
    rows = []
    for case in cases():
        arrays = [generator.standard_normal(shape).astype(numpy.float32) for shape in case.inputs]
        results = {device: run_case(case, device, arrays, arguments.repeats) for device in DEVICES}
        rows.append({"case": case.name, **{device: results[device] for device in DEVICES},
                     "ratio_cl_over_cpu": results["CL"]["median_s"] / results["CPU"]["median_s"]})
    if arguments.json:
        print(json.dumps({"cl_device": description, "rows": rows}, indent=2))
        return 0
    print(f"CL device: {description}; {arguments.repeats} timed repeats, median wall time per run")
    header = f"{'case':<24} {'CPU ms':>9} {'CL ms':>9} {'CL/CPU':>7} {'CPU GFLOPS':>10} {'CL GFLOPS':>10} " \
             f"{'CPU GB/s':>9} {'CL GB/s':>8} {'1st CPU s':>9} {'1st CL s':>8} ok"
    print(header)
    for row in rows:
        cpu, cl = row["CPU"], row["CL"]
        print(f"{row['case']:<24} {cpu['median_s'] * 1e3:9.2f} {cl['median_s'] * 1e3:9.2f} "
              f"{row['ratio_cl_over_cpu']:7.2f} {cpu['gflops']:10.2f} {cl['gflops']:10.2f} {cpu['gbps']:9.2f} "
              f"{cl['gbps']:8.2f} {cpu['first_s']:9.2f} {cl['first_s']:8.2f} "
              f"{'yes' if cpu['correct'] and cl['correct'] else 'NO'}")
    return 0 if all(row["CPU"]["correct"] and row["CL"]["correct"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
