"""Views of DISK tensors: contiguous ranges are copied without reading the rest of the file, writes go straight to
the file, non-contiguous views are refused with an error naming the way out. Results are compared with numpy
reading the same file."""
from __future__ import annotations

import pathlib
import tracemalloc
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from tinycore import Tensor, dtypes
from tinycore.schedule.cache import clear_schedule_cache

MIB = 1024 * 1024


@pytest.fixture
def float_file(tmp_path: pathlib.Path) -> tuple[pathlib.Path, np.ndarray]:
    """A file of 16 float32 values with distinct bit patterns, and those values."""
    values = (np.arange(16, dtype=np.float32) * 1.5 - 3.25).astype(np.float32)
    path = tmp_path / "values.bin"
    values.tofile(path)
    return path, values


@pytest.fixture
def bytes_read(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Records the byte count of every read from a DISK file."""
    from tiny_disk.allocator import DiskFile
    counts: list[int] = []
    original = DiskFile.read_into

    def counting(self: DiskFile, destination: memoryview, offset: int) -> None:
        counts.append(destination.nbytes)
        original(self, destination, offset)

    monkeypatch.setattr(DiskFile, "read_into", counting)
    yield counts


VIEWS: list[tuple[str, Callable[[Tensor], Tensor], Callable[[np.ndarray], np.ndarray]]] = [
    ("slice", lambda tensor: tensor[2:6], lambda array: array[2:6]),
    ("reshape row", lambda tensor: tensor.reshape(4, 4)[1], lambda array: array.reshape(4, 4)[1]),
    ("bitcast slice", lambda tensor: tensor.bitcast(dtypes.int32)[3:5], lambda array: array.view(np.int32)[3:5]),
    ("rows", lambda tensor: tensor.reshape(4, 4)[1:3], lambda array: array.reshape(4, 4)[1:3]),
    ("nested slices", lambda tensor: tensor[4:14][2:6], lambda array: array[4:14][2:6]),
    ("reshape of rows", lambda tensor: tensor.reshape(2, 8)[1].reshape(2, 4)[1],
     lambda array: array.reshape(2, 8)[1].reshape(2, 4)[1]),
    ("bitcast whole", lambda tensor: tensor.bitcast(dtypes.uint32), lambda array: array.view(np.uint32)),
    ("single element", lambda tensor: tensor.reshape(4, 4)[2, 3:4], lambda array: array.reshape(4, 4)[2, 3:4]),
]


@pytest.mark.parametrize("name, view, expected", VIEWS, ids=[case[0] for case in VIEWS])
def test_contiguous_views_read_only_their_range(float_file: tuple[pathlib.Path, np.ndarray], bytes_read: list[int],
                                                name: str, view: Callable[[Tensor], Tensor],
                                                expected: Callable[[np.ndarray], np.ndarray]) -> None:
    path, _ = float_file
    on_file = np.fromfile(path, dtype=np.float32)
    disk = Tensor.empty(16, dtype=dtypes.float32, device=f"disk:{path}")
    result = view(disk).to("CPU").numpy()
    want = expected(on_file)
    np.testing.assert_array_equal(result, want)
    assert result.dtype == want.dtype
    assert sum(bytes_read) == want.nbytes


def test_path_tensor_views(float_file: tuple[pathlib.Path, np.ndarray], bytes_read: list[int]) -> None:
    path, values = float_file
    disk = Tensor(pathlib.Path(path), dtype=dtypes.float32)
    np.testing.assert_array_equal(disk[5:9].to("CPU").numpy(), values[5:9])
    np.testing.assert_array_equal(disk.reshape(8, 2)[3].to("CPU").numpy(), values.reshape(8, 2)[3])
    assert sum(bytes_read) == 4 * 4 + 2 * 4


def test_copies_repeated_reuse_the_cached_schedule(float_file: tuple[pathlib.Path, np.ndarray]) -> None:
    path, values = float_file
    clear_schedule_cache()
    for _ in range(2):  # a new DISK tensor each time: the same structure over a new buffer
        disk = Tensor.empty(16, dtype=dtypes.float32, device=f"disk:{path}")
        np.testing.assert_array_equal(disk[2:6].to("CPU").numpy(), values[2:6])
        np.testing.assert_array_equal(disk.bitcast(dtypes.int32)[3:5].to("CPU").numpy(),
                                      values.view(np.int32)[3:5])
    disk = Tensor.empty(16, dtype=dtypes.float32, device=f"disk:{path}")
    for _ in range(2):  # the same tensor twice
        np.testing.assert_array_equal(disk.reshape(4, 4)[1].to("CPU").numpy(), values.reshape(4, 4)[1])


def test_slice_of_large_file_keeps_memory_bounded(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "large.bin"
    file_bytes, slice_bytes, start_bytes = 64 * MIB, 4 * MIB, 20 * MIB
    chunk = np.random.default_rng(0).standard_normal(slice_bytes // 4).astype(np.float32)
    with open(path, "wb") as handle:
        handle.truncate(file_bytes)
        handle.seek(start_bytes)
        handle.write(chunk.tobytes())
    disk = Tensor.empty(file_bytes // 4, dtype=dtypes.float32, device=f"disk:{path}")
    start = start_bytes // 4
    Tensor.empty(4, device="CPU").realize()  # the CPU device and the engine are loaded before measuring
    on_cpu = disk[start:start + slice_bytes // 4].to("CPU")
    tracemalloc.start()
    try:
        on_cpu.realize()
        _, copy_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        result = on_cpu.numpy()
        _, read_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(result, np.fromfile(path, dtype=np.float32, count=slice_bytes // 4,
                                                      offset=start_bytes))
    assert copy_peak < 2 * slice_bytes, f"the copy's peak traced allocation is {copy_peak} bytes"
    assert max(copy_peak, read_peak) < file_bytes // 4, f"peak traced allocations {copy_peak}, {read_peak} bytes"


def test_writes_through_assign(float_file: tuple[pathlib.Path, np.ndarray]) -> None:
    path, values = float_file
    disk = Tensor.empty(16, dtype=dtypes.float32, device=f"disk:{path}")
    expected = values.copy()
    for round_number in range(2):  # twice: the cached schedule writes the same way
        update = np.full(4, 100.0 + round_number, dtype=np.float32)
        disk[4:8].assign(Tensor(update).to(disk.device)).realize()
        expected[4:8] = update
        np.testing.assert_array_equal(np.fromfile(path, dtype=np.float32), expected)
    rows = np.arange(8, dtype=np.float32).reshape(2, 4) + 0.5
    disk.reshape(4, 4)[2:4].assign(Tensor(rows).to(disk.device)).realize()
    expected.reshape(4, 4)[2:4] = rows
    np.testing.assert_array_equal(np.fromfile(path, dtype=np.float32), expected)
    whole = np.linspace(-1, 1, 16, dtype=np.float32)
    disk.assign(Tensor(whole).to(disk.device)).realize()
    np.testing.assert_array_equal(np.fromfile(path, dtype=np.float32), whole)
    np.testing.assert_array_equal(disk[1:3].to("CPU").numpy(), whole[1:3])


def test_copy_to_new_disk_file(tmp_path: pathlib.Path) -> None:
    source = np.arange(10, dtype=np.int32) * 7
    path = tmp_path / "out.bin"
    written = Tensor(source)[2:9].to(f"disk:{path}").realize()
    np.testing.assert_array_equal(np.fromfile(path, dtype=np.int32), source[2:9])
    np.testing.assert_array_equal(written.to("CPU").numpy(), source[2:9])


NON_CONTIGUOUS: list[tuple[str, Callable[[Tensor], Tensor]]] = [
    ("permute", lambda tensor: tensor.reshape(4, 4).permute(1, 0)),
    ("strided slice", lambda tensor: tensor[::2]),
    ("column", lambda tensor: tensor.reshape(4, 4)[:, 1]),
    ("block", lambda tensor: tensor.reshape(4, 4)[1:3, 1:3]),
    ("flip", lambda tensor: tensor.flip(0)),
]


@pytest.mark.parametrize("name, view", NON_CONTIGUOUS, ids=[case[0] for case in NON_CONTIGUOUS])
def test_non_contiguous_views_are_refused_clearly(float_file: tuple[pathlib.Path, np.ndarray], name: str,
                                                  view: Callable[[Tensor], Tensor]) -> None:
    path, values = float_file
    disk = Tensor.empty(16, dtype=dtypes.float32, device=f"disk:{path}")
    with pytest.raises(RuntimeError, match="non-contiguous view") as raised:
        view(disk).to("CPU").realize()
    message = str(raised.value)
    assert "compute device first" in message and "then index" in message and str(path) in message
    # the way out the message names works
    np.testing.assert_array_equal(view(disk.to("CPU")).numpy(), view(Tensor(values)).numpy())


def test_non_contiguous_writes_are_refused_clearly(float_file: tuple[pathlib.Path, np.ndarray]) -> None:
    path, values = float_file
    disk = Tensor.empty(16, dtype=dtypes.float32, device=f"disk:{path}")
    with pytest.raises(RuntimeError, match="cannot write a non-contiguous view"):
        disk.reshape(4, 4)[:, 1].assign(Tensor(np.ones(4, dtype=np.float32)).to(disk.device)).realize()
    np.testing.assert_array_equal(np.fromfile(path, dtype=np.float32), values)


def _random_view(rng: np.random.Generator, tensor: Tensor, array: np.ndarray) -> tuple[Tensor, np.ndarray]:
    """The same random movement op applied to a tensor and to a numpy array."""
    choice = rng.integers(4)
    if choice == 0 and array.ndim:  # shrink one axis
        axis = int(rng.integers(array.ndim))
        size = array.shape[axis]
        start = int(rng.integers(size + 1))
        end = int(rng.integers(start, size + 1))
        index = tuple(slice(start, end) if position == axis else slice(None) for position in range(array.ndim))
        return tensor[index], array[index]
    if choice == 1 and array.ndim > 1:  # permute
        order = tuple(int(axis) for axis in rng.permutation(array.ndim))
        return tensor.permute(order), array.transpose(order)
    if choice == 2 and array.ndim and array.shape[0] > 1:  # flip
        return tensor.flip(0), array[::-1]
    factors = [size for size in (1, 2, 3, 4, 6) if array.size % size == 0]  # reshape to (factor, rest)
    factor = int(rng.choice(factors))
    shape = (factor, array.size // factor) if rng.integers(2) else (array.size,)
    return tensor.reshape(shape), array.reshape(shape)


def test_contiguous_range_matches_numpy_on_random_view_chains() -> None:
    from tinycore.schedule.views import contiguous_range
    rng = np.random.default_rng(6)
    found_ranges = 0
    for _ in range(300):
        array = np.arange(48, dtype=np.int32).reshape(4, 12)
        tensor = Tensor.empty(48, dtype=dtypes.int32, device="CPU").reshape(4, 12)
        for _ in range(int(rng.integers(1, 5))):
            tensor, array = _random_view(rng, tensor, array)
        flat = array.ravel()
        is_range = flat.size == 0 or bool(np.all(np.diff(flat) == 1))
        found = contiguous_range(tensor.uop)
        # never a range where the elements are not one; a range is missed only after a reshape that no single
        # strided view describes (a flip then a reshape across the flipped axis), which gathering would need
        assert is_range or found is None, (tensor.shape, flat)
        if found is not None and flat.size:
            _, offset, count = found
            assert (offset, count) == (int(flat[0]), flat.size)
            found_ranges += 1
    assert found_ranges > 50


def test_empty_slice_of_disk(float_file: tuple[pathlib.Path, np.ndarray]) -> None:
    path, values = float_file
    disk = Tensor.empty(16, dtype=dtypes.float32, device=f"disk:{path}")
    result = disk[3:3].to("CPU").numpy()
    assert result.shape == values[3:3].shape == (0,)
