"""CPUDevice: the host CPU as a tinycore queue device (C renderer, C compiler, host memory, C command queues)."""
from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from tiny_cpu.allocator import CPUAllocator
from tiny_cpu.llvm_compiler import LLVMCompiler, LLVMProgram
from tiny_cpu.pool import pool_library
from tiny_cpu.queue import EXEC, SIGNAL
from tiny_cpu.runtime import CPUProgram, worker_count
from tinycore.hcq import HCQCompiled, HCQProgram
from tinycore.helpers import HCQ_TIMEOUT_MS


def _loader(device: HCQCompiled) -> Any:
    """How the device's binaries load: LLVM objects are linked in process, C shared objects are opened (a compiler
    with a `program_loader`, as the x86 renderer's, names its own)."""
    program_loader = getattr(device.compiler, "program_loader", None)
    if program_loader is not None:
        return program_loader()
    if isinstance(device.compiler, LLVMCompiler):
        return LLVMProgram
    return CPUProgram


class CPUQueueProgram(HCQProgram):
    """A compiled kernel launched through the compute queue: an EXEC command on its entry point
    `NAME_entry(const long long *arguments, int core_id)` (see tiny_cpu.renderer.entry_point)."""

    def __init__(self, device: HCQCompiled, name: str, lib: bytes):
        super().__init__(device, name, lib)
        # keeps the library (or the LLVM object's engine) loaded while the program lives
        self.loaded: Any = _loader(device)(name, lib)
        if self.loaded._entry is None:
            raise RuntimeError(f"kernel {name!r} has no entry point {name}_entry: it was not rendered by the C "
                               "renderer of this tiny-cpu (clear the compile cache if it is older)")
        self.entry: int = self.loaded._entry

    @property
    def threads(self) -> int:
        """The most worker threads a launch may use (NUM_CPU_THREADS, else the CPU count)."""
        return worker_count()

    def launcher(self, global_size: Sequence[int], local_size: Sequence[int] | None = None) -> Any:
        """The engine's launch of a kernel with fixed sizes: the compute queue's EXEC and timeline SIGNAL commands
        (see tiny_cpu.queue) and the argument block packed into one kernarg slot in one step, then submitted."""
        device: CPUDevice = self.device  # type: ignore[assignment]
        if device.profiling:
            return super().launcher(global_size, local_size)
        shares, threads, entry = int(global_size[0]) if global_size else 1, self.threads, self.entry
        ring, timeline = device.kernargs, device.timeline_signal.address
        base = ring.address
        assert base is not None, "CPU argument memory is host memory with an address"
        submit, hardware = device.library.tinycore_queue_submit, device.hardware_queues["compute"]
        formats: dict[int, str] = {}
        lock = device.submit_lock

        def launch(buffers: Sequence[Any]) -> None:
            if device.broken is not None:
                device.check_usable()
            count = len(buffers)
            layout = formats.get(count) or formats.setdefault(count, f"{12 + count}q")
            with lock:  # the slot, the timeline value and the submission stay in one order across threads
                # the two commands, then the argument block they point at, in one kernarg slot
                offset = ring.offset
                if offset + 256 <= ring.size and count <= 20:
                    ring.offset = offset + 256
                    address = base + offset
                else:
                    offset, slot = ring.allocate(8 * (12 + count))
                    address = base + offset if slot is None else slot
                value = device.timeline_value
                device.timeline_value = value + 1
                device.submissions += 1
                struct.pack_into(layout, ring.memory, offset, EXEC, entry, address + 96, shares, threads, 0,
                                 SIGNAL, timeline, value, 0, 0, 0, *buffers)
                status = submit(hardware, address, 12)
            if status:
                device.submit_words("compute", b"", 0)  # reports the queue's state
        return launch


class CPUDevice(HCQCompiled):
    """The CPU device. Its renderer and compiler come from the registry's selection (DEV=CPU:RENDERER:ARCH); every
    kernel, copy and signal goes through one of its two C queues (compute and copy)."""

    capabilities = {"threads": True}
    """What the conformance suite checks: every dtype, integer kernel parameters, large grids and worker threads
    (the reference device declares everything; no shared memory)."""

    def __init__(self, device: str = "CPU"):
        select_renderer: Any
        select_allocator: Any
        try:
            from tinycore.device.registry import select_allocator, select_renderer
        except ImportError:
            select_renderer = select_allocator = None
        if select_renderer is not None:
            renderer, compiler, _spec = select_renderer(device)
        else:
            from tiny_cpu.renderer import make_c_renderer
            renderer, compiler = make_c_renderer(device, None)
        self.device = device  # the name the tiny_allocator hook reads
        # the allocator comes through the tiny_allocator hook (tiny_cpu.hooks answers for CPU), so another plugin
        # may supply the memory of CPU buffers
        allocator = select_allocator(self) if select_allocator is not None else CPUAllocator(device)
        self.library = pool_library()
        self._wake_workers = self.library.tinycore_pool_wake
        timeout_ns = int(HCQ_TIMEOUT_MS.value) * 1_000_000
        self.hardware_queues = {name: self.library.tinycore_queue_create(timeout_ns) for name in ("compute", "copy")}
        if not all(self.hardware_queues.values()):
            raise RuntimeError("too many CPU devices opened in this process: the C queues are used up")
        super().__init__(device, allocator, renderer, compiler, CPUQueueProgram)

    def submit_words(self, hardware: str, words: Any, count: int) -> None:
        """Run `count` command words on the C queue `hardware` ("compute" or "copy")."""
        status = self.library.tinycore_queue_submit(self.hardware_queues[hardware], words, count)
        if status:
            self.submission_failed(hardware, status)

    def submission_failed(self, hardware: str, status: int) -> None:
        """Raise why the C queue `hardware` refused a submission (`status`, the C function's nonzero answer)."""
        if status == -1:
            self.mark_broken(f"{self.device}: the {hardware} queue stopped after a wait timed out on the device; "
                             "call recover() once nothing waits on a signal that never comes")
            self.check_usable()
        elif status != 0:
            raise RuntimeError(f"{self.device}: the {hardware} queue could not start its thread (out of memory or "
                               "threads)")

    def expect_launches(self) -> None:
        """Wake the worker pool's sleeping threads ahead of a realize's launches (they poll for a launch for 2 ms,
        then sleep again): a realize after a pause spends 0.1-0.3 ms in Python before its first kernel, about what a
        sleeping thread takes to be scheduled again on a virtual machine. Nothing happens while the workers are awake,
        or after a wake that no parallel launch followed (until one comes)."""
        self._wake_workers()

    def hardware_submissions(self, hardware: str = "compute") -> int:
        """How many submissions the C queue `hardware` received."""
        return int(self.library.tinycore_queue_submissions(self.hardware_queues[hardware]))

    def shares_memory_with(self, other: HCQCompiled) -> bool:
        """Every CPU device's buffers are host memory at plain addresses."""
        return isinstance(other, CPUDevice)

    def _recover(self) -> None:
        for queue in self.hardware_queues.values():
            self.library.tinycore_queue_reset(queue)
