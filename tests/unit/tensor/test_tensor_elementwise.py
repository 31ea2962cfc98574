"""Elementwise Tensor operations against numpy and torch: values, broadcasting, result dtypes and errors.

What every device must get right (NaN and infinity, signed integer division, casts between dtypes) is checked
on each device by the conformance suite, tinycore/testing/ (run on CPU by tests/device/test_conformance.py)."""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812

from tinycore import Tensor, dtypes
from tinycore.dtype import from_torch_dtype, to_torch_dtype

RNG = np.random.default_rng(0)
SHAPE_PAIRS = [((), ()), ((2, 3), (3,)), ((2, 1), (1, 4)), ((0, 3), (3,)), ((4, 1, 3), (2, 1))]


def _data(shape: tuple[int, ...], low: float = -3.0, high: float = 3.0) -> np.ndarray:
    return RNG.uniform(low, high, size=shape).astype(np.float32)


def _close(got: Tensor, expected: Any, atol: float = 1e-5, rtol: float = 1e-5) -> None:
    expected_array = expected.numpy() if isinstance(expected, torch.Tensor) else np.asarray(expected)
    result = got.numpy()
    assert result.shape == expected_array.shape, f"shape {result.shape} != {expected_array.shape}"
    np.testing.assert_allclose(result, expected_array, atol=atol, rtol=rtol, equal_nan=True)


BINARY: dict[str, tuple[Callable, Callable]] = {
    "add": (lambda a, b: a + b, lambda a, b: a + b),
    "sub": (lambda a, b: a - b, lambda a, b: a - b),
    "mul": (lambda a, b: a * b, lambda a, b: a * b),
    "div": (lambda a, b: a / b, lambda a, b: a / b),
    "maximum": (lambda a, b: a.maximum(b), np.maximum),
    "minimum": (lambda a, b: a.minimum(b), np.minimum),
    "lt": (lambda a, b: a < b, lambda a, b: a < b),
    "le": (lambda a, b: a <= b, lambda a, b: a <= b),
    "gt": (lambda a, b: a > b, lambda a, b: a > b),
    "ge": (lambda a, b: a >= b, lambda a, b: a >= b),
    "eq": (lambda a, b: a == b, lambda a, b: a == b),
    "ne": (lambda a, b: a != b, lambda a, b: a != b),
}


@pytest.mark.parametrize("name", list(BINARY))
@pytest.mark.parametrize("shapes", SHAPE_PAIRS)
def test_binary_ops_broadcast(name: str, shapes: tuple) -> None:
    ours, reference = BINARY[name]
    left, right = _data(shapes[0]), _data(shapes[1])
    right = np.where(np.abs(right) < 0.1, 0.5, right).astype(np.float32)
    _close(ours(Tensor(left), Tensor(right)), reference(left, right))


@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "lt", "eq", "maximum"])
def test_binary_ops_with_python_scalars_both_sides(name: str) -> None:
    ours, reference = BINARY[name]
    values = _data((2, 3))
    _close(ours(Tensor(values), 1.5), reference(values, np.float32(1.5)))
    if name in ("add", "sub", "mul", "div"):
        _close(ours(2.5, Tensor(values)), reference(np.float32(2.5), values))


