"""Scatter reductions by sorting and segmenting: exact and deterministic where a device has no atomics.

A reducing SCATTER (`add`, `mul`, `max`, `min`) whose index tensors repeat addresses needs either atomic updates or
one worker running the repeatable axes in order (tinycore/codegen/atomics.py). On a device without atomics for the
dtype that runs those axes on one GPU work-item. This lowering instead, all in tinycore kernels:

1. computes each value's flat address in the target (C order of its shape; coordinates out of range give the
   address `size`, past every real one),
2. sorts the (address, position) pairs with a bitonic network (the count padded to a power of two P; each stage
   a kernel that compares every element with its partner `i ^ j`, a flip of one axis of a reshape: no dependent
   load; a pair is one int32 `address * P + position` where that fits, else two arrays); positions make every key
   distinct, so the order is total and the result deterministic,
3. reads the values in that order (a gather) and reduces each run of equal addresses with a segmented inclusive
   scan (log2 P kernels; step d combines an element with the one d places earlier when both have one address),
4. writes one combining store per distinct address, at the last element of its run: a SCATTER whose only axis is
   parallel, since no two of its stores share an address.

The combine is the ordered form's (`combine_scatter`), so bools, NaNs and integer wrap-around behave the same; float
sums are combined in a fixed tree order (rounding may differ from the ordered loop's, but not between runs).
"""
from __future__ import annotations

from math import prod
from typing import TYPE_CHECKING, Any, TypeVar, cast

from tinycore.dtype import dtypes
from tinycore.helpers import SCATTER_SORT
from tinycore.plugins.contract import RendererContract
from tinycore.tensor.base import tensor_class
from tinycore.tensor.creation import CreationMixin
from tinycore.uop.indexing import REDUCE_LOWERINGS, AxisEntry, ScatterInputs, combine_scatter
from tinycore.uop.uop import UOp

if TYPE_CHECKING:
    pass


TensorT = TypeVar("TensorT", bound="CreationMixin")
"""A tensor of the chain class whose methods these helpers call (the Tensor, at run time)."""

SORT_MIN_ITERATIONS = 1024
"""With SCATTER_SORT unset, the fewest values a reduction needs before a device without atomics for its dtype sorts
them: below it one work-item's ordered loop is cheaper than the sort's ~log2(P)^2 / 2 kernels."""
_ADDRESS_LIMIT = 2 ** 31 - 1
"""Addresses and positions are int32: a target or a value count this large keeps the ordered loop."""
PACKED_LIMIT = 2 ** 31 - 1
"""An (address, position) pair is sorted as one int32 `address * P + position` when every such value stays at or
under this; else as two arrays (two kernels per stage)."""


def _lower(target: UOp, values: UOp, indices: list[UOp], axis_map: tuple[AxisEntry, ...], reduce: str,
           parallel: list[int]) -> ScatterInputs | None:
    """A REDUCE_LOWERINGS entry: the sorted and segmented inputs where sorts_scatter says so (front-end scatters and
    the gradients of gathers alike)."""
    wrap = tensor_class(CreationMixin)._wrap
    wrapped_target, wrapped_values = wrap(target), wrap(values)
    if not sorts_scatter(wrapped_target, wrapped_values, reduce, parallel):
        return None
    shape = cast(tuple[int, ...], tuple(target.shape))  # all ints: sorts_scatter checked
    totals, coordinates, new_map, new_parallel = segment_scatter(shape, wrapped_values,
                                                                 [wrap(index) for index in indices], axis_map,
                                                                 reduce)
    return totals.uop, [coordinate.uop for coordinate in coordinates], new_map, new_parallel


REDUCE_LOWERINGS.append(_lower)


def sorts_scatter(target: TensorT, values: TensorT, reduce: str | None, parallel: list[int]) -> bool:
    """Whether a reducing scatter of `values` into `target` takes the sort-and-segment lowering: always with
    SCATTER_SORT=1, never with 0; unset, on devices whose renderer splits no rows across CPU workers and declares no
    atomic update for the dtype, once the values repeating addresses reach SORT_MIN_ITERATIONS."""
    if reduce is None or target.ndim == 0 or isinstance(target.device, tuple) or values.numel() == 0:
        return False
    if all(axis in parallel for axis in range(values.ndim)):
        return False  # no address can repeat
    if not all(isinstance(size, int) for size in target.shape + values.shape) or \
            prod(target.shape) >= _ADDRESS_LIMIT or values.numel() >= _ADDRESS_LIMIT // 2:
        return False
    forced = SCATTER_SORT.value
    if forced >= 0:
        return bool(forced)
    repeatable = prod(size for axis, size in enumerate(values.shape) if axis not in parallel)
    if repeatable < SORT_MIN_ITERATIONS:
        return False
    renderer = _renderer_of(target.device)
    return not renderer.has_threads and target.dtype not in renderer.atomic_dtypes


