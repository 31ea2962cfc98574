"""Conformance, dtypes: every declared dtype stored, loaded, computed with and cast, against numpy.

A dtype the device does not declare is "not applicable (declared)". bfloat16 (no numpy type) is checked through
float32: its values are compared with float32 results within bfloat16's precision.
"""
from __future__ import annotations

import numpy
import pytest

from tinycore.dtype import DType, dtypes, to_numpy_dtype
from tinycore.tensor import Tensor
from tinycore.testing.capabilities import ALL_DTYPES, DeviceCapabilities, dtype_name
from tinycore.testing.support import assert_matches, require_dtype, sample

pytestmark = pytest.mark.conformance_category("dtypes")

CHECKED = sorted(ALL_DTYPES, key=lambda dtype: (dtype.itemsize, dtype.name))
NUMPY_TYPED = [dtype for dtype in CHECKED if dtype != dtypes.bfloat16]
NUMERIC = [dtype for dtype in NUMPY_TYPED if dtype != dtypes.bool]


def _tolerance(dtype: DType) -> float:
    return {dtypes.float16: 1e-3, dtypes.float32: 1e-6, dtypes.float64: 1e-12}.get(dtype, 0.0)


@pytest.mark.parametrize("dtype", NUMPY_TYPED, ids=[dtype_name(dtype) for dtype in NUMPY_TYPED])
def test_store_and_load(device: str, capabilities: DeviceCapabilities, dtype: DType) -> None:
    """Values survive a copy to the device and a kernel that loads and stores them (a flipped copy)."""
    require_dtype(capabilities, dtype)
    data = sample((3, 5), dtype, seed=40)
    tensor = Tensor(data, device=device)
    if tensor.dtype != dtype:
        raise AssertionError(f"Tensor of a numpy {data.dtype} array has dtype {tensor.dtype}, expected {dtype}")
    assert_matches(tensor, data, f"{dtype_name(dtype)} values copied to {device} and back")
    assert_matches(tensor.flip(1).contiguous(), data[:, ::-1],
                   f"{dtype_name(dtype)} flipped copy made by a kernel on {device}")


@pytest.mark.parametrize("dtype", NUMERIC, ids=[dtype_name(dtype) for dtype in NUMERIC])
def test_arithmetic(device: str, capabilities: DeviceCapabilities, dtype: DType) -> None:
    """(a + b) * a - b with the dtype's own rounding and integer wrap-around, and a < b, against numpy."""
    require_dtype(capabilities, dtype)
    left, right = sample((3, 5), dtype, seed=41), sample((3, 5), dtype, seed=42)
    if dtypes.is_unsigned(dtype):  # exercise wrap-around where numpy wraps too
        left[0, 0] = numpy.iinfo(to_numpy_dtype(dtype)).max
    with numpy.errstate(over="ignore"):
        expected = (left + right) * left - right
    tolerance = _tolerance(dtype)
    device_left, device_right = Tensor(left, device=device), Tensor(right, device=device)
    assert_matches((device_left + device_right) * device_left - device_right, expected,
                   f"(a + b) * a - b in {dtype_name(dtype)} on {device}", rtol=tolerance, atol=tolerance)
    assert_matches(device_left < device_right, left < right, f"a < b in {dtype_name(dtype)} on {device}")


def test_bool_logic(device: str, capabilities: DeviceCapabilities) -> None:
    """Logical ops and equality on bool tensors."""
    require_dtype(capabilities, dtypes.bool)
    left, right = sample((3, 5), dtypes.bool, seed=43), sample((3, 5), dtypes.bool, seed=44)
    device_left, device_right = Tensor(left, device=device), Tensor(right, device=device)
    assert_matches((device_left & device_right) | device_left.logical_not(), (left & right) | ~left,
                   f"(a & b) | ~a on bool on {device}")
    assert_matches(device_left == device_right, left == right, f"a == b on bool on {device}")


@pytest.mark.parametrize("dtype", NUMPY_TYPED, ids=[dtype_name(dtype) for dtype in NUMPY_TYPED])
def test_casts_to_and_from_float32(device: str, capabilities: DeviceCapabilities, dtype: DType) -> None:
    """Casting to float32 and from float32 (floats to ints truncate toward zero) matches numpy."""
    require_dtype(capabilities, dtype, dtypes.float32)
    data = sample((3, 5), dtype, seed=45)
    assert_matches(Tensor(data, device=device).cast(dtypes.float32), data.astype(numpy.float32),
                   f"cast {dtype_name(dtype)} -> float32 on {device}")
    floats = sample((3, 5), dtypes.float32, seed=46, low=-90, high=90)
    if dtypes.is_unsigned(dtype):
        floats = numpy.abs(floats)
    expected = floats.astype(to_numpy_dtype(dtype)) if dtype != dtypes.bool else floats != 0
    assert_matches(Tensor(floats, device=device).cast(dtype), expected,
                   f"cast float32 -> {dtype_name(dtype)} on {device}", rtol=_tolerance(dtype), atol=_tolerance(dtype))


INTEGER_OPS = [dtypes.int32, dtypes.uint32, dtypes.int64]


