"""What the ONNX operator files share: ONNX element types as tinycore dtypes, attribute helpers, pads and axes."""
from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from tinycore.dtype import DType, dtypes
from tinycore.tensor import Tensor
from tinycore.uop.ops import Ops

ONNX_DTYPES: dict[int, DType] = {
    1: dtypes.float32, 2: dtypes.uint8, 3: dtypes.int8, 4: dtypes.uint16, 5: dtypes.int16, 6: dtypes.int32,
    7: dtypes.int64, 9: dtypes.bool, 10: dtypes.float16, 11: dtypes.float64, 12: dtypes.uint32, 13: dtypes.uint64,
    16: dtypes.bfloat16,
    # 8-bit and 4-bit floats are held as their bit patterns (no renderer stores them; see small_floats.py)
    17: dtypes.uint8, 18: dtypes.uint8, 19: dtypes.uint8, 20: dtypes.uint8, 23: dtypes.uint8, 24: dtypes.uint8,
    # 4- and 2-bit integers are held one per byte: every value fits, and arithmetic on them is the same
    21: dtypes.uint8, 22: dtypes.int8, 25: dtypes.uint8, 26: dtypes.int8}
"""ONNX TensorProto.DataType codes and the dtype that holds their values."""

ONNX_TYPE_NAMES: dict[int, str] = {
    0: "UNDEFINED", 1: "FLOAT", 2: "UINT8", 3: "INT8", 4: "UINT16", 5: "INT16", 6: "INT32", 7: "INT64", 8: "STRING",
    9: "BOOL", 10: "FLOAT16", 11: "DOUBLE", 12: "UINT32", 13: "UINT64", 14: "COMPLEX64", 15: "COMPLEX128",
    16: "BFLOAT16", 17: "FLOAT8E4M3FN", 18: "FLOAT8E4M3FNUZ", 19: "FLOAT8E5M2", 20: "FLOAT8E5M2FNUZ", 21: "UINT4",
    22: "INT4", 23: "FLOAT4E2M1", 24: "FLOAT8E8M0", 25: "UINT2", 26: "INT2"}
"""Every ONNX element type code, for messages about the ones without a dtype here."""

INT4_RANGES: dict[int, tuple[int, int]] = {21: (0, 15), 22: (-8, 7), 25: (0, 3), 26: (-2, 1)}
"""The value ranges of the 4- and 2-bit integer types, which saturating casts and quantization clamp to."""


def onnx_dtype(code: int, what: str) -> DType:
    """The dtype of ONNX element type `code`; NotImplementedError naming `what` for types without one."""
    if code in ONNX_DTYPES:
        return ONNX_DTYPES[code]
    name = ONNX_TYPE_NAMES.get(code, f"unknown type {code}")
    raise NotImplementedError(f"{what}: ONNX element type {name} has no tinycore dtype (supported: "
                              f"{', '.join(ONNX_TYPE_NAMES[code] for code in ONNX_DTYPES)})")


ML_DTYPE_NAMES: dict[str, DType] = {"bfloat16": dtypes.bfloat16}
"""ml_dtypes' numpy types (which onnx uses for these ONNX types) and the tinycore dtypes of the same bits."""

ML_DTYPE_CODES: dict[str, int] = {
    "float8_e4m3fn": 17, "float8_e4m3fnuz": 18, "float8_e5m2": 19, "float8_e5m2fnuz": 20, "float4_e2m1fn": 23,
    "float8_e8m0fnu": 24, "uint4": 21, "int4": 22, "uint2": 25, "int2": 26}
"""ml_dtypes' numpy types of the ONNX types held in a byte (the floats as their bits), by ONNX element type."""

ONNX_BYTE_TYPES = frozenset(ML_DTYPE_CODES.values())
"""The ONNX element types held one value per byte and tagged with their type (small_floats.mark)."""


NARROWER: dict[DType, DType] = {dtypes.int64: dtypes.int32, dtypes.uint64: dtypes.uint32,
                                dtypes.float64: dtypes.float32}
"""What a 64-bit dtype becomes on a device that cannot compute in it: ONNX carries every shape, index and count as
int64, and WGSL (WEBGPU) has no 64-bit types, so there the runner holds them as int32."""


@functools.cache
def _computable(device: str) -> frozenset[DType] | None:
    """The dtypes `device`'s renderer computes in (None: all of them)."""
    from tinycore.device.registry import Device
    supported = Device[device].renderer.supported_dtypes()
    return None if supported is None else frozenset(supported)


