"""Model state: collecting a model's tensors by name, loading them back, and the safetensors file format.

safetensors layout: an 8-byte little-endian header length N, N bytes of JSON header (an object mapping each
tensor name to {"dtype", "shape", "data_offsets": [start, end]} plus an optional "__metadata__" object of strings),
then the data: every tensor's bytes in C order, little-endian, at its offsets relative to the end of the header.
Files are read and written with Python I/O; every header field is checked against the file before any tensor is
made, and a malformed file raises SafetensorsError naming the file and the problem.
"""
from __future__ import annotations

import json
import os
import pathlib
import sys
import types
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeAlias

from tinycore.dtype import DType, dtypes
from tinycore.helpers import prod
from tinycore.nn.safetensors_disk import SafetensorsFormatError
from tinycore.tensor import Tensor

SAFETENSORS_DTYPES: dict[str, DType] = {
    "BOOL": dtypes.bool, "U8": dtypes.uint8, "I8": dtypes.int8, "U16": dtypes.uint16, "I16": dtypes.int16,
    "U32": dtypes.uint32, "I32": dtypes.int32, "U64": dtypes.uint64, "I64": dtypes.int64, "F16": dtypes.float16,
    "BF16": dtypes.bfloat16, "F32": dtypes.float32, "F64": dtypes.float64, "F8_E4M3": dtypes.fp8e4m3,
    "F8_E5M2": dtypes.fp8e5m2}
"""safetensors dtype names and the dtypes they map to."""

_SAFETENSORS_NAMES = {dtype: name for name, dtype in SAFETENSORS_DTYPES.items()}
_MAX_HEADER_BYTES = 100 * 1024 * 1024
_UNSIGNED_OF_SIZE = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}


SafetensorsError = SafetensorsFormatError
_Reader: TypeAlias = Callable[[int, int], bytes]
"""`read(offset, count)`: `count` bytes of a file from byte `offset`."""
_Entry: TypeAlias = tuple[DType, tuple[int, ...], int, int]
"""A checked header entry: dtype, shape and [start, end) offsets in the data."""
"""A safetensors file (or the tensors to save) does not follow the format (one class for every loader)."""


def _disk_available() -> bool:
    """True when a plugin provides the DISK device (tiny-disk)."""
    from tinycore.device.registry import Device
    try:
        return bool(Device.probe("DISK")[0])
    except Exception:  # noqa: BLE001 - a missing or broken plugin means Python I/O
        return False


def _default_device() -> str:
    from tinycore.device.registry import Device
    return str(Device.DEFAULT)


def gguf_load(fn: Tensor | str | os.PathLike[str],
              device: str | None = None) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """(metadata, tensors) of a GGUF file; quantized tensors are dequantized on `device` (see tinycore.nn.gguf)."""
    from tinycore.nn.gguf import gguf_load as load
    return load(fn, device=device)


def torch_load(fn: Tensor | str | os.PathLike[str]) -> object:
    """The tensors and containers of a torch .pt/.pth file, through a restricted unpickler (tinycore.nn.torch_load).
    """
    from tinycore.nn.torch_load import torch_load as load
    return load(fn)


# ---- state dicts ----

def _collect(obj: object, prefix: str, tensor_type: type[Tensor], found: dict[str, Tensor], visiting: set[int]) -> None:
    """Add every tensor reachable from `obj` to `found` under its dotted attribute / index / key path."""
    if isinstance(obj, tensor_type):
        found[prefix.strip(".")] = obj
        return
    if isinstance(obj, (str, bytes, int, float, bool, type, types.ModuleType, types.FunctionType,
                        types.BuiltinFunctionType, types.MethodType)) or obj is None:
        return
    if id(obj) in visiting:
        return  # a reference cycle: each object is walked once per path
    visiting.add(id(obj))
    try:
        if hasattr(obj, "_asdict"):  # named tuples
            _collect(obj._asdict(), prefix, tensor_type, found, visiting)
        elif isinstance(obj, (OrderedDict, dict)):
            for key, value in obj.items():
                _collect(value, f"{prefix}{key}.", tensor_type, found, visiting)
        elif isinstance(obj, (list, tuple)):
            for index, value in enumerate(obj):
                _collect(value, f"{prefix}{index}.", tensor_type, found, visiting)
        elif hasattr(obj, "__dict__"):
            _collect(vars(obj), prefix, tensor_type, found, visiting)
    finally:
        visiting.discard(id(obj))


