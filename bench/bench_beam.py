"""BEAM search on the CPU: matmul N^2 (fp32) with the default opts and with BEAM=2, beside numpy, as ratios.

Run: `python bench/bench_beam.py [--size 1024] [--rounds N] [--budget SECONDS] [--ignore-cache] [--out DIRECTORY]`
from the repository root. The first BEAM=2 call searches (or reads the search cache; `--ignore-cache` searches
again) and its seconds are reported apart; then numpy, tinycore and tinycore with BEAM=2 take turns for `--rounds`
rounds so that load from other processes hits all alike, each call after `settle()` (bench/settle.py: numpy's
threads spin for about 0.1 s after a call and would share the cores with the next case). The best round and the
median are reported; the ratios (tinycore / numpy, in GFLOPS) are the useful part on a shared machine, and the most
robust of them is the paired one: numpy's time over tinycore's in the same round (the calls of a round run within a
few tenths of a second of each other, so a slow phase of the machine hits both), the median over the rounds. The
order of the cases turns from round to round. Freed memory stays with the process (settle.keep_freed_memory), so
numpy's result array does not page-fault on some calls and not on others. Writes DIRECTORY/bench_beam.md and .json
(DIRECTORY defaults to bench/results/).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from settle import keep_freed_memory, settle

from tinycore import Tensor
from tinycore.engine import search
from tinycore.helpers import Context


def _seconds(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def run(size: int, rounds: int, budget: float, ignore_cache: bool) -> dict[str, dict[str, float]]:
    """GFLOPS (best and median of `rounds`) of numpy, tinycore and tinycore BEAM=2, and the search's seconds."""
    rng = np.random.default_rng(0)
    left, right = (rng.standard_normal((size, size), dtype=np.float32) for _ in range(2))
    held_left, held_right = Tensor(left).realize(), Tensor(right).realize()
    expected = left.astype(np.float64) @ right

    def default() -> object:
        return (held_left @ held_right).realize()

    def beam() -> object:
        with Context(BEAM=2):
            return (held_left @ held_right).realize()

    with Context(BEAM=2, BEAM_BUDGET=budget, IGNORE_BEAM_CACHE=int(ignore_cache)):
        search_seconds = _seconds(beam)
    found = (held_left @ held_right).numpy()
    with Context(BEAM=2):
        found_beam = (held_left @ held_right).numpy()
    for result in (found, found_beam):
        error = float(np.abs(result - expected).max() / np.abs(expected).max())
        if error > 1e-5:
            raise AssertionError(f"matmul result differs from numpy's (relative error {error:.2e})")
    cases: dict[str, Callable[[], object]] = {"numpy": lambda: left @ right, "tinycore": default,
                                              "tinycore BEAM=2": beam}
    for call in cases.values():
        call()  # warm up
    times: dict[str, list[float]] = {name: [] for name in cases}
    names = list(cases)
    for round_index in range(rounds):
        # the order turns each round, so no case always runs first after the settling pause
        for name in names[round_index % len(names):] + names[:round_index % len(names)]:
            settle()
            times[name].append(_seconds(cases[name]))
    flops = 2 * size ** 3
    results = {name: {"best GFLOPS": flops / min(values) / 1e9,
                      "median GFLOPS": flops / statistics.median(values) / 1e9,
                      "paired median / numpy": statistics.median(
                          reference / own for reference, own in zip(times["numpy"], values, strict=True))}
               for name, values in times.items()}
    results["search"] = {"seconds": search_seconds, "searches": float(search.stats.searches),
                         "candidates compiled": float(search.stats.compiled),
                         "cache hits": float(search.stats.cache_hits)}
    return results


def table(results: dict[str, dict[str, float]], size: int) -> str:
    """A markdown table: GFLOPS per case and its ratio to numpy (above 1: faster than numpy)."""
    numpy_figures = results["numpy"]
    lines = [f"| matmul {size}^2 fp32 | best GFLOPS | median GFLOPS | best / numpy | median / numpy | "
             "paired median / numpy |", "|---|---|---|---|---|---|"]
    for name in ("numpy", "tinycore", "tinycore BEAM=2"):
        figures = results[name]
        lines.append(f"| {name} | {figures['best GFLOPS']:.1f} | {figures['median GFLOPS']:.1f} | "
                     f"{figures['best GFLOPS'] / numpy_figures['best GFLOPS']:.2f} | "
                     f"{figures['median GFLOPS'] / numpy_figures['median GFLOPS']:.2f} | "
                     f"{figures['paired median / numpy']:.2f} |")
    found = results["search"]
    lines.append(f"\nBEAM=2 search: {found['seconds']:.1f} s, {found['candidates compiled']:.0f} candidates compiled, "
                 f"{found['cache hits']:.0f} cache hits")
    return "\n".join(lines)


def main() -> int:
    """Measure and write the markdown and JSON reports."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--budget", type=float, default=120.0, help="BEAM_BUDGET: seconds the search may take")
    parser.add_argument("--ignore-cache", action="store_true", help="search even when the result is cached")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    arguments = parser.parse_args()
    keep_freed_memory()
    results = run(arguments.size, arguments.rounds, arguments.budget, arguments.ignore_cache)
    arguments.out.mkdir(parents=True, exist_ok=True)
    markdown = table(results, arguments.size)
    (arguments.out / "bench_beam.md").write_text(markdown + "\n")
    (arguments.out / "bench_beam.json").write_text(json.dumps(results, indent=1) + "\n")
    print(markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
