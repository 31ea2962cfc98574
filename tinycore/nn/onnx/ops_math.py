"""Elementwise ONNX operators: arithmetic, comparisons, logic, bit operations, activations, casts, MatMul, Gemm."""
from __future__ import annotations

import math

from tinycore.dtype import DType, dtypes
from tinycore.nn.onnx.common import HALF_FLOATS, INT4_RANGES, device_dtype, onnx_dtype, widened
from tinycore.nn.onnx.registry import onnx_op
from tinycore.nn.onnx.small_floats import CARRIED_FLOATS, carried_type, decode, encode, mark
from tinycore.tensor import Tensor
from tinycore.uop.ops import Ops


def _same(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    """Two operands of one dtype (ONNX requires it; Python scalars from host inputs take the tensor's)."""
    if not isinstance(y, Tensor):
        y = Tensor(y, dtype=x.dtype, device=x.device)
    return x, y


@onnx_op("Add", 1)
def add(x: Tensor, y: Tensor) -> Tensor:
    """x + y, broadcast."""
    return x + y


@onnx_op("Sub", 1)
def sub(x: Tensor, y: Tensor) -> Tensor:
    """x - y, broadcast."""
    return x - y


@onnx_op("Mul", 1)
def mul(x: Tensor, y: Tensor) -> Tensor:
    """x * y, broadcast."""
    return x * y


@onnx_op("Div", 1)
def div(x: Tensor, y: Tensor) -> Tensor:
    """x / y; integers divide truncating toward zero, as C does."""
    if dtypes.is_int(x.dtype):
        return x.div(y, rounding_mode="trunc").cast(x.dtype)
    return x / y


@onnx_op("Mod", 10)
def mod(x: Tensor, y: Tensor, fmod: int = 0) -> Tensor:
    """The remainder: with the divisor's sign (fmod=0, integers only) or the dividend's (fmod=1)."""
    if fmod:
        if dtypes.is_int(x.dtype):
            return (x - x.div(y, rounding_mode="trunc") * y).cast(x.dtype)
        return x.fmod(y)
    if dtypes.is_float(x.dtype):
        return _float_mod(x, y)
    return x.mod(y)


def _float_mod(x: Tensor, y: Tensor) -> Tensor:
    """Python's float modulo: the remainder with the divisor's sign, exact for infinite divisors (x, or an infinity
    when the signs differ) and signed zeros (a zero takes the divisor's sign)."""
    truncated = x - (x / y).trunc() * y
    truncated = y.isinf().bitwise_and(x.isinf().logical_not()).where(x, truncated)
    shifted = ((truncated != 0).bitwise_and((truncated < 0) != (y < 0))).where(truncated + y, truncated)
    return (shifted == 0).where(Tensor.zeros_like(shifted).copysign(y), shifted).cast(x.dtype)


@onnx_op("Pow", 1)
def power(x: Tensor, y: Tensor) -> Tensor:
    """x ** y in x's dtype (integer bases raised exactly through float64, then rounded)."""
    if dtypes.is_int(x.dtype):
        wide = device_dtype(dtypes.float64, x.device)
        return x.cast(wide).pow(y.cast(wide)).round().cast(x.dtype)
    return x.pow(y.cast(x.dtype) if isinstance(y, Tensor) else y)


@onnx_op("Neg", 1)
def neg(x: Tensor) -> Tensor:
    """-x."""
    return -x


@onnx_op("Abs", 1)
def absolute(x: Tensor) -> Tensor:
    """|x|."""
    return x if dtypes.is_unsigned(x.dtype) else x.abs()


@onnx_op("Sign", 9)
def sign(x: Tensor) -> Tensor:
    """-1, 0 or 1 in x's dtype."""
    return x.sign().cast(x.dtype)


@onnx_op("Reciprocal", 1)
def reciprocal(x: Tensor) -> Tensor:
    """1 / x."""
    return x.reciprocal()


def _unary(name: str, since: int, method: str) -> None:
    def implementation(x: Tensor) -> Tensor:
        return getattr(x, method)()
    implementation.__doc__ = f"ONNX {name}: Tensor.{method}."
    implementation.__name__ = name.lower()
    onnx_op(name, since)(implementation)


for _name, _method in (("Sqrt", "sqrt"), ("Exp", "exp"), ("Log", "log"), ("Floor", "floor"), ("Ceil", "ceil"),
                       ("Sin", "sin"), ("Cos", "cos"), ("Tan", "tan"), ("Asin", "asin"), ("Acos", "acos"),
                       ("Atan", "atan"), ("Sinh", "sinh"), ("Cosh", "cosh"), ("Asinh", "asinh"), ("Acosh", "acosh"),
                       ("Atanh", "atanh"), ("Erf", "erf"), ("Sigmoid", "sigmoid"), ("Tanh", "tanh"),
                       ("Softsign", "softsign"), ("Mish", "mish")):
    _unary(_name, 1, _method)


@onnx_op("Round", 11)
def round_half_even(x: Tensor) -> Tensor:
    """Round to the nearest integer, halves to even."""
    return x.round()


@onnx_op("Relu", 1)
def relu(x: Tensor) -> Tensor:
    """max(x, 0)."""
    return x.relu() if dtypes.is_float(x.dtype) else x.maximum(0).cast(x.dtype)


@onnx_op("LeakyRelu", 1)
def leaky_relu(x: Tensor, alpha: float = 0.01) -> Tensor:
    """x, or alpha * x below zero."""
    return (x < 0).where(x * alpha, x)


@onnx_op("PRelu", 1)
def prelu(x: Tensor, slope: Tensor) -> Tensor:
    """x, or slope * x below zero (slope broadcast)."""
    return (x < 0).where(x * slope, x)


@onnx_op("ThresholdedRelu", 10)
def thresholded_relu(x: Tensor, alpha: float = 1.0) -> Tensor:
    """x where x > alpha, else 0."""
    return (x > alpha).where(x, 0)


@onnx_op("Elu", 1)
def elu(x: Tensor, alpha: float = 1.0) -> Tensor:
    """x above zero, alpha * (exp(x) - 1) below."""
    return (x < 0).where(alpha * (x.exp() - 1), x)


@onnx_op("Selu", 1)
def selu(x: Tensor, alpha: float = 1.67326319217681884765625, gamma: float = 1.05070102214813232421875) -> Tensor:
    """gamma * (x above zero, alpha * (exp(x) - 1) below)."""
    return gamma * (x <= 0).where(alpha * (x.exp() - 1), x)


@onnx_op("Celu", 12)
def celu(x: Tensor, alpha: float = 1.0) -> Tensor:
    """max(0, x) + min(0, alpha * (exp(x / alpha) - 1))."""
    return x.maximum(0) + (alpha * ((x / alpha).exp() - 1)).minimum(0)


@onnx_op("HardSigmoid", 1)
def hard_sigmoid(x: Tensor, alpha: float = 0.2, beta: float = 0.5) -> Tensor:
    """max(0, min(1, alpha * x + beta))."""
    return (alpha * x + beta).clip(0, 1)


@onnx_op("HardSwish", 14)
def hard_swish(x: Tensor) -> Tensor:
    """x * max(0, min(1, x / 6 + 1 / 2))."""
    return x * (x / 6 + 0.5).clip(0, 1)


@onnx_op("Softplus", 1)
def softplus(x: Tensor) -> Tensor:
    """log(1 + exp(x)), stable for large x."""
    return x.maximum(0) + (-x.abs()).exp().log1p()


@onnx_op("Gelu", 20)
def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """The Gaussian error linear unit, exact (erf) or the tanh approximation."""
    if approximate == "tanh":
        return 0.5 * x * (1 + (math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)).tanh())
    return 0.5 * x * (1 + (x / math.sqrt(2)).erf())


