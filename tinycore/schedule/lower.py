"""Lowering: one kernel's tensor-level graph to a kernel AST.

The kernel stores its root at every index of the root's shape. Each output axis of size > 1 gets a RANGE; every
node is evaluated at a tuple of index expressions (one per axis of its shape), which movement ops transform:

- RESHAPE flattens the output indices and unflattens them into the source shape (// and %), axis group by axis
  group so that axes the reshape leaves alone keep their index;
- PERMUTE reorders the indices, EXPAND reads index 0 on broadcast axes, SHRINK adds the start, FLIP reads
  size-1-i, PAD subtracts the padding before and masks: the value is where(valid, value, 0) and loads under it
  carry `valid` in their INDEX;
- REDUCE_AXIS opens a new RANGE per reduced axis and becomes REDUCE(value, *ranges);
- a buffer (or a node realized by an earlier kernel) becomes LOAD(INDEX(DEFINE_GLOBAL(k), flat index[, valid]));
- GATHER evaluates its index tensors at the index, and its source at the coordinates they hold (a load whose address
  contains loads), masked to zero where a coordinate is out of range;
- an ASSIGN of a SCATTER is a kernel over the SCATTER's values that stores at the coordinates its index tensors hold
  (the axes that may repeat an address are SEQUENTIAL ranges; a reduction's store carries the reduce as its arg,
  see tinycore.codegen.atomics).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

from tinycore.dtype import DType, dtypes
from tinycore.schedule.nodes import LEAF_BUFFERS, strip_identity, view_base
from tinycore.uop.axis import AxisType
from tinycore.uop.indexing import AxisEntry
from tinycore.uop.ops import GroupOp, Ops
from tinycore.uop.symbolic import fold_node, index_folding, simplify_indices
from tinycore.uop.uop import UOp, sint

INDEX_DTYPE: DType = dtypes.int32
"""The dtype of every index expression in the kernel AST being built: int32, or int64 for a kernel that touches
a buffer or a shape of 2**31 elements or more (set by lower_kernel for each kernel)."""
_INT32_LIMIT = 2 ** 31 - 1

Index = tuple[UOp, ...]
"""One index expression per axis of a node's shape."""
LowerKey = tuple[UOp, Index, "UOp | None"]
"""A node, the index it is evaluated at, and the validity mask of the loads under it."""


# ---- index arithmetic, each new node folded by the symbolic `index_folding` rules as it is built ----

def index_const(value: int) -> UOp:
    """An int32 constant for index arithmetic."""
    return UOp.const(INDEX_DTYPE, value)


def _as_index(value: sint) -> UOp:
    return value if isinstance(value, UOp) else index_const(value)


def idx_add(first: sint, second: sint) -> UOp:
    """first + second, folded."""
    if second.__class__ is int and second == 0:  # adding a Python 0 (most offsets) builds nothing
        return _as_index(first)
    if first.__class__ is int and first == 0:
        return _as_index(second)
    return fold_node(_as_index(first) + _as_index(second), index_folding)


def idx_sub(first: sint, second: sint) -> UOp:
    """first - second, built as first + second * -1 (the form the symbolic sums use), folded."""
    return idx_add(first, idx_mul(second, -1))


def idx_mul(first: sint, second: sint) -> UOp:
    """first * second, folded."""
    if second.__class__ is int and second == 1:  # a Python stride of 1 builds nothing
        return _as_index(first)
    if first.__class__ is int and first == 1:
        return _as_index(second)
    return fold_node(_as_index(first) * _as_index(second), index_folding)


