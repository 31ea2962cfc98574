"""Buffer, the allocators and the compiler cache, on a host-memory test allocator (no device plugin needed)."""
from __future__ import annotations

import numpy as np
import pytest

from tinycore.device.allocator import Allocator, BufferSpec, LRUAllocator
from tinycore.device.buffer import Buffer
from tinycore.device.compiled import Compiled
from tinycore.device.compiler import CompileError, Compiler
from tinycore.dtype import dtypes
from tinycore.helpers import Context


class HostMemory:
    """A bytearray with a view offset: the opaque handle of the test allocator."""

    def __init__(self, storage: bytearray, offset: int = 0):
        self.storage, self.offset = storage, offset


class ByteArrayAllocator(LRUAllocator):
    """Host memory from bytearrays, with a byte budget so out-of-memory can be provoked."""

    def __init__(self, capacity: int = 1 << 20):
        super().__init__("TEST")
        self.capacity, self.used, self.allocations, self.frees = capacity, 0, 0, 0

    def _alloc(self, size, options):
        if self.used + size > self.capacity:
            raise MemoryError(f"budget of {self.capacity} bytes exceeded")
        self.used += size
        self.allocations += 1
        return HostMemory(bytearray(size))

    def _free(self, opaque, size, options):
        self.used -= size
        self.frees += 1

    def _as_memoryview(self, opaque, size):
        return memoryview(opaque.storage)[opaque.offset:opaque.offset + size]

    def _copyin(self, dest, src):
        self._as_memoryview(dest, src.nbytes)[:] = src

    def _copyout(self, dest, src):
        dest[:] = self._as_memoryview(src, dest.nbytes)

    def _offset(self, opaque, size, offset):
        return HostMemory(opaque.storage, opaque.offset + offset)


def test_buffer_is_lazy_and_round_trips():
    allocator = ByteArrayAllocator()
    buffer = Buffer("TEST", 6, dtypes.float32, allocator=allocator)
    assert not buffer.is_allocated() and allocator.allocations == 0
    data = np.array([1.5, -2, 3, 4, 5, 6], np.float32)
    buffer.copyin(memoryview(data))
    assert buffer.is_allocated() and buffer.nbytes == 24
    out = np.zeros(6, np.float32)
    buffer.copyout(memoryview(out))
    np.testing.assert_array_equal(out, data)
    np.testing.assert_array_equal(np.frombuffer(buffer.as_memoryview(), np.float32), data)


def test_views_share_memory_and_check_bounds():
    allocator = ByteArrayAllocator()
    base = Buffer("TEST", 8, dtypes.int32, allocator=allocator).copyin(memoryview(np.arange(8, dtype=np.int32)))
    view = base.view(3, dtypes.int32, 2)
    np.testing.assert_array_equal(view.numpy(), [2, 3, 4])
    as_bytes = base.view(4, dtypes.uint8, 5)  # element 5 of the int32 base, read as bytes
    np.testing.assert_array_equal(as_bytes.numpy(), np.arange(8, dtype=np.int32).view(np.uint8)[20:24])
    nested = view.view(1, dtypes.int32, 1)
    assert nested.base is base and nested.numpy()[0] == 3
    nested.copyin(memoryview(np.array([99], np.int32)))
    np.testing.assert_array_equal(base.numpy(), [0, 1, 2, 99, 4, 5, 6, 7])
    with pytest.raises(ValueError, match="past the end"):
        base.view(4, dtypes.int32, 5)
    with pytest.raises(ValueError, match="sizes must match"):
        base.copyin(memoryview(np.zeros(3, np.int32)))
    with pytest.raises(TypeError, match="dtype"):
        Buffer("TEST", 2, dtypes.float32.ptr(), allocator=allocator)


def test_freed_on_deletion_and_reused():
    allocator = ByteArrayAllocator()
    buffer = Buffer("TEST", 16, dtypes.float32, allocator=allocator).ensure_allocated()
    handle = buffer._buf
    view = buffer.view(4, dtypes.float32, 0).ensure_allocated()
    del buffer
    assert allocator.cached_bytes == 0  # the view keeps the base alive
    del view
    assert allocator.cached_bytes == 64
    again = Buffer("TEST", 16, dtypes.float32, allocator=allocator).ensure_allocated()
    assert again._buf is handle and allocator.allocations == 1
    other_size = Buffer("TEST", 8, dtypes.float32, allocator=allocator).ensure_allocated()
    assert other_size._buf is not handle and allocator.allocations == 2


