"""Tensors on the CL device give numpy's answers: elementwise, reductions, matmul, every integer and float dtype
the device reports, copies between CL and CPU both ways, and views at offsets."""
from __future__ import annotations

import numpy
import pytest

from tinycore.dtype import dtypes, from_numpy_dtype
from tinycore.tensor import Tensor
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp

GENERATOR = numpy.random.default_rng(1234)


def random(*shape: int) -> numpy.ndarray:
    """Standard normal float32 values."""
    return GENERATOR.standard_normal(shape).astype(numpy.float32)


def on_cl(values: numpy.ndarray) -> Tensor:
    """A tensor on CL holding `values`."""
    return Tensor(values, device="CL")


def test_elementwise_math(cl_device):
    a, b = random(7, 33), random(7, 33)
    x, y = on_cl(a), on_cl(b)
    numpy.testing.assert_allclose((x * y + x / (y.abs() + 1) - 2).numpy(), a * b + a / (numpy.abs(b) + 1) - 2,
                                  rtol=1e-6, atol=1e-6)
    numpy.testing.assert_allclose(x.exp().numpy(), numpy.exp(a), rtol=1e-5)
    numpy.testing.assert_allclose(x.abs().log().numpy(), numpy.log(numpy.abs(a)), rtol=1e-5, atol=1e-6)
    numpy.testing.assert_allclose(x.abs().sqrt().numpy(), numpy.sqrt(numpy.abs(a)), rtol=1e-6)
    numpy.testing.assert_allclose(x.sin().numpy(), numpy.sin(a), rtol=1e-5, atol=1e-6)
    numpy.testing.assert_array_equal((x < y).where(x, y).numpy(), numpy.where(a < b, a, b))
    numpy.testing.assert_array_equal(x.maximum(y).numpy(), numpy.maximum(a, b))
    numpy.testing.assert_allclose(x.relu().numpy(), numpy.maximum(a, 0))
    numpy.testing.assert_allclose(x.sigmoid().numpy(), 1 / (1 + numpy.exp(-a)), rtol=1e-5, atol=1e-6)


def test_broadcasting_and_large_elementwise(cl_device):
    a, b = random(300, 1), random(1, 500)
    numpy.testing.assert_allclose((on_cl(a) * on_cl(b) + 1).numpy(), a * b + 1, rtol=1e-6)
    big = random(1 << 20)
    numpy.testing.assert_allclose((on_cl(big) * 2 + 0.5).numpy(), big * 2 + 0.5, rtol=1e-6)


@pytest.mark.parametrize("axis", [None, 0, 1, (0, 2)])
def test_reductions(cl_device, axis):
    a = random(6, 17, 9)
    x = on_cl(a)
    numpy.testing.assert_allclose(x.sum(axis).numpy(), a.sum(axis), rtol=1e-5, atol=1e-5)
    numpy.testing.assert_allclose(x.max(axis).numpy(), a.max(axis))
    numpy.testing.assert_allclose(x.min(axis).numpy(), a.min(axis))
    numpy.testing.assert_allclose(x.mean(axis).numpy(), a.mean(axis), rtol=1e-5, atol=1e-6)


