"""Reductions and the ops built on them: Reduce*, ArgMax/ArgMin, Softmax family, TopK, CumSum."""
from __future__ import annotations

from collections.abc import Callable

from tinycore.dtype import dtypes
from tinycore.nn.onnx.common import HALF_FLOATS, as_ints, axes_of, axis_of, index_dtype, scalar_of, widened
from tinycore.nn.onnx.registry import onnx_op
from tinycore.tensor import Tensor
from tinycore.uop.ops import Ops


def _reduce_axes(x: Tensor, axes: list[int] | None, noop_with_empty_axes: int) -> list[int] | None:
    """The axes to reduce (None: reduce nothing) from the axes given and the empty-axes rule."""
    if not axes:
        return None if noop_with_empty_axes else list(range(x.ndim))
    return axes_of(axes, x.ndim)


def _register_reduction(name: str, body: Callable[[Tensor, tuple[int, ...], bool], Tensor],
                        inputs_from: int) -> None:
    """Register Reduce`name` with axes as an attribute before opset `inputs_from` and as an input from it on."""
    def apply(x: Tensor, axes: list[int] | None, keepdims: int, noop: int) -> Tensor:
        chosen = _reduce_axes(x, axes, noop)
        if chosen is None:
            return x
        if not chosen:
            return x
        return body(x, tuple(chosen), bool(keepdims))

    def with_attribute(x: Tensor, axes: list[int] | None = None, keepdims: int = 1) -> Tensor:
        return apply(x, axes, keepdims, 0)

    def with_input(x: Tensor, axes: list[int] | int | None = None, keepdims: int = 1,
                   noop_with_empty_axes: int = 0) -> Tensor:
        return apply(x, as_ints(axes), keepdims, noop_with_empty_axes)

    for function, since in ((with_attribute, 1), (with_input, inputs_from)):
        function.__doc__ = f"ONNX Reduce{name}."
        function.__name__ = f"reduce_{name.lower()}"
        onnx_op(f"Reduce{name}", since, host_inputs=(1,) if since > 1 else ())(function)


def _sum(x: Tensor, axes: tuple[int, ...], keep: bool) -> Tensor:
    return x.sum(axes, keepdim=keep).cast(x.dtype) if x.dtype != dtypes.bool else x.sum(axes, keepdim=keep)


def _extreme(method: str) -> Callable[[Tensor, tuple[int, ...], bool], Tensor]:
    def reduce(x: Tensor, axes: tuple[int, ...], keep: bool) -> Tensor:
        if any(x.shape[axis] == 0 for axis in axes):
            shape = tuple(1 if axis in axes else size for axis, size in enumerate(x.shape)) if keep else \
                tuple(size for axis, size in enumerate(x.shape) if axis not in axes)
            fill = dtypes.min(x.dtype) if method == "max" else dtypes.max(x.dtype)
            if dtypes.is_float(x.dtype):
                fill = float("-inf") if method == "max" else float("inf")
            return Tensor.full(shape, fill, dtype=x.dtype, device=x.device)
        result = getattr(x, method)(axes, keepdim=keep)
        if dtypes.is_float(x.dtype):
            has_nan = x.isnan().any(axes, keepdim=keep)
            result = has_nan.where(float("nan"), result)
        return result
    return reduce


_register_reduction("Sum", _sum, 13)
_register_reduction("Mean", lambda x, axes, keep: x.mean(axes, keepdim=keep), 18)
_register_reduction("Max", _extreme("max"), 18)
_register_reduction("Min", _extreme("min"), 18)
_register_reduction("Prod", lambda x, axes, keep: x.prod(axes, keepdim=keep).cast(x.dtype), 18)
_register_reduction("L1", lambda x, axes, keep: x.abs().sum(axes, keepdim=keep).cast(x.dtype), 18)
_register_reduction("L2", lambda x, axes, keep: (x * x).sum(axes, keepdim=keep).sqrt().cast(x.dtype), 18)
_register_reduction("LogSum", lambda x, axes, keep: x.sum(axes, keepdim=keep).log(), 18)
_register_reduction("LogSumExp", lambda x, axes, keep: x.logsumexp(axes, keepdim=keep), 18)
_register_reduction("SumSquare", lambda x, axes, keep: (x * x).sum(axes, keepdim=keep).cast(x.dtype), 18)


def _arg_extreme(x: Tensor, axis: int, keepdims: int, select_last_index: int, largest: bool) -> Tensor:
    axis = axis_of(axis, x.ndim)
    if select_last_index:
        flipped = x.flip(axis)
        index = flipped.argmax(axis, keepdim=True) if largest else flipped.argmin(axis, keepdim=True)
        index = (x.shape[axis] - 1) - index
    else:
        index = x.argmax(axis, keepdim=True) if largest else x.argmin(axis, keepdim=True)
    index = index.cast(index_dtype(x.device))
    return index if keepdims else index.squeeze(axis)


@onnx_op("ArgMax", 1)
def arg_max(x: Tensor, axis: int = 0, keepdims: int = 1, select_last_index: int = 0) -> Tensor:
    """The index of the largest element along `axis` (first or last of ties)."""
    return _arg_extreme(x, axis, keepdims, select_last_index, True)


@onnx_op("ArgMin", 1)
def arg_min(x: Tensor, axis: int = 0, keepdims: int = 1, select_last_index: int = 0) -> Tensor:
    """The index of the smallest element along `axis` (first or last of ties)."""
    return _arg_extreme(x, axis, keepdims, select_last_index, False)


