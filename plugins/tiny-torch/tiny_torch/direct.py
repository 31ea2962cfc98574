"""Operators handled on the tiny tensors themselves: copies across devices, scalars, fills, random in-place
fills, batch norm (which updates running statistics in place) and the factories that take a tiny tensor."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from tiny_torch.dispatch import PENDING, aten, check_no_internal_overlap, commit, meta_result, register
from tiny_torch.dtypes import to_tiny_dtype
from tiny_torch.storage import BitcastStorage, TinyStorage, is_buffer
from tiny_torch.templates import run_templated
from tiny_torch.wrapper import TinyTensor, from_cpu, restride, tinycore_device, to_cpu, wrap
from tinycore import Tensor, dtypes


def _index(tensor: torch.Tensor) -> int:
    return tensor.device.index or 0


def _fresh(shape: Sequence[int], dtype: torch.dtype, index: int, fill: float = 0) -> TinyTensor:
    value = Tensor.full(tuple(int(s) for s in shape), fill, dtype=to_tiny_dtype(dtype), device=tinycore_device(index))
    return wrap(value, index)


@register(aten.copy_.default, direct=True)
def copy_(self: torch.Tensor, src: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    """Copy src into self across devices (tiny <- CPU, CPU <- tiny, tiny <- tiny), casting to self's dtype."""
    if not isinstance(self, TinyTensor):
        assert isinstance(src, TinyTensor)
        with torch._C.DisableTorchFunctionSubclass():
            return self.copy_(to_cpu(src.tiny_value(), src.dtype))
    check_no_internal_overlap(self)
    if isinstance(src, TinyTensor) and _share_whole_storage(self, src):
        return self
    if isinstance(src, TinyTensor):
        value = src.tiny_value()
        if _index(src) != _index(self):
            value = value.to(tinycore_device(_index(self)))
    else:
        value = from_cpu(src, _index(self))
    self.tiny_write(value.cast(to_tiny_dtype(self.dtype)))
    commit(self)
    return self


def _whole(tensor: TinyTensor) -> bool:
    storage = tensor.tiny_storage
    return (type(storage) is TinyStorage and tensor.storage_offset() == 0 and tensor.numel() == storage.numel
            and tensor.is_contiguous())


def _share_whole_storage(self: TinyTensor, src: TinyTensor) -> bool:
    """A copy of one whole computed storage into another of the same dtype and device (AOTAutograd's write-back of
    batch norm's running statistics after each compiled step) takes src's buffer as self's value: storages never
    write into a buffer they hold (a write replaces `flat`), so sharing it is safe, and no copy is scheduled."""
    source = src.tiny_storage
    if (src.dtype != self.dtype or _index(src) != _index(self) or tuple(src.shape) != tuple(self.shape)
            or not source.realized or not _whole(self) or not _whole(src) or not is_buffer(source.flat)):
        return False
    storage = self.tiny_storage
    if storage is not source:
        storage.flat = source.flat
        storage.version += 1
        storage.realized = True
        storage.pending_writes = 0
        PENDING.pop(id(storage), None)
    return True


@register(aten._to_copy.default, direct=True)
def to_copy(self: torch.Tensor, dtype: torch.dtype | None = None, layout: object = None,
            device: torch.device | None = None, pin_memory: bool | None = None, non_blocking: bool = False,
            memory_format: object = None) -> torch.Tensor:
    """`.to(device, dtype)` and `.cpu()` of a tiny tensor."""
    assert isinstance(self, TinyTensor)
    dtype = dtype or self.dtype
    target = torch.device(device) if device is not None else self.device
    value = self.tiny_value()
    if target.type != "tiny":
        return to_cpu(value, self.dtype).to(device=target, dtype=dtype)
    if (target.index or 0) != _index(self):
        value = value.to(tinycore_device(target.index or 0))
    return wrap(value.cast(to_tiny_dtype(dtype)), target.index or 0)


@register(aten._local_scalar_dense.default, direct=True)
def local_scalar_dense(self: TinyTensor) -> object:
    """`.item()`."""
    return to_cpu(self.tiny_value(), self.dtype).item()


@register(aten.fill_.Scalar, aten.fill_.Tensor, direct=True)
def fill_(self: TinyTensor, value: object) -> TinyTensor:
    """Every element of the view set to value (a number, or a 0-d tensor read on the device: no host sync)."""
    if isinstance(value, TinyTensor):
        self.tiny_write(value.tiny_value().cast(to_tiny_dtype(self.dtype)).reshape(()))
    else:
        fill = value.item() if isinstance(value, torch.Tensor) else value
        self.tiny_write(Tensor.full(tuple(self.shape), fill, dtype=to_tiny_dtype(self.dtype),
                                    device=self.tiny_storage.flat.device))
    commit(self)
    return self


