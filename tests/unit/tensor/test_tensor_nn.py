"""Composite Tensor operations (matmul, einsum, convolution, pooling, normalisation, losses, ...) against torch."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812

from tinycore import Context, Tensor, dtypes

RNG = np.random.default_rng(4)


def _data(*shape: int, low: float = -2.0, high: float = 2.0) -> np.ndarray:
    return RNG.uniform(low, high, shape).astype(np.float32)


def _close(got: Tensor, expected: Any, atol: float = 1e-5, rtol: float = 1e-4) -> None:
    expected_array = expected.detach().numpy() if isinstance(expected, torch.Tensor) else np.asarray(expected)
    result = got.numpy()
    assert result.shape == expected_array.shape, f"shape {result.shape} != {expected_array.shape}"
    np.testing.assert_allclose(result, expected_array, atol=atol, rtol=rtol)


@pytest.mark.parametrize("left, right", [((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)), ((2, 3), (3, 4)),
                                         ((5, 2, 3), (3, 4)), ((2, 1, 2, 3), (5, 3, 2)), ((0, 3), (3, 2)),
                                         ((2, 0), (0, 3)), ((1, 1), (1, 1))])
def test_matmul_matches_numpy(left: tuple, right: tuple) -> None:
    a, b = _data(*left), _data(*right)
    _close(Tensor(a) @ Tensor(b), a @ b)
    _close(Tensor(a).dot(Tensor(b)), a @ b)
    _close(Tensor(b).matmul(Tensor(a), reverse=True), a @ b)


def test_matmul_dtypes_and_errors() -> None:
    int8 = Tensor([[100, 100]], dtype=dtypes.int8)
    assert (int8 @ Tensor([[1], [1]], dtype=dtypes.int8)).dtype == dtypes.int8
    assert int8.matmul(Tensor([[1], [1]], dtype=dtypes.int8), dtype=dtypes.int32).tolist() == [[200]]
    assert (Tensor([[1, 2]]) @ Tensor([[0.5], [1.0]])).dtype == dtypes.float32
    with pytest.raises(ValueError, match="cannot matmul"):
        Tensor.ones(2, 3) @ Tensor.ones(4, 2)
    with pytest.raises(ValueError, match="at least 1"):
        Tensor(1.0) @ Tensor.ones(2)


def test_linear() -> None:
    x, weight, bias = _data(4, 3), _data(3, 5), _data(5)
    _close(Tensor(x).linear(Tensor(weight), Tensor(bias)), x @ weight + bias)
    _close(Tensor(x).linear(Tensor(weight[:, 0].copy()).reshape(3)), x * weight[:, 0])


@pytest.mark.parametrize("formula, shapes", [("ij,jk->ik", [(2, 3), (3, 4)]), ("ij->ji", [(2, 3)]), ("ij->", [(2, 3)]),
                                             ("ii->i", [(3, 3)]), ("ii", [(3, 3)]), ("i,i->", [(4,), (4,)]),
                                             ("i,j->ij", [(2,), (3,)]), ("bij,bjk->bik", [(2, 2, 3), (2, 3, 4)]),
                                             ("...ij,...jk", [(2, 2, 3), (3, 4)]), ("ij,kj", [(2, 3), (4, 3)]),
                                             ("abc,cd,da->b", [(2, 3, 4), (4, 5), (5, 2)])])
def test_einsum_matches_numpy(formula: str, shapes: list) -> None:
    operands = [_data(*shape) for shape in shapes]
    _close(Tensor.einsum(formula, *[Tensor(operand) for operand in operands]), np.einsum(formula, *operands))
    _close(Tensor.einsum(formula, [Tensor(operand) for operand in operands]), np.einsum(formula, *operands))


def test_einsum_errors() -> None:
    with pytest.raises(ValueError, match="operands"):
        Tensor.einsum("ij,jk->ik", Tensor.ones(2, 2))
    with pytest.raises(ValueError, match="sizes"):
        Tensor.einsum("ij,jk->ik", Tensor.ones(2, 3), Tensor.ones(4, 2))


def test_diagonal_and_diag() -> None:
    matrix = _data(3, 4)
    for offset in (-1, 0, 2):
        _close(Tensor(matrix).diagonal(offset), np.diagonal(matrix, offset))
    batched = _data(2, 3, 3)
    _close(Tensor(batched).diagonal(0, 1, 2), np.diagonal(batched, 0, 1, 2))
    _close(Tensor(batched).diagonal(1, 0, 2), np.diagonal(batched, 1, 0, 2))
    _close(Tensor([1.0, 2.0]).diag(), np.diag([1.0, 2.0]))


CONV_CASES = [dict(), dict(stride=2), dict(padding=1), dict(padding=(1, 2)), dict(dilation=2, padding=2),
              dict(groups=2), dict(groups=2, stride=(2, 1), padding=(0, 1), dilation=(1, 2))]


@pytest.mark.parametrize("options", CONV_CASES)
def test_conv2d_matches_torch(options: dict) -> None:
    groups = options.get("groups", 1)
    images, weight, bias = _data(2, 4, 7, 6), _data(6, 4 // groups, 3, 3), _data(6)
    expected = F.conv2d(torch.tensor(images), torch.tensor(weight), torch.tensor(bias), **options)
    _close(Tensor(images).conv2d(Tensor(weight), Tensor(bias), **options), expected, atol=1e-4)


def test_conv1d_and_conv3d_shapes_through_conv2d() -> None:
    signal, kernel = _data(2, 3, 10), _data(4, 3, 3)
    _close(Tensor(signal).conv2d(Tensor(kernel), padding=1), F.conv1d(torch.tensor(signal), torch.tensor(kernel),
                                                                      padding=1), atol=1e-4)
    volume, kernel3 = _data(1, 2, 4, 5, 3), _data(3, 2, 2, 3, 2)
    _close(Tensor(volume).conv2d(Tensor(kernel3)), F.conv3d(torch.tensor(volume), torch.tensor(kernel3)), atol=1e-4)


def test_conv2d_errors() -> None:
    with pytest.raises(ValueError, match="channels"):
        Tensor.ones(1, 3, 5, 5).conv2d(Tensor.ones(2, 2, 3, 3))
    with pytest.raises(ValueError, match="dimensions"):
        Tensor.ones(3, 5, 5).conv2d(Tensor.ones(2, 3, 3, 3))
    with pytest.raises(ValueError, match="does not fit"):
        Tensor.ones(1, 1, 2, 2).conv2d(Tensor.ones(1, 1, 3, 3))


TRANSPOSED_CASES = [dict(), dict(stride=2), dict(stride=2, padding=1, output_padding=1), dict(dilation=2),
                    dict(groups=2, stride=(1, 2))]


@pytest.mark.parametrize("options", TRANSPOSED_CASES)
def test_conv_transpose2d_matches_torch(options: dict) -> None:
    groups = options.get("groups", 1)
    images, weight, bias = _data(2, 4, 5, 4), _data(4, 6 // groups, 3, 2), _data(6)
    expected = F.conv_transpose2d(torch.tensor(images), torch.tensor(weight), torch.tensor(bias), **options)
    _close(Tensor(images).conv_transpose2d(Tensor(weight), Tensor(bias), **options), expected, atol=1e-4)


POOL_CASES = [dict(kernel_size=(2, 2)), dict(kernel_size=(3, 3), stride=2), dict(kernel_size=(3, 2), stride=(2, 1),
                                                                                 padding=1),
              dict(kernel_size=(2, 2), dilation=2), dict(kernel_size=(3, 3), stride=2, ceil_mode=True),
              dict(kernel_size=(2, 3), stride=2, padding=1, ceil_mode=True)]


@pytest.mark.parametrize("options", POOL_CASES)
def test_max_pool2d_matches_torch(options: dict) -> None:
    images = _data(2, 3, 7, 8)
    expected, expected_indices = F.max_pool2d(torch.tensor(images), return_indices=True, **options)
    _close(Tensor(images).max_pool2d(**options), expected)
    values, indices = Tensor(images).max_pool2d(return_indices=True, **options)
    _close(values, expected)
    np.testing.assert_array_equal(indices.numpy(), expected_indices.numpy())


@pytest.mark.parametrize("options", [case for case in POOL_CASES if "dilation" not in case])
@pytest.mark.parametrize("count_include_pad", [True, False])
def test_avg_pool2d_matches_torch(options: dict, count_include_pad: bool) -> None:
    images = _data(2, 3, 7, 8)
    expected = F.avg_pool2d(torch.tensor(images), count_include_pad=count_include_pad, **options)
    _close(Tensor(images).avg_pool2d(count_include_pad=count_include_pad, **options), expected)


def test_max_unpool2d_inverts_max_pool2d() -> None:
    images = _data(1, 2, 4, 6)
    values, indices = F.max_pool2d(torch.tensor(images), 2, return_indices=True)
    expected = F.max_unpool2d(values, indices, 2)
    got = Tensor(values.numpy()).max_unpool2d(Tensor(indices.numpy().astype(np.int32)), (2, 2))
    _close(got, expected)


@pytest.mark.parametrize("shape, axis", [((5,), -1), ((3, 4), 1), ((3, 4), 0), ((2, 3, 4), -2), ((2, 1), 1)])
def test_softmax_family(shape: tuple, axis: int) -> None:
    values = _data(*shape, low=-20, high=20)
    reference = torch.tensor(values)
    _close(Tensor(values).softmax(axis), torch.softmax(reference, axis))
    _close(Tensor(values).log_softmax(axis), torch.log_softmax(reference, axis), atol=1e-4)
    _close(Tensor(values).softmin(axis), F.softmin(reference, axis))
    assert Tensor([1, 2]).softmax().dtype == dtypes.float32
    assert Tensor([1.0, 2.0]).softmax(dtype=dtypes.float64).dtype == dtypes.float64


def test_layernorm_batchnorm_normalize() -> None:
    values = _data(4, 3, 5)
    _close(Tensor(values).layernorm(), F.layer_norm(torch.tensor(values), (5,)), atol=1e-4)
    _close(Tensor(values).layernorm(axis=(1, 2), eps=1e-3), F.layer_norm(torch.tensor(values), (3, 5), eps=1e-3),
           atol=1e-4)
    mean, variance, weight, bias = _data(3), _data(3, low=0.5, high=2), _data(3), _data(3)
    expected = F.batch_norm(torch.tensor(values), torch.tensor(mean), torch.tensor(variance), torch.tensor(weight),
                            torch.tensor(bias), eps=1e-5)
    invstd = Tensor(1 / np.sqrt(variance + 1e-5))
    _close(Tensor(values).batchnorm(Tensor(weight), Tensor(bias), Tensor(mean), invstd), expected, atol=1e-4)
    _close(Tensor(values).normalize(), F.normalize(torch.tensor(values)), atol=1e-5)


def test_one_hot() -> None:
    labels = np.array([[0, 2], [1, 3]])
    got = Tensor(labels).one_hot(4)
    assert got.dtype == dtypes.int32
    np.testing.assert_array_equal(got.numpy(), F.one_hot(torch.tensor(labels), 4).numpy())
    assert Tensor([0, 2]).one_hot().shape == (2, 3)
    with pytest.raises(TypeError):
        Tensor([0.5]).one_hot(2)


def test_dropout_follows_training_context() -> None:
    values = Tensor.ones(2000)
    assert values.dropout(0.5) is values
    with Context(TRAINING=1):
        Tensor.manual_seed(5)
        dropped = values.dropout(0.25).numpy()
    kept = dropped != 0
    assert abs(kept.mean() - 0.75) < 0.04
    np.testing.assert_allclose(dropped[kept], 1 / 0.75)
    with Context(TRAINING=1):
        assert values.dropout(0.0) is values and values.dropout(1.0).numpy().sum() == 0
    with pytest.raises(ValueError):
        values.dropout(1.5)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_sparse_categorical_crossentropy(reduction: str, smoothing: float) -> None:
    logits, labels = _data(6, 5, low=-4, high=4), np.array([0, 4, -1, 2, 2, 1])
    expected = F.cross_entropy(torch.tensor(logits), torch.tensor(labels), ignore_index=-1, reduction=reduction,
                               label_smoothing=smoothing)
    got = Tensor(logits).sparse_categorical_crossentropy(Tensor(labels), label_smoothing=smoothing,
                                                         reduction=reduction)
    _close(got, expected, atol=1e-5)
    with pytest.raises(ValueError, match="labels"):
        Tensor(logits).sparse_categorical_crossentropy(Tensor([0, 1]))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_and_nll_loss(reduction: str) -> None:
    logits, labels = _data(4, 3, 2), np.array([[0, 2], [1, 1], [2, 0], [0, 0]])
    reference = torch.tensor(logits)
    expected = F.cross_entropy(reference, torch.tensor(labels), reduction=reduction, label_smoothing=0.1)
    _close(Tensor(logits).cross_entropy(Tensor(labels), reduction=reduction, label_smoothing=0.1), expected)
    probabilities = torch.softmax(torch.tensor(_data(4, 3)), 1)
    expected = F.cross_entropy(reference[:, :, 0], probabilities, reduction=reduction)
    _close(Tensor(logits[:, :, 0].copy()).cross_entropy(Tensor(probabilities.numpy()), reduction=reduction), expected)
    log_probs = torch.log_softmax(reference[:, :, 0], 1)
    weight = _data(3, low=0.5, high=2)
    expected = F.nll_loss(log_probs, torch.tensor(labels[:, 0]), torch.tensor(weight), ignore_index=2,
                          reduction=reduction)
    got = Tensor(log_probs.numpy()).nll_loss(Tensor(labels[:, 0].copy()), Tensor(weight), ignore_index=2,
                                             reduction=reduction)
    _close(got, expected)
    with pytest.raises(ValueError, match="reduction"):
        Tensor(logits).cross_entropy(Tensor(labels), reduction="avg")


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_binary_crossentropy(reduction: str) -> None:
    logits, targets = _data(3, 4, low=-6, high=6), RNG.integers(0, 2, (3, 4)).astype(np.float32)
    probabilities = 1 / (1 + np.exp(-logits))
    expected = F.binary_cross_entropy(torch.tensor(probabilities), torch.tensor(targets), reduction=reduction)
    _close(Tensor(probabilities).binary_crossentropy(Tensor(targets), reduction=reduction), expected, atol=1e-4)
    expected = F.binary_cross_entropy_with_logits(torch.tensor(logits), torch.tensor(targets), reduction=reduction)
    _close(Tensor(logits).binary_crossentropy_logits(Tensor(targets), reduction=reduction), expected)
    weight = _data(4, low=0.5, high=3)
    expected = F.binary_cross_entropy_with_logits(torch.tensor(logits), torch.tensor(targets), reduction=reduction,
                                                  pos_weight=torch.tensor(weight))
    _close(Tensor(logits).binary_crossentropy_logits(Tensor(targets), reduction=reduction,
                                                     pos_weight=Tensor(weight)), expected)


@pytest.mark.parametrize("mode", ["linear", "nearest", "nearest-exact"])
@pytest.mark.parametrize("size", [(5, 9), (2, 3), (4, 6)])
def test_interpolate_2d(mode: str, size: tuple) -> None:
    images = _data(2, 3, 4, 6)
    torch_mode = "bilinear" if mode == "linear" else mode
    for align_corners in ((False, True) if mode == "linear" else (False,)):
        expected = F.interpolate(torch.tensor(images), size, mode=torch_mode,
                                 align_corners=align_corners if mode == "linear" else None)
        _close(Tensor(images).interpolate(size, mode=mode, align_corners=align_corners), expected, atol=1e-5)


def test_interpolate_1d_and_errors() -> None:
    signal = _data(1, 2, 5)
    _close(Tensor(signal).interpolate((8,)), F.interpolate(torch.tensor(signal), 8, mode="linear"))
    with pytest.raises(ValueError, match="mode"):
        Tensor(signal).interpolate((8,), mode="cubic")


@pytest.mark.parametrize("diagonal", [-1, 0, 2])
def test_triu_tril(diagonal: int) -> None:
    values = _data(2, 3, 4)
    _close(Tensor(values).triu(diagonal), np.triu(values, diagonal))
    _close(Tensor(values).tril(diagonal), np.tril(values, diagonal))
    with pytest.raises(ValueError, match="2 dimensions"):
        Tensor.ones(3).triu()


@pytest.mark.parametrize("causal", [False, True])
def test_scaled_dot_product_attention(causal: bool) -> None:
    query, key, value = _data(2, 3, 4, 8), _data(2, 3, 4, 8), _data(2, 3, 4, 8)
    expected = F.scaled_dot_product_attention(torch.tensor(query), torch.tensor(key), torch.tensor(value),
                                              is_causal=causal)
    _close(Tensor(query).scaled_dot_product_attention(Tensor(key), Tensor(value), is_causal=causal), expected)
    mask = RNG.integers(0, 2, (4, 4)).astype(bool)
    mask[:, 0] = True
    expected = F.scaled_dot_product_attention(torch.tensor(query), torch.tensor(key), torch.tensor(value),
                                              attn_mask=torch.tensor(mask))
    _close(Tensor(query).scaled_dot_product_attention(Tensor(key), Tensor(value), attn_mask=Tensor(mask)), expected)


def test_sequential() -> None:
    assert Tensor([1.0, -2.0]).sequential([Tensor.relu, lambda t: t + 1]).tolist() == [2.0, 1.0]


def test_newton_schulz_orthogonalises() -> None:
    matrix = _data(3, 5)
    result = Tensor(matrix).newton_schulz(8, (3.4445, -4.7750, 2.0315)).numpy()
    singular_values = np.linalg.svd(result, compute_uv=False)
    assert result.shape == (3, 5) and np.all(np.abs(singular_values - 1) < 0.35)
    tall = Tensor(matrix.T.copy()).newton_schulz(8, (3.4445, -4.7750, 2.0315)).numpy()
    np.testing.assert_allclose(tall, result.T, atol=1e-5)
