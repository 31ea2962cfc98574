"""Data types: scalar, vector and pointer DTypes, the promotion lattice, and conversions to numpy/torch/struct."""
from __future__ import annotations

import builtins
import functools
import math
import threading
import weakref
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Final, Union

from tinycore.errors import UnknownDTypeError

if TYPE_CHECKING:
    import numpy
    import numpy.typing
    import torch

ConstType = Union[float, int, bool]


class _Interned(type):
    """DTypes are interned: constructing one equal to a live one returns that one, so that equal dtypes are the
    same object and compare and hash by identity. Hashing is what dtypes are used for most: every graph node's cache
    key holds one and is hashed two to four times over the node's life, and an identity hash is a C slot where a
    `__hash__` method is a Python call each time (14 per eager op)."""

    _live: weakref.WeakValueDictionary[tuple[object, ...], DType] = weakref.WeakValueDictionary()
    """The live dtypes by value (their `_key`)."""
    _by_call: weakref.WeakValueDictionary[tuple[object, ...], DType] = weakref.WeakValueDictionary()
    """The live dtypes by the constructor's arguments: a repeated `ptr()` or `DType(...)` call is one lookup,
    without building a dtype to compare (the dataclass constructor is most of a construction's cost)."""
    _lock = threading.Lock()  # two threads making the same new dtype must get one object

    def __call__(cls, *args: object, **kwargs: object) -> DType:
        call = (cls, args, tuple(kwargs.items())) if kwargs else (cls, args)
        known = _Interned._by_call.get(call)
        if known is not None:
            return known
        made: DType = super().__call__(*args, **kwargs)
        key = made._key  # type: ignore[attr-defined]
        with _Interned._lock:
            known = _Interned._live.get(key)
            if known is None:
                known = _Interned._live[key] = made
            _Interned._by_call[call] = known
        return known


@dataclass(frozen=True, eq=False)
class DType(metaclass=_Interned):
    """A scalar (count == 1) or vector (count > 1) element type.

    `priority` orders types for promotion tie-breaks, `itemsize` is the size in bytes of one scalar, `fmt` is the
    struct/numpy format character (None where numpy has no such type), `name` is the canonical name.
    DTypes compare by value and are interned (see _Interned): equal dtypes are one object, compared and hashed by
    identity.
    Copies and pickles go through the constructor (`__reduce__`), so they give the interned object too.
    """

    priority: int
    itemsize: int
    name: str
    fmt: str | None
    count: int = 1
    _scalar: DType | None = None

    def __post_init__(self) -> None:
        key = (self.__class__,) + tuple(getattr(self, field.name) for field in fields(self))
        object.__setattr__(self, "_key", key)

    # no __eq__, __ne__ or __hash__: interned, equal dtypes are the same object, so object's identity comparison and
    # hash are comparison by value, in C (dtypes are compared and hashed on every node built)

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        key: tuple[object, ...] = self._key  # type: ignore[attr-defined]
        return key[0], key[1:]

    @property
    def scalar(self) -> DType:
        """The element type of a vector dtype (itself for a scalar)."""
        return self._scalar if self._scalar is not None else self

    @property
    def nbytes(self) -> int:
        """Bytes taken by one value of this dtype (vector included)."""
        return self.itemsize * self.count

    @functools.cache  # noqa: B019 - dtypes live for the whole process
    def vec(self, size: int) -> DType:
        """The vector dtype of `size` lanes of this scalar dtype."""
        if self.count != 1:
            raise ValueError(f"cannot vectorize {self}: it is already a vector of {self.count}")
        if size == 1 or self.name == "void":
            return self
        return DType(self.priority, self.itemsize, f"{self.name}{size}", None, size, self)

    def ptr(self, size: int = -1, addrspace: str = "global") -> PtrDType:
        """A pointer to `size` elements of this dtype in `addrspace` ('global', 'local' or 'reg')."""
        return PtrDType(self.priority, self.itemsize, self.name, self.fmt, self.count, None, self, addrspace, size)

    def __repr__(self) -> str:
        if self.count > 1:
            return f"{self.scalar!r}.vec({self.count})"
        return f"dtypes.{INVERSE_NAMES.get(self, self.name)}"

    def __lt__(self, other: DType) -> bool:
        return (self.priority, self.itemsize, self.name, self.count) < (other.priority, other.itemsize, other.name,
                                                                        other.count)

    @property
    def min(self) -> ConstType:
        """The smallest finite value of this dtype."""
        return dtypes.min(self)

    @property
    def max(self) -> ConstType:
        """The largest finite value of this dtype."""
        return dtypes.max(self)


