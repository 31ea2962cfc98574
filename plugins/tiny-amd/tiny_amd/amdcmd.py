"""The AMD command formats the queues write and the MOCK GPU decodes: HSA AQL packets (64 bytes: kernel dispatch,
barrier-AND, and AMD's vendor packet jumping to an indirect buffer of PM4), the PM4 type-3 packets used for waits
and signals (WAIT_REG_MEM64, RELEASE_MEM with data or the GPU clock, with an interrupt for the KFD event;
INDIRECT_BUFFER) and SDMA packets (COPY_LINEAR, FENCE, TRAP, POLL_REGMEM, TIMESTAMP). Field layouts follow the
public HSA runtime specification and AMD's register documentation; words are 32-bit little-endian, and a word may be
a symbolic expression the core resolves at submit.
"""
from __future__ import annotations

from tinycore.uop.uop import UOp

Word = int | UOp

AQL_PACKET_BYTES = 64
AQL_PACKET_WORDS = AQL_PACKET_BYTES // 4
# hsa_packet_type_t
AQL_VENDOR_SPECIFIC, AQL_INVALID, AQL_KERNEL_DISPATCH, AQL_BARRIER_AND = 0, 1, 2, 3
AQL_BARRIER_BIT = 1 << 8
AQL_ACQUIRE_SYSTEM, AQL_RELEASE_SYSTEM = 2 << 9, 2 << 11
AQL_DISPATCH_DIMENSIONS = 3
AMD_AQL_FORMAT_PM4_IB = 1
"""The format of AMD's vendor AQL packet (amd_aql_pm4_ib): a PM4 INDIRECT_BUFFER to run, then dw_cnt_remain."""
AMD_PM4_IB_REMAINING_WORDS = 0xA
STAGED_PM4_FORMAT = 0xFF
"""A queue-internal vendor packet holding its PM4 words inline; the KFD submit moves them to the slot's indirect
buffer and writes the real AMD_AQL_FORMAT_PM4_IB packet, so this format never reaches a GPU."""
AQL_PM4_WORDS = 13

# PM4 type-3 opcodes and fields
PM4_WAIT_REG_MEM64, PM4_RELEASE_MEM, PM4_INDIRECT_BUFFER = 0x93, 0x49, 0x3F
INDIRECT_BUFFER_VALID = 1 << 23
INT_SEL_SEND_AFTER_WRITE_CONFIRM = 3
WAIT_FUNCTION_GREATER_EQUAL, WAIT_MEMORY_SPACE = 5, 1 << 4
EVENT_CACHE_FLUSH_AND_INV_TS, EVENT_INDEX_END_OF_PIPE = 0x14, 5 << 8
DATA_SELECT_VALUE_64, DATA_SELECT_CLOCK_64 = 2, 3

# SDMA opcodes
SDMA_COPY, SDMA_FENCE, SDMA_TRAP, SDMA_POLL_REGMEM, SDMA_TIMESTAMP = 1, 5, 6, 8, 13
SDMA_TIMESTAMP_GET_GLOBAL = 2
CLOCK_TICKS_PER_MICROSECOND = 100.0
"""The GPU clock counter RELEASE_MEM and SDMA TIMESTAMP write ticks at 100 MHz."""


def split(value: Word) -> tuple[Word, Word]:
    """(low, high) 32-bit words of a 64-bit value (symbolic values stay expressions)."""
    if isinstance(value, UOp):
        return value % (1 << 32), value // (1 << 32)
    return value & 0xFFFFFFFF, (value >> 32) & 0xFFFFFFFF


def pm4_header(opcode: int, body_words: int) -> int:
    """A PM4 type-3 header for `body_words` words after it."""
    return (3 << 30) | (((body_words - 1) & 0x3FFF) << 16) | (opcode << 8)


def pm4_wait_geq(address: int, value: Word) -> list[Word]:
    """WAIT_REG_MEM64: stall until the 64-bit value at `address` is >= `value`."""
    low, high = split(value)
    return [pm4_header(PM4_WAIT_REG_MEM64, 8), WAIT_FUNCTION_GREATER_EQUAL | WAIT_MEMORY_SPACE,
            address & 0xFFFFFFFF, address >> 32, low, high, 0xFFFFFFFF, 0xFFFFFFFF, 4]


def pm4_release(address: int, value: Word, clock: bool = False, interrupt_context: int | None = None) -> list[Word]:
    """RELEASE_MEM at end of pipe: write the 64-bit `value` (or the GPU clock when `clock`) to `address`; with
    `interrupt_context`, then raise an interrupt carrying it (the driver sets the KFD event of that id)."""
    low, high = split(value)
    data_select = DATA_SELECT_CLOCK_64 if clock else DATA_SELECT_VALUE_64
    interrupt = 0 if interrupt_context is None else INT_SEL_SEND_AFTER_WRITE_CONFIRM << 24
    return [pm4_header(PM4_RELEASE_MEM, 7), EVENT_CACHE_FLUSH_AND_INV_TS | EVENT_INDEX_END_OF_PIPE,
            (data_select << 29) | interrupt, address & 0xFFFFFFFF, address >> 32, low, high, interrupt_context or 0]


def pm4_indirect_buffer(address: int, dword_count: int) -> list[int]:
    """INDIRECT_BUFFER: run `dword_count` PM4 words at `address` (4-byte aligned)."""
    if address % 4:
        raise ValueError(f"an indirect buffer must be 4-byte aligned, {address:#x} is not")
    return [pm4_header(PM4_INDIRECT_BUFFER, 3), address & 0xFFFFFFFC, address >> 32,
            dword_count | INDIRECT_BUFFER_VALID]


