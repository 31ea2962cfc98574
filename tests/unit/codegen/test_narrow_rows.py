"""Rows that the vector does not divide (5000 classes, 1000 columns with 16 lanes) take the widest narrower vector
that does, for the output lanes and for the row reduces, instead of one scalar chain per row; the results match
torch (tinycore.codegen.optimize, Heuristic.vectorize and row_reduce_accumulators)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from cpu_vectors import VECTOR_BYTES, cpu_vector_bytes

from tinycore import Tensor
from tinycore.codegen.opt import Kernel
from tinycore.codegen.optimize import hand_coded_optimizations
from tinycore.device.registry import Device
from tinycore.engine.memory import device_facts
from tinycore.schedule import create_schedule


def _notes(tensor: Tensor) -> list[str]:
    """The heuristic's choices for the last kernel of `tensor`'s schedule."""
    items = [item for item in create_schedule([tensor.uop], device_facts).items if not item.is_copy]
    return hand_coded_optimizations(Kernel(items[-1].ast), Device["CPU"].renderer)


@pytest.mark.parametrize("vector_bytes", VECTOR_BYTES)
@pytest.mark.parametrize("columns", [1000, 5000, 1004])
def test_softmax_rows_a_vector_does_not_divide_take_narrower_vectors(vector_bytes: int, columns: int) -> None:
    logits = (np.random.default_rng(columns).standard_normal((6, columns)) * 3).astype(np.float32)
    with cpu_vector_bytes(vector_bytes) as lanes:
        softmax = Tensor(logits).softmax(-1)
        notes = _notes(softmax)
        # the widest of lanes, lanes / 2, lanes / 4 (at least 4) that divides the row
        expected = next(width for width in (lanes, lanes // 2, lanes // 4) if width >= 4 and columns % width == 0)
        assert f"UPCAST {expected} (contiguous output)" in notes, notes
        assert any(note.startswith("ACCUMULATORS") and "(row reduce)" in note and
                   int(note.split()[1]) in (2 * expected, expected) for note in notes), notes
        np.testing.assert_allclose(softmax.numpy(), torch.softmax(torch.from_numpy(logits), -1).numpy(),
                                   rtol=2e-6, atol=1e-7)


def test_cross_entropy_over_5000_classes_matches_torch() -> None:
    rng = np.random.default_rng(4)
    logits = (rng.standard_normal((64, 5000)) * 2).astype(np.float32)
    labels = rng.integers(0, 5000, 64).astype(np.int32)
    source = Tensor(logits, requires_grad=True)
    loss = source.sparse_categorical_crossentropy(Tensor(labels))
    loss.backward()
    assert source.grad is not None
    reference = torch.from_numpy(logits).requires_grad_(True)
    expected = torch.nn.functional.cross_entropy(reference, torch.from_numpy(labels).long())
    expected.backward()
    assert reference.grad is not None
    np.testing.assert_allclose(loss.numpy(), expected.detach().numpy(), rtol=1e-5)
    np.testing.assert_allclose(source.grad.numpy(), reference.grad.numpy(), rtol=1e-4, atol=1e-9)
