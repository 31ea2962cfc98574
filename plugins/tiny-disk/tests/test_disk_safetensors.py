"""safetensors files loaded lazily through DISK: files written by the safetensors package (numpy and torch
front ends) load equal, nothing is read until a tensor is copied, and malformed headers raise SafetensorsFormatError."""
from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tiny_disk.allocator as disk_allocator
import torch
from safetensors.numpy import save_file as numpy_save
from safetensors.torch import save_file as torch_save

from tinycore.dtype import dtypes
from tinycore.nn.file_checks import MalformedFileError
from tinycore.nn.safetensors_disk import SafetensorsFormatError, safe_load_disk, safe_load_disk_metadata
from tinycore.tensor import Tensor


def _host_bits(tensor: Tensor) -> np.ndarray:
    """A tensor's raw bytes after copying it to CPU."""
    return np.frombuffer(bytes(tensor.to("CPU")._host_view()), dtype=np.uint8)


NUMPY_ARRAYS = {
    "f32": np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 7, "f64": np.linspace(-1, 1, 5),
    "f16": np.array([1.5, -2.25, 65504], dtype=np.float16), "i8": np.array([-128, 0, 127], dtype=np.int8),
    "u8": np.arange(7, dtype=np.uint8), "i16": np.array([-3, 300], dtype=np.int16),
    "u16": np.array([65535, 1], dtype=np.uint16), "i32": np.array([[-5], [6]], dtype=np.int32),
    "u32": np.array([4_000_000_000], dtype=np.uint32), "i64": np.array([-(1 << 40), 1 << 50], dtype=np.int64),
    "u64": np.array([1 << 63], dtype=np.uint64), "bool": np.array([True, False, True]),
    "scalar": np.array(3.0, dtype=np.float32), "empty": np.zeros((0, 3), dtype=np.float32)}


def test_numpy_written_file_loads_equal(tmp_path: Path) -> None:
    path = tmp_path / "numpy.safetensors"
    numpy_save(NUMPY_ARRAYS, str(path), metadata={"format": "np", "note": "x"})
    loaded = safe_load_disk(path)
    assert set(loaded) == set(NUMPY_ARRAYS)
    for key, array in NUMPY_ARRAYS.items():
        assert loaded[key].device == f"DISK:{path.resolve()}"
        assert loaded[key].shape == array.shape, key
        np.testing.assert_array_equal(loaded[key].to("CPU").numpy(), array, err_msg=key)
    assert safe_load_disk_metadata(path) == {"format": "np", "note": "x"}


def test_torch_written_file_with_bf16_and_f16_loads_equal(tmp_path: Path) -> None:
    path = tmp_path / "torch.safetensors"
    generator = torch.Generator().manual_seed(0)
    tensors = {"bf16": torch.randn(4, 5, generator=generator).to(torch.bfloat16),
               "f16": torch.randn(3, generator=generator).half(), "f32": torch.randn(2, 2, generator=generator),
               "i64": torch.arange(-3, 3)}
    torch_save(tensors, str(path))
    loaded = safe_load_disk(path)
    assert loaded["bf16"].dtype == dtypes.bfloat16 and loaded["f16"].dtype == dtypes.float16
    for key, tensor in tensors.items():
        expected = tensor.contiguous().view(torch.uint8).numpy().ravel()
        np.testing.assert_array_equal(_host_bits(loaded[key]), expected, err_msg=key)
    np.testing.assert_array_equal(loaded["f32"].to("CPU").numpy(), tensors["f32"].numpy())


