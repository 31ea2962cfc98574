"""Views as byte ranges: which movement-op chains over a buffer select one contiguous range of its elements.

A copy whose source (or an assign whose target) is such a chain moves that range directly, through a BUFFER_VIEW
node, instead of running a kernel that first gathers the elements. This is what lets a slice of a DISK tensor be
read without reading the rest of the file, and written without running a kernel on DISK.
"""
from __future__ import annotations

from math import prod

from tinycore.schedule.nodes import IDENTITY_OPS, LEAF_BUFFERS
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp

_Strided = tuple[tuple[int, ...], tuple[int, ...], int]
"""A strided view: (shape, strides in elements, offset in elements)."""


def is_disk_device(device: object) -> bool:
    """True for a DISK device name ("DISK", "DISK:/path", "DISK:shm:name")."""
    return isinstance(device, str) and device.split(":", 1)[0].upper() == "DISK"


def _reshape_strides(shape: tuple[int, ...], strides: tuple[int, ...],
                     new_shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """Strides that read a strided view in `new_shape` without moving data, or None when none exist."""
    kept = [(size, stride) for size, stride in zip(shape, strides, strict=True) if size != 1]
    new_strides = [0] * len(new_shape)
    old_position, new_position = 0, 0
    while new_position < len(new_shape) or old_position < len(kept):
        if new_position < len(new_shape) and new_shape[new_position] == 1:
            new_position += 1
            continue
        if old_position >= len(kept) or new_position >= len(new_shape):
            return None
        old_end, new_end = old_position + 1, new_position + 1
        old_count, new_count = kept[old_position][0], new_shape[new_position]
        while old_count != new_count:
            if old_count < new_count:
                if old_end >= len(kept):
                    return None
                old_count *= kept[old_end][0]
                old_end += 1
            else:
                if new_end >= len(new_shape):
                    return None
                new_count *= new_shape[new_end]
                new_end += 1
        for index in range(old_position, old_end - 1):  # the merged old dimensions must be contiguous together
            if kept[index][1] != kept[index + 1][1] * kept[index + 1][0]:
                return None
        running = kept[old_end - 1][1]
        for index in range(new_end - 1, new_position - 1, -1):
            new_strides[index] = running
            running *= new_shape[index]
        old_position, new_position = old_end, new_end
    return tuple(new_strides)


def _strided_view(node: UOp) -> tuple[UOp, _Strided] | None:
    """The leaf buffer under `node` and the strided view `node` reads of it, or None when `node` is not movement,
    identity and same-size bitcast ops over a buffer (or a view that strides cannot describe, like a real pad)."""
    chain: list[UOp] = []
    while node.op not in LEAF_BUFFERS:
        if node.op in IDENTITY_OPS or node.op in (Ops.RESHAPE, Ops.SHRINK, Ops.PERMUTE, Ops.EXPAND, Ops.FLIP,
                                                  Ops.PAD):
            chain.append(node)
        elif node.op is Ops.BITCAST:
            if node.dtype.itemsize != node.src[0].dtype.itemsize:
                return None
        else:
            return None
        node = node.src[0]
    base = node
    shape: tuple[int, ...] = tuple(size for size in base.shape if isinstance(size, int))
    if len(shape) != len(base.shape):
        return None
    strides: tuple[int, ...] = tuple(prod(shape[axis + 1:]) for axis in range(len(shape)))
    offset = 0
    for movement in reversed(chain):
        op, arg = movement.op, movement.arg
        if op in IDENTITY_OPS:
            continue
        if op is Ops.RESHAPE:
            new_shape = tuple(arg)
            if not all(isinstance(size, int) for size in new_shape):
                return None
            found = _reshape_strides(shape, strides, new_shape) if prod(shape) else (0,) * len(new_shape)
            if found is None:
                return None
            shape, strides = new_shape, found
        elif op is Ops.SHRINK:
            if not all(isinstance(start, int) and isinstance(end, int) for start, end in arg):
                return None
            offset += sum(start * stride for (start, _), stride in zip(arg, strides, strict=True))
            shape = tuple(end - start for start, end in arg)
        elif op is Ops.PERMUTE:
            shape, strides = tuple(shape[axis] for axis in arg), tuple(strides[axis] for axis in arg)
        elif op is Ops.EXPAND:
            if not all(isinstance(size, int) for size in arg):
                return None
            strides = tuple(stride if old == new else 0 for old, new, stride in zip(shape, arg, strides, strict=True))
            shape = tuple(arg)
        elif op is Ops.FLIP:
            offset += sum((size - 1) * stride for size, stride, flipped in zip(shape, strides, arg, strict=True)
                          if flipped)
            strides = tuple(-stride if flipped else stride for stride, flipped in zip(strides, arg, strict=True))
        elif any(low != 0 or high != 0 for low, high in arg):  # PAD with a real border
            return None
    return base, (shape, strides, offset)


def contiguous_range(node: UOp) -> tuple[UOp, int, int] | None:
    """(leaf buffer, element offset, element count) when `node`'s elements in C order are one contiguous range of
    the buffer's elements (movement ops selecting a range, same-size bitcasts), else None.

    The chain is followed as one strided view; a chain that leaves that form (a reshape across a flipped or
    permuted axis, a real pad) is reported as no range even when later ops would select a range again."""
    leaf = _leaf_under(node)
    if leaf is None:
        return None
    if any(isinstance(size, int) and size == 0 for size in node.shape):  # no elements: an empty range
        return leaf, 0, 0
    found = _strided_view(node)
    if found is None:
        return None
    base, (shape, strides, offset) = found
    count = prod(shape)
    if count == 0:
        return base, 0, 0
    expected = 1
    for size, stride in zip(reversed(shape), reversed(strides), strict=True):
        if size == 1:
            continue
        if stride != expected:
            return None
        expected *= size
    return base, offset, count


def is_buffer_view(node: UOp) -> bool:
    """True when `node` only reads a buffer through movement, identity and bitcast ops (no computation)."""
    return _leaf_under(node) is not None


def _leaf_under(node: UOp) -> UOp | None:
    """The leaf buffer under a chain of movement, identity and bitcast ops, or None."""
    while node.op not in LEAF_BUFFERS:
        if node.op is Ops.BITCAST or node.op in IDENTITY_OPS or node.op in (
                Ops.RESHAPE, Ops.SHRINK, Ops.PERMUTE, Ops.EXPAND, Ops.FLIP, Ops.PAD):
            node = node.src[0]
        else:
            return None
    return node


def range_node(node: UOp) -> UOp | None:
    """A BUFFER / BUFFER_VIEW node holding exactly `node`'s elements (in `node`'s dtype), or None when `node` is not
    a contiguous range of a buffer whose device supports views."""
    found = contiguous_range(node)
    if found is None:
        return None
    base, offset, count = found
    if base.dtype == node.dtype and offset == 0 and count == base.shape[0]:
        return base
    return UOp(Ops.BUFFER_VIEW, node.dtype, (base,), (count, offset))


def leaf_device(node: UOp) -> object:
    """The device of the leaf buffer under a view chain (None when there is none)."""
    leaf = _leaf_under(node)
    while leaf is not None and leaf.op is Ops.BUFFER_VIEW:
        leaf = leaf.src[0]
    return None if leaf is None else leaf.src[0].arg


def non_contiguous_disk_error(node: UOp, what: str) -> RuntimeError:
    """The error for reading or writing a non-contiguous view of a DISK tensor."""
    return RuntimeError(
        f"cannot {what} a non-contiguous view of a tensor on {leaf_device(node)} (shape {tuple(node.shape)}: a "
        "permute, strided slice, flip, pad or expand of its elements): DISK holds data and runs no kernels, so only "
        "a contiguous range of its elements (a slice of the flattened order, a reshape, a same-size bitcast) can be "
        f"moved. {_WAY_OUT[what]}")


_WAY_OUT = {
    "copy": "Copy the contiguous range to a compute device first, then index there, e.g. "
            "tensor[start:end].to('CPU') followed by the permute or strided slice",
    "write": "Build the whole contiguous range on a compute device first (read it with .to('CPU'), update it there), "
             "then assign that range back, e.g. disk[start:end].assign(updated.to(disk.device))",
}
