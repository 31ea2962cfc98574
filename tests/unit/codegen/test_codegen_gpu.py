"""GPU codegen: local sizes, group reductions through local memory and register tiles, checked against numpy.

Structure tests run the heuristic on a renderer description (no device needed). Run tests build and run on the CL
device (PoCL) and on the WEBGPU device (Mesa lavapipe) through Tensor; a device that cannot be opened here fails
its tests rather than skipping them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy
import pytest

from tinycore.codegen import linearize
from tinycore.codegen.gpu import largest_power_of_two_divisor, local_limits
from tinycore.codegen.interpreter import run_linear
from tinycore.codegen.local_memory import GroupReduceError, lower_group_reduce
from tinycore.dtype import dtypes
from tinycore.plugins.contract import RendererContract
from tinycore.tensor import Tensor
from tinycore.uop.axis import AxisType, new_range
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp

F32 = dtypes.float32
GPU_DEVICES = ("CL", "WEBGPU")


@dataclass
class GpuRenderer(RendererContract):
    """The parts of a GPU renderer codegen reads."""

    has_local: bool = True
    has_threads: bool = False
    local_max: tuple[int, ...] | None = (256, 256, 64)
    max_local_total: int | None = 256
    global_max: tuple[int, ...] = (2 ** 31 - 1, 65535, 65535)
    shared_max: int = 32768
    max_groups: int = 65535
    vector_widths: dict[Any, tuple[int, ...]] | None = None


@dataclass
class CpuRenderer(RendererContract):
    """The parts of a CPU renderer codegen reads."""

    has_local: bool = False
    has_threads: bool = True
    vector_widths: dict[Any, tuple[int, ...]] | None = None


def row_sum_ast(rows: int, columns: int) -> UOp:
    """out[r] = sum_c x[r, c]."""
    out = UOp(Ops.DEFINE_GLOBAL, F32.ptr(rows), (), 0)
    source = UOp(Ops.DEFINE_GLOBAL, F32.ptr(rows * columns), (), 1)
    row = new_range(rows, 0, AxisType.LOOP)
    column = new_range(columns, 1, AxisType.REDUCE)
    total = UOp(Ops.REDUCE, F32, (source.index(row * columns + column).load(), column), Ops.ADD)
    return out.index(row).store(total).sink()


def elementwise_ast(rows: int, columns: int) -> UOp:
    """out[r, c] = x[r, c] * 2."""
    out = UOp(Ops.DEFINE_GLOBAL, F32.ptr(rows * columns), (), 0)
    source = UOp(Ops.DEFINE_GLOBAL, F32.ptr(rows * columns), (), 1)
    row, column = new_range(rows, 0, AxisType.LOOP), new_range(columns, 1, AxisType.LOOP)
    index = row * columns + column
    return out.index(index).store(source.index(index).load() * UOp.const(F32, 2.0)).sink()


def specials(program: list[UOp]) -> dict[str, int]:
    """SPECIAL name -> constant size in a linear program."""
    return {str(node.arg): node.src[0].arg for node in program if node.op is Ops.SPECIAL}


# ---- structure ----

def test_big_row_reduce_gets_a_group_reduce_on_a_gpu_renderer():
    program = linearize(row_sum_ast(64, 4096), GpuRenderer())
    ops = [node.op for node in program]
    sizes = specials(program)
    assert sizes["gidx0"] == 64 and sizes["lidx0"] >= 2
    assert Ops.DEFINE_LOCAL in ops and Ops.BARRIER in ops
    local = next(node for node in program if node.op is Ops.DEFINE_LOCAL)
    assert local.dtype.addrspace == "local" and local.dtype.size == sizes["lidx0"]
    barrier = ops.index(Ops.BARRIER)
    local_store = next(i for i, node in enumerate(program) if node.op is Ops.STORE and
                       node.src[0].src[0].op is Ops.DEFINE_LOCAL)
    assert local_store < barrier
    global_store = next(node for node in program if node.op is Ops.STORE and
                        node.src[0].src[0].op is Ops.DEFINE_GLOBAL)
    assert len(global_store.src[0].src) == 3  # gated to one work-item
    assert ops.index(Ops.BARRIER) < program.index(global_store)


def test_cpu_renderer_gets_no_local_memory_or_local_ids():
    program = linearize(row_sum_ast(64, 4096), CpuRenderer())
    assert not any(node.op in (Ops.DEFINE_LOCAL, Ops.BARRIER) for node in program)
    assert not any(node.op is Ops.SPECIAL and str(node.arg).startswith(("lidx", "gidx")) for node in program)


def test_small_reduce_and_many_outputs_get_no_group():
    program = linearize(row_sum_ast(100000, 16), GpuRenderer())
    assert not any(node.op in (Ops.DEFINE_LOCAL, Ops.BARRIER) for node in program)


def test_elementwise_local_sizes_respect_the_limits():
    renderer = GpuRenderer(local_max=(64, 8, 1), max_local_total=128)
    sizes = specials(linearize(elementwise_ast(32, 512), renderer))
    assert sizes["lidx0"] == 64 and sizes["lidx1"] == 2  # 64 * 2 = 128 work-items, lidx1 within 8
    assert sizes["gidx0"] * sizes["lidx0"] == 512 and sizes["gidx1"] * sizes["lidx1"] == 32
    sizes = specials(linearize(elementwise_ast(3, 7), GpuRenderer()))
    assert "lidx0" not in sizes and sizes["gidx0"] == 7 and sizes["gidx1"] == 3


def test_no_local_ids_when_the_groups_would_exceed_a_dimension():
    sizes = specials(linearize(elementwise_ast(2, 4096), GpuRenderer(max_groups=4)))  # 4096 / 256 = 16 groups > 4
    assert "lidx0" not in sizes and sizes["gidx0"] == 4096
    sizes = specials(linearize(elementwise_ast(2, 4096), GpuRenderer(max_groups=16)))
    assert sizes["lidx0"] == 256 and sizes["gidx0"] == 16


def matmul_ast(rows: int, inner: int, columns: int) -> UOp:
    """out[r, c] = sum_k a[r, k] * b[k, c]."""
    out = UOp(Ops.DEFINE_GLOBAL, F32.ptr(rows * columns), (), 0)
    left = UOp(Ops.DEFINE_GLOBAL, F32.ptr(rows * inner), (), 1)
    right = UOp(Ops.DEFINE_GLOBAL, F32.ptr(inner * columns), (), 2)
    row, column = new_range(rows, 0, AxisType.LOOP), new_range(columns, 1, AxisType.LOOP)
    step = new_range(inner, 2, AxisType.REDUCE)
    product = left.index(row * inner + step).load() * right.index(step * columns + column).load()
    return out.index(row * columns + column).store(UOp(Ops.REDUCE, F32, (product, step), Ops.ADD)).sink()


def test_matmul_gets_a_register_tile_and_local_sizes():
    renderer = GpuRenderer(vector_widths={F32: (2, 4)})
    program = linearize(matmul_ast(64, 32, 128), renderer)
    sizes = specials(program)
    assert sizes == {"lidx0": 16, "lidx1": 8}  # 128 columns / 8 per work-item, 64 rows / 8: one work-group
    accumulators = [node for node in program if node.op is Ops.DEFINE_REG]
    assert sum(node.dtype.base.count for node in accumulators) == 64  # 8 x 8 outputs per work-item
    output = numpy.zeros(64 * 128, dtype=numpy.float32)
    rng = numpy.random.default_rng(12)
    left, right = rng.standard_normal((64, 32), dtype=numpy.float32), rng.standard_normal((32, 128),
                                                                                          dtype=numpy.float32)
    run_linear(program, [output, left, right])
    numpy.testing.assert_allclose(output.reshape(64, 128), left @ right, rtol=1e-4, atol=1e-4)


def test_given_opts_and_noopt_keep_one_work_item_per_output():
    sizes = specials(linearize(row_sum_ast(64, 4096), GpuRenderer(), opts=[]))
    assert sizes == {"gidx0": 64}


def test_local_limit_helpers():
    assert largest_power_of_two_divisor(1000, 256) == 8
    assert largest_power_of_two_divisor(4096, 256) == 256
    assert largest_power_of_two_divisor(7, 256) == 1
    assert local_limits(GpuRenderer(local_max=(8, 4, 2), max_local_total=16)) == ((8, 4, 2), 16)
    assert local_limits(GpuRenderer(local_max=None, max_local_total=None)) == ((256, 256, 64), 256)


def test_group_reduce_rejects_a_group_larger_than_the_range():
    ast = row_sum_ast(4, 8)
    column = next(node for node in ast.toposort if node.op is Ops.RANGE and node.arg[0] == 1)
    local = UOp(Ops.SPECIAL, dtypes.int32, (UOp.const(dtypes.int32, 16),), "lidx0")
    with pytest.raises(GroupReduceError, match="group"):
        lower_group_reduce(ast, column, local, 10)


def centred_sum_ast(rows: int, columns: int) -> UOp:
    """out[r] = sum_c (x[r, c] - max_c' x[r, c']): a reduce nested in another reduce's value."""
    out = UOp(Ops.DEFINE_GLOBAL, F32.ptr(rows), (), 0)
    source = UOp(Ops.DEFINE_GLOBAL, F32.ptr(rows * columns), (), 1)
    row = new_range(rows, 0, AxisType.LOOP)
    inner, outer = new_range(columns, 1, AxisType.REDUCE), new_range(columns, 2, AxisType.REDUCE)
    largest = UOp(Ops.REDUCE, F32, (source.index(row * columns + inner).load(), inner), Ops.MAX)
    total = UOp(Ops.REDUCE, F32, (source.index(row * columns + outer).load() - largest, outer), Ops.ADD)
    return out.index(row).store(total).sink()


