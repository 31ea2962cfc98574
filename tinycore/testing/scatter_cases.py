"""Scatter reductions with many repeated indices checked against numpy's `ufunc.at`, for GPU plugins whose renderers
declare atomics (`atomic_dtypes`): run on the device under test (a MOCK GPU in CI), each case says whether the
device's answer equals numpy's exactly. The values are small integers, so every order of combining gives the same
result and an exact comparison is fair even for float16."""
from __future__ import annotations

import numpy

from tinycore.codegen import lower_to_program
from tinycore.device.registry import Device
from tinycore.tensor import Tensor
from tinycore.testing.kernel_cases import kernels_of

REDUCTIONS = (("sum", numpy.add), ("amax", numpy.maximum), ("amin", numpy.minimum), ("prod", numpy.multiply))
"""scatter_reduce's names and the numpy ufunc whose `at` gives the expected answer."""


def scatter_reduction_results(numpy_dtypes: tuple[type[numpy.generic], ...],
                              seed: int = 3) -> list[tuple[str, bool]]:
    """For every dtype and reduction: 3,000 values scattered into 23 elements (negative indices included), then a
    gather's gradient (a scatter-add of 400 rows into 50): (case name, whether the result equals numpy's)."""
    rng = numpy.random.default_rng(seed)
    results: list[tuple[str, bool]] = []
    for numpy_dtype in numpy_dtypes:
        half = numpy_dtype is numpy.float16  # sums of small integers that half holds exactly
        for reduce, ufunc in REDUCTIONS:
            index = rng.integers(-23, 23, 3000).astype(numpy.int32)
            if reduce == "prod":
                values = rng.integers(0, 2, 3000) * 2 - 1
            else:
                values = rng.integers(-3 if half else -50, 4 if half else 50, 3000)
            values = values.astype(numpy_dtype)
            base = rng.integers(1, 3, 23).astype(numpy_dtype)
            expected = base.copy()
            ufunc.at(expected, index, values)
            got = Tensor(base).scatter_reduce(0, Tensor(index), Tensor(values), reduce).numpy()
            results.append((f"{numpy_dtype.__name__} {reduce}", bool(numpy.array_equal(got, expected))))
    table = rng.integers(-8, 8, (50, 6)).astype(numpy.float32)
    rows = rng.integers(0, 50, 400).astype(numpy.int32)
    weights = Tensor(table, requires_grad=True)
    weights[Tensor(rows)].sum().backward()
    gradient = numpy.zeros_like(table)
    numpy.add.at(gradient, rows, numpy.ones((400, 6), numpy.float32))
    assert weights.grad is not None
    results.append(("gather gradient", bool(numpy.array_equal(weights.grad.numpy(), gradient))))
    return results


def scatter_sum_source(device: str) -> str:
    """The source the device's renderer writes for a float32 scatter sum of 400 rows of 6 into 50 (to check that
    the atomic form was chosen)."""
    rng = numpy.random.default_rng(0)
    rows = rng.integers(0, 50, 400).astype(numpy.int32)
    index = Tensor(rows).reshape(400, 1).expand(400, 6)
    scatter = Tensor.zeros(50, 6).contiguous().scatter_reduce(0, index, Tensor.ones(400, 6), "sum")
    return lower_to_program(kernels_of(scatter)[-1].ast, Device[device].renderer).src
