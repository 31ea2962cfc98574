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


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
HEAP_MMAP_THRESHOLD = 100_000_000
HEAP_TRIM_THRESHOLD = 1_000_000_000


def keep_freed_memory() -> bool:
    """Make glibc's malloc serve big blocks from the heap and keep freed memory there (mallopt: mmap threshold 100 MB,
    trim threshold 1 GB), as `MALLOC_MMAP_THRESHOLD_=100000000 MALLOC_TRIM_THRESHOLD_=1000000000` would.

    A library that allocates a fresh output per call (torch's conv2d: 15.7 MB) then reuses memory instead of mapping
    new pages and faulting every one of them in: with glibc's defaults torch's conv2d measured 37-50 GFLOPS or
    100-130 depending on the allocator's history in the process. tinycore's CPU buffers are cached by its allocator
    either way. Returns False where the C library has no mallopt (not glibc); nothing changes then."""
    import ctypes
    import ctypes.util
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, HEAP_MMAP_THRESHOLD) and mallopt(M_TRIM_THRESHOLD, HEAP_TRIM_THRESHOLD))
