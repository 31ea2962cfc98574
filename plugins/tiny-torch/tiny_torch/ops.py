"""The aten operators mapped onto tinycore's Tensor API (functional forms; in-place and out= forms reach them
through tiny_torch.dispatch). Backward operators of composite layers are tinycore's own gradients of the forward."""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from tiny_torch.dispatch import aten, register
from tinycore import Tensor, dtypes
from tinycore.dtype import DType
from tinycore.uop import Ops, UOp


def _vjp(forward: Callable[..., Tensor], inputs: Sequence[Tensor | None], grad_output: Tensor,
         mask: Sequence[bool]) -> tuple[Tensor | None, ...]:
    """Gradients of `forward(*inputs)` with respect to the inputs selected by `mask`, by tinycore's autograd.

    The forward runs on stand-ins, new buffers that are never allocated, which the gradients' graphs then read
    the inputs through. A stand-in is its own graph node even where two inputs are one lazy value (mul(x, x)),
    so nothing has to be realized to tell the inputs apart, as a leaf with requires_grad would be."""
    stand_ins = [Tensor.empty(*value.shape, dtype=value.dtype, device=value.device) if value is not None else None
                 for value in inputs]
    output = forward(*stand_ins)
    wanted = [stand_in for stand_in, take in zip(stand_ins, mask, strict=False) if take and stand_in is not None]
    grads = iter(output.gradient(*wanted, gradient=grad_output)) if wanted else iter(())
    # the buffers, not the stand-ins' views of them, are replaced: a graph may view a buffer in another shape
    mapping = {_buffer_node(stand_in.uop): value.reshape(value.numel()).uop
               for stand_in, value in zip(stand_ins, inputs, strict=True) if stand_in is not None and value is not None}
    return tuple(Tensor(next(grads).uop.substitute(mapping)) if take and stand_in is not None else None
                 for stand_in, take in zip(stand_ins, mask, strict=False))


def _buffer_node(node: UOp) -> UOp:
    while node.op is not Ops.BUFFER:
        node = node.src[0]
    return node


def _dims(dim: object, ndim: int) -> tuple[int, ...] | None:
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return None
    dims = dim if isinstance(dim, (list, tuple)) else [dim]
    return tuple(int(d) % max(ndim, 1) for d in dims)


# ---- elementwise -------------------------------------------------------------------------------------------------
@register(aten.add.Tensor, aten.add.Scalar)
def add(self: Tensor, other: object, alpha: float = 1) -> Tensor:
    """self + alpha * other."""
    return self + (other * alpha if alpha != 1 else other)


@register(aten.sub.Tensor, aten.sub.Scalar)
def sub(self: Tensor, other: object, alpha: float = 1) -> Tensor:
    """self - alpha * other."""
    return self - (other * alpha if alpha != 1 else other)


@register(aten.rsub.Tensor, aten.rsub.Scalar)
def rsub(self: Tensor, other: object, alpha: float = 1) -> Tensor:
    """other - alpha * self."""
    return (self * -alpha) + other


@register(aten.mul.Tensor, aten.mul.Scalar)
def mul(self: Tensor, other: object) -> Tensor:
    """self * other."""
    return self * other


@register(aten.div.Tensor, aten.div.Scalar)
def div(self: Tensor, other: object) -> Tensor:
    """True division."""
    return self / other


@register(aten.div.Tensor_mode, aten.div.Scalar_mode)
def div_mode(self: Tensor, other: object, rounding_mode: str | None = None) -> Tensor:
    """Division rounded toward zero ('trunc') or down ('floor'), computed in float64-free float math."""
    quotient = self.float() / (other.float() if isinstance(other, Tensor) else other)
    if rounding_mode == "trunc":
        quotient = quotient.trunc()
    elif rounding_mode == "floor":
        quotient = quotient.floor()
    return quotient.cast(self.dtype) if rounding_mode is not None else quotient


@register(aten.remainder.Tensor, aten.remainder.Scalar)
def remainder(self: Tensor, other: object) -> Tensor:
    """Python-style modulo (sign of the divisor)."""
    return self - (self / other).floor() * other if dtypes.is_float(self.dtype) else self % other


@register(aten.fmod.Tensor, aten.fmod.Scalar)
def fmod(self: Tensor, other: object) -> Tensor:
    """C-style modulo (sign of the dividend)."""
    return self - (self / other).trunc() * other if dtypes.is_float(self.dtype) else self.fmod(other)


@register(aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor)
def pow_(self: Tensor, exponent: object) -> Tensor:
    """self ** exponent."""
    return self.pow(exponent)


@register(aten.pow.Scalar)
def pow_scalar(self: float, exponent: Tensor) -> Tensor:
    """scalar ** tensor."""
    return exponent.const_like(self).pow(exponent)


def _unary(overload: object, method: Callable[[Tensor], Tensor]) -> None:
    register(overload)(lambda self: method(self))  # type: ignore[arg-type]


