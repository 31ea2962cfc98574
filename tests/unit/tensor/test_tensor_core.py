"""The Tensor object itself: laziness, realization and host transfer, properties, assign, autograd, public API."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

import tinycore
from tinycore import GlobalCounters, Tensor, dtypes
from tinycore.uop.ops import Ops


def test_operations_are_lazy_until_realized() -> None:
    result = Tensor([1.0, 2.0]) * 3 + 1
    assert result.uop.base.op is not Ops.BUFFER
    assert result.realize() is result
    assert result.uop.base.op is Ops.BUFFER
    assert result.tolist() == [4.0, 7.0]


def test_realize_several_tensors_together() -> None:
    base = Tensor([1.0, 2.0, 3.0])
    first, second = base + 1, base * 2
    first.realize(second)
    assert first.tolist() == [2.0, 3.0, 4.0] and second.tolist() == [2.0, 4.0, 6.0]


def test_host_transfer_forms() -> None:
    values = np.arange(6, dtype=np.int16).reshape(2, 3)
    tensor = Tensor(values)
    assert tensor.numpy().dtype == np.int16 and tensor.tolist() == values.tolist()
    assert tensor.data().tolist() == values.tolist() and tensor.data().shape == (2, 3)
    assert Tensor(2.5).item() == 2.5 and Tensor([[7]]).item() == 7
    assert Tensor(True).tolist() is True and Tensor(3).tolist() == 3
    assert Tensor.zeros(0, 2).tolist() == [] and Tensor.zeros(0, 2).numpy().shape == (0, 2)
    with pytest.raises(ValueError, match="one element"):
        Tensor([1, 2]).item()


def test_properties() -> None:
    tensor = Tensor.ones(2, 3, 4, dtype=dtypes.float16)
    assert tensor.shape == (2, 3, 4) and tensor.ndim == 3 and tensor.dtype == dtypes.float16
    assert tensor.numel() == 24 and tensor.element_size() == 2 and tensor.nbytes() == 48
    assert tensor.size() == (2, 3, 4) and tensor.size(-1) == 4 and len(tensor) == 2
    assert tensor.device == tinycore.Device.DEFAULT
    assert tensor.is_floating_point() and not Tensor([1]).is_floating_point()
    text = repr(tensor)
    assert "Tensor" in text and "(2, 3, 4)" in text and "float16" in text
    with pytest.raises(TypeError):
        len(Tensor(1.0))


def test_to_clone_contiguous_detach() -> None:
    tensor = Tensor([1.0, 2.0])
    assert tensor.to(tensor.device) is tensor
    assert tensor.to("cpu").device == "CPU"
    clone = tensor.clone()
    assert clone.tolist() == [1.0, 2.0] and clone.uop is not tensor.uop
    transposed = Tensor([[1, 2], [3, 4]]).T.contiguous()
    assert transposed.tolist() == [[1, 3], [2, 4]]
    assert tensor.detach().tolist() == [1.0, 2.0] and tensor.detach().requires_grad is None


def test_assign_writes_into_the_buffer() -> None:
    target = Tensor([1.0, 2.0, 3.0]).realize()
    view_before = target.uop.base
    target.assign(Tensor([4.0, 5.0, 6.0]))
    assert target.tolist() == [4.0, 5.0, 6.0]
    assert target.uop.base is view_before
    target.assign(0)
    assert target.tolist() == [0.0, 0.0, 0.0]
    target.assign([1, 2, 3])
    assert target.tolist() == [1.0, 2.0, 3.0] and target.dtype == dtypes.float32
    with pytest.raises(ValueError, match="assign"):
        target.assign(Tensor([1.0, 2.0]))


def test_global_counters_reset() -> None:
    GlobalCounters.kernel_count = 5
    GlobalCounters.reset()
    assert GlobalCounters.kernel_count == 0 and GlobalCounters.global_ops == 0


def test_import_is_light_and_lazy() -> None:
    code = ("import sys, tinycore; assert 'numpy' not in sys.modules, 'numpy imported'; "
            "assert 'tinycore.nn' not in sys.modules; from tinycore import Tensor, dtypes, Context, getenv, UOp, "
            "GlobalCounters; print('ok')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "ok", result.stderr
    assert tinycore.Variable is not None and tinycore.nn is not None
    with pytest.raises(AttributeError):
        tinycore.does_not_exist  # noqa: B018


# ---- autograd ----

def test_backward_matches_torch() -> None:
    x_values, w_values = np.random.default_rng(5).normal(size=(2, 3, 4)).astype(np.float32), \
        np.random.default_rng(6).normal(size=(5, 3, 2, 2)).astype(np.float32)
    x, w = Tensor(x_values, requires_grad=True), Tensor(w_values, requires_grad=True)
    loss = x.reshape(1, 2, 3, 4).conv2d(w[:, :2], padding=1).relu().max_pool2d().sum() + (x.exp() * 0.1).mean()
    loss.backward()
    tx = torch.tensor(x_values, requires_grad=True)
    tw = torch.tensor(w_values, requires_grad=True)
    reference = torch.conv2d(tx.reshape(1, 2, 3, 4), tw[:, :2], padding=1).relu()
    reference = torch.nn.functional.max_pool2d(reference, 2).sum() + (tx.exp() * 0.1).mean()
    reference.backward()
    np.testing.assert_allclose(loss.item(), reference.item(), rtol=1e-5)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_backward_on_leaf_tensors_and_accumulation() -> None:
    weights = Tensor([[1.0, -2.0], [0.5, 3.0]], requires_grad=True)
    inputs = Tensor([[1.0, 2.0]])
    (inputs @ weights).sum().backward()
    np.testing.assert_allclose(weights.grad.numpy(), [[1.0, 1.0], [2.0, 2.0]])
    (inputs @ weights).sum().backward()
    np.testing.assert_allclose(weights.grad.numpy(), [[2.0, 2.0], [4.0, 4.0]])


def test_backward_through_softmax_crossentropy() -> None:
    logits_values = np.random.default_rng(7).normal(size=(4, 5)).astype(np.float32)
    labels = np.array([1, 0, 4, 2])
    logits = Tensor(logits_values, requires_grad=True)
    logits.sparse_categorical_crossentropy(Tensor(labels)).backward()
    reference = torch.tensor(logits_values, requires_grad=True)
    torch.nn.functional.cross_entropy(reference, torch.tensor(labels)).backward()
    np.testing.assert_allclose(logits.grad.numpy(), reference.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_gradient_returns_without_touching_grad() -> None:
    x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
    (gradient,) = (x * x).sum().gradient(x)
    assert gradient.tolist() == [2.0, 4.0, 6.0] and x.grad is None


def test_backward_errors() -> None:
    x = Tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(ValueError, match="scalar"):
        (x * 2).backward()
    with pytest.raises(RuntimeError, match="requires_grad"):
        Tensor([1.0]).sum().backward()
    (x * 2).backward(Tensor([1.0, 1.0]))
    assert x.grad.tolist() == [2.0, 2.0]


def test_requires_grad_propagates() -> None:
    x = Tensor([1.0], requires_grad=True)
    assert (x + 1).requires_grad is True and Tensor([1.0]).requires_grad is None
    assert (Tensor([1.0]) * x).requires_grad is True
    with pytest.raises(TypeError):
        Tensor([1.0], requires_grad="yes")  # type: ignore[arg-type]


def test_lazy_leaves_with_equal_values_get_separate_gradients() -> None:
    first, second = Tensor.zeros(3, requires_grad=True), Tensor.zeros(3, requires_grad=True)
    ((first * 2 + second * 5).sum()).backward()
    assert first.grad.tolist() == [2.0, 2.0, 2.0] and second.grad.tolist() == [5.0, 5.0, 5.0]
    ones = Tensor.ones(2, 2, requires_grad=True)
    (ones * 3).sum().backward()
    assert ones.grad.tolist() == [[3.0, 3.0], [3.0, 3.0]]


def test_separately_realized_equal_tensors_do_not_share_memory() -> None:
    first, second = Tensor.zeros(3).contiguous().realize(), Tensor.zeros(3).contiguous().realize()
    first.assign(Tensor([1.0, 2.0, 3.0])).realize()
    assert first.tolist() == [1.0, 2.0, 3.0] and second.tolist() == [0.0, 0.0, 0.0]
    copy = first.clone().realize()
    first.assign(Tensor([4.0, 5.0, 6.0])).realize()
    assert copy.tolist() == [1.0, 2.0, 3.0]


def test_backward_after_realizing_the_loss() -> None:
    weights = Tensor([1.0, 2.0, 3.0], requires_grad=True)
    loss = (weights * weights).sum()
    assert loss.item() == 14.0
    loss.backward()
    assert weights.grad.tolist() == [2.0, 4.0, 6.0]


def test_symbolic_sizes_from_bound_variables() -> None:
    from tinycore import Variable
    size = Variable("n", 1, 10).bind(4)
    assert Tensor.empty(size, 3).shape[1] == 3
    ones = Tensor.ones(size, 3).contiguous()
    assert ones.shape[0] is size and ones.reshape(3, size).shape[1] is size
    assert (ones + 1).sum().item() == 24.0
