"""PYTHON as a queue device: commands are Python tuples, run in order by one Python thread per hardware queue.

This is the smallest complete queue plugin. A real device writes its hardware's command format in the `_encode_*`
hooks and hands the words to the hardware in `_submit`; here a command is a tuple `(operation, operands...)` and
the "hardware" is a thread that runs the tuples. Signals are the core's default: 16 bytes of host memory.

The hooks tinycore calls: `tiny_hcq_queues(device)` returns HCQQueues(PythonQueue, PythonCopyQueue, PythonSignal)
(hooks.py); the device (device.py) derives from tinycore.hcq.HCQCompiled and its programs from HCQProgram.
"""
from __future__ import annotations

import queue as thread_queue
import threading
import time
from collections.abc import Sequence
from typing import Any

from tinycore.hcq import HCQArguments, HCQCompiled, HCQProgram, HCQSignal, HWQueue
from tinycore.helpers import HCQ_TIMEOUT_MS
from tinycore.uop.uop import UOp


class PythonSignal(HCQSignal):
    """Timestamps in nanoseconds of time.perf_counter_ns (the core's default memory layout)."""

    timestamp_divider = 1000.0


class PythonArguments(HCQArguments):
    """An argument block as a Python list: the buffers' memoryviews, then the integer values."""

    def __init__(self, buffers: Sequence[Any], values: Sequence[int]):
        super().__init__(memoryview(b""), 0, None, len(buffers))
        self.words: list[Any] = [*buffers, *values]

    def set_buffer(self, index: int, handle: Any) -> None:
        """Point buffer argument `index` at another memoryview."""
        self.words[index] = handle

    def set_value(self, index: int, value: int) -> None:
        """Set integer argument `index`."""
        self.words[self.buffer_count + index] = value


class PythonQueue(HWQueue):
    """Compute queue: one tuple per command, appended with `emit`."""

    hardware = "compute"

    def _encode_wait(self, signal: HCQSignal, value: int | UOp) -> None:
        self.emit("wait", signal, value)

    def _encode_signal(self, signal: HCQSignal, value: int | UOp) -> None:
        self.emit("signal", signal, value)

    def _encode_timestamp(self, signal: HCQSignal) -> None:
        self.emit("timestamp", signal)

    def _encode_exec(self, program: Any, arguments: HCQArguments, global_size: tuple[int | UOp, ...],
                     local_size: tuple[int | UOp, ...] | None) -> None:
        self.emit("exec", program, arguments)

    def _encode_copy(self, destination: Any, source: Any, nbytes: int | UOp) -> None:
        self.emit("copy", destination, source, nbytes)

    def _submit(self, device: HCQCompiled) -> None:
        # a snapshot: a bound queue may be patched and resubmitted while this submission waits to run
        python_device: Any = device
        python_device.hardware_queue(self.hardware).put(list(self.words))


class PythonCopyQueue(PythonQueue):
    """Copy queue: the same commands on a second thread, so copies may overlap kernels."""

    hardware = "copy"


class QueueThread:
    """The "hardware" of one queue: a thread that runs submitted commands in order."""

    def __init__(self, device: HCQCompiled, name: str):
        self.device, self.name = device, name
        self.submitted: thread_queue.SimpleQueue[list[Any]] = thread_queue.SimpleQueue()
        self.thread = threading.Thread(target=self._run, name=f"tinycore-{device.device}-{name}", daemon=True)
        self.thread.start()

    def put(self, words: list[Any]) -> None:
        """Queue the words of one submission."""
        self.submitted.put(words)

    def _run(self) -> None:
        while True:
            words = self.submitted.get()
            if self.device.broken is not None:
                continue  # a broken device runs nothing: its results would not be trusted
            try:
                self._execute(words)
            except Exception as error:  # noqa: BLE001 - reported by every later wait and submission on the device
                self.device.mark_broken(f"{self.device.device}: the {self.name} queue failed: "
                                        f"{type(error).__name__}: {error}")

    def _execute(self, words: list[Any]) -> None:
        position = 0
        while position < len(words):
            operation = words[position]
            if operation == "exec":
                program, arguments = words[position + 1:position + 3]
                program.run(arguments)
                position += 3
            elif operation in ("signal", "wait"):
                signal, value = words[position + 1:position + 3]
                if operation == "wait":
                    self._wait(signal, value)
                else:
                    signal._words[1] = time.perf_counter_ns()
                    signal.value = value
                position += 3
            elif operation == "timestamp":
                words[position + 1]._words[1] = time.perf_counter_ns()
                position += 2
            elif operation == "copy":
                destination, source, nbytes = words[position + 1:position + 4]
                destination[:nbytes] = source[:nbytes]
                position += 4
            else:
                raise ValueError(f"unknown command {operation!r}")

    def _wait(self, signal: HCQSignal, value: int) -> None:
        deadline = time.perf_counter() + HCQ_TIMEOUT_MS.value / 1000
        while signal.value < value:
            if time.perf_counter() > deadline:
                raise TimeoutError(f"waited {HCQ_TIMEOUT_MS.value} ms for signal {signal.name!r} to reach {value}")
            time.sleep(0.0001)


class PythonQueueProgram(HCQProgram):
    """A kernel run by the compute queue's thread: the device's `kernel_runtime` (the UOps interpreter, or a C
    shared object) loads it (tiny_python_template.runtime)."""

    def __init__(self, device: HCQCompiled, name: str, lib: bytes):
        super().__init__(device, name, lib)
        self.program = device.kernel_runtime(name, lib)  # type: ignore[attr-defined]

    def new_arguments(self, buffers: Sequence[Any], values: Sequence[int], persistent: bool = False) -> HCQArguments:
        """The buffers' memoryviews and the values, in a list (host memory needs no argument area)."""
        return PythonArguments(buffers, values)

    def run(self, arguments: HCQArguments) -> None:
        """Run the kernel on its argument block (called by the queue thread)."""
        words = arguments.words  # type: ignore[attr-defined]
        self.program(*words[:arguments.buffer_count], vals=tuple(words[arguments.buffer_count:]))
