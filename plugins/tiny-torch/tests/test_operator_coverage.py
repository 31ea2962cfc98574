"""Every aten operator the tiny device maps, against PyTorch on the CPU.

SAMPLES lists sample calls per mapped overload (an OpInfo in small): each runs as the overload itself on tiny and on
the CPU, and the two agree on values (within tolerances), dtypes, shapes, which outputs alias which inputs (strides
and storage offsets of those), what the call wrote into its inputs and, where the CPU result is differentiable, the
gradients of every floating-point input. test_every_mapped_operator_has_samples fails when an operator is mapped
without samples (or samples name an operator no longer mapped), so coverage stays complete as operators are added."""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
import tiny_torch
import torch
from torch.utils._pytree import tree_flatten, tree_map

aten = torch.ops.aten
_GENERATOR = torch.Generator().manual_seed(0)
CPU = torch.device("cpu")


def r(*shape: int) -> torch.Tensor:
    """Standard normal float32 samples."""
    return torch.randn(*shape, generator=_GENERATOR)


def pos(*shape: int) -> torch.Tensor:
    """Positive float32 samples in [0.5, 2.5)."""
    return torch.rand(*shape, generator=_GENERATOR) * 2 + 0.5


def unit(*shape: int) -> torch.Tensor:
    """float32 samples inside (-0.9, 0.9)."""
    return torch.rand(*shape, generator=_GENERATOR) * 1.8 - 0.9


