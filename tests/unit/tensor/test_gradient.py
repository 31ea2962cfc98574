"""Gradients of the Tensor ops against torch autograd, on several shapes and broadcasting cases.

Each case builds the same function in tinycore and torch from the same random inputs, back-propagates the same
random upstream gradient (not all ones, so that permutations and reductions are checked element by element) and
compares the forward value and every input's gradient.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from tinycore.dtype import dtypes
from tinycore.gradient import compute_gradient
from tinycore.tensor import Tensor
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp


def _inputs(shapes: list[tuple[int, ...]], low: float, high: float, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(low, high, size=shape).astype(np.float32) for shape in shapes]


def check_gradient(ours: Callable[..., Tensor], theirs: Callable[..., torch.Tensor], shapes: list[tuple[int, ...]],
                   low: float = -2.0, high: float = 2.0, atol: float = 1e-5, rtol: float = 1e-4, seed: int = 0,
                   arrays: list[np.ndarray] | None = None) -> None:
    """Compare value and gradients of `ours` (tinycore) and `theirs` (torch) on the same inputs."""
    arrays = arrays if arrays is not None else _inputs(shapes, low, high, seed)
    our_inputs = [Tensor(array, requires_grad=True) for array in arrays]
    torch_inputs = [torch.tensor(array, requires_grad=True) for array in arrays]
    our_out, torch_out = ours(*our_inputs), theirs(*torch_inputs)
    upstream = np.random.default_rng(seed + 1).standard_normal(tuple(torch_out.shape)).astype(np.float32)
    torch_out.backward(torch.tensor(upstream))
    our_out.backward(Tensor(upstream))
    np.testing.assert_allclose(our_out.numpy(), torch_out.detach().numpy(), atol=atol, rtol=rtol)
    for index, (ours_in, theirs_in) in enumerate(zip(our_inputs, torch_inputs, strict=True)):
        assert theirs_in.grad is not None
        assert ours_in.grad is not None, f"input {index} got no gradient"
        np.testing.assert_allclose(ours_in.grad.numpy(), theirs_in.grad.numpy(), atol=atol, rtol=rtol,
                                   err_msg=f"gradient of input {index}")


UNARY: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any], float, float]] = {
    "neg": (lambda x: -x, lambda x: -x, -2, 2),
    "exp": (lambda x: x.exp(), lambda x: x.exp(), -2, 2),
    "exp2": (lambda x: x.exp2(), lambda x: torch.exp2(x), -2, 2),
    "log": (lambda x: x.log(), lambda x: x.log(), 0.1, 3),
    "log2": (lambda x: x.log2(), lambda x: x.log2(), 0.1, 3),
    "sqrt": (lambda x: x.sqrt(), lambda x: x.sqrt(), 0.1, 3),
    "rsqrt": (lambda x: x.rsqrt(), lambda x: x.rsqrt(), 0.2, 3),
    "reciprocal": (lambda x: x.reciprocal(), lambda x: x.reciprocal(), 0.3, 3),
    "sin": (lambda x: x.sin(), lambda x: x.sin(), -3, 3),
    "cos": (lambda x: x.cos(), lambda x: x.cos(), -3, 3),
    "tan": (lambda x: x.tan(), lambda x: x.tan(), -1, 1),
    "relu": (lambda x: x.relu(), lambda x: x.relu(), -2, 2),
    "sigmoid": (lambda x: x.sigmoid(), lambda x: x.sigmoid(), -3, 3),
    "tanh": (lambda x: x.tanh(), lambda x: x.tanh(), -2, 2),
    "abs": (lambda x: x.abs(), lambda x: x.abs(), -2, 2),
    "square": (lambda x: x.square(), lambda x: x.square(), -2, 2),
    "softplus": (lambda x: x.softplus(), lambda x: torch.nn.functional.softplus(x), -3, 3),
    "silu": (lambda x: x.silu(), lambda x: torch.nn.functional.silu(x), -3, 3),
    "elu": (lambda x: x.elu(), lambda x: torch.nn.functional.elu(x), -2, 2),
    "leaky_relu": (lambda x: x.leaky_relu(0.1), lambda x: torch.nn.functional.leaky_relu(x, 0.1), -2, 2),
    "gelu": (lambda x: x.gelu(), lambda x: torch.nn.functional.gelu(x, approximate="tanh"), -3, 3),
    "clip": (lambda x: x.clip(-0.5, 0.7), lambda x: x.clip(-0.5, 0.7), -2, 2),
    "pow_const": (lambda x: x ** 3, lambda x: x ** 3, -2, 2),
    "pow_fraction": (lambda x: x ** 0.5, lambda x: x ** 0.5, 0.2, 3),
    "rpow": (lambda x: 2.0 ** x, lambda x: 2.0 ** x, -2, 2),
    "scalar_ops": (lambda x: (x * 3 - 1) / 2 + 0.5, lambda x: (x * 3 - 1) / 2 + 0.5, -2, 2),
    "trunc": (lambda x: x.trunc() + x, lambda x: x.trunc() + x, -2, 2),
    "erf": (lambda x: x.erf(), lambda x: torch.erf(x), -2, 2),
}


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("shape", [(7,), (3, 5)])
def test_unary(name: str, shape: tuple[int, ...]) -> None:
    ours, theirs, low, high = UNARY[name]
    check_gradient(ours, theirs, [shape], low, high, atol=1e-4)


BINARY: dict[str, tuple[Callable[[Any, Any], Any], Callable[[Any, Any], Any], float, float]] = {
    "add": (lambda a, b: a + b, lambda a, b: a + b, -2, 2),
    "sub": (lambda a, b: a - b, lambda a, b: a - b, -2, 2),
    "mul": (lambda a, b: a * b, lambda a, b: a * b, -2, 2),
    "div": (lambda a, b: a / b, lambda a, b: a / b, 0.5, 2),
    "pow": (lambda a, b: a ** b, lambda a, b: a ** b, 0.5, 2),
    "maximum": (lambda a, b: a.maximum(b), lambda a, b: torch.maximum(a, b), -2, 2),
    "minimum": (lambda a, b: a.minimum(b), lambda a, b: torch.minimum(a, b), -2, 2),
    "where": (lambda a, b: (a > b).where(a * 2, b * 3), lambda a, b: torch.where(a > b, a * 2, b * 3), -2, 2),
    "lerp": (lambda a, b: a.lerp(b, 0.3), lambda a, b: torch.lerp(a, b, 0.3), -2, 2),
}

BROADCAST_SHAPES = [((4, 3), (4, 3)), ((4, 3), (3,)), ((4, 1), (1, 3)), ((2, 1, 3), (4, 1)), ((5,), ())]


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("shapes", BROADCAST_SHAPES, ids=str)
def test_binary_broadcasting(name: str, shapes: tuple[tuple[int, ...], tuple[int, ...]]) -> None:
    ours, theirs, low, high = BINARY[name]
    check_gradient(ours, theirs, list(shapes), low, high, atol=1e-4)


REDUCE: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {
    "sum_all": (lambda x: x.sum(), lambda x: x.sum()),
    "sum_axis": (lambda x: x.sum(axis=1), lambda x: x.sum(dim=1)),
    "sum_keepdim": (lambda x: x.sum(axis=(0, 2), keepdim=True), lambda x: x.sum(dim=(0, 2), keepdim=True)),
    "mean": (lambda x: x.mean(axis=-1), lambda x: x.mean(dim=-1)),
    "max": (lambda x: x.max(axis=1), lambda x: x.amax(dim=1)),
    "min": (lambda x: x.min(axis=0), lambda x: x.amin(dim=0)),
    "prod": (lambda x: x.prod(axis=2), lambda x: x.prod(dim=2)),
    "var": (lambda x: x.var(axis=1), lambda x: x.var(dim=1)),
    "std": (lambda x: x.std(axis=2), lambda x: x.std(dim=2)),
    "softmax": (lambda x: x.softmax(axis=-1), lambda x: x.softmax(dim=-1)),
    "log_softmax": (lambda x: x.log_softmax(axis=1), lambda x: x.log_softmax(dim=1)),
    "logsumexp": (lambda x: x.logsumexp(axis=2), lambda x: x.logsumexp(dim=2)),
    "cumsum": (lambda x: x.cumsum(axis=1), lambda x: x.cumsum(dim=1)),
}


@pytest.mark.parametrize("name", sorted(REDUCE))
def test_reduce(name: str) -> None:
    ours, theirs = REDUCE[name]
    check_gradient(ours, theirs, [(2, 3, 4)], 0.5, 2.0, atol=1e-4)


MOVEMENT: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {
    "reshape": (lambda x: x.reshape(4, 6) * 2, lambda x: x.reshape(4, 6) * 2),
    "permute": (lambda x: x.permute(2, 0, 1), lambda x: x.permute(2, 0, 1)),
    "transpose": (lambda x: x.transpose(0, 2), lambda x: x.transpose(0, 2)),
    "expand": (lambda x: x[:, :1].expand(2, 5, 4), lambda x: x[:, :1].expand(2, 5, 4)),
    "pad": (lambda x: x.pad(((0, 0), (1, 2), (2, 0))), lambda x: torch.nn.functional.pad(x, (2, 0, 1, 2))),
    "shrink": (lambda x: x.shrink(((0, 2), (1, 3), (0, 3))), lambda x: x[0:2, 1:3, 0:3]),
    "flip": (lambda x: x.flip(1), lambda x: x.flip(1)),
    "slice_step": (lambda x: x[:, ::2, 1:], lambda x: x[:, ::2, 1:]),
    "index_int": (lambda x: x[1, :, 2], lambda x: x[1, :, 2]),
    "cat": (lambda x: x.cat(x * 2, dim=1), lambda x: torch.cat([x, x * 2], dim=1)),
    "stack": (lambda x: x.stack(x.exp(), dim=0), lambda x: torch.stack([x, x.exp()], dim=0)),
    "repeat": (lambda x: x.repeat(2, 1, 3), lambda x: x.repeat(2, 1, 3)),
    "chunk": (lambda x: x.chunk(2, dim=2)[1] * 3, lambda x: x.chunk(2, dim=2)[1] * 3),
    "flatten": (lambda x: x.flatten(1), lambda x: x.flatten(1)),
    "squeeze_unsqueeze": (lambda x: x.unsqueeze(1).squeeze(1), lambda x: x.unsqueeze(1).squeeze(1)),
    "roll": (lambda x: x.roll(1, 2), lambda x: x.roll(1, 2)),
    "contiguous": (lambda x: x.permute(1, 0, 2).contiguous(), lambda x: x.permute(1, 0, 2).contiguous()),
    "contiguous_backward": (lambda x: x.contiguous_backward() * 2, lambda x: x * 2),
}


@pytest.mark.parametrize("name", sorted(MOVEMENT))
def test_movement(name: str) -> None:
    ours, theirs = MOVEMENT[name]
    check_gradient(ours, theirs, [(2, 3, 4)])


def test_matmul_shapes() -> None:
    check_gradient(lambda a, b: a @ b, lambda a, b: a @ b, [(3, 4), (4, 5)], atol=1e-4)
    check_gradient(lambda a, b: a @ b, lambda a, b: a @ b, [(2, 3, 4), (4, 2)], atol=1e-4)
    check_gradient(lambda a, b: a @ b, lambda a, b: a @ b, [(4,), (4, 3)], atol=1e-4)
    check_gradient(lambda a, b: a.dot(b), lambda a, b: a @ b, [(2, 1, 3, 4), (5, 4, 2)], atol=1e-4)


def test_conv2d() -> None:
    check_gradient(lambda x, w, b: x.conv2d(w, b, stride=2, padding=1),
                   lambda x, w, b: torch.nn.functional.conv2d(x, w, b, stride=2, padding=1),
                   [(2, 3, 7, 6), (4, 3, 3, 3), (4,)], atol=1e-4)
    check_gradient(lambda x, w: x.conv2d(w, groups=2, dilation=2),
                   lambda x, w: torch.nn.functional.conv2d(x, w, groups=2, dilation=2),
                   [(1, 4, 7, 7), (6, 2, 2, 2)], atol=1e-4)


def test_conv_transpose2d() -> None:
    check_gradient(lambda x, w: x.conv_transpose2d(w, stride=2, padding=1),
                   lambda x, w: torch.nn.functional.conv_transpose2d(x, w, stride=2, padding=1),
                   [(2, 3, 4, 4), (3, 2, 3, 3)], atol=1e-4)


def test_pooling() -> None:
    check_gradient(lambda x: x.max_pool2d((2, 2)), lambda x: torch.nn.functional.max_pool2d(x, (2, 2)),
                   [(2, 3, 6, 6)])
    check_gradient(lambda x: x.avg_pool2d((3, 3), stride=2), lambda x: torch.nn.functional.avg_pool2d(x, 3, 2),
                   [(2, 3, 7, 7)])


def test_gather_and_losses() -> None:
    index = np.array([[0, 2, 1], [1, 1, 0]])
    check_gradient(lambda x: x.gather(1, Tensor(index)), lambda x: x.gather(1, torch.tensor(index)), [(2, 3)])
    labels = np.array([1, 0, 3])
    check_gradient(lambda x: x.sparse_categorical_crossentropy(Tensor(labels)),
                   lambda x: torch.nn.functional.cross_entropy(x, torch.tensor(labels)), [(3, 4)])
    check_gradient(lambda x: x.layernorm(), lambda x: torch.nn.functional.layer_norm(x, (5,)), [(3, 5)], atol=1e-4)


def test_ties_split_evenly_like_torch() -> None:
    """maximum splits a tie's gradient in halves; max over an axis splits it among all the maxima (torch.amax)."""
    check_gradient(lambda a, b: a.maximum(b), lambda a, b: torch.maximum(a, b), [(3,), (3,)],
                   arrays=[np.array([1.0, 2.0, 3.0], np.float32), np.array([1.0, 3.0, 2.0], np.float32)])
    check_gradient(lambda x: x.max(axis=1), lambda x: x.amax(dim=1), [(2, 3)],
                   arrays=[np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]], np.float32)])


