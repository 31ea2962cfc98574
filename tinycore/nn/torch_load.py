"""torch `.pt` / `.pth` files (the zip format and the legacy format) loaded without running untrusted code.

The pickle is read by a restricted unpickler: it builds plain containers (dict, OrderedDict, list, tuple, set,
str, numbers, None) and tensors, and refuses every other global (os.system, eval, arbitrary classes...) before
anything is called. Tensor data stays in the file: a contiguous tensor is a lazy view on DISK, read when copied to
a compute device; a strided one is read (only its extent) into a tensor on the default device. Every storage
size, offset, shape and stride is checked against the file; a malformed file raises TorchFormatError.
"""
from __future__ import annotations

import collections
import io
import os
import pickle
import pickletools
import struct
import zipfile
import zlib
from typing import IO, Any

from tinycore.dtype import DType, dtypes
from tinycore.helpers import prod
from tinycore.nn.file_checks import MAX_HEADER_BYTES, ByteSource, MalformedFileError, check_range, fail
from tinycore.tensor import Tensor

KIND = "torch"
LEGACY_MAGIC = 0x1950A86A20F9469CFC6C

STORAGE_TYPES: dict[str, DType] = {
    "FloatStorage": dtypes.float32, "DoubleStorage": dtypes.float64, "HalfStorage": dtypes.float16,
    "BFloat16Storage": dtypes.bfloat16, "LongStorage": dtypes.int64, "IntStorage": dtypes.int32,
    "ShortStorage": dtypes.int16, "CharStorage": dtypes.int8, "ByteStorage": dtypes.uint8,
    "BoolStorage": dtypes.bool}
"""torch storage classes (looked up as torch.<name>) and the dtypes of their elements."""


class TorchFormatError(MalformedFileError):
    """A torch file that does not follow the format, or whose pickle asks for something not allowed."""


class _StorageType:
    """What `torch.FloatStorage` and the like unpickle to: a marker carrying the element dtype."""

    def __init__(self, name: str, dtype: DType):
        self.name, self.dtype = name, dtype

    def __setstate__(self, state: object) -> None:
        raise TypeError("a pickle may not set the state of a storage class")


class _Storage:
    """A storage of the file: `count` elements of `dtype` at byte `offset` of the file."""

    def __init__(self, dtype: DType, offset: int, count: int):
        self.dtype, self.offset, self.count = dtype, offset, count

    def __setstate__(self, state: object) -> None:
        raise TypeError("a pickle may not set the state of a storage")


class _PendingTensor:
    """A tensor met in the pickle, made once the whole file is checked (legacy files place storages after it)."""

    def __init__(self, storage: _Storage, offset: int, shape: tuple[int, ...], stride: tuple[int, ...],
                 extent: int):
        self.storage, self.offset, self.shape, self.stride, self.extent = storage, offset, shape, stride, extent

    def __setstate__(self, state: object) -> None:
        raise TypeError("a pickle may not set the state of a tensor")


