"""Fused elementwise kernels against this machine's copy bandwidth (issue 47), tinycore beside torch and numpy.

Run: `python bench/bench_bandwidth.py [--sizes 64K,4M,16M] [--threads 1,2] [--rounds N]` from the repository root.
64K is the cache-sized default: `relu(a*b+c)*d` touches five buffers, 1.25 MiB at 64K floats, inside a 2 MiB L2
(256K floats would be 5 MiB).

The goal reads: a fused elementwise kernel moves its bytes at 0.9x or more of a plain copy's speed. For each size
(float32 elements) and thread count this times, interleaved round by round (each case after `settle()`):

- `memmove`: ctypes.memmove of one buffer into another of the same bytes (2 x N x 4 bytes: a read and a write),
  split in `threads` equal parts run on that many Python threads (ctypes releases the GIL during the call);
- `np.copyto`: numpy's copy into a preallocated buffer (one thread: numpy does not split it);
- `a*2` (1 read + 1 write per element) and `relu(a*b+c)*d` (4 reads + 1 write) in tinycore (DEV=CPU,
  NUM_CPU_THREADS=threads, the kernel compiled and the inputs realized before timing), torch
  (`torch.set_num_threads(threads)`) and numpy (one thread). Each call allocates its output, as user code does;
  tinycore's allocator hands back the buffer freed by the previous call, torch and numpy take fresh pages for
  outputs above their allocators' caching limits (the page faults are part of their figures; `torch a*2 out=`
  writes into one preallocated output, torch's kernel alone). tinycore also
  through TinyJit (the captured kernel replayed into its own output buffer: the least Python per call).

Printed per case: the best time, bytes moved / best time in GB/s, and that over the copy's (the `vs copy` column).
The copy of a round is the faster of its memmove and np.copyto (waking a helper thread costs more than a small
copy, and numpy's loop beats glibc's memmove at some sizes). The best of N rounds reads the machine's bandwidth when
it is least shared; the `paired` column gives the median over rounds of (copy time x bytes ratio) / case time, each
round's calls within a second of each other, the figure least moved by other jobs on the machine.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from settle import settle  # noqa: E402

FLOAT_BYTES = 4
REPEATED_BELOW = 1 << 20
"""Sizes below this many elements are timed as REPEATED_BELOW // size calls in a row (the mean counts): the first
call after `settle()`'s sleep finds its buffers evicted from the core's caches by other processes, and a cache-sized
case is meant to measure the cache."""


def parse_size(text: str) -> int:
    """'64K' -> 65536, '16M' -> 16777216, '1000' -> 1000 (element counts)."""
    multiplier = {"K": 1 << 10, "M": 1 << 20}.get(text[-1].upper(), 1)
    return int(text[:-1] if multiplier > 1 else text) * multiplier


class SplitCopy:
    """memmove of `source` into `destination` in `parts` equal pieces, one per thread, the threads kept alive
    between calls (a barrier starts them) so a call pays no thread start."""

    def __init__(self, source: np.ndarray, destination: np.ndarray, parts: int) -> None:
        self.parts = parts
        total = source.nbytes
        bounds = [total * part // parts for part in range(parts + 1)]
        self.pieces = [(destination.ctypes.data + bounds[part], source.ctypes.data + bounds[part],
                        bounds[part + 1] - bounds[part]) for part in range(parts)]
        self.start = threading.Barrier(parts)
        self.done = threading.Barrier(parts)
        self.stopping = False
        self.helpers = [threading.Thread(target=self._helper, args=(part,), daemon=True) for part in range(1, parts)]
        for helper in self.helpers:
            helper.start()

    def _helper(self, part: int) -> None:
        while True:
            self.start.wait()
            if self.stopping:
                return
            ctypes.memmove(*self.pieces[part])
            self.done.wait()

    def __call__(self) -> None:
        """Copy every piece; the calling thread copies the first."""
        if self.parts == 1:
            ctypes.memmove(*self.pieces[0])
            return
        self.start.wait()
        ctypes.memmove(*self.pieces[0])
        self.done.wait()

    def close(self) -> None:
        """Let the helper threads return."""
        self.stopping = True
        if self.parts > 1:
            self.start.wait()
        for helper in self.helpers:
            helper.join()


def build_cases(size: int, threads: int) -> tuple[dict[str, tuple[Callable[[], object], int]], SplitCopy]:
    """{case name: (call, bytes moved per call)} for one size and thread count, plus the copy to close after."""
    import torch

    from tinycore import Tensor, TinyJit

    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(size, dtype=np.float32) for _ in range(4)]
    destination = np.empty_like(arrays[0])
    copy = SplitCopy(arrays[0], destination, threads)
    a, b, c, d = (Tensor(array).realize() for array in arrays)
    ta, tb, tc, td = (torch.from_numpy(array.copy()) for array in arrays)
    na, nb, nc, nd = arrays
    held = torch.empty_like(ta)
    doubled = TinyJit(lambda x: (x * 2).realize())
    fused = TinyJit(lambda x, y, z, w: ((x * y + z).relu() * w).realize())
    two_streams, five_streams = 2 * size * FLOAT_BYTES, 5 * size * FLOAT_BYTES
    cases: dict[str, tuple[Callable[[], object], int]] = {
        "memmove": (copy, two_streams),
        "np.copyto": (lambda: np.copyto(destination, na), two_streams),
        "tinycore a*2": (lambda: (a * 2).realize(), two_streams),
        "torch a*2": (lambda: ta * 2, two_streams),
        "numpy a*2": (lambda: na * 2, two_streams),
        "torch a*2 out=": (lambda: torch.mul(ta, 2, out=held), two_streams),
        "tinycore relu(a*b+c)*d": (lambda: ((a * b + c).relu() * d).realize(), five_streams),
        "tinycore TinyJit a*2": (lambda: doubled(a), two_streams),
        "tinycore TinyJit relu(a*b+c)*d": (lambda: fused(a, b, c, d), five_streams),
        "torch relu(a*b+c)*d": (lambda: torch.relu(ta * tb + tc) * td, five_streams),
        "numpy relu(a*b+c)*d": (lambda: np.maximum(na * nb + nc, 0) * nd, five_streams),
    }
    return cases, copy


def measure(size: int, threads: int, rounds: int) -> list[tuple[str, float, float, float, float]]:
    """Rows (case, best ms, GB/s, vs copy, paired vs copy) for one size and thread count."""
    import torch

    from tinycore.helpers import Context

    torch.set_num_threads(threads)
    with Context(NUM_CPU_THREADS=threads):
        cases, copy = build_cases(size, threads)
        for call, _ in cases.values():  # compile, make the launch plan, warm the allocators
            for _ in range(3):
                call()
        names = list(cases)
        repeats = max(1, REPEATED_BELOW // size)
        times: dict[str, list[float]] = {name: [] for name in names}
        for round_number in range(rounds):
            turn = round_number % len(names)
            for name in names[turn:] + names[:turn]:
                call = cases[name][0]
                settle()
                started = time.perf_counter()
                for _ in range(repeats):
                    call()
                times[name].append((time.perf_counter() - started) / repeats)
        copy.close()
    copy_bytes = cases["memmove"][1]
    copies = [min(pair) for pair in zip(times["memmove"], times["np.copyto"], strict=True)]
    copy_rate = copy_bytes / min(copies)
    rows = []
    for name in names:
        moved = cases[name][1]
        rate = moved / min(times[name])
        paired = statistics.median((moved / copy_bytes) * copy / theirs
                                   for copy, theirs in zip(copies, times[name], strict=True))
        rows.append((name, min(times[name]) * 1e3, rate / 1e9, rate / copy_rate, paired))
    return rows


def main() -> None:
    """Parse the arguments and print one markdown table per (size, thread count)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="64K,4M,16M", help="comma-separated float32 element counts (K, M)")
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    parser.add_argument("--rounds", type=int, default=15, help="timed calls per case")
    arguments = parser.parse_args()
    for text in arguments.sizes.split(","):
        size = parse_size(text)
        for threads in (int(count) for count in arguments.threads.split(",")):
            load_before = os.getloadavg()[0]
            rows = measure(size, threads, arguments.rounds)
            print(f"\n{text} float32 ({size * FLOAT_BYTES / 2**20:.2f} MiB per buffer), {threads} thread(s), "
                  f"load average {load_before:.1f} -> {os.getloadavg()[0]:.1f}")
            print("| case | best ms | GB/s | vs copy (best) | vs copy (paired median) |")
            print("|---|---|---|---|---|")
            for name, best, rate, ratio, paired in rows:
                print(f"| {name} | {best:.3f} | {rate:.1f} | {ratio:.2f} | {paired:.2f} |", flush=True)


if __name__ == "__main__":
    main()
