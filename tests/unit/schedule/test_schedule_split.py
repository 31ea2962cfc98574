"""Kernels that would take more buffers than their device allows are split into several kernels.

The CPU renderer declares no limit; each test gives it a low `max_buffers` (outputs and inputs together) and checks
the schedule (every kernel within the limit, the number of kernels counted by hand) and the values against numpy.
"""
from __future__ import annotations

from collections.abc import Iterator
from functools import reduce

import numpy as np
import pytest

from tinycore import Tensor
from tinycore.counters import GlobalCounters
from tinycore.engine.memory import device_facts
from tinycore.schedule import ScheduleItem, clear_schedule_cache, create_schedule
from tinycore.schedule.split import KernelBufferLimitError, device_buffer_limit
from tinycore.uop.ops import Ops

pytest.importorskip("tiny_cpu", reason="the CPU device plugin (pip install -e plugins/tiny-cpu) runs these tests")


@pytest.fixture
def buffer_limit(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """The CPU renderer, whose `max_buffers` a test sets; cached schedules are forgotten before and after."""
    from tinycore.device.registry import Device
    renderer = Device["CPU"].renderer
    clear_schedule_cache()
    with monkeypatch.context() as patch:
        patch.setattr(renderer, "max_buffers", None, raising=False)
        yield patch
    clear_schedule_cache()


def set_limit(patch: pytest.MonkeyPatch, limit: int | None) -> None:
    """Make CPU kernels take at most `limit` buffers."""
    from tinycore.device.registry import Device
    patch.setattr(Device["CPU"].renderer, "max_buffers", limit, raising=False)
    clear_schedule_cache()


def kernels(*tensors: Tensor) -> list[ScheduleItem]:
    """The kernels (not copies) of the schedule realizing `tensors` together."""
    schedule = create_schedule([tensor.uop for tensor in tensors], device_facts)
    return [item for item in schedule.items if item.ast.op is not Ops.COPY]


def realized(*arrays: np.ndarray) -> list[Tensor]:
    """Each array as a realized CPU tensor."""
    return [Tensor(array, device="CPU").realize() for array in arrays]


def normals(count: int, *shape: int, seed: int = 0) -> list[np.ndarray]:
    """`count` float32 arrays of standard normal values."""
    generator = np.random.default_rng(seed)
    return [generator.standard_normal(shape).astype(np.float32) for _ in range(count)]


def integers(count: int, *shape: int, seed: int = 0) -> list[np.ndarray]:
    """`count` int32 arrays of small integers."""
    generator = np.random.default_rng(seed)
    return [generator.integers(-50, 50, shape).astype(np.int32) for _ in range(count)]


def total(items: list) -> object:
    """items[0] + items[1] + ... added left to right (numpy arrays or tensors)."""
    return reduce(lambda first, second: first + second, items)


def test_the_cpu_renderer_declares_no_limit() -> None:
    from tinycore.device.registry import Device
    assert getattr(type(Device["CPU"].renderer), "max_buffers", "missing") is None
    assert device_buffer_limit(("CPU", "CPU"), device_facts) is None


def test_sum_of_twelve_buffers_is_one_kernel_without_a_limit(buffer_limit: pytest.MonkeyPatch) -> None:
    arrays = normals(12, 6)
    items = kernels(total(realized(*arrays)))
    assert len(items) == 1 and len(items[0].buffers) == 13


def test_sum_of_twelve_buffers_splits_within_four(buffer_limit: pytest.MonkeyPatch) -> None:
    set_limit(buffer_limit, 4)
    arrays = normals(12, 6)
    result = total(realized(*arrays))
    items = kernels(result)
    assert all(len(item.buffers) <= 4 for item in items)
    # each kernel has 3 input slots: 12 inputs and k - 1 intermediates need 3k >= 11 + k, so k = 6 at best
    assert len(items) == 6
    GlobalCounters.reset()
    value = result.numpy()
    assert GlobalCounters.kernel_count == 6
    np.testing.assert_array_equal(value, total(arrays))  # same float32 adds in the same order: bit for bit


@pytest.mark.parametrize("limit, expected_kernels", [(3, 11), (6, 3), (13, 1)])
def test_the_number_of_kernels_is_the_fewest_that_fit(buffer_limit: pytest.MonkeyPatch, limit: int,
                                                      expected_kernels: int) -> None:
    set_limit(buffer_limit, limit)
    arrays = integers(12, 5)
    result = total(realized(*arrays))
    items = kernels(result)
    assert all(len(item.buffers) <= limit for item in items)
    assert len(items) == expected_kernels  # 12 inputs + k - 1 intermediates in k kernels of limit - 1 inputs
    np.testing.assert_array_equal(result.numpy(), total(arrays))


def test_a_reduce_over_many_buffers_splits(buffer_limit: pytest.MonkeyPatch) -> None:
    set_limit(buffer_limit, 4)
    arrays = integers(8, 5, 7, seed=1)
    tensors = realized(*arrays)
    products = [tensors[index] * tensors[index + 1] for index in range(0, 8, 2)]
    result = total(products).sum(axis=1)
    items = kernels(result)
    assert len(items) > 1 and all(len(item.buffers) <= 4 for item in items)
    expected = total([arrays[index] * arrays[index + 1] for index in range(0, 8, 2)]).sum(axis=1)
    np.testing.assert_array_equal(result.numpy(), expected)


def test_reduces_of_many_buffers_feeding_one_kernel(buffer_limit: pytest.MonkeyPatch) -> None:
    set_limit(buffer_limit, 4)
    arrays = normals(9, 4, 6, seed=2)
    tensors = realized(*arrays)
    result = total(tensors[:5]).max(axis=0) + total(tensors[5:]).sum(axis=0) * tensors[0][1]
    items = kernels(result)
    assert all(len(item.buffers) <= 4 for item in items)
    expected = total(arrays[:5]).max(axis=0) + total(arrays[5:]).sum(axis=0) * arrays[0][1]
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_broadcast_operands_split(buffer_limit: pytest.MonkeyPatch) -> None:
    set_limit(buffer_limit, 4)
    generator = np.random.default_rng(3)
    shapes = [(4, 1), (1, 5), (5,), (4, 5), (1, 1), (4, 1), (5,), (4, 5), (1, 5), (4, 5)]
    arrays = [generator.standard_normal(shape).astype(np.float32) for shape in shapes]
    result = total(realized(*arrays))
    items = kernels(result)
    assert len(items) == 5 and all(len(item.buffers) <= 4 for item in items)  # 10 inputs + 4 intermediates
    np.testing.assert_array_equal(result.numpy(), total(arrays))  # numpy broadcasts and adds in the same order


def test_padded_and_permuted_operands_split(buffer_limit: pytest.MonkeyPatch) -> None:
    set_limit(buffer_limit, 3)
    arrays = integers(6, 3, 4, seed=4)
    tensors = realized(*arrays)
    result = (tensors[0] + tensors[1]).pad(((1, 0), (0, 2))) * (tensors[2] - tensors[3]).pad(((0, 1), (2, 0))) \
        + (tensors[4] * tensors[5]).permute(1, 0).reshape(3, 4).pad(((1, 0), (1, 1)))
    items = kernels(result)
    assert all(len(item.buffers) <= 3 for item in items)
    expected = np.pad(arrays[0] + arrays[1], ((1, 0), (0, 2))) * np.pad(arrays[2] - arrays[3], ((0, 1), (2, 0))) \
        + np.pad((arrays[4] * arrays[5]).T.reshape(3, 4), ((1, 0), (1, 1)))
    np.testing.assert_array_equal(result.numpy(), expected)


def test_where_of_computed_operands_splits(buffer_limit: pytest.MonkeyPatch) -> None:
    set_limit(buffer_limit, 4)
    arrays = normals(8, 10, seed=5)
    tensors = realized(*arrays)
    result = (tensors[0] > tensors[1]).where(tensors[2] + tensors[3] + tensors[4], tensors[5] * tensors[6] * tensors[7])
    assert all(len(item.buffers) <= 4 for item in kernels(result))
    expected = np.where(arrays[0] > arrays[1], arrays[2] + arrays[3] + arrays[4], arrays[5] * arrays[6] * arrays[7])
    np.testing.assert_array_equal(result.numpy(), expected)


def test_assign_of_many_buffers_splits(buffer_limit: pytest.MonkeyPatch) -> None:
    set_limit(buffer_limit, 4)
    arrays = integers(7, 6, seed=6)
    tensors = realized(*arrays)
    target = Tensor(arrays[0].copy(), device="CPU").realize()
    target.assign(target + total(tensors[1:]) * 2).realize()
    np.testing.assert_array_equal(target.numpy(), arrays[0] + total(arrays[1:]) * 2)


def test_two_outputs_sharing_inputs(buffer_limit: pytest.MonkeyPatch) -> None:
    set_limit(buffer_limit, 4)
    arrays = integers(10, 8, seed=7)
    tensors = realized(*arrays)
    first, second = total(tensors), total(tensors[::-1]) * tensors[3]
    assert all(len(item.buffers) <= 4 for item in kernels(first, second))
    Tensor.realize(first, second)
    np.testing.assert_array_equal(first.numpy(), total(arrays))
    np.testing.assert_array_equal(second.numpy(), total(arrays[::-1]) * arrays[3])


def test_an_op_of_more_buffers_than_the_limit_is_refused(buffer_limit: pytest.MonkeyPatch) -> None:
    set_limit(buffer_limit, 2)
    first, second = realized(*normals(2, 3))
    with pytest.raises(KernelBufferLimitError, match=r"ADD on CPU reads 2 different buffers.*at most 2 buffers"):
        (first + second).numpy()


def test_a_where_of_three_buffers_needs_four(buffer_limit: pytest.MonkeyPatch) -> None:
    condition = Tensor(np.array([True, False, True]), device="CPU").realize()
    arrays = normals(2, 3, seed=8)
    first, second = realized(*arrays)
    set_limit(buffer_limit, 3)
    with pytest.raises(KernelBufferLimitError, match=r"WHERE on CPU reads 3 different buffers.*Tensor.to"):
        condition.where(first, second).numpy()
    set_limit(buffer_limit, 4)
    np.testing.assert_array_equal(condition.where(first, second).numpy(),
                                  np.where([True, False, True], arrays[0], arrays[1]))