@onnx_op("Swish", 24)
def swish(x: Tensor, alpha: float = 1.0) -> Tensor:
    """x * sigmoid(alpha * x)."""
    return x * (alpha * x).sigmoid()


@onnx_op("Clip", 1)
def clip_attributes(x: Tensor, min: float = -3.4028234663852886e38, max: float = 3.4028234663852886e38) -> Tensor:
    """x limited to [min, max] (bounds as attributes, opsets before 11)."""
    return x.clip(min, max)


@onnx_op("Clip", 11)
def clip(x: Tensor, low: Tensor | None = None, high: Tensor | None = None) -> Tensor:
    """x limited to [low, high] (either bound may be absent)."""
    if low is not None:
        x = x.maximum(low.cast(x.dtype))
    if high is not None:
        x = x.minimum(high.cast(x.dtype))
    return x


def _fold(values: tuple[Tensor, ...], combine: str) -> Tensor:
    result = values[0]
    for value in values[1:]:
        result = getattr(result, combine)(value)
    return result


@onnx_op("Max", 1)
def maximum(*values: Tensor) -> Tensor:
    """The elementwise maximum of any number of broadcast inputs (NaN propagates)."""
    result = _fold(values, "maximum")
    if dtypes.is_float(result.dtype):
        for value in values:
            result = value.isnan().where(value, result)
    return result


