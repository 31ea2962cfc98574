"""Neural-network ONNX operators: convolutions, pooling, normalizations, dropout, Resize and Upsample."""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from tinycore.dtype import dtypes
from tinycore.helpers import prod
from tinycore.nn.onnx.common import (
    HALF_FLOATS,
    as_ints,
    axes_of,
    axis_of,
    host_tensor,
    index_dtype,
    pairs_from_onnx_pads,
    spatial_pads,
    torch_style_padding,
    widened,
)
from tinycore.nn.onnx.registry import onnx_op
from tinycore.tensor import Tensor
from tinycore.tensor.conv_layouts import loops_over_rows


def _spatial_options(x: Tensor, kernel: Sequence[int], strides: Sequence[int] | None,
                     dilations: Sequence[int] | None) -> tuple[list[int], list[int]]:
    count = len(kernel)
    return list(strides or [1] * count), list(dilations or [1] * count)


COLUMN_KERNELS = (3, 5, 7)
"""Kernel sizes (each spatial axis) of the stride-2 convolutions that `conv` computes by columns on CPU renderers:
odd ones, where Tensor.conv2d's fold into four input phases pads the kernel to an even size and multiplies zeros
(3x3: 16 taps for 9, 5x5: 36 for 25, 7x7: 64 for 49). Even kernels fold with no zero taps and keep conv2d."""


def _strided_by_columns(x: Tensor, weight: Tensor, group: int, strides: Sequence[int], dilations: Sequence[int],
                        pairs: Sequence[tuple[int, int]]) -> bool:
    """True when `conv` computes a convolution as `_conv_by_columns`: a 2-D float one of one group, stride 2,
    dilation 1, a kernel of COLUMN_KERNELS sizes, int sizes and non-negative int pads, on a device whose renderer
    loops over rows (CPU). Tensor.conv2d folds such a convolution into one over four input phases
    (conv_layouts.space_to_depth), which multiplies zero taps and folds the weight again on every call."""
    if x.ndim != 4 or weight.ndim != 4 or group != 1 or list(strides) != [2, 2] or list(dilations) != [1, 1]:
        return False
    if any(size not in COLUMN_KERNELS for size in weight.shape[2:]) or x.dtype != weight.dtype or \
            not dtypes.is_float(x.dtype):
        return False
    if not all(isinstance(size, int) for size in (*x.shape, *weight.shape)) or \
            not all(isinstance(amount, int) and amount >= 0 for pair in pairs for amount in pair):
        return False
    if any(size + before + after < window
           for size, (before, after), window in zip(x.shape[2:], pairs, weight.shape[2:], strict=True)):
        return False
    return loops_over_rows(x)


def _conv_by_columns(x: Tensor, weight: Tensor, bias: Tensor | None, pairs: Sequence[tuple[int, int]]) -> Tensor:
    """A stride-2 convolution as one copy and one reduce with no zero taps: the padded input's columns 2 * j + kx
    are copied into a buffer with kx as an axis (batch, channels, kernel width, padded rows, output columns), which
    the reduce reads through a view, rows 2 * i + ky, summing over channels, kx and ky with the weight read as a
    permuted view. Every load of the reduce is then a contiguous row. bench_onnx's CNN (1 x 32 x 64 x 64 * 64 x 32 x
    3 x 3, padding 1, with bias and ReLU, jitted, minimum of 200 calls): 305 -> 185 us for its copies and
    convolution together (bench/README.md, "The CNN's stride-2 convolution on the ONNX side")."""
    batch, channels = x.shape[:2]
    out_channels, _, height, width = weight.shape
    padded = x.pad(((0, 0), (0, 0), *pairs)).contiguous() if any(amount for pair in pairs for amount in pair) else x
    # (batch, channels, rows, out columns, kx) -> kx before the rows, stored: the column gather happens once
    columns = padded.unfold(3, width, 2).permute(0, 1, 4, 2, 3).contiguous()
    windows = columns.unfold(3, height, 2)  # (batch, channels, kx, out rows, out columns, ky)
    rows, outputs = windows.shape[3], windows.shape[4]
    taps = weight.permute(0, 1, 3, 2).reshape(1, out_channels, channels, width, 1, 1, height)
    product = windows.reshape(batch, 1, channels, width, rows, outputs, height) * taps
    result = product.sum((2, 3, 6))
    return result if bias is None else result + bias.reshape(1, -1, 1, 1)


