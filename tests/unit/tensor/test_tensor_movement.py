"""Movement Tensor operations against numpy and torch, including size-0/size-1 axes and errors."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812

from tinycore import Tensor, dtypes

RNG = np.random.default_rng(2)


def _values(*shape: int) -> np.ndarray:
    return RNG.uniform(-5, 5, shape).astype(np.float32)


def _equal(got: Tensor, expected: Any) -> None:
    expected_array = expected.numpy() if isinstance(expected, torch.Tensor) else np.asarray(expected)
    result = got.numpy()
    assert result.shape == expected_array.shape, f"shape {result.shape} != {expected_array.shape}"
    np.testing.assert_array_equal(result, expected_array)


@pytest.mark.parametrize("shape, target", [((2, 3), (3, 2)), ((2, 3), (-1,)), ((6,), (1, 2, 1, 3)), ((), (1, 1)),
                                           ((1,), ()), ((0, 4), (2, 0)), ((2, 3, 4), (4, -1))])
def test_reshape_and_view(shape: tuple, target: tuple) -> None:
    values = _values(*shape)
    _equal(Tensor(values).reshape(target), values.reshape(target))
    _equal(Tensor(values).view(target), values.reshape(target))


def test_reshape_errors() -> None:
    with pytest.raises(ValueError, match="cannot reshape"):
        Tensor.ones(2, 3).reshape(4)
    with pytest.raises(ValueError, match="only one"):
        Tensor.ones(2, 3).reshape(-1, -1)
    with pytest.raises(ValueError):
        Tensor.ones(2, 3).reshape(-2, 3)


@pytest.mark.parametrize("shape, order", [((2, 3), (1, 0)), ((2, 3, 4), (2, 0, 1)), ((2, 3, 4), (-1, 0, 1)),
                                          ((1, 0, 2), (2, 1, 0)), ((), ())])
def test_permute(shape: tuple, order: tuple) -> None:
    values = _values(*shape)
    _equal(Tensor(values).permute(order), np.transpose(values, order))


def test_permute_errors() -> None:
    with pytest.raises(ValueError, match="permutation"):
        Tensor.ones(2, 3).permute(0, 0)
    with pytest.raises(IndexError):
        Tensor.ones(2, 3).permute(0, 2)


@pytest.mark.parametrize("shape, target", [((3, 1), (3, 4)), ((1,), (2, 5)), ((), (2, 2)), ((2, 1, 1), (2, 0, 3)),
                                           ((1, 3), (-1, 3)), ((1, 3), (4, -1))])
def test_expand(shape: tuple, target: tuple) -> None:
    values = _values(*shape)
    _equal(Tensor(values).expand(target), torch.tensor(values).expand(target))


def test_expand_errors() -> None:
    with pytest.raises(ValueError, match="only size-1"):
        Tensor.ones(2, 3).expand(4, 3)
    with pytest.raises(ValueError, match="fewer"):
        Tensor.ones(2, 3).expand(3)


@pytest.mark.parametrize("shape, padding", [((3, 4), (1, 2)), ((3, 4), (1, 0, 0, 2)), ((2, 3), ((1, 1), None)),
                                            ((2, 3), (-1, 2)), ((0, 2), (1, 1, 2, 0)), ((5,), (0, 0))])
def test_pad_constant(shape: tuple, padding: tuple) -> None:
    values = _values(*shape)
    flat = padding if isinstance(padding[0], int) else [amount for pair in reversed(padding)
                                                        for amount in (pair or (0, 0))]
    _equal(Tensor(values).pad(padding), F.pad(torch.tensor(values), list(flat)))
    _equal(Tensor(values).pad(padding, value=-7.5), F.pad(torch.tensor(values), list(flat), value=-7.5))


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("padding", [(1, 2), (2, 1, 1, 2), (0, 3, 2, 0)])
def test_pad_modes_match_torch(mode: str, padding: tuple) -> None:
    values = _values(2, 4, 5)
    _equal(Tensor(values).pad(padding, mode=mode), F.pad(torch.tensor(values), list(padding), mode=mode))


def test_pad_errors() -> None:
    with pytest.raises(ValueError, match="mode"):
        Tensor.ones(3).pad((1, 1), mode="wrap")
    with pytest.raises(ValueError, match="smaller"):
        Tensor.ones(3).pad((3, 0), mode="reflect")
    with pytest.raises(ValueError, match="even"):
        Tensor.ones(3).pad((1, 1, 1))
    with pytest.raises(ValueError):
        Tensor.ones(2, 3).pad(((1, 1),))


def test_pad_to_and_shrink_to() -> None:
    values = _values(2, 3)
    _equal(Tensor(values).pad_to(4, None), np.pad(values, ((0, 2), (0, 0))))
    _equal(Tensor(values).shrink_to(1, 2), values[:1, :2])


def test_shrink_and_flip() -> None:
    values = _values(3, 4, 5)
    _equal(Tensor(values).shrink(((1, 3), None, (0, 0))), values[1:3, :, 0:0])
    _equal(Tensor(values).flip(0, -1), values[::-1, :, ::-1])
    _equal(Tensor(values).flip((1,)), values[:, ::-1])
    with pytest.raises(ValueError, match="out of bounds"):
        Tensor(values).shrink(((0, 4), None, None))
    with pytest.raises(ValueError):
        Tensor(values).shrink(((0, 1),))
    with pytest.raises(ValueError, match="repeat"):
        Tensor(values).flip(0, 0)


def test_transpose_t_flatten_unflatten() -> None:
    values = _values(2, 3, 4)
    _equal(Tensor(values).transpose(0, 2), np.swapaxes(values, 0, 2))
    _equal(Tensor(values).transpose(), np.swapaxes(values, 0, 1))
    _equal(Tensor(values[0]).T, values[0].T)
    _equal(Tensor(values).flatten(), values.reshape(-1))
    _equal(Tensor(values).flatten(1), values.reshape(2, 12))
    _equal(Tensor(values).flatten(0, 1), values.reshape(6, 4))
    _equal(Tensor(np.float32(3)).flatten(), np.array([3], np.float32))
    _equal(Tensor(values).unflatten(-1, (2, 2)), values.reshape(2, 3, 2, 2))


def test_squeeze_unsqueeze() -> None:
    values = _values(1, 3, 1)
    _equal(Tensor(values).squeeze(), values.squeeze())
    _equal(Tensor(values).squeeze(0), values.squeeze(0))
    _equal(Tensor(values).squeeze(1), values)
    _equal(Tensor(values).unsqueeze(-1), values[..., None])
    _equal(Tensor(values).unsqueeze(1), values[:, None])
    _equal(Tensor(np.float32(2)).unsqueeze(0), np.array([2], np.float32))
    with pytest.raises(IndexError):
        Tensor(values).unsqueeze(5)
    with pytest.raises(IndexError):
        Tensor(values).squeeze(3)


@pytest.mark.parametrize("shape, repeats", [((2, 3), (2, 1)), ((2, 3), (1, 2, 3)), ((3,), (4,)), ((), (2, 2)),
                                            ((2, 0), (2, 2))])
def test_repeat(shape: tuple, repeats: tuple) -> None:
    values = _values(*shape)
    _equal(Tensor(values).repeat(repeats), torch.tensor(values).repeat(repeats))


def test_repeat_interleave_and_roll() -> None:
    values = _values(2, 3)
    _equal(Tensor(values).repeat_interleave(2), np.repeat(values, 2))
    _equal(Tensor(values).repeat_interleave(3, dim=1), np.repeat(values, 3, axis=1))
    _equal(Tensor(values).repeat_interleave(2, dim=-2), np.repeat(values, 2, axis=0))
    _equal(Tensor(values).roll(2), np.roll(values, 2))
    _equal(Tensor(values).roll(-1, 1), np.roll(values, -1, 1))
    _equal(Tensor(values).roll((1, 4), (0, 1)), np.roll(values, (1, 4), (0, 1)))
    with pytest.raises(ValueError):
        Tensor(values).roll((1, 2), 0)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat_and_stack(dim: int) -> None:
    first, second = _values(2, 3), _values(2, 3)
    _equal(Tensor(first).cat(Tensor(second), dim=dim), np.concatenate([first, second], axis=dim))
    _equal(Tensor(first).stack(Tensor(second), Tensor(first), dim=dim), np.stack([first, second, first], axis=dim))


def test_cat_mixed_sizes_dtypes_and_empty() -> None:
    first, second = _values(2, 3), _values(2, 0)
    _equal(Tensor(first).cat(Tensor(second), dim=1), first)
    mixed = Tensor([1, 2]).cat(Tensor([0.5]))
    assert mixed.dtype == dtypes.float32 and mixed.tolist() == [1.0, 2.0, 0.5]
    assert Tensor([True]).cat(Tensor([False, True])).tolist() == [True, False, True]
    assert Tensor.stack(Tensor(1.0), Tensor(2.0)).tolist() == [1.0, 2.0]
    with pytest.raises(ValueError, match="equal sizes"):
        Tensor.ones(2, 3).cat(Tensor.ones(3, 3), dim=1)
    with pytest.raises(ValueError, match="zero-dimensional"):
        Tensor(1.0).cat(Tensor(2.0))
    with pytest.raises(ValueError, match="one shape"):
        Tensor.ones(2).stack(Tensor.ones(3))


def test_split_and_chunk() -> None:
    values = _values(7, 2)
    pieces = Tensor(values).split(3)
    assert [piece.shape for piece in pieces] == [(3, 2), (3, 2), (1, 2)]
    for got, expected in zip(pieces, np.split(values, [3, 6]), strict=False):
        _equal(got, expected)
    pieces = Tensor(values).split([2, 5])
    _equal(pieces[1], values[2:])
    chunks = Tensor(values).chunk(3)
    assert [chunk.shape for chunk in chunks] == [(3, 2), (3, 2), (1, 2)]
    assert [chunk.shape for chunk in Tensor(values).chunk(2, dim=1)] == [(7, 1), (7, 1)]
    with pytest.raises(ValueError, match="sum to"):
        Tensor(values).split([2, 2])


def test_unfold_and_meshgrid() -> None:
    values = _values(3, 7)
    _equal(Tensor(values).unfold(1, 3, 2), torch.tensor(values).unfold(1, 3, 2))
    x, y = Tensor([1, 2, 3]), Tensor([4, 5])
    for indexing in ("ij", "xy"):
        ours = x.meshgrid(y, indexing=indexing)
        expected = torch.meshgrid(torch.tensor([1, 2, 3]), torch.tensor([4, 5]), indexing=indexing)
        for got, want in zip(ours, expected, strict=False):
            _equal(got, want)


def test_movement_ops_do_not_change_dtype() -> None:
    tensor = Tensor([[1, 2], [3, 4]], dtype=dtypes.int16)
    for result in (tensor.T, tensor.reshape(4), tensor.pad((1, 1)), tensor.flip(0), tensor.expand(3, 2, 2)):
        assert result.dtype == dtypes.int16


@pytest.mark.parametrize("formula, sizes, reference", [
    ("a b c -> c a b", {}, lambda v: v.transpose(2, 0, 1)),
    ("a b c -> a (b c)", {}, lambda v: v.reshape(2, 12)),
    ("a (b x) c -> (a x) b c", {"x": 3}, lambda v: v.reshape(2, 1, 3, 4).transpose(0, 2, 1, 3).reshape(6, 1, 4)),
])
def test_rearrange(formula: str, sizes: dict, reference: Any) -> None:
    values = _values(2, 3, 4)
    _equal(Tensor(values).rearrange(formula, **sizes), reference(values))


def test_rearrange_errors() -> None:
    with pytest.raises(ValueError, match="->"):
        Tensor.ones(2, 3).rearrange("a b")
    with pytest.raises(ValueError, match="same axes"):
        Tensor.ones(2, 3).rearrange("a b -> a c")
    with pytest.raises(ValueError, match="infer"):
        Tensor.ones(6).rearrange("(a b) -> a b")
