"""numpy oracles of the conformance checks that once needed torch: gradients by central differences in float64, and
torch's gather, scatter and scatter_reduce semantics written with numpy's indexing.

torch stays optional: where it is installed, checks also compare with it (`optional_torch`), but no check needs it.
"""
from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import numpy

NumpyFunction = Callable[..., numpy.ndarray]


def optional_torch() -> ModuleType | None:
    """torch when it is installed (for the extra comparisons it allows), else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch


def numeric_gradients(function: NumpyFunction, arrays: list[numpy.ndarray], step: float = 1e-6,
                      ) -> list[numpy.ndarray]:
    """The gradient of scalar `function(*arrays)` with respect to each array, by central differences in float64.

    The step is small against the inputs' scale (the samples lie in [-3, 3)), so for smooth functions the error is
    about step**2 times the third derivative plus float64 rounding over the step (1e-10 / step), both far below the
    float32 tolerances the checks use. At a kink (relu, max) the inputs must stay further than `step` from it.
    """
    points = [numpy.array(array, dtype=numpy.float64) for array in arrays]
    gradients: list[numpy.ndarray] = []
    for point in points:
        gradient = numpy.zeros_like(point)
        flat, flat_gradient = point.reshape(-1), gradient.reshape(-1)
        for position in range(flat.size):
            saved = flat[position]
            flat[position] = saved + step
            above = float(function(*points))
            flat[position] = saved - step
            below = float(function(*points))
            flat[position] = saved
            flat_gradient[position] = (above - below) / (2 * step)
        gradients.append(gradient.astype(numpy.asarray(arrays[len(gradients)]).dtype))
    return gradients


def _along(index: numpy.ndarray, dim: int) -> tuple[numpy.ndarray, ...]:
    """The full index tuple that addresses, for each element of `index`, the position `index` names along `dim` and
    the element's own position along every other axis (torch's scatter and gather addressing)."""
    grids: list[numpy.ndarray] = list(numpy.indices(index.shape, sparse=True))
    grids[dim] = index.astype(numpy.int64)
    return tuple(grids)


def gather(data: numpy.ndarray, dim: int, index: numpy.ndarray) -> numpy.ndarray:
    """torch.gather: out[i][j][k] = data[index[i][j][k]][j][k] for dim 0 (index may be smaller on other axes)."""
    return data[_along(index % data.shape[dim], dim)]


def scatter(base: numpy.ndarray, dim: int, index: numpy.ndarray, source: numpy.ndarray | float) -> numpy.ndarray:
    """torch.scatter without reduce: base with base[index[i][j]][j] = source[i][j] for dim 0 (distinct indices)."""
    result = base.copy()
    values = source if numpy.isscalar(source) else numpy.asarray(source)[tuple(slice(0, n) for n in index.shape)]
    result[_along(index, dim)] = values
    return result


def scatter_reduce(base: numpy.ndarray, dim: int, index: numpy.ndarray, source: numpy.ndarray, reduce: str,
                   include_self: bool = True) -> numpy.ndarray:
    """torch.scatter_reduce: each source value combined into base at index (reduce is sum, prod, mean, amax or amin);
    without include_self, the positions some value reaches start from that value instead of base's. An integer mean
    rounds down, as torch's does."""
    positions = _along(index, dim)
    values = numpy.asarray(source)[tuple(slice(0, n) for n in index.shape)]
    reached = numpy.zeros(base.shape, bool)
    reached[positions] = True
    identity = {"sum": 0, "mean": 0, "prod": 1}
    if reduce in identity:
        start = numpy.full_like(base, identity[reduce])
    else:
        info = numpy.finfo(base.dtype) if base.dtype.kind == "f" else numpy.iinfo(base.dtype)
        start = numpy.full_like(base, info.min if reduce == "amax" else info.max)
    combined = base.copy() if include_self else numpy.where(reached, start, base)
    ufunc = {"sum": numpy.add, "mean": numpy.add, "prod": numpy.multiply, "amax": numpy.maximum,
             "amin": numpy.minimum}[reduce]
    ufunc.at(combined, positions, values)
    if reduce == "mean":
        counts = numpy.zeros(base.shape, numpy.int64)
        numpy.add.at(counts, positions, 1)
        counts += 1 if include_self else 0
        counts = numpy.maximum(counts, 1)
        if base.dtype.kind == "f":
            combined = (combined / counts).astype(base.dtype)
        else:
            combined = numpy.floor_divide(combined, counts).astype(base.dtype)
        combined = numpy.where(reached, combined, base)
    return combined


__all__ = ["optional_torch", "numeric_gradients", "gather", "scatter", "scatter_reduce"]