def test_nolru_and_external_memory_are_not_cached():
    allocator = ByteArrayAllocator()
    Buffer("TEST", 4, dtypes.uint8, options=BufferSpec(nolru=True), allocator=allocator).ensure_allocated()
    assert allocator.frees == 1 and allocator.cached_bytes == 0


def test_out_of_memory_retries_after_emptying_the_cache():
    allocator = ByteArrayAllocator(capacity=100)
    first = Buffer("TEST", 60, dtypes.uint8, allocator=allocator).ensure_allocated()
    del first
    assert allocator.cached_bytes == 60
    second = Buffer("TEST", 80, dtypes.uint8, allocator=allocator).ensure_allocated()
    assert second.is_allocated() and allocator.cached_bytes == 0 and allocator.frees == 1
    with pytest.raises(MemoryError, match="TEST: out of memory allocating 50 bytes"):
        Buffer("TEST", 50, dtypes.uint8, allocator=allocator).ensure_allocated()


def test_allocator_rejects_bad_sizes_and_unsupported_calls():
    allocator = ByteArrayAllocator()
    with pytest.raises(ValueError, match="positive"):
        allocator.alloc(0)
    plain = Allocator("PLAIN")
    with pytest.raises(NotImplementedError, match="views"):
        plain.offset(object(), 4, 0)
    with pytest.raises(NotImplementedError, match="host visible"):
        plain.as_memoryview(object(), 4)


def test_zero_size_buffer():
    allocator = ByteArrayAllocator()
    empty = Buffer("TEST", 0, dtypes.float32, allocator=allocator)
    empty.copyin(memoryview(b""))
    assert empty.nbytes == 0 and empty.tobytes() == b""


class CountingCompiler(Compiler):
    """A compiler whose 'binary' is the reversed source, counting real compilations."""

    name = "counting cc"

    def __init__(self, flags: tuple[str, ...] = ("-O1",)):
        super().__init__()
        self.flags = flags
        self.compiled = 0

    def version(self) -> str:
        return "1.0"

    def compile(self, src: str) -> bytes:
        if "syntax error" in src:
            raise CompileError("counting cc rejected the source", log="line 1: syntax error")
        self.compiled += 1
        return src.encode()[::-1]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TINYCORE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_compile_cache_hit_across_instances(cache):
    first = CountingCompiler()
    assert first.compile_cached("int x;") == b";x tni"
    second = CountingCompiler()
    assert second.compile_cached("int x;") == b";x tni" and second.compiled == 0
    assert CountingCompiler(flags=("-O3",)).cache_key("int x;") != first.cache_key("int x;")
    other_flags = CountingCompiler(flags=("-O3",))
    other_flags.compile_cached("int x;")
    assert other_flags.compiled == 1


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty", "garbage"])
def test_corrupt_cache_entry_recompiles(cache, damage):
    compiler = CountingCompiler()
    compiler.compile_cached("float y;")
    path = compiler.cache_path(compiler.cache_key("float y;"))
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        data = data[:-3]
    elif damage == "flip":
        data[-1] ^= 0xFF
    elif damage == "empty":
        data = bytearray()
    else:
        data = bytearray(b"not a cache entry at all")
    path.write_bytes(bytes(data))
    fresh = CountingCompiler()
    assert fresh.compile_cached("float y;") == b";y taolf" and fresh.compiled == 1
    assert CountingCompiler().compile_cached("float y;") == b";y taolf"  # rewritten correctly


def test_unwritable_cache_still_compiles(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("the cache directory cannot be created under a file")
    monkeypatch.setenv("TINYCORE_CACHE_DIR", str(blocker / "cache"))
    compiler = CountingCompiler()
    assert compiler.compile_cached("int z;") == b";z tni" and compiler.compiled == 1
    assert CountingCompiler().compile_cached("int z;") == b";z tni"


def test_cache_can_be_turned_off(cache):
    with Context(CACHELEVEL=0):
        CountingCompiler().compile_cached("int w;")
        again = CountingCompiler()
        again.compile_cached("int w;")
    assert again.compiled == 1 and not cache.exists()


def test_compile_error_carries_log(cache):
    with pytest.raises(CompileError) as error:
        CountingCompiler().compile_cached("syntax error here")
    assert error.value.log == "line 1: syntax error" and "rejected" in str(error.value)


def test_compiled_holds_its_parts():
    allocator = ByteArrayAllocator()
    device = Compiled("TEST", allocator, None, CountingCompiler(), lambda name, lib: (name, lib))
    device.synchronize()
    assert device.allocator is allocator and device.runtime("k", b"x") == ("k", b"x")
