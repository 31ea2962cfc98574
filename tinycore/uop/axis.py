"""Kernel axes: the kinds a RANGE can take in generated code, and the helpers that build and read RANGE nodes.

The scheduler makes LOOP, SEQUENTIAL and REDUCE ranges; codegen splits them into the other kinds (see codegen/opt.py).
"""
from __future__ import annotations

from enum import Enum, auto

from tinycore.dtype import dtypes
from tinycore.uop.opcodes import Ops, fast_member_access
from tinycore.uop.uop import UOp


@fast_member_access
class AxisType(Enum):
    """What a kernel axis (a RANGE) becomes in the generated code."""

    GLOBAL = auto()  # a hardware thread index (SPECIAL gidxN) on GPUs
    LOCAL = auto()  # a workgroup-local index (SPECIAL lidxN) on GPUs
    LOOP = auto()  # a loop over output elements
    THREAD = auto()  # split across CPU workers (SPECIAL "core_id")
    REDUCE = auto()  # a loop over the reduced elements
    UPCAST = auto()  # an output axis expanded into copies (vector lanes when contiguous)
    UNROLL = auto()  # a reduce axis expanded inside the loop body into one accumulator
    ACCUMULATOR = auto()  # a reduce axis expanded into independent accumulators combined after the loop
    SEQUENTIAL = auto()  # an output loop run in order inside one worker (scatters whose addresses may repeat)


OUTPUT_KINDS = frozenset({AxisType.GLOBAL, AxisType.LOCAL, AxisType.LOOP, AxisType.THREAD, AxisType.UPCAST})
REDUCE_KINDS = frozenset({AxisType.REDUCE, AxisType.UNROLL, AxisType.ACCUMULATOR})


def axis_id(range_node: UOp) -> int:
    """The axis id of a RANGE (its arg is `(axis id, kind)` or a bare id)."""
    return range_node.arg[0] if isinstance(range_node.arg, tuple) else int(range_node.arg)


def axis_kind(range_node: UOp) -> AxisType | None:
    """The AxisType of a RANGE made by codegen, None for ranges whose arg carries another kind."""
    kind = range_node.arg[1] if isinstance(range_node.arg, tuple) and len(range_node.arg) > 1 else None
    return kind if isinstance(kind, AxisType) else None


def range_size(range_node: UOp) -> int | None:
    """The trip count of a RANGE when it is a constant, else None."""
    end = range_node.src[0]
    return end.arg if end.op is Ops.CONST else None


def new_range(size: int | UOp, identifier: int, kind: AxisType) -> UOp:
    """A RANGE over `size` with axis id `identifier` and `kind`."""
    end = size if isinstance(size, UOp) else UOp.const(dtypes.int32, size)
    return UOp(Ops.RANGE, dtypes.int32, (end,), (identifier, kind))


def range_dependencies(root: UOp) -> dict[UOp, frozenset[UOp]]:
    """For every node under `root`, the RANGEs it depends on (a REDUCE does not depend on the ranges it reduces
    over)."""
    deps: dict[UOp, frozenset[UOp]] = {}
    of = deps.__getitem__
    empty: frozenset[UOp] = frozenset()
    for node in root.toposort:
        sources = node.src
        found = (of(sources[0]) if len(sources) == 1 else empty.union(*map(of, sources))) if sources else empty
        if node.op is Ops.RANGE:
            found = found | {node}
        elif node.op is Ops.REDUCE:
            found = found - frozenset(node.src[1:])
        deps[node] = found
    return deps
