"""The GPU's own command format, encoded and decoded: GPFIFO entries, pushbuffer methods and the QMD.

A channel reads a ring of 64-bit GPFIFO entries; each points at a run of 32-bit pushbuffer words. A pushbuffer is a
sequence of method headers, each followed by its data words, addressed to a subchannel (the engine class bound to
it): the host class (Ampere/Hopper GPFIFO, clc56f: semaphores), the compute class (clc6c0 and later: launches
through a QMD) and the copy engine (clc6b5: DMA transfers). Bit positions follow NVIDIA's published class headers
(open-gpu-doc, open-gpu-kernel-modules); only the fields used here are listed.
"""
from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

# ---- subchannels the queues bind their classes to ----
SUBCHANNEL_COMPUTE = 1
SUBCHANNEL_COPY = 4
SUBCHANNEL_HOST = 0  # host methods (semaphores) are recognised by address on any subchannel

# ---- class numbers ----
AMPERE_CHANNEL_GPFIFO_A = 0xC56F
AMPERE_COMPUTE_A = 0xC6C0
AMPERE_DMA_COPY_A = 0xC6B5
HOPPER_COMPUTE_A = 0xCBC0
HOPPER_DMA_COPY_A = 0xC8B5

# ---- pushbuffer method header: SEC_OP[31:29] COUNT[28:16] SUBCHANNEL[15:13] ADDRESS[11:0] (dword address) ----
SEC_OP_INC_METHOD = 1
SEC_OP_NON_INC_METHOD = 3

# ---- host class (clc56f) methods, byte offsets ----
NVC56F_SET_OBJECT = 0x0000
NVC56F_NON_STALL_INTERRUPT = 0x0020
NVC56F_SEM_ADDR_LO = 0x005C
NVC56F_SEM_ADDR_HI = 0x0060
NVC56F_SEM_PAYLOAD_LO = 0x0064
NVC56F_SEM_PAYLOAD_HI = 0x0068
NVC56F_SEM_EXECUTE = 0x006C
SEM_OPERATION_ACQUIRE = 0
SEM_OPERATION_RELEASE = 1
SEM_OPERATION_ACQ_STRICT_GEQ = 2
SEM_OPERATION_ACQ_CIRC_GEQ = 3
SEM_ACQUIRE_SWITCH_TSG = 1 << 12
SEM_RELEASE_WFI = 1 << 20
SEM_PAYLOAD_SIZE_64BIT = 1 << 24
SEM_RELEASE_TIMESTAMP = 1 << 25

# ---- compute class (clc6c0; the same offsets in clcbc0) methods ----
NVC6C0_SET_OBJECT = 0x0000
NVC6C0_SET_SHADER_SHARED_MEMORY_WINDOW_A = 0x02A0  # then _B: upper, lower address bits
NVC6C0_SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_A = 0x02E4  # _A, _B: size per TPC (upper, lower); _C: SM count
NVC6C0_SET_SHADER_LOCAL_MEMORY_A = 0x0790  # then _B: the local memory's GPU address (upper, lower)
NVC6C0_SET_SHADER_LOCAL_MEMORY_WINDOW_A = 0x07B0  # then _B
NVC6C0_SEND_PCAS_A = 0x02B4  # QMD address >> 8
NVC6C0_SEND_SIGNALING_PCAS2_B = 0x02C0
PCAS_ACTION_INVALIDATE_COPY_SCHEDULE = 9

# ---- copy engine (clc6b5) methods ----
NVC6B5_SET_OBJECT = 0x0000
NVC6B5_SET_SEMAPHORE_A = 0x0240  # upper address bits
NVC6B5_SET_SEMAPHORE_B = 0x0244  # lower address bits
NVC6B5_SET_SEMAPHORE_PAYLOAD = 0x0248
NVC6B5_LAUNCH_DMA = 0x0300
NVC6B5_OFFSET_IN_UPPER = 0x0400
NVC6B5_OFFSET_IN_LOWER = 0x0404
NVC6B5_OFFSET_OUT_UPPER = 0x0408
NVC6B5_OFFSET_OUT_LOWER = 0x040C
NVC6B5_LINE_LENGTH_IN = 0x0418
DMA_TRANSFER_NON_PIPELINED = 2  # DATA_TRANSFER_TYPE[1:0]
DMA_FLUSH_ENABLE = 1 << 2
DMA_SEMAPHORE_RELEASE_ONE_WORD = 1 << 3  # SEMAPHORE_TYPE[4:3]
DMA_SRC_PITCH = 1 << 7
DMA_DST_PITCH = 1 << 8

