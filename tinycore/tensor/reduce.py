"""Reduce Tensor operations: sums, products, extrema, statistics, arg-extrema and cumulative scans."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, TypeAlias, Union

from tinycore.dtype import DTypeLike, dtypes, sum_acc_dtype, to_dtype
from tinycore.tensor.elementwise import ElementwiseMixin
from tinycore.tensor.support import resolve_axes, resolve_axis
from tinycore.uop.ops import Ops

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Self

    from tinycore.dtype import ConstType


    AxisArg: TypeAlias = Union[int, Sequence[int], None]
    """Reduce axes: one axis, several, or None for all of them."""
_LOW_PRECISION_FLOATS = (dtypes.float16, dtypes.bfloat16, dtypes.fp8e4m3, dtypes.fp8e5m2)


class ReduceMixin(ElementwiseMixin):
    """Reductions over axes (int, tuple, negative or None for all) with keepdim."""

    def _reduce(self, op: Ops, axis: AxisArg = None, keepdim: bool = False) -> Self:
        """The reduction `op` (ADD, MUL or MAX) over `axis`."""
        axes = resolve_axes(axis, self.ndim)
        # a reduce over an empty axis gives the identity of `op`; the node stays in the graph so gradients reach
        # the empty input (zeros of its shape, as torch)
        result = self._result(self.uop.r(op, axes)) if axes else self
        if keepdim:
            return result
        return result.reshape(tuple(size for index, size in enumerate(self.shape) if index not in axes))

    def sum(self, axis: AxisArg = None, keepdim: bool = False, dtype: DTypeLike | None = None) -> Self:
        """Sum over `axis` (accumulated in int32/uint32 for small ints and bool, like tinygrad)."""
        if dtype is not None:
            return self.cast(to_dtype(dtype))._reduce(Ops.ADD, axis, keepdim)
        result = self.cast(sum_acc_dtype(self.dtype))._reduce(Ops.ADD, axis, keepdim)
        return result.cast(self.dtype) if self.dtype in _LOW_PRECISION_FLOATS else result

    def prod(self, axis: AxisArg = None, keepdim: bool = False, dtype: DTypeLike | None = None) -> Self:
        """Product over `axis` (in this tensor's dtype unless `dtype` is given)."""
        source = self if dtype is None else self.cast(to_dtype(dtype))
        if source.dtype == dtypes.bool:
            return source.all(axis, keepdim)
        return source._reduce(Ops.MUL, axis, keepdim)

    def max(self, axis: AxisArg = None, keepdim: bool = False) -> Self:
        """Maximum over `axis` (-inf / the dtype's minimum for an empty axis)."""
        return self._reduce(Ops.MAX, axis, keepdim)

    def min(self, axis: AxisArg = None, keepdim: bool = False) -> Self:
        """Minimum over `axis`."""
        return self._inverse()._reduce(Ops.MAX, axis, keepdim)._inverse()

    def any(self, axis: AxisArg = None, keepdim: bool = False) -> Self:
        """True where any element along `axis` is nonzero."""
        return self.bool()._reduce(Ops.MAX, axis, keepdim)

    def all(self, axis: AxisArg = None, keepdim: bool = False) -> Self:
        """True where every element along `axis` is nonzero."""
        return self.logical_not().any(axis, keepdim).logical_not()

    def _reduced_count(self, axis: AxisArg) -> int:
        """How many elements each output of a reduction over `axis` combines."""
        return math.prod([self.shape[index] for index in resolve_axes(axis, self.ndim)])

    def mean(self, axis: AxisArg = None, keepdim: bool = False) -> Self:
        """Arithmetic mean over `axis` (float result; nan for an empty axis)."""
        output_dtype = self.dtype if dtypes.is_float(self.dtype) else dtypes.float32
        count = self._reduced_count(axis)
        total = self.sum(axis, keepdim)
        if count == 0:
            return total.cast(output_dtype) * math.nan
        compute = total.dtype if dtypes.is_float(total.dtype) else dtypes.float32
        return (total.cast(compute) / count).cast(output_dtype)

    def var(self, axis: AxisArg = None, keepdim: bool = False, correction: int = 1) -> Self:
        """Variance over `axis` with `correction` (1: the unbiased estimator)."""
        squares = (self - self.mean(axis, keepdim=True)).square()
        divisor = max(0, self._reduced_count(axis) - correction)
        summed = squares.sum(axis, keepdim)
        # no degrees of freedom left: the sum over 0, as torch (inf, or nan where every deviation is 0)
        return summed / divisor if divisor else summed / summed._const(0.0)

    def std(self, axis: AxisArg = None, keepdim: bool = False, correction: int = 1) -> Self:
        """Standard deviation over `axis`."""
        return self.var(axis, keepdim, correction).sqrt()

    def var_mean(self, axis: AxisArg = None, keepdim: bool = False,
                 correction: int = 1) -> tuple[Self, Self]:
        """(variance, mean) over `axis`."""
        return self.var(axis, keepdim, correction), self.mean(axis, keepdim)

    def std_mean(self, axis: AxisArg = None, keepdim: bool = False,
                 correction: int = 1) -> tuple[Self, Self]:
        """(standard deviation, mean) over `axis`."""
        return self.std(axis, keepdim, correction), self.mean(axis, keepdim)

    def logsumexp(self, axis: AxisArg = None, keepdim: bool = False) -> Self:
        """log(sum(exp(self))) over `axis`, computed stably."""
        top = self.max(axis, keepdim=True)
        top = top.isinf().where(top._const(0.0, top.dtype), top) if dtypes.is_float(top.dtype) else top.float()
        result = (self - top).exp().sum(axis, keepdim=True).log() + top
        if keepdim:
            return result
        axes = resolve_axes(axis, self.ndim)
        return result.reshape(tuple(size for index, size in enumerate(result.shape) if index not in axes))

    def _arg_extreme(self, axis: int | None, keepdim: bool, largest: bool) -> Self:
        """Index of the first maximum (largest) or minimum along `axis`."""
        if axis is None:
            return self.flatten()._arg_extreme(0, False, largest).reshape((1,) * self.ndim if keepdim else ())
        dim = resolve_axis(axis, self.ndim) if self.ndim else 0
        source = self if self.ndim else self.reshape(1)
        length = source.shape[dim]
        if length == 0:
            raise ValueError(f"argmax/argmin of an empty axis (shape {self.shape})")
        extreme = source.max(dim, keepdim=True) if largest else source.min(dim, keepdim=True)
        matches = source.eq(extreme)
        countdown = type(self).arange(length, 0, -1, dtype=dtypes.int32, device=self.device)
        countdown = countdown.reshape(tuple(length if index == dim else 1 for index in range(source.ndim)))
        found = matches.where(countdown, 0).max(dim, keepdim=True)
        result = (length - found).cast(dtypes.int32)
        if not self.ndim:
            return result.reshape(())
        return result if keepdim else result.squeeze(dim)

    def argmax(self, axis: int | None = None, keepdim: bool = False) -> Self:
        """Index of the first maximum along `axis` (of the flattened tensor when None), as int32."""
        return self._arg_extreme(axis, keepdim, True)

    def argmin(self, axis: int | None = None, keepdim: bool = False) -> Self:
        """Index of the first minimum along `axis`, as int32."""
        return self._arg_extreme(axis, keepdim, False)

    # ---- scans ----

    def _scan_mask(self, length: int) -> Self:
        """The (length, length) bool matrix with [i, j] = j <= i."""
        indices = type(self).arange(length, dtype=dtypes.int32, device=self.device)
        return indices.reshape(length, 1) >= indices.reshape(1, length)

    def _scan(self, axis: int, op: Ops, identity: Self | ConstType) -> Self:
        """The inclusive scan of `op` along `axis`."""
        if self.ndim == 0:
            resolve_axis(axis, 0)  # a 0-d tensor takes axis 0 or -1, as tinygrad
            return self
        dim = resolve_axis(axis, self.ndim)
        moved = self.transpose(dim, -1)
        length = moved.shape[-1]
        if length == 0:
            return self
        rows = moved.unsqueeze(-2).expand(moved.shape[:-1] + (length, length))
        masked = self._scan_mask(length).where(rows, identity)
        return masked._reduce(op, -1).transpose(dim, -1)

    def cumsum(self, axis: int = 0) -> Self:
        """Running sum along `axis`."""
        source = self.cast(sum_acc_dtype(self.dtype))
        result = source._scan(axis, Ops.ADD, 0)
        return result.cast(self.dtype) if self.dtype in _LOW_PRECISION_FLOATS else result

    def cumprod(self, axis: int) -> Self:
        """Running product along `axis`."""
        return self._scan(axis, Ops.MUL, 1)

    def _cum_extreme(self, axis: int, largest: bool) -> tuple[Self, Self]:
        """Running maximum (or minimum) along `axis` and the index where it was last reached."""
        if self.ndim == 0:
            resolve_axis(axis, 0)
            return self, self._const(0, dtypes.int32)
        dim = resolve_axis(axis, self.ndim)
        source = self if largest else self._inverse()
        values = source._scan(dim, Ops.MAX, dtypes.min(source.dtype))
        length = self.shape[dim]
        positions = type(self).arange(length, dtype=dtypes.int32, device=self.device)
        positions = positions.reshape(tuple(length if index == dim else 1 for index in range(self.ndim)))
        hits = source.eq(values).where(positions._broadcast_to(self.shape), -1)
        indices = hits._scan(dim, Ops.MAX, -1)
        return (values if largest else values._inverse()), indices

    def cummax(self, axis: int = 0) -> tuple[Self, Self]:
        """(running maximum, its index) along `axis`."""
        return self._cum_extreme(axis, True)

    def cummin(self, axis: int = 0) -> tuple[Self, Self]:
        """(running minimum, its index) along `axis`."""
        return self._cum_extreme(axis, False)

    def logcumsumexp(self, axis: int = 0) -> Self:
        """log of the running sum of exp along `axis`, computed stably."""
        if self.ndim == 0:
            resolve_axis(axis, 0)
            return self
        dim = resolve_axis(axis, self.ndim)
        rows = self.transpose(dim, -1)
        length = rows.shape[-1]
        # Each prefix is shifted by its own maximum, as torch's running log-add-exp is: shifted by the row's maximum
        # instead, the early terms of a row with a large late value underflowed ([0, 100] gave [0.017, 100]).
        # Prefix i's terms x[j], j <= i, lie along a new last axis; the (length, length) view is fused into the sum.
        running = rows.cummax(-1)[0].detach()
        running = running.isinf().where(running._const(0.0, running.dtype), running)
        positions = type(self).arange(length, device=self.device)
        included = positions.reshape(length, 1) >= positions.reshape(1, length)
        terms = rows.unsqueeze(-2) - running.unsqueeze(-1)
        masked = included.where(terms, terms._const(-math.inf, terms.dtype))
        return (masked.exp().sum(-1).log() + running).transpose(-1, dim)

    def usum(self, *others: Self) -> Self:
        """The sum of this tensor and `others`."""
        result = self
        for other in others:
            result = result + other
        return result

    def uprod(self, *others: Self) -> Self:
        """The product of this tensor and `others`."""
        result = self
        for other in others:
            result = result * other
        return result

