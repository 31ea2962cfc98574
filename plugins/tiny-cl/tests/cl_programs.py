"""Helpers of the CL tests: hand-built linear programs and running OpenCL C sources on the CL device."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy

from tinycore.dtype import DType
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp


def glob(position: int, dtype: DType, size: int) -> UOp:
    """A DEFINE_GLOBAL buffer parameter."""
    return UOp(Ops.DEFINE_GLOBAL, dtype.ptr(size), (), position)


def linear(*roots: UOp) -> list[UOp]:
    """The nodes under `roots` in a valid execution order (each root's toposort, first appearance kept)."""
    order: dict[UOp, None] = {}
    for root in roots:
        for node in root.toposort:
            order.setdefault(node, None)
    return list(order)


def run_source(device: Any, name: str, source: str, arrays: Sequence[numpy.ndarray], global_size: Sequence[int],
               local_size: Sequence[int] | None = (1, 1, 1), vals: Sequence[int] = ()) -> list[numpy.ndarray]:
    """Build `source` on the device, run kernel `name` over copies of `arrays` and return every buffer afterwards."""
    library = device.compiler.compile_cached(source)
    program = device.runtime(name, library)
    handles = []
    for array in arrays:
        handle = device.allocator.alloc(max(array.nbytes, 1))
        device.allocator.copyin(handle, memoryview(numpy.ascontiguousarray(array)).cast("B"))
        handles.append(handle)
    program(*handles, global_size=global_size, local_size=local_size, vals=vals, wait=True)
    results = []
    for array, handle in zip(arrays, handles, strict=True):
        result = numpy.empty_like(array)
        device.allocator.copyout(memoryview(result).cast("B"), handle)
        device.allocator.free(handle, max(array.nbytes, 1))
        results.append(result)
    return results
