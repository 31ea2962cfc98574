"""UOp: the immutable, hash-consed node of every graph in tinycore, with arithmetic that builds ALU nodes."""
from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, Union

from tinycore.dtype import ConstType, DType, PtrDType, dtypes, least_upper_dtype, truncate
from tinycore.helpers import cached_node_property
from tinycore.uop.opcodes import GroupOp, Ops
from tinycore.uop.shape import ShapeMixin

if TYPE_CHECKING:
    import numpy


class DeviceBuffer(Protocol):
    """What `UOp.buffer` gives: the device Buffer behind a BUFFER node (tinycore.device.buffer.Buffer). The IR sits
    below the devices, so it declares only what it hands on."""

    device: str
    size: int
    dtype: DType

    def numpy(self) -> numpy.ndarray:
        """The buffer's contents copied to the host."""
        ...


class UpperFunctions:
    """The functions of the modules above this one that UOp's methods call.

    The simplifier, the printer and the multi-device mapping build UOps, so they import this module and it cannot
    import them. Each fills its entries here when it is imported (multi.py, printer.py, symbolic.py), and
    tinycore/uop/__init__.py imports them all, so they are in place before any code outside the IR runs. The engine's
    memory (tinycore.engine.memory, far above) fills `buffer_of` for `UOp.buffer`: only a realized node has one,
    and realizing imports it.
    """

    map_multi: Callable[[Ops, DType, tuple[UOp, ...], Any], UOp]
    shard_bounds: Callable[[UOp], list[tuple[int, int]]]
    pretty_print: Callable[[UOp], str]
    render_expr: Callable[[UOp], str]
    simplify: Callable[[UOp], UOp]
    ssimplify: Callable[[sint], sint]
    variable: Callable[[str, int, int, DType], UOp]
    buffer_of: Callable[[UOp], DeviceBuffer]
    bounds: Callable[[UOp], tuple[ConstType, ConstType]]

    def __getattr__(self, name: str) -> NoReturn:
        raise RuntimeError(f"UOp needs {name}, which the module defining it fills when imported: import tinycore.uop "
                           "(the package) before using UOps; for buffer_of, import tinycore.engine.memory (realizing "
                           "a Tensor does)")


upper = UpperFunctions()
"""The one table of UpperFunctions."""


def _arg_key(arg: object) -> object:
    """A cache key for `arg` that tells apart values Python considers equal (1, 1.0, True; 0.0, -0.0; nan)."""
    if arg.__class__ is float:
        return ("float", repr(arg))
    if arg.__class__ is tuple:
        if all(item.__class__ is int for item in arg):  # shapes and axes: the common case, keyed without recursion
            return ("ints", arg)
        return tuple(_arg_key(item) for item in arg)
    if arg.__class__ in (int, bool):
        return (arg.__class__, arg)
    return arg


def _touches_several_devices(op: Ops, src: tuple[UOp, ...]) -> bool:
    """True when a node over `src` is a multi-device value: a source is MULTI, or a constant or copy names a tuple
    of devices. Such nodes are built one per device (tinycore.uop.multi), never as one node."""
    for source in src:
        if source.op is Ops.MULTI or (source.op is Ops.DEVICE and isinstance(source.arg, tuple)):
            return True
    return False


_MULTI, _DEVICE = Ops.MULTI, Ops.DEVICE
"""For UOp construction's multi-device test: every node built with sources reads one or more per source, and a
global is one read where `Ops.X` is two."""


class _NodeRef(weakref.ref):
    """A weak reference to a live node that knows its cache key (set after creation: weakref.ref's own C
    constructor runs, which is what makes this cheaper than weakref.KeyedRef, whose constructor is Python)."""

    __slots__ = ("key",)
    key: tuple


def _forget(reference: _NodeRef) -> None:
    """Drop a dead node's cache entry (unless the key already names a newer node)."""
    # at interpreter shutdown the module's globals are already None when the last nodes die
    cache: dict[tuple, _NodeRef] | None = getattr(UOpMetaClass, "ucache", None)
    if cache is not None and cache.get(reference.key) is reference:
        del cache[reference.key]


