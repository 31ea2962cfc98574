"""The C-style renderer base: what it renders from hand-built linear programs, and ProgramSpec's description."""
from __future__ import annotations

import math

import pytest

from tinycore.codegen.division import guard_divisions
from tinycore.dtype import dtypes
from tinycore.renderer import CStyleLanguage, ProgramSpec
from tinycore.renderer.cstyle import bfloat16_bits
from tinycore.renderer.renderer import estimate
from tinycore.uop.ops import Ops
from tinycore.uop.symbolic import sym_infer
from tinycore.uop.uop import UOp

I32, F32 = dtypes.int32, dtypes.float32


class OpenCLLike(CStyleLanguage):
    """A GPU dialect defined only through the tables, as a plugin would."""

    device = "TESTGPU"
    kernel_prefix = "__kernel "
    buffer_prefix = "__global "
    smem_prefix = "__local "
    barrier = "barrier(CLK_LOCAL_MEM_FENCE);"
    code_for_workitem = {"g": lambda axis: f"get_group_id({axis})", "l": lambda axis: f"get_local_id({axis})",
                         "i": lambda axis: f"get_global_id({axis})"}

    def render_gep(self, expression, lane, dtype):
        return f"{expression}.s{lane}"


def glob(position, dtype, size):
    return UOp(Ops.DEFINE_GLOBAL, dtype.ptr(size), (), position)


def linear(*roots):
    order = {}
    for root in roots:
        for node in root.toposort:
            order.setdefault(node, None)
    return list(order)


def elementwise_program():
    out, data = glob(0, F32, 64), glob(1, F32, 64)
    group = UOp(Ops.SPECIAL, I32, (UOp.const(I32, 16),), "gidx0")
    local = UOp(Ops.SPECIAL, I32, (UOp.const(I32, 4),), "lidx0")
    index = group * 4 + local
    value = data.index(index).load()
    return linear(group, local, out.index(index).store(value * value + 1.0))


def test_thread_indices_qualifiers_and_inlining():
    source = OpenCLLike().render_named(elementwise_program(), "square")
    assert source.splitlines()[0] == ("__kernel void square(__global float* data0, __global const float* data1) {")
    assert "int gidx0 = get_group_id(0); /* 16 */" in source
    assert "int lidx0 = get_local_id(0); /* 4 */" in source
    # the index is used twice: one variable; the single-use product is inlined into the store
    assert "int alu0 = ((gidx0*4)+lidx0);" in source
    assert "float val0 = data1[alu0];" in source
    assert "data0[alu0] = ((val0*val0)+1.0f);" in source


def test_program_spec_from_uops():
    program = elementwise_program()
    spec = OpenCLLike().to_program(program, "square")
    assert (spec.global_size, spec.local_size) == ([16, 1, 1], [4, 1, 1])
    assert (spec.globals, spec.outs, spec.ins) == ([0, 1], [0], [1])
    # 64 threads x (mul, add of the value); the index's mul and add are address arithmetic, not counted
    assert spec.estimates.ops == 64 * 2
    assert spec.estimates.lds == 64 * 8 and spec.estimates.mem == 2 * 64 * 4
    assert spec.function_name == "square" and spec.device == "TESTGPU"


def test_symbolic_launch_sizes_and_vars():
    out = glob(0, F32, -1)
    count = UOp(Ops.DEFINE_VAR, I32, (), ("n", 1, 1024))
    other = UOp(Ops.DEFINE_VAR, I32, (), ("a_scale", 1, 8))
    size = count.alu(Ops.IDIV, UOp.const(I32, 4))
    group = UOp(Ops.SPECIAL, I32, (size,), "gidx0")
    store = out.index(group).store((group * other).cast(F32))
    spec = OpenCLLike().to_program(linear(count, other, group, store), "scaled")
    assert [variable.arg[0] for variable in spec.vars] == ["a_scale", "n"]
    assert spec.launch_dims({"n": 40, "a_scale": 2}) == ((10, 1, 1), (1, 1, 1))
    assert spec.vals({"n": 40, "a_scale": 3}) == (3, 40)
    assert "const int a_scale, const int n)" in spec.src and "float* data0" in spec.src
    with pytest.raises(KeyError, match="no value for variable 'n'"):
        sym_infer(size, {})


