"""Expansion of UPCAST, UNROLL and ACCUMULATOR axes into copies and vector lanes.

After this pass the only RANGEs left are loops (LOOP, THREAD, REDUCE kinds): every UPCAST range has been replaced by
its values, one copy of each store per value (grouped into vector stores along the innermost upcast axis when the
addresses are consecutive); every UNROLL range inside a REDUCE became several values combined in the loop body; every
ACCUMULATOR range became independent accumulators (packed into vector accumulators) combined after the loop. A reduce
loop its value does not depend on is replaced by its known result (n * value for a sum, the value for a max, a power
for a product), and a reduce over an empty loop by the op's identity.
"""
from __future__ import annotations

import functools
import itertools
from collections.abc import Callable

from tinycore.codegen.linearize import reduce_identity
from tinycore.codegen.simplify import substitute_fold
from tinycore.codegen.vectorize import Packer, consecutive
from tinycore.dtype import DType, dtypes
from tinycore.uop.axis import AxisType, axis_id, axis_kind, range_size
from tinycore.uop.ops import Ops
from tinycore.uop.patterns import PatternMatcher, UPat, graph_rewrite
from tinycore.uop.symbolic import constant_difference, fold
from tinycore.uop.uop import UOp


def combine(op: Ops, values: list[UOp]) -> UOp:
    """`values` folded with the reduce op `op`, left to right."""
    return functools.reduce(lambda left, right: left.alu(op, right), values)


def repeated(op: Ops, value: UOp, count: int) -> UOp:
    """`value` combined with itself `count` times by the reduce op `op` (count >= 1): value * count for ADD, the
    value for MAX, a power by repeated squaring for MUL."""
    if op is Ops.ADD:
        return value * UOp.const(value.dtype, count) if count != 1 else value
    if op is Ops.MUL:
        result: UOp | None = None
        power = value
        while count:
            if count & 1:
                result = power if result is None else result * power
            count >>= 1
            if count:
                power = power * power
        return result if result is not None else value
    return value


def lane_values(ranges: list[UOp]) -> list[dict[UOp, UOp]]:
    """Every assignment of constants to `ranges`, the last range varying fastest."""
    sizes = []
    for range_node in ranges:
        size = range_size(range_node)
        if size is None:
            raise ValueError(f"axis {axis_id(range_node)} of kind {axis_kind(range_node)} needs a constant size")
        sizes.append(size)
    return [{r: UOp.const(dtypes.int32, value) for r, value in zip(ranges, values, strict=True)}
            for values in itertools.product(*(range(size) for size in sizes))]


