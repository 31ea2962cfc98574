"""Elementwise Tensor operations: arithmetic with broadcasting and promotion, math functions, activations.

Transcendental functions are built from the primitives EXP2, LOG2, SIN, SQRT and RECIPROCAL.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, TypeVar

from tinycore.dtype import ConstType, DType, dtypes, least_upper_dtype, least_upper_float
from tinycore.errors import ArgumentError, BroadcastError, DTypeMismatchError
from tinycore.tensor.movement import MovementMixin
from tinycore.tensor.support import LN_2, LOG2_E, broadcast_shape, same_size, scalar_result_dtype, scalars_dtype
from tinycore.uop.ops import FUSED, Ops
from tinycore.uop.uop import UOp

_FLOATS = frozenset(dtypes.floats)
_SCALAR_CONSTANTS: dict[tuple[object, ...], UOp] = {}
"""`UOp.const_on(dtype, value, device, shape)` by (value, its class, dtype, device, shape) for `x + c` and `x * c`:
eager code builds the same broadcast constant on every op, and const_on (a call that builds its own key, a float's
repr included) is a good part of the operator's cost. The nodes are kept alive, as const_on's own cache keeps them."""
_SCALAR_CONSTANTS_LIMIT = 256
"""The floating point dtypes (interned: membership is an identity test), for which a Python int or float operand
keeps the tensor's dtype."""

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Self

    import numpy
    from typing_extensions import TypeIs

    from tinycore.tensor.base import NestedValues, Operand


TensorT = TypeVar("TensorT", bound="ElementwiseMixin")
"""A tensor of the chain class whose methods these helpers call (the Tensor, at run time)."""

def _is_tensor(value: object) -> TypeIs[ElementwiseMixin]:
    """True for a Tensor (every Tensor is an ElementwiseMixin)."""
    return isinstance(value, ElementwiseMixin)


def _is_data(value: object) -> TypeIs[Sequence[NestedValues] | numpy.ndarray | numpy.generic]:
    """True for values that become a tensor of their own: lists, tuples and numpy arrays or scalars."""
    return isinstance(value, (list, tuple)) or type(value).__module__ == "numpy"


def _with_pow_gradient(value: TensorT, base: TensorT, exponent: TensorT | int | float) -> TensorT:
    """`value` (base ** exponent) with torch's gradient: exponent * base ** (exponent - 1) for the base, 0 where the
    exponent is 0; value * log(base) for a tensor exponent, 0 where the base is 0 and the exponent is not negative.
    Differentiated through its exp2/log2 graph instead, the NaN of a negative base is masked by the select that
    places it (gradient 0 where torch gives NaN) and the zero-exponent select hides the exponent's gradient."""
    from tinycore.gradient import with_gradient
    wrap = type(value)._wrap

    def rule(node: UOp, gradient: UOp) -> dict[UOp, UOp]:
        upstream, operand = wrap(gradient), wrap(base.uop)
        if isinstance(exponent, (int, float)):  # a constant exponent, never 0 here (x**0 carries no rule)
            return {base.uop: (upstream * (exponent * operand._pow_plain(exponent - 1))).cast(base.dtype).uop}
        power = wrap(exponent.uop)
        base_gradient = power.eq(0).where(0.0, power * operand._pow_plain(power - 1))
        zero_base = operand.eq(0) & (power >= 0)
        exponent_gradient = zero_base.where(0.0, wrap(node) * operand.cast(node.dtype).log())
        return {base.uop: (upstream * base_gradient).cast(base.dtype).uop,
                exponent.uop: (upstream * exponent_gradient).cast(exponent.dtype).uop}

    return wrap(with_gradient(value.uop, rule), value.requires_grad)