@onnx_op("Conv", 1)
def conv(x: Tensor, weight: Tensor, bias: Tensor | None = None, auto_pad: str = "NOTSET",
         dilations: list[int] | None = None, group: int = 1, kernel_shape: list[int] | None = None,
         pads: list[int] | None = None, strides: list[int] | None = None) -> Tensor:
    """An N-d convolution (cross-correlation) with groups, strides, dilations and pads."""
    kernel = list(kernel_shape or weight.shape[2:])
    strides, dilations = _spatial_options(x, kernel, strides, dilations)
    pairs = spatial_pads(x, kernel, strides, dilations, pads, auto_pad)
    if x.dtype in HALF_FLOATS and weight.dtype == x.dtype:
        # summed in float32 and rounded once, as the reference does (common.HALF_FLOATS)
        wide_bias = widened(bias) if bias is not None else None
        return widened(x).conv2d(widened(weight), wide_bias, groups=group, stride=strides, dilation=dilations,
                                 padding=torch_style_padding(pairs)).cast(x.dtype)
    if _strided_by_columns(x, weight, group, strides, dilations, pairs):
        return _conv_by_columns(x, weight, bias, pairs)
    return x.conv2d(weight, bias, groups=group, stride=strides, dilation=dilations,
                    padding=torch_style_padding(pairs))


@onnx_op("ConvTranspose", 1)
def conv_transpose(x: Tensor, weight: Tensor, bias: Tensor | None = None, auto_pad: str = "NOTSET",
                   dilations: list[int] | None = None, group: int = 1, kernel_shape: list[int] | None = None,
                   output_padding: list[int] | None = None, output_shape: list[int] | None = None,
                   pads: list[int] | None = None, strides: list[int] | None = None) -> Tensor:
    """The transposed N-d convolution: the full output, then cropped by pads or to output_shape."""
    kernel = list(kernel_shape or weight.shape[2:])
    count = len(kernel)
    strides, dilations = _spatial_options(x, kernel, strides, dilations)
    extra = list(output_padding or [0] * count)
    sizes = x.shape[2:]
    full = [stride * (size - 1) + (k - 1) * dilation + 1 for size, stride, k, dilation in
            zip(sizes, strides, kernel, dilations, strict=False)]
    if output_shape or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        wanted = list(output_shape)[-count:] if output_shape else \
            [size * stride for size, stride in zip(sizes, strides, strict=False)]
        pairs = []
        for length, target, more in zip(full, wanted, extra, strict=False):
            total = max(0, length + more - target)
            half = total // 2
            pairs.append((total - half, half) if auto_pad != "SAME_UPPER" else (half, total - half))
    elif pads:
        pairs = pairs_from_onnx_pads(pads)
    else:
        pairs = [(0, 0)] * count
    y = x.conv_transpose2d(weight, None, groups=group, stride=strides, dilation=dilations)
    y = y.pad(((0, 0), (0, 0), *((0, more) for more in extra))) if any(extra) else y
    y = y[(slice(None), slice(None), *(slice(begin, y.shape[2 + axis] - end) for axis, (begin, end) in
                                       enumerate(pairs)))]
    if output_shape:
        short = [max(0, target - size) for target, size in zip(list(output_shape)[-count:], y.shape[2:], strict=False)]
        y = y.pad(((0, 0), (0, 0), *((0, more) for more in short))) if any(short) else y
    return y + bias.reshape(1, -1, *[1] * count) if bias is not None else y


def _pool_setup(x: Tensor, kernel_shape: list[int], strides: list[int] | None, dilations: list[int] | None,
                pads: list[int] | None, auto_pad: str) -> tuple[list[int], list[int], list[tuple[int, int]]]:
    strides, dilations = _spatial_options(x, kernel_shape, strides, dilations)
    return strides, dilations, spatial_pads(x, kernel_shape, strides, dilations, pads, auto_pad)