for _overload, _method in [
    (aten.neg.default, Tensor.neg), (aten.abs.default, Tensor.abs), (aten.exp.default, Tensor.exp),
    (aten.exp2.default, Tensor.exp2), (aten.expm1.default, Tensor.expm1), (aten.log.default, Tensor.log),
    (aten.log2.default, Tensor.log2), (aten.log10.default, Tensor.log10), (aten.log1p.default, Tensor.log1p),
    (aten.sqrt.default, Tensor.sqrt), (aten.rsqrt.default, Tensor.rsqrt), (aten.sin.default, Tensor.sin),
    (aten.cos.default, Tensor.cos), (aten.tan.default, Tensor.tan), (aten.tanh.default, Tensor.tanh),
    (aten.sinh.default, Tensor.sinh), (aten.cosh.default, Tensor.cosh), (aten.asin.default, Tensor.asin),
    (aten.acos.default, Tensor.acos), (aten.atan.default, Tensor.atan), (aten.sigmoid.default, Tensor.sigmoid),
    (aten.relu.default, Tensor.relu), (aten.reciprocal.default, Tensor.reciprocal),
    (aten.floor.default, Tensor.floor), (aten.ceil.default, Tensor.ceil), (aten.trunc.default, Tensor.trunc),
    (aten.round.default, Tensor.round), (aten.sign.default, Tensor.sign), (aten.erf.default, Tensor.erf),
    (aten.silu.default, Tensor.silu), (aten.isnan.default, Tensor.isnan), (aten.isinf.default, Tensor.isinf),
    (aten.logical_not.default, Tensor.logical_not), (aten.bitwise_not.default, Tensor.bitwise_not),
    (aten.square.default, Tensor.square), (aten.mish.default, Tensor.mish), (aten.hardswish.default, Tensor.hardswish),
    (aten.hardsigmoid.default, Tensor.hardsigmoid), (aten.log_sigmoid_forward.default, None),
]:
    if _method is not None:
        _unary(_overload, _method)


@register(aten.round.decimals)
def round_decimals(self: Tensor, decimals: int = 0) -> Tensor:
    """Round half to even at `decimals` digits after the point (before it when negative), as PyTorch scales."""
    if decimals == 0:
        return self.round()
    scale = 10.0 ** abs(decimals)
    return (self * scale).round() / scale if decimals > 0 else (self / scale).round() * scale


@register(aten.equal.default)
def equal(self: Tensor, other: Tensor) -> bool:
    """True when both have the same shape and equal elements (a host read of one boolean)."""
    if tuple(self.shape) != tuple(other.shape):
        return False
    return bool((self == other).all().item())


@register(aten.isfinite.default)
def isfinite(self: Tensor) -> Tensor:
    """True where neither inf nor nan."""
    return self.isfinite()


@register(aten.gelu.default)
def gelu(self: Tensor, approximate: str = "none") -> Tensor:
    """GELU, exact (erf) or tanh-approximated, as PyTorch's `approximate` says."""
    if approximate == "tanh":
        return self.gelu(approximate="tanh")
    return self * 0.5 * (1 + (self * (1 / math.sqrt(2))).erf())


@register(aten.gelu_backward.default)
def gelu_backward(grad_output: Tensor, self: Tensor, approximate: str = "none") -> Tensor:
    """Gradient of GELU."""
    return _vjp(lambda x: gelu(x, approximate), [self], grad_output, [True])[0]  # type: ignore[return-value]


@register(aten.leaky_relu.default)
def leaky_relu(self: Tensor, negative_slope: float = 0.01) -> Tensor:
    """max(x, 0) + slope * min(x, 0)."""
    return (self > 0).where(self, self * negative_slope)


@register(aten.leaky_relu_backward.default)
def leaky_relu_backward(grad_output: Tensor, self: Tensor, negative_slope: float, self_is_result: bool) -> Tensor:
    """Gradient of leaky ReLU."""
    return (self > 0).where(grad_output, grad_output * negative_slope)


@register(aten.elu.default)
def elu(self: Tensor, alpha: float = 1.0, scale: float = 1.0, input_scale: float = 1.0) -> Tensor:
    """ELU with PyTorch's scale and input_scale."""
    return (self > 0).where(self * scale, ((self * input_scale).exp() - 1) * (alpha * scale))


