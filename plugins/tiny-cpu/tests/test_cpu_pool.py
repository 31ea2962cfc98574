"""The C worker pool: kernels split across workers run every share once, from any thread, after fork, with or without
the pool."""
from __future__ import annotations

import ctypes
import multiprocessing
import os
import pathlib
import threading

import numpy as np
import pytest
import tiny_cpu.pool as pool_module
from tiny_cpu.allocator import CPUAllocator
from tiny_cpu.compiler import ClangCompiler
from tiny_cpu.renderer import entry_point
from tiny_cpu.runtime import CPUProgram

from tinycore.device.buffer import Buffer
from tinycore.dtype import dtypes

SCALE_SOURCE = """void tc_scale(float* restrict data0, const float* restrict data1, const int count,
              const int core_id) {
  for (int i = core_id * count; i < (core_id + 1) * count; i++) data0[i] = data1[i] * 3.0f + (float)core_id;
}
""" + entry_point("tc_scale", ["float* restrict data0", "const float* restrict data1", "const int count"]) + "\n"


def buffer_from(array: np.ndarray) -> Buffer:
    """A CPU buffer holding `array` (float32)."""
    buffer = Buffer("CPU", array.size, dtypes.float32, allocator=CPUAllocator()).ensure_allocated()
    buffer.copyin(memoryview(np.ascontiguousarray(array, np.float32).tobytes()))
    return buffer


def expected_scale(source: np.ndarray, shares: int, count: int) -> np.ndarray:
    """What tc_scale writes: 3 x + the share's number, share by share."""
    return source * 3 + np.repeat(np.arange(shares, dtype=np.float32), count)


