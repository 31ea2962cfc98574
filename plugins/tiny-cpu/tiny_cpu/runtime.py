"""The CPU runtime: load a shared object from memory and run its kernel on one or more worker threads."""
from __future__ import annotations

import ctypes
import os
import queue
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from tiny_cpu.pool import parallel_runner
from tinycore.helpers import NUM_CPU_THREADS, cache_dir

_dlclose: Callable[[int], None] | None
try:
    from _ctypes import dlclose as _dlclose
except ImportError:  # not a POSIX dlopen platform
    _dlclose = None


# Paths of memfd-loaded libraries that are still loaded. The dynamic loader recognises a library by the path it was
# opened with, so a path is never reused while its library is loaded: a descriptor number that comes back is
# spelled with extra slashes instead (/proc/self/fd//5), which names the same file.
_LIVE_PATHS: set[str] = set()
# Reentrant: the cyclic collector may run a dropped program's __del__ (which releases its path under this lock) on a
# thread that holds it already, from an allocation inside ctypes.CDLL in _load; a plain Lock deadlocked there.
_PATHS_LOCK = threading.RLock()


def _load(lib: bytes) -> tuple[ctypes.CDLL, str | None]:
    """Load a shared object's bytes: from a memfd where the OS has one, else from a file removed right after.

    Returns the library and the memfd path to release when it is unloaded (None for the file fallback).
    """
    if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
        descriptor = os.memfd_create("tinycore-kernel", getattr(os, "MFD_CLOEXEC", 0))
        try:
            with open(descriptor, "wb", closefd=False) as file:
                file.write(lib)
            with _PATHS_LOCK:
                slashes = 1
                while f"/proc/self/fd{'/' * slashes}{descriptor}" in _LIVE_PATHS:
                    slashes += 1
                path = f"/proc/self/fd{'/' * slashes}{descriptor}"
                library = ctypes.CDLL(path)
                _LIVE_PATHS.add(path)
            return library, path
        except OSError:
            pass
        finally:
            os.close(descriptor)
    for directory in (cache_dir() / "cpu-programs", None):
        try:
            if directory is not None:
                directory.mkdir(parents=True, exist_ok=True)
                path = str(directory / f"{uuid.uuid4().hex}.so")
            else:
                import tempfile
                path = os.path.join(tempfile.gettempdir(), f"tinycore-{uuid.uuid4().hex}.so")
            with open(path, "wb") as file:
                file.write(lib)
            try:
                return ctypes.CDLL(path), None
            finally:
                os.unlink(path)
        except OSError:
            if directory is None:
                raise
    raise OSError("cannot load the compiled kernel")  # pragma: no cover - the loop returns or raises


class _WorkerPool:
    """Persistent daemon threads running kernel calls (ctypes releases the GIL while a kernel runs)."""

    def __init__(self) -> None:
        self.tasks: queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...], _Completion]] = queue.SimpleQueue()
        self.threads: list[threading.Thread] = []
        self.lock = threading.Lock()

    def ensure(self, count: int) -> None:
        with self.lock:
            while len(self.threads) < count:
                thread = threading.Thread(target=self._work, name=f"tinycore-cpu-{len(self.threads)}", daemon=True)
                thread.start()
                self.threads.append(thread)

    def _work(self) -> None:
        while True:
            function, arguments, completion = self.tasks.get()
            completion.run(function, arguments)

    def run(self, function: Callable[..., Any], calls: list[tuple[Any, ...]], workers: int) -> None:
        """Run `function(*arguments)` for each entry of `calls` on up to `workers` threads (the caller included)."""
        completion = _Completion(len(calls))
        self.ensure(min(workers, len(calls)) - 1)
        local: list[tuple[Any, ...]] = []
        for number, arguments in enumerate(calls):
            # the caller takes a share of the calls itself, the pool the rest
            if number % min(workers, len(calls)) == 0:
                local.append(arguments)
            else:
                self.tasks.put((function, arguments, completion))
        for arguments in local:
            completion.run(function, arguments)
        completion.wait()


class _Completion:
    """Counts finished calls of one launch and keeps the first error."""

    def __init__(self, count: int):
        self.remaining = count
        self.error: BaseException | None = None
        self.condition = threading.Condition()

    def run(self, function: Callable[..., Any], arguments: tuple[Any, ...]) -> None:
        try:
            function(*arguments)
        except BaseException as error:  # noqa: BLE001 - reported to the launching thread
            self.error = self.error or error
        with self.condition:
            self.remaining -= 1
            if self.remaining == 0:
                self.condition.notify_all()

    def wait(self) -> None:
        with self.condition:
            while self.remaining:
                self.condition.wait()
        if self.error is not None:
            raise self.error


_POOL = _WorkerPool()


_CPU_COUNT = os.cpu_count() or 1


def worker_count() -> int:
    """The most CPU workers a kernel may use: NUM_CPU_THREADS, or the number of CPUs when it is 0."""
    return max(1, NUM_CPU_THREADS.value or _CPU_COUNT)


