"""nn layers against torch's modules with copied weights: forward values, input and weight gradients, state names."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from tinycore import nn
from tinycore.dtype import dtypes
from tinycore.helpers import Context
from tinycore.nn.state import get_state_dict
from tinycore.tensor import Tensor


def copy_weights(ours: Any, theirs: torch.nn.Module) -> None:
    """Copy every tensor of our layer into the torch module's tensor of the same name."""
    their_state = theirs.state_dict()
    our_state = get_state_dict(ours)
    assert set(our_state) == set(their_state), f"state names differ: {sorted(our_state)} vs {sorted(their_state)}"
    with torch.no_grad():
        for name, tensor in our_state.items():
            assert tuple(tensor.shape) == tuple(their_state[name].shape), name
            their_state[name].copy_(torch.from_numpy(tensor.numpy()))


def compare_layer(ours: Any, theirs: torch.nn.Module, input_shape: tuple[int, ...], atol: float = 1e-5,
                  seed: int = 0, forward: Callable[[Any, Any], Any] | None = None, copy: bool = True) -> None:
    """Same input and upstream gradient through both layers; compare output, input gradient, weight gradients."""
    if copy:
        copy_weights(ours, theirs)
    rng = np.random.default_rng(seed)
    data = (rng.standard_normal(input_shape) * (seed + 1) + seed).astype(np.float32)
    our_params = {name: tensor for name, tensor in get_state_dict(ours).items() if tensor.requires_grad is not False}
    for tensor in our_params.values():
        if not tensor.requires_grad:
            tensor.requires_grad = True
    our_input = Tensor(data, requires_grad=True)
    their_input = torch.tensor(data, requires_grad=True)
    run = forward if forward is not None else (lambda layer, x: layer(x))
    our_out, their_out = run(ours, our_input), run(theirs, their_input)
    upstream = rng.standard_normal(tuple(their_out.shape)).astype(np.float32)
    their_out.backward(torch.tensor(upstream))
    our_out.backward(Tensor(upstream))
    np.testing.assert_allclose(our_out.numpy(), their_out.detach().numpy(), atol=atol, rtol=1e-4)
    assert our_input.grad is not None and their_input.grad is not None
    np.testing.assert_allclose(our_input.grad.numpy(), their_input.grad.numpy(), atol=atol * 10, rtol=1e-4)
    their_params = dict(theirs.named_parameters())
    for name, tensor in our_params.items():
        if name not in their_params:
            continue
        their_grad = their_params[name].grad
        assert their_grad is not None and tensor.grad is not None, name
        np.testing.assert_allclose(tensor.grad.numpy(), their_grad.numpy(), atol=atol * 10, rtol=1e-4, err_msg=name)


def test_linear() -> None:
    compare_layer(nn.Linear(5, 3), torch.nn.Linear(5, 3), (4, 5))
    compare_layer(nn.Linear(5, 3, bias=False), torch.nn.Linear(5, 3, bias=False), (2, 4, 5))


@pytest.mark.parametrize("kwargs", [{}, {"stride": 2, "padding": 1}, {"groups": 2, "dilation": 2},
                                    {"padding": "same"}, {"bias": False, "padding": (1, 0)}], ids=str)
def test_conv2d(kwargs: dict[str, Any]) -> None:
    compare_layer(nn.Conv2d(4, 6, 3, **kwargs), torch.nn.Conv2d(4, 6, 3, **kwargs), (2, 4, 7, 8), atol=1e-4)


def test_conv1d() -> None:
    compare_layer(nn.Conv1d(3, 5, 3, stride=2, padding=1), torch.nn.Conv1d(3, 5, 3, stride=2, padding=1),
                  (2, 3, 9), atol=1e-4)


def test_conv_transpose() -> None:
    compare_layer(nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1),
                  torch.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1), (2, 4, 5, 5), atol=1e-4)
    compare_layer(nn.ConvTranspose1d(3, 2, 4, stride=2), torch.nn.ConvTranspose1d(3, 2, 4, stride=2), (2, 3, 6),
                  atol=1e-4)


