"""Addresses of buffer elements: an INDEX's integer sum folded into x86 addressing, its loop-invariant part hoisted.

An element's index is a tree of integer ADDs over a few values (loop counters, per-row offsets, a thread's base)
and constants. Selected one ADD at a time, each load paid for its own additions and a sign extension in the inner
loop (a 1024^2 matmul's reduce loop spent ~40 integer instructions on 8 loads). Here the tree is flattened: the
constants become the displacement of `[base + sum*size + constant*size]`, the values are sign-extended once each
and summed in 64 bits in the order of the loops they come from, and each partial sum is computed in the preheader of
the innermost loop it does not vary in, once for every INDEX that shares it. The sum of the int32 terms in 64 bits
equals the int32 sum sign-extended wherever that sum does not overflow (C's int index arithmetic has no
overflow either).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tiny_cpu.x86.encoding import fits_int32
from tinycore.dtype import dtypes
from tinycore.renderer.isa import Memory, VirtualRegister
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp

if TYPE_CHECKING:
    from tiny_cpu.x86.isel import Selection

ADDRESS_DTYPES = (dtypes.int32, dtypes.int64)
"""Index dtypes whose ADD trees are folded (signed: their terms are sign-extended to 64 bits)."""


def address_only_sums(uops: list[UOp]) -> set[UOp]:
    """The integer ADDs whose every consumer is a global buffer's INDEX (as its index) or another such ADD: their
    values are only ever part of an address, so they need no instructions of their own."""
    consumers: dict[UOp, list[UOp]] = {}
    for uop in uops:
        for source in uop.src:
            consumers.setdefault(source, []).append(uop)
    only: set[UOp] = set()
    for uop in reversed(uops):  # consumers come after their sources
        if uop.op is not Ops.ADD or uop.dtype not in ADDRESS_DTYPES or uop not in consumers:
            continue
        if all((user.op is Ops.INDEX and user.src[0].op is Ops.DEFINE_GLOBAL and user.src[1] is uop
                and uop not in (user.src[0], *user.src[2:])) or user in only for user in consumers[uop]):
            only.add(uop)
    return only


def loop_paths(uops: list[UOp]) -> dict[UOp, tuple[UOp, ...]]:
    """The RANGEs open at each UOp, outermost first (a RANGE counts as inside its own loop)."""
    paths: dict[UOp, tuple[UOp, ...]] = {}
    open_ranges: list[UOp] = []
    for uop in uops:
        if uop.op is Ops.RANGE:
            open_ranges.append(uop)
        paths[uop] = tuple(open_ranges)
        if uop.op is Ops.END:
            for _ in range(sum(1 for source in uop.src if source.op is Ops.RANGE) or 1):
                if open_ranges:
                    open_ranges.pop()
    return paths


def _terms(ctx: Selection, index: UOp) -> tuple[list[UOp], int]:
    """The values and the constant an index sums, through ADDs of its dtype."""
    terms: list[UOp] = []
    constant = 0
    pending = [index]
    while pending:
        node = pending.pop()
        value = ctx.values.get(node)
        if node.op is Ops.CONST and isinstance(value, int):
            constant += value
        elif node.op is Ops.ADD and node.dtype == index.dtype and (node in ctx.address_only or node is index):
            pending.extend(reversed(node.src))
        else:
            terms.append(node)
    return terms, constant


def _depth(ctx: Selection, term: UOp) -> int:
    """How many of the open loops `term` is computed inside: its sums may be hoisted out of the ones deeper than
    that. A term from another loop nest than the current one stays where it is used."""
    current = tuple(ctx.open_ranges)
    path = ctx.paths.get(term, current)
    return len(path) if current[:len(path)] == path else len(current)


def _memoized(ctx: Selection, key: tuple[object, ...]) -> VirtualRegister | None:
    for level in ctx.address_sums:
        if key in level:
            return level[key]
    return None


def _wide(ctx: Selection, term: UOp, depth: int) -> VirtualRegister:
    """`term`'s value in a 64-bit register (sign-extended once, where the term is computed)."""
    key: tuple[object, ...] = ("wide", term)
    found = _memoized(ctx, key)
    if found is not None:
        return found
    register = ctx.register(term)
    if register.bits != 64:
        wide = ctx.builder.value("gpr", 64)
        ctx.emit_at(depth, "movsxd", wide, register)
        register = wide
    ctx.address_sums[depth][key] = register
    return register


def element_address(ctx: Selection, base: VirtualRegister, index: UOp, size: int) -> Memory | None:
    """`[base + index*size]` with `index`'s constants in the displacement and its values summed (hoisted and shared
    as far as they are loop-invariant); None when the index is not a signed 32- or 64-bit integer or the element
    is not 1, 2, 4 or 8 bytes (x86's scales)."""
    if index.dtype not in ADDRESS_DTYPES or size not in (1, 2, 4, 8):
        return None
    terms, constant = _terms(ctx, index)
    displacement = constant * size
    if not terms and fits_int32(displacement):
        return Memory(base, None, 1, displacement, size * 8)
    terms.sort(key=lambda term: (_depth(ctx, term), ctx.position.get(term, -1)))
    total: VirtualRegister | None = None
    key: tuple[object, ...] = ()
    for term in terms:
        depth = _depth(ctx, term)
        key = (*key, term)
        found = _memoized(ctx, ("sum", key))
        if found is not None:
            total = found
            continue
        wide = _wide(ctx, term, depth)
        if total is None:
            total = wide
        else:
            summed = ctx.builder.value("gpr", 64)
            ctx.emit_at(depth, "lea", summed, Memory(total, wide, 1, 0, 64))
            total = summed
        ctx.address_sums[depth][("sum", key)] = total
    if not fits_int32(displacement):  # beyond a displacement's reach: the constant joins the sum, here
        offset = ctx.builder.value("gpr", 64)
        ctx.builder.emit("mov", offset, constant)
        if total is not None:
            ctx.builder.emit("add", offset, total)
        total, displacement = offset, 0
    assert total is not None
    return Memory(base, total, size, displacement, size * 8)


def broadcast_source(ctx: Selection, load: UOp) -> bool:
    """Whether a scalar float32 load is only ever broadcast (VECTORIZE of it in every lane) with no store in
    between: the broadcast then reads memory itself (vbroadcastss ymm or zmm, [address]) and the load needs no
    register (the 16-lane matmul tile's 24 accumulators, 4 vectors and a broadcast take 29 of the 29 registers)."""
    if load.dtype != dtypes.float32 or len(load.src) != 1:
        return False
    users = ctx.consumers.get(load, [])
    if not users or any(user.op is not Ops.VECTORIZE or any(source is not load for source in user.src)
                        or user.dtype.count not in (4, 8, 16) for user in users):
        return False
    start, end = ctx.position[load], max(ctx.position[user] for user in users)
    return not any(uop.op is Ops.STORE for uop in ctx.uops[start:end])