def ints(low: int, high: int, *shape: int, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    """Integers uniform in [low, high)."""
    return torch.randint(low, high, shape, generator=_GENERATOR, dtype=dtype)


def bools(*shape: int) -> torch.Tensor:
    """Random booleans."""
    return torch.rand(*shape, generator=_GENERATOR) > 0.5


def t(*values: object, dtype: torch.dtype | None = None) -> torch.Tensor:
    """A literal tensor."""
    return torch.tensor(values if len(values) != 1 else values[0], dtype=dtype)


@dataclass(frozen=True)
class View:
    """An argument that is a view of a fresh base: `make(base)` is applied on each device, so the operator sees the
    same sizes, strides and storage offset on tiny as on the CPU (and gradients flow to the base)."""
    base: torch.Tensor
    make: Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class Host:
    """An argument that stays a CPU tensor in both runs (copies across devices)."""
    value: torch.Tensor


@dataclass(frozen=True)
class Device:
    """Stands for the device of the run (tiny or cpu) in an argument."""


DEVICE = Device()


@dataclass
class Sample:
    """One call of an operator: its arguments, how to compare, which arguments to differentiate."""
    args: tuple
    kwargs: dict
    grad: bool | tuple[int, ...] = True
    """False: no gradient check; True: every floating-point tensor argument; a tuple: those argument positions."""
    atol: float = 1e-5
    rtol: float = 1e-4
    check: Callable[[object, object], None] | None = None
    """Replaces the comparison of values (random operators): called with the tiny results (on the CPU) and the CPU
    results; in-place random operators' inputs are not compared either."""
    values: bool = True
    """False: contents are unspecified (empty_like), only dtypes and shapes compare."""
    extras: dict = field(default_factory=dict)


def s(*args: object, grad: bool | tuple[int, ...] = True, atol: float = 1e-5, rtol: float = 1e-4,
      check: Callable[[object, object], None] | None = None, values: bool = True, **kwargs: object) -> Sample:
    """A sample call `op(*args, **kwargs)`."""
    return Sample(args, kwargs, grad, atol, rtol, check, values)


def uniform_between(low: float, high: float) -> Callable[[object, object], None]:
    """Checks that the tiny result's samples lie in [low, high) and spread over that range."""
    def check(result: object, expected: object) -> None:
        assert isinstance(result, torch.Tensor)
        assert float(result.min()) >= low and float(result.max()) < high
        assert abs(float(result.float().mean()) - (low + high) / 2) < (high - low) * 0.1
    return check


def normal_with(mean: float, std: float) -> Callable[[object, object], None]:
    """Checks the tiny samples' mean and standard deviation."""
    def check(result: object, expected: object) -> None:
        assert isinstance(result, torch.Tensor)
        assert abs(float(result.mean()) - mean) < 0.15 * std and abs(float(result.std()) - std) < 0.15 * std
    return check


def bernoulli_with(p: float) -> Callable[[object, object], None]:
    """Checks that the tiny samples are 0 or 1 with mean close to p."""
    def check(result: object, expected: object) -> None:
        assert isinstance(result, torch.Tensor)
        assert set(result.unique().tolist()) <= {0.0, 1.0} and abs(float(result.float().mean()) - p) < 0.07
    return check


def dropout_of(source: torch.Tensor, p: float) -> Callable[[object, object], None]:
    """Checks a training-mode native_dropout: outputs are 0 or x / (1 - p) as the mask says, about p dropped."""
    def check(result: object, expected: object) -> None:
        output, mask = result  # type: ignore[misc]
        assert mask.dtype == torch.bool and output.dtype == source.dtype
        torch.testing.assert_close(output, torch.where(mask, source / (1 - p), 0.0))
        assert abs(float((~mask).float().mean()) - p) < 0.07
    return check


# sample inputs reused by several operators
X = r(3, 4)
Y = r(3, 4)
ROW = r(4)
TIES = t([[1.0, 3.0, 3.0, -2.0], [2.0, 2.0, 0.0, 0.0], [-1.0, -1.0, -1.0, 5.0]])
SPECIAL = t([1.0, float("nan"), float("inf"), -float("inf"), 0.0, -2.5])
NONCONTIGUOUS = View(r(6, 5), lambda base: base.t()[1:, ::2])  # (4, 3), strides (1, 10), offset 5
INT = ints(-9, 10, 3, 4)
INT_NONZERO = ints(1, 6, 3, 4) * (2 * ints(0, 2, 3, 4) - 1)
MASK = bools(3, 4)
IMAGE = r(2, 3, 6, 6)
CONV_WEIGHT = r(4, 3, 3, 3)

# forward values saved by PyTorch for backward operators, computed once on the CPU
_LN = torch.native_layer_norm(X, [4], ROW, r(4), 1e-5)
_GN_INPUT = r(2, 6, 3)
_GN = torch.native_group_norm(_GN_INPUT, pos(6), r(6), 2, 6, 3, 3, 1e-5)
_BN_INPUT, _BN_MEAN, _BN_VAR = r(4, 3, 2, 2), r(3), pos(3)
_BN = torch.native_batch_norm(_BN_INPUT, pos(3), r(3), None, None, True, 0.1, 1e-5)
_POOL = aten.max_pool2d_with_indices.default(IMAGE, [2, 2], [2, 2], [0, 0], [1, 1], False)
_POOL_PADDED = aten.max_pool2d_with_indices.default(IMAGE, [3, 3], [2, 2], [1, 1], [1, 1], True)
_LOGP = torch.log_softmax(r(5, 4), 1)
_TARGET = t([1, 0, 3, 2, 1])
_TARGET_IGNORED = t([1, -100, 3, 2, -100])
_CLASS_WEIGHT = pos(4)
_NLL_MEAN = aten.nll_loss_forward.default(_LOGP, _TARGET_IGNORED, _CLASS_WEIGHT, 1, -100)
_SOFTMAX = torch.softmax(X, 1)
_LOG_SOFTMAX = torch.log_softmax(X, 0)

_CONV = ([1, 1], [1, 1], [1, 1], False, [0, 0], 1)
_CONV_STRIDED_GROUPS = ([2, 2], [1, 1], [1, 1], False, [0, 0], 2)
_CONV_TRANSPOSED = ([2, 2], [1, 1], [1, 1], True, [1, 1], 1)


SAMPLES: dict[str, list[Sample]] = {
    # ---- elementwise, unary ----
    "aten.abs.default": [s(X), s(INT), s(NONCONTIGUOUS)],
    "aten.neg.default": [s(X), s(INT)],
    "aten.exp.default": [s(X), s(NONCONTIGUOUS)],
    "aten.exp2.default": [s(X)],
    "aten.expm1.default": [s(X * 0.01), s(X)],
    "aten.log.default": [s(pos(3, 4))],
    "aten.log2.default": [s(pos(3, 4))],
    "aten.log10.default": [s(pos(3, 4))],
    "aten.log1p.default": [s(unit(3, 4) * 0.001), s(pos(3, 4))],
    "aten.sqrt.default": [s(pos(3, 4))],
    "aten.rsqrt.default": [s(pos(3, 4))],
    "aten.reciprocal.default": [s(pos(3, 4)), s(-pos(3, 4))],
    "aten.sin.default": [s(X * 3)],
    "aten.cos.default": [s(X * 3)],
    "aten.tan.default": [s(unit(3, 4))],
    "aten.tanh.default": [s(X * 3)],
    "aten.sinh.default": [s(X)],
    "aten.cosh.default": [s(X)],
    "aten.asin.default": [s(unit(3, 4))],
    "aten.acos.default": [s(unit(3, 4))],
    "aten.atan.default": [s(X * 3)],
    "aten.sigmoid.default": [s(X * 3)],
    "aten.relu.default": [s(X), s(INT)],
    "aten.floor.default": [s(X * 3)],
    "aten.ceil.default": [s(X * 3)],
    "aten.trunc.default": [s(X * 3)],
    "aten.round.default": [s(X * 3), s(t([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49, 3.51]))],
    "aten.round.decimals": [s(X * 3, decimals=2), s(t([0.125, 1.375, -2.625, 12.5]), decimals=2),
                            s(t([1200.0, -3300.0, 15.0, 4600.0]), decimals=-3), s(X, decimals=0)],
    "aten.sign.default": [s(t([-2.0, 0.0, 3.0, -0.0])), s(INT)],
    "aten.erf.default": [s(X)],
    "aten.silu.default": [s(X * 3)],
    "aten.mish.default": [s(X * 3)],
    "aten.hardswish.default": [s(X * 3)],
    "aten.hardsigmoid.default": [s(X * 3)],
    "aten.square.default": [s(X), s(INT)],
    "aten.isnan.default": [s(SPECIAL)],
    "aten.isinf.default": [s(SPECIAL)],
    "aten.isfinite.default": [s(SPECIAL), s(INT)],
    "aten.logical_not.default": [s(MASK), s(t([0.0, 1.5, -2.0]))],
    "aten.bitwise_not.default": [s(INT), s(MASK)],
    # ---- elementwise, binary and more ----
    "aten.add.Tensor": [s(X, ROW), s(X, Y, alpha=2.5), s(INT, X), s(INT, INT, alpha=3), s(NONCONTIGUOUS, ROW[:3])],
    "aten.add.Scalar": [s(X, 2.5), s(INT, 3, alpha=2), s(INT, 0.5)],
    "aten.sub.Tensor": [s(X, ROW), s(X, Y, alpha=0.5), s(INT, INT)],
    "aten.sub.Scalar": [s(X, 2.5), s(INT, 3)],
    "aten.rsub.Tensor": [s(X, Y, alpha=2.0), s(INT, INT)],
    "aten.rsub.Scalar": [s(X, 1.0), s(INT, 2, alpha=3)],
    "aten.mul.Tensor": [s(X, ROW), s(INT, INT), s(MASK, X), s(MASK, MASK)],
    "aten.mul.Scalar": [s(X, -1.5), s(INT, 3)],
    "aten.div.Tensor": [s(X, pos(3, 4)), s(INT, INT_NONZERO), s(X, -pos(4))],
    "aten.div.Scalar": [s(X, 4.0), s(INT, 4)],
    "aten.div.Tensor_mode": [s(INT, INT_NONZERO, rounding_mode="trunc"), s(INT, INT_NONZERO, rounding_mode="floor"),
                             s(X * 5, pos(3, 4), rounding_mode="floor", grad=False),
                             s(X * 5, pos(3, 4), rounding_mode="trunc", grad=False),
                             s(X * 5, pos(3, 4), rounding_mode=None),
                             s(t([-7, 7, -7, 2 ** 40 + 3]), t([2, -2, -2, 7]), rounding_mode="floor")],
    "aten.div.Scalar_mode": [s(INT, 4, rounding_mode="floor"), s(INT, -4, rounding_mode="trunc"),
                             s(X * 5, 2.0, rounding_mode="floor", grad=False)],
    "aten.remainder.Tensor": [s(X * 5, pos(3, 4), grad=(0,)), s(INT, INT_NONZERO), s(X * 5, -pos(3, 4), grad=(0,))],
    "aten.remainder.Scalar": [s(X * 5, 1.5), s(INT, -4), s(INT, 3)],
    "aten.fmod.Tensor": [s(X * 5, pos(3, 4), grad=(0,)), s(INT, INT_NONZERO)],
    "aten.fmod.Scalar": [s(X * 5, -1.5), s(INT, 4)],
    "aten.pow.Tensor_Scalar": [s(X, 2), s(pos(3, 4), 0.5), s(pos(3, 4), -1.5), s(INT, 2), s(X, 3.0)],
    "aten.pow.Tensor_Tensor": [s(pos(3, 4), X), s(ints(0, 4, 3, 4), ints(0, 3, 3, 4))],
    "aten.pow.Scalar": [s(2.0, X), s(0.5, X), s(2, ints(0, 8, 3, 4))],
    "aten.maximum.default": [s(X, Y), s(INT, INT), s(X, ROW)],
    "aten.minimum.default": [s(X, Y), s(INT, INT), s(X, ROW)],
    "aten.clamp.default": [s(X, -0.5, 0.5), s(X, None, 0.3), s(X, -0.2), s(INT, -3, 4)],
    "aten.clamp.Tensor": [s(X, -pos(3, 4) * 0.5, pos(4) * 0.5), s(X, None, ROW)],
    "aten.clamp_min.default": [s(X, 0.1), s(INT, 0)],
    "aten.clamp_min.Tensor": [s(X, ROW)],
    "aten.clamp_max.default": [s(X, 0.1), s(INT, 0)],
    "aten.clamp_max.Tensor": [s(X, ROW)],
    "aten.where.self": [s(MASK, X, Y), s(MASK, X, ROW), s(MASK, INT, X)],
    "aten.where.ScalarOther": [s(MASK, X, 0.5)],
    "aten.where.ScalarSelf": [s(MASK, 0.5, Y)],
    "aten.where.Scalar": [s(MASK, 1.0, -2.0), s(MASK, 1, 2)],
    "aten.masked_fill.Scalar": [s(X, MASK, 0.5), s(INT, MASK, -3), s(X, MASK[0], -1.0)],
    "aten.masked_fill.Tensor": [s(X, MASK, t(2.0)), s(INT, MASK, t(7))],
    "aten.lerp.Scalar": [s(X, Y, 0.3)],
    "aten.lerp.Tensor": [s(X, Y, torch.rand(3, 4, generator=_GENERATOR)), s(X, ROW, unit(4))],
    "aten.addcmul.default": [s(X, Y, ROW, value=0.5), s(X, Y, ROW)],
    "aten.addcdiv.default": [s(X, Y, pos(3, 4), value=2.0), s(X, Y, pos(4))],
    "aten.eq.Tensor": [s(TIES, TIES.flip(1)), s(INT, INT.flip(0))],
    "aten.eq.Scalar": [s(TIES, 3.0), s(INT, 2)],
    "aten.ne.Tensor": [s(TIES, TIES.flip(1)), s(MASK, MASK.flip(0))],
    "aten.ne.Scalar": [s(TIES, 2.0)],
    "aten.lt.Tensor": [s(TIES, TIES.flip(1)), s(INT, X)],
    "aten.lt.Scalar": [s(TIES, 2.0), s(INT, 0.5)],
    "aten.le.Tensor": [s(TIES, TIES.flip(1))],
    "aten.le.Scalar": [s(TIES, 2.0)],
    "aten.gt.Tensor": [s(TIES, TIES.flip(1)), s(X, ROW)],
    "aten.gt.Scalar": [s(TIES, 2.0), s(INT, 0)],
    "aten.ge.Tensor": [s(TIES, TIES.flip(1))],
    "aten.ge.Scalar": [s(TIES, 2.0)],
    "aten.logical_and.default": [s(MASK, MASK.flip(0)), s(X, INT)],
    "aten.logical_or.default": [s(MASK, MASK.flip(0)), s(X, INT)],
    "aten.logical_xor.default": [s(MASK, MASK.flip(0)), s(X, INT)],
    "aten.bitwise_and.Tensor": [s(INT, INT.flip(0)), s(MASK, MASK.flip(0))],
    "aten.bitwise_and.Scalar": [s(INT, 6)],
    "aten.bitwise_or.Tensor": [s(INT, INT.flip(0)), s(MASK, MASK.flip(0))],
    "aten.bitwise_or.Scalar": [s(INT, 6)],
    "aten.bitwise_xor.Tensor": [s(INT, INT.flip(0)), s(MASK, MASK.flip(0))],
    "aten.bitwise_xor.Scalar": [s(INT, 6)],
    "aten.__lshift__.Tensor": [s(INT, ints(0, 5, 3, 4)), s(ints(-9, 10, 3, 4, dtype=torch.int32), t([0, 1, 2, 3]))],
    "aten.__lshift__.Scalar": [s(INT, 2), s(t([1, 2, -3], dtype=torch.int8), 7)],
    "aten.__rshift__.Tensor": [s(INT, ints(0, 5, 3, 4)), s(t([-7, -8, 5, 3], dtype=torch.int32), t([0, 1, 2, 3]))],
    "aten.__rshift__.Scalar": [s(INT, 1), s(t([-7, -8, 5, -1], dtype=torch.int16), 2)],
    "aten.equal.default": [s(X, X.clone()), s(X, Y), s(X, X[:2]), s(INT, INT.clone()), s(MASK, ~MASK)],
    # ---- activations and their backwards ----
    "aten.gelu.default": [s(X * 2), s(X * 2, approximate="tanh")],
    "aten.gelu_backward.default": [s(Y, X * 2), s(Y, X * 2, approximate="tanh")],
    "aten.leaky_relu.default": [s(X, 0.2), s(X)],
    "aten.leaky_relu_backward.default": [s(Y, X, 0.2, False)],
    "aten.elu.default": [s(X), s(X, 0.5, 2.0, 1.5)],
    "aten.hardtanh.default": [s(X * 2), s(X, -0.5, 0.3)],
    "aten.hardtanh_backward.default": [s(Y, X, -0.5, 0.3)],
    "aten.softplus.default": [s(X * 3), s(X * 3, 2.0, 1.0)],
    "aten.threshold_backward.default": [s(Y, X, 0.0), s(Y, X, 0.5)],
    "aten.sigmoid_backward.default": [s(Y, torch.sigmoid(X))],
    "aten.tanh_backward.default": [s(Y, torch.tanh(X))],
    "aten.silu_backward.default": [s(Y, X * 3, grad=False)],  # PyTorch has no double backward of silu
    # ---- reductions ----
    "aten.sum.default": [s(X), s(INT), s(MASK), s(NONCONTIGUOUS), s(X, dtype=torch.float64)],
    "aten.sum.dim_IntList": [s(r(2, 3, 4), [0, 2], True), s(r(2, 3, 4), [-1]), s(INT, [1]), s(MASK, [0]),
                             s(X, None), s(X, [1], dtype=torch.float64)],
    "aten.mean.default": [s(X), s(NONCONTIGUOUS)],
    "aten.mean.dim": [s(r(2, 3, 4), [1]), s(r(2, 3, 4), [0, -1], True), s(X, [1], dtype=torch.float64)],
    "aten.prod.default": [s(X), s(ints(1, 4, 3, 4)), s(t([[1.0, 0.0, 2.0], [3.0, 4.0, 0.5]]))],
    "aten.prod.dim_int": [s(X, 1), s(X, 0, True), s(ints(-3, 4, 3, 4), 1),
                          s(t([[1.0, 0.0, 2.0], [3.0, 4.0, 0.5], [0.0, 2.0, 0.0]]), 1)],
    "aten.amax.default": [s(X, [1]), s(r(2, 3, 4), [0, 2], True), s(TIES, [1]), s(TIES), s(INT, [0])],
    "aten.amin.default": [s(X, [1]), s(r(2, 3, 4), [0, 2], True), s(TIES, [1]), s(INT, [0])],
    "aten.max.default": [s(X), s(TIES), s(INT)],
    "aten.min.default": [s(X), s(TIES), s(INT)],
    "aten.max.dim": [s(X, 1), s(X, 0, True), s(TIES, 1), s(INT, 1)],
    "aten.min.dim": [s(X, 1), s(X, 0, True), s(TIES, 1), s(INT, 0)],
    "aten.argmax.default": [s(X), s(X, 1), s(TIES, 1, True), s(INT, 0)],
    "aten.argmin.default": [s(X), s(X, 0), s(TIES, 1, True), s(INT, 1)],
    "aten.var.correction": [s(X), s(r(2, 3, 4), [1]), s(r(2, 3, 4), [0, 2], correction=0, keepdim=True)],
    "aten.std.correction": [s(X), s(r(2, 3, 4), [1]), s(r(2, 3, 4), [0, 2], correction=0, keepdim=True)],
    "aten.any.default": [s(MASK), s(torch.zeros(3, 4)), s(INT)],
    "aten.any.dim": [s(MASK, 1), s(X > 1, 0, True)],
    "aten.any.dims": [s(MASK, [0, 1]), s(MASK, [1], True)],
    "aten.all.default": [s(MASK), s(torch.ones(3, 4)), s(INT)],
    "aten.all.dim": [s(MASK, 1), s(X > -1, 0, True)],
    "aten.all.dims": [s(MASK, [0, 1]), s(MASK, [1], True)],
    "aten.logsumexp.default": [s(X, [1]), s(r(2, 3, 4) * 30, [0, 2], True)],
    "aten.cumprod.default": [s(unit(3, 4) * 2, 1), s(X, 0), s(ints(-3, 4, 3, 4), 1), s(X, -1, dtype=torch.float64),
                             s(t([[1.0, 0.0, 2.0, 3.0], [0.0, 2.0, 0.0, 1.5], [2.0, 0.5, 3.0, 0.0]]), 1)],
    "aten.cumsum.default": [s(X, 1), s(X, 0), s(INT, 1), s(MASK, 0), s(X, 1, dtype=torch.float64)],
    # ---- linear algebra ----
    "aten.mm.default": [s(r(5, 3), r(3, 4)), s(NONCONTIGUOUS, r(3, 2))],
    "aten.bmm.default": [s(r(2, 5, 3), r(2, 3, 4))],
    "aten.dot.default": [s(r(5), r(5))],
    "aten.addmm.default": [s(r(4), r(5, 3), r(3, 4)), s(r(5, 4), r(5, 3), r(3, 4), beta=0.5, alpha=2.0),
                           s(t([float("nan")] * 4), r(5, 3), r(3, 4), beta=0, grad=(1, 2))],
    "aten.baddbmm.default": [s(r(2, 5, 4), r(2, 5, 3), r(2, 3, 4), beta=0.5, alpha=-1.0), s(r(4), r(2, 5, 3),
                                                                                             r(2, 3, 4))],
    # ---- convolution and pooling ----
    "aten.convolution.default": [
        s(IMAGE, CONV_WEIGHT, r(4), *_CONV, atol=1e-4),
        s(r(2, 4, 7, 7), r(6, 2, 3, 3), None, *_CONV_STRIDED_GROUPS, atol=1e-4),
        s(r(2, 3, 9), r(4, 3, 3), r(4), [1], [0], [2], False, [0], 1, atol=1e-4),
        s(r(1, 3, 4, 4), r(3, 2, 3, 3), r(2), *_CONV_TRANSPOSED, atol=1e-4),
        s(r(1, 2, 4, 4, 4), r(3, 2, 2, 2, 2), r(3), [1, 1, 1], [0, 0, 0], [1, 1, 1], False, [0, 0, 0], 1,
          atol=1e-4)],
    "aten.convolution_backward.default": [
        s(r(2, 4, 6, 6), IMAGE, CONV_WEIGHT, [4], *_CONV, [True, True, True], atol=1e-4, grad=False),
        s(r(2, 6, 4, 4), r(2, 4, 7, 7), r(6, 2, 3, 3), None, *_CONV_STRIDED_GROUPS, [True, True, False], atol=1e-4,
          grad=False),
        s(r(1, 2, 8, 8), r(1, 3, 4, 4), r(3, 2, 3, 3), [2], *_CONV_TRANSPOSED, [True, True, True], atol=1e-4,
          grad=False)],
    "aten.max_pool2d_with_indices.default": [s(IMAGE, [2, 2], [2, 2], [0, 0], [1, 1], False),
                                             s(IMAGE, [3, 3], [2, 2], [1, 1], [1, 1], True),
                                             s(r(1, 2, 7, 7), [3, 3], [1, 1], [0, 0], [2, 2], False)],
    "aten.max_pool2d_with_indices_backward.default": [
        s(r(2, 3, 3, 3), IMAGE, [2, 2], [2, 2], [0, 0], [1, 1], False, _POOL[1], grad=False),
        s(r(2, 3, 4, 4), IMAGE, [3, 3], [2, 2], [1, 1], [1, 1], True, _POOL_PADDED[1], grad=False)],
    "aten.avg_pool2d.default": [s(IMAGE, [2, 2], [2, 2]), s(IMAGE, [3, 3], [2, 2], [1, 1], True, False),
                                s(IMAGE, [3, 3], [2, 2], [1, 1], False, True),
                                s(IMAGE, [3, 3], [2, 2], [1, 1], False, True, 4),
                                s(r(1, 2, 7, 7), [3, 2], [2, 3], [1, 1], True, False, 5)],
    "aten.avg_pool2d_backward.default": [
        s(r(2, 3, 3, 3), IMAGE, [2, 2], [2, 2], [0, 0], False, True, None, grad=False),
        s(r(2, 3, 3, 3), IMAGE, [3, 3], [2, 2], [1, 1], False, False, None, grad=False),
        s(r(2, 3, 3, 3), IMAGE, [3, 3], [2, 2], [1, 1], False, True, 7, grad=False)],
    "aten._adaptive_avg_pool2d.default": [s(IMAGE, [2, 3]), s(IMAGE, [1, 1]), s(IMAGE, [4, 5]), s(r(3, 7, 5), [3, 2])],
    "aten._adaptive_avg_pool2d_backward.default": [s(r(2, 3, 2, 3), IMAGE, grad=False)],
    # ---- normalization, softmax, losses ----
    "aten._softmax.default": [s(X, 1, False), s(r(2, 3, 4) * 5, 0, False)],
    "aten._log_softmax.default": [s(X, 1, False), s(r(2, 3, 4) * 5, 0, False)],
    "aten._softmax_backward_data.default": [s(Y, _SOFTMAX, 1, torch.float32, grad=False)],
    "aten._log_softmax_backward_data.default": [s(Y, _LOG_SOFTMAX, 0, torch.float32, grad=False)],
    "aten.native_layer_norm.default": [s(X, [4], ROW, r(4), 1e-5), s(r(2, 3, 4), [3, 4], None, None, 1e-3)],
    "aten.native_layer_norm_backward.default": [
        s(Y, X, [4], _LN[1], _LN[2], ROW, r(4), [True, True, True], atol=1e-4, grad=False),
        s(Y, X, [4], _LN[1], _LN[2], None, None, [True, False, False], atol=1e-4, grad=False)],
    "aten.native_group_norm.default": [s(_GN_INPUT, pos(6), r(6), 2, 6, 3, 3, 1e-5, atol=1e-4),
                                       s(r(3, 4, 5), None, None, 3, 4, 5, 2, 1e-3, atol=1e-4)],
    "aten.native_group_norm_backward.default": [
        s(r(2, 6, 3), _GN_INPUT, _GN[1], _GN[2], pos(6), 2, 6, 3, 3, [True, True, True], atol=1e-4, grad=False)],
    "aten.native_batch_norm.default": [
        s(_BN_INPUT, pos(3), r(3), _BN_MEAN, _BN_VAR, True, 0.1, 1e-5, grad=(0, 1, 2), atol=1e-4),
        s(_BN_INPUT, pos(3), r(3), _BN_MEAN, _BN_VAR, False, 0.1, 1e-5, grad=(0, 1, 2), atol=1e-4),
        s(r(5, 3), None, None, None, None, True, 0.3, 1e-3, atol=1e-4)],
    "aten._native_batch_norm_legit_no_training.default": [
        s(_BN_INPUT, pos(3), r(3), _BN_MEAN, _BN_VAR, 0.1, 1e-5, grad=(0, 1, 2), atol=1e-4)],
    "aten._native_batch_norm_legit_functional.default": [
        s(_BN_INPUT, pos(3), r(3), _BN_MEAN, _BN_VAR, True, 0.1, 1e-5, grad=(0, 1, 2), atol=1e-4)],
    "aten.native_batch_norm_backward.default": [
        s(r(4, 3, 2, 2), _BN_INPUT, pos(3), None, None, _BN[1], _BN[2], True, 1e-5, [True, True, True],
          atol=1e-4, grad=False),
        s(r(4, 3, 2, 2), _BN_INPUT, pos(3), _BN_MEAN, _BN_VAR, None, None, False, 1e-5, [True, True, True],
          atol=1e-4, grad=False)],
    "aten.nll_loss_forward.default": [s(_LOGP, _TARGET, None, 1, -100), s(_LOGP, _TARGET, None, 0, -100),
                                      s(_LOGP, _TARGET_IGNORED, _CLASS_WEIGHT, 1, -100, grad=(0,)),
                                      s(_LOGP, _TARGET, _CLASS_WEIGHT, 2, 3, grad=(0,))],
    "aten.nll_loss_backward.default": [
        s(t(1.5), _LOGP, _TARGET_IGNORED, _CLASS_WEIGHT, 1, -100, _NLL_MEAN[1], grad=False),
        s(r(5), _LOGP, _TARGET, None, 0, 3, t(4.0), grad=False)],
    "aten.mse_loss.default": [s(X, Y), s(X, Y, 0), s(X, Y, 2)],
    "aten.mse_loss_backward.default": [s(t(1.5), X, Y, 1, grad=False), s(r(3, 4), X, Y, 0, grad=False),
                                       s(t(0.5), X, Y, 2, grad=False)],
    # ---- concatenation, indexing, copies ----
    "aten.cat.default": [s([X, Y], 1), s([X, Y, X], 0), s([X, torch.zeros(0)], 0), s([INT, X], 0),
                         s([NONCONTIGUOUS, X.t()], -1)],
    "aten.stack.default": [s([X, Y], 0), s([X, Y], 2), s([INT, INT], 1)],
    "aten.clone.default": [s(X), s(NONCONTIGUOUS), s(INT)],
    "aten.gather.default": [s(X, 1, t([[0, 2], [1, 1], [3, 0]])), s(X, 0, t([[2, 0, 1, 1]]))],
    "aten.scatter.src": [s(X, 1, t([[0, 2], [1, 3], [3, 0]]), Y[:, :2]),
                         s(torch.zeros(3, 4), 0, t([[2, 0, 1, 0]]), Y[:1])],
    "aten.scatter.value": [s(X, 1, t([[0, 2], [1, 3], [3, 0]]), 2.5), s(INT, 0, t([[2, 0, 1, 0]]), -1)],
    "aten.scatter_add.default": [s(X, 0, t([[2, 0, 2, 0], [2, 2, 1, 0]]), Y[:2]),
                                 s(torch.zeros(2, 5), 1, t([[0, 0, 4], [1, 4, 4]]), X[:2, :3])],
    "aten.index_select.default": [s(X, 0, t([2, 0, 2])), s(X, 1, t([3, -1 + 4, 0])), s(INT, 1, t([1])),
                                  s(t(2.5), 0, t([0])), s(t(-1.0), 0, t(0))],
    "aten.index.Tensor": [s(X, [t([2, 0, 2])]), s(X, [None, t([3, 1])]), s(X, [t([[0], [2]]), t([1, 3])]),
                          s(X, [t([-1, 0])]), s(X, [MASK]), s(X, [t([True, False, True])]),
                          s(r(2, 3, 4), [None, t([True, False, True]), t([0, 3])])],
    "aten.index_put.default": [s(X, [t([1, -1, 1])], r(3, 4), True), s(X, [t([2, 0])], r(2, 4)),
                               s(X, [t([[0], [2]]), t([1, 3])], t(7.0)),
                               s(X, [None, t([3, 0])], r(3, 2)), s(X, [None, t([1, 1])], r(3, 2), True),
                               s(X, [MASK], t(0.5)), s(X, [t([True, False, True])], r(2, 4)),
                               s(X, [MASK], r(int(MASK.sum())), True)],
    "aten.embedding.default": [s(r(5, 3), t([[1, 2], [4, 1]])), s(r(5, 3), t([0, 3, 0]), 0)],
    "aten.embedding_dense_backward.default": [s(r(2, 2, 3), t([[1, 2], [4, 1]]), 5, -1, False, grad=False),
                                              s(r(3, 3), t([0, 3, 0]), 5, 0, False, grad=False)],
    "aten.constant_pad_nd.default": [s(X, [1, 2]), s(X, [1, -1, 0, 2], 0.5), s(INT, [2, 0, 1, 1], -1)],
    "aten.flip.default": [s(X, [0]), s(r(2, 3, 4), [0, 2])],
    "aten.roll.default": [s(X, [1], [0]), s(X, [2]), s(X, [1, -3], [0, 1])],
    "aten.repeat.default": [s(X, [2, 1]), s(ROW, [2, 1, 3])],
    "aten.tril.default": [s(X), s(X, 1), s(r(2, 3, 4), -1)],
    "aten.triu.default": [s(X), s(X, 1), s(r(2, 3, 4), -1)],
    "aten.sort.default": [s(X, 1), s(X, 0, True), s(INT.float() + X * 0.01, -1, True)],
    "aten.topk.default": [s(X, 2), s(X, 2, 0, False), s(r(2, 5), 3, 1, True, True)],
    "aten.native_dropout_backward.default": [s(Y, MASK, 2.0, grad=False)],
    # ---- operators on the tiny tensors themselves ----
    "aten.copy_.default": [s(torch.zeros(3, 4), Host(X)), s(Host(torch.zeros(3, 4)), X),
                           s(View(torch.zeros(5, 8), lambda base: base[1:4, ::2]),
                             View(r(4, 3), lambda base: base.t())),
                           s(torch.zeros(3, 4, dtype=torch.int32), X * 5), s(torch.zeros(3, 4), Y),
                           s(torch.zeros(3, 4), ROW)],
    "aten._to_copy.default": [s(X, dtype=torch.float16, atol=1e-3), s(X * 5, dtype=torch.int32),
                              s(INT, dtype=torch.bool), s(NONCONTIGUOUS, dtype=torch.float64), s(X, device=CPU),
                              s(INT, device=DEVICE)],
    "aten._local_scalar_dense.default": [s(t(2.5)), s(t(-3)), s(t(True))],
    "aten.fill_.Scalar": [s(X, 2.5), s(View(torch.zeros(5, 6), lambda base: base.t()[::2]), -1.0), s(INT, 3)],
    "aten.fill_.Tensor": [s(X, t(3.0)), s(INT, t(2))],
    "aten.zero_.default": [s(X), s(View(torch.ones(5, 6), lambda base: base[:, 1])), s(INT)],
    "aten.fill.Scalar": [s(X, 2.0), s(INT, 7)],
    "aten.uniform_.default": [s(torch.zeros(4000)), s(torch.zeros(4000), -2.0, 3.0)],
    "aten.normal_.default": [s(torch.zeros(4000)), s(torch.zeros(4000), 1.5, 0.5)],
    "aten.bernoulli_.float": [s(torch.zeros(4000), 0.3)],
    "aten.random_.from": [s(torch.zeros(4000), -3, 5)],
    "aten.random_.to": [s(torch.zeros(4000, dtype=torch.int64), 7)],
    "aten.native_dropout.default": [s(X, 0.0, True), s(X, 0.5, False)],
    "aten.empty_like.default": [s(X, values=False), s(INT, dtype=torch.float16, values=False)],
    "aten.zeros_like.default": [s(X), s(NONCONTIGUOUS, dtype=torch.int32)],
    "aten.ones_like.default": [s(X), s(MASK)],
    "aten.full_like.default": [s(X, 2.5), s(INT, 3, dtype=torch.float32), s(X, 1.0, device=CPU)],
    "aten.new_empty.default": [s(X, [2, 5], values=False)],
    "aten.new_zeros.default": [s(X, [2, 5]), s(INT, [3], dtype=torch.bool)],
    "aten.new_ones.default": [s(X, [2, 5]), s(X, [2], device=CPU)],
    "aten.new_full.default": [s(X, [2, 5], 4.5), s(INT, [3], -2)],
    "aten.new_empty_strided.default": [s(X, [2, 5], [5, 1], values=False)],
    "aten.resize_.default": [s(X, [3, 4]), s(r(5, 5, 2), [25, 2]), s(r(4, 3), [5])],
    "aten.lift_fresh.default": [s(X)],
    "aten.alias.default": [s(X), s(NONCONTIGUOUS)],
    "aten.view.dtype": [s(X, torch.float32)],
    "aten.set_.source_Tensor": [s(torch.zeros(2), X)],
    "aten.nonzero.default": [s(MASK), s(INT), s(torch.zeros(2, 3)), s(t(3.0)), s(t(0.0))],
}

# samples whose comparison is statistical (the tiny device draws from tinycore's generator, not PyTorch's)
SAMPLES["aten.uniform_.default"][0].check = uniform_between(0.0, 1.0)
SAMPLES["aten.uniform_.default"][1].check = uniform_between(-2.0, 3.0)
SAMPLES["aten.normal_.default"][0].check = normal_with(0.0, 1.0)
SAMPLES["aten.normal_.default"][1].check = normal_with(1.5, 0.5)
SAMPLES["aten.bernoulli_.float"][0].check = bernoulli_with(0.3)
SAMPLES["aten.random_.from"][0].check = uniform_between(-3, 5)
SAMPLES["aten.random_.to"][0].check = uniform_between(0, 7)
_DROPPED = r(4000)
SAMPLES["aten.native_dropout.default"] += [s(_DROPPED, 0.4, True, check=dropout_of(_DROPPED, 0.4), grad=False),
                                            s(_DROPPED, 0.4, None, check=dropout_of(_DROPPED, 0.4), grad=False)]


# the fused optimizer steps: lists of parameters and state, written in place (compared after the call)
def _pair(make: Callable[..., torch.Tensor]) -> list[torch.Tensor]:
    return [make(3, 4), make(5)]


_STEPS = [torch.tensor(3.0), torch.tensor(3.0)]
_ADAM = dict(beta1=0.9, beta2=0.99, eps=1e-8, grad=False)
for _name in ("_fused_adam_", "_fused_adamw_"):
    SAMPLES[f"aten.{_name}.default"] = [
        s(_pair(r), _pair(r), _pair(r), _pair(pos), [], _STEPS, lr=0.01, weight_decay=0.0, amsgrad=False,
          maximize=False, **_ADAM),
        s(_pair(r), _pair(r), _pair(r), _pair(pos), _pair(pos), _STEPS, lr=0.01, weight_decay=0.1, amsgrad=True,
          maximize=True, grad_scale=torch.tensor(2.0), found_inf=torch.tensor(0.0), **_ADAM)]
    SAMPLES[f"aten.{_name}.tensor_lr"] = [
        s(_pair(r), _pair(r), _pair(r), _pair(pos), [], _STEPS, lr=torch.tensor(0.02), weight_decay=0.05,
          amsgrad=False, maximize=False, **_ADAM)]
SAMPLES["aten._fused_sgd_.default"] = [
    s(_pair(r), _pair(r), _pair(r), weight_decay=0.01, momentum=0.9, lr=0.1, dampening=0.1, nesterov=True,
      maximize=False, is_first_step=False, grad_scale=torch.tensor(4.0), grad=False),
    s(_pair(r), _pair(r), _pair(r), weight_decay=0.0, momentum=0.5, lr=0.1, dampening=0.0, nesterov=False,
      maximize=True, is_first_step=True, found_inf=torch.tensor(1.0), grad=False)]
SAMPLES["aten._fused_sgd_.tensor_lr"] = [
    s(_pair(r), _pair(r), [], weight_decay=0.0, momentum=0.0, lr=torch.tensor(0.05), dampening=0.0, nesterov=False,
      maximize=False, is_first_step=False, grad=False)]
for _overload in ("default", "tensor_lr"):
    SAMPLES[f"aten._fused_adagrad_.{_overload}"] = [
        s(_pair(r), _pair(r), _pair(pos), _STEPS, lr=0.1 if _overload == "default" else torch.tensor(0.1),
          lr_decay=0.01, weight_decay=0.1, eps=1e-10, maximize=False, grad_scale=torch.tensor(4.0), grad=False)]

def overload(name: str) -> torch._ops.OpOverload:
    """The OpOverload that `str(overload)` names ("aten.add.Tensor")."""
    namespace, packet, overload_name = name.split(".")
    return getattr(getattr(getattr(torch.ops, namespace), packet), overload_name)


ACCELERATOR_ONLY = {
    name: "tests/test_everyday_calls.py::test_recurrent_layers_match_cpu"
    for name in ("aten._thnn_fused_lstm_cell.default", "aten._thnn_fused_lstm_cell_backward_impl.default",
                 "aten._thnn_fused_gru_cell.default", "aten._thnn_fused_gru_cell_backward.default")
}
"""Mapped overloads PyTorch's CPU has no kernel for, so no sample can run them there: the named test compares the
layers that call them (nn.LSTM, nn.GRU: values and gradients) with the CPU's own path through those layers."""


def test_every_mapped_operator_has_samples() -> None:
    mapped = set(tiny_torch.mapped_operators()) - set(ACCELERATOR_ONLY)
    assert not mapped - set(SAMPLES), f"mapped operators without samples in SAMPLES: {sorted(mapped - set(SAMPLES))}"
    assert not set(SAMPLES) - mapped, f"samples for operators that are not mapped: {sorted(set(SAMPLES) - mapped)}"
    assert all(SAMPLES.values()), [name for name, samples in SAMPLES.items() if not samples]


CASES = [(name, position) for name in sorted(SAMPLES) for position in range(len(SAMPLES[name]))]


def _is_inplace(func: torch._ops.OpOverload) -> bool:
    return any(argument.alias_info is not None and argument.alias_info.is_write for argument in func._schema.arguments)


def _materialize(sample: Sample, device: str, differentiate: set[int]
                 ) -> tuple[tuple, dict, list[torch.Tensor], list[torch.Tensor]]:
    """The sample's arguments on `device` (fresh copies each call), the leaves that require grad and the bases of
    View arguments."""
    leaves: list[torch.Tensor] = []
    bases: list[torch.Tensor] = []

    def build(value: object, grad: bool) -> object:
        if isinstance(value, Host):
            return value.value.clone()
        if isinstance(value, Device):
            return torch.device(device)
        if isinstance(value, View):
            base = value.base.clone().to(device)
            bases.append(base)
            if grad and base.is_floating_point():
                base.requires_grad_()
                leaves.append(base)
            return value.make(base)
        if isinstance(value, torch.Tensor):
            copy = value.clone().to(device)
            if grad and copy.is_floating_point():
                copy.requires_grad_()
                leaves.append(copy)
            return copy
        if isinstance(value, (list, tuple)):
            return type(value)(build(part, grad) for part in value)
        return value
    args = tuple(build(value, position in differentiate) for position, value in enumerate(sample.args))
    kwargs = {key: build(value, False) for key, value in sample.kwargs.items()}
    return args, kwargs, leaves, bases


def _tensors(tree: object) -> list[torch.Tensor]:
    return [leaf for leaf in tree_flatten(tree)[0] if isinstance(leaf, torch.Tensor)]


def _same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    if isinstance(a, tiny_torch.TinyTensor) and isinstance(b, tiny_torch.TinyTensor):
        return a.tiny_storage is b.tiny_storage
    if a.device.type == "cpu" and b.device.type == "cpu":
        return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    return False


def _aliases(outputs: list[torch.Tensor], inputs: list[torch.Tensor]) -> list[tuple[int, bool]]:
    """For each output: the position of the input it is (or -1), and whether it shares an input's storage."""
    return [(next((position for position, value in enumerate(inputs) if value is output), -1),
             any(_same_storage(output, value) for value in inputs)) for output in outputs]


def _compare(result: object, expected: object, sample: Sample, what: str) -> None:
    got_leaves, want_leaves = tree_flatten(result)[0], tree_flatten(expected)[0]
    assert len(got_leaves) == len(want_leaves), f"{what}: {len(got_leaves)} results, PyTorch gives {len(want_leaves)}"
    for position, (got, want) in enumerate(zip(got_leaves, want_leaves, strict=True)):
        where = f"{what} {position}"
        if not isinstance(want, torch.Tensor):
            assert not isinstance(got, torch.Tensor), where
            if isinstance(want, float) and math.isnan(want):
                assert isinstance(got, float) and math.isnan(got), where
            else:
                assert got == want and type(got) is type(want), f"{where}: {got!r} != {want!r}"
            continue
        assert isinstance(got, torch.Tensor), where
        assert got.dtype == want.dtype, f"{where}: dtype {got.dtype}, PyTorch gives {want.dtype}"
        assert got.shape == want.shape, f"{where}: shape {tuple(got.shape)}, PyTorch gives {tuple(want.shape)}"
        if sample.values:
            torch.testing.assert_close(got.detach().cpu(), want.detach(), atol=sample.atol, rtol=sample.rtol,
                                       equal_nan=True, msg=lambda message, where=where: f"{where}: {message}")


def _run(func: torch._ops.OpOverload, sample: Sample, device: str, differentiate: set[int]
         ) -> tuple[object, tuple, dict, list[torch.Tensor], list[torch.Tensor]]:
    args, kwargs, leaves, bases = _materialize(sample, device, differentiate)
    return func(*args, **kwargs), args, kwargs, leaves, bases


def _output_weights(outputs: list[torch.Tensor]) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return [torch.randn(output.shape, generator=generator, dtype=output.dtype) for output in outputs]


@pytest.mark.parametrize("name,position", CASES, ids=[f"{name.removeprefix('aten.')}-{position}"
                                                       for name, position in CASES])
def test_operator_matches_cpu(name: str, position: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TINY_TORCH_FALLBACK", "0")  # forward and backward run on tinycore, or the case fails
    func, sample = overload(name), SAMPLES[name][position]
    differentiate: set[int] = set()
    if sample.grad and not _is_inplace(func):
        differentiate = set(range(len(sample.args))) if sample.grad is True else set(sample.grad)
    expected, cpu_args, cpu_kwargs, cpu_leaves, cpu_bases = _run(func, sample, "cpu", differentiate)
    result, tiny_args, tiny_kwargs, tiny_leaves, tiny_bases = _run(func, sample, "tiny", differentiate)
    out_device = sample.kwargs.get("device")
    tiny_inputs = _tensors((tiny_args, tiny_kwargs))
    for output in _tensors(result):
        if not any(output is value for value in tiny_inputs):  # an in-place result is where its input is
            assert output.device.type == ("cpu" if out_device == CPU else "tiny"), f"result on {output.device}"
    if sample.check is not None:
        sample.check(tree_map(lambda value: value.cpu() if isinstance(value, torch.Tensor) else value, result),
                     expected)
        return
    _compare(result, expected, sample, "result")
    # the results that alias inputs alias the same inputs, with PyTorch's strides and storage offsets
    cpu_outputs, tiny_outputs = _tensors(expected), _tensors(result)
    cpu_inputs = _tensors((cpu_args, cpu_kwargs))
    assert _aliases(tiny_outputs, tiny_inputs) == _aliases(cpu_outputs, cpu_inputs), "aliasing differs"
    for got, want in zip(tiny_outputs, cpu_outputs, strict=True):
        if _aliases([want], cpu_inputs)[0][1]:
            assert (got.stride(), got.storage_offset()) == (want.stride(), want.storage_offset())
    # what the operator wrote into its arguments (in-place operators; the others write nothing)
    _compare(tiny_inputs + tiny_bases, cpu_inputs + cpu_bases, sample, "argument after the call")
    if not cpu_leaves:
        return
    differentiable = [index for index, output in enumerate(cpu_outputs) if output.requires_grad]
    if not differentiable:
        return
    weights = _output_weights([cpu_outputs[index] for index in differentiable])
    expected_grads = torch.autograd.grad([cpu_outputs[index] for index in differentiable], cpu_leaves,
                                         weights, allow_unused=True)
    grads = torch.autograd.grad([tiny_outputs[index] for index in differentiable], tiny_leaves,
                                [weight.to(tiny_outputs[index].device) for weight, index in zip(weights, differentiable,
                                                                                                 strict=True)],
                                allow_unused=True)
    for leaf, (got, want) in enumerate(zip(grads, expected_grads, strict=True)):
        assert (got is None) == (want is None), f"gradient {leaf}: {got} where PyTorch gives {want}"
        if want is not None:
            assert got.dtype == want.dtype and got.shape == want.shape, f"gradient {leaf}"
            torch.testing.assert_close(got.cpu(), want, atol=max(sample.atol, 1e-4), rtol=max(sample.rtol, 1e-4),
                                       equal_nan=True, msg=lambda message, leaf=leaf: f"gradient {leaf}: {message}")


# ---- in-place forms, views and aliasing --------------------------------------------------------------------------
def _inplace_twin(name: str) -> torch._ops.OpOverload | None:
    """The in-place overload of a mapped functional one (aten.add.Tensor -> aten.add_.Tensor), if PyTorch has it."""
    namespace, packet, overload_name = name.split(".")
    twin = getattr(getattr(torch.ops, namespace), packet + "_", None)
    if twin is None or overload_name not in twin.overloads():
        return None
    return getattr(twin, overload_name)


def _strided_copy(value: torch.Tensor) -> View:
    """`value` as a view with stride 2 and storage offset 1 into a larger base (so in-place writes must land in
    the base between elements they must not touch)."""
    base = torch.full((2 * value.numel() + 1,), 7, dtype=value.dtype)
    base[1:-1:2] = value.reshape(-1)
    return View(base, lambda tensor: tensor[1:-1:2].view(value.shape))


INPLACE_CASES = [(name, position) for name, position in CASES
                 if _inplace_twin(name) is not None and isinstance(SAMPLES[name][position].args[0], torch.Tensor)
                 and SAMPLES[name][position].args[0].ndim > 0 and SAMPLES[name][position].check is None]


def _call(func: torch._ops.OpOverload, sample: Sample, device: str) -> tuple[object, list[torch.Tensor]]:
    args, kwargs, _, bases = _materialize(sample, device, set())
    try:
        return func(*args, **kwargs), [*_tensors((args, kwargs)), *bases]
    except Exception as error:  # noqa: BLE001  (compared with the other device's outcome)
        return error, []


@pytest.mark.parametrize("name,position", INPLACE_CASES, ids=[f"{name.removeprefix('aten.')}_-{position}"
                                                               for name, position in INPLACE_CASES])
def test_inplace_form_on_a_strided_view_matches_cpu(name: str, position: int, monkeypatch: pytest.MonkeyPatch
                                                    ) -> None:
    # the in-place twin of each mapped operator, writing into a strided view: the base changes where the view
    # lies and nowhere else; where PyTorch refuses the call (a result dtype the target cannot hold, a result
    # shape that is not the target's), the tiny device refuses it too rather than cast or broadcast silently
    monkeypatch.setenv("TINY_TORCH_FALLBACK", "0")
    func, sample = _inplace_twin(name), SAMPLES[name][position]
    assert func is not None
    strided = Sample((_strided_copy(sample.args[0]),) + sample.args[1:], sample.kwargs, False, sample.atol,
                     sample.rtol)
    expected, cpu_arguments = _call(func, strided, "cpu")
    result, tiny_arguments = _call(func, strided, "tiny")
    if isinstance(expected, Exception):
        assert isinstance(result, Exception), f"PyTorch raises {expected!r}; the tiny device returned a result"
        return
    assert not isinstance(result, Exception), f"{result!r}"
    assert result is tiny_arguments[0], "an in-place operator returns its first argument"
    _compare(tiny_arguments, cpu_arguments, strided, "argument after the call")


def _as_strided_overlapping(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.as_strided((3, 4), (2, 1), 1)  # rows overlap: element (0, 2) is element (1, 0)


VIEWS: list[tuple[str, Callable[[torch.Tensor], object]]] = [
    ("t", lambda x: x.t()), ("transpose", lambda x: x.transpose(0, 1)), ("permute", lambda x: x.permute(1, 0)),
    ("T", lambda x: x.T), ("mT", lambda x: x.reshape(2, 3, 4).mT), ("select", lambda x: x[2]),
    ("select_negative", lambda x: x[:, -1]), ("slice", lambda x: x[1:4]), ("slice_step", lambda x: x[::2, 1::3]),
    ("narrow", lambda x: x.narrow(1, 2, 3)), ("expand", lambda x: x[:1].expand(3, 6)),
    ("expand_new_dim", lambda x: x[1].expand(2, 6)), ("unsqueeze", lambda x: x.unsqueeze(1)),
    ("squeeze", lambda x: x[:1].squeeze(0)), ("view", lambda x: x.view(3, 8)), ("flatten", lambda x: x.flatten()),
    ("unflatten", lambda x: x.unflatten(1, (2, 3))), ("reshape_view", lambda x: x.reshape(2, 2, 6)),
    ("diagonal", lambda x: x.diagonal()), ("diagonal_offset", lambda x: x.diagonal(1)),
    ("unfold", lambda x: x.unfold(1, 3, 2)), ("movedim", lambda x: x.reshape(2, 3, 4).movedim(0, 2)),
    ("split", lambda x: x.split(2, 1)), ("chunk", lambda x: x.chunk(3, 0)), ("unbind", lambda x: x.unbind(1)),
    ("as_strided", lambda x: x.as_strided((3, 3), (5, 1), 2)), ("as_strided_overlapping", _as_strided_overlapping),
    ("indexing", lambda x: x[None, 1:, ..., 2]), ("view_of_view", lambda x: x.t()[1:4].unsqueeze(0)[:, ::2]),
    ("alias_of_transpose", lambda x: torch.ops.aten.alias.default(x.t())),
]


OVERLAPPING_VIEWS = {"as_strided_overlapping", "unfold"}


@pytest.mark.parametrize("name,make", VIEWS, ids=[name for name, _ in VIEWS])
def test_view_shares_storage_with_pytorch_strides(name: str, make: Callable[[torch.Tensor], object],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # a view has PyTorch's sizes, strides and storage offset and reads the base's current values; an in-place write
    # through it reaches the base (and every other view of it), or is refused where PyTorch refuses it
    monkeypatch.setenv("TINY_TORCH_FALLBACK", "0")
    base = torch.arange(24.0).reshape(4, 6)
    on_tiny = base.to("tiny")
    views, expected = _tensors(make(on_tiny)), _tensors(make(base))
    for view, want in zip(views, expected, strict=True):
        assert (view.shape, view.stride(), view.storage_offset()) == (want.shape, want.stride(),
                                                                      want.storage_offset())
        assert view.tiny_storage is on_tiny.tiny_storage
        torch.testing.assert_close(view.cpu(), want)
    if name in OVERLAPPING_VIEWS:
        return  # PyTorch leaves in-place results on views whose elements overlap undefined
    other = on_tiny.t()  # another view of the same storage, made before the write
    try:
        expected[0].mul_(-2).add_(0.5)
    except RuntimeError:  # PyTorch refuses writes through views whose elements overlap
        with pytest.raises(RuntimeError):
            views[0].mul_(-2).add_(0.5)
        return
    views[0].mul_(-2).add_(0.5)
    torch.testing.assert_close(on_tiny.cpu(), base)
    torch.testing.assert_close(other.cpu(), base.t())
    for view, want in zip(views, expected, strict=True):
        torch.testing.assert_close(view.cpu(), want)


def test_writes_through_views_across_devices_and_out_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TINY_TORCH_FALLBACK", "0")
    base, on_tiny = torch.zeros(4, 6), torch.zeros(4, 6, device="tiny")
    source = torch.randn(4, 2)
    # copy_ from a transposed CPU tensor into a transposed strided view, then from tiny into a CPU view
    on_tiny[:, ::3].t().copy_(source.t())
    base[:, ::3].t().copy_(source.t())
    torch.testing.assert_close(on_tiny.cpu(), base)
    host = torch.zeros(6, 4)
    host[1:5].copy_(on_tiny[:, 1:5].t())
    expected_host = torch.zeros(6, 4)
    expected_host[1:5].copy_(base[:, 1:5].t())
    torch.testing.assert_close(host, expected_host)
    # out= into a view of a larger tensor
    a, b = torch.randn(3, 2), torch.randn(3, 2)
    torch.add(a.to("tiny"), b.to("tiny"), alpha=2, out=on_tiny[1:, :4:2])
    torch.add(a, b, alpha=2, out=base[1:, :4:2])
    torch.testing.assert_close(on_tiny.cpu(), base)
    # setitem with an index tensor and with a boolean mask on a view
    on_tiny[1:][torch.tensor([0, 2]).to("tiny")] = 3.0
    base[1:][torch.tensor([0, 2])] = 3.0
    mask = base > 1
    on_tiny.t()[mask.t().to("tiny")] = -1.0
    base.t()[mask.t()] = -1.0
    torch.testing.assert_close(on_tiny.cpu(), base)
    # an in-place operator on a view of a leaf's computation, then backward through it
    leaf_cpu = torch.randn(4, 6, requires_grad=True)
    leaf_tiny = leaf_cpu.detach().to("tiny").requires_grad_()
    grads = []
    for leaf in (leaf_cpu, leaf_tiny):
        work = leaf * 1
        work[:, 1::2].mul_(3)
        work.t()[2].add_(work[0, 0])
        (work * torch.arange(24.0).reshape(4, 6).to(leaf.device)).sum().backward()
        grads.append(leaf.grad.cpu())
    torch.testing.assert_close(grads[1], grads[0])


# ---- the same samples in half precision --------------------------------------------------------------------------
HALF_PRECISION_DEVIATIONS = {
    "aten.native_layer_norm.default": "mean and rstd stay float32 for float16 and bfloat16 inputs, as PyTorch's meta "
                                      "kernel (which compiled graphs are traced with) and CUDA give them; the CPU "
                                      "kernel returns them in the input dtype",
}


def _in_dtype(value: object, dtype: torch.dtype) -> object:
    if isinstance(value, torch.Tensor) and value.dtype == torch.float32:
        return value.to(dtype)
    if isinstance(value, View) and value.base.dtype == torch.float32:
        return View(value.base.to(dtype), value.make)
    if isinstance(value, Host) and value.value.dtype == torch.float32:
        return Host(value.value.to(dtype))
    if isinstance(value, list):
        return [_in_dtype(part, dtype) for part in value]
    return dtype if value is torch.float32 else value


@pytest.mark.parametrize("dtype,tolerance", [(torch.float16, 2e-2), (torch.bfloat16, 8e-2)],
                         ids=["float16", "bfloat16"])
def test_samples_in_half_precision_match_cpu(dtype: torch.dtype, tolerance: float,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # every sample again with its float32 tensors in float16 / bfloat16 (values, dtypes and shapes; the samples
    # PyTorch's CPU kernels do not take in that dtype are left out)
    monkeypatch.setenv("TINY_TORCH_FALLBACK", "0")
    failures = []
    for name, position in CASES:
        sample = SAMPLES[name][position]
        if sample.check is not None or not sample.values or name in HALF_PRECISION_DEVIATIONS:
            continue
        converted = Sample(tuple(_in_dtype(value, dtype) for value in sample.args),
                           {key: _in_dtype(value, dtype) for key, value in sample.kwargs.items()}, False,
                           tolerance, tolerance)
        func = overload(name)
        try:
            expected = _run(func, converted, "cpu", set())[0]
        except (RuntimeError, NotImplementedError):
            continue
        try:
            _compare(_run(func, converted, "tiny", set())[0], expected, converted, "result")
        except Exception as error:  # noqa: BLE001  (every failing sample is listed)
            failures.append(f"{name}[{position}]: {error!r}"[:300])
    assert not failures, "\n".join(failures)