def get_state_dict(obj: object, prefix: str = "", tensor_type: type[Tensor] = Tensor) -> dict[str, Tensor]:
    """Every tensor reachable from `obj` through attributes, list/tuple indices and dict keys, by dotted name.

    `Linear(2, 3)` gives {"weight": ..., "bias": ...}; a model with `self.layers = [Linear(...), ...]` gives
    "layers.0.weight" and so on.
    """
    found: dict[str, Tensor] = {}
    _collect(obj, prefix, tensor_type, found, set())
    return found


def get_parameters(obj: object) -> list[Tensor]:
    """Every tensor reachable from `obj` (the values of get_state_dict), ready for an optimizer."""
    return list(get_state_dict(obj).values())


def _placed_like(source: Tensor, target: Tensor) -> Tensor:
    """`source` on `target`'s device(s): a model sharded over several devices shards a single-device value on the
    model's axis; a value already sharded keeps its own sharding (its devices and axis, as tinygrad); a model on one
    device gathers a sharded value onto that device."""
    if isinstance(target.device, tuple) and not isinstance(source.device, tuple):
        return source.shard(target.device, target.uop.axis)
    if isinstance(target.device, tuple):
        return source
    return source.to(target.device)


def load_state_dict(model: object, state_dict: dict[str, Tensor], strict: bool = True, verbose: bool = True,
                    consume: bool = False, realize: bool = True) -> list[Tensor]:
    """Load `state_dict`'s tensors into `model`'s tensors of the same names; returns the loaded tensors.

    With `strict`, a key missing from state_dict or one the model does not have is an error; otherwise missing
    keys are skipped (and reported when `verbose`). A shape that differs from the model's is an error naming
    the key (tinygrad's message); a dtype that differs is cast to the model's, as torch copies it. With `consume`,
    loaded keys are removed from state_dict; with `realize`, the loaded tensors are realized before returning.
    """
    model_state = get_state_dict(model)
    missing = [key for key in model_state if key not in state_dict]
    unexpected = [key for key in state_dict if key not in model_state]
    if strict and (missing or unexpected):
        problems = []
        if missing:
            problems.append(f"missing keys (in the model, not in the state dict): {missing}")
        if unexpected:
            problems.append(f"unexpected keys (in the state dict, not in the model): {unexpected}")
        raise KeyError("load_state_dict(strict=True): " + "; ".join(problems) +
                       ". Fix the names or pass strict=False to load only the keys both have")
    if verbose and missing:
        print(f"load_state_dict: not loading {len(missing)} missing key(s): {missing}")
    loaded: list[Tensor] = []
    for key, target in model_state.items():
        if key not in state_dict:
            continue
        source = state_dict[key]
        if not isinstance(source, Tensor):
            raise TypeError(f"load_state_dict: state dict entry {key!r} is a {type(source).__name__}, not a Tensor")
        if tuple(source.shape) != tuple(target.shape) and {tuple(source.shape), tuple(target.shape)} == {(), (1,)}:
            # one-element counters (BatchNorm's num_batches_tracked) are saved as () or (1,) by different writers
            source = source.reshape(target.shape)
        if tuple(source.shape) != tuple(target.shape):
            raise ValueError(f"Shape mismatch in layer `{key}`: Expected shape {tuple(target.shape)}, but found "
                             f"{tuple(source.shape)} in state dict. Check that the model is built with the sizes "
                             "the weights were saved with")
        if source.dtype != target.dtype:
            # as torch's load_state_dict copies into the model's parameter: the model keeps its dtype (a float
            # num_batches_tracked loads into BatchNorm's int64 counter, float16 weights into a float32 model)
            source = source.cast(target.dtype)
        target.replace(_placed_like(source, target))
        loaded.append(target)
        if consume:
            del state_dict[key]
    if realize and loaded:
        Tensor.realize(*loaded)
    return loaded


# ---- safetensors ----

def _fail(name: str, problem: str) -> SafetensorsError:
    return SafetensorsError(f"{name}: not a valid safetensors file: {problem}")