class UOpMetaClass(type):
    """Hash-consing: constructing a UOp equal to a live one returns that same object."""

    ucache: dict[tuple, _NodeRef] = {}
    """Key -> weak reference to the live node with that key; an entry leaves when its node dies. A plain dict of
    weak references: node construction is the unit cost of every graph built, and a WeakValueDictionary's entry
    costs two Python-level calls to make and one to drop."""

    def __call__(cls, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: object = None) -> UOp:
        if src and op is not _MULTI:
            for source in src:  # a multi-device value is built one node per device (see _touches_several_devices)
                if source.op is _MULTI or (source.op is _DEVICE and isinstance(source.arg, tuple)):
                    return upper.map_multi(op, dtype, src, arg)
        # _arg_key's common cases inline: this runs for every node built
        key: tuple[object, ...]
        if arg is None or arg.__class__ is str:
            key = (op, dtype, src, arg)
        elif arg.__class__ is tuple:
            for item in arg:
                if item.__class__ is not int:
                    key = (op, dtype, src, _arg_key(arg))
                    break
            else:
                key = (op, dtype, src, ("ints", arg))
        else:
            key = (op, dtype, src, _arg_key(arg))
        cache = UOpMetaClass.ucache
        reference = cache.get(key)
        if reference is not None:
            found = reference()
            if found is not None:
                return found
        if cls is UOp:  # UOp.__init__'s assignments without its call
            created = object.__new__(cls)
            created.op, created.dtype, created.src, created.arg = op, dtype, src, arg
        else:
            created = super().__call__(op, dtype, src, arg)
        reference = _NodeRef(created, _forget)
        reference.key = key
        cache[key] = reference
        return created

    def keyed(cls, op: Ops, dtype: DType, src: tuple[UOp, ...], arg: object, arg_key: object) -> UOp:
        """`UOp(op, dtype, src, arg)` for a caller that has `_arg_key(arg)` already (a recorded step replayed many
        times) and whose sources are single-device nodes: the same node, without computing the key."""
        key = (op, dtype, src, arg_key)
        cache = UOpMetaClass.ucache
        reference = cache.get(key)
        if reference is not None:
            found = reference()
            if found is not None:
                return found
        created: UOp = object.__new__(UOp)
        created.op, created.dtype, created.src, created.arg = op, dtype, src, arg
        reference = _NodeRef(created, _forget)
        reference.key = key
        cache[key] = reference
        return created