@pytest.mark.parametrize("shape", [(3, 1000), (2, 256), (1, 131)])
def test_group_reduce_program_in_the_interpreter(shape):
    rows, columns = shape
    array = numpy.random.default_rng(10).standard_normal(shape, dtype=numpy.float32)
    output = numpy.zeros(rows, dtype=numpy.float32)
    program = linearize(row_sum_ast(rows, columns), GpuRenderer())
    assert Ops.BARRIER in [node.op for node in program]
    run_linear(program, [output, array])
    numpy.testing.assert_allclose(output, array.sum(1, dtype=numpy.float64), rtol=1e-4, atol=1e-4)


def test_nested_reduce_groups_only_the_outer_reduce():
    rows, columns = 4, 300
    array = numpy.random.default_rng(11).standard_normal((rows, columns), dtype=numpy.float32)
    output = numpy.zeros(rows, dtype=numpy.float32)
    program = linearize(centred_sum_ast(rows, columns), GpuRenderer())
    assert sum(node.op is Ops.DEFINE_LOCAL for node in program) == 1
    run_linear(program, [output, array])
    expected = (array - array.max(1, keepdims=True)).sum(1, dtype=numpy.float64)
    numpy.testing.assert_allclose(output, expected, rtol=1e-4, atol=1e-3)