def _check_entry(name: str, key: str, entry: object, data_size: int) -> _Entry:
    """The dtype, shape and [start, end) offsets of one header entry, validated against the data size."""
    if not isinstance(entry, dict):
        raise _fail(name, f"entry {key!r} is a {type(entry).__name__}, expected an object")
    if set(entry) != {"dtype", "shape", "data_offsets"}:
        raise _fail(name, f"entry {key!r} has fields {sorted(entry)}, expected dtype, shape and data_offsets")
    dtype_name, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if dtype_name not in SAFETENSORS_DTYPES:
        raise _fail(name, f"entry {key!r} has unsupported dtype {dtype_name!r}; known: {sorted(SAFETENSORS_DTYPES)}")
    if not isinstance(shape, list) or not all(isinstance(size, int) and not isinstance(size, bool) and size >= 0
                                              for size in shape):
        raise _fail(name, f"entry {key!r} has shape {shape!r}, expected a list of non-negative integers")
    if not (isinstance(offsets, list) and len(offsets) == 2 and
            all(isinstance(value, int) and not isinstance(value, bool) for value in offsets)):
        raise _fail(name, f"entry {key!r} has data_offsets {offsets!r}, expected [start, end] integers")
    start, end = offsets
    if not 0 <= start <= end <= data_size:
        raise _fail(name, f"entry {key!r} has data_offsets [{start}, {end}] outside the {data_size} data bytes "
                          "after the header (the file may be truncated)")
    dtype = SAFETENSORS_DTYPES[dtype_name]
    expected = prod(shape) * dtype.itemsize
    if end - start != expected:
        raise _fail(name, f"entry {key!r} spans {end - start} bytes but shape {shape} of {dtype_name} needs "
                          f"{expected}")
    return dtype, tuple(shape), start, end


def _parse_header(name: str, file_size: int, read: _Reader) -> tuple[int, dict[str, _Entry], dict[str, str]]:
    """The header length, the validated entries (name -> (dtype, shape, start, end)) and the metadata of a file.

    `read(offset, count)` returns `count` bytes of the file from `offset`.
    """
    if file_size < 8:
        raise _fail(name, f"it has {file_size} bytes, fewer than the 8-byte header length")
    header_length = int.from_bytes(read(0, 8), "little")
    if header_length > file_size - 8:
        raise _fail(name, f"the header length {header_length} exceeds the {file_size - 8} bytes after it")
    if header_length > _MAX_HEADER_BYTES:
        raise _fail(name, f"the header length {header_length} is over the {_MAX_HEADER_BYTES}-byte limit")
    try:
        header = json.loads(read(8, header_length).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise _fail(name, f"the header is not valid UTF-8 JSON ({error})") from None
    if not isinstance(header, dict):
        raise _fail(name, f"the header is a JSON {type(header).__name__}, expected an object")
    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(key, str) and isinstance(value, str)
                                                 for key, value in metadata.items()):
        raise _fail(name, "__metadata__ must be an object mapping strings to strings")
    data_size = file_size - 8 - header_length
    entries = {key: _check_entry(name, key, entry, data_size) for key, entry in header.items()}
    position = 0
    for key, (_, _, start, end) in sorted(entries.items(), key=lambda item: (item[1][2], item[1][3])):
        if start != position:
            problem = "overlaps the previous tensor" if start < position else f"leaves a gap at byte {position}"
            raise _fail(name, f"entry {key!r} starts at data byte {start} and {problem}")
        position = end
    if position != data_size:
        raise _fail(name, f"the tensors cover {position} data bytes but the file has {data_size} after the header")
    return header_length, entries, metadata


def _tensor_from_bytes(raw: bytes, dtype: DType, shape: tuple[int, ...], device: str | None) -> Tensor:
    """A tensor of `dtype` and `shape` holding the little-endian bytes `raw`."""
    import numpy
    if sys.byteorder != "little":
        raise NotImplementedError("safetensors loading needs a little-endian machine")
    storage = dtype if dtype.fmt is not None else _UNSIGNED_OF_SIZE[dtype.itemsize]
    array = numpy.frombuffer(raw, dtype=numpy.dtype(storage.fmt)).reshape(shape)
    tensor = Tensor(array, device=device, dtype=storage)
    return tensor if storage == dtype else tensor.bitcast(dtype)


def _file_reader(path: pathlib.Path) -> tuple[int, _Reader]:
    """The size of the file at `path` and a `read(offset, count)` function over it."""
    size = path.stat().st_size

    def read(offset: int, count: int) -> bytes:
        with open(path, "rb") as handle:
            handle.seek(offset)
            data = handle.read(count)
        if len(data) != count:
            raise _fail(str(path), f"reading {count} bytes at offset {offset} gave only {len(data)}")
        return data
    return size, read


def _bytes_reader(data: bytes) -> tuple[int, _Reader]:
    """The size of `data` and a `read(offset, count)` function over it."""
    return len(data), lambda offset, count: data[offset:offset + count]


