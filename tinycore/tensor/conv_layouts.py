"""Where a convolution on a CPU renderer reads its operands: a padded copy instead of a padded view, strides folded
into channels, narrow images summed channels last.

These choices only apply on devices whose renderer runs each worker's output axes as loops (CPU renderers,
`has_threads`): GPU renderers read padded and strided views cheaply (a gated load per thread), and their tiles are
chosen elsewhere. Tensor.conv2d (tensor/nn.py) asks these functions; the graphs themselves are built by
tensor/convolution.py or, for the folded strides, in Tensor operations here. docs/architecture.md explains each with
its measurements.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar

from tinycore.dtype import DType, dtypes
from tinycore.tensor.indexing import IndexingMixin

if TYPE_CHECKING:
    pass


TensorT = TypeVar("TensorT", bound="IndexingMixin")
"""A tensor of the chain class whose methods these helpers call (the Tensor, at run time)."""

CHANNELS_LAST_MIN_REDUCE = 64
"""The shortest reduce (input channels times kernel positions) a convolution is computed channels last for."""


def loops_over_rows(source: TensorT) -> bool:
    """True when `source` lives on a device whose renderer runs each worker's output axes as loops (CPU renderers,
    `has_threads`)."""
    if not isinstance(source.device, str):
        return False
    from tinycore.device.registry import Device
    try:
        return bool(Device[source.device].renderer.has_threads)
    except Exception:  # noqa: BLE001 - a device that cannot open reports why when the convolution runs
        return False


def pads_into_a_copy(source: TensorT, flat_padding: list[int]) -> bool:
    """True when a convolution of `source` with this (flat) padding reads a padded copy of it instead of a padded
    view: on devices whose renderer runs each worker's output axes as loops (CPU renderers, `has_threads`), where a
    view's loads are gated per lane at the borders and the tiles lose their vector loads. The copy is one pass over
    the input; the convolution, its weight gradient and its input gradient then index plain memory. A 32x16x32x32
    input, 3x3 kernel, padding 1, forward and backward on 2 cores: 24.8 -> 9.4 ms (torch 14.8)."""
    if not any(flat_padding) or not all(isinstance(amount, int) and amount >= 0 for amount in flat_padding):
        return False
    return loops_over_rows(source)


def channels_last_wins(source: TensorT, weight: TensorT, groups: int, strides: Sequence[int],
                        dilations: Sequence[int], pairs: Sequence[tuple[int, int]], accumulate: DType | None) -> bool:
    """True when a stride-1 convolution on a CPU renderer (`source` already padded) is computed channels last
    (convolve_channels_last): image rows narrower than a vector, where the convolution tile's vector lanes along
    a row go partly unused, at least a vector of output channels and a reduce of at least CHANNELS_LAST_MIN_REDUCE
    (channels times kernel positions)."""
    if accumulate is not None or groups != 1 or any(step != 1 for step in (*strides, *dilations)) or \
            any(pair != (0, 0) for pair in pairs) or not dtypes.is_float(source.dtype):
        return False
    from tinycore.device.registry import Device
    renderer = Device[source.device].renderer
    width = max(2, (renderer.preferred_vector_bytes or 32) // source.dtype.itemsize)
    out_channels, channels, *kernel = weight.shape
    out_width = source.shape[-1] - kernel[-1] + 1
    return out_width < width and out_channels >= width and math.prod(kernel) > 1 and \
        channels * math.prod(kernel) >= CHANNELS_LAST_MIN_REDUCE


INPUT_GRADIENT_MIN_FILL = 0.75
"""A stride-1 convolution computed in the images' own layout gets its input gradient channels last when the input's
rows fill less than this share of the vector lanes that cover them (`input_gradient_channels_last`)."""


def input_gradient_channels_last(source: TensorT, weight: TensorT, groups: int, dilations: Sequence[int]) -> bool:
    """True when the input gradient of a stride-1 convolution of `source` (unpadded: the gradient's own shape) with
    `weight` is computed channels last (convolve_channels_last) though the convolution is not: the input's rows fill
    less than INPUT_GRADIENT_MIN_FILL of the vectors that cover them (17 columns, a stride-2 convolution's folded
    input, take two 16-lane vectors: 53%), at least a vector of input channels (the channels-last tile's vector
    columns), one group, dilation 1 and a reduce (output channels times kernel positions) of at least
    CHANNELS_LAST_MIN_REDUCE. bench/README.md has the measurements."""
    if groups != 1 or any(step != 1 for step in dilations) or not dtypes.is_float(source.dtype) or \
            source.dtype != weight.dtype or not loops_over_rows(source):
        return False
    from tinycore.device.registry import Device
    renderer = Device[source.device].renderer
    width = max(2, (renderer.preferred_vector_bytes or 32) // source.dtype.itemsize)
    out_channels, channels, *kernel = weight.shape
    columns = source.shape[-1]
    if not isinstance(columns, int) or columns < 1:
        return False
    fill = columns / (-(-columns // width) * width)
    return fill < INPUT_GRADIENT_MIN_FILL and channels >= width and math.prod(kernel) > 1 and \
        out_channels * math.prod(kernel) >= CHANNELS_LAST_MIN_REDUCE


def weight_gradient_channels_last(source: TensorT, weight: TensorT, groups: int, dilations: Sequence[int]) -> bool:
    """True when the weight gradient of a stride-1 convolution on a CPU renderer (`source` the input it reads,
    padded already) is computed channels last in parts of the batch (tensor/convolution.py,
    channels_last_weight_gradient) rather than in the weight's own layout: one group, dilation 1, a float dtype and
    at least a vector of output channels (the tile's vector columns). In the weight's layout each few weight elements
    read the whole batch again: 32x16x64x64 * 32x16x3x3, 89 ms (13 GFLOPS) -> 6.4 ms plus a 1 ms copy of the output
    gradient channels last."""
    if groups != 1 or any(step != 1 for step in dilations) or not dtypes.is_float(source.dtype) or \
            source.dtype != weight.dtype or not loops_over_rows(source):
        return False
    from tinycore.device.registry import Device
    renderer = Device[source.device].renderer
    width = max(2, (renderer.preferred_vector_bytes or 32) // source.dtype.itemsize)
    return weight.shape[0] >= width


def folds_strides(source: TensorT, weight: TensorT, groups: int, strides: tuple[int, ...], dilations: tuple[int, ...],
                   flat_padding: list[int], accumulate: DType | None) -> bool:
    """True when conv2d computes a strided convolution as a stride-1 one over the folded input (space_to_depth): a
    float convolution with some stride above 1, dilation 1, int sizes, non-negative int padding and a window that
    fits, on a device whose renderer loops over rows (CPU renderers)."""
    spatial = weight.ndim - 2
    if accumulate is not None or source.dtype != weight.dtype or not dtypes.is_float(source.dtype) or \
            not isinstance(groups, int) or len(strides) != spatial or len(dilations) != spatial:
        return False
    if not all(isinstance(step, int) and step >= 1 for step in (*strides, *dilations)) or \
            not any(step > 1 for step in strides) or any(step != 1 for step in dilations):
        return False
    if not all(isinstance(size, int) for size in (*source.shape, *weight.shape)) or \
            not all(isinstance(amount, int) and amount >= 0 for amount in flat_padding):
        return False
    padded = [size + flat_padding[2 * (spatial - 1 - axis)] + flat_padding[2 * (spatial - 1 - axis) + 1]
              for axis, size in enumerate(source.shape[2:])]
    return all(size >= window for size, window in zip(padded, weight.shape[2:], strict=True)) and \
        loops_over_rows(source)


def space_to_depth(source: TensorT, weight: TensorT, strides: tuple[int, ...], pairs: list[tuple[int, int]],
                    groups: int) -> TensorT:
    """A strided convolution (dilation 1, int sizes and padding) as a stride-1 convolution with no padding: each
    spatial axis of the padded input, n = stride * m + phase, becomes a phase axis folded into the channels and an
    axis of m, and the kernel, k = stride * q + phase (zero past its size), the same. A window step of `stride`
    input positions is then a step of one; the phases a kernel never reaches (phase >= its size, a 1x1 kernel with
    stride 2 reads only phase 0) are left out. On CPU renderers every kernel of the strided convolution and its
    gradients then reads contiguous rows: 32x16x32x32 * 32x16x3x3, stride 2, padding 1, forward + backward 14.5 ->
    5.0 ms (torch 4.4-6.0), though a 3x3 kernel with stride 2 multiplies 16 taps where 9 are not zero."""
    spatial = len(strides)
    batch, channels = source.shape[:2]
    out_channels = weight.shape[0]
    sizes, kernel = source.shape[2:], weight.shape[2:]
    outs = [(size + before + after - window) // step + 1
            for size, (before, after), window, step in zip(sizes, pairs, kernel, strides, strict=True)]
    taps = [-(-window // step) for window, step in zip(kernel, strides, strict=True)]
    phases = [min(step, window) for window, step in zip(kernel, strides, strict=True)]
    # the padded input cut or grown to stride * (out - 1 + taps) positions per axis: exactly what the windows read
    lengths = [step * (out - 1 + tap) for step, out, tap in zip(strides, outs, taps, strict=True)]
    bounds = [(-before, -before + length) for (before, _), length in zip(pairs, lengths, strict=True)]
    flat: list[int] = []
    for (start, end), size in reversed(list(zip(bounds, sizes, strict=True))):
        flat += [max(0, -start), max(0, end - size)]
    # the padding goes into a copy of its own: read through the padded view, the fold's every load was gated and its
    # rows stepped by 2, a scalar loop (1x32x64x64 with 3x3 taps at batch 1: 232-600 us for the fold against 64 + 39
    # for the padded copy and an ungated fold; batch 32 of 16x32x32, forward and backward: 466 -> 160 + 159 us)
    grown = source.pad(flat).contiguous() if any(flat) else source
    offsets = [max(0, -start) for start, _ in bounds]
    cut = grown.shrink([None, None] + [(start + offset, end + offset)
                                       for (start, end), offset in zip(bounds, offsets, strict=True)])

    def fold(tensor: TensorT, leading: tuple[int, int], counts: list[int]) -> TensorT:
        """(a, b, *spatial) -> (a, b * phases..., *counts): each axis split into (count, stride), the phases
        kept, the phase axes moved next to b."""
        split = tensor.reshape([*leading] + [size for count, step in zip(counts, strides, strict=True)
                                             for size in (count, step)])
        kept = split.shrink([None, None] + [bound for phase in phases for bound in (None, (0, phase))])
        order = [0, 1] + [3 + 2 * axis for axis in range(spatial)] + [2 + 2 * axis for axis in range(spatial)]
        moved = kept.permute(order)
        return moved.reshape([leading[0], leading[1] * math.prod(phases)] + counts)

    # the gradients of the folded operands get buffers of their own (contiguous_backward): computed straight into
    # the unfolded layout, each output position would find its phase and window by division, unvectorized
    folded_source = fold(cut, (batch, channels), [length // step for length, step in zip(lengths, strides,
                                                                                          strict=True)])
    grown_weight = weight.pad([amount for window, step, tap in reversed(list(zip(kernel, strides, taps,
                                                                                  strict=True)))
                               for amount in (0, step * tap - window)])
    folded_weight = fold(grown_weight, (out_channels, weight.shape[1]), taps)
    return folded_source.contiguous().contiguous_backward().conv2d(folded_weight.contiguous().contiguous_backward(),
                                                                   groups=groups)


PHASES_MIN_WORK = 1 << 26
"""Multiply-adds of a transposed convolution (input elements times kernel taps times output channels per group) from
which it is computed per stride phase. Each phase is a convolution graph of its own, about 0.75 ms of Python each
with its gradients: 16x32x16x16 * 32x16x4x4 with stride 2 (2^25 multiply-adds) replayed its kernels in 2.3 ms per
phase against 4.3 ms over the spread input, but the eager call took 10.4 ms against 7.3."""


def transposes_by_phases(source: TensorT, weight: TensorT, groups: int, strides: Sequence[int],
                         dilations: Sequence[int]) -> bool:
    """True when a transposed convolution of `source` with `weight` on a CPU renderer is computed per stride phase
    (`conv_transpose_by_phases`): a stride above 1, dilation 1, a float dtype, int shapes and at least
    PHASES_MIN_WORK multiply-adds."""
    if not (any(step > 1 for step in strides) and all(step == 1 for step in dilations) and
            all(isinstance(step, int) for step in strides) and dtypes.is_float(source.dtype) and
            all(isinstance(size, int) for size in (*source.shape, *weight.shape)) and loops_over_rows(source)):
        return False
    # each input element meets every tap of each output channel of its group (weight: in, out / groups, *kernel)
    return math.prod(source.shape) * math.prod(weight.shape[1:]) >= PHASES_MIN_WORK


def conv_transpose_by_phases(source: TensorT, weight: TensorT, groups: int, strides: Sequence[int],
                             paddings: Sequence[int], output_paddings: Sequence[int]) -> TensorT:
    """The transposed convolution of `source` with `weight` (in_channels, out_channels / groups, *kernel), no bias,
    dilation 1, as one stride-1 transposed convolution per stride phase. Output position o takes the kernel taps
    k = (o + padding) mod stride + stride * j at input position (o + padding) // stride - j, so the outputs of one
    phase r are the stride-1 transposed convolution of the input with the taps r, r + stride, ...; the phases are then
    interleaved (position stride * q + r) and the padding cut off. Spread over the input's zeros instead, the tile
    multiplied a zero in all but one of every stride^2 products (a 4x4 kernel with stride 2: 4x the work)."""
    spatial = len(strides)
    kernel = [int(size) for size in weight.shape[2:]]
    lengths = [int(size) for size in source.shape[2:]]
    spans = [length + -(-size // step) - 1 for length, size, step in zip(lengths, kernel, strides, strict=True)]
    batch, out_channels = source.shape[0], weight.shape[1] * groups
    phases = []
    for phase in itertools.product(*(range(step) for step in strides)):
        taps = weight[(slice(None), slice(None)) + tuple(slice(start, None, step) for start, step in
                                                         zip(phase, strides, strict=True))]
        if any(size == 0 for size in taps.shape[2:]):
            # a phase past the kernel's last tap (kernel smaller than the stride): those outputs are zeros
            phases.append(type(source).zeros(batch, out_channels, *spans, dtype=source.dtype, device=source.device))
            continue
        result = source.conv_transpose2d(taps, groups=groups)  # stride 1, no padding: every position of the phase
        phases.append(result.pad([(0, 0), (0, 0)] + [(0, span - size) for span, size in
                                                     zip(spans, result.shape[2:], strict=True)]))
    stacked = phases[0].stack(*phases[1:], dim=-1).reshape([batch, out_channels] + spans + list(strides))
    order = [0, 1] + [axis for pair in zip(range(2, 2 + spatial), range(2 + spatial, 2 + 2 * spatial), strict=True)
                      for axis in pair]
    woven = stacked.permute(order).reshape([batch, out_channels] + [span * step for span, step in
                                                                    zip(spans, strides, strict=True)])
    wanted = [(length - 1) * step - 2 * pad + size + extra for length, step, pad, size, extra in
              zip(lengths, strides, paddings, kernel, output_paddings, strict=True)]
    extra_zeros = [max(0, pad + size - have) for pad, size, have in zip(paddings, wanted, woven.shape[2:],
                                                                         strict=True)]
    if any(extra_zeros):
        woven = woven.pad([(0, 0), (0, 0)] + [(0, amount) for amount in extra_zeros])
    return woven[(slice(None), slice(None)) + tuple(slice(pad, pad + size) for pad, size in
                                                    zip(paddings, wanted, strict=True))]