class Expander:
    """Runs the expansion on a kernel AST.

    `vector_width(dtype)` is the widest vector codegen may use for scalar `dtype`; `supported(dtype, width)` says
    whether the renderer has vectors of `width` lanes of `dtype` (default: every power of two up to the widest);
    `masks`: comparisons pack into bool vectors (RendererContract.vector_masks); `masked_loads`: the scalar dtypes
    whose consecutive loads with a gate per lane pack into one masked vector load (RendererContract.masked_load_dtypes).
    """

    def __init__(self, vector_width: Callable[[DType], int],
                 supported: Callable[[DType, int], bool] | None = None, masks: bool = False,
                 masked_loads: frozenset[DType] = frozenset()):
        self.vector_width = vector_width
        self.supported = declared = supported if supported is not None else \
            (lambda dtype, width: width in _powers_up_to(vector_width(dtype)))
        # the packer's test holds the function, not this Expander: a cycle through it kept each kernel's packing
        # memos (thousands of nodes and sets) alive until the cyclic collector found them
        self.packer = Packer(lambda dtype, width: dtype.count == 1 and (width == 1 or (
            width <= vector_width(dtype) and declared(dtype, width))), masks, masked_loads)
        self.folded: dict[UOp, UOp] = {}
        """Unfolded node -> its fold, shared by the substitutions of this kernel (substitute_fold)."""

    def substitute(self, node: UOp, mapping: dict[UOp, UOp]) -> UOp:
        """`node` with the keys of `mapping` replaced and the changed nodes folded, each fold made once per kernel."""
        return substitute_fold(node, mapping, self.folded)

    def fitting_width(self, dtype: DType, lanes: int) -> int:
        """The widest usable vector width for `dtype` that divides `lanes` (1 when none)."""
        width = self.vector_width(dtype)
        while width > 1 and (lanes % width or not self.packer.vector_ok(dtype, width)):
            width //= 2
        return width

    def expand_reduce(self, node: UOp) -> UOp:
        """The REDUCE `node` with its UNROLL ranges combined in the body, its ACCUMULATOR ranges as (vector)
        accumulators combined after the loop, and the loops its value does not depend on replaced by their result
        (`node` itself when none of that applies)."""
        value, ranges, op = node.src[0], list(node.src[1:]), node.arg
        unrolled = [r for r in ranges if axis_kind(r) is AxisType.UNROLL]
        accumulators = [r for r in ranges if axis_kind(r) is AxisType.ACCUMULATOR]
        loops = [r for r in ranges if r not in unrolled and r not in accumulators]
        if unrolled:
            value = combine(op, [self.substitute(value, mapping) for mapping in lane_values(unrolled)])
        if any(range_size(r) == 0 for r in loops):
            return UOp.const(node.dtype, reduce_identity(op, node.dtype))  # nothing to reduce
        invariant = [r for r in loops if r not in value.toposort and range_size(r) is not None]
        if invariant:
            # a value that does not change along a loop: the loop's result is known from the trip count
            loops = [r for r in loops if r not in invariant]
            count = 1
            for range_node in invariant:
                count *= range_size(range_node) or 1
            value = repeated(op, value, count)
        symbolic = [r for r in loops if r not in value.toposort and range_size(r) is None and op in (Ops.ADD, Ops.MAX)]
        if symbolic:
            # the same along a loop of symbolic trip count (at least one, as a Variable's size): ADD scales by the
            # count, MAX keeps the value; left as a loop, nothing in the body would refer to it
            loops = [r for r in loops if r not in symbolic]
            for range_node in symbolic if op is Ops.ADD else ():
                value = value.alu(Ops.MUL, range_node.src[0].cast(node.dtype))
        if not accumulators:
            return UOp(Ops.REDUCE, node.dtype, (value,) + tuple(loops), op) if loops else value
        lanes = [self.substitute(value, mapping) for mapping in lane_values(accumulators)]
        width = self.fitting_width(node.dtype, len(lanes))
        vectors = []
        for start in range(0, len(lanes), width):
            packed = self.packer.pack(tuple(lanes[start:start + width]))
            vectors.append(UOp(Ops.REDUCE, packed.dtype, (packed,) + tuple(loops), op) if loops else packed)
        total = combine(op, vectors)
        # the lanes folded by halves (16 -> 8 -> 4 -> 2, each one vector op) before the last two are combined: lane
        # by lane, a 16-lane accumulator took 15 dependent scalar ops and 16 extracts per output, which cost a dot
        # tile of 16-lane accumulators over a 512-long reduce as much as its loop (dout @ W.T, 128x512x512 on
        # AVX-512: 757 -> 449 us)
        while width > 2 and self.packer.vector_ok(node.dtype, width // 2):
            half = width // 2
            total = combine(op, [total.gep(tuple(range(half))), total.gep(tuple(range(half, width)))])
            width = half
        return combine(op, [total.gep(lane) for lane in range(width)])

    def expand_stores(self, stores: tuple[UOp, ...]) -> list[UOp]:
        """Each store copied for every value of the UPCAST ranges it uses, vector stores where possible."""
        result: list[UOp] = []
        for store in stores:
            # an UNROLL or ACCUMULATOR range left after expand_reduces is outside any reduce (a row value stored in
            # the reduce's loop, codegen/row_values.py): its copies are stored like an upcast's
            upcasts = sorted((n for n in store.toposort if n.op is Ops.RANGE and axis_kind(n) in
                              (AxisType.UPCAST, AxisType.UNROLL, AxisType.ACCUMULATOR)), key=axis_id)
            if not upcasts:
                result.append(fold(store))
                continue
            vector_axis = self._vector_axis(store, upcasts)
            others = [r for r in upcasts if r is not vector_axis]
            chunk = self._chunk_width(store, vector_axis)
            for outer in lane_values(others) or [{}]:
                copies = tuple(self.substitute(store, {**outer, **inner}) for inner in lane_values([vector_axis]))
                for start in range(0, len(copies), chunk):
                    group = copies[start:start + chunk]
                    vector_store = self._vector_store(group) if chunk > 1 else None
                    lane_stores = self._lane_stores(group) if chunk > 1 and vector_store is None else None
                    result.extend([vector_store] if vector_store is not None else lane_stores or group)
        return result

    def _lane_stores(self, copies: tuple[UOp, ...]) -> list[UOp] | None:
        """Stores to scattered addresses (a tile stored transposed) of values that pack into one vector: the value
        computed as a vector (a matmul tile's vector accumulators), each lane stored on its own; None when the values
        do not pack (a vector assembled lane by lane gains nothing)."""
        values = tuple(copy.src[1] for copy in copies)
        if values[0].dtype.count != 1 or copies[0].arg is not None or \
                not self.packer.vector_ok(values[0].dtype, len(values)):
            return None
        packed = self.packer.pack(values)
        if packed.op in (Ops.VECTORIZE, Ops.CONST) or packed.dtype.count != len(values):
            return None
        return [copy.replace(src=(copy.src[0], packed.gep(lane)) + copy.src[2:]) for lane, copy in enumerate(copies)]

    def _chunk_width(self, store: UOp, vector_axis: UOp) -> int:
        """The widest supported vector width dividing the vector axis."""
        return self.fitting_width(store.src[1].dtype, range_size(vector_axis) or 1)

    def _vector_axis(self, store: UOp, upcasts: list[UOp]) -> UOp:
        """The upcast range along which the store's addresses are consecutive; when none is, the one along which a
        load of the stored value is (its lanes are computed as a vector and stored one by one); else the last."""
        address = store.src[0]
        width = self.vector_width(store.src[1].dtype)
        if address.op is not Ops.INDEX or width < 2:
            return upcasts[-1]
        stored = next((r for r in reversed(upcasts) if (range_size(r) or 1) % 2 == 0 and
                       _steps_by_one(address.src[1], r)), None)
        if stored is not None and (range_size(stored) or 1) >= width:
            return stored
        # no full vector of consecutive stores (a tile stored transposed: 6 rows of a matmul's output along the
        # store, 16 columns across it): whole vectors along a load's consecutive lanes, stored lane by lane
        loads = [n.src[0].src[1] for n in store.src[1].toposort if n.op is Ops.LOAD and n.src[0].op is Ops.INDEX]
        loaded = next((r for r in reversed(upcasts) if r is not stored and (range_size(r) or 1) % width == 0 and
                       any(_steps_by_one(index, r) for index in loads)), None)
        return loaded or stored or upcasts[-1]

    def _vector_store(self, copies: tuple[UOp, ...]) -> UOp | None:
        """One vector store for copies that write consecutive addresses of one buffer under one mask, else None."""
        addresses = tuple(copy.src[0] for copy in copies)
        values = tuple(copy.src[1] for copy in copies)
        first = addresses[0]
        if first.op is not Ops.INDEX or values[0].dtype.count != 1 or copies[0].arg is not None:  # atomics: per lane
            return None
        if not all(a.op is Ops.INDEX and a.src[0] is first.src[0] and a.src[2:] == first.src[2:] for a in addresses):
            return None
        if not self.packer.vector_ok(values[0].dtype, len(values)) or not consecutive(tuple(a.src[1] for a in
                                                                                             addresses)):
            return None
        return first.store(self.packer.pack(values))


def _steps_by_one(index: UOp, range_node: UOp) -> bool:
    """True when `index` grows by exactly one per step of `range_node`."""
    return index.depends_on(range_node) and \
        constant_difference(index, index.substitute({range_node: range_node + 1})) == 1


def _powers_up_to(limit: int) -> set[int]:
    return {1 << shift for shift in range(limit.bit_length()) if 1 << shift <= limit}


def _expand_reduce(ctx: Expander, reduce: UOp) -> UOp | None:
    expanded = ctx.expand_reduce(reduce)
    return None if expanded is reduce else expanded


reduce_expansion_rules = PatternMatcher([(UPat(Ops.REDUCE, name="reduce"), _expand_reduce)])
"""Each REDUCE expanded (Expander.expand_reduce; context: the Expander). Sources come first, so inner reduces are
expanded before the reduces whose values hold them."""


def expand_stores(sink: UOp, expander: Expander) -> UOp:
    """The SINK of `sink`'s stores each copied for every value of its UPCAST ranges, in vector stores where the
    addresses are consecutive (Expander.expand_stores): a graph step, as one store becomes many."""
    return UOp(Ops.SINK, dtypes.void, tuple(expander.expand_stores(sink.src)))


def expand(ast: UOp, vector_width: Callable[[DType], int],
           supported: Callable[[DType, int], bool] | None = None, masks: bool = False,
           masked_loads: frozenset[DType] = frozenset()) -> list[UOp]:
    """The stores of `ast` with every UPCAST / UNROLL / ACCUMULATOR axis expanded (see Expander for the arguments)."""
    expander = Expander(vector_width, supported, masks, masked_loads)
    expanded = graph_rewrite(ast, reduce_expansion_rules, expander, name="expand reduces")
    return list(expand_stores(expanded, expander).src)
