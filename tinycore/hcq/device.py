"""The base of queue-based (HCQ) devices: a timeline signal, kernel argument blocks, launches through queues.

A plugin's device class derives from HCQCompiled, its kernels from HCQProgram, and its plugin answers the
`tiny_hcq_queues` hook with the queue and signal types (see tinycore.plugins.hookspecs). Every kernel then runs as
commands: `exec` on an argument block, then a signal of the timeline, whose value says how far the device got.
"""
from __future__ import annotations

import ctypes
import struct
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from tinycore.device.allocator import Allocator
from tinycore.device.compiled import Compiled
from tinycore.device.compiler import Compiler
from tinycore.hcq import profile
from tinycore.hcq.graph import capture_graph
from tinycore.hcq.queue import HCQArguments, HWQueue
from tinycore.hcq.signal import HCQSignal
from tinycore.helpers import PROFILE

if TYPE_CHECKING:
    from tinycore.plugins.specs import HCQQueues
    from tinycore.renderer.renderer import Renderer


_OPENED: weakref.WeakSet[HCQCompiled] = weakref.WeakSet()
"""Every opened queue device (host access to one settles the queues of those sharing its memory)."""
_opened_count = [0]
"""How many queue devices were opened so far: a device's list of memory peers is made again when it changed."""

