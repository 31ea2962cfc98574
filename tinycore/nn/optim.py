"""Optimizers: SGD, LARS, Muon, LAMB, Adam, AdamW and OptimizerGroup, with tinygrad's names and defaults.

An optimizer holds the parameters it trains (`params`: `is_param`, off for `requires_grad=False` or after
`is_param_(False)`, as tinygrad 0.14) and the other tensors it keeps realized with them (`buffers`, such as
BatchNorm running statistics). `step()` builds each parameter's update from
its `.grad`, writes it into the parameter with `assign`, and realizes everything in one schedule. The learning rate
`lr` is a one-element Tensor, so a schedule that changes it (`optimizer.lr.assign(...)`) does not change the
compiled kernels. Stepping is only allowed in training mode (`Tensor.train()`, `Tensor.training = True` or
`Context(TRAINING=1)`, one switch). With `fused=True` the parameters and gradients are flattened into one vector
and the update (and its state) is computed on that vector: norms (LARS, LAMB) are then taken over all parameters
together, as tinygrad's fused optimizers do.
"""
from __future__ import annotations

from collections.abc import Sequence

from tinycore import helpers
from tinycore.dtype import DType, dtypes, least_upper_dtype
from tinycore.helpers import dedup
from tinycore.tensor import Tensor
from tinycore.uop.ops import Ops


def _untrained(tensor: Tensor) -> Tensor:
    """`tensor` marked as never needing a gradient."""
    tensor.requires_grad = False
    return tensor


def filled_buffer(shape: Sequence[int], value: float, dtype: DType, device: str | None) -> Tensor:
    """A tensor of `shape` filled with `value` in a buffer of its own (for state that is later assigned to).

    A lazy constant such as Tensor.zeros(3) is the same graph node as every other Tensor.zeros(3), so state built
    from it could end up sharing one buffer (and one gradient) with another tensor; a new buffer cannot.
    """
    return Tensor.empty(*shape, dtype=dtype, device=device).assign(Tensor.full(tuple(shape), value, dtype=dtype,
                                                                              device=device))


def _check_non_negative(**settings: float) -> None:
    """A ValueError naming the first setting below 0 (momentum, weight decay, eps), as torch's optimizers raise."""
    for name, value in settings.items():
        if value < 0:
            raise ValueError(f"Invalid {name} value: {value} (it must be >= 0)")


