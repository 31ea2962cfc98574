"""The NV queues: kernel launches, copies and semaphores encoded in the GPU's command format, submitted to a channel.

A queue collects pushbuffer words (`wait`, `signal`, `timestamp`, `exec`, `copy`); `submit(channel)` copies them into
the channel's pushbuffer ring in GPU memory, appends a GPFIFO entry pointing at them, advances GP_PUT in the
channel's USERD page and rings the doorbell. The GPU behind the channel (the MOCK GPU in CI; the real one through
the kernel driver) reads the same bytes.

Signals are 16 bytes of GPU memory the host can read: a 64-bit value, then the 64-bit timestamp (nanoseconds) the
semaphore release writes with it.
"""
from __future__ import annotations

import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from tiny_nv import nvcmd


class GPUMemory(Protocol):
    """GPU memory the host can also reach: allocations by GPU virtual address."""

    def allocate(self, size: int, purpose: str) -> int:
        """The GPU address of `size` new bytes (zeroed)."""

    def free(self, address: int) -> None:
        """Release the allocation at `address`."""

    def view(self, address: int, size: int) -> memoryview:
        """The host's writable view of `size` bytes at GPU address `address`."""


class Doorbell(Protocol):
    """Tells the GPU a channel has new GPFIFO entries."""

    def ring(self, channel: Channel) -> None:
        """Ring the doorbell of `channel`."""


class NVSignal:
    """A semaphore in GPU memory: value (u64) then timestamp (u64, ns). `wait` polls it from the host."""

    def __init__(self, memory: GPUMemory, value: int = 0, name: str = "signal"):
        self.memory, self.name = memory, name
        self.address = memory.allocate(16, f"signal {name}")
        self._words = memory.view(self.address, 16).cast("Q")
        self._words[0], self._words[1] = value, 0

    @property
    def value(self) -> int:
        """The current value."""
        return int(self._words[0])

    @value.setter
    def value(self, new_value: int) -> None:
        self._words[0] = new_value

    @property
    def timestamp(self) -> float:
        """When the GPU last released this semaphore, in microseconds."""
        return self._words[1] / 1000.0

    def wait(self, value: int, timeout_s: float = 30.0, poll: object = None) -> None:
        """Return once the value is at least `value`; `poll()` (the mock's step) is called while waiting."""
        deadline = time.perf_counter() + timeout_s
        while self.value < value:
            if callable(poll):
                poll()
                if self.value >= value:
                    return
            if time.perf_counter() > deadline:
                raise TimeoutError(f"NV signal {self.name!r} did not reach {value} within {timeout_s:g} s (it holds "
                                   f"{self.value}): a queue waits on a signal nothing sets, or the GPU hung")
            time.sleep(0.0001)


