"""The graph of a convolution built on nodes directly.

`Tensor.conv2d` spells a convolution as about 30 Tensor operations (a pad, the sliding windows of each spatial axis
made of reshapes, expands, shrinks and permutes, a broadcast multiply and a sum); each checks its arguments and wraps
a new Tensor: 0.9 ms of Python for a 3x3 convolution, 9% of the call for a 32x16x64x64 input on two cores, where
torch spends tens of microseconds. `Tensor.conv2d` checks the arguments once and, for zero padding of int shapes in
one dtype, calls `convolve` here, which makes the same nodes without the per-step Tensors. Nodes are shared between
equal computations, so the result is the very node the Tensor operations make
(tests/unit/tensor/test_convolution_graph.py checks that over strides, dilations, padding, groups and 1-3 spatial
axes); gradients follow from the nodes as before.
"""
from __future__ import annotations

from collections.abc import Sequence

from tinycore.dtype import DType
from tinycore.gradient import compute_gradient, with_gradient
from tinycore.helpers import prod
from tinycore.tensor.support import broadcast_shape, int_shape
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp


def _cut(node: UOp, axis: int, start: int, end: int) -> UOp:
    """`node` with the (non-negative) `axis` cut to [start, end)."""
    shape = int_shape(node)
    return node.shrink(tuple((start, end) if index == axis else (0, size) for index, size in enumerate(shape)))


def _grow_last(node: UOp, after: int) -> UOp:
    """`node` with `after` zeros appended to its last axis."""
    return node.pad(((0, 0),) * (len(node.shape) - 1) + ((0, after),))


def _every(node: UOp, axis: int, count: int, stride: int) -> UOp:
    """Elements 0, stride, 2 * stride, ... (`count` of them) of the (non-negative) `axis`."""
    result = _cut(node, axis, 0, (count - 1) * stride + 1)
    if stride > 1:
        pairs = [(0, 0)] * len(result.shape)
        pairs[axis] = (0, count * stride - int_shape(result)[axis])
        padded = result.pad(tuple(pairs))
        shape = list(int_shape(padded))
        split = padded.reshape(tuple(shape[:axis] + [count, stride] + shape[axis + 1:]))
        picked = _cut(split, axis + 1, 0, 1)
        result = picked.reshape(tuple(shape[:axis] + [count] + shape[axis + 1:]))
    return result


def _windows_last(node: UOp, kernel: int, stride: int, dilation: int) -> UOp:
    """Sliding windows over the last axis: (..., n) -> (..., out, kernel); the window must fit the axis."""
    shape = int_shape(node)
    length, lead = shape[-1], list(shape[:-1])
    span = dilation * (kernel - 1) + 1
    out = (length - span) // stride + 1
    if dilation == 1 and stride >= kernel:
        needed = out * stride
        trimmed = _cut(_grow_last(node, max(needed - length, 0)), len(lead), 0, needed)
        windows = trimmed.reshape(tuple(lead + [out, stride]))
        return _cut(windows, len(lead) + 1, 0, kernel)
    repeated = node.reshape(tuple(lead + [1, length])).expand(tuple(lead + [kernel, length]))
    repeated = repeated.reshape(tuple(lead + [kernel * length]))
    rows = _grow_last(repeated, kernel * dilation).reshape(tuple(lead + [kernel, length + dilation]))
    rows = _cut(rows, len(lead) + 1, 0, length - span + 1)
    strided = _every(rows, len(lead) + 1, out, stride)
    order = list(range(len(lead))) + [len(lead) + 1, len(lead)]
    return strided.permute(order)


def windows(node: UOp, kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int]) -> UOp:
    """Sliding windows over the last len(kernel) axes: (..., *spatial) -> (..., *out, *kernel); every window must
    fit its axis (Tensor._pool checks that)."""
    count = len(kernel)
    lead = len(node.shape) - count
    result = node
    for index in reversed(range(count)):
        axis = lead + index
        order = [position for position in range(len(result.shape)) if position != axis] + [axis]
        result = _windows_last(result.permute(order), kernel[index], strides[index], dilations[index])
    outs = [lead + 2 * (count - 1 - index) for index in range(count)]
    return result.permute(list(range(lead)) + outs + [position + 1 for position in outs])