def test_prod_with_zeros_matches_torch() -> None:
    """The product's gradient stays finite with one zero (the others' product) or several zeros (zero)."""
    values = np.array([[0.0, 2.0, 3.0], [0.0, 0.0, 5.0], [1.5, 2.0, -1.0]], np.float32)
    check_gradient(lambda x: x.prod(axis=1), lambda x: x.prod(dim=1), [(3, 3)], arrays=[values])


def test_relu_at_zero_has_zero_gradient() -> None:
    check_gradient(lambda x: x.relu(), lambda x: x.relu(), [(3,)], arrays=[np.array([0.0, 1.0, -1.0], np.float32)])


def test_gradient_accumulates_over_uses() -> None:
    check_gradient(lambda x: x * x + x.exp() * x, lambda x: x * x + x.exp() * x, [(4,)])


def test_detach_stops_gradient() -> None:
    x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
    (x.detach() * x).sum().backward()
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), [1.0, 2.0, 3.0])


def test_no_gradient_into_integer_tensors() -> None:
    integers = Tensor([1, 2, 3], requires_grad=True)
    floats = Tensor([0.5, 1.5, 2.5], requires_grad=True)
    (integers * floats).sum().backward()
    assert integers.grad is None
    assert floats.grad is not None
    np.testing.assert_allclose(floats.grad.numpy(), [1.0, 2.0, 3.0])


