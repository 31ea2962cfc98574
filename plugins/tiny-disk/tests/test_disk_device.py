"""The DISK device: files as buffers, views without reads, bounded chunked copies, write-through, shared memory,
and kernels refused with a clear error."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tiny_disk.allocator as disk_allocator
from tiny_disk.device import DiskDevice, DiskKernelError

from tinycore.device.buffer import Buffer
from tinycore.device.registry import Device
from tinycore.dtype import dtypes
from tinycore.engine.memory import buffer_of, new_buffer_uop
from tinycore.nn.file_checks import ByteSource
from tinycore.tensor import Tensor


def _disk_view(path: Path, dtype: Any, byte_offset: int, shape: tuple[int, ...]) -> Tensor:
    """A tensor over bytes of `path` from `byte_offset` (the DISK buffer the weight loaders build)."""
    return ByteSource(path, "raw").tensor_at(byte_offset, dtype, shape, "a test tensor")


@pytest.fixture
def read_log(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Every (offset, bytes) read by the DISK allocator in this test."""
    log: list[tuple[int, int]] = []
    original = os.preadv

    def logged(descriptor: int, buffers: list[Any], offset: int) -> int:
        count = original(descriptor, buffers, offset)
        log.append((offset, count))
        return count
    monkeypatch.setattr(disk_allocator.os, "preadv", logged)
    return log


def test_canonical_names_open_one_device(tmp_path: Path) -> None:
    path = tmp_path / "x.bin"
    assert Device.canonicalize(f"disk:{path}") == f"DISK:{path}"
    assert Device[f"disk:{path}"] is Device[f"DISK:{path}"]
    assert isinstance(Device[f"DISK:{path}"], DiskDevice)
    assert Device["DISK:shm:name"].device == "DISK:shm:name"


def test_plain_disk_opens_but_allocates_nothing() -> None:
    device = Device["DISK"]
    with pytest.raises(ValueError, match="DISK:/path/to/file"):
        device.allocator.alloc(16)


def test_view_reads_only_its_bytes(tmp_path: Path, read_log: list[tuple[int, int]]) -> None:
    path = tmp_path / "data.bin"
    values = np.arange(1000, dtype=np.float32)
    values.tofile(path)
    view = _disk_view(path, dtypes.float32, 400, (5, 20))
    assert view.device == f"DISK:{path}" and view.shape == (5, 20)
    assert read_log == []  # building views reads nothing
    np.testing.assert_array_equal(view.to("CPU").numpy(), values[100:200].reshape(5, 20))
    read_log.clear()
    np.testing.assert_array_equal(view.to("CPU").numpy(), values[100:200].reshape(5, 20))
    assert sum(count for _, count in read_log) == 400
    assert all(400 <= offset < 800 for offset, _ in read_log)


