"""The OpenCL C renderer: source for hand-built linear programs (elementwise, reduce with local memory, matmul with
a local tile, vectors, literals, extensions), each built by the device's driver and run against numpy."""
from __future__ import annotations

import math

import numpy
import pytest
from cl_programs import glob, linear, run_source
from tiny_cl.renderer import OpenCLRenderer

from tinycore.codegen.division import guard_divisions
from tinycore.device.compiler import CompileError
from tinycore.dtype import dtypes
from tinycore.uop.ops import Ops
from tinycore.uop.patterns import graph_rewrite
from tinycore.uop.uop import UOp

I32, F32 = dtypes.int32, dtypes.float32


def special(name: str, size: int) -> UOp:
    """A SPECIAL thread index of `size`."""
    return UOp(Ops.SPECIAL, I32, (UOp.const(I32, size),), name)


def test_elementwise_with_groups_uses_group_and_local_ids(cl_device):
    out, data = glob(0, F32, 64), glob(1, F32, 64)
    group, local = special("gidx0", 16), special("lidx0", 4)
    index = group * 4 + local
    value = data.index(index).load()
    program = linear(group, local, out.index(index).store(value * value + 1.0))
    source = cl_device.renderer.render_named(program, "square")
    assert source.splitlines()[:2] == ["#pragma OPENCL FP_CONTRACT OFF",
                                       "__kernel void square(__global float* data0, __global const float* data1) {"]
    assert "int gidx0 = get_group_id(0); /* 16 */" in source and "int lidx0 = get_local_id(0); /* 4 */" in source
    values = numpy.linspace(-3, 3, 64, dtype=numpy.float32)
    result, _ = run_source(cl_device, "square", source, [numpy.zeros(64, numpy.float32), values], (16, 1, 1),
                           (4, 1, 1))
    numpy.testing.assert_allclose(result, values * values + 1, rtol=1e-6)


def test_global_only_kernel_reads_global_ids_and_leaves_the_group_shape_to_the_driver(cl_device):
    out, data = glob(0, F32, 6 * 50), glob(1, F32, 6 * 50)
    column, row = special("gidx0", 50), special("gidx1", 6)
    index = row * 50 + column
    program = linear(column, row, out.index(index).store(data.index(index).load().alu(Ops.MAX, UOp.const(F32, 0.5))))
    source = cl_device.renderer.render_named(program, "clip")
    assert "get_global_id(0)" in source and "get_global_id(1)" in source and "get_group_id" not in source
    values = numpy.random.default_rng(0).standard_normal(300).astype(numpy.float32)
    result, _ = run_source(cl_device, "clip", source, [numpy.zeros(300, numpy.float32), values], (50, 6, 1))
    numpy.testing.assert_array_equal(result, numpy.maximum(values, 0.5))


