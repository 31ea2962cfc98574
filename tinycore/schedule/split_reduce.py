"""Large reduces into few outputs, split in two kernels so that every worker of a CPU device takes part.

A CPU kernel spreads its output axes over the device's workers; a reduce axis runs as a loop inside each output. A
reduce into fewer outputs than there are workers (a loss summed to a scalar, a norm, the mean of a whole tensor)
would run on one core at one core's memory bandwidth: `((a * b + c).relu() * d).sum()` over 16M elements took 16 ms
on a 2-core machine while the same expression without the sum, whose 16M outputs split over both workers, took
11 ms. Here such a reduce becomes a reduce into `parts` partial results along one of its reduced axes (one kernel,
whose `parts` outputs the workers share), then the reduce of those partials (a small second kernel).

The partial results are in the reduce's own dtype, so a float sum is reassociated (each part sums in order, then
the parts are summed): the result differs from the one-kernel sum by rounding only, as torch's and numpy's
pairwise sums do. MAX is exact either way.
"""
from __future__ import annotations

from collections.abc import Sequence
from math import prod
from typing import cast

from tinycore.helpers import SPLIT_REDUCEOP
from tinycore.schedule.device_facts import DeviceFactsLookup
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp

SPLIT_MIN_REDUCED = 1 << 15
"""Elements reduced into each output below which a reduce stays one kernel: the second kernel's launch (tens of us)
would cost more than the workers save."""
MAX_PARTS = 256
"""The most partial results: enough shares to balance any worker count a machine has, few enough that the second
kernel is negligible."""
MIN_PART = 1 << 12
"""The fewest elements reduced into each partial result, so that each part still streams whole cache lines."""
OUTPUTS_PER_WORKER = 4
"""A reduce with at least this many outputs per worker is split over its outputs already (codegen's THREAD)."""


def _parts(size: int, reduced_per_output: int, workers: int) -> int | None:
    """How many parts to cut a reduced axis of `size` into: the largest divisor of `size` up to MAX_PARTS that leaves
    each part MIN_PART elements (of `reduced_per_output`) and gives every worker at least two parts; None when no
    divisor qualifies."""
    for parts in range(min(MAX_PARTS, size), 2 * workers - 1, -1):
        if size % parts == 0 and reduced_per_output // parts >= MIN_PART:
            return parts
    return None


def _split(reduce: UOp, workers: int) -> UOp | None:
    """`reduce` (a REDUCE_AXIS) as a reduce into partial results followed by the reduce of those, or None when it is
    small, has enough outputs to share out already, or has no reduced axis that divides well."""
    source = reduce.src[0]
    op, axes = reduce.arg
    if not axes or not all(isinstance(size, int) for size in (*source.shape, *reduce.shape)):
        return None
    shape, reduced_shape = cast(tuple[int, ...], source.shape), cast(tuple[int, ...], reduce.shape)
    outputs = prod(reduced_shape)
    reduced_per_output = prod(shape) // max(outputs, 1)
    if outputs >= OUTPUTS_PER_WORKER * workers or reduced_per_output < SPLIT_MIN_REDUCED:
        return None
    # the outermost reduced axis that divides: its parts are the outermost loop of the first kernel, each part a
    # contiguous run of the rest when the source is laid out in order
    for axis in sorted(axes):
        parts = _parts(shape[axis], reduced_per_output, workers)
        if parts is None:
            continue
        split_shape = (*shape[:axis], parts, shape[axis] // parts, *shape[axis + 1:])
        inner_axes = tuple(index + 1 if index >= axis else index for index in axes)
        partials = source.reshape(split_shape).r(op, inner_axes).contiguous()
        combined = partials.r(op, (axis,))
        return combined.reshape(reduced_shape)
    return None


def split_large_reduces(outputs: Sequence[UOp], facts: DeviceFactsLookup) -> list[UOp]:
    """`outputs` with every reduce into fewer outputs than its device's workers can share split in two (see the
    module docstring); unchanged where the device does not loop over rows with several workers, or SPLIT_REDUCEOP=0."""
    if not SPLIT_REDUCEOP.value:
        return list(outputs)
    memo: dict[UOp, UOp] = {}
    changed = False
    for output in outputs:
        for node in output.toposort:
            if node in memo:
                continue
            sources = tuple(memo[source] for source in node.src)
            rebuilt = node if sources == node.src else node.replace(src=sources)
            if rebuilt.op is Ops.REDUCE_AXIS:
                device_facts = facts(rebuilt.device)
                if device_facts.loops_over_rows and device_facts.workers >= 2:
                    rebuilt = _split(rebuilt, device_facts.workers) or rebuilt
            memo[node] = rebuilt
            changed = changed or rebuilt is not node
    return [memo[output] for output in outputs] if changed else list(outputs)
