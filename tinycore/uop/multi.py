"""Multi-device values: a MULTI node holds one tensor-level graph per device.

`MULTI(src=(graph on device 0, graph on device 1, ...), arg=axis)`: with axis None every device holds the whole
value (replicated); with an axis, device i holds the i-th block of that axis, in device order. An operation on a
MULTI node is never one node: the UOp constructor sends it here (`map_multi`), which builds the operation on each
device's graph and wraps the results in a new MULTI node. So every later stage (scheduling, autograd, codegen) sees
ordinary single-device graphs joined by COPY nodes; a reduction over the sharded axis becomes an allreduce, built
here from copies and elementwise nodes.
"""
from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from tinycore.dtype import DType, dtypes
from tinycore.helpers import ALL2ALL, ALLREDUCE_CAST, RING, getenv, prod
from tinycore.uop.indexing import gather as gather_node
from tinycore.uop.indexing import scatter as scatter_node
from tinycore.uop.opcodes import GroupOp, Ops
from tinycore.uop.uop import UOp, sint, upper

RING_ALLREDUCE_THRESHOLD = 256_000
"""Elements above which an allreduce over more than two devices goes around a ring (RING=1) or all-to-all
(ALL2ALL=1); the RING_ALLREDUCE_THRESHOLD environment variable overrides it."""

# ops applied to each device's graph with the same arg: their sources are aligned to one sharding first
_PER_SHARD = frozenset(GroupOp.Elementwise | {Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD, Ops.DETACH, Ops.ASSIGN})


def multi(sources: Sequence[UOp], axis: int | None) -> UOp:
    """The MULTI node over one graph per device (every source on a different device)."""
    devices = [source.device for source in sources]
    if len(set(devices)) != len(devices):
        raise ValueError(f"a multi-device tensor needs distinct devices, got {tuple(devices)}")
    return UOp(Ops.MULTI, sources[0].dtype, tuple(sources), axis)


def shard_bounds(node: UOp) -> list[tuple[int, int]]:
    """(start, end) of each device's block along a sharded MULTI node's axis."""
    bounds, start = [], 0
    for source in node.src:
        size = source.shape[node.arg]
        bounds.append((start, start + size))
        start += size
    return bounds


