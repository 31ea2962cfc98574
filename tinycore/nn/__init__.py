"""Neural-network layers with tinygrad's names, arguments, defaults and initialization schemes.

A layer is a plain object whose Tensor attributes are its state (see `tinycore.nn.state.get_state_dict`) and whose
`__call__` runs it. Training mode is `Tensor.train()` (or `Tensor.training = True`, or `Context(TRAINING=1)`):
BatchNorm uses batch statistics and updates its running statistics only then.
"""
from __future__ import annotations

import math

from tinycore import helpers
from tinycore.dtype import dtypes
from tinycore.helpers import flatten, make_tuple, prod
from tinycore.nn import datasets as datasets
from tinycore.nn import optim as optim
from tinycore.nn import state as state
from tinycore.nn.optim import filled_buffer
from tinycore.tensor import Tensor

__all__ = ["BatchNorm", "BatchNorm2d", "BatchNorm3d", "Conv1d", "Conv2d", "ConvTranspose1d", "ConvTranspose2d",
           "Embedding", "GroupNorm", "InstanceNorm", "LSTMCell", "LayerNorm", "LayerNorm2d", "Linear", "RMSNorm"]


def _state_buffer(tensor: Tensor) -> Tensor:
    """`tensor` marked as state that optimizers do not train (running statistics, counters)."""
    tensor.requires_grad = False
    return tensor


def _ones(*shape: int) -> Tensor:
    """A trainable tensor of ones with a buffer of its own."""
    return filled_buffer(shape, 1, dtypes.default_float, None)


def _zeros(*shape: int) -> Tensor:
    """A trainable tensor of zeros with a buffer of its own."""
    return filled_buffer(shape, 0, dtypes.default_float, None)