def test_loading_reads_only_the_header(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "lazy.safetensors"
    numpy_save({"a": np.zeros(300_000, dtype=np.float32), "b": np.arange(10, dtype=np.float32)}, str(path))
    header_end = 8 + struct.unpack("<Q", path.read_bytes()[:8])[0]
    log: list[tuple[int, int]] = []
    original = os.preadv

    def logged(descriptor: int, buffers: list[Any], offset: int) -> int:
        count = original(descriptor, buffers, offset)
        log.append((offset, count))
        return count
    monkeypatch.setattr(disk_allocator.os, "preadv", logged)
    loaded = safe_load_disk(path)
    header_reads = sum(count for _, count in log)
    assert header_reads <= path.stat().st_size and all(offset < header_end for offset, _ in log)
    log.clear()
    np.testing.assert_array_equal(loaded["b"].to("CPU").numpy(), np.arange(10, dtype=np.float32))
    assert sum(count for _, count in log) == 40


def test_disk_and_memory_tensors_as_input(tmp_path: Path) -> None:
    path = tmp_path / "as_tensor.safetensors"
    numpy_save({"w": np.arange(6, dtype=np.int32).reshape(2, 3)}, str(path))
    size = path.stat().st_size
    on_disk = Tensor.empty(size, dtype=dtypes.uint8, device=f"disk:{path}")
    np.testing.assert_array_equal(safe_load_disk(on_disk)["w"].to("CPU").numpy(), [[0, 1, 2], [3, 4, 5]])
    in_memory = Tensor(np.frombuffer(path.read_bytes(), dtype=np.uint8), device="CPU")
    from_memory = safe_load_disk(in_memory)["w"]
    assert from_memory.device == "CPU"
    np.testing.assert_array_equal(from_memory.numpy(), [[0, 1, 2], [3, 4, 5]])


def _write(path: Path, header: Any, data: bytes, length: int | None = None) -> Path:
    raw = json.dumps(header).encode() if not isinstance(header, bytes) else header
    path.write_bytes(struct.pack("<Q", len(raw) if length is None else length) + raw + data)
    return path


@pytest.mark.parametrize(("header", "data", "length", "message"), [
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 4, None, "more than the file can hold"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}, b"\0" * 12, None, "outside the 12 data bytes"),
    ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4, 1 << 40, "header length"),
    ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}}, b"\0" * 4, None, "outside"),
    ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}}, b"\0" * 4, None, "outside"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
      "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8, None, "overlaps"),
    ({"a": {"dtype": "Q9", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4, None, "unknown dtype"),
    ({"a": {"dtype": "F32", "shape": [1 << 62, 1 << 62], "data_offsets": [0, 4]}}, b"\0" * 4, None, "elements"),
    ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 8, None, "cover 4 data bytes"),
    (b'{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "a": {}}', b"\0" * 4, None, "duplicate"),
    (b"\xff\xfe", b"", None, "not valid UTF-8 JSON"),
    (b"[" * 100_000 + b"]" * 100_000, b"", None, "not valid UTF-8 JSON"),
    ({"__metadata__": {"k": 1}}, b"", None, "__metadata__"),
])
def test_malformed_headers(tmp_path: Path, header: Any, data: bytes, length: int | None, message: str) -> None:
    path = _write(tmp_path / "bad.safetensors", header, data, length)
    with pytest.raises(SafetensorsFormatError, match=message) as caught:
        safe_load_disk(path)
    assert isinstance(caught.value, MalformedFileError) and isinstance(caught.value, ValueError)
    assert str(path) in str(caught.value)


def test_short_file(tmp_path: Path) -> None:
    path = tmp_path / "short.safetensors"
    path.write_bytes(b"\1\2\3")
    with pytest.raises(SafetensorsFormatError, match="fewer than the 8-byte header length"):
        safe_load_disk(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        safe_load_disk(tmp_path / "nope.safetensors")


def test_loads_into_a_model(tmp_path: Path) -> None:
    from tinycore.nn import Linear
    from tinycore.nn.state import load_state_dict
    path = tmp_path / "linear.safetensors"
    weight = np.arange(6, dtype=np.float32).reshape(3, 2) / 4
    bias = np.array([1, -1, 0.5], dtype=np.float32)
    numpy_save({"weight": weight, "bias": bias}, str(path))
    model = Linear(2, 3)
    load_state_dict(model, safe_load_disk(path))
    assert not model.weight.device.startswith("DISK")  # copied to the model's device
    got = model(Tensor([[1.0, 2.0]], device=model.weight.device)).numpy()
    np.testing.assert_allclose(got, np.array([[1.0, 2.0]], dtype=np.float32) @ weight.T + bias, rtol=1e-6)