@pytest.mark.parametrize("dtype", INTEGER_OPS, ids=[dtype_name(dtype) for dtype in INTEGER_OPS])
def test_integer_division_bitwise_and_shifts(device: str, capabilities: DeviceCapabilities, dtype: DType) -> None:
    """Floor-free integer ops: // and % of positive values, &, |, ^, << and >>."""
    require_dtype(capabilities, dtype)
    numpy_dtype = to_numpy_dtype(dtype)
    left = numpy.abs(sample((3, 5), dtype, seed=47)).astype(numpy_dtype) + 50
    right = numpy.abs(sample((3, 5), dtype, seed=48)).astype(numpy_dtype) % 13 + 1
    device_left, device_right = Tensor(left, device=device), Tensor(right, device=device)
    assert_matches(device_left // device_right, left // right, f"a // b in {dtype_name(dtype)} on {device}")
    assert_matches(device_left % device_right, left % right, f"a % b in {dtype_name(dtype)} on {device}")
    assert_matches((device_left & device_right) ^ (device_left | 5), (left & right) ^ (left | numpy_dtype.type(5)),
                   f"(a & b) ^ (a | 5) in {dtype_name(dtype)} on {device}")
    shift_three, shift_two = numpy_dtype.type(3), numpy_dtype.type(2)
    assert_matches((device_left << 3) + (device_left >> 2), (left << shift_three) + (left >> shift_two),
                   f"(a << 3) + (a >> 2) in {dtype_name(dtype)} on {device}")


SIGNED_DIVISION = [dtypes.int8, dtypes.int32, dtypes.int64]
DIVIDENDS, DIVISORS = [-7, 7, -8, 9, 0, 5, -100], [2, -2, 3, 3, 4, -5, -7]


@pytest.mark.parametrize("dtype", SIGNED_DIVISION, ids=[dtype_name(dtype) for dtype in SIGNED_DIVISION])
def test_signed_division_and_remainder(device: str, capabilities: DeviceCapabilities, dtype: DType) -> None:
    """With negative operands: // and % round toward minus infinity (Python's rule), div(rounding_mode="trunc")
    and fmod toward zero (C's rule), so the device's integer division must truncate toward zero as the IR says."""
    require_dtype(capabilities, dtype)
    numpy_dtype = to_numpy_dtype(dtype)
    left, right = numpy.array(DIVIDENDS, numpy_dtype), numpy.array(DIVISORS, numpy_dtype)
    device_left, device_right = Tensor(left, device=device), Tensor(right, device=device)
    name = dtype_name(dtype)
    assert_matches(device_left // device_right, left // right, f"a // b in {name} on {device} (a={DIVIDENDS}, "
                   f"b={DIVISORS})")
    assert_matches(device_left % device_right, left % right, f"a % b in {name} on {device}")
    truncated = numpy.array([int(a / b) for a, b in zip(DIVIDENDS, DIVISORS, strict=True)], numpy_dtype)
    assert_matches(device_left.div(device_right, rounding_mode="trunc"), truncated,
                   f"a.div(b, rounding_mode='trunc') in {name} on {device}")
    assert_matches(device_left.fmod(device_right), numpy.fmod(left, right), f"a.fmod(b) in {name} on {device}")


CAST_SOURCES = [dtypes.float32, dtypes.int32, dtypes.bool, dtypes.uint8, dtypes.float16]
CAST_TARGETS = [dtypes.float32, dtypes.int32, dtypes.bool, dtypes.int8, dtypes.float64]


@pytest.mark.parametrize("target", CAST_TARGETS, ids=[dtype_name(dtype) for dtype in CAST_TARGETS])
@pytest.mark.parametrize("source", CAST_SOURCES, ids=[dtype_name(dtype) for dtype in CAST_SOURCES])
def test_casts_between_dtypes(device: str, capabilities: DeviceCapabilities, source: DType, target: DType) -> None:
    """Direct casts between pairs of dtypes (not through float32): floats to integers truncate toward zero, anything
    non-zero is True, bool is 0 or 1, against numpy."""
    require_dtype(capabilities, source, target)
    if source == dtypes.uint8:
        values = numpy.array([0, 1, 2, 3, 100], numpy.uint8)
    else:
        values = numpy.array([0, 1, 2.75, -3.5, 100], numpy.float64).astype(to_numpy_dtype(source))
    expected = values.astype(to_numpy_dtype(target))
    result = Tensor(values, device=device).cast(target)
    if result.dtype != target:
        raise AssertionError(f"cast to {dtype_name(target)} gave a tensor of dtype {dtype_name(result.dtype)}")
    assert_matches(result, expected, f"cast {dtype_name(source)} {values.tolist()} -> {dtype_name(target)} on {device}",
                   rtol=0, atol=0)


def _round_to_bfloat16(values: numpy.ndarray) -> numpy.ndarray:
    """float32 values rounded to the nearest bfloat16 (ties to even), returned as float32."""
    bits = values.astype(numpy.float32).view(numpy.uint32).astype(numpy.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16).astype(numpy.uint32)
    return rounded.view(numpy.float32)


def test_bfloat16_through_float32(device: str, capabilities: DeviceCapabilities) -> None:
    """bfloat16 values stored, added and cast back to float32 match float32 math rounded to bfloat16."""
    require_dtype(capabilities, dtypes.bfloat16, dtypes.float32)
    left, right = _round_to_bfloat16(sample((3, 5), seed=49)), _round_to_bfloat16(sample((3, 5), seed=50))
    as_bf16 = [Tensor(array, device=device).cast(dtypes.bfloat16) for array in (left, right)]
    assert_matches(as_bf16[0].cast(dtypes.float32), left, f"float32 -> bfloat16 -> float32 of exact values on {device}")
    assert_matches((as_bf16[0] + as_bf16[1]).cast(dtypes.float32), _round_to_bfloat16(left + right),
                   f"a + b in bfloat16 on {device}", rtol=8e-3, atol=1e-2)
