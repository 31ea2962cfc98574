"""Buffer: a typed region of device memory, allocated lazily through the device's allocator, possibly a view."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tinycore.counters import GlobalCounters
from tinycore.counters import totals as _counts
from tinycore.device.allocator import Allocator, BufferSpec, LRUAllocator
from tinycore.dtype import DType, PtrDType

if TYPE_CHECKING:
    import numpy

__all__ = ["Buffer", "BufferSpec"]

_LRU_ALLOC, _LRU_FREE = LRUAllocator.alloc, LRUAllocator.free
"""An allocator whose class keeps these methods (every device's LRU cache, unless a subclass changes them) gets its
cache hit and its free done here inline, for buffers without options: every eager op allocates two buffers and frees
two, and each allocator method is a Python call."""


_COUNTED_DEVICES: set[str] = set()
"""Device names whose buffers count in GlobalCounters.mem_used (every one but DISK files), as seen so far: a set test
where `device.startswith("DISK")` is a method call, made for each buffer allocated and freed."""


def _counted(device: str) -> bool:
    """Whether `device`'s buffers count in GlobalCounters.mem_used (not a DISK file); remembered when they do."""
    if device.startswith("DISK"):
        return False
    _COUNTED_DEVICES.add(device)
    return True


class Buffer:
    """`size` elements of `dtype` on `device`.

    Memory is allocated on `allocate()` (or the first copy) through the device's allocator, found with
    `tinycore.device.registry.Device[device]` unless `allocator` is given. A view (`base` given) is `size`
    elements of `dtype` starting `offset` elements of the base's dtype into `base`; it shares the base's memory
    and keeps the base alive. A non-view buffer's memory goes back to the allocator when the buffer is deleted.
    """

    _buf: Any = None  # also for __del__ of a Buffer whose __init__ refused its arguments before setting it

    def __init__(self, device: str, size: int, dtype: DType, options: BufferSpec | None = None,
                 base: Buffer | None = None, offset: int = 0, allocator: Allocator | None = None,
                 opaque: Any = None, initial_value: bytes | memoryview | None = None):
        if isinstance(dtype, PtrDType) or not isinstance(dtype, DType):
            raise TypeError(f"Buffer dtype must be a value DType such as dtypes.float32, got {dtype!r}")
        if not isinstance(size, int) or size < 0:
            raise ValueError(f"Buffer size must be a non-negative int (element count), got {size!r}")
        self.device, self.size, self.dtype, self.options = device, size, dtype, options
        self._allocator = allocator
        self._buf: Any = None
        self._owns_memory = False
        if base is None:
            if offset != 0:
                raise ValueError(f"Buffer offset {offset} needs a base buffer to be a view of")
            self._base: Buffer | None = None
            self.byte_offset = 0
        else:
            if base.device != device:
                raise ValueError(f"a view must be on its base's device: base is on {base.device}, view on {device}")
            if not isinstance(offset, int) or offset < 0:
                raise ValueError(f"view offset must be a non-negative element count, got {offset!r}")
            byte_offset = offset * base.dtype.itemsize
            if byte_offset + size * dtype.itemsize > base.nbytes:
                raise ValueError(f"view of {size} x {dtype} at element {offset} ends at byte "
                                 f"{byte_offset + size * dtype.itemsize}, past the end of its base "
                                 f"({base.nbytes} bytes)")
            # a view of a view is a view of the root buffer
            self.byte_offset = base.byte_offset + byte_offset
            self._base = base.base
            self.options = base.base.options
            if self._allocator is None:
                self._allocator = base.base._allocator
        if opaque is not None:
            self.allocate(opaque=opaque)
        if initial_value is not None:
            self.allocate()
            self.copyin(memoryview(initial_value))

    @classmethod
    def allocated(cls, device: str, size: int, dtype: DType, allocator: Allocator) -> Buffer:
        """A new non-view buffer of `size` elements of `dtype` on `device`, allocated now through `allocator`, for
        callers whose arguments hold by construction (an int size, a value dtype, no options): the constructor's
        checks, allocate() and the memory accounting in one call (every eager op allocates one or two)."""
        buffer = cls.__new__(cls)
        buffer.device, buffer.size, buffer.dtype, buffer.options = device, size, dtype, None
        buffer._allocator, buffer._base, buffer.byte_offset = allocator, None, 0
        nbytes = size * dtype.itemsize
        if allocator.__class__.alloc is _LRU_ALLOC:  # LRUAllocator.alloc's cache hit inline (see _LRU_ALLOC)
            cached = allocator.cache.get((nbytes if nbytes > 1 else 1, None))  # type: ignore[attr-defined]
            buffer._buf = cached.pop() if cached else allocator.alloc(nbytes if nbytes > 1 else 1, None)
        else:
            buffer._buf = allocator.alloc(nbytes if nbytes > 1 else 1, None)
        buffer._owns_memory = True
        if device in _COUNTED_DEVICES or _counted(device):
            _counts.mem_used += nbytes
            GlobalCounters.mem_used_per_device[device] += nbytes
        return buffer

    # ---- properties ----

    @property
    def base(self) -> Buffer:
        """The buffer owning the memory (itself unless this is a view)."""
        return self._base if self._base is not None else self

    @property
    def offset(self) -> int:
        """The start of this view in elements of the base's dtype (0 for a non-view)."""
        return self.byte_offset // self.base.dtype.itemsize

    @property
    def nbytes(self) -> int:
        """Size in bytes."""
        return self.size * self.dtype.itemsize

    @property
    def allocator(self) -> Allocator:
        """The allocator of this buffer's device (opens the device on first use)."""
        if self._allocator is None:
            from tinycore.device.registry import Device
            self._allocator = Device[self.device].allocator
        return self._allocator

    def is_allocated(self) -> bool:
        """True once memory is attached."""
        return self._buf is not None

    # ---- allocation ----

    def allocate(self, opaque: Any = None) -> Buffer:
        """Attach memory (a new allocation, the given device handle, or for a view the base's memory)."""
        if self._buf is not None:
            raise RuntimeError(f"{self!r} is already allocated")
        if self._base is not None:
            self._base.ensure_allocated()
            if self.nbytes == 0:
                self._buf = self._base._buf
            else:
                self._buf = self.allocator.offset(self._base._buf, self.nbytes, self.byte_offset)
        elif opaque is not None:
            self._buf = opaque
        else:
            # zero-size buffers still get a (one byte) allocation so that programs receive a valid pointer; the
            # size and allocator read once each (every eager op allocates: properties are Python calls)
            nbytes = self.size * self.dtype.itemsize
            allocator = self._allocator if self._allocator is not None else self.allocator
            self._buf = allocator.alloc(max(nbytes, 1), self.options)
            self._owns_memory = True
            self._count_memory(nbytes)
        return self

    def _count_memory(self, change: int) -> None:
        """Keep GlobalCounters.mem_used in step with this buffer's own allocation (files and external memory aside)."""
        if self.device.startswith("DISK") or (self.options is not None and self.options.external_ptr is not None):
            return
        _counts.mem_used += change
        GlobalCounters.mem_used_per_device[self.device] += change

    def ensure_allocated(self) -> Buffer:
        """Allocate if not yet allocated."""
        return self if self._buf is not None else self.allocate()

    def deallocate(self) -> None:
        """Give the memory back to the allocator's cache (views only drop their handle)."""
        if self._buf is None:
            return
        if self._base is None and self._owns_memory and self._allocator is not None:
            nbytes = self.size * self.dtype.itemsize
            self._allocator.free(self._buf, max(nbytes, 1), self.options)
            self._count_memory(-nbytes)
        self._buf = None

    def __del__(self) -> None:
        # deallocate() and _count_memory() inline: every eager op frees two buffers
        if self._buf is None:
            return
        try:
            if self._base is None and self._owns_memory and self._allocator is not None:
                nbytes = self.size * self.dtype.itemsize
                options = self.options
                allocator = self._allocator
                if options is None and allocator.__class__.free is _LRU_FREE:  # LRUAllocator.free inline
                    allocator.cache[(nbytes if nbytes > 1 else 1, None)].append(self._buf)  # type: ignore[attr-defined]
                else:
                    allocator.free(self._buf, nbytes if nbytes > 1 else 1, options)
                if (self.device in _COUNTED_DEVICES or _counted(self.device)) \
                        and (options is None or options.external_ptr is None):
                    _counts.mem_used -= nbytes
                    GlobalCounters.mem_used_per_device[self.device] -= nbytes
            self._buf = None
        except Exception:  # noqa: BLE001 - interpreter shutdown: the allocator may already be gone
            pass

    def view(self, size: int, dtype: DType, offset: int) -> Buffer:
        """A view of `size` elements of `dtype` starting `offset` elements (of this buffer's dtype) in."""
        return Buffer(self.device, size, dtype, base=self, offset=offset)

    # ---- data movement ----

    def copyin(self, data: memoryview) -> Buffer:
        """Fill the buffer with host bytes (exactly nbytes of them)."""
        data = memoryview(data)
        if data.nbytes != self.nbytes:
            raise ValueError(f"copyin of {data.nbytes} bytes into a buffer of {self.nbytes} bytes "
                             f"({self.size} x {self.dtype}): sizes must match")
        self.ensure_allocated()
        if self.nbytes:
            self.allocator.copyin(self._buf, data.cast("B") if data.ndim != 1 or data.format != "B" else data)
        return self

    def copyout(self, data: memoryview) -> memoryview:
        """Copy the buffer into the writable host memoryview `data` (exactly nbytes) and return it."""
        data = memoryview(data)
        if data.nbytes != self.nbytes:
            raise ValueError(f"copyout of a {self.nbytes} byte buffer into {data.nbytes} bytes: sizes must match")
        if data.readonly:
            raise ValueError("copyout needs a writable memoryview (e.g. memoryview(bytearray(n)))")
        self.ensure_allocated()
        if self.nbytes:
            self.allocator.copyout(data.cast("B") if data.ndim != 1 or data.format != "B" else data, self._buf)
        return data

    def as_memoryview(self) -> memoryview:
        """The buffer's host-visible memory, without a copy (devices with host memory only)."""
        self.ensure_allocated()
        if self.nbytes == 0:
            return memoryview(bytearray(0))
        return self.allocator.as_memoryview(self._buf, self.nbytes)

    def tobytes(self) -> bytes:
        """A host copy of the contents."""
        return bytes(self.copyout(memoryview(bytearray(self.nbytes))))

    def numpy(self) -> numpy.ndarray:
        """A numpy copy of the contents (1-D, this buffer's dtype)."""
        import numpy

        from tinycore.dtype import to_numpy_dtype
        return numpy.frombuffer(self.tobytes(), dtype=to_numpy_dtype(self.dtype)).copy()

    def __repr__(self) -> str:
        view = f", view of {self.base.size} x {self.base.dtype} at byte {self.byte_offset}" if self._base else ""
        return f"<Buffer {self.device} {self.size} x {self.dtype}{view}>"