def local_reduce_program(rows: int, columns: int, group: int) -> list[UOp]:
    """Row sums: each group sums one row; its work-items add strided parts into local memory, then item 0 adds
    the parts up after a barrier."""
    out, data = glob(0, F32, rows), glob(1, F32, rows * columns)
    row, item = special("gidx0", rows), special("lidx0", group)
    parts = UOp(Ops.DEFINE_LOCAL, F32.ptr(group, "local"), (), 0)
    accumulator = UOp(Ops.DEFINE_REG, F32.ptr(1, "reg"), (), 0)
    slot = accumulator.index(UOp.const(I32, 0))
    initial = slot.store(UOp.const(F32, 0.0))
    step = UOp(Ops.RANGE, I32, (UOp.const(I32, columns // group),), (0, "reduce"))
    update = slot.store(UOp(Ops.LOAD, F32, (slot,)) + data.index(row * columns + step * group + item).load())
    closed = UOp(Ops.END, dtypes.void, (update, step))
    publish = parts.index(item).store(UOp(Ops.LOAD, F32, (slot, closed)))
    barrier = UOp(Ops.BARRIER, dtypes.void, (publish,))
    first = UOp(Ops.IF, dtypes.void, (item.alu(Ops.CMPEQ, UOp.const(I32, 0)), barrier))
    total = UOp(Ops.DEFINE_REG, F32.ptr(1, "reg"), (), 1)
    total_slot = total.index(UOp.const(I32, 0))
    total_initial = total_slot.store(UOp.const(F32, 0.0))
    part = UOp(Ops.RANGE, I32, (UOp.const(I32, group),), (1, "reduce"))
    total_update = total_slot.store(UOp(Ops.LOAD, F32, (total_slot,)) + parts.index(part).load())
    total_closed = UOp(Ops.END, dtypes.void, (total_update, part))
    store = out.index(row).store(UOp(Ops.LOAD, F32, (total_slot, total_closed)))
    return linear(row, item, parts, accumulator, initial, step, update, closed, publish, barrier, first, total,
                  total_initial, part, total_update, total_closed, store, UOp(Ops.ENDIF, dtypes.void, (first,)))


def test_reduce_with_local_memory_and_a_barrier(cl_device):
    rows, columns, group = 5, 96, 16
    source = cl_device.renderer.render_named(local_reduce_program(rows, columns, group), "row_sums")
    assert "__local float temp0[16];" in source and "barrier(CLK_LOCAL_MEM_FENCE);" in source
    values = numpy.random.default_rng(1).standard_normal((rows, columns)).astype(numpy.float32)
    result, _ = run_source(cl_device, "row_sums", source, [numpy.zeros(rows, numpy.float32), values.ravel()],
                           (rows, 1, 1), (group, 1, 1))
    numpy.testing.assert_allclose(result, values.sum(axis=1), rtol=1e-5, atol=1e-5)


def test_matmul_with_a_local_tile(cl_device):
    size = 16
    out, left, right = glob(0, F32, size * size), glob(1, F32, size * size), glob(2, F32, size * size)
    row, column = special("gidx0", size), special("lidx0", size)
    tile = UOp(Ops.DEFINE_LOCAL, F32.ptr(size, "local"), (), 0)
    fill = tile.index(column).store(left.index(row * size + column).load())
    barrier = UOp(Ops.BARRIER, dtypes.void, (fill,))
    accumulator = UOp(Ops.DEFINE_REG, F32.ptr(1, "reg"), (), 0)
    slot = accumulator.index(UOp.const(I32, 0))
    initial = slot.store(UOp.const(F32, 0.0))
    inner = UOp(Ops.RANGE, I32, (UOp.const(I32, size),), (0, "reduce"))
    product = UOp(Ops.LOAD, F32, (tile.index(inner), barrier)) * right.index(inner * size + column).load()
    update = slot.store(UOp(Ops.LOAD, F32, (slot,)) + product)
    closed = UOp(Ops.END, dtypes.void, (update, inner))
    store = out.index(row * size + column).store(UOp(Ops.LOAD, F32, (slot, closed)))
    program = linear(row, column, tile, fill, barrier, accumulator, initial, inner, update, closed, store)
    source = cl_device.renderer.render_named(program, "matmul_tile")
    assert source.index("barrier(CLK_LOCAL_MEM_FENCE);") < source.index("for (int ridx0")
    generator = numpy.random.default_rng(2)
    a, b = (generator.standard_normal((size, size)).astype(numpy.float32) for _ in range(2))
    result, _, _ = run_source(cl_device, "matmul_tile", source, [numpy.zeros(size * size, numpy.float32), a.ravel(),
                                                                 b.ravel()], (size, 1, 1), (size, 1, 1))
    numpy.testing.assert_allclose(result.reshape(size, size), a @ b, rtol=1e-5, atol=1e-5)


def test_vector_loads_and_stores_use_vload_and_vstore(cl_device):
    out, data = glob(0, F32, 16), glob(1, F32, 17)
    lane_block = special("gidx0", 4)
    lanes = data.index(lane_block * 4 + 1).load(dtype=F32.vec(4))
    program = linear(lane_block, out.index(lane_block * 4).store(lanes + lanes))
    source = cl_device.renderer.render_named(program, "doubled")
    assert "float4 val0 = vload4(0, (data1+" in source and "vstore4(" in source
    values = numpy.arange(17, dtype=numpy.float32)
    result, _ = run_source(cl_device, "doubled", source, [numpy.zeros(16, numpy.float32), values], (4, 1, 1))
    numpy.testing.assert_array_equal(result, 2 * values[1:])


def test_lanes_casts_bitcasts_and_64_bit_literals(cl_device):
    out_int, out_bits, data = glob(0, dtypes.int64, 2), glob(1, dtypes.uint32, 2), glob(2, F32, 4)
    lanes = data.index(UOp.const(I32, 0)).load(dtype=F32.vec(4))
    swapped = UOp(Ops.VECTORIZE, F32.vec(2), (lanes.gep(3), lanes.gep(0)))
    as_ints = swapped.cast(dtypes.int64.vec(2)) + UOp.const(dtypes.int64, -(2 ** 40))
    bits = UOp(Ops.BITCAST, dtypes.uint32.vec(2), (swapped,))
    program = linear(out_int.index(UOp.const(I32, 0)).store(as_ints), out_bits.index(UOp.const(I32, 0)).store(bits))
    source = cl_device.renderer.render_named(program, "lanes")
    assert "(-1099511627776l)" in source and "ll" not in source
    assert ".s3" in source and "convert_long2(" in source and "as_uint2(" in source
    values = numpy.array([1.5, -2.0, 3.25, -7.75], numpy.float32)
    ints, reinterpreted, _ = run_source(cl_device, "lanes", source, [numpy.zeros(2, numpy.int64),
                                                                       numpy.zeros(2, numpy.uint32), values], (1, 1, 1))
    numpy.testing.assert_array_equal(ints, numpy.trunc(values[[3, 0]]).astype(numpy.int64) - 2 ** 40)
    numpy.testing.assert_array_equal(reinterpreted, values[[3, 0]].view(numpy.uint32))


def test_literals_of_every_kind():
    renderer = OpenCLRenderer(extensions={"cl_khr_fp64"})
    assert renderer.render_const(-(2 ** 63), dtypes.int64) == "(-9223372036854775807l-1)"
    assert renderer.render_const(2 ** 64 - 1, dtypes.uint64) == "18446744073709551615ul"
    assert renderer.render_const(200, dtypes.uint8) == "((uchar)200)"
    assert renderer.render_const(-3, dtypes.int8) == "((char)-3)"
    assert renderer.render_const(math.inf, F32) == "INFINITY" and renderer.render_const(math.nan, F32) == "NAN"
    assert renderer.render_const(0.25, dtypes.float64) == "0.25"


def test_gated_loads_integer_division_and_bool_buffers(cl_device):
    out, flags, data = glob(0, I32, 8), glob(1, dtypes.bool, 8), glob(2, I32, 5)
    position = special("gidx0", 8)
    inside = position < 5
    value = UOp(Ops.LOAD, I32, (UOp(Ops.INDEX, I32.ptr(5), (data, position, inside)), UOp.const(I32, -1)))
    quotient = UOp.const(I32, 100).alu(Ops.IDIV, value)
    # codegen's pass "guarded division" (OpenCL declares guard_integer_division) before the renderer
    program = linear(position, *guard_divisions([out.index(position).store(quotient),
                                                 flags.index(position).store(value.alu(Ops.CMPLT, UOp.const(I32, 2)))]))
    source = cl_device.renderer.render_named(program, "gated")
    assert "__global uchar* data1" in source
    values = numpy.array([0, 3, -7, 1, 50], numpy.int32)
    result, flagged, _ = run_source(cl_device, "gated", source, [numpy.zeros(8, numpy.int32),
                                                                  numpy.zeros(8, numpy.bool_), values], (8, 1, 1))
    padded = numpy.concatenate([values, [-1, -1, -1]])
    # a division by zero gives 0 (the core's rule); C division truncates toward zero
    expected = numpy.array([0 if v == 0 else int(100 / v) for v in padded], numpy.int32)
    numpy.testing.assert_array_equal(result, expected)
    numpy.testing.assert_array_equal(flagged, padded < 2)


def test_integer_pow_is_computed_in_float_by_the_renderers_post_rules(cl_device):
    out, data = glob(0, I32, 6), glob(1, I32, 6)
    position = special("gidx0", 6)
    power = data.index(position).load().alu(Ops.POW, UOp.const(I32, 3))
    store = graph_rewrite(out.index(position).store(power), cl_device.renderer.post_matcher)  # as codegen runs it
    source = cl_device.renderer.render_named(linear(position, store), "cube")
    assert "((int)(pow(((float)(val0)),((float)(3)))))" in source
    values = numpy.array([2, -3, 5, 0, 7, -2], numpy.int32)
    result, _ = run_source(cl_device, "cube", source, [numpy.zeros(6, numpy.int32), values], (6, 1, 1))
    numpy.testing.assert_array_equal(result, values ** 3)


def test_double_is_enabled_only_when_reported(cl_device):
    assert ("cl_khr_fp64" in cl_device.opened.extensions) == ("cl_khr_fp64" in str(cl_device.opened.device.extensions))
    out, data = glob(0, dtypes.float64, 3), glob(1, dtypes.float64, 3)
    position = special("gidx0", 3)
    program = linear(position, out.index(position).store(data.index(position).load().sqrt() * 3.0))
    if "cl_khr_fp64" not in cl_device.opened.extensions:
        with pytest.raises(ValueError, match="does not report cl_khr_fp64"):
            cl_device.renderer.render_named(program, "roots")
        return
    source = cl_device.renderer.render_named(program, "roots")
    assert source.splitlines()[:2] == ["#pragma OPENCL FP_CONTRACT OFF",
                                       "#pragma OPENCL EXTENSION cl_khr_fp64 : enable"]
    values = numpy.array([2.0, 1e-300, 9.0])
    result, _ = run_source(cl_device, "roots", source, [numpy.zeros(3), values], (3, 1, 1))
    numpy.testing.assert_array_equal(result, numpy.sqrt(values) * 3.0)


def test_half_needs_cl_khr_fp16():
    out, data = glob(0, dtypes.float16, 2), glob(1, dtypes.float16, 2)
    position = special("gidx0", 2)
    program = linear(position, out.index(position).store(data.index(position).load() + data.index(position).load()))
    with pytest.raises(ValueError, match="does not report cl_khr_fp16; cast to float32 first"):
        OpenCLRenderer().render_named(program, "halves")
    source = OpenCLRenderer(extensions={"cl_khr_fp16"}).render_named(program, "halves")
    assert "#pragma OPENCL EXTENSION cl_khr_fp16 : enable\n" in source and "__global half* data0" in source


def test_half_runs_where_the_device_reports_it(cl_device):
    out, data = glob(0, dtypes.float16, 4), glob(1, dtypes.float16, 4)
    position = special("gidx0", 4)
    value = data.index(position).load()
    program = linear(position, out.index(position).store(value * value))
    if "cl_khr_fp16" not in cl_device.opened.extensions:
        with pytest.raises(ValueError, match="cl_khr_fp16"):
            cl_device.renderer.render_named(program, "squares")
        return
    source = cl_device.renderer.render_named(program, "squares")
    values = numpy.array([0.5, -2.0, 3.0, 100.0], numpy.float16)
    result, _ = run_source(cl_device, "squares", source, [numpy.zeros(4, numpy.float16), values], (4, 1, 1))
    numpy.testing.assert_array_equal(result, values * values)


def test_build_failure_carries_the_build_log(cl_device):
    source = "__kernel void broken(__global float* data0) { data0[0] = undefined_name; }\n"
    with pytest.raises(CompileError) as caught:
        cl_device.compiler.compile(source)
    message = str(caught.value)
    assert "failed to build a kernel for CL:0" in message and "undefined_name" in caught.value.log
    assert "--- source ---" in message


def test_arch_is_refused_and_unknown_thread_indices_raise():
    from tiny_cl.renderer import make_cl_renderer
    with pytest.raises(ValueError, match="takes no arch"):
        make_cl_renderer("CL", "sm_80")
    with pytest.raises(ValueError, match="no thread index 'core_id2'"):
        OpenCLRenderer().render_special("core_id2")
    assert OpenCLRenderer().render_special("idx1") == "get_global_id(1)"


def test_a_driver_that_does_not_know_the_cpu_gets_a_hint_and_a_kernel_error_none():
    from tiny_cl.compiler import _driver_hint
    pocl_log = "error: unknown target CPU 'generic'\nDevice pthread-AMD EPYC failed to build the program"
    hint = _driver_hint(pocl_log)
    assert "does not know this CPU" in hint and "intel-opencl-rt" in hint and "DEV=CPU" in hint
    assert _driver_hint("<source>:1:49: error: use of undeclared identifier 'undefined_name'") == ""
