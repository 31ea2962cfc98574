"""The MOCK GPU's interpreter for kernels with tensor-core instructions: the core's interpreter, with the work-items
of a warp meeting at each `tc_mma_f16` / `tc_mma_bf16` (a warp-collective op: every lane's result depends on every
lane's fragment).

Each work-item runs as a generator, as in the core's interpreter; at an mma it yields its 12 fragment values and
waits. Once all 32 lanes of the warp are there, the 16 x 16 A tile and 16 x 8 B tile are put together from the
fragments (positions in tiny_nv.tensor_core), multiplied with float32 products summed in float64 and rounded to float32,
and each lane receives its 4 accumulators.
"""
from __future__ import annotations

import itertools
from collections.abc import Generator, Mapping, Sequence
from typing import Any

import numpy

from tiny_nv.tensor_core import MMA_PREFIX
from tinycore.codegen.interpreter import InterpreterError, Program
from tinycore.dtype import PtrDType
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp

WARP = 32


def warp_mma(fragments: list[list[float]]) -> list[tuple[float, float, float, float]]:
    """The m16n8k16 products of 32 lanes' fragments (8 of A, then 4 of B each): each lane's 4 accumulators."""
    a, b = numpy.zeros((16, 16)), numpy.zeros((16, 8))
    for lane, values in enumerate(fragments):
        group, thread = lane // 4, lane % 4
        for j in range(8):
            a[group + 8 * ((j >> 1) & 1), 2 * thread + (j & 1) + 8 * (j >> 2)] = values[j]
        for j in range(4):
            b[2 * thread + (j & 1) + 8 * (j >> 1), group] = values[8 + j]
    product = (a @ b).astype(numpy.float32)
    return [tuple(float(product[lane // 4 + 8 * (i >> 1), 2 * (lane % 4) + (i & 1)]) for i in range(4))  # type: ignore
            for lane in range(WARP)]


class WarpProgram(Program):
    """A linear program whose work-groups may execute warp-collective mma ops (see the module docstring)."""

    def __init__(self, uops: Sequence[UOp]):
        super().__init__(uops)
        self.has_mma = any(uop.op is Ops.CUSTOM and str(uop.arg).startswith(MMA_PREFIX) for uop in self.uops)

    def __call__(self, buffers: Sequence[Any], var_vals: Mapping[str, int] | None = None) -> None:
        """Run every work-item; warps meet at each mma."""
        if not self.has_mma:
            super().__call__(buffers, var_vals)
            return
        values = dict(var_vals or {})
        lists = [numpy.asarray(b).reshape(-1).tolist() if isinstance(b, numpy.ndarray) else b for b in buffers]
        sizes = {special: range(self._evaluate_size(special.src[0], values) if special.src else 1)
                 for special in self.specials}
        locals_ = [special for special in self.specials if str(special.arg).startswith("lidx")]
        groups = [special for special in self.specials if special not in locals_]
        block = [len(sizes[special]) for special in locals_]
        if len(block) != 1 or block[0] % WARP:
            raise InterpreterError("a kernel with tensor-core ops must run whole warps (lidx0 a multiple of 32) per "
                                   "work-group")
        for group in itertools.product(*(sizes[special] for special in groups)):
            shared: dict[UOp, list[Any]] = {}
            threads = [self._run_lane(lists, values, dict(zip(groups + locals_, group + (lane,), strict=True)),
                                      shared) for lane in range(block[0])]
            replies: list[Any] = [None] * block[0]
            while threads:
                requests = []
                for thread, reply in zip(threads, replies, strict=True):
                    try:
                        requests.append(thread.send(reply))
                    except StopIteration:
                        requests.append(None)
                live = [request for request in requests if request is not None]
                if not live:
                    break
                if any(isinstance(request, list) for request in live):
                    # every thread ran to its next mma or barrier: a block's warps meet at the same mma together
                    if len(live) != len(threads) or not all(isinstance(request, list) for request in live):
                        raise InterpreterError("an mma was reached by only part of the block (divergent control flow)")
                    replies = [reply for first in range(0, len(live), WARP)
                               for reply in warp_mma(live[first:first + WARP])]  # type: ignore[arg-type]
                else:
                    replies = [None] * len(requests)
                threads = [thread for thread, request in zip(threads, requests, strict=True) if request is not None]
                replies = replies[:len(threads)]
        for original, result in zip(buffers, lists, strict=True):
            if isinstance(original, numpy.ndarray):
                original.reshape(-1)[:] = numpy.asarray(result, dtype=original.dtype)

    def _run_lane(self, lists: list[Any], var_vals: Mapping[str, int], thread: dict[UOp, int],
                  shared: dict[UOp, list[Any]]) -> Generator[Any, Any, None]:
        """One work-item: yields True at a BARRIER and its fragment list at an mma (then receives the result)."""
        values: dict[UOp, Any] = {}
        uops, position, count = self.uops, 0, len(self.uops)
        while position < count:
            uop = uops[position]
            op = uop.op
            if op is Ops.RANGE:
                if values[uop.src[0]] <= 0:
                    position = self.end_of[position] + 1
                    continue
                values[uop] = 0
            elif op is Ops.END:
                loop = uop.src[0]
                values[loop] += 1
                if values[loop] < values[loop.src[0]]:
                    position = self.start_of[position] + 1
                    continue
            elif op is Ops.DEFINE_LOCAL:
                size = uop.dtype.size if isinstance(uop.dtype, PtrDType) and uop.dtype.size > 0 else 1
                values[uop] = shared.setdefault(uop, [None] * size)
            elif op is Ops.CUSTOM and str(uop.arg).startswith(MMA_PREFIX):
                values[uop] = yield [float(values[source]) for source in uop.src]
            else:
                values[uop] = self._step(uop, values, lists, var_vals, thread)
                if op is Ops.BARRIER:
                    yield True
            position += 1