def test_float_floordiv_mod_fmod_against_torch() -> None:
    left, right = _data((3, 4)), _data((4,))
    right = np.where(np.abs(right) < 0.2, 0.7, right).astype(np.float32)
    a, b = torch.tensor(left), torch.tensor(right)
    _close(Tensor(left) // Tensor(right), torch.floor_divide(a, b), atol=1e-5)
    _close(Tensor(left) % Tensor(right), torch.remainder(a, b), atol=1e-5)
    _close(Tensor(left).fmod(Tensor(right)), torch.fmod(a, b), atol=1e-5)
    _close(Tensor(left).div(Tensor(right), rounding_mode="trunc"), torch.div(a, b, rounding_mode="trunc"))


def test_pow_forms() -> None:
    base = _data((3, 4), 0.1, 3.0)
    exponent = _data((4,), -2.0, 2.0)
    _close(Tensor(base) ** Tensor(exponent), base ** exponent, rtol=1e-5)
    _close(Tensor(base) ** 3, base ** 3, rtol=1e-6)
    _close(Tensor(base) ** -2, base ** -2.0, rtol=1e-6)
    _close(Tensor(base) ** 0.5, np.sqrt(base))
    _close(2 ** Tensor(exponent), 2.0 ** exponent, rtol=1e-6)
    _close(Tensor([-2.0, -2.0, 0.0, 0.0, 3.0]) ** Tensor([3.0, 0.5, 0.0, -1.0, 0.0]),
           torch.tensor([-2.0, -2.0, 0.0, 0.0, 3.0]) ** torch.tensor([3.0, 0.5, 0.0, -1.0, 0.0]))
    assert (Tensor([2, 3, -2]) ** 3).tolist() == [8, 27, -8]
    assert (Tensor([2, 3]) ** Tensor([10, 4])).tolist() == [1024, 81]
    assert (Tensor([2, 3]) ** 3).dtype == dtypes.int32 and (Tensor([2]) ** 0.5).dtype == dtypes.float32


UNARY: dict[str, tuple[Callable, Callable, float, float]] = {
    "neg": (lambda t: -t, torch.neg, -3, 3), "abs": (Tensor.abs, torch.abs, -3, 3),
    "sign": (Tensor.sign, torch.sign, -3, 3), "exp": (Tensor.exp, torch.exp, -5, 5),
    "exp2": (Tensor.exp2, torch.exp2, -5, 5), "log": (Tensor.log, torch.log, 0.01, 10),
    "log2": (Tensor.log2, torch.log2, 0.01, 10), "log10": (Tensor.log10, torch.log10, 0.01, 10),
    "sqrt": (Tensor.sqrt, torch.sqrt, 0, 10), "rsqrt": (Tensor.rsqrt, torch.rsqrt, 0.1, 10),
    "reciprocal": (Tensor.reciprocal, torch.reciprocal, 0.2, 5), "sin": (Tensor.sin, torch.sin, -6, 6),
    "cos": (Tensor.cos, torch.cos, -6, 6), "tan": (Tensor.tan, torch.tan, -1.4, 1.4),
    "asin": (Tensor.asin, torch.asin, -0.99, 0.99), "acos": (Tensor.acos, torch.acos, -0.99, 0.99),
    "atan": (Tensor.atan, torch.atan, -20, 20), "sinh": (Tensor.sinh, torch.sinh, -4, 4),
    "cosh": (Tensor.cosh, torch.cosh, -4, 4), "tanh": (Tensor.tanh, torch.tanh, -5, 5),
    "asinh": (Tensor.asinh, torch.asinh, -5, 5), "acosh": (Tensor.acosh, torch.acosh, 1.01, 6),
    "atanh": (Tensor.atanh, torch.atanh, -0.95, 0.95), "floor": (Tensor.floor, torch.floor, -5, 5),
    "ceil": (Tensor.ceil, torch.ceil, -5, 5), "trunc": (Tensor.trunc, torch.trunc, -5, 5),
    "round": (Tensor.round, torch.round, -5, 5), "erf": (Tensor.erf, torch.erf, -3, 3),
    "square": (Tensor.square, torch.square, -3, 3), "log1p": (Tensor.log1p, torch.log1p, -0.5, 3),
    "expm1": (Tensor.expm1, torch.expm1, -2, 2),
}


@pytest.mark.parametrize("name", list(UNARY))
@pytest.mark.parametrize("shape", [(), (2, 0), (3, 1, 4)])
def test_unary_math_against_torch(name: str, shape: tuple[int, ...]) -> None:
    ours, reference, low, high = UNARY[name]
    values = _data(shape, low, high)
    _close(ours(Tensor(values)), reference(torch.tensor(values)), atol=2e-5, rtol=2e-5)


def test_rounding_halves_to_even() -> None:
    values = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.49, -3.51]
    assert Tensor(values).round().tolist() == np.round(values).tolist()


def test_math_on_integers_gives_default_float() -> None:
    assert Tensor([1, 4]).sqrt().dtype == dtypes.float32
    assert Tensor([1, 4]).sqrt().tolist() == [1.0, 2.0]
    assert Tensor([True]).exp().dtype == dtypes.float32
    assert Tensor([1.0], dtype=dtypes.float16).exp().dtype == dtypes.float16
    assert Tensor([1, -4]).abs().tolist() == [1, 4] and Tensor([1, -4]).abs().dtype == dtypes.int32
    assert Tensor([3, -4, 0]).sign().tolist() == [1, -1, 0]