class UOp(ShapeMixin, metaclass=UOpMetaClass):
    """One node: an operation `op` producing `dtype` from the nodes `src`, parameterised by `arg`.

    UOps are immutable and hash-consed, so structurally equal graphs are the same object and `is` / `==` are
    identity. Arithmetic operators build ALU nodes (`a + b`, `a * 3`, `a // 4`); comparisons are `a < b`,
    `a.ne(b)`, `a.eq(b)` (`==` stays identity so UOps can key dicts).
    """

    src: tuple[UOp, ...]

    def __init__(self, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None):
        self.op, self.dtype, self.src, self.arg = op, dtype, src, arg

    def __reduce__(self) -> tuple[object, ...]:
        return UOp, (self.op, self.dtype, self.src, self.arg)

    def __repr__(self) -> str:
        return upper.pretty_print(self)

    def replace(self, **kwargs: Any) -> UOp:
        """This node with some of op, dtype, src, arg replaced."""
        new = (kwargs.pop("op", self.op), kwargs.pop("dtype", self.dtype), kwargs.pop("src", self.src),
               kwargs.pop("arg", self.arg))
        if kwargs:
            raise TypeError(f"replace got unknown fields {list(kwargs)}")
        if new == (self.op, self.dtype, self.src, self.arg) and _arg_key(new[3]) == _arg_key(self.arg):
            return self
        return UOp(*new)

    # ---- graph walks ----

    @cached_node_property
    def _nodes_below(self) -> dict[UOp, None]:
        """Every node reachable from this one except itself, sources before users (an ordered set: dict keys)."""
        order: dict[UOp, None] = {}
        stack: list[tuple[UOp, bool]] = [(source, False) for source in reversed(self.src)]
        while stack:
            node, sources_done = stack.pop()
            if node in order:
                continue
            if sources_done or not node.src:  # a leaf is done when first reached
                order[node] = None
            else:
                stack.append((node, True))
                for source in reversed(node.src):
                    if source not in order:
                        stack.append((source, False))
        return order

    @property
    def toposort(self) -> dict[UOp, None]:
        """Every node reachable from this one, sources before users (an ordered set: dict keys), this one last.

        The walk is cached without the node itself and copied per call: a cached set that held the node was a
        reference cycle, so every graph whose toposort was asked for (each one realized) stayed in memory with the
        buffers it reads until the cyclic collector ran, and a buffer freed that late was allocated again from
        fresh pages (an 8 MB input copy 0.6 -> 2.5 ms)."""
        order = self._nodes_below.copy()
        order[self] = None
        return order

    def depends_on(self, node: UOp) -> bool:
        """True when `node` is this node or one below it: a lookup in the cached walk, without the copy `toposort`
        makes."""
        return node is self or node in self._nodes_below

    def reaches(self, found: Callable[[UOp], bool]) -> bool:
        """True when this node or one below it satisfies `found`: a walk that stops at the first such node and caches
        nothing (for questions about large graphs asked once, or about small ones built on the fly)."""
        seen: set[UOp] = set()
        stack: list[UOp] = [self]
        while stack:
            current = stack.pop()
            if found(current):
                return True
            for source in current.src:
                if source not in seen:
                    seen.add(source)
                    stack.append(source)
        return False

    def sparents(self) -> Iterator[UOp]:
        """Every node this one depends on, including itself."""
        return iter(self.toposort)

    def substitute(self, mapping: dict[UOp, UOp]) -> UOp:
        """This graph with every occurrence of a key of `mapping` replaced by its value."""
        if not mapping:
            return self
        memo: dict[UOp, UOp] = dict(mapping)
        for node in self.toposort:
            if node in memo:
                continue
            new_src = tuple(memo[source] for source in node.src)
            memo[node] = node if new_src == node.src else node.replace(src=new_src)
        return memo[self]

    # ---- constants ----

    @staticmethod
    def const(b: Any, dtype: Any = None, src: tuple[UOp, ...] = ()) -> UOp:
        """A constant: `UOp.const(value, dtype=None)` as tinygrad spells it, or `UOp.const(dtype, value)`.

        The order is told apart by which argument is a DType; without a dtype, the value's Python type picks one
        (`dtypes.from_py`). A tuple value gives a VCONST, a vector dtype a broadcast VECTORIZE.
        """
        if isinstance(b, DType):
            value: Any = dtype
            dtype = b
        else:
            value = b
            dtype = dtypes.from_py(value) if dtype is None else dtype
        if not isinstance(dtype, DType):
            raise TypeError(f"UOp.const needs a DType, got {dtype!r}: call UOp.const(value, dtypes.X)")
        if isinstance(value, UOp):
            return value
        if isinstance(value, tuple):
            return UOp(Ops.VCONST, dtype, src, tuple(truncate(dtypes.as_const(v, dtype), dtype) for v in value))
        if dtype.count > 1:
            scalar = UOp.const(dtype.scalar, value, src)
            return UOp(Ops.VECTORIZE, dtype, (scalar,) * dtype.count)
        return UOp(Ops.CONST, dtype, src, truncate(dtypes.as_const(value, dtype), dtype))

    def const_like(self, value: UOp | ConstType | tuple[ConstType, ...]) -> UOp:
        """A constant of this node's dtype (scalar dtype for pointers)."""
        dtype = self.dtype.base if isinstance(self.dtype, PtrDType) else self.dtype
        return UOp.const(dtype, value)

    def ufix(self, value: UOp | ConstType) -> UOp:
        """`value` as a UOp usable in arithmetic with this node (Python numbers become constants)."""
        if isinstance(value, UOp):
            return value
        if isinstance(value, float) and not dtypes.is_float(self.dtype):
            return UOp.const(least_upper_dtype(self.dtype, dtypes.default_float), value)
        return self.const_like(value)

    @property
    def is_const(self) -> bool:
        """True for a scalar CONST node."""
        return self.op is Ops.CONST

    # ---- ALU construction ----

    def alu(self, op: Ops, *src: UOp) -> UOp:
        """A new ALU node `op(self, *src)` with the dtype the op produces (bool for comparisons)."""
        operands = (self,) + src
        if op in GroupOp.Comparison:
            dtype = dtypes.bool.vec(operands[0].dtype.count) if operands[0].dtype.count > 1 else dtypes.bool
        elif op is Ops.WHERE:
            dtype = operands[1].dtype
        else:
            dtype = operands[-1].dtype if op is Ops.MULACC else operands[0].dtype
        return UOp(op, dtype, operands)

    def _binary(self, op: Ops, other: UOp | ConstType, reverse: bool = False) -> UOp:
        other_uop = self.ufix(other)
        if other_uop.dtype != self.dtype and not isinstance(other, UOp):
            other_uop = UOp.const(self.dtype, other)
        return other_uop.alu(op, self) if reverse else self.alu(op, other_uop)

    def __add__(self, other: UOp | ConstType) -> UOp:
        return self._binary(Ops.ADD, other)

    def __radd__(self, other: UOp | ConstType) -> UOp:
        return self._binary(Ops.ADD, other, True)

    def __sub__(self, other: UOp | ConstType) -> UOp:
        return self._binary(Ops.ADD, -self.ufix(other)) if not dtypes.is_unsigned(self.dtype) else \
            self._binary(Ops.SUB, other)

    def __rsub__(self, other: UOp | ConstType) -> UOp:
        return self.ufix(other) - self

    def __mul__(self, other: UOp | ConstType) -> UOp:
        return self._binary(Ops.MUL, other)

    def __rmul__(self, other: UOp | ConstType) -> UOp:
        return self._binary(Ops.MUL, other, True)

    def __floordiv__(self, other: UOp | ConstType) -> UOp:
        return self._binary(Ops.IDIV, other)

    def __rfloordiv__(self, other: UOp | ConstType) -> UOp:
        return self._binary(Ops.IDIV, other, True)

    def __mod__(self, other: UOp | ConstType) -> UOp:
        return self._binary(Ops.MOD, other)

    def __rmod__(self, other: UOp | ConstType) -> UOp:
        return self._binary(Ops.MOD, other, True)

    def __truediv__(self, other: UOp | ConstType) -> UOp:
        return self._binary(Ops.FDIV, other)

    def __rtruediv__(self, other: UOp | ConstType) -> UOp:
        return self._binary(Ops.FDIV, other, True)

    def __neg__(self) -> UOp:
        if self.dtype == dtypes.bool:
            return self.logical_not()
        return self.alu(Ops.NEG)

    def __and__(self, other: UOp | ConstType) -> UOp:
        return self._binary(Ops.AND, other)

    def __rand__(self, other: UOp | ConstType) -> UOp:
        return self._binary(Ops.AND, other, True)

    def __or__(self, other: UOp | ConstType) -> UOp:
        return self._binary(Ops.OR, other)

    def __ror__(self, other: UOp | ConstType) -> UOp:
        return self._binary(Ops.OR, other, True)

    def __xor__(self, other: UOp | ConstType) -> UOp:
        return self._binary(Ops.XOR, other)

    def __rxor__(self, other: UOp | ConstType) -> UOp:
        return self._binary(Ops.XOR, other, True)

    def __lshift__(self, other: UOp | ConstType) -> UOp:
        return self._binary(Ops.SHL, other)

    def __rshift__(self, other: UOp | ConstType) -> UOp:
        return self._binary(Ops.SHR, other)

    def __lt__(self, other: UOp | ConstType) -> UOp:
        return self._binary(Ops.CMPLT, other)

    def __gt__(self, other: UOp | ConstType) -> UOp:
        return self._binary(Ops.CMPLT, other, True)

    def __le__(self, other: UOp | ConstType) -> UOp:
        return (self > other).logical_not()

    def __ge__(self, other: UOp | ConstType) -> UOp:
        return (self < other).logical_not()

    def ne(self, other: UOp | ConstType) -> UOp:
        """`self != other` as a bool node."""
        return self._binary(Ops.CMPNE, other)

    def eq(self, other: UOp | ConstType) -> UOp:
        """`self == other` as a bool node."""
        return self._binary(Ops.CMPEQ, other)

    def logical_not(self) -> UOp:
        """Boolean negation."""
        return self.ne(True)

    def maximum(self, other: UOp | ConstType) -> UOp:
        """Elementwise maximum."""
        return self._binary(Ops.MAX, other)

    def minimum(self, other: UOp | ConstType) -> UOp:
        """Elementwise minimum (as -max(-a, -b))."""
        return -((-self).maximum(-self.ufix(other)))

    def where(self, if_true: UOp | ConstType, if_false: UOp | ConstType) -> UOp:
        """`if_true` where this (bool) node holds, else `if_false`."""
        true_uop = if_true if isinstance(if_true, UOp) else (
            if_false.const_like(if_true) if isinstance(if_false, UOp) else UOp.const(dtypes.from_py(if_true),
                                                                                       if_true))
        false_uop = true_uop.ufix(if_false)
        return self.alu(Ops.WHERE, true_uop, false_uop)

    def cast(self, dtype: DType) -> UOp:
        """Value conversion to `dtype` (no node if already of that dtype)."""
        return self if self.dtype == dtype else UOp(Ops.CAST, dtype, (self,))

    def bitcast(self, dtype: DType) -> UOp:
        """Reinterpret the bits as `dtype`."""
        return self if self.dtype == dtype else UOp(Ops.BITCAST, dtype, (self,))

    def exp2(self) -> UOp:
        """2 ** self."""
        return self.alu(Ops.EXP2)

    def log2(self) -> UOp:
        """Base-2 logarithm."""
        return self.alu(Ops.LOG2)

    def sin(self) -> UOp:
        """Sine."""
        return self.alu(Ops.SIN)

    def sqrt(self) -> UOp:
        """Square root."""
        return self.alu(Ops.SQRT)

    def reciprocal(self) -> UOp:
        """1 / self."""
        return self.alu(Ops.RECIPROCAL)

    def trunc(self) -> UOp:
        """Rounding toward zero."""
        return self.alu(Ops.TRUNC)

    # ---- kernel-level helpers ----

    def index(self, *indices: UOp, valid: UOp | None = None) -> UOp:
        """The address of element `indices` of this buffer, optionally gated by `valid`."""
        return UOp(Ops.INDEX, self.dtype, (self,) + indices + ((valid,) if valid is not None else ()))

    def load(self, *src: UOp, dtype: DType | None = None) -> UOp:
        """A load through this INDEX node."""
        base = self.dtype.base if isinstance(self.dtype, PtrDType) else self.dtype
        return UOp(Ops.LOAD, dtype if dtype is not None else base, (self,) + src)

    def store(self, value: UOp) -> UOp:
        """A store of `value` through this INDEX node."""
        return UOp(Ops.STORE, dtypes.void, (self, value))

    def sink(self, *others: UOp, arg: object = None) -> UOp:
        """A SINK over this node and `others`."""
        return UOp(Ops.SINK, dtypes.void, (self,) + others, arg)

    def gep(self, lanes: int | tuple[int, ...]) -> UOp:
        """Lanes of a vector node."""
        lanes = (lanes,) if isinstance(lanes, int) else lanes
        if self.dtype.count == 1 and lanes == (0,):
            return self
        return UOp(Ops.GEP, self.dtype.scalar.vec(len(lanes)), (self,), lanes)

    # ---- symbolic (bounds and simplification live in tinycore.uop.symbolic) ----

    @property
    def vmin(self) -> ConstType:
        """The smallest value this node can take (from the bounds of variables, ranges and constants)."""
        found = self.__dict__.get("_bounds")
        return (found if found is not None else _bounds(self))[0]

    @property
    def vmax(self) -> ConstType:
        """The largest value this node can take."""
        found = self.__dict__.get("_bounds")
        return (found if found is not None else _bounds(self))[1]

    def simplify(self) -> UOp:
        """This graph rewritten with the `symbolic` rules to a fixpoint."""
        return upper.simplify(self)

    def ssimplify(self) -> UOp | ConstType:
        """The simplified graph, or its Python value when it simplifies to a constant."""
        return upper.ssimplify(self)

    @staticmethod
    def variable(name: str, min_val: int, max_val: int, dtype: DType = dtypes.int) -> UOp:
        """A symbolic integer `name` in [min_val, max_val] (a DEFINE_VAR), as tinygrad's `UOp.variable` spells it."""
        return upper.variable(name, min_val, max_val, dtype)

    def bind(self, value: int) -> UOp:
        """This DEFINE_VAR bound to `value` (a BIND node), checked against the variable's bounds."""
        if self.op is not Ops.DEFINE_VAR:
            raise TypeError(f"bind needs a Variable (DEFINE_VAR), got {self.op}")
        name, low, high = self.arg[0], self.arg[1], self.arg[2]
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"Variable {name!r} can only be bound to an int, got {type(value).__name__} {value!r}")
        if not low <= value <= high:
            raise ValueError(f"cannot bind Variable {name!r} to {value}: it must lie in [{low}, {high}]")
        return UOp(Ops.BIND, self.dtype, (self, self.const_like(value)))

    def unbind(self) -> tuple[UOp, int]:
        """(variable, value) of a BIND node."""
        if self.op is not Ops.BIND:
            raise TypeError(f"unbind needs a bound Variable (BIND), got {self.op}")
        return self.src[0], self.src[1].arg

    @property
    def expr(self) -> str:
        """The name of a DEFINE_VAR (or of the variable of a BIND)."""
        if self.op is Ops.BIND:
            return self.src[0].arg[0]
        if self.op is Ops.DEFINE_VAR:
            return self.arg[0]
        raise TypeError(f"expr is the name of a Variable, got {self.op}")

    @property
    def axis(self) -> int | None:
        """The axis a multi-device value is sharded on (None when replicated, or for a single-device value)."""
        return self.arg if self.op is Ops.MULTI else None

    @property
    def bounds(self) -> list[tuple[int, int]]:
        """(start, end) of each device's block along the sharded axis of a multi-device value."""
        if self.op is not Ops.MULTI or self.arg is None:
            raise ValueError(f"bounds needs a value sharded on an axis, got {self.op.name} with axis {self.axis}: "
                             "shard it with .shard(devices, axis) first")
        return upper.shard_bounds(self)

    @property
    def is_realized(self) -> bool:
        """Whether this value sits in device memory: a buffer, or movement ops over one (nothing left to compute)."""
        base = self.base
        return base.op is Ops.BUFFER or base.op is Ops.BUFFER_VIEW

    @property
    def buffer(self) -> DeviceBuffer:
        """The device Buffer of a BUFFER or BUFFER_VIEW node (`tensor.uop.base.buffer` after realize), as tinygrad."""
        return upper.buffer_of(self)

    def render(self) -> str:
        """A compact infix rendering of this expression, e.g. '(a*4+b)//4'."""
        return upper.render_expr(self)