def convolve(source: UOp, weight: UOp, groups: int, padding: Sequence[tuple[int, int]], strides: Sequence[int],
             dilations: Sequence[int], accumulate: DType, result_dtype: DType) -> UOp:
    """The convolution of `source` (batch, in_channels, *spatial) with `weight` (out_channels, in_channels /
    groups, *kernel), both of one dtype with int shapes, after zero `padding` ((before, after) >= 0 per axis of
    `source`); the arguments are checked by Tensor.conv2d."""
    spatial = len(weight.shape) - 2
    batch = int_shape(source)[0]
    out_channels, group_channels, *kernel = int_shape(weight)
    tiles = windows(source.pad(tuple(padding)), kernel, strides, dilations)  # (batch, in, *out, *kernel)
    outs = list(int_shape(tiles)[2:2 + spatial])
    tiles = tiles.reshape(tuple([batch, groups, 1, group_channels] + outs + kernel))
    order = [0, 1, 2] + list(range(4, 4 + spatial)) + [3] + list(range(4 + spatial, 4 + 2 * spatial))
    tiles = tiles.permute(order)  # (batch, groups, 1, *out, group_channels, *kernel)
    filters = weight.reshape(tuple([1, groups, out_channels // groups] + [1] * spatial + [group_channels] + kernel))
    shape = broadcast_shape(int_shape(tiles), int_shape(filters))
    products = tiles.expand(shape).alu(Ops.MUL, filters.expand(shape))
    reduce_axes = tuple(range(3 + spatial, len(shape)))
    summed = products.cast(accumulate).r(Ops.ADD, reduce_axes)
    summed = summed.reshape(tuple(size for index, size in enumerate(int_shape(summed)) if index not in reduce_axes))
    return summed.cast(result_dtype).reshape(tuple([batch, out_channels] + outs))


def with_direct_input_gradient(value: UOp, source: UOp, weight: UOp, padding: Sequence[tuple[int, int]],
                               accumulate: DType, groups: int = 1, dilations: Sequence[int] | None = None,
                               read: UOp | None = None, channels_last: bool = False,
                               stored_in_place: bool = False) -> UOp:
    """`value`, a stride-1 convolution of `source` (zero-padded by `padding`, (before, after) per spatial axis, each
    at most the window's extent less one) with `weight` in `groups` groups and `dilations` (1 when None), given its
    own gradient for `source`: the convolution of the output gradient, padded by the window's extent less one less
    the forward padding, with the weight flipped along its spatial axes and its two channel axes swapped within each
    group (same groups, same dilation). Differentiated through the sliding-window view instead, the input gradient
    materialized every (channel, kernel position, output position) product and folded it back in two more reduces
    (a 32x16x32x32 input, 3x3: three kernels, 10 ms, against 4.3 ms for the forward).

    `read`: the input the convolution read (`source` padded already, or `source` itself), given where the weight's
    gradient is to be computed channels last in parts of the batch (channels_last_weight_gradient: one group,
    dilation 1); otherwise the weight's gradient stays the graph's own (a reduce over the batch and output positions
    in the weight's layout). `channels_last`: the input's gradient convolution is computed channels last
    (convolve_channels_last): where the convolution itself was, or where the input's rows fill its vectors poorly
    (tensor/conv_layouts.py, input_gradient_channels_last). `stored_in_place`: that channels-last sum is stored
    straight into the input's layout (lane by lane, once per output after its whole reduce) instead of into a
    channels-last buffer that a transposing copy then reads."""
    spatial = len(weight.shape) - 2
    out_channels, group_channels, *kernel = int_shape(weight)
    steps = tuple(dilations) if dilations is not None else (1,) * spatial

    def rule(node: UOp, gradient: UOp) -> dict[UOp, UOp]:
        extents = [step * (size - 1) for size, step in zip(kernel, steps, strict=True)]
        grown = tuple((extent - before, extent - after) for extent, (before, after) in zip(extents, padding,
                                                                                           strict=True))
        padded = gradient.pad(((0, 0), (0, 0), *grown)).contiguous()
        flipped = weight.flip((False, False) + (True,) * spatial)
        # (groups, out per group, in per group, *kernel) -> (in channels, out per group, *kernel)
        swapped = flipped.reshape((groups, out_channels // groups, group_channels, *kernel)) \
            .permute((0, 2, 1, *range(3, 3 + spatial))) \
            .reshape((groups * group_channels, out_channels // groups, *kernel))
        if channels_last:
            found = {source: convolve_channels_last(padded, swapped, accumulate, source.dtype,
                                                    buffered=not stored_in_place)}
        else:
            found = {source: convolve(padded, swapped, groups, ((0, 0),) * (2 + spatial), (1,) * spatial, steps,
                                      accumulate, source.dtype)}
        if read is not None and groups == 1 and all(step == 1 for step in steps):
            found[weight] = channels_last_weight_gradient(read, gradient, kernel, accumulate, weight.dtype)
        else:
            # the input's gradient is given above: the weight's must not also flow back through the input (a
            # weight used again in the convolution that made the input would be counted twice there)
            stop = frozenset({source}) if source is not weight else frozenset()
            found.update(compute_gradient(node, gradient, {weight}, plain=frozenset({node}), stop=stop))
        return found

    return with_gradient(value, rule)


def convolve_channels_last(source: UOp, weight: UOp, accumulate: DType, result_dtype: DType,
                           buffered: bool = True) -> UOp:
    """The stride-1, dilation-1, one-group convolution of `source` (batch, in_channels, *spatial; padded already)
    with `weight` computed channels last: the weight copied with its output channels innermost, the products summed
    into a (batch, *out, out_channels) buffer, which is then viewed as (batch, out_channels, *out). Codegen then
    tiles it as a matrix product (output channels as the vector columns, output pixels as the rows), where the
    convolution tile (pixels as vector lanes) would fill less than two vectors per image row; see conv2d.
    `buffered` False: no channels-last buffer, the sum is stored straight in the (batch, out_channels, *out) layout
    (each tile's vectors lane by lane, once after the whole reduce)."""
    spatial = len(weight.shape) - 2
    batch = int_shape(source)[0]
    out_channels, channels, *kernel = int_shape(weight)
    tiles = windows(source, kernel, (1,) * spatial, (1,) * spatial)  # (batch, in, *out, *kernel)
    outs = list(int_shape(tiles)[2:2 + spatial])
    order = [0] + list(range(2, 2 + spatial)) + [1] + list(range(2 + spatial, 2 + 2 * spatial))
    tiles = tiles.permute(order).reshape(tuple([batch] + outs + [1, channels] + kernel))
    # (in, *kernel, out) in memory: the output channels of one (channel, kernel position) are contiguous
    transposed = weight.permute(tuple(range(1, 2 + spatial)) + (0,)).contiguous()
    filters = transposed.permute((1 + spatial,) + tuple(range(1 + spatial)))
    filters = filters.reshape(tuple([1] + [1] * spatial + [out_channels, channels] + kernel))
    shape = broadcast_shape(int_shape(tiles), int_shape(filters))
    products = tiles.expand(shape).alu(Ops.MUL, filters.expand(shape))
    reduce_axes = tuple(range(2 + spatial, len(shape)))
    summed = products.cast(accumulate).r(Ops.ADD, reduce_axes)
    summed = summed.reshape(tuple([batch] + outs + [out_channels])).cast(result_dtype)
    if buffered:
        summed = summed.contiguous()
    return summed.permute((0, 1 + spatial) + tuple(range(1, 1 + spatial)))


PART_MIN_POSITIONS = 1024
"""A channels-last weight gradient sums the batch in parts of the fewest images that hold at least this many output
positions together (`images_per_part`). Each part's images stay in L2 while every (channel, kernel position) row
block passes over them, where one sum over the whole batch streamed the output gradient from memory once per row
block; fewer positions per part would make the partial sums (a weight's worth per part) cost more to write and add
than they save. 32x16x64x64 * 32x16x3x3 on two cores: the weight gradient 89 ms in the weight's own layout (13
GFLOPS), 16-20 ms channels last over the whole batch, 6.4 ms in 32 one-image parts plus 0.1 ms for the final sum."""


PART_MAX_ELEMENTS = 1 << 22
"""The most partial-sum elements (parts times the weight's elements) a channels-last weight gradient writes: a large
batch of large images would otherwise make a part per image, each a whole weight (1024 images of 64x64 and a
64x64x3x3 weight: 150 MB of partial sums)."""


def images_per_part(batch: int, positions: int, weight_elements: int = 1) -> int:
    """The images of each partial sum of a channels-last weight gradient over `batch` images of `positions` output
    positions each: the smallest divisor of the batch whose images hold PART_MIN_POSITIONS positions and whose parts
    hold at most PART_MAX_ELEMENTS partial sums of `weight_elements` each (the whole batch, one part, when none
    does)."""
    return next((count for count in range(1, batch + 1) if batch % count == 0 and count * positions >=
                 PART_MIN_POSITIONS and batch // count * weight_elements <= PART_MAX_ELEMENTS), batch)


def channels_last_weight_gradient(source: UOp, gradient: UOp, kernel: Sequence[int], accumulate: DType,
                                  result_dtype: DType) -> UOp:
    """The weight gradient of a stride-1, one-group convolution of `source` (padded already) whose output gradient
    is `gradient` (batch, out_channels, *out): the gradient copied channels last, (batch, *out, out_channels), then
    for each part of the batch (`images_per_part`) and each (channel, kernel position) the sum over the part's
    images and output positions of the input under the window times that row of output channels, into a (parts,
    channels, *kernel, out_channels) buffer; the parts summed, viewed as the weight's (out_channels, channels,
    *kernel). Codegen tiles each part's sum as a matrix product with the output channels as the vector columns;
    summed in the weight's own layout it was a dot product per weight element, reading the whole batch once per
    few weight elements (32x64x8x8 * 128x64x3x3: 23 ms at 13 GFLOPS; 32x16x64x64 * 32x16x3x3: 89 ms)."""
    spatial = len(kernel)
    batch, channels = int_shape(source)[:2]
    out_channels, outs = int_shape(gradient)[1], list(int_shape(gradient)[2:])
    images = images_per_part(batch, prod(outs), out_channels * channels * prod(kernel))
    parts = batch // images
    rows = gradient.permute((0,) + tuple(range(2, 2 + spatial)) + (1,)).contiguous()  # (batch, *out, out)
    tiles = windows(source, kernel, (1,) * spatial, (1,) * spatial)  # (batch, in, *out, *kernel)
    # (parts, in, *kernel, 1, images, *out): one part's images and positions innermost, the reduce of its sum
    tiles = tiles.reshape(tuple([parts, images] + list(int_shape(tiles)[1:])))
    order = [0, 2] + list(range(3 + spatial, 3 + 2 * spatial)) + [1] + list(range(3, 3 + spatial))
    tiles = tiles.permute(order).reshape(tuple([parts, channels] + list(kernel) + [1, images] + outs))
    columns = rows.reshape(tuple([parts, images] + outs + [out_channels]))
    columns = columns.permute((0, 2 + spatial, 1) + tuple(range(2, 2 + spatial)))  # (parts, out, images, *out)
    columns = columns.reshape(tuple([parts] + [1] * (1 + spatial) + [out_channels, images] + outs))
    shape = broadcast_shape(int_shape(tiles), int_shape(columns))
    products = tiles.expand(shape).alu(Ops.MUL, columns.expand(shape))
    reduce_axes = tuple(range(3 + spatial, len(shape)))
    summed = products.cast(accumulate).r(Ops.ADD, reduce_axes)
    summed = summed.reshape(tuple([parts, channels] + list(kernel) + [out_channels]))
    if parts > 1:  # each part's sums in a buffer of their own, then added up
        summed = summed.contiguous().r(Ops.ADD, (0,))
    summed = summed.reshape(tuple([channels] + list(kernel) + [out_channels])).cast(result_dtype).contiguous()
    return summed.permute((1 + spatial, 0) + tuple(range(1, 1 + spatial)))