def test_cast_gradient_comes_back_in_source_dtype() -> None:
    x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
    (x.cast(dtypes.float16) * 3).cast(dtypes.float32).sum().backward()
    assert x.grad is not None and x.grad.dtype == dtypes.float32
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 3.0, 3.0])


def test_gradient_method_leaves_grad_untouched() -> None:
    x = Tensor([1.0, 2.0], requires_grad=True)
    (grad,) = (x * x).sum().gradient(x)
    np.testing.assert_allclose(grad.numpy(), [2.0, 4.0])
    assert x.grad is None


# ---- compute_gradient on hand-built tensor-level graphs ----

def test_compute_gradient_contract_shapes_and_dtypes() -> None:
    """Every gradient has its target's shape and dtype; detached and integer targets are absent."""
    x = UOp.const_on(dtypes.float32, 2.0, "CPU", (3, 1)).contiguous()
    y = UOp.const_on(dtypes.float32, 5.0, "CPU", (4,)).contiguous()
    integer = UOp.const_on(dtypes.int32, 1, "CPU", (3, 4)).contiguous()
    product = x.expand((3, 4)) * y.reshape((1, 4)).expand((3, 4)) + integer.cast(dtypes.float32)
    root = product.r(Ops.ADD, (0, 1))
    grads = compute_gradient(root, UOp.const_on(dtypes.float32, 1.0, "CPU", root.shape), {x, y, integer})
    assert set(grads) == {x, y}
    assert grads[x].shape == (3, 1) and grads[x].dtype == dtypes.float32
    assert grads[y].shape == (4,) and grads[y].dtype == dtypes.float32
    detached = compute_gradient(x.detach().r(Ops.ADD, (0,)), UOp.const_on(dtypes.float32, 1.0, "CPU", (1, 1)), {x})
    assert detached == {}


