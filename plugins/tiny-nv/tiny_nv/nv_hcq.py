"""NV as a queue (HCQ) device on the core's machinery: the core builds and submits the queues, these classes encode
them in the GPU's command format (tiny_nv.nvcmd) and hand them to the GPU's channels.

The GPU is an NVKernelGPU (tiny_nv.kernel_driver): the kernel driver's channels and memory, on real hardware
(DEV=NV+NV) or on the simulated driver and GPU (DEV=MOCK+NV, tiny_nv.mock_driver). Its signals, its argument blocks
(a QMD, V03 for Ampere and Ada, V04 for Hopper, followed by constant buffer 0) and its buffers are GPU memory. A
kernel is uploaded whole; its QMD points at the CUBIN's `.text.<kernel>` and carries the CUBIN's register count.
Launch sizes given as Variables (TinyJit graphs of symbolic kernels) are written into the QMD at submit, the other
symbolic words (the timeline values of a graph) are the core's.
"""
from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

from tiny_nv import nvcmd
from tiny_nv.cubin import kernel_image, module_data
from tiny_nv.kernel_driver import NVKernelGPU
from tiny_nv.nvqueue import NVCopyQueue
from tinycore.hcq import HCQArguments, HCQCompiled, HCQSignal, HWQueue
from tinycore.hcq.device import HCQProgram
from tinycore.hcq.mock import MOCK_BINARY_MAGIC, shared_bytes, unpack_mock_binary
from tinycore.hcq.mock_queue import MockQueueAllocator, MockQueueProgram
from tinycore.plugins import HCQQueues
from tinycore.uop.ops import Ops
from tinycore.uop.symbolic import sym_infer
from tinycore.uop.uop import UOp


def _split(value: int | UOp) -> tuple[int | UOp, int | UOp]:
    """(low, high) 32-bit words of a 64-bit value (symbolic values stay expressions)."""
    if isinstance(value, UOp):
        return value % (1 << 32), value // (1 << 32)
    return value & 0xFFFFFFFF, (value >> 32) & 0xFFFFFFFF


class NVQueueSignal(HCQSignal):
    """A semaphore in GPU memory: the value, then the nanosecond timestamp the release writes."""

    timestamp_divider = 1000.0

    def __init__(self, device: Any = None, value: int = 0, name: str = "signal"):
        self.gpu: NVKernelGPU = device.gpu
        address = self.gpu.allocate(16, f"signal {name}")
        super().__init__(device, value, self.gpu.view(address, 16), address, name)

    def _read_value(self) -> int:
        self.gpu.poll()  # the GPU runs beside the host: a queue stalled on a signal the host set moves on
        return super()._read_value()


class NVArguments(HCQArguments):
    """An argument block: a QMD, then constant buffer 0 whose parameters are an 8-byte address per buffer and a
    4-byte int per variable (CUDA's parameter layout), at the QMD version's parameter offset."""

    layout: nvcmd.QMDLayout = nvcmd.QMD_V03

    @classmethod
    def arguments_at(cls) -> int:
        """Where the parameters start in the block."""
        return cls.layout.size + cls.layout.arguments_offset

    def set_buffer(self, index: int, handle: Any) -> None:
        """The GPU address of buffer argument `index`."""
        struct.pack_into("<Q", self.memory, self.offset + self.arguments_at() + 8 * index,
                         getattr(handle, "address", handle))

    def set_value(self, index: int, value: int) -> None:
        """The value of integer argument `index`."""
        struct.pack_into("<i", self.memory, self.offset + self.arguments_at() + 8 * self.buffer_count + 4 * index,
                         value)


class NVArgumentsV04(NVArguments):
    """The argument block of Hopper (QMD V04, parameters at 0x210 of constant buffer 0)."""

    layout = nvcmd.QMD_V04