def device_dtype(dtype: DType, device: str | None) -> DType:
    """`dtype`, or its 32-bit stand-in (NARROWER) on a device without 64-bit `dtype`."""
    if dtype not in NARROWER:
        return dtype
    from tinycore.device.registry import Device
    computable = _computable(Device.canonicalize(device) if device is not None else Device.DEFAULT)
    return dtype if computable is None or dtype in computable else NARROWER[dtype]


def index_dtype(device: str | None) -> DType:
    """The dtype of ONNX's int64 shapes and indices on `device` (int32 where it has no int64)."""
    return device_dtype(dtypes.int64, device)


def device_array(array: np.ndarray, device: str | None) -> np.ndarray:
    """`array` in the numpy type of `device_dtype` of its dtype. Integers saturate: ONNX spells "to the end" of a
    Slice as INT64_MAX, which stays the largest int32 rather than wrapping round."""
    if array.dtype not in (np.int64, np.uint64, np.float64):
        return array
    dtype = {np.dtype(np.int64): dtypes.int64, np.dtype(np.uint64): dtypes.uint64}.get(array.dtype, dtypes.float64)
    target = device_dtype(dtype, device)
    if target == dtype:
        return array
    narrow = np.dtype(target.fmt or "f")
    if narrow.kind in "iu":
        limits = np.iinfo(narrow)
        array = np.clip(array, limits.min, limits.max)
    return array.astype(narrow)


def host_tensor(array: np.ndarray, device: str | None) -> Tensor:
    """A host-computed result (shapes, indices, counts) as a Tensor on `device`, narrowed where it has to be."""
    return Tensor(np.require(device_array(np.asarray(array), device), requirements="C"), device=device)


def tensor_from_numpy(array: np.ndarray, device: str | None) -> Tensor:
    """A numpy array as a Tensor, including ml_dtypes' bfloat16 (carried bit for bit), 8- and 4-bit floats (their bits
    in uint8, tagged with their ONNX type) and 4- and 2-bit integers (one per byte, tagged); 64-bit arrays narrowed
    on a device without them (`device_array`)."""
    if array.dtype.name in ML_DTYPE_NAMES:
        target = ML_DTYPE_NAMES[array.dtype.name]
        bits = np.require(array, requirements="C").view(np.uint16 if target.itemsize == 2 else np.uint8)
        return Tensor(bits, device=device).bitcast(target)
    if array.dtype.name in ML_DTYPE_CODES:
        from tinycore.nn.onnx.small_floats import mark
        code = ML_DTYPE_CODES[array.dtype.name]
        if code in INT4_RANGES:
            return mark(Tensor(array.astype(np.int8 if array.dtype.name.startswith("int") else np.uint8),
                               device=device), code)
        return mark(Tensor(np.require(array, requirements="C").view(np.uint8), device=device), code)
    if array.dtype.byteorder not in ("=", "|"):
        array = array.astype(array.dtype.newbyteorder("="))
    return Tensor(np.require(device_array(array, device), requirements="C"), device=device)


STRING_CODE = 8
"""ONNX's STRING element type. No device has a string dtype, so the runner holds string tensors on the host as
numpy arrays of Python str (dtype object), runs the string ops there, and converts at the boundary: a Cast from
strings to numbers, Equal, RegexFullMatch... give device Tensors."""


def is_strings(value: object) -> bool:
    """Whether a graph value is a string tensor (a numpy object array on the host)."""
    return isinstance(value, np.ndarray) and value.dtype == object


def string_array(value: object, where: str) -> np.ndarray:
    """Strings given as a numpy array (str, bytes or object), a list or one str, as the runner's string tensor: an
    object array of Python str (bytes decoded as UTF-8). TypeError naming `where` for anything else."""
    array = np.asarray(value, dtype=object) if not isinstance(value, np.ndarray) else value
    if array.dtype.kind not in "OUS":
        raise TypeError(f"{where} is a string tensor, got an array of {array.dtype} (pass str values)")
    result = np.empty(array.shape, dtype=object)
    flat = result.reshape(-1)
    for index, item in enumerate(array.reshape(-1).tolist()):
        if isinstance(item, bytes):
            item = item.decode("utf-8")
        if not isinstance(item, str):
            raise TypeError(f"{where} is a string tensor, got a {type(item).__name__} element ({item!r})")
        flat[index] = item
    return result


HALF_FLOATS = (dtypes.float16, dtypes.bfloat16)
"""The 16-bit floats, which ops with long sums or chains (MatMul, Conv, Attention) compute in float32 and round once
at the end: onnx's reference (numpy) sums half products in float32 and rounds the sum once, and a sum kept in half
drifts from it by more than the last bit."""


