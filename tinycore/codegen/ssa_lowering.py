"""The pass "SSA lowering": what the SSA-register renderers (PTX, LLVM IR) would each spell as a sequence of
instructions, as plain UOps before rendering (their `post_matcher`), so that each language spells one op per UOp:

- MAX is C's (a<b)?b:a (a NaN first operand is kept, as on the C renderer), and of bools their OR;
- a conversion to bool is != 0 (NaN is true, as in C) and one from bool the select of 1 or 0;
- arithmetic and comparisons of bools are logic (C's _Bool: + is or, * and, - and != xor, < is !a & b);
- bools in memory are bytes (the languages' bool is a predicate or an i1): a load reads the bytes and compares them
  with 0, a store writes 1 or 0 (a combining store keeps its bool: each language's compare-and-swap loop converts)."""
from __future__ import annotations

from tinycore.dtype import PtrDType, dtypes
from tinycore.uop.ops import Ops
from tinycore.uop.patterns import PatternMatcher, UPat
from tinycore.uop.uop import UOp


def _bool_cast(x: UOp, a: UOp) -> UOp | None:
    if isinstance(x.dtype, PtrDType) or (x.dtype.scalar == dtypes.bool) == (a.dtype.scalar == dtypes.bool):
        return None
    if x.dtype.scalar == dtypes.bool:
        return a.ne(UOp.const(a.dtype.scalar, 0))
    return UOp(Ops.WHERE, x.dtype, (a, UOp.const(x.dtype.scalar, 1), UOp.const(x.dtype.scalar, 0)))


def _bool_load(x: UOp) -> UOp:
    byte = dtypes.uint8.vec(x.dtype.count) if x.dtype.count > 1 else dtypes.uint8
    sources = (source if source.dtype == dtypes.void else source.cast(byte) for source in x.src[1:])
    return UOp(Ops.LOAD, byte, (x.src[0], *sources), x.arg).cast(x.dtype)


_BOOL_LOGIC = {Ops.ADD: Ops.OR, Ops.MAX: Ops.OR, Ops.MUL: Ops.AND, Ops.SUB: Ops.XOR, Ops.CMPNE: Ops.XOR}


def _bool_logic(x: UOp, a: UOp, b: UOp) -> UOp | None:
    if x.op in _BOOL_LOGIC:
        return UOp(_BOOL_LOGIC[x.op], x.dtype, (a, b))
    return a.alu(Ops.XOR, b).alu(Ops.NEG) if x.op is Ops.CMPEQ else a.alu(Ops.NEG).alu(Ops.AND, b)


ssa_lowering = PatternMatcher([
    (UPat((Ops.ADD, Ops.MUL, Ops.SUB, Ops.MAX, Ops.CMPNE, Ops.CMPEQ, Ops.CMPLT), src=(
        UPat(dtype=dtypes.bool, name="a"), UPat(name="b")), name="x"), _bool_logic),
    (UPat(Ops.MULACC, src=(UPat(dtype=dtypes.bool, name="a"), UPat(name="b"), UPat(name="c"))),
     lambda a, b, c: a.alu(Ops.AND, b).alu(Ops.OR, c)),
    (UPat(Ops.MAX, src=(UPat(name="a"), UPat(name="b"))), lambda a, b: (a < b).where(b, a)),
    (UPat(Ops.CAST, src=(UPat(name="a"),), name="x"), _bool_cast),
    (UPat(Ops.LOAD, dtype=dtypes.bool, name="x"), _bool_load),
    (UPat(Ops.STORE, src=(UPat(name="index"), UPat(dtype=dtypes.bool, name="value")), allow_any_len=True, name="x"),
     lambda x, index, value: None if x.arg is not None else x.replace(src=(index, value.cast(
         dtypes.uint8.vec(value.dtype.count) if value.dtype.count > 1 else dtypes.uint8), *x.src[2:])))])
"""The rules of the pass (see the module docstring), shared by the PTX and LLVM IR renderers."""
