"""`x + c`, `c + x`, `x * c` and `c * x` for a Python int or float c (built without a Tensor for the constant):
values, dtype promotion, broadcasting and gradients against numpy and hand-computed values."""
import numpy as np
import pytest

from tinycore import Tensor, dtypes

CASES = [
    ([1.5, -2.0, 3.25], dtypes.float32, np.float32, 2, np.float32),
    ([1.5, -2.0, 3.25], dtypes.float32, np.float32, 0.5, np.float32),
    ([1.5, -2.0, 3.25], dtypes.float16, np.float16, 3, np.float16),
    ([1.5, -2.0, 3.25], dtypes.float16, np.float16, 0.25, np.float16),
    ([1, -2, 7], dtypes.int32, np.int32, 3, np.int32),
    ([1, -2, 7], dtypes.int32, np.int32, 0.5, np.float32),
    ([1, -2, 7], dtypes.int8, np.int8, 5, np.int8),
    ([True, False, True], dtypes.bool, np.bool_, 2, np.int32),
    ([True, False, True], dtypes.bool, np.bool_, 1.5, np.float32),
]


@pytest.mark.parametrize("values,dtype,numpy_dtype,scalar,expected_dtype", CASES)
@pytest.mark.parametrize("operation", ["add", "radd", "mul", "rmul"])
def test_scalar_operand_matches_numpy(values: list, dtype: object, numpy_dtype: type, scalar: float,
                                      expected_dtype: type, operation: str) -> None:
    tensor = Tensor(values, dtype=dtype)
    array = np.array(values, dtype=numpy_dtype).astype(expected_dtype)
    result = {"add": lambda: tensor + scalar, "radd": lambda: scalar + tensor,
              "mul": lambda: tensor * scalar, "rmul": lambda: scalar * tensor}[operation]()
    expected = {"add": array + expected_dtype(scalar), "radd": expected_dtype(scalar) + array,
                "mul": array * expected_dtype(scalar), "rmul": expected_dtype(scalar) * array}[operation]
    got = result.numpy()
    assert got.dtype == np.dtype(expected_dtype)
    np.testing.assert_allclose(got, expected, rtol=1e-3)
    np.testing.assert_allclose(result.realize().numpy(), expected, rtol=1e-3)  # the eager shortcut's run


def test_scalar_operand_keeps_the_shape() -> None:
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    tensor = Tensor(array)[1:, ::2]
    np.testing.assert_allclose((tensor + 1).numpy(), array[1:, ::2] + 1)
    np.testing.assert_allclose((2.5 * tensor).numpy(), 2.5 * array[1:, ::2])
    assert (Tensor(3.0) + 1).shape == () and float((Tensor(3.0) + 1).item()) == 4.0


def test_scalar_operand_gradients() -> None:
    tensor = Tensor([1.0, -2.0, 4.0], requires_grad=True)
    ((tensor * 3 + 1) * (2 + tensor)).sum().backward()
    # d/dx (3x + 1)(x + 2) = 6x + 7
    assert tensor.grad is not None
    np.testing.assert_allclose(tensor.grad.numpy(), 6 * np.array([1.0, -2.0, 4.0]) + 7)
    assert (tensor + 1).requires_grad and not (Tensor([1.0]) * 2).requires_grad



def test_scalar_operand_signed_zero_nan_and_wrapping_match_numpy() -> None:
    zeros = np.array([-0.0, 0.0], dtype=np.float32)
    for scalar in (0.0, -0.0):
        got = (Tensor(zeros) + scalar).numpy()
        np.testing.assert_array_equal(np.signbit(got), np.signbit(zeros + np.float32(scalar)))
    assert np.isnan((Tensor([1.0, 2.0]) * float("nan")).numpy()).all()
    np.testing.assert_array_equal((Tensor([100, -100], dtype=dtypes.int8) + 100).numpy(),
                                  np.array([100, -100], dtype=np.int8) + np.int8(100))
    np.testing.assert_array_equal((Tensor([250], dtype=dtypes.uint8) * 2).numpy(), np.array([250], np.uint8) * 2)
    np.testing.assert_allclose((Tensor([1.5], dtype=dtypes.float64) + 1e-12).numpy(), np.array([1.5]) + 1e-12,
                               rtol=0, atol=0)


def test_scalar_operand_gradients_of_undecided_leaves_and_under_no_grad() -> None:
    leaf = Tensor([1.0, 2.0])  # requires_grad None: backward still reaches it, as in tinygrad
    weight = Tensor([3.0, 4.0], requires_grad=True)
    ((leaf * 2 + 1) * weight).sum().backward()
    assert leaf.grad is not None and weight.grad is not None
    np.testing.assert_allclose(leaf.grad.numpy(), [6.0, 8.0])
    np.testing.assert_allclose(weight.grad.numpy(), [3.0, 5.0])
    with Tensor.inference_mode():
        detached = weight * 2 + 1
    assert not detached.requires_grad
    np.testing.assert_allclose(detached.numpy(), [7.0, 9.0])


def test_scalar_operand_on_several_devices_matches_numpy() -> None:
    array = np.arange(4, dtype=np.float32)
    sharded = Tensor(array).shard(("CPU", "CPU:1"), axis=0)
    np.testing.assert_allclose((sharded + 1).numpy(), array + 1)
    np.testing.assert_allclose((3 * sharded).numpy(), 3 * array)