# ---- the GPFIFO entry: GET[31:2], GET_HI[39:32], LEVEL (subroutine) bit 41, LENGTH[62:42] in dwords ----
GPFIFO_LEVEL_SUBROUTINE = 1 << 41

# ---- USERD (the channel's control page): GP_GET and GP_PUT indices ----
USERD_GP_GET = 0x88
USERD_GP_PUT = 0x8C

QMD_BYTES = 0x100
CONSTANT_BANKS = 8
"""Constant buffers a QMD binds (0: the driver's head and the parameters; others: the kernel's constant banks)."""
QMD_FIELDS: dict[str, tuple[int, int]] = {  # QMD V03_00 (clc6c0qmd.h, clc9c0qmd.h): name -> (high bit, low bit)
    "INVALIDATE_SHADER_DATA_CACHE": (189, 189), "INVALIDATE_SHADER_CONSTANT_CACHE": (191, 191),
    "CWD_MEMBAR_TYPE": (369, 368), "SASS_VERSION": (1663, 1656),
    "CTA_RASTER_WIDTH": (415, 384), "CTA_RASTER_HEIGHT": (431, 416), "CTA_RASTER_DEPTH": (463, 448),
    "SHARED_MEMORY_SIZE": (561, 544), "MIN_SM_CONFIG_SHARED_MEM_SIZE": (567, 562),
    "MAX_SM_CONFIG_SHARED_MEM_SIZE": (574, 569), "QMD_MAJOR_VERSION": (583, 580),
    "CTA_THREAD_DIMENSION0": (607, 592), "CTA_THREAD_DIMENSION1": (623, 608), "CTA_THREAD_DIMENSION2": (639, 624),
    "REGISTER_COUNT_V": (656, 648), "TARGET_SM_CONFIG_SHARED_MEM_SIZE": (662, 657),
    "SHADER_LOCAL_MEMORY_LOW_SIZE": (759, 736), "BARRIER_COUNT": (767, 763),
    "RELEASE0_ADDRESS_LOWER": (799, 768), "RELEASE0_ADDRESS_UPPER": (807, 800), "RELEASE0_ENABLE": (823, 823),
    "RELEASE0_PAYLOAD64B": (829, 829), "RELEASE0_STRUCTURE_SIZE": (831, 830),
    "RELEASE0_PAYLOAD_LOWER": (863, 832), "RELEASE0_PAYLOAD_UPPER": (895, 864),
    "PROGRAM_ADDRESS_LOWER": (1567, 1536), "PROGRAM_ADDRESS_UPPER": (1584, 1568),
    "SHADER_LOCAL_MEMORY_HIGH_SIZE": (1623, 1600),
    **{name: bits for bank in range(CONSTANT_BANKS) for name, bits in (
        (f"CONSTANT_BUFFER_VALID{bank}", (640 + bank, 640 + bank)),
        (f"CONSTANT_BUFFER_ADDR_LOWER{bank}", (1055 + 64 * bank, 1024 + 64 * bank)),
        (f"CONSTANT_BUFFER_ADDR_UPPER{bank}", (1072 + 64 * bank, 1056 + 64 * bank)),
        (f"CONSTANT_BUFFER_INVALIDATE{bank}", (1074 + 64 * bank, 1074 + 64 * bank)),
        (f"CONSTANT_BUFFER_SIZE_SHIFTED4_{bank}", (1087 + 64 * bank, 1075 + 64 * bank)))},
}
QMD_RELEASE_TWO_WORDS = 2
CONSTANT_BUFFER_ARGUMENTS_OFFSET = 0x160
"""Where the kernel parameters start in constant buffer 0 (the driver's area before them holds launch facts)."""

