"""The DISK allocator: a buffer is a byte range of a file (or POSIX shared memory object).

Reads use `pread` in bounded chunks (nothing is mapped, so reading a tensor does not grow the process' resident
memory beyond the destination), writes use `pwrite` and go straight to the file, and `as_memoryview` maps the
range with mmap on demand. A buffer handle is a `DiskRange`: the open file, a byte offset and a byte count.
"""
from __future__ import annotations

import mmap
import os
from typing import Any

from tinycore.device.allocator import Allocator, BufferSpec

CHUNK_BYTES = 16 * 1024 * 1024
"""The most bytes one read or write system call moves, and the staging size of copies to other devices."""

SHM_PREFIX = "shm:"
"""`DISK:shm:name` names the POSIX shared memory object `name` instead of a file."""


class DiskIOError(OSError):
    """A read or write on a DISK buffer moved fewer bytes than asked (the file changed size while open)."""


def location_of(device: str) -> str:
    """The file path (or `shm:name`) of the canonical DISK device name `device` ("DISK:/tmp/x" -> "/tmp/x")."""
    family, _, location = device.partition(":")
    if family != "DISK" or not location or location.isdigit():
        raise ValueError(f"the DISK device needs a file: open it as DISK:/path/to/file or DISK:shm:name, got "
                         f"{device!r}")
    return location


