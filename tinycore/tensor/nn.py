"""Composite Tensor operations for neural networks: matmul, einsum, convolution, pooling, normalisation,
softmax, losses, interpolation and triangular masks."""
from __future__ import annotations

import functools
import math
import struct
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, TypeVar, Union, overload

from tinycore.dtype import DType, DTypeLike, dtypes, least_upper_dtype, sum_acc_dtype
from tinycore.errors import ArgumentError, BroadcastError, DTypeMismatchError, ShapeError
from tinycore.helpers import TRAINING, make_tuple
from tinycore.tensor.conv_layouts import (
    channels_last_wins,
    conv_transpose_by_phases,
    folds_strides,
    input_gradient_channels_last,
    loops_over_rows,
    pads_into_a_copy,
    space_to_depth,
    transposes_by_phases,
    weight_gradient_channels_last,
)
from tinycore.tensor.convolution import convolve, convolve_channels_last, with_direct_input_gradient
from tinycore.tensor.indexing import IndexingMixin
from tinycore.tensor.matmul import multiply_in_place, multiply_panels
from tinycore.tensor.row_functions import fast_row_function, log_softmax_nodes, softmax_nodes
from tinycore.tensor.support import optional_dtype, resolve_axes, resolve_axis

if TYPE_CHECKING:
    from typing import Self

    from typing_extensions import TypeIs

    from tinycore.uop.uop import UOp, sint

    Ints: TypeAlias = Union[int, Sequence[int]]
    """One value for every spatial axis, or a value per axis."""

TensorT = TypeVar("TensorT", bound="NNMixin")
"""A tensor of the chain class whose methods these helpers call (the Tensor, at run time)."""

_REDUCTIONS = ("none", "sum", "mean")


def _is_tensor(value: object) -> TypeIs[NNMixin]:
    """True for a Tensor (every Tensor is an NNMixin)."""
    return isinstance(value, NNMixin)


def _check_reduction(reduction: str) -> None:
    """An error unless `reduction` is 'none', 'sum' or 'mean'."""
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction must be one of {_REDUCTIONS}, got {reduction!r}")


def _check_smoothing(label_smoothing: float) -> None:
    """A clear error for a label smoothing outside [0, 1]."""
    if not 0.0 <= label_smoothing <= 1.0:
        raise ArgumentError(f"label_smoothing must be in [0.0, 1.0], got {label_smoothing}")


PANEL_MIN_ROWS = 256
"""A matmul packs its second input into panels (see `_matmul_panel`) from this many rows of the first on: the copy
costs about one pass over the second input, which fewer rows do not repay. That holds for a network's 128-row input
batch too (784x512 weights, best of interleaved runs on one and two threads of the shared 2-core machine: packed
1.30-1.60 ms, copy included, in place 0.78-1.50 ms; the copy is a serial elementwise kernel of about 0.2 ms)."""