@dataclass
class Channel:
    """A GPFIFO channel: the GPFIFO ring, the pushbuffer ring and the USERD page, all in GPU memory."""

    memory: GPUMemory
    doorbell: Doorbell
    name: str
    gpfifo_entries: int = 1024
    pushbuffer_bytes: int = 1 << 20

    def __post_init__(self) -> None:
        self.gpfifo = self.memory.allocate(8 * self.gpfifo_entries, f"{self.name} GPFIFO")
        self.pushbuffer = self.memory.allocate(self.pushbuffer_bytes, f"{self.name} pushbuffer")
        self.userd = self.memory.allocate(0x1000, f"{self.name} USERD")
        self.put = 0  # next GPFIFO index the host writes
        self.push_offset = 0

    def gp_get(self) -> int:
        """The GPU's GP_GET (entries it has consumed)."""
        return int(self.memory.view(self.userd + nvcmd.USERD_GP_GET, 4).cast("I")[0])

    def submit(self, words: Sequence[int]) -> None:
        """Copy `words` into the pushbuffer ring, append their GPFIFO entry, advance GP_PUT, ring the doorbell."""
        size = 4 * len(words)
        if size == 0:
            return
        if size > self.pushbuffer_bytes:
            raise ValueError(f"{self.name}: a {size} byte submission exceeds the {self.pushbuffer_bytes} byte "
                             "pushbuffer: split the queue")
        if self.push_offset + size > self.pushbuffer_bytes or (self.put + 1) % self.gpfifo_entries == self.gp_get():
            self._drain()
            self.push_offset = 0 if self.push_offset + size > self.pushbuffer_bytes else self.push_offset
        address = self.pushbuffer + self.push_offset
        self.memory.view(address, size).cast("I")[:] = memoryview(struct.pack(f"<{len(words)}I", *words)).cast("I")
        self.push_offset += -(-size // 8) * 8
        slot = self.put % self.gpfifo_entries
        self.memory.view(self.gpfifo + 8 * slot, 8).cast("Q")[0] = nvcmd.gpfifo_entry(address, len(words))
        self.put = (self.put + 1) % self.gpfifo_entries
        self.memory.view(self.userd + nvcmd.USERD_GP_PUT, 4).cast("I")[0] = self.put
        self.doorbell.ring(self)

    def _drain(self) -> None:
        """Wait until the GPU consumed every entry (before the rings wrap over unread words)."""
        deadline = time.perf_counter() + 30.0
        while self.gp_get() != self.put:
            self.doorbell.ring(self)
            if time.perf_counter() > deadline:
                raise TimeoutError(f"{self.name}: the GPU did not consume its GPFIFO within 30 s")
            time.sleep(0.0001)


QueueType = TypeVar("QueueType", bound="NVQueue")


class NVQueue:
    """Commands in pushbuffer words; chain `wait`, `signal`, `timestamp`, then `submit(channel)`."""

    subchannel = 0

    def __init__(self) -> None:
        self.words: list[int] = []

    def wait(self: QueueType, signal: NVSignal, value: int) -> QueueType:
        """Stall the channel until `signal` holds at least `value`."""
        self.words += nvcmd.semaphore_words(self.subchannel, signal.address, value, nvcmd.SEM_OPERATION_ACQ_CIRC_GEQ)
        return self

    def signal(self: QueueType, signal: NVSignal, value: int) -> QueueType:
        """After every earlier command: write `value` and the current time into `signal`."""
        self.words += nvcmd.semaphore_words(self.subchannel, signal.address, value, nvcmd.SEM_OPERATION_RELEASE,
                                            timestamp=True)
        return self

    def timestamp(self: QueueType, signal: NVSignal) -> QueueType:
        """After every earlier command: write the current time into `signal` (its value becomes 0)."""
        return self.signal(signal, 0)

    def submit(self: QueueType, channel: Channel) -> QueueType:
        """Hand the words to the channel's GPU."""
        channel.submit(self.words)
        return self


class NVComputeQueue(NVQueue):
    """Semaphores on the compute channel's subchannel (launches are tiny_nv.nv_hcq's NVQueueComputeQueue)."""

    subchannel = nvcmd.SUBCHANNEL_COMPUTE


MAX_COPY_BYTES = 1 << 30
"""The largest transfer one LAUNCH_DMA is given (longer copies are split)."""


class NVCopyQueue(NVQueue):
    """Copy-engine transfers (linear, pitch layout), plus semaphores."""

    subchannel = nvcmd.SUBCHANNEL_COPY

    def copy(self, destination: int, source: int, nbytes: int) -> NVCopyQueue:
        """Copy `nbytes` from GPU address `source` to `destination`."""
        header = nvcmd.method_header
        for offset in range(0, max(nbytes, 0), MAX_COPY_BYTES):  # LINE_LENGTH_IN is 32 bits
            length = min(MAX_COPY_BYTES, nbytes - offset)
            source_at, destination_at = source + offset, destination + offset
            self.words += [header(self.subchannel, nvcmd.NVC6B5_OFFSET_IN_UPPER, 4), source_at >> 32,
                           source_at & 0xFFFFFFFF, destination_at >> 32, destination_at & 0xFFFFFFFF,
                           header(self.subchannel, nvcmd.NVC6B5_LINE_LENGTH_IN, 1), length,
                           header(self.subchannel, nvcmd.NVC6B5_LAUNCH_DMA, 1),
                           nvcmd.DMA_TRANSFER_NON_PIPELINED | nvcmd.DMA_FLUSH_ENABLE | nvcmd.DMA_SRC_PITCH |
                           nvcmd.DMA_DST_PITCH]
        return self