class _NVQueue(HWQueue):
    """Semaphores (host-class methods) on the queue's subchannel, and submission to the device's channel."""

    subchannel = 0
    engine = "compute"

    def __init__(self) -> None:
        super().__init__()
        self.qmd_patches: list[tuple[memoryview, str, UOp, nvcmd.QMDLayout]] = []
        self.word_patches: list[tuple[memoryview, int, str, UOp]] = []  # constant buffer words known at submit

    def _semaphore(self, signal: HCQSignal, value: int | UOp, operation: int, timestamp: bool) -> None:
        if signal.address is None:
            raise ValueError(f"signal {signal.name!r} has no GPU address: make it with the NV device's new_signal")
        execute = operation | nvcmd.SEM_PAYLOAD_SIZE_64BIT
        execute |= (nvcmd.SEM_RELEASE_WFI | (nvcmd.SEM_RELEASE_TIMESTAMP if timestamp else 0)) \
            if operation == nvcmd.SEM_OPERATION_RELEASE else nvcmd.SEM_ACQUIRE_SWITCH_TSG
        low, high = _split(value)
        self.emit(nvcmd.method_header(self.subchannel, nvcmd.NVC56F_SEM_ADDR_LO, 5), signal.address & 0xFFFFFFFF,
                  signal.address >> 32, low, high, execute)

    def _encode_wait(self, signal: HCQSignal, value: int | UOp) -> None:
        self._semaphore(signal, value, nvcmd.SEM_OPERATION_ACQ_CIRC_GEQ, False)

    def _encode_signal(self, signal: HCQSignal, value: int | UOp) -> None:
        self._semaphore(signal, value, nvcmd.SEM_OPERATION_RELEASE, True)

    def _encode_timestamp(self, signal: HCQSignal) -> None:
        # a semaphore release always writes its payload: the signal's value becomes 0 (timestamp signals are fresh)
        self._semaphore(signal, 0, nvcmd.SEM_OPERATION_RELEASE, True)

    def submit(self, device: Any, var_vals: Mapping[Any, int] | None = None) -> Any:
        """Write symbolic launch sizes into their QMDs, then the core's submit (symbolic words, then _submit)."""
        values = dict(var_vals or {})

        def evaluate(expression: UOp) -> int:
            value = values.get(expression) if expression.op is Ops.DEFINE_VAR else None
            return int(value if value is not None else sym_infer(expression, values))
        for qmd, field, expression, layout in self.qmd_patches:
            layout.set(qmd, field, evaluate(expression))
        for memory, offset, form, expression in self.word_patches:
            struct.pack_into(form, memory, offset, evaluate(expression))
        return super().submit(device, var_vals)

    def _submit(self, device: Any) -> None:
        words = [int(word) & 0xFFFFFFFF for word in self.words]
        device.channels[self.engine].submit(words)


class NVQueueComputeQueue(_NVQueue):
    """Launches through QMDs in the argument blocks, and semaphores."""

    subchannel = nvcmd.SUBCHANNEL_COMPUTE
    engine = "compute"

    def _encode_exec(self, program: Any, arguments: HCQArguments, global_size: tuple[int | UOp, ...],
                     local_size: tuple[int | UOp, ...] | None) -> None:
        if arguments.address is None or arguments.address % 256:
            raise ValueError("an NV argument block needs a 256-byte aligned GPU address (it starts with the QMD)")
        layout: nvcmd.QMDLayout = program.device.qmd
        qmd = arguments.memory[arguments.offset:arguments.offset + layout.size]
        qmd[:] = bytes(layout.size)
        grid = list(global_size) + [1] * (3 - len(global_size))
        block = list(local_size or (1, 1, 1)) + [1] * (3 - len(local_size or (1, 1, 1)))
        fields = layout.launch_fields(grid, block, program.program_address, arguments.address + layout.size,
                                      program.parameters_size, program.resources)
        for field, value in fields:
            if isinstance(value, UOp):
                self.qmd_patches.append((qmd, field, value, layout))
            else:
                layout.set(qmd, field, int(value))
        gpu = program.device.gpu
        head = arguments.offset + layout.size
        for offset, form, value in layout.driver_constants(grid, block, gpu.shared_window, gpu.local_window):
            if isinstance(value, UOp):
                self.word_patches.append((arguments.memory, head + offset, form, value))
            else:
                struct.pack_into(form, arguments.memory, head + offset, int(value))
        self.emit(nvcmd.method_header(self.subchannel, nvcmd.NVC6C0_SEND_PCAS_A, 1), arguments.address >> 8,
                  nvcmd.method_header(self.subchannel, nvcmd.NVC6C0_SEND_SIGNALING_PCAS2_B, 1),
                  nvcmd.PCAS_ACTION_INVALIDATE_COPY_SCHEDULE)


