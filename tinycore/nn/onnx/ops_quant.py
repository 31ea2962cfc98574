"""The quantized family: QuantizeLinear / DequantizeLinear (per tensor, per axis, blocked), DynamicQuantizeLinear,
MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv, and com.microsoft's QLinear elementwise helpers.

Integer products accumulate in int32: the inputs are widened to int32 and their zero points subtracted before the
product, so the matmul or convolution kernel itself sums int32 values; only the requantization is in float32.
"""
from __future__ import annotations

from tinycore.dtype import DType, dtypes
from tinycore.nn.onnx.common import INT4_RANGES, axis_of, integer_range, onnx_dtype
from tinycore.nn.onnx.ops_nn import conv
from tinycore.nn.onnx.registry import onnx_op
from tinycore.nn.onnx.small_floats import CARRIED_FLOATS, carried_type, decode, encode, mark
from tinycore.tensor import Tensor


def broadcast_parameter(value: Tensor, x: Tensor, axis: int, block_size: int) -> Tensor:
    """A scale or zero point shaped to broadcast against x: per tensor, per `axis`, or per block along `axis`
    (keeping the ONNX type it is tagged with)."""
    code = carried_type(value)
    shaped = _broadcast(value, x, axis, block_size)
    return mark(shaped, code) if code is not None else shaped


def _broadcast(value: Tensor, x: Tensor, axis: int, block_size: int) -> Tensor:
    if value.ndim == 0 or (value.ndim == 1 and value.shape[0] == 1 and block_size == 0):
        return value.reshape(())
    axis = axis_of(axis, x.ndim)
    if block_size:
        repeated = value.repeat_interleave(block_size, axis)
        return repeated[tuple(slice(None) if dim != axis else slice(0, x.shape[axis]) for dim in range(x.ndim))]
    return value.reshape([value.shape[0] if dim == axis else 1 for dim in range(x.ndim)])


def _as_float(value: Tensor) -> Tensor:
    """A quantized tensor's values as float32 (the small floats decoded from their bits)."""
    code = carried_type(value)
    if code in CARRIED_FLOATS:
        return decode(value, code)
    same_values: Tensor | None = getattr(value, _FLOAT_VALUES, None)
    return same_values if same_values is not None else value.cast(dtypes.float32)


def quantize(x: Tensor, scale: Tensor, zero_point: Tensor | None, dtype: DType, code: int | None, saturate: bool
             ) -> Tensor:
    """round(x / scale) + zero_point, saturated to `dtype` (ONNX type `code` where a byte holds it; the small floats:
    x / scale + zero_point rounded to the format, saturating per `saturate`)."""
    scaled = x.cast(dtypes.float32) / _as_float(scale)
    if code in CARRIED_FLOATS:
        if zero_point is not None:
            scaled = scaled + _as_float(zero_point)
        return encode(scaled, code, saturate)
    low, high = integer_range(code, dtype) if code is not None else (int(dtypes.min(dtype)), int(dtypes.max(dtype)))
    # Rounding a value first saturated to +-2**21 gives the same integers once the zero point is added and the sum
    # saturated to a range of at most 16 bits, and such a value rounds with a handful of float ops (_round_small)
    # instead of Tensor.round's dozen.
    wide = high - low >= ROUNDING_LIMIT
    shifted = scaled.round() if wide else _round_small(scaled.clip(-ROUNDING_LIMIT, ROUNDING_LIMIT))
    if zero_point is not None:
        shifted = shifted + zero_point.cast(dtypes.float32)
    saturated = shifted.clip(low, high)
    result = saturated.cast(dtype)
    # the float integers stay with the result: a DequantizeLinear reading it (a QDQ pair) starts from them, so the
    # kernel does not narrow every value to 8 bits and widen it back
    setattr(result, _FLOAT_VALUES, saturated)
    return mark(result, code) if code in INT4_RANGES else result


_FLOAT_VALUES = "_onnx_quantized_as_float"
"""The attribute on QuantizeLinear's integer result that holds the same values as float32 (exact integers)."""