def test_batchnorm_training_and_eval() -> None:
    ours, theirs = nn.BatchNorm2d(3), torch.nn.BatchNorm2d(3)
    copy_weights(ours, theirs)
    rng = np.random.default_rng(1)
    for step in range(3):
        with Context(TRAINING=1):
            compare_layer(ours, theirs.train(), (4, 3, 5, 5), seed=step, atol=1e-4, copy=step == 0)
    # running statistics after the three training steps
    np.testing.assert_allclose(ours.running_mean.numpy(), theirs.running_mean.numpy(), atol=1e-5, rtol=1e-4)
    np.testing.assert_allclose(ours.running_var.numpy(), theirs.running_var.numpy(), atol=1e-5, rtol=1e-4)
    assert ours.num_batches_tracked.numpy().item() == theirs.num_batches_tracked.item()
    # eval mode normalizes with the running statistics
    data = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    expected = theirs.eval()(torch.tensor(data)).detach().numpy()
    np.testing.assert_allclose(ours(Tensor(data)).numpy(), expected, atol=1e-5, rtol=1e-4)


def test_batchnorm_without_running_stats_uses_batch_stats() -> None:
    ours = nn.BatchNorm(3, track_running_stats=False)
    theirs = torch.nn.BatchNorm1d(3, track_running_stats=False).eval()
    # as in tinygrad, the layer keeps num_batches_tracked even without running statistics; torch has none
    assert set(get_state_dict(ours)) == {"weight", "bias", "num_batches_tracked"}
    assert ours.weight is not None and ours.bias is not None
    with torch.no_grad():
        theirs.weight.copy_(torch.from_numpy(ours.weight.numpy()))
        theirs.bias.copy_(torch.from_numpy(ours.bias.numpy()))
    data = np.random.default_rng(2).standard_normal((6, 3)).astype(np.float32)
    np.testing.assert_allclose(ours(Tensor(data)).numpy(), theirs(torch.tensor(data)).detach().numpy(),
                               atol=1e-5, rtol=1e-4)


def test_layernorm_variants() -> None:
    compare_layer(nn.LayerNorm(6), torch.nn.LayerNorm(6), (3, 4, 6), atol=1e-4)
    compare_layer(nn.LayerNorm((4, 6)), torch.nn.LayerNorm((4, 6)), (3, 4, 6), atol=1e-4)
    compare_layer(nn.LayerNorm(6, elementwise_affine=False), torch.nn.LayerNorm(6, elementwise_affine=False),
                  (3, 6), atol=1e-4)

    class TorchLayerNorm2d(torch.nn.LayerNorm):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
    compare_layer(nn.LayerNorm2d(5), TorchLayerNorm2d(5), (2, 5, 3, 4), atol=1e-4)


def test_group_instance_rms_norm() -> None:
    compare_layer(nn.GroupNorm(2, 6), torch.nn.GroupNorm(2, 6), (3, 6, 4, 4), atol=1e-4)
    compare_layer(nn.InstanceNorm(4), torch.nn.InstanceNorm2d(4, affine=True), (2, 4, 5, 5), atol=1e-4)
    compare_layer(nn.RMSNorm(8), torch.nn.RMSNorm(8, eps=1e-6), (3, 8), atol=1e-4)


def test_embedding() -> None:
    ours, theirs = nn.Embedding(10, 4), torch.nn.Embedding(10, 4)
    copy_weights(ours, theirs)
    indices = np.array([[1, 3, 3], [9, 0, 1]], dtype=np.int32)
    our_out, their_out = ours(Tensor(indices)), theirs(torch.tensor(indices, dtype=torch.long))
    np.testing.assert_allclose(our_out.numpy(), their_out.detach().numpy(), atol=1e-6)
    upstream = np.random.default_rng(3).standard_normal((2, 3, 4)).astype(np.float32)
    their_out.backward(torch.tensor(upstream))
    ours.weight.requires_grad = True
    our_out = ours(Tensor(indices))
    our_out.backward(Tensor(upstream))
    assert ours.weight.grad is not None and theirs.weight.grad is not None
    np.testing.assert_allclose(ours.weight.grad.numpy(), theirs.weight.grad.numpy(), atol=1e-5)
    with pytest.raises(TypeError, match="integers"):
        ours(Tensor([1.0, 2.0]))