class KernargRing:
    """Argument blocks handed out in turn from one area; when it wraps, the device first finishes what it queued."""

    alignment = 64

    def __init__(self, device: HCQCompiled, memory: memoryview, address: int | None):
        self.device, self.memory, self.address = device, memory, address
        self.size, self.offset = memory.nbytes, 0

    def allocate(self, nbytes: int) -> tuple[int, int | None]:
        """(offset into `memory`, device address) of `nbytes` of argument memory."""
        aligned = -(-max(nbytes, 8) // self.alignment) * self.alignment
        if aligned > self.size:
            raise ValueError(f"{self.device.device}: a {nbytes} byte argument block exceeds the {self.size} byte "
                             "argument area: pass fewer buffers to one kernel")
        if self.offset + aligned > self.size:
            self.device.synchronize()  # every block in the ring may be reused once the queued work is done
            self.offset = 0
        offset = self.offset
        self.offset += aligned
        return offset, None if self.address is None else self.address + offset


class HCQProgram:
    """A kernel of a queue-based device: `program(*buffers, global_size=.., local_size=.., vals=.., wait=False)`
    writes an argument block and submits `exec` plus a timeline signal on the device's compute queue.

    Subclasses load the binary in `__init__(device, name, lib)` (calling this one) and may override
    `new_arguments` for another argument layout.
    """

    def __init__(self, device: HCQCompiled, name: str, lib: bytes):
        self.device, self.name, self.lib = device, name, lib
        self.display_name = name  # the kernel's name in profiles (the engine sets the unrenamed one)

    def new_arguments(self, buffers: Sequence[object], values: Sequence[int], persistent: bool = False) -> HCQArguments:
        """An argument block holding `buffers` then `values`, in the kernarg ring (or, `persistent`, in memory
        of its own that stays valid for a graph's life)."""
        words = len(buffers) + len(values)
        if persistent:
            memory, address = self.device.kernarg_memory(max(8, 8 * words))
            offset = 0
        else:
            ring = self.device.kernargs
            offset, address = ring.allocate(8 * words)
            memory = ring.memory
        if words:
            struct.pack_into(f"{words}q", memory, offset, *buffers, *values)
        return HCQArguments(memory, offset, address, len(buffers))

    def launcher(self, global_size: Sequence[int],
                 local_size: Sequence[int] | None = None) -> Callable[[Sequence[object]], None]:
        """A function launching this program on a list of buffer handles (no variables) over `global_size` groups
        of `local_size`: the engine's path for kernels whose sizes are fixed."""
        sizes, local = tuple(global_size), None if local_size is None else tuple(local_size)
        device = self.device

        def launch(buffers: Sequence[object]) -> None:
            if device.profiling:
                self(*buffers, global_size=sizes, local_size=local)
                return
            with device.submit_lock:
                queue = device.compute_queue()
                queue.exec(self, self.new_arguments(buffers, ()), sizes, local)
                queue.signal(device.timeline_signal, device.next_timeline_value()).submit(device)
        return launch

    def __call__(self, *buffers: object, global_size: Sequence[int] = (1, 1, 1),
                 local_size: Sequence[int] | None = None, vals: Sequence[int] = (), wait: bool = False) -> float | None:
        """Launch on `buffers` with the integer arguments `vals`; with `wait`, the kernel's device time in seconds."""
        device = self.device
        timed = wait or device.profiling
        if timed:
            start, end = device.new_signal(name=f"{self.name} start"), device.new_signal(name=f"{self.name} end")
        with device.submit_lock:  # argument memory, timeline value and submission order stay together
            arguments = self.new_arguments(buffers, vals)
            queue = device.compute_queue()
            if timed:
                queue.timestamp(start).exec(self, arguments, global_size, local_size).timestamp(end)
            else:
                queue.exec(self, arguments, global_size, local_size)
            queue.signal(device.timeline_signal, device.next_timeline_value()).submit(device)
        if not timed:
            return None
        device.synchronize()
        if device.profiling:
            profile.record(self.display_name, device.device, "compute", start.timestamp, end.timestamp)
        return (end.timestamp - start.timestamp) / 1e6 if wait else None


class HCQCompiled(Compiled):
    """A device whose kernels, copies and synchronisation are commands in queues.

    `program_type` is the device's HCQProgram subclass; `queues` the HCQQueues its plugin returns from the
    `tiny_hcq_queues` hook (asked when not given). The device keeps a timeline signal: every submission that
    finishes work signals the next timeline value, and `synchronize` waits for the last one.

    Hooks for a plugin: `kernarg_memory(nbytes)` (memory for argument blocks; default: host memory with its
    address) and `_recover()` (reset the hardware's queues after a timeout).
    """

    kernarg_ring_bytes = 1 << 20

    def __init__(self, device: str, allocator: Allocator, renderer: Renderer, compiler: Compiler,
                 program_type: type[HCQProgram], queues: HCQQueues | None = None):
        super().__init__(device, allocator, renderer, compiler, self._load_program, graph=capture_graph)
        self.program_type = program_type
        if queues is None:
            from tinycore.device.registry import hcq_queues
            queues = hcq_queues(self)
        if queues is None:
            raise RuntimeError(f"{device} is a queue device but no installed plugin answered tiny_hcq_queues for it: "
                               "reinstall the device's plugin")
        self.queues: HCQQueues = queues
        self.broken: str | None = None
        self.submissions = 0
        # held while a launch takes argument memory and a timeline value and submits, so that threads launching
        # at once signal the timeline in order
        self.submit_lock = threading.Lock()
        self.profiling = bool(PROFILE)
        self.timeline_signal = self.new_signal(0, name="timeline")
        self.timeline_value = 1
        # the timeline's value words when its signal reads them as the base class does (host memory): the settle
        # before every host copy then reads the value itself instead of three calls down to `_read_value`
        self._timeline_words = (self.timeline_signal._words
                                if type(self.timeline_signal)._read_value is HCQSignal._read_value else None)
        memory, address = self.kernarg_memory(self.kernarg_ring_bytes)
        self.kernargs = KernargRing(self, memory, address)
        allocator.before_host_access = self._settle_shared_memory
        self._peers: tuple[weakref.ref[HCQCompiled], ...] = ()
        self._peers_known_at = -1
        _OPENED.add(self)
        _opened_count[0] += 1
        if self.profiling:
            profile.enable()

    def _load_program(self, name: str, lib: bytes) -> HCQProgram:
        return self.program_type(self, name, lib)

    # ---- queues and signals ----

    def new_signal(self, value: int = 0, name: str = "signal") -> HCQSignal:
        """A new signal of this device holding `value`."""
        signal: HCQSignal = self.queues.signal(self, value=value, name=name)
        return signal

    def compute_queue(self) -> HWQueue[HCQSignal, HCQProgram]:
        """A new, empty compute queue."""
        queue: HWQueue[HCQSignal, HCQProgram] = self.queues.compute_queue()
        return queue

    def copy_queue(self) -> HWQueue[HCQSignal, HCQProgram]:
        """A new, empty copy queue (the compute queue where the device has no copy engine)."""
        queue: HWQueue[HCQSignal, HCQProgram] = (self.queues.copy_queue or self.queues.compute_queue)()
        return queue

    def next_timeline_value(self) -> int:
        """The timeline value for the next submission to signal (each call takes a new one)."""
        value = self.timeline_value
        self.timeline_value = value + 1
        return value

    def synchronize(self) -> None:
        """Wait until everything submitted to this device so far is done (raises DeviceTimeoutError past
        HCQ_TIMEOUT_MS)."""
        if self.broken is not None:
            raise RuntimeError(self.broken)
        self.timeline_signal.wait(self.timeline_value - 1)

    def _settle_shared_memory(self) -> None:
        # the host is about to read, write or free this device's memory: the queues of every device that shares
        # memory with it may be reading it too (a TinyJit graph's copy from CPU to CPU:1 runs in CPU:1's queue),
        # so all of them must be done, not only this device's own
        words = self._timeline_words
        if words is None or self.broken is not None or words[0] < self.timeline_value - 1:
            self.synchronize()  # not reached yet (or not readable here): wait, or raise why the device is broken
        if self._peers_known_at != _opened_count[0]:  # kept between calls: this runs on every host copy
            self._peers = tuple(weakref.ref(other) for other in list(_OPENED)
                                if other is not self and self.shares_memory_with(other))
            self._peers_known_at = _opened_count[0]
        for reference in self._peers:
            other = reference()
            if other is not None and other.broken is None:
                other.synchronize()

    # ---- failure ----

    def mark_broken(self, reason: str) -> None:
        """Refuse every later submission (a wait timed out: results can no longer be trusted)."""
        self.broken = reason

    def check_usable(self) -> None:
        """Raise the reason the device is broken, if it is."""
        if self.broken is not None:
            raise RuntimeError(self.broken)

    def recover(self, timeout_s: float = 1.0) -> None:
        """Use the device again after a timeout, once the cause is gone: its queues are reset and its timeline
        must reach the last submitted value within `timeout_s` (else DeviceTimeoutError, and it stays broken)."""
        self.broken = None
        self._recover()
        self.timeline_signal.wait(self.timeline_value - 1, timeout_s)

    def _recover(self) -> None:
        """Default: nothing to reset."""

    # ---- memory ----

    def shares_memory_with(self, other: HCQCompiled) -> bool:
        """Whether this device's queues can copy to and from `other`'s memory with the allocator handles (TinyJit
        graphs then keep copies between the two in their queues). Default: only its own."""
        return other is self

    def kernarg_memory(self, nbytes: int) -> tuple[memoryview, int | None]:
        """`nbytes` of memory for argument blocks, and its device address. Default: host memory, kept alive by
        its memoryview (for devices that read host memory, like the CPU)."""
        block = (ctypes.c_uint8 * nbytes)()  # the memoryview keeps it alive
        return memoryview(block).cast("B"), ctypes.addressof(block)