@onnx_op("MaxPool", 1)
def max_pool(x: Tensor, kernel_shape: list[int], auto_pad: str = "NOTSET", ceil_mode: int = 0,
             dilations: list[int] | None = None, pads: list[int] | None = None, storage_order: int = 0,
             strides: list[int] | None = None) -> Tensor | tuple[Tensor, Tensor]:
    """The maximum over each window, and the flat int64 index of each maximum in x."""
    strides, dilations, pairs = _pool_setup(x, kernel_shape, strides, dilations, pads, auto_pad)
    source = x if dtypes.is_float(x.dtype) else x.cast(dtypes.float32)
    values, indices = source.max_pool2d(tuple(kernel_shape), stride=tuple(strides), dilation=tuple(dilations),
                                        padding=torch_style_padding(pairs), ceil_mode=bool(ceil_mode),
                                        return_indices=True)
    values = values.cast(x.dtype)
    spatial = x.shape[2:]
    indices = indices.cast(index_dtype(x.device))
    if storage_order and len(spatial) == 2:
        row, column = indices // spatial[1], indices % spatial[1]
        indices = column * spatial[0] + row
    planes = Tensor.arange(x.shape[0] * x.shape[1], device=x.device, dtype=index_dtype(x.device)).reshape(
        x.shape[0], x.shape[1], *[1] * len(spatial))
    return values, indices + planes * prod(spatial)


@onnx_op("AveragePool", 1)
def average_pool(x: Tensor, kernel_shape: list[int], auto_pad: str = "NOTSET", ceil_mode: int = 0,
                 count_include_pad: int = 0, dilations: list[int] | None = None, pads: list[int] | None = None,
                 strides: list[int] | None = None) -> Tensor:
    """The mean over each window; padding counts toward the divisor only with count_include_pad."""
    strides, dilations, pairs = _pool_setup(x, kernel_shape, strides, dilations, pads, auto_pad)
    return x.avg_pool2d(tuple(kernel_shape), stride=tuple(strides), dilation=tuple(dilations),
                        padding=torch_style_padding(pairs), ceil_mode=bool(ceil_mode),
                        count_include_pad=bool(count_include_pad))


@onnx_op("LpPool", 1)
def lp_pool(x: Tensor, kernel_shape: list[int], auto_pad: str = "NOTSET", ceil_mode: int = 0,
            dilations: list[int] | None = None, p: int = 2, pads: list[int] | None = None,
            strides: list[int] | None = None) -> Tensor:
    """The p-norm of each window (padding contributes zeros)."""
    strides, dilations, pairs = _pool_setup(x, kernel_shape, strides, dilations, pads, auto_pad)
    powered = x.abs().pow(p)
    mean = powered.avg_pool2d(tuple(kernel_shape), stride=tuple(strides), dilation=tuple(dilations),
                              padding=torch_style_padding(pairs), ceil_mode=bool(ceil_mode), count_include_pad=True)
    return (mean * prod(kernel_shape)).pow(1.0 / p)


@onnx_op("GlobalAveragePool", 1)
def global_average_pool(x: Tensor) -> Tensor:
    """The mean over all spatial axes, kept as size-1 axes."""
    return x.mean(tuple(range(2, x.ndim)), keepdim=True)


@onnx_op("GlobalMaxPool", 1)
def global_max_pool(x: Tensor) -> Tensor:
    """The maximum over all spatial axes, kept as size-1 axes."""
    return x.max(tuple(range(2, x.ndim)), keepdim=True)


@onnx_op("GlobalLpPool", 2)
def global_lp_pool(x: Tensor, p: int = 2) -> Tensor:
    """The p-norm over all spatial axes, kept as size-1 axes."""
    return x.abs().pow(p).sum(tuple(range(2, x.ndim)), keepdim=True).pow(1.0 / p)


@onnx_op("MaxUnpool", 9, host_inputs=(2,))
def max_unpool(x: Tensor, indices: Tensor, output_shape: list[int] | None = None, kernel_shape: list[int] | None = None,
               pads: list[int] | None = None, strides: list[int] | None = None) -> Tensor:
    """x's values placed at the flat `indices` MaxPool returned, zeros elsewhere."""
    kernel = list(kernel_shape or [])
    strides = list(strides or [1] * len(kernel))
    pairs = pairs_from_onnx_pads(pads) if pads else [(0, 0)] * len(kernel)
    if output_shape is not None:
        shape = as_ints(output_shape) or []
    else:
        spatial = [(size - 1) * stride + k - begin - end for size, stride, k, (begin, end) in
                   zip(x.shape[2:], strides, kernel, pairs, strict=False)]
        shape = [x.shape[0], x.shape[1], *spatial]
    flat = Tensor.zeros(prod(shape), dtype=x.dtype, device=x.device)
    return flat.scatter(0, indices.reshape(-1).cast(index_dtype(x.device)), x.reshape(-1)).reshape(tuple(shape))


