"""Reading weight files safely: bounds-checked reads, the MalformedFileError they raise, and lazy tensors over
byte ranges of a file.

A `ByteSource` is a weight file given as a path, a uint8 Tensor on DISK, or a uint8 Tensor on any other device.
Every read names its offset and count and is checked against the file's size before anything is read or
allocated; `tensor_at` makes a tensor of a byte range: over a file it is a DISK buffer whose memory is that range
of the file (nothing is read until the tensor is copied to a compute device), over an in-memory tensor it is a new
tensor from those bytes.
"""
from __future__ import annotations

import os
import pathlib
import struct
from typing import TYPE_CHECKING, Any

from tinycore.dtype import DType, dtypes
from tinycore.helpers import prod
from tinycore.tensor import Tensor
from tinycore.uop.ops import Ops

if TYPE_CHECKING:
    from tinycore.uop.uop import UOp

MAX_HEADER_BYTES = 100 * 1024 * 1024
"""The largest header (JSON, metadata block, pickle) any loader reads into memory."""
_SMALL_READ = 64 * 1024
_WINDOW_BYTES = 1024 * 1024


class MalformedFileError(ValueError):
    """A weight file that does not follow its format. The message names the file and the problem."""


def fail(name: str, kind: str, problem: str, error_type: type[MalformedFileError] = MalformedFileError
         ) -> MalformedFileError:
    """The error (of `error_type`) for file `name`, which is not a valid `kind` file because of `problem`."""
    return error_type(f"{name}: not a valid {kind} file: {problem}")


