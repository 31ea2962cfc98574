"""Shape and data-movement ONNX operators: reshapes, slicing, gathers and scatters, padding, constants, ranges.

Ops whose output shape depends on tensor values (NonZero, Compress, Unique) read those values on the host.
"""
from __future__ import annotations

import math

import numpy as np

from tinycore.dtype import dtypes
from tinycore.helpers import prod
from tinycore.nn.onnx.common import (
    as_ints,
    axes_of,
    axis_of,
    constant_int,
    host_tensor,
    index_dtype,
    onnx_dtype,
    pairs_from_onnx_pads,
    scalar_of,
)
from tinycore.nn.onnx.registry import NodeContext, onnx_op
from tinycore.tensor import Tensor


def _from_numpy(array: np.ndarray, like: Tensor) -> Tensor:
    """A host result as a Tensor on the device of `like`."""
    return host_tensor(array, like.device)


@onnx_op("Shape", 1)
def shape(x: Tensor, start: int = 0, end: int | None = None) -> Tensor:
    """The int64 shape of x, optionally the dims [start, end)."""
    dims = [int(size) for size in x.shape]
    return host_tensor(np.array(dims[slice(start, end)], dtype=np.int64), x.device)


@onnx_op("Size", 1)
def size(x: Tensor) -> Tensor:
    """The int64 number of elements of x."""
    return host_tensor(np.array(prod(x.shape), dtype=np.int64), x.device)


@onnx_op("Reshape", 5, host_inputs=(1,))
def reshape(x: Tensor, shape: list[int], allowzero: int = 0) -> Tensor:
    """x with a new shape: -1 is inferred, 0 copies the input's dim unless `allowzero`."""
    target = [int(size) for size in as_ints(shape) or []]
    if not allowzero:
        target = [x.shape[index] if size == 0 else size for index, size in enumerate(target)]
    if -1 in target:
        known = prod([size for size in target if size != -1])
        target[target.index(-1)] = prod(x.shape) // known if known else 0
    return x.reshape(tuple(target))


@onnx_op("Flatten", 1)
def flatten(x: Tensor, axis: int = 1) -> Tensor:
    """x as a matrix: the dims before `axis` become rows, the rest columns."""
    axis = axis + x.ndim if axis < 0 else axis
    return x.reshape(prod(x.shape[:axis]), prod(x.shape[axis:]))


@onnx_op("Transpose", 1)
def transpose(x: Tensor, perm: list[int] | None = None) -> Tensor:
    """x with its axes permuted (reversed by default)."""
    return x.permute(perm if perm is not None else list(range(x.ndim))[::-1])


def _squeeze(x: Tensor, axes: list[int] | None) -> Tensor:
    if not axes:
        return x.reshape(tuple(size for size in x.shape if size != 1))
    chosen = set(axes_of(axes, x.ndim))
    return x.reshape(tuple(size for axis, size in enumerate(x.shape) if axis not in chosen))


@onnx_op("Squeeze", 1)
def squeeze_attribute(x: Tensor, axes: list[int] | None = None) -> Tensor:
    """x without the size-1 axes listed (all of them by default), axes as an attribute."""
    return _squeeze(x, axes)


@onnx_op("Squeeze", 13, host_inputs=(1,))
def squeeze(x: Tensor, axes: list[int] | None = None) -> Tensor:
    """x without the size-1 axes listed (all of them by default)."""
    return _squeeze(x, as_ints(axes))


def _unsqueeze(x: Tensor, axes: list[int]) -> Tensor:
    rank = x.ndim + len(axes)
    chosen = sorted(axes_of(axes, rank))
    sizes = list(x.shape)
    for axis in chosen:
        sizes.insert(axis, 1)
    return x.reshape(tuple(sizes))


@onnx_op("Unsqueeze", 1)
def unsqueeze_attribute(x: Tensor, axes: list[int]) -> Tensor:
    """x with size-1 axes inserted at `axes` (an attribute)."""
    return _unsqueeze(x, axes)


