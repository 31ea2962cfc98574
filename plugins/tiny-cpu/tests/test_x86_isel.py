"""Instruction selection from codegen's linear program: float32 elementwise kernels selected, allocated, encoded and
run as x86-64 machine code, compared with numpy; constructs without a rule are refused, naming the op."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from tiny_cpu.x86.executable import ExecutableCode, host_is_x86_64
from tiny_cpu.x86.isel import ScalarX86Contract, SelectionError, VectorX86Contract, select_kernel
from tiny_cpu.x86.renderer import host_has_avx512

from tinycore import Tensor
from tinycore.codegen import linearize
from tinycore.dtype import dtypes
from tinycore.engine.memory import device_facts
from tinycore.schedule import create_schedule

pytestmark = pytest.mark.skipif(not host_is_x86_64(), reason="x86-64 machine code runs only on x86-64 hosts")
needs_avx512 = pytest.mark.skipif(not host_is_x86_64() or not host_has_avx512(),
                                  reason="16-lane (zmm) code runs only on CPUs with AVX-512 F, VL and DQ")


class WideX86Contract(VectorX86Contract):
    """What the x86 renderer declares on an AVX-512 host: 16-lane float32 vectors too, and 64-byte tiles."""

    vector_widths = {dtypes.float32: (8, 16)}
    preferred_vector_bytes = 64

RNG = np.random.default_rng(4)
A = RNG.standard_normal(37).astype(np.float32)
B = (RNG.standard_normal(37) + 3).astype(np.float32)
M = RNG.standard_normal((5, 7)).astype(np.float32)
ROW = RNG.standard_normal(7).astype(np.float32)
CASES = {
    "multiply, add and relu": (lambda a, b: (a * b + 2.5).relu(), lambda a, b: np.maximum(a * b + np.float32(2.5), 0)),
    "sqrt, divide and max": (lambda a, b: (b.sqrt() / a).maximum(a), lambda a, b: np.maximum(np.sqrt(b) / a, a)),
    "negate and subtract": (lambda a, b: -a - b * 3, lambda a, b: -a - b * np.float32(3)),
    "where of a compare": (lambda a, b: (a < b - 3).where(a, b), lambda a, b: np.where(a < b - 3, a, b)),
    "not equal": (
        lambda a, b: (a != a.maximum(0.0)).where(a, 1.0),
        lambda a, b: np.where(a != np.maximum(a, 0), a, np.float32(1)),
    ),
}


def _kernel(expression: Tensor, contract: type = ScalarX86Contract) -> tuple[list, tuple]:
    items = [item for item in create_schedule([expression.uop], device_facts).items if not item.is_copy]
    assert len(items) == 1
    return linearize(items[0].ast, contract()), items[0].buffers


def _uops(expression: Tensor) -> list:
    return _kernel(expression)[0]


def _run_typed(
    expression: Tensor, inputs: list[tuple[Tensor, np.ndarray]], shape: tuple[int, ...], dtype: type
) -> np.ndarray:
    """`_run` with an output of another dtype."""
    return _run(expression, inputs, shape, output_dtype=dtype)


def _run(
    expression: Tensor,
    inputs: list[tuple[Tensor, np.ndarray]],
    shape: tuple[int, ...],
    contract: type = ScalarX86Contract,
    output_dtype: type = np.float32,
    lanes: int | None = None,
) -> np.ndarray:
    """Run the selected kernel on the inputs' numpy data, matched to the kernel's buffers (outputs first); a vector
    contract's kernel must load `lanes` lanes (by default its widest)."""
    uops, buffers = _kernel(expression, contract)
    lanes = lanes or {VectorX86Contract: 8, WideX86Contract: 16}.get(contract)
    if lanes is not None:  # the kernel must really be vectorized for the test to mean anything
        assert any(u.dtype.count == lanes for u in uops if u.op.name == "LOAD"), "codegen did not vectorize the loads"
    code = ExecutableCode(select_kernel(uops, vector_registers=32 if contract is WideX86Contract else 16))
    output = np.full(shape, np.nan if output_dtype == np.float32 else 0x7F7F7F7F, output_dtype)
    arrays = [output]
    for buffer in buffers[1:]:
        matches = [array for tensor, array in inputs if tensor.uop.base is buffer or tensor.uop is buffer]
        assert len(matches) == 1, f"cannot tell which input {buffer} is"
        arrays.append(matches[0])
    function = code.function(None, *[ctypes.c_void_p] * len(arrays))
    function(*[array.ctypes.data for array in arrays])
    return output