ACTIVATIONS: dict[str, tuple[Callable, Callable]] = {
    "relu": (Tensor.relu, F.relu), "leaky_relu": (lambda t: t.leaky_relu(0.1), lambda t: F.leaky_relu(t, 0.1)),
    "relu6": (Tensor.relu6, F.relu6), "elu": (lambda t: t.elu(0.7), lambda t: F.elu(t, 0.7)),
    "celu": (lambda t: t.celu(1.3), lambda t: F.celu(t, 1.3)), "selu": (Tensor.selu, F.selu),
    "gelu": (Tensor.gelu, lambda t: F.gelu(t, approximate="tanh")),
    "gelu_exact": (lambda t: t.gelu("none"), F.gelu),
    "quick_gelu": (Tensor.quick_gelu, lambda t: t * torch.sigmoid(1.702 * t)), "silu": (Tensor.silu, F.silu),
    "swish": (Tensor.swish, F.silu), "mish": (Tensor.mish, F.mish), "sigmoid": (Tensor.sigmoid, torch.sigmoid),
    "hardsigmoid": (Tensor.hardsigmoid, F.hardsigmoid), "hardtanh": (Tensor.hardtanh, F.hardtanh),
    "hardswish": (Tensor.hardswish, F.hardswish), "softplus": (Tensor.softplus, F.softplus),
    "softplus_beta": (lambda t: t.softplus(2.0), lambda t: F.softplus(t, 2.0)),
    "softsign": (Tensor.softsign, F.softsign),
    "logsigmoid": (Tensor.logsigmoid, F.logsigmoid),
}


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_activations_against_torch(name: str) -> None:
    ours, reference = ACTIVATIONS[name]
    values = np.concatenate([_data((20,), -8, 8), np.array([0.0, -25.0, 25.0], np.float32)])
    _close(ours(Tensor(values)), reference(torch.tensor(values)), atol=2e-5, rtol=1e-4)


def test_clip_where_lerp_copysign_logaddexp() -> None:
    values = _data((3, 4))
    _close(Tensor(values).clip(-1, 0.5), np.clip(values, -1, 0.5))
    _close(Tensor(values).clamp(min_=0.2), np.maximum(values, 0.2))
    with pytest.raises(ValueError):
        Tensor(values).clip()
    _close((Tensor(values) > 0).where(Tensor(values), -1.0), np.where(values > 0, values, -1))
    assert (Tensor([True, False]).where(1, 2.5)).tolist() == [1.0, 2.5]
    _close(Tensor(values).lerp(Tensor(values * 2), 0.25), values + values * 0.25)
    _close(Tensor(values).copysign(Tensor([-1.0, 1.0, -0.0, 2.0])), np.copysign(values, [-1.0, 1.0, -0.0, 2.0]))
    other = _data((4,))
    _close(Tensor(values).logaddexp(Tensor(other)), np.logaddexp(values, other), atol=1e-5)


def test_logic_and_bitwise() -> None:
    a, b = np.array([True, True, False, False]), np.array([True, False, True, False])
    assert (Tensor(a) & Tensor(b)).tolist() == (a & b).tolist()
    assert (Tensor(a) | Tensor(b)).tolist() == (a | b).tolist()
    assert (Tensor(a) ^ Tensor(b)).tolist() == (a ^ b).tolist()
    assert Tensor(a).logical_not().tolist() == (~a).tolist() and (~Tensor(a)).tolist() == (~a).tolist()
    ints = np.array([12, -7, 255, 0], np.int32)
    assert (Tensor(ints) & 10).tolist() == (ints & 10).tolist()
    assert (Tensor(ints) | Tensor(ints[::-1].copy())).tolist() == (ints | ints[::-1]).tolist()
    assert (Tensor(ints) ^ 5).tolist() == (ints ^ 5).tolist()
    assert (~Tensor(ints)).tolist() == (~ints).tolist()
    assert (Tensor(ints) << 2).tolist() == (ints << 2).tolist()
    assert (Tensor(ints) >> 1).tolist() == (ints >> 1).tolist()
    unsigned = np.array([1, 200, 0], np.uint8)
    assert (~Tensor(unsigned)).tolist() == (~unsigned).tolist()
    with pytest.raises(TypeError, match="bitwise_and"):
        Tensor([1.0]) & Tensor([2.0])
    with pytest.raises(TypeError, match="lshift"):
        Tensor([1.0]) << 1


def test_isnan_isinf_isfinite_isclose() -> None:
    values = Tensor([1.0, math.inf, -math.inf, math.nan, 0.0])
    assert values.isnan().tolist() == [False, False, False, True, False]
    assert values.isinf().tolist() == [False, True, True, False, False]
    assert values.isinf(detect_negative=False).tolist() == [False, True, False, False, False]
    assert values.isfinite().tolist() == [True, False, False, False, True]
    near = Tensor([1.0, 1.0 + 1e-7, 2.0, math.nan])
    assert near.isclose(Tensor([1.0, 1.0, 2.1, math.nan])).tolist() == [True, True, False, False]
    assert near.isclose(Tensor([1.0, 1.0, 2.1, math.nan]), equal_nan=True).tolist() == [True, True, False, True]
    assert Tensor([1.0, 2.0]).allclose(Tensor([1.0, 2.0 + 1e-9])).item() is True


