"""Lanes put back into vectors: a VECTORIZE whose lanes are the same scalar expression over the lanes of one vector
is selected as that expression's vector instructions, and the scalar lanes are not selected at all.

Codegen devectorizes what the x86 contract has no vectors for (integers), so the core's exp2 builds its power of two
lane by lane: GEP, BITCAST to uint32, shifts and adds, BITCAST back, then VECTORIZE (softmax's inner loop held ~130
scalar instructions and moves between vector and general registers per 8 lanes for it). AVX2 has the integer
vectors: here the lane trees are matched (same op, dtype and arg in every lane, leaves that are lane i of one vector
or one value repeated) and emitted once as zmm, ymm or xmm instructions (by the lane count). A lane value also used
outside such trees keeps its scalar code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tiny_cpu.x86.scalars import float_bits
from tinycore.dtype import dtypes
from tinycore.renderer.isa import VirtualRegister
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp

if TYPE_CHECKING:
    from tiny_cpu.x86.isel import Selection

LANE_DTYPES = (dtypes.int32, dtypes.uint32, dtypes.float32)
"""The 32-bit lane dtypes a vector of dwords holds."""
_INTEGER_BINARY = {Ops.ADD: "vpaddd", Ops.SUB: "vpsubd", Ops.MUL: "vpmulld", Ops.AND: "vpand", Ops.OR: "vpor",
                   Ops.XOR: "vpxor"}
_EVEX_LOGIC = {"vpand": "vpandd", "vpor": "vpord", "vpxor": "vpxord"}  # zmm's forms (VEX has no 512 bits)
_FLOAT_BINARY = {Ops.ADD: "vaddps", Ops.SUB: "vsubps", Ops.MUL: "vmulps", Ops.MAX: "vmaxps"}
_SHIFTS = (Ops.SHL, Ops.SHR)


def _leaf(lanes: tuple[UOp, ...]) -> bool:
    """Lane i of one vector in lane i, or one value in every lane."""
    first = lanes[0]
    if all(lane is first for lane in lanes):
        return first.dtype in LANE_DTYPES
    if first.op is not Ops.GEP or first.src[0].dtype != dtypes.float32.vec(len(lanes)):
        return False
    return all(lane.op is Ops.GEP and lane.src[0] is first.src[0] and lane.arg == (i,) for i, lane in enumerate(lanes))


def _shift_count(lanes: tuple[UOp, ...]) -> int | None:
    """The shift count every lane shares, when it is one constant."""
    count = lanes[0].src[1]
    if count.op is not Ops.CONST or any(lane.src[1] is not count for lane in lanes):
        return None
    return int(count.arg) & 31


def _matches(lanes: tuple[UOp, ...], interior: set[UOp], repeated: set[UOp]) -> bool:
    """Whether the lane trees are one expression the vector instructions here compute, adding their inner UOps
    (the ones not needed once the vector is built) to `interior` and the values repeated across lanes (which keep
    their scalar code) to `repeated`."""
    if _leaf(lanes):
        if lanes[0].op is Ops.GEP:
            interior.update(lanes)
        else:
            repeated.add(lanes[0])
        return True
    first = lanes[0]
    if first.dtype not in LANE_DTYPES or len(set(lanes)) != len(lanes):
        return False
    if any(lane.op is not first.op or lane.dtype != first.dtype or lane.arg != first.arg
           or len(lane.src) != len(first.src) for lane in lanes):
        return False
    if first.op is Ops.BITCAST:
        if first.src[0].dtype not in LANE_DTYPES:
            return False
        operands = [tuple(lane.src[0] for lane in lanes)]
    elif first.op in _SHIFTS:
        if first.dtype == dtypes.float32 or _shift_count(lanes) is None:
            return False
        operands = [tuple(lane.src[0] for lane in lanes)]
    elif first.op in (_FLOAT_BINARY if first.dtype == dtypes.float32 else _INTEGER_BINARY):
        operands = [tuple(lane.src[position] for lane in lanes) for position in range(2)]
    else:
        return False
    found: set[UOp] = set()
    if not all(_matches(operand, found, repeated) for operand in operands):
        return False
    interior.update(found)
    interior.update(lanes)
    return True


def vector_lanes(uops: list[UOp]) -> tuple[set[UOp], set[UOp]]:
    """(the VECTORIZEs built by vector instructions, the scalar lane UOps nothing else needs, left unselected)."""
    consumers: dict[UOp, list[UOp]] = {}
    for uop in uops:
        for source in uop.src:
            consumers.setdefault(source, []).append(uop)
    built: set[UOp] = set()
    interior: set[UOp] = set()
    repeated: set[UOp] = set()
    for uop in uops:
        if uop.op is not Ops.VECTORIZE or uop.dtype.scalar != dtypes.float32 or uop.dtype.count not in (4, 8, 16):
            continue
        lanes = tuple(uop.src)
        if len(set(lanes)) == 1:  # a broadcast: the selection's own rule
            continue
        found: set[UOp] = set()
        if _matches(lanes, found, repeated):
            built.add(uop)
            interior |= found
    interior -= repeated
    changed = True
    while changed:  # a lane value some other UOp reads keeps its scalar code, and so do its sources
        changed = False
        for uop in list(interior):
            if any(user not in interior and user not in built for user in consumers.get(uop, [])):
                interior.discard(uop)
                changed = True
    return built, interior


def _splat(ctx: Selection, value: UOp, bits: int) -> VirtualRegister:
    """One scalar repeated in every lane (a constant made once, before the loops)."""
    if value.op is Ops.CONST:
        pattern = float_bits(float(value.arg), value.dtype)[0] if value.dtype == dtypes.float32 else \
            int(value.arg) & 0xFFFFFFFF
        return ctx.splat_constant(pattern, bits)
    register = ctx.builder.value("vec", bits)
    if value.dtype == dtypes.float32:
        ctx.builder.emit("vbroadcastss", register, ctx.register(value))
        return register
    carrier, low = ctx.register(value), ctx.builder.value("vec", 128)
    ctx.builder.emit("vmovd", low, carrier)
    ctx.builder.emit("vpbroadcastd", register, low)
    return register


def build_vector(ctx: Selection, lanes: tuple[UOp, ...]) -> VirtualRegister:
    """The vector whose lanes are `lanes` (a tree `vector_lanes` matched), emitted once per distinct lane tuple."""
    found = ctx.lane_vectors.get(lanes)
    if found is not None:
        return found
    bits, first = 32 * len(lanes), lanes[0]
    if all(lane is first for lane in lanes):
        result = _splat(ctx, first, bits)
    elif first.op is Ops.GEP:
        result = ctx.register(first.src[0])
    elif first.op is Ops.BITCAST:
        result = build_vector(ctx, tuple(lane.src[0] for lane in lanes))
    else:
        result = ctx.builder.value("vec", bits)
        left = build_vector(ctx, tuple(lane.src[0] for lane in lanes))
        if first.op in _SHIFTS:
            signed = first.dtype == dtypes.int32 and first.op is Ops.SHR
            name = "vpslld" if first.op is Ops.SHL else "vpsrad" if signed else "vpsrld"
            count = _shift_count(lanes)
            assert count is not None
            ctx.builder.emit(name, result, left, count)
        else:
            table = _FLOAT_BINARY if first.dtype == dtypes.float32 else _INTEGER_BINARY
            right = build_vector(ctx, tuple(lane.src[1] for lane in lanes))
            name = table[first.op]
            ctx.builder.emit(_EVEX_LOGIC.get(name, name) if bits == 512 else name, result, left, right)
    ctx.lane_vectors[lanes] = result
    return result
