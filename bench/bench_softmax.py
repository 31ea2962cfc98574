"""Row ops and transcendentals over a (4096, 1024) float32 input: tinycore beside torch at 1 and 2 threads.

`python bench/bench_softmax.py [--ops softmax,exp,...] [--threads 1,2] [--rounds N]`. For each op and thread count
the two libraries are timed in turn, call by call (tinycore's `realize()` included), with a pause after every torch
call (its OpenMP threads spin for a while after returning and would take the second core from tinycore) and a short
one after every tinycore call. Prints best and median wall times, the CPU time of the calling thread for tinycore
(below the wall time when its worker thread took a share), the ratio torch / tinycore (above 1: tinycore faster)
and the load average before and after.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch

from tinycore import Tensor
from tinycore.helpers import Context

ROWS, COLUMNS = 4096, 1024
TORCH_PAUSE = 0.25
"""Seconds after each torch call, outside the timed region, for its worker threads to stop spinning."""
TINYCORE_PAUSE = 0.05
"""Seconds after each tinycore call (its pool's worker blocks, it does not spin)."""

OPS: dict[str, tuple[Callable[[Tensor], Tensor], Callable[[torch.Tensor], torch.Tensor]]] = {
    "softmax": (lambda x: x.softmax(-1), lambda x: torch.softmax(x, -1)),
    "log_softmax": (lambda x: x.log_softmax(-1), lambda x: torch.log_softmax(x, -1)),
    "logsumexp": (lambda x: x.logsumexp(-1), lambda x: torch.logsumexp(x, -1)),
    "layernorm": (lambda x: x.layernorm(-1), lambda x: torch.nn.functional.layer_norm(x, (COLUMNS,))),
    "exp": (lambda x: x.exp(), torch.exp),
    "sigmoid": (lambda x: x.sigmoid(), torch.sigmoid),
    "gelu": (lambda x: x.gelu(), lambda x: torch.nn.functional.gelu(x, approximate="tanh")),
}


def time_pair(op: str, threads: int, rounds: int, ours: Tensor, theirs: torch.Tensor) -> dict[str, float]:
    """Best and median milliseconds of `op` for both libraries at `threads` threads, interleaved call by call."""
    ours_op, theirs_op = OPS[op]
    torch.set_num_threads(threads)
    walls: list[float] = []
    cpus: list[float] = []
    peers: list[float] = []
    with Context(NUM_CPU_THREADS=threads):
        for _ in range(3):  # compile, then make the launch plan
            ours_op(ours).realize()
            theirs_op(theirs)
        time.sleep(TORCH_PAUSE)
        for _ in range(rounds):
            cpu_start, start = time.thread_time(), time.perf_counter()
            ours_op(ours).realize()
            walls.append(time.perf_counter() - start)
            cpus.append(time.thread_time() - cpu_start)
            time.sleep(TINYCORE_PAUSE)
            start = time.perf_counter()
            theirs_op(theirs)
            peers.append(time.perf_counter() - start)
            time.sleep(TORCH_PAUSE)
    return {"best": min(walls) * 1e3, "median": statistics.median(walls) * 1e3, "cpu": min(cpus) * 1e3,
            "torch_best": min(peers) * 1e3, "torch_median": statistics.median(peers) * 1e3}


def main() -> None:
    """Parse the arguments, run every (op, thread count) pair and print one line each."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", default=",".join(OPS), help="comma-separated, from: " + ", ".join(OPS))
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    parser.add_argument("--rounds", type=int, default=15, help="timed calls per library and case")
    arguments = parser.parse_args()
    values = np.random.default_rng(0).standard_normal((ROWS, COLUMNS), dtype=np.float32)
    ours, theirs = Tensor(values).realize(), torch.from_numpy(values.copy())
    print(f"load average {os.getloadavg()[0]:.2f}")
    for op in arguments.ops.split(","):
        for threads in (int(count) for count in arguments.threads.split(",")):
            row = time_pair(op, threads, arguments.rounds, ours, theirs)
            print(f"{op:12s} {threads} thread{'s' if threads > 1 else ' '}  tinycore best {row['best']:6.3f} ms "
                  f"median {row['median']:6.3f} (calling thread CPU {row['cpu']:6.3f})  torch best "
                  f"{row['torch_best']:6.3f} median {row['torch_median']:6.3f}  torch / tinycore best "
                  f"{row['torch_best'] / row['best']:.2f} median {row['torch_median'] / row['median']:.2f}")
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