def _source(fn: Tensor | str | os.PathLike[str]) -> tuple[str, int, _Reader]:
    """A display name, the size and a reader for a safetensors file given as a path or a uint8 Tensor."""
    if isinstance(fn, Tensor):
        if fn.dtype != dtypes.uint8 or fn.ndim != 1:
            raise TypeError(f"a safetensors file as a Tensor must be 1-D uint8 bytes, got {fn.dtype} {fn.shape}")
        size, read = _bytes_reader(fn.numpy().tobytes())
        return "<Tensor>", size, read
    path = pathlib.Path(fn)
    if not path.is_file():
        raise FileNotFoundError(f"safetensors file {str(path)!r} does not exist (or is not a file)")
    size, read = _file_reader(path)
    return str(path), size, read


def safe_load_metadata(t: Tensor | str | os.PathLike[str]) -> tuple[Tensor, int, dict[str, object]]:
    """The file as a uint8 Tensor, its header length and its parsed header (entries and "__metadata__").

    The header is fully validated against the file's size first.
    """
    name, size, read = _source(t)
    header_length, _, _ = _parse_header(name, size, read)
    header = json.loads(read(8, header_length).decode("utf-8"))
    raw = t if isinstance(t, Tensor) else Tensor(read(0, size))
    return raw, header_length, header


def safe_load(fn: Tensor | str | os.PathLike[str], device: str | None = None) -> dict[str, Tensor]:
    """The tensors of a safetensors file, by name, on `device` (the default device if None).

    A file given by path is read through the DISK device when tiny-disk is installed: the header is validated
    first, then only each tensor's own bytes are copied to `device`, in bounded chunks.
    """
    name, size, read = _source(fn)
    header_length, entries, _ = _parse_header(name, size, read)
    if not isinstance(fn, Tensor) and _disk_available():
        from tinycore.nn.safetensors_disk import safe_load_disk
        target = device if device is not None else _default_device()
        return {key: value.to(target) for key, value in safe_load_disk(fn).items()}
    data_start = 8 + header_length
    return {key: _tensor_from_bytes(read(data_start + start, end - start), dtype, shape, device)
            for key, (dtype, shape, start, end) in entries.items()}


def _tensor_bytes(tensor: Tensor) -> bytes:
    """The little-endian C-order bytes of a tensor's values."""
    if sys.byteorder != "little":
        raise NotImplementedError("safetensors saving needs a little-endian machine")
    value = tensor.detach()
    if value.dtype.fmt is None:
        value = value.bitcast(_UNSIGNED_OF_SIZE[value.dtype.itemsize])
    return value.numpy().tobytes()


def safe_save(tensors: dict[str, Tensor], fn: str | os.PathLike[str], metadata: dict[str, str] | None = None) -> None:
    """Write `tensors` (name -> Tensor) to the safetensors file `fn`, with optional string `metadata`."""
    header: dict[str, object] = {}
    if metadata is not None:
        if not all(isinstance(key, str) and isinstance(value, str) for key, value in metadata.items()):
            raise SafetensorsError(f"safe_save: metadata must map strings to strings (the format's rule), got "
                                   f"{ {key: type(value).__name__ for key, value in metadata.items()} }")
        header["__metadata__"] = dict(metadata)
    blobs: list[bytes] = []
    offset = 0
    for key, tensor in tensors.items():
        if not isinstance(key, str) or key == "__metadata__":
            raise SafetensorsError(f"safe_save: tensor names must be strings other than '__metadata__', got {key!r}")
        if not isinstance(tensor, Tensor):
            raise TypeError(f"safe_save: {key!r} is a {type(tensor).__name__}, not a Tensor")
        if tensor.dtype not in _SAFETENSORS_NAMES:
            raise SafetensorsError(f"safe_save: {key!r} has dtype {tensor.dtype}, which safetensors cannot store")
        blob = _tensor_bytes(tensor)
        header[key] = {"dtype": _SAFETENSORS_NAMES[tensor.dtype], "shape": list(tensor.shape),
                       "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    encoded = json.dumps(header, separators=(",", ":")).encode("utf-8")
    encoded += b" " * (-len(encoded) % 8)  # data starts 8-byte aligned
    with open(fn, "wb") as handle:
        handle.write(len(encoded).to_bytes(8, "little"))
        handle.write(encoded)
        for blob in blobs:
            handle.write(blob)