@register(aten.zero_.default, direct=True)
def zero_(self: TinyTensor) -> TinyTensor:
    """Every element of the view set to zero."""
    return fill_(self, 0)


@register(aten.fill.Scalar, direct=True)
def fill(self: TinyTensor, value: float) -> TinyTensor:
    """A new tensor like self filled with value."""
    return _fresh(self.shape, self.dtype, _index(self), value)


def _random_write(self: TinyTensor, value: Tensor) -> TinyTensor:
    check_no_internal_overlap(self)
    self.tiny_write(value.cast(to_tiny_dtype(self.dtype)))
    commit(self)
    return self


@register(aten.uniform_.default, direct=True)
def uniform_(self: TinyTensor, from_: float = 0.0, to: float = 1.0, generator: object = None) -> TinyTensor:
    """Uniform samples in [from, to) from tinycore's generator (Tensor.manual_seed / torch.manual_seed)."""
    device = self.tiny_storage.flat.device
    return _random_write(self, Tensor.uniform(*self.shape, low=from_, high=to, device=device))


@register(aten.normal_.default, direct=True)
def normal_(self: TinyTensor, mean: float = 0.0, std: float = 1.0, generator: object = None) -> TinyTensor:
    """Normal samples from tinycore's generator."""
    device = self.tiny_storage.flat.device
    return _random_write(self, Tensor.normal(*self.shape, mean=mean, std=std, device=device))


@register(aten.bernoulli_.float, direct=True)
def bernoulli_(self: TinyTensor, p: float = 0.5, generator: object = None) -> TinyTensor:
    """1 with probability p, else 0."""
    device = self.tiny_storage.flat.device
    return _random_write(self, Tensor.rand(*self.shape, device=device) < p)


def _random_integers(self: TinyTensor, low: int, high: int) -> TinyTensor:
    device = self.tiny_storage.flat.device
    return _random_write(self, Tensor.randint(*self.shape, low=low, high=high, device=device))


@register(getattr(aten.random_, "from"), direct=True)
def random_(self: TinyTensor, from_: int = 0, to: int | None = None, generator: object = None) -> TinyTensor:
    """Integers uniform in [from, to)."""
    if to is None:
        raise NotImplementedError("random_ without an upper bound on the tiny device; pass to=")
    return _random_integers(self, from_, to)


@register(aten.random_.to, direct=True)
def random_to(self: TinyTensor, to: int, generator: object = None) -> TinyTensor:
    """Integers uniform in [0, to) (`tensor.random_(to)`)."""
    return _random_integers(self, 0, to)


@register(aten.native_dropout.default, direct=True)
def native_dropout(input: TinyTensor, p: float, train: bool | None) -> tuple[TinyTensor, TinyTensor]:  # noqa: A002
    """Dropout: (output, keep mask); train=None trains, as in PyTorch."""
    value = input.tiny_value()
    if train is False or p == 0:
        return wrap(value.contiguous(), _index(input)), _fresh(input.shape, torch.bool, _index(input), True)
    keep = Tensor.rand(*value.shape, device=value.device) >= p
    return wrap(keep.where(value / (1 - p), 0).cast(value.dtype), _index(input)), wrap(keep, _index(input))


def _batch_norm(value: Tensor, weight: Tensor | None, bias: Tensor | None, running_mean: Tensor | None,
                running_var: Tensor | None, training: bool, momentum: float,
                eps: float) -> tuple[Tensor, Tensor, Tensor, Tensor | None, Tensor | None]:
    """Batch norm over all dims but 1: output, batch mean, batch inverse std and, in training, the updated running
    statistics (with the unbiased variance, as PyTorch keeps them)."""
    axes = tuple(axis for axis in range(value.ndim) if axis != 1)
    shape = [1] * value.ndim
    shape[1] = value.shape[1]
    if training or running_mean is None or running_var is None:
        mean = value.mean(axes)
        variance = (value - mean.reshape(shape)).square().mean(axes)
    else:
        mean, variance = running_mean, running_var
    invstd = (variance + eps).rsqrt()
    output = (value - mean.reshape(shape)) * invstd.reshape(shape)
    if weight is not None:
        output = output * weight.reshape(shape)
    if bias is not None:
        output = output + bias.reshape(shape)
    if not (training and running_mean is not None and running_var is not None):
        return output, mean, invstd, None, None
    count = value.numel() // value.shape[1]
    unbiased = variance * (count / max(count - 1, 1))
    return (output, mean, invstd, running_mean * (1 - momentum) + mean * momentum,
            running_var * (1 - momentum) + unbiased * momentum)