def _channel_shape(x: Tensor) -> tuple[int, ...]:
    return (1, -1, *[1] * (x.ndim - 2))


@onnx_op("BatchNormalization", 1)
def batch_normalization(x: Tensor, scale: Tensor, bias: Tensor, mean: Tensor, variance: Tensor,
                        epsilon: float = 1e-5, momentum: float = 0.9, training_mode: int = 0
                        ) -> Tensor | tuple[Tensor, Tensor, Tensor]:
    """(x - mean) / sqrt(variance + epsilon) * scale + bias per channel; batch statistics in training mode."""
    shape = _channel_shape(x)
    if training_mode:
        axes = tuple(axis for axis in range(x.ndim) if axis != 1)
        batch_mean, batch_variance = x.mean(axes), x.var(axes, correction=0)
        y = (x - batch_mean.reshape(shape)) * (batch_variance.reshape(shape) + epsilon).rsqrt()
        y = y * scale.reshape(shape) + bias.reshape(shape)
        running_mean = mean * momentum + batch_mean * (1 - momentum)
        running_variance = variance * momentum + batch_variance * (1 - momentum)
        return y, running_mean, running_variance
    inverse = (variance + epsilon).rsqrt()
    return (x - mean.reshape(shape)) * (inverse * scale).reshape(shape) + bias.reshape(shape)


@onnx_op("InstanceNormalization", 1)
def instance_normalization(x: Tensor, scale: Tensor, bias: Tensor, epsilon: float = 1e-5) -> Tensor:
    """Each (sample, channel) plane normalized over its spatial axes, then scaled and shifted per channel."""
    axes = tuple(range(2, x.ndim))
    mean = x.mean(axes, keepdim=True)
    variance = ((x - mean) ** 2).mean(axes, keepdim=True)
    shape = _channel_shape(x)
    return (x - mean) * (variance + epsilon).rsqrt() * scale.reshape(shape) + bias.reshape(shape)


@onnx_op("LayerNormalization", 17)
def layer_normalization(x: Tensor, scale: Tensor, bias: Tensor | None = None, axis: int = -1,
                        epsilon: float = 1e-5, stash_type: int = 1) -> tuple[Tensor, Tensor, Tensor]:
    """x normalized over the axes from `axis` on, scaled and shifted; also the mean and inverse deviation."""
    axis = axis_of(axis, x.ndim)
    axes = tuple(range(axis, x.ndim))
    work = x.cast(dtypes.float32) if stash_type == 1 and x.dtype != dtypes.float64 else x
    mean = work.mean(axes, keepdim=True)
    inverse = ((work - mean) ** 2).mean(axes, keepdim=True).add(epsilon).rsqrt()
    y = ((work - mean) * inverse).cast(x.dtype) * scale
    return (y + bias if bias is not None else y), mean, inverse