@onnx_op("Min", 1)
def minimum(*values: Tensor) -> Tensor:
    """The elementwise minimum of any number of broadcast inputs (NaN propagates)."""
    result = _fold(values, "minimum")
    if dtypes.is_float(result.dtype):
        for value in values:
            result = value.isnan().where(value, result)
    return result


@onnx_op("Sum", 1)
def total(*values: Tensor) -> Tensor:
    """The elementwise sum of any number of broadcast inputs."""
    return _fold(values, "add")


@onnx_op("Mean", 1)
def mean(*values: Tensor) -> Tensor:
    """The elementwise mean of any number of broadcast inputs."""
    return _fold(values, "add") / len(values)


@onnx_op("Equal", 1)
def equal(x: Tensor, y: Tensor) -> Tensor:
    """x == y."""
    return x == y


@onnx_op("Less", 1)
def less(x: Tensor, y: Tensor) -> Tensor:
    """x < y."""
    return x < y


@onnx_op("LessOrEqual", 12)
def less_or_equal(x: Tensor, y: Tensor) -> Tensor:
    """x <= y."""
    return x <= y


@onnx_op("Greater", 1)
def greater(x: Tensor, y: Tensor) -> Tensor:
    """x > y."""
    return x > y


@onnx_op("GreaterOrEqual", 12)
def greater_or_equal(x: Tensor, y: Tensor) -> Tensor:
    """x >= y."""
    return x >= y


@onnx_op("And", 1)
def logical_and(x: Tensor, y: Tensor) -> Tensor:
    """x and y (booleans)."""
    return x.bitwise_and(y)


@onnx_op("Or", 1)
def logical_or(x: Tensor, y: Tensor) -> Tensor:
    """x or y (booleans)."""
    return x.bitwise_or(y)


@onnx_op("Xor", 1)
def logical_xor(x: Tensor, y: Tensor) -> Tensor:
    """x xor y (booleans)."""
    return x.bitwise_xor(y)


@onnx_op("Not", 1)
def logical_not(x: Tensor) -> Tensor:
    """not x."""
    return x.logical_not()


@onnx_op("BitwiseAnd", 18)
def bitwise_and(x: Tensor, y: Tensor) -> Tensor:
    """x & y."""
    return x.bitwise_and(y)


@onnx_op("BitwiseOr", 18)
def bitwise_or(x: Tensor, y: Tensor) -> Tensor:
    """x | y."""
    return x.bitwise_or(y)


@onnx_op("BitwiseXor", 18)
def bitwise_xor(x: Tensor, y: Tensor) -> Tensor:
    """x ^ y."""
    return x.bitwise_xor(y)