class _Loader:
    """The state of one load: the file, its storages and the error helper."""

    def __init__(self, source: ByteSource):
        self.source = source
        self.storages: dict[str, _Storage] = {}
        self.storage_place: Any = None  # key -> (offset, available bytes), filled per format

    def error(self, problem: str) -> MalformedFileError:
        return fail(self.source.name, KIND, problem, TorchFormatError)

    # ---- the allowed globals ----

    def rebuild_tensor(self, storage: object, storage_offset: object, size: object, stride: object, *_rest: object,
                       **_kwargs: object) -> _PendingTensor:
        """torch._utils._rebuild_tensor_v2: a tensor of `size` and `stride` over `storage` from `storage_offset`."""
        if not isinstance(storage, _Storage):
            raise self.error(f"a tensor is rebuilt from {type(storage).__name__}, not a storage")
        if not isinstance(size, (tuple, list)) or not isinstance(stride, (tuple, list)) or len(size) != len(stride):
            raise self.error(f"a tensor has size {size!r:.200} and stride {stride!r:.200}, expected tuples of equal "
                             "length")
        if not isinstance(storage_offset, int) or not all(
                isinstance(value, int) and not isinstance(value, bool) and value >= 0
                for value in (storage_offset, *size, *stride)):
            raise self.error(f"a tensor has offset {storage_offset!r:.100}, size {size!r:.200}, stride "
                             f"{stride!r:.200}: expected non-negative integers")
        shape = tuple(size)
        if len(shape) > 64:
            raise self.error(f"a tensor has {len(shape)} dimensions")
        extent = 0 if 0 in shape else 1 + sum((length - 1) * step for length, step in zip(shape, stride, strict=True))
        if storage_offset + extent > storage.count:
            raise self.error(f"a tensor of size {list(shape)} and stride {list(stride)} at element {storage_offset} "
                             f"reaches past its storage of {storage.count} elements")
        contiguous = tuple(prod(shape[axis + 1:]) for axis in range(len(shape)))
        if not all(length == 1 or step == want for length, step, want in zip(shape, stride, contiguous, strict=True)) \
                and prod(shape) * storage.dtype.itemsize > self.source.size:
            raise self.error(f"a strided tensor of size {list(shape)} and stride {list(stride)} would take "
                             f"{prod(shape) * storage.dtype.itemsize} bytes, more than the whole file")
        return _PendingTensor(storage, storage_offset, shape, tuple(stride), extent)

    def materialize(self, pending: _PendingTensor) -> Tensor:
        """The tensor of a rebuilt placeholder, now that its storage's place in the file is known."""
        storage, shape, stride = pending.storage, pending.shape, pending.stride
        itemsize = storage.dtype.itemsize
        start = storage.offset + pending.offset * itemsize
        contiguous = tuple(prod(shape[axis + 1:]) for axis in range(len(shape)))
        if all(length == 1 or step == want for length, step, want in zip(shape, stride, contiguous, strict=True)):
            return self.source.tensor_at(start, storage.dtype, shape, "a tensor")
        raw = self.source.read(start, pending.extent * itemsize, "a tensor")
        return _strided_tensor(raw, storage.dtype, shape, stride)

    def rebuild_parameter(self, data: object, *_rest: object, **_kwargs: object) -> _PendingTensor:
        """torch._utils._rebuild_parameter: the tensor itself."""
        if not isinstance(data, _PendingTensor):
            raise self.error(f"a parameter is rebuilt from {type(data).__name__}, not a tensor")
        return data

    def storage(self, pid: object) -> _Storage:
        """A pickle persistent id ('storage', type, key, location, count[, view]) as a checked storage."""
        if not isinstance(pid, tuple) or len(pid) not in (5, 6) or pid[0] != "storage":
            raise self.error(f"unknown persistent id {pid!r:.200}")
        storage_type, key, count = pid[1], pid[2], pid[4]
        if not isinstance(storage_type, _StorageType):
            raise self.error(f"storage {key!r:.100} has type {storage_type!r:.100}, not a torch storage class")
        if not isinstance(key, str) or not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise self.error(f"storage id {pid!r:.200} needs a string key and a non-negative element count")
        if len(pid) == 6 and pid[5] is not None:
            raise self.error(f"storage {key!r:.100} is a view of another storage (legacy views are not supported)")
        found = self.storages.get(key)
        if found is None:
            offset, available = self.storage_place(key)
            if count * storage_type.dtype.itemsize > available:
                raise self.error(f"storage {key!r:.100} claims {count} {storage_type.name} elements, more than its "
                                 f"{available} bytes")
            found = self.storages[key] = _Storage(storage_type.dtype, offset, count)
        elif found.dtype != storage_type.dtype or found.count != count:
            raise self.error(f"storage {key!r:.100} is used with two different types or sizes")
        return found

    def find_class(self, module: str, name: str) -> object:
        """The allowed globals; anything else is refused before it is looked up."""
        allowed: dict[tuple[str, str], object] = {
            ("collections", "OrderedDict"): collections.OrderedDict,
            ("torch._utils", "_rebuild_tensor_v2"): self.rebuild_tensor,
            ("torch._utils", "_rebuild_tensor"): self.rebuild_tensor,
            ("torch._utils", "_rebuild_parameter"): self.rebuild_parameter,
            ("builtins", "set"): set, ("builtins", "frozenset"): frozenset,
            ("__builtin__", "set"): set, ("__builtin__", "frozenset"): frozenset,
        }
        if (module, name) in allowed:
            return allowed[(module, name)]
        if module == "torch" and name in STORAGE_TYPES:
            return _StorageType(name, STORAGE_TYPES[name])
        raise self.error(f"its pickle asks for the global {module}.{name}, which is not allowed (only tensors and "
                         "plain containers are loaded; this file may try to run code)")


