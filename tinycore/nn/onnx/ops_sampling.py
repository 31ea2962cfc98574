"""Sampling and signal ONNX operators: GridSample and AffineGrid (spatial transformers), the signal windows
(HannWindow, HammingWindow, BlackmanWindow), DFT and STFT, and ImageDecoder (through Pillow, when installed).

GridSample gathers on the device: the sampling positions come from the grid tensor, each tap of the interpolation
(2 per axis for linear, 4 for cubic, 1 for nearest) is one gather of the flattened image, weighted and summed.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from tinycore.dtype import dtypes
from tinycore.helpers import prod
from tinycore.nn.onnx.common import as_ints, onnx_dtype, scalar_of
from tinycore.nn.onnx.registry import onnx_op
from tinycore.tensor import Tensor


def _reflect(x: Tensor, low: float, high: float) -> Tensor:
    """x folded back into [low, high] by reflecting at the borders as often as needed."""
    span = high - low
    below, above = x < low, x > high
    distance = below.where(low - x, above.where(x - high, 0.0))
    folds = (distance / span).floor() if span > 0 else distance * 0
    rest = distance - folds * span
    even = (folds - (folds / 2).floor() * 2) == 0
    from_below = even.where(low + rest, high - rest)
    from_above = even.where(high - rest, low + rest)
    return below.where(from_below, above.where(from_above, x))


def _cubic_weights(fraction: Tensor) -> list[Tensor]:
    """Keys' cubic weights (a = -0.75) of the taps at offsets -1, 0, 1, 2 from the floor."""
    a = -0.75

    def near(t: Tensor) -> Tensor:
        return ((a + 2) * t - (a + 3)) * t * t + 1

    def far(t: Tensor) -> Tensor:
        return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a

    return [far(fraction + 1), near(fraction), near(1 - fraction), far(2 - fraction)]


@onnx_op("GridSample", 16)
def grid_sample(x: Tensor, grid: Tensor, align_corners: int = 0, mode: str = "linear",
                padding_mode: str = "zeros") -> Tensor:
    """x (N, C, *spatial) sampled at the normalized positions of grid (N, *out, axes): nearest, linear or cubic,
    with zeros, border or reflection padding."""
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    spatial = x.shape[2:]
    axes = len(spatial)
    work = grid.cast(dtypes.float32)
    borders = [(0.0, size - 1.0) if align_corners else (-0.5, size - 0.5) for size in spatial]
    coordinates = []
    for axis, size in enumerate(spatial):
        normalized = work[..., axes - 1 - axis]
        position = (normalized + 1) / 2 * (size - 1) if align_corners else ((normalized + 1) * size - 1) / 2
        if mode == "nearest":
            position = position.round()
        low, high = borders[axis]
        outside = (position < low).bitwise_or(position > high)
        if padding_mode == "border":
            position = outside.where(position.clip(0, size - 1), position)
        elif padding_mode == "reflection":
            position = outside.where(_reflect(position, low, high), position)
        coordinates.append(position)
    taps_per_axis: list[list[tuple[Tensor, Tensor | None]]] = []
    for position in coordinates:
        if mode == "nearest":
            taps_per_axis.append([(position, None)])
            continue
        base = position.floor()
        fraction = position - base
        if mode == "linear":
            taps_per_axis.append([(base, 1 - fraction), (base + 1, fraction)])
        else:
            weights = _cubic_weights(fraction)
            taps_per_axis.append([(base + offset, weight) for offset, weight in zip(range(-1, 3), weights,
                                                                                     strict=True)])
    batch, channels = x.shape[0], x.shape[1]
    out_shape = grid.shape[1:-1]
    flat = x.reshape(batch, channels, prod(spatial))
    strides = [prod(spatial[axis + 1:]) for axis in range(axes)]
    result: Tensor | None = None
    for combination in itertools.product(*taps_per_axis):
        linear_index: Tensor | None = None
        valid: Tensor | None = None
        weight: Tensor | None = None
        for axis, (index, tap_weight) in enumerate(combination):
            size = spatial[axis]
            if padding_mode == "zeros":
                inside = (index >= 0).bitwise_and(index <= size - 1)
                valid = inside if valid is None else valid.bitwise_and(inside)
                index = index.clip(0, size - 1)
            elif padding_mode == "border":
                index = index.clip(0, size - 1)
            else:
                index = _reflect(index, *borders[axis]).trunc().clip(0, size - 1)
            part = index.cast(dtypes.int32) * strides[axis]
            linear_index = part if linear_index is None else linear_index + part
            if tap_weight is not None:
                weight = tap_weight if weight is None else weight * tap_weight
        assert linear_index is not None
        gathered = flat.gather(2, linear_index.reshape(batch, 1, -1).expand(batch, channels, prod(out_shape)))
        value = gathered.reshape(batch, channels, *out_shape).cast(dtypes.float32)
        if weight is not None:
            value = value * weight.unsqueeze(1)
        if valid is not None:
            value = valid.unsqueeze(1).where(value, 0.0)
        result = value if result is None else result + value
    assert result is not None
    return result.cast(x.dtype)


