"""Conformance, ops: reductions (sum, max, min, prod, mean, argmax) over every axis pattern of a 3-d tensor."""
from __future__ import annotations

import itertools
from typing import Any

import numpy
import pytest

from tinycore.tensor import Tensor
from tinycore.testing.support import assert_matches, sample

pytestmark = pytest.mark.conformance_category("ops")

SHAPE = (2, 3, 5)
AXIS_PATTERNS: list[tuple[int, ...] | None] = [None] + [pattern for count in (1, 2) for pattern in
                                                        itertools.combinations(range(len(SHAPE)), count)]


@pytest.mark.parametrize("axes", AXIS_PATTERNS, ids=[str(axes) for axes in AXIS_PATTERNS])
@pytest.mark.parametrize("name", ["sum", "max"])
def test_reduce_every_axis_pattern(device: str, name: str, axes: tuple[int, ...] | None) -> None:
    """sum and max over every subset of the axes of a (2, 3, 5) tensor match numpy."""
    data = sample(SHAPE, seed=30)
    tensor = Tensor(data, device=device)
    result = tensor.sum(axes) if name == "sum" else tensor.max(axes)
    expected = data.sum(axis=axes) if name == "sum" else data.max(axis=axes)
    assert_matches(result, expected, f"{name}(axis={axes}) of a {SHAPE} float32 tensor on {device}", rtol=1e-5,
                   atol=1e-5)


@pytest.mark.parametrize("name", ["min", "prod", "mean"])
def test_other_reductions_keepdim(device: str, name: str) -> None:
    """min, prod and mean over axis 1 with keepdim, and over everything."""
    data = sample(SHAPE, seed=31, low=0.5, high=1.5)
    tensor = Tensor(data, device=device)
    reference: Any = {"min": numpy.min, "prod": numpy.prod, "mean": numpy.mean}[name]
    assert_matches(getattr(tensor, name)(1, keepdim=True), reference(data, axis=1, keepdims=True),
                   f"{name}(axis=1, keepdim=True) on {device}", rtol=1e-5)
    assert_matches(getattr(tensor, name)(), numpy.asarray(reference(data), dtype=numpy.float32),
                   f"{name}() of everything on {device}", rtol=1e-5)


def test_argmax_and_reduce_of_view(device: str) -> None:
    """argmax along an axis, and a sum over a permuted, strided view."""
    data = sample((4, 6), seed=32)
    tensor = Tensor(data, device=device).realize()
    assert_matches(tensor.argmax(1), data.argmax(axis=1).astype(numpy.int32), f"argmax(axis=1) on {device}")
    assert_matches(tensor.T[::2].sum(1), data.T[::2].sum(axis=1), f"x.T[::2].sum(1) on {device}", rtol=1e-5)


@pytest.mark.parametrize("shape", [(0, 3), (1, 1), (1, 257)], ids=["size0", "size1", "long_row"])
def test_reduce_odd_sizes(device: str, shape: tuple[int, ...]) -> None:
    """Sums over empty axes give 0, over size-1 axes the value itself, over long rows the numpy sum."""
    data = sample(shape, seed=33)
    assert_matches(Tensor(data, device=device).sum(1), data.sum(axis=1), f"sum(axis=1) of shape {shape} on {device}",
                   rtol=1e-5, atol=1e-5)
