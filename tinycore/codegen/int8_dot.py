"""Dot products of four packed bytes: the pass "int8 dot products" and the expression it recognizes.

A 32-bit word packs four bytes. `dot4_bytes(unsigned, signed)` writes, in plain integer ops that every renderer and the
interpreter run, the sum over the four byte positions of the unsigned byte of one word times the signed byte of the
other: what x86's vpdpbusd (AVX-512 VNNI, AVX-VNNI) computes for each int32 lane, and ARM's usdot. Where the renderer
declares `int8_dot_products`, the pass rewrites that expression (plus whatever is added to it) into one CUSTOM op,
`tc_dot4_u8s8(accumulator, unsigned, signed)`, which the renderer defines for each vector width it meets (C: the
compiler's builtin). Elsewhere the expression stays as written, so every device computes the same integers.
"""
from __future__ import annotations

from typing import Protocol, TypeVar

from tinycore.dtype import dtypes
from tinycore.uop.ops import Ops
from tinycore.uop.patterns import PatternMatcher, UPat
from tinycore.uop.uop import UOp

DOT4_NAME = "tc_dot4_u8s8"
"""The CUSTOM op's function, suffixed with its lane count: tc_dot4_u8s8_16(accumulator, unsigned words, signed words)
for int32 vectors of 16 lanes, tc_dot4_u8s8_1 for scalars."""

Word = TypeVar("Word", bound="_Integers")


class _Integers(Protocol):
    """What dot4_bytes needs of its operands (a Tensor or a UOp of int32)."""

    def __rshift__(self: Word, other: int) -> Word: ...
    def __and__(self: Word, other: int) -> Word: ...
    def __xor__(self: Word, other: int) -> Word: ...
    def __add__(self: Word, other: Word | int) -> Word: ...
    def __mul__(self: Word, other: Word) -> Word: ...


def unsigned_byte(word: Word, position: int) -> Word:
    """Byte `position` (0: the lowest) of int32 `word` as 0..255."""
    return (word >> 8 * position if position else word) & 255


def signed_byte(word: Word, position: int) -> Word:
    """Byte `position` of int32 `word` as -128..127 (the unsigned byte with its top bit's weight made negative)."""
    return (unsigned_byte(word, position) ^ 128) + -128


def dot4_bytes(unsigned: Word, signed: Word) -> Word:
    """Per int32 lane: the sum over its four bytes of `unsigned`'s byte (0..255) times `signed`'s (-128..127), in
    int32 (at most 4 * 255 * 128 in size, no overflow). The form the pass "int8 dot products" recognizes."""
    total = unsigned_byte(unsigned, 0) * signed_byte(signed, 0)
    for position in range(1, 4):
        total = total + unsigned_byte(unsigned, position) * signed_byte(signed, position)
    return total


def _constant(uop: UOp) -> int | None:
    """The integer every lane of `uop` holds, if it is a constant (scalar, broadcast, or equal lanes)."""
    if uop.op is Ops.CONST:
        return uop.arg if isinstance(uop.arg, int) else None
    if uop.op is Ops.VCONST and len(set(uop.arg)) == 1:
        return uop.arg[0] if isinstance(uop.arg[0], int) else None
    if uop.op is Ops.VECTORIZE and all(lane is uop.src[0] for lane in uop.src):
        return _constant(uop.src[0])
    return None


def _operands(uop: UOp, op: Ops) -> tuple[UOp, int] | None:
    """(x, c) when `uop` is `op` of x and the constant c, in either order."""
    if uop.op is not op:
        return None
    for first, second in (uop.src, uop.src[::-1]):
        if (value := _constant(second)) is not None:
            return first, value
    return None


