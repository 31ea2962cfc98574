"""Rows that read every second element (a stride-2 convolution's folded input copy, a padded image sliced with
step 2) get vector lanes from the CPU heuristic even when no vector divides the row: each lane's load keeps its own
gate, and the stores are whole vectors with the last block shifted back. The fold itself reads a padded copy, so
its loads are not gated."""
from __future__ import annotations

import numpy as np
import torch

from tinycore import Tensor
from tinycore.codegen.opt import Kernel, OptOps
from tinycore.codegen.optimize import choose_optimizations, range_size
from tinycore.device.registry import Device
from tinycore.engine.memory import device_facts
from tinycore.schedule import create_schedule
from tinycore.uop.ops import Ops


def _opts_of_last_kernel(tensor: Tensor) -> list[OptOps]:
    """The opts the heuristic picks for the last kernel of `tensor`'s schedule."""
    asts = [item.ast for item in create_schedule([tensor.uop], device_facts).items if not item.is_copy]
    return [opt.op for opt in choose_optimizations(Kernel(asts[-1]), Device["CPU"].renderer).opts]


def _array(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_a_padded_row_read_with_step_two_is_vectorized_and_correct() -> None:
    a, b = _array(2, 8, 64, 64), _array(2, 8, 64, 64, seed=1)
    ta, tb = Tensor(a).realize(), Tensor(b).realize()
    # 66 padded columns read with step 2: 33 outputs per row, which no vector divides
    folded = (ta + tb).relu().pad((1, 1, 1, 1))[:, :, 1::2, ::2]
    opts = _opts_of_last_kernel(folded)
    assert OptOps.SHIFTED_UPCAST in opts, opts
    expected = torch.nn.functional.pad(torch.relu(torch.from_numpy(a) + torch.from_numpy(b)), (1, 1, 1, 1))[:, :, 1::2,
                                                                                                          ::2]
    np.testing.assert_array_equal(folded.numpy(), expected.numpy())


def test_a_stride_two_convolution_matches_torch_at_batch_one() -> None:
    x, w = _array(1, 32, 64, 64), _array(64, 32, 3, 3, seed=1)
    result = Tensor(x).relu().conv2d(Tensor(w), stride=2, padding=1)
    expected = torch.nn.functional.conv2d(torch.relu(torch.from_numpy(x)), torch.from_numpy(w), stride=2, padding=1)
    np.testing.assert_allclose(result.numpy(), expected.numpy(), rtol=1e-4, atol=1e-4)


def test_a_stride_two_convolution_folds_a_padded_copy_without_gates() -> None:
    x, w = _array(1, 8, 32, 32), _array(16, 8, 3, 3, seed=1)
    tx, tw = Tensor(x).realize(), Tensor(w).realize()
    result = tx.conv2d(tw, stride=2, padding=1)
    asts = [item.ast for item in create_schedule([result.uop], device_facts).items if not item.is_copy]
    # the folded input: 4 phases of 8 channels, 17 x 17 (the 34 x 34 padded image, read with step 2)
    folds = [ast for ast in asts if [range_size(axis) for axis in Kernel(ast).axes] == [32, 17, 17]]
    assert len(folds) == 1, [[range_size(axis) for axis in Kernel(ast).axes] for ast in asts]
    gated = [node for node in folds[0].toposort if node.op is Ops.INDEX and len(node.src) > 2]
    assert not gated, gated
    expected = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), stride=2, padding=1)
    np.testing.assert_allclose(result.numpy(), expected.numpy(), rtol=1e-4, atol=1e-4)