def _bounds(uop: UOp) -> tuple[ConstType, ConstType]:
    """(vmin, vmax) of `uop`, computed by the symbolic engine."""
    return upper.bounds(uop)


sint = Union[int, UOp]
"""A size: a Python int or a symbolic integer UOp."""


def exec_alu(op: Ops, dtype: DType, operands: Sequence[ConstType]) -> ConstType:
    """Evaluate one ALU op on Python constants the way the generated code does (C integer semantics)."""
    function = PYTHON_ALU[op]
    result = function(*operands)
    return truncate(result, dtype) if dtype.count == 1 else result


def _c_div(a: int, b: int) -> int:
    if b == 0:
        return 0
    quotient = abs(a) // abs(b)
    return quotient if (a >= 0) == (b >= 0) else -quotient


def _c_mod(a: int, b: int) -> int:
    if b == 0:
        return 0
    return a - b * _c_div(a, b)


def _safe_exp2(x: float) -> float:
    try:
        return 2.0 ** x
    except OverflowError:
        return math.inf


def _safe_log2(x: float) -> float:
    if x > 0:
        return math.log2(x)
    return -math.inf if x == 0 else math.nan


def _safe_sqrt(x: float) -> float:
    return math.sqrt(x) if x >= 0 else math.nan


def _safe_reciprocal(x: float) -> float:
    return 1 / x if x != 0 else math.copysign(math.inf, x)