@register(aten.hardtanh.default)
def hardtanh(self: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
    """clamp(x, min_val, max_val)."""
    return self.clamp(min_val, max_val)


@register(aten.hardtanh_backward.default)
def hardtanh_backward(grad_output: Tensor, self: Tensor, min_val: float, max_val: float) -> Tensor:
    """Gradient of hardtanh: passes where min_val < x < max_val."""
    return ((self > min_val) & (self < max_val)).where(grad_output, 0)


@register(aten.softplus.default)
def softplus(self: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """log(1 + exp(beta x)) / beta, linear above the threshold."""
    scaled = self * beta
    return (scaled > threshold).where(self, (scaled.exp() + 1).log() / beta)


@register(aten.threshold_backward.default)
def threshold_backward(grad_output: Tensor, self: Tensor, threshold: float) -> Tensor:
    """ReLU's gradient: zero where self <= threshold."""
    return (self <= threshold).where(grad_output.zeros_like(), grad_output)


@register(aten.sigmoid_backward.default)
def sigmoid_backward(grad_output: Tensor, output: Tensor) -> Tensor:
    """grad * y * (1 - y)."""
    return grad_output * output * (1 - output)


@register(aten.tanh_backward.default)
def tanh_backward(grad_output: Tensor, output: Tensor) -> Tensor:
    """grad * (1 - y^2)."""
    return grad_output * (1 - output * output)


@register(aten.silu_backward.default)
def silu_backward(grad_output: Tensor, self: Tensor) -> Tensor:
    """Gradient of x * sigmoid(x)."""
    sig = self.sigmoid()
    return grad_output * sig * (1 + self * (1 - sig))


@register(aten.maximum.default)
def maximum(self: Tensor, other: Tensor) -> Tensor:
    """Elementwise max."""
    return self.maximum(other)


@register(aten.minimum.default)
def minimum(self: Tensor, other: Tensor) -> Tensor:
    """Elementwise min."""
    return self.minimum(other)


@register(aten.clamp.default, aten.clamp.Tensor)
def clamp(self: Tensor, min: object = None, max: object = None) -> Tensor:  # noqa: A002
    """Clamp to [min, max] (either may be None)."""
    if min is not None:
        self = self.maximum(min)
    if max is not None:
        self = self.minimum(max)
    return self


@register(aten.clamp_min.default, aten.clamp_min.Tensor)
def clamp_min(self: Tensor, min: object) -> Tensor:  # noqa: A002
    """max(self, min)."""
    return self.maximum(min)


@register(aten.clamp_max.default, aten.clamp_max.Tensor)
def clamp_max(self: Tensor, max: object) -> Tensor:  # noqa: A002
    """min(self, max)."""
    return self.minimum(max)


@register(aten.where.self, aten.where.ScalarOther, aten.where.ScalarSelf, aten.where.Scalar)
def where(condition: Tensor, self: object, other: object) -> Tensor:
    """condition ? self : other."""
    return condition.cast(dtypes.bool).where(self, other)


@register(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def masked_fill(self: Tensor, mask: Tensor, value: object) -> Tensor:
    """self with `value` where mask."""
    if isinstance(value, Tensor):
        value = value.cast(self.dtype)
    return mask.cast(dtypes.bool).where(value, self)


@register(aten.lerp.Scalar, aten.lerp.Tensor)
def lerp(self: Tensor, end: Tensor, weight: object) -> Tensor:
    """self + weight * (end - self)."""
    return self + (end - self) * weight


@register(aten.addcmul.default)
def addcmul(self: Tensor, tensor1: Tensor, tensor2: Tensor, value: float = 1) -> Tensor:
    """self + value * tensor1 * tensor2."""
    return self + tensor1 * tensor2 * value


@register(aten.addcdiv.default)
def addcdiv(self: Tensor, tensor1: Tensor, tensor2: Tensor, value: float = 1) -> Tensor:
    """self + value * tensor1 / tensor2."""
    return self + tensor1 / tensor2 * value


for _overloads, _operator in [
    ((aten.eq.Tensor, aten.eq.Scalar), lambda a, b: a == b), ((aten.ne.Tensor, aten.ne.Scalar), lambda a, b: a != b),
    ((aten.lt.Tensor, aten.lt.Scalar), lambda a, b: a < b), ((aten.le.Tensor, aten.le.Scalar), lambda a, b: a <= b),
    ((aten.gt.Tensor, aten.gt.Scalar), lambda a, b: a > b), ((aten.ge.Tensor, aten.ge.Scalar), lambda a, b: a >= b),
    ((aten.logical_and.default,), lambda a, b: a.cast(dtypes.bool) & b.cast(dtypes.bool)),
    ((aten.logical_or.default,), lambda a, b: a.cast(dtypes.bool) | b.cast(dtypes.bool)),
    ((aten.logical_xor.default,), lambda a, b: a.cast(dtypes.bool) ^ b.cast(dtypes.bool)),
    ((aten.bitwise_and.Tensor, aten.bitwise_and.Scalar), lambda a, b: a & b),
    ((aten.bitwise_or.Tensor, aten.bitwise_or.Scalar), lambda a, b: a | b),
    ((aten.bitwise_xor.Tensor, aten.bitwise_xor.Scalar), lambda a, b: a ^ b),
    ((aten.__lshift__.Tensor, aten.__lshift__.Scalar), lambda a, b: a << b),
    ((aten.__rshift__.Tensor, aten.__rshift__.Scalar), lambda a, b: a >> b),
]:
    register(*_overloads)(_operator)


# ---- reductions --------------------------------------------------------------------------------------------------
@register(aten.sum.default, aten.sum.dim_IntList)
def sum_(self: Tensor, dim: object = None, keepdim: bool = False, dtype: object = None) -> Tensor:
    """Sum over `dim` (all when None or empty); bool and int sums accumulate in int64 as PyTorch's do."""
    if dtype is not None:
        self = self.cast(dtype)
    elif not dtypes.is_float(self.dtype):
        self = self.cast(dtypes.int64)
    return self.sum(_dims(dim, self.ndim), keepdim=keepdim)


@register(aten.mean.default, aten.mean.dim)
def mean(self: Tensor, dim: object = None, keepdim: bool = False, dtype: object = None) -> Tensor:
    """Mean over `dim`."""
    return (self.cast(dtype) if dtype is not None else self).mean(_dims(dim, self.ndim), keepdim=keepdim)


@register(aten.prod.default, aten.prod.dim_int)
def prod(self: Tensor, dim: int | None = None, keepdim: bool = False, dtype: object = None) -> Tensor:
    """Product over `dim`."""
    if dtype is not None:
        self = self.cast(dtype)
    elif not dtypes.is_float(self.dtype):
        self = self.cast(dtypes.int64)
    return self.prod(dim, keepdim=keepdim)


@register(aten.amax.default)
def amax(self: Tensor, dim: object = (), keepdim: bool = False) -> Tensor:
    """Max over `dim`."""
    return self.max(_dims(dim, self.ndim), keepdim=keepdim)


@register(aten.amin.default)
def amin(self: Tensor, dim: object = (), keepdim: bool = False) -> Tensor:
    """Min over `dim`."""
    return self.min(_dims(dim, self.ndim), keepdim=keepdim)


@register(aten.max.default)
def max_all(self: Tensor) -> Tensor:
    """Max of every element."""
    return self.max()


@register(aten.min.default)
def min_all(self: Tensor) -> Tensor:
    """Min of every element."""
    return self.min()


@register(aten.max.dim)
def max_dim(self: Tensor, dim: int, keepdim: bool = False) -> tuple[Tensor, Tensor]:
    """(max values, first index of the max) along dim."""
    return self.max(dim, keepdim=keepdim), self.argmax(dim, keepdim=keepdim).cast(dtypes.int64)


@register(aten.min.dim)
def min_dim(self: Tensor, dim: int, keepdim: bool = False) -> tuple[Tensor, Tensor]:
    """(min values, first index of the min) along dim."""
    return self.min(dim, keepdim=keepdim), self.argmin(dim, keepdim=keepdim).cast(dtypes.int64)


@register(aten.argmax.default)
def argmax(self: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    """Index of the first max."""
    return self.argmax(dim, keepdim=keepdim).cast(dtypes.int64)


@register(aten.argmin.default)
def argmin(self: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    """Index of the first min."""
    return self.argmin(dim, keepdim=keepdim).cast(dtypes.int64)


@register(aten.var.correction)
def var(self: Tensor, dim: object = None, correction: float | None = None, keepdim: bool = False) -> Tensor:
    """Variance with Bessel's `correction` (1 when None)."""
    return self.var(_dims(dim, self.ndim), keepdim=keepdim, correction=1 if correction is None else correction)


@register(aten.std.correction)
def std(self: Tensor, dim: object = None, correction: float | None = None, keepdim: bool = False) -> Tensor:
    """Standard deviation with Bessel's `correction` (1 when None)."""
    return self.std(_dims(dim, self.ndim), keepdim=keepdim, correction=1 if correction is None else correction)


@register(aten.any.default, aten.any.dim, aten.any.dims)
def any_(self: Tensor, dim: object = None, keepdim: bool = False) -> Tensor:
    """Any element true."""
    return self.cast(dtypes.bool).any(_dims(dim, self.ndim), keepdim=keepdim)


@register(aten.all.default, aten.all.dim, aten.all.dims)
def all_(self: Tensor, dim: object = None, keepdim: bool = False) -> Tensor:
    """Every element true."""
    return self.cast(dtypes.bool).all(_dims(dim, self.ndim), keepdim=keepdim)


@register(aten.logsumexp.default)
def logsumexp(self: Tensor, dim: object, keepdim: bool = False) -> Tensor:
    """log(sum(exp(x))) computed stably."""
    return self.logsumexp(_dims(dim, self.ndim), keepdim=keepdim)


@register(aten.cumsum.default)
def cumsum(self: Tensor, dim: int, dtype: object = None) -> Tensor:
    """Running sum along dim."""
    if dtype is not None:
        self = self.cast(dtype)
    elif not dtypes.is_float(self.dtype):
        self = self.cast(dtypes.int64)
    return self.cumsum(dim)


@register(aten.cumprod.default)
def cumprod(self: Tensor, dim: int, dtype: DType | None = None) -> Tensor:
    """Running product along dim (integers multiply in int64, as PyTorch's do); PyTorch's backward of prod and of
    cumprod are built from it."""
    if dtype is not None:
        self = self.cast(dtype)
    elif not dtypes.is_float(self.dtype):
        self = self.cast(dtypes.int64)
    return self.cumprod(dim % max(self.ndim, 1)) if self.ndim else self


# ---- linear algebra ----------------------------------------------------------------------------------------------
@register(aten.mm.default, aten.bmm.default)
def mm(self: Tensor, mat2: Tensor) -> Tensor:
    """Matrix product (batched for bmm)."""
    return self.matmul(mat2)


@register(aten.dot.default)
def dot(self: Tensor, tensor: Tensor) -> Tensor:
    """Inner product of two vectors."""
    return (self * tensor).sum()


@register(aten.addmm.default, aten.baddbmm.default)
def addmm(self: Tensor, mat1: Tensor, mat2: Tensor, beta: float = 1, alpha: float = 1) -> Tensor:
    """beta * self + alpha * mat1 @ mat2."""
    product = mat1.matmul(mat2)
    product = product * alpha if alpha != 1 else product
    return product if beta == 0 else (self * beta if beta != 1 else self) + product


# ---- convolution and pooling ---------------------------------------------------------------------------------------
def _conv(input: Tensor, weight: Tensor, bias: Tensor | None,  # noqa: A002
          stride: Sequence[int], padding: Sequence[int],
          dilation: Sequence[int], transposed: bool, output_padding: Sequence[int], groups: int) -> Tensor:
    padding = [int(p) for p in padding]
    if transposed:
        return input.conv_transpose2d(weight, bias, groups=groups, stride=tuple(stride), dilation=tuple(dilation),
                                      padding=tuple(padding), output_padding=tuple(output_padding))
    return input.conv2d(weight, bias, groups=groups, stride=tuple(stride), dilation=tuple(dilation),
                        padding=tuple(padding))


@register(aten.convolution.default)
def convolution(input: Tensor, weight: Tensor, bias: Tensor | None, stride: Sequence[int],  # noqa: A002
                padding: Sequence[int], dilation: Sequence[int], transposed: bool, output_padding: Sequence[int],
                groups: int) -> Tensor:
    """N-d convolution (1-d, 2-d, 3-d), transposed when asked."""
    return _conv(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)


@register(aten.convolution_backward.default)
def convolution_backward(grad_output: Tensor, input: Tensor, weight: Tensor, bias_sizes: object,  # noqa: A002
                         stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int], transposed: bool,
                         output_padding: Sequence[int], groups: int,
                         output_mask: Sequence[bool]) -> tuple[Tensor | None, ...]:
    """Gradients of convolution for input, weight and bias (as output_mask selects)."""
    grad_input, grad_weight = _vjp(
        lambda x, w: _conv(x, w, None, stride, padding, dilation, transposed, output_padding, groups),
        [input, weight], grad_output, [output_mask[0], output_mask[1]])
    axes = (0,) + tuple(range(2, grad_output.ndim))
    grad_bias = grad_output.sum(axes) if output_mask[2] else None
    return grad_input, grad_weight, grad_bias


def _pool_arguments(kernel_size: Sequence[int], stride: Sequence[int] | None, padding: Sequence[int]) -> tuple:
    kernel = tuple(kernel_size) if len(kernel_size) > 1 else (kernel_size[0],) * 2
    strides = tuple(stride) if stride else kernel
    strides = strides if len(strides) > 1 else strides * 2
    pads = tuple(padding) if len(padding) > 1 else tuple(padding) * 2
    return kernel, strides, pads


@register(aten.max_pool2d_with_indices.default)
def max_pool2d_with_indices(self: Tensor, kernel_size: Sequence[int], stride: Sequence[int] = (),
                            padding: Sequence[int] = (0,), dilation: Sequence[int] = (1,),
                            ceil_mode: bool = False) -> tuple[Tensor, Tensor]:
    """2-d max pooling with the flat (h * W + w) index of each max, as PyTorch returns it."""
    kernel, strides, pads = _pool_arguments(kernel_size, stride, padding)
    values, indices = self.max_pool2d(kernel, strides, tuple(dilation) if len(dilation) > 1 else dilation[0],
                                      pads, ceil_mode, return_indices=True)
    return values, indices.cast(dtypes.int64)


@register(aten.max_pool2d_with_indices_backward.default)
def max_pool2d_with_indices_backward(grad_output: Tensor, self: Tensor, kernel_size: Sequence[int],
                                     stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int],
                                     ceil_mode: bool, indices: Tensor) -> Tensor:
    """Each output gradient goes to the input element its saved index names."""
    batch = self.shape[:-2]
    plane = self.shape[-2] * self.shape[-1]
    flat_index = indices.reshape(*batch, -1).cast(dtypes.int32)
    zeros = Tensor.zeros(*batch, plane, dtype=grad_output.dtype, device=grad_output.device)
    scattered = zeros.scatter_reduce(-1, flat_index, grad_output.reshape(*batch, -1), reduce="sum")
    return scattered.reshape(self.shape)


@register(aten.avg_pool2d.default)
def avg_pool2d(self: Tensor, kernel_size: Sequence[int], stride: Sequence[int] = (), padding: Sequence[int] = (0,),
               ceil_mode: bool = False, count_include_pad: bool = True, divisor_override: int | None = None) -> Tensor:
    """2-d average pooling; with divisor_override, each window's sum divided by that number instead of its count."""
    kernel, strides, pads = _pool_arguments(kernel_size, stride, padding)
    if divisor_override is None:
        return self.avg_pool2d(kernel, strides, 1, pads, ceil_mode, count_include_pad)
    # zero padding that makes every window PyTorch forms a full kernel, so the mean of each is its sum / kernel area
    extents = tuple(int(extent) for extent in self.shape[-2:])
    extra = [max(0, (_pool_output(extent, size, step, pad, ceil_mode) - 1) * step + size - (extent + 2 * pad))
             for extent, size, step, pad in zip(extents, kernel, strides, pads, strict=True)]
    padded = self.pad(((0, 0),) * (self.ndim - 2) + ((pads[0], pads[0] + extra[0]), (pads[1], pads[1] + extra[1])))
    means = padded.avg_pool2d(kernel, strides, 1, 0, False, True)
    return means * (kernel[0] * kernel[1] / divisor_override)


def _pool_output(extent: int, kernel: int, stride: int, padding: int, ceil_mode: bool) -> int:
    """The number of windows PyTorch's pooling forms along one dim (with ceil_mode, none starts in the padding)."""
    span = extent + 2 * padding - kernel
    count = (-(-span // stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (count - 1) * stride >= extent + padding:
        count -= 1
    return count


@register(aten.avg_pool2d_backward.default)
def avg_pool2d_backward(grad_output: Tensor, self: Tensor, kernel_size: Sequence[int], stride: Sequence[int],
                        padding: Sequence[int], ceil_mode: bool, count_include_pad: bool,
                        divisor_override: int | None) -> Tensor:
    """Gradient of avg_pool2d."""
    return _vjp(lambda x: avg_pool2d(x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                                     divisor_override), [self], grad_output, [True])[0]  # type: ignore[return-value]


@register(aten._adaptive_avg_pool2d.default)
def adaptive_avg_pool2d(self: Tensor, output_size: Sequence[int]) -> Tensor:
    """Adaptive average pooling: output cell i of a dim averages input [floor(i*n/out), ceil((i+1)*n/out)), as in
    PyTorch (one pooling when the output size divides the input size, else a mean per output row and column)."""
    height, width = int(self.shape[-2]), int(self.shape[-1])
    out_h, out_w = (int(extent) for extent in output_size)
    if height % out_h == 0 and width % out_w == 0:
        kernel = (height // out_h, width // out_w)
        return self.avg_pool2d(kernel, kernel)
    rows = Tensor.cat(*(self[..., (i * height) // out_h:-(-((i + 1) * height) // out_h), :].mean(-2, keepdim=True)
                        for i in range(out_h)), dim=-2)
    return Tensor.cat(*(rows[..., (j * width) // out_w:-(-((j + 1) * width) // out_w)].mean(-1, keepdim=True)
                        for j in range(out_w)), dim=-1)


@register(aten._adaptive_avg_pool2d_backward.default)
def adaptive_avg_pool2d_backward(grad_output: Tensor, self: Tensor) -> Tensor:
    """Gradient of adaptive average pooling."""
    output_size = grad_output.shape[-2:]
    return _vjp(lambda x: adaptive_avg_pool2d(x, output_size), [self], grad_output,  # type: ignore[return-value]
                [True])[0]


# ---- normalization, softmax, losses --------------------------------------------------------------------------------
@register(aten._softmax.default)
def softmax(self: Tensor, dim: int, half_to_float: bool = False) -> Tensor:
    """softmax along dim."""
    return self.softmax(dim)


@register(aten._log_softmax.default)
def log_softmax(self: Tensor, dim: int, half_to_float: bool = False) -> Tensor:
    """log_softmax along dim."""
    return self.log_softmax(dim)


@register(aten._softmax_backward_data.default)
def softmax_backward(grad_output: Tensor, output: Tensor, dim: int, input_dtype: object) -> Tensor:
    """y * (g - sum(g * y))."""
    return output * (grad_output - (grad_output * output).sum(dim, keepdim=True))


@register(aten._log_softmax_backward_data.default)
def log_softmax_backward(grad_output: Tensor, output: Tensor, dim: int, input_dtype: object) -> Tensor:
    """g - exp(y) * sum(g)."""
    return grad_output - output.exp() * grad_output.sum(dim, keepdim=True)


@register(aten.native_layer_norm.default)
def native_layer_norm(input: Tensor, normalized_shape: Sequence[int], weight: Tensor | None,  # noqa: A002
                      bias: Tensor | None, eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """Layer norm over the trailing normalized_shape dims: (output, mean, rstd)."""
    axes = tuple(range(input.ndim - len(normalized_shape), input.ndim))
    mean_value = input.mean(axes, keepdim=True)
    rstd = ((input - mean_value).square().mean(axes, keepdim=True) + eps).rsqrt()
    output = (input - mean_value) * rstd
    if weight is not None:
        output = output * weight
    if bias is not None:
        output = output + bias
    return output, mean_value, rstd


@register(aten.native_layer_norm_backward.default)
def native_layer_norm_backward(grad_out: Tensor, input: Tensor, normalized_shape: Sequence[int],  # noqa: A002
                               mean: Tensor, rstd: Tensor, weight: Tensor | None, bias: Tensor | None,
                               output_mask: Sequence[bool]) -> tuple[Tensor | None, ...]:
    """Gradients of layer norm for input, weight and bias (the forward's eps recovered from the saved rstd)."""
    axes = tuple(range(input.ndim - len(normalized_shape), input.ndim))
    variance = (input - mean).square().mean(axes, keepdim=True)
    eps = 1 / rstd.square() - variance

    def forward(x: Tensor, w: Tensor | None, b: Tensor | None) -> Tensor:
        centered = x - x.mean(axes, keepdim=True)
        output = centered * (centered.square().mean(axes, keepdim=True) + eps.detach()).rsqrt()
        output = output * w if w is not None else output
        return output + b if b is not None else output
    return _vjp(forward, [input, weight, bias], grad_out, output_mask)


def _group_norm(input: Tensor, weight: Tensor | None, bias: Tensor | None, group: int,  # noqa: A002
                eps: float | Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Group norm of (N, C, *) over each group of C // group channels and all trailing dims: (output, mean, rstd)
    with mean and rstd shaped (N, group)."""
    batch, channels = int(input.shape[0]), int(input.shape[1])
    grouped = input.reshape(batch, group, input.numel() // max(batch * group, 1))
    mean_value = grouped.mean(-1, keepdim=True)
    centered = grouped - mean_value
    rstd = (centered.square().mean(-1, keepdim=True) + eps).rsqrt()
    output = (centered * rstd).reshape(input.shape)
    affine_shape = (1, channels) + (1,) * (input.ndim - 2)
    if weight is not None:
        output = output * weight.reshape(affine_shape)
    if bias is not None:
        output = output + bias.reshape(affine_shape)
    return output, mean_value.reshape(batch, group), rstd.reshape(batch, group)


@register(aten.native_group_norm.default)
def native_group_norm(input: Tensor, weight: Tensor | None, bias: Tensor | None, N: int,  # noqa: A002,N803
                      C: int, HxW: int, group: int, eps: float) -> tuple[Tensor, Tensor, Tensor]:  # noqa: N803
    """Group norm (PyTorch's native form: N, C and HxW are the input's sizes): (output, mean, rstd)."""
    return _group_norm(input, weight, bias, group, eps)


@register(aten.native_group_norm_backward.default)
def native_group_norm_backward(grad_out: Tensor, input: Tensor, mean: Tensor, rstd: Tensor,  # noqa: A002
                               weight: Tensor | None, N: int, C: int, HxW: int, group: int,  # noqa: N803
                               output_mask: Sequence[bool]) -> tuple[Tensor | None, ...]:
    """Gradients of group norm for input, weight and bias (the forward's eps recovered from the saved rstd)."""
    batch = int(input.shape[0])
    grouped = input.reshape(batch, group, input.numel() // max(batch * group, 1))
    variance = (grouped - mean.reshape(batch, group, 1)).square().mean(-1)
    eps = (1 / rstd.square() - variance).reshape(batch, group, 1).detach()
    channels = int(input.shape[1])
    bias = Tensor.zeros(channels, dtype=input.dtype, device=input.device)

    def forward(x: Tensor, w: Tensor | None, b: Tensor | None) -> Tensor:
        return _group_norm(x, w, b, group, eps)[0]
    return _vjp(forward, [input, weight, bias], grad_out, output_mask)


@register(aten.nll_loss_forward.default)
def nll_loss_forward(self: Tensor, target: Tensor, weight: Tensor | None, reduction: int,
                     ignore_index: int) -> tuple[Tensor, Tensor]:
    """Negative log likelihood: (loss, total weight); reduction 0 none, 1 mean, 2 sum."""
    classes = self.shape[-1]
    valid = target != ignore_index
    safe_target = valid.where(target, 0).cast(dtypes.int32)
    picked = -self.gather(-1, safe_target.unsqueeze(-1)).squeeze(-1)
    # without class weights, a sample weighs 1 unless its target is ignored: the mask itself, not where(ones)
    class_weight = valid.where(weight[safe_target], 0) if weight is not None else valid.cast(picked.dtype)
    losses = picked * class_weight
    total_weight = class_weight.sum()
    if reduction == 0:  # PyTorch leaves total_weight at zero when it does not reduce
        return losses, total_weight.zeros_like()
    if reduction == 2:
        return losses.sum(), total_weight
    del classes
    return losses.sum() / total_weight, total_weight


@register(aten.nll_loss_backward.default)
def nll_loss_backward(grad_output: Tensor, self: Tensor, target: Tensor, weight: Tensor | None, reduction: int,
                      ignore_index: int, total_weight: Tensor) -> Tensor:
    """Gradient of nll_loss with respect to its log-probabilities: -grad_output times the target's class weight
    (divided by total_weight for the mean) at each sample's target class, zero elsewhere and for ignored samples.
    Written out rather than differentiated (_vjp): a training step's loss runs it every step."""
    valid = target != ignore_index
    safe_target = valid.where(target, 0).cast(dtypes.int32)
    classes = Tensor.arange(int(self.shape[-1]), device=self.device)
    picked = (classes == safe_target.unsqueeze(-1)) & valid.unsqueeze(-1)
    scale = -grad_output.cast(self.dtype)
    if weight is not None:
        scale = scale * weight[safe_target].cast(self.dtype)
    if reduction == 1:
        scale = scale / total_weight.cast(self.dtype)
    if reduction == 0 or weight is not None:  # a value per sample
        scale = scale.unsqueeze(-1)
    return picked.where(scale, 0).cast(self.dtype)


@register(aten.mse_loss.default)
def mse_loss(self: Tensor, target: Tensor, reduction: int = 1) -> Tensor:
    """Mean squared error: reduction 0 none, 1 mean, 2 sum."""
    squared = (self - target).square()
    return squared if reduction == 0 else squared.sum() if reduction == 2 else squared.mean()


@register(aten.mse_loss_backward.default)
def mse_loss_backward(grad_output: Tensor, self: Tensor, target: Tensor, reduction: int) -> Tensor:
    """Gradient of mse_loss with respect to self."""
    scale = 2.0 / (self.numel() if reduction == 1 else 1)
    return (self - target) * scale * grad_output


# ---- shape: concatenation, indexing, copies -------------------------------------------------------------------------
@register(aten.cat.default)
def cat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """Concatenate along dim (PyTorch skips empty 1-d tensors)."""
    parts = [tensor for tensor in tensors if not (tensor.ndim == 1 and tensor.shape[0] == 0)] or list(tensors[:1])
    return parts[0].cat(*parts[1:], dim=dim)


@register(aten.stack.default)
def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """Stack along a new dim."""
    return tensors[0].stack(*tensors[1:], dim=dim)


@register(aten.clone.default)
def clone(self: Tensor, memory_format: object = None) -> Tensor:
    """A copy (a new storage)."""
    return self.contiguous()


@register(aten._to_copy.default)
def _to_copy_same_device(self: Tensor, dtype: object = None, **_: object) -> Tensor:
    """A copy with another dtype on the same tiny device (other devices are handled before this)."""
    return self.cast(dtype) if dtype is not None else self.contiguous()


@register(aten.gather.default)
def gather(self: Tensor, dim: int, index: Tensor, sparse_grad: bool = False) -> Tensor:
    """out[i][j] = self[i][index[i][j]] along dim."""
    return self.gather(dim, index.cast(dtypes.int32))


@register(aten.scatter.src, aten.scatter.value)
def scatter(self: Tensor, dim: int, index: Tensor, src: object) -> Tensor:
    """self with src written at index along dim."""
    return self.scatter(dim, index.cast(dtypes.int32), src)


@register(aten.scatter_add.default)
def scatter_add(self: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
    """self with src summed in at index along dim."""
    return self.scatter_reduce(dim, index.cast(dtypes.int32), src, reduce="sum")


@register(aten.index_select.default)
def index_select(self: Tensor, dim: int, index: Tensor) -> Tensor:
    """Slices of self at `index` along dim (a 0-d self: its one element, for each index, 0-d again)."""
    if self.ndim == 0:
        return self.reshape(1)[index.cast(dtypes.int32).reshape(-1)].reshape(())
    selector = [slice(None)] * self.ndim
    selector[dim] = index.cast(dtypes.int32)
    return self[tuple(selector)]


def _selector(self: Tensor, indices: Sequence[Tensor | None]) -> tuple[object, ...]:
    """PyTorch's index list as a tinycore getitem selector: None keeps a dim whole, integer tensors index one dim,
    a boolean mask over k dims becomes the k integer tensors of its nonzero positions (a data-dependent shape: the
    mask is read back to the host)."""
    selector: list[object] = []
    for position in indices:
        if position is None:
            selector.append(slice(None))
        elif position.dtype == dtypes.bool:
            hits = np.nonzero(position.numpy())
            selector.extend(Tensor(hit.astype(np.int32), device=self.device) for hit in hits)
        else:
            selector.append(position.cast(dtypes.int32))
    return tuple(selector)


@register(aten.index.Tensor)
def index(self: Tensor, indices: Sequence[Tensor | None]) -> Tensor:
    """Advanced indexing self[indices] (None keeps a dim whole; boolean masks select their nonzero positions)."""
    return self[_selector(self, indices)]


@register(aten.index_put.default)
def index_put(self: Tensor, indices: Sequence[Tensor | None], values: Tensor, accumulate: bool = False) -> Tensor:
    """self with values written (or, with accumulate, summed) at self[indices]."""
    if any(position is None or position.dtype == dtypes.bool for position in indices):
        return _index_put_positions(self, indices, values, accumulate)
    lead = [int(extent) for extent in self.shape[:len(indices)]]
    rest = tuple(int(extent) for extent in self.shape[len(indices):])
    ranks = max(position.ndim for position in indices)  # type: ignore[union-attr]
    padded = [position.reshape((1,) * (ranks - position.ndim) + tuple(position.shape))  # type: ignore[union-attr]
              for position in indices]
    shape = tuple(max(int(part.shape[axis]) for part in padded) for axis in range(ranks))
    count, width = math.prod(shape), math.prod(rest)
    if count == 0 or width == 0:
        return self.contiguous()
    # integer tensors on the leading dims (indexing assignment, the backward of indexing): whole rows of `width`
    # elements are scattered, so the scatter compares `count` row numbers, not every element
    linear: Tensor | None = None
    stride = 1
    for position, extent in reversed(list(zip(padded, lead, strict=True))):
        wrapped = position.cast(dtypes.int32)
        wrapped = (wrapped < 0).where(wrapped + extent, wrapped).expand(shape)
        linear = wrapped * stride if linear is None else linear + wrapped * stride
        stride *= extent
    assert linear is not None
    values = values.cast(self.dtype)
    values = values.reshape((1,) * (len(shape) + len(rest) - values.ndim) + tuple(values.shape))
    values = values.expand(shape + rest).reshape(count, width)
    target = linear.reshape(count, 1).expand(count, width)
    flat = self.reshape(math.prod(lead), width)
    result = flat.scatter_reduce(0, target, values, reduce="sum") if accumulate else flat.scatter(0, target, values)
    return result.reshape(self.shape)


def _index_put_positions(self: Tensor, indices: Sequence[Tensor | None], values: Tensor,
                         accumulate: bool) -> Tensor:
    """index_put for any index list (None, boolean masks, advanced indices anywhere): indexing the flat position
    of every element gives the positions self[indices] names, laid out as PyTorch lays out the indexed result, and
    values broadcast to that layout are scattered there."""
    numel = self.numel()
    if numel == 0:
        return self.contiguous()
    positions = Tensor.arange(numel, dtype=dtypes.int32, device=self.device).reshape(self.shape)
    positions = positions[_selector(self, indices)]
    count = positions.numel()
    if count == 0:
        return self.contiguous()
    values = values.cast(self.dtype)
    values = values.reshape((1,) * (positions.ndim - values.ndim) + tuple(values.shape)).expand(positions.shape)
    flat, target, source = self.reshape(numel), positions.reshape(count), values.reshape(count)
    result = flat.scatter_reduce(0, target, source, reduce="sum") if accumulate else flat.scatter(0, target, source)
    return result.reshape(self.shape)


@register(aten.embedding.default)
def embedding(weight: Tensor, indices: Tensor, padding_idx: int = -1, scale_grad_by_freq: bool = False,
              sparse: bool = False) -> Tensor:
    """Rows of weight at indices."""
    return weight[indices.cast(dtypes.int32)]


@register(aten.embedding_dense_backward.default)
def embedding_dense_backward(grad_output: Tensor, indices: Tensor, num_weights: int, padding_idx: int,
                             scale_grad_by_freq: bool) -> Tensor:
    """Sum of the output gradients into the rows their indices name (none into padding_idx)."""
    if scale_grad_by_freq:
        raise NotImplementedError("embedding backward with scale_grad_by_freq")
    flat = indices.reshape(-1).cast(dtypes.int32)
    rows = grad_output.reshape(-1, grad_output.shape[-1])
    if padding_idx >= 0:
        rows = (flat != padding_idx).unsqueeze(-1).where(rows, 0)
    zeros = Tensor.zeros(num_weights, rows.shape[-1], dtype=rows.dtype, device=rows.device)
    return zeros.scatter_reduce(0, flat.unsqueeze(-1).expand(rows.shape), rows, reduce="sum")


@register(aten.constant_pad_nd.default)
def constant_pad_nd(self: Tensor, pad: Sequence[int], value: float = 0) -> Tensor:
    """Pad (PyTorch order: last dim first; negative pads crop)."""
    pairs = [(0, 0)] * self.ndim
    for position in range(len(pad) // 2):
        pairs[self.ndim - 1 - position] = (int(pad[2 * position]), int(pad[2 * position + 1]))
    cropped = self.shrink(tuple((max(0, -low), self.shape[axis] - max(0, -high))
                                for axis, (low, high) in enumerate(pairs)))
    return cropped.pad(tuple((max(0, low), max(0, high)) for low, high in pairs), value=value)


@register(aten.flip.default)
def flip(self: Tensor, dims: Sequence[int]) -> Tensor:
    """Reverse the given dims."""
    return self.flip(tuple(dims))


@register(aten.roll.default)
def roll(self: Tensor, shifts: Sequence[int], dims: Sequence[int] = ()) -> Tensor:
    """Roll elements along dims."""
    if not dims:
        return self.reshape(-1).roll(tuple(shifts), 0).reshape(self.shape)
    return self.roll(tuple(shifts), tuple(dims))


@register(aten.repeat.default)
def repeat(self: Tensor, repeats: Sequence[int]) -> Tensor:
    """Tile self."""
    return self.repeat(tuple(repeats))


@register(aten.tril.default)
def tril(self: Tensor, diagonal: int = 0) -> Tensor:
    """Lower triangle."""
    return self.tril(diagonal)


@register(aten.triu.default)
def triu(self: Tensor, diagonal: int = 0) -> Tensor:
    """Upper triangle."""
    return self.triu(diagonal)


@register(aten.sort.default)
def sort(self: Tensor, dim: int = -1, descending: bool = False) -> tuple[Tensor, Tensor]:
    """Sorted values and their indices."""
    values, indices = self.sort(dim, descending)
    return values, indices.cast(dtypes.int64)


@register(aten.topk.default)
def topk(self: Tensor, k: int, dim: int = -1, largest: bool = True,
         sorted: bool = True) -> tuple[Tensor, Tensor]:  # noqa: A002
    """The k largest (or smallest) values and indices."""
    values, indices = self.topk(k, dim, largest, sorted)
    return values, indices.cast(dtypes.int64)


@register(aten.native_dropout_backward.default)
def native_dropout_backward(grad_output: Tensor, mask: Tensor, scale: float) -> Tensor:
    """grad * mask * scale."""
    return grad_output * mask.cast(grad_output.dtype) * scale
