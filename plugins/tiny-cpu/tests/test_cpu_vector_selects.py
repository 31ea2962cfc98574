"""Vector comparisons, selects, maxima and casts of the C renderer: kept whole (masks, blends, convertvector) and
equal to numpy, over values that tell the lanes apart (NaN, infinities, -0, denormals)."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from cpu_vectors import VECTOR_BYTES, cpu_vector_bytes
from tiny_cpu.renderer import CRenderer

from tinycore import Tensor, dtypes
from tinycore.codegen import lower_to_program
from tinycore.device import Device
from tinycore.dtype import DType
from tinycore.engine.memory import device_facts
from tinycore.schedule import create_schedule

EDGES = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.17e-38, 3.4e38, -3.4e38, 1.5, -2.5, 7.0,
                  -7.0, 0.5, 2.0], dtype=np.float32)


def _values(seed: int, count: int = 64) -> np.ndarray:
    """`count` float32 values: the edge values, then random ones of mixed sign and size."""
    generator = np.random.default_rng(seed)
    rest = (generator.standard_normal(count - len(EDGES)) * 10.0 ** generator.integers(-3, 4, count - len(EDGES)))
    return np.concatenate([EDGES, rest.astype(np.float32)])


def _sources(tensor: Tensor) -> list[str]:
    """The C source of every kernel that realizes `tensor`."""
    renderer = Device["CPU"].renderer
    items = create_schedule([tensor.uop], device_facts).items
    return [lower_to_program(item.ast, renderer).src for item in items if not item.is_copy]


CASES: dict[str, tuple[Callable[[Tensor, Tensor], Tensor], Callable[[np.ndarray, np.ndarray], np.ndarray]]] = {
    "where": (lambda a, b: (a < b).where(a, b), lambda a, b: np.where(a < b, a, b)),
    "where constant": (lambda a, b: (a != a).where(b, 3.0), lambda a, b: np.where(a != a, b, np.float32(3.0))),
    "maximum": (lambda a, b: a.maximum(b), lambda a, b: np.where(a < b, b, a)),
    "relu": (lambda a, b: a.relu(), lambda a, b: np.where(a > 0, a, np.float32(0))),
    "mask cast": (lambda a, b: (a < b).cast(dtypes.float32) * b, lambda a, b: (a < b).astype(np.float32) * b),
    "mask logic": (lambda a, b: ((a < b) & (b < 4.0)).where(a, -b), lambda a, b: np.where((a < b) & (b < 4), a, -b)),
    "mask or": (lambda a, b: ((a == b) | (a < 0.0)).where(1.0, b), lambda a, b: np.where((a == b) | (a < 0), 1, b)),
}


@pytest.mark.parametrize("name", CASES)
def test_float_selects_match_numpy_and_stay_vector(name: str) -> None:
    build, reference = CASES[name]
    left, right = _values(1), _values(2)[::-1].copy()
    right[:4] = left[:4]  # equal lanes too
    result = build(Tensor(left), Tensor(right))
    sources = _sources(result)
    with np.errstate(all="ignore"):
        expected = reference(left, right).astype(np.float32)
    np.testing.assert_array_equal(result.numpy(), expected)
    # a blend or a whole-vector select, no lane-by-lane ternaries over vector lanes
    assert any("mask" in source or "?(float" in source for source in sources), sources
    assert not any("[0]<" in source or "[0]?" in source for source in sources), sources


def test_comparison_result_stored_as_bools() -> None:
    left, right = _values(3), _values(4)
    result = Tensor(left) < Tensor(right)
    np.testing.assert_array_equal(result.numpy(), left < right)
    ne = Tensor(left) != Tensor(left)
    np.testing.assert_array_equal(ne.numpy(), np.isnan(left))


def test_select_between_doubles_under_a_float_mask() -> None:
    left, right = _values(5), _values(6)
    mask = Tensor(left) < Tensor(right)
    wide_left, wide_right = left.astype(np.float64) * 3, right.astype(np.float64) - 1
    result = mask.where(Tensor(wide_left), Tensor(wide_right))
    np.testing.assert_array_equal(result.numpy(), np.where(left < right, wide_left, wide_right))


def test_integer_max_shift_and_select() -> None:
    generator = np.random.default_rng(7)
    left = generator.integers(-2**31, 2**31 - 1, 64, dtype=np.int32)
    right = generator.integers(-2**31, 2**31 - 1, 64, dtype=np.int32)
    np.testing.assert_array_equal(Tensor(left).maximum(Tensor(right)).numpy(), np.maximum(left, right))
    np.testing.assert_array_equal((Tensor(left) < Tensor(right)).where(Tensor(left), 5).numpy(),
                                  np.where(left < right, left, 5))
    small = (left & 0xFFFF).astype(np.int32)
    np.testing.assert_array_equal((Tensor(small) << 3).numpy(), small << 3)
    np.testing.assert_array_equal((Tensor(left) >> 5).numpy(), left >> 5)


def _to_numpy(dtype: DType) -> type:
    return {dtypes.int32: np.int32, dtypes.float64: np.float64, dtypes.float16: np.float16, dtypes.uint8: np.uint8,
            dtypes.int64: np.int64}[dtype]


@pytest.mark.parametrize("target", [dtypes.int32, dtypes.float64, dtypes.float16, dtypes.uint8, dtypes.int64])
def test_vector_casts_match_numpy(target: DType) -> None:
    values = _values(8)
    with np.errstate(invalid="ignore"):
        values = np.where(np.isfinite(values), np.abs(values) % 200.0, 1.5).astype(np.float32)
    result = Tensor(values).cast(target)
    expected = values.astype(_to_numpy(target))
    np.testing.assert_array_equal(result.numpy(), expected)
    back = Tensor(expected).cast(dtypes.float32)
    np.testing.assert_array_equal(back.numpy(), expected.astype(np.float32))


def test_vector_casts_are_whole_vector_conversions() -> None:
    values = np.arange(64, dtype=np.float32) * 1.5
    sources = _sources(Tensor(values).cast(dtypes.int32) + 1)
    assert any("__builtin_convertvector" in source for source in sources), sources


_NARROW = {dtypes.uint8: np.uint8, dtypes.int8: np.int8, dtypes.uint16: np.uint16, dtypes.int16: np.int16}
_WIDE = {dtypes.int32: np.int32, dtypes.uint32: np.uint32, dtypes.int16: np.int16, dtypes.float32: np.float32,
         dtypes.float64: np.float64}


_WIDENING = [(source, target) for source in _NARROW for target in _WIDE
             if target.itemsize > source.itemsize or dtypes.is_float(target)]


@pytest.mark.parametrize("source,target", _WIDENING, ids=str)
def test_widening_vector_casts_match_numpy(source: DType, target: DType) -> None:
    """Narrow integers widened in vectors (lane literals, converted as a whole to floats): the narrow type's
    extremes and a spread between, as numpy converts them."""
    kind = _NARROW[source]
    info = np.iinfo(kind)
    values = np.concatenate([np.array([info.min, info.max, 0, 1, info.max // 2 + 1], dtype=np.int64),
                             np.random.default_rng(3).integers(info.min, int(info.max) + 1, 123)]).astype(kind)
    result = Tensor(values).cast(target) + Tensor.ones(len(values), dtype=target)
    with np.errstate(over="ignore"):
        expected = values.astype(_WIDE[target]) + _WIDE[target](1)
    np.testing.assert_array_equal(result.numpy(), expected)


def test_bitcast_of_vectors() -> None:
    values = _values(9)
    result = Tensor(values).bitcast(dtypes.int32) ^ 0x80000000 - 2**32
    np.testing.assert_array_equal(result.numpy(), values.view(np.int32) ^ np.int32(-2**31))


def test_half_and_bool_vectors_stay_correct() -> None:
    halves = np.clip(_values(10), -6e4, 6e4).astype(np.float16)
    other = np.clip(_values(11), -6e4, 6e4).astype(np.float16)
    np.testing.assert_array_equal((Tensor(halves) < Tensor(other)).where(Tensor(halves), Tensor(other)).numpy(),
                                  np.where(halves < other, halves, other))
    flags = np.arange(64) % 3 == 0
    values = _values(12)
    np.testing.assert_array_equal(Tensor(flags).where(Tensor(values), 0.0).numpy(), np.where(flags, values, 0))
    np.testing.assert_array_equal((Tensor(flags) & (Tensor(values) < 1.0)).numpy(), flags & (values < 1))


@pytest.mark.parametrize("vector_bytes", VECTOR_BYTES)
def test_exp_and_log_kernels_are_vector_code_without_libm_calls(vector_bytes: int) -> None:
    values = np.abs(_values(13)) + np.float32(0.5)
    with cpu_vector_bytes(vector_bytes) as lanes:
        for result in (Tensor(values).exp(), Tensor(values).log(), Tensor(values).softmax()):
            sources = _sources(result)
            assert not any("__builtin_exp2f" in source or "__builtin_log2f" in source for source in sources), sources
            assert any(f"float{lanes} " in source and "mask" in source for source in sources), sources
        with np.errstate(all="ignore"):
            np.testing.assert_allclose(Tensor(values).exp().numpy(),
                                       np.exp(values.astype(np.float64)).astype(np.float32),
                                       rtol=1e-5)  # the float32 product x * log2(e) alone is 3e-6 off at 50


MIN_MAX_CASES: dict[str, tuple[Callable[[Tensor, Tensor], Tensor], Callable[[np.ndarray, np.ndarray], np.ndarray]]] = {
    "maximum": (lambda a, b: a.maximum(b), lambda a, b: np.where(a < b, b, a)),
    "where minimum": (lambda a, b: (a < b).where(a, b), lambda a, b: np.where(a < b, a, b)),
    "where maximum": (lambda a, b: (b < a).where(a, b), lambda a, b: np.where(b < a, a, b)),
}


@pytest.mark.parametrize("vector_bytes", VECTOR_BYTES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", MIN_MAX_CASES)
def test_vector_min_max_keep_nan_and_signed_zero_lanes(name: str, dtype: type, vector_bytes: int) -> None:
    # the x86 max/min instructions stand in for the select only where they give the same bits: NaN lanes and
    # -0 against +0 take the select's operand, so the results are compared bit for bit, not just as values; 64-byte
    # vectors take the AVX-512 builtins where the host has them
    build, reference = MIN_MAX_CASES[name]
    left, right = _values(11).astype(dtype), _values(12)[::-1].astype(dtype)
    right[:6] = [-0.0, 0.0, np.nan, 1.0, -np.inf, np.nan]
    left[:6] = [0.0, -0.0, 1.0, np.nan, np.nan, np.nan]
    with cpu_vector_bytes(vector_bytes):
        result = build(Tensor(left), Tensor(right))
        sources = _sources(result)
        got = result.numpy()
    with np.errstate(all="ignore"):
        expected = reference(left, right).astype(dtype)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), expected.view(f"u{expected.itemsize}"))
    if isinstance(Device["CPU"].renderer, CRenderer):
        assert any("TC_MAX_" in source or "TC_MIN_" in source for source in sources), sources
