"""Tensor(flat list or tuple of Python numbers): values and dtypes against numpy, the default dtypes included."""
import numpy as np
import pytest

from tinycore import Tensor, dtypes


@pytest.mark.parametrize("data,dtype,expected", [
    ([1.0, -2.5, 3.0], None, np.array([1.0, -2.5, 3.0], dtype=np.float32)),
    ((1.0, -2.5, 3.0), None, np.array([1.0, -2.5, 3.0], dtype=np.float32)),
    ([1, -2, 3], None, np.array([1, -2, 3], dtype=np.int32)),
    ([True, False], None, np.array([True, False])),
    ([1, 2.5, True], None, np.array([1.0, 2.5, 1.0], dtype=np.float32)),
    ([1, 2, 3], dtypes.float16, np.array([1, 2, 3], dtype=np.float16)),
    ([1.5, -2.0], dtypes.int8, np.array([1, -2], dtype=np.int8)),
    ([1.5, -2.25], dtypes.bfloat16, np.array([1.5, -2.25], dtype=np.float32)),
    ([], None, np.array([], dtype=np.float32)),
    # values struct cannot pack as they are: converted and wrapped as numpy's astype does
    ([2 ** 40 + 5, -1], None, np.array([2 ** 40 + 5, -1]).astype(np.int32)),
    ([300, -129], dtypes.int8, np.array([300, -129]).astype(np.int8)),
    ([-1, 256], dtypes.uint8, np.array([-1, 256]).astype(np.uint8)),
])
def test_flat_data_matches_numpy(data: list, dtype: object, expected: np.ndarray) -> None:
    tensor = Tensor(data, dtype=dtype)
    assert tensor.shape == (len(data),)
    if dtype is not None:
        assert tensor.dtype == dtype
    got = tensor.numpy()
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)


def test_new_tensors_on_two_devices_hold_their_own_data() -> None:
    # the first tensor of a device takes the general buffer path, the later ones the direct one: each must get its
    # own buffer on its own device, filled with its own values, including empty ones and bytes
    made = []
    for step in range(4):
        for device in ("CPU", "CPU:1"):
            values = [float(step * 10 + index) for index in range(step + 1)]
            made.append((Tensor(values, device=device), device, np.array(values, dtype=np.float32)))
            made.append((Tensor(bytes([step, 255 - step]), device=device), device, np.array([step, 255 - step],
                                                                                            dtype=np.uint8)))
        made.append((Tensor([], device="CPU"), "CPU", np.array([], dtype=np.float32)))
    for tensor, device, expected in made:
        assert tensor.device == device
        got = tensor.numpy()
        assert got.dtype == expected.dtype
        np.testing.assert_array_equal(got, expected)
    buffers = [tensor.uop.buffer for tensor, _, _ in made]
    assert len({id(buffer) for buffer in buffers}) == len(buffers)
    assert all(buffer.device == device for buffer, (_, device, _) in zip(buffers, made, strict=True))


def test_many_lengths_and_dtypes_pack_as_numpy() -> None:
    # more (length, dtype) pairs than the kept packers: the kept ones are dropped and made again along the way
    for length in range(0, 300, 1):
        for dtype, numpy_dtype in ((dtypes.float32, np.float32), (dtypes.int16, np.int16)):
            values = [(index * 7 - length) % 251 - 100 for index in range(length)]
            np.testing.assert_array_equal(Tensor(values, dtype=dtype).numpy(), np.array(values, dtype=numpy_dtype))
    np.testing.assert_array_equal(Tensor([1.0, 2.5]).numpy(), np.array([1.0, 2.5], dtype=np.float32))


def test_list_subclasses_tuples_and_other_data_still_take_their_own_paths() -> None:
    class Values(list):
        """A list subclass: made like a list (the list test comes first in the constructor)."""

    np.testing.assert_array_equal(Tensor(Values([1.5, 2.5])).numpy(), np.array([1.5, 2.5], dtype=np.float32))
    np.testing.assert_array_equal(Tensor(((1, 2), (3, 4))).numpy(), np.array([[1, 2], [3, 4]], dtype=np.int32))
    np.testing.assert_array_equal(Tensor(b"\x01\x02").numpy(), np.array([1, 2], dtype=np.uint8))
    assert Tensor(None).shape == (0,) and Tensor(2.5).numpy() == np.float32(2.5)
    with pytest.raises(TypeError, match="cannot make a Tensor from object"):
        Tensor(object())


def test_flat_lists_follow_the_default_float_and_a_device_given() -> None:
    from tinycore.helpers import Context
    with Context(DEFAULT_FLOAT="HALF"):
        half = Tensor([1.5, -2.0])
        assert half.dtype == dtypes.float16
        np.testing.assert_array_equal(half.numpy(), np.array([1.5, -2.0], dtype=np.float16))
    assert Tensor([1.5]).dtype == dtypes.float32
    other = Tensor([4.0, 5.0], device="CPU:1")
    assert other.device == "CPU:1"
    np.testing.assert_array_equal(other.numpy(), np.array([4.0, 5.0], dtype=np.float32))


@pytest.mark.parametrize("scalar", [0.0, -0.0, 1, 2.5, -3, float("inf")])
def test_scalar_operands_repeated_match_numpy(scalar: float) -> None:
    # `x + c` and `x * c` keep each (scalar, dtype, device, shape) constant: a repeat reads it again, and the float
    # zeros (one dict key, different constants) are built each time
    values = np.array([-0.0, 0.0, 1.5, -2.0], dtype=np.float32)
    for _ in range(3):
        with np.errstate(invalid="ignore"):  # 0 * inf: nan in both
            cases = ((Tensor(values) + scalar, values + np.float32(scalar)),
                     (Tensor(values) * scalar, values * np.float32(scalar)),
                     (scalar + Tensor(values), np.float32(scalar) + values),
                     (scalar * Tensor(values), np.float32(scalar) * values))
        for built, expected in cases:
            got = built.numpy()
            np.testing.assert_array_equal(got, expected)
            numbers = ~np.isnan(expected)  # a nan's sign bit is not part of IEEE's answer
            np.testing.assert_array_equal(np.signbit(got[numbers]), np.signbit(expected[numbers]))
    integers = np.array([3, -4], dtype=np.int32)
    if float(scalar).is_integer() and not isinstance(scalar, float):
        np.testing.assert_array_equal((Tensor(integers) * scalar).numpy(), integers * np.int32(scalar))
