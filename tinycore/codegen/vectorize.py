"""Packing scalar lanes into vector nodes (superword-level parallelism over isomorphic expression trees).

Expansion (expand.py) produces, for each lane of an upcast axis, a scalar copy of an expression. `Packer.pack`
turns such a tuple of copies into one vector-typed node: identical lanes become a broadcast, lanes with the same op
and arg are packed source by source, loads from consecutive addresses become one vector load, and anything else
becomes a VECTORIZE of the scalar lanes. The result always computes exactly the lanes it was given.
"""
from __future__ import annotations

from collections.abc import Callable

from tinycore.dtype import DType, dtypes
from tinycore.uop.ops import GroupOp, Ops
from tinycore.uop.symbolic import constant_differences
from tinycore.uop.uop import UOp

PACKABLE_OPS = GroupOp.ALU | {Ops.CAST, Ops.BITCAST}


def broadcast(node: UOp, count: int) -> UOp:
    """A vector of `count` copies of the scalar `node`."""
    if count == 1:
        return node
    if node.op is Ops.CONST:
        return UOp.const(node.dtype.vec(count), node.arg)
    return UOp(Ops.VECTORIZE, node.dtype.vec(count), (node,) * count)


def gather(lanes: tuple[UOp, ...]) -> UOp:
    """A vector built from scalar `lanes` (no further packing)."""
    if len(lanes) == 1:
        return lanes[0]
    return UOp(Ops.VECTORIZE, lanes[0].dtype.vec(len(lanes)), lanes)


def consecutive(indices: tuple[UOp, ...]) -> bool:
    """True when indices[k] == indices[0] + k for every lane (provably, from linear forms)."""
    return constant_differences(indices[0], indices) == list(range(len(indices)))


