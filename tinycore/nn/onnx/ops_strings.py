"""String tensors: ONNX's string ops, and the string forms of the movement and comparison ops.

No device has a string dtype (neither has tinygrad), so the runner holds a string tensor on the host as a numpy
object array of Python str (common.STRING_CODE) and these ops run there with numpy. Results that are numbers (Equal,
RegexFullMatch, StringSplit's counts, a Cast or LabelEncoder to numbers) become Tensors on the runner's device; the
ones that are strings stay on the host. The string forms (`string_op`) are what the runner calls instead of an op's
numeric implementation when a string tensor is among the node's inputs, or when a Cast's target is STRING.
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence

import numpy as np

from tinycore.dtype import dtypes
from tinycore.helpers import prod
from tinycore.nn.onnx.common import STRING_CODE, as_ints, axes_of, axis_of, host_tensor, is_strings, onnx_dtype
from tinycore.nn.onnx.registry import NodeContext, onnx_op, string_op
from tinycore.tensor import Tensor

ML = "ai.onnx.ml"


def strings_of(items: Sequence[str] | np.ndarray, shape: tuple[int, ...] | None = None) -> np.ndarray:
    """Python strs as a string tensor (an object array), reshaped to `shape` when given."""
    array = np.empty(len(items) if not isinstance(items, np.ndarray) else items.size, dtype=object)
    array[:] = list(items.reshape(-1)) if isinstance(items, np.ndarray) else list(items)
    return array.reshape(shape if shape is not None else array.shape)


def _numbers(value: Tensor | np.ndarray) -> np.ndarray:
    """A numeric input of a string op (indices, a condition) on the host."""
    return value.numpy() if isinstance(value, Tensor) else np.asarray(value)


def _require_strings(value: object, what: str) -> np.ndarray:
    """`value` when it is a string tensor; TypeError saying what the op wanted otherwise."""
    if not is_strings(value):
        kind = f"a {value.dtype.name} Tensor" if isinstance(value, Tensor) else type(value).__name__
        raise TypeError(f"{what} must be a string tensor, got {kind}")
    assert isinstance(value, np.ndarray)
    return value


def _elementwise(function: Callable[..., object], *arrays: np.ndarray) -> np.ndarray:
    """`function` applied to each broadcast tuple of elements, as an object array (0-d inputs give a 0-d result)."""
    result = np.frompyfunc(function, len(arrays), 1)(*arrays)
    return np.asarray(result, dtype=object)


def _device_of(context: NodeContext) -> str:
    """The runner's device, where numeric results of string ops go."""
    return context.device


# ---- the string ops ----

