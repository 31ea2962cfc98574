"""The operations of the UOp IR, from tensor-level graphs down to linearized kernels, and their groups.

The lowest module of the IR: every other module of tinycore.uop imports the operations from here.
`tinycore.uop.ops` offers them too, with the IR's classes, under tinygrad's module name.
"""
from __future__ import annotations

from enum import Enum, EnumType, auto
from typing import TypeVar

_EnumClass = TypeVar("_EnumClass", bound=type[Enum])


def fast_member_access(enum_class: _EnumClass) -> _EnumClass:
    """Gives `enum_class` a metaclass with EnumType's behaviour but its deprecated `__getattr__`, and returns it.

    Why: on Python 3.11 EnumType defines `__getattr__` (a fallback to the member map, removed in 3.12), and a
    metaclass with `__getattr__` makes every class attribute read, hits included, a call through a Python-level slot
    wrapper: `Ops.ADD` cost about 0.3 us against 0.05 us for a plain class attribute, and the passes, rules and
    tensor front end read Ops members millions of times. The members are class attributes already, so the fallback
    is never needed; iteration, `Ops[name]`, `Ops(value)`, pickling, `isinstance(member, Enum)` and the refusal to
    reassign members stay EnumType's own methods. A no-op where EnumType has no `__getattr__`."""
    metaclass = type(enum_class)
    if "__getattr__" not in EnumType.__dict__ or not issubclass(metaclass, EnumType):
        return enum_class
    # every attribute the metaclass chain defines, but the fallback and what only builds new classes
    methods = {name: value for klass in reversed(metaclass.__mro__[:-2]) for name, value in vars(klass).items()
               if name not in ("__getattr__", "__new__", "__prepare__", "__module__", "__doc__", "__qualname__")}
    fast = type(f"Fast{metaclass.__name__}", (type,), {**methods, "__module__": __name__})
    enum_class.__class__ = fast  # type: ignore[method-assign]  # a metaclass swap, checked in tests/unit/uop
    return enum_class


