"""Let other libraries' worker threads go idle before the next timed case of an interleaved benchmark.

After a call returns, numpy's OpenBLAS keeps its worker threads spinning (about 0.1 s on the 2-core development
machine: 2**28 cycles, OpenBLAS's default thread timeout) and torch's OpenMP threads spin too (10-40 ms measured
there); tinygrad's and tinycore's CPU workers block instead. Whatever case runs next in the same process shares the
cores with those spinning threads: tinycore's matmul 1024^2 measured 88 GFLOPS right after a numpy matmul and 150
after a pause. Every benchmark that interleaves libraries calls `settle()` before each timed case, outside the timed
region.

The spinning threads belong to this process, so `settle` watches the process's CPU clock: it sleeps in short slices
until one slice passes in which the whole process used (almost) no CPU, i.e. no thread of ours is spinning. After a
library that blocks that is one slice (20 ms); after numpy 0.12-0.14 s. bench/README.md ("Settling between cases")
has the measurements.
"""
from __future__ import annotations

import time
from collections.abc import Callable

SLICE_S = 0.02  # one sleep: the wait overshoots the end of the spinning by at most this much
QUIET = 0.1  # a slice counts as quiet when the process used at most this fraction of one core during it
LIMIT_S = 1.0  # give up waiting (a thread of ours doing real work keeps the process busy for good)


def settle(slice_s: float = SLICE_S, quiet: float = QUIET, limit_s: float = LIMIT_S,
           cpu_clock: Callable[[], float] = time.process_time, sleep: Callable[[float], None] = time.sleep) -> float:
    """Sleep in `slice_s` slices until one passes with this process using at most `quiet` of a core.

    Waits at least one slice and at most about `limit_s` (then returns even if threads still spin); returns the
    seconds slept (slices times `slice_s`). `cpu_clock` and `sleep` are the process CPU clock and the sleep to use
    (replaceable for tests).
    """
    if slice_s <= 0 or limit_s < slice_s:
        raise ValueError(f"settle needs 0 < slice_s <= limit_s, got slice_s={slice_s}, limit_s={limit_s}")
    most = max(1, int(limit_s / slice_s + 1e-9))
    slices = 0
    while True:
        slices += 1
        before = cpu_clock()
        sleep(slice_s)
        if cpu_clock() - before <= quiet * slice_s or slices == most:
            return slices * slice_s