def _safe_fdiv(a: float, b: float) -> float:
    if b != 0:
        return a / b
    return math.nan if a == 0 or math.isnan(a) else math.copysign(math.inf, a) * math.copysign(1, b)


PYTHON_ALU: dict[Ops, Callable[..., ConstType]] = {
    Ops.EXP2: _safe_exp2, Ops.LOG2: _safe_log2, Ops.SIN: lambda x: math.sin(x) if math.isfinite(x) else math.nan,
    Ops.SQRT: _safe_sqrt, Ops.RECIPROCAL: _safe_reciprocal, Ops.NEG: lambda x: (not x) if isinstance(x, bool) else -x,
    Ops.TRUNC: lambda x: math.trunc(x) if math.isfinite(x) else x,
    Ops.ADD: lambda a, b: a + b, Ops.SUB: lambda a, b: a - b, Ops.MUL: lambda a, b: a * b, Ops.FDIV: _safe_fdiv,
    Ops.IDIV: _c_div, Ops.MOD: _c_mod, Ops.MAX: max, Ops.POW: lambda a, b: a ** b,
    Ops.CMPLT: lambda a, b: a < b, Ops.CMPNE: lambda a, b: a != b, Ops.CMPEQ: lambda a, b: a == b,
    Ops.AND: lambda a, b: a & b, Ops.OR: lambda a, b: a | b, Ops.XOR: lambda a, b: a ^ b,
    Ops.SHL: lambda a, b: a << b, Ops.SHR: lambda a, b: a >> b,
    Ops.WHERE: lambda condition, a, b: a if condition else b, Ops.MULACC: lambda a, b, c: a * b + c}