ROUNDING_LIMIT = 2 ** 21
"""Values are saturated to +-ROUNDING_LIMIT before _round_small."""
ROUNDING_SHIFT = 12582912.0
"""1.5 * 2**23: adding it to a float32 below 2**22 in magnitude leaves no fraction bits, so the hardware's rounding
(to nearest, halves to even) does the rounding, and the sum's low bits hold the rounded value."""
ROUNDING_SHIFT_BITS = 0x4B400000
"""The bits of ROUNDING_SHIFT as a float32."""


def _round_small(value: Tensor) -> Tensor:
    """value rounded to the nearest integer, halves to even, for float32 values below 2**22 in magnitude; the integer
    ranges QuantizeLinear saturates to are far below that. The rounded value is read from the sum's bits, as an
    integer difference: subtracting the shift again in float is an expression a shader compiler may fold to `value`
    (WEBGPU's did)."""
    shifted_bits = (value + ROUNDING_SHIFT).bitcast(dtypes.int32)
    return (shifted_bits - ROUNDING_SHIFT_BITS).cast(dtypes.float32)


@onnx_op("QuantizeLinear", 10)
def quantize_linear(x: Tensor, y_scale: Tensor, y_zero_point: Tensor | None = None, axis: int = 1,
                    block_size: int = 0, output_dtype: int = 0, saturate: int = 1, zero_point_type: int = 0,
                    precision: int = 0) -> Tensor:
    """x quantized with a scale and zero point per tensor, per axis or per block; the zero point's type (or
    output_dtype, or uint8) is the output's."""
    code = zero_point_type or output_dtype or carried_type(y_zero_point) or (None if y_zero_point is not None else 2)
    if y_zero_point is not None:
        dtype = y_zero_point.dtype
    else:
        dtype = onnx_dtype(code or 2, "QuantizeLinear")
    scale = broadcast_parameter(y_scale, x, axis, block_size)
    zero = broadcast_parameter(y_zero_point, x, axis, block_size) if y_zero_point is not None else None
    if precision:
        x = x.cast(onnx_dtype(precision, "QuantizeLinear precision"))
    return quantize(x, scale, zero, dtype, code if code in INT4_RANGES or code in CARRIED_FLOATS else None,
                    bool(saturate))


@onnx_op("DequantizeLinear", 10)
def dequantize_linear(x: Tensor, x_scale: Tensor, x_zero_point: Tensor | None = None, axis: int = 1,
                      block_size: int = 0, output_dtype: int = 0) -> Tensor:
    """(x - zero point) * scale, per tensor, per axis or per block, in the scale's dtype."""
    scale = broadcast_parameter(x_scale, x, axis, block_size)
    value = _as_float(x)
    if x_zero_point is not None:
        value = value - _as_float(broadcast_parameter(x_zero_point, x, axis, block_size))
    result = value * _as_float(scale)
    target = onnx_dtype(output_dtype, "DequantizeLinear") if output_dtype else x_scale.dtype
    return result.cast(target)