QMD_V04_FIELDS: dict[str, tuple[int, int]] = {  # QMD V04_00 (Hopper, clcbc0qmd.h): name -> (high bit, low bit)
    "QMD_TYPE": (25, 23),
    "SHADER_LOCAL_MEMORY_LOW_SIZE": (535, 512), "SHADER_LOCAL_MEMORY_HIGH_SIZE": (567, 544),
    "QMD_MINOR_VERSION": (579, 576), "QMD_MAJOR_VERSION": (583, 580), "SHARED_MEMORY_SIZE": (601, 584),
    "INVALIDATE_SHADER_DATA_CACHE": (605, 605), "INVALIDATE_SHADER_CONSTANT_CACHE": (607, 607),
    "SASS_VERSION": (543, 536), "CWD_MEMBAR_TYPE": (1137, 1136),
    "MIN_SM_CONFIG_SHARED_MEM_SIZE": (613, 608), "MAX_SM_CONFIG_SHARED_MEM_SIZE": (619, 614),
    "TARGET_SM_CONFIG_SHARED_MEM_SIZE": (625, 620),
    "GRID_WIDTH": (1055, 1024), "GRID_HEIGHT": (1071, 1056), "GRID_DEPTH": (1103, 1088),
    "CTA_THREAD_DIMENSION0": (1167, 1152), "CTA_THREAD_DIMENSION1": (1183, 1168),
    "CTA_THREAD_DIMENSION2": (1199, 1184), "REGISTER_COUNT": (1208, 1200), "BARRIER_COUNT": (1215, 1211),
    "PROGRAM_ADDRESS_LOWER": (1247, 1216), "PROGRAM_ADDRESS_UPPER": (1272, 1248),
    **{name: bits for bank in range(CONSTANT_BANKS) for name, bits in (
        (f"CONSTANT_BUFFER_VALID{bank}", (416 + 4 * bank, 416 + 4 * bank)),
        (f"CONSTANT_BUFFER_INVALIDATE{bank}", (419 + 4 * bank, 419 + 4 * bank)),
        (f"CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6_{bank}", (1567 + 64 * bank, 1536 + 64 * bank)),
        (f"CONSTANT_BUFFER_ADDR_UPPER_SHIFTED6_{bank}", (1586 + 64 * bank, 1568 + 64 * bank)),
        (f"CONSTANT_BUFFER_SIZE_SHIFTED4_{bank}", (1599 + 64 * bank, 1587 + 64 * bank)))},
}
QMD_TYPE_GRID_CTA = 2
CWD_MEMBAR_TYPE_L1_SYSMEMBAR = 1
"""A system-scope memory barrier as each block ends, so a semaphore released after the launch sees its writes."""


