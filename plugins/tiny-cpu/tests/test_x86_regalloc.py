"""Linear-scan allocation under pressure: more live values than registers, spilled to the stack, with the System V
convention (arguments in registers and on the stack, callee-saved registers preserved). Generated functions run and
are compared with numpy and Python integer arithmetic."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from tiny_cpu.x86.assembler import Assembler
from tiny_cpu.x86.executable import ExecutableCode, host_is_x86_64
from tiny_cpu.x86.function import FunctionBuilder
from tiny_cpu.x86.registers import CALLEE_SAVED, r10, rax, rdi, rsi, rsp

from tinycore.renderer.isa import (
    Instruction,
    Interval,
    Label,
    Memory,
    Register,
    VirtualRegister,
    linear_scan,
    live_intervals,
)

on_x86 = pytest.mark.skipif(not host_is_x86_64(), reason="x86-64 machine code runs only on x86-64 hosts")
MASK64 = (1 << 64) - 1


def _signed(value: int) -> int:
    value &= MASK64
    return value - (1 << 64) if value >> 63 else value


def test_linear_scan_never_shares_a_register_between_overlapping_values() -> None:
    registers = [Register(f"r{i}", i, 64, "gpr") for i in range(3)]
    spans = [(0, 10), (1, 3), (2, 8), (3, 4), (4, 12), (5, 6), (6, 9), (9, 11)]
    intervals = {
        VirtualRegister(i, "gpr", 64): Interval(VirtualRegister(i, "gpr", 64), s, e) for i, (s, e) in enumerate(spans)
    }
    allocation = linear_scan(intervals, {"gpr": registers})
    kept = [i for i in intervals.values() if i.value in allocation.assigned]
    for a in kept:
        for b in kept:
            # a value read last at p and one written at p may share a register (an instruction reads, then writes)
            if a is not b and a.start < b.end and b.start < a.end:
                assert allocation.assigned[a.value] != allocation.assigned[b.value], (a, b)
    # at most 3 values are ever live at once in registers; the peak overlap is 4 (position 5), so some spill
    assert set(allocation.assigned) | set(allocation.spill_offset) == set(intervals)
    assert len(allocation.spill_offset) >= 1
    assert allocation.spill_bytes == 8 * len(allocation.spill_offset)


def test_live_intervals_stretch_over_loops() -> None:
    counter, accumulator, temporary = (VirtualRegister(i, "gpr", 64) for i in range(3))
    top = Label("top")
    program = [
        Instruction("mov", (counter, 0)),
        Instruction("mov", (accumulator, 0)),
        Instruction("label", (top,), ("r",)),
        Instruction("mov", (temporary, counter)),
        Instruction("add", (accumulator, temporary), ("rw", "r")),
        Instruction("add", (counter, 1), ("rw", "r")),
        Instruction("cmp", (counter, 10), ("r", "r")),
        Instruction("jl", (top,), ("r",)),
        Instruction("mov", (accumulator, accumulator)),
    ]
    intervals = live_intervals(program)
    assert (intervals[counter].start, intervals[counter].end) == (0, 7)  # live around the back edge at 7
    assert (intervals[accumulator].start, intervals[accumulator].end) == (1, 8)
    assert (intervals[temporary].start, intervals[temporary].end) == (3, 4)  # defined and dead within one trip


@on_x86
def test_forty_live_floats_summed_in_a_tree() -> None:
    builder = FunctionBuilder(integer_arguments=1)
    pointer = builder.arguments[0]
    values = []
    for i in range(40):  # all 40 are loaded before any is added: 40 live values, 13 allocatable vector registers
        value = builder.value("vec", 128)
        builder.emit("vmovss", value, Memory(pointer, None, 1, 4 * i, 32))
        values.append(value)
    while len(values) > 1:
        pairs = []
        for a, b in zip(values[::2], values[1::2], strict=False):
            total = builder.value("vec", 128)
            builder.emit("vaddss", total, a, b)
            pairs.append(total)
        values = pairs + ([values[-1]] if len(values) % 2 else [])
    builder.ret(values[0])
    code = builder.assemble()
    assert len(builder.allocation.spill_offset) >= 40 - 13
    function = ExecutableCode(code).function(ctypes.c_float, ctypes.c_void_p)
    data = np.random.default_rng(1).standard_normal(40).astype(np.float32) * 1000
    expected = list(data)
    while len(expected) > 1:  # the same tree in float32
        expected = [np.float32(a + b) for a, b in zip(expected[::2], expected[1::2], strict=False)] + (
            [expected[-1]] if len(expected) % 2 else []
        )
    assert function(data.ctypes.data) == expected[0]


@on_x86
def test_thirty_live_integers_with_stack_arguments() -> None:
    builder = FunctionBuilder(integer_arguments=8)  # rdi..r9, then two on the stack
    pointer, extra = builder.arguments[0], builder.arguments[1:]
    values = []
    for i in range(30):
        value = builder.value("gpr", 64)
        builder.emit("mov", value, Memory(pointer, None, 1, 8 * i, 64))
        values.append(value)
    for i, value in enumerate(values):  # every value is still live here: 30 + 7 arguments over 11 registers
        builder.emit("imul", value, value, 2 * i + 1)
        builder.emit("xor", value, extra[i % 7])
    while len(values) > 1:
        pairs = []
        for j, (a, b) in enumerate(zip(values[::2], values[1::2], strict=False)):
            builder.emit("sub" if j % 2 else "add", a, b)
            pairs.append(a)
        values = pairs + ([values[-1]] if len(values) % 2 else [])
    builder.ret(values[0])
    function = ExecutableCode(builder.assemble()).function(ctypes.c_int64, ctypes.c_void_p, *[ctypes.c_int64] * 7)
    assert builder.allocation.spill_offset, "the test must put the allocator under pressure"
    rng = np.random.default_rng(2)
    data = rng.integers(-(1 << 62), 1 << 62, 30, dtype=np.int64)
    arguments = [int(x) for x in rng.integers(-(1 << 40), 1 << 40, 7)]
    expected = [(int(x) * (2 * i + 1)) & MASK64 ^ (arguments[i % 7] & MASK64) for i, x in enumerate(data)]
    while len(expected) > 1:
        expected = [
            (a - b if j % 2 else a + b) & MASK64
            for j, (a, b) in enumerate(zip(expected[::2], expected[1::2], strict=False))
        ] + ([expected[-1]] if len(expected) % 2 else [])
    assert function(data.ctypes.data, *arguments) == _signed(expected[0])


@on_x86
def test_loop_carried_accumulators_spill_across_the_back_edge() -> None:
    accumulators_count = 20  # more than the 13 allocatable vector registers, each live around the loop
    builder = FunctionBuilder(integer_arguments=3)  # out, x (n rows of 20*8 floats), n
    out, x, n = builder.arguments
    accumulators = []
    for _ in range(accumulators_count):
        accumulator = builder.value("vec", 256)
        builder.emit("vxorps", accumulator, accumulator, accumulator)
        accumulators.append(accumulator)
    row, top, done = builder.value("gpr", 64), builder.label(), builder.label()
    builder.emit("mov", row, 0)
    builder.bind(top)
    builder.emit("cmp", row, n)
    builder.emit("jge", done)
    for k, accumulator in enumerate(accumulators):
        loaded = builder.value("vec", 256)
        builder.emit("vmovups", loaded, Memory(x, None, 1, 32 * k, 256))
        builder.emit("vaddps", accumulator, accumulator, loaded)
    builder.emit("add", x, 32 * accumulators_count)
    builder.emit("add", row, 1)
    builder.emit("jmp", top)
    builder.bind(done)
    for k, accumulator in enumerate(accumulators):
        builder.emit("vmovups", Memory(out, None, 1, 32 * k, 256), accumulator)
    builder.ret()
    function = ExecutableCode(builder.assemble()).function(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
    assert builder.allocation.spill_offset
    data = np.random.default_rng(3).standard_normal((17, accumulators_count * 8)).astype(np.float32)
    result = np.full(accumulators_count * 8, np.nan, np.float32)
    function(result.ctypes.data, data.ctypes.data, len(data))
    expected = np.zeros(accumulators_count * 8, np.float32)
    for data_row in data:  # the kernel adds row by row in float32
        expected = expected + data_row
    np.testing.assert_array_equal(result, expected)


@on_x86
def test_callee_saved_registers_are_preserved() -> None:
    builder = FunctionBuilder(integer_arguments=1)
    values = []
    for i in range(14):  # enough live values to need rbx and r12-r15
        value = builder.value("gpr", 64)
        builder.emit("mov", value, Memory(builder.arguments[0], None, 1, 8 * i, 64))
        values.append(value)
    total = values[0]
    for value in values[1:]:
        builder.emit("add", total, value)
    builder.ret(total)
    callee = ExecutableCode(builder.assemble())
    assert set(builder.saved_registers) == set(CALLEE_SAVED) - {CALLEE_SAVED[1]}  # every one but rbp, the frame
    # a caller that plants known values in the callee-saved registers, calls, and checks them
    sentinels = {register: 0x1111111111111111 * (i + 1) for i, register in enumerate(CALLEE_SAVED)}
    a = Assembler()
    broken, restore = Label("broken"), Label("restore")
    for register in CALLEE_SAVED:
        a.emit("push", register)
    a.emit("sub", rsp, 8)  # six pushes and the return address: realign the stack to 16 for the call
    for register, sentinel in sentinels.items():
        a.emit("mov", register, sentinel)
    a.emit("mov", rax, rdi)
    a.emit("mov", rdi, rsi)
    a.emit("call", rax)
    for register, sentinel in sentinels.items():
        a.emit("mov", r10, sentinel)
        a.emit("cmp", register, r10)
        a.emit("jne", broken)
    a.emit("jmp", restore)
    a.bind(broken)
    a.emit("mov", rax, -1)
    a.bind(restore)
    a.emit("add", rsp, 8)
    for register in reversed(CALLEE_SAVED):
        a.emit("pop", register)
    a.emit("ret")
    caller = ExecutableCode(a.finish()).function(ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p)
    data = np.arange(1, 15, dtype=np.int64) * 1000
    assert caller(callee.address, data.ctypes.data) == int(data.sum())


def _avx512() -> bool:
    with open("/proc/cpuinfo") as cpuinfo:
        return any("avx512f" in line.split() for line in cpuinfo if line.startswith("flags"))


@on_x86
@pytest.mark.skipif(not _avx512(), reason="this CPU has no AVX-512")
def test_forty_live_zmm_values_over_thirty_two_registers() -> None:
    builder = FunctionBuilder(integer_arguments=2, vector_registers=32)  # out, data of 40 rows of 16 floats
    out, data = builder.arguments
    values = []
    for i in range(40):  # 40 live 512-bit values, 29 allocatable: spills of 64 bytes, EVEX for zmm16-31
        value = builder.value("vec", 512)
        builder.emit("vmovups", value, Memory(data, None, 1, 64 * i, 512))
        values.append(value)
    for i, value in enumerate(values):
        builder.emit("vmulps", value, value, values[(i + 1) % 40])
    total = values[0]
    for value in values[1:]:
        builder.emit("vaddps", total, total, value)
    builder.emit("vmovups", Memory(out, None, 1, 0, 512), total)
    builder.ret()
    function = ExecutableCode(builder.assemble()).function(None, ctypes.c_void_p, ctypes.c_void_p)
    assert builder.allocation.spill_offset
    rows = np.random.default_rng(5).standard_normal((40, 16)).astype(np.float32)
    result = np.full(16, np.nan, np.float32)
    function(result.ctypes.data, rows.ctypes.data)
    # each product reads the value before it is overwritten, except the last, which reads the new first value
    products = [rows[i] * rows[i + 1] for i in range(39)]
    products.append(rows[39] * products[0])
    expected = products[0]
    for product in products[1:]:
        expected = expected + product
    np.testing.assert_array_equal(result, expected)


@on_x86
def test_spilled_pointers_are_reloaded_as_address_registers() -> None:
    builder = FunctionBuilder(integer_arguments=1)  # a table of 16 pointers, each to one int64
    table = builder.arguments[0]
    pointers = []
    for i in range(16):  # 16 live pointers over 11 registers: some bases of the loads below are spilled
        pointer = builder.value("gpr", 64)
        builder.emit("mov", pointer, Memory(table, None, 1, 8 * i, 64))
        pointers.append(pointer)
    total = builder.value("gpr", 64)
    builder.emit("mov", total, 0)
    for i, pointer in enumerate(pointers):
        builder.emit("add", total, Memory(pointer, None, 1, 0, 64))
        builder.emit("imul", total, total, 3 if i % 2 else 5)
    builder.ret(total)
    function = ExecutableCode(builder.assemble()).function(ctypes.c_int64, ctypes.c_void_p)
    assert any(p in builder.allocation.spill_offset for p in pointers)
    cells = [ctypes.c_int64(1000 * i - 7) for i in range(16)]
    addresses = (ctypes.c_int64 * 16)(*[ctypes.addressof(cell) for cell in cells])
    expected = 0
    for i, cell in enumerate(cells):
        expected = (expected + cell.value) * (3 if i % 2 else 5) & MASK64
    assert function(ctypes.addressof(addresses)) == _signed(expected)


def test_values_live_across_a_clobber_avoid_the_clobbered_registers() -> None:
    first, second = Register("r0", 0, 64, "gpr"), Register("r1", 1, 64, "gpr")
    across, after = VirtualRegister(0, "gpr", 64), VirtualRegister(1, "gpr", 64)
    program = [
        Instruction("mov", (across, 1)),
        Instruction("call", (), (), clobbers=(first,)),
        Instruction("mov", (after, across)),
        Instruction("add", (after, across), ("rw", "r")),
    ]
    intervals = live_intervals(program)
    assert intervals[across].avoid == frozenset({first}) and intervals[after].avoid == frozenset()
    allocation = linear_scan(intervals, {"gpr": [first, second]})
    assert allocation.assigned[across] == second  # r0 is tried first, but the call overwrites it
    assert allocation.assigned[after] == first


def test_linear_scan_spills_the_value_ending_last_the_first_given_on_ties() -> None:
    first, second = Register("r0", 0, 64, "gpr"), Register("r1", 1, 64, "gpr")
    values = [VirtualRegister(i, "gpr", 64) for i in range(6)]
    spans = [(0, 10), (1, 5), (2, 6), (6, 7), (11, 20), (12, 20)]
    intervals = {value: Interval(value, start, end) for value, (start, end) in zip(values, spans, strict=True)}
    intervals[values[5]] = Interval(values[5], 13, 14)
    allocation = linear_scan(intervals, {"gpr": [first, second]})
    # at 2 both registers are taken (0 ends at 10, 1 at 5): 0 ends last and after 2's end, so 0 goes to the stack
    # and 2 takes its r0; at 6 both 1 and 2 (read last there) have ended, so 3 gets the first register, r0; 4 and 5
    # find registers free again
    assert allocation.spill_offset == {values[0]: 0}
    assert allocation.assigned == {values[1]: second, values[2]: first, values[3]: first, values[4]: first,
                                   values[5]: second}
    tied = {value: Interval(value, start, end) for value, (start, end) in zip(values[:3], [(0, 9), (1, 9), (2, 4)],
                                                                               strict=True)}
    allocation = linear_scan(tied, {"gpr": [first, second]})
    assert allocation.spill_offset == {values[0]: 0}  # 0 and 1 both end at 9: the one given a register first spills
    assert allocation.assigned == {values[1]: second, values[2]: first}


def test_linear_scan_under_pressure_respects_overlap_avoid_and_blocked() -> None:
    rng = np.random.default_rng(7)
    pool = [Register(f"r{i}", i, 64, "gpr") for i in range(5)]
    vectors = [Register(f"v{i}", i, 256, "vec") for i in range(4)]
    blocked = {pool[0]: 40, vectors[1]: 25}
    intervals: dict[VirtualRegister, Interval] = {}
    for index in range(400):
        kind, bits, registers = ("gpr", 64, pool) if index % 3 else ("vec", 256, vectors)
        start = int(rng.integers(0, 300))
        avoid = frozenset(r for r in registers if rng.random() < 0.2)
        value = VirtualRegister(index, kind, bits)
        intervals[value] = Interval(value, start, start + int(rng.integers(0, 30)), avoid)
    allocation = linear_scan(intervals, {"gpr": pool, "vec": vectors}, blocked=blocked)
    assert set(allocation.assigned) | set(allocation.spill_offset) == set(intervals)
    assert not set(allocation.assigned) & set(allocation.spill_offset)
    kept = sorted((i for i in intervals.values() if i.value in allocation.assigned), key=lambda i: i.start)
    for position, a in enumerate(kept):
        register = allocation.assigned[a.value]
        assert register.kind == a.value.kind and register not in a.avoid
        assert blocked.get(register, 0) <= a.start
        for b in kept[position + 1:]:
            if b.start >= a.end:  # written where `a` is read last: the instruction reads before it writes
                break
            assert allocation.assigned[b.value] != register, (a, b)
    slots = sorted((allocation.spill_offset[v], v.bits // 8) for v in allocation.spill_offset)
    assert all(offset % size == 0 for offset, size in slots)  # each slot aligned to its size
    # no two spilled values share bytes
    assert all(offset + size <= slots[place + 1][0] for place, (offset, size) in enumerate(slots[:-1]))
    assert slots and slots[-1][0] + slots[-1][1] == allocation.spill_bytes


def test_blocked_registers_wait_for_their_position() -> None:
    argument, other = Register("r0", 0, 64, "gpr"), Register("r1", 1, 64, "gpr")
    early, late = VirtualRegister(0, "gpr", 64), VirtualRegister(1, "gpr", 64)
    intervals = {early: Interval(early, 0, 5), late: Interval(late, 2, 6)}
    # r0 holds an incoming value until position 2: the value starting at 0 must not take it, the one at 2 may
    allocation = linear_scan(intervals, {"gpr": [argument, other]}, blocked={argument: 2})
    assert allocation.assigned == {early: other, late: argument}


@on_x86
def test_values_live_across_a_division_survive_its_use_of_rdx() -> None:
    from tiny_cpu.x86.registers import GPR32, rdx

    builder = FunctionBuilder(integer_arguments=1)
    pointer = builder.arguments[0]
    values = []
    for i in range(14):  # 14 live 32-bit values over 11 registers, all live across each division below
        value = builder.value("gpr", 32)
        builder.emit("mov", value, Memory(pointer, None, 1, 4 * i, 32))
        values.append(value)
    quotients = []
    for i in range(0, 14, 2):
        builder.emit("mov", GPR32[0], values[i])  # eax: the dividend
        builder.emit("cdq", clobbers=(rdx,))
        builder.emit("idiv", values[i + 1], clobbers=(rdx,))
        quotient = builder.value("gpr", 32)
        builder.emit("mov", quotient, GPR32[0])
        quotients.append(quotient)
    total = builder.value("gpr", 32)
    builder.emit("mov", total, 0)
    for value in values + quotients:
        builder.emit("add", total, value)
    builder.ret(total)
    function = ExecutableCode(builder.assemble()).function(ctypes.c_int32, ctypes.c_void_p)
    assert builder.allocation.spill_offset
    data = np.array([1000, 7, -999, 5, 123456, -11, 77, 3, -5, 2, 2**30, 9, -(2**30), 13], np.int32)
    truncated = [int(a / b) for a, b in zip(data[::2].tolist(), data[1::2].tolist(), strict=True)]
    assert function(data.ctypes.data) == int(data.astype(np.int64).sum()) + sum(truncated)


@on_x86
@pytest.mark.skipif(not _avx512(), reason="this CPU has no AVX-512")
def test_values_of_vex_only_instructions_keep_to_the_first_sixteen_vector_registers() -> None:
    """With 32 vector registers, 24 live ymm values spread over xmm16-31 too; those that meet vblendvps (VEX only)
    and the compare feeding it (whose EVEX form writes a mask register) must stay below 16."""
    builder = FunctionBuilder(integer_arguments=2, vector_registers=32)  # out, data of 24 rows of 8 floats
    out, data = builder.arguments
    values = []
    for i in range(24):
        value = builder.value("vec", 256)
        builder.emit("vmovups", value, Memory(data, None, 1, 32 * i, 256))
        values.append(value)
    total = builder.value("vec", 256)
    builder.emit("vxorps", total, total, total)
    for i in range(0, 24, 2):  # total += max(a, b) lane by lane, as compare and blend
        mask, larger = builder.value("vec", 256), builder.value("vec", 256)
        builder.emit("vcmpps", mask, values[i], values[i + 1], 1)  # a < b
        builder.emit("vblendvps", larger, values[i], values[i + 1], mask)
        builder.emit("vaddps", total, total, larger)
    builder.emit("vmovups", Memory(out, None, 1, 0, 256), total)
    builder.ret()
    function = ExecutableCode(builder.assemble()).function(None, ctypes.c_void_p, ctypes.c_void_p)
    assert any(register.number >= 16 for register in builder.allocation.used_registers() if register.kind == "vec")
    rows = np.random.default_rng(7).standard_normal((24, 8)).astype(np.float32)
    result = np.full(8, np.nan, np.float32)
    function(result.ctypes.data, rows.ctypes.data)
    expected = np.zeros(8, np.float32)
    for i in range(0, 24, 2):
        expected = expected + np.maximum(rows[i], rows[i + 1])
    np.testing.assert_array_equal(result, expected)


def _pointer_loop_program() -> tuple[list[Instruction], VirtualRegister, list[VirtualRegister]]:
    """A pointer read in a loop, and row offsets made before it and read only just before the loop (a matmul's
    shape: the buffer pointers, then per-row offsets, then the reduce loop)."""
    pointer, counter, total, loaded = (VirtualRegister(i, "gpr", 64) for i in range(4))
    offsets = [VirtualRegister(10 + i, "gpr", 64) for i in range(4)]
    top, done = Label("top"), Label("done")
    program = [Instruction("mov", (pointer, rdi)), Instruction("mov", (total, 0))]
    program += [Instruction("mov", (offset, 8 * i)) for i, offset in enumerate(offsets)]
    program += [Instruction("add", (total, offset), ("rw", "r")) for offset in offsets]
    program += [
        Instruction("mov", (counter, 0)),
        Instruction("label", (top,), ("r",)),
        Instruction("cmp", (counter, 100), ("r", "r")),
        Instruction("jge", (done,), ("r",)),
        Instruction("mov", (loaded, Memory(pointer, counter, 8, 0, 64))),
        Instruction("add", (total, loaded), ("rw", "r")),
        Instruction("add", (counter, 1), ("rw", "r")),
        Instruction("jmp", (top,), ("r",)),
        Instruction("label", (done,), ("r",)),
        Instruction("mov", (rax, total)),
    ]
    return program, pointer, offsets


def test_uses_in_loops_weigh_more_and_count_again_at_the_back_jump() -> None:
    program, pointer, offsets = _pointer_loop_program()
    intervals = live_intervals(program)
    load_at = next(i for i, instruction in enumerate(program) if isinstance(instruction.operands[-1], Memory))
    back_jump = next(i for i, instruction in enumerate(program) if instruction.op == "jmp")
    assert intervals[pointer].uses == (0, load_at, back_jump)  # read again in the next iteration
    # once outside the loop, once in it, per position held (0 to the back jump)
    assert intervals[pointer].weight == pytest.approx((1 + 8) / (back_jump + 1))
    assert intervals[offsets[0]].weight == pytest.approx(2 / 5) and intervals[offsets[0]].uses == (2, 6)
    assert intervals[pointer].next_use(load_at + 1) == back_jump
    assert intervals[offsets[0]].next_use(3) == 6
    # hand-made intervals without uses: the end stands for every use
    assert Interval(VirtualRegister(99, "gpr", 64), 3, 17).next_use(5) == 17


def test_a_pointer_read_in_a_loop_keeps_its_register_over_values_read_before_it() -> None:
    program, pointer, offsets = _pointer_loop_program()
    pool = [Register(f"r{i}", i, 64, "gpr") for i in range(4)]
    allocation = linear_scan(live_intervals(program), {"gpr": pool})
    # pointer, total and four offsets are live at once over four registers: two offsets spill (each read once,
    # outside the loop), not the pointer, which ends after them (in the loop) but is read there on every iteration;
    # the loop's four values (pointer, total, counter, loaded) then all have registers
    assert set(allocation.spill_offset) < set(offsets) and len(allocation.spill_offset) == 2


@on_x86
def test_a_pointer_read_in_a_loop_under_pressure_runs() -> None:
    builder = FunctionBuilder(integer_arguments=1)  # 8 int64 cells; the sum of all of them, plus 12 offsets
    cells = builder.arguments[0]
    offsets = []
    for i in range(12):  # more live offsets than free registers while the pointer is live
        offset = builder.value("gpr", 64)
        builder.emit("mov", offset, 1000 + i)
        offsets.append(offset)
    total = builder.value("gpr", 64)
    builder.emit("mov", total, 0)
    counter, top, done = builder.value("gpr", 64), builder.label(), builder.label()
    builder.emit("mov", counter, 0)
    builder.bind(top)
    builder.emit("cmp", counter, 8)
    builder.emit("jge", done)
    builder.emit("add", total, Memory(cells, counter, 8, 0, 64))
    builder.emit("add", counter, 1)
    builder.emit("jmp", top)
    builder.bind(done)
    for offset in offsets:
        builder.emit("add", total, offset)
    builder.ret(total)
    function = ExecutableCode(builder.assemble()).function(ctypes.c_int64, ctypes.c_void_p)
    assert cells in builder.allocation.assigned and counter in builder.allocation.assigned
    values = (ctypes.c_int64 * 8)(*[3 ** i - 50 for i in range(8)])
    assert function(ctypes.addressof(values)) == sum(3 ** i - 50 for i in range(8)) + sum(1000 + i for i in range(12))


def test_a_written_operand_shares_a_read_operands_scratch_when_every_operand_is_spilled() -> None:
    from tiny_cpu.x86.registers import XMM

    from tinycore.renderer.isa import Allocation, rewrite_program
    values = [VirtualRegister(i, "vec", 256) for i in range(4)]  # vblendvps result, if_false, if_true, mask
    allocation = Allocation(spill_offset={value: 32 * i for i, value in enumerate(values)}, spill_bytes=128)
    scratch = XMM[13:16]
    blend = Instruction("vblendvps", tuple(values), ("w", "r", "r", "r"))
    rewritten = rewrite_program(
        [blend], allocation, {"vec": scratch}, lambda register, bits: register,
        lambda register, offset: Instruction("load", (register, offset)),
        lambda offset, register: Instruction("store", (offset, register)))
    loads, selected, stores = rewritten[:3], rewritten[3], rewritten[4:]
    assert [i.op for i in loads] == ["load"] * 3 and [i.op for i in stores] == ["store"]
    assert set(selected.operands[1:]) == set(scratch)  # the three reads in the three scratch registers
    assert selected.operands[0] in scratch and stores[0].operands == (0, selected.operands[0])


def test_a_long_lived_value_read_rarely_spills_before_short_temporaries() -> None:
    # a constant made at the start and read twice more, against two temporaries that overlap briefly: spilling the
    # constant frees a register for the whole stretch at the cost of two reloads; spilling a temporary would leave an
    # instruction with more spilled operands (the four-operand blend ran out of scratch registers that way)
    constant, first, second, result = (VirtualRegister(i, "gpr", 64) for i in range(4))
    program = [
        Instruction("mov", (constant, 7)),
        Instruction("mov", (first, 1)),
        Instruction("mov", (second, 2)),
        Instruction("add", (first, second), ("rw", "r")),
        Instruction("mov", (result, first)),
        Instruction("add", (result, constant), ("rw", "r")),
        *[Instruction("add", (result, 1), ("rw", "r")) for _ in range(12)],
        Instruction("add", (result, constant), ("rw", "r")),
    ]
    pool = [Register("r0", 0, 64, "gpr"), Register("r1", 1, 64, "gpr")]
    allocation = linear_scan(live_intervals(program), {"gpr": pool})
    assert set(allocation.spill_offset) == {constant}


def test_a_spilled_source_the_instruction_can_read_from_memory_is_not_loaded() -> None:
    from tinycore.renderer.isa import Allocation, rewrite_program
    kept, spilled, other = (VirtualRegister(i, "vec", 256) for i in range(3))
    ymm = [Register(f"ymm{i}", i, 256, "vec") for i in range(16)]
    allocation = Allocation(assigned={kept: ymm[0]}, spill_offset={spilled: 0, other: 32}, spill_bytes=64)

    def in_memory(instruction: Instruction, index: int, offset: int) -> Memory | None:
        return Memory(rsp, None, 1, offset, 256) if index == 2 else None

    def rewritten(instruction: Instruction) -> list[Instruction]:
        return rewrite_program(
            [instruction], allocation, {"vec": ymm[13:16]}, lambda register, bits: register,
            lambda register, offset: Instruction("load", (register, offset)),
            lambda offset, register: Instruction("store", (offset, register)), in_memory)

    # the spilled value is the second source: read from its slot, no load
    (multiply,) = rewritten(Instruction("vmulps", (kept, kept, spilled)))
    assert multiply.operands == (ymm[0], ymm[0], Memory(rsp, None, 1, 0, 256))
    # as the first source it needs a register; only one memory operand per instruction (the second spilled source
    # is read from memory, the first loaded)
    load, add = rewritten(Instruction("vaddps", (kept, other, spilled)))
    assert load.op == "load" and load.operands[1] == 32
    assert add.operands[1] == load.operands[0] and add.operands[2] == Memory(rsp, None, 1, 0, 256)
    # a value written is stored, never replaced by memory
    add, store = rewritten(Instruction("vaddps", (spilled, kept, other)))
    assert add.operands[2] == Memory(rsp, None, 1, 32, 256) and add.operands[0] in ymm[13:16]
    assert store.operands == (0, add.operands[0])


def test_an_instructions_opmask_survives_renaming_and_spills() -> None:
    """A blend under k1 keeps its opmask when its operands are renamed to registers and when they are spilled (the
    mask is a physical register the allocator never assigns)."""
    from tiny_cpu.x86.registers import MASK, XMM, ZMM, view

    from tinycore.renderer.isa import Allocation, rewrite_program
    values = [VirtualRegister(i, "vec", 512) for i in range(3)]  # vblendmps result {k1}, if_false, if_true
    blend = Instruction("vblendmps", tuple(values), ("w", "r", "r"), mask=MASK[1])
    view_as = lambda register, bits: view(register, bits)  # noqa: E731
    load = lambda register, offset: Instruction("load", (register, offset))  # noqa: E731
    store = lambda offset, register: Instruction("store", (offset, register))  # noqa: E731
    renamed = rewrite_program([blend], Allocation(assigned={value: XMM[i] for i, value in enumerate(values)}),
                              {"vec": XMM[13:16]}, view_as, load, store)
    assert renamed[0].operands == tuple(ZMM[:3]) and renamed[0].mask == MASK[1]
    spilled = rewrite_program([blend], Allocation(spill_offset={value: 64 * i for i, value in enumerate(values)},
                                                  spill_bytes=192), {"vec": XMM[13:16]}, view_as, load, store)
    selected = next(instruction for instruction in spilled if instruction.op == "vblendmps")
    assert selected.mask == MASK[1] and len(spilled) == 4