@onnx_op("Unsqueeze", 13, host_inputs=(1,))
def unsqueeze(x: Tensor, axes: list[int]) -> Tensor:
    """x with size-1 axes inserted at `axes` (of the output's rank)."""
    return _unsqueeze(x, as_ints(axes) or [])


@onnx_op("Concat", 1)
def concat(*values: Tensor, axis: int = 0) -> Tensor:
    """The inputs joined along `axis`."""
    axis = axis_of(axis, values[0].ndim)
    present = [value for value in values if value.shape[axis] != 0] or [values[0]]
    return present[0].cat(*present[1:], dim=axis) if len(present) > 1 else present[0]


def _split_sizes(length: int, count: int) -> list[int]:
    """Sizes of `count` pieces of `length`: equal, the last smaller when it does not divide."""
    piece = -(-length // count)
    sizes = [piece] * (length // piece) if piece else [0] * count
    if length % piece if piece else False:
        sizes.append(length % piece)
    return sizes + [0] * (count - len(sizes))


def _split(x: Tensor, axis: int, sizes: list[int] | None, count: int) -> tuple[Tensor, ...]:
    axis = axis_of(axis, x.ndim)
    if not sizes:
        sizes = _split_sizes(x.shape[axis], count)
    if sum(sizes) != x.shape[axis]:
        raise ValueError(f"split sizes {sizes} do not add up to the axis size {x.shape[axis]}")
    pieces, start = [], 0
    for piece in sizes:
        pieces.append(x[tuple([slice(None)] * axis + [slice(start, start + piece)])])
        start += piece
    return tuple(pieces)


@onnx_op("Split", 1, context=True)
def split_attribute(x: Tensor, split_input: list[int] | None = None, axis: int = 0, split: list[int] | None = None,
                    *, context: NodeContext) -> tuple[Tensor, ...]:
    """x cut along `axis` into the sizes `split` (an attribute), or into equal parts, one per output."""
    return _split(x, axis, split or as_ints(split_input), len(context.node.outputs))


@onnx_op("Split", 13, host_inputs=(1,), context=True)
def split(x: Tensor, split: list[int] | None = None, axis: int = 0, num_outputs: int | None = None, *,
          context: NodeContext) -> tuple[Tensor, ...]:
    """x cut along `axis` into the sizes `split`, or into `num_outputs` (or one per output) equal parts."""
    return _split(x, axis, as_ints(split), num_outputs or len(context.node.outputs))


def _slice(x: Tensor, starts: list[int], ends: list[int], axes: list[int] | None, steps: list[int] | None) -> Tensor:
    axes = axes_of(axes, x.ndim) if axes else list(range(len(starts)))
    steps = steps or [1] * len(starts)
    slices: list[slice] = [slice(None)] * x.ndim
    for axis, start, end, step in zip(axes, starts, ends, steps, strict=False):
        if step == 0:
            raise ValueError("Slice steps cannot be 0")
        size = x.shape[axis]
        start, end, _ = slice(int(start), int(end), int(step)).indices(size)
        slices[axis] = slice(start, end if end >= 0 else None, int(step))
    return x[tuple(slices)]


@onnx_op("Slice", 1)
def slice_attribute(x: Tensor, starts: list[int], ends: list[int], axes: list[int] | None = None) -> Tensor:
    """x[starts:ends] on `axes` (attributes, opset 1)."""
    return _slice(x, starts, ends, axes, None)


@onnx_op("Slice", 10, host_inputs=(1, 2, 3, 4))
def slice_(x: Tensor, starts: list[int], ends: list[int], axes: list[int] | None = None,
           steps: list[int] | None = None) -> Tensor:
    """x[starts:ends:steps] on `axes`, indices clamped as numpy clamps them."""
    return _slice(x, as_ints(starts) or [], as_ints(ends) or [], as_ints(axes), as_ints(steps))


def _positive_indices(indices: Tensor, size: int) -> Tensor:
    wide = index_dtype(indices.device)
    indices = indices.cast(wide) if indices.dtype != wide else indices
    return (indices < 0).where(indices + size, indices)


@onnx_op("Gather", 1)
def gather(x: Tensor, indices: Tensor, axis: int = 0) -> Tensor:
    """Entries of x along `axis` at `indices` (numpy's take): shape x[:axis] + indices + x[axis+1:]."""
    axis = axis_of(axis, x.ndim)
    known = constant_int(indices)
    if known is not None and -x.shape[axis] <= known < x.shape[axis]:
        # a fixed index (the q, k, v split of a packed attention projection) is a view of one slice: a tensor index
        # would compare every position with it and sum, a kernel with a reduction over the axis
        position = known % x.shape[axis]
        picked = x.shrink(tuple((position, position + 1) if dim == axis else None for dim in range(x.ndim)))
        if indices.ndim == 0:
            return picked.squeeze(axis)
        shape = x.shape[:axis] + (1,) * indices.ndim + x.shape[axis + 1:]
        return picked.reshape(shape).expand(x.shape[:axis] + indices.shape + x.shape[axis + 1:])
    indices = _positive_indices(indices, x.shape[axis])
    if indices.ndim == 0:
        return x[tuple([slice(None)] * axis + [indices.reshape(1)])].squeeze(axis)
    return x[tuple([slice(None)] * axis + [indices])]


@onnx_op("GatherElements", 11)
def gather_elements(x: Tensor, indices: Tensor, axis: int = 0) -> Tensor:
    """x's entries at `indices` along `axis` (torch.gather)."""
    axis = axis_of(axis, x.ndim)
    return x.gather(axis, _positive_indices(indices, x.shape[axis]))


def _linear_index(data_shape: tuple[int, ...], indices: Tensor, batch_dims: int) -> tuple[Tensor, int]:
    """Flat positions into data's dims [batch_dims, batch_dims + k) for index rows of length k, plus k."""
    depth = indices.shape[-1]
    dims = data_shape[batch_dims:batch_dims + depth]
    linear = None
    for position, size in enumerate(dims):
        part = _positive_indices(indices[..., position], size) * prod(dims[position + 1:])
        linear = part if linear is None else linear + part
    if linear is None:
        linear = Tensor.zeros(indices.shape[:-1], dtype=index_dtype(indices.device), device=indices.device)
    return linear, depth


@onnx_op("GatherND", 11)
def gather_nd(x: Tensor, indices: Tensor, batch_dims: int = 0) -> Tensor:
    """Slices of x at the index rows in the last axis of `indices`, over `batch_dims` shared leading axes."""
    linear, depth = _linear_index(x.shape, indices, batch_dims)
    batch, inner = prod(x.shape[:batch_dims]), prod(x.shape[batch_dims:batch_dims + depth])
    rest = x.shape[batch_dims + depth:]
    flat = x.reshape(batch * inner, *rest)
    offsets = Tensor.arange(batch, device=x.device, dtype=index_dtype(x.device)).reshape(
        *x.shape[:batch_dims], *[1] * (linear.ndim - batch_dims)) * inner if batch_dims else 0
    picked = flat[(linear + offsets).reshape(-1)]
    return picked.reshape(*indices.shape[:-1], *rest)


REDUCTIONS = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}


def _scatter_along(x: Tensor, axis: int, indices: Tensor, updates: Tensor, reduction: str) -> Tensor:
    if reduction == "none":
        return x.scatter(axis, indices, updates)
    return x.scatter_reduce(axis, indices, updates, REDUCTIONS[reduction], include_self=True)


@onnx_op("ScatterElements", 11)
def scatter_elements(x: Tensor, indices: Tensor, updates: Tensor, axis: int = 0, reduction: str = "none") -> Tensor:
    """x with `updates` written (or combined by `reduction`) at `indices` along `axis`."""
    axis = axis_of(axis, x.ndim)
    return _scatter_along(x, axis, _positive_indices(indices, x.shape[axis]), updates, reduction)


@onnx_op("Scatter", 9)
def scatter(x: Tensor, indices: Tensor, updates: Tensor, axis: int = 0) -> Tensor:
    """The deprecated name of ScatterElements without reduction."""
    return scatter_elements(x, indices, updates, axis)


@onnx_op("ScatterND", 11)
def scatter_nd(x: Tensor, indices: Tensor, updates: Tensor, reduction: str = "none") -> Tensor:
    """x with slices from `updates` written (or combined) at the index rows of `indices`."""
    linear, depth = _linear_index(x.shape, indices, 0)
    rest = x.shape[depth:]
    flat = x.reshape(prod(x.shape[:depth]), *rest)
    count = prod(linear.shape)
    index = linear.reshape(count, *[1] * len(rest)).expand(count, *rest)
    result = _scatter_along(flat, 0, index, updates.reshape(count, *rest), reduction)
    return result.reshape(x.shape)


@onnx_op("Expand", 8, host_inputs=(1,))
def expand(x: Tensor, shape: list[int]) -> Tensor:
    """x broadcast against `shape` (numpy's rules in both directions)."""
    target = np.broadcast_shapes(tuple(x.shape), tuple(as_ints(shape) or []))
    return x.expand(target) if tuple(target) != tuple(x.shape) else x


@onnx_op("Tile", 6, host_inputs=(1,))
def tile(x: Tensor, repeats: list[int]) -> Tensor:
    """x repeated `repeats[i]` times along each axis i."""
    return x.repeat(*(as_ints(repeats) or []))


PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "replicate", "wrap": "circular"}