def _matmul_panel(left: TensorT, right: TensorT) -> int | None:
    """Columns per packed panel for `left @ right` on a device whose renderer asks for packing
    (RendererContract.matmul_panel_bytes; where that spans more than two vectors, the width, or half of it, that
    splits the columns into an even count of panels), None to multiply in place: small products, column counts the
    panel does not divide, mixed dtypes and tensors on several devices stay unpacked."""
    if not isinstance(left.device, str) or left.device != right.device or left.dtype != right.dtype or \
            left.dtype not in (dtypes.float32, dtypes.float64):
        return None
    shapes = (left.shape[-2], left.shape[-1], right.shape[-1])
    if not all(isinstance(size, int) for size in shapes):
        return None
    rows, inner, columns = shapes
    from tinycore.device.registry import Device
    renderer = Device[left.device].renderer
    panel_bytes = renderer.matmul_panel_bytes
    if not panel_bytes:
        return None
    batch_rows = rows * math.prod(size for size in left.shape[:-2] if isinstance(size, int))
    if batch_rows < PANEL_MIN_ROWS:
        return None
    # where the renderer's panels span more than two vectors (the CPU's four with AVX-512), an even count of them or
    # of half as wide ones: the CPU's workers take whole panels (5 panels of 64 columns ran at 0.82x the 10 of 32),
    # and products whose columns neither splits evenly (96, 160, 288) ran 1.09-1.13x faster in place than in
    # 32-column panels
    vector_bytes = renderer.preferred_vector_bytes or 0
    halves = panel_bytes // 2 >= 2 * vector_bytes > 0
    for width_bytes in ([panel_bytes, panel_bytes // 2] if halves else [panel_bytes]):
        panel = width_bytes // left.dtype.itemsize
        if panel and inner >= panel and columns % panel == 0 and columns >= 2 * panel and \
                (not halves or (columns // panel) % 2 == 0):
            return panel
    return None


def _multiply_with_tensors(left: TensorT, right: TensorT, panel: int | None, accumulate: DType | None,
                           result_dtype: DType) -> TensorT:
    """`left @ right` (at least 2-D each) spelled in Tensor operations: mixed dtypes, bool and symbolic shapes; the
    reference that tinycore.tensor.matmul's node-level builders match."""
    if panel is not None:
        # the second input copied into panels of `panel` columns, each contiguous along the reduce: the kernel
        # then streams one panel per block of columns instead of reading a cache line from every row of it
        *batch, depth, columns = right.shape
        from tinycore.tensor.matmul import copies_transposed_left
        if copies_transposed_left(left.uop):
            left = left.contiguous()  # as tinycore.tensor.matmul.multiply_panels
        panels = right.reshape(*batch, depth, columns // panel, panel).transpose(-3, -2).contiguous()
        # (..., blocks, rows, reduce, panel) summed over the reduce, then the blocks put back side by side
        products = left.unsqueeze(-3).unsqueeze(-1) * panels.unsqueeze(-3)
        # the gradient arrives in the output's layout; contiguous_backward copies it into panels like the second
        # input's, so the weight gradient streams it panel by panel as the product streams the panels
        blocks = products.sum(-2, dtype=sum_acc_dtype(products.dtype)).contiguous_backward()
        return blocks.transpose(-3, -2).reshape(*blocks.shape[:-3], left.shape[-2], columns).cast(result_dtype)
    products = left.unsqueeze(-2) * right.transpose(-1, -2).unsqueeze(-3)
    return products.sum(-1, dtype=accumulate or sum_acc_dtype(products.dtype)).cast(result_dtype)


def _with_row_gradient(value: TensorT, source: TensorT, axis: int, logarithmic: bool) -> TensorT:
    """`value`, softmax (or log_softmax when `logarithmic`) of `source` along `axis`, with torch's gradient:
    y * (g - sum(g * y)) for softmax, g - exp(y) * sum(g) for log_softmax. Differentiated through its own graph
    (the max shift, exp, the sum and the division), a row's gradient of softmax(x).sum() came out near 3e-7 where
    these formulas give torch's 0: the terms that cancel are rounded apart before they meet."""
    if value.ndim == 0 or not dtypes.is_float(value.dtype):
        return value
    from tinycore.gradient import with_gradient
    wrap = type(value)._wrap

    def rule(node: UOp, gradient: UOp) -> dict[UOp, UOp]:
        upstream, result = wrap(gradient), wrap(node)
        if logarithmic:
            found = upstream - result.exp() * upstream.sum(axis, keepdim=True)
        else:
            found = result * (upstream - (upstream * result).sum(axis, keepdim=True))
        return {source.uop: found.cast(source.dtype).uop}

    return wrap(with_gradient(value.uop, rule), value.requires_grad)


class NNMixin(IndexingMixin):
    """Neural-network building blocks of Tensor."""

    # ---- matrix products ----

    def dot(self, w: Self, dtype: DTypeLike | None = None) -> Self:
        """Matrix product with numpy's rules for 1-D operands and broadcast batch axes."""
        if not _is_tensor(w):
            raise TypeError(f"matmul needs a Tensor operand, got {type(w).__name__}")
        if self.ndim == 0 or w.ndim == 0:
            raise ShapeError(f"matmul needs tensors with at least 1 dimension, got shapes {self.shape} and {w.shape}")
        left = self.unsqueeze(0) if self.ndim == 1 else self
        right = w.unsqueeze(-1) if w.ndim == 1 else w
        if left.shape[-1] != right.shape[-2]:
            raise ShapeError(f"cannot matmul shapes {self.shape} and {w.shape}: inner sizes {left.shape[-1]} and "
                             f"{right.shape[-2]} differ")
        accumulate = optional_dtype(dtype)
        result_dtype = accumulate or least_upper_dtype(self.dtype, w.dtype)
        panel = _matmul_panel(left, right) if accumulate is None else None
        if left.dtype == right.dtype and left.dtype != dtypes.bool and \
                all(isinstance(size, int) for size in (*left.shape, *right.shape)):
            # the common case built on nodes directly (tinycore.tensor.matmul): the same graph, a fraction of the
            # Python time
            if panel is not None:
                node = multiply_panels(left.uop, right.uop, panel, sum_acc_dtype(left.dtype), result_dtype)
            else:
                node = multiply_in_place(left.uop, right.uop, accumulate or sum_acc_dtype(left.dtype), result_dtype)
            result = left._result(node, right)
        else:
            result = _multiply_with_tensors(left, right, panel, accumulate, result_dtype)
        if self.ndim == 1:
            result = result.squeeze(-2)
        if w.ndim == 1:
            result = result.squeeze(-1)
        return result

    def matmul(self, x: Self, reverse: bool = False, dtype: DTypeLike | None = None) -> Self:
        """self @ x (x @ self when `reverse`)."""
        return x.dot(self, dtype=dtype) if reverse else self.dot(x, dtype=dtype)

    def __matmul__(self, x: Self) -> Self:
        """self @ x."""
        return self.matmul(x)

    def __rmatmul__(self, x: Self) -> Self:
        """x @ self."""
        return self.matmul(x, True)

    def linear(self, weight: Self, bias: Self | None = None, dtype: DTypeLike | None = None) -> Self:
        """self @ weight + bias, with weight of shape (in, out) (or elementwise for a 1-D weight)."""
        result = self * weight if weight.ndim == 1 else self.dot(weight, dtype=dtype)
        return result if bias is None else result + bias

    def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Self:
        """The diagonal over axes dim1 and dim2 (shifted by `offset`), as a new last axis."""
        first, second = resolve_axis(dim1, self.ndim), resolve_axis(dim2, self.ndim)
        if first == second:
            raise ValueError(f"diagonal dim1 and dim2 must differ, both are {dim1}")
        rest = [axis for axis in range(self.ndim) if axis not in (first, second)]
        moved = self.permute(rest + [first, second])
        rows, columns = moved.shape[-2], moved.shape[-1]
        length = max(0, min(rows, columns - offset) if offset >= 0 else min(rows + offset, columns))
        flat = moved.flatten(-2)
        if length == 0:
            return flat.shrink(tuple(None for _ in rest) + ((0, 0),))
        start = offset if offset >= 0 else -offset * columns
        return flat._slice_axis(flat.ndim - 1, start, start + (length - 1) * (columns + 1) + 1, columns + 1)

    def diag(self) -> Self:
        """A square matrix with this 1-D tensor on its diagonal."""
        if self.ndim != 1:
            raise ValueError(f"diag needs a 1-D tensor, got shape {self.shape}")
        size = self.shape[0]
        eye = type(self).eye(size, dtype=dtypes.bool, device=self.device)
        return eye.where(self.reshape(1, size), self._const(0, shape=()))

    @classmethod
    def einsum(cls, formula: str, *operands: Any, dtype: DTypeLike | None = None) -> Self:
        """Einstein summation, e.g. Tensor.einsum('ij,jk->ik', a, b); supports '...' and repeated indices."""
        tensors = list(operands[0]) if len(operands) == 1 and isinstance(operands[0], (list, tuple)) else \
            list(operands)
        text = formula.replace(" ", "")
        inputs_text, output_text = text.split("->") if "->" in text else (text, None)
        specs = inputs_text.split(",")
        if len(specs) != len(tensors):
            raise ArgumentError(f"einsum formula {formula!r} names {len(specs)} operands, {len(tensors)} were given")
        for spec in specs + ([output_text] if output_text is not None else []):
            if spec.count("...") > 1 or spec.replace("...", "").count("."):
                raise ArgumentError(f"einsum operand {spec!r} of {formula!r} has more than one '...' (or a stray "
                                    "'.'): each operand may hold one ellipsis")
        ellipsis_letters = [chr(0x3B1 + index) for index in range(16)]
        ellipsis_dims = 0
        expanded_specs = []
        for spec, tensor in zip(specs, tensors, strict=True):
            if "..." in spec:
                count = tensor.ndim - (len(spec) - 3)
                ellipsis_dims = max(ellipsis_dims, count)
                expanded_specs.append((spec, count))
            else:
                if len(spec) != tensor.ndim:
                    raise ArgumentError(f"einsum operand {spec!r} has {len(spec)} indices but the tensor has "
                                     f"{tensor.ndim} dimensions (shape {tensor.shape})")
                expanded_specs.append((spec, 0))
        letters_of = []
        for (spec, count) in expanded_specs:
            if "..." in spec:
                before, after = spec.split("...")
                spec = before + "".join(ellipsis_letters[ellipsis_dims - count:ellipsis_dims]) + after
            letters_of.append(spec)
        ellipsis_part = "".join(ellipsis_letters[:ellipsis_dims])
        if output_text is None:
            counts: dict[str, int] = {}
            for spec in letters_of:
                for letter in spec:
                    counts[letter] = counts.get(letter, 0) + 1
            output = ellipsis_part + "".join(sorted(letter for letter, count in counts.items()
                                                    if count == 1 and letter not in ellipsis_letters))
        else:
            output = output_text.replace("...", ellipsis_part)
        prepared = []
        for spec, tensor in zip(letters_of, tensors, strict=True):
            while len(set(spec)) != len(spec):
                letter = next(letter for letter in spec if spec.count(letter) > 1)
                first = spec.index(letter)
                second = spec.index(letter, first + 1)
                tensor = tensor.diagonal(0, first, second)
                spec = "".join(item for position, item in enumerate(spec) if position not in (first, second)) + letter
            prepared.append((spec, tensor))
        all_letters = list(dict.fromkeys(letter for spec, _ in prepared for letter in spec))
        for letter in output:
            if letter not in all_letters:
                raise ArgumentError(f"einsum output index {letter!r} does not appear in the inputs of {formula!r}")
        sizes: dict[str, int] = {}
        for spec, tensor in prepared:
            for letter, size in zip(spec, tensor.shape, strict=True):
                if letter in sizes and size != sizes[letter] and 1 not in (size, sizes[letter]):
                    raise ArgumentError(f"einsum index {letter!r} has sizes {sizes[letter]} and {size} in {formula!r}")
                sizes[letter] = max(sizes.get(letter, size), size)
        aligned = []
        for spec, tensor in prepared:
            order = [spec.index(letter) for letter in all_letters if letter in spec]
            moved = tensor.permute(order) if order else tensor
            aligned.append(moved.reshape([sizes[letter] if letter in spec and tensor.shape[spec.index(letter)] != 1
                                          else 1 for letter in all_letters]))
        combined = functools.reduce(lambda left, right: left * right, aligned)
        combined = combined._broadcast_to(tuple(sizes[letter] for letter in all_letters))
        summed_axes = tuple(position for position, letter in enumerate(all_letters) if letter not in output)
        accumulate = optional_dtype(dtype)
        result_dtype = accumulate or combined.dtype
        reduced = combined.sum(summed_axes, dtype=accumulate or sum_acc_dtype(combined.dtype)).cast(result_dtype) \
            if summed_axes else combined
        remaining = [letter for letter in all_letters if letter in output]
        return reduced.permute([remaining.index(letter) for letter in output]) if output else reduced

    # ---- pooling windows ----

    def _pool_last(self, kernel: int, stride: int, dilation: int) -> Self:
        """Sliding windows over the last axis: (..., n) -> (..., out, kernel), as movement ops only."""
        length = self.shape[-1]
        span = dilation * (kernel - 1) + 1
        if isinstance(length, int) and span > length:
            raise ShapeError(f"window of {kernel} with dilation {dilation} (span {span}) does not fit an axis of "
                             f"size {length}")
        out = (length - span) // stride + 1
        lead = list(self.shape[:-1])
        if dilation == 1 and stride >= kernel:
            needed = out * stride
            pairs = [(0, 0)] * len(lead) + [(0, max(needed - length, 0))]
            trimmed = self._pad_constant(pairs, 0).shrink(tuple(None for _ in lead) + ((0, needed),))
            windows = trimmed.reshape(lead + [out, stride])
            return windows.shrink(tuple(None for _ in lead) + (None, (0, kernel)))
        repeated = self.unsqueeze(-2).expand(lead + [kernel, length]).reshape(lead + [kernel * length])
        padded = repeated._pad_constant([(0, 0)] * len(lead) + [(0, kernel * dilation)], 0)
        rows = padded.reshape(lead + [kernel, length + dilation])
        rows = rows.shrink(tuple(None for _ in lead) + (None, (0, length - span + 1)))
        if stride == 1 and not isinstance(out, int):  # a symbolic length: the rows are the windows already
            strided = rows
        else:
            strided = rows._slice_axis(rows.ndim - 1, 0, (out - 1) * stride + 1, stride)
        return strided.transpose(-1, -2)

    def _pool(self, kernel: Sequence[int], stride: int | Sequence[int] = 1,
              dilation: int | Sequence[int] = 1) -> Self:
        """Sliding windows over the last len(kernel) axes: (..., *spatial) -> (..., *out, *kernel)."""
        count = len(kernel)
        if self.ndim < count:
            raise ShapeError(f"pooling window {tuple(kernel)} needs at least {count} dimensions, got {self.shape}")
        strides, dilations = make_tuple(stride, count), make_tuple(dilation, count)
        if len(strides) != count or len(dilations) != count:
            raise ValueError(f"stride {stride} and dilation {dilation} need {count} values")
        lead = self.ndim - count
        result = self
        for index in reversed(range(count)):
            axis = lead + index
            order = [position for position in range(result.ndim) if position != axis] + [axis]
            result = result.permute(order)._pool_last(kernel[index], strides[index], dilations[index])
        outs = [lead + 2 * (count - 1 - index) for index in range(count)]
        return result.permute(list(range(lead)) + outs + [position + 1 for position in outs])

    @staticmethod
    def _flat_padding(padding: int | Sequence[int], count: int) -> list[int]:
        """Padding as a flat (left, right, top, bottom, ...) list for the last `count` axes."""
        if isinstance(padding, int):
            return [padding] * (2 * count)
        values = list(padding)
        if len(values) == count:
            return [value for value in reversed(values) for _ in range(2)]
        if len(values) == 2 * count:
            return values
        raise ValueError(f"padding {padding} needs 1, {count} or {2 * count} values")

    # ---- convolution ----

    def conv2d(self, weight: Self, bias: Self | None = None, groups: int = 1, stride: Ints = 1,
               dilation: Ints = 1, padding: Ints = 0, dtype: DTypeLike | None = None) -> Self:
        """Convolution (any number of spatial axes) of (batch, in_channels, *spatial) with weight
        (out_channels, in_channels / groups, *kernel)."""
        spatial = weight.ndim - 2
        if spatial < 1 or self.ndim != weight.ndim:
            raise ShapeError(f"conv2d input {self.shape} and weight {weight.shape} need the same number (>= 3) of "
                             "dimensions: (batch, channels, *spatial) and (out, in / groups, *kernel)")
        batch, in_channels = self.shape[:2]
        out_channels, group_channels = weight.shape[:2]
        kernel = tuple(weight.shape[2:])
        if in_channels != groups * group_channels:
            raise ShapeError(f"conv2d input has {in_channels} channels but weight {weight.shape} with groups={groups}"
                             f" expects {groups * group_channels}")
        if out_channels % groups != 0:
            raise ShapeError(f"conv2d out_channels {out_channels} is not divisible by groups={groups}")
        accumulate = optional_dtype(dtype)
        result_dtype = accumulate or least_upper_dtype(self.dtype, weight.dtype)
        flat_padding = self._flat_padding(padding, spatial)
        strides, dilations = make_tuple(stride, spatial), make_tuple(dilation, spatial)
        # (before, after) per spatial axis, first axis first
        axis_pairs = [(flat_padding[2 * index], flat_padding[2 * index + 1]) for index in reversed(range(spatial))]
        if folds_strides(self, weight, groups, strides, dilations, flat_padding, accumulate):
            result = space_to_depth(self, weight, strides, axis_pairs, groups)
            return result if bias is None else result + bias.reshape([1, -1] + [1] * spatial)
        source, copied_pairs = self, None
        if pads_into_a_copy(self, flat_padding):
            copied_pairs = axis_pairs
            source, flat_padding = self.pad(flat_padding).contiguous(), [0] * len(flat_padding)
        elif not any(flat_padding) and loops_over_rows(self):
            copied_pairs = [(0, 0)] * spatial  # no padding: the direct input gradient applies all the same
        pairs = [(0, 0), (0, 0)] + [(flat_padding[2 * index], flat_padding[2 * index + 1])
                                    for index in reversed(range(spatial))]
        if source.dtype == weight.dtype and source.dtype != dtypes.bool and isinstance(groups, int) and \
                all(isinstance(size, int) for size in (*source.shape, *weight.shape)) and \
                all(isinstance(amount, int) and amount >= 0 for amount in flat_padding) and \
                len(strides) == len(dilations) == spatial and \
                all(isinstance(step, int) and step >= 1 for step in (*strides, *dilations)) and \
                all(size + before + after >= dilation_step * (window - 1) + 1 for size, (before, after), window,
                    dilation_step in zip(source.shape[2:], pairs[2:], kernel, dilations, strict=True)):
            # the common case built on nodes directly (tinycore.tensor.convolution): the same graph, a fraction of
            # the Python time
            channels_last = copied_pairs is not None and result_dtype == source.dtype and \
                channels_last_wins(source, weight, groups, strides, dilations, pairs, accumulate)
            if channels_last:
                node = convolve_channels_last(source.uop, weight.uop, sum_acc_dtype(source.dtype), result_dtype)
            else:
                node = convolve(source.uop, weight.uop, groups, pairs, strides, dilations,
                                accumulate or sum_acc_dtype(source.dtype), result_dtype)
            if copied_pairs is not None and accumulate is None and all(step == 1 for step in strides) and \
                    all(before <= step * (window - 1) and after <= step * (window - 1)
                        for (before, after), window, step in zip(copied_pairs, kernel, dilations, strict=True)):
                read = source.uop if channels_last or weight_gradient_channels_last(source, weight, groups, dilations) \
                    else None
                # rows that fill their vectors poorly: the input gradient summed channels last, stored in place
                stored_in_place = not channels_last and input_gradient_channels_last(self, weight, groups, dilations)
                node = with_direct_input_gradient(node, self.uop, weight.uop, copied_pairs, sum_acc_dtype(self.dtype),
                                                  groups, dilations, read, channels_last or stored_in_place,
                                                  stored_in_place)
            result = source._result(node, weight)
        else:
            result = source._convolve_with_tensors(weight, groups, flat_padding, stride, dilation, accumulate,
                                                   result_dtype)
        return result if bias is None else result + bias.reshape([1, -1] + [1] * spatial)

    def _convolve_with_tensors(self, weight: Self, groups: int, flat_padding: list[int], stride: Ints,
                               dilation: Ints, accumulate: DType | None, result_dtype: DType) -> Self:
        """conv2d without its bias, spelled in Tensor operations: mixed dtypes, negative padding, symbolic shapes
        and the errors of bad strides or windows; the reference that tinycore.tensor.convolution matches."""
        spatial = weight.ndim - 2
        batch, out_channels, group_channels = self.shape[0], weight.shape[0], weight.shape[1]
        kernel = tuple(weight.shape[2:])
        windows = self.pad(flat_padding)._pool(kernel, stride, dilation)  # (batch, in, *out, *kernel)
        outs = list(windows.shape[2:2 + spatial])
        windows = windows.reshape([batch, groups, 1, group_channels] + outs + list(kernel))
        order = [0, 1, 2] + list(range(4, 4 + spatial)) + [3] + list(range(4 + spatial, 4 + 2 * spatial))
        windows = windows.permute(order)  # (batch, groups, 1, *out, group_channels, *kernel)
        filters = weight.reshape([1, groups, out_channels // groups] + [1] * spatial + [group_channels] + list(kernel))
        products = windows * filters
        reduce_axes = tuple(range(3 + spatial, products.ndim))
        result = products.sum(reduce_axes, dtype=accumulate or sum_acc_dtype(products.dtype))
        return result.cast(result_dtype).reshape([batch, out_channels] + outs)

    def conv_transpose2d(self, weight: Self, bias: Self | None = None, groups: int = 1, stride: Ints = 1,
                         dilation: Ints = 1, padding: Ints = 0, output_padding: Ints = 0) -> Self:
        """Transposed convolution with weight (in_channels, out_channels / groups, *kernel)."""
        spatial = weight.ndim - 2
        if spatial < 1 or self.ndim != weight.ndim:
            raise ShapeError(f"conv_transpose2d input {self.shape} and weight {weight.shape} need the same number "
                             "(>= 3) of dimensions")
        in_channels = weight.shape[0]
        if self.shape[1] != in_channels or in_channels % groups != 0:
            raise ShapeError(f"conv_transpose2d input has {self.shape[1]} channels, weight {weight.shape} expects "
                             f"{in_channels} (divisible by groups={groups})")
        kernel = weight.shape[2:]
        strides, dilations = make_tuple(stride, spatial), make_tuple(dilation, spatial)
        paddings, extra = make_tuple(padding, spatial), make_tuple(output_padding, spatial)
        if transposes_by_phases(self, weight, groups, strides, dilations) and \
                all(isinstance(size, int) for size in (*paddings, *extra)):
            result = conv_transpose_by_phases(self, weight, groups, strides, paddings, extra)
            return result if bias is None else result + bias.reshape([1, -1] + [1] * spatial)
        filters = weight.reshape([groups, in_channels // groups] + list(weight.shape[1:])).transpose(1, 2)
        filters = filters.flip(tuple(range(3, 3 + spatial)))
        filters = filters.reshape([groups * weight.shape[1], in_channels // groups] + list(kernel))
        spread = self
        for index in range(spatial):
            axis = 2 + index
            size = spread.shape[axis]
            if strides[index] > 1 and size > 0:
                full = (size - 1) * strides[index] + 1
                spread = spread._unslice_axis(axis, full, 0, full, strides[index], 0)
        pads: list[tuple[int, int]] = [(0, 0), (0, 0)]
        for index in range(spatial):
            edge = dilations[index] * (kernel[index] - 1) - paddings[index]
            pads.append((edge, edge + extra[index]))
        spread = spread.pad(pads)
        if (any(step > 1 for step in strides) or any(pair != (0, 0) for pair in pads)) and loops_over_rows(self):
            # a copy of the spread, padded input: read as a view, every load of the convolution is gated by the
            # stride and padding masks and no tile applies (16x32x16x16 * 32x16x4x4, stride 2: 83 ms at 8 GFLOPS
            # for the forward alone); from plain memory it is a stride-1 convolution like any other, the zeros
            # between the input's rows and columns multiplied with the rest
            spread = spread.contiguous()
        return spread.conv2d(filters, bias, groups=groups, dilation=dilations)

    # ---- pooling ----

    def _pool_setup(self, kernel_size: Ints, stride: Ints | None, dilation: Ints, padding: Ints,
                    ceil_mode: bool) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], list[int], list[int]]:
        """Kernel, stride, dilation, explicit flat padding and the extra right padding that ceil_mode needs."""
        kernel = make_tuple(kernel_size, 2)
        count = len(kernel)
        strides = kernel if stride is None or stride == () else make_tuple(stride, count)
        dilations = make_tuple(dilation, count)
        flat = self._flat_padding(padding, count)
        extra = [0] * count
        if ceil_mode:
            for index in range(count):
                size = self.shape[self.ndim - count + index]
                before = flat[2 * (count - 1 - index)]
                after = flat[2 * (count - 1 - index) + 1]
                span = dilations[index] * (kernel[index] - 1) + 1
                total = size + before + after
                out = -(-(total - span) // strides[index]) + 1
                if (out - 1) * strides[index] >= size + before:
                    out -= 1
                extra[index] = max(0, (out - 1) * strides[index] + span - total)
        return kernel, strides, dilations, flat, extra

    @staticmethod
    def _extra_flat(extra: list[int]) -> list[int]:
        """Right-only padding for the last axes as a flat pad list."""
        return [value for amount in reversed(extra) for value in (0, amount)]

    @overload
    def max_pool2d(self, kernel_size: Ints = (2, 2), stride: Ints | None = None, dilation: Ints = 1,
                   padding: Ints = 0, ceil_mode: bool = False, return_indices: Literal[False] = False) -> Self: ...

    @overload
    def max_pool2d(self, kernel_size: Ints = (2, 2), stride: Ints | None = None, dilation: Ints = 1,
                   padding: Ints = 0, ceil_mode: bool = False, *,
                   return_indices: Literal[True]) -> tuple[Self, Self]: ...

    def max_pool2d(self, kernel_size: Ints = (2, 2), stride: Ints | None = None, dilation: Ints = 1,
                   padding: Ints = 0, ceil_mode: bool = False,
                   return_indices: bool = False) -> Self | tuple[Self, Self]:
        """Maximum over sliding windows of the last len(kernel_size) axes (optionally with flat indices)."""
        kernel, strides, dilations, flat, extra = self._pool_setup(kernel_size, stride, dilation, padding, ceil_mode)
        count = len(kernel)
        lowest = dtypes.min(self.dtype)
        padded = self.pad(flat, value=lowest).pad(self._extra_flat(extra), value=lowest)
        windows = padded._pool(kernel, strides, dilations)
        window_axes = tuple(range(windows.ndim - count, windows.ndim))
        result = windows.max(window_axes)
        if not return_indices:
            return result
        spatial = self.shape[-count:]
        positions = type(self).arange(math.prod(spatial), dtype=dtypes.int32, device=self.device).reshape(spatial)
        positions = positions.pad(flat, value=-1).pad(self._extra_flat(extra), value=-1)._pool(kernel, strides,
                                                                                                dilations)
        matches = windows.eq(result.reshape(result.shape + (1,) * count))
        big = math.prod(spatial) + 1
        indices = matches.where(positions._broadcast_to(windows.shape), big).min(window_axes)
        return result, indices

    def avg_pool2d(self, kernel_size: Ints = (2, 2), stride: Ints | None = None, dilation: Ints = 1,
                   padding: Ints = 0, ceil_mode: bool = False, count_include_pad: bool = True) -> Self:
        """Mean over sliding windows of the last len(kernel_size) axes."""
        kernel, strides, dilations, flat, extra = self._pool_setup(kernel_size, stride, dilation, padding, ceil_mode)
        count = len(kernel)
        source = self._float()
        windows = source.pad(flat).pad(self._extra_flat(extra))._pool(kernel, strides, dilations)
        window_axes = tuple(range(windows.ndim - count, windows.ndim))
        ones = type(self).ones(self.shape[-count:], dtype=source.dtype, device=self.device)
        ones = ones.pad(flat, value=1.0 if count_include_pad else 0.0).pad(self._extra_flat(extra))
        divisor = ones._pool(kernel, strides, dilations).sum(tuple(range(count, 2 * count)))
        return windows.sum(window_axes) / divisor

    def max_unpool2d(self, indices: Self, kernel_size: Ints = (2, 2), stride: Ints | None = None,
                     dilation: Ints = 1, padding: Ints = 0, output_size: Sequence[int] | None = None) -> Self:
        """The inverse of max_pool2d with return_indices: values placed at their flat indices, zeros elsewhere."""
        kernel = make_tuple(kernel_size, 2)
        count = len(kernel)
        strides = kernel if stride is None else make_tuple(stride, count)
        dilations, paddings = make_tuple(dilation, count), make_tuple(padding, count)
        if output_size is None:
            output_size = tuple((size - 1) * strides[i] - 2 * paddings[i] + dilations[i] * (kernel[i] - 1) + 1
                                for i, size in enumerate(self.shape[-count:]))
        spatial = tuple(output_size)[-count:]
        total = math.prod(spatial)
        flat_values = self.flatten(-count)
        flat_indices = indices.flatten(-count)
        positions = type(self).arange(total, dtype=dtypes.int32, device=self.device)
        hits = flat_indices.unsqueeze(-1).eq(positions)
        placed = hits.where(flat_values.unsqueeze(-1), 0).sum(-2).cast(self.dtype)
        return placed.reshape(self.shape[:-count] + spatial)

    # ---- normalisation and softmax ----

    def softmax(self, axis: int = -1, dtype: DTypeLike | None = None) -> Self:
        """exp(self) normalised to sum 1 along `axis`."""
        if dtype is None and fast_row_function(self.uop):
            value = self._result(softmax_nodes(self.uop, resolve_axis(axis, self.ndim)))
            return _with_row_gradient(value, self, axis, logarithmic=False)
        source = self.cast(dtype) if dtype is not None else self._float()
        shifted = source - source.max(axis, keepdim=True)
        exponent = shifted.exp()
        return _with_row_gradient(exponent / exponent.sum(axis, keepdim=True), source, axis, logarithmic=False)

    def log_softmax(self, axis: int = -1, dtype: DTypeLike | None = None) -> Self:
        """log(softmax(self)) along `axis`, computed stably."""
        if dtype is None and fast_row_function(self.uop):
            value = self._result(log_softmax_nodes(self.uop, resolve_axis(axis, self.ndim)))
            return _with_row_gradient(value, self, axis, logarithmic=True)
        source = self.cast(dtype) if dtype is not None else self._float()
        shifted = source - source.max(axis, keepdim=True)
        return _with_row_gradient(shifted - shifted.exp().sum(axis, keepdim=True).log(), source, axis,
                                  logarithmic=True)

    def softmin(self, axis: int = -1, dtype: DTypeLike | None = None) -> Self:
        """softmax(-self)."""
        return (-self._float()).softmax(axis, dtype)

    def layernorm(self, axis: int | tuple[int, ...] = -1, eps: float = 1e-05) -> Self:
        """(self - mean) / sqrt(var + eps) over `axis` (no affine parameters)."""
        centered = self - self.mean(axis, keepdim=True)
        return centered * (centered * centered).mean(axis, keepdim=True).add(eps).rsqrt()

    def batchnorm(self, weight: Self | None, bias: Self | None, mean: Self, invstd: Self,
                  axis: int | tuple[int, ...] = 1) -> Self:
        """(self - mean) * invstd * weight + bias with the statistics laid along `axis`."""
        axes = resolve_axes(axis, self.ndim)
        shape = tuple(size if index in axes else 1 for index, size in enumerate(self.shape))
        result = self - mean.reshape(shape)
        if weight is not None:
            result = result * weight.reshape(shape)
        result = result * (invstd.reshape(shape) if invstd.ndim == len(axes) else invstd)
        return result + bias.reshape(shape) if bias is not None else result

    def normalize(self, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Self:
        """self divided by its p-norm along `dim` (at least eps); as torch, p=0 counts the non-zero elements and
        p=inf takes the largest magnitude."""
        if p == 0:
            norm = self.ne(0).sum(dim, keepdim=True).cast(self.dtype if dtypes.is_float(self.dtype)
                                                           else dtypes.default_float)
        elif p == math.inf:
            norm = self.abs().max(dim, keepdim=True)
        else:
            norm = (self.abs() ** p).sum(dim, keepdim=True) ** (1 / p)
        return self / norm.maximum(eps)

    # ---- encodings, dropout, masks ----

    def one_hot(self, num_classes: int = -1) -> Self:
        """A new last axis of `num_classes` with 1 at each element's class (int32)."""
        if not dtypes.is_int(self.dtype):
            raise DTypeMismatchError(f"one_hot needs an integer tensor, got {self.dtype}")
        if num_classes == -1:
            num_classes = int(self.max().item()) + 1
        if not isinstance(num_classes, int) or num_classes < 0:
            raise ArgumentError(f"one_hot num_classes must be a non-negative int, got {num_classes!r}")
        classes = type(self).arange(num_classes, dtype=self.dtype, device=self.device)
        return self.unsqueeze(-1).eq(classes).where(1, 0)

    def dropout(self, p: float = 0.5) -> Self:
        """Zero each element with probability p and scale the rest by 1/(1-p) when training
        (Context(TRAINING=1)); the identity otherwise."""
        if not 0 <= p <= 1:
            raise ValueError(f"dropout probability must be in [0, 1], got {p}")
        if not TRAINING or p == 0:
            return self
        if p == 1:
            return self.zeros_like()
        keep = (self.rand_like(dtype=dtypes.default_float, contiguous=False) >= p).contiguous()
        return keep.where(self, 0) / (1.0 - p)

    def triu(self, diagonal: int = 0) -> Self:
        """Elements on and above the `diagonal`-th diagonal of the last two axes; zeros below."""
        return self._triangle(diagonal, upper=True)

    def tril(self, diagonal: int = 0) -> Self:
        """Elements on and below the `diagonal`-th diagonal of the last two axes; zeros above."""
        return self._triangle(diagonal, upper=False)

    def _triangle(self, diagonal: int, upper: bool) -> Self:
        """The upper or lower triangle of the last two axes."""
        if self.ndim < 2:
            raise ValueError(f"triu/tril need at least 2 dimensions, got shape {self.shape}")
        rows, columns = self.shape[-2:]
        # a multi-device tensor: the mask is made on the first device and copied to every one
        where = self.device[0] if isinstance(self.device, tuple) else self.device
        def positions(tensor: type[Self], count: sint) -> Self:
            """0 .. count-1; for a symbolic count, the first `count` of its largest value's positions."""
            if isinstance(count, int):
                return tensor.arange(count, dtype=dtypes.int32, device=where)
            return tensor.arange(int(count.vmax), dtype=dtypes.int32, device=where)[:count]
        row = positions(type(self), rows).reshape(rows, 1)
        column = positions(type(self), columns).reshape(1, columns)
        mask = (column - row >= diagonal) if upper else (column - row <= diagonal)
        if isinstance(self.device, tuple):
            mask = mask.to(self.device)
        return mask.where(self, self._const(0, shape=()))

    # ---- losses ----

    def _do_reduction(self, reduction: str) -> Self:
        """The loss values reduced by 'mean', 'sum' or 'none'."""
        _check_reduction(reduction)
        if reduction == "mean":
            return self.mean()
        return self.sum() if reduction == "sum" else self

    def sparse_categorical_crossentropy(self, Y: Self, ignore_index: int = -1,  # noqa: N803
                                        label_smoothing: float = 0.0, reduction: str = "mean") -> Self:
        """Cross-entropy of logits (classes on the last axis) against integer labels Y."""
        _check_reduction(reduction)
        _check_smoothing(label_smoothing)
        if tuple(Y.shape) != tuple(self.shape[:-1]):
            raise BroadcastError(f"labels of shape {Y.shape} do not match logits of shape {self.shape} "
                                 "(expected the logits' shape without the last axis)")
        log_probs = self.log_softmax()
        keep = Y.ne(ignore_index)
        classes = type(self).arange(self.shape[-1], dtype=dtypes.int32, device=self.device)
        chosen = Y.cast(dtypes.int32).unsqueeze(-1).eq(classes) & keep.unsqueeze(-1)
        picked = chosen.where(log_probs, 0.0).sum(-1)
        smoothing = label_smoothing * log_probs.mean(-1) * keep
        losses = -(1 - label_smoothing) * picked - smoothing
        if reduction == "none":
            return losses
        if reduction == "sum":
            return losses.sum()
        return losses.sum() / keep.sum().cast(losses.dtype)

    def cross_entropy(self, Y: Self, reduction: str = "mean",  # noqa: N803
                      label_smoothing: float = 0.0) -> Self:
        """Cross-entropy of logits (classes on axis 1) against class indices or probabilities Y."""
        _check_reduction(reduction)
        _check_smoothing(label_smoothing)
        classes = self.shape[1] if self.ndim > 1 else self.shape[0]
        axis = 1 if self.ndim > 1 else 0
        if Y.ndim == self.ndim and tuple(Y.shape) != tuple(self.shape):
            raise ShapeError(f"cross_entropy probabilities Y {Y.shape} must have the input's shape {self.shape} "
                             "(or give class indices, one axis fewer)")
        if Y.ndim < self.ndim:
            target = Y.one_hot(classes)
            if self.ndim > 1:
                target = target.permute([0, target.ndim - 1] + list(range(1, target.ndim - 1)))
        else:
            target = Y
        target = (1 - label_smoothing) * target + label_smoothing / classes
        losses = -(self.log_softmax(axis) * target).sum(axis)
        return losses._do_reduction(reduction)

    def nll_loss(self, Y: Self, weight: Self | None = None, ignore_index: int | None = None,  # noqa: N803
                 reduction: str = "mean") -> Self:
        """Negative log likelihood of log-probabilities (classes on axis 1) at integer labels Y."""
        _check_reduction(reduction)
        axis = 1 if self.ndim > 1 else 0
        classes = self.shape[axis]
        target = Y.one_hot(classes)
        if self.ndim > 1:
            target = target.permute([0, target.ndim - 1] + list(range(1, target.ndim - 1)))
        weights = target.cast(self.dtype) if weight is None else \
            target * weight.reshape([classes if index == axis else 1 for index in range(self.ndim)])
        if ignore_index is not None:
            keep = Y.ne(ignore_index).unsqueeze(axis)
            weights = weights * keep
        losses = -(self * weights).sum(axis)
        if reduction == "mean":
            return losses.sum() / weights.sum()
        return losses.sum() if reduction == "sum" else losses

    def binary_crossentropy(self, Y: Self, reduction: str = "mean") -> Self:  # noqa: N803
        """Binary cross-entropy of probabilities against targets Y (logs limited at -100, like torch)."""
        losses = -(Y * self.log().maximum(-100) + (1 - Y) * (1 - self).log().maximum(-100))
        return losses._do_reduction(reduction)

    def binary_crossentropy_logits(self, Y: Self, reduction: str = "mean",  # noqa: N803
                                   pos_weight: Self | None = None) -> Self:
        """Binary cross-entropy of logits against targets Y, computed stably (optional positive weight)."""
        softplus_negative = (1 + (-self.abs()).exp()).log() + (-self).maximum(0)
        if pos_weight is None:
            losses = (1 - Y) * self + softplus_negative
        else:
            losses = (1 - Y) * self + (1 + (pos_weight - 1) * Y) * softplus_negative
        return losses._do_reduction(reduction)

    # ---- interpolation and attention ----

    def interpolate(self, size: tuple[int, ...], mode: str = "linear", align_corners: bool = False) -> Self:
        """Resize the last len(size) axes to `size` ('linear', 'nearest' or 'nearest-exact')."""
        if mode not in ("linear", "nearest", "nearest-exact"):
            raise ValueError(f"interpolate mode must be 'linear', 'nearest' or 'nearest-exact', got {mode!r}")
        sizes = tuple(size)
        if not 0 < len(sizes) <= self.ndim:
            raise ValueError(f"interpolate size {sizes} must name 1 to {self.ndim} axes")
        if mode == "linear" and self.dtype == dtypes.uint8:
            return self._interpolate_bytes(sizes, align_corners)
        result = self._float() if mode == "linear" else self
        for offset, target in enumerate(sizes):
            axis = self.ndim - len(sizes) + offset
            matrix = _interpolation_matrix(self.shape[axis], target, mode, align_corners)
            weights = type(self)(matrix, device=self.device, dtype=result.dtype if mode == "linear" else
                                 dtypes.float32) if matrix else type(self).zeros(target, self.shape[axis])
            moved = result.transpose(axis, -1).unsqueeze(-2)
            if mode == "linear":
                combined = (moved * weights).sum(-1)
            else:
                combined = weights.cast(dtypes.bool).where(moved, moved._const(0, shape=())).sum(-1)
                combined = combined.cast(self.dtype) if self.dtype != dtypes.bool else combined.cast(dtypes.bool)
            result = combined.transpose(axis, -1)
        return result

    def _interpolate_bytes(self, sizes: tuple[int, ...], align_corners: bool) -> Self:
        """Linear interpolation of a uint8 image, staying uint8 as torch's: one axis at a time from the last, each
        output the lower tap plus the difference to the upper one times the fraction in 7-bit fixed point, rounded
        (torch computes uint8 images in fixed point, and rounding a float result differs from it in ~15% of
        pixels)."""
        result = self
        for offset in reversed(range(len(sizes))):
            axis = self.ndim - len(sizes) + offset
            low, high, steps = _fixed_point_taps(self.shape[axis], sizes[offset], align_corners)
            moved = result.cast(dtypes.int32).transpose(axis, -1)
            if not low:
                result = type(self).zeros(*moved.shape[:-1], 0, dtype=dtypes.uint8).transpose(axis, -1)
                continue
            lower, upper = moved[..., low], moved[..., high]
            fraction = type(self)(steps, device=self.device, dtype=dtypes.int32)
            result = (lower + ((upper - lower) * fraction + 64) // 128).cast(dtypes.uint8).transpose(axis, -1)
        return result

    def scaled_dot_product_attention(self, key: Self, value: Self, attn_mask: Self | None = None,
                                     dropout_p: float = 0.0, is_causal: bool = False,
                                     enable_gqa: bool = False) -> Self:
        """softmax(self @ key^T / sqrt(d) + mask) @ value."""
        if enable_gqa and key.shape[-3] != self.shape[-3]:
            key = key.repeat_interleave(self.shape[-3] // key.shape[-3], dim=-3)
            value = value.repeat_interleave(self.shape[-3] // value.shape[-3], dim=-3)
        scores = self.matmul(key.transpose(-2, -1)) / math.sqrt(self.shape[-1])
        if is_causal:
            if attn_mask is not None:
                raise ArgumentError("scaled_dot_product_attention takes attn_mask or is_causal, not both")
            attn_mask = type(self).ones(scores.shape[-2], scores.shape[-1], dtype=dtypes.bool,
                                        device=self.device).tril()
        if attn_mask is not None:
            scores = attn_mask.where(scores, -math.inf) if attn_mask.dtype == dtypes.bool else scores + attn_mask
        return scores.softmax(-1).dropout(dropout_p) @ value

    def newton_schulz(self, steps: int, params: tuple[float, ...], eps: float = 1e-07) -> Self:
        """The Newton-Schulz iteration toward the nearest semi-orthogonal matrix of the last two axes
        (X <- a X + (b A + c A A) X with A = X X^T), as the Muon optimizer uses it."""
        if self.ndim < 2:
            raise ValueError(f"newton_schulz needs at least 2 dimensions, got shape {self.shape}")
        first, second, third = params
        wide = self.shape[-2] > self.shape[-1]
        matrix = self.transpose(-2, -1) if wide else self
        matrix = matrix / (matrix.square().sum((-2, -1), keepdim=True).sqrt() + eps)
        for _ in range(steps):
            gram = matrix @ matrix.transpose(-2, -1)
            matrix = first * matrix + (second * gram + third * (gram @ gram)) @ matrix
        return matrix.transpose(-2, -1) if wide else matrix

    def sequential(self, ll: list[Callable[[Self], Self]]) -> Self:
        """The functions of `ll` applied in order."""
        return functools.reduce(lambda value, function: function(value), ll, self)



def _fixed_point_taps(source: int, target: int, align_corners: bool) -> tuple[list[int], list[int], list[int]]:
    """For each of `target` output positions of a linear interpolation from `source`: the lower and upper input
    positions and the upper one's weight in 1/128ths (the position found in exact integer arithmetic, its fraction
    rounded in float32)."""
    if source == 0 or target == 0:
        return [], [], []
    lows, highs, steps = [], [], []
    for position in range(target):
        if align_corners:
            numerator, denominator = position * (source - 1), max(target - 1, 1)
        else:  # (position + 1/2) * source / target - 1/2, over 2 * target
            numerator, denominator = (2 * position + 1) * source - target, 2 * target
        numerator = min(max(numerator, 0), (source - 1) * denominator)
        lows.append(numerator // denominator)
        highs.append(-(-numerator // denominator))
        # float64 results of float32 operands rounded to float32 are float32's own quotient and sum
        fraction = _float32(_float32(numerator % denominator) / _float32(denominator))
        steps.append(int(_float32(fraction * 128 + 0.5)))
    return lows, highs, steps


def _float32(value: float) -> float:
    """`value` rounded to the nearest float32."""
    rounded: float = struct.unpack("<f", struct.pack("<f", value))[0]
    return rounded


def _interpolation_matrix(source: int, target: int, mode: str, align_corners: bool) -> list[list[float]]:
    """The (target, source) matrix whose rows hold the interpolation weights of each output position."""
    matrix = [[0.0] * source for _ in range(target)]
    if source == 0:
        return matrix
    scale = source / target
    for position in range(target):
        if mode == "nearest":
            matrix[position][min(int(math.floor(position * scale)), source - 1)] = 1.0
        elif mode == "nearest-exact":
            matrix[position][min(int(math.floor((position + 0.5) * scale)), source - 1)] = 1.0
        else:
            if align_corners:
                coordinate = position * (source - 1) / (target - 1) if target > 1 else 0.0
            else:
                coordinate = max((position + 0.5) * scale - 0.5, 0.0)
            low = min(int(math.floor(coordinate)), source - 1)
            high = min(low + 1, source - 1)
            fraction = coordinate - low
            matrix[position][low] += 1.0 - fraction
            matrix[position][high] += fraction
    return matrix