def test_loops_registers_gates_and_control_flow():
    out, data = glob(0, F32, 8), glob(1, F32, 10)
    row = UOp(Ops.RANGE, I32, (UOp.const(I32, 8),), (0, "loop"))
    accumulator = UOp(Ops.DEFINE_REG, F32.ptr(2, "reg"), (), 0)
    slot = accumulator.index(UOp.const(I32, 1))
    initial = slot.store(UOp.const(F32, -math.inf))
    gate = row < 5
    gated = UOp(Ops.INDEX, F32.ptr(10), (data, row + 2, gate))
    update = slot.store(UOp(Ops.LOAD, F32, (gated, UOp.const(F32, 7.5))).alu(Ops.MAX, UOp(Ops.LOAD, F32, (slot,))))
    closed = UOp(Ops.END, dtypes.void, (update, row))
    final = UOp(Ops.LOAD, F32, (slot, closed))
    opened = UOp(Ops.IF, dtypes.void, (final.alu(Ops.CMPNE, final),))
    store = out.index(UOp.const(I32, 0)).store(final)
    program = linear(accumulator, initial, row, update, closed, final, opened, store,
                     UOp(Ops.ENDIF, dtypes.void, (opened,)), UOp(Ops.BARRIER, dtypes.void, ()))
    source = OpenCLLike().render_named(program, "reduce")
    body = [line.strip() for line in source.splitlines()[1:-1]]
    assert body == [
        "float acc0[2];",
        "acc0[1] = (-INFINITY);",
        "for (int ridx0 = 0; ridx0 < 8; ridx0++) {",
        "float val0 = ((ridx0<5)?data1[(ridx0+2)]:7.5f);",
        "float val1 = acc0[1];",
        "acc0[1] = ((val0<val1)?val1:val0);",
        "}",
        "float val2 = acc0[1];",
        "if ((val2!=val2)) {",
        "data0[0] = val2;",
        "}",
        "barrier(CLK_LOCAL_MEM_FENCE);"]


def test_literals():
    renderer = OpenCLLike()
    assert renderer.render_const(math.inf, F32) == "INFINITY"
    assert renderer.render_const(-math.inf, F32) == "(-INFINITY)"
    assert renderer.render_const(math.nan, F32) == "NAN"
    assert renderer.render_const(-1.5, F32) == "(-1.5f)"
    assert renderer.render_const(1e-10, F32) == "1e-10f"
    assert renderer.render_const(2.0, dtypes.float64) == "2.0"
    assert renderer.render_const(0.5, dtypes.float16) == "((half)(0.5f))"
    assert renderer.render_const(-2**31, I32) == "(-2147483647-1)"
    assert renderer.render_const(7, dtypes.uint32) == "7u"
    assert renderer.render_const(-3, dtypes.int64) == "(-3ll)"
    assert renderer.render_const(5, dtypes.uint64) == "5ull"
    assert renderer.render_const(200, dtypes.uint8) == "((unsigned char)200)"
    assert renderer.render_const(True, dtypes.bool) == "1"
    # bfloat16 without native support: a float32 literal converted by the prelude's function; its bits: 1.0 is
    # 0x3f80, 3.140625 rounds to 0x4049
    assert renderer.render_const(1.0, dtypes.bfloat16) == "tc_f32_to_bf16(1.0f)"
    assert bfloat16_bits(3.14159) == 0x4049 and bfloat16_bits(math.inf) == 0x7F80
    assert bfloat16_bits(math.nan) & 0x7FC0 == 0x7FC0