class ElementwiseMixin(MovementMixin):
    """Arithmetic, comparison, logic, math and activation functions of Tensor."""

    # ---- broadcasting and promotion ----

    def _broadcast_to(self, shape: tuple[int, ...]) -> Self:
        """This tensor broadcast to `shape` (new axes on the left, size-1 axes stretched)."""
        if self.shape == shape:
            return self
        shape = tuple(shape)
        if len(shape) == self.ndim and all(same_size(old, new) for old, new in zip(self.shape, shape, strict=True)):
            return self  # symbolic sizes equal in value though built differently
        if len(shape) < self.ndim:
            raise BroadcastError(f"cannot broadcast shape {self.shape} to {shape}: the target has fewer dimensions")
        if broadcast_shape(self.shape, shape) != shape:
            raise BroadcastError(f"cannot broadcast shape {self.shape} to {shape}")
        padded = (1,) * (len(shape) - self.ndim) + tuple(self.shape)
        return self._result(self.uop.reshape(padded).expand(shape))

    def _operand(self, value: Operand[Self], dtype: DType | None = None) -> Self:
        """`value` as a tensor on this device (scalars become constants of `dtype` or their own dtype)."""
        if _is_tensor(value):
            if value.device != self.device and value.device is not None:  # None: a constant on no device
                raise ValueError(f"operands are on different devices: {self.device} and {value.device}; "
                                 "move one with .to()")
            return value
        if isinstance(value, (int, float, bool)):
            return self._const(value, dtype or dtypes.from_py(value), ())
        if _is_data(value):
            return type(self)(value, device=self.device)
        raise TypeError(f"expected a Tensor or a Python number, got {type(value).__name__} {value!r}")

    def _broadcasted(self, other: Operand[Self], reverse: bool = False,
                     match_dtype: bool = True) -> tuple[Self, Self]:
        """This tensor and `other` broadcast to one shape and promoted to one dtype (swapped if `reverse`)."""
        if other.__class__ is int or other.__class__ is float:  # `x + 1`, the common case: tested first
            return self._scalar_broadcasted(other, reverse, match_dtype)
        if _is_tensor(other):
            first, second = self, self._operand(other)
            if match_dtype and first.dtype != second.dtype:
                common = least_upper_dtype(first.dtype, second.dtype)
                first, second = first.cast(common), second.cast(common)
        else:
            if _is_data(other):
                return self._broadcasted(self._operand(other), reverse, match_dtype)
            if isinstance(other, UOp):  # a symbolic int (a size with bound Variables): a scalar read at run time
                return self._broadcasted(self._symbolic_scalar(other), reverse, match_dtype)
            return self._scalar_broadcasted(other, reverse, match_dtype)
        first_shape, second_shape = first.shape, second.shape
        if first_shape == second_shape:  # the common case (an optimizer's update): nothing to broadcast
            return (second, first) if reverse else (first, second)
        shape = broadcast_shape(first_shape, second_shape)
        first, second = first._broadcast_to(shape), second._broadcast_to(shape)
        return (second, first) if reverse else (first, second)

    def _scalar_broadcasted(self, other: ConstType, reverse: bool, match_dtype: bool) -> tuple[Self, Self]:
        """`_broadcasted` for a Python scalar `other`: a constant of the promoted dtype in this tensor's shape."""
        common = scalar_result_dtype(self.dtype, other) if match_dtype else dtypes.from_py(other)
        first = self.cast(common) if match_dtype else self
        second = self._const(other, common)
        return (second, first) if reverse else (first, second)

    def _scalar_alu(self, op: Ops, other: int | float, reverse: bool) -> Self:
        """The ALU op `op` (ADD or MUL) on this tensor and the Python int or float `other`, promoted as
        `_scalar_broadcasted` does: the constant goes straight into the node, without a Tensor of its own (`x + 1`
        in eager code). The result's dtype is never bool (an int or float scalar promotes bool away)."""
        uop = self.uop
        dtype = uop.dtype
        device = uop.device
        if (dtype in _FLOATS or (other.__class__ is int and dtype is not dtypes.bool)) and device.__class__ is str \
                and not self._requires_grad:
            # the common case (`x + 1` on a float tensor, `i * 2` on an int one): the scalar keeps the tensor's dtype
            # (scalar_result_dtype's answer), one device, no gradient path: the node and its Tensor built directly,
            # without the dtype, device and shape properties, the promotion call and _result
            shape = uop._shape  # the shape property's value without its call (never None on a tensor node)
            key = (other, other.__class__, dtype, device, shape)
            constant = _SCALAR_CONSTANTS.get(key)
            if constant is None:
                constant = UOp.const_on(dtype, other, device, shape)  # type: ignore[arg-type]
                if other or other.__class__ is int:  # 0.0 and -0.0 are one key: float zeros are not kept here
                    if len(_SCALAR_CONSTANTS) >= _SCALAR_CONSTANTS_LIMIT:
                        _SCALAR_CONSTANTS.clear()
                    _SCALAR_CONSTANTS[key] = constant
            return type(self)._wrap(UOp.keyed(op, dtype, (constant, uop) if reverse else (uop, constant), None, None))
        common = scalar_result_dtype(dtype, other)
        first = self if common is dtype or common == dtype else self.cast(common)
        constant = UOp.const_on(common, other, first.device, first.shape)
        uop = first.uop
        return first._result(UOp(op, uop.dtype, (constant, uop) if reverse else (uop, constant)))

    def _symbolic_scalar(self, value: UOp) -> Self:
        """A 0-d tensor on this device whose value is the symbolic int `value` (its bound Variables' values)."""
        if not dtypes.is_int(value.dtype):
            raise TypeError(f"expected a Tensor, a Python number or a symbolic int, got a {value.dtype} UOp {value}")
        return type(self)._wrap(UOp.const_on(value.dtype, 0, self.device, ()) + value)

    def _binary(self, op: Ops, other: Operand[Self], reverse: bool = False) -> Self:
        """The ALU op `op` on this tensor and `other` broadcast and promoted."""
        first, second = self._broadcasted(other, reverse)
        return first._alu(op, second)

    def _require(self, kinds: str, name: str) -> None:
        """An error unless this tensor's dtype is of one of `kinds` ('f' float, 'i' int, 'b' bool)."""
        kind = "f" if dtypes.is_float(self.dtype) else "b" if self.dtype == dtypes.bool else "i"
        if kind not in kinds:
            wanted = {"f": "floating point", "i": "integer", "b": "bool"}
            raise DTypeMismatchError(f"{name} is not defined for {self.dtype} tensors; it needs "
                                     f"{' or '.join(wanted[k] for k in kinds)} dtypes")

    def _float(self) -> Self:
        """This tensor cast to a floating point dtype (int and bool to the default float)."""
        return self.cast(least_upper_float(self.dtype))

    # ---- arithmetic ----

    def add(self, x: Operand[Self], reverse: bool = False) -> Self:
        """self + x."""
        if x.__class__ is int or x.__class__ is float:
            return self._scalar_alu(Ops.ADD, x, reverse)  # type: ignore[arg-type]
        first, second = self._broadcasted(x, reverse)
        if first.dtype == dtypes.bool:
            return first._alu(Ops.OR, second)
        return first._alu(Ops.ADD, second)

    def sub(self, x: Operand[Self], reverse: bool = False) -> Self:
        """self - x."""
        first, second = self._broadcasted(x, reverse)
        if first.dtype == dtypes.bool:
            raise TypeError("subtraction of bool tensors is not supported: use logical_xor or ^ instead")
        return first._alu(Ops.ADD, second._alu(Ops.NEG))

    def mul(self, x: Operand[Self], reverse: bool = False) -> Self:
        """self * x."""
        if x.__class__ is int or x.__class__ is float:
            return self._scalar_alu(Ops.MUL, x, reverse)  # type: ignore[arg-type]
        first, second = self._broadcasted(x, reverse)
        if first.dtype == dtypes.bool:
            return first._alu(Ops.AND, second)
        return first._alu(Ops.MUL, second)

    def div(self, x: Operand[Self], reverse: bool = False, rounding_mode: str | None = None) -> Self:
        """self / x: true division, or rounded with rounding_mode 'trunc' or 'floor'."""
        first, second = self._broadcasted(x, reverse)
        if rounding_mode is None:
            target = least_upper_float(first.dtype)
            return first.cast(target)._alu(Ops.FDIV, second.cast(target))
        if rounding_mode == "trunc":
            if dtypes.is_int(first.dtype):
                return first._alu(Ops.IDIV, second)
            return first._alu(Ops.FDIV, second).trunc()
        if rounding_mode == "floor":
            return first._floordiv(second)
        raise ArgumentError(f"rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")

    def _floordiv(self, other: Self) -> Self:
        """Floor division of two broadcast tensors of one dtype."""
        if dtypes.is_int(self.dtype):
            quotient = self._alu(Ops.IDIV, other)
            remainder = self._alu(Ops.MOD, other)
            adjust = remainder.ne(0) & ((remainder < 0) ^ (other < 0))
            return adjust.where(quotient - 1, quotient)
        if self.dtype == dtypes.bool:
            raise TypeError("floor division of bool tensors is not supported: cast to int first")
        return self._alu(Ops.FDIV, other).floor()

    def _mod(self, other: Self) -> Self:
        """Python-style remainder (sign of the divisor) of two broadcast tensors of one dtype."""
        if dtypes.is_int(self.dtype):
            remainder = self._alu(Ops.MOD, other)
            adjust = remainder.ne(0) & ((remainder < 0) ^ (other < 0))
            return adjust.where(remainder + other, remainder)
        if self.dtype == dtypes.bool:
            raise TypeError("remainder of bool tensors is not supported: cast to int first")
        return self - other * self._alu(Ops.FDIV, other).floor()

    def mod(self, x: Operand[Self], reverse: bool = False) -> Self:
        """self % x with the sign of x (Python and torch.remainder semantics)."""
        first, second = self._broadcasted(x, reverse)
        return first._mod(second)

    def fmod(self, x: Operand[Self]) -> Self:
        """Remainder with the sign of self (C fmod semantics)."""
        first, second = self._broadcasted(x)
        if dtypes.is_int(first.dtype):
            return first._alu(Ops.MOD, second)
        return first - second * first._alu(Ops.FDIV, second).trunc()

    def pow(self, x: Operand[Self], reverse: bool = False) -> Self:
        """self ** x (x ** self when `reverse`). Values and gradients are torch's, edges included: a negative base
        to a non-integral power is NaN and so are its gradients; the base's gradient is 0 where the exponent is 0,
        the exponent's is 0 where the base is 0 and the exponent is not negative."""
        if not reverse and isinstance(x, int) and not isinstance(x, bool) and x < 0 and dtypes.is_int(self.dtype):
            raise DTypeMismatchError(f"an integer tensor ({self.dtype}) to the negative integer power {x} is not an "
                                     "integer: cast the base to float first (.float())")
        if not reverse and isinstance(x, (int, float)) and not isinstance(x, bool) and not _is_tensor(x):
            special = self._pow_scalar(x)
            if special is not None:
                # x**0 is a shared constant and x**1 is x itself: neither may carry a rule of its own; sqrt's own
                # gradient is torch's for x**0.5 (NaN at -inf, where the pow rule's C-style power gives 0)
                if x in (0, 1, 0.5) or not dtypes.is_float(special.dtype):
                    return special
                return _with_pow_gradient(special, self, x)
        base, exponent = self._broadcasted(x, reverse)
        value = base._pow_value(exponent)
        if not dtypes.is_float(value.dtype):
            return value
        return _with_pow_gradient(value, base, exponent)

    def _pow_plain(self, exponent: Self | int | float) -> Self:
        """self ** exponent, differentiated through its own graph (the gradient rule's building block)."""
        if isinstance(exponent, (int, float)):
            special = self._pow_scalar(exponent)
            if special is not None:
                return special
        base, power = self._broadcasted(exponent)
        return base._pow_value(power)

    def _pow_value(self, exponent: Self) -> Self:
        """self ** exponent for broadcast operands, as C's pow: |base| ** exponent through exp2 and log2, negated for
        a negative base to an odd integer, NaN for a finite negative base to a non-integral power, 1 for a zero
        exponent."""
        base = self
        result_dtype = base.dtype
        if result_dtype == dtypes.bool:
            base, exponent = base.cast(dtypes.int32), exponent.cast(dtypes.int32)
            result_dtype = dtypes.int32
        compute = least_upper_float(result_dtype)
        base_float, exponent_float = base.cast(compute), exponent.cast(compute)
        magnitude = (exponent_float * base_float.abs().log2()).exp2()
        integral = exponent_float.eq(exponent_float.trunc())
        half = exponent_float * 0.5
        odd = integral & half.ne(half.trunc())
        negative_result = odd.where(-magnitude, magnitude)
        nan = magnitude._const(math.nan)
        # (-inf) ** y for a non-integral y is inf or 0, as C's pow gives it
        fractional = base_float.eq(-math.inf).where(magnitude, nan)
        result = (base_float < 0).where(integral.where(negative_result, fractional), magnitude)
        result = exponent_float.eq(0).where(result._const(1.0), result)
        if dtypes.is_int(result_dtype):
            return result.round().cast(result_dtype)
        return result.cast(result_dtype)

    def _pow_scalar(self, exponent: int | float) -> Self | None:
        """Exact shortcuts for small integer exponents and 0.5 (None: use the general formula)."""
        if exponent == 0.5 and isinstance(exponent, float):
            return self._float().sqrt()
        if isinstance(exponent, float) and not dtypes.is_float(self.dtype):
            return None
        if exponent != int(exponent) or abs(exponent) > 64:
            return None
        power = int(abs(exponent))
        if exponent < 0 and not dtypes.is_float(self.dtype):
            return None
        if self.dtype == dtypes.bool:
            return None
        result: Self | None = None
        square = self
        while power:
            if power & 1:
                result = square if result is None else result * square
            power >>= 1
            if power:
                square = square * square
        if result is None:
            return self.ones_like()
        return result.reciprocal() if exponent < 0 else result

    def maximum(self, x: Operand[Self]) -> Self:
        """Elementwise maximum."""
        first, second = self._broadcasted(x)
        if first.dtype == dtypes.bool:
            return first._alu(Ops.OR, second)
        return first._alu(Ops.MAX, second)

    def minimum(self, x: Operand[Self]) -> Self:
        """Elementwise minimum."""
        first, second = self._broadcasted(x)
        if first.dtype == dtypes.bool:
            return first._alu(Ops.AND, second)
        return first._inverse()._alu(Ops.MAX, second._inverse())._inverse()

    def _inverse(self) -> Self:
        """An order-reversing bijection (neg for floats, bitwise not for ints, logical not for bool)."""
        if dtypes.is_float(self.dtype):
            return self._alu(Ops.NEG)
        if self.dtype == dtypes.bool:
            return self.logical_not()
        return self._alu(Ops.XOR, self._const(-1 if not dtypes.is_unsigned(self.dtype) else self.dtype.max))

    def clip(self, min_: Self | ConstType | None = None, max_: Self | ConstType | None = None) -> Self:
        """Values limited to [min_, max_] (either bound may be None, not both); min_ applies first, so min_ > max_
        gives max_ everywhere, as torch. The gradient passes where min_ <= self <= max_, the bounds included (torch's
        rule: maximum and minimum would split it in half at a tie)."""
        if min_ is None and max_ is None:
            raise ArgumentError("clip needs at least one of min_ and max_")
        result = self
        if min_ is not None:
            result = (result < min_).where(min_, result)
        if max_ is not None:
            result = (result > max_).where(max_, result)
        if not dtypes.is_float(result.dtype):
            return result
        from tinycore.gradient import with_gradient
        wrap = type(self)._wrap

        def rule(node: UOp, gradient: UOp) -> dict[UOp, UOp]:
            inside = self._const(True, dtypes.bool)
            if min_ is not None:
                inside = inside & (self >= min_)
            if max_ is not None:
                inside = inside & (self <= max_)
            # a NaN input is in no range: its gradient is 0, as torch's
            return {self.uop: inside.where(wrap(gradient), 0.0).cast(self.dtype).uop}

        return wrap(with_gradient(result.uop, rule), result.requires_grad)

    def clamp(self, min_: Self | ConstType | None = None, max_: Self | ConstType | None = None) -> Self:
        """Alias of clip."""
        return self.clip(min_, max_)

    def neg(self) -> Self:
        """-self (logical not for bool)."""
        return self.logical_not() if self.dtype == dtypes.bool else self._alu(Ops.NEG)

    def abs(self) -> Self:
        """|self|."""
        if self.dtype == dtypes.bool or dtypes.is_unsigned(self.dtype):
            return self
        # the middle branch makes the gradient at 0 zero (as torch's sign(x)); it is x * 0 so nan stays nan
        return (self < 0).where(-self, (self > 0).where(self, self * 0))

    def sign(self) -> Self:
        """-1, 0 or 1 by the sign of each element (nan stays nan)."""
        if self.dtype == dtypes.bool:
            return self
        result = (self < 0).where(self._const(-1), self.ne(0).where(self._const(1), self._const(0)))
        return result + self * 0 if dtypes.is_float(self.dtype) else result

    def copysign(self, other: Operand[Self]) -> Self:
        """|self| with the sign of `other`."""
        first, second = self._broadcasted(other)
        first = first._float()
        negative = (second < 0) | (second.eq(0) & (1 / second._float() < 0)) if dtypes.is_float(second.dtype) \
            else second < 0
        return negative.where(-first.abs(), first.abs())

    def square(self) -> Self:
        """self * self."""
        return self * self

    def lerp(self, end: Operand[Self], weight: Operand[Self]) -> Self:
        """self + (end - self) * weight."""
        return self + (end - self) * weight

    # ---- operators ----

    def __neg__(self) -> Self:
        """-self."""
        return self.neg()

    def __add__(self, x: Operand[Self]) -> Self:
        """self + x."""
        if x.__class__ is int or x.__class__ is float:  # add's own test, without its call (eager code's `x + 1`)
            return self._scalar_alu(Ops.ADD, x, False)  # type: ignore[arg-type]
        return self.add(x)

    def __radd__(self, x: Operand[Self]) -> Self:
        """x + self."""
        if x.__class__ is int or x.__class__ is float:
            return self._scalar_alu(Ops.ADD, x, True)  # type: ignore[arg-type]
        return self.add(x, True)

    def __sub__(self, x: Operand[Self]) -> Self:
        """self - x."""
        return self.sub(x)

    def __rsub__(self, x: Operand[Self]) -> Self:
        """x - self."""
        return self.sub(x, True)

    def __mul__(self, x: Operand[Self]) -> Self:
        """self * x."""
        if x.__class__ is int or x.__class__ is float:  # mul's own test, without its call
            return self._scalar_alu(Ops.MUL, x, False)  # type: ignore[arg-type]
        return self.mul(x)

    def __rmul__(self, x: Operand[Self]) -> Self:
        """x * self."""
        if x.__class__ is int or x.__class__ is float:
            return self._scalar_alu(Ops.MUL, x, True)  # type: ignore[arg-type]
        return self.mul(x, True)

    def __truediv__(self, x: Operand[Self]) -> Self:
        """self / x (true division)."""
        return self.div(x)

    def __rtruediv__(self, x: Operand[Self]) -> Self:
        """x / self (true division)."""
        return self.div(x, True)

    def __floordiv__(self, x: Operand[Self]) -> Self:
        """self // x (floor division)."""
        return self.div(x, rounding_mode="floor")

    def __rfloordiv__(self, x: Operand[Self]) -> Self:
        """x // self (floor division)."""
        return self.div(x, True, rounding_mode="floor")

    def __mod__(self, x: Operand[Self]) -> Self:
        """self % x."""
        return self.mod(x)

    def __rmod__(self, x: Operand[Self]) -> Self:
        """x % self."""
        return self.mod(x, True)

    def __pow__(self, x: Operand[Self]) -> Self:
        """self ** x."""
        return self.pow(x)

    def __rpow__(self, x: Operand[Self]) -> Self:
        """x ** self."""
        return self.pow(x, True)

    def __and__(self, x: Operand[Self]) -> Self:
        """self & x."""
        return self.bitwise_and(x)

    def __rand__(self, x: Operand[Self]) -> Self:
        """x & self."""
        return self.bitwise_and(x, True)

    def __or__(self, x: Operand[Self]) -> Self:
        """self | x."""
        return self.bitwise_or(x)

    def __ror__(self, x: Operand[Self]) -> Self:
        """x | self."""
        return self.bitwise_or(x, True)

    def __xor__(self, x: Operand[Self]) -> Self:
        """self ^ x."""
        return self.bitwise_xor(x)

    def __rxor__(self, x: Operand[Self]) -> Self:
        """x ^ self."""
        return self.bitwise_xor(x, True)

    def __lshift__(self, x: Operand[Self]) -> Self:
        """self << x."""
        return self.lshift(x)

    def __rshift__(self, x: Operand[Self]) -> Self:
        """self >> x."""
        return self.rshift(x)

    def __rlshift__(self, x: Operand[Self]) -> Self:
        """x << self."""
        return self.lshift(x, True)

    def __rrshift__(self, x: Operand[Self]) -> Self:
        """x >> self."""
        return self.rshift(x, True)

    def __invert__(self) -> Self:
        """~self (bitwise not)."""
        return self.bitwise_not()

    def __lt__(self, x: Operand[Self]) -> Self:
        """self < x as bool."""
        return self._binary(Ops.CMPLT, x)

    def __gt__(self, x: Operand[Self]) -> Self:
        """self > x as bool."""
        return self._binary(Ops.CMPLT, x, True)

    def __le__(self, x: Operand[Self]) -> Self:
        """self <= x as bool (false for nan)."""
        first, second = self._broadcasted(x)
        return first._alu(Ops.CMPLT, second) | first._alu(Ops.CMPEQ, second)

    def __ge__(self, x: Operand[Self]) -> Self:
        """self >= x as bool (false for nan)."""
        first, second = self._broadcasted(x)
        return second._alu(Ops.CMPLT, first) | first._alu(Ops.CMPEQ, second)

    def __eq__(self, x: Operand[Self]) -> Self:  # type: ignore[override]
        """self == x as a bool tensor (not a Python bool)."""
        return self.eq(x)

    def __ne__(self, x: Operand[Self]) -> Self:  # type: ignore[override]
        """self != x as a bool tensor (not a Python bool)."""
        return self.ne(x)

    def _inplace(self, result: Self) -> Self:
        """self == x as a bool tensor."""
        return self.assign(result)

    def __iadd__(self, x: Operand[Self]) -> Self:
        """self += x (assigns)."""
        return self._inplace(self + x)

    def __isub__(self, x: Operand[Self]) -> Self:
        """self -= x (assigns)."""
        return self._inplace(self - x)

    def __imul__(self, x: Operand[Self]) -> Self:
        """self *= x (assigns)."""
        return self._inplace(self * x)

    def __itruediv__(self, x: Operand[Self]) -> Self:
        """self /= x (assigns)."""
        return self._inplace(self / x)

    def __ifloordiv__(self, x: Operand[Self]) -> Self:
        """self //= x (assigns)."""
        return self._inplace(self // x)

    def __imod__(self, x: Operand[Self]) -> Self:
        """self %= x (assigns)."""
        return self._inplace(self % x)

    def __ipow__(self, x: Operand[Self]) -> Self:
        """self **= x (assigns)."""
        return self._inplace(self ** x)

    def __iand__(self, x: Operand[Self]) -> Self:
        """self &= x (assigns)."""
        return self._inplace(self & x)

    def __ior__(self, x: Operand[Self]) -> Self:
        """self |= x (assigns)."""
        return self._inplace(self | x)

    def __ixor__(self, x: Operand[Self]) -> Self:
        """self ^= x (assigns)."""
        return self._inplace(self ^ x)

    def __ilshift__(self, x: Operand[Self]) -> Self:
        """self <<= x (assigns)."""
        return self._inplace(self << x)

    def __irshift__(self, x: Operand[Self]) -> Self:
        """self >>= x (assigns)."""
        return self._inplace(self >> x)

    # ---- comparison and logic ----

    def eq(self, x: Operand[Self]) -> Self:
        """self == x as bool."""
        return self._binary(Ops.CMPEQ, x)

    def ne(self, x: Operand[Self]) -> Self:
        """self != x as bool."""
        return self._binary(Ops.CMPNE, x)

    def logical_not(self) -> Self:
        """True where self is zero/False."""
        if self.dtype == dtypes.bool:
            return self._alu(Ops.CMPNE, self._const(True))
        return self.eq(0)

    def _bitwise(self, op: Ops, x: Operand[Self], reverse: bool, name: str) -> Self:
        """The bitwise op `op` on broadcast integer or bool operands."""
        first, second = self._broadcasted(x, reverse)
        first._require("ib", name)
        return first._alu(op, second)

    def bitwise_and(self, x: Operand[Self], reverse: bool = False) -> Self:
        """Bitwise (logical for bool) and."""
        return self._bitwise(Ops.AND, x, reverse, "bitwise_and")

    def bitwise_or(self, x: Operand[Self], reverse: bool = False) -> Self:
        """Bitwise (logical for bool) or."""
        return self._bitwise(Ops.OR, x, reverse, "bitwise_or")

    def bitwise_xor(self, x: Operand[Self], reverse: bool = False) -> Self:
        """Bitwise (logical for bool) exclusive or."""
        return self._bitwise(Ops.XOR, x, reverse, "bitwise_xor")

    def bitwise_not(self) -> Self:
        """Bitwise not (logical not for bool)."""
        self._require("ib", "bitwise_not")
        return self.logical_not() if self.dtype == dtypes.bool else self._inverse()

    def lshift(self, x: Operand[Self], reverse: bool = False) -> Self:
        """self << x (integers)."""
        first, second = self._broadcasted(x, reverse)
        first._require("i", "lshift")
        return first._alu(Ops.SHL, second)

    def rshift(self, x: Operand[Self], reverse: bool = False) -> Self:
        """self >> x (integers; arithmetic shift for signed types)."""
        first, second = self._broadcasted(x, reverse)
        first._require("i", "rshift")
        return first._alu(Ops.SHR, second)

    def where(self, x: Self | ConstType, y: Self | ConstType) -> Self:
        """x where self is true, else y (broadcast together)."""
        condition = self if self.dtype == dtypes.bool else self.ne(0)
        if _is_tensor(x):
            x_tensor, y_tensor = x._broadcasted(y)
        elif _is_tensor(y):
            y_tensor, x_tensor = y._broadcasted(x)
        else:
            common = scalars_dtype(x, y)
            x_tensor, y_tensor = self._const(x, common, ()), self._const(y, common, ())
        shape = broadcast_shape(condition.shape, x_tensor.shape, y_tensor.shape)
        condition, x_tensor, y_tensor = (tensor._broadcast_to(shape) for tensor in (condition, x_tensor, y_tensor))
        return condition._alu(Ops.WHERE, x_tensor, y_tensor)

    def masked_fill(self, mask: Self, value: Self | ConstType) -> Self:
        """`value` where mask is true, else self."""
        return mask.where(value, self)

    def isnan(self) -> Self:
        """True where the value is nan."""
        return self.ne(self) if dtypes.is_float(self.dtype) else self._const(False, dtypes.bool)

    def isinf(self, detect_positive: bool = True, detect_negative: bool = True) -> Self:
        """True where the value is +inf (detect_positive) or -inf (detect_negative)."""
        if not dtypes.is_float(self.dtype):
            return self._const(False, dtypes.bool)
        positive = self.eq(math.inf) if detect_positive else self._const(False, dtypes.bool)
        negative = self.eq(-math.inf) if detect_negative else self._const(False, dtypes.bool)
        return positive | negative

    def isfinite(self) -> Self:
        """True where the value is neither inf nor nan."""
        return (self.isinf() | self.isnan()).logical_not()

    def isclose(self, other: Operand[Self], rtol: float = 1e-05, atol: float = 1e-08,
                equal_nan: bool = False) -> Self:
        """True where self == other or, both finite, |self - other| <= atol + rtol * |other| (as torch: an infinity is
        close only to itself); nan is close to nan only with equal_nan."""
        first, second = self._broadcasted(other)
        close = first.eq(second) | (first.isfinite() & second.isfinite() &
                                    ((first - second).abs() <= (second.abs() * rtol + atol)))
        if equal_nan:
            close = close | (first.isnan() & second.isnan())
        return close

    def allclose(self, other: Operand[Self], rtol: float = 1e-05, atol: float = 1e-08,
                 equal_nan: bool = False) -> Self:
        """A 0-d bool Tensor, true when isclose holds everywhere (as tinygrad's: read it with .item())."""
        return self.isclose(other, rtol, atol, equal_nan).all()

    # ---- math ----

    def exp(self) -> Self:
        """e ** self."""
        return (self._float() * LOG2_E)._alu(Ops.EXP2)

    def exp2(self) -> Self:
        """2 ** self."""
        return self._float()._alu(Ops.EXP2)

    def log(self) -> Self:
        """Natural logarithm."""
        return self._float()._alu(Ops.LOG2) * LN_2

    def log2(self) -> Self:
        """Base-2 logarithm."""
        return self._float()._alu(Ops.LOG2)

    def log10(self) -> Self:
        """Base-10 logarithm."""
        return self.log2() * (1 / math.log2(10))

    def log1p(self) -> Self:
        """log(1 + self)."""
        return (self._float() + 1).log()

    def expm1(self) -> Self:
        """exp(self) - 1."""
        return self.exp() - 1

    def sqrt(self) -> Self:
        """Square root."""
        return self._float()._alu(Ops.SQRT)

    def rsqrt(self) -> Self:
        """1 / sqrt(self)."""
        return self.sqrt().reciprocal()

    def reciprocal(self) -> Self:
        """1 / self."""
        return self._float()._alu(Ops.RECIPROCAL)

    def sin(self) -> Self:
        """Sine."""
        return self._float()._alu(Ops.SIN)

    def cos(self) -> Self:
        """Cosine (as sin(pi/2 - x), which the kernels compute as cos(x)), with the gradient -sin(x). Through sin's
        own rule the gradient would be cos(pi/2 - x) of the rounded pi/2 - x: 2e-2 off at x = 1e6."""
        from tinycore.gradient import with_gradient
        source = self._float()
        value = ((math.pi / 2) - source)._alu(Ops.SIN)
        wrap = type(self)._wrap

        def rule(node: UOp, gradient: UOp) -> dict[UOp, UOp]:
            return {source.uop: (-(wrap(gradient) * source.sin())).uop}

        return wrap(with_gradient(value.uop, rule), value.requires_grad)

    def tan(self) -> Self:
        """Tangent."""
        return self.sin() / self.cos()

    def atan(self) -> Self:
        """Inverse tangent, by range reduction to |t| <= tan(pi/8) and its Taylor series."""
        x = self._float()
        magnitude = x.abs()
        large = magnitude > 1
        reduced = large.where(magnitude.reciprocal(), magnitude)  # in [0, 1]
        shifted = reduced > (math.sqrt(2) - 1)
        t = shifted.where((reduced - 1) / (reduced + 1), reduced)  # |t| <= tan(pi/8)
        t2 = t * t
        series = t._const(0.0)
        for k in range(12, -1, -1):
            series = series * t2 + ((-1) ** k) / (2 * k + 1)
        angle = t * series
        angle = shifted.where(angle + math.pi / 4, angle)
        angle = large.where(math.pi / 2 - angle, angle)
        return (x < 0).where(-angle, angle)

    def asin(self) -> Self:
        """Inverse sine."""
        x = self._float()
        return (x / (1 - x * x).sqrt()).atan()

    def acos(self) -> Self:
        """Inverse cosine."""
        return math.pi / 2 - self.asin()

    def sinh(self) -> Self:
        """Hyperbolic sine."""
        return (self.exp() - self.neg().exp()) / 2

    def cosh(self) -> Self:
        """Hyperbolic cosine."""
        return (self.exp() + self.neg().exp()) / 2

    def tanh(self) -> Self:
        """Hyperbolic tangent, within an ulp of the float32 result: below |x| = 1 the odd polynomial x + x^3 P(x^2)
        (2 sigmoid(2x) - 1 would lose all digits near 0; x itself below 2**-12, which keeps -0), above
        1 - 2z / (1 + z) with z = exp(-2|x|) and the sign of x (the rounding errors of z and the division shrink by
        the small quotient). Neither branch overflows, so gradients stay finite. P: a least-squares fit of the
        relative error on 4000 Chebyshev nodes of [0, 1] (numpy.linalg.lstsq in float64), relative error below 5e-9.
        2 / (1 + z) is a degree-5 polynomial in z (the same kind of fit on [0, e**-2], relative error below 2**-28)
        instead of a division, which costs a vector divider's 10 cycles per 16 lanes; 1 - z Q(z) rounds once where
        the renderer fuses multiply-adds (within 1 ulp on every float32 in [0.5, 10] either way)."""
        x = self._float()
        # built as nodes, not as some forty tensor ops: a call on 1024 elements took 0.63 ms of Python that way,
        # 0.35 ms now (most of the rest is the schedule cache's walk of the graph); the kernel is the same
        source = x.uop
        dtype, device, shape = source.dtype, source.device, source.shape

        def constant(value: float) -> UOp:
            return UOp.const_on(dtype, value, device, shape)

        def multiply_add(first: UOp, second: UOp, third: UOp) -> UOp:
            # may round once (a renderer's FMA): as accurate or more than a multiply and an add, half the work
            return UOp(Ops.MULACC, dtype, (first, second, third), FUSED)

        negative = source.alu(Ops.CMPLT, constant(0.0))
        folded = negative.alu(Ops.WHERE, source, source.alu(Ops.NEG))  # -|x|, one select (abs() takes two)
        small = constant(-1.0).alu(Ops.CMPLT, folded)
        inside = small.alu(Ops.WHERE, source, constant(0.0))
        square = inside.alu(Ops.MUL, inside)
        series = multiply_add(square, constant(-0.0003596436713551589), constant(0.002305857558824157))
        for coefficient in (-0.007952825114062131, 0.021491693822674726, -0.05388176161665973, 0.13332380972164581,
                            -0.3333329782968232):
            series = multiply_add(series, square, constant(coefficient))
        z = folded.alu(Ops.MUL, constant(2 * LOG2_E)).alu(Ops.EXP2)
        # 2 / (1 + z) on z in [0, e**-2] (where it is selected) by a polynomial: no division
        quotient = multiply_add(z, constant(-1.3570536149118762), constant(1.9094817851416746))
        for coefficient in (-1.9938627766659498, 1.9998082046563042, -1.9999977811138788, 1.9999999957953198):
            quotient = multiply_add(quotient, z, constant(coefficient))
        outside = multiply_add(z.alu(Ops.NEG), quotient, constant(1.0))
        tiny = constant(-(2.0 ** -12)).alu(Ops.CMPLT, folded)
        polynomial = tiny.alu(Ops.WHERE, source, multiply_add(inside.alu(Ops.MUL, square), series, inside))
        return x._result(small.alu(Ops.WHERE, polynomial, negative.alu(Ops.WHERE, outside.alu(Ops.NEG), outside)))

    def asinh(self) -> Self:
        """Inverse hyperbolic sine."""
        x = self._float()
        magnitude = (x.abs() + (x * x + 1).sqrt()).log()
        return (x < 0).where(-magnitude, magnitude)

    def acosh(self) -> Self:
        """Inverse hyperbolic cosine."""
        x = self._float()
        return (x + (x * x - 1).sqrt()).log()

    def atanh(self) -> Self:
        """Inverse hyperbolic tangent."""
        x = self._float()
        return ((1 + x) / (1 - x)).log() * 0.5

    def trunc(self) -> Self:
        """Rounding toward zero."""
        return self._alu(Ops.TRUNC) if dtypes.is_float(self.dtype) else self

    def floor(self) -> Self:
        """Rounding toward -inf."""
        if not dtypes.is_float(self.dtype):
            return self
        truncated = self.trunc()
        return (self < truncated).where(truncated - 1, truncated)

    def ceil(self) -> Self:
        """Rounding toward +inf."""
        if not dtypes.is_float(self.dtype):
            return self
        truncated = self.trunc()
        return (self > truncated).where(truncated + 1, truncated)

    def round(self) -> Self:
        """Rounding to the nearest integer, halves to even."""
        if not dtypes.is_float(self.dtype):
            return self
        truncated = self.trunc()
        fraction = self - truncated
        away = truncated + self.sign()
        half_of_truncated = truncated * 0.5
        truncated_is_even = half_of_truncated.eq(half_of_truncated.trunc())
        at_half = fraction.abs().eq(0.5)
        return (fraction.abs() > 0.5).where(away, at_half.where(truncated_is_even.where(truncated, away), truncated))

    def erf(self) -> Self:
        """The error function (Abramowitz and Stegun 7.1.26, absolute error below 1.5e-7)."""
        x = self._float()
        t = 1.0 / (1.0 + 0.3275911 * x.abs())
        polynomial = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
        value = 1.0 - polynomial * (-(x * x)).exp()
        return (x < 0).where(-value, value)

    # ---- activations ----

    def relu(self) -> Self:
        """max(self, 0)."""
        return (self > 0).where(self, self._const(0))

    def sigmoid(self) -> Self:
        """1 / (1 + exp(-self)), computed from z = exp(-|self|) (never overflows): 1 / (1 + z) for self >= 0 and
        z / (1 + z) below, so values far below zero keep their precision and gradients stay finite everywhere."""
        x = self._float()
        negative = x < 0
        z = (negative.where(x, -x) * LOG2_E)._alu(Ops.EXP2)
        positive_branch = (1.0 + z)._alu(Ops.RECIPROCAL)
        return negative.where(z * positive_branch, positive_branch)

    def logsigmoid(self) -> Self:
        """log(sigmoid(self))."""
        return -(-self).softplus()

    def hardsigmoid(self, alpha: float = 1 / 6, beta: float = 0.5) -> Self:
        """max(0, min(1, alpha * self + beta))."""
        return (alpha * self + beta).relu() - (alpha * self + beta - 1).relu()

    def leaky_relu(self, neg_slope: float = 0.01) -> Self:
        """self where positive, else neg_slope * self."""
        return (self < 0).where(self * neg_slope, self)

    def relu6(self) -> Self:
        """min(max(self, 0), 6)."""
        return self.relu() - (self - 6).relu()

    def elu(self, alpha: float = 1.0) -> Self:
        """self where positive, else alpha * (exp(self) - 1)."""
        return self.relu() - alpha * (1 - self.exp()).relu()

    def celu(self, alpha: float = 1.0) -> Self:
        """max(0, x) + min(0, alpha * (exp(x / alpha) - 1))."""
        return self.maximum(0) + (alpha * ((self / alpha).exp() - 1)).minimum(0)

    def selu(self, alpha: float = 1.67326, gamma: float = 1.0507) -> Self:
        """gamma * (x where positive, else alpha * (exp(x) - 1))."""
        return gamma * (self >= 0).where(self._float(), alpha * (self.exp() - 1))

    def gelu(self, approximate: str = "tanh") -> Self:
        """Gaussian error linear unit ('tanh' approximation or exact 'none')."""
        if approximate == "tanh":
            return 0.5 * self * (1 + (math.sqrt(2 / math.pi) * (self + 0.044715 * self * self * self)).tanh())
        if approximate == "none":
            return 0.5 * self * (1 + (self / math.sqrt(2)).erf())
        raise ValueError(f"gelu approximate must be 'tanh' or 'none', got {approximate!r}")

    def quick_gelu(self) -> Self:
        """self * sigmoid(1.702 * self)."""
        return self * (self * 1.702).sigmoid()

    def silu(self) -> Self:
        """self * sigmoid(self)."""
        return self * self.sigmoid()

    def swish(self) -> Self:
        """Alias of silu."""
        return self.silu()

    def softplus(self, beta: float = 1.0) -> Self:
        """log(1 + exp(beta * self)) / beta (linear above beta * self = 20, like torch)."""
        scaled = self._float() * beta
        linear = scaled > 20
        # the log branch reads 0 where the linear one is taken: its exp would overflow there, and the zero gradient
        # the where gives that branch times exp's infinite gradient would be NaN
        bounded = linear.where(0.0, scaled)
        return linear.where(self._float(), (1 + bounded.exp()).log() * (1 / beta))

    def mish(self) -> Self:
        """self * tanh(softplus(self))."""
        return self * self.softplus().tanh()

    def hardtanh(self, min_val: float = -1, max_val: float = 1) -> Self:
        """self limited to [min_val, max_val]."""
        return self.clip(min_val, max_val)

    def hardswish(self) -> Self:
        """self * relu6(self + 3) / 6."""
        return self * (self + 3).relu6() * (1 / 6)

    def softsign(self) -> Self:
        """self / (1 + |self|)."""
        return self / (1 + self.abs())

    def logaddexp(self, other: Operand[Self]) -> Self:
        """log(exp(self) + exp(other)) computed stably."""
        first, second = self._broadcasted(other)
        top = first.maximum(second)
        safe_top = top.isinf().where(top._const(0.0, top.dtype), top) if dtypes.is_float(top.dtype) else top
        return ((first - safe_top).exp() + (second - safe_top).exp()).log() + safe_top

    def ufix(self, x: Self | ConstType) -> Self:
        """`x` as a tensor usable with this one (a Python scalar becomes a constant of the promoted dtype)."""
        if _is_tensor(x):
            return x
        return self._const(x, scalar_result_dtype(self.dtype, x), ())

    def alu(self, op: Ops, *src: Self | ConstType) -> Self:
        """The ALU operation `op` applied to this tensor and `src` (broadcast and promoted together)."""
        if op in (Ops.WHERE,):
            return self.where(*src)
        operands = [self]
        for other in src:
            first, second = operands[0]._broadcasted(other)
            operands = [operand._broadcast_to(first.shape).cast(first.dtype) for operand in operands] + [second]
        return operands[0]._alu(op, *operands[1:])

    # ---- dtype shortcuts ----

    def float(self) -> Self:
        """Cast to float32."""
        return self.cast(dtypes.float32)

    def half(self) -> Self:
        """Cast to float16."""
        return self.cast(dtypes.float16)

    def double(self) -> Self:
        """Cast to float64."""
        return self.cast(dtypes.float64)

    def bfloat16(self) -> Self:
        """Cast to bfloat16."""
        return self.cast(dtypes.bfloat16)

    def int(self) -> Self:
        """Cast to int32."""
        return self.cast(dtypes.int32)

    def long(self) -> Self:
        """Cast to int64."""
        return self.cast(dtypes.int64)

    def short(self) -> Self:
        """Cast to int16."""
        return self.cast(dtypes.int16)

    def bool(self) -> Self:
        """Cast to bool."""
        return self.cast(dtypes.bool)