@dataclass(frozen=True, eq=False)
class PtrDType(DType):
    """A pointer to elements of `base` in an address space, with a known element count (`size`, -1 if unknown)."""

    base: DType = None  # type: ignore[assignment]
    addrspace: str = "global"
    size: int = -1

    def __repr__(self) -> str:
        return f"{self.base!r}.ptr({self.size}{'' if self.addrspace == 'global' else ', ' + repr(self.addrspace)})"


class dtypes:  # noqa: N801 - mirrors the public name
    """The namespace of every dtype, with predicates, limits and promotion helpers."""

    void: Final[DType] = DType(-1, 0, "void", None)
    bool: Final[DType] = DType(0, 1, "bool", "?")
    int8: Final[DType] = DType(1, 1, "char", "b")
    uint8: Final[DType] = DType(2, 1, "unsigned char", "B")
    int16: Final[DType] = DType(3, 2, "short", "h")
    uint16: Final[DType] = DType(4, 2, "unsigned short", "H")
    int32: Final[DType] = DType(5, 4, "int", "i")
    uint32: Final[DType] = DType(6, 4, "unsigned int", "I")
    int64: Final[DType] = DType(7, 8, "long", "q")
    uint64: Final[DType] = DType(8, 8, "unsigned long", "Q")
    fp8e4m3: Final[DType] = DType(9, 1, "float8_e4m3", None)
    fp8e5m2: Final[DType] = DType(10, 1, "float8_e5m2", None)
    float16: Final[DType] = DType(11, 2, "half", "e")
    bfloat16: Final[DType] = DType(12, 2, "__bf16", None)
    float32: Final[DType] = DType(13, 4, "float", "f")
    float64: Final[DType] = DType(14, 8, "double", "d")

    # aliases
    half = float16
    float = float32
    double = float64
    char = int8
    uchar = uint8
    short = int16
    ushort = uint16
    int = int32
    uint = uint32
    long = int64
    ulong = uint64
    fp8e4m3fnuz = fp8e4m3
    fp8e5m2fnuz = fp8e5m2

    default_float: DType = float32
    default_int: DType = int32

    @staticmethod
    def is_float(x: DType) -> builtins.bool:
        """True for floating point dtypes (including fp8 and vectors of floats)."""
        return x.scalar in _FLOAT_SET

    @staticmethod
    def is_int(x: DType) -> builtins.bool:
        """True for signed and unsigned integer dtypes (not bool)."""
        return x.scalar in _INT_SET

    @staticmethod
    def is_unsigned(x: DType) -> builtins.bool:
        """True for unsigned integer dtypes."""
        return x.scalar in _UINT_SET

    @staticmethod
    def is_bool(x: DType) -> builtins.bool:
        """True for the bool dtype."""
        return x.scalar == dtypes.bool

    @staticmethod
    def from_py(x: object) -> DType:
        """The dtype a Python value (or nested list/tuple of values) gets: float, bool or int defaults."""
        if x.__class__ is float:
            return dtypes.default_float
        if x.__class__ is bool:
            return dtypes.bool
        if x.__class__ is int:
            return dtypes.default_int
        if isinstance(x, (list, tuple)):
            return max((dtypes.from_py(item) for item in x), default=dtypes.default_float)
        raise TypeError(f"cannot infer a dtype from {type(x).__name__} {x!r}: pass dtype= explicitly")

    @staticmethod
    def as_const(value: ConstType | tuple[ConstType, ...], dtype: DType) -> ConstType:
        """`value` converted to the Python type that holds constants of `dtype` (wrapping integers)."""
        if isinstance(value, tuple):
            return tuple(dtypes.as_const(item, dtype) for item in value)  # type: ignore[return-value]
        if dtypes.is_int(dtype):
            value = int(value)
            bits = 8 * dtype.scalar.itemsize
            value &= (1 << bits) - 1
            if not dtypes.is_unsigned(dtype) and value >= 1 << (bits - 1):
                value -= 1 << bits
            return value
        if dtypes.is_float(dtype):
            return float(value)
        return bool(value)

    @staticmethod
    def min(dtype: DType) -> ConstType:
        """The smallest value of `dtype` (-inf for floats)."""
        if dtypes.is_int(dtype):
            return 0 if dtypes.is_unsigned(dtype) else -(2 ** (dtype.scalar.itemsize * 8 - 1))
        return -math.inf if dtypes.is_float(dtype) else False

    @staticmethod
    def max(dtype: DType) -> ConstType:
        """The largest value of `dtype` (inf for floats)."""
        if dtypes.is_int(dtype):
            bits = dtype.scalar.itemsize * 8
            return 2 ** bits - 1 if dtypes.is_unsigned(dtype) else 2 ** (bits - 1) - 1
        return math.inf if dtypes.is_float(dtype) else True

    @staticmethod
    def finfo(dtype: DType) -> tuple[builtins.int, builtins.int]:
        """(exponent bits, mantissa bits) of a floating point dtype."""
        if not dtypes.is_float(dtype):
            raise ValueError(f"finfo needs a floating point dtype, got {dtype}")
        return FLOAT_BITS[dtype.scalar]

    @staticmethod
    def fields() -> dict[str, DType]:
        """Every named dtype, aliases included, by name."""
        return DTYPES_DICT

    floats: tuple[DType, ...] = ()
    uints: tuple[DType, ...] = ()
    sints: tuple[DType, ...] = ()
    ints: tuple[DType, ...] = ()
    all: tuple[DType, ...] = ()
    fp8s: tuple[DType, ...] = ()


