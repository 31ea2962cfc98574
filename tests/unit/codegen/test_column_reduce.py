"""Reduces over a strided axis (sums over rows: batchnorm's mean and variance) get several vectors of columns as
accumulators on the CPU, and their values equal numpy's."""
from __future__ import annotations

import numpy as np
import pytest

from tinycore import Tensor
from tinycore.codegen import OptOps, optimize_kernel
from tinycore.codegen.optimize import COLUMN_VECTORS, vector_width
from tinycore.device import Device
from tinycore.engine.memory import device_facts
from tinycore.schedule import create_schedule


def _upcasts(tensor: Tensor) -> list[list[int]]:
    """The UPCAST amounts the CPU heuristic chooses for each kernel of `tensor`."""
    renderer = Device["CPU"].renderer
    items = [item for item in create_schedule([tensor.uop], device_facts).items if not item.is_copy]
    return [[opt.amount for opt in optimize_kernel(item.ast, renderer).applied if opt.op is OptOps.UPCAST]
            for item in items]


def test_sum_over_rows_takes_several_vectors_of_columns() -> None:
    values = np.random.default_rng(0).standard_normal((256, 512), dtype=np.float32)
    width = vector_width(Device["CPU"].renderer, Tensor(values).dtype)
    assert _upcasts(Tensor(values).sum(0)) == [[COLUMN_VECTORS * width]]
    # a sum along the contiguous axis keeps vector accumulators along the reduce instead
    assert _upcasts(Tensor(values).sum(1)) == [[]]


@pytest.mark.parametrize("shape", [(333, 512), (64, 1000), (1000, 48), (7, 24)])
def test_reduces_over_rows_match_numpy(shape: tuple[int, int]) -> None:
    values = np.random.default_rng(1).standard_normal(shape, dtype=np.float32) * 3 + 1
    tensor = Tensor(values)
    np.testing.assert_allclose(tensor.sum(0).numpy(), values.astype(np.float64).sum(0), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(tensor.var(0).numpy(), values.astype(np.float64).var(0, ddof=1), rtol=1e-4)
    np.testing.assert_array_equal(tensor.max(0).numpy(), values.max(0))
    np.testing.assert_allclose((tensor * tensor).mean(0).numpy(), (values.astype(np.float64) ** 2).mean(0),
                               rtol=1e-5)
