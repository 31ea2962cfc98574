"""Tensor construction and creation functions, compared with numpy and hand-computed values."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tinycore import Tensor, dtypes


def test_from_python_scalars_keep_their_dtype() -> None:
    assert Tensor(3).dtype == dtypes.int32 and Tensor(3).shape == () and Tensor(3).item() == 3
    assert Tensor(2.5).dtype == dtypes.float32 and Tensor(2.5).item() == 2.5
    assert Tensor(True).dtype == dtypes.bool and Tensor(True).item() is True


@pytest.mark.parametrize("data", [[1, 2, 3], [[1.5, 2.0], [3.0, -4.25]], [[True, False]], [[[1], [2]], [[3], [4]]]])
def test_from_nested_lists_matches_numpy(data: list) -> None:
    tensor = Tensor(data)
    expected = np.array(data)
    assert tensor.shape == expected.shape
    np.testing.assert_array_equal(tensor.numpy(), expected)
    assert tensor.tolist() == expected.tolist()


def test_list_dtype_inference_and_explicit_dtype() -> None:
    assert Tensor([1, 2]).dtype == dtypes.int32
    assert Tensor([1, 2.0]).dtype == dtypes.float32
    assert Tensor([True, 1]).dtype == dtypes.int32
    assert Tensor([]).dtype == dtypes.float32 and Tensor([]).shape == (0,)
    converted = Tensor([1.7, -2.7], dtype=dtypes.int32)
    assert converted.dtype == dtypes.int32 and converted.tolist() == [1, -2]
    assert Tensor([1, 2], dtype="float16").numpy().dtype == np.float16


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.uint8, np.int16, np.int32, np.int64, np.bool_,
                                   np.float16, np.uint32])
def test_from_numpy_round_trips(dtype: type) -> None:
    array = (np.arange(-6, 6).reshape(3, 4) % 5).astype(dtype)
    tensor = Tensor(array)
    assert tensor.numpy().dtype == array.dtype
    np.testing.assert_array_equal(tensor.numpy(), array)


def test_from_numpy_views_zero_size_and_scalars() -> None:
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(Tensor(array.T).numpy(), array.T)
    np.testing.assert_array_equal(Tensor(array[:, ::2]).numpy(), array[:, ::2])
    assert Tensor(np.zeros((0, 3), np.float32)).shape == (0, 3)
    assert Tensor(np.zeros((0, 3), np.float32)).numpy().shape == (0, 3)
    assert Tensor(np.float32(2.5)).shape == () and Tensor(np.float32(2.5)).item() == 2.5


def test_from_bytes_is_uint8() -> None:
    tensor = Tensor(b"\x01\x02\xff")
    assert tensor.dtype == dtypes.uint8 and tensor.tolist() == [1, 2, 255]


def test_bad_data_raises() -> None:
    with pytest.raises(ValueError, match="inhomogeneous"):
        Tensor([[1, 2], [3]])
    with pytest.raises(TypeError):
        Tensor([1, "a"])
    with pytest.raises(TypeError):
        Tensor(object())
    with pytest.raises(TypeError, match="unknown dtype"):
        Tensor([1], dtype="float13")


@pytest.mark.parametrize("shape", [(), (0,), (1,), (2, 3), (2, 0, 4)])
def test_full_zeros_ones(shape: tuple[int, ...]) -> None:
    np.testing.assert_array_equal(Tensor.zeros(*shape).numpy(), np.zeros(shape, np.float32))
    np.testing.assert_array_equal(Tensor.ones(shape).numpy(), np.ones(shape, np.float32))
    np.testing.assert_array_equal(Tensor.full(shape, 7).numpy(), np.full(shape, 7, np.int32))
    assert Tensor.full(shape, 7).dtype == dtypes.int32 and Tensor.full(shape, 1.5).dtype == dtypes.float32
    assert Tensor.empty(*shape).shape == shape


def test_like_functions_follow_the_source() -> None:
    source = Tensor([[1, 2, 3]], dtype=dtypes.int16)
    assert source.zeros_like().dtype == dtypes.int16 and source.zeros_like().tolist() == [[0, 0, 0]]
    assert source.ones_like(dtype=dtypes.float32).tolist() == [[1.0, 1.0, 1.0]]
    assert source.full_like(4).tolist() == [[4, 4, 4]]
    assert source.empty_like().shape == (1, 3)
    assert source.rand_like(dtype=dtypes.float32).shape == (1, 3)
    with pytest.raises(ValueError, match="float"):  # tinygrad: rand_like keeps the source's dtype, ints refused
        source.rand_like()


def test_shape_errors() -> None:
    with pytest.raises(ValueError, match="negative"):
        Tensor.zeros(2, -1)
    with pytest.raises(TypeError):
        Tensor.ones(2.5)


@pytest.mark.parametrize("args", [(5,), (2, 7), (1, 2, 0.25), (10, 0, -3), (3, 3), (0.5, 3), (-2.5, 2, 1.5)])
def test_arange_matches_numpy(args: tuple) -> None:
    tensor = Tensor.arange(*args)
    expected = np.arange(*args)
    assert tensor.dtype == (dtypes.float32 if any(isinstance(a, float) for a in args) else dtypes.int32)
    np.testing.assert_allclose(tensor.numpy(), expected, rtol=1e-6)


def test_arange_errors() -> None:
    with pytest.raises(ValueError, match="step"):
        Tensor.arange(0, 5, 0)


@pytest.mark.parametrize("args", [(0, 1, 5), (-3, 7, 1), (2, -2, 9), (0, 10, 0)])
def test_linspace_matches_numpy(args: tuple) -> None:
    np.testing.assert_allclose(Tensor.linspace(*args).numpy(), np.linspace(*args, dtype=np.float32), rtol=1e-6,
                               atol=1e-6)


@pytest.mark.parametrize("sizes", [(3,), (2, 4), (4, 2), (0,), (1, 1)])
def test_eye_matches_numpy(sizes: tuple[int, ...]) -> None:
    np.testing.assert_array_equal(Tensor.eye(*sizes).numpy(), np.eye(*sizes, dtype=np.float32))


# ---- random numbers ----
# Threefry's known answers and same seed, same numbers: on each device in tinycore/testing/test_ops.py.

def test_uniform_statistics() -> None:
    Tensor.manual_seed(0)
    values = Tensor.rand(20000).numpy()
    assert values.dtype == np.float32 and values.min() >= 0 and values.max() < 1
    assert abs(values.mean() - 0.5) < 0.01 and abs(values.var() - 1 / 12) < 0.005
    histogram, _ = np.histogram(values, bins=10, range=(0, 1))
    assert histogram.min() > 1800 and histogram.max() < 2200
    scaled = Tensor.uniform(5000, low=-2.0, high=3.0).numpy()
    assert scaled.min() >= -2 and scaled.max() < 3 and abs(scaled.mean() - 0.5) < 0.1


def test_normal_statistics() -> None:
    Tensor.manual_seed(1)
    values = Tensor.randn(20000).numpy()
    assert abs(values.mean()) < 0.03 and abs(values.std() - 1) < 0.03
    assert abs((np.abs(values) < 1).mean() - 0.6827) < 0.02
    shifted = Tensor.normal(10000, mean=3.0, std=0.5).numpy()
    assert abs(shifted.mean() - 3) < 0.03 and abs(shifted.std() - 0.5) < 0.02


def test_randint_range_and_dtype() -> None:
    Tensor.manual_seed(2)
    values = Tensor.randint(4000, low=-3, high=4)
    assert values.dtype == dtypes.int32
    array = values.numpy()
    assert set(np.unique(array).tolist()) == set(range(-3, 4))
    with pytest.raises(ValueError):
        Tensor.randint(3, low=5, high=5)


def test_rand_shapes_and_dtypes() -> None:
    assert Tensor.rand(2, 3).shape == (2, 3) and Tensor.rand((2, 3)).shape == (2, 3)
    assert Tensor.rand(0).shape == (0,)
    assert Tensor.rand(4, dtype=dtypes.float16).dtype == dtypes.float16
    assert Tensor.randn(2, 2, dtype=dtypes.float64).numpy().dtype == np.float64
    with pytest.raises(ValueError, match="float"):
        Tensor.rand(3, dtype=dtypes.int32)


def test_initialisers_have_the_documented_bounds() -> None:
    Tensor.manual_seed(3)
    fan_in = 50
    kaiming = Tensor.kaiming_uniform(200, fan_in).numpy()
    bound = math.sqrt(3) * math.sqrt(2 / (1 + 0.01 ** 2)) / math.sqrt(fan_in)
    assert np.abs(kaiming).max() <= bound and np.abs(kaiming).max() > 0.95 * bound
    glorot = Tensor.glorot_uniform(30, 20).numpy()
    bound = math.sqrt(6 / 50)
    assert np.abs(glorot).max() <= bound and np.abs(glorot).max() > 0.9 * bound
    scaled = Tensor.scaled_uniform(10, 10).numpy()
    assert np.abs(scaled).max() <= 0.1
    normal = Tensor.kaiming_normal(400, 100).numpy()
    assert abs(normal.std() - math.sqrt(2 / (1 + 0.01 ** 2)) / 10) < 0.01


def test_randperm_is_a_permutation() -> None:
    Tensor.manual_seed(4)
    assert sorted(Tensor.randperm(20).tolist()) == list(range(20))


def test_multinomial_follows_the_weights() -> None:
    Tensor.manual_seed(6)
    samples = Tensor([0.0, 1.0, 3.0]).multinomial(4000, replacement=True).numpy()
    counts = np.bincount(samples, minlength=3) / 4000
    assert counts[0] == 0 and abs(counts[1] - 0.25) < 0.03 and abs(counts[2] - 0.75) < 0.03
    batched = Tensor([[1.0, 0.0], [0.0, 1.0]]).multinomial()
    assert batched.tolist() == [[0], [1]]
    with pytest.raises(ValueError, match="replacement"):
        Tensor([1.0, 1.0]).multinomial(3)


def test_from_blob_copies_host_memory() -> None:
    values = np.arange(6, dtype=np.float32)
    tensor = Tensor.from_blob(values.ctypes.data, (2, 3), dtype=dtypes.float32)
    np.testing.assert_array_equal(tensor.numpy(), values.reshape(2, 3))
    assert Tensor.invalids(2, 2).shape == (2, 2)
