"""The CPU as a queue device: command words for the C queues of pool.py, signals in host memory.

A command is six 64-bit words, an opcode and its operands (the layout the queues of pool.c read):
  EXEC      entry point address, argument block address, shares (core_ids), threads
  SIGNAL    signal address, value          (writes the timestamp, then the value)
  WAIT      signal address, value
  COPY      destination address, source address, bytes
  TIMESTAMP signal address                 (writes the timestamp)
  BARRIER   -
A submission hands the words to the device's compute or copy queue in one ctypes call.
"""
from __future__ import annotations

import ctypes
import struct
from typing import TYPE_CHECKING, Any

from tinycore.hcq import HCQArguments, HCQSignal, HWQueue
from tinycore.uop.uop import UOp

if TYPE_CHECKING:
    from tiny_cpu.device import CPUDevice
    from tinycore.hcq.queue import QueueDevice

EXEC, SIGNAL, WAIT, COPY, TIMESTAMP, BARRIER = 1, 2, 3, 4, 5, 6
WORDS = 6


class CPUSignal(HCQSignal):
    """A signal in 16 bytes of host memory; timestamps are CLOCK_MONOTONIC nanoseconds."""

    timestamp_divider = 1000.0

    def __init__(self, device: Any = None, value: int = 0, name: str = "signal"):
        block = (ctypes.c_uint64 * 2)()  # the memoryview keeps it alive
        super().__init__(device, value, memoryview(block).cast("B"), ctypes.addressof(block), name)


class CPUComputeQueue(HWQueue):
    """Commands for the CPU device's compute queue (run by its C queue, see pool.py)."""

    hardware = "compute"

    def __init__(self) -> None:
        super().__init__()
        self._bound: Any = None
        self._target: tuple[Any, int, int] | None = None  # a bound queue's (C submit function, C queue, word count)

    def _encode_wait(self, signal: HCQSignal, value: int | UOp) -> None:
        self.emit(WAIT, signal.address, value, 0, 0, 0)

    def _encode_signal(self, signal: HCQSignal, value: int | UOp) -> None:
        self.emit(SIGNAL, signal.address, value, 0, 0, 0)

    def _encode_timestamp(self, signal: HCQSignal) -> None:
        self.emit(TIMESTAMP, signal.address, 0, 0, 0, 0)

    def _encode_exec(self, program: Any, arguments: HCQArguments, global_size: tuple[int | UOp, ...],
                     local_size: tuple[int | UOp, ...] | None) -> None:
        # the CPU launch size: global_size[0] shares (core_ids) split over up to `threads` worker threads
        self.emit(EXEC, program.entry, arguments.address, global_size[0] if global_size else 1, program.threads, 0)

    def _encode_copy(self, destination: Any, source: Any, nbytes: int | UOp) -> None:
        self.emit(COPY, destination, source, nbytes, 0, 0)

    def _encode_memory_barrier(self) -> None:
        self.emit(BARRIER, 0, 0, 0, 0, 0)

    def _bind(self, device: QueueDevice) -> None:
        self._bound = (ctypes.c_longlong * max(1, len(self.words)))(*self.words)
        # a bound queue is resubmitted on every TinyJit replay: its symbolic words go straight into the array (the
        # array's own item setter, no Python frame per word) and the submission calls the C queue directly
        self._patch = self._bound.__setitem__  # type: ignore[method-assign]
        cpu: CPUDevice = device  # type: ignore[assignment]
        self._target = (cpu.library.tinycore_queue_submit, cpu.hardware_queues[self.hardware], len(self.words))

    def _patch(self, position: int, value: int) -> None:
        self._bound[position] = value

    def _submit(self, device: QueueDevice) -> None:
        target = self._target
        if target is not None:  # bound: submit() checked that `device` is the one it is bound to
            status = target[0](target[1], self._bound, target[2])
            if status:
                cpu_device: CPUDevice = device  # type: ignore[assignment]
                cpu_device.submission_failed(self.hardware, status)
            return
        count = len(self.words)
        words = self._bound if self._bound is not None else struct.pack(f"{count}q", *self.words)
        cpu: CPUDevice = device  # type: ignore[assignment]
        cpu.submit_words(self.hardware, words, count)


class CPUCopyQueue(CPUComputeQueue):
    """Commands for the CPU device's copy queue (a second C queue, so copies overlap kernels)."""

    hardware = "copy"

    def _encode_exec(self, program: Any, arguments: HCQArguments, global_size: tuple[int | UOp, ...],
                     local_size: tuple[int | UOp, ...] | None) -> None:
        raise NotImplementedError("the CPU copy queue runs no kernels: use the compute queue")