@pytest.mark.parametrize("name", sorted(CASES))
def test_elementwise_kernels_match_numpy(name: str) -> None:
    build, reference = CASES[name]
    a, b = Tensor(A).realize(), Tensor(B).realize()
    np.testing.assert_array_equal(_run(build(a, b), [(a, A), (b, B)], A.shape), reference(A, B))


@pytest.mark.parametrize("contract", [VectorX86Contract, pytest.param(WideX86Contract, marks=needs_avx512)])
@pytest.mark.parametrize("name", sorted(CASES))
def test_vector_kernels_match_numpy(name: str, contract: type) -> None:
    build, reference = CASES[name]
    wide_a, wide_b = np.resize(A, 64) * np.float32(1.5), np.resize(B, 64)
    a, b = Tensor(wide_a).realize(), Tensor(wide_b).realize()
    result = _run(build(a, b), [(a, wide_a), (b, wide_b)], wide_a.shape, contract)
    np.testing.assert_array_equal(result, reference(wide_a, wide_b))


def test_broadcast_over_two_loops_uses_index_arithmetic() -> None:
    m, row = Tensor(M).realize(), Tensor(ROW).realize()
    np.testing.assert_array_equal(_run(m * row + m, [(m, M), (row, ROW)], M.shape), M * ROW + M)


def test_transposed_read_uses_index_arithmetic() -> None:
    m = Tensor(M).realize()
    np.testing.assert_array_equal(_run(m.T * 2.0, [(m, M)], M.T.shape), M.T * np.float32(2))


PADDED = {
    "pad both axes": (lambda m: m.pad(((1, 1), (2, 0))) * 2.0, lambda m: np.pad(m, ((1, 1), (2, 0))) * np.float32(2)),
    "shrink then pad": (
        lambda m: m[:, 1:].pad(((0, 0), (0, 3))) + 1.0,
        lambda m: np.pad(m[:, 1:], ((0, 0), (0, 3))) + np.float32(1),
    ),
    "concatenate": (lambda m: m.cat(m * 3.0, dim=0), lambda m: np.concatenate([m, m * np.float32(3)], axis=0)),
}


@pytest.mark.parametrize("name", sorted(PADDED))
def test_gated_loads_of_padded_kernels(name: str) -> None:
    build, reference = PADDED[name]
    m = Tensor(M).realize()
    expected = reference(M)
    uops = _uops(build(m))
    assert any(u.op.name == "INDEX" and len(u.src) > 2 for u in uops), "the kernel has no gated access"
    np.testing.assert_array_equal(_run(build(m), [(m, M)], expected.shape), expected)


def test_reductions_accumulate_in_registers() -> None:
    wide = RNG.standard_normal((5, 300)).astype(np.float32)
    w = Tensor(wide).realize()
    uops = _uops(w.sum(1))
    assert any(u.op.name == "DEFINE_REG" for u in uops), "the kernel has no accumulator"
    expected = np.zeros(5, np.float32)
    for column in wide.T:  # the kernel adds the row's elements one after another in float32
        expected = expected + column
    np.testing.assert_array_equal(_run(w.sum(1), [(w, wide)], (5,)), expected)
    np.testing.assert_array_equal(_run(w.max(1), [(w, wide)], (5,)), wide.max(1))
    np.testing.assert_array_equal(_run((w * w).max(0), [(w, wide)], (300,)), (wide * wide).max(0))


def test_matmul_in_three_loops_matches_sequential_float32() -> None:
    left, right = RNG.standard_normal((9, 33)).astype(np.float32), RNG.standard_normal((33, 7)).astype(np.float32)
    a, b = Tensor(left).realize(), Tensor(right).realize()
    expected = np.zeros((9, 7), np.float32)
    for k in range(33):  # the kernel's order: each product rounded, then added to the accumulator
        expected = expected + np.outer(left[:, k], right[k, :])
    np.testing.assert_array_equal(_run(a @ b, [(a, left), (b, right)], (9, 7)), expected)