def idx_div(numerator: UOp, divisor: sint) -> UOp:
    """numerator // divisor, folded (0 when the bounds of a non-negative numerator lie below the divisor)."""
    return fold_node(numerator // _as_index(divisor), index_folding)


def idx_mod(numerator: UOp, divisor: sint) -> UOp:
    """numerator % divisor, folded (the numerator itself when its bounds lie in [0, divisor))."""
    return fold_node(numerator % _as_index(divisor), index_folding)


def idx_and(first: UOp | None, second: UOp | None) -> UOp | None:
    """The conjunction of two optional validity masks."""
    if first is None:
        return second
    if second is None:
        return first
    return first & second


def flat_index(shape: Sequence[sint], index: Index) -> UOp:
    """The row-major element number of `index` in a contiguous array of `shape`."""
    total: sint = 0
    stride: sint = 1
    for size, axis_index in zip(reversed(shape), reversed(index), strict=True):
        if not (isinstance(size, int) and size == 1):
            total = idx_add(total, idx_mul(axis_index, stride))
        stride = stride * size
    return _as_index(total)


def unflatten_index(flat: UOp, shape: Sequence[sint]) -> Index:
    """The per-axis indices of element number `flat` of a contiguous array of `shape`."""
    result: list[UOp] = []
    stride: sint = 1
    for position in range(len(shape) - 1, -1, -1):
        size = shape[position]
        if isinstance(size, int) and size == 1:
            result.append(index_const(0))
            continue
        scaled = idx_div(flat, stride)
        result.append(scaled if position == 0 else idx_mod(scaled, size))
        stride = stride * size
    return tuple(reversed(result))


def _axis_groups(out_shape: Sequence[sint], in_shape: Sequence[sint]) -> list[tuple[list[int], list[int]]] | None:
    """Pairs of (output axes, input axes) with equal products, ignoring size-1 axes (None where no such pairing is
    found). A symbolic size pairs only with the same symbolic size on the other side, alone: unsqueezing or
    squeezing a tensor with a symbolic axis (a KV cache's positions) then keeps that axis's index as it is, where
    flattening and unflattening the whole index would divide by the symbolic size (integer divisions and remainders
    for every element read, which the simplifier cannot take back apart)."""
    def unit(size: sint) -> bool:
        return isinstance(size, int) and size == 1
    if any(isinstance(size, int) and size == 0 for size in (*out_shape, *in_shape)):
        return None
    out_axes = [axis for axis, size in enumerate(out_shape) if not unit(size)]
    in_axes = [axis for axis, size in enumerate(in_shape) if not unit(size)]
    groups: list[tuple[list[int], list[int]]] = []
    out_position = in_position = 0
    while out_position < len(out_axes) and in_position < len(in_axes):
        group_out, group_in = [out_axes[out_position]], [in_axes[in_position]]
        out_product, in_product = out_shape[out_axes[out_position]], in_shape[in_axes[in_position]]
        out_position, in_position = out_position + 1, in_position + 1
        if not isinstance(out_product, int) or not isinstance(in_product, int):
            if out_product is not in_product:  # UOps are interned: the same size is the same node
                return None
            groups.append((group_out, group_in))
            continue
        while out_product != in_product:
            if out_product < in_product:
                if out_position >= len(out_axes) or not isinstance(out_shape[out_axes[out_position]], int):
                    return None
                group_out.append(out_axes[out_position])
                out_product *= out_shape[out_axes[out_position]]
                out_position += 1
            else:
                if in_position >= len(in_axes) or not isinstance(in_shape[in_axes[in_position]], int):
                    return None
                group_in.append(in_axes[in_position])
                in_product *= in_shape[in_axes[in_position]]
                in_position += 1
        groups.append((group_out, group_in))
    if out_position < len(out_axes) or in_position < len(in_axes):
        return None
    return groups


def reshape_index(index: Index, out_shape: Sequence[sint], in_shape: Sequence[sint]) -> Index:
    """The source index of a RESHAPE from `in_shape` to `out_shape` evaluated at `index`."""
    groups = _axis_groups(out_shape, in_shape)
    if groups is None:
        return unflatten_index(flat_index(out_shape, index), in_shape)
    result = [index_const(0)] * len(in_shape)
    for group_out, group_in in groups:
        if len(group_out) == 1 and len(group_in) == 1:
            result[group_in[0]] = index[group_out[0]]
            continue
        flat = flat_index([out_shape[axis] for axis in group_out], tuple(index[axis] for axis in group_out))
        for axis, value in zip(group_in, unflatten_index(flat, [in_shape[axis] for axis in group_in]), strict=True):
            result[axis] = value
    return tuple(result)


# ---- the lowering of one kernel ----

class KernelLowerer:
    """Builds the AST of the kernel that computes `root`.

    `realized` maps nodes computed by other kernels (and the root itself) to their realized views (movement ops
    over a BUFFER); the root is stored through its own realized view, other realized nodes are loaded.
    """

    def __init__(self, root: UOp, realized: dict[UOp, UOp]):
        self.root = root
        self.realized = realized
        self.buffers: dict[UOp, UOp] = {}  # BUFFER -> DEFINE_GLOBAL
        self.dependencies: dict[UOp, None] = {}  # other roots this kernel reads
        self.var_vals: dict[UOp, int] = {}
        self.range_count = 0
        self.memo: dict[LowerKey, UOp] = {}
        self.plans: dict[LowerKey, tuple[list[LowerKey], Callable[[list[UOp]], UOp]]] = {}

    # ---- buffers and ranges ----

    def define_global(self, buffer: UOp) -> UOp:
        """The DEFINE_GLOBAL of `buffer`, numbered in order of first use (the output is first)."""
        found = self.buffers.get(buffer)
        if found is None:
            size = buffer.arg[1] if buffer.op is Ops.BUFFER else buffer.arg[0]
            found = UOp(Ops.DEFINE_GLOBAL, buffer.dtype.ptr(size if isinstance(size, int) else -1), (),
                        len(self.buffers))
            self.buffers[buffer] = found
        return found

    def new_range(self, size: sint, axis_type: AxisType) -> UOp:
        """A fresh RANGE over [0, size), or constant 0 for a size-1 axis."""
        if isinstance(size, int) and size == 1:
            return index_const(0)
        axis_id = self.range_count
        self.range_count += 1
        end = self.unbind(_as_index(size))
        if end.op is not Ops.CONST:
            # simplified now, as simplify_indices will simplify it inside each INDEX: a RANGE whose end is written
            # two ways would be two loops (a REDUCE over one, loads over the other)
            end = end.simplify()
        return UOp(Ops.RANGE, INDEX_DTYPE, (end,), (axis_id, axis_type))

    def unbind(self, node: UOp) -> UOp:
        """`node` with every BIND replaced by its DEFINE_VAR (the bound values go to var_vals)."""
        if node.op is Ops.CONST:
            return node
        binds = {bind: bind.src[0] for bind in node.toposort if bind.op is Ops.BIND}
        for bind, variable in binds.items():
            self.var_vals[variable] = bind.src[1].arg
        return node.substitute(binds)  # type: ignore[arg-type]

    # ---- the AST ----

    def ast(self) -> UOp:
        """SINK(STORE(INDEX(DEFINE_GLOBAL(0), flat index), value)) computing the root."""
        root = self.root
        if root.op is Ops.ASSIGN and strip_identity(root.src[1]).op is Ops.SCATTER:
            return self.unbind(self.scatter_ast(strip_identity(root.src[1])))
        ranges = tuple(self.new_range(size, AxisType.LOOP) for size in root.shape)
        buffer, index, valid = self.view_index(self.realized[root], ranges)
        assert valid is None, "cannot store through a padded view"
        address = self.define_global(buffer).index(index)
        if root.op is Ops.ASSIGN:
            value = self.lower(root.src[1], ranges, None)
        elif root.op is Ops.CONTIGUOUS:
            value = self.lower(root.src[0], ranges, None)
        else:
            value = self.lower(root, ranges, None)
        return self.unbind(UOp(Ops.SINK, dtypes.void, (address.store(value),)))

    def mapped_coordinates(self, shape: Sequence[sint], axis_map: Sequence[AxisEntry], index: Index,
                           index_values: Sequence[UOp]) -> tuple[Index, UOp | None]:
        """The coordinates an axis map (see tinycore.uop.indexing) gives at `index`, and the mask of those in range."""
        coordinates: list[UOp] = []
        in_range: UOp | None = None
        for axis, entry in enumerate(axis_map):
            if isinstance(entry, tuple):
                iteration_axis, start, step = entry
                offset = index_const(0) if iteration_axis is None else idx_mul(index[iteration_axis], step)
                coordinates.append(idx_add(offset, start))
                continue
            if entry >= 0:
                coordinates.append(index[entry])
                continue
            value = index_values[-1 - entry]
            value = value if value.dtype == INDEX_DTYPE else value.cast(INDEX_DTYPE)
            # negative indices count from the end
            value = UOp(Ops.WHERE, INDEX_DTYPE, (value < index_const(0), idx_add(value, _as_index(shape[axis])), value))
            coordinates.append(value)
            in_range = idx_and(in_range, (index_const(-1) < value) & (value < _as_index(shape[axis])))
        return tuple(coordinates), in_range

    def lower_gather(self, node: UOp, index: Index, valid: UOp | None, index_values: list[UOp]) -> UOp:
        """GATHER at `index`: its source at the coordinates the index tensors hold, zero where out of range."""
        source = node.src[0]
        coordinates, in_range = self.mapped_coordinates(source.shape, node.arg[1], index, index_values)
        value = self.lower(source, coordinates, idx_and(valid, in_range))
        if in_range is None:
            return value
        return UOp(Ops.WHERE, value.dtype, (in_range, value, UOp.const(value.dtype, 0)))

    def scatter_ast(self, scatter: UOp) -> UOp:
        """The kernel of ASSIGN(target, SCATTER(target, values, *indices)): stores into the target in place."""
        axis_map, reduce, parallel = scatter.arg
        values, indices = scatter.src[1], scatter.src[2:]
        self.define_global(view_base(self.realized[self.root]))  # the output is DEFINE_GLOBAL 0
        ranges = tuple(self.new_range(size, AxisType.LOOP if axis in parallel else AxisType.SEQUENTIAL)
                       for axis, size in enumerate(values.shape))
        index_values = [self.lower(index, ranges, None) for index in indices]
        coordinates, in_range = self.mapped_coordinates(scatter.shape, axis_map, ranges, index_values)
        buffer, flat, mask = self.view_index(self.realized[self.root], coordinates)
        assert mask is None, "cannot scatter through a padded view"
        address = self.define_global(buffer).index(flat, valid=in_range)
        value = self.lower(values, ranges, None)
        # a combining store (arg: the reduce); codegen makes it atomic or a load, combine and store
        return UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (address, value), reduce),))

    def view_index(self, view: UOp, index: Index) -> tuple[UOp, UOp, UOp | None]:
        """The buffer under the movement chain `view`, the flat index and the validity mask at `index`."""
        valid: UOp | None = None
        node = view
        while True:
            node = strip_identity(node)
            if node.op in LEAF_BUFFERS:
                return node, index[0] if index else index_const(0), valid
            index, mask = self.movement_index(node, index)
            valid = idx_and(valid, mask)
            node = node.src[0]

    def movement_index(self, node: UOp, index: Index) -> tuple[Index, UOp | None]:
        """The source index of the movement op `node` at `index`, and the mask a PAD adds."""
        op, arg = node.op, node.arg
        source_shape = node.src[0].shape
        if op is Ops.RESHAPE:
            return reshape_index(index, node.shape, source_shape), None
        if op is Ops.PERMUTE:
            result = [index_const(0)] * len(index)
            for position, axis in enumerate(arg):
                result[axis] = index[position]
            return tuple(result), None
        if op is Ops.EXPAND:
            return tuple(index_const(0) if isinstance(size, int) and size == 1 else axis_index
                         for size, axis_index in zip(source_shape, index, strict=True)), None
        if op is Ops.SHRINK:
            return tuple(idx_add(axis_index, start) for axis_index, (start, _) in zip(index, arg, strict=True)), None
        if op is Ops.FLIP:
            return tuple(idx_sub(size - 1, axis_index) if flipped else axis_index
                         for axis_index, size, flipped in zip(index, source_shape, arg, strict=True)), None
        if op is Ops.PAD:
            mask: UOp | None = None
            result = []
            for axis_index, size, (before, after) in zip(index, source_shape, arg, strict=True):
                result.append(idx_sub(axis_index, before))
                if not (isinstance(before, int) and before == 0):
                    mask = idx_and(mask, _as_index(idx_sub(before, 1)) < axis_index)
                if not (isinstance(after, int) and after == 0):
                    mask = idx_and(mask, axis_index < _as_index(idx_add(before, size)))
            return tuple(result), mask
        raise AssertionError(f"{op} is not a movement op")

    def lower(self, node: UOp, index: Index, valid: UOp | None) -> UOp:
        """The kernel-level value of tensor-level `node` at `index` (loads gated by `valid`).

        Iterative (an explicit stack, not recursion), so graphs thousands of ops deep lower fine.
        """
        root_key = (node, index, valid)
        found = self.memo.get(root_key)
        if found is not None:
            return found
        stack = [root_key]
        while stack:
            key = stack[-1]
            if key in self.memo:
                stack.pop()
                continue
            plan = self.plans.get(key)
            if plan is None:
                plan = self.plans[key] = self.plan(*key)
            missing = [child for child in plan[0] if child not in self.memo]
            if missing:
                stack.extend(missing)
                continue
            stack.pop()
            self.memo[key] = plan[1]([self.memo[child] for child in plan[0]])
        return self.memo[root_key]

    def lower_view(self, view: UOp, index: Index, valid: UOp | None) -> UOp:
        """A load through the movement chain `view` over a BUFFER."""
        buffer, flat, mask = self.view_index(view, index)
        load = self.define_global(buffer).index(flat, valid=idx_and(valid, mask)).load()
        if mask is None:
            return load
        return UOp(Ops.WHERE, load.dtype, (mask, load, UOp.const(load.dtype, 0)))

    def plan(self, node: UOp, index: Index, valid: UOp | None) -> tuple[list[LowerKey], Callable[[list[UOp]], UOp]]:
        """What lowering `node` at `index` needs (sources at their indices) and how it combines their values."""
        op = node.op
        if node is not self.root and node in self.realized:
            self.dependencies[node] = None
            view = self.realized[node]
            return [], lambda _: self.lower_view(view, index, valid)
        if op in LEAF_BUFFERS:
            return [], lambda _: self.lower_view(node, index, valid)
        if op in GroupOp.Movement:
            source_index, mask = self.movement_index(node, index)
            if mask is None:
                return [(node.src[0], source_index, valid)], lambda values: values[0]
            masked = mask
            return ([(node.src[0], source_index, idx_and(valid, mask))],
                    lambda values: UOp(Ops.WHERE, values[0].dtype, (masked, values[0], UOp.const(values[0].dtype, 0))))
        if op is Ops.GATHER:
            return ([(source, index, valid) for source in node.src[1:]],
                    lambda values: self.lower_gather(node, index, valid, values))
        if op is Ops.CONST:
            return [], lambda _: UOp.const(node.dtype, node.arg)
        if op is Ops.BIND or op is Ops.DEFINE_VAR:
            return [], lambda _: self.unbind(node)
        if op in GroupOp.Elementwise:
            return ([(source, index, valid) for source in node.src],
                    lambda values: UOp(op, node.dtype, tuple(values), node.arg))
        if op is Ops.DETACH or op is Ops.CONTIGUOUS_BACKWARD or op is Ops.CONTIGUOUS:
            return [(node.src[0], index, valid)], lambda values: values[0]
        if op is Ops.REDUCE_AXIS:
            reduce_op, axes = node.arg
            source = node.src[0]
            reduce_index = list(index)
            ranges = []
            for axis in axes:
                axis_range = self.new_range(source.shape[axis], AxisType.REDUCE)
                reduce_index[axis] = axis_range
                if axis_range.op is Ops.RANGE:
                    ranges.append(axis_range)
            if not ranges:
                return [(source, tuple(reduce_index), valid)], lambda values: values[0]
            return ([(source, tuple(reduce_index), valid)],
                    lambda values: UOp(Ops.REDUCE, node.dtype, (values[0], *ranges), reduce_op))
        raise NotImplementedError(f"cannot lower a tensor-level {op} inside a kernel")


