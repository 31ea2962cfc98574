"""The WGSL renderer's last codegen rules (its `post_matcher`, the pass "renderer: post"): what WGSL leaves undefined
or lacks, rewritten into ops it computes as C and numpy do, so that the renderer spells only plain operators and
builtins. Every rule is a UOp -> UOp rewrite of a scalar op (WGSL code is scalar):

- 8- and 16-bit integers live in i32/u32: their ops are computed in 32 bits and cast back (the cast wraps);
- a remainder is a - (a / b) * b (some adapters get % of negatives wrong; codegen's pass "guarded division" has
  made b nonzero), a float remainder a - b * trunc(a / b);
- log2, sqrt and sin out of their domain are undefined on the adapters: log2 of 0 is -inf and of negatives NaN,
  sqrt of negatives and sin of infinities NaN;
- != of floats is !(==) (true for NaN even where the backend compares ordered); bool arithmetic is logic (WGSL's
  bool has no + * - ^ <), a conversion to bool is != 0; an unsigned negation is 0 - x; an integer TRUNC is its
  operand."""
from __future__ import annotations

import math

from tinycore.dtype import DType, dtypes
from tinycore.uop.ops import GroupOp, Ops
from tinycore.uop.patterns import PatternMatcher, UPat
from tinycore.uop.uop import UOp

WIDE_INTEGERS: dict[DType, DType] = {dtypes.int8: dtypes.int32, dtypes.int16: dtypes.int32,
                                     dtypes.uint8: dtypes.uint32, dtypes.uint16: dtypes.uint32}
IN_DOMAIN = "in domain"  # the arg of a math op whose out-of-domain operands are already handled (not rewritten again)
_BOOL_OPS = {Ops.ADD: Ops.OR, Ops.MAX: Ops.OR, Ops.MUL: Ops.AND, Ops.FDIV: Ops.AND, Ops.SUB: Ops.CMPNE,
             Ops.XOR: Ops.CMPNE}

def _in_32_bits(x: UOp) -> UOp:
    wide = WIDE_INTEGERS[x.dtype]
    sources = tuple(UOp.const(wide, source.arg) if source.op is Ops.CONST else source.cast(wide)
                    if source.dtype in WIDE_INTEGERS else source for source in x.src)
    return UOp(x.op, wide, sources).cast(x.dtype)

def _remainder(x: UOp) -> UOp:
    dividend, divisor = x.src
    if dtypes.is_float(x.dtype):
        return dividend.alu(Ops.SUB, divisor * (dividend / divisor).trunc())
    return dividend.alu(Ops.SUB, dividend.alu(Ops.IDIV, divisor) * divisor)

def _domain(x: UOp) -> UOp | None:
    if x.arg == IN_DOMAIN or not dtypes.is_float(x.dtype):
        return None
    operand, inside, nan = x.src[0], x.replace(arg=IN_DOMAIN), x.const_like(math.nan)
    if x.op is Ops.SIN:
        return (operand.eq(x.const_like(math.inf)) | operand.eq(x.const_like(-math.inf))).where(nan, inside)
    below = operand < x.const_like(0)
    if x.op is Ops.SQRT:
        return below.where(nan, inside)
    return below.where(nan, operand.eq(x.const_like(0)).where(x.const_like(-math.inf), inside))

def _bool_logic(x: UOp) -> UOp | None:
    if x.op is Ops.CMPLT:
        return x.src[0].alu(Ops.NEG).alu(Ops.AND, x.src[1])
    return UOp(_BOOL_OPS[x.op], dtypes.bool, x.src) if x.op in _BOOL_OPS else None

wgsl_lowering = PatternMatcher([
    (UPat(tuple(GroupOp.ALU - GroupOp.Comparison - {Ops.WHERE}), dtype=tuple(WIDE_INTEGERS), name="x"), _in_32_bits),
    (UPat(Ops.MOD, name="x"), _remainder),
    (UPat((Ops.LOG2, Ops.SQRT, Ops.SIN), name="x"), _domain),
    (UPat(Ops.CMPNE, src=(UPat(dtype=(dtypes.float32, dtypes.float16), name="a"), UPat(name="b"))),
     lambda a, b: a.eq(b).alu(Ops.NEG)),
    (UPat(GroupOp.ALU, src=(UPat(dtype=dtypes.bool), UPat(dtype=dtypes.bool)), name="x"), _bool_logic),
    (UPat(Ops.NEG, dtype=dtypes.uint32, name="x"), lambda x: x.const_like(0).alu(Ops.SUB, x.src[0])),
    (UPat(Ops.TRUNC, name="x"), lambda x: None if dtypes.is_float(x.dtype) else x.src[0]),
    (UPat(Ops.CAST, dtype=dtypes.bool, src=(UPat(name="a"),)), lambda a: a.ne(a.const_like(0))),
])
"""The WGSL renderer's post_matcher (see the module docstring)."""
