"""The CPU heuristic returns what it chose as typed values (tinycore.codegen.optimize.choose_optimizations): the
opts, and the register tiles among them by kind. Codegen reads these, never the DEBUG notes."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from cpu_vectors import cpu_vector_bytes

from tinycore import Tensor
from tinycore.codegen.opt import Kernel, OptOps
from tinycore.codegen.optimize import Choices, TileKind, choose_optimizations
from tinycore.device.registry import Device
from tinycore.engine.memory import device_facts
from tinycore.schedule import create_schedule
from tinycore.uop.ops import Ops


def _choices(tensor: Tensor) -> Choices:
    """The heuristic's choices for the last kernel with a reduce in `tensor`'s schedule (the last kernel if none)."""
    asts = [item.ast for item in create_schedule([tensor.uop], device_facts).items if not item.is_copy]
    reducing = [ast for ast in asts if any(node.op is Ops.REDUCE for node in ast.toposort)]
    return choose_optimizations(Kernel((reducing or asts)[-1]), Device["CPU"].renderer)


def _array(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_a_matmul_is_a_matmul_tile_of_upcast_rows_and_columns() -> None:
    a, b = _array(64, 48), _array(48, 64, seed=1)
    with cpu_vector_bytes(32):
        product = Tensor(a) @ Tensor(b)
        choices = _choices(product)
        tile = choices.tile(TileKind.MATMUL)
        assert tile is not None and [t.kind for t in choices.tiles] == [TileKind.MATMUL], choices
        # the tile's opts are among those applied, and it upcasts (at least the columns)
        assert set(tile.opts) <= set(choices.opts)
        assert any(opt.op in (OptOps.UPCAST, OptOps.SHIFTED_UPCAST) for opt in tile.opts), tile
        np.testing.assert_allclose(product.numpy(), torch.from_numpy(a) @ torch.from_numpy(b), rtol=1e-5, atol=1e-5)


def test_a_product_with_both_inputs_along_the_reduce_is_a_dot_tile() -> None:
    d, w = _array(24, 64), _array(40, 64, seed=1)
    with cpu_vector_bytes(32):
        product = Tensor(d) @ Tensor(w).T
        choices = _choices(product)
        assert choices.tile(TileKind.DOT) is not None and choices.tile(TileKind.MATMUL) is None, choices
        np.testing.assert_allclose(product.numpy(), torch.from_numpy(d) @ torch.from_numpy(w).T, rtol=1e-5,
                                   atol=1e-5)


def test_a_convolution_is_a_convolution_tile() -> None:
    x, w = _array(2, 8, 16, 16), _array(8, 8, 3, 3, seed=1)
    with cpu_vector_bytes(32):
        tx, tw = Tensor(x).realize(), Tensor(w).realize()
        choices = _choices(tx.conv2d(tw))
        tile = choices.tile(TileKind.CONVOLUTION)
        assert tile is not None, choices
        assert any(opt.op is OptOps.UNROLL and opt.amount == 3 for opt in tile.opts), tile  # the 3-wide window
        reference = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w))
        np.testing.assert_allclose(tx.conv2d(tw).numpy(), reference.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("build", [lambda t: t.sum(-1), lambda t: t.exp() + 1])
def test_kernels_without_a_product_have_no_tile(build: object) -> None:
    x = _array(16, 256)
    assert callable(build)
    choices = _choices(build(Tensor(x)))
    assert choices.tiles == (), choices