def _pad(x: Tensor, pads: list[int], value: float | int, mode: str, axes: list[int] | None = None) -> Tensor:
    pairs = pairs_from_onnx_pads(pads)
    full = [(0, 0)] * x.ndim
    for axis, pair in zip(axes_of(axes, x.ndim) if axes else range(x.ndim), pairs, strict=False):
        full[axis] = pair
    if mode != "constant" and any(begin < 0 or end < 0 for begin, end in full):
        x = x[tuple(slice(-begin if begin < 0 else 0, size + end if end < 0 else size)
                    for (begin, end), size in zip(full, x.shape, strict=False))]
        full = [(max(begin, 0), max(end, 0)) for begin, end in full]
    if all(pair == (0, 0) for pair in full):
        return x
    if mode == "constant":
        return x.pad(tuple(full), value=value)
    return x.pad(tuple(full), mode=PAD_MODES[mode])


@onnx_op("Pad", 2)
def pad_attribute(x: Tensor, pads: list[int], mode: str = "constant", value: float = 0.0) -> Tensor:
    """x padded by `pads` (all begins, then all ends) with `value` or by reflecting, repeating or wrapping."""
    return _pad(x, pads, value, mode)


@onnx_op("Pad", 11, host_inputs=(1, 3))
def pad(x: Tensor, pads: list[int], constant_value: Tensor | None = None, axes: list[int] | None = None,
        mode: str = "constant") -> Tensor:
    """x padded by `pads` on `axes` (all by default)."""
    value = scalar_of(constant_value) if constant_value is not None and prod(constant_value.shape) else 0
    return _pad(x, as_ints(pads) or [], value, mode, as_ints(axes))


