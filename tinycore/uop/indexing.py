"""Tensor-level nodes for indexing with integer tensors: GATHER (a load at an address read from memory) and SCATTER
(stores at addresses read from memory).

Both describe, for each axis of the indexed tensor, where its coordinate comes from: an `axis map` entry `k >= 0`
takes the coordinate from axis `k` of the iteration space (the output of a GATHER, the values of a SCATTER), an
entry `-1 - j` takes it from index tensor `j`, an int32 tensor shaped like the iteration space, and an entry
`(k, start, step)` is `start + step * i` for position `i` of iteration axis `k` (`k` None: the constant `start`;
what a slice or an int in a setitem gives). A negative index
counts from the end (`value + size`, as numpy); an index still outside `[0, size)` reads zero (GATHER) or writes
nothing (SCATTER).

SCATTER is the value of an ASSIGN into its own target, `ASSIGN(target, SCATTER(target, values, *indices))`: its
kernel writes the target's buffer in place. Writes whose coordinates all come from index tensors may repeat an
address. A plain assignment's kernel runs the iteration axes not listed as `parallel` in order, inside one worker,
so the last write wins. A reduction's kernel is a combining store (`STORE(address, value)` with the reduce as its
arg): codegen makes it an atomic read-modify-write and runs every axis in parallel where the renderer declares
atomics for the dtype (`atomic_dtypes`), else a load, `combine_scatter` and a store with the repeatable axes in order;
either way every value counts (no lost updates). Parallel axes must map one-to-one onto target coordinates (two
iterations that differ on a parallel axis never write the same element).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Union

from tinycore.dtype import dtypes
from tinycore.uop.opcodes import Ops
from tinycore.uop.uop import UOp, sint

SCATTER_REDUCES = (None, "add", "mul", "max", "min")
"""How a SCATTER combines a value with the element it lands on: None overwrites."""


AxisEntry = Union[int, tuple[Union[int, None], int, int]]
"""Where one coordinate comes from (see the module docstring)."""


def _check_map(axis_map: Sequence[AxisEntry], ndim: int, index_count: int, iteration_ndim: int) -> None:
    if len(axis_map) != ndim:
        raise ValueError(f"an axis map needs one entry per indexed axis ({ndim}), got {len(axis_map)}")
    for entry in axis_map:
        if isinstance(entry, tuple):
            if entry[0] is not None and not 0 <= entry[0] < iteration_ndim:
                raise ValueError(f"axis map entry {entry} names no iteration axis (< {iteration_ndim})")
            continue
        if entry >= iteration_ndim or (entry < 0 and -1 - entry >= index_count):
            raise ValueError(f"axis map entry {entry} names neither an iteration axis (< {iteration_ndim}) nor one "
                             f"of {index_count} index tensors")


def gather(source: UOp, indices: Sequence[UOp], shape: Sequence[sint], axis_map: Sequence[AxisEntry]) -> UOp:
    """A node of `shape` whose element at `o` is `source` at the coordinates the axis map gives for `o`."""
    _check_map(axis_map, len(source.shape), len(indices), len(shape))
    for index in indices:
        if index.dtype != dtypes.int32 or tuple(index.shape) != tuple(shape):
            raise ValueError(f"gather indices must be int32 of shape {tuple(shape)}, got {index.dtype} "
                             f"{tuple(index.shape)}")
    return UOp(Ops.GATHER, source.dtype, (source, *indices), (tuple(shape), tuple(axis_map)))


def scatter(target: UOp, values: UOp, indices: Sequence[UOp], axis_map: Sequence[AxisEntry], reduce: str | None,
            parallel: Sequence[int]) -> UOp:
    """`target` with `values` written (or combined by `reduce`) at the coordinates the axis map gives."""
    _check_map(axis_map, len(target.shape), len(indices), len(values.shape))
    if reduce not in SCATTER_REDUCES:
        raise ValueError(f"scatter reduce must be one of {SCATTER_REDUCES}, got {reduce!r}")
    if values.dtype != target.dtype:
        raise ValueError(f"scatter values of dtype {values.dtype} into a target of dtype {target.dtype}")
    for index in indices:
        if index.dtype != dtypes.int32 or tuple(index.shape) != tuple(values.shape):
            raise ValueError(f"scatter indices must be int32 of shape {tuple(values.shape)}, got {index.dtype} "
                             f"{tuple(index.shape)}")
    return UOp(Ops.SCATTER, target.dtype, (target, values, *indices), (tuple(axis_map), reduce, tuple(parallel)))


def mapped_parallel_axes(axis_map: Sequence[AxisEntry]) -> tuple[int, ...]:
    """The iteration axes an axis map uses directly (each one-to-one onto a target axis)."""
    found = [entry if isinstance(entry, int) else entry[0] for entry in axis_map
             if (isinstance(entry, int) and entry >= 0) or (isinstance(entry, tuple) and entry[0] is not None and
                                                           entry[2] != 0)]
    return tuple(sorted(axis for axis in found if axis is not None))


def writes_in_place(node: UOp) -> bool:
    """True when `node` is a buffer, a view of one or a chain of ASSIGNs into one (a SCATTER can write it); for a
    multi-device value, when that holds on every device."""
    if node.op is Ops.MULTI:
        return all(writes_in_place(source) for source in node.src)
    while True:
        node = node.base
        if node.op is Ops.BUFFER:
            return True
        if node.op not in (Ops.ASSIGN, Ops.DETACH):
            return False
        node = node.src[0]


ScatterInputs = tuple[UOp, list[UOp], tuple[AxisEntry, ...], list[int]]
"""A scatter's values, index tensors, axis map and parallel axes."""
REDUCE_LOWERINGS: list[Callable[[UOp, UOp, list[UOp], tuple[AxisEntry, ...], str, list[int]],
                                ScatterInputs | None]] = []
