"""The AMD command formats the queues write and the MOCK GPU decodes: HSA AQL packets (64 bytes: kernel dispatch,
barrier-AND, and AMD's vendor packet carrying PM4), the PM4 type-3 packets used for waits and signals
(WAIT_REG_MEM64, RELEASE_MEM with data or the GPU clock) and SDMA packets (COPY_LINEAR, FENCE, POLL_REGMEM,
TIMESTAMP). Field layouts follow the public HSA runtime specification and AMD's register documentation; words are
32-bit little-endian, and a word may be a symbolic expression the core resolves at submit.
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
AMD_AQL_FORMAT_PM4_INLINE = 1
"""The vendor header of AMD's PM4 packet in an AQL queue; ROCr puts an INDIRECT_BUFFER there, the queues here put
the (at most 13) PM4 words themselves (see the KFD notes in the README)."""
AQL_PM4_WORDS = 13

# PM4 type-3 opcodes and fields
PM4_WAIT_REG_MEM64, PM4_RELEASE_MEM = 0x93, 0x49
WAIT_FUNCTION_GREATER_EQUAL, WAIT_MEMORY_SPACE = 5, 1 << 4
EVENT_CACHE_FLUSH_AND_INV_TS, EVENT_INDEX_END_OF_PIPE = 0x14, 5 << 8
DATA_SELECT_VALUE_64, DATA_SELECT_CLOCK_64 = 2, 3

# SDMA opcodes
SDMA_COPY, SDMA_FENCE, SDMA_POLL_REGMEM, SDMA_TIMESTAMP = 1, 5, 8, 13
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


def pm4_release(address: int, value: Word, clock: bool = False) -> list[Word]:
    """RELEASE_MEM at end of pipe: write the 64-bit `value` (or the GPU clock when `clock`) to `address`."""
    low, high = split(value)
    data_select = DATA_SELECT_CLOCK_64 if clock else DATA_SELECT_VALUE_64
    return [pm4_header(PM4_RELEASE_MEM, 7), EVENT_CACHE_FLUSH_AND_INV_TS | EVENT_INDEX_END_OF_PIPE,
            data_select << 29, address & 0xFFFFFFFF, address >> 32, low, high, 0]


def aql_pm4(words: list[Word]) -> list[Word]:
    """An AMD vendor AQL packet holding `words` of PM4, padded with zero words."""
    if len(words) > AQL_PM4_WORDS:
        raise ValueError(f"{len(words)} PM4 words do not fit an AQL vendor packet ({AQL_PM4_WORDS} at most)")
    header = AQL_VENDOR_SPECIFIC | AQL_BARRIER_BIT | AQL_ACQUIRE_SYSTEM | AQL_RELEASE_SYSTEM
    # words 14 and 15 are the packet's completion signal (none): the PM4 ends at the first zero word
    return [header | (AMD_AQL_FORMAT_PM4_INLINE << 16), *words, *([0] * (AQL_PM4_WORDS - len(words))), 0, 0]


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


def sdma_poll_geq(address: int, value: Word) -> list[Word]:
    """SDMA POLL_REGMEM on memory: stall until the 32-bit value at `address` is >= `value`."""
    return [SDMA_POLL_REGMEM | (WAIT_FUNCTION_GREATER_EQUAL << 28) | (1 << 31), address & 0xFFFFFFFF, address >> 32,
            value, 0xFFFFFFFF, (0xFFF << 16) | 10]


def sdma_timestamp(address: int) -> list[Word]:
    """SDMA TIMESTAMP GET_GLOBAL: write the 64-bit GPU clock to `address`."""
    return [SDMA_TIMESTAMP | (SDMA_TIMESTAMP_GET_GLOBAL << 8), address & 0xFFFFFFFF, address >> 32]