def aql_pm4(words: list[Word]) -> list[Word]:
    """A staged vendor AQL packet holding `words` of PM4 inline (see STAGED_PM4_FORMAT): the queue's form, which
    `aql_pm4_ib` replaces when the packet is written to a GPU's ring."""
    if len(words) > AQL_PM4_WORDS:
        raise ValueError(f"{len(words)} PM4 words do not fit an AQL vendor packet ({AQL_PM4_WORDS} at most)")
    header = AQL_VENDOR_SPECIFIC | AQL_BARRIER_BIT | AQL_ACQUIRE_SYSTEM | AQL_RELEASE_SYSTEM
    return [header | (STAGED_PM4_FORMAT << 16), *words, *([0] * (AQL_PM4_WORDS - len(words))), 0, 0]


def staged_pm4_words(packet: list[int]) -> list[int] | None:
    """The PM4 words of a staged vendor packet (its type-3 packets up to a zero header), None for any other."""
    if packet[0] & 0xFF != AQL_VENDOR_SPECIFIC or packet[0] >> 16 != STAGED_PM4_FORMAT:
        return None
    body, end = packet[1:1 + AQL_PM4_WORDS], 0
    while end < len(body) and body[end]:
        end += 2 + ((body[end] >> 16) & 0x3FFF)
    return body[:end]


def aql_pm4_ib(ib_address: int, dword_count: int, completion: int = 0) -> list[int]:
    """AMD's vendor AQL packet (amd_aql_pm4_ib): the PM4 INDIRECT_BUFFER jump to `dword_count` words at
    `ib_address`, dw_cnt_remain, reserved words, then the completion signal."""
    header = AQL_VENDOR_SPECIFIC | AQL_BARRIER_BIT | AQL_ACQUIRE_SYSTEM | AQL_RELEASE_SYSTEM
    return [header | (AMD_AQL_FORMAT_PM4_IB << 16), *pm4_indirect_buffer(ib_address, dword_count),
            AMD_PM4_IB_REMAINING_WORDS, *([0] * 8), completion & 0xFFFFFFFF, completion >> 32]


def aql_dispatch(code_address: int, kernarg_address: int, global_size: list[Word], local_size: list[Word],
                 group_bytes: int) -> list[Word]:
    """An AQL kernel dispatch: grid sizes in work-items (groups x group size), the code object's kernel descriptor
    address and the kernarg block; the barrier bit keeps it after the packets before it."""
    header = AQL_KERNEL_DISPATCH | AQL_BARRIER_BIT | AQL_ACQUIRE_SYSTEM | AQL_RELEASE_SYSTEM
    grid = [groups * local for groups, local in zip(global_size, local_size, strict=True)]
    low_code, high_code = split(code_address)
    low_args, high_args = split(kernarg_address)
    return [header | (AQL_DISPATCH_DIMENSIONS << 16), local_size[0] + local_size[1] * 65536, local_size[2],
            grid[0], grid[1], grid[2], 0, group_bytes, low_code, high_code, low_args, high_args, 0, 0, 0, 0]


def aql_barrier_and(dependencies: list[int], completion: int = 0) -> list[Word]:
    """An AQL barrier-AND: the queue waits until every dependency signal's 64-bit value is 0."""
    if len(dependencies) > 5:
        raise ValueError("an AQL barrier-AND packet takes at most 5 dependency signals")
    words: list[Word] = [AQL_BARRIER_AND | AQL_BARRIER_BIT | AQL_ACQUIRE_SYSTEM | AQL_RELEASE_SYSTEM, 0]
    for index in range(5):
        words += list(split(dependencies[index] if index < len(dependencies) else 0))
    return [*words, 0, 0, *split(completion)]


def sdma_copy(destination: int, source: int, nbytes: Word) -> list[Word]:
    """SDMA COPY_LINEAR of `nbytes` (the count field holds bytes - 1)."""
    return [SDMA_COPY, nbytes - 1, 0, source & 0xFFFFFFFF, source >> 32, destination & 0xFFFFFFFF, destination >> 32]


def sdma_fence(address: int, value: Word) -> list[Word]:
    """SDMA FENCE: write the 32-bit `value` to `address`."""
    return [SDMA_FENCE, address & 0xFFFFFFFF, address >> 32, value]


def sdma_trap(context: int) -> list[Word]:
    """SDMA TRAP: raise an interrupt carrying `context` (28 bits; the driver sets the KFD event of that id)."""
    return [SDMA_TRAP, context & 0xFFFFFFF]


def sdma_poll_geq(address: int, value: Word) -> list[Word]:
    """SDMA POLL_REGMEM on memory: stall until the 32-bit value at `address` is >= `value`."""
    return [SDMA_POLL_REGMEM | (WAIT_FUNCTION_GREATER_EQUAL << 28) | (1 << 31), address & 0xFFFFFFFF, address >> 32,
            value, 0xFFFFFFFF, (0xFFF << 16) | 10]


def sdma_timestamp(address: int) -> list[Word]:
    """SDMA TIMESTAMP GET_GLOBAL: write the 64-bit GPU clock to `address`."""
    return [SDMA_TIMESTAMP | (SDMA_TIMESTAMP_GET_GLOBAL << 8), address & 0xFFFFFFFF, address >> 32]