def check_range(name: str, kind: str, what: str, offset: int, count: int, limit: int,
                error_type: type[MalformedFileError] = MalformedFileError) -> None:
    """Raise `error_type` unless 0 <= offset and offset + count <= limit (ints, count >= 0)."""
    for label, value in (("offset", offset), ("length", count)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise fail(name, kind, f"{what} has a non-integer {label} {value!r}", error_type)
    if offset < 0 or count < 0:
        raise fail(name, kind, f"{what} has a negative offset or length (offset {offset}, length {count})",
                   error_type)
    if offset + count > limit:
        raise fail(name, kind, f"{what} spans bytes [{offset}, {offset + count}), past the end of the {limit} "
                               "available bytes (the file may be truncated or corrupt)", error_type)


def checked_shape(name: str, kind: str, what: str, shape: object, max_elements: int,
                  error_type: type[MalformedFileError] = MalformedFileError) -> tuple[int, ...]:
    """`shape` as a tuple of non-negative ints whose product is at most `max_elements`, else `error_type`."""
    if not isinstance(shape, (list, tuple)) or len(shape) > 64:
        raise fail(name, kind, f"{what} has shape {shape!r:.200}, expected a list of at most 64 sizes", error_type)
    for size in shape:
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise fail(name, kind, f"{what} has shape {list(shape)!r:.200}, expected non-negative integers",
                       error_type)
    total = prod(shape) if shape else 1
    if total > max_elements:
        raise fail(name, kind, f"{what} has shape {list(shape)} ({total} elements), more than the file can hold",
                   error_type)
    return tuple(shape)


class ByteSource:
    """A weight file (path or uint8 Tensor) to read in checked ranges and to make tensors from."""

    def __init__(self, source: Tensor | str | os.PathLike[str], kind: str,
                 error_type: type[MalformedFileError] = MalformedFileError):
        self.kind = kind
        self.error_type = error_type
        self._host: bytes | None = None
        self._base: UOp | None = None
        self._base_offset = 0
        self._device: str | None = None
        self._window: tuple[int, bytes] = (0, b"")
        if isinstance(source, Tensor):
            self._init_tensor(source)
        elif isinstance(source, (str, os.PathLike)):
            self._init_path(pathlib.Path(source))
        else:
            raise TypeError(f"a {kind} file must be a path or a 1-D uint8 Tensor, got {type(source).__name__}")

    def _init_path(self, path: pathlib.Path) -> None:
        from tinycore.device.registry import Device
        from tinycore.engine.memory import buffer_of, new_buffer_uop
        from tinycore.plugins.contract import opens_existing
        if not path.is_file():
            raise FileNotFoundError(f"{self.kind} file {str(path)!r} does not exist (or is not a regular file)")
        self.name = str(path)
        self.size = path.stat().st_size
        device = Device.canonicalize(f"DISK:{path.resolve()}")
        if device != f"DISK:{path.resolve()}":
            raise ValueError(f"{self.kind} file {str(path)!r}: its path cannot be named as a DISK device (it starts or "
                             "ends with white space); rename the file")
        self._base = new_buffer_uop(device, dtypes.uint8, self.size)
        allocator = Device[device].allocator
        buffer = buffer_of(self._base)
        if opens_existing(allocator):
            buffer.allocate(opaque=allocator.open_existing(self.size))
        else:
            buffer.ensure_allocated()

    def _init_tensor(self, tensor: Tensor) -> None:
        from tinycore.schedule.nodes import is_contiguous_buffer_view, view_base
        if tensor.dtype != dtypes.uint8 or tensor.ndim != 1:
            raise TypeError(f"a {self.kind} file as a Tensor must be 1-D uint8 bytes, got {tensor.dtype} "
                            f"{tensor.shape}")
        self.name = f"<Tensor on {tensor.device}>"
        self.size = int(tensor.shape[0])
        uop = tensor.uop
        if str(tensor.device).startswith("DISK") and is_contiguous_buffer_view(uop):
            base = view_base(uop)
            while base.op is Ops.BUFFER_VIEW:
                self._base_offset += base.arg[1] * base.src[0].dtype.itemsize
                base = base.src[0]
            self._base = base
        else:
            self._host = bytes(tensor.numpy().tobytes())
            self._device = tensor.device

    @property
    def device(self) -> str | None:
        """The device of the tensor this source was made from (None for paths and DISK tensors)."""
        return self._device

    def read(self, offset: int, count: int, what: str = "a read") -> bytes:
        """`count` bytes from `offset`, checked against the file's size first."""
        check_range(self.name, self.kind, what, offset, count, self.size, self.error_type)
        if self._host is not None:
            return self._host[offset:offset + count]
        if count <= _SMALL_READ:
            start, window = self._window
            if not start <= offset or offset + count > start + len(window):
                window = self._read_file(offset, min(_WINDOW_BYTES, self.size - offset))
                self._window = start, window = offset, window
            return window[offset - start:offset - start + count]
        return self._read_file(offset, count)

    def _read_file(self, offset: int, count: int) -> bytes:
        """`count` bytes of the file from `offset` (already checked), through the DISK buffer."""
        from tinycore.engine.memory import buffer_of
        assert self._base is not None
        base = buffer_of(self._base).ensure_allocated()
        out = bytearray(count)
        if count:
            handle = base.allocator.offset(base._buf, count, base.byte_offset + self._base_offset + offset)
            base.allocator.copyout(memoryview(out), handle)
        return bytes(out)

    def tensor_at(self, offset: int, dtype: DType, shape: tuple[int, ...], what: str) -> Tensor:
        """A tensor of `dtype` and `shape` over the file's bytes from `offset` (lazy on DISK)."""
        count = prod(shape) if shape else 1
        check_range(self.name, self.kind, what, offset, count * dtype.itemsize, self.size, self.error_type)
        if self._host is not None:
            return _tensor_from_host(self._host[offset:offset + count * dtype.itemsize], dtype, shape, self._device)
        assert self._base is not None
        from tinycore.engine.memory import buffer_of, new_buffer_uop
        base = buffer_of(self._base).ensure_allocated()
        handle = base.allocator.offset(base._buf, count * dtype.itemsize, base.byte_offset + self._base_offset + offset)
        node = new_buffer_uop(self._base.src[0].arg, dtype, count)
        buffer_of(node).allocate(opaque=handle)
        return Tensor(node.reshape(shape))


def _tensor_from_host(raw: bytes, dtype: DType, shape: tuple[int, ...], device: str | None) -> Tensor:
    """A tensor of `dtype` and `shape` on `device` holding the little-endian bytes `raw`."""
    import numpy
    storage = dtype if dtype.fmt is not None else {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32}[dtype.itemsize]
    array = numpy.frombuffer(raw, dtype=numpy.dtype(storage.fmt).newbyteorder("<")).reshape(shape)
    tensor = Tensor(array.astype(array.dtype.newbyteorder("=")), device=device, dtype=storage)
    return tensor if storage == dtype else tensor.bitcast(dtype)


class Cursor:
    """Sequential little-endian reads through a ByteSource, each checked against the file's end."""

    def __init__(self, source: ByteSource, position: int = 0):
        self.source = source
        self.position = position

    def take(self, count: int, what: str) -> bytes:
        """The next `count` bytes."""
        data = self.source.read(self.position, count, what)
        self.position += count
        return data

    def unpack(self, fmt: str, what: str) -> Any:
        """The next value of the little-endian struct format `fmt` (one field)."""
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt), what))[0]