def test_a_composite_gradient_replaces_the_graphs_own() -> None:
    # y = x * w (elementwise) given the rule dy/dx = 3 * g (a deliberately different value, so the rule is seen)
    # and, with `plain`, the graph's own gradient for w: x.grad == 3 * g, w.grad == x * g
    from tinycore.gradient import with_gradient
    x_data, w_data, g_data = _inputs([(4, 5), (4, 5), (4, 5)], -1.0, 1.0, seed=3)
    x, w = Tensor(x_data, requires_grad=True), Tensor(w_data, requires_grad=True)
    value = x.uop.alu(Ops.MUL, w.uop)

    def rule(node: UOp, gradient: UOp) -> dict[UOp, UOp]:
        own = compute_gradient(node, gradient, {w.uop}, plain=frozenset({node}))
        three = UOp.const(gradient.dtype, 3.0).reshape((1, 1)).expand(gradient.shape)
        return {x.uop: gradient.alu(Ops.MUL, three), **own}

    y = Tensor._wrap(with_gradient(value, rule), True)
    (y * Tensor(g_data)).sum().backward()
    assert x.grad is not None and w.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), 3 * g_data, rtol=1e-6)
    np.testing.assert_allclose(w.grad.numpy(), x_data * g_data, rtol=1e-6)
    np.testing.assert_allclose(y.numpy(), x_data * w_data, rtol=1e-6)