dtypes.fp8s = (dtypes.fp8e4m3, dtypes.fp8e5m2)
dtypes.floats = dtypes.fp8s + (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)
dtypes.uints = (dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64)
dtypes.sints = (dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64)
dtypes.ints = dtypes.uints + dtypes.sints
dtypes.all = (dtypes.bool,) + dtypes.ints + dtypes.floats
dtypes.int8s = (dtypes.int8, dtypes.uint8)  # type: ignore[attr-defined]
dtypes.int16s = (dtypes.int16, dtypes.uint16)  # type: ignore[attr-defined]
dtypes.int32s = (dtypes.int32, dtypes.uint32)  # type: ignore[attr-defined]
dtypes.int64s = (dtypes.int64, dtypes.uint64)  # type: ignore[attr-defined]
dtypes.fp8_ocp = dtypes.fp8s  # type: ignore[attr-defined]
dtypes.fp8_fnuz = dtypes.fp8s  # type: ignore[attr-defined]
_FLOAT_SET = frozenset(dtypes.floats)


def _default_dtype(key: str, value: object, fallback: DType, allowed: tuple[DType, ...]) -> DType:
    """The dtype a DEFAULT_FLOAT / DEFAULT_INT setting names ("half", "float32", a DType), `fallback` when empty."""
    if isinstance(value, DType):
        chosen: DType | None = value
    elif not value:
        return fallback
    else:
        found = {dtype_name: item for dtype_name, item in vars(dtypes).items() if isinstance(item, DType)}
        chosen = found.get(str(value).lower())
    if chosen is None or chosen not in allowed:
        raise ValueError(f"{key}={value} is not a dtype of that kind; use one of "
                         f"{sorted(INVERSE_NAMES.get(item, item.name) for item in allowed)}")
    return chosen


_INT_SET = frozenset(dtypes.ints)
_UINT_SET = frozenset(dtypes.uints)

FLOAT_BITS: dict[DType, tuple[int, int]] = {
    dtypes.fp8e4m3: (4, 3), dtypes.fp8e5m2: (5, 2), dtypes.float16: (5, 10), dtypes.bfloat16: (8, 7),
    dtypes.float32: (8, 23), dtypes.float64: (11, 52)}

DTYPES_DICT: dict[str, DType] = {
    name: value for name, value in vars(dtypes).items() if isinstance(value, DType) and not name.startswith("_")
    and name not in ("default_float", "default_int")}
INVERSE_NAMES: dict[DType, str] = {}
for _name in ("void", "bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "fp8e4m3",
              "fp8e5m2", "float16", "bfloat16", "float32", "float64"):
    INVERSE_NAMES[DTYPES_DICT[_name]] = _name