@onnx_op("DynamicQuantizeLinear", 11)
def dynamic_quantize_linear(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """x quantized to uint8 with a scale and zero point computed from its range (which always includes 0)."""
    low, high = x.min().minimum(0), x.max().maximum(0)
    scale = (high - low) / 255
    zero_point = (-low / scale).round().clip(0, 255).cast(dtypes.uint8)
    quantized = ((x / scale).round() + zero_point.cast(dtypes.float32)).clip(0, 255).cast(dtypes.uint8)
    return quantized, scale, zero_point


def _widened(x: Tensor, zero_point: Tensor | None, shape: list[int] | None = None) -> Tensor:
    """x as int32 minus its zero point (reshaped to `shape` when it is per row or per channel)."""
    wide = x.cast(dtypes.int32)
    if zero_point is None:
        return wide
    zero = zero_point.cast(dtypes.int32)
    if shape is not None and zero.ndim == 1 and zero.shape[0] > 1:
        zero = zero.reshape(shape)
    elif zero.ndim <= 1 and zero.shape == (1,):
        zero = zero.reshape(())
    return wide - zero


@onnx_op("MatMulInteger", 10)
def matmul_integer(a: Tensor, b: Tensor, a_zero_point: Tensor | None = None, b_zero_point: Tensor | None = None
                   ) -> Tensor:
    """(a - a_zero_point) @ (b - b_zero_point) accumulated in int32 (a's zero point per row, b's per column)."""
    return _widened(a, a_zero_point, [-1, 1]).matmul(_widened(b, b_zero_point))


@onnx_op("ConvInteger", 10)
def conv_integer(x: Tensor, w: Tensor, x_zero_point: Tensor | None = None, w_zero_point: Tensor | None = None,
                 auto_pad: str = "NOTSET", dilations: list[int] | None = None, group: int = 1,
                 kernel_shape: list[int] | None = None, pads: list[int] | None = None,
                 strides: list[int] | None = None) -> Tensor:
    """The convolution of zero-point-shifted integers accumulated in int32 (w's zero point per output channel).

    x's padding is its zero point, as the shifted x pads with 0."""
    wide_x = _widened(x, x_zero_point)
    wide_w = _widened(w, w_zero_point, [-1, *[1] * (w.ndim - 1)])
    return conv(wide_x, wide_w, None, auto_pad, dilations, group, kernel_shape, pads, strides)


def _requantize(accumulator: Tensor, multiplier: Tensor, zero_point: Tensor | None, dtype: DType) -> Tensor:
    """An int32 accumulator scaled by `multiplier`, rounded half to even, shifted and saturated to `dtype`."""
    value = (accumulator.cast(dtypes.float32) * multiplier).round()
    if zero_point is not None:
        value = value + zero_point.cast(dtypes.float32)
    return value.clip(int(dtypes.min(dtype)), int(dtypes.max(dtype))).cast(dtype)


def _scale(value: Tensor, shape: list[int] | None = None) -> Tensor:
    value = value.cast(dtypes.float32)
    if value.ndim == 1 and value.shape[0] > 1 and shape is not None:
        return value.reshape(shape)
    return value.reshape(()) if value.ndim <= 1 and value.shape in ((), (1,)) else value


@onnx_op("QLinearMatMul", 10)
def qlinear_matmul(a: Tensor, a_scale: Tensor, a_zero_point: Tensor, b: Tensor, b_scale: Tensor,
                   b_zero_point: Tensor, y_scale: Tensor, y_zero_point: Tensor) -> Tensor:
    """The quantized matmul: an int32 product of the shifted inputs, requantized to y's scale and zero point."""
    accumulator = matmul_integer(a, b, a_zero_point, b_zero_point)
    multiplier = _scale(a_scale, [-1, 1]) * _scale(b_scale) / _scale(y_scale)
    return _requantize(accumulator, multiplier, y_zero_point, y_zero_point.dtype)


@onnx_op("QLinearConv", 10)
def qlinear_conv(x: Tensor, x_scale: Tensor, x_zero_point: Tensor, w: Tensor, w_scale: Tensor,
                 w_zero_point: Tensor, y_scale: Tensor, y_zero_point: Tensor, bias: Tensor | None = None,
                 auto_pad: str = "NOTSET", dilations: list[int] | None = None, group: int = 1,
                 kernel_shape: list[int] | None = None, pads: list[int] | None = None,
                 strides: list[int] | None = None) -> Tensor:
    """The quantized convolution: int32 accumulation (plus an int32 bias), requantized per output channel."""
    accumulator = conv_integer(x, w, x_zero_point, w_zero_point, auto_pad, dilations, group, kernel_shape, pads,
                               strides)
    channel_shape = [1, -1, *[1] * (x.ndim - 2)]
    if bias is not None:
        accumulator = accumulator + bias.cast(dtypes.int32).reshape(channel_shape)
    multiplier = _scale(x_scale) * _scale(w_scale, channel_shape) / _scale(y_scale)
    return _requantize(accumulator, multiplier, y_zero_point, y_zero_point.dtype)


# ---- com.microsoft quantization helpers ----

onnx_op("QuantizeLinear", 1, domain="com.microsoft")(quantize_linear)
onnx_op("DequantizeLinear", 1, domain="com.microsoft")(dequantize_linear)


def _dequantized(x: Tensor, scale: Tensor, zero_point: Tensor | None) -> Tensor:
    value = x.cast(dtypes.float32)
    if zero_point is not None:
        value = value - zero_point.cast(dtypes.float32)
    return value * scale.cast(dtypes.float32)


def _quantized_like(value: Tensor, scale: Tensor, zero_point: Tensor | None, like: Tensor) -> Tensor:
    dtype = zero_point.dtype if zero_point is not None else like.dtype
    return quantize(value, scale, zero_point, dtype, None, True)


@onnx_op("QLinearAdd", 1, domain="com.microsoft")
def qlinear_add(a: Tensor, a_scale: Tensor, a_zero_point: Tensor | None, b: Tensor, b_scale: Tensor,
                b_zero_point: Tensor | None, c_scale: Tensor, c_zero_point: Tensor | None = None) -> Tensor:
    """Quantized a + b, requantized to c's scale and zero point."""
    total = _dequantized(a, a_scale, a_zero_point) + _dequantized(b, b_scale, b_zero_point)
    return _quantized_like(total, c_scale, c_zero_point, a)


@onnx_op("QLinearMul", 1, domain="com.microsoft")
def qlinear_mul(a: Tensor, a_scale: Tensor, a_zero_point: Tensor | None, b: Tensor, b_scale: Tensor,
                b_zero_point: Tensor | None, c_scale: Tensor, c_zero_point: Tensor | None = None) -> Tensor:
    """Quantized a * b, requantized to c's scale and zero point."""
    product = _dequantized(a, a_scale, a_zero_point) * _dequantized(b, b_scale, b_zero_point)
    return _quantized_like(product, c_scale, c_zero_point, a)


@onnx_op("QLinearSigmoid", 1, domain="com.microsoft")
def qlinear_sigmoid(x: Tensor, x_scale: Tensor, x_zero_point: Tensor | None, y_scale: Tensor,
                    y_zero_point: Tensor | None = None) -> Tensor:
    """Quantized sigmoid."""
    return _quantized_like(_dequantized(x, x_scale, x_zero_point).sigmoid(), y_scale, y_zero_point, x)


@onnx_op("QLinearLeakyRelu", 1, domain="com.microsoft")
def qlinear_leaky_relu(x: Tensor, x_scale: Tensor, x_zero_point: Tensor | None, y_scale: Tensor,
                       y_zero_point: Tensor | None = None, alpha: float = 0.01) -> Tensor:
    """Quantized leaky ReLU."""
    value = _dequantized(x, x_scale, x_zero_point)
    return _quantized_like((value < 0).where(value * alpha, value), y_scale, y_zero_point, x)


@onnx_op("QLinearGlobalAveragePool", 1, domain="com.microsoft")
def qlinear_global_average_pool(x: Tensor, x_scale: Tensor, x_zero_point: Tensor | None, y_scale: Tensor,
                                y_zero_point: Tensor | None = None, channels_last: int = 0) -> Tensor:
    """Quantized global average pooling (NCHW, or NHWC with channels_last)."""
    value = _dequantized(x, x_scale, x_zero_point)
    axes = tuple(range(1, x.ndim - 1)) if channels_last else tuple(range(2, x.ndim))
    return _quantized_like(value.mean(axes, keepdim=True), y_scale, y_zero_point, x)


@onnx_op("QLinearConcat", 1, domain="com.microsoft")
def qlinear_concat(y_scale: Tensor, y_zero_point: Tensor, *groups: Tensor, axis: int) -> Tensor:
    """Quantized concatenation of (tensor, scale, zero point) triples, requantized to y's parameters."""
    parts = [_dequantized(groups[index], groups[index + 1], groups[index + 2]) for index in range(0, len(groups), 3)]
    joined = parts[0].cat(*parts[1:], dim=axis_of(axis, parts[0].ndim))
    return _quantized_like(joined, y_scale, y_zero_point, groups[0])