def widened(x: Tensor) -> Tensor:
    """x in float32 when it is a 16-bit float (HALF_FLOATS), else x itself (the float32 path is untouched)."""
    return x.cast(dtypes.float32) if x.dtype in HALF_FLOATS else x


def dtype_label(dtype: DType) -> str:
    """A dtype as numpy spells it (float32, int64, bool), the names ONNX users know; bfloat16 and 8-bit floats by
    their own names."""
    import numpy
    if dtype.fmt is not None and dtype != dtypes.bool:
        return numpy.dtype(dtype.fmt).name
    return "bool" if dtype == dtypes.bool else dtype.name


def integer_range(code: int, dtype: DType) -> tuple[int, int]:
    """The (min, max) values of ONNX type `code` held in `dtype` (4-bit types are narrower than their dtype)."""
    if code in INT4_RANGES:
        return INT4_RANGES[code]
    return int(dtypes.min(dtype)), int(dtypes.max(dtype))


def axis_of(axis: int, ndim: int) -> int:
    """A possibly negative ONNX axis as a non-negative one, checked against the rank."""
    if not -max(ndim, 1) <= axis < max(ndim, 1):
        raise ValueError(f"axis {axis} is out of range for a tensor of rank {ndim}")
    return axis % max(ndim, 1)


def axes_of(axes: Sequence[int], ndim: int) -> list[int]:
    """Possibly negative ONNX axes as non-negative ones."""
    return [axis_of(int(axis), ndim) for axis in axes]


def pairs_from_onnx_pads(pads: Sequence[int]) -> list[tuple[int, int]]:
    """ONNX pads (all begins, then all ends) as (begin, end) pairs per axis."""
    half = len(pads) // 2
    return [(int(pads[index]), int(pads[index + half])) for index in range(half)]


def auto_pad_pairs(auto_pad: str, sizes: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
                   dilations: Sequence[int]) -> list[tuple[int, int]]:
    """The (begin, end) pads per spatial axis that SAME_UPPER / SAME_LOWER ask for (an output of ceil(size/stride))."""
    pairs = []
    for size, k, stride, dilation in zip(sizes, kernel, strides, dilations, strict=False):
        output = -(-size // stride)
        total = max(0, (output - 1) * stride + (k - 1) * dilation + 1 - size)
        small, large = total // 2, total - total // 2
        pairs.append((small, large) if auto_pad == "SAME_UPPER" else (large, small))
    return pairs


def spatial_pads(x: Tensor, kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
                 pads: Sequence[int] | None, auto_pad: str) -> list[tuple[int, int]]:
    """The (begin, end) pads of each spatial axis of `x` for a convolution or pooling node."""
    count = len(kernel)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        return auto_pad_pairs(auto_pad, x.shape[-count:], kernel, strides, dilations)
    if auto_pad == "VALID" or not pads:
        return [(0, 0)] * count
    return pairs_from_onnx_pads(pads)


def torch_style_padding(pairs: Sequence[tuple[int, int]]) -> list[int]:
    """(begin, end) pairs per axis as the flat, last-axis-first list Tensor.conv2d's `padding` takes."""
    flat: list[int] = []
    for begin, end in reversed(pairs):
        flat += [begin, end]
    return flat


def as_ints(value: Tensor | Sequence[int] | int | None) -> list[int] | None:
    """A shape-like input (a host list, an int or a Tensor) as a list of ints."""
    if value is None:
        return None
    items = value.tolist() if isinstance(value, Tensor) else value
    if isinstance(items, (int, float)):
        return [int(items)]
    return [int(item) for item in items]


def scalar_of(value: Tensor | Sequence[float] | float | int) -> float | int:
    """A one-element input (host list, number or Tensor) as a Python number."""
    item: Any = value.tolist() if isinstance(value, Tensor) else value
    while isinstance(item, (list, tuple)):
        if len(item) != 1:
            raise ValueError(f"expected a single value, got {len(item)}")
        item = item[0]
    return item


def constant_int(value: Tensor) -> int | None:
    """The value of an integer tensor that holds one constant in every element (a folded Constant or one-element
    initializer, see runner._as_constant), read from its graph without running a kernel; None for any other tensor
    (a computed or loaded one, whose value needs the device)."""
    base = value.uop.base
    if base.op is not Ops.CONST or base.src and base.src[0].op is not Ops.DEVICE or not dtypes.is_int(value.dtype):
        return None
    return int(base.arg) if isinstance(base.arg, int) else None