TRANSCENDENTAL = {
    "exp": (lambda a: a.exp(), np.exp),
    "exp2": (lambda a: a.exp2(), np.exp2),
    "log": (lambda a: (a.abs() + 0.1).log(), lambda v: np.log(np.abs(v) + 0.1)),
    "sigmoid": (lambda a: a.sigmoid(), lambda v: 1 / (1 + np.exp(-v))),
    "tanh": (lambda a: a.tanh(), np.tanh),
    "sin": (lambda a: a.sin(), np.sin),
}


@pytest.mark.parametrize("name", sorted(TRANSCENDENTAL))
def test_decomposed_transcendentals_use_integer_bit_tricks(name: str) -> None:
    build, reference = TRANSCENDENTAL[name]
    values = np.linspace(-20, 20, 37, dtype=np.float32)
    a = Tensor(values).realize()
    uops = _uops(build(a))
    assert any(u.op.name == "BITCAST" for u in uops), "the decomposition should work on the float's bits"
    np.testing.assert_allclose(
        _run(build(a), [(a, values)], values.shape), reference(values).astype(np.float32), rtol=2e-6, atol=1e-7
    )


def test_integer_buffers_and_arithmetic_wrap_at_32_bits() -> None:
    values = np.array([0, 1, -1, 7, -8, 2**31 - 1, -(2**31), 123456789, -987654321], np.int32)
    floats = np.linspace(-5.5, 5.5, 9, dtype=np.float32)
    i, f = Tensor(values).realize(), Tensor(floats).realize()
    with np.errstate(over="ignore"):
        wrapped = values * np.int32(3) + np.int32(5)
    np.testing.assert_array_equal(_run_typed(i * 3 + 5, [(i, values)], values.shape, np.int32), wrapped)
    np.testing.assert_array_equal(
        _run_typed(i.maximum(-3) ^ 0x5555, [(i, values)], values.shape, np.int32), np.maximum(values, -3) ^ 0x5555
    )
    np.testing.assert_array_equal(
        _run_typed(f.cast("int32"), [(f, floats)], floats.shape, np.int32), floats.astype(np.int32)
    )  # truncation toward zero
    np.testing.assert_array_equal(
        _run(i.cast("float32") * 0.5, [(i, values)], values.shape), values.astype(np.float32) * np.float32(0.5)
    )


