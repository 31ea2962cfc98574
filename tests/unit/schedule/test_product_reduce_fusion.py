"""A sum over a product of two memory operands (a matrix product) keeps a kernel to itself when other reduces would
join it: the relu gradient of an MLP whose loss is a mean, `(x @ W > 0) * (c @ W.T)`, summed both products in one
kernel and lost the matrix-product tile (70 ms instead of under 2 for 512^3). Gradients against torch, kernel
structure from the schedule."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from tinycore import Tensor
from tinycore.engine.memory import device_facts
from tinycore.schedule import create_schedule
from tinycore.schedule.fusion import _is_product_reduce
from tinycore.uop.ops import Ops


def _reduces_per_kernel(node) -> list[int]:
    """How many REDUCE ops each kernel of `node`'s schedule sums."""
    items = create_schedule([node], device_facts).items
    return [sum(1 for uop in item.ast.toposort if uop.op is Ops.REDUCE) for item in items if item.ast.op is Ops.SINK]


@pytest.mark.parametrize("rows, width", [(64, 48), (33, 40), (128, 128)])
@pytest.mark.parametrize("loss", ["mean", "sum"])
def test_relu_gradient_of_a_mean_loss_keeps_the_products_apart(rows: int, width: int, loss: str) -> None:
    rng = np.random.default_rng(rows)
    x, w = rng.standard_normal((rows, width), dtype=np.float32), rng.standard_normal((width, width), dtype=np.float32)
    source, weight = Tensor(x, requires_grad=True), Tensor(w)
    hidden = (source @ weight).relu() @ weight
    (hidden.mean() if loss == "mean" else hidden.sum()).backward()
    assert source.grad is not None
    assert max(_reduces_per_kernel(source.grad.uop)) == 1, "a product shares its kernel with another reduce"
    reference_x = torch.from_numpy(x).double().requires_grad_(True)
    reference = (reference_x @ torch.from_numpy(w).double()).relu() @ torch.from_numpy(w).double()
    (reference.mean() if loss == "mean" else reference.sum()).backward()
    assert reference_x.grad is not None
    expected = reference_x.grad.numpy()
    # float32 sums of `width` terms against float64: rounding relative to the gradient's scale
    np.testing.assert_allclose(source.grad.numpy(), expected, rtol=1e-4, atol=1e-5 * np.abs(expected).max())


def test_a_product_is_two_memory_operands_broadcast_against_each_other() -> None:
    a, b = Tensor.empty(8, 16), Tensor.empty(16, 4)
    product = (a.reshape(8, 16, 1).expand(8, 16, 4) * b.reshape(1, 16, 4).expand(8, 16, 4)).sum(1)
    scaled = (Tensor.full((8, 16, 4), 0.5) * b.reshape(1, 16, 4).expand(8, 16, 4)).sum(1)
    elementwise = (a * a).sum(1)
    found = [node for node in product.uop.toposort if node.op is Ops.REDUCE_AXIS]
    assert len(found) == 1 and _is_product_reduce(found[0])
    for tensor in (scaled, elementwise):  # a constant operand, operands not broadcast
        reduces = [node for node in tensor.uop.toposort if node.op is Ops.REDUCE_AXIS]
        assert reduces and not any(_is_product_reduce(node) for node in reduces)


def test_row_reduces_beside_a_plain_reduce_still_share_its_kernel() -> None:
    # two reduces without a product (a row sum and a row max) keep sharing their consumer's kernel
    array = np.random.default_rng(3).standard_normal((64, 100)).astype(np.float32)
    source = Tensor(array)
    combined = source.sum(1) + source.max(1)
    assert _reduces_per_kernel(combined.uop) == [2]
    np.testing.assert_allclose(combined.numpy(), array.sum(1) + array.max(1), rtol=1e-5, atol=1e-5)


def _indirect(load) -> bool:
    """True for a load whose address depends on another load (a gather)."""
    return any(node.op is Ops.LOAD for node in load.src[0].src[1].toposort)


def test_embedding_tied_to_its_classifier_keeps_products_out_of_gathers_and_scatters() -> None:
    # logits = e[idx] @ e.T: the lookup feeds a product and the lookup's gradient scatters a product into the table;
    # each product gets a kernel of its own reading plain memory (the gathered rows are copied once)
    rng = np.random.default_rng(9)
    table = rng.standard_normal((40, 24), dtype=np.float32) * 0.3
    ids, labels = rng.integers(0, 40, (4, 6)), rng.integers(0, 40, 24)
    weights = Tensor(table, requires_grad=True)
    logits = weights[Tensor(ids.astype(np.int32))].reshape(-1, 24) @ weights.T
    logits.sparse_categorical_crossentropy(Tensor(labels.astype(np.int32))).backward()
    assert weights.grad is not None
    for item in create_schedule([weights.grad.uop], device_facts).items:
        if item.ast.op is not Ops.SINK:
            continue
        nodes = item.ast.toposort
        reduces = [node for node in nodes if node.op is Ops.REDUCE]
        if any(node.op is Ops.STORE and node.arg is not None for node in nodes):
            assert not reduces, "a scatter computes a reduce"
        elif reduces:
            assert not any(node.op is Ops.LOAD and node.src[0].op is Ops.INDEX and _indirect(node) for node in nodes), \
                "a reduce kernel gathers its operand"
    reference = torch.from_numpy(table).requires_grad_(True)
    torch_logits = reference[torch.from_numpy(ids)].reshape(-1, 24) @ reference.T
    torch.nn.functional.cross_entropy(torch_logits, torch.from_numpy(labels)).backward()
    assert reference.grad is not None
    np.testing.assert_allclose(weights.grad.numpy(), reference.grad.numpy(), rtol=1e-4, atol=1e-6)