def _value_or_none(tensor: TinyTensor | None) -> Tensor | None:
    return tensor.tiny_value() if tensor is not None else None


@register(aten.native_batch_norm.default, aten._native_batch_norm_legit_no_training.default, direct=True)
def native_batch_norm(input: TinyTensor, weight: TinyTensor | None, bias: TinyTensor | None,  # noqa: A002
                      running_mean: TinyTensor | None, running_var: TinyTensor | None, training: bool = False,
                      momentum: float = 0.1, eps: float = 1e-5) -> tuple[TinyTensor, TinyTensor, TinyTensor]:
    """Batch norm: (output, batch mean, batch inverse std); in training the running statistics are updated in
    place."""
    if not isinstance(training, bool):  # the no_training overload has (momentum, eps) where training would be
        training, momentum, eps = False, training, momentum
    value = input.tiny_value()
    output, mean, invstd, new_mean, new_var = run_templated(  # type: ignore[misc]
        "batch_norm", _batch_norm, (value, _value_or_none(weight), _value_or_none(bias),
                                    _value_or_none(running_mean), _value_or_none(running_var), training, momentum,
                                    eps), {})
    index = _index(input)
    if new_mean is not None and new_var is not None:
        running_mean.tiny_write(new_mean)  # type: ignore[union-attr]
        running_var.tiny_write(new_var)  # type: ignore[union-attr]
        commit(running_mean, running_var)  # type: ignore[arg-type]
    if not training:
        empty = Tensor.zeros(0, dtype=value.dtype, device=value.device)
        return wrap(output, index), wrap(empty, index), wrap(empty, index)
    return wrap(output, index), wrap(mean, index), wrap(invstd, index)


@register(aten._native_batch_norm_legit_functional.default, direct=True)
def native_batch_norm_functional(input: TinyTensor, weight: TinyTensor | None,  # noqa: A002
                                 bias: TinyTensor | None, running_mean: TinyTensor, running_var: TinyTensor,
                                 training: bool, momentum: float, eps: float) -> tuple[TinyTensor, ...]:
    """Batch norm as compiled graphs have it: (output, mean, inverse std, new running mean, new running var),
    the running statistics returned instead of written in place."""
    mean_value, var_value = running_mean.tiny_value(), running_var.tiny_value()
    output, mean, invstd, new_mean, new_var = _batch_norm(
        input.tiny_value(), _value_or_none(weight), _value_or_none(bias), mean_value, var_value, training,
        momentum, eps)
    index = _index(input)
    return (wrap(output, index), wrap(mean, index), wrap(invstd, index),
            wrap(new_mean if new_mean is not None else mean_value.contiguous(), index),
            wrap(new_var if new_var is not None else var_value.contiguous(), index))


@register(aten.native_batch_norm_backward.default, direct=True)
def native_batch_norm_backward(grad_out: TinyTensor, input: TinyTensor, weight: TinyTensor | None,  # noqa: A002
                               running_mean: TinyTensor | None, running_var: TinyTensor | None,
                               save_mean: TinyTensor | None, save_invstd: TinyTensor | None, train: bool, eps: float,
                               output_mask: Sequence[bool]) -> tuple[TinyTensor | None, ...]:
    """Gradients of batch norm for input, weight and bias, in closed form as PyTorch's kernels compute them: in
    training from the batch statistics it is handed (save_mean, save_invstd; eps unused), the input's gradient
    including their dependence on the input; in evaluation from the running statistics."""
    statistics = (save_mean, save_invstd) if train else (running_mean, running_var)
    results = run_templated("batch_norm_backward", _batch_norm_backward, (
        input.tiny_value(), grad_out.tiny_value(), _value_or_none(weight), *map(_value_or_none, statistics), train,
        eps, tuple(output_mask)), {})
    index = _index(input)
    return tuple(wrap(part, index) if part is not None else None for part in results)  # type: ignore[union-attr]