@fast_member_access
class Ops(Enum):
    """Every operation a UOp can have. The docstring of each group says at which level it appears."""

    # members are singletons compared by identity: hashing them by identity (in C) instead of Enum's hash of the
    # name (in Python) makes the op lookups of every pass and rule cheaper
    __hash__ = object.__hash__

    # graph structure (every level)
    SINK = auto()  # the root: src are the outputs; arg may carry KernelInfo
    NOOP = auto()
    GROUP = auto()  # several effects that must all happen (stores of one kernel, ...)
    CUSTOM = auto()  # a rendered source fragment: arg is a format string over the sources

    # tensor level: data, devices and symbolic values
    DEVICE = auto()  # arg: the canonical device name (or a tuple of names for multi-device)
    BUFFER = auto()  # src: (DEVICE,), arg: (unique id, element count); dtype is the element dtype
    BUFFER_VIEW = auto()  # src: (BUFFER,), arg: (element count, element offset)
    CONST = auto()  # arg: the Python value; at tensor level src: (DEVICE,)
    VCONST = auto()  # a vector constant: arg is a tuple of values
    DEFINE_VAR = auto()  # a symbolic integer: arg (name, min, max)
    BIND = auto()  # src: (DEFINE_VAR, CONST): a variable bound to a value

    # tensor level: movement (shape changes only, become index arithmetic)
    RESHAPE = auto()  # arg: new shape
    PERMUTE = auto()  # arg: axis order
    EXPAND = auto()  # arg: new shape (size-1 axes broadcast)
    PAD = auto()  # arg: ((before, after), ...) per axis, filled with zero (masked)
    SHRINK = auto()  # arg: ((start, end), ...) per axis
    FLIP = auto()  # arg: tuple of bools, True where the axis is reversed

    # tensor level: realization and effects
    REDUCE_AXIS = auto()  # arg: (reduce Ops (ADD, MUL, MAX), axes); reduced axes keep size 1
    COPY = auto()  # src: (x, DEVICE): x copied to another device
    MULTI = auto()  # src: one graph per device; arg: the sharded axis (None: every device holds the whole value)
    ASSIGN = auto()  # src: (target, value): value written into target's buffer
    CONTIGUOUS = auto()  # src: (x,): x must be realized into its own buffer
    CONTIGUOUS_BACKWARD = auto()  # identity forwards, CONTIGUOUS on the gradient
    DETACH = auto()  # identity forwards, stops gradients
    KERNEL = auto()  # a scheduled kernel: arg holds its AST
    # integer-tensor indexing (see tinycore/uop/indexing.py): GATHER src (x, *index tensors), arg (shape, axis map);
    # SCATTER src (target, values, *index tensors), arg (axis map, reduce op or None, parallel axes)
    GATHER = auto()
    SCATTER = auto()

    # unary ALU
    EXP2 = auto()
    LOG2 = auto()
    SIN = auto()
    SQRT = auto()
    RECIPROCAL = auto()
    NEG = auto()
    TRUNC = auto()
    CAST = auto()  # value conversion to the UOp's dtype
    BITCAST = auto()  # reinterpretation of the bits as the UOp's dtype

    # binary ALU
    ADD = auto()
    SUB = auto()
    MUL = auto()
    FDIV = auto()  # float division
    IDIV = auto()  # integer division truncating toward zero (C semantics)
    MOD = auto()  # integer remainder with the sign of the dividend (C semantics)
    MAX = auto()
    POW = auto()
    CMPLT = auto()
    CMPNE = auto()
    CMPEQ = auto()
    AND = auto()
    OR = auto()
    XOR = auto()
    SHL = auto()
    SHR = auto()
    THREEFRY = auto()  # the threefry2x32 random bit generator on uint64

    # ternary ALU
    WHERE = auto()
    MULACC = auto()  # a*b+c

    # kernel level
    DEFINE_GLOBAL = auto()  # a kernel argument buffer: arg is its position, dtype a PtrDType
    DEFINE_LOCAL = auto()  # shared/local memory: arg is a name, dtype a local PtrDType
    DEFINE_REG = auto()  # a register array (accumulators): dtype a reg PtrDType
    RANGE = auto()  # a loop variable: src (end,), arg (axis id, AxisType)
    END = auto()  # closes ranges: src (value, *ranges)
    SPECIAL = auto()  # a hardware thread index: arg name ('gidx0', 'lidx1', 'core_id'), src (size,)
    REDUCE = auto()  # reduce src[0] over the ranges src[1:]: arg the reduce op
    INDEX = auto()  # src (buffer, index[, valid]): the address of one element
    LOAD = auto()  # src (INDEX[, alternative value]); gated loads give the alternative where invalid
    STORE = auto()  # src (INDEX, value)
    BARRIER = auto()
    VECTORIZE = auto()  # build a vector from scalars
    GEP = auto()  # pick lanes of a vector: arg tuple of lane numbers
    IF = auto()
    ENDIF = auto()
    UNROLL = auto()  # an axis expanded into vector lanes during codegen
    CONTRACT = auto()  # lanes folded back
    PRECAST = auto()


FUSED = "fused"
"""The arg of a MULACC that may round once (a fused multiply-add) where the renderer has one. Only arithmetic that is
at least as accurate with one rounding is marked so (an accumulation `acc + a * b` across a reduce loop, see
RendererContract.fused_multiply_add); a plain MULACC rounds the product and the sum separately, as numpy does."""


class GroupOp:
    """Sets of Ops that rules and passes treat alike."""

    Unary = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL, Ops.NEG, Ops.TRUNC})
    Binary = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.POW, Ops.CMPLT,
                        Ops.CMPNE, Ops.CMPEQ, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.THREEFRY})
    Ternary = frozenset({Ops.WHERE, Ops.MULACC})
    ALU = Unary | Binary | Ternary
    Elementwise = ALU | {Ops.CAST, Ops.BITCAST}
    Movement = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP})
    Commutative = frozenset({Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPNE, Ops.CMPEQ, Ops.AND, Ops.OR, Ops.XOR})
    Associative = frozenset({Ops.ADD, Ops.MUL, Ops.AND, Ops.OR, Ops.MAX})
    Comparison = frozenset({Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ})
    Idempotent = frozenset({Ops.AND, Ops.OR, Ops.MAX})
    Buffer = frozenset({Ops.LOAD, Ops.STORE, Ops.CONST, Ops.DEFINE_VAR})
    Defines = frozenset({Ops.DEFINE_GLOBAL, Ops.DEFINE_LOCAL, Ops.DEFINE_REG})
    # ops whose result does not depend on the order of their sources
    Irreducible = frozenset({Ops.CONST, Ops.DEFINE_VAR, Ops.SPECIAL, Ops.RANGE})
