"""safetensors files loaded lazily through the DISK device.

Layout: an 8-byte little-endian header length N, N bytes of UTF-8 JSON (tensor name -> {"dtype", "shape",
"data_offsets": [start, end]}, plus an optional "__metadata__" object of strings), then the tensors' bytes, at
offsets relative to the end of the header. The header is validated completely (lengths against the file size,
offsets against each other, sizes against shapes) before any tensor is made; a malformed file raises
SafetensorsFormatError. The returned tensors are views of the file on DISK: nothing is read until they are
copied to a compute device, and then only their own bytes.
"""
from __future__ import annotations

import json
import os
import sys

from tinycore.dtype import DType, dtypes
from tinycore.helpers import prod
from tinycore.nn.file_checks import MAX_HEADER_BYTES, ByteSource, MalformedFileError, checked_shape, fail
from tinycore.tensor import Tensor

SAFETENSORS_DTYPES: dict[str, DType] = {
    "BOOL": dtypes.bool, "U8": dtypes.uint8, "I8": dtypes.int8, "U16": dtypes.uint16, "I16": dtypes.int16,
    "U32": dtypes.uint32, "I32": dtypes.int32, "U64": dtypes.uint64, "I64": dtypes.int64, "F16": dtypes.float16,
    "BF16": dtypes.bfloat16, "F32": dtypes.float32, "F64": dtypes.float64, "F8_E4M3": dtypes.fp8e4m3,
    "F8_E5M2": dtypes.fp8e5m2}
"""safetensors dtype names and the dtypes they map to."""

KIND = "safetensors"


class SafetensorsFormatError(MalformedFileError):
    """A safetensors file that does not follow the format."""


def _error(name: str, problem: str) -> MalformedFileError:
    return fail(name, KIND, problem, SafetensorsFormatError)


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """A JSON object hook refusing repeated keys (which would hide a tensor)."""
    result: dict[str, object] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def read_header(source: ByteSource) -> tuple[int, dict[str, object], dict[str, str]]:
    """The header length, the raw entries (name -> entry object) and the metadata of a safetensors file."""
    name = source.name
    if source.size < 8:
        raise _error(name, f"it has {source.size} bytes, fewer than the 8-byte header length")
    header_length = int.from_bytes(source.read(0, 8, "the header length"), "little")
    if header_length > source.size - 8:
        raise _error(name, f"the header length {header_length} exceeds the {source.size - 8} bytes after it")
    if header_length > MAX_HEADER_BYTES:
        raise _error(name, f"the header length {header_length} is over the {MAX_HEADER_BYTES}-byte limit")
    try:
        header = json.loads(source.read(8, header_length, "the header").decode("utf-8"),
                            object_pairs_hook=_no_duplicates)
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise _error(name, f"the header is not valid UTF-8 JSON ({type(error).__name__}: {error})") from None
    if not isinstance(header, dict):
        raise _error(name, f"the header is a JSON {type(header).__name__}, expected an object")
    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(value, str) for value in metadata.values()):
        raise _error(name, "__metadata__ must be an object mapping strings to strings")
    return header_length, header, metadata


def _check_entry(name: str, key: str, entry: object, data_size: int) -> tuple[DType, tuple[int, ...], int, int]:
    """The dtype, shape and [start, end) data offsets of one header entry, validated against the data size."""
    if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
        fields = sorted(entry) if isinstance(entry, dict) else type(entry).__name__
        raise _error(name, f"entry {key!r} is {fields}, expected an object with dtype, shape and data_offsets")
    dtype_name, offsets = entry["dtype"], entry["data_offsets"]
    if not isinstance(dtype_name, str) or dtype_name not in SAFETENSORS_DTYPES:
        raise _error(name, f"entry {key!r} has unknown dtype {dtype_name!r}; known: {sorted(SAFETENSORS_DTYPES)}")
    dtype = SAFETENSORS_DTYPES[dtype_name]
    shape = checked_shape(name, KIND, f"entry {key!r}", entry["shape"], data_size // dtype.itemsize,
                          SafetensorsFormatError)
    if not (isinstance(offsets, list) and len(offsets) == 2 and
            all(isinstance(value, int) and not isinstance(value, bool) for value in offsets)):
        raise _error(name, f"entry {key!r} has data_offsets {offsets!r}, expected [start, end] integers")
    start, end = offsets
    if not 0 <= start <= end <= data_size:
        raise _error(name, f"entry {key!r} has data_offsets [{start}, {end}] outside the {data_size} data bytes "
                           "after the header (negative, reversed, or past the end: the file may be truncated)")
    expected = prod(shape) * dtype.itemsize
    if end - start != expected:
        raise _error(name, f"entry {key!r} spans {end - start} bytes but shape {list(shape)} of {dtype_name} needs "
                           f"{expected}")
    return dtype, shape, start, end


def parse_safetensors(source: ByteSource) -> tuple[int, dict[str, tuple[DType, tuple[int, ...], int, int]],
                                                   dict[str, str]]:
    """Validate a whole safetensors header: (header length, name -> (dtype, shape, start, end), metadata).

    Tensors must tile the data section exactly: no overlaps, no gaps, nothing after the last one.
    """
    header_length, header, metadata = read_header(source)
    data_size = source.size - 8 - header_length
    entries = {key: _check_entry(source.name, key, entry, data_size) for key, entry in header.items()}
    position = 0
    for key, (_, _, start, end) in sorted(entries.items(), key=lambda item: (item[1][2], item[1][3])):
        if start != position:
            problem = "overlaps the previous tensor" if start < position else f"leaves a gap after data byte {position}"
            raise _error(source.name, f"entry {key!r} starts at data byte {start} and {problem}")
        position = end
    if position != data_size:
        raise _error(source.name, f"the tensors cover {position} data bytes but the file has {data_size} after the "
                                  "header")
    return header_length, entries, metadata


def safe_load_disk(path: Tensor | str | os.PathLike[str]) -> dict[str, Tensor]:
    """The tensors of a safetensors file by name, as lazy views of the file on DISK (validated fully first).

    `path` may also be a 1-D uint8 Tensor holding the file (on DISK the result is still lazy). Copy a tensor to a
    compute device with `.to(device)` to use it; only its bytes are read.
    """
    if sys.byteorder != "little":
        raise NotImplementedError("safetensors loading needs a little-endian machine")
    source = ByteSource(path, KIND, SafetensorsFormatError)
    header_length, entries, _metadata = parse_safetensors(source)
    data_start = 8 + header_length
    return {key: source.tensor_at(data_start + start, dtype, shape, f"tensor {key!r}")
            for key, (dtype, shape, start, _end) in entries.items()}


def safe_load_disk_metadata(path: Tensor | str | os.PathLike[str]) -> dict[str, str]:
    """The "__metadata__" strings of a safetensors file (the whole header is validated)."""
    return parse_safetensors(ByteSource(path, KIND, SafetensorsFormatError))[2]