# ---- dtype promotion ----

TORCH_DTYPES = [dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.float16,
                dtypes.float32, dtypes.float64]


@pytest.mark.parametrize("left", TORCH_DTYPES)
@pytest.mark.parametrize("right", TORCH_DTYPES)
def test_tensor_tensor_promotion_matches_torch(left: Any, right: Any) -> None:
    a, b = Tensor.ones(2, dtype=left), Tensor.ones(2, dtype=right)
    expected = (torch.ones(2, dtype=to_torch_dtype(left)) * torch.ones(2, dtype=to_torch_dtype(right))).dtype
    assert (a * b).dtype == from_torch_dtype(expected)


# tensor dtype, Python scalar -> result dtype (tinygrad's rule; torch differs only for bool + int: int64 there)
SCALAR_TABLE = [(dtypes.int8, 1, dtypes.int8), (dtypes.int8, 1.5, dtypes.float32),
                (dtypes.float16, 1.5, dtypes.float16), (dtypes.bool, 1, dtypes.int32), (dtypes.bool, True, dtypes.bool),
                (dtypes.uint8, 300, dtypes.uint8),
                (dtypes.int64, 2.0, dtypes.float32), (dtypes.float64, 1, dtypes.float64)]


@pytest.mark.parametrize("tensor_dtype, scalar, expected", SCALAR_TABLE)
def test_tensor_scalar_promotion_table(tensor_dtype: Any, scalar: Any, expected: Any) -> None:
    assert (Tensor.ones(2, dtype=tensor_dtype) + scalar).dtype == expected
    assert (scalar * Tensor.ones(2, dtype=tensor_dtype)).dtype == expected


def test_scalar_wraps_into_small_integer_dtype() -> None:
    assert (Tensor([1, 2], dtype=dtypes.uint8) + 300).tolist() == [45, 46]


def test_bitcast() -> None:
    values = np.array([1.0, -2.5, 0.0], np.float32)
    np.testing.assert_array_equal(Tensor(values).bitcast(dtypes.int32).numpy(), values.view(np.int32))
    np.testing.assert_array_equal(Tensor(values).bitcast(dtypes.uint32).bitcast(dtypes.float32).numpy(), values)
    np.testing.assert_array_equal(Tensor(values).bitcast(dtypes.int16).numpy(), values.view(np.int16))
    with pytest.raises(RuntimeError, match="divide into 8-byte elements"):
        Tensor(values).bitcast(dtypes.float64)  # 3 x 4 bytes are no whole 8-byte elements


def test_dtype_shortcuts() -> None:
    tensor = Tensor([1.5, -2.5])
    assert tensor.int().dtype == dtypes.int32 and tensor.int().tolist() == [1, -2]
    assert tensor.half().dtype == dtypes.float16 and tensor.double().dtype == dtypes.float64
    assert tensor.long().dtype == dtypes.int64 and tensor.short().dtype == dtypes.int16
    assert tensor.bool().tolist() == [True, True] and tensor.float().dtype == dtypes.float32
    assert tensor.bfloat16().dtype == dtypes.bfloat16 and tensor.bfloat16().tolist() == [1.5, -2.5]


def test_broadcast_and_type_errors() -> None:
    with pytest.raises(ValueError, match="cannot be broadcast"):
        Tensor.ones(2, 3) + Tensor.ones(4)
    with pytest.raises(TypeError):
        Tensor.ones(2) + "a"
    with pytest.raises(TypeError, match="bool"):
        Tensor([True]) - Tensor([False])
    with pytest.raises(TypeError, match="ambiguous"):
        bool(Tensor([1.0]))


def test_inplace_operators_assign() -> None:
    tensor = Tensor([1.0, 2.0]).realize()
    tensor += 1
    tensor *= Tensor([2.0, 3.0])
    assert tensor.tolist() == [4.0, 9.0]


def test_alu_and_ufix() -> None:
    from tinycore.uop.ops import Ops
    assert Tensor([1.0, 2.0]).alu(Ops.ADD, Tensor([3.0, 4.0])).tolist() == [4.0, 6.0]
    assert Tensor([1, 5]).alu(Ops.MAX, 3).tolist() == [3, 5]
    assert Tensor([1, 2]).ufix(2.5).dtype == dtypes.float32 and Tensor([1, 2]).ufix(2).dtype == dtypes.int32