def _strided_tensor(raw: bytes, dtype: DType, shape: tuple[int, ...], stride: tuple[int, ...]) -> Tensor:
    """A tensor on the default device of the elements of `raw` (little-endian) at `stride` (in elements)."""
    import numpy
    storage = dtype if dtype.fmt is not None else {2: dtypes.uint16, 1: dtypes.uint8}[dtype.itemsize]
    flat = numpy.frombuffer(raw, dtype=numpy.dtype(storage.fmt).newbyteorder("<"))
    array = numpy.lib.stride_tricks.as_strided(flat, shape, tuple(step * dtype.itemsize for step in stride))
    tensor = Tensor(numpy.ascontiguousarray(array).astype(array.dtype.newbyteorder("=")), dtype=storage)
    return tensor if storage == dtype else tensor.bitcast(dtype)


class _RestrictedUnpickler(pickle.Unpickler):
    """An unpickler whose globals and persistent ids go through a _Loader."""

    def __init__(self, stream: IO[bytes], loader: _Loader):
        super().__init__(stream)
        self.loader = loader

    def find_class(self, module: str, name: str) -> object:
        return self.loader.find_class(module, name)

    def persistent_load(self, pid: object) -> _Storage:
        return self.loader.storage(pid)


class _SourceFile(io.RawIOBase):
    """A read-only, seekable file object over a ByteSource (for zipfile and pickle)."""

    def __init__(self, source: ByteSource):
        self.source, self.position = source, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.position, 2: self.source.size}[whence]
        if base + offset < 0:
            raise OSError(f"seek to a negative position in {self.source.name}")
        self.position = base + offset
        return self.position

    def tell(self) -> int:
        return self.position

    def read(self, size: int | None = -1) -> bytes:
        """Up to `size` bytes (all that remain for -1); never allocates more than the file holds."""
        remaining = max(0, self.source.size - self.position)
        count = remaining if size is None or size < 0 else min(size, remaining)
        data = self.source.read(self.position, count)
        self.position += count
        return data

    def readinto(self, buffer: Any) -> int:
        count = max(0, min(len(buffer), self.source.size - self.position))
        view = memoryview(buffer).cast("B")
        view[:count] = self.source.read(self.position, count)
        self.position += count
        return count


def _pickle_end(loader: _Loader, stream: Any, what: str) -> int:
    """Walk the opcodes of the pickle at `stream`'s position (every length checked against the bytes there) and
    return the position after its STOP, so the unpickler never sees a length the data cannot back."""
    try:
        for _opcode, _arg, _position in pickletools.genops(stream):
            pass
    except (ValueError, EOFError, struct.error, OverflowError, UnicodeDecodeError, MemoryError) as error:
        raise loader.error(f"{what} is not a valid pickle ({type(error).__name__}: {error})") from None
    return int(stream.tell())


