"""The registries of live tensors by id (tinycore/tensor/tensor.py): weakly held, entries leave with their tensor."""
from __future__ import annotations

import gc

import numpy as np
import pytest

pytest.importorskip("tiny_cpu", reason="the CPU device plugin (pip install -e plugins/tiny-cpu) runs these tests")
from tinycore import Tensor  # noqa: E402
from tinycore.tensor.tensor import _GRAD_TENSORS, _UNDECIDED_LEAVES, _LiveTensors  # noqa: E402


class _Thing:
    pass


def test_an_entry_leaves_with_its_object() -> None:
    registry = _LiveTensors()
    first, second = _Thing(), _Thing()
    registry[id(first)] = first  # type: ignore[assignment]
    registry[id(second)] = second  # type: ignore[assignment]
    assert registry.get(id(first)) is first and len(registry) == 2
    key = id(first)
    del first
    gc.collect()
    assert registry.get(key) is None and len(registry) == 1
    assert registry.values() == [second]
    assert registry.pop(id(second)) is second and len(registry) == 0
    assert registry.pop(id(second)) is None


def test_a_reused_id_keeps_the_new_entry() -> None:
    registry = _LiveTensors()
    old, new = _Thing(), _Thing()
    registry[7] = old  # type: ignore[assignment]
    registry[7] = new  # type: ignore[assignment]
    del old  # the old reference's callback must not remove the new one's entry
    gc.collect()
    assert registry.get(7) is new


def test_leaves_and_grad_tensors_are_registered() -> None:
    leaf = Tensor([1.0, 2.0])
    assert _UNDECIDED_LEAVES.get(id(leaf)) is leaf
    weights = Tensor([1.0, 2.0], requires_grad=True)
    assert _GRAD_TENSORS.get(id(weights)) is weights and _UNDECIDED_LEAVES.get(id(weights)) is None
    (weights * leaf).sum().backward()
    np.testing.assert_allclose(weights.grad.numpy(), [1.0, 2.0])
    np.testing.assert_allclose(leaf.grad.numpy(), [1.0, 2.0])  # an undecided float leaf gets a gradient too
