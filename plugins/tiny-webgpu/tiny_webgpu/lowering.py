"""The WGSL renderer's last codegen rules (its `post_matcher`, the pass "renderer: post"): what WGSL leaves undefined
or lacks, rewritten into ops it computes as C and numpy do, so that the renderer spells only plain operators and
builtins. Every rule is a UOp -> UOp rewrite of a scalar op (WGSL code is scalar):

- 8- and 16-bit integers live in i32/u32: their ops are computed in 32 bits and cast back (the cast wraps);
- a buffer of bools or 8- or 16-bit integers is an array of atomic u32 words (WGSL has no narrower storage): a load
  reads the word holding the element and shifts it down, a store clears the element's bits in the word with an
  atomic and and sets them with an atomic or (threads writing the other elements of the word run at the same time);
- a remainder is a - (a / b) * b (some adapters get % of negatives wrong; codegen's pass "guarded division" has
  made b nonzero), a float remainder a - b * trunc(a / b);
- log2, sqrt and sin out of their domain are undefined on the adapters: log2 of 0 is -inf and of negatives NaN,
  sqrt of negatives and sin of infinities NaN;
- != of floats is !(==) (true for NaN even where the backend compares ordered); bool arithmetic is logic (WGSL's
  bool has no + * - ^ <), a conversion to bool is != 0; an unsigned negation is 0 - x; an integer TRUNC is its
  operand."""
from __future__ import annotations

import math

from tinycore.dtype import DType, PtrDType, dtypes
from tinycore.uop.ops import GroupOp, Ops
from tinycore.uop.patterns import PatternMatcher, UPat
from tinycore.uop.uop import UOp

PACKED_DTYPES = (dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16)
WIDE_INTEGERS: dict[DType, DType] = {dtypes.int8: dtypes.int32, dtypes.int16: dtypes.int32,
                                     dtypes.uint8: dtypes.uint32, dtypes.uint16: dtypes.uint32}
IN_DOMAIN = "in domain"  # the arg of a math op whose out-of-domain operands are already handled (not rewritten again)
_BOOL_OPS = {Ops.ADD: Ops.OR, Ops.MAX: Ops.OR, Ops.MUL: Ops.AND, Ops.FDIV: Ops.AND, Ops.SUB: Ops.CMPNE,
             Ops.XOR: Ops.CMPNE}

def _word(index: UOp) -> tuple[UOp, UOp] | None:
    """The INDEX of the u32 word holding a packed buffer's element (the kernel's start of the buffer is in bytes:
    `params.startN`) and the element's bit offset in it; None for other INDEXes."""
    buffer = index.src[0]
    if buffer.op is not Ops.DEFINE_GLOBAL or not isinstance(buffer.dtype, PtrDType) or \
            buffer.dtype.base not in PACKED_DTYPES or len(index.src) < 2 or index.dtype == dtypes.uint32.ptr():
        return None  # (the last: already the word's INDEX)
    size = buffer.dtype.base.itemsize
    start = UOp(Ops.CUSTOM, dtypes.int32, (), f"params.start{buffer.arg}")
    address = (start + (index.src[1] if size == 1 else index.src[1] * size)).cast(dtypes.uint32)
    word = UOp(Ops.INDEX, dtypes.uint32.ptr(), (buffer, address.alu(Ops.SHR, address.const_like(2)), *index.src[2:]))
    return word, (address & (3 if size == 1 else 2)) * 8

def _packed_load(load: UOp) -> UOp | None:
    if (found := _word(load.src[0])) is None:
        return None
    (word, shift), dtype = found, load.dtype
    bits = UOp(Ops.LOAD, dtypes.uint32, (word, *(source for source in load.src[1:] if source.dtype == dtypes.void)))
    value = bits.alu(Ops.SHR, shift).cast(dtypes.uint8 if dtype == dtypes.bool else dtype)
    value = value.cast(dtypes.bool) if dtype == dtypes.bool else value
    # a gated word reads 0 where its gate is off; the load's alternative (its first source not of dtype void) there
    alternative = next((source for source in load.src[1:] if source.dtype != dtypes.void), None)
    return value if alternative is None or len(word.src) < 3 else word.src[2].where(value, alternative)

def _packed_store(store: UOp) -> UOp | None:
    if (found := _word(store.src[0])) is None or store.arg is not None:
        return None
    (word, shift), value = found, store.src[1]
    mask = UOp.const(dtypes.uint32, 0xFF if value.dtype.itemsize == 1 else 0xFFFF)
    cleared = UOp(Ops.STORE, dtypes.void, (word, (mask << shift) ^ 0xFFFFFFFF), "and")
    return UOp(Ops.STORE, dtypes.void, (word, (value.cast(dtypes.uint32) & mask) << shift, cleared), "or")

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
    (UPat(Ops.LOAD, name="load"), _packed_load), (UPat(Ops.STORE, name="store"), _packed_store),
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