"""Other forms of a reducing scatter, registered by higher layers (the tensor front end's sort and segment): each is
asked in turn with (target, values, indices, axis map, reduce, parallel axes) and answers the inputs of an
equivalent scatter, or None to leave it as it is."""


def scatter_assign(target: UOp, values: UOp, indices: Sequence[UOp], axis_map: Sequence[AxisEntry], reduce: str | None,
                   parallel: Sequence[int]) -> UOp:
    """ASSIGN(target, SCATTER(target, ...)): the scatter written into `target`'s buffer in place (a reduction in the
    first form REDUCE_LOWERINGS gives, if any)."""
    if not writes_in_place(target):
        raise ValueError(f"a scatter writes into a realized buffer (or a view of one), got {target.base.op}")
    if reduce is not None:
        for lowering in REDUCE_LOWERINGS:
            replaced = lowering(target, values, list(indices), tuple(axis_map), reduce, list(parallel))
            if replaced is not None:
                values, indices, axis_map, parallel = replaced
                break
    return target.assign(scatter(target, values, indices, axis_map, reduce, parallel))


def combine_scatter(reduce: str, old: UOp, new: UOp) -> UOp:
    """A SCATTER reduction of the element already stored (`old`) with a value landing on it (`new`)."""
    if reduce == "add":
        return UOp(Ops.OR if old.dtype == dtypes.bool else Ops.ADD, old.dtype, (old, new))
    if reduce == "mul":
        return UOp(Ops.AND if old.dtype == dtypes.bool else Ops.MUL, old.dtype, (old, new))
    if reduce == "max":
        return UOp(Ops.MAX, old.dtype, (old, new))
    if reduce == "min":
        return UOp(Ops.WHERE, old.dtype, (UOp(Ops.CMPLT, dtypes.bool, (new, old)), new, old))
    raise ValueError(f"scatter reduce must be one of {SCATTER_REDUCES[1:]}, got {reduce!r}")