@onnx_op("AffineGrid", 20, host_inputs=(1,))
def affine_grid(theta: Tensor, size: list[int], align_corners: int = 0) -> Tensor:
    """The normalized sampling grid (N, *spatial, axes) of the affine maps theta (N, axes, axes + 1)."""
    dims = as_ints(size) or []
    spatial = dims[2:]
    axes = len(spatial)

    def steps(length: int) -> np.ndarray:
        if align_corners:
            return np.linspace(-1.0, 1.0, length) if length > 1 else np.zeros(1)
        return (np.arange(length) * 2 + 1) / length - 1

    mesh = np.meshgrid(*[steps(length) for length in spatial], indexing="ij")
    # the grid's last axis lists x first: the spatial axes reversed, then the homogeneous 1
    base = np.stack([*reversed(mesh), np.ones_like(mesh[0])], axis=-1).reshape(-1, axes + 1)
    points = Tensor(base.astype(np.float32), device=theta.device).cast(theta.dtype)
    grid = points.unsqueeze(0).matmul(theta.transpose(1, 2))
    return grid.reshape(dims[0], *spatial, axes)


def _window(size: Tensor | int, periodic: int, output_datatype: int, coefficients: list[float], device: str | None
            ) -> Tensor:
    length = int(scalar_of(size))
    denominator = length if periodic else length - 1
    n = np.arange(length, dtype=np.float64)
    values = np.zeros(length)
    for order, coefficient in enumerate(coefficients):
        values += coefficient * np.cos(2 * math.pi * order * n / max(denominator, 1))
    return Tensor(values.astype(np.float32), device=device).cast(onnx_dtype(output_datatype, "window"))


@onnx_op("HannWindow", 17)
def hann_window(size: Tensor, output_datatype: int = 1, periodic: int = 1) -> Tensor:
    """The Hann window of `size` points."""
    return _window(size, periodic, output_datatype, [0.5, -0.5], size.device)


@onnx_op("HammingWindow", 17)
def hamming_window(size: Tensor, output_datatype: int = 1, periodic: int = 1) -> Tensor:
    """The Hamming window (alpha 25/46) of `size` points."""
    return _window(size, periodic, output_datatype, [25 / 46, -(1 - 25 / 46)], size.device)


@onnx_op("BlackmanWindow", 17)
def blackman_window(size: Tensor, output_datatype: int = 1, periodic: int = 1) -> Tensor:
    """The Blackman window of `size` points."""
    return _window(size, periodic, output_datatype, [0.42, -0.5, 0.08], size.device)


def _along_last(x: Tensor, axis: int) -> tuple[Tensor, list[int]]:
    """x with `axis` moved last, and the permutation that moves it back."""
    order = [dim for dim in range(x.ndim) if dim != axis] + [axis]
    back = [order.index(dim) for dim in range(x.ndim)]
    return x.permute(order), back


def _dft(x: Tensor, length: int | None, axis: int, inverse: bool, onesided: bool) -> Tensor:
    """The discrete Fourier transform of x (..., 1 or 2) along `axis`, as dense cosine and sine products."""
    axis = axis % x.ndim
    real = x[..., 0].cast(dtypes.float32)
    imaginary = x[..., 1].cast(dtypes.float32) if x.shape[-1] == 2 else None
    samples = x.shape[axis]
    if length is None:
        length = 2 * (samples - 1) if inverse and onesided else samples
    real, back = _along_last(real, axis)
    imaginary = _along_last(imaginary, axis)[0] if imaginary is not None else None
    used = np.arange(samples)[None, :]
    if inverse and onesided:
        # the missing half of the spectrum is the conjugate mirror: frequencies 1..N/2-1 count twice
        frequencies = np.arange(samples)[None, :]
        times = np.arange(length)[:, None]
        weights = np.where((frequencies == 0) | (2 * frequencies == length), 1.0, 2.0) * (frequencies < length)
        angle = 2 * math.pi * times * frequencies / length
        cosine, sine = weights * np.cos(angle) / length, -weights * np.sin(angle) / length
        out_real = real.matmul(Tensor(cosine.T.astype(np.float32), device=x.device))
        if imaginary is not None:
            out_real = out_real + imaginary.matmul(Tensor(sine.T.astype(np.float32), device=x.device))
        return out_real.permute(back).unsqueeze(-1).cast(x.dtype)
    outputs = length // 2 + 1 if onesided else length
    frequencies = np.arange(outputs)[:, None]
    sign = 1.0 if inverse else -1.0
    angle = 2 * math.pi * frequencies * used / length
    scale = 1.0 / length if inverse else 1.0
    inside = used < length
    cosine = (np.cos(angle) * inside * scale).T.astype(np.float32)
    sine = (sign * np.sin(angle) * inside * scale).T.astype(np.float32)
    cos_tensor, sin_tensor = Tensor(cosine, device=x.device), Tensor(sine, device=x.device)
    out_real, out_imaginary = real.matmul(cos_tensor), real.matmul(sin_tensor)
    if imaginary is not None:
        out_real = out_real - imaginary.matmul(sin_tensor)
        out_imaginary = out_imaginary + imaginary.matmul(cos_tensor)
    return Tensor.stack(out_real.permute(back), out_imaginary.permute(back), dim=-1).cast(x.dtype)