class DiskFile:
    """One open file (or shared memory object) and its lazily created memory map."""

    def __init__(self, location: str, size: int, readonly: bool = False):
        self.location = location
        self.readonly = readonly
        self._mapping: mmap.mmap | None = None
        self.descriptor = self._open(location, readonly)
        try:
            current = os.fstat(self.descriptor).st_size
            if current < size:
                if self.readonly:
                    raise ValueError(f"{location} holds {current} bytes, fewer than the {size} asked for, and it is "
                                     "opened read-only: ask for at most the file's size")
                os.ftruncate(self.descriptor, size)
            self.size = size
        except BaseException:
            os.close(self.descriptor)
            raise

    def _open(self, location: str, readonly: bool) -> int:
        """The descriptor of `location`: read-write (created when missing) unless read-only or not writable."""
        if location.startswith(SHM_PREFIX):
            name = location[len(SHM_PREFIX):]
            if not name or "/" in name:
                raise ValueError(f"shared memory name {name!r} must be non-empty and contain no '/'")
            try:
                import _posixshmem
                flags = os.O_RDONLY if readonly else os.O_RDWR | os.O_CREAT
                return int(_posixshmem.shm_open("/" + name, flags, mode=0o600))
            except ImportError:
                location = f"/dev/shm/{name}"
        if readonly:
            return os.open(location, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            return os.open(location, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        except PermissionError:
            self.readonly = True
            return os.open(location, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))

    def read_into(self, destination: memoryview, offset: int) -> None:
        """Fill `destination` with the file's bytes from `offset`, CHUNK_BYTES per system call."""
        done = 0
        total = destination.nbytes
        while done < total:
            count = os.preadv(self.descriptor, [destination[done:done + min(CHUNK_BYTES, total - done)]],
                              offset + done)
            if count <= 0:
                raise DiskIOError(f"reading {total} bytes at offset {offset} of {self.location} stopped after {done}: "
                                  "the file is shorter than when it was opened")
            done += count

    def write_from(self, source: memoryview, offset: int) -> None:
        """Write `source` to the file at `offset`, CHUNK_BYTES per system call."""
        if self.readonly:
            raise PermissionError(f"{self.location} is opened read-only: cannot write {source.nbytes} bytes to it")
        done = 0
        total = source.nbytes
        while done < total:
            count = os.pwrite(self.descriptor, source[done:done + min(CHUNK_BYTES, total - done)], offset + done)
            if count <= 0:
                raise DiskIOError(f"writing {total} bytes at offset {offset} of {self.location} stopped after {done}")
            done += count

    def mapping(self) -> mmap.mmap:
        """The whole file mapped into memory (created on first use)."""
        if self._mapping is None:
            access = mmap.ACCESS_READ if self.readonly else mmap.ACCESS_WRITE
            self._mapping = mmap.mmap(self.descriptor, self.size, access=access)
        return self._mapping

    def close(self) -> None:
        """Unmap and close (mapped views still in use keep the mapping open until they are released)."""
        if self._mapping is not None:
            try:
                self._mapping.close()
            except BufferError:
                pass  # a memoryview of it is still alive: the mapping goes when that view does
            self._mapping = None
        if self.descriptor >= 0:
            os.close(self.descriptor)
            self.descriptor = -1

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def __repr__(self) -> str:
        return f"<DiskFile {self.location} {self.size} bytes{' read-only' if self.readonly else ''}>"


class DiskRange:
    """A buffer handle: `size` bytes of `file` starting at byte `offset`."""

    __slots__ = ("file", "offset", "size")

    def __init__(self, file: DiskFile, offset: int, size: int):
        if offset < 0 or size < 0 or offset + size > file.size:
            raise ValueError(f"range of {size} bytes at offset {offset} is outside {file.location} "
                             f"({file.size} bytes)")
        self.file, self.offset, self.size = file, offset, size

    def __repr__(self) -> str:
        return f"<DiskRange {self.file.location} [{self.offset}, {self.offset + self.size})>"


class DiskAllocator(Allocator):
    """Buffers of one DISK device. Each allocation opens the file, grown to the asked size when it is smaller."""

    def __init__(self, device: str):
        super().__init__(device)
        self.location = location_of(device) if device != "DISK" else None

    def _where(self) -> str:
        if self.location is None:
            location_of(self.device)  # raises the "needs a file" error
        assert self.location is not None
        return self.location

    def _alloc(self, size: int, options: BufferSpec | None) -> DiskRange:
        return DiskRange(DiskFile(self._where(), size), 0, size)

    def open_existing(self, size: int) -> DiskRange:
        """A read-only handle on the first `size` bytes of the existing file (never created, grown or written)."""
        return DiskRange(DiskFile(self._where(), size, readonly=True), 0, size)

    def _free(self, opaque: DiskRange, size: int, options: BufferSpec | None) -> None:
        """Nothing to do: the file closes when its last range (buffers made from it with `offset`) is gone."""

    def _copyin(self, dest: DiskRange, src: memoryview) -> None:
        if src.nbytes > dest.size:
            raise ValueError(f"cannot write {src.nbytes} bytes into {dest!r}")
        dest.file.write_from(src, dest.offset)

    def _copyout(self, dest: memoryview, src: DiskRange) -> None:
        if dest.nbytes > src.size:
            raise ValueError(f"cannot read {dest.nbytes} bytes from {src!r}")
        src.file.read_into(dest, src.offset)

    def _offset(self, opaque: DiskRange, size: int, offset: int) -> DiskRange:
        return DiskRange(opaque.file, opaque.offset + offset, size)

    def _as_memoryview(self, opaque: DiskRange, size: int) -> memoryview:
        if size > opaque.size:
            raise ValueError(f"cannot view {size} bytes of {opaque!r}")
        return memoryview(opaque.file.mapping())[opaque.offset:opaque.offset + size]

    def copy_to_buffer(self, source: DiskRange, destination: Any) -> None:
        """Copy `source` into the device Buffer `destination` of another device with bounded memory.

        Host-visible destinations are read into directly; others get the data through one CHUNK_BYTES staging
        buffer, written to views of the destination.
        """
        if destination.nbytes != source.size:
            raise ValueError(f"copy of {source.size} bytes from {source!r} into a {destination.nbytes} byte buffer")
        destination.ensure_allocated()
        try:
            target = destination.as_memoryview()
        except (NotImplementedError, AttributeError):
            target = None
        if target is not None and not target.readonly:
            source.file.read_into(target.cast("B"), source.offset)
            return
        from tinycore.dtype import dtypes
        raw = destination if destination.dtype == dtypes.uint8 else None
        staging = memoryview(bytearray(min(CHUNK_BYTES, max(source.size, 1))))
        done = 0
        while done < source.size:
            count = min(CHUNK_BYTES, source.size - done)
            source.file.read_into(staging[:count], source.offset + done)
            if raw is None:
                raw = _bytes_view_of(destination)
            raw.view(count, dtypes.uint8, done).copyin(staging[:count])
            done += count


def _bytes_view_of(buffer: Any) -> Any:
    """A uint8 Buffer covering the same memory as `buffer` (to write it in byte ranges)."""
    from tinycore.device.buffer import Buffer
    from tinycore.dtype import dtypes
    base = buffer.base
    if base.dtype.itemsize != 1 and buffer.byte_offset % base.dtype.itemsize:
        raise ValueError(f"cannot address {buffer!r} in bytes")
    whole = Buffer(base.device, base.nbytes, dtypes.uint8, base=base, offset=0) if base.dtype != dtypes.uint8 \
        else base
    return whole.view(buffer.nbytes, dtypes.uint8, buffer.byte_offset)