def _batch_norm_backward(value: Tensor, grad: Tensor, weight: Tensor | None, mean: Tensor | None,
                         spread: Tensor | None, train: bool, eps: float,
                         output_mask: tuple[bool, ...]) -> tuple[Tensor | None, ...]:
    """The gradients of native_batch_norm_backward on tinycore values; `spread` is the saved inverse std in
    training, the running variance in evaluation."""
    axes = tuple(axis for axis in range(value.ndim) if axis != 1)
    shape = [1] * value.ndim
    shape[1] = value.shape[1]
    assert mean is not None and spread is not None, "batch norm's backward needs its statistics"
    invstd = spread if train else (spread + eps).rsqrt()
    mean, invstd = mean.cast(value.dtype), invstd.cast(value.dtype)
    centered = value - mean.reshape(shape)
    grad_sum = grad.sum(axes)
    dot = (grad * centered).sum(axes)
    scale = invstd * weight if weight is not None else invstd
    grad_input = None
    if output_mask[0]:
        if train:
            count = value.numel() // value.shape[1]
            projection = centered * (dot * invstd * invstd / count).reshape(shape)
            grad_input = (grad - projection - (grad_sum / count).reshape(shape)) * scale.reshape(shape)
        else:
            grad_input = grad * scale.reshape(shape)
    results = (grad_input, dot * invstd if output_mask[1] else None, grad_sum if output_mask[2] else None)
    return tuple(part.cast(value.dtype) if part is not None else None for part in results)


@register(aten.empty_like.default, aten.zeros_like.default, direct=True)
def empty_like(self: torch.Tensor, dtype: torch.dtype | None = None, layout: object = None,
               device: torch.device | None = None, pin_memory: bool | None = None,
               memory_format: object = None) -> torch.Tensor:
    """A zero-filled tensor shaped like self (empty_like's contents are unspecified; zeros are one choice)."""
    return full_like(self, 0, dtype=dtype, device=device)


@register(aten.ones_like.default, direct=True)
def ones_like(self: torch.Tensor, dtype: torch.dtype | None = None, layout: object = None,
              device: torch.device | None = None, pin_memory: bool | None = None,
              memory_format: object = None) -> torch.Tensor:
    """A tensor of ones shaped like self."""
    return full_like(self, 1, dtype=dtype, device=device)


@register(aten.full_like.default, direct=True)
def full_like(self: torch.Tensor, fill_value: float, dtype: torch.dtype | None = None, layout: object = None,
              device: torch.device | None = None, pin_memory: bool | None = None,
              memory_format: object = None) -> torch.Tensor:
    """A tensor filled with fill_value shaped like self."""
    target = torch.device(device) if device is not None else self.device
    dtype = dtype or self.dtype
    if target.type != "tiny":
        return torch.full(tuple(self.shape), fill_value, dtype=dtype, device=target)
    return _fresh(self.shape, dtype, target.index or 0, fill_value)


@register(aten.new_empty.default, aten.new_zeros.default, aten.new_full.default, aten.new_empty_strided.default,
          direct=True)
def new_factory(self: torch.Tensor, size: Sequence[int], *rest: object, dtype: torch.dtype | None = None,
                layout: object = None, device: torch.device | None = None, pin_memory: bool | None = None) -> object:
    """self.new_empty / new_zeros / new_full / new_empty_strided (contents zero unless a fill)."""
    fill: float = 0
    if rest and not isinstance(rest[0], (list, tuple)):
        fill = rest[0]  # type: ignore[assignment]
    target = torch.device(device) if device is not None else self.device
    dtype = dtype or self.dtype
    if target.type != "tiny":
        return torch.full(tuple(size), fill, dtype=dtype, device=target)
    return _fresh(size, dtype, target.index or 0, fill)


@register(aten.new_ones.default, direct=True)
def new_ones(self: torch.Tensor, size: Sequence[int], dtype: torch.dtype | None = None, layout: object = None,
             device: torch.device | None = None, pin_memory: bool | None = None) -> object:
    """self.new_ones(size)."""
    return new_factory(self, size, 1, dtype=dtype, device=device)


@register(aten.resize_.default, direct=True)
def resize_(self: TinyTensor, size: Sequence[int], memory_format: object = None) -> TinyTensor:
    """A new contiguous shape over the same storage from the same offset, as PyTorch resizes: the elements in memory
    order keep their values. Growing past the storage's end is refused (a tiny storage does not grow)."""
    shape = tuple(int(extent) for extent in size)
    if shape == tuple(self.shape):
        return self
    numel = int(np.prod(shape)) if shape else 1
    if self.storage_offset() + numel > self.tiny_storage.numel:
        raise NotImplementedError(f"resizing a tiny tensor from {tuple(self.shape)} to {shape} needs more elements "
                                  f"than its storage holds ({self.tiny_storage.numel}); make a new tensor of that "
                                  f"shape instead (torch.empty(..., device='tiny'))")
    stride, running = [], 1
    for extent in reversed(shape):
        stride.append(running)
        running *= max(extent, 1)
    restride(self, self, shape, tuple(reversed(stride)), int(self.storage_offset()))
    return self