@onnx_op("DFT", 17)
def dft_17(x: Tensor, dft_length: Tensor | None = None, axis: int = 1, inverse: int = 0, onesided: int = 0
           ) -> Tensor:
    """The (inverse, one-sided) discrete Fourier transform along `axis` (an attribute, opset 17)."""
    length = int(scalar_of(dft_length)) if dft_length is not None else None
    return _dft(x, length, axis, bool(inverse), bool(onesided))


@onnx_op("DFT", 20)
def dft(x: Tensor, dft_length: Tensor | None = None, axis: Tensor | None = None, inverse: int = 0,
        onesided: int = 0) -> Tensor:
    """The (inverse, one-sided) discrete Fourier transform along `axis` (an input, default -2)."""
    length = int(scalar_of(dft_length)) if dft_length is not None else None
    chosen = int(scalar_of(axis)) if axis is not None else -2
    return _dft(x, length, chosen, bool(inverse), bool(onesided))


@onnx_op("STFT", 17)
def stft(signal: Tensor, frame_step: Tensor, window: Tensor | None = None, frame_length: Tensor | None = None,
         onesided: int = 1) -> Tensor:
    """The short-time Fourier transform: windowed frames of `signal` (batch, length, 1 or 2), each transformed;
    (batch, frames, bins, 2)."""
    step = int(scalar_of(frame_step))
    size = int(scalar_of(frame_length)) if frame_length is not None else int(window.shape[0]) if window is not None \
        else signal.shape[1]
    count = (signal.shape[1] - size) // step + 1
    frames = Tensor.stack(*[signal[:, index * step:index * step + size] for index in range(count)], dim=1)
    if window is not None:
        frames = frames * window.reshape(1, 1, size, 1).cast(frames.dtype)
    return _dft(frames, size, 2, False, bool(onesided) and signal.shape[-1] == 1)


@onnx_op("ImageDecoder", 20)
def image_decoder(encoded: Tensor, pixel_format: str = "RGB") -> Tensor:
    """An encoded image (the file's bytes as uint8) decoded by Pillow into (height, width, channels) uint8, in RGB,
    BGR or Grayscale order."""
    try:
        import PIL.Image
    except ImportError as error:
        raise NotImplementedError("ImageDecoder needs Pillow: pip install pillow") from error
    import io
    image = PIL.Image.open(io.BytesIO(encoded.numpy().tobytes()))
    if pixel_format == "Grayscale":
        pixels = np.array(image.convert("L"))[:, :, None]
    else:
        pixels = np.array(image.convert("RGB"))
        pixels = pixels[:, :, ::-1] if pixel_format == "BGR" else pixels
    return Tensor(np.require(pixels, dtype=np.uint8, requirements="C"), device=encoded.device)


