"""Indexing benchmark: integer-tensor gathers and scatters on tinycore's CPU device, tinygrad 0.14 (CPU, clang) and
torch (CPU) in one run.

Run: `python bench/bench_indexing.py [--rounds N] [--rows 1000,10000,...] [--json]` from the repository root.

Measures (each library in turn inside a round, rounds interleaved so machine noise hits all alike, each call after
`settle()` so that no library's threads still spin from the call before (bench/settle.py); the best round counts;
kernels are compiled by a warm-up call first):
- getitem: `x[idx]` with `x` of shape (rows, 64) float32 and 512 random int32 row indices, for each number of rows;
  the cost should be flat in rows (proportional to the 512 x 64 output);
- setitem: `t[:, ind_1, :, ind_2, :] = v` (numpy's example of basic and advanced indices combined) with `t` of shape
  (s, 20, s, 40, s) for s = 2, 4, 6 and at numpy's documented size (10, 20, 30, 40, 50), ind_1 and ind_2 of shape
  (2, 3, 4), written into a realized `t` in place.
Every result is compared with numpy before timing. Ratios are tinycore / torch and tinycore / tinygrad (time: below
1 means tinycore is faster).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from settle import settle  # noqa: E402

INDEX_COUNT = 512
COLUMNS = 64
TINYGRAD_LIMIT_S = 60.0  # a tinygrad case slower than this is timed once, not per round


def _tinycore() -> Any:
    from tinycore import Device, Tensor
    return Tensor, lambda: Device["CPU"].synchronize()


def _tinygrad() -> Any:
    try:
        from tinygrad import Device, Tensor
    except ImportError:
        return None
    return Tensor, lambda: Device["CPU"].synchronize()


def _time(function: Callable[[], Any], synchronize: Callable[[], Any]) -> float:
    started = time.perf_counter()
    function()
    synchronize()
    return time.perf_counter() - started


class Getitem:
    """x[idx] for one number of rows, per library."""

    def __init__(self, rows: int, seed: int):
        generator = np.random.default_rng(seed)
        self.rows = rows
        self.table = generator.standard_normal((rows, COLUMNS), dtype=np.float32)
        self.index = generator.integers(0, rows, INDEX_COUNT).astype(np.int32)
        self.expected = self.table[self.index]

    def prepare(self, library: str) -> Callable[[], Any]:
        """A function doing the lookup once on `library`, checked against numpy."""
        if library == "torch":
            import torch
            table, index = torch.from_numpy(self.table), torch.from_numpy(self.index.astype(np.int64))
            run: Callable[[], Any] = lambda: table[index]  # noqa: E731
            result = run().numpy()
        else:
            tensor_class, _ = _tinycore() if library == "tinycore" else _tinygrad()
            table = tensor_class(self.table, device="CPU").realize()
            index = tensor_class(self.index, device="CPU").realize()
            run = lambda: table[index].realize()  # noqa: E731
            result = run().numpy()
        np.testing.assert_array_equal(result, self.expected)
        return run


class Setitem:
    """t[:, ind_1, :, ind_2, :] = v on a (s, 20, s, 40, s) tensor, or numpy's documented (10, 20, 30, 40, 50)."""

    def __init__(self, shape: tuple[int, ...], seed: int):
        generator = np.random.default_rng(seed)
        self.shape = shape
        self.base = generator.standard_normal(shape, dtype=np.float32)
        self.first = generator.integers(0, shape[1], (2, 3, 4)).astype(np.int32)
        self.second = generator.integers(0, shape[3], (2, 3, 4)).astype(np.int32)
        self.values = generator.standard_normal((2, 3, 4, shape[0], shape[2], shape[4]), dtype=np.float32)
        self.expected = self.base.copy()
        self.expected[:, self.first, :, self.second, :] = self.values

    def prepare(self, library: str) -> Callable[[], Any]:
        """A function doing the assignment once on `library` (into the same tensor), checked against numpy."""
        if library == "torch":
            import torch
            target = torch.from_numpy(self.base.copy())
            first = torch.from_numpy(self.first.astype(np.int64))
            second = torch.from_numpy(self.second.astype(np.int64))
            values = torch.from_numpy(self.values)

            def run() -> Any:
                target[:, first, :, second, :] = values
                return target
            result = run().numpy()
        else:
            tensor_class, _ = _tinycore() if library == "tinycore" else _tinygrad()
            target = tensor_class(self.base, device="CPU").realize()
            first = tensor_class(self.first, device="CPU").realize()
            second = tensor_class(self.second, device="CPU").realize()
            values = tensor_class(self.values, device="CPU").realize()

            def run() -> Any:
                target[:, first, :, second, :] = values
                return target.realize()
            result = run().numpy()
        np.testing.assert_array_equal(result, self.expected)
        return run


def main() -> None:
    """Run every case for every library and print (or dump as JSON) best times and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rows", default="1000,10000,100000,1000000")
    parser.add_argument("--sizes", default="2,4,6,full", help="setitem sizes s (full: (10, 20, 30, 40, 50))")
    parser.add_argument("--torch-threads", type=int, default=1,
                        help="torch's intra-op threads (1: like tinycore's one worker for outputs this small; "
                             "0: torch's default)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.torch_threads:
        import torch
        torch.set_num_threads(args.torch_threads)
    libraries = ["tinycore", "torch"] + (["tinygrad"] if _tinygrad() is not None else [])
    cases: list[tuple[str, Any]] = [(f"getitem rows={int(rows):,}", Getitem(int(rows), seed=position))
                                    for position, rows in enumerate(args.rows.split(","))]
    for size in args.sizes.split(","):
        shape = (10, 20, 30, 40, 50) if size == "full" else (int(size), 20, int(size), 40, int(size))
        cases.append((f"setitem {shape}", Setitem(shape, seed=100)))
    results: dict[str, dict[str, float]] = {}
    for name, case in cases:
        timings: dict[str, list[float]] = {library: [] for library in libraries}
        runs = {}
        for library in libraries:
            started = time.perf_counter()
            runs[library] = case.prepare(library)  # compiles, and checks the result against numpy
            if library == "tinygrad" and time.perf_counter() - started > TINYGRAD_LIMIT_S:
                timings[library].append(time.perf_counter() - started)
                runs.pop(library)
        synchronizers = {"tinycore": _tinycore()[1], "torch": lambda: None}
        if "tinygrad" in libraries:
            synchronizers["tinygrad"] = _tinygrad()[1]
        for _ in range(args.rounds):
            for library, run in runs.items():
                settle()
                timings[library].append(_time(run, synchronizers[library]))
        results[name] = {library: min(values) for library, values in timings.items()}
    if args.json:
        print(json.dumps(results, indent=2))
        return
    header = "| case | " + " | ".join(f"{library} ms" for library in libraries) + " | x torch |" + \
        (" x tinygrad |" if "tinygrad" in libraries else "")
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for name, row in results.items():
        cells = [f"{row[library] * 1000:.2f}" for library in libraries]
        ratios = [f"{row['tinycore'] / row['torch']:.2f}"]
        if "tinygrad" in libraries:
            ratios.append(f"{row['tinycore'] / row['tinygrad']:.2f}")
        print(f"| {name} | " + " | ".join(cells + ratios) + " |")
    print(f"\n{os.cpu_count()} CPUs; best of {args.rounds} rounds; torch threads: {args.torch_threads or 'default'}; "
          f"tinygrad cases over {TINYGRAD_LIMIT_S:.0f} s are timed once (their first call).")


if __name__ == "__main__":
    main()