def _unsigned_byte_of(uop: UOp) -> tuple[UOp, int] | None:
    """(word, position) when `uop` is unsigned_byte(word, position)."""
    masked = _operands(uop, Ops.AND)
    if masked is None or masked[1] != 255:
        return None
    shifted = _operands(masked[0], Ops.SHR)
    if shifted is None:
        return masked[0], 0
    return (shifted[0], shifted[1] // 8) if shifted[1] in (8, 16, 24) else None


def _signed_byte_of(uop: UOp) -> tuple[UOp, int] | None:
    """(word, position) when `uop` is signed_byte(word, position)."""
    offset = _operands(uop, Ops.ADD)
    if offset is None or offset[1] != -128:
        return None
    flipped = _operands(offset[0], Ops.XOR)
    return _unsigned_byte_of(flipped[0]) if flipped is not None and flipped[1] == 128 else None


def _byte_product(uop: UOp) -> tuple[UOp, UOp, int] | None:
    """(unsigned word, signed word, position) when `uop` is one term of dot4_bytes."""
    if uop.op is not Ops.MUL:
        return None
    for first, second in (uop.src, uop.src[::-1]):
        unsigned, signed = _unsigned_byte_of(first), _signed_byte_of(second)
        if unsigned is not None and signed is not None and unsigned[1] == signed[1]:
            return unsigned[0], signed[0], unsigned[1]
    return None


def _terms(uop: UOp) -> list[UOp]:
    """The operands of a tree of int32 ADDs rooted at `uop`, left to right."""
    if uop.op is not Ops.ADD or uop.dtype.scalar != dtypes.int32:
        return [uop]
    return [term for source in uop.src for term in _terms(source)]


def fuse_dot4(total: UOp) -> UOp | None:
    """An int32 sum containing the four terms of dot4_bytes(a, b) -> tc_dot4_u8s8(the other terms summed, a, b)."""
    if total.dtype.scalar != dtypes.int32:
        return None
    for fused, other in (total.src, total.src[::-1]):
        if _is_dot4(fused):  # one more term to accumulate
            accumulator = other if _constant(fused.src[0]) == 0 else fused.src[0] + other
            return UOp(Ops.CUSTOM, total.dtype, (accumulator, *fused.src[1:]), fused.arg)
    terms = _terms(total)
    if len(terms) < 4:
        return None
    found = [_byte_product(term) for term in terms]
    for first in found:
        if first is None or first[2] != 0:
            continue
        members = [next((position for position, match in enumerate(found) if match == (*first[:2], byte)), None)
                   for byte in range(4)]
        if any(member is None for member in members):
            continue
        rest = [term for position, term in enumerate(terms) if position not in members]
        accumulator = rest[0] if rest else total.const_like(0)
        for other in rest[1:]:
            accumulator = accumulator + other
        return UOp(Ops.CUSTOM, total.dtype, (accumulator, *first[:2]),
                   f"{DOT4_NAME}_{total.dtype.count}({{0}}, {{1}}, {{2}})")
    return None


int8_dot_rules = PatternMatcher([(UPat(Ops.ADD, name="total"), fuse_dot4)])
"""The pass "int8 dot products": dot4_bytes expressions (and what is added to them) as one tc_dot4_u8s8 each, for
renderers that declare int8_dot_products."""


def dot4_words(ast: UOp) -> tuple[UOp, UOp] | None:
    """The (unsigned, signed) words of the first dot4_bytes term in the kernel `ast` (an unsigned byte of one word
    times the same signed byte of another), before the pass rewrites it; None when it has none (the heuristic's tile
    for integer products)."""
    for node in ast.toposort:
        if node.op is Ops.MUL and (found := _byte_product(node)) is not None:
            return found[0], found[1]
    return None


def _is_dot4(uop: UOp) -> bool:
    return uop.op is Ops.CUSTOM and str(uop.arg).startswith(f"{DOT4_NAME}_{uop.dtype.count}(")


def dot4_widths(uops: list[UOp]) -> set[int]:
    """The int32 vector widths (1 for scalars) of the tc_dot4_u8s8 ops in `uops` (for a renderer's prelude)."""
    return {uop.dtype.count for uop in uops if _is_dot4(uop)}