@onnx_op("BitwiseNot", 18)
def bitwise_not(x: Tensor) -> Tensor:
    """~x."""
    return x.bitwise_not()


@onnx_op("BitShift", 11)
def bit_shift(x: Tensor, y: Tensor, direction: str = "LEFT") -> Tensor:
    """x shifted left or right by y bits; a shift outside [0, bit width) gives 0 (or -1 shifting a negative right)."""
    width = x.dtype.itemsize * 8
    outside = (y < 0).bitwise_or(y >= width)
    safe = outside.where(0, y)
    if direction == "LEFT":
        return outside.where(0, x.lshift(safe)).cast(x.dtype)
    fill = (x < 0).where(-1, 0) if not dtypes.is_unsigned(x.dtype) else 0
    return outside.where(fill, x.rshift(safe)).cast(x.dtype)


@onnx_op("IsNaN", 9)
def is_nan(x: Tensor) -> Tensor:
    """Whether each element is NaN."""
    return x.isnan()


@onnx_op("IsInf", 10)
def is_inf(x: Tensor, detect_negative: int = 1, detect_positive: int = 1) -> Tensor:
    """Whether each element is an infinity of the signs asked for."""
    return x.isinf(bool(detect_positive), bool(detect_negative))


@onnx_op("Where", 9)
def where(condition: Tensor, x: Tensor, y: Tensor) -> Tensor:
    """x where condition holds, else y."""
    return condition.where(x, y)


@onnx_op("Identity", 1)
def identity(x: Tensor | list[Tensor] | None) -> Tensor | list[Tensor] | None:
    """The input unchanged (tensors, sequences and optionals alike)."""
    return x


def saturate_cast(x: Tensor, dtype: DType, saturate: bool = True, code: int | None = None,
                  round_mode: str = "up") -> Tensor:
    """x cast to `dtype` (ONNX type `code` where a byte holds it) as ONNX Cast does: the small floats through their
    bits (small_floats), saturating per `saturate`; 4- and 2-bit integers zero outside their range."""
    source = carried_type(x)
    if source in CARRIED_FLOATS:
        x = decode(x, source)
    if code in CARRIED_FLOATS:
        return encode(x, code, saturate, round_mode)
    if code in INT4_RANGES:
        # onnx's reference gives 0 for values outside the 4-bit range (a Cast does not saturate integers)
        low, high = INT4_RANGES[code]
        value = x.round() if dtypes.is_float(x.dtype) else x
        return mark(((value >= low).bitwise_and(value <= high)).where(value, 0).cast(dtype), code)
    if dtype == dtypes.bool:
        return x != 0
    if dtypes.is_int(dtype) and dtypes.is_float(x.dtype):
        return x.trunc().cast(dtype)
    return x.cast(dtype)


@onnx_op("Cast", 1)
def cast(x: Tensor, to: int, saturate: int = 1, round_mode: str = "up") -> Tensor:
    """x converted to ONNX element type `to`."""
    return saturate_cast(x, device_dtype(onnx_dtype(to, "Cast"), x.device), bool(saturate), to, round_mode)


@onnx_op("CastLike", 15)
def cast_like(x: Tensor, target: Tensor, saturate: int = 1, round_mode: str = "up", target_type: int = 0
              ) -> Tensor:
    """x converted to the element type of `target` (`target_type`, or its tag: its ONNX type where a byte holds
    it)."""
    return saturate_cast(x, target.dtype, bool(saturate), target_type or carried_type(target), round_mode)


@onnx_op("MatMul", 1)
def matmul(x: Tensor, y: Tensor) -> Tensor:
    """The matrix product with numpy's broadcasting and 1-D rules (16-bit floats summed in float32, rounded once:
    common.HALF_FLOATS)."""
    if x.dtype in HALF_FLOATS and y.dtype == x.dtype:
        return widened(x).matmul(widened(y)).cast(x.dtype)
    return x.matmul(y)