@onnx_op("StringConcat", 20, strings=True)
def string_concat(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """x + y elementwise, with numpy broadcasting."""
    return _elementwise(lambda left, right: left + right, _require_strings(x, "StringConcat's X"),
                        _require_strings(y, "StringConcat's Y"))


@onnx_op("StringSplit", 20, strings=True, context=True)
def string_split(x: np.ndarray, delimiter: str = "", maxsplit: int | None = None, *,
                 context: NodeContext) -> tuple[np.ndarray, Tensor]:
    """Each string split at `delimiter` (absent or empty: at runs of whitespace), at most `maxsplit` times: the parts
    padded with "" to the longest count (shape x.shape + [longest]), and the counts (int64, x's shape)."""
    strings = _require_strings(x, "StringSplit's X")
    separator = delimiter or None
    parts = [item.split(separator, -1 if maxsplit is None else int(maxsplit)) for item in strings.reshape(-1)]
    longest = max((len(part) for part in parts), default=0)
    padded = [item for part in parts for item in part + [""] * (longest - len(part))]
    counts = np.array([len(part) for part in parts], dtype=np.int64).reshape(strings.shape)
    return strings_of(padded, (*strings.shape, longest)), host_tensor(counts, _device_of(context))


@onnx_op("RegexFullMatch", 20, strings=True, context=True)
def regex_full_match(x: np.ndarray, pattern: str = "", *, context: NodeContext) -> Tensor:
    """Whether each string matches `pattern` as a whole (bool). ONNX names RE2's syntax; Python's re reads the same
    for everything but RE2's few extensions, which raise re.error here."""
    strings = _require_strings(x, "RegexFullMatch's X")
    try:
        compiled = re.compile(pattern)
    except re.error as error:
        raise ValueError(f"RegexFullMatch pattern {pattern!r} does not compile: {error}") from error
    matched = np.array([compiled.fullmatch(item) is not None for item in strings.reshape(-1)], dtype=bool)
    return host_tensor(matched.reshape(strings.shape), _device_of(context))


@onnx_op("StringNormalizer", 10, strings=True)
def string_normalizer(x: np.ndarray, case_change_action: str = "NONE", is_case_sensitive: int = 0,
                      locale: str = "", stopwords: list[str] | None = None) -> np.ndarray:
    """The strings of x ([C] or [1, C]) without the stopwords (compared case-blind unless `is_case_sensitive`), then
    lowered or uppered; when every string is a stopword, one empty string ([1] or [1, 1])."""
    strings = _require_strings(x, "StringNormalizer's X")
    if strings.ndim not in (1, 2) or (strings.ndim == 2 and strings.shape[0] != 1):
        raise ValueError(f"StringNormalizer takes a [C] or [1, C] tensor, got shape {list(strings.shape)}")
    if case_change_action not in ("NONE", "LOWER", "UPPER"):
        raise ValueError(f"StringNormalizer case_change_action must be NONE, LOWER or UPPER, not "
                         f"{case_change_action!r}")
    stops = set(stopwords or [])
    if not is_case_sensitive:
        stops = {word.casefold() for word in stops}
    kept = [item for item in strings.reshape(-1)
            if (item if is_case_sensitive else item.casefold()) not in stops]
    if case_change_action == "LOWER":
        kept = [item.lower() for item in kept]
    elif case_change_action == "UPPER":
        kept = [item.upper() for item in kept]
    kept = kept or [""]
    return strings_of(kept, (1, len(kept)) if strings.ndim == 2 else (len(kept),))


def _attribute_array(value: Tensor | np.ndarray | list[str] | list[int] | list[float] | None) -> np.ndarray | None:
    """A LabelEncoder keys/values attribute (a list or a tensor) as a flat host array."""
    if value is None:
        return None
    if isinstance(value, Tensor):
        return value.numpy().reshape(-1)
    return np.asarray(value, dtype=object).reshape(-1) if is_strings(value) or (
        isinstance(value, list) and value and isinstance(value[0], str)) else np.asarray(value).reshape(-1)


@onnx_op("LabelEncoder", 2, domain=ML, strings=True, context=True)
def label_encoder(x: Tensor | np.ndarray, keys_floats: list[float] | None = None,
                  keys_int64s: list[int] | None = None, keys_strings: list[str] | None = None,
                  keys_tensor: Tensor | np.ndarray | None = None, values_floats: list[float] | None = None,
                  values_int64s: list[int] | None = None, values_strings: list[str] | None = None,
                  values_tensor: Tensor | np.ndarray | None = None, default_float: float = -0.0,
                  default_int64: int = -1, default_string: str = "_Unused",
                  default_tensor: Tensor | np.ndarray | None = None, *,
                  context: NodeContext) -> Tensor | np.ndarray:
    """Each element of x looked up in the keys and replaced by the value at the same position, or the default. Runs
    on the host (a dictionary lookup); numeric results go to the device. A NaN key matches NaN elements."""
    keys = next((found for found in map(_attribute_array, (keys_strings, keys_int64s, keys_floats, keys_tensor))
                 if found is not None), None)
    values = next((found for found in map(_attribute_array, (values_strings, values_int64s, values_floats,
                                                             values_tensor)) if found is not None), None)
    if keys is None or values is None:
        raise ValueError("LabelEncoder needs keys (keys_strings, keys_int64s, keys_floats or keys_tensor) and values")
    if len(keys) != len(values):
        raise ValueError(f"LabelEncoder has {len(keys)} keys but {len(values)} values")
    default: object
    if values_tensor is not None:
        out_type = values.dtype
        if default_tensor is not None:
            default = _attribute_array(default_tensor)[0]  # type: ignore[index]
        else:
            default = "_Unused" if out_type.kind == "O" else -1 if out_type.kind in "iu" else -0.0
    elif values_strings is not None:
        out_type, default = np.dtype(object), default_string
    elif values_int64s is not None:
        out_type, default = np.dtype(np.int64), default_int64
    else:
        out_type, default = np.dtype(np.float32), default_float
    table: dict[object, object] = {}
    nan_value: object = None
    for key, value in zip(keys.tolist(), values.tolist(), strict=True):
        if isinstance(key, float) and math.isnan(key):
            nan_value = value
        else:
            table[key] = value
    items = (x if is_strings(x) else _numbers(x)).reshape(-1).tolist()
    looked_up = [nan_value if nan_value is not None and isinstance(item, float) and math.isnan(item)
                 else table.get(item, default) for item in items]
    shape = tuple(x.shape)
    if out_type.kind == "O":
        return strings_of([str(item) for item in looked_up], shape)
    return host_tensor(np.array(looked_up, dtype=out_type).reshape(shape), _device_of(context))


# ---- the string forms of the numeric ops ----

@string_op("Identity")
def identity_strings(x: np.ndarray) -> np.ndarray:
    """x itself."""
    return x


@string_op("Reshape", host_inputs=(1,))
def reshape_strings(x: np.ndarray, shape: list[int], allowzero: int = 0) -> np.ndarray:
    """x with a new shape: -1 is inferred, 0 copies the input's dim unless `allowzero`."""
    target = [int(size) for size in as_ints(shape) or []]
    if not allowzero:
        target = [x.shape[index] if size == 0 else size for index, size in enumerate(target)]
    return x.reshape(target)


@string_op("Flatten")
def flatten_strings(x: np.ndarray, axis: int = 1) -> np.ndarray:
    """x as a matrix: the axes before `axis` make the rows."""
    if not -x.ndim <= axis <= x.ndim:
        raise ValueError(f"Flatten axis {axis} is out of range for a tensor of rank {x.ndim}")
    split = axis + x.ndim if axis < 0 else axis
    return x.reshape(prod(x.shape[:split]), prod(x.shape[split:]))


@string_op("Squeeze", host_inputs=(1,))
def squeeze_strings(x: np.ndarray, axes_input: list[int] | None = None, axes: list[int] | None = None
                    ) -> np.ndarray:
    """x without the size-1 axes named (by the input from opset 13, the attribute before), or all of them."""
    chosen = as_ints(axes_input) if axes_input is not None else axes
    if not chosen:
        return x.reshape([size for size in x.shape if size != 1])
    return np.squeeze(x, axis=tuple(axes_of(chosen, x.ndim)))


@string_op("Unsqueeze", host_inputs=(1,))
def unsqueeze_strings(x: np.ndarray, axes_input: list[int] | None = None, axes: list[int] | None = None
                      ) -> np.ndarray:
    """x with size-1 axes inserted at `axes` (positions in the output)."""
    chosen = as_ints(axes_input) if axes_input is not None else axes
    rank = x.ndim + len(chosen or [])
    shape = list(x.shape)
    for axis in sorted(axes_of(chosen or [], rank)):
        shape.insert(axis, 1)
    return x.reshape(shape)


@string_op("Transpose")
def transpose_strings(x: np.ndarray, perm: list[int] | None = None) -> np.ndarray:
    """x with its axes permuted (reversed by default)."""
    return np.transpose(x, perm)


@string_op("Concat")
def concat_strings(*xs: np.ndarray, axis: int = 0) -> np.ndarray:
    """The string tensors joined along `axis`."""
    arrays = [_require_strings(item, f"Concat's input {index}") for index, item in enumerate(xs)]
    return np.concatenate(arrays, axis=axis_of(axis, arrays[0].ndim))


@string_op("Gather")
def gather_strings(x: np.ndarray, indices: Tensor, axis: int = 0) -> np.ndarray:
    """The entries of x at `indices` along `axis` (negative indices count from the end)."""
    index_array = _numbers(indices).astype(np.int64)
    return np.take(x, index_array, axis=axis_of(axis, x.ndim))


@string_op("Slice", host_inputs=(1, 2, 3, 4))
def slice_strings(x: np.ndarray, starts_input: list[int] | None = None, ends_input: list[int] | None = None,
                  axes_input: list[int] | None = None, steps_input: list[int] | None = None,
                  starts: list[int] | None = None, ends: list[int] | None = None,
                  axes: list[int] | None = None) -> np.ndarray:
    """x[starts:ends:steps] on `axes` (inputs from opset 10, attributes before); out-of-range bounds clamp as
    Python's slices do, which is ONNX's rule."""
    begin = (as_ints(starts_input) if starts_input is not None else starts) or []
    finish = (as_ints(ends_input) if ends_input is not None else ends) or []
    chosen = as_ints(axes_input) if axes_input is not None else axes
    strides = as_ints(steps_input) if steps_input is not None else None
    on_axes = axes_of(chosen if chosen is not None else list(range(len(begin))), x.ndim)
    slices = [slice(None)] * x.ndim
    for position, axis in enumerate(on_axes):
        slices[axis] = slice(begin[position], finish[position], strides[position] if strides else 1)
    return x[tuple(slices)]


@string_op("Expand", host_inputs=(1,))
def expand_strings(x: np.ndarray, shape: list[int]) -> np.ndarray:
    """x broadcast with `shape` (numpy's rule, which is ONNX's)."""
    target = np.broadcast_shapes(x.shape, tuple(as_ints(shape) or []))
    return np.broadcast_to(x, target).copy()


@string_op("Tile", host_inputs=(1,))
def tile_strings(x: np.ndarray, repeats: list[int]) -> np.ndarray:
    """x repeated `repeats[i]` times along axis i."""
    return np.tile(x, as_ints(repeats) or [])


@string_op("Where")
def where_strings(condition: Tensor, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """x where the condition holds, else y, broadcast."""
    chosen = np.where(_numbers(condition).astype(bool), _require_strings(x, "Where's X"),
                      _require_strings(y, "Where's Y"))
    return np.asarray(chosen, dtype=object)


@string_op("Equal", context=True)
def equal_strings(x: np.ndarray, y: np.ndarray, *, context: NodeContext) -> Tensor:
    """Whether the strings are equal, elementwise with broadcasting (bool, on the device)."""
    equal = _elementwise(lambda left, right: left == right, _require_strings(x, "Equal's A"),
                         _require_strings(y, "Equal's B"))
    return host_tensor(equal.astype(bool), _device_of(context))


@string_op("Shape", context=True)
def shape_strings(x: np.ndarray, start: int = 0, end: int | None = None, *, context: NodeContext) -> Tensor:
    """The int64 shape of the string tensor, optionally the dims [start, end)."""
    return host_tensor(np.array(list(x.shape)[slice(start, end)], dtype=np.int64), _device_of(context))


@string_op("Size", context=True)
def size_strings(x: np.ndarray, *, context: NodeContext) -> Tensor:
    """The int64 number of strings."""
    return host_tensor(np.array(x.size, dtype=np.int64), _device_of(context))


def _parse_number(text: str, integer: bool) -> float | int:
    """One string as a number: decimal or scientific notation, INF/-INF/NaN in any case; ValueError otherwise."""
    stripped = text.strip()
    if integer:
        try:
            return int(stripped)
        except ValueError:
            return int(float(stripped))
    return float(stripped)


def strings_to_numbers(strings: np.ndarray, code: int, device: str) -> Tensor:
    """A string tensor parsed to ONNX type `code` on `device` (a Cast from STRING)."""
    dtype = onnx_dtype(code, "Cast from STRING")
    if dtype == dtypes.bool:
        flags = [_parse_number(item, False) != 0 for item in strings.reshape(-1)]
        return host_tensor(np.array(flags, dtype=bool).reshape(strings.shape), device)
    numpy_type = np.dtype(dtype.fmt) if dtype.fmt is not None else np.dtype(np.float32)
    integer = numpy_type.kind in "iu"
    try:
        parsed = [_parse_number(item, integer) for item in strings.reshape(-1)]
    except ValueError as error:
        raise ValueError(f"Cast from STRING: {error}; the strings must be numbers (like 3.14, 1e-5, -7, NaN, INF)"
                         ) from error
    array = np.array(parsed, dtype=np.float64 if not integer else np.int64).reshape(strings.shape)
    tensor = host_tensor(array.astype(numpy_type) if dtype.fmt is not None else array.astype(np.float32), device)
    return tensor if dtype.fmt is not None else tensor.cast(dtype)


def numbers_to_strings(x: Tensor) -> np.ndarray:
    """A tensor's values as strings (a Cast to STRING): integers as digits, floats in their shortest round-tripping
    form (numpy's), booleans as "1" and "0"."""
    values = x.cast(dtypes.float32).numpy() if x.dtype == dtypes.bfloat16 else x.numpy()
    if values.dtype == np.bool_:
        return strings_of(["1" if item else "0" for item in values.reshape(-1)], values.shape)
    return strings_of([str(item) for item in values.reshape(-1)], values.shape)


@string_op("Cast", context=True)
def cast_strings(x: Tensor | np.ndarray, to: int, saturate: int = 1, round_mode: str = "up", *,
                 context: NodeContext) -> Tensor | np.ndarray:
    """Strings parsed to numbers on the device, or numbers formatted as strings on the host."""
    if is_strings(x):
        assert isinstance(x, np.ndarray)
        return x if to == STRING_CODE else strings_to_numbers(x, to, _device_of(context))
    assert isinstance(x, Tensor)
    return numbers_to_strings(x)


@string_op("CastLike", context=True)
def cast_like_strings(x: Tensor | np.ndarray, target: Tensor | np.ndarray, saturate: int = 1,
                      round_mode: str = "up", target_type: int = 0, *, context: NodeContext) -> Tensor | np.ndarray:
    """x converted to the element type of `target`, where one of them is strings."""
    if is_strings(target):
        return x if is_strings(x) else numbers_to_strings(x)  # type: ignore[arg-type]
    assert isinstance(x, np.ndarray) and isinstance(target, Tensor)
    codes = {dtype: code for code, dtype in reversed(list(_ONNX_CODES.items()))}
    if target.dtype not in codes:
        raise NotImplementedError(f"CastLike from STRING to {target.dtype.name} is not supported")
    return strings_to_numbers(x, codes[target.dtype], _device_of(context))


_ONNX_CODES = {1: dtypes.float32, 2: dtypes.uint8, 3: dtypes.int8, 4: dtypes.uint16, 5: dtypes.int16,
               6: dtypes.int32, 7: dtypes.int64, 9: dtypes.bool, 10: dtypes.float16, 11: dtypes.float64,
               12: dtypes.uint32, 13: dtypes.uint64, 16: dtypes.bfloat16}
"""The ONNX types a CastLike from strings can target, by code (the byte-held small types excluded)."""
