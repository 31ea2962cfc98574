"""The input gradient of a stride-1 convolution whose input rows fill their vectors poorly (a stride-2 convolution's
folded input: 17 columns in two 16-lane vectors) is summed channels last and stored straight into the input's layout
(tensor/conv_layouts.py, input_gradient_channels_last; codegen/optimize.py, CONV_MIN_FILL): the channels are the
tile's vector columns, so no lane computes a pixel that is thrown away. Values are checked against torch."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from tinycore import Tensor
from tinycore.codegen.opt import Kernel
from tinycore.codegen.optimize import choose_optimizations, range_size
from tinycore.device.registry import Device
from tinycore.engine.memory import device_facts
from tinycore.schedule import create_schedule
from tinycore.tensor.conv_layouts import input_gradient_channels_last


def _array(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _lanes() -> int:
    renderer = Device["CPU"].renderer
    return max(2, (renderer.preferred_vector_bytes or 32) // 4)


def test_the_choice_follows_how_well_the_rows_fill_their_vectors() -> None:
    lanes = _lanes()
    weight = Tensor.empty(32, 64, 2, 2)
    # one column past a whole vector: two vectors for lanes + 1 columns, barely half filled
    assert input_gradient_channels_last(Tensor.empty(4, 64, 9, lanes + 1), weight, 1, (1, 1))
    # rows that fill their vectors keep the convolution tile
    assert not input_gradient_channels_last(Tensor.empty(4, 64, 9, 2 * lanes), weight, 1, (1, 1))
    assert not input_gradient_channels_last(Tensor.empty(4, 64, 9, lanes), weight, 1, (1, 1))
    # fewer input channels than a vector, groups, dilation, a 1x1 kernel or a short reduce: not channels last
    assert not input_gradient_channels_last(Tensor.empty(4, 2, 9, lanes + 1), Tensor.empty(32, 2, 2, 2), 1, (1, 1))
    assert not input_gradient_channels_last(Tensor.empty(4, 64, 9, lanes + 1), Tensor.empty(32, 32, 2, 2), 2,
                                            (1, 1))
    assert not input_gradient_channels_last(Tensor.empty(4, 64, 9, lanes + 1), weight, 1, (2, 2))
    assert not input_gradient_channels_last(Tensor.empty(4, 64, 9, lanes + 1), Tensor.empty(32, 64, 1, 1), 1,
                                            (1, 1))
    assert not input_gradient_channels_last(Tensor.empty(4, 64, 9, lanes + 1), Tensor.empty(4, 64, 2, 2), 1,
                                            (1, 1))


def _input_gradient_notes(x: Tensor, w: Tensor, folded_columns: int) -> list[str]:
    """The heuristic's notes for the kernel that sums the folded input's gradient (its output pixels' rows of
    `folded_columns`, the folded channels 4 x the input's)."""
    source = x.detach()
    source.requires_grad = True
    (source.conv2d(w, stride=2, padding=1) * 1.5).sum().backward()
    assert source.grad is not None
    asts = [item.ast for item in create_schedule([source.grad.uop], device_facts).items if not item.is_copy]
    channels = 4 * x.shape[1]
    found = []
    for ast in asts:
        kernel = Kernel(ast)
        sizes = [range_size(axis) for axis in kernel.axes]
        if kernel.reduce_ops and sizes[:4] == [x.shape[0], channels, folded_columns, folded_columns]:
            found.append(list(choose_optimizations(kernel, Device["CPU"].renderer).notes))
    assert len(found) == 1, [[range_size(axis) for axis in Kernel(ast).axes] for ast in asts]
    return found[0]


@pytest.mark.parametrize("vectors", [1, 2])
def test_a_stride_two_input_gradient_takes_channels_as_vector_columns(vectors: int) -> None:
    # padded by one and folded, 2 * lanes * vectors columns become lanes * vectors + 1 (17 or 33 with 16 lanes)
    size = 2 * _lanes() * vectors
    x, w = Tensor(_array(2, 16, size, size)).realize(), Tensor(_array(32, 16, 3, 3, seed=1)).realize()
    notes = _input_gradient_notes(x, w, size // 2 + 1)
    assert any("matmul columns" in note for note in notes), notes
    assert not any("convolution pixels" in note for note in notes), notes


@pytest.mark.parametrize("shape, weight_shape", [((2, 16, 32, 32), (32, 16, 3, 3)), ((1, 8, 64, 64), (16, 8, 3, 3)),
                                                 ((3, 16, 30, 34), (20, 16, 3, 3))])
def test_stride_two_gradients_match_torch(shape: tuple[int, ...], weight_shape: tuple[int, ...]) -> None:
    x, w, = _array(*shape), _array(*weight_shape, seed=1)
    source, weight = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
    out = source.conv2d(weight, stride=2, padding=1)
    upstream = _array(*out.shape, seed=2)
    (out * Tensor(upstream)).sum().backward()
    assert source.grad is not None and weight.grad is not None
    torch_x, torch_w = torch.from_numpy(x).requires_grad_(), torch.from_numpy(w).requires_grad_()
    (torch.nn.functional.conv2d(torch_x, torch_w, stride=2, padding=1) * torch.from_numpy(upstream)).sum().backward()
    assert torch_x.grad is not None and torch_w.grad is not None
    np.testing.assert_allclose(source.grad.numpy(), torch_x.grad.numpy(), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(weight.grad.numpy(), torch_w.grad.numpy(), rtol=1e-4, atol=1e-3)