def sass_version(sm: int) -> int:
    """The QMD's SASS_VERSION of code for sm_XY: the major and minor digits as nibbles (sm_90: 0x90, sm_86: 0x86)."""
    return ((sm // 10) << 4) | (sm % 10)

# ---- constant buffer 0's head: what the CUDA ABI's compiled code reads before the parameters (c[0x0][...]) ----
CB0_BLOCK_DIM = 0x00  # ntid: blockDim.x, .y, .z (32-bit each)
CB0_GRID_DIM = 0x0C  # nctaid: gridDim.x, .y, .z
CB0_SHARED_WINDOW = 0x18  # 64-bit generic address where the block's shared memory starts (cvta.shared)
CB0_LOCAL_WINDOW = 0x20  # 64-bit generic address where the thread's local memory starts (cvta.local)
CB0_STACK_TOP = 0x28  # 32-bit: every kernel's first instruction loads it into R1, the stack pointer
LOCAL_WINDOW_SPAN = 1 << 24
"""Local memory addresses are offsets into a 16 MiB window per thread; the stack sits at its top."""
STACK_RESERVE = 0x240
"""Bytes at the top of a thread's local window kept above the stack (for the trap handler): the stack pointer
starts at LOCAL_WINDOW_SPAN - STACK_RESERVE and the QMD's high local memory covers both."""
STACK_TOP = LOCAL_WINDOW_SPAN - STACK_RESERVE
MIN_STACK_BYTES = 0x400
"""Stack given to every thread, above what its CUBIN declares (calls into the compiler's helpers use some)."""
SHARED_RESERVED_PER_BLOCK = 1024
"""Shared memory the SM keeps per block for the system on sm_80 and later (CUDA programming guide)."""
SHARED_CARVEOUTS_KIB: dict[int, tuple[int, ...]] = {  # shared memory sizes an SM can be configured to, per sm_XX
    80: (0, 8, 16, 32, 64, 100, 132, 164), 86: (0, 8, 16, 32, 64, 100), 87: (0, 8, 16, 32, 64, 100, 132, 164),
    89: (0, 8, 16, 32, 64, 100), 90: (0, 8, 16, 32, 64, 100, 132, 164, 196, 228)}


def local_bytes_per_thread(stack_bytes: int) -> int:
    """The QMD's high local memory size for a kernel whose CUBIN declares `stack_bytes` of stack per thread."""
    return max(-(-stack_bytes // 16) * 16, MIN_STACK_BYTES) + STACK_RESERVE


def sm_config_value(kib: int) -> int:
    """The encoding of an SM shared memory configuration in the QMD's MIN/MAX/TARGET fields: 4 KiB units plus one."""
    return kib // 4 + 1


def shared_memory_configuration(shared_bytes: int, sm: int) -> tuple[int, int, int]:
    """(minimum, target, maximum) SM shared memory configurations, encoded, for a block of `shared_bytes`: the
    smallest carveout that holds the block (and the system's reserve) as minimum and target, the largest as maximum."""
    carveouts = SHARED_CARVEOUTS_KIB.get(sm, SHARED_CARVEOUTS_KIB[86])
    needed = shared_bytes + SHARED_RESERVED_PER_BLOCK
    fitting = [kib for kib in carveouts if kib * 1024 >= needed]
    if not fitting:
        raise ValueError(f"a block needs {shared_bytes} bytes of shared memory (+{SHARED_RESERVED_PER_BLOCK} the "
                         f"system keeps); an sm_{sm} SM holds at most {carveouts[-1]} KiB")
    return sm_config_value(fitting[0]), sm_config_value(fitting[0]), sm_config_value(carveouts[-1])


@dataclass(frozen=True)
class LaunchResources:
    """What a kernel needs of an SM beyond its grid: registers, shared and local memory, its other constant banks."""

    registers: int = 0
    shared_bytes: int = 0
    stack_bytes: int = 0
    sm: int = 90
    """The GPU's architecture (sm_XY as XY): which shared memory configurations its SMs have."""
    constant_banks: tuple[tuple[int, int, int], ...] = ()
    """(bank, GPU address, size) of each constant bank besides 0."""
    code_sm: int = 0
    """The architecture the code was compiled for (0: the GPU's)."""


@dataclass(frozen=True)
class QMDLayout:
    """One QMD version: its fields, its size, where constant buffer 0 holds the kernel parameters, and where its
    head holds the global memory descriptor."""

    major_version: int
    fields: dict[str, tuple[int, int]]
    size: int
    arguments_offset: int
    memory_descriptor_offset: int

    def set(self, qmd: bytearray | memoryview, name: str, value: int) -> None:
        """Write field `name`."""
        qmd_set(qmd, name, value, self.fields)

    def get(self, qmd: bytes | bytearray | memoryview, name: str) -> int:
        """Read field `name`."""
        return qmd_get(qmd, name, self.fields)

    def _bank_fields(self, bank: int, address: int, size: int) -> list[tuple[str, Any]]:
        if self.major_version == 4:
            if address % 64:
                raise ValueError(f"QMD V04 addresses constant buffers in 64-byte units, got {address:#x}")
            place = [(f"CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6_{bank}", (address >> 6) & 0xFFFFFFFF),
                     (f"CONSTANT_BUFFER_ADDR_UPPER_SHIFTED6_{bank}", address >> 38)]
        else:
            place = [(f"CONSTANT_BUFFER_ADDR_LOWER{bank}", address & 0xFFFFFFFF),
                     (f"CONSTANT_BUFFER_ADDR_UPPER{bank}", address >> 32)]
        # argument blocks are reused from a ring: the SM must not serve a launch constants cached from an earlier one
        return place + [(f"CONSTANT_BUFFER_VALID{bank}", 1), (f"CONSTANT_BUFFER_INVALIDATE{bank}", 1),
                        (f"CONSTANT_BUFFER_SIZE_SHIFTED4_{bank}", -(-size // 16))]

    def launch_fields(self, grid: list[Any], block: list[Any], program_address: int, constants_address: int,
                      constants_size: int, resources: LaunchResources) -> list[tuple[str, Any]]:
        """(field, value) pairs of a grid launch; values may be symbolic (the queue writes those at submit)."""
        if self.major_version == 4:
            sizes = [("GRID_WIDTH", grid[0]), ("GRID_HEIGHT", grid[1]), ("GRID_DEPTH", grid[2]),
                     ("QMD_TYPE", QMD_TYPE_GRID_CTA), ("REGISTER_COUNT", resources.registers)]
        else:
            sizes = [("CTA_RASTER_WIDTH", grid[0]), ("CTA_RASTER_HEIGHT", grid[1]), ("CTA_RASTER_DEPTH", grid[2]),
                     ("REGISTER_COUNT_V", resources.registers)]
        low, target, high = shared_memory_configuration(resources.shared_bytes, resources.sm)
        banks = self._bank_fields(0, constants_address, constants_size)
        for bank, address, size in resources.constant_banks:
            if not 0 < bank < CONSTANT_BANKS:
                raise ValueError(f"constant bank {bank}: a QMD binds banks 1 to {CONSTANT_BANKS - 1} beside bank 0")
            banks += self._bank_fields(bank, address, size)
        return sizes + banks + [
            ("CTA_THREAD_DIMENSION0", block[0]), ("CTA_THREAD_DIMENSION1", block[1]),
            ("CTA_THREAD_DIMENSION2", block[2]), ("QMD_MAJOR_VERSION", self.major_version), ("BARRIER_COUNT", 1),
            ("SHARED_MEMORY_SIZE", -(-resources.shared_bytes // 256) * 256),
            ("MIN_SM_CONFIG_SHARED_MEM_SIZE", low), ("TARGET_SM_CONFIG_SHARED_MEM_SIZE", target),
            ("MAX_SM_CONFIG_SHARED_MEM_SIZE", high),
            ("INVALIDATE_SHADER_DATA_CACHE", 1), ("INVALIDATE_SHADER_CONSTANT_CACHE", 1),
            ("SASS_VERSION", sass_version(resources.code_sm or resources.sm)),
            ("CWD_MEMBAR_TYPE", CWD_MEMBAR_TYPE_L1_SYSMEMBAR),
            ("SHADER_LOCAL_MEMORY_HIGH_SIZE", local_bytes_per_thread(resources.stack_bytes)),
            ("PROGRAM_ADDRESS_LOWER", program_address & 0xFFFFFFFF), ("PROGRAM_ADDRESS_UPPER", program_address >> 32)]

    def driver_constants(self, grid: list[Any], block: list[Any], shared_window: int,
                         local_window: int) -> list[tuple[int, str, Any]]:
        """(offset, struct format, value) of constant buffer 0's head: launch sizes (may be symbolic), the shared
        and local memory windows, the stack pointer's start and the global memory descriptor (0: the default
        access policy; our kernels create no cache policies)."""
        return [*((CB0_BLOCK_DIM + 4 * axis, "<I", block[axis]) for axis in range(3)),
                *((CB0_GRID_DIM + 4 * axis, "<I", grid[axis]) for axis in range(3)),
                (CB0_SHARED_WINDOW, "<Q", shared_window), (CB0_LOCAL_WINDOW, "<Q", local_window),
                (CB0_STACK_TOP, "<I", STACK_TOP), (self.memory_descriptor_offset, "<Q", 0)]

    def constant_bank(self, qmd: bytes | bytearray | memoryview, bank: int) -> tuple[int, int] | None:
        """(GPU address, size in bytes) of constant bank `bank`, None when the QMD does not bind it."""
        if not self.get(qmd, f"CONSTANT_BUFFER_VALID{bank}"):
            return None
        if self.major_version == 4:
            address = (self.get(qmd, f"CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6_{bank}") |
                       (self.get(qmd, f"CONSTANT_BUFFER_ADDR_UPPER_SHIFTED6_{bank}") << 32)) << 6
        else:
            address = self.get(qmd, f"CONSTANT_BUFFER_ADDR_LOWER{bank}") | \
                (self.get(qmd, f"CONSTANT_BUFFER_ADDR_UPPER{bank}") << 32)
        return address, 16 * self.get(qmd, f"CONSTANT_BUFFER_SIZE_SHIFTED4_{bank}")

    def decode_launch(self, qmd: bytes | bytearray | memoryview) -> tuple[list[int], list[int], int, int]:
        """(grid, block, program address, constant buffer 0 address) of a QMD of this layout."""
        get = self.get
        if self.major_version == 4:
            grid = [get(qmd, name) for name in ("GRID_WIDTH", "GRID_HEIGHT", "GRID_DEPTH")]
        else:
            grid = [get(qmd, name) for name in ("CTA_RASTER_WIDTH", "CTA_RASTER_HEIGHT", "CTA_RASTER_DEPTH")]
        block = [get(qmd, f"CTA_THREAD_DIMENSION{axis}") for axis in range(3)]
        program = get(qmd, "PROGRAM_ADDRESS_LOWER") | (get(qmd, "PROGRAM_ADDRESS_UPPER") << 32)
        bank0 = self.constant_bank(qmd, 0)
        return grid, block, program, bank0[0] if bank0 else 0


QMD_V03 = QMDLayout(3, QMD_FIELDS, QMD_BYTES, CONSTANT_BUFFER_ARGUMENTS_OFFSET, 0x118)
"""Ampere and Ada compute classes (clc6c0, clc7c0, clc9c0)."""
QMD_V04 = QMDLayout(4, QMD_V04_FIELDS, 0x180, 0x210, 0x208)
"""Hopper (clcbc0): grid and constant buffer fields moved, constant buffer addresses in 64-byte units, the
register count in the QMD, the kernel parameters at 0x210 of constant buffer 0."""


def qmd_layout(major_version: int) -> QMDLayout:
    """The layout of QMD major version `major_version` (3 or 4)."""
    layouts = {3: QMD_V03, 4: QMD_V04}
    if major_version not in layouts:
        raise ValueError(f"QMD major version {major_version} is not one this plugin writes (3: Ampere/Ada, 4: Hopper)")
    return layouts[major_version]


def method_header(subchannel: int, method: int, count: int, increment: bool = True) -> int:
    """The header word of `count` data words for `method` (a byte offset) on `subchannel`."""
    if method % 4 or not 0 <= method < 0x4000 or not 0 <= count < (1 << 13) or not 0 <= subchannel < 8:
        raise ValueError(f"bad method header: subchannel {subchannel}, method {method:#x}, {count} words")
    operation = SEC_OP_INC_METHOD if increment else SEC_OP_NON_INC_METHOD
    return (operation << 29) | (count << 16) | (subchannel << 13) | (method >> 2)


@dataclass(frozen=True)
class Method:
    """One decoded method write: the subchannel, the method's byte offset and its data word."""

    subchannel: int
    method: int
    value: int


def decode_pushbuffer(words: list[int] | tuple[int, ...]) -> Iterator[Method]:
    """The method writes of a pushbuffer, one per data word (incrementing methods advance by 4 bytes)."""
    position = 0
    while position < len(words):
        header = words[position]
        operation, count = header >> 29, (header >> 16) & 0x1FFF
        subchannel, address = (header >> 13) & 7, (header & 0xFFF) << 2
        if operation not in (SEC_OP_INC_METHOD, SEC_OP_NON_INC_METHOD):
            raise ValueError(f"pushbuffer word {position} ({header:#010x}) is not a method header this decoder knows "
                             f"(SEC_OP {operation})")
        if position + 1 + count > len(words):
            raise ValueError(f"method {address:#x} at word {position} needs {count} data words, "
                             f"{len(words) - position - 1} remain")
        for index in range(count):
            step = 4 * index if operation == SEC_OP_INC_METHOD else 0
            yield Method(subchannel, address + step, words[position + 1 + index])
        position += 1 + count


def gpfifo_entry(address: int, dwords: int) -> int:
    """The GPFIFO entry that runs `dwords` pushbuffer words at GPU address `address` (4-byte aligned)."""
    if address % 4 or not 0 < dwords < (1 << 21) or address >> 40:
        raise ValueError(f"bad GPFIFO entry: address {address:#x}, {dwords} words")
    return (address & 0xFFFFFFFC) | ((address >> 32) << 32) | GPFIFO_LEVEL_SUBROUTINE | (dwords << 42)


def decode_gpfifo_entry(entry: int) -> tuple[int, int]:
    """(pushbuffer GPU address, length in dwords) of a GPFIFO entry."""
    return (entry & 0xFFFFFFFC) | (((entry >> 32) & 0xFF) << 32), (entry >> 42) & 0x1FFFFF


def qmd_set(qmd: bytearray | memoryview, name: str, value: int,
            fields: dict[str, tuple[int, int]] | None = None) -> None:
    """Write field `name` of a QMD (its bits, little-endian across the QMD; `fields` defaults to V03)."""
    high, low = (fields or QMD_FIELDS)[name]
    width = high - low + 1
    if not 0 <= value < (1 << width):
        raise ValueError(f"QMD field {name} holds {width} bits; {value} does not fit")
    first, last = low // 8, high // 8 + 1
    chunk = int.from_bytes(bytes(qmd[first:last]), "little")
    shift = low - first * 8
    mask = ((1 << width) - 1) << shift
    chunk = (chunk & ~mask) | (value << shift)
    qmd[first:last] = chunk.to_bytes(last - first, "little")


def qmd_get(qmd: bytes | bytearray | memoryview, name: str, fields: dict[str, tuple[int, int]] | None = None) -> int:
    """Read field `name` of a QMD (`fields` defaults to V03)."""
    high, low = (fields or QMD_FIELDS)[name]
    first, last = low // 8, high // 8 + 1
    chunk = int.from_bytes(bytes(qmd[first:last]), "little")
    return (chunk >> (low - first * 8)) & ((1 << (high - low + 1)) - 1)


def semaphore_words(subchannel: int, address: int, payload: int, operation: int, timestamp: bool = False,
                    wait_for_idle: bool = True) -> list[int]:
    """Host-class words that release (`SEM_OPERATION_RELEASE`) or acquire a 64-bit semaphore at `address`."""
    execute = operation | SEM_PAYLOAD_SIZE_64BIT
    if operation == SEM_OPERATION_RELEASE:
        execute |= (SEM_RELEASE_WFI if wait_for_idle else 0) | (SEM_RELEASE_TIMESTAMP if timestamp else 0)
    else:
        execute |= SEM_ACQUIRE_SWITCH_TSG
    return [method_header(subchannel, NVC56F_SEM_ADDR_LO, 5), address & 0xFFFFFFFF, address >> 32,
            payload & 0xFFFFFFFF, (payload >> 32) & 0xFFFFFFFF, execute]


def pack_u64(value: int) -> bytes:
    """Little-endian 64-bit word."""
    return struct.pack("<Q", value & 0xFFFFFFFFFFFFFFFF)
