"""Helpers of the conformance checks: declared-capability gates and comparisons with readable failure messages."""
from __future__ import annotations

from typing import NoReturn

import numpy
import pytest

from tinycore.dtype import DType, dtypes, to_numpy_dtype
from tinycore.testing import NOT_APPLICABLE, NOT_BUILT
from tinycore.testing.capabilities import DeviceCapabilities, dtype_name


def not_applicable(reason: str) -> NoReturn:
    """Stop the current check as not applicable to this device, because of what it declares."""
    pytest.skip(f"{NOT_APPLICABLE}: {reason}")
    raise AssertionError("pytest.skip returned")  # it raises; without pytest installed mypy cannot tell


def not_built(reason: str) -> NoReturn:
    """Stop the current check because the core feature it needs is not part of this tinycore."""
    pytest.skip(f"{NOT_BUILT}: {reason}")
    raise AssertionError("pytest.skip returned")  # it raises; without pytest installed mypy cannot tell


def require_dtype(capabilities: DeviceCapabilities, *wanted: DType) -> None:
    """Not applicable unless every dtype in `wanted` is declared."""
    missing = [dtype_name(dtype) for dtype in wanted if not capabilities.supports(dtype)]
    if missing:
        not_applicable(f"the device does not declare {', '.join(missing)}")


def sample(shape: tuple[int, ...], dtype: DType = dtypes.float32, seed: int = 0, low: float = -3.0,
           high: float = 3.0) -> numpy.ndarray:
    """Deterministic test data of `shape` and `dtype` (integers within the dtype's range, floats in [low, high))."""
    generator = numpy.random.default_rng(seed)
    numpy_dtype = to_numpy_dtype(dtype)
    if dtype == dtypes.bool:
        return generator.integers(0, 2, size=shape).astype(numpy.bool_)
    if dtypes.is_int(dtype):
        info = numpy.iinfo(numpy_dtype)
        return generator.integers(max(info.min, -100), min(info.max, 100), size=shape, endpoint=True).astype(
            numpy_dtype)
    return generator.uniform(low, high, size=shape).astype(numpy.float32).astype(numpy_dtype)


def host(value: object) -> numpy.ndarray:
    """A numpy copy of a Tensor (or anything numpy accepts)."""
    return value.numpy() if hasattr(value, "numpy") else numpy.asarray(value)


def assert_matches(got: object, expected: object, what: str, rtol: float = 1e-5, atol: float = 1e-6,
                   check_dtype: bool = True) -> None:
    """Fail with a readable message unless `got` (a Tensor or array) equals `expected` within tolerances.

    The message names `what` was computed, the shapes or dtypes that differ, or how many elements differ and the
    first of them with its index, the value found and the value expected. NaN equals NaN.
    """
    actual = host(got)
    reference = numpy.asarray(expected)
    if actual.shape != reference.shape:
        raise AssertionError(f"{what}: shape {actual.shape}, expected {reference.shape}")
    if check_dtype and actual.dtype != reference.dtype:
        raise AssertionError(f"{what}: dtype {actual.dtype}, expected {reference.dtype}")
    if actual.size == 0:
        return
    if reference.dtype.kind in "fc" or actual.dtype.kind in "fc":
        actual64, reference64 = actual.astype(numpy.float64), reference.astype(numpy.float64)
        close = numpy.isclose(actual64, reference64, rtol=rtol, atol=atol, equal_nan=True)
    else:
        close = actual == reference
    if bool(numpy.all(close)):
        return
    wrong = numpy.argwhere(~close)
    first = tuple(int(index) for index in wrong[0])
    at = first if actual.ndim else ()
    raise AssertionError(f"{what}: {len(wrong)} of {actual.size} elements differ; first at index {at}: "
                         f"got {actual[at]}, expected {reference[at]}")


__all__ = ["not_applicable", "not_built", "require_dtype", "sample", "host", "assert_matches"]