def _follow_default_settings() -> None:
    """Keep dtypes.default_float/default_int equal to the DEFAULT_FLOAT/DEFAULT_INT settings (environment, Context)."""
    from tinycore.helpers import DEFAULT_FLOAT, DEFAULT_INT

    def set_float(value: object) -> None:
        dtypes.default_float = _default_dtype("DEFAULT_FLOAT", value, dtypes.float32, dtypes.floats)

    def set_int(value: object) -> None:
        dtypes.default_int = _default_dtype("DEFAULT_INT", value, dtypes.int32, dtypes.ints)

    DEFAULT_FLOAT.watch(set_float)
    DEFAULT_INT.watch(set_int)


_follow_default_settings()

DTypeLike = Union[str, DType]


def to_dtype(x: DTypeLike) -> DType:
    """A DType from a DType or its name ('float32', 'half', 'int', ...); a clear error for unknown names."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str) and x in DTYPES_DICT:
        return DTYPES_DICT[x]
    raise UnknownDTypeError(f"unknown dtype {x!r}: use a tinycore.dtypes member such as dtypes.float32, or one of "
                    f"{sorted(INVERSE_NAMES.values())}")


# The promotion lattice: each dtype lists the dtypes directly above it. The least upper bound of a set of dtypes is
# the lowest-priority dtype that is reachable from all of them; it matches torch's rules for tensor-tensor pairs.
PROMOTION_LATTICE: dict[DType, tuple[DType, ...]] = {
    dtypes.bool: (dtypes.int8, dtypes.uint8), dtypes.int8: (dtypes.int16,), dtypes.int16: (dtypes.int32,),
    dtypes.int32: (dtypes.int64,), dtypes.int64: dtypes.fp8s,
    dtypes.uint8: (dtypes.int16, dtypes.uint16), dtypes.uint16: (dtypes.int32, dtypes.uint32),
    dtypes.uint32: (dtypes.int64, dtypes.uint64), dtypes.uint64: dtypes.fp8s,
    dtypes.fp8e5m2: (dtypes.float16, dtypes.bfloat16), dtypes.fp8e4m3: (dtypes.float16, dtypes.bfloat16),
    dtypes.float16: (dtypes.float32,), dtypes.bfloat16: (dtypes.float32,), dtypes.float32: (dtypes.float64,)}


@functools.cache
def _upper_bounds(dtype: DType) -> frozenset[DType]:
    bounds = {dtype}
    for parent in PROMOTION_LATTICE.get(dtype, ()):
        bounds |= _upper_bounds(parent)
    return frozenset(bounds)


def least_upper_dtype(*ds: DType) -> DType:
    """The smallest dtype every one of `ds` promotes to (the promotion result of a binary op)."""
    if not ds:
        raise ValueError("least_upper_dtype needs at least one dtype")
    common = functools.reduce(frozenset.intersection, (_upper_bounds(d.scalar) for d in ds))
    if not common:
        raise TypeError(f"no common dtype for {ds}")
    result = min(common)
    if dtypes.is_float(result) and not any(dtypes.is_float(d) for d in ds):
        # integers with no common integer type (a signed integer with uint64): the default float, not an fp8
        return dtypes.default_float
    return result


def promote_with_scalar(dtype: DType, value: ConstType) -> DType:
    """The result dtype of an op between a tensor of `dtype` and the Python scalar `value`.

    The tensor's dtype wins within its category (bool < int < float): a float tensor keeps its dtype for any
    scalar, an int tensor keeps it for int and bool scalars, and a bool tensor for bool scalars. Otherwise the
    scalar's category decides: a float scalar gives `dtypes.default_float`, an int scalar `dtypes.default_int`.
    This is torch's rule, except that torch's default integer is int64 where tinycore's is int32.
    """
    if not isinstance(value, (bool, int, float)):
        raise TypeError(f"promote_with_scalar needs a Python bool, int or float, got {type(value).__name__}")
    if dtypes.is_float(dtype):
        return dtype
    if isinstance(value, float):
        return dtypes.default_float
    if dtypes.is_int(dtype):
        return dtype
    return dtypes.bool if isinstance(value, bool) else dtypes.default_int


def least_upper_float(dtype: DType) -> DType:
    """`dtype` if it is a float, else the default float (the result dtype of exp, sqrt, division...)."""
    return dtype if dtypes.is_float(dtype) else least_upper_dtype(dtype, dtypes.default_float)


def sum_acc_dtype(dtype: DType) -> DType:
    """The dtype `sum` accumulates and returns in: unsigned -> uint32+, signed/bool -> int32+, floats keep theirs."""
    if dtypes.is_unsigned(dtype):
        return least_upper_dtype(dtype, dtypes.uint32)
    if dtypes.is_int(dtype) or dtype == dtypes.bool:
        return least_upper_dtype(dtype, dtypes.int32)
    return least_upper_dtype(dtype, dtypes.default_float)


# (mantissa bits, smallest normal exponent, largest finite value, value on overflow) of the float formats that
# Python's struct module cannot round to
_FLOAT_FORMATS: dict[DType, tuple[int, int, float, float]] = {
    dtypes.bfloat16: (7, -126, 3.3895313892515355e38, math.inf),
    dtypes.fp8e4m3: (3, -6, 448.0, 448.0),  # e4m3fn has no infinity: torch saturates to +-448
    dtypes.fp8e5m2: (2, -14, 57344.0, math.inf)}


def _round_to_format(value: float, dtype: DType) -> float:
    """`value` rounded to nearest-even in a small float format (bfloat16, fp8), as torch converts it."""
    mantissa_bits, smallest_exponent, largest, overflow = _FLOAT_FORMATS[dtype]
    if math.isnan(value) or value == 0:
        return value
    if math.isinf(value):
        return math.copysign(overflow, value)
    _, exponent = math.frexp(abs(value))  # abs(value) = m * 2**exponent with 0.5 <= m < 1
    step = 2.0 ** (max(exponent - 1, smallest_exponent) - mantissa_bits)
    rounded = round(abs(value) / step) * step  # round() breaks ties to even
    if rounded > largest:
        return math.copysign(overflow, value)
    return math.copysign(rounded, value)


def truncate(value: ConstType, dtype: DType) -> ConstType:
    """`value` as a constant of `dtype` would hold it (integer wrap-around, rounding to the float format)."""
    import struct
    scalar = dtype.scalar
    if dtypes.is_int(scalar) or scalar == dtypes.bool:
        return dtypes.as_const(value, dtype)
    value = float(value)
    if scalar in _FLOAT_FORMATS:
        return _round_to_format(value, scalar)
    if scalar in (dtypes.float32, dtypes.float16) and math.isfinite(value):
        try:
            return struct.unpack(scalar.fmt, struct.pack(scalar.fmt, value))[0]  # type: ignore[arg-type]
        except OverflowError:
            return math.copysign(math.inf, value)
    return value


def to_numpy_dtype(dtype: DType) -> numpy.dtype:
    """The numpy dtype of `dtype`; a clear error where numpy has none (bfloat16, fp8)."""
    import numpy
    if dtype.fmt is None:
        raise TypeError(f"numpy has no {dtype}: cast to dtypes.float32 first (.float())")
    return numpy.dtype(dtype.fmt)


def from_numpy_dtype(numpy_dtype: numpy.typing.DTypeLike) -> DType:
    """The DType of a numpy dtype; a clear error for ones tinycore does not have."""
    import numpy
    numpy_dtype = numpy.dtype(numpy_dtype)
    for dtype in (dtypes.bool,) + dtypes.ints + (dtypes.float16, dtypes.float32, dtypes.float64):
        if dtype.fmt is not None and numpy.dtype(dtype.fmt) == numpy_dtype:
            return dtype
    raise TypeError(f"numpy dtype {numpy_dtype} has no tinycore equivalent")


_TORCH_NAMES = {dtypes.bool: "bool", dtypes.int8: "int8", dtypes.uint8: "uint8", dtypes.int16: "int16",
                dtypes.uint16: "uint16", dtypes.int32: "int32", dtypes.uint32: "uint32", dtypes.int64: "int64",
                dtypes.uint64: "uint64", dtypes.float16: "float16", dtypes.bfloat16: "bfloat16",
                dtypes.float32: "float32", dtypes.float64: "float64", dtypes.fp8e4m3: "float8_e4m3fn",
                dtypes.fp8e5m2: "float8_e5m2"}


def to_torch_dtype(dtype: DType) -> torch.dtype:
    """The torch dtype of `dtype` (imports torch)."""
    import torch
    return getattr(torch, _TORCH_NAMES[dtype.scalar])


def from_torch_dtype(torch_dtype: object) -> DType:
    """The DType of a torch dtype."""
    for dtype, name in _TORCH_NAMES.items():
        if str(torch_dtype) == f"torch.{name}":
            return dtype
    raise TypeError(f"torch dtype {torch_dtype} has no tinycore equivalent")