def run_scale(shares: int, count: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Launch tc_scale over `shares` workers; returns (output, numpy's answer)."""
    source = np.random.default_rng(seed).standard_normal(shares * count).astype(np.float32)
    output, data = buffer_from(np.zeros_like(source)), buffer_from(source)
    program = CPUProgram("tc_scale", ClangCompiler().compile_cached(SCALE_SOURCE))
    program(output._buf, data._buf, global_size=(shares, 1, 1), vals=(count,))
    return output.numpy(), expected_scale(source, shares, count)


def test_entry_point_unpacks_buffers_and_values() -> None:
    text = entry_point("kernel_a", ["float* restrict data0", "const int* restrict data1", "const int n"])
    assert text.startswith("void kernel_a_entry(const long long *arguments, const int core_id)")
    assert "(float*)(__INTPTR_TYPE__)arguments[0]" in text and "(const int*)(__INTPTR_TYPE__)arguments[1]" in text
    assert "(int)arguments[2], core_id);" in text


def test_pool_is_built_here() -> None:
    assert pool_module.parallel_runner() is not None


@pytest.mark.parametrize("shares", [2, 3, 7, 16])
def test_every_share_runs_once(shares: int) -> None:
    got, expected = run_scale(shares, 257, seed=shares)
    np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_more_shares_than_threads_and_one_thread() -> None:
    runner = pool_module.parallel_runner()
    assert runner is not None
    program = CPUProgram("tc_scale", ClangCompiler().compile_cached(SCALE_SOURCE))
    for threads in (1, 3):
        source = np.arange(40, dtype=np.float32)
        output, data = buffer_from(np.zeros(40, np.float32)), buffer_from(source)
        arguments = (ctypes.c_longlong * 3)(output._buf, data._buf, 4)
        assert runner(program._entry, arguments, 10, threads) == 0
        np.testing.assert_allclose(output.numpy(), expected_scale(source, 10, 4))


def test_launches_from_several_threads_at_once() -> None:
    failures: list[BaseException] = []

    def launch(seed: int) -> None:
        try:
            for round_number in range(20):
                got, expected = run_scale(4, 1000, seed=seed * 100 + round_number)
                np.testing.assert_allclose(got, expected, rtol=1e-6)
        except BaseException as error:  # noqa: BLE001 - reported below
            failures.append(error)

    threads = [threading.Thread(target=launch, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads) and failures == []


def _child_launch(queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    got, expected = run_scale(4, 64, seed=9)
    queue.put(bool(np.allclose(got, expected)))


def test_forked_child_gets_a_fresh_pool() -> None:
    run_scale(4, 64)  # the parent's worker threads exist now; a forked child has none of them
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_child_launch, args=(queue,))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == 0, "the child hung or crashed launching on the pool after fork"
    assert queue.get(timeout=5) is True


def test_without_the_pool_python_threads_run_the_shares(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(pool_module._state, "runner", None)
    got, expected = run_scale(5, 100, seed=3)
    np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_batch_compile_renames_entry_points() -> None:
    compiler = ClangCompiler()
    other = SCALE_SOURCE.replace("* 3.0f", "* 5.0f")
    library, symbols = compiler.compile_batch([("tc_scale", SCALE_SOURCE), ("tc_scale", other)])
    assert len(set(symbols)) == 2
    source = np.arange(8, dtype=np.float32)
    for symbol, factor in zip(symbols, (3, 5), strict=True):
        program = CPUProgram(symbol, library)
        assert program._entry is not None
        output, data = buffer_from(np.zeros(8, np.float32)), buffer_from(source)
        program(output._buf, data._buf, global_size=(2, 1, 1), vals=(4,))
        np.testing.assert_allclose(output.numpy(), source * factor + np.repeat([0.0, 1.0], 4))


_AFFINITY_PROBE = """
import ctypes, os, sys
import numpy as np
import tiny_cpu.pool as pool_module
from tiny_cpu.compiler import ClangCompiler
from tiny_cpu.runtime import CPUProgram
sys.path.insert(0, sys.argv[1])
from test_cpu_pool import SCALE_SOURCE, buffer_from
runner = pool_module.parallel_runner()
program = CPUProgram("tc_scale", ClangCompiler().compile_cached(SCALE_SOURCE))
output, data = buffer_from(np.zeros(64, np.float32)), buffer_from(np.arange(64, dtype=np.float32))
arguments = (ctypes.c_longlong * 3)(output._buf, data._buf, 8)
threads = max(2, len(os.sched_getaffinity(0)))
assert runner(program._entry, arguments, 8, threads) == 0
np.testing.assert_allclose(output.numpy(), np.arange(64) * 3 + np.repeat(np.arange(8), 8))
for task in sorted(os.listdir("/proc/self/task")):
    print(" ".join(str(cpu) for cpu in sorted(os.sched_getaffinity(int(task)))))
"""


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="thread affinity is Linux's (the pool sets none "
                                                                   "elsewhere)")
def test_workers_are_kept_off_the_launching_threads_cpu() -> None:
    # a worker woken on the launching thread's CPU took turns with it there while another CPU idled: after a launch
    # every pool worker may run on any allowed CPU but one (the launching thread's), the other threads anywhere; with
    # one allowed CPU the worker keeps it (an empty mask is never set)
    import pathlib
    import subprocess
    import sys
    allowed = sorted(os.sched_getaffinity(0))
    result = subprocess.run([sys.executable, "-c", _AFFINITY_PROBE, str(pathlib.Path(__file__).parent)],
                            capture_output=True, text=True, check=True)
    masks = [[int(cpu) for cpu in line.split()] for line in result.stdout.splitlines()]
    narrowed = [mask for mask in masks if mask != allowed]
    assert len(narrowed) == len(allowed) - 1, masks  # one worker per CPU besides the launching thread (or none)
    assert all(len(mask) == len(allowed) - 1 and set(mask) < set(allowed) for mask in narrowed), masks
    assert len({tuple(mask) for mask in narrowed}) == min(1, len(narrowed)), masks  # all kept off the same CPU


_WAKE_PROBE = r"""
import ctypes, sys, time
sys.path.insert(0, sys.argv[1])
import numpy as np
import tiny_cpu.pool as pool_module
from test_cpu_pool import SCALE_SOURCE, buffer_from, expected_scale
from tiny_cpu.compiler import ClangCompiler
from tiny_cpu.runtime import CPUProgram

def wait_for(condition, what):
    deadline = time.monotonic() + 10
    while not condition(pool_module.pool_state()):
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}: {pool_module.pool_state()}")
        time.sleep(0.0005)

library = pool_module.pool_library()
runner = pool_module.parallel_runner()
program = CPUProgram("tc_scale", ClangCompiler().compile_cached(SCALE_SOURCE))
library.tinycore_pool_wake()  # no worker started yet: nothing to wake
assert pool_module.pool_state()["wakes"] == 0, pool_module.pool_state()
source = np.arange(64, dtype=np.float32)
output, data = buffer_from(np.zeros(64, np.float32)), buffer_from(source)
arguments = (ctypes.c_longlong * 3)(output._buf, data._buf, 16)
assert runner(program._entry, arguments, 4, 2) == 0
np.testing.assert_allclose(output.numpy(), expected_scale(source, 4, 16))
wait_for(lambda state: state["sleeping"] == 1, "the worker to sleep after its poll")
library.tinycore_pool_wake()
state = pool_module.pool_state()
assert state["wakes"] == 1 and state["wake_useful"] == 1, state
wait_for(lambda state: state["sleeping"] == 0 or state["wake_useful"] == 0, "the worker to wake")
# no launch came: after its poll the worker sleeps again and further wakes do nothing
wait_for(lambda state: state["sleeping"] == 1 and state["wake_useful"] == 0, "the worker to give up its poll")
library.tinycore_pool_wake()
assert pool_module.pool_state()["wakes"] == 1, pool_module.pool_state()
# a parallel launch makes wakes useful again, and a launch right after a wake runs every share
assert runner(program._entry, arguments, 4, 2) == 0
assert pool_module.pool_state()["wake_useful"] == 1, pool_module.pool_state()
# "sleeping" can still read 1 from before the launch while the worker has yet to run after it; a wake that finds it
# awake does nothing and is not counted, so wake until one lands on the sleeping worker
deadline = time.monotonic() + 10
while pool_module.pool_state()["wakes"] < 2:
    if time.monotonic() > deadline:
        raise SystemExit(f"no wake reached the sleeping worker: {pool_module.pool_state()}")
    wait_for(lambda state: state["sleeping"] == 1, "the worker to sleep again")
    library.tinycore_pool_wake()
output.copyin(memoryview(np.zeros(64, np.float32).tobytes()))
assert runner(program._entry, arguments, 4, 2) == 0
np.testing.assert_allclose(output.numpy(), expected_scale(source, 4, 16))
assert pool_module.pool_state()["wakes"] == 2, pool_module.pool_state()
print("ok")
"""


def test_wake_readies_sleeping_workers_until_a_wake_goes_unused() -> None:
    # expect_launches wakes the sleeping worker ahead of a launch; a wake no launch followed turns wakes off (eager
    # code of one-share kernels must not keep a core polling) until the next parallel launch. In a fresh process,
    # so the pool's counters start at zero.
    import pathlib
    import subprocess
    import sys
    result = subprocess.run([sys.executable, "-c", _WAKE_PROBE, str(pathlib.Path(__file__).parent)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stdout + result.stderr


_FALLBACK_PROBE = r"""
import sys
sys.path.insert(0, sys.argv[1])
import numpy as np
import tiny_cpu.pool as pool_module
pool_module.prebuilt_path = lambda: None  # as in a source checkout on PYTHONPATH, where pip built nothing
if sys.argv[2] == "stale":  # a prebuilt library without the pool's functions (as one built from an older pool.c)
    import ctypes.util
    pool_module.prebuilt_path = lambda: ctypes.util.find_library("c")
if sys.argv[2] == "no-compiler":
    try:
        pool_module.pool_library()
    except RuntimeError as error:
        print(error)
    raise SystemExit(0)
from test_cpu_pool import run_scale
got, expected = run_scale(5, 33, seed=7)
np.testing.assert_allclose(got, expected, rtol=1e-6)
print(pool_module.pool_origin(), pool_module._state["reasons"])
"""


def test_without_the_prebuilt_pool_it_is_compiled_on_first_use() -> None:
    import subprocess
    import sys
    result = subprocess.run([sys.executable, "-c", _FALLBACK_PROBE, str(pathlib.Path(__file__).parent), "compile"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stdout.strip() == "compiled ['no prebuilt tiny_cpu._pool is installed']", \
        result.stdout + result.stderr


def test_a_prebuilt_library_without_the_pools_functions_is_not_used() -> None:
    import subprocess
    import sys
    result = subprocess.run([sys.executable, "-c", _FALLBACK_PROBE, str(pathlib.Path(__file__).parent), "stale"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stdout.startswith("compiled "), result.stdout + result.stderr
    assert "lacks tinycore_parallel, tinycore_pool_after_fork" in result.stdout, result.stdout
    assert "(reinstall tiny-cpu to rebuild it)" in result.stdout, result.stdout


def test_without_the_prebuilt_pool_or_a_compiler_the_error_says_what_to_install(tmp_path: pathlib.Path) -> None:
    import subprocess
    import sys
    # no compiler on PATH, and an empty kernel cache: a pool compiled by an earlier run must not stand in for it
    environment = {key: value for key, value in os.environ.items() if key != "CC"}
    environment.update(PATH=str(tmp_path), TINYCORE_CACHE_DIR=str(tmp_path))
    result = subprocess.run([sys.executable, "-c", _FALLBACK_PROBE, str(pathlib.Path(__file__).parent),
                             "no-compiler"], capture_output=True, text=True, timeout=120, env=environment)
    assert result.returncode == 0, result.stdout + result.stderr
    message = result.stdout.strip()
    assert message.startswith("the CPU worker pool is not available"), message
    assert "no prebuilt tiny_cpu._pool is installed" in message and "no C compiler found" in message, message
    assert "pip install -e plugins/tiny-cpu" in message and "install gcc or clang" in message, message