def split_sizes(size: sint, count: int, axis: int) -> list[int]:
    """The block sizes of an axis of `size` sharded over `count` devices: equal blocks, as tinygrad 0.14 requires."""
    if not isinstance(size, int):
        raise ValueError(f"cannot shard a symbolic axis {axis} (size {size}) over {count} devices: bind it first")
    if size % count:
        raise RuntimeError(f"cannot shard axis {axis} of size {size} evenly over {count} devices: sharded axes must "
                           f"divide evenly (pad the tensor to a multiple of {count} or shard another axis)")
    return [size // count] * count


def shard(node: UOp, devices: tuple[str, ...], axis: int | None) -> UOp:
    """`node` (on one device) split along `axis` over `devices`, or copied whole to each for axis None."""
    if axis is None:
        return multi([node.copy_to_device(device) for device in devices], None)
    shape = node.shape
    sizes = split_sizes(shape[axis], len(devices), axis)
    pieces, start = [], 0
    for device, size in zip(devices, sizes, strict=True):
        bounds = tuple((start, start + size) if index == axis else (0, extent) for index, extent in enumerate(shape))
        piece = node.shrink(bounds)
        pieces.append(piece.contiguous().copy_to_device(device) if piece is not node else node.copy_to_device(device))
        start += size
    return multi(pieces, axis)


def _ints(sizes: Sequence[sint], what: str) -> list[int]:
    """`sizes` as ints, or a ValueError saying that `what` needs concrete sizes."""
    concrete = [size for size in sizes if isinstance(size, int)]
    if len(concrete) != len(sizes):
        raise ValueError(f"{what} needs concrete sizes, got {tuple(sizes)}: bind the variables first")
    return concrete


def _shrink_axis(node: UOp, axis: int, start: int, end: int) -> UOp:
    return node.shrink(tuple((start, end) if index == axis else (0, size) for index, size in enumerate(node.shape)))


def _pad_axis(node: UOp, axis: int, before: int, after: int) -> UOp:
    return node.pad(tuple((before, after) if index == axis else (0, 0) for index in range(len(node.shape))))


def concatenate(pieces: Sequence[UOp], axis: int) -> UOp:
    """`pieces` (all on one device) joined along `axis`: each padded to the full size, then summed (OR for bool)."""
    sizes = _ints([piece.shape[axis] for piece in pieces], f"joining blocks along axis {axis}")
    total = sum(sizes)
    padded, start = [], 0
    for piece, size in zip(pieces, sizes, strict=True):
        if size:
            padded.append(_pad_axis(piece, axis, start, total - start - size))
        start += size
    combine = Ops.OR if pieces[0].dtype == dtypes.bool else Ops.ADD
    return functools.reduce(lambda left, right: left.alu(combine, right), padded)


def gather(node: UOp, device: str) -> UOp:
    """The whole value of a MULTI node on `device` (one copy, or every block copied there and joined)."""
    if node.arg is None:
        for source in node.src:
            if source.device == device:
                return source
        return node.src[0].copy_to_device(device)
    return concatenate([source.copy_to_device(device) for source in node.src], node.arg)


def _combine(op: Ops, values: Sequence[UOp]) -> UOp:
    """values[0] op values[1] op ..., left to right (so every device gets the same rounding)."""
    return functools.reduce(lambda left, right: left.alu(op, right), values)


def _chunks(numel: int, count: int) -> list[tuple[int, int]]:
    base, left = divmod(numel, count)
    bounds, start = [], 0
    for index in range(count):
        size = base + (1 if index < left else 0)
        bounds.append((start, start + size))
        start += size
    return bounds


def allreduce_method(count: int, numel: int) -> str:
    """Which allreduce `allreduce` uses for `count` devices and `numel` elements: naive, ring or all2all."""
    threshold = getenv("RING_ALLREDUCE_THRESHOLD", RING_ALLREDUCE_THRESHOLD)
    large = count > 2 and numel > threshold
    if ALL2ALL.value >= 2 or (large and ALL2ALL.value >= 1):
        return "all2all"
    if RING.value >= 2 or (large and RING.value >= 1):
        return "ring"
    return "naive"


def allreduce(op: Ops, values: Sequence[UOp]) -> list[UOp]:
    """For one value per device (same shape), the combination by `op` (ADD, MUL, MAX) of all of them, on each device.

    naive: every device copies every other's value. ring: each value in `count` chunks; a reduce-scatter passes each
    chunk once around the ring, adding as it goes, then an all-gather passes the finished chunks around again
    (2 * (count - 1) chunk copies per device). all2all: device i gathers chunk i from every device and combines it,
    then every device gathers the finished chunks.
    """
    count, shape = len(values), values[0].shape
    numel = prod(shape)
    method = allreduce_method(count, numel) if isinstance(numel, int) else "naive"
    devices = [value.device for value in values]
    if method == "naive" or numel < count:
        values = [value.contiguous() for value in values]
        return [_combine(op, [value.copy_to_device(device) for value in values]) for device in devices]
    flat = [value.contiguous().reshape((numel,)) for value in values]
    bounds = _chunks(numel, count)
    reduced: list[UOp] = []
    if method == "all2all":
        for index, (start, end) in enumerate(bounds):
            reduced.append(_combine(op, [piece.shrink(((start, end),)).copy_to_device(devices[index])
                                         for piece in flat]))
        finished = [[chunk.copy_to_device(device) for chunk in reduced] for device in devices]
    else:
        # chunk c starts on device c, travels c -> c+1 -> ... and is complete on device c-1
        for index, (start, end) in enumerate(bounds):
            partial = flat[index].shrink(((start, end),))
            for step in range(1, count):
                here = (index + step) % count
                partial = partial.copy_to_device(devices[here]).alu(op, flat[here].shrink(((start, end),)))
            reduced.append(partial)
        finished = [[] for _ in devices]
        for index, chunk in enumerate(reduced):
            owner = (index + count - 1) % count
            copies = {owner: chunk}
            for step in range(1, count):
                here = (owner + step) % count
                copies[here] = copies[(here - 1) % count].copy_to_device(devices[here])
            for device_index in range(count):
                finished[device_index].append(copies[device_index])
    return [concatenate(chunks, 0).reshape(shape) for chunks in finished]


# ---- mapping one operation over the devices ----

def _aligned(src: tuple[UOp, ...]) -> tuple[list[tuple[UOp, ...]], int | None, tuple[str, ...]]:
    """The sources of a per-shard op, one tuple per device, all split along one axis (replicated ones are cut)."""
    multis = [source for source in src if source.op is Ops.MULTI]
    devices = multis[0].device
    for other in multis[1:]:
        if other.device != devices:
            raise ValueError(f"operands live on different device tuples {devices} and {other.device}: "
                             "shard both on the same devices")
    # operands sharded on different axes: the first one's axis wins, the others are resharded to it
    axis = next((source.arg for source in multis if source.arg is not None), None)
    bounds = shard_bounds(next(source for source in multis if source.arg == axis)) if axis is not None else None
    per_device: list[list[UOp]] = [[] for _ in devices]
    for source in src:
        if source.op is not Ops.MULTI:
            if source.device is not None:
                raise ValueError(f"an operand on {source.device} meets one on {devices}: move it with "
                                 ".to(devices) or .shard(devices, axis) first")
            for row in per_device:
                row.append(source)
            continue
        for index, row in enumerate(per_device):
            piece = source.src[index]
            if axis is not None and source.arg != axis and bounds is not None:
                piece = _block_of(source, index, axis, bounds[index])
            row.append(piece)
    return [tuple(row) for row in per_device], axis, devices


def _reshape_axis(old: tuple[int, ...], new: tuple[int, ...], axis: int, sizes: list[int]) -> tuple[int, list[int]]:
    """Where a sharded axis goes under a reshape and each device's block size on it, or a ValueError."""
    before, after = prod(old[:axis]), prod(old[axis + 1:])
    for position in range(len(new)):
        if prod(new[:position]) != before:
            continue
        inner = prod(new[position + 1:])
        if inner and all((size * after) % inner == 0 for size in sizes):
            return position, [size * after // inner for size in sizes]
    raise ValueError(f"reshape from {old} to {new} splits sharded axis {axis} across device blocks: reshape so "
                     "the sharded axis stays whole (or merges with the axes after it), or gather with .to(device)")


def _map_movement(op: Ops, node: UOp, arg: Any) -> UOp:
    axis = node.arg
    if axis is None:
        return multi([_apply_movement(op, source, arg) for source in node.src], None)
    sizes = [source.shape[axis] for source in node.src]
    if op is Ops.RESHAPE:
        what = "reshape of a sharded tensor"
        new_axis, new_sizes = _reshape_axis(tuple(_ints(node.shape, what)), tuple(_ints(tuple(arg), what)), axis,
                                            _ints(sizes, what))
        return multi([source.reshape(arg[:new_axis] + (size,) + arg[new_axis + 1:])
                      for source, size in zip(node.src, new_sizes, strict=True)], new_axis)
    if op is Ops.PERMUTE:
        return multi([source.permute(arg) for source in node.src], tuple(arg).index(axis))
    if op is Ops.EXPAND:
        if arg[axis] != node.shape[axis]:
            raise ValueError(f"cannot expand sharded axis {axis} from {node.shape[axis]} to {arg[axis]}")
        return multi([source.expand(arg[:axis] + (size,) + arg[axis + 1:])
                      for source, size in zip(node.src, sizes, strict=True)], axis)
    if op is Ops.PAD:
        if tuple(arg[axis]) != (0, 0):
            return _through_one_device(op, node, arg)
        return multi([source.pad(arg) for source in node.src], axis)
    if op is Ops.SHRINK:
        if tuple(arg[axis]) != (0, node.shape[axis]):
            return _through_one_device(op, node, arg)
        return multi([source.shrink(tuple((0, size) if index == axis else bound for index, bound in enumerate(arg)))
                      for source, size in zip(node.src, sizes, strict=True)], axis)
    if arg[axis]:
        return _through_one_device(op, node, arg)
    return multi([source.flip(arg) for source in node.src], axis)


def _through_one_device(op: Ops, node: UOp, arg: object) -> UOp:
    """A pad, shrink or flip that moves values across the blocks of the sharded axis: the blocks are gathered on the
    first device, the op applied there, and the result sharded again on the same axis (replicated when its new size
    does not divide evenly over the devices). Correct for any bounds, at the cost of the copies."""
    axis, devices = node.arg, node.device
    moved = _apply_movement(op, gather(node, devices[0]), arg)
    size = moved.shape[axis]
    return shard(moved, devices, axis if isinstance(size, int) and size % len(devices) == 0 else None)


def _on_devices(node: UOp, devices: tuple[str, ...]) -> UOp:
    """`node` as a MULTI node on `devices`: a single-device operand (an index tensor) is copied to each."""
    if node.op is not Ops.MULTI:
        return shard(node, devices, None)
    if node.device != devices:
        raise ValueError(f"operands live on different device tuples {devices} and {node.device}: put the index "
                         "tensors on the indexed tensor's devices (.to(devices)) first")
    return node


def _block_of(node: UOp, index: int, axis: int, bounds: tuple[int, int]) -> UOp:
    """Device `index`'s part of a MULTI node cut to `bounds` on `axis`: its own block when sharded there with those
    bounds, else its copy (the whole value gathered first when sharded otherwise) shrunk."""
    if node.arg == axis and shard_bounds(node)[index] == bounds:
        return node.src[index]
    whole = node.src[index] if node.arg is None else gather(node, node.src[index].device)
    return _shrink_axis(whole, axis, *bounds)


def _map_gather(src: tuple[UOp, ...], arg: Any) -> UOp:
    """GATHER(source, *indices) with multi-device operands (see tinycore/uop/indexing.py for the node).

    A source sharded on an axis that an index tensor selects: each device gathers from its block with the indices
    made local (an index outside the block reads zero) and the partial results are allreduced (OR for bool), giving a
    replicated result. Otherwise the result is sharded where the source is (on the output axis its sharded axis maps
    to) or, for a replicated source, where the index tensors are; replicated operands are cut to each block."""
    shape, axis_map = arg
    devices = next(node.device for node in src if node.op is Ops.MULTI)
    source, indices = _on_devices(src[0], devices), [_on_devices(node, devices) for node in src[1:]]
    axis = source.arg
    entry = axis_map[axis] if axis is not None else None
    if isinstance(entry, tuple):  # a slice/constant on the sharded axis: every device reads the whole source
        source, axis, entry = shard(gather(source, devices[0]), devices, None), None, None
    if isinstance(entry, int) and entry < 0:
        return _gather_across_blocks(source, indices, shape, axis_map, -1 - entry)
    sharded_index_axes = [node.arg for node in indices if node.arg is not None]
    out_axis = entry if entry is not None else (sharded_index_axes[0] if sharded_index_axes else None)
    if out_axis is None:
        return multi([gather_node(source.src[index], [node.src[index] for node in indices], shape, axis_map)
                      for index in range(len(devices))], None)
    if source.arg is not None:
        bounds = shard_bounds(source)
    else:
        bounds = shard_bounds(next(node for node in indices if node.arg == out_axis))
    pieces = []
    for index, (start, end) in enumerate(bounds):
        piece = source.src[index]
        if source.arg is None:  # cut the source's axes that follow the output's sharded axis to this block
            for source_axis, mapped in enumerate(axis_map):
                if mapped == out_axis:
                    piece = _shrink_axis(piece, source_axis, start, end)
        local_map = [(mapped[0], mapped[1] + mapped[2] * start, mapped[2])
                     if isinstance(mapped, tuple) and mapped[0] == out_axis else mapped for mapped in axis_map]
        local_shape = tuple(end - start if position == out_axis else size for position, size in enumerate(shape))
        pieces.append(gather_node(piece, [_block_of(node, index, out_axis, (start, end)) for node in indices],
                                  local_shape, local_map))
    return multi(pieces, out_axis)


def _gather_across_blocks(source: UOp, indices: list[UOp], shape: Any, axis_map: Any, selector: int) -> UOp:
    """A gather whose index tensor `selector` picks along the source's sharded axis: per device, from its block,
    with that index made local (outside the block: the block's size, which reads zero), then allreduced."""
    axis, devices = source.arg, source.device
    size = source.shape[axis]
    partial = []
    for index, (start, end) in enumerate(shard_bounds(source)):
        local = [node.src[index] if node.arg is None else gather(node, devices[index]) for node in indices]
        local[selector] = _localized(local[selector], size, start, end)
        partial.append(gather_node(source.src[index], local, shape, axis_map))
    combine = Ops.OR if source.dtype == dtypes.bool else Ops.ADD
    return multi(allreduce(combine, partial), None)


def _localized(chosen: UOp, size: int, start: int, end: int) -> UOp:
    """Index values over an axis of `size` made local to the block [start, end): negative ones counted from the end
    of the whole axis first; those outside the block become end - start (out of the block's range: a gather reads
    zero there, a scatter writes nothing)."""
    def constant(value: int) -> UOp:
        return UOp.const_on(chosen.dtype, value, chosen.device, chosen.shape)
    wrapped = chosen.alu(Ops.CMPLT, constant(0)).alu(Ops.WHERE, chosen.alu(Ops.ADD, constant(size)), chosen)
    below, within = wrapped.alu(Ops.CMPLT, constant(start)), wrapped.alu(Ops.CMPLT, constant(end))
    outside_block = constant(end - start)
    return below.alu(Ops.WHERE, outside_block, within.alu(Ops.WHERE, wrapped.alu(Ops.ADD, constant(-start)),
                                                          outside_block))


def _whole_on(node: UOp, index: int) -> UOp:
    """The whole value of a MULTI node on its `index`-th device."""
    return node.src[index] if node.arg is None else gather(node, node.src[index].device)


def _cut_map(axis_map: Any, iteration_axis: int | None, offset: int, sharded: int, block_start: int) -> list[Any]:
    """An axis map for iteration axis `iteration_axis` cut to start at `offset` (None: no axis cut), writing the
    target's block that starts at `block_start` on axis `sharded` (coordinates there become local to the block)."""
    local = []
    for target_axis, entry in enumerate(axis_map):
        shift = block_start if target_axis == sharded else 0
        if isinstance(entry, int) and iteration_axis is not None and entry == iteration_axis:
            local.append(entry if offset == shift else (entry, offset - shift, 1))
        elif isinstance(entry, tuple) and entry[0] == iteration_axis:
            local.append((entry[0], entry[1] + entry[2] * offset - shift, entry[2]))
        elif isinstance(entry, tuple) and target_axis == sharded:
            local.append((entry[0], entry[1] - shift, entry[2]))
        else:
            local.append(entry)
    return local


def _map_scatter(src: tuple[UOp, ...], arg: Any) -> UOp:
    """SCATTER(target, values, *indices) into a multi-device target: each device writes its block (or its copy).

    A replicated target: every device applies the whole scatter to its copy. A sharded target: an iteration axis
    that runs along the sharded axis (a `:` or a slice there) is cut to the part landing in each block; an index
    tensor that selects along it is made local to each block (values landing elsewhere are skipped); a single
    position there is written by the device that holds it."""
    axis_map, reduce, parallel = arg
    target = src[0]
    if target.op is not Ops.MULTI:
        raise ValueError(f"cannot scatter values on several devices into a tensor on {target.device}: move the "
                         "values and indices to its device first")
    devices = target.device
    operands = [_on_devices(node, devices) for node in src[1:]]
    axis = target.arg
    pieces: list[UOp] = []
    if axis is None:
        for index in range(len(devices)):
            whole = [_whole_on(node, index) for node in operands]
            pieces.append(scatter_node(target.src[index], whole[0], whole[1:], axis_map, reduce, parallel))
        return multi(pieces, None)
    entry = axis_map[axis]
    for index, (start, end) in enumerate(shard_bounds(target)):
        block = target.src[index]
        if isinstance(entry, int) and entry < 0:  # an index tensor picks positions along the sharded axis
            whole = [_whole_on(node, index) for node in operands]
            chosen = -1 - entry
            whole[1 + chosen] = _localized(whole[1 + chosen], _ints([target.shape[axis]], "a scatter")[0], start, end)
            pieces.append(scatter_node(block, whole[0], whole[1:], _cut_map(axis_map, None, 0, axis, start), reduce,
                                       parallel))
            continue
        if isinstance(entry, tuple) and entry[0] is None:  # one position along the sharded axis
            if start <= entry[1] < end:
                whole = [_whole_on(node, index) for node in operands]
                pieces.append(scatter_node(block, whole[0], whole[1:], _cut_map(axis_map, None, 0, axis, start),
                                           reduce, parallel))
            else:
                pieces.append(block)
            continue
        iteration_axis, first, step = (entry, 0, 1) if isinstance(entry, int) else entry
        count = _ints([operands[0].shape[iteration_axis]], "a scatter")[0]
        landing = [position for position in range(count) if start <= first + step * position < end]
        if not landing:
            pieces.append(block)
            continue
        low, high = landing[0], landing[-1] + 1
        cut = [_block_of(node, index, iteration_axis, (low, high)) for node in operands]
        pieces.append(scatter_node(block, cut[0], cut[1:], _cut_map(axis_map, iteration_axis, low, axis, start),
                                   reduce, parallel))
    return multi(pieces, axis)


def _narrow_dtype(node: UOp) -> DType | None:
    """Under ALLREDUCE_CAST, the half or bfloat16 dtype a MULTI node's values were widened from by a cast (a sum
    accumulates half values in float32), else None."""
    first = node.src[0]
    if not ALLREDUCE_CAST.value or first.op is not Ops.CAST or first.src[0].dtype not in (dtypes.half, dtypes.bfloat16):
        return None
    narrow: DType = first.src[0].dtype
    return narrow


def _apply_movement(op: Ops, source: UOp, arg: object) -> UOp:
    method = {Ops.RESHAPE: "reshape", Ops.PERMUTE: "permute", Ops.EXPAND: "expand", Ops.PAD: "pad",
              Ops.SHRINK: "shrink", Ops.FLIP: "flip"}[op]
    result: UOp = getattr(source, method)(arg)
    return result


def map_multi(op: Ops, dtype: DType, src: tuple[UOp, ...], arg: Any) -> UOp:
    """The node `op(src)` where a source is multi-device: built on each device's graph (see the module docstring)."""
    node_class = UOp
    if op is Ops.CONST:  # a constant on a tuple of devices: one constant per device
        return multi([node_class(Ops.CONST, dtype, (node_class(Ops.DEVICE, arg=device),), arg)
                      for device in src[0].arg], None)
    if op is Ops.COPY:
        source, target = src[0], src[1].arg
        if source.op is not Ops.MULTI:
            return shard(source, tuple(target), None)
        if not isinstance(target, tuple):
            return gather(source, target)
        if tuple(target) == source.device:
            return source
        if len(target) != len(source.src):
            raise ValueError(f"cannot move a tensor on {len(source.src)} devices to {len(target)} devices: gather it "
                             "with .to(device) and shard again")
        return multi([piece.copy_to_device(device) for piece, device in zip(source.src, target, strict=True)],
                     source.arg)
    if op in _PER_SHARD:
        rows, axis, _ = _aligned(src)
        return multi([node_class(op, dtype, row, arg) for row in rows], axis)
    if op in GroupOp.Movement:
        return _map_movement(op, src[0], arg)
    if op is Ops.GATHER:
        return _map_gather(src, arg)
    if op is Ops.SCATTER:
        return _map_scatter(src, arg)
    if op is Ops.REDUCE_AXIS:
        node = src[0]
        reduced = [source.r(arg[0], arg[1]) for source in node.src]
        if node.arg is None or node.arg not in arg[1]:
            return multi(reduced, node.arg)
        narrow = _narrow_dtype(node)
        if narrow is not None:  # each device's partial result crosses the devices in the half/bfloat16 it came from
            combined = allreduce(arg[0], [partial.cast(narrow) for partial in reduced])
            return multi([value.cast(node.dtype) for value in combined], None)
        return multi(allreduce(arg[0], reduced), None)
    raise NotImplementedError(f"{op.name} is not supported on a multi-device tensor yet: gather it to one device "
                              "with .to(device) first")


# the UOp constructor sends multi-device nodes here, and UOp.bounds asks for the blocks, through this table
upper.map_multi, upper.shard_bounds = map_multi, shard_bounds