@onnx_op("MelWeightMatrix", 17)
def mel_weight_matrix(num_mel_bins: Tensor, dft_length: Tensor, sample_rate: Tensor, lower_edge_hertz: Tensor,
                      upper_edge_hertz: Tensor, output_datatype: int = 1) -> Tensor:
    """The (dft_length // 2 + 1, num_mel_bins) matrix of triangular mel filters over the spectrogram's bins."""
    bins, length, rate = int(scalar_of(num_mel_bins)), int(scalar_of(dft_length)), int(scalar_of(sample_rate))
    low, high = float(scalar_of(lower_edge_hertz)), float(scalar_of(upper_edge_hertz))
    low_mel, high_mel = 2595 * math.log10(1 + low / 700), 2595 * math.log10(1 + high / 700)
    step = (high_mel - low_mel) / (bins + 2)
    edges = 700 * (10 ** ((np.arange(bins + 2) * step + low_mel) / 2595) - 1)
    points = (((length + 1) * edges) // rate).astype(int)
    matrix = np.zeros((length // 2 + 1, bins))
    for index in range(bins):
        left, center, right = points[index], points[index + 1], points[index + 2]
        if center == left:
            matrix[center, index] = 1
        else:
            matrix[left:center + 1, index] = (np.arange(left, center + 1) - left) / (center - left)
        if right > center:
            matrix[center:right, index] = (right - np.arange(center, right)) / (right - center)
    return Tensor(matrix.astype(np.float32), device=num_mel_bins.device).cast(onnx_dtype(output_datatype,
                                                                                         "MelWeightMatrix"))


@onnx_op("DeformConv", 19)
def deform_conv(x: Tensor, weight: Tensor, offset: Tensor, bias: Tensor | None = None, mask: Tensor | None = None,
                dilations: list[int] | None = None, group: int = 1, kernel_shape: list[int] | None = None,
                offset_group: int = 1, pads: list[int] | None = None, strides: list[int] | None = None) -> Tensor:
    """A 2-D convolution whose kernel taps sample x at learned offsets (bilinear, zero outside the image), each
    tap's sample scaled by `mask` when given."""
    batch, channels, height, width = x.shape
    kernel = list(kernel_shape or weight.shape[2:])
    taps = kernel[0] * kernel[1]
    dilation_y, dilation_x = dilations or [1, 1]
    stride_y, stride_x = strides or [1, 1]
    top, left = (pads or [0, 0, 0, 0])[:2]
    out_h, out_w = offset.shape[2], offset.shape[3]
    per_group = channels // offset_group
    offsets = offset.reshape(batch, offset_group, taps, 2, out_h, out_w).cast(dtypes.float32)
    masks = mask.reshape(batch, offset_group, taps, out_h, out_w).cast(dtypes.float32) if mask is not None else None
    rows = Tensor.arange(out_h, device=x.device).reshape(1, 1, out_h, 1).cast(dtypes.float32) * stride_y - top
    columns = Tensor.arange(out_w, device=x.device).reshape(1, 1, 1, out_w).cast(dtypes.float32) * stride_x - left
    flat = x.reshape(batch, offset_group, per_group, height * width).cast(dtypes.float32)
    samples = []
    for tap in range(taps):
        ky, kx = divmod(tap, kernel[1])
        y = rows + ky * dilation_y + offsets[:, :, tap, 0]
        x_position = columns + kx * dilation_x + offsets[:, :, tap, 1]
        y0, x0 = y.floor(), x_position.floor()
        value: Tensor | None = None
        for corner_y, weight_y in ((y0, 1 - (y - y0)), (y0 + 1, y - y0)):
            for corner_x, weight_x in ((x0, 1 - (x_position - x0)), (x0 + 1, x_position - x0)):
                inside = (corner_y >= 0).bitwise_and(corner_y <= height - 1).bitwise_and(corner_x >= 0) \
                    .bitwise_and(corner_x <= width - 1)
                index = (corner_y.clip(0, height - 1) * width + corner_x.clip(0, width - 1)).cast(dtypes.int32)
                gathered = flat.gather(3, index.reshape(batch, offset_group, 1, -1).expand(
                    batch, offset_group, per_group, out_h * out_w)).reshape(batch, offset_group, per_group, out_h,
                                                                            out_w)
                term = inside.unsqueeze(2).where(gathered * (weight_y * weight_x).unsqueeze(2), 0.0)
                value = term if value is None else value + term
        assert value is not None
        if masks is not None:
            value = value * masks[:, :, tap].unsqueeze(2)
        samples.append(value.reshape(batch, channels, out_h * out_w))
    columns_all = Tensor.stack(*samples, dim=2)
    per_conv_group = channels // group
    outputs = []
    out_per_group = weight.shape[0] // group
    for index in range(group):
        weights = weight[index * out_per_group:(index + 1) * out_per_group].reshape(out_per_group, -1)
        cols = columns_all[:, index * per_conv_group:(index + 1) * per_conv_group].reshape(batch, per_conv_group * taps,
                                                                                          -1)
        outputs.append(weights.cast(dtypes.float32).matmul(cols))
    result = (outputs[0].cat(*outputs[1:], dim=1) if len(outputs) > 1 else outputs[0]).reshape(
        batch, weight.shape[0], out_h, out_w)
    if bias is not None:
        result = result + bias.reshape(1, -1, 1, 1)
    return result.cast(x.dtype)