def arange(start: float, end: float | None = None, step: float = 1, *, dtype: torch.dtype | None = None,
           layout: object = None, device: torch.device | None = None, pin_memory: bool | None = None) -> TinyTensor:
    """torch.arange(..., device="tiny"): int64 for integer bounds, the default float dtype otherwise."""
    if end is None:
        start, end = 0, start
    if dtype is None:
        integral = all(isinstance(bound, int) for bound in (start, end, step))
        dtype = torch.int64 if integral else torch.get_default_dtype()
    index = (torch.device(device).index or 0) if device is not None else 0
    value = Tensor.arange(start, end, step, device=tinycore_device(index)).cast(to_tiny_dtype(dtype))
    return wrap(value, index)


def randperm(n: int, *, generator: object = None, dtype: torch.dtype | None = None, layout: object = None,
             device: torch.device | None = None, pin_memory: bool | None = None) -> TinyTensor:
    """torch.randperm(n, device="tiny") from tinycore's generator."""
    index = (torch.device(device).index or 0) if device is not None else 0
    value = Tensor.randperm(n, device=tinycore_device(index)).cast(to_tiny_dtype(dtype or torch.int64))
    return wrap(value, index)


FACTORIES = {"arange": arange, "arange.start": arange, "arange.start_step": arange, "randperm": randperm,
             "randperm.generator": randperm}
"""Factories registered for the PrivateUse1 key (they take no tensor, so only the device argument routes them)."""


@register(aten.lift_fresh.default, direct=True)
def lift_fresh(self: TinyTensor) -> TinyTensor:
    """The same tensor (PyTorch's marker that a constant became a tensor)."""
    return self


@register(aten.alias.default, direct=True)
def alias(self: TinyTensor) -> TinyTensor:
    """A new tensor viewing the same storage with the same sizes, strides and offset."""
    return TinyTensor(self.tiny_storage, tuple(self.shape), tuple(self.stride()), self.storage_offset(), _index(self))


@register(aten.view.dtype, direct=True)
def view_dtype(self: TinyTensor, dtype: torch.dtype) -> TinyTensor:
    """The same bytes read as `dtype` (a view: writes through either tensor show in the other). Sizes and strides
    follow PyTorch's rules for element sizes that differ (the last dim scales; PyTorch's checks apply)."""
    if dtype == self.dtype:
        return alias(self)
    meta = meta_result(aten.view.dtype, (self, dtype), {})
    if not isinstance(meta, torch.Tensor):
        # PyTorch's own check says what is wrong (a last dim that does not divide, a stride that is not 1, ...)
        with torch._C.DisableTorchFunctionSubclass():
            torch.empty_strided(tuple(self.shape), self.stride(), dtype=self.dtype, device="meta").view(dtype)
        raise RuntimeError(f"tensor.view({dtype}) of a {self.dtype} tensor of shape {tuple(self.shape)} is not "
                           f"possible; use .to({dtype}) for a converting copy")
    storage = BitcastStorage(self.tiny_storage, to_tiny_dtype(dtype))
    return TinyTensor(storage, tuple(meta.shape), tuple(meta.stride()), meta.storage_offset(), _index(self))


@register(aten.set_.source_Tensor, direct=True)
def set_(self: TinyTensor, source: TinyTensor) -> TinyTensor:
    """Make self share source's storage and view (used by module.to and parameter swaps)."""
    restride(self, source, tuple(source.shape), tuple(source.stride()), int(source.storage_offset()))
    self.tiny_storage = source.tiny_storage
    return self


@register(aten.nonzero.default, direct=True)
def nonzero(self: TinyTensor) -> TinyTensor:
    """Indices of the nonzero elements (a data-dependent shape: the mask is read back to the host)."""
    mask = (self.tiny_value() != 0).numpy()  # compared on the device: numpy has no bfloat16
    if self.ndim == 0:  # one row of no coordinates when the element is nonzero, as PyTorch
        indices = np.zeros((int(mask), 0), dtype=np.int64)
    else:
        indices = np.stack(np.nonzero(mask), axis=-1).astype(np.int64).reshape(-1, self.ndim)
    return wrap(Tensor(indices, device=self.tiny_storage.flat.device, dtype=dtypes.int64), _index(self))
