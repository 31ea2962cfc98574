"""Paired A/B of the small-things costs (issue 47): an eager op and a TinyJit call, old checkout against this one.

Run: `python bench/small_ab.py BASE_CHECKOUT [--pairs N]` from the repository root, where BASE_CHECKOUT is a
worktree of the revision to compare with (`git worktree add --detach /tmp/base REV`). Each pair runs one process on
the base checkout (PYTHONPATH pointing at it; the script checks that tinycore and tiny_cpu really come from there)
and one on this checkout, in alternation, so machine load hits both alike. Per process and measure: 9 blocks of 200
calls, the median block. Printed: each measure's median over the pairs and the median (range) of the paired ratios
before / after (above 1: faster now).

Measures, in us per call, from the calling thread's CPU time (`thread`) and wall time (`wall`):
- eager: `(Tensor([1.0]) + 1).realize()` on new tensors;
- jit10: a TinyJit call of 10 tiny kernels on the same realized input;
- jit fixed: 2 x jit10 - (a 20-kernel call), the call's cost without its kernels'.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BLOCKS, CALLS = 9, 200


def measure(checkout: str) -> dict[str, float]:
    """The measures in this process, whose tinycore must come from `checkout`."""
    os.environ.setdefault("DEV", "CPU")
    import tiny_cpu

    import tinycore
    from tinycore import Tensor, TinyJit
    for module in (tinycore, tiny_cpu):
        if not str(module.__file__).startswith(checkout):
            raise SystemExit(f"{module.__name__} comes from {module.__file__}, not from {checkout}")

    def eager() -> None:
        (Tensor([1.0]) + 1).realize()

    def chain(count: int) -> Callable[[Any], Any]:
        def function(value: Any) -> Any:
            for _ in range(count):
                value = (value + 1).contiguous()
            return value.realize()
        return function

    value = Tensor.rand(4).realize()
    ten, twenty = TinyJit(chain(10)), TinyJit(chain(20))
    for _ in range(3):
        ten(value)
        twenty(value)
    for _ in range(100):
        eager()

    def median_us(function: Callable[[], None], clock: Callable[[], float]) -> float:
        blocks = []
        for _ in range(BLOCKS):
            started = clock()
            for _ in range(CALLS):
                function()
            blocks.append((clock() - started) / CALLS * 1e6)
        return statistics.median(blocks)

    results: dict[str, float] = {}
    for clock_name, clock in (("thread", time.thread_time), ("wall", time.perf_counter)):
        results[f"eager {clock_name}"] = median_us(eager, clock)
        call_ten = median_us(lambda: ten(value), clock)
        call_twenty = median_us(lambda: twenty(value), clock)
        results[f"jit10 {clock_name}"] = call_ten
        results[f"jit fixed {clock_name}"] = 2 * call_ten - call_twenty
    return results


def run_side(checkout: str) -> dict[str, float]:
    """The measures of one process on `checkout`."""
    environment = dict(os.environ, PYTHONPATH=f"{checkout}{os.pathsep}{checkout}/plugins/tiny-cpu")
    output = subprocess.run([sys.executable, __file__, "--measure", checkout], env=environment, cwd="/",
                            capture_output=True, text=True, check=True).stdout
    return dict(json.loads(output.strip().splitlines()[-1]))


def main() -> int:
    """Run the pairs and print the summary table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", help="a checkout of the revision to compare with")
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.base)))
        return 0
    base = str(Path(args.base).resolve())
    pairs = [(run_side(base), run_side(str(ROOT))) for _ in range(args.pairs)]
    print(f"load average {os.getloadavg()[0]:.1f}, {len(pairs)} pairs")
    print("| measure (us) | before | after | paired ratio before/after, median (range) |\n|---|---|---|---|")
    for name in pairs[0][0]:
        before, after = [pair[0][name] for pair in pairs], [pair[1][name] for pair in pairs]
        ratios = [old / new for old, new in zip(before, after, strict=True) if new > 0]
        spread = f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})" if ratios else "-"
        print(f"| {name} | {statistics.median(before):.1f} | {statistics.median(after):.1f} | {spread} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
