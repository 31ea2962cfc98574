"""matmul and conv2d GFLOPS on the CPU: tinycore beside numpy (OpenBLAS) and torch, interleaved in one process.

    python bench/bench_matmul.py [--rounds N] [--cases mm1024 mm2048 mm1000 conv]

Each round runs every library once per case, each call after `settle()` (bench/settle.py: numpy's and torch's
threads spin after a call; left spinning they would share the cores with the next call and add to its CPU time);
the best and median wall-clock GFLOPS count, and GFLOPS per second of process CPU time (all threads), which a
machine shared with other jobs disturbs less than wall time. The paired median is the most robust ratio: in each
round the best peer's time over tinycore's (calls a fraction of a second apart, so a slow phase of the machine hits
both), the median over the rounds; the order of the libraries turns from round to round. For one thread
in every library: `NUM_CPU_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1` (torch is then set to one thread).
Every result is checked against a float64 reference first (largest error relative to the largest output).
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from settle import keep_freed_memory, settle

os.environ.setdefault("DEV", "CPU")

MATMULS = {"mm1024": (1024, 1024, 1024), "mm2048": (2048, 2048, 2048), "mm1000": (1000, 1000, 1000)}
CONV = ((32, 16, 64, 64), (32, 16, 3, 3))


def cases(names: list[str]) -> dict[str, tuple[int, dict[str, Callable[[], Any]], float]]:
    """name -> (FLOPs, {library: call}, relative error of tinycore's result)."""
    import torch

    from tinycore import Tensor
    if os.environ.get("NUM_CPU_THREADS") == "1":
        torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    found: dict[str, tuple[int, dict[str, Callable[[], Any]], float]] = {}
    for name in names:
        if name in MATMULS:
            m, k, n = MATMULS[name]
            a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
            ta, tb, pa, pb = Tensor(a).realize(), Tensor(b).realize(), torch.from_numpy(a), torch.from_numpy(b)
            reference = a.astype(np.float64) @ b
            error = float(np.abs((ta @ tb).numpy() - reference).max() / np.abs(reference).max())
            found[name] = (2 * m * n * k, {"tinycore": lambda ta=ta, tb=tb: (ta @ tb).realize(),
                                           "numpy": lambda a=a, b=b: a @ b, "torch": lambda pa=pa, pb=pb: pa @ pb},
                           error)
        elif name == "conv":
            x, w = (rng.standard_normal(shape, dtype=np.float32) for shape in CONV)
            tx, tw, px, pw = Tensor(x).realize(), Tensor(w).realize(), torch.from_numpy(x), torch.from_numpy(w)
            reference = torch.nn.functional.conv2d(px.double(), pw.double()).numpy()
            error = float(np.abs(tx.conv2d(tw).numpy() - reference).max() / np.abs(reference).max())
            (batch, cin, height, width), (cout, _, kh, kw) = CONV
            flops = 2 * batch * cout * (height - kh + 1) * (width - kw + 1) * cin * kh * kw
            found[name] = (flops, {"tinycore": lambda tx=tx, tw=tw: tx.conv2d(tw).realize(),
                                   "torch": lambda px=px, pw=pw: torch.nn.functional.conv2d(px, pw)}, error)
        else:
            raise SystemExit(f"unknown case {name!r}: choose from {', '.join([*MATMULS, 'conv'])}")
    return found


def main() -> None:
    """Time every case and print one line each."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--cases", nargs="+", default=["mm1024", "mm2048", "conv"])
    parser.add_argument("--fresh-heap", action="store_true",
                        help="keep glibc's allocator defaults (torch's conv2d output then page-faults or not depending "
                             "on the allocator's history; see settle.keep_freed_memory)")
    args = parser.parse_args()
    if not args.fresh_heap:
        keep_freed_memory()
    for name, (flops, calls, error) in cases(args.cases).items():
        wall: dict[str, list[float]] = {library: [] for library in calls}
        cpu: dict[str, list[float]] = {library: [] for library in calls}
        for call in calls.values():
            call()
        libraries = list(calls)
        for round_index in range(args.rounds):
            turn = round_index % len(libraries)  # no library always runs first after the settling pause
            for library in libraries[turn:] + libraries[:turn]:
                call = calls[library]
                settle()
                cpu_start, wall_start = time.process_time(), time.perf_counter()
                call()
                wall[library].append(time.perf_counter() - wall_start)
                cpu[library].append(time.process_time() - cpu_start)
        best = {library: flops / min(times) / 1e9 for library, times in wall.items()}
        peer = max(value for library, value in best.items() if library != "tinycore")
        median = {library: flops / statistics.median(times) / 1e9 for library, times in wall.items()}
        per_cpu = {library: flops / statistics.median(times) / 1e9 for library, times in cpu.items()}
        figures = "  ".join(f"{library} {best[library]:.1f} (median {median[library]:.1f}, cpu {per_cpu[library]:.1f})"
                            for library in calls)
        peers = [library for library in libraries if library != "tinycore"]
        paired = statistics.median(min(wall[library][index] for library in peers) / own
                                   for index, own in enumerate(wall["tinycore"]))
        print(f"{name}: {figures}  tinycore / best peer {best['tinycore'] / peer:.2f} (paired median {paired:.2f})  "
              f"error {error:.1e}  load {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