@onnx_op("GroupNormalization", 18)
def group_normalization(x: Tensor, scale: Tensor, bias: Tensor, epsilon: float = 1e-5, num_groups: int = 1,
                        stash_type: int = 1) -> Tensor:
    """x normalized over each group of channels and the spatial axes, then scaled and shifted per channel
    (opset 18: scale and bias per group; 21 on: per channel)."""
    batch, channels = x.shape[0], x.shape[1]
    grouped = x.reshape(batch, num_groups, -1)
    mean = grouped.mean(-1, keepdim=True)
    inverse = ((grouped - mean) ** 2).mean(-1, keepdim=True).add(epsilon).rsqrt()
    y = ((grouped - mean) * inverse).reshape(x.shape)
    if scale.shape[0] != channels:
        scale, bias = scale.repeat_interleave(channels // num_groups), bias.repeat_interleave(channels // num_groups)
    shape = _channel_shape(x)
    return y * scale.reshape(shape) + bias.reshape(shape)


@onnx_op("RMSNormalization", 23)
def rms_normalization(x: Tensor, scale: Tensor, axis: int = -1, epsilon: float = 1e-5, stash_type: int = 1) -> Tensor:
    """x divided by its root mean square over the axes from `axis` on, times scale."""
    axes = tuple(range(axis_of(axis, x.ndim), x.ndim))
    work = x.cast(dtypes.float32) if stash_type == 1 and x.dtype != dtypes.float64 else x
    return (work * (work * work).mean(axes, keepdim=True).add(epsilon).rsqrt()).cast(x.dtype) * scale


@onnx_op("LpNormalization", 1)
def lp_normalization(x: Tensor, axis: int = -1, p: int = 2) -> Tensor:
    """x divided by its p-norm (1 or 2) along `axis`."""
    axis = axis_of(axis, x.ndim)
    norm = x.abs().sum(axis, keepdim=True) if p == 1 else (x * x).sum(axis, keepdim=True).sqrt()
    return (norm == 0).where(0, x / norm)


@onnx_op("MeanVarianceNormalization", 9)
def mean_variance_normalization(x: Tensor, axes: list[int] | None = None) -> Tensor:
    """(x - mean) / (standard deviation + 1e-9) over `axes` (batch and spatial axes by default)."""
    chosen = tuple(axes_of(axes if axes is not None else [0, 2, 3], x.ndim))
    mean = x.mean(chosen, keepdim=True)
    deviation = ((x * x).mean(chosen, keepdim=True) - mean * mean).sqrt()
    return (x - mean) / (deviation + 1e-9)


@onnx_op("LRN", 1)
def local_response_normalization(x: Tensor, size: int, alpha: float = 0.0001, beta: float = 0.75,
                                 bias: float = 1.0) -> Tensor:
    """x / (bias + alpha / size * sum of squares over `size` neighbouring channels) ** beta."""
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    squares = (x * x).pad(((0, 0), (before, after), *[(0, 0)] * (x.ndim - 2)))
    window = squares[:, 0:x.shape[1]]
    for offset in range(1, size):
        window = window + squares[:, offset:offset + x.shape[1]]
    return x / (bias + alpha / size * window).pow(beta)


@onnx_op("Dropout", 1)
def dropout(x: Tensor, ratio: Tensor | float | None = None, training_mode: Tensor | None = None,
            seed: int | None = None) -> tuple[Tensor, Tensor]:
    """Inference: x unchanged and an all-true mask. Training mode drops with `ratio`, seeded by `seed`."""
    training = training_mode is not None and bool(training_mode.item())
    rate = (float(ratio.item()) if isinstance(ratio, Tensor) else float(ratio)) if ratio is not None else 0.5
    if not training or rate == 0.0:
        return x, Tensor.ones(x.shape, dtype=dtypes.bool, device=x.device)
    generator = np.random.default_rng(seed)
    keep = generator.random(x.shape) >= rate
    mask = Tensor(keep, device=x.device)
    return mask.where(x / (1 - rate), 0).cast(x.dtype), mask


# ---- Resize ----

def _source_coordinates(mode: str, out_size: int, in_size: int, scale: float, roi: tuple[float, float]
                        ) -> np.ndarray:
    """Where each output position samples the input, for a coordinate_transformation_mode."""
    position = np.arange(out_size, dtype=np.float64)
    if mode == "half_pixel":
        return (position + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        adjustment = out_size / (scale * in_size)
        offset = in_size / 2 * (1 - adjustment)
        return offset + (position + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (position + 0.5) / scale - 0.5 if out_size > 1 else np.zeros(out_size)
    if mode == "align_corners":
        # the resized length is in_size * scale, not its floor, when the output size came from a scale
        resized = in_size * scale
        return position * (in_size - 1) / (resized - 1) if out_size > 1 else np.zeros(out_size)
    if mode == "asymmetric":
        return position / scale
    if mode == "tf_crop_and_resize":
        start, end = roi
        if out_size > 1:
            return start * (in_size - 1) + position * (end - start) * (in_size - 1) / (out_size - 1)
        return np.full(out_size, 0.5 * (start + end) * (in_size - 1))
    raise NotImplementedError(f"coordinate_transformation_mode {mode!r} is not supported")


def _cubic(distance: np.ndarray, coefficient: float) -> np.ndarray:
    """Keys' cubic convolution kernel with parameter `coefficient` (ONNX's cubic_coeff_a)."""
    d = np.abs(distance)
    near = ((coefficient + 2) * d - (coefficient + 3)) * d * d + 1
    far = ((coefficient * d - 5 * coefficient) * d + 8 * coefficient) * d - 4 * coefficient
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def _nearest(coordinates: np.ndarray, nearest_mode: str) -> np.ndarray:
    if nearest_mode == "round_prefer_floor":
        return np.ceil(coordinates - 0.5)
    if nearest_mode == "round_prefer_ceil":
        return np.floor(coordinates + 0.5)
    if nearest_mode == "floor":
        return np.floor(coordinates)
    if nearest_mode == "ceil":
        return np.ceil(coordinates)
    raise NotImplementedError(f"nearest_mode {nearest_mode!r} is not supported")


def _axis_taps(in_size: int, out_size: int, scale: float, mode: str, coordinate_mode: str, nearest_mode: str,
               cubic_coeff_a: float, exclude_outside: int, antialias: int, roi: tuple[float, float]
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per output position: the input indices read, their weights (taps x out), and whether it lies outside."""
    coordinates = _source_coordinates(coordinate_mode, out_size, in_size, scale, roi)
    outside = (coordinates < 0) | (coordinates > in_size - 1)
    if mode == "nearest":
        index = np.clip(_nearest(coordinates, nearest_mode), 0, in_size - 1).astype(np.int64)
        return index[None], np.ones((1, out_size)), outside
    support = 1.0 if mode == "linear" else 2.0
    filter_scale = min(scale, 1.0) if antialias else 1.0
    radius = support / filter_scale
    count = int(math.ceil(2 * radius)) + 1
    start = np.floor(coordinates - radius) + 1
    taps = start[None] + np.arange(count)[:, None]
    distance = (taps - coordinates[None]) * filter_scale
    weights = np.maximum(0.0, 1 - np.abs(distance)) if mode == "linear" else _cubic(distance, cubic_coeff_a)
    if exclude_outside:
        weights = np.where((taps < 0) | (taps > in_size - 1), 0.0, weights)
    total = weights.sum(0, keepdims=True)
    weights = weights / np.where(total == 0, 1.0, total)
    return np.clip(taps, 0, in_size - 1).astype(np.int64), weights, outside


def _resize(x: Tensor, roi: list[float] | None, scales: list[float] | None, sizes: list[int] | None,
            axes: list[int] | None, mode: str, coordinate_mode: str, nearest_mode: str, cubic_coeff_a: float,
            exclude_outside: int, extrapolation_value: float, antialias: int, keep_aspect_ratio_policy: str
            ) -> Tensor:
    chosen = axes_of(axes, x.ndim) if axes else list(range(x.ndim))
    in_sizes = [x.shape[axis] for axis in chosen]
    if sizes:
        if keep_aspect_ratio_policy != "stretch":
            pick = min if keep_aspect_ratio_policy == "not_larger" else max
            common = pick(size / length for size, length in zip(sizes, in_sizes, strict=False))
            axis_scales = [common] * len(chosen)
            out_sizes = [int(math.floor(length * common + 0.5)) for length in in_sizes]
        else:
            out_sizes = list(sizes)
            axis_scales = [size / length for size, length in zip(out_sizes, in_sizes, strict=False)]
    elif scales:
        axis_scales = list(scales)
        out_sizes = [int(math.floor(length * scale)) for length, scale in zip(in_sizes, axis_scales, strict=False)]
    else:
        raise ValueError("Resize needs scales or sizes")
    roi_pairs = [(0.0, 1.0)] * len(chosen)
    if roi and coordinate_mode == "tf_crop_and_resize":
        half = len(roi) // 2
        roi_pairs = [(float(roi[index]), float(roi[index + half])) for index in range(half)]
    outside_mask: Tensor | None = None
    for position, axis in enumerate(chosen):
        if out_sizes[position] == in_sizes[position] and axis_scales[position] == 1.0 and \
                coordinate_mode != "tf_crop_and_resize":
            continue
        index, weights, outside = _axis_taps(in_sizes[position], out_sizes[position], axis_scales[position], mode,
                                             coordinate_mode, nearest_mode, cubic_coeff_a, exclude_outside,
                                             antialias, roi_pairs[position])
        shape = [out_sizes[position] if dim == axis else 1 for dim in range(x.ndim)]
        result = None
        for tap in range(index.shape[0]):
            if not np.any(weights[tap]):
                continue
            picked = x[tuple([slice(None)] * axis + [host_tensor(index[tap], x.device)])]
            if mode != "nearest":
                picked = picked * Tensor(weights[tap].astype(np.float32), device=x.device).reshape(shape)
            result = picked if result is None else result + picked
        assert result is not None
        x = result.cast(x.dtype) if mode != "nearest" and not dtypes.is_float(x.dtype) else result
        if coordinate_mode == "tf_crop_and_resize" and outside.any():
            mask = Tensor(outside, device=x.device).reshape(shape)
            outside_mask = mask if outside_mask is None else outside_mask.bitwise_or(mask)
    if outside_mask is not None:
        x = outside_mask.where(Tensor(extrapolation_value, dtype=x.dtype, device=x.device), x)
    return x


@onnx_op("Resize", 10, host_inputs=(1,))
def resize_10(x: Tensor, scales: list[float], mode: str = "nearest") -> Tensor:
    """Resize with per-axis scales and asymmetric coordinates (opset 10)."""
    return _resize(x, None, scales, None, None, mode, "asymmetric", "floor", -0.75, 0, 0.0, 0, "stretch")


@onnx_op("Resize", 11, host_inputs=(1, 2, 3))
def resize(x: Tensor, roi: list[float] | None = None, scales: list[float] | None = None,
           sizes: list[int] | None = None, antialias: int = 0, axes: list[int] | None = None,
           coordinate_transformation_mode: str = "half_pixel", cubic_coeff_a: float = -0.75,
           exclude_outside: int = 0, extrapolation_value: float = 0.0, keep_aspect_ratio_policy: str = "stretch",
           mode: str = "nearest", nearest_mode: str = "round_prefer_floor") -> Tensor:
    """Resize by scales or to sizes: nearest, linear or cubic, every coordinate mode, antialiasing, axes."""
    return _resize(x, roi or None, scales or None, as_ints(sizes) or None, axes, mode,
                   coordinate_transformation_mode, nearest_mode, cubic_coeff_a, exclude_outside,
                   extrapolation_value, antialias, keep_aspect_ratio_policy)


@onnx_op("Upsample", 7)
def upsample_attribute(x: Tensor, scales: list[float] | None = None, mode: str = "nearest") -> Tensor:
    """Upsample by the `scales` attribute (opset 7)."""
    return _resize(x, None, scales, None, None, mode, "asymmetric", "floor", -0.75, 0, 0.0, 0, "stretch")


@onnx_op("Upsample", 9, host_inputs=(1,))
def upsample(x: Tensor, scales: list[float], mode: str = "nearest") -> Tensor:
    """Upsample by the `scales` input (opset 9)."""
    return _resize(x, None, scales, None, None, mode, "asymmetric", "floor", -0.75, 0, 0.0, 0, "stretch")


@onnx_op("Col2Im", 18, host_inputs=(1, 2))
def col_to_image(x: Tensor, image_shape: list[int], block_shape: list[int], dilations: list[int] | None = None,
                 pads: list[int] | None = None, strides: list[int] | None = None) -> Tensor:
    """Sliding blocks (N, C * prod(block), L) summed back into an image (N, C, *image_shape), the inverse layout of
    an unfold; overlapping blocks add up."""
    image, block = as_ints(image_shape) or [], as_ints(block_shape) or []
    count = len(image)
    dilations, strides = list(dilations or [1] * count), list(strides or [1] * count)
    pairs = pairs_from_onnx_pads(pads) if pads else [(0, 0)] * count
    blocks = [(size + begin + end - dilation * (k - 1) - 1) // stride + 1 for size, (begin, end), dilation, k, stride in
              zip(image, pairs, dilations, block, strides, strict=True)]
    # for each (kernel offset, block) pair, the flat image position it adds to (or a spare slot when it is padding)
    kernel_grid = np.stack(np.meshgrid(*[np.arange(k) for k in block], indexing="ij"), -1).reshape(-1, count)
    block_grid = np.stack(np.meshgrid(*[np.arange(n) for n in blocks], indexing="ij"), -1).reshape(-1, count)
    positions = (block_grid[None, :, :] * np.array(strides) - np.array([begin for begin, _ in pairs])
                 + kernel_grid[:, None, :] * np.array(dilations))
    inside = np.all((positions >= 0) & (positions < np.array(image)), axis=-1)
    flat = np.ravel_multi_index(tuple(np.clip(positions, 0, np.array(image) - 1).reshape(-1, count).T), image)
    spare = prod(image)
    flat = np.where(inside.reshape(-1), flat, spare).astype(np.int32)
    batch, channels = x.shape[0], x.shape[1] // prod(block)
    values = x.reshape(batch, channels, -1)
    index = host_tensor(flat, x.device).reshape(1, 1, -1).expand(values.shape)
    canvas = Tensor.zeros(batch, channels, spare + 1, dtype=x.dtype, device=x.device)
    summed = canvas.scatter_reduce(2, index, values, "sum", include_self=True)
    return summed[:, :, :spare].reshape(batch, channels, *image)