def test_lstm_cell() -> None:
    ours, theirs = nn.LSTMCell(3, 4), torch.nn.LSTMCell(3, 4)
    compare_layer(ours, theirs, (2, 3), atol=1e-5, forward=lambda layer, x: layer(x)[0])
    rng = np.random.default_rng(4)
    data, hidden, cell = (rng.standard_normal(shape).astype(np.float32) for shape in ((2, 3), (2, 4), (2, 4)))
    our_h, our_c = ours(Tensor(data), (Tensor(hidden), Tensor(cell)))
    their_h, their_c = theirs(torch.tensor(data), (torch.tensor(hidden), torch.tensor(cell)))
    np.testing.assert_allclose(our_h.numpy(), their_h.detach().numpy(), atol=1e-5)
    np.testing.assert_allclose(our_c.numpy(), their_c.detach().numpy(), atol=1e-5)


def test_initialization_bounds_and_state_names() -> None:
    """tinygrad's schemes: uniform +-1/sqrt(fan) weights; norm layers start at ones and zeros; buffers untrained."""
    linear = nn.Linear(100, 50)
    weight = linear.weight.numpy()
    assert np.abs(weight).max() <= 0.1 and np.abs(weight).max() > 0.09 and abs(weight.mean()) < 0.01
    conv = nn.Conv2d(4, 6, 3, groups=2)
    assert conv.weight.shape == (6, 2, 3, 3) and np.abs(conv.weight.numpy()).max() <= 1 / 6
    transposed = nn.ConvTranspose2d(4, 6, 3)
    assert transposed.weight.shape == (4, 6, 3, 3) and np.abs(transposed.weight.numpy()).max() <= 1 / 6
    embedding = nn.Embedding(100, 50)
    assert np.abs(embedding.weight.numpy()).max() <= np.sqrt(6 / 150)
    lstm = nn.LSTMCell(10, 20)
    assert np.abs(lstm.weight_ih.numpy()).max() <= 1 / np.sqrt(20)
    assert lstm.bias_ih is not None and not lstm.bias_ih.numpy().any()
    batchnorm = nn.BatchNorm(3)
    state = get_state_dict(batchnorm)
    assert set(state) == {"weight", "bias", "running_mean", "running_var", "num_batches_tracked"}
    assert state["num_batches_tracked"].dtype == dtypes.int64 and state["num_batches_tracked"].shape == ()
    assert state["running_mean"].requires_grad is False and state["running_var"].requires_grad is False
    np.testing.assert_array_equal(state["running_var"].numpy(), [1.0, 1.0, 1.0])
    assert set(get_state_dict(nn.BatchNorm(3, affine=False))) == {"running_mean", "running_var",
                                                                 "num_batches_tracked"}
    assert set(get_state_dict(nn.RMSNorm(4))) == {"weight"}
    assert get_state_dict(nn.LayerNorm(4, elementwise_affine=False)) == {}


def test_bad_arguments_raise_clear_errors() -> None:
    with pytest.raises(ValueError, match="divisible by groups"):
        nn.Conv2d(3, 4, 3, groups=2)
    with pytest.raises(ValueError, match="divisible by num_groups"):
        nn.GroupNorm(4, 6)
    with pytest.raises(ValueError, match="padding"):
        nn.Conv2d(3, 4, 3, padding="full")
    with pytest.raises(ValueError, match="last axes"):
        nn.LayerNorm(4)(Tensor.ones(2, 3))