@onnx_op("Constant", 1)
def constant(value: Tensor | np.ndarray | None = None, value_float: float | None = None,
             value_floats: list[float] | None = None, value_int: int | None = None,
             value_ints: list[int] | None = None, sparse_value: Tensor | None = None,
             value_string: str | None = None, value_strings: list[str] | None = None) -> Tensor | np.ndarray:
    """The tensor given as an attribute in one of its spellings (strings as a numpy object array on the host)."""
    if value is not None:
        return value
    if sparse_value is not None:
        return sparse_value
    if value_float is not None:
        return Tensor(np.array(value_float, dtype=np.float32))
    if value_floats is not None:
        return Tensor(np.array(value_floats, dtype=np.float32))
    if value_int is not None:
        return host_tensor(np.array(value_int, dtype=np.int64), None)
    if value_ints is not None:
        return host_tensor(np.array(value_ints, dtype=np.int64), None)
    if value_string is not None:
        return np.array(value_string, dtype=object)
    if value_strings is not None:
        strings = np.empty(len(value_strings), dtype=object)
        strings[:] = value_strings
        return strings
    raise ValueError("Constant has none of the attributes value, value_float(s), value_int(s), value_string(s), "
                     "sparse_value")


@onnx_op("ConstantOfShape", 9, host_inputs=(0,))
def constant_of_shape(shape: list[int], value: Tensor | None = None) -> Tensor:
    """A tensor of `shape` filled with `value`'s one element (float32 zero by default)."""
    dims = tuple(as_ints(shape) or [])
    if value is None:
        return Tensor.zeros(dims, dtype=dtypes.float32)
    return Tensor.full(dims, scalar_of(value), dtype=value.dtype, device=value.device)


