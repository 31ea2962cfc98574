"""bench/settle.py: the pause between interleaved benchmark cases waits while the process burns CPU, and no longer.

A scripted CPU clock stands in for the process's threads (no real sleeping, no timing asserts): each slice reports how
much CPU the process used while `settle` slept.
"""
from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import pytest

SETTLE_PATH = Path(__file__).resolve().parents[2] / "bench" / "settle.py"


def _settle() -> Callable[..., float]:
    spec = importlib.util.spec_from_file_location("bench_settle", SETTLE_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    settle: Callable[..., float] = module.settle
    return settle


class ScriptedProcess:
    """A CPU clock that advances by the next scripted amount (CPU seconds) during each sleep."""

    def __init__(self, cpu_per_slice: list[float]):
        self.cpu_per_slice = list(cpu_per_slice)
        self.cpu = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.cpu

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.cpu += self.cpu_per_slice.pop(0) if self.cpu_per_slice else 0.0


def test_returns_after_one_slice_when_nothing_spins() -> None:
    process = ScriptedProcess([0.0])
    assert _settle()(slice_s=0.02, cpu_clock=process.clock, sleep=process.sleep) == pytest.approx(0.02)
    assert process.sleeps == [0.02]


def test_waits_while_a_thread_spins() -> None:
    # one thread at a full core for five slices (like OpenBLAS after a matmul), then idle
    process = ScriptedProcess([0.02] * 5 + [0.0005])
    waited = _settle()(slice_s=0.02, quiet=0.1, cpu_clock=process.clock, sleep=process.sleep)
    assert len(process.sleeps) == 6 and waited == pytest.approx(0.12)


def test_a_little_cpu_counts_as_quiet_and_more_does_not() -> None:
    # 10% of a core is the default bound: 1.9 ms of CPU in a 20 ms slice is quiet, 2.5 ms is not
    process = ScriptedProcess([0.0025, 0.0019])
    _settle()(slice_s=0.02, cpu_clock=process.clock, sleep=process.sleep)
    assert len(process.sleeps) == 2


def test_stops_at_the_limit_when_the_process_stays_busy() -> None:
    process = ScriptedProcess([0.04] * 1000)  # two threads busy for good
    waited = _settle()(slice_s=0.02, limit_s=0.2, cpu_clock=process.clock, sleep=process.sleep)
    assert len(process.sleeps) == 10 and waited == pytest.approx(0.2)


@pytest.mark.parametrize("slice_s, limit_s", [(0.0, 1.0), (-0.01, 1.0), (0.5, 0.1)])
def test_rejects_a_slice_that_cannot_fit(slice_s: float, limit_s: float) -> None:
    with pytest.raises(ValueError, match="slice_s"):
        _settle()(slice_s=slice_s, limit_s=limit_s)


_HEAP_PROBE = """
import ctypes, sys
sys.path.insert(0, sys.argv[1])
import settle
libc = ctypes.CDLL(None)
class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                    "fsmblks", "uordblks", "fordblks", "keepcost")]
libc.mallinfo2.restype = Info
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
if sys.argv[2] == "keep":
    assert settle.keep_freed_memory()
before = libc.mallinfo2().hblkhd
block = libc.malloc(16 << 20)
print(libc.mallinfo2().hblkhd - before)
libc.free(block)
"""


@pytest.mark.parametrize("mode, mapped", [("keep", False), ("default", True)])
def test_keep_freed_memory_serves_a_16_mb_block_from_the_heap(mode: str, mapped: bool) -> None:
    # glibc maps a 16 MB block on its own by default (its pages fault in afresh after every free and malloc); after
    # keep_freed_memory() it comes from the heap, where a freed block is reused (torch's conv2d output, bench_cpu)
    import platform
    import subprocess
    import sys
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        # mallopt and mallinfo2 are glibc's: elsewhere keep_freed_memory changes nothing and says so
        probe = f"import sys; sys.path.insert(0, {str(SETTLE_PATH.parent)!r}); import settle; " \
                "assert settle.keep_freed_memory() is False"
        subprocess.run([sys.executable, "-c", probe], check=True)
        return
    result = subprocess.run([sys.executable, "-c", _HEAP_PROBE, str(SETTLE_PATH.parent), mode], capture_output=True,
                            text=True, check=True)
    assert (int(result.stdout) >= 16 << 20) == mapped, result.stdout