def test_copies_go_in_bounded_chunks(tmp_path: Path, read_log: list[tuple[int, int]],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(disk_allocator, "CHUNK_BYTES", 4096)
    path = tmp_path / "big.bin"
    values = np.random.default_rng(0).integers(0, 1 << 30, 50_000, dtype=np.int32)
    values.tofile(path)
    loaded = _disk_view(path, dtypes.int32, 0, (50_000,)).to("CPU").numpy()
    np.testing.assert_array_equal(loaded, values)
    assert max(count for _, count in read_log) <= 4096 and len(read_log) >= 50_000 * 4 // 4096


@pytest.mark.parametrize("host_visible", [True, False])
def test_copy_to_buffer_streams_into_another_device(tmp_path: Path, host_visible: bool,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(disk_allocator, "CHUNK_BYTES", 1000)
    path = tmp_path / "stream.bin"
    values = np.arange(3001, dtype=np.float32)
    values.tofile(path)
    source = Buffer(f"DISK:{path}", values.nbytes, dtypes.uint8).ensure_allocated()
    destination = Buffer("CPU", values.size, dtypes.float32)
    if not host_visible:
        def refuse(*_: Any) -> memoryview:
            raise NotImplementedError("not host visible")
        monkeypatch.setattr(destination, "as_memoryview", refuse)
    source.allocator.copy_to_buffer(source._buf, destination)
    np.testing.assert_array_equal(np.frombuffer(destination.tobytes(), dtype=np.float32), values)


def test_to_disk_writes_through_to_the_file(tmp_path: Path) -> None:
    path = tmp_path / "out.bin"
    values = np.linspace(-3, 3, 77, dtype=np.float32)
    Tensor(values).to(f"disk:{path}").realize()
    np.testing.assert_array_equal(np.fromfile(path, dtype=np.float32), values)


def test_empty_on_disk_and_buffer_writes(tmp_path: Path) -> None:
    path = tmp_path / "empty.bin"
    tensor = Tensor.empty(8, dtype=dtypes.int32, device=f"disk:{path}")
    assert tensor.device == f"DISK:{path}" and tensor.shape == (8,)
    buffer = buffer_of(tensor.uop.base).ensure_allocated()
    assert path.stat().st_size == 32  # the file is created at the buffer's size
    buffer.view(2, dtypes.int32, 3).copyin(memoryview(np.array([7, -9], dtype=np.int32).tobytes()))
    np.testing.assert_array_equal(np.fromfile(path, dtype=np.int32), [0, 0, 0, 7, -9, 0, 0, 0])
    np.testing.assert_array_equal(tensor.to("CPU").numpy(), [0, 0, 0, 7, -9, 0, 0, 0])


def test_as_memoryview_maps_the_file(tmp_path: Path) -> None:
    path = tmp_path / "mapped.bin"
    path.write_bytes(bytes(range(64)))
    buffer = Buffer(f"DISK:{path}", 64, dtypes.uint8).ensure_allocated()
    view = buffer.view(16, dtypes.uint8, 8).as_memoryview()
    assert bytes(view) == bytes(range(8, 24))
    view[0] = 200
    view.release()
    buffer.deallocate()
    assert path.read_bytes()[8] == 200


def test_shared_memory_round_trip() -> None:
    name = f"tinycore-test-{uuid.uuid4().hex[:12]}"
    values = np.arange(32, dtype=np.int16)
    try:
        Tensor(values).to(f"disk:shm:{name}").realize()
        base = new_buffer_uop(f"DISK:shm:{name}", dtypes.int16, 32)
        np.testing.assert_array_equal(Tensor(base).to("CPU").numpy(), values)
    finally:
        import _posixshmem
        _posixshmem.shm_unlink("/" + name)


def test_kernels_on_disk_are_refused_with_the_way_out(tmp_path: Path) -> None:
    path = tmp_path / "k.bin"
    np.ones(4, dtype=np.float32).tofile(path)
    view = _disk_view(path, dtypes.float32, 0, (4,))
    with pytest.raises(DiskKernelError, match=r"runs no kernels.*\.to\('CPU'\)"):
        (view + 1).realize()
    np.testing.assert_array_equal((view.to("CPU") + 1).numpy(), [2, 2, 2, 2])


def test_file_shrunk_while_open_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "shrink.bin"
    path.write_bytes(b"\1" * 1000)
    buffer = Buffer(f"DISK:{path}", 1000, dtypes.uint8).ensure_allocated()
    os.truncate(path, 10)
    with pytest.raises(disk_allocator.DiskIOError, match="shorter than when it was opened"):
        buffer.tobytes()


def test_read_only_handle_never_grows_the_file(tmp_path: Path) -> None:
    path = tmp_path / "ro.bin"
    path.write_bytes(b"abc")
    allocator = Device[f"DISK:{path}"].allocator
    with pytest.raises(ValueError, match="fewer than the 8 asked for"):
        allocator.open_existing(8)
    handle = allocator.open_existing(3)
    with pytest.raises(PermissionError):
        allocator.copyin(handle, memoryview(b"xyz"))
    assert path.read_bytes() == b"abc"


def test_only_the_disk_allocator_opens_existing_files(tmp_path: Path) -> None:
    """`opens_existing` (the contract's check for the optional `open_existing`) is what the file loaders ask."""
    from tinycore.plugins.contract import opens_existing
    path = tmp_path / "weights.bin"
    path.write_bytes(b"\x01\x02\x03\x04")
    assert opens_existing(Device[f"DISK:{path}"].allocator)
    assert not opens_existing(Device["CPU"].allocator)


def test_tiny_devices_shows_disk_ok() -> None:
    environment = {**os.environ, "NO_COLOR": "1"}
    environment.pop("DEV", None)
    result = subprocess.run([sys.executable, "-m", "tinycore.cli", "devices", "--json"], capture_output=True,
                            text=True, env=environment, timeout=120)
    assert result.returncode == 0, result.stderr
    (device,) = [row for row in json.loads(result.stdout)["devices"] if row["name"] == "DISK"]
    assert device["status"] == "ok", device


def test_computing_on_disk_names_the_file_in_the_error(tmp_path):
    """A kernel that reaches DISK is refused with the device's name and the way out (not an internal object)."""
    import numpy as np
    import pytest
    from tiny_disk.device import DiskKernelError

    from tinycore import Tensor
    path = tmp_path / "values.bin"
    np.arange(8, dtype=np.float32).tofile(path)
    with pytest.raises(DiskKernelError) as raised:
        (Tensor(path) + 1).numpy()
    assert f"DISK:{path}" in str(raised.value) and "weakref" not in str(raised.value)
    assert ".to('CPU')" in str(raised.value)