def _renderer_of(device: str) -> RendererContract:
    """The renderer of the (open) device `device`."""
    from tinycore.device.registry import Device
    return Device[device].renderer


def _partner(tensor: TensorT, j: int, count: int) -> TensorT:
    """Each element's bitonic partner `i ^ j` (j a power of two): the two halves of every block of 2j swapped."""
    return tensor.reshape(count // (2 * j), 2, j).flip(1).reshape(count)


def segment_scatter(target_shape: tuple[int, ...], values: TensorT, indices: list[TensorT],
                    axis_map: tuple[AxisEntry, ...],
                    reduce: str) -> tuple[TensorT, list[TensorT], tuple[int, ...], list[int]]:
    """The inputs of a scatter equal to reducing `values` into a target of `target_shape` at the coordinates
    `axis_map` and `indices` give (see tinycore/uop/indexing.py): one value per distinct address (its segment's
    reduction), one int32 coordinate tensor per target axis (out of range where nothing is written), the axis map
    that reads them and the parallel axes (all)."""
    tensor = type(values)
    device = values.device
    shape = values.shape
    count = prod(shape)
    size = prod(target_shape)

    def along(axis: int) -> TensorT:
        """0..n-1 along iteration axis `axis`, shaped to broadcast over the iteration shape."""
        positions = tensor.arange(shape[axis], dtype=dtypes.int32, device=device)
        return positions.reshape(tuple(shape[axis] if here == axis else 1 for here in range(len(shape))))

    address: Any = None
    valid: TensorT | None = None
    stride = size
    for axis, entry in enumerate(axis_map):
        stride //= target_shape[axis]
        extent = target_shape[axis]
        if isinstance(entry, tuple):
            iteration_axis, start, step = entry
            axis_coordinate: TensorT | int = start if iteration_axis is None else along(iteration_axis) * step + start
        elif entry >= 0:
            axis_coordinate = along(entry)
        else:
            index = indices[-1 - entry]
            axis_coordinate = (index < 0).where(index + extent, index)  # negative indices count from the end
            inside = (axis_coordinate >= 0) & (axis_coordinate < extent)
            valid = inside if valid is None else valid & inside
        term = axis_coordinate * stride
        address = term if address is None else address + term
    if not isinstance(address, tensor):
        address = tensor.full(shape, address, dtypes.int32, device)
    address = address._broadcast_to(shape).cast(dtypes.int32)
    if valid is not None:
        address = valid._broadcast_to(shape).where(address, size)
    padded = 2
    while padded < count:
        padded *= 2
    positions = tensor.arange(padded, dtype=dtypes.int32, device=device)
    keys = address.flatten().pad(((0, padded - count),), value=size)
    packed = (size + 1) * padded <= PACKED_LIMIT
    if packed:  # one int32 per pair (address * P + position), one kernel per stage
        keys = (keys * padded + positions).contiguous()
    else:
        keys, order = keys.contiguous(), positions.contiguous()
    block = 2
    while block <= padded:
        ascending = (positions & block).eq(0)
        step = block // 2
        while step >= 1:
            lower = (positions & step).eq(0).eq(ascending)  # this element keeps the smaller of its pair
            other = _partner(keys, step, padded)
            if packed:
                keys = lower.where(keys.minimum(other), keys.maximum(other)).contiguous()
            else:
                other_order = _partner(order, step, padded)
                keep = ((keys < other) | (keys.eq(other) & (order < other_order))).eq(lower)
                keys, order = keep.where(keys, other).contiguous(), keep.where(order, other_order).contiguous()
            step //= 2
        block *= 2
    if packed:
        keys, order = keys // padded, keys % padded
    flat_values = values.flatten()
    if padded > count:
        flat_values = flat_values.pad(((0, padded - count),))
    combined = flat_values[order].contiguous()
    distance = 1
    while distance < padded:
        earlier_keys = keys.pad(((distance, 0),), value=-1).shrink(((0, padded),))
        earlier = combined.pad(((distance, 0),)).shrink(((0, padded),))
        joined = tensor._wrap(combine_scatter(reduce, earlier.uop, combined.uop))
        combined = earlier_keys.eq(keys).where(joined, combined).contiguous()
        distance *= 2
    later_keys = keys.pad(((0, 1),), value=-1).shrink(((1, padded + 1),))
    last = later_keys.ne(keys) & (keys < size)
    coordinates = []
    remaining = size
    for axis, extent in enumerate(target_shape):
        remaining //= extent
        coordinate = (keys // remaining) % extent if remaining > 1 else keys % extent
        if axis == 0:
            coordinate = last.where(coordinate, extent)  # out of range: the store is skipped
        coordinates.append(coordinate.cast(dtypes.int32))
    return combined, coordinates, tuple(-1 - axis for axis in range(len(target_shape))), [0]