class CPUProgram:
    """A compiled kernel: `program(*addresses, global_size=(N, 1, 1), vals=(ints), wait=False)`.

    Buffers are raw addresses (the CPU allocator's handles), `vals` the DEFINE_VAR values in parameter order.
    `global_size[0]` is the number of workers: the kernel runs once per core_id 0..N-1, in parallel on up to
    NUM_CPU_THREADS threads. With `wait=True` the call returns the elapsed time in seconds.
    """

    def __init__(self, name: str, lib: bytes):
        self.name = name
        self._library: ctypes.CDLL | None
        self._library, self._path = _load(lib)
        try:
            self._function = getattr(self._library, name)
        except AttributeError as error:
            self._release()
            raise RuntimeError(f"the compiled library has no function {name!r}") from error
        self._function.restype = None
        self._signature: tuple[int, int] | None = None
        entry = getattr(self._library, f"{name}_entry", None)
        self._entry: int | None = ctypes.cast(entry, ctypes.c_void_p).value if entry is not None else None

    def _set_signature(self, buffer_count: int, value_count: int) -> None:
        signature = (buffer_count, value_count)
        if signature != self._signature:
            self._function.argtypes = [ctypes.c_void_p] * buffer_count + [ctypes.c_int32] * (value_count + 1)
            self._signature = signature

    def __call__(self, *buffers: Any, global_size: Sequence[int] = (1, 1, 1), local_size: Sequence[int] | None = None,
                 vals: Sequence[int] = (), wait: bool = False) -> float | None:
        self._set_signature(len(buffers), len(vals))
        workers = int(global_size[0]) if global_size else 1
        start = time.perf_counter() if wait else 0.0
        if workers <= 1:
            self._function(*buffers, *vals, 0)
        else:
            self._run_parallel((*buffers, *vals), workers)
        return time.perf_counter() - start if wait else None

    def _run_parallel(self, arguments: tuple[Any, ...], workers: int) -> None:
        """Run the kernel once per core_id 0..workers-1: on the C pool when it and the entry point exist."""
        runner = parallel_runner() if self._entry is not None else None
        if runner is not None and self._entry is not None:
            packed = (ctypes.c_longlong * max(1, len(arguments)))(*(int(argument or 0) for argument in arguments))
            runner(self._entry, packed, workers, worker_count())
            return
        _POOL.run(self._function, [(*arguments, core_id) for core_id in range(workers)], worker_count())

    def launcher(self, global_size: Sequence[int], local_size: Sequence[int] | None = None
                 ) -> Callable[[Sequence[Any]], None]:
        """A function launching this program on a list of buffer addresses (no variables) with `global_size`.

        The per-call work is the ctypes call itself: one worker calls the kernel directly on this thread.
        """
        workers = int(global_size[0]) if global_size else 1
        function = self._function

        def launch_one(buffers: Sequence[Any]) -> None:
            if self._signature != (len(buffers), 0):
                self._set_signature(len(buffers), 0)
            function(*buffers, 0)

        runner = parallel_runner() if self._entry is not None else None
        entry, threads = self._entry or 0, worker_count()

        def launch_many(buffers: Sequence[Any]) -> None:
            if runner is not None:
                packed = (ctypes.c_longlong * max(1, len(buffers)))(*(address or 0 for address in buffers))
                runner(entry, packed, workers, threads)
                return
            if self._signature != (len(buffers), 0):
                self._set_signature(len(buffers), 0)
            _POOL.run(function, [(*buffers, core_id) for core_id in range(workers)], worker_count())

        return launch_one if workers <= 1 else launch_many

    def _release(self) -> None:
        """Unload a memfd-loaded library so its path may name another one (file-loaded ones stay loaded)."""
        library, path = getattr(self, "_library", None), getattr(self, "_path", None)
        if library is not None and path is not None:
            with _PATHS_LOCK:
                if _dlclose is not None:
                    _dlclose(library._handle)
                    _LIVE_PATHS.discard(path)
        self._library, self._path = None, None

    def __del__(self) -> None:
        try:
            self._function = None
            self._release()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


class EntryProgram:
    """A kernel reached only through its entry point `(const long long *arguments, int core_id)` at address
    `_entry` (LLVM-linked objects, x86 machine code): `program(*addresses, global_size=(N, 1, 1), vals=(ints),
    wait)` packs the arguments once and runs every core_id on the worker pool (or in turn on this thread)."""

    name: str

    def __init__(self, name: str, entry: int):
        self.name = name
        self._entry: int | None = entry
        self._entry_address: int = entry
        self._call = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int32)(entry)

    def __call__(self, *buffers: Any, global_size: Sequence[int] = (1, 1, 1), local_size: Sequence[int] | None = None,
                 vals: Sequence[int] = (), wait: bool = False) -> float | None:
        """Run the kernel on buffer addresses and variable values (once per core_id below global_size[0])."""
        arguments = [int(argument or 0) for argument in (*buffers, *vals)]
        packed = (ctypes.c_longlong * max(1, len(arguments)))(*arguments)
        workers = int(global_size[0]) if global_size else 1
        start = time.perf_counter() if wait else 0.0
        runner = parallel_runner() if workers > 1 else None
        if runner is not None:
            runner(self._entry_address, packed, workers, worker_count())
        else:
            for core_id in range(workers):
                self._call(ctypes.addressof(packed), core_id)
        return time.perf_counter() - start if wait else None

    def launcher(self, global_size: Sequence[int], local_size: Sequence[int] | None = None
                 ) -> Callable[[Sequence[Any]], None]:
        """A function launching this program on a list of buffer addresses with `global_size`."""
        def launch(buffers: Sequence[Any]) -> None:
            self(*buffers, global_size=global_size)
        return launch