def test_division_guard_narrow_types_and_vectors():
    out, data = glob(0, I32, 4), glob(1, I32, 4)
    value = data.index(UOp.const(I32, 0)).load()
    by_variable = value.alu(Ops.IDIV, value).alu(Ops.MOD, UOp.const(I32, 3))
    # codegen's pass "guarded division" makes the divisor 1 where it is 0 or -1, the result 0 or the negated dividend
    # there; by 3: no guard
    source = OpenCLLike().render_named(linear(*guard_divisions([out.index(UOp.const(I32, 1)).store(by_variable)])),
                                       "divide")
    assert "bool alu0 = (val0==0);" in source and "bool alu1 = (val0==(-1));" in source
    assert "((alu0?0:(alu1?(-val0):(val0/((alu0|alu1)?1:val0))))%3)" in source
    small_out, small = glob(0, dtypes.uint8, 4), glob(1, dtypes.uint8, 4)
    byte = small.index(UOp.const(I32, 0)).load()
    source = OpenCLLike().render_named(linear(small_out.index(UOp.const(I32, 0)).store(byte + byte)), "bytes")
    assert "((unsigned char)((val0+val0)))" in source
    vector_out, vector_in = glob(0, F32, 8), glob(1, F32, 8)
    lanes = vector_in.index(UOp.const(I32, 0)).load(dtype=F32.vec(4))
    mixed = UOp(Ops.VECTORIZE, F32.vec(2), (lanes.gep(3), lanes.gep(0))).sqrt()
    source = OpenCLLike().render_named(linear(vector_out.index(UOp.const(I32, 4)).store(mixed)), "lanes")
    assert "float4 val0 = (*((__global float4*)(data1)));" in source
    assert "float2 alu0 = (float2)(val0.s3,val0.s0);" in source
    assert "float2 alu1 = (float2)(sqrt(alu0.s0),sqrt(alu0.s1));" in source
    assert "(*((__global float2*)((data0+4)))) = alu1;" in source


def test_bitcast_custom_and_unknown_ops():
    out, data = glob(0, dtypes.uint32, 1), glob(1, F32, 1)
    value = data.index(UOp.const(I32, 0)).load()
    custom = UOp(Ops.CUSTOM, dtypes.uint32, (value.bitcast(dtypes.uint32),), "popcount({0})")
    source = OpenCLLike().render_named(linear(out.index(UOp.const(I32, 0)).store(custom)), "bits")
    assert "__builtin_memcpy" in source and "data0[0] = popcount(alu0);" in source
    with pytest.raises(ValueError, match="cannot render Ops.RESHAPE"):
        OpenCLLike().render_named([UOp(Ops.RESHAPE, F32, (value,), (1,))], "bad")
    with pytest.raises(ValueError, match="used before it is rendered"):
        OpenCLLike().render_named([out.index(UOp.const(I32, 0)).store(custom)], "unordered")


def test_estimates_multiply_by_loop_trip_counts():
    out, data = glob(0, F32, 12), glob(1, F32, 12)
    outer = UOp(Ops.RANGE, I32, (UOp.const(I32, 3),), (0, "loop"))
    inner = UOp(Ops.RANGE, I32, (UOp.const(I32, 4),), (1, "loop"))
    index = outer * 4 + inner
    store = out.index(index).store(data.index(index).load().alu(Ops.MULACC, UOp.const(F32, 2.0),
                                                                  UOp.const(F32, 1.0)))
    program = linear(outer, inner, store, UOp(Ops.END, dtypes.void, (store, inner, outer)))
    estimates = estimate(program)
    # per iteration: MULACC (2; the index mul + add are not counted), 12 iterations; one float loaded and stored each
    assert (estimates.ops, estimates.lds, estimates.mem) == (12 * 2, 12 * 8, 2 * 48)
    source = OpenCLLike().render_named(program, "nested")
    assert source.count("}") == 3 and source.index("ridx1 < 4") > source.index("ridx0 < 3")
    assert isinstance(OpenCLLike().to_program(program), ProgramSpec)


def test_repeated_operands_get_variables_so_source_stays_small():
    out, data = glob(0, F32, 1), glob(1, F32, 48)
    running = data.index(UOp.const(I32, 0)).load()
    for position in range(1, 48):  # an unrolled max-reduce: each MAX repeats both operands in its code
        running = running.alu(Ops.MAX, data.index(UOp.const(I32, position)).load() * 2.0)
    source = OpenCLLike().render_named(linear(out.index(UOp.const(I32, 0)).store(running)), "unrolled_max")
    assert len(source) < 20000 and source.count("float alu") == 47 + 46