# ---- runs on the devices ----

def run_on(device: str, function: Any, *arrays: numpy.ndarray) -> numpy.ndarray:
    """`function` applied to Tensors of `arrays` on `device`, as numpy."""
    return function(*(Tensor(array, device=device) for array in arrays)).numpy()


@pytest.fixture(params=GPU_DEVICES)
def device(request: Any) -> str:
    """The name of a GPU-like device that the tests run on."""
    return request.param


def test_elementwise_2d_with_local_sizes(device):
    rng = numpy.random.default_rng(1)
    first, second = rng.standard_normal((48, 640), dtype=numpy.float32), rng.standard_normal((48, 640),
                                                                                           dtype=numpy.float32)
    result = run_on(device, lambda a, b: a * b + a, first, second)
    numpy.testing.assert_allclose(result, first * second + first, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("shape", [(40, 4096), (5, 1000), (3, 129), (1, 999)])
def test_row_sums_with_group_reduce(device, shape):
    array = numpy.random.default_rng(2).standard_normal(shape, dtype=numpy.float32)
    numpy.testing.assert_allclose(run_on(device, lambda a: a.sum(1), array), array.sum(1, dtype=numpy.float64),
                                  rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("count", [1 << 16, 100003])
def test_full_sums_with_group_reduce(device, count):
    array = numpy.random.default_rng(3).random(count, dtype=numpy.float32)
    numpy.testing.assert_allclose(run_on(device, lambda a: a.sum(), array), array.sum(dtype=numpy.float64),
                                  rtol=1e-4)


def test_row_max_and_integer_sum_with_group_reduce(device):
    rng = numpy.random.default_rng(4)
    array = rng.standard_normal((6, 777), dtype=numpy.float32)
    numpy.testing.assert_array_equal(run_on(device, lambda a: a.max(1), array), array.max(1))
    integers = rng.integers(-1000, 1000, (9, 515), dtype=numpy.int32)
    numpy.testing.assert_array_equal(run_on(device, lambda a: a.sum(1), integers), integers.sum(1))


@pytest.mark.parametrize("sizes", [(64, 128, 96), (33, 70, 19), (128, 256, 128), (12, 20, 36)])
def test_matmul_with_register_tiles(device, sizes):
    rows, inner, columns = sizes
    rng = numpy.random.default_rng(5)
    left = rng.standard_normal((rows, inner), dtype=numpy.float32)
    right = rng.standard_normal((inner, columns), dtype=numpy.float32)
    numpy.testing.assert_allclose(run_on(device, lambda a, b: a @ b, left, right), left @ right, rtol=1e-4,
                                  atol=1e-3)


def test_softmax(device):
    array = numpy.random.default_rng(6).standard_normal((24, 1500), dtype=numpy.float32)
    shifted = numpy.exp(array - array.max(1, keepdims=True))
    numpy.testing.assert_allclose(run_on(device, lambda a: a.softmax(1), array),
                                  shifted / shifted.sum(1, keepdims=True), rtol=1e-4, atol=1e-6)


def test_mean_and_variance_reuse_a_group_reduced_result(device):
    array = numpy.random.default_rng(7).standard_normal((12, 2000), dtype=numpy.float32)
    numpy.testing.assert_allclose(run_on(device, lambda a: a.var(1), array), array.var(1, ddof=1), rtol=1e-3,
                                  atol=1e-4)


def test_any_all_argmax_and_many_output_axes_with_group_reduce(device):
    array = numpy.random.default_rng(8).standard_normal((7, 600), dtype=numpy.float32)
    numpy.testing.assert_array_equal(run_on(device, lambda a: (a > 2.5).any(1), array), (array > 2.5).any(1))
    numpy.testing.assert_array_equal(run_on(device, lambda a: (a > -3.0).all(1), array), (array > -3.0).all(1))
    numpy.testing.assert_array_equal(run_on(device, lambda a: a.argmax(1), array), array.argmax(1))
    grid = numpy.random.default_rng(9).standard_normal((2, 3, 4, 5, 300), dtype=numpy.float32)
    numpy.testing.assert_allclose(run_on(device, lambda a: a.sum(4), grid), grid.sum(4), rtol=1e-4, atol=1e-4)


def test_the_innermost_axis_takes_as_many_groups_as_the_x_dimension_allows():
    # CUDA and HIP launch up to 2^31 - 1 groups along x and 65535 along y and z: a renderer that declares its x limit
    # in global_max (and no max_groups for every dimension) splits a 2^28-element kernel into groups of 256, where the
    # y/z limit kept one work-item per group (19.9 GB/s on an H100); a per-dimension max_groups (WebGPU) still caps it
    sizes = specials(linearize(elementwise_ast(1, 1 << 28), GpuRenderer(max_groups=None)))  # type: ignore[arg-type]
    assert sizes["lidx0"] == 256 and sizes["gidx0"] == (1 << 28) // 256
    sizes = specials(linearize(elementwise_ast(1, 1 << 28), GpuRenderer(max_groups=65535)))
    assert "lidx0" not in sizes and sizes["gidx0"] == 1 << 28