class NVQueueCopyQueue(_NVQueue):
    """Copy-engine transfers between allocations, and semaphores."""

    subchannel = nvcmd.SUBCHANNEL_COPY
    engine = "copy"

    def _encode_copy(self, destination: Any, source: Any, nbytes: int | UOp) -> None:
        target, origin = getattr(destination, "address", destination), getattr(source, "address", source)
        header = nvcmd.method_header
        self.emit(header(self.subchannel, nvcmd.NVC6B5_OFFSET_IN_UPPER, 4), origin >> 32, origin & 0xFFFFFFFF,
                  target >> 32, target & 0xFFFFFFFF, header(self.subchannel, nvcmd.NVC6B5_LINE_LENGTH_IN, 1), nbytes,
                  header(self.subchannel, nvcmd.NVC6B5_LAUNCH_DMA, 1),
                  nvcmd.DMA_TRANSFER_NON_PIPELINED | nvcmd.DMA_FLUSH_ENABLE | nvcmd.DMA_SRC_PITCH |
                  nvcmd.DMA_DST_PITCH)


QUEUES = HCQQueues(NVQueueComputeQueue, NVQueueCopyQueue, NVQueueSignal)


class NVQueueProgram(MockQueueProgram):
    """A kernel uploaded to GPU memory whole (a CUBIN, or the MOCK code object that carries one); its QMD points at
    the kernel's code inside the upload; its argument blocks hold its QMD and constant buffer 0."""

    def __init__(self, device: Any, name: str, lib: bytes):
        HCQProgram.__init__(self, device, name, lib)
        mock = lib.startswith(MOCK_BINARY_MAGIC)
        self.uops, self.binary = unpack_mock_binary(lib) if mock else ([], lib)
        self.checked = mock  # a bare CUBIN does not say which parameters are buffers
        self.buffer_count = sum(1 for uop in self.uops if uop.op is Ops.DEFINE_GLOBAL)
        self.variable_count = len({uop.arg[0] for uop in self.uops if uop.op is Ops.DEFINE_VAR})
        self.address = device.gpu.allocate(len(lib), f"code of {name}")
        device.gpu.view(self.address, len(lib))[:] = lib
        layout: nvcmd.QMDLayout = device.qmd
        arguments_class = NVArgumentsV04 if layout.major_version == 4 else NVArguments
        self.arguments_class, self.arguments_at = arguments_class, arguments_class.arguments_at()
        image = kernel_image(self.binary, name) if self.binary else None
        self.program_address = self.address + (len(lib) - len(self.binary) + image.text_offset if image else 0)
        self.register_count = image.registers if image else 0
        self.shared_bytes = image.shared_bytes if image else shared_bytes(self.uops)
        if image is not None and image.parameters_offset not in (0, layout.arguments_offset):
            raise ValueError(f"kernel {name}: its CUBIN reads parameters at {image.parameters_offset:#x} of constant "
                             f"bank 0, the QMD V{layout.major_version:02d} launch writes them at "
                             f"{layout.arguments_offset:#x}: compile for this GPU's architecture")
        stack = image.stack_bytes if image else 0
        if nvcmd.local_bytes_per_thread(stack) > device.gpu.local_bytes_per_thread:
            raise ValueError(f"kernel {name} needs {stack} bytes of stack per thread; the GPU's local memory gives "
                             f"{device.gpu.local_bytes_per_thread - nvcmd.STACK_RESERVE} (less its reserve)")
        # constant banks other than 0 and device globals: one allocation, linked by the CUBIN's relocations
        data = module_data(self.binary) if self.binary else None
        banks: tuple[tuple[int, int, int], ...] = ()
        if data is not None and data.size:
            self.data_address = device.gpu.allocate(data.size, f"constants and globals of {name}")
            device.gpu.view(self.data_address, data.size)[:] = data.linked(self.data_address)
            banks = data.banks(self.data_address)
        self.resources = nvcmd.LaunchResources(self.register_count, self.shared_bytes, stack, device.gpu.sm, banks,
                                               image.arch if image else 0)
        self.parameters_size = layout.arguments_offset + (
            image.parameters_size if image and not mock else 8 * self.buffer_count + 4 * self.variable_count)

    def argument_block_size(self, buffer_count: int, value_count: int) -> int:
        """The QMD, constant buffer 0's fixed part, then 8 bytes a buffer address and 4 a value (256-byte aligned
        by the kernarg ring)."""
        return self.arguments_at + 8 * buffer_count + 4 * value_count

    def __call__(self, *buffers: Any, global_size: Sequence[int] = (1, 1, 1), local_size: Sequence[int] | None = None,
                 vals: Sequence[int] = (), wait: bool = False) -> float | None:
        """The MOCK code object's argument check, then the launch."""
        if self.checked:
            return super().__call__(*buffers, global_size=global_size, local_size=local_size, vals=vals, wait=wait)
        return HCQProgram.__call__(self, *buffers, global_size=global_size, local_size=local_size, vals=vals,
                                   wait=wait)


