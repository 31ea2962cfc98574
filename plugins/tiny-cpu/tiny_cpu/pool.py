"""A worker pool written in C: one kernel launch split across CPU cores without taking the GIL per worker.

Kernels split across workers (SPECIAL "core_id") also get an entry point `NAME_entry(const long long *arguments,
int core_id)` from the C renderer, which unpacks buffer addresses and variable values from one array. The pool
library built here runs `entry(arguments, core_id)` for every core_id on persistent POSIX threads; the calling
thread takes a share itself, and the call returns once every share is done. One ctypes call per launch: a
Python-level pool costs a lock, a queue and a thread switch per worker, more than a small kernel's own run time.

The same library holds the CPU device's command queues: a submission of commands (exec, signal,
wait, copy, timestamp) runs on the calling thread in C until a wait must block, and the rest on the queue's own
thread, so a queue never returns to Python between commands.

The C is pool.c, built into the wheel when tiny-cpu is installed (the extension tiny_cpu._pool, see setup.py), so
running kernels needs no C compiler: the X86 and LLVM renderers run on a machine without one. A source checkout
without that build (tiny_cpu on PYTHONPATH) compiles pool.c on first use with the CPU device's compiler instead
(cached like any kernel). A forked child (os.fork, multiprocessing) starts from an empty pool: the parent's threads
do not exist there. Where neither works, `parallel_runner()` returns None, the runtime falls back to Python threads,
and `pool_library()` (which the CPU device's queues need) raises an error that says what to install.
"""
from __future__ import annotations

import ctypes
import importlib.util
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

SOURCE_PATH = Path(__file__).with_name("pool.c")
"""The C of the pool and the queues; built into the extension tiny_cpu._pool when tiny-cpu is installed."""

PREBUILT_MODULE = "tiny_cpu._pool"
"""The name the prebuilt library is installed under (setup.py): a shared object found like an extension module."""

EXPORTS = ("tinycore_parallel", "tinycore_pool_after_fork", "tinycore_pool_wake", "tinycore_pool_state",
           "tinycore_queue_create", "tinycore_queue_submit", "tinycore_queue_submissions", "tinycore_queue_broken",
           "tinycore_queue_reset")
"""The functions of pool.c that this module binds: a library lacking one is not used."""


def pool_source() -> str:
    """The C source of the pool and the queues (what setup.py builds, and what a source checkout compiles)."""
    return SOURCE_PATH.read_text()


def prebuilt_path() -> str | None:
    """The path of the pool library built when tiny-cpu was installed, or None (a source checkout on PYTHONPATH, or
    an install whose build of the optional extension failed)."""
    try:
        spec = importlib.util.find_spec(PREBUILT_MODULE)
    except (ImportError, ValueError):
        return None
    origin = spec.origin if spec is not None else None
    return origin if origin and os.path.isfile(origin) else None


_lock = threading.Lock()
_state: dict[str, Any] = {}


def parallel_runner() -> Callable[[int, Any, int, int], int] | None:
    """The pool's `tinycore_parallel(entry_address, arguments, shares, threads)`, or None without a C pool."""
    with _lock:
        if "runner" not in _state:
            _state["runner"] = _build()
        return _state["runner"]


def _build() -> Callable[[int, Any, int, int], int] | None:
    """Load the prebuilt pool library, else compile it; None when neither works here (the reasons are kept for
    pool_library's error)."""
    library, origin, reasons = _open_library()
    _state["source"], _state["reasons"] = origin, reasons
    if library is None:
        return None
    function = library.tinycore_parallel
    function.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    function.restype = ctypes.c_int
    after_fork = library.tinycore_pool_after_fork
    after_fork.restype = None
    os.register_at_fork(after_in_child=after_fork)
    library.tinycore_queue_create.argtypes = [ctypes.c_longlong]
    library.tinycore_queue_create.restype = ctypes.c_void_p
    library.tinycore_queue_submit.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong]
    library.tinycore_queue_submit.restype = ctypes.c_int
    library.tinycore_queue_submissions.argtypes = [ctypes.c_void_p]
    library.tinycore_queue_submissions.restype = ctypes.c_longlong
    library.tinycore_queue_broken.argtypes = [ctypes.c_void_p]
    library.tinycore_queue_broken.restype = ctypes.c_int
    library.tinycore_queue_reset.argtypes = [ctypes.c_void_p]
    library.tinycore_queue_reset.restype = None
    library.tinycore_pool_wake.argtypes = []
    library.tinycore_pool_wake.restype = None
    library.tinycore_pool_state.argtypes = [ctypes.c_void_p]
    library.tinycore_pool_state.restype = None
    _state["library"] = library  # kept loaded for the life of the process
    return function  # type: ignore[no-any-return]


def pool_state() -> dict[str, int]:
    """The C pool's worker threads now: `started`, `sleeping` (blocked until a launch or a wake), `wakes` (wakes
    made so far) and `wake_useful` (0 after a wake that no parallel launch followed: wakes do nothing until one
    does)."""
    values = (ctypes.c_longlong * 4)()
    pool_library().tinycore_pool_state(values)
    return dict(zip(("started", "sleeping", "wakes", "wake_useful"), (int(value) for value in values), strict=True))


def pool_library() -> ctypes.CDLL:
    """The pool and queue library (built on first use); RuntimeError when it cannot be built here."""
    if parallel_runner() is None or "library" not in _state:
        reasons = "; ".join(_state.get("reasons", [])) or "unknown"
        raise RuntimeError("the CPU worker pool is not available: tiny-cpu was installed without its prebuilt pool "
                           "library and it could not be compiled here (it needs a C compiler and POSIX threads; "
                           f"{reasons}). Reinstall tiny-cpu with pip, which builds it (pip install --force-reinstall "
                           "tiny-cpu, or pip install -e plugins/tiny-cpu in a checkout), or install gcc or clang, "
                           "or set CC")
    library: ctypes.CDLL = _state["library"]
    return library


def pool_origin() -> str | None:
    """How the pool library was obtained: "prebuilt" (built when tiny-cpu was installed), "compiled" (on first use,
    with the host's C compiler), or None when it is not available."""
    parallel_runner()
    origin: str | None = _state.get("source")
    return origin


def _open_library() -> tuple[ctypes.CDLL | None, str | None, list[str]]:
    """The pool library: the prebuilt one where it loads, else compiled from pool.c with the CPU device's compiler.
    Returns it (or None), how it was obtained (see pool_origin) and why each way that was tried failed."""
    reasons: list[str] = []
    path = prebuilt_path()
    if path is not None:
        try:
            library = ctypes.CDLL(path)
            missing = [name for name in EXPORTS if not hasattr(library, name)]
            if not missing:
                return library, "prebuilt", reasons
            # an editable install's build from before pool.c gained a function: compile the current source instead
            reasons.append(f"the prebuilt {path} lacks {', '.join(missing)} (reinstall tiny-cpu to rebuild it)")
        except OSError as error:
            reasons.append(f"the prebuilt {path} does not load: {error}")
    else:
        reasons.append(f"no prebuilt {PREBUILT_MODULE} is installed")
    try:
        from tiny_cpu.compiler import ClangCompiler
        from tiny_cpu.runtime import _load
        library, _ = _load(ClangCompiler().compile_cached(pool_source()))
        for name in EXPORTS:  # a library without the pool's functions is no pool
            getattr(library, name)
    except Exception as error:  # noqa: BLE001 - any failure means: no C pool (the runtime uses Python threads)
        reasons.append(f"compiling it failed: {str(error).strip().splitlines()[0] if str(error).strip() else error}")
        return None, None, reasons
    return library, "compiled", reasons