def _coerced(x: Tensor, axis: int, function: Callable[[Tensor], Tensor]) -> Tensor:
    """Apply `function` over the last axis of x flattened to 2-D at `axis` (the rule before opset 13)."""
    axis = axis_of(axis, x.ndim)
    rows = 1
    for size in x.shape[:axis]:
        rows *= size
    return function(x.reshape(rows, -1)).reshape(x.shape)


def _hardmax(x: Tensor, axis: int) -> Tensor:
    index = x.argmax(axis, keepdim=True)
    positions = Tensor.arange(x.shape[axis], device=x.device).reshape(
        [x.shape[axis] if dim == axis else 1 for dim in range(x.ndim)])
    return (positions == index).cast(x.dtype)


_VIEWS = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.CONTIGUOUS_BACKWARD})


def _stored_in_order(x: Tensor) -> Tensor:
    """x, realized contiguous when it is a reduction seen through a view (a MatMul's product: its reduce kernel
    computes the rows in another order and the view permutes them back). That kernel runs anyway, since a softmax's
    reductions cannot fuse with it; stored in x's own order, the softmax reads each row as vectors instead of
    stepping through another layout one scalar at a time (attention scores, 4 x 64 x 64: 100 -> 13 us)."""
    source = x.uop
    while source.op in _VIEWS and source.src:
        source = source.src[0]
    return x.contiguous() if source.op is Ops.REDUCE_AXIS and source is not x.uop else x


def _softmax(x: Tensor, axis: int) -> Tensor:
    """Softmax along `axis`. A 16-bit float input rounds where the reference's numpy steps round: after the shift by
    the maximum, after exp, after the (float32) sum and after the division, each step computed in float32 (a kernel
    that kept the steps in float32 throughout, or rounded the sum's terms, ends a bit away from it)."""
    x = _stored_in_order(x)
    if x.dtype not in HALF_FLOATS:
        return x.softmax(axis)
    wide = widened(x)
    shifted = (wide - wide.max(axis, keepdim=True)).cast(x.dtype)
    exponent = widened(shifted).exp().cast(x.dtype)
    total = widened(exponent).sum(axis, keepdim=True).cast(x.dtype)
    return (widened(exponent) / widened(total)).cast(x.dtype)


@onnx_op("Softmax", 1)
def softmax_2d(x: Tensor, axis: int = 1) -> Tensor:
    """Softmax over the input flattened to 2-D at `axis` (opsets 1-12)."""
    return _coerced(x, axis, lambda rows: _softmax(rows, -1))


@onnx_op("Softmax", 13)
def softmax(x: Tensor, axis: int = -1) -> Tensor:
    """Softmax along `axis`."""
    return _softmax(x, axis_of(axis, x.ndim))


@onnx_op("LogSoftmax", 1)
def log_softmax_2d(x: Tensor, axis: int = 1) -> Tensor:
    """Log-softmax over the input flattened to 2-D at `axis` (opsets 1-12)."""
    return _coerced(x, axis, lambda rows: rows.log_softmax(-1))


@onnx_op("LogSoftmax", 13)
def log_softmax(x: Tensor, axis: int = -1) -> Tensor:
    """Log-softmax along `axis`."""
    return _stored_in_order(x).log_softmax(axis_of(axis, x.ndim))


@onnx_op("Hardmax", 1)
def hardmax_2d(x: Tensor, axis: int = 1) -> Tensor:
    """One at the first maximum of each row of the input flattened to 2-D at `axis` (opsets 1-12)."""
    return _coerced(x, axis, lambda rows: _hardmax(rows, 1))


@onnx_op("Hardmax", 13)
def hardmax(x: Tensor, axis: int = -1) -> Tensor:
    """One at the first maximum along `axis`, zero elsewhere."""
    return _hardmax(x, axis_of(axis, x.ndim))


@onnx_op("TopK", 1)
def top_k_attribute(x: Tensor, axis: int = -1, k: int = 1) -> tuple[Tensor, Tensor]:
    """The k largest values along `axis` and their indices (k as an attribute, opset 1)."""
    return top_k(x, [k], axis)


@onnx_op("TopK", 10, host_inputs=(1,))
def top_k(x: Tensor, k: list[int] | int, axis: int = -1, largest: int = 1, sorted: int = 1
          ) -> tuple[Tensor, Tensor]:
    """The k largest (or smallest) values along `axis` and their int64 indices, ties by lower index."""
    count = int(scalar_of(k))
    axis = axis_of(axis, x.ndim)
    values, indices = x.topk(count, dim=axis, largest=bool(largest), sorted_=True)
    return values, indices.cast(index_dtype(x.device))


@onnx_op("CumSum", 11, host_inputs=(1,))
def cumulative_sum(x: Tensor, axis: list[int] | int, exclusive: int = 0, reverse: int = 0) -> Tensor:
    """Running sums along `axis`, optionally excluding each element itself and from the end."""
    dim = axis_of(int(scalar_of(axis)), x.ndim)
    if reverse:
        x = x.flip(dim)
    result = x.cumsum(dim).cast(x.dtype)
    if exclusive:
        result = result - x
    return result.flip(dim) if reverse else result


@onnx_op("CumProd", 26, host_inputs=(1,))
def cumulative_product(x: Tensor, axis: list[int] | int, exclusive: int = 0, reverse: int = 0) -> Tensor:
    """Running products along `axis`, optionally excluding each element itself and from the end."""
    dim = axis_of(int(scalar_of(axis)), x.ndim)
    if reverse:
        x = x.flip(dim)
    if exclusive:
        shifted = x.pad(tuple((1, -1) if axis == dim else (0, 0) for axis in range(x.ndim)), value=1)
        result = shifted.cumprod(dim).cast(x.dtype)
    else:
        result = x.cumprod(dim).cast(x.dtype)
    return result.flip(dim) if reverse else result