def test_large_reduction_and_softmax(cl_device):
    a = random(100_000)
    numpy.testing.assert_allclose(on_cl(a).sum().numpy(), a.astype(numpy.float64).sum(), rtol=1e-4)
    rows = random(8, 100)
    expected = numpy.exp(rows - rows.max(1, keepdims=True))
    expected /= expected.sum(1, keepdims=True)
    numpy.testing.assert_allclose(on_cl(rows).softmax(1).numpy(), expected, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("shape", [(1, 1, 1), (16, 16, 16), (33, 65, 17), (128, 64, 96)])
def test_matmul(cl_device, shape):
    rows, inner, columns = shape
    a, b = random(rows, inner), random(inner, columns)
    numpy.testing.assert_allclose((on_cl(a) @ on_cl(b)).numpy(), a @ b, rtol=1e-4, atol=1e-4)


def test_batched_matmul_and_transposed_operands(cl_device):
    a, b = random(3, 10, 12), random(3, 14, 12)
    result = on_cl(a) @ on_cl(b).permute(0, 2, 1)
    numpy.testing.assert_allclose(result.numpy(), a @ b.transpose(0, 2, 1), rtol=1e-4, atol=1e-5)


INTEGER_TYPES = [numpy.int8, numpy.uint8, numpy.int16, numpy.uint16, numpy.int32, numpy.uint32, numpy.int64,
                 numpy.uint64]


@pytest.mark.parametrize("numpy_type", INTEGER_TYPES)
def test_integer_dtypes(cl_device, numpy_type):
    information = numpy.iinfo(numpy_type)
    values = GENERATOR.integers(max(information.min, -1000), min(information.max, 1000), 64).astype(numpy_type)
    other = GENERATOR.integers(1, min(information.max, 50), 64).astype(numpy_type)
    x, y = on_cl(values), on_cl(other)
    assert (x + y).dtype == from_numpy_dtype(numpy_type)
    with numpy.errstate(over="ignore"):
        numpy.testing.assert_array_equal((x + y).numpy(), values + other)
        numpy.testing.assert_array_equal((x * y).numpy(), values * other)
    numpy.testing.assert_array_equal((x // y).numpy(), values // other)
    numpy.testing.assert_array_equal((x < y).numpy(), values < other)
    numpy.testing.assert_array_equal(x.maximum(y).numpy(), numpy.maximum(values, other))
    numpy.testing.assert_array_equal(x.max().numpy(), values.max())


def test_int64_values_beyond_32_bits(cl_device):
    values = numpy.array([2 ** 40 + 3, -(2 ** 50), 2 ** 62, -7], numpy.int64)
    numpy.testing.assert_array_equal((on_cl(values) * 2 + 1).numpy(), values * 2 + 1)
    numpy.testing.assert_array_equal(on_cl(values).sum().numpy(), values.sum())


def test_float64_where_reported(cl_device):
    values = numpy.array([1e-300, 2.0, 1e300, -3.5], numpy.float64)
    tensor = on_cl(values)
    if "cl_khr_fp64" not in cl_device.opened.extensions:
        with pytest.raises(ValueError, match="cl_khr_fp64"):
            (tensor * 2).numpy()
        return
    numpy.testing.assert_array_equal((tensor * 0.5 + 1e-310).numpy(), values * 0.5 + 1e-310)
    numpy.testing.assert_array_equal(tensor.sum().numpy(), values.sum())


def test_float16_where_reported(cl_device):
    values = numpy.array([0.5, -2.0, 1000.0, 3.0], numpy.float16)
    tensor = on_cl(values)
    if "cl_khr_fp16" not in cl_device.opened.extensions:
        with pytest.raises(ValueError, match="does not report cl_khr_fp16; cast to float32 first"):
            (tensor * 2).numpy()
        return
    numpy.testing.assert_array_equal((tensor * 2).numpy(), values * 2)


def test_bool_tensors_and_casts(cl_device):
    a, b = random(40), random(40)
    mask = on_cl(a) > on_cl(b)
    numpy.testing.assert_array_equal(mask.numpy(), a > b)
    numpy.testing.assert_array_equal((mask & (on_cl(a) > 0)).numpy(), (a > b) & (a > 0))
    numpy.testing.assert_array_equal(mask.cast(dtypes.int32).sum().numpy(), (a > b).sum())
    scaled = numpy.clip(a * 100, -127, 127)  # casting an out-of-range float to an integer is undefined
    numpy.testing.assert_array_equal((on_cl(a) * 100).clip(-127, 127).cast(dtypes.int8).numpy(),
                                     scaled.astype(numpy.int8))


def test_copies_between_cl_and_cpu(cl_device):
    a = random(5, 7)
    from_cl = on_cl(a).to("CPU")
    assert from_cl.device == "CPU"
    numpy.testing.assert_array_equal((from_cl + 1).numpy(), a + 1)
    to_cl = Tensor(a, device="CPU").to("CL")
    assert to_cl.device == "CL"
    numpy.testing.assert_array_equal((to_cl * 2).numpy(), a * 2)
    mixed = (on_cl(a) * 3).to("CPU") - Tensor(a, device="CPU")
    numpy.testing.assert_allclose(mixed.numpy(), 2 * a, rtol=1e-6)


def test_views_and_offsets(cl_device):
    a = random(10, 12)
    x = on_cl(a)
    numpy.testing.assert_array_equal(x[3:7].numpy(), a[3:7])
    numpy.testing.assert_array_equal(x[1:, 5:].numpy(), a[1:, 5:])
    numpy.testing.assert_array_equal((x[2:5, 1:4] + x[5:8, 7:10]).numpy(), a[2:5, 1:4] + a[5:8, 7:10])
    numpy.testing.assert_array_equal(x.permute(1, 0)[::2].numpy(), a.T[::2])
    numpy.testing.assert_array_equal(x.flip(0).numpy(), a[::-1])
    numpy.testing.assert_array_equal(x.pad(((1, 2), (0, 3))).numpy(), numpy.pad(a, ((1, 2), (0, 3))))
    numpy.testing.assert_allclose(x.reshape(4, 30)[1:3].sum(1).numpy(), a.reshape(4, 30)[1:3].sum(1), rtol=1e-5)


def test_assign_into_a_realized_tensor(cl_device):
    a = random(4, 4)
    x = on_cl(a).contiguous().realize()
    x.assign(x * 2).realize()
    numpy.testing.assert_array_equal(x.numpy(), a * 2)


@pytest.mark.parametrize("offset", [11, 32])
def test_kernels_read_buffer_views_at_any_offset(cl_device, offset):
    data = random(64)
    node = on_cl(data).realize().uop
    while node.op is not Ops.BUFFER:
        node = node.src[0]
    view = Tensor(UOp(Ops.BUFFER_VIEW, dtypes.float32, (node,), (9, offset)))
    numpy.testing.assert_array_equal((view * 3.0).numpy(), data[offset:offset + 9] * numpy.float32(3.0))


def test_scatter_reductions_use_atomics(cl_device):
    """float32 and int32 scatter reductions with about 500 values per element run in parallel through OpenCL's 32-bit
    atomics (atomic_cmpxchg loops, atomic_add / max / min), int64 and float64 through the 64-bit ones where the device
    reports them, and equal numpy's ufunc.at."""
    from tinycore.codegen import lower_to_program
    from tinycore.schedule import create_schedule
    count = 20000
    index = GENERATOR.integers(-37, 37, count).astype(numpy.int32)
    renderer = cl_device.renderer
    cases = [(numpy.float32, "sum", numpy.add, "atomic_cmpxchg"), (numpy.float32, "amax", numpy.maximum,
                                                                     "atomic_cmpxchg"),
             (numpy.int32, "sum", numpy.add, "atomic_add"), (numpy.int32, "amin", numpy.minimum, "atomic_min"),
             (numpy.int32, "prod", numpy.multiply, "atomic_cmpxchg")]
    if dtypes.int64 in renderer.atomic_dtypes:  # cl_khr_int64_base_atomics (PoCL reports it)
        cases += [(numpy.int64, "sum", numpy.add, "atom_add"), (numpy.int64, "amax", numpy.maximum, "atom_cmpxchg")]
    if dtypes.float64 in renderer.atomic_dtypes:
        cases += [(numpy.float64, "sum", numpy.add, "atom_cmpxchg")]
    for numpy_dtype, reduce, ufunc, atomic in cases:
        values = (GENERATOR.integers(0, 2, count) * 2 - 1 if reduce == "prod" else
                  GENERATOR.integers(-50, 50, count)).astype(numpy_dtype)
        base = GENERATOR.integers(1, 3, 37).astype(numpy_dtype)
        expected = base.copy()
        ufunc.at(expected, index, values)
        result = Tensor(base, device="CL").scatter_reduce(0, Tensor(index, device="CL"),
                                                               Tensor(values, device="CL"), reduce)
        kernels = [item for item in create_schedule([result.uop]).items if not item.is_copy]
        assert atomic in lower_to_program(kernels[-1].ast, renderer).src
        numpy.testing.assert_array_equal(result.numpy(), expected, err_msg=f"{reduce} of {numpy_dtype.__name__}")
