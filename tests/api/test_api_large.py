"""Tensors past 2**31 elements: kernels switch their index arithmetic to int64 when a buffer, a view or a loop
reaches that size. The cases are lazily expanded or computed ranges, so memory stays small."""
from __future__ import annotations

import gc

import numpy as np

from tinycore import Tensor, dtypes
from tinycore.helpers import GlobalCounters

PAST_INT32 = 2 ** 31 + 5


def test_arange_past_int32_is_int64_and_indexes_exactly() -> None:
    gc.collect()
    before = GlobalCounters.mem_used
    values = Tensor.arange(PAST_INT32)
    assert values.dtype == dtypes.int64 and values.shape == (PAST_INT32,)  # tinygrad picks int64 too
    assert values[PAST_INT32 - 1].item() == PAST_INT32 - 1
    assert values[-2].item() == PAST_INT32 - 2
    assert values[2 ** 31].item() == 2 ** 31
    assert values[7].item() == 7
    assert GlobalCounters.mem_used - before < 2 ** 20  # no buffer of 2**31 elements was made


def test_reduce_over_more_than_int32_elements() -> None:
    count = 2 ** 31 + 6
    ones = Tensor.ones(1, dtype=dtypes.uint8).expand(count)
    assert ones.cast(dtypes.int64).sum().item() == count


def test_strided_view_of_more_than_int32_elements_reduces_exactly() -> None:
    rows = Tensor([[1], [2], [3]], dtype=dtypes.int64).expand(3, 2 ** 30).reshape(-1)
    every_millionth = rows[::2 ** 20]  # element k reads flat index k * 2**20, up to 3 * 2**30
    assert every_millionth.shape == (3 * 2 ** 10,)
    assert every_millionth.sum().item() == (1 + 2 + 3) * 2 ** 10


def test_index_into_a_flattened_expanded_tensor() -> None:
    rows = Tensor([[1], [2], [3]], dtype=dtypes.int32).expand(3, 2 ** 30).reshape(-1)  # 3 * 2**30 elements
    assert rows.shape == (3 * 2 ** 30,)
    assert rows[2 ** 31 + 7].item() == 3  # element 2**31 + 7 lies in row 2
    assert rows[2 ** 30 - 1].item() == 1 and rows[2 ** 30].item() == 2


def test_long_ranges_below_int32_match_numpy_and_stay_lazy() -> None:
    np.testing.assert_array_equal(Tensor.arange(200_003).numpy(), np.arange(200_003, dtype=np.int32))
    np.testing.assert_array_equal(Tensor.arange(5, 400_000, 3).numpy(), np.arange(5, 400_000, 3, dtype=np.int32))
    gc.collect()
    before = GlobalCounters.mem_used
    draws = Tensor.rand(4_000_000)
    assert GlobalCounters.mem_used - before < 2 ** 20  # the draw's counters are not materialised up front
    assert draws.shape == (4_000_000,)