@onnx_op("Gemm", 1)
def gemm(a: Tensor, b: Tensor, c: Tensor | None = None, alpha: float = 1.0, beta: float = 1.0,
         transA: int = 0, transB: int = 0, broadcast: int = 0) -> Tensor:  # noqa: N803 (ONNX's attribute names)
    """alpha * A' B' + beta * C, with A' and B' optionally transposed (16-bit floats computed in float32 and rounded
    once, as MatMul: common.HALF_FLOATS)."""
    if a.dtype in HALF_FLOATS and b.dtype == a.dtype:
        wide_c = widened(c) if c is not None else None
        return gemm(widened(a), widened(b), wide_c, alpha, beta, transA, transB, broadcast).cast(a.dtype)
    if not transA and _gathers_rows(a):
        a = a.contiguous()
    product = (a.T if transA else a).matmul(b.T if transB else b)
    if alpha != 1.0:
        product = product * alpha
    if c is not None:
        product = product + (c * beta if beta != 1.0 else c)
    return product


GATHERED_MIN_ROWS = 8
"""Fewest rows of a Gemm's permuted A that `gemm` stores in its own order first (`_gathers_rows`)."""

MOVEMENT_OPS = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.SHRINK})


def _gathers_rows(a: Tensor) -> bool:
    """Whether `a`, a 2-D Gemm input of at least GATHERED_MIN_ROWS rows on a device whose renderer loops over rows
    (CPU), is a view with a permute among its movement ops: its rows are then pieces of other rows (a transformer's
    attention output, heads merged: 4 pieces of 64), which the matmul tile gathers. `gemm` then has the kernel that
    computes `a` store it in row order, which costs that kernel nothing measurable (attention's product with V at
    batch 8: 45-50 -> 47-62 us) and the product reads plain rows: the out_proj Gemm of bench_onnx's transformer,
    DEBUG=2 minima, 267-286 -> 170-175 us per layer at batch 8 (189 -> 290 GFLOPS), 41-47 -> 33-41 at batch 1."""
    from tinycore.tensor.conv_layouts import loops_over_rows
    rows = a.shape[0] if a.ndim == 2 else 0
    if not isinstance(rows, int) or rows < GATHERED_MIN_ROWS:
        return False
    node = a.uop
    permuted = False
    while node.op in MOVEMENT_OPS:
        permuted = permuted or node.op is Ops.PERMUTE
        node = node.src[0]
    return permuted and loops_over_rows(a)


@onnx_op("Einsum", 12)
def einsum(*operands: Tensor, equation: str) -> Tensor:
    """The Einstein summation `equation` over the operands."""
    return Tensor.einsum(equation.replace(" ", ""), *operands)


@onnx_op("Det", 11)
def determinant(x: Tensor) -> Tensor:
    """The determinant of each square matrix in the last two axes (LU with partial pivoting, on the host)."""
    import numpy as np
    return Tensor(np.linalg.det(x.numpy()).astype(x.numpy().dtype), device=x.device)


@onnx_op("Shrink", 9)
def shrink(x: Tensor, bias: float = 0.0, lambd: float = 0.5) -> Tensor:
    """x + bias below -lambd, x - bias above lambd, 0 between."""
    return (x < -lambd).where(x + bias, (x > lambd).where(x - bias, 0)).cast(x.dtype)


@onnx_op("BitCast", 26)
def bit_cast(x: Tensor, to: int) -> Tensor:
    """x's bits read as ONNX element type `to` (of the same width)."""
    return x.bitcast(onnx_dtype(to, "BitCast"))


@onnx_op("SwiGLU", 26)
def swiglu(a: Tensor, b: Tensor, alpha: float = 1.0) -> Tensor:
    """a * sigmoid(alpha * a) * b."""
    return (a * (alpha * a).sigmoid() * b).cast(a.dtype)