def test_integer_division_by_variables_and_constants_floors_as_numpy() -> None:
    values = np.array([-7, 7, -8, 5, 0, -1, 2**31 - 1, -(2**31) + 1, 123, -456], np.int32)
    divisors = np.array([2, -2, 3, -3, 5, 7, 10, -9, 1, -1], np.int32)
    a, b = Tensor(values).realize(), Tensor(divisors).realize()
    inputs = [(a, values), (b, divisors)]
    assert any(u.op.name in ("IDIV", "MOD") for u in _uops(a // b)), "the kernel should divide"
    for expression, expected in [
        (a // b, np.floor_divide(values, divisors)),
        (a % b, np.mod(values, divisors)),
        (a // 3, values // 3),
        (a % 7, values % 7),
        (a // -4, values // -4),
    ]:
        np.testing.assert_array_equal(_run_typed(expression, inputs, values.shape, np.int32), expected)


def test_entry_convention_reads_arguments_from_one_array_of_words() -> None:
    a, b = Tensor(A).realize(), Tensor(B).realize()
    uops, buffers = _kernel((a * b + 2.5).relu())
    function = ExecutableCode(select_kernel(uops, entry=True)).function(None, ctypes.c_void_p, ctypes.c_int)
    output = np.full(A.shape, np.nan, np.float32)
    by_buffer = {a.uop.base: A, b.uop.base: B}
    words = np.array([output.ctypes.data, *[by_buffer[buffer].ctypes.data for buffer in buffers[1:]]], np.uint64)
    function(words.ctypes.data, 0)
    np.testing.assert_array_equal(output, np.maximum(A * B + np.float32(2.5), 0))


def test_unsupported_constructs_are_refused_naming_the_op() -> None:
    a = Tensor(A).realize()
    # float64's exp2 is neither decomposed by the core nor selected here
    with pytest.raises(SelectionError, match=r"cannot select Ops\.EXP2 \(dtype dtypes\.float64.*DEV=CPU"):
        select_kernel(_uops(a.cast("float64").exp2()))


@pytest.mark.parametrize("fused", [False, True])
def test_multiply_add_rounds_once_only_where_codegen_fused_it(fused: bool) -> None:
    """(1 + 2**-12)**2 - (1 + 2**-11) is 2**-24 exactly; rounding the product first loses it (ties to even)."""
    from tinycore.dtype import dtypes
    from tinycore.uop.ops import FUSED, Ops
    from tinycore.uop.uop import UOp

    pointer = dtypes.float32.ptr(3)
    output, data = UOp(Ops.DEFINE_GLOBAL, pointer, (), 0), UOp(Ops.DEFINE_GLOBAL, pointer, (), 1)
    loads = [UOp(Ops.LOAD, dtypes.float32, (UOp(Ops.INDEX, pointer, (data, UOp.const(dtypes.int32, i))),))
             for i in range(3)]
    multiply_add = UOp(Ops.MULACC, dtypes.float32, tuple(loads), FUSED if fused else None)
    store = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, pointer, (output, UOp.const(dtypes.int32, 0))), multiply_add))
    uops = [output, data, *[u for load in loads for u in (load.src[0].src[1], load.src[0], load)],
            store.src[0].src[1], multiply_add, store.src[0], store, UOp(Ops.SINK, dtypes.void, (store,))]
    values = np.array([1 + 2**-12, 1 + 2**-12, -(1 + 2**-11)], np.float32)
    result = np.full(3, np.nan, np.float32)
    function = ExecutableCode(select_kernel(uops)).function(None, ctypes.c_void_p, ctypes.c_void_p)
    function(result.ctypes.data, values.ctypes.data)
    exact = np.float32(np.float64(values[0]) * np.float64(values[1]) + np.float64(values[2]))
    assert result[0] == (exact if fused else values[0] * values[1] + values[2])
    assert (result[0] != 0) == fused


def test_matmul_accumulators_are_updated_in_place() -> None:
    """The register tile's fused multiply-adds write the accumulators' own registers: no copy in and out of each
    per reduce step (test_x86_renderer.py checks the matmul's values against numpy on the device)."""
    from tiny_cpu.x86.isel import Selection
    from tiny_cpu.x86.renderer import X86Renderer

    m = Tensor(RNG.standard_normal((64, 64)).astype(np.float32)).realize()
    n = Tensor(RNG.standard_normal((64, 64)).astype(np.float32)).realize()
    items = [item for item in create_schedule([(m @ n).uop], device_facts).items if not item.is_copy]
    uops = linearize(items[-1].ast, X86Renderer())
    selection = Selection(uops, entry=True)
    selection.select()
    fused = [u for u in uops if u.op.name == "MULACC"]
    assert fused and all(u.src[2] in selection.in_place for u in fused)
    accumulators = {register for registers in selection.accumulators.values() for register in registers}
    updates = [i for i in selection.builder.program if i.op.startswith("vfmadd") and i.operands[0] in accumulators]
    assert len(updates) == len(fused)


def test_a_convolutions_chained_multiply_adds_update_the_accumulators_in_place() -> None:
    """The unrolled window makes several fused multiply-adds into one accumulator before it is stored back: each
    writes the accumulator's own register, with no copy in or out (values: test_x86_addresses.py's convolution)."""
    from tiny_cpu.x86.isel import Selection
    from tiny_cpu.x86.renderer import X86Renderer

    image = Tensor.empty(8, 16, 32, 32)
    weight = Tensor.empty(32, 16, 3, 3)
    items = [item for item in create_schedule([image.conv2d(weight).uop], device_facts).items if not item.is_copy]
    uops = linearize(items[-1].ast, X86Renderer())
    fused = [u for u in uops if u.op.name == "MULACC"]
    chained = [u for u in fused if u.src[2].op.name == "MULACC"]
    assert chained, "the kernel has no multiply-add into another's result"
    selection = Selection(uops, entry=True)
    selection.select()
    accumulators = {register for registers in selection.accumulators.values() for register in registers}
    updates = [i for i in selection.builder.program if i.op.startswith("vfmadd")]
    assert len(updates) == len(fused) and all(i.operands[0] in accumulators for i in updates)
    copies = [i for i in selection.builder.program if i.op == "vmovaps" and i.operands[0] in accumulators
              and i.operands[1] not in accumulators]
    assert len(copies) <= len(accumulators)  # only the zeroing before the reduce


SPECIAL = np.array([np.nan, 1.0, -0.0, 0.0, 2.0, -np.inf, np.inf, 3.0] * 6, np.float32)
OTHER = np.array([1.0, np.nan, 0.0, -0.0, 2.0, 0.0, np.nan, -3.0] * 6, np.float32)
SELECTS = {
    "a < b ? a : b": (lambda a, b: (a < b).where(a, b), lambda a, b: np.where(a < b, a, b)),
    "a < b ? b : a": (lambda a, b: (a < b).where(b, a), lambda a, b: np.where(a < b, b, a)),
    "relu": (lambda a, b: a.relu(), lambda a, b: np.where(np.float32(0) < a, a, np.float32(0))),
}


@pytest.mark.parametrize("contract", [ScalarX86Contract, VectorX86Contract,
                                      pytest.param(WideX86Contract, marks=needs_avx512)],
                         ids=["scalar", "vector", "zmm"])
@pytest.mark.parametrize("name", sorted(SELECTS))
def test_selects_that_are_a_min_or_max_keep_the_selects_nan_and_signed_zero(name: str, contract: type) -> None:
    from tiny_cpu.x86.isel import Selection

    build, reference = SELECTS[name]
    a, b = Tensor(SPECIAL).realize(), Tensor(OTHER).realize()
    selection = Selection(_kernel(build(a, b), contract)[0], vector_registers=32 if contract is WideX86Contract else 16)
    selection.select()
    ops = {instruction.op for instruction in selection.builder.program}
    assert ops & {"vminps", "vmaxps", "vminss", "vmaxss"} and not ops & {"vblendvps", "vcmpps", "vcmpss"}, ops
    result = _run(build(a, b), [(a, SPECIAL), (b, OTHER)], SPECIAL.shape, contract)
    np.testing.assert_array_equal(result.view(np.uint32), reference(SPECIAL, OTHER).view(np.uint32))  # bit for bit


def test_constant_masks_are_made_once_before_the_loops() -> None:
    from tiny_cpu.x86.isel import Selection

    values = RNG.standard_normal(64).astype(np.float32)
    a = Tensor(values).realize()
    expression = -(a * 3.0) + (-a).reciprocal()
    selection = Selection(_kernel(expression, VectorX86Contract)[0])
    selection.select()
    program = selection.builder.program
    first_loop = next(position for position, instruction in enumerate(program) if instruction.op == "label")
    signs = [position for position, instruction in enumerate(program)
             if instruction.op == "mov" and instruction.operands[1] == 0x80000000]
    assert len(signs) == 1 and signs[0] < first_loop  # two negations, one sign mask, made before the loop
    np.testing.assert_allclose(_run(expression, [(a, values)], values.shape, VectorX86Contract),
                               -(values * np.float32(3)) + np.float32(1) / -values, rtol=1e-6)


@pytest.mark.parametrize("lanes", [8, pytest.param(16, marks=needs_avx512)])
def test_a_polynomials_multiply_adds_write_the_dying_factors_register(lanes: int) -> None:
    """exp2's polynomial (Horner: p = p * x + c, each p read once): each fused multiply-add after the first writes
    its result into p's register (vfmadd213), with no copy of the constant first; values against numpy. In 16 lanes
    one select of two values read again elsewhere copies its lane mask (vpternlogd writes an operand)."""
    from tiny_cpu.x86.isel import Selection, select_kernel
    from tiny_cpu.x86.renderer import X86Renderer

    values = np.linspace(-20, 20, 64, dtype=np.float32)
    a = Tensor(values).realize()
    items = [item for item in create_schedule([a.exp2().uop], device_facts).items if not item.is_copy]
    registers = 32 if lanes == 16 else 16
    # fuses multiply-adds; one call computes the whole output (no core_id split)
    renderer = X86Renderer(vector_registers=registers, vector_lanes=lanes)
    renderer.global_max, renderer.has_threads = None, False
    uops = linearize(items[0].ast, renderer)
    assert any(u.op.name == "LOAD" and u.dtype.count == lanes for u in uops)
    selection = Selection(uops, vector_registers=registers)
    selection.select()
    program = selection.builder.program
    fused = sum(1 for u in uops if u.op.name == "MULACC")
    into_factor = [i for i in program if i.op == "vfmadd213ps"]
    copies = [i for i in program if i.op == "vmovaps" and isinstance(i.operands[1], type(i.operands[0]))]
    assert fused >= 5 and len(into_factor) == fused - 1 and len(copies) <= (1 if lanes == 8 else 2)
    output = np.full(values.shape, np.nan, np.float32)
    function = ExecutableCode(select_kernel(uops, vector_registers=registers)).function(None, ctypes.c_void_p,
                                                                                         ctypes.c_void_p)
    function(output.ctypes.data, values.ctypes.data)
    np.testing.assert_allclose(output, np.exp2(values), rtol=2e-6)


@needs_avx512
@pytest.mark.parametrize("name", sorted(TRANSCENDENTAL))
def test_transcendentals_in_sixteen_lanes(name: str) -> None:
    """exp2's integer steps as zmm integer instructions (EVEX logic forms), the rest in 16-lane float vectors."""
    build, reference = TRANSCENDENTAL[name]
    values = np.linspace(-20, 20, 96, dtype=np.float32)
    a = Tensor(values).realize()
    np.testing.assert_allclose(_run(build(a), [(a, values)], values.shape, WideX86Contract),
                               reference(values).astype(np.float32), rtol=2e-6, atol=1e-7)


@needs_avx512
def test_sixteen_lane_selects_write_the_operand_that_dies() -> None:
    """A 16-lane compare whose lanes are also read as bools is made a vector of lane masks (vpmovm2d from k1), and
    its selects are vpternlogd writing the alternative that nothing reads again (0xB8 the false one, 0xE2 the true
    one) or a copy of the mask (0xCA): the three truth tables against numpy."""
    from tiny_cpu.x86.isel import Selection

    left, right = RNG.standard_normal(80).astype(np.float32), RNG.standard_normal(80).astype(np.float32)
    a, b = Tensor(left).realize(), Tensor(right).realize()
    expression = (a < b).where(1.0, b * 3.0) + (a < b).where(a * 2.0, -1.0) + (a > b).where(a, 0.5) + \
        (a < b).cast(dtypes.float32) - (a > b).cast(dtypes.float32)
    selection = Selection(_kernel(expression, WideX86Contract)[0], vector_registers=32)
    selection.select()
    tables = sorted(i.operands[-1] for i in selection.builder.program if i.op == "vpternlogd")
    assert tables == [0xB8, 0xCA, 0xE2], tables
    expected = np.where(left < right, np.float32(1), right * np.float32(3)) + \
        np.where(left < right, left * np.float32(2), np.float32(-1)) + np.where(left > right, left, np.float32(0.5)) + \
        (left < right).astype(np.float32) - (left > right).astype(np.float32)
    np.testing.assert_array_equal(_run(expression, [(a, left), (b, right)], left.shape, WideX86Contract), expected)


@needs_avx512
@pytest.mark.parametrize("columns", [320, 200])
def test_sixteen_lane_reductions_and_ragged_rows(columns: int) -> None:
    """Rows of 320 reduce in 16-lane accumulators, their halves folded by vextractf32x8; rows of 200 (not a multiple
    of 16) in 8 lanes under the same contract. Sums against numpy's (the lanes add in another order), max exact."""
    from tiny_cpu.x86.isel import Selection

    wide = RNG.standard_normal((5, columns)).astype(np.float32)
    w = Tensor(wide).realize()
    uops = _kernel(w.sum(1), WideX86Contract)[0]
    lanes = max(u.dtype.count for u in uops if u.op.name == "LOAD")
    assert lanes == (16 if columns % 16 == 0 else 8)
    selection = Selection(uops, vector_registers=32)
    selection.select()
    extracts = [i.op for i in selection.builder.program if i.op.startswith("vextract")]
    assert ("vextractf32x8" in extracts) == (lanes == 16) and len(extracts) <= 3, extracts
    np.testing.assert_allclose(_run(w.sum(1), [(w, wide)], (5,), WideX86Contract, lanes=lanes), wide.sum(1),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(_run(w.max(1), [(w, wide)], (5,), WideX86Contract, lanes=lanes), wide.max(1))


@needs_avx512
def test_sixteen_lane_matmul_with_a_ragged_last_block() -> None:
    """A matmul whose 100 columns are no multiple of the tile's 16-lane vectors (the last block shifted back)."""
    left, right = RNG.standard_normal((45, 96)).astype(np.float32), RNG.standard_normal((96, 100)).astype(np.float32)
    a, b = Tensor(left).realize(), Tensor(right).realize()
    np.testing.assert_allclose(_run(a @ b, [(a, left), (b, right)], (45, 100), WideX86Contract), left @ right,
                               rtol=1e-4, atol=1e-4)


def _convolution(images: np.ndarray, weights: np.ndarray) -> np.ndarray:
    windows = np.lib.stride_tricks.sliding_window_view(images, weights.shape[2:], axis=(2, 3))
    return np.einsum("nchwij,kcij->nkhw", windows, weights)


BROADCAST_FACTORS = {
    "rows: m * v + m * m": (lambda m, v: m * v.reshape(13, 1) + m * m, lambda m, v: m * v[:, None] + m * m,
                            (13, 16), (13,)),
    "rows: (m + 1) * v + m * m": (lambda m, v: (m + 1.0) * v.reshape(13, 1) + m * m,
                                  lambda m, v: (m + 1) * v[:, None] + m * m, (13, 16), (13,)),
    "conv2d": (lambda x, w: x.conv2d(w), _convolution, (2, 16, 10, 18), (32, 16, 3, 3)),  # rows of one vector
}


@needs_avx512
@pytest.mark.parametrize("name", sorted(BROADCAST_FACTORS))
def test_a_broadcast_read_by_one_multiply_add_is_its_memory_operand(name: str) -> None:
    """A 16-lane broadcast of a float in memory that one FMA (or multiply) reads is that instruction's {1to16}
    memory operand (a convolution's weights, a row's scale); values against numpy."""
    from tiny_cpu.x86.isel import Selection
    from tiny_cpu.x86.renderer import X86Renderer

    from tinycore.renderer.isa import Memory

    build, reference, shape, other_shape = BROADCAST_FACTORS[name]
    values, other = RNG.standard_normal(shape).astype(np.float32), RNG.standard_normal(other_shape).astype(np.float32)
    x, y = Tensor(values).realize(), Tensor(other).realize()
    items = [item for item in create_schedule([build(x, y).uop], device_facts).items if not item.is_copy]
    renderer = X86Renderer(vector_registers=32, vector_lanes=16)  # fuses multiply-adds
    renderer.global_max, renderer.has_threads = None, False
    uops = linearize(items[-1].ast, renderer)
    selection = Selection(uops, vector_registers=32)
    selection.select()
    embedded = [i for i in selection.builder.program if i.op.startswith(("vfmadd", "vmul", "vadd"))
                and any(isinstance(o, Memory) and o.broadcast for o in i.operands)]
    from_memory = [i for i in selection.builder.program if i.op == "vbroadcastss" and isinstance(i.operands[1], Memory)]
    assert embedded and not from_memory, selection.builder.program
    output = np.full(reference(values, other).shape, np.nan, np.float32)
    inputs = [values if buffer is x.uop.base else other for buffer in items[-1].buffers[1:]]
    function = ExecutableCode(select_kernel(uops, vector_registers=32)).function(None, *[ctypes.c_void_p] * 3)
    function(output.ctypes.data, *[array.ctypes.data for array in inputs])
    np.testing.assert_allclose(output, reference(values, other), rtol=1e-5, atol=1e-5)


@needs_avx512
def test_sixteen_lane_selects_blend_under_k1_while_it_holds_their_compare() -> None:
    """Selects that are the only readers of their compare, with no other compare selected in between, blend under
    k1 (vblendmps) and the compare's lanes are never a vector; softmax's exp2 clamps against numpy."""
    from tiny_cpu.x86.isel import Selection

    values = (RNG.standard_normal((6, 64)) * 60).astype(np.float32)
    x = Tensor(values).realize()
    uops = _kernel(x.softmax(-1), WideX86Contract)[0]
    selection = Selection(uops, vector_registers=32)
    selection.select()
    ops = [i.op for i in selection.builder.program]
    blends = [i for i in selection.builder.program if i.op == "vblendmps"]
    assert blends and all(i.mask is not None and i.mask.name == "k1" for i in blends)
    assert "vpmovm2d" not in ops and "vpternlogd" not in ops, ops
    shifted = np.exp(values - values.max(-1, keepdims=True))
    np.testing.assert_allclose(_run(x.softmax(-1), [(x, values)], values.shape, WideX86Contract),
                               shifted / shifted.sum(-1, keepdims=True), rtol=2e-6, atol=1e-7)