@onnx_op("Range", 11)
def range_(start: Tensor, limit: Tensor, delta: Tensor) -> Tensor:
    """start, start + delta, ... while below `limit` (above for a negative delta), in the inputs' dtype."""
    first, stop, step = scalar_of(start), scalar_of(limit), scalar_of(delta)
    count = max(int(math.ceil((stop - first) / step)), 0)
    values = np.arange(count, dtype=np.float64) * step + first
    return Tensor(values.astype(start.numpy().dtype), device=start.device)


@onnx_op("DepthToSpace", 1)
def depth_to_space(x: Tensor, blocksize: int, mode: str = "DCR") -> Tensor:
    """Channels moved into blocks of the spatial axes (depth-column-row or column-row-depth order)."""
    batch, channels, height, width = x.shape
    block = blocksize
    if mode == "DCR":
        y = x.reshape(batch, block, block, channels // block**2, height, width).permute(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape(batch, channels // block**2, block, block, height, width).permute(0, 1, 4, 2, 5, 3)
    return y.reshape(batch, channels // block**2, height * block, width * block)


@onnx_op("SpaceToDepth", 1)
def space_to_depth(x: Tensor, blocksize: int, mode: str = "DCR") -> Tensor:
    """Blocks of the spatial axes moved into channels (block offsets before or after the channel)."""
    batch, channels, height, width = x.shape
    block = blocksize
    y = x.reshape(batch, channels, height // block, block, width // block, block)
    y = y.permute(0, 1, 3, 5, 2, 4) if mode == "CRD" else y.permute(0, 3, 5, 1, 2, 4)
    return y.reshape(batch, channels * block * block, height // block, width // block)


@onnx_op("Compress", 9, host_inputs=(1,))
def compress(x: Tensor, condition: list[bool], axis: int | None = None) -> Tensor:
    """The slices of x along `axis` (of x flattened without one) where `condition` holds."""
    keep = np.nonzero(np.array(condition, dtype=bool).reshape(-1))[0]
    if axis is None:
        x, axis = x.reshape(-1), 0
    axis = axis_of(axis, x.ndim)
    if keep.size == 0:
        return x[tuple([slice(None)] * axis + [slice(0, 0)])]
    return x[tuple([slice(None)] * axis + [host_tensor(keep.astype(np.int64), x.device)])]


@onnx_op("NonZero", 9)
def non_zero(x: Tensor) -> Tensor:
    """The int64 coordinates of x's nonzero elements, one column per element."""
    return _from_numpy(np.array(np.nonzero(x.numpy()), dtype=np.int64).reshape(x.ndim, -1), x)


@onnx_op("OneHot", 9, host_inputs=(1,))
def one_hot(indices: Tensor, depth: list[int] | int, values: Tensor, axis: int = -1) -> Tensor:
    """`values[1]` where an axis position equals the index (negative indices count from `depth`), else values[0]."""
    count = int(scalar_of(depth))
    rank = indices.ndim + 1
    axis = axis_of(axis, rank)
    indices = indices.cast(index_dtype(indices.device))
    indices = (indices < 0).where(indices + count, indices).unsqueeze(axis)
    positions = Tensor.arange(count, device=indices.device, dtype=index_dtype(indices.device)).reshape(
        [count if dim == axis else 1 for dim in range(rank)])
    off, on = values[0], values[1]
    return (indices == positions).where(on, off)


@onnx_op("EyeLike", 9)
def eye_like(x: Tensor, dtype: int | None = None, k: int = 0) -> Tensor:
    """A matrix of x's shape with ones on diagonal `k`."""
    rows, columns = x.shape
    eye = np.eye(rows, columns, k=k)
    chosen = onnx_dtype(dtype, "EyeLike") if dtype is not None else x.dtype
    return Tensor(eye, device=x.device).cast(chosen)


@onnx_op("Trilu", 14, host_inputs=(1,))
def trilu(x: Tensor, k: list[int] | int | None = None, upper: int = 1) -> Tensor:
    """The upper (or lower) triangle of each matrix from diagonal k, the rest zero."""
    diagonal = int(scalar_of(k)) if k is not None else 0
    if 0 in x.shape:
        return x
    return x.triu(diagonal) if upper else x.tril(diagonal)


@onnx_op("ReverseSequence", 10, host_inputs=(1,))
def reverse_sequence(x: Tensor, sequence_lens: list[int], batch_axis: int = 1, time_axis: int = 0) -> Tensor:
    """Each batch entry's first sequence_lens[b] steps along `time_axis` reversed."""
    lengths = host_tensor(np.array(sequence_lens, dtype=np.int64), x.device)
    steps = x.shape[time_axis]
    time = Tensor.arange(steps, device=x.device, dtype=index_dtype(x.device))
    shape_time = [steps if dim == time_axis else 1 for dim in range(x.ndim)]
    shape_batch = [x.shape[batch_axis] if dim == batch_axis else 1 for dim in range(x.ndim)]
    time, lengths = time.reshape(shape_time), lengths.reshape(shape_batch)
    source = (time < lengths).where(lengths - 1 - time, time)
    return x.gather(time_axis, source.expand(x.shape))


@onnx_op("Unique", 11)
def unique(x: Tensor, axis: int | None = None, sorted: int = 1) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The distinct values (or slices along `axis`), first indices, inverse indices and counts (on the host)."""
    array = x.numpy()
    values, first, inverse, counts = np.unique(array, return_index=True, return_inverse=True, return_counts=True,
                                               axis=axis)
    inverse = inverse.reshape(-1)
    if not sorted:
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        values = np.take(values, order, axis=axis if axis is not None else 0)
        first, counts, inverse = first[order], counts[order], rank[inverse]
    as_int64 = [np.asarray(item, dtype=np.int64) for item in (first, inverse, counts)]
    return _from_numpy(values, x), *(_from_numpy(item, x) for item in as_int64)  # type: ignore[return-value]


@onnx_op("CenterCropPad", 18, host_inputs=(1,))
def center_crop_pad(x: Tensor, shape: list[int], axes: list[int] | None = None) -> Tensor:
    """x cropped or zero-padded symmetrically (extra on the end) to `shape` on `axes`."""
    targets = as_ints(shape) or []
    chosen = axes_of(axes, x.ndim) if axes else list(range(x.ndim))
    for axis, target in zip(chosen, targets, strict=False):
        current = x.shape[axis]
        if target < current:
            start = (current - target) // 2
            x = x[tuple([slice(None)] * axis + [slice(start, start + target)])]
        elif target > current:
            before = (target - current) // 2
            x = x.pad(tuple((before, target - current - before) if dim == axis else (0, 0) for dim in range(x.ndim)))
    return x


@onnx_op("TensorScatter", 24)
def tensor_scatter(past_cache: Tensor, update: Tensor, write_indices: Tensor | None = None, axis: int = -2,
                   mode: str = "linear") -> Tensor:
    """A KV-cache write: update's steps along `axis` placed into past_cache from each batch entry's write index
    (wrapping around the cache in circular mode)."""
    axis = axis_of(axis, past_cache.ndim)
    length, steps = past_cache.shape[axis], update.shape[axis]
    batch = past_cache.shape[0]
    wide = index_dtype(past_cache.device)
    starts = write_indices.cast(wide) if write_indices is not None else \
        Tensor.zeros(batch, dtype=wide, device=past_cache.device)
    positions = starts.reshape(batch, *[1] * (past_cache.ndim - 1)) + Tensor.arange(
        steps, device=past_cache.device, dtype=wide).reshape([steps if dim == axis else 1
                                                                      for dim in range(past_cache.ndim)])
    if mode == "circular":
        positions = positions % length
    index = positions.expand(update.shape)
    return past_cache.scatter(axis, index, update)