class Optimizer:
    """The base class: owns params, buffers and lr, and turns `_step`'s new values into assignments."""

    def __init__(self, params: list[Tensor], lr: float, device: str | None = None, fused: bool = False):
        if lr < 0:
            raise ValueError(f"Invalid learning rate: {lr} (the learning rate must be >= 0)")
        for tensor in params:
            if not isinstance(tensor, Tensor):
                raise TypeError(f"the optimizer's parameters must be Tensors, got {type(tensor).__name__}")
        params = dedup(params)
        if not params:
            raise ValueError("the optimizer got an empty parameter list: pass the model's tensors, for example "
                             "nn.state.get_parameters(model)")
        trained = [tensor for tensor in params if tensor.is_param and tensor.requires_grad is not False]
        for tensor in trained:
            if tensor.requires_grad is None:
                tensor.requires_grad = True
        self.params: list[Tensor] = trained
        self.buffers: list[Tensor] = [tensor for tensor in params if all(tensor is not param for param in trained)]
        if not self.params:
            raise ValueError("none of the optimizer's tensors requires a gradient (all have requires_grad=False)")
        self.device = device if device is not None else self.params[0].device
        # at least float32: a half default float would round the rate (1e10 overflows to inf), as tinygrad keeps it
        lr_dtype = least_upper_dtype(dtypes.default_float, dtypes.float32)
        self.lr = Tensor([lr], requires_grad=False, device=self.device, dtype=lr_dtype).contiguous().realize()
        self.fused = bool(fused)
        if self.fused:
            dtypes_seen = {param.dtype for param in self.params}
            if len(dtypes_seen) > 1:
                raise ValueError(f"a fused optimizer keeps its parameters in one vector, which needs one dtype; got "
                                 f"{sorted(str(dtype) for dtype in dtypes_seen)}: use fused=False or one optimizer "
                                 "per dtype in an OptimizerGroup")
            sharded = [(index, param.uop.arg, param.device) for index, param in enumerate(self.params)
                       if param.uop.op is Ops.MULTI and param.uop.arg is not None]
            devices_seen = {param.device for param in self.params}
            if sharded or len(devices_seen) > 1:
                where = (f"parameter {sharded[0][0]} is sharded on axis {sharded[0][1]} over {sharded[0][2]}" if sharded
                         else f"the parameters live on {sorted(map(str, devices_seen))}")
                raise ValueError(f"a fused optimizer keeps its parameters in one vector on one device (or replicated "
                                 f"on one tuple of devices), but {where}: use fused=False, which keeps each "
                                 "parameter's state on its devices, sharded like it")
        # with `fused`, parameter i is elements offsets[i]:offsets[i+1] of the concatenated, flattened parameters
        self.offsets = [0]
        for param in self.params:
            self.offsets.append(self.offsets[-1] + param.numel())

    def zero_grad(self) -> None:
        """Forget every parameter's gradient (the next backward() starts from zero)."""
        for param in self.params:
            param.grad = None

    def step(self) -> None:
        """Update every parameter from its gradient and realize the new values (training mode only)."""
        Tensor.realize(*self.schedule_step())

    def schedule_step(self) -> list[Tensor]:
        """Assign the updated values to the parameters without realizing; returns the tensors to realize."""
        if not helpers.TRAINING:
            raise RuntimeError(f"TRAINING={helpers.TRAINING.value}: an optimizer steps only in training mode. Wrap "
                               "the training step in `with Tensor.train():` (or decorate it with @Tensor.train(), "
                               "set Tensor.training = True, use Context(TRAINING=1) or TRAINING=1 in the "
                               "environment) before calling Optimizer.step().")
        missing = [index for index, param in enumerate(self.params) if param.grad is None]
        if missing:
            shapes = [self.params[index].shape for index in missing]
            raise RuntimeError(f"parameter(s) {missing} (shapes {shapes}) have no gradient: call loss.backward() "
                               "before step(), and check that the loss depends on every parameter passed to the "
                               "optimizer")
        gradients = [param.grad for param in self.params if param.grad is not None]
        if self.fused:
            flat_params = [Tensor.cat(*[param.detach().flatten() for param in self.params])]
            flat_gradients = [Tensor.cat(*[gradient.flatten() for gradient in gradients])]
            (flat_value,), extra = self._step(flat_params, flat_gradients)
            new_values = [flat_value[start:end].reshape(param.shape) for param, start, end in
                          zip(self.params, self.offsets[:-1], self.offsets[1:], strict=True)]
        else:
            new_values, extra = self._step(self.params, gradients)
        for param, value in zip(self.params, new_values, strict=True):
            param.assign(value.cast(param.dtype))
        return self.params + self.buffers + extra

    def _scalar_lr(self) -> Tensor:
        """The learning rate as a 0-d tensor, which broadcasts to parameters of any rank (scalars included)."""
        return self.lr.reshape(())

    def _step(self, params: list[Tensor], grads: list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
        """The new value of each parameter, and the optimizer state tensors to realize with them."""
        raise NotImplementedError(f"{type(self).__name__} does not define _step")

    def _zeros_like_params(self) -> list[Tensor]:
        """One zero-filled state tensor per parameter (momentum buffers, moments); one vector of them all when
        fused."""
        if self.fused:
            return [_untrained(filled_buffer((self.offsets[-1],), 0, self.params[0].dtype, self.device))]
        return [_untrained(filled_buffer(param.shape, 0, param.dtype, param.device)) for param in self.params]


class OptimizerGroup(Optimizer):
    """Several optimizers stepped together (in one schedule): for example Muon on matrices, AdamW on the rest."""

    def __init__(self, *optimizers: Optimizer):
        if not optimizers:
            raise ValueError("OptimizerGroup needs at least one optimizer")
        self.optimizers = optimizers
        self.params = [param for optimizer in optimizers for param in optimizer.params]
        self.buffers = [buffer for optimizer in optimizers for buffer in optimizer.buffers]

    def __getitem__(self, index: int) -> Optimizer:
        """The index-th optimizer of the group."""
        return self.optimizers[index]

    def zero_grad(self) -> None:
        """Forget the gradients of every optimizer's parameters."""
        for optimizer in self.optimizers:
            optimizer.zero_grad()

    def schedule_step(self) -> list[Tensor]:
        """Every optimizer's assignments; returns all the tensors to realize."""
        return [tensor for optimizer in self.optimizers for tensor in optimizer.schedule_step()]


def _orthogonalize(matrix: Tensor, steps: int, coefficients: tuple[float, float, float], eps: float = 1e-7) -> Tensor:
    """The Newton-Schulz iteration of Muon: `matrix` mapped (approximately) to the nearest semi-orthogonal one.

    X = M / (||M||_F + eps), then `steps` times: A = X X^T, X = a X + (b A + c A A) X; computed on the wide
    orientation (transposed when the matrix has more rows than columns).
    """
    first, second, third = coefficients
    transposed = matrix.shape[0] > matrix.shape[1]
    result = matrix.T if transposed else matrix
    result = result / (result.square().sum().sqrt() + eps)
    for _ in range(steps):
        gram = result @ result.T
        result = first * result + (second * gram + third * (gram @ gram)) @ result
    return result.T if transposed else result


class LARS(Optimizer):
    """SGD with momentum and layer-wise adaptive rate scaling (You et al., 2017), the base of SGD and Muon.

    Per parameter w with gradient g: the trust ratio r = tcoef * ||w|| / (||g|| + weight_decay * ||w||) (1 where
    either norm is zero, and 1 when tcoef is 0); u = r * (g + weight_decay * w) (weight decay here only when
    pre_wd); with `classic`, u is multiplied by lr before the momentum; momentum: b = momentum * b + u and u = b
    (or u + momentum * b with nesterov); with ns_steps > 0 the update is orthogonalized by Newton-Schulz (Muon);
    without `classic`, u is multiplied by lr after; without pre_wd, weight decay is decoupled: w -= lr * wd * w.
    """

    def __init__(self, params: list[Tensor], lr: float = 0.001, momentum: float = 0.9, weight_decay: float = 1e-4,
                 ns_steps: int = 0, ns_coefficients: Sequence[float] | None = None, nesterov: bool = False,
                 classic: bool = True, pre_wd: bool = True, tcoef: float = 0.001, device: str | None = None,
                 fused: bool = False):
        super().__init__(params, lr, device, fused)
        _check_non_negative(momentum=momentum, weight_decay=weight_decay)
        if fused and ns_steps:
            raise ValueError("Muon orthogonalizes each parameter as a matrix, which a fused (flattened) optimizer "
                             "cannot do: use fused=False")
        if nesterov and momentum <= 0:
            raise ValueError(f"nesterov momentum needs momentum > 0, got momentum={momentum}")
        if ns_steps and ns_coefficients is None:
            raise ValueError("ns_steps > 0 needs ns_coefficients (a, b, c) for the Newton-Schulz iteration")
        self.momentum, self.wd, self.nesterov, self.classic = momentum, weight_decay, nesterov, classic
        self.pre_wd, self.tcoef, self.ns_steps = pre_wd, tcoef, ns_steps
        self.ns_coefficients = tuple(ns_coefficients) if ns_coefficients is not None else None
        self.b = self._zeros_like_params() if momentum else []

    def _step(self, params: list[Tensor], grads: list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
        new_values: list[Tensor] = []
        lr = self._scalar_lr()
        for index, (param, grad) in enumerate(zip(params, grads, strict=True)):
            weight = param.detach()
            update = grad + self.wd * weight if self.pre_wd and self.wd != 0 else grad
            if self.tcoef != 0:
                weight_norm, grad_norm = weight.square().sum().sqrt(), grad.square().sum().sqrt()
                ratio = self.tcoef * weight_norm / (grad_norm + self.wd * weight_norm)
                update = update * (weight_norm > 0).where((grad_norm > 0).where(ratio, 1.0), 1.0)
            if self.classic:
                update = update * lr
            if self.momentum:
                self.b[index].assign(self.momentum * self.b[index] + update)
                update = update + self.momentum * self.b[index] if self.nesterov else self.b[index]
            if self.ns_steps and self.ns_coefficients is not None:
                matrix = update.reshape(update.shape[0], -1)
                coefficients = (self.ns_coefficients[0], self.ns_coefficients[1], self.ns_coefficients[2])
                update = _orthogonalize(matrix, self.ns_steps, coefficients).reshape(param.shape)
            if not self.classic:
                update = update * lr
            if not self.pre_wd and self.wd != 0:
                weight = weight * (1 - lr * self.wd)
            new_values.append(weight - update)
        return new_values, self.b


class SGD(LARS):
    """Stochastic gradient descent with optional momentum, Nesterov momentum and (L2) weight decay, as torch's SGD.

    With `classic`, lr is applied before the momentum accumulates (the update is the same for a constant lr).
    """

    def __init__(self, params: list[Tensor], lr: float = 0.001, momentum: float = 0.0, weight_decay: float = 0.0,
                 nesterov: bool = False, classic: bool = False, device: str | None = None, fused: bool = False):
        super().__init__(params, lr, momentum, weight_decay, 0, None, nesterov, classic=classic, pre_wd=True,
                         tcoef=0.0, device=device, fused=fused)


def Muon(params: list[Tensor], lr: float = 0.001, momentum: float = 0.95, weight_decay: float = 0.1,  # noqa: N802
         ns_steps: int = 5, ns_coefficients: tuple[float, float, float] = (3.4445, -4.775, 2.0315),
         nesterov: bool = True, device: str | None = None, fused: bool = False) -> LARS:
    """Muon (Jordan et al., 2024): SGD momentum whose update is orthogonalized by a Newton-Schulz iteration.

    Per parameter (viewed as a matrix of shape (shape[0], -1)): b = momentum * b + g, u = g + momentum * b (Nesterov)
    or b, u = NewtonSchulz(u), w = w * (1 - lr * weight_decay) - lr * u. As in tinygrad, the update is not rescaled
    by the matrix's aspect ratio.
    """
    return LARS(params, lr, momentum, weight_decay, ns_steps, ns_coefficients, nesterov, classic=False, pre_wd=False,
                tcoef=0.0, device=device, fused=fused)


class LAMB(Optimizer):
    """LAMB (You et al., 2019): Adam moments with a layer-wise trust ratio; with adam=True, Adam with decoupled decay.

    m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2, u = m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd * w,
    r = ||w|| / ||u|| (1 where either is zero, and always 1 with adam=True), w -= lr * r * u.
    """

    def __init__(self, params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-6,
                 weight_decay: float = 0.0, adam: bool = False, device: str | None = None, fused: bool = False):
        super().__init__(params, lr, device, fused)
        _check_non_negative(weight_decay=weight_decay, eps=eps)
        self.b1, self.b2, self.eps, self.wd, self.adam = b1, b2, eps, weight_decay, adam
        self.b1_t = _untrained(filled_buffer((1,), 1, dtypes.float32, self.device))
        self.b2_t = _untrained(filled_buffer((1,), 1, dtypes.float32, self.device))
        self.m = self._zeros_like_params()
        self.v = self._zeros_like_params()

    def _step(self, params: list[Tensor], grads: list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
        self.b1_t.assign(self.b1_t * self.b1)
        self.b2_t.assign(self.b2_t * self.b2)
        new_values: list[Tensor] = []
        lr = self._scalar_lr()
        b1_correction, b2_correction = 1.0 - self.b1_t.reshape(()), 1.0 - self.b2_t.reshape(())
        for index, (param, grad) in enumerate(zip(params, grads, strict=True)):
            weight = param.detach()
            self.m[index].assign(self.b1 * self.m[index] + (1.0 - self.b1) * grad)
            self.v[index].assign(self.b2 * self.v[index] + (1.0 - self.b2) * (grad * grad))
            m_hat = self.m[index] / b1_correction
            v_hat = self.v[index] / b2_correction
            update = m_hat / (v_hat.sqrt() + self.eps) + self.wd * weight
            if not self.adam:
                weight_norm, update_norm = weight.square().sum().sqrt(), update.square().sum().sqrt()
                trust = (weight_norm > 0).where((update_norm > 0).where(weight_norm / update_norm, 1.0), 1.0)
                update = update * trust
            new_values.append(weight - lr * update)
        return new_values, [self.b1_t, self.b2_t] + self.m + self.v


def Adam(params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,  # noqa: N802
         device: str | None = None, fused: bool = False) -> LAMB:
    """Adam (Kingma and Ba, 2014), bias-corrected, without weight decay (use AdamW for decay)."""
    return LAMB(params, lr, b1, b2, eps, 0.0, adam=True, device=device, fused=fused)


def AdamW(params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,  # noqa: N802
          weight_decay: float = 0.01, device: str | None = None, fused: bool = False) -> LAMB:
    """AdamW (Loshchilov and Hutter, 2017): Adam with weight decay decoupled from the gradient, as torch's AdamW."""
    return LAMB(params, lr, b1, b2, eps, weight_decay, adam=True, device=device, fused=fused)


__all__ = ["Optimizer", "OptimizerGroup", "SGD", "LARS", "Muon", "LAMB", "Adam", "AdamW"]