def _element_count(node: UOp) -> int:
    """The most elements `node` (a tensor-level node) can have, 0 for nodes without a shape."""
    if node.op is Ops.BUFFER:
        size = node.arg[1]
        return size if isinstance(size, int) else int(size.vmax)
    shape = node._shape
    if shape is None:
        return 0
    count = 1
    for size in shape:
        count *= size if isinstance(size, int) else int(size.vmax)
    return count


def needs_wide_index(root: UOp, realized: dict[UOp, UOp]) -> bool:
    """True when the kernel computing `root` touches 2**31 elements or more (a buffer, a view or a loop over them),
    so its index arithmetic must be int64. Nodes computed by other kernels are read through their realized views."""
    stack, seen = [root], set()
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if _element_count(node) > _INT32_LIMIT:
            return True
        if node is not root and node in realized:
            stack.append(realized[node])
            continue
        stack.extend(node.src)
    return False


def lower_kernel(root: UOp, realized: dict[UOp, UOp]) -> tuple[UOp, tuple[UOp, ...], tuple[UOp, ...], dict[UOp, int]]:
    """The AST of the kernel computing `root`, its BUFFERs (output first), the roots it reads and its var values."""
    global INDEX_DTYPE
    INDEX_DTYPE = dtypes.int64 if needs_wide_index(root, realized) else dtypes.int32
    try:
        lowerer = KernelLowerer(root, realized)
        ast = simplify_indices(lowerer.ast())
    finally:
        INDEX_DTYPE = dtypes.int32
    # the plans' closures refer back to the lowerer: emptied, the lowerer (and the realized buffers it maps) dies
    # with its last reference instead of waiting for the cyclic collector
    lowerer.plans.clear()
    lowerer.memo.clear()
    return ast, tuple(lowerer.buffers), tuple(lowerer.dependencies), lowerer.var_vals
