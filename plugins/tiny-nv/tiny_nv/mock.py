"""The simulated NVIDIA GPU behind DEV=MOCK+NV (its kernel driver is tiny_nv.mock_driver; there is one path).

MockGPU owns a GPU virtual address space backed by host memory. When a channel's doorbell rings it reads the
channel's GPFIFO entries between GP_GET and GP_PUT, decodes the pushbuffer words each points at, and executes the
methods: host-class semaphore releases (with timestamps) and acquires (a channel stalls on an acquire that is not
satisfied yet and resumes there when a doorbell rings again), copy-engine transfers, and compute launches: the QMD
gives the grid, the program address and constant buffer 0; the program is the kernel's linear program (packed next
to its CUBIN by MockCompiler) run by the core's interpreter on the buffers at the addresses in constant buffer 0.

Before it runs a launch it checks what hardware would depend on: the QMD against the kernel's CUBIN (code address,
registers, shared memory and SM configurations, constant banks and their relocations) and constant buffer 0's head
against the compute class's windows and local memory. This proves the host side (queue encoding, argument blocks,
signals, memory handling) in CI; it says nothing about what the CUBIN computes, which only a GPU can.
"""
from __future__ import annotations

import bisect
import struct
from typing import Any

from tiny_nv import nvcmd
from tiny_nv.kernel_driver import THREADS_PER_TPC
from tiny_nv.nvqueue import Channel
from tinycore.codegen.interpreter import Program
from tinycore.device.compiler import CompileError, Compiler
from tinycore.hcq.mock import (
    MockBuffer,
    MockMemory,
    embed_program,
    pack_mock_binary,
    program_from_source,
    run_kernel,
    unpack_mock_binary,
)
from tinycore.uop.ops import Ops

__all__ = ["MockBuffer", "MockCompiler", "MockGPU", "embed_program", "pack_mock_binary", "run_kernel",
           "unpack_mock_binary"]

_BOUND_CLASS = 1 << 20
"""Register key (plus the subchannel) of the class SET_OBJECT bound."""
_COMPUTE_CLASSES = (nvcmd.AMPERE_COMPUTE_A, 0xC7C0, 0xC9C0, nvcmd.HOPPER_COMPUTE_A)
_COPY_CLASSES = (nvcmd.AMPERE_DMA_COPY_A, 0xC7B5, nvcmd.HOPPER_DMA_COPY_A)


class MockCompiler(Compiler):
    """Packs the linear program embedded in the source with the CUBIN NVRTC (CUDA C) or ptxas (PTX) makes of the same
    source, when they are installed; without them the code object holds the program only."""

    def __init__(self, arch: str, language: str = "cuda"):
        super().__init__("nv-mock-kernels")
        self.arch, self.language = arch, language
        self.name = f"nv-mock-{language}-{arch}"

    def version(self) -> str:
        """NVRTC's version when it is used."""
        from tiny_nv.nvrtc import nvrtc_status
        return nvrtc_status()[1]

    def compile(self, src: str) -> bytes:
        """The MOCK code object of `src`."""
        from tiny_nv.nvrtc import compile_cuda, nvrtc_status
        uops_pickle = program_from_source(src)
        if uops_pickle is None:
            raise CompileError("the source carries no linear program: render it with the MOCK interface's CUDA "
                               "renderer (DEV=MOCK+NV)", log=src[:2000])
        if self.language == "cuda":
            cubin = compile_cuda(src, self.arch) if nvrtc_status()[0] else b""
        else:
            from tiny_nv.ptx_compiler import assemble_with_ptxas
            cubin = assemble_with_ptxas(src, self.arch) or b""
        return pack_mock_binary(uops_pickle, cubin)