def _unpickle(loader: _Loader, raw: bytes, what: str) -> object:
    """The object of the pickle `raw` (checked by _pickle_end), with every failure reported as TorchFormatError."""
    stream = io.BytesIO(raw)
    if _pickle_end(loader, stream, what) != len(raw):
        raise loader.error(f"{what} has {len(raw) - stream.tell()} bytes after its end")
    try:
        return _RestrictedUnpickler(io.BytesIO(raw), loader).load()
    except TorchFormatError:
        raise
    except MalformedFileError as error:
        raise TorchFormatError(str(error)) from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError,
            struct.error, OverflowError, MemoryError, RecursionError, UnicodeDecodeError) as error:
        raise loader.error(f"{what} is not a valid pickle ({type(error).__name__}: {error})") from None


def _next_pickle(loader: _Loader, stream: _SourceFile, what: str) -> object:
    """The next pickle of a legacy file at `stream`'s position (the stream moves past it)."""
    start = stream.tell()
    end = _pickle_end(loader, stream, what)
    if end - start > MAX_HEADER_BYTES:
        raise loader.error(f"{what} is {end - start} bytes, over the {MAX_HEADER_BYTES}-byte limit")
    return _unpickle(loader, loader.source.read(start, end - start, what), what)


def _load_zip(loader: _Loader, archive: zipfile.ZipFile) -> object:
    """The object of a zip-format file: <root>/data.pkl with storages in <root>/data/<key> (stored, not deflated)."""
    source = loader.source
    members = {info.filename: info for info in archive.infolist()}
    pickles = [name for name in members if name.endswith("data.pkl") and name.count("/") == 1]
    if len(pickles) != 1:
        raise loader.error(f"expected one <name>/data.pkl in the archive, found {len(pickles)}")
    root = pickles[0][:-len("data.pkl")]
    byteorder = members.get(root + "byteorder")
    if byteorder is not None and archive.read(byteorder)[:16] not in (b"little",):
        raise loader.error("it was saved big-endian, which is not supported")

    def place(key: str) -> tuple[int, int]:
        info = members.get(f"{root}data/{key}")
        if info is None:
            raise loader.error(f"storage {key!r:.100} has no member {root}data/{key} in the archive")
        if info.compress_type != zipfile.ZIP_STORED or info.compress_size != info.file_size:
            raise loader.error(f"storage member {info.filename} is compressed; torch stores tensors uncompressed")
        header = source.read(info.header_offset, 30, f"the local header of {info.filename}")
        if header[:4] != b"PK\x03\x04":
            raise loader.error(f"the local header of {info.filename} at byte {info.header_offset} is corrupt")
        name_length, extra_length = struct.unpack("<HH", header[26:30])
        start = info.header_offset + 30 + name_length + extra_length
        check_range(source.name, KIND, f"storage member {info.filename}", start, info.file_size, source.size,
                    TorchFormatError)
        return start, info.file_size
    loader.storage_place = place
    info = members[pickles[0]]
    if info.file_size > MAX_HEADER_BYTES or info.file_size > source.size:
        raise loader.error(f"{info.filename} claims {info.file_size} bytes, over the limit")
    return _resolve(_unpickle(loader, archive.read(info), info.filename), loader)


