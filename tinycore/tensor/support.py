"""Argument handling shared by the Tensor mixins: shapes, axes, devices, dtypes of Python scalars."""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from tinycore.dtype import ConstType, DType, DTypeLike, dtypes, least_upper_dtype, to_dtype
from tinycore.errors import BroadcastError

if TYPE_CHECKING:
    from typing_extensions import TypeIs

    from tinycore.uop.uop import UOp

LOG2_E = 1 / math.log(2)
"""log2(e): exp(x) is exp2(x * LOG2_E) (the elementwise ops and the softmax rows both build it so)."""
LN_2 = math.log(2)
"""ln(2): log(x) is log2(x) * LN_2."""


def argfix(*args: Any) -> tuple[Any, ...]:
    """Arguments given either as one sequence or spread out (`reshape((2, 3))` and `reshape(2, 3)`) as a tuple."""
    if args and args[0].__class__ in (tuple, list):
        if len(args) > 1:
            raise ValueError(f"give the sizes either as one sequence or as separate values, not both: {args}")
        return tuple(args[0])
    return tuple(args)


def resolve_axis(axis: int, ndim: int, allow_end: bool = False) -> int:
    """`axis` made non-negative for a tensor of `ndim` axes (`allow_end`: `ndim` itself is valid, for unsqueeze)."""
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise TypeError(f"axis must be an int, got {type(axis).__name__} {axis!r}")
    limit = ndim + 1 if allow_end else ndim
    low, high = -max(limit, 1), max(limit, 1) - 1
    if not low <= axis <= high:
        raise IndexError(f"axis {axis} is out of range for a tensor with {ndim} dimensions "
                         f"(expected an axis in [{low}, {high}])")
    return axis + limit if axis < 0 else axis


def resolve_axes(axis: int | Sequence[int] | None, ndim: int) -> tuple[int, ...]:
    """Reduce axes (None: all of them) as sorted non-negative ints; repeats are an error."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    if ndim == 0:
        for item in axes:
            resolve_axis(item, 0)
        return ()
    resolved = [resolve_axis(item, ndim) for item in axes]
    if len(set(resolved)) != len(resolved):
        raise ValueError(f"axis {axis} names the same dimension more than once")
    return tuple(sorted(resolved))


def int_shape(node: UOp) -> tuple[int, ...]:
    """The shape of `node`, whose sizes the caller has checked are ints (the node-level graph builders)."""
    return cast(tuple[int, ...], node.shape)


def same_size(first: Any, second: Any) -> bool:
    """Whether two sizes are equal; symbolic ones when their difference simplifies to 0 (i+j and j+i)."""
    if isinstance(first, int) and isinstance(second, int):
        return first == second
    if first is second:
        return True
    difference = (first - second).ssimplify() if not isinstance(first, int) else (-(second - first)).ssimplify()
    return isinstance(difference, int) and difference == 0


def broadcast_shape(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """The shape that `shapes` broadcast to (numpy rules); a clear error when they do not."""
    if len(shapes) == 2 and shapes[0] == shapes[1]:
        return tuple(shapes[0])
    ndim = max((len(shape) for shape in shapes), default=0)
    padded = [(1,) * (ndim - len(shape)) + tuple(shape) for shape in shapes]
    result = []
    for sizes in zip(*padded, strict=True):
        others = {size for size in sizes if size != 1}
        if len(others) > 1 and not all(isinstance(size, int) for size in others):
            # symbolic sizes built in different orders (i+j, j+i) are one size
            kept: list[int] = []
            for size in others:
                if not any(same_size(size, seen) for seen in kept):
                    kept.append(size)
            others = set(kept)
        if len(others) > 1:
            raise BroadcastError(f"shapes {' and '.join(str(tuple(shape)) for shape in shapes)} cannot be broadcast "
                             f"together: sizes {sorted(others)} conflict (each size must match or be 1)")
        result.append(others.pop() if others else 1)
    return tuple(result)


def optional_dtype(dtype: DTypeLike | None) -> DType | None:
    """`dtype` as a DType, or None."""
    return None if dtype is None else to_dtype(dtype)


def scalar_result_dtype(tensor_dtype: DType, value: ConstType) -> DType:
    """The dtype of `tensor op value` for a Python scalar `value`: the tensor's dtype unless the scalar is of a
    higher category (bool < int < float), in which case that category's default dtype."""
    if isinstance(value, bool):
        return tensor_dtype
    if isinstance(value, int):
        return dtypes.default_int if tensor_dtype == dtypes.bool else tensor_dtype
    if isinstance(value, float):
        return tensor_dtype if dtypes.is_float(tensor_dtype) else dtypes.default_float
    raise TypeError(f"expected a Tensor or a Python int, float or bool, got {type(value).__name__} {value!r}")


def scalars_dtype(*values: ConstType) -> DType:
    """The dtype two Python scalars combine to (bool < int < float, defaults)."""
    return least_upper_dtype(*(dtypes.from_py(value) for value in values))


def is_scalar(value: object) -> TypeIs[ConstType]:
    """True for a Python int, float or bool."""
    return isinstance(value, (int, float, bool))


def check_shape(shape: Sequence[Any], what: str = "shape") -> tuple[int, ...]:
    """`shape` as a tuple of non-negative ints; a clear error otherwise."""
    from tinycore.uop.uop import UOp
    result = tuple(shape)
    for size in result:
        if isinstance(size, UOp):
            continue
        if not isinstance(size, int) or isinstance(size, bool):
            raise TypeError(f"{what} {result} must hold ints, found {type(size).__name__} {size!r}")
        if size < 0:
            raise ValueError(f"{what} {result} has a negative size {size}; sizes must be >= 0")
    return result