class MockGPU(MockMemory):
    """A simulated GPU: the core's mock address space, channels and the engines that execute their commands."""

    def __init__(self, name: str = "MOCK NV"):
        super().__init__(name)
        self.channels: list[Channel] = []
        self.resume: dict[int, tuple[int, int]] = {}  # id(channel) -> (GPFIFO index, method index) of a stalled acquire
        self.registers: dict[int, dict[int, int]] = {}
        self.launches = 0
        self.copies = 0
        self.semaphore_releases = 0
        self.running = False
        self.last_qmd = b""  # the QMD of the latest launch (tests read its fields)
        self.images: dict[int, Any] = {}  # program address -> the CUBIN facts of the kernel there
        self.cubins: dict[int, bytes] = {}  # program address -> the CUBIN of the kernel there
        self.checked_globals: set[int] = set()  # program addresses whose device globals were checked
        self.sm: int | None = None  # the architecture the kernel driver reports (None: not through a driver)

    # ---- channels ----

    def ring(self, channel: Channel) -> None:
        """A doorbell: run every channel until each is idle or stalled on an acquire."""
        if channel not in self.channels:
            self.channels.append(channel)
        self.running = True
        try:
            progress = True
            while progress:
                progress = any([self._run_channel(candidate) for candidate in self.channels])
        finally:
            self.running = False

    def poll(self) -> None:
        """Let the GPU run: channels stalled on an acquire look at their semaphore again (a real GPU keeps polling;
        the host calls this whenever it reads a signal, so a value the host writes releases a waiting queue)."""
        if self.channels and not self.running:
            self.ring(self.channels[0])

    def _run_channel(self, channel: Channel) -> bool:
        """Execute the channel's new GPFIFO entries; True when anything ran."""
        userd = self.view(channel.userd, 0x100).cast("I")
        ran = False
        while userd[nvcmd.USERD_GP_GET // 4] != userd[nvcmd.USERD_GP_PUT // 4]:
            index = userd[nvcmd.USERD_GP_GET // 4]
            entry = int(self.view(channel.gpfifo + 8 * index, 8).cast("Q")[0])
            address, dwords = nvcmd.decode_gpfifo_entry(entry)
            words = list(self.view(address, 4 * dwords).cast("I"))
            methods = list(nvcmd.decode_pushbuffer(words))
            stalled_index, first = self.resume.pop(id(channel), (index, 0))
            start = first if stalled_index == index else 0
            for position in range(start, len(methods)):
                if not self._execute(channel, methods[position]):
                    self.resume[id(channel)] = (index, position)
                    return ran
                ran = True
            userd[nvcmd.USERD_GP_GET // 4] = (index + 1) % channel.gpfifo_entries
            ran = True
        return ran

    def map_at(self, address: int, backing: bytearray, purpose: str) -> None:
        """Make `backing` GPU memory at `address` (a mapping the kernel driver's UVM made)."""
        if self.starts:
            position = bisect.bisect_right(self.starts, address + len(backing) - 1) - 1
            if position >= 0 and self.starts[position] + len(self.allocations[self.starts[position]]) > address:
                raise ValueError(f"{self.name}: a mapping at {address:#x} overlaps one at {self.starts[position]:#x}")
        self.allocations[address] = backing
        self.purposes[address] = purpose
        bisect.insort(self.starts, address)

    def _bound_class(self, channel: Channel, registers: dict[int, int], subchannel: int, kinds: tuple[int, ...],
                     what: str) -> int | None:
        """The class SET_OBJECT bound to `subchannel` on a channel the kernel driver made (None on a bare channel,
        which tests of the command format make without a driver)."""
        if getattr(channel, "classes", None) is None:
            return None
        bound = registers.get(_BOUND_CLASS + subchannel)
        if bound not in kinds:
            raise ValueError(f"{self.name}: {what} on subchannel {subchannel}, which has no {what} class bound "
                             f"(SET_OBJECT gave {bound if bound is None else hex(bound)})")
        return bound

    def _execute(self, channel: Channel, method: nvcmd.Method) -> bool:
        """Run one method write; False when it is an acquire that is not satisfied yet (the channel stalls)."""
        registers = self.registers.setdefault(id(channel), {})
        if method.method == nvcmd.NVC6C0_SET_OBJECT:
            classes = getattr(channel, "classes", None)
            if classes is not None and method.value not in classes:
                raise ValueError(f"{self.name}: SET_OBJECT of class {method.value:#x} on subchannel "
                                 f"{method.subchannel}, which was not allocated on this channel")
            registers[_BOUND_CLASS + method.subchannel] = method.value
            return True
        if method.method == nvcmd.NVC56F_SEM_EXECUTE:  # host methods (below 0x100) on any subchannel
            return self._semaphore(registers, method.value)
        if method.subchannel == nvcmd.SUBCHANNEL_COMPUTE and method.method == nvcmd.NVC6C0_SEND_SIGNALING_PCAS2_B:
            if method.value != nvcmd.PCAS_ACTION_INVALIDATE_COPY_SCHEDULE:
                raise ValueError(f"{self.name}: unknown PCAS action {method.value}")
            bound = self._bound_class(channel, registers, method.subchannel, _COMPUTE_CLASSES, "compute")
            self._launch(registers.get(nvcmd.NVC6C0_SEND_PCAS_A + (nvcmd.SUBCHANNEL_COMPUTE << 16), 0) << 8, bound,
                         registers)
            return True
        if method.subchannel == nvcmd.SUBCHANNEL_COPY and method.method == nvcmd.NVC6B5_LAUNCH_DMA:
            self._bound_class(channel, registers, method.subchannel, _COPY_CLASSES, "copy")
            self._dma(registers, method.value)
            return True
        key = method.method + (method.subchannel << 16) if method.method >= 0x100 else method.method
        registers[key] = method.value
        return True

    def _semaphore(self, registers: dict[int, int], execute: int) -> bool:
        address = registers.get(nvcmd.NVC56F_SEM_ADDR_LO, 0) | (registers.get(nvcmd.NVC56F_SEM_ADDR_HI, 0) << 32)
        payload = registers.get(nvcmd.NVC56F_SEM_PAYLOAD_LO, 0) | (registers.get(nvcmd.NVC56F_SEM_PAYLOAD_HI, 0) << 32)
        operation, wide = execute & 7, bool(execute & nvcmd.SEM_PAYLOAD_SIZE_64BIT)
        if operation == nvcmd.SEM_OPERATION_RELEASE:
            if wide:
                words = self.view(address, 16 if execute & nvcmd.SEM_RELEASE_TIMESTAMP else 8).cast("Q")
                words[0] = payload
                if execute & nvcmd.SEM_RELEASE_TIMESTAMP:
                    words[1] = self.now_ns()
            else:
                self.view(address, 4).cast("I")[0] = payload & 0xFFFFFFFF
            self.semaphore_releases += 1
            return True
        if operation in (nvcmd.SEM_OPERATION_ACQ_CIRC_GEQ, nvcmd.SEM_OPERATION_ACQ_STRICT_GEQ,
                         nvcmd.SEM_OPERATION_ACQUIRE):
            current = int(self.view(address, 8 if wide else 4).cast("Q" if wide else "I")[0])
            if operation == nvcmd.SEM_OPERATION_ACQUIRE:
                return current == payload
            return current >= payload
        raise ValueError(f"{self.name}: semaphore operation {operation} is not simulated")

    def _dma(self, registers: dict[int, int], launch: int) -> None:
        copy = nvcmd.SUBCHANNEL_COPY << 16
        source = (registers.get(nvcmd.NVC6B5_OFFSET_IN_UPPER + copy, 0) << 32) | \
            registers.get(nvcmd.NVC6B5_OFFSET_IN_LOWER + copy, 0)
        destination = (registers.get(nvcmd.NVC6B5_OFFSET_OUT_UPPER + copy, 0) << 32) | \
            registers.get(nvcmd.NVC6B5_OFFSET_OUT_LOWER + copy, 0)
        length = registers.get(nvcmd.NVC6B5_LINE_LENGTH_IN + copy, 0)
        if not launch & nvcmd.DMA_SRC_PITCH or not launch & nvcmd.DMA_DST_PITCH:
            raise ValueError(f"{self.name}: only pitch-linear copies are simulated (LAUNCH_DMA {launch:#x})")
        data = bytes(self.view(source, length))
        self.view(destination, length)[:] = data
        self.copies += 1
        if launch & (3 << 3):
            address = (registers.get(nvcmd.NVC6B5_SET_SEMAPHORE_A + copy, 0) << 32) | \
                registers.get(nvcmd.NVC6B5_SET_SEMAPHORE_B + copy, 0)
            self.view(address, 4).cast("I")[0] = registers.get(nvcmd.NVC6B5_SET_SEMAPHORE_PAYLOAD + copy, 0)

    def _launch(self, qmd_address: int, bound_class: int | None = None,
                registers: dict[int, int] | None = None) -> None:
        major = nvcmd.qmd_get(self.view(qmd_address, nvcmd.QMD_BYTES), "QMD_MAJOR_VERSION")
        layout = nvcmd.qmd_layout(major)
        if bound_class is not None and (major == 4) != (bound_class == nvcmd.HOPPER_COMPUTE_A):
            raise ValueError(f"{self.name}: a version {major} QMD sent to compute class {bound_class:#x} (Hopper's "
                             "class reads version 4, Ampere's and Ada's version 3)")
        qmd = self.view(qmd_address, layout.size)
        if not layout.get(qmd, "CONSTANT_BUFFER_VALID0"):
            raise ValueError(f"{self.name}: a launch without constant buffer 0 (its parameters)")
        grid, block, program_address, constants = layout.decode_launch(qmd)
        program = self.programs.get(program_address)
        if program is None:
            program = self.programs[program_address] = self._load_program(program_address)
        self._check_launch(program, grid, block)
        self._check_qmd(layout, qmd, program_address, program)
        if bound_class is not None:  # a channel of the kernel driver's: its compute class has its memory windows
            self._check_driver_constants(layout, qmd, constants, grid, block, registers or {},
                                         self.images.get(program_address))
        run_kernel(self, program, constants + layout.arguments_offset)
        self.launches += 1
        self.last_qmd = bytes(qmd)

    def _check_driver_constants(self, layout: nvcmd.QMDLayout, qmd: memoryview, constants: int, grid: list[int],
                                block: list[int], registers: dict[int, int], image: Any) -> None:
        """Constant buffer 0's head as the compiled code reads it (c[0x0][0x0] to [0x2c]): the launch sizes, the
        shared and local memory windows the channel's compute class was given, and a stack pointer whose stack lies
        inside the thread's local memory (the QMD's high local size, within what the class's local memory holds)."""
        head = self.view(constants, nvcmd.CB0_STACK_TOP + 4)
        sizes = struct.unpack_from("<6I", head, nvcmd.CB0_BLOCK_DIM)
        if list(sizes) != block + grid:
            raise ValueError(f"{self.name}: constant buffer 0 says block {list(sizes[:3])} and grid "
                             f"{list(sizes[3:])}, the QMD launches {block} and {grid}")
        compute = nvcmd.SUBCHANNEL_COMPUTE << 16

        def wide(method: int) -> int:
            return (registers.get(method + compute, 0) << 32) | registers.get(method + 4 + compute, 0)
        for offset, method, what in ((nvcmd.CB0_SHARED_WINDOW, nvcmd.NVC6C0_SET_SHADER_SHARED_MEMORY_WINDOW_A,
                                      "shared"),
                                     (nvcmd.CB0_LOCAL_WINDOW, nvcmd.NVC6C0_SET_SHADER_LOCAL_MEMORY_WINDOW_A, "local")):
            window = wide(method)
            if window == 0 or struct.unpack_from("<Q", head, offset)[0] != window:
                raise ValueError(f"{self.name}: constant buffer 0 gives the {what} memory window as "
                                 f"{struct.unpack_from('<Q', head, offset)[0]:#x}, the compute class has {window:#x}")
        stack_top = struct.unpack_from("<I", head, nvcmd.CB0_STACK_TOP)[0]
        high = layout.get(qmd, "SHADER_LOCAL_MEMORY_HIGH_SIZE")
        per_thread = wide(nvcmd.NVC6C0_SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_A) // THREADS_PER_TPC
        stack = image.stack_bytes if image is not None else 0
        if not nvcmd.LOCAL_WINDOW_SPAN - high <= stack_top - stack <= stack_top <= nvcmd.LOCAL_WINDOW_SPAN or \
                high > per_thread:
            raise ValueError(f"{self.name}: the stack ({stack} bytes below {stack_top:#x}) is not inside the thread's "
                             f"high local memory ({high} bytes at the top of the window; the class's local memory "
                             f"holds {per_thread} a thread)")

    def _load_program(self, program_address: int) -> Program:
        """The interpreter program of the code object at `program_address`, or of the one whose CUBIN's text the
        address points into (the kernel driver's interface points QMDs at the machine code inside the upload)."""
        from tiny_nv.cubin import _sections, kernel_image
        from tiny_nv.tensor_core import warp_program
        try:
            uops, _cubin = unpack_mock_binary(self.view(program_address, self.extent(program_address)))
            return warp_program(uops)
        except ValueError:
            start = self.starts[bisect.bisect_right(self.starts, program_address) - 1]
        data = self.view(start, self.extent(start))
        uops, cubin = unpack_mock_binary(data)
        cubin_at = start + 16 + int.from_bytes(bytes(data[8:12]), "little")
        kernels = [name[6:] for name in _sections(cubin) if name.startswith(".text.")] if cubin else []
        image = next((image for image in (kernel_image(cubin, name) for name in kernels)
                      if cubin_at + image.text_offset == program_address), None)
        if image is None:
            raise ValueError(f"{self.name}: the QMD's program address {program_address:#x} is not the start of a "
                             "kernel's code in the upload")
        self.images[program_address] = image
        self.cubins[program_address] = bytes(cubin)
        return warp_program(uops)

    def _check_qmd(self, layout: nvcmd.QMDLayout, qmd: memoryview, program_address: int, program: Program) -> None:
        """What the hardware would need of the QMD beyond the grid: constant buffer 0 covering the parameters, and
        (when the kernel's CUBIN is known) its register count and shared memory."""
        buffers = sum(1 for uop in program.uops if uop.op is Ops.DEFINE_GLOBAL)
        values = len({uop.arg[0] for uop in program.uops if uop.op is Ops.DEFINE_VAR})
        needed, size = layout.arguments_offset + 8 * buffers + 4 * values, 16 * layout.get(
            qmd, "CONSTANT_BUFFER_SIZE_SHIFTED4_0")
        if size < needed:
            raise ValueError(f"{self.name}: constant buffer 0 is {size} bytes, the kernel's parameters end at {needed}")
        if not (layout.get(qmd, "CONSTANT_BUFFER_INVALIDATE0") and layout.get(qmd, "INVALIDATE_SHADER_CONSTANT_CACHE")):
            raise ValueError(f"{self.name}: a QMD that does not invalidate the constant cache: its constant buffer 0 "
                             "sits in reused argument memory, a real SM could read an earlier launch's parameters")
        image = self.images.get(program_address)
        if image is None:
            return
        field = "REGISTER_COUNT" if layout.major_version == 4 else "REGISTER_COUNT_V"
        if layout.get(qmd, field) != image.registers:
            raise ValueError(f"{self.name}: the QMD gives {layout.get(qmd, field)} registers, the kernel uses "
                             f"{image.registers}")
        if layout.get(qmd, "SHARED_MEMORY_SIZE") < image.shared_bytes:
            raise ValueError(f"{self.name}: the QMD gives {layout.get(qmd, 'SHARED_MEMORY_SIZE')} bytes of shared "
                             f"memory, the kernel declares {image.shared_bytes}")
        low, target, high = (layout.get(qmd, f"{name}_SM_CONFIG_SHARED_MEM_SIZE") for name in ("MIN", "TARGET", "MAX"))
        largest = nvcmd.SHARED_CARVEOUTS_KIB.get(self.sm or 0, (228,))[-1]
        needed = layout.get(qmd, "SHARED_MEMORY_SIZE") + nvcmd.SHARED_RESERVED_PER_BLOCK
        if not 0 < low <= target <= high <= nvcmd.sm_config_value(largest) or (target - 1) * 4096 < needed:
            raise ValueError(f"{self.name}: SM shared memory configurations min {low}, target {target}, max {high} "
                             f"(4 KiB units + 1) do not hold the block's {needed} bytes within sm_{self.sm}'s "
                             f"{largest} KiB")
        if layout.get(qmd, "SASS_VERSION") != nvcmd.sass_version(image.arch):
            raise ValueError(f"{self.name}: the QMD gives SASS version {layout.get(qmd, 'SASS_VERSION'):#x}, the "
                             f"kernel's code is for sm_{image.arch}")
        if layout.get(qmd, "CWD_MEMBAR_TYPE") != nvcmd.CWD_MEMBAR_TYPE_L1_SYSMEMBAR:
            raise ValueError(f"{self.name}: a QMD without the system memory barrier at the end of each block: the "
                             "semaphore released after it could be seen before the kernel's writes")
        self._check_constant_banks(layout, qmd, program_address)

    def _check_constant_banks(self, layout: nvcmd.QMDLayout, qmd: memoryview, program_address: int) -> None:
        """Each constant bank of the kernel's CUBIN besides 0 bound by the QMD with the CUBIN's bytes, its relocated
        words holding the GPU address of their symbol, whose memory holds the symbol's initial bytes (checked at the
        kernel's first launch; later launches may have changed device globals)."""
        from tiny_nv.cubin import module_data
        cubin = self.cubins.get(program_address)
        if cubin is None:
            return
        data = module_data(cubin)
        relocated = {(relocation.target, relocation.offset): relocation for relocation in data.relocations}
        for name, contents in data.contents.items():
            if not name.startswith(".nv.constant"):
                continue
            bank = int(name[len(".nv.constant"):])
            bound = layout.constant_bank(qmd, bank)
            if bound is None or bound[1] < len(contents):
                raise ValueError(f"{self.name}: the kernel reads constant bank {bank} ({len(contents)} bytes), the QMD "
                                 f"binds {'nothing' if bound is None else f'{bound[1]} bytes'} there")
            seen = bytearray(self.view(bound[0], len(contents)))
            for (target, offset), relocation in relocated.items():
                if target != name:
                    continue
                width = 8 if relocation.kind == 2 else 4
                address = int.from_bytes(seen[offset:offset + width], "little")
                symbol_bytes = data.contents[relocation.symbol_section][relocation.symbol_value + relocation.addend:]
                if program_address not in self.checked_globals and \
                        bytes(self.view(address, len(symbol_bytes))) != symbol_bytes:
                    raise ValueError(f"{self.name}: constant bank {bank} at {offset:#x} points at {address:#x}, "
                                     f"which does not hold the data of its symbol in {relocation.symbol_section}")
                seen[offset:offset + width] = contents[offset:offset + width]
            if bytes(seen) != contents:
                raise ValueError(f"{self.name}: constant bank {bank} does not hold the CUBIN's {name}")
        self.checked_globals.add(program_address)

    def _check_launch(self, program: Program, grid: list[int], block: list[int]) -> None:
        """The QMD's grid and block must be the sizes the program's thread indices were made for."""
        for special in program.specials:
            label = str(special.arg)
            size = special.src[0] if special.src else None
            if size is None or size.op is not Ops.CONST:
                continue
            launched = (block if label.startswith("lidx") else grid)[int(label[-1])]
            if launched != size.arg:
                raise ValueError(f"{self.name}: the QMD launches {launched} along {label}, the kernel was made for "
                                 f"{size.arg}")
