"""The fused optimizer steps (`torch.optim.Adam(..., fused=True)`, AdamW, SGD and Adagrad): one lazy tinycore graph
for every parameter's update, realized in one schedule.

PyTorch's fused path calls one operator per step (`aten::_fused_adam_` and its siblings) with the lists of
parameters, gradients and state; the unfused `foreach` path calls a dozen `_foreach_*` operators, each of which the
tiny device realizes on its own. Here the whole update is written into the storages and they are realized together,
so a step costs one schedule (a cache hit from the second step on) and one submission of its kernels.

The arithmetic follows PyTorch's CPU fused kernels (aten/src/ATen/native/cpu/Fused*Kernel.cpp): the step counts
arrive already incremented, as tensors, so the bias corrections are computed on the device from them and the kernels
stay the same from step to step. With `grad_scale` the gradients are left unscaled in place, as PyTorch's kernels
leave them; with `found_inf` set (a GradScaler that found an overflow) nothing is written.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from tiny_torch.dispatch import DEFERRED, aten, commit, flush, register
from tiny_torch.updates import jitted_update
from tiny_torch.wrapper import TinyTensor
from tinycore.dtype import DType, dtypes
from tinycore.tensor import Tensor


def _tiny(values: Sequence[torch.Tensor], what: str) -> list[TinyTensor]:
    """The tiny tensors of one list argument (the fused operators run on one device, as PyTorch's do)."""
    tiny = [value for value in values if isinstance(value, TinyTensor)]
    if len(tiny) != len(values):
        raise RuntimeError(f"fused optimizer step on the tiny device: every tensor of {what} must be on the tiny "
                           f"device (found {sorted({str(value.device) for value in values})})")
    return tiny


def _scalar(value: float | torch.Tensor | None) -> float | Tensor | None:
    """A float argument as itself, a tensor argument (tensor_lr, grad_scale, found_inf) as its lazy value."""
    if isinstance(value, TinyTensor):
        return value.tiny_value().reshape(())
    if isinstance(value, torch.Tensor):
        return float(value.item())
    return value


def _learning_rate(value: float | torch.Tensor) -> float | Tensor:
    """The learning rate: a float, or a tensor's lazy value (the tensor_lr overloads)."""
    rate = _scalar(value)
    assert rate is not None, "the fused optimizer steps always pass a learning rate"
    return rate


def _store(pairs: list[tuple[TinyTensor, Tensor]], found_inf: float | Tensor | None) -> None:
    """Write each new value into its tensor (keeping the old value where `found_inf` is set), realized together."""
    DEFERRED.append(True)
    try:
        for target, value in pairs:
            old = target.tiny_value()
            if isinstance(found_inf, Tensor):
                value = (found_inf != 0).where(old, value.cast(old.dtype))
            elif found_inf:
                value = old
            target.tiny_write(value.cast(old.dtype))
            commit(target)
    finally:
        DEFERRED.pop()
    flush()


def _work_dtype(dtype: DType) -> DType:
    """The dtype an update computes in: the parameter's when it is a float of 32 bits or more, else float32."""
    return dtype if dtypes.is_float(dtype) and dtype.itemsize >= 4 else dtypes.float32


def _adam_update(weights: Tensor, grad: Tensor, average: Tensor, square: Tensor, maximum: Tensor | None,
                 step: Tensor, rate: float | Tensor, *, beta1: float, beta2: float, weight_decay: float, eps: float,
                 maximize: bool, decoupled: bool) -> list[Tensor]:
    """One parameter's Adam (AdamW when `decoupled`) step: its new weights, averages, squares (and maxima with
    amsgrad), computed in float32 at least. `grad` is already unscaled; `step` is the incremented step count."""
    work = _work_dtype(weights.dtype)
    weights, grad = weights.cast(work), grad.cast(work)
    if maximize:
        grad = -grad
    if weight_decay != 0:
        if decoupled:
            weights = weights * (1 - rate * weight_decay)
        else:
            grad = grad + weights * weight_decay
    average = average.cast(work)
    average = average + (grad - average) * (1 - beta1)
    square = square.cast(work) * beta2 + grad * grad * (1 - beta2)
    step = step.reshape(()).cast(dtypes.float32)
    correction1 = 1 - (step * math.log(beta1)).exp() if beta1 > 0 else Tensor(1.0, device=step.device)
    correction2 = 1 - (step * math.log(beta2)).exp() if beta2 > 0 else Tensor(1.0, device=step.device)
    root = correction2.sqrt()
    if maximum is not None:
        maximum = maximum.cast(work).maximum(square)
        denominator = maximum.sqrt() / root + eps
    else:
        denominator = square.sqrt() / root + eps
    step_size = rate / correction1
    results = [weights - step_size * average / denominator, average, square]
    return results + [maximum] if maximum is not None else results


def _adam(params: list[torch.Tensor], grads: list[torch.Tensor], exp_avgs: list[torch.Tensor],
          exp_avg_sqs: list[torch.Tensor], max_exp_avg_sqs: list[torch.Tensor], state_steps: list[torch.Tensor], *,
          lr: float | torch.Tensor, beta1: float, beta2: float, weight_decay: float, eps: float, amsgrad: bool,
          maximize: bool, grad_scale: torch.Tensor | None, found_inf: torch.Tensor | None, decoupled: bool) -> None:
    """Adam (decoupled=False) or AdamW (decoupled=True) over every parameter, in one realize (one TinyJit replay
    when every tensor is a whole storage and the learning rate is a number)."""
    tiny_params, tiny_grads = _tiny(params, "params"), _tiny(grads, "grads")
    tiny_avgs, tiny_squares = _tiny(exp_avgs, "exp_avgs"), _tiny(exp_avg_sqs, "exp_avg_sqs")
    tiny_maxima = _tiny(max_exp_avg_sqs, "max_exp_avg_sqs") if amsgrad else []
    tiny_steps = _tiny(state_steps, "state_steps")
    options = {"beta1": beta1, "beta2": beta2, "weight_decay": weight_decay, "eps": eps, "maximize": maximize,
               "decoupled": decoupled}
    if grad_scale is None and found_inf is None and not isinstance(lr, torch.Tensor):
        groups = [tiny_params, tiny_grads, tiny_avgs, tiny_squares] + ([tiny_maxima] if amsgrad else []) + \
            [tiny_steps]
        reads = [group[position] for position in range(len(tiny_params)) for group in groups]
        writes = [group[position] for position in range(len(tiny_params))
                  for group in [tiny_params, tiny_avgs, tiny_squares] + ([tiny_maxima] if amsgrad else [])]

        def update(values: list[Tensor], numbers: list[Tensor]) -> list[Tensor]:
            results = []
            for start in range(0, len(values), len(groups)):
                weights, grad, average, square, *rest = values[start:start + len(groups)]
                results += _adam_update(weights, grad, average, square, rest[0] if amsgrad else None, rest[-1],
                                        numbers[0], **options)
            return results
        if jitted_update(("adam", amsgrad, *options.items()), reads, writes, [float(lr)], update):
            return
    rate, scale, overflow = _learning_rate(lr), _scalar(grad_scale), _scalar(found_inf)
    writes_lazy: list[tuple[TinyTensor, Tensor]] = []
    for position, param in enumerate(tiny_params):
        weights, grad = param.tiny_value(), tiny_grads[position].tiny_value()
        if scale is not None:
            grad = grad.cast(_work_dtype(weights.dtype)) / scale
            writes_lazy.append((tiny_grads[position], grad))  # PyTorch's fused steps leave the gradients unscaled
        new = _adam_update(weights, grad, tiny_avgs[position].tiny_value(),
                           tiny_squares[position].tiny_value(),
                           tiny_maxima[position].tiny_value() if amsgrad else None,
                           tiny_steps[position].tiny_value(), rate, **options)
        targets = [param, tiny_avgs[position], tiny_squares[position]] + ([tiny_maxima[position]] if amsgrad else [])
        writes_lazy += list(zip(targets, new, strict=True))
    _store(writes_lazy, overflow)


def _adam_step(decoupled: bool) -> Callable[..., None]:
    """The operator for Adam (decoupled=False) or AdamW (decoupled=True); PyTorch passes the lists positionally."""
    def step(self: list[torch.Tensor], grads: list[torch.Tensor], exp_avgs: list[torch.Tensor],
             exp_avg_sqs: list[torch.Tensor], max_exp_avg_sqs: list[torch.Tensor], state_steps: list[torch.Tensor],
             *, lr: float | torch.Tensor, beta1: float, beta2: float, weight_decay: float, eps: float, amsgrad: bool,
             maximize: bool, grad_scale: torch.Tensor | None = None, found_inf: torch.Tensor | None = None) -> None:
        _adam(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr=lr, beta1=beta1, beta2=beta2,
              weight_decay=weight_decay, eps=eps, amsgrad=amsgrad, maximize=maximize, grad_scale=grad_scale,
              found_inf=found_inf, decoupled=decoupled)
    return step


fused_adam = register(aten._fused_adam_.default, aten._fused_adam_.tensor_lr, direct=True)(_adam_step(False))
"""`torch.optim.Adam(..., fused=True)`'s step: every parameter and its moments updated in one realize."""
fused_adamw = register(aten._fused_adamw_.default, aten._fused_adamw_.tensor_lr, direct=True)(_adam_step(True))
"""`torch.optim.AdamW(..., fused=True)`'s step (weight decay applied to the weights, not the gradient)."""


def _gradient(weights: Tensor, grad: TinyTensor, scale: float | Tensor | None, maximize: bool, weight_decay: float,
              writes: list[tuple[TinyTensor, Tensor]]) -> Tensor:
    """SGD's and Adagrad's gradient: unscaled (and written back unscaled, as PyTorch leaves it), negated to maximize,
    with L2 weight decay added."""
    value = grad.tiny_value().cast(weights.dtype)
    if scale is not None:
        value = value / scale
        writes.append((grad, value))
    if maximize:
        value = -value
    return value + weights * weight_decay if weight_decay != 0 else value


@register(aten._fused_sgd_.default, aten._fused_sgd_.tensor_lr, direct=True)
def fused_sgd(self: list[torch.Tensor], grads: list[torch.Tensor], momentum_buffer_list: list[torch.Tensor], *,
              weight_decay: float, momentum: float, lr: float | torch.Tensor, dampening: float, nesterov: bool,
              maximize: bool, is_first_step: bool, grad_scale: torch.Tensor | None = None,
              found_inf: torch.Tensor | None = None) -> None:
    """`torch.optim.SGD(..., fused=True)`'s step: momentum buffers start as the first gradient, as PyTorch's do
    (one TinyJit replay when every tensor is a whole storage and the learning rate is a number)."""
    tiny_params, tiny_grads = _tiny(self, "params"), _tiny(grads, "grads")
    tiny_buffers = _tiny(momentum_buffer_list, "momentum_buffer_list") if momentum != 0 else []
    if grad_scale is None and found_inf is None and not isinstance(lr, torch.Tensor):
        reads_buffers = momentum != 0 and not is_first_step
        groups = [tiny_params, tiny_grads] + ([tiny_buffers] if reads_buffers else [])
        reads = [group[position] for position in range(len(tiny_params)) for group in groups]
        writes = [group[position] for position in range(len(tiny_params))
                  for group in [tiny_params] + ([tiny_buffers] if momentum != 0 else [])]

        def update(values: list[Tensor], numbers: list[Tensor]) -> list[Tensor]:
            results = []
            for start in range(0, len(values), len(groups)):
                weights, grad, *rest = values[start:start + len(groups)]
                grad = -grad.cast(weights.dtype) if maximize else grad.cast(weights.dtype)
                grad = grad + weights * weight_decay if weight_decay != 0 else grad
                if momentum == 0:
                    results.append(weights - grad * numbers[0])
                    continue
                buffer = rest[0] * momentum + grad * (1 - dampening) if reads_buffers else grad
                step = grad + buffer * momentum if nesterov else buffer
                results += [weights - step * numbers[0], buffer]
            return results
        key = ("sgd", weight_decay, momentum, dampening, nesterov, maximize, reads_buffers)
        if jitted_update(key, reads, writes, [float(lr)], update):
            return
    rate, scale, overflow = _learning_rate(lr), _scalar(grad_scale), _scalar(found_inf)
    writes: list[tuple[TinyTensor, Tensor]] = []
    for position, param in enumerate(tiny_params):
        weights = param.tiny_value()
        grad = _gradient(weights, tiny_grads[position], scale, maximize, weight_decay, writes)
        if momentum != 0:
            buffer = grad if is_first_step else \
                tiny_buffers[position].tiny_value() * momentum + grad * (1 - dampening)
            writes.append((tiny_buffers[position], buffer))
            grad = grad + buffer * momentum if nesterov else buffer
        writes.append((param, weights - grad * rate))
    _store(writes, overflow)


@register(aten._fused_adagrad_.default, aten._fused_adagrad_.tensor_lr, direct=True)
def fused_adagrad(self: list[torch.Tensor], grads: list[torch.Tensor], state_sums: list[torch.Tensor],
                  state_steps: list[torch.Tensor], *, lr: float | torch.Tensor, lr_decay: float, weight_decay: float,
                  eps: float, maximize: bool, grad_scale: torch.Tensor | None = None,
                  found_inf: torch.Tensor | None = None) -> None:
    """`torch.optim.Adagrad(..., fused=True)`'s step: the learning rate decays with the (incremented) step count."""
    tiny_params, tiny_grads = _tiny(self, "params"), _tiny(grads, "grads")
    tiny_sums, tiny_steps = _tiny(state_sums, "state_sums"), _tiny(state_steps, "state_steps")
    rate, scale, overflow = _learning_rate(lr), _scalar(grad_scale), _scalar(found_inf)
    writes: list[tuple[TinyTensor, Tensor]] = []
    for position, param in enumerate(tiny_params):
        weights = param.tiny_value()
        grad = _gradient(weights, tiny_grads[position], scale, maximize, weight_decay, writes)
        step = tiny_steps[position].tiny_value().reshape(()).cast(dtypes.float32)
        decayed = rate / ((step - 1) * lr_decay + 1)
        total = tiny_sums[position].tiny_value() + grad * grad
        writes += [(tiny_sums[position], total), (param, weights - decayed * grad / (total.sqrt() + eps))]
    _store(writes, overflow)