def _load_legacy(loader: _Loader, stream: _SourceFile) -> object:
    """The object of a legacy file: magic, protocol, system info, the object pickle, storage keys, storages."""
    stream.seek(0)
    empty = _Loader(loader.source)
    magic = _next_pickle(empty, stream, "the magic number")
    if magic != LEGACY_MAGIC:
        raise loader.error("it is neither a zip archive nor a legacy torch file (wrong magic number)")
    if _next_pickle(empty, stream, "the protocol version") != 1001:
        raise loader.error("its legacy protocol version is not 1001")
    system = _next_pickle(empty, stream, "the system info")
    if not isinstance(system, dict) or system.get("little_endian") is not True:
        raise loader.error("it was saved big-endian (or its system info is missing), which is not supported")
    def defer(key: str) -> tuple[int, int]:
        return 0, 1 << 62  # checked once the storage table (after the pickle) is read
    loader.storage_place = defer
    result = _next_pickle(loader, stream, "the object pickle")
    keys = _next_pickle(_Loader(loader.source), stream, "the storage key list")
    if not isinstance(keys, list) or not all(isinstance(key, str) for key in keys) or len(set(keys)) != len(keys):
        raise loader.error("its storage key list is not a list of distinct strings")
    position = stream.tell()
    places: dict[str, int] = {}
    for key in keys:
        storage = loader.storages.get(key)
        if storage is None:
            raise loader.error(f"storage {key!r:.100} is listed but no tensor uses it (its size is unknown)")
        count = struct.unpack("<q", loader.source.read(position, 8, f"the size of storage {key!r:.100}"))[0]
        if count != storage.count:
            raise loader.error(f"storage {key!r:.100} holds {count} elements but its tensors expect {storage.count}")
        nbytes = count * storage.dtype.itemsize
        check_range(loader.source.name, KIND, f"storage {key!r:.100}", position + 8, nbytes, loader.source.size,
                    TorchFormatError)
        places[key] = position + 8
        position += 8 + nbytes
    missing = [key for key in loader.storages if key not in places]
    if missing:
        raise loader.error(f"storages {missing[:5]} are used but not in the storage key list")
    for key, storage in loader.storages.items():
        storage.offset = places[key]
    return _resolve(result, loader)


def _resolve(value: object, loader: _Loader) -> object:
    """`value` with every tensor placeholder replaced by its Tensor (containers are rebuilt, cycles kept)."""
    memo: dict[int, object] = {}

    def walk(item: object) -> object:
        if isinstance(item, _PendingTensor):
            if id(item) not in memo:
                memo[id(item)] = loader.materialize(item)
            return memo[id(item)]
        if id(item) in memo:
            return memo[id(item)]
        if isinstance(item, dict):
            mapping: dict[object, object] = type(item)()
            memo[id(item)] = mapping
            for key, entry in item.items():
                mapping[key] = walk(entry)
            return mapping
        if isinstance(item, list):
            items: list[object] = []
            memo[id(item)] = items
            items.extend(walk(entry) for entry in item)
            return items
        if isinstance(item, (tuple, set, frozenset)):
            memo[id(item)] = rebuilt = type(item)(walk(entry) for entry in item)
            return rebuilt
        return item
    try:
        return walk(value)
    except RecursionError:
        raise loader.error("its object nests containers too deeply") from None


def torch_load(fn: Tensor | str | os.PathLike[str]) -> object:
    """The object saved by torch.save in `fn` (a path or a 1-D uint8 Tensor), with tensors as tinycore Tensors.

    Only tensors, parameters and plain containers are built; any other global in the pickle raises
    TorchFormatError before it runs. Contiguous tensors are lazy DISK views (use `.to(device)`).
    """
    source = ByteSource(fn, KIND, TorchFormatError)
    loader = _Loader(source)
    stream = _SourceFile(source)
    try:
        archive: zipfile.ZipFile | None = zipfile.ZipFile(stream) if zipfile.is_zipfile(stream) else None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError, struct.error,
            NotImplementedError, UnicodeDecodeError, OverflowError, RuntimeError, zlib.error) as error:
        raise loader.error(f"its zip directory is corrupt ({type(error).__name__}: {error})") from None
    if archive is None:
        if source.size >= 4 and source.read(0, 4) == b"PK\x03\x04":
            raise loader.error("it starts like a zip archive but has no valid central directory (truncated or corrupt)")
        return _load_legacy(loader, stream)
    try:
        return _load_zip(loader, archive)
    except MalformedFileError:
        raise
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, struct.error, NotImplementedError, KeyError,
            RuntimeError, OverflowError, UnicodeDecodeError, zlib.error) as error:
        raise loader.error(f"its zip archive is corrupt ({type(error).__name__}: {error})") from None