class NVQueueAllocator(MockQueueAllocator):
    """GPU memory; host copies go through a staging allocation and the copy queue, ordered after queued kernels."""

    def _copy(self, destination: int, source: int, nbytes: int) -> None:
        device = self.owner
        assert device is not None, "the allocator is used before its device is made"
        # the same copy-engine commands as the HCQ copy queue, handed to the copy channel directly: host copies are
        # the allocator's, not submissions of the core's queues (device.submissions counts those)
        queue = NVCopyQueue().wait(device.timeline_signal, device.timeline_value - 1)  # type: ignore[arg-type]
        queue.copy(destination, source, nbytes)
        queue.signal(device.timeline_signal, device.next_timeline_value())  # type: ignore[arg-type]
        queue.submit(device.channels["copy"])
        device.host_copies += 1
        device.synchronize()


class NVQueueDevice(HCQCompiled):
    """NV on the core's queue machinery, reaching its GPU through the kernel driver's channels (real or MOCK)."""

    def __init__(self, device: str, renderer: Any, compiler: Any, description: str, gpu: NVKernelGPU):
        self.gpu = gpu
        self.channels = gpu.channels
        self.qmd = gpu.qmd
        allocator = NVQueueAllocator(device, gpu, self.memory_bytes)  # type: ignore[arg-type]
        super().__init__(device, allocator, renderer, compiler, NVQueueProgram, QUEUES)
        allocator.owner = self
        self.kernargs.alignment = 256  # each block starts with a QMD, which SEND_PCAS_A addresses in 256-byte units
        self.interface_description = description
        self.host_copies = 0

    memory_bytes = 1 << 34

    def kernarg_memory(self, nbytes: int) -> tuple[memoryview, int | None]:
        """Argument memory in the GPU's address space (256-byte aligned)."""
        address = self.gpu.allocate(nbytes, "kernel arguments")
        return self.gpu.view(address, nbytes), address