class Packer:
    """Packs tuples of scalar lanes into vector nodes, sharing work between calls (memoised by lane tuple).

    `vector_ok(dtype, width)` says whether memory and arithmetic may use `width` lanes of scalar `dtype`; with
    `masks`, comparisons of such lanes and logic on their results pack into bool vectors (lane masks, see
    RendererContract.vector_masks).
    """

    def __init__(self, vector_ok: Callable[[DType, int], bool], masks: bool = False,
                 masked_loads: frozenset[DType] = frozenset()):
        self.vector_ok = vector_ok
        self.masks = masks
        self.masked_loads = masked_loads if masks else frozenset()
        self.memo: dict[tuple[UOp, ...], UOp] = {}
        self.lane_memo: dict[tuple[UOp, ...], tuple[UOp, ...]] = {}

    def pack(self, lanes: tuple[UOp, ...]) -> UOp:
        """One vector node whose lane k equals lanes[k] (lanes are scalar nodes of one dtype)."""
        if len(lanes) == 1:
            return lanes[0]
        found = self.memo.get(lanes)
        if found is None:
            found = self._pack(lanes)
            self.memo[lanes] = found
        return found

    def _pack(self, lanes: tuple[UOp, ...]) -> UOp:
        first = lanes[0]
        if any(lane.dtype.count != 1 for lane in lanes):
            raise ValueError(f"pack takes scalar lanes, got dtypes {[lane.dtype for lane in lanes]}")
        if all(lane is first for lane in lanes):
            return broadcast(first, len(lanes))
        same_shape = all(lane.op is first.op and lane.dtype == first.dtype and lane.arg == first.arg and
                         _same_source_dtypes(lane, first) for lane in lanes)
        if not same_shape:
            return gather(lanes)
        if not self.vector_ok(first.dtype, len(lanes)) and not self._mask_ok(first, len(lanes)):
            return self._lanewise(lanes) if first.op in PACKABLE_OPS else gather(lanes)
        width = len(lanes)
        if first.op is Ops.LOAD:
            return self._pack_load(lanes)
        if first.op is Ops.REDUCE:
            if not all(lane.src[1:] == first.src[1:] for lane in lanes):
                return gather(lanes)
            value = self.pack(tuple(lane.src[0] for lane in lanes))
            return UOp(Ops.REDUCE, first.dtype.vec(width), (value,) + first.src[1:], first.arg)
        if first.op in PACKABLE_OPS:
            sources = []
            for position in range(len(first.src)):
                source_lanes = tuple(lane.src[position] for lane in lanes)
                if not self.vector_ok(source_lanes[0].dtype, width) and \
                        not (self.masks and dtypes.is_bool(source_lanes[0].dtype)) and \
                        not all(source is source_lanes[0] for source in source_lanes):
                    return self._lanewise(lanes)
                sources.append(self.pack(source_lanes))
            dtype = dtypes.bool.vec(width) if first.op in GroupOp.Comparison else first.dtype.vec(width)
            return UOp(first.op, dtype, tuple(sources), first.arg)
        return gather(lanes)

    def _mask_ok(self, first: UOp, width: int) -> bool:
        """True when lanes like `first` pack into a lane mask: a comparison of vector-capable numbers, or logic on
        bools."""
        if not self.masks or not dtypes.is_bool(first.dtype):
            return False
        if first.op in GroupOp.Comparison:
            operand = first.src[0].dtype
            return not dtypes.is_bool(operand) and self.vector_ok(operand, width)
        return first.op in (Ops.AND, Ops.OR, Ops.XOR)

    def lanes_of(self, lanes: tuple[UOp, ...]) -> tuple[UOp, ...]:
        """`lanes` recomputed lane by lane over vector sources where possible (see _lanewise)."""
        found = self.lane_memo.get(lanes)
        if found is None:
            first = lanes[0]
            same_shape = all(lane.op is first.op and lane.dtype == first.dtype and lane.arg == first.arg and
                             _same_source_dtypes(lane, first) for lane in lanes)
            rebuilt = self._lanewise(lanes) if same_shape else gather(lanes)
            found = self.lane_memo[lanes] = rebuilt.src if rebuilt.op is Ops.VECTORIZE and \
                len(rebuilt.src) == len(lanes) else lanes
        return found

    def _lanewise(self, lanes: tuple[UOp, ...]) -> UOp:
        """Lanes of an op that cannot be a vector op (a comparison, a bool source) computed one by one, from vector
        sources where those pack into real vector work (loads, arithmetic), so only this op is scalar."""
        first, width = lanes[0], len(lanes)
        columns: list[tuple[UOp, ...]] = []
        packed_any = False
        for position in range(len(first.src)):
            source_lanes = tuple(lane.src[position] for lane in lanes)
            if self.vector_ok(source_lanes[0].dtype, width) and \
                    not all(source is source_lanes[0] for source in source_lanes):
                vector = self.pack(source_lanes)
                if vector.op is not Ops.VECTORIZE:
                    columns.append(tuple(vector.gep(lane) for lane in range(width)))
                    packed_any = True
                    continue
            elif source_lanes[0].op in PACKABLE_OPS and source_lanes[0].dtype.count == 1 and \
                    not all(source is source_lanes[0] for source in source_lanes):
                rebuilt = self.lanes_of(source_lanes)
                if rebuilt != source_lanes:
                    columns.append(rebuilt)
                    packed_any = True
                    continue
            columns.append(source_lanes)
        if not packed_any:
            return gather(lanes)
        return gather(tuple(UOp(first.op, first.dtype, tuple(column[lane] for column in columns), first.arg)
                            for lane in range(width)))

    def _pack_load(self, lanes: tuple[UOp, ...]) -> UOp:
        first = lanes[0]
        addresses = tuple(lane.src[0] for lane in lanes)
        if not all(address.op is Ops.INDEX and len(address.src) == len(addresses[0].src) for address in addresses):
            return gather(lanes)
        buffer = addresses[0].src[0]
        if not all(address.src[0] is buffer for address in addresses):
            return gather(lanes)
        valid = addresses[0].src[2:]
        if not all(address.src[2:] == valid for address in addresses):
            return self._masked_load(lanes, addresses)
        alternatives = first.src[1:]
        if not all(lane.src[1:] == alternatives for lane in lanes):
            return gather(lanes)
        if not consecutive(tuple(address.src[1] for address in addresses)):
            return gather(lanes)
        width = len(lanes)
        vector_alternatives = tuple(broadcast(alternative, width) for alternative in alternatives)
        return UOp(Ops.LOAD, first.dtype.vec(width), (addresses[0],) + vector_alternatives, first.arg)

    def _masked_load(self, lanes: tuple[UOp, ...], addresses: tuple[UOp, ...]) -> UOp:
        """Loads from consecutive addresses with a gate per lane as one vector load gated by the lanes' gates packed
        into a mask (RendererContract.masked_load_dtypes), else the lanes gathered one by one."""
        first = lanes[0]
        if self.masks and all(len(address.src) == 3 for address in addresses) and \
                all(address.src[1] is addresses[0].src[1] for address in addresses) and \
                all(lane.src[1:] == first.src[1:] for lane in lanes) and self.vector_ok(first.dtype, len(lanes)):
            selected = self._gated_broadcast(lanes, addresses)
            if selected is not None:
                return selected
        if first.dtype.scalar not in self.masked_loads or not all(len(address.src) == 3 for address in addresses) or \
                not all(lane.src[1:] == first.src[1:] for lane in lanes) or \
                not consecutive(tuple(address.src[1] for address in addresses)):
            return gather(lanes)
        gate = self.pack(tuple(address.src[2] for address in addresses))
        if gate.op is Ops.VECTORIZE:  # no mask: the gates are computed lane by lane
            return gather(lanes)
        width = len(lanes)
        index = addresses[0].replace(src=(addresses[0].src[0], addresses[0].src[1], gate))
        alternatives = tuple(broadcast(alternative, width) for alternative in first.src[1:])
        return UOp(Ops.LOAD, first.dtype.vec(width), (index,) + alternatives, first.arg)


    def _gated_broadcast(self, lanes: tuple[UOp, ...], addresses: tuple[UOp, ...]) -> UOp | None:
        """Loads of one address with a gate per lane (a per-channel value inside a padded image's border) as one
        scalar load gated by any lane's gate, broadcast, and a select by the lanes' gates packed into a mask; None
        when the gates do not pack into a mask. A gated scalar load per lane cost a branch each."""
        mask = self.pack(tuple(address.src[2] for address in addresses))
        if mask.op is Ops.VECTORIZE:
            return None
        gates = tuple(dict.fromkeys(address.src[2] for address in addresses))
        any_gate = gates[0]
        for gate in gates[1:]:
            any_gate = UOp(Ops.OR, dtypes.bool, (any_gate, gate))
        first, width = lanes[0], len(lanes)
        index = addresses[0].replace(src=(addresses[0].src[0], addresses[0].src[1], any_gate))
        value = UOp(Ops.LOAD, first.dtype, (index,) + first.src[1:], first.arg)
        # the first source that is not void (void ones only order the load) is the value where the gate is off; a
        # gated load without one reads 0
        alternatives = [source for source in first.src[1:] if source.dtype != dtypes.void]
        alternative = alternatives[0] if alternatives else UOp.const(first.dtype, 0)
        return UOp(Ops.WHERE, first.dtype.vec(width), (mask, broadcast(value, width), broadcast(alternative, width)))


def _same_source_dtypes(lane: UOp, first: UOp) -> bool:
    """True when `lane` has as many sources as `first`, of the same dtypes: lanes of one op packed into a vector must
    convert or compare the same types (a CAST of a bool and a CAST of a float to int32 are not one vector CAST)."""
    return len(lane.src) == len(first.src) and all(
        source.dtype == other.dtype for source, other in zip(lane.src, first.src, strict=True))