class Linear:
    """y = x @ weight.T + bias. Weight and bias are uniform in +-1/sqrt(in_features) (torch's default)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        bound = 1 / math.sqrt(in_features)
        self.weight = Tensor.uniform(out_features, in_features, low=-bound, high=bound)
        self.bias = Tensor.uniform(out_features, low=-bound, high=bound) if bias else None

    def __call__(self, x: Tensor) -> Tensor:
        """Apply the layer to the last axis of `x`."""
        return x.linear(self.weight.transpose(), self.bias)


def _same_padding(kernel_size: tuple[int, ...], dilation: int | tuple[int, ...]) -> list[int]:
    """Padding (flat, last axis first, as Tensor.pad takes it) that keeps the spatial size at stride 1."""
    dilations = make_tuple(dilation, len(kernel_size))
    totals = [step * (size - 1) for step, size in zip(dilations, kernel_size, strict=True)]
    return flatten((total // 2, total - total // 2) for total in reversed(totals))


class Conv2d:
    """An N-dimensional convolution (2-D by default; the kernel size's length sets N).

    `padding` is an int, a sequence (per axis, or flat (before, after) pairs with the last axis first), or 'same' /
    'valid'. Weight and bias are uniform in +-1/sqrt(in_channels * prod(kernel_size)).
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, ...], stride: int = 1,
                 padding: int | tuple[int, ...] | str = 0, dilation: int = 1, groups: int = 1, bias: bool = True):
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"Conv2d: in_channels ({in_channels}) and out_channels ({out_channels}) must both be "
                             f"divisible by groups ({groups})")
        self.kernel_size = make_tuple(kernel_size, 2)
        self.stride, self.dilation, self.groups = stride, dilation, groups
        if isinstance(padding, str):
            if padding.lower() == "same":
                if any(step != 1 for step in make_tuple(stride, len(self.kernel_size))):
                    raise ValueError(f"Conv2d: padding='same' needs stride 1, got stride={stride}")
                self.padding: int | tuple[int, ...] | list[int] = _same_padding(self.kernel_size, dilation)
            elif padding.lower() == "valid":
                self.padding = 0
            else:
                raise ValueError(f"Conv2d: padding must be an int, a sequence, 'same' or 'valid', got {padding!r}")
        else:
            self.padding = padding
        bound = 1 / math.sqrt(in_channels * prod(self.kernel_size))
        self.weight = Tensor.uniform(out_channels, in_channels // groups, *self.kernel_size, low=-bound, high=bound)
        self.bias = Tensor.uniform(out_channels, low=-bound, high=bound) if bias else None

    def __call__(self, x: Tensor) -> Tensor:
        """Convolve `x` of shape (batch, in_channels, *spatial)."""
        return x.conv2d(self.weight, self.bias, groups=self.groups, stride=self.stride, dilation=self.dilation,
                        padding=self.padding)


def Conv1d(in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, padding: int | str = 0,  # noqa: N802
           dilation: int = 1, groups: int = 1, bias: bool = True) -> Conv2d:
    """A 1-D convolution: a Conv2d with a one-element kernel size, applied to (batch, channels, length)."""
    return Conv2d(in_channels, out_channels, (kernel_size,), stride, padding, dilation, groups, bias)


class ConvTranspose2d(Conv2d):
    """An N-dimensional transposed convolution; weight shape (in_channels, out_channels // groups, *kernel_size).

    Weight and bias are uniform in +-1/sqrt(in_channels * prod(kernel_size)).
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, ...], stride: int = 1,
                 padding: int | tuple[int, ...] = 0, output_padding: int | tuple[int, ...] = 0, dilation: int = 1,
                 groups: int = 1, bias: bool = True):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias)
        bound = 1 / math.sqrt(in_channels * prod(self.kernel_size))
        self.weight = Tensor.uniform(in_channels, out_channels // groups, *self.kernel_size, low=-bound, high=bound)
        self.output_padding = output_padding

    def __call__(self, x: Tensor) -> Tensor:
        """Apply the transposed convolution to `x` of shape (batch, in_channels, *spatial)."""
        return x.conv_transpose2d(self.weight, self.bias, groups=self.groups, stride=self.stride,
                                  dilation=self.dilation, padding=self.padding, output_padding=self.output_padding)


def ConvTranspose1d(in_channels: int, out_channels: int, kernel_size: int, stride: int = 1,  # noqa: N802
                    padding: int = 0, output_padding: int = 0, dilation: int = 1, groups: int = 1,
                    bias: bool = True) -> ConvTranspose2d:
    """A 1-D transposed convolution: a ConvTranspose2d with a one-element kernel size."""
    return ConvTranspose2d(in_channels, out_channels, (kernel_size,), stride, padding, output_padding, dilation,
                           groups, bias)


class BatchNorm:
    """Batch normalization over axis 1 of inputs of any rank (BatchNorm2d and BatchNorm3d are the same class).

    Under `Context(TRAINING=1)` (or without running statistics) it normalizes with the batch's mean and biased
    variance; in training it also updates running_mean and running_var (unbiased) with `momentum`, and counts
    num_batches_tracked. Otherwise it uses the running statistics.
    """

    def __init__(self, sz: int, eps: float = 1e-5, affine: bool = True, track_running_stats: bool = True,
                 momentum: float = 0.1):
        self.eps, self.track_running_stats, self.momentum = eps, track_running_stats, momentum
        self.weight: Tensor | None = _ones(sz) if affine else None
        self.bias: Tensor | None = _zeros(sz) if affine else None
        self.num_batches_tracked = _state_buffer(filled_buffer((), 0, dtypes.long, None))
        if track_running_stats:
            self.running_mean = _state_buffer(filled_buffer((sz,), 0, dtypes.default_float, None))
            self.running_var = _state_buffer(filled_buffer((sz,), 1, dtypes.default_float, None))

    def calc_stats(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The mean and variance used to normalize `x`: the running ones in eval mode, else the batch's."""
        channel_shape = (1, -1) + (1,) * (x.ndim - 2)
        if self.track_running_stats and not helpers.TRAINING:
            return self.running_mean, self.running_var
        reduce_axes = tuple(axis for axis in range(x.ndim) if axis != 1)
        batch_mean = x.mean(axis=reduce_axes)
        centered = x - batch_mean.detach().reshape(channel_shape)
        batch_var = (centered * centered).mean(axis=reduce_axes)
        return batch_mean, batch_var

    def __call__(self, x: Tensor) -> Tensor:
        """Normalize `x` of shape (batch, channels, *spatial)."""
        if x.ndim < 2:
            raise ValueError(f"BatchNorm expects an input with a channel axis (batch, channels, ...), got {x.shape}")
        batch_mean, batch_var = self.calc_stats(x)
        if self.track_running_stats and helpers.TRAINING:
            count = prod(x.shape) // x.shape[1]
            unbiased_var = batch_var.detach() * (count / max(count - 1, 1))
            self.running_mean.assign((1 - self.momentum) * self.running_mean + self.momentum * batch_mean.detach())
            self.running_var.assign((1 - self.momentum) * self.running_var + self.momentum * unbiased_var)
            self.num_batches_tracked.assign(self.num_batches_tracked + 1)
        return x.batchnorm(self.weight, self.bias, batch_mean, (batch_var + self.eps).rsqrt())


BatchNorm2d = BatchNorm3d = BatchNorm


class LayerNorm:
    """Normalization over the last len(normalized_shape) axes, then an optional elementwise affine map."""

    def __init__(self, normalized_shape: int | tuple[int, ...], eps: float = 1e-5, elementwise_affine: bool = True):
        self.normalized_shape: tuple[int, ...] = make_tuple(normalized_shape, 1)
        self.axis = tuple(-1 - index for index in range(len(self.normalized_shape)))
        self.eps = eps
        self.weight: Tensor | None = _ones(*self.normalized_shape) if elementwise_affine else None
        self.bias: Tensor | None = _zeros(*self.normalized_shape) if elementwise_affine else None

    def __call__(self, x: Tensor) -> Tensor:
        """Normalize the trailing axes of `x`, whose sizes must be normalized_shape."""
        if tuple(x.shape[-len(self.normalized_shape):]) != self.normalized_shape:
            raise ValueError(f"LayerNorm: the last axes of the input {x.shape} must be {self.normalized_shape}")
        normalized = x.layernorm(eps=self.eps, axis=self.axis)
        if self.weight is None or self.bias is None:
            return normalized
        return normalized * self.weight + self.bias


class LayerNorm2d(LayerNorm):
    """LayerNorm over the channel axis of (batch, channels, height, width) inputs."""

    def __call__(self, x: Tensor) -> Tensor:
        """Normalize the channels of every pixel of `x`."""
        return super().__call__(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


def _channel_affine(x: Tensor, weight: Tensor | None, bias: Tensor | None) -> Tensor:
    """x * weight + bias with per-channel (axis 1) parameters."""
    if weight is None or bias is None:
        return x
    channel_shape = (1, -1) + (1,) * (x.ndim - 2)
    return x * weight.reshape(channel_shape) + bias.reshape(channel_shape)


class GroupNorm:
    """Normalization over groups of channels (and all spatial positions) per sample, then a per-channel affine map."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True):
        if num_channels % num_groups:
            raise ValueError(f"GroupNorm: num_channels ({num_channels}) must be divisible by num_groups ({num_groups})")
        self.num_groups, self.num_channels, self.eps = num_groups, num_channels, eps
        self.weight: Tensor | None = _ones(num_channels) if affine else None
        self.bias: Tensor | None = _zeros(num_channels) if affine else None

    def __call__(self, x: Tensor) -> Tensor:
        """Normalize `x` of shape (batch, num_channels, *spatial)."""
        normalized = x.reshape(x.shape[0], self.num_groups, -1).layernorm(eps=self.eps).reshape(x.shape)
        return _channel_affine(normalized, self.weight, self.bias)


class InstanceNorm:
    """Normalization over the spatial positions of each channel of each sample, then a per-channel affine map."""

    def __init__(self, num_features: int, eps: float = 1e-5, affine: bool = True):
        self.num_features, self.eps = num_features, eps
        self.weight: Tensor | None = _ones(num_features) if affine else None
        self.bias: Tensor | None = _zeros(num_features) if affine else None

    def __call__(self, x: Tensor) -> Tensor:
        """Normalize `x` of shape (batch, num_features, *spatial)."""
        normalized = x.reshape(x.shape[0], self.num_features, -1).layernorm(eps=self.eps).reshape(x.shape)
        return _channel_affine(normalized, self.weight, self.bias)


class RMSNorm:
    """x / sqrt(mean(x^2) + eps) over the last axis (computed in float32), times an optional weight."""

    def __init__(self, dim: int, eps: float = 1e-6, elementwise_affine: bool = True):
        self.eps = eps
        self.weight: Tensor | None = _ones(dim) if elementwise_affine else None

    def _norm(self, x: Tensor) -> Tensor:
        return x * (x.square().mean(-1, keepdim=True) + self.eps).rsqrt()

    def __call__(self, x: Tensor) -> Tensor:
        """Normalize the last axis of `x`."""
        normalized = self._norm(x.float()).cast(x.dtype)
        return normalized if self.weight is None else normalized * self.weight


class Embedding:
    """A lookup table of vocab_size vectors of embed_size (Glorot-uniform initialized), indexed by integer tensors."""

    def __init__(self, vocab_size: int, embed_size: int):
        self.vocab_size, self.embed_size = vocab_size, embed_size
        self.weight = Tensor.glorot_uniform(vocab_size, embed_size)

    def __call__(self, idx: Tensor) -> Tensor:
        """The rows of weight at `idx` (any shape of integers): shape idx.shape + (embed_size,)."""
        if not dtypes.is_int(idx.dtype):
            raise TypeError(f"Embedding indices must be integers, got dtype {idx.dtype}")
        return self.weight[idx]


class LSTMCell:
    """One step of an LSTM: (x, (h, c)) -> (h', c'), gates in the order input, forget, cell, output.

    Weights are uniform in +-1/sqrt(hidden_size); biases start at zero.
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True):
        bound = 1 / math.sqrt(hidden_size)
        self.weight_ih = Tensor.uniform(hidden_size * 4, input_size, low=-bound, high=bound)
        self.weight_hh = Tensor.uniform(hidden_size * 4, hidden_size, low=-bound, high=bound)
        self.bias_ih: Tensor | None = _zeros(hidden_size * 4) if bias else None
        self.bias_hh: Tensor | None = _zeros(hidden_size * 4) if bias else None

    def __call__(self, x: Tensor, hc: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
        """The next hidden and cell states for input `x` (batch, input_size); `hc` defaults to zeros."""
        if hc is None:
            hidden_size = self.weight_hh.shape[1]
            hc = (Tensor.zeros(x.shape[0], hidden_size, dtype=x.dtype, device=x.device),
                  Tensor.zeros(x.shape[0], hidden_size, dtype=x.dtype, device=x.device))
        hidden, cell = hc
        gates = x.linear(self.weight_ih.T, self.bias_ih) + hidden.linear(self.weight_hh.T, self.bias_hh)
        input_gate, forget_gate, cell_gate, output_gate = gates.chunk(4, dim=1)
        new_cell = forget_gate.sigmoid() * cell + input_gate.sigmoid() * cell_gate.tanh()
        new_hidden = output_gate.sigmoid() * new_cell.tanh()
        return new_hidden.contiguous(), new_cell.contiguous()
