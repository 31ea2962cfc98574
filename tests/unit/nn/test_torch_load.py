"""torch_load: files saved by torch (zip and legacy formats) load equal to torch.load; pickles that ask for any
global outside the allow list are refused before anything runs; malformed files raise TorchFormatError."""
from __future__ import annotations

import collections
import io
import os
import pickle
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tinycore.dtype import dtypes
from tinycore.nn.file_checks import MalformedFileError
from tinycore.nn.torch_load import LEGACY_MAGIC, TorchFormatError, torch_load
from tinycore.tensor import Tensor

FORMATS = [True, False]  # _use_new_zipfile_serialization


def _bits(value: Tensor) -> np.ndarray:
    """The raw bytes of a tinycore tensor's values (copied to CPU)."""
    on_cpu = value.to("CPU")
    if on_cpu.dtype == dtypes.bfloat16:
        on_cpu = on_cpu.bitcast(dtypes.uint16)
    return on_cpu.numpy().reshape(-1).view(np.uint8)


def _torch_bits(value: torch.Tensor) -> np.ndarray:
    return value.contiguous().reshape(-1).view(torch.uint8).numpy() if value.numel() else np.zeros(0, np.uint8)


def _state() -> dict[str, Any]:
    generator = torch.Generator().manual_seed(0)
    base = torch.randn(4, 6, generator=generator)
    return collections.OrderedDict(
        f32=base, f64=torch.randn(3, generator=generator, dtype=torch.float64),
        f16=torch.randn(2, 3, generator=generator).half(), bf16=torch.randn(5, generator=generator).bfloat16(),
        i64=torch.arange(-5, 5), i32=torch.tensor([1 << 30, -7], dtype=torch.int32),
        i16=torch.tensor([-300, 300], dtype=torch.int16), i8=torch.tensor([-128, 127], dtype=torch.int8),
        u8=torch.arange(200, 210, dtype=torch.uint8), flag=torch.tensor([True, False]),
        scalar=torch.tensor(2.5), empty=torch.zeros(0, 3),
        parameter=torch.nn.Parameter(torch.ones(2, 2)), transposed=base.T, stepped=base[:, ::2], row=base[2],
        nested={"list": [torch.arange(3), 1, "text", (None, True, 2.5)], "set": {1, 2}})


@pytest.mark.parametrize("zip_format", FORMATS)
def test_files_saved_by_torch_load_equal(tmp_path: Path, zip_format: bool) -> None:
    path = tmp_path / "state.pt"
    state = _state()
    torch.save(state, path, _use_new_zipfile_serialization=zip_format)
    expected = torch.load(path, weights_only=True)
    loaded = torch_load(path)
    assert isinstance(loaded, collections.OrderedDict) and list(loaded) == list(expected)
    for key, value in expected.items():
        if isinstance(value, torch.Tensor):
            assert loaded[key].shape == tuple(value.shape), key
            np.testing.assert_array_equal(_bits(loaded[key]), _torch_bits(value), err_msg=key)
    assert loaded["f16"].dtype == dtypes.float16 and loaded["bf16"].dtype == dtypes.bfloat16
    np.testing.assert_array_equal(loaded["f32"].to("CPU").numpy(), expected["f32"].numpy())
    nested = loaded["nested"]
    np.testing.assert_array_equal(nested["list"][0].to("CPU").numpy(), [0, 1, 2])
    assert nested["list"][1:] == [1, "text", (None, True, 2.5)] and nested["set"] == {1, 2}


def test_contiguous_tensors_stay_lazy_on_disk(tmp_path: Path) -> None:
    path = tmp_path / "lazy.pt"
    torch.save({"w": torch.arange(12.0).reshape(3, 4), "row": torch.arange(12.0).reshape(3, 4)[1]}, path)
    loaded = torch_load(path)
    assert loaded["w"].device == f"DISK:{path.resolve()}" and loaded["row"].device == loaded["w"].device
    np.testing.assert_array_equal(loaded["row"].to("CPU").numpy(), [4, 5, 6, 7])


def test_tensor_input(tmp_path: Path) -> None:
    path = tmp_path / "as_tensor.pt"
    torch.save({"w": torch.arange(4, dtype=torch.int32)}, path)
    file_tensor = Tensor(np.frombuffer(path.read_bytes(), dtype=np.uint8), device="CPU")
    np.testing.assert_array_equal(torch_load(file_tensor)["w"].numpy(), [0, 1, 2, 3])


class _RunsCommand:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


class _Evaluates:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (eval, (f"open({str(self.marker)!r}, 'w')",))


@pytest.mark.parametrize("zip_format", FORMATS)
@pytest.mark.parametrize("payload", [_RunsCommand, _Evaluates])
def test_pickles_calling_globals_are_refused_and_nothing_runs(tmp_path: Path, zip_format: bool, payload: Any) -> None:
    marker = tmp_path / "ran"
    path = tmp_path / "evil.pt"
    torch.save({"weights": torch.ones(2), "payload": payload(marker)}, path,
               _use_new_zipfile_serialization=zip_format)
    with pytest.raises(TorchFormatError, match="not allowed") as caught:
        torch_load(path)
    assert "system" in str(caught.value) or "eval" in str(caught.value)
    assert not marker.exists()


def _legacy_bytes(main: bytes, keys: list[str], storages: bytes = b"") -> bytes:
    head = pickle.dumps(LEGACY_MAGIC, protocol=2) + pickle.dumps(1001, protocol=2)
    head += pickle.dumps({"protocol_version": 1001, "little_endian": True}, protocol=2)
    return head + main + pickle.dumps(keys, protocol=2) + storages


@pytest.mark.parametrize("module_name", ["subprocess.Popen", "builtins.exec", "copyreg._reconstructor",
                                         "torch.nn.Module", "numpy.load", "builtins.getattr"])
def test_any_global_outside_the_allow_list_is_refused(tmp_path: Path, module_name: str) -> None:
    module, name = module_name.split(".", 1)
    payload = b"\x80\x02c" + module.encode() + b"\n" + name.encode() + b"\n)R."
    path = tmp_path / "global.pt"
    path.write_bytes(_legacy_bytes(payload, []))
    with pytest.raises(TorchFormatError, match=f"{module}.{name}, which is not allowed"):
        torch_load(path)


def _rewrite_zip(source: Path, target: Path, change: Any) -> Path:
    """Copy the archive `source` to `target`, passing each member (name, bytes) through `change`."""
    with zipfile.ZipFile(source) as archive, zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as out:
        for info in archive.infolist():
            name, data, compression = change(info.filename, archive.read(info))
            out.writestr(name, data, compress_type=compression)
    return target


@pytest.mark.parametrize(("change", "message"), [
    (lambda name, data: (name, data[:8] if name.endswith("data/0") else data, zipfile.ZIP_STORED), "more than its"),
    (lambda name, data: (name, data, zipfile.ZIP_DEFLATED if name.endswith("data/0") else zipfile.ZIP_STORED),
     "compressed"),
    (lambda name, data: (name + "x" if name.endswith("data/0") else name, data, zipfile.ZIP_STORED), "no member"),
    (lambda name, data: (name, b"big" if name.endswith("byteorder") else data, zipfile.ZIP_STORED), "big-endian"),
    (lambda name, data: (name, data[:len(data) // 2] if name.endswith("data.pkl") else data, zipfile.ZIP_STORED),
     "not a valid pickle"),
])
def test_malformed_zip_files(tmp_path: Path, change: Any, message: str) -> None:
    original = tmp_path / "good.pt"
    torch.save({"w": torch.arange(16.0)}, original)
    broken = _rewrite_zip(original, tmp_path / "bad.pt", change)
    with pytest.raises(TorchFormatError, match=message) as caught:
        torch_load(broken)
    assert isinstance(caught.value, MalformedFileError) and str(broken) in str(caught.value)


class _StorageMarker:
    """Stands for storage '0' (4 float32 elements) in a hand-made legacy pickle."""


class _Rebuilt:
    def __init__(self, size: int):
        self.size = size

    def __reduce__(self) -> tuple[Any, ...]:
        return (torch._utils._rebuild_tensor_v2, (_StorageMarker(), 0, (self.size,), (1,), False,
                                                  collections.OrderedDict()))


class _StoragePickler(pickle.Pickler):
    def persistent_id(self, obj: Any) -> Any:
        return ("storage", torch.FloatStorage, "0", "cpu", 4) if isinstance(obj, _StorageMarker) else None


def _legacy_tensor_file(path: Path, size: int, stored_count: int, data: bytes) -> Path:
    stream = io.BytesIO()
    _StoragePickler(stream, protocol=2).dump({"t": _Rebuilt(size)})
    path.write_bytes(_legacy_bytes(stream.getvalue(), ["0"], stored_count.to_bytes(8, "little") + data))
    return path


def test_hand_made_legacy_file_loads(tmp_path: Path) -> None:
    values = np.array([1.5, -2, 3, 4], dtype=np.float32)
    loaded = torch_load(_legacy_tensor_file(tmp_path / "ok.pt", 4, 4, values.tobytes()))
    np.testing.assert_array_equal(loaded["t"].to("CPU").numpy(), values)


@pytest.mark.parametrize(("size", "stored_count", "data", "message"), [
    (8, 4, b"\0" * 16, "reaches past its storage of 4 elements"),
    (4, 4, b"\0" * 8, "past the end"),
    (4, 5, b"\0" * 20, "holds 5 elements but its tensors expect 4"),
    (4, 4, b"", "past the end"),
])
def test_malformed_legacy_storages(tmp_path: Path, size: int, stored_count: int, data: bytes, message: str) -> None:
    with pytest.raises(TorchFormatError, match=message):
        torch_load(_legacy_tensor_file(tmp_path / "bad.pt", size, stored_count, data))


def test_not_a_torch_file(tmp_path: Path) -> None:
    path = tmp_path / "text.pt"
    path.write_bytes(b"hello, this is not a pickle")
    with pytest.raises(TorchFormatError):
        torch_load(path)
    buffer = io.BytesIO()
    pickle.dump(12345, buffer)
    path.write_bytes(buffer.getvalue())
    with pytest.raises(TorchFormatError, match="magic"):
        torch_load(path)


def test_expanded_tensor_larger_than_the_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "expanded.pt"
    torch.save({"small": torch.ones(1).expand(8), "huge": torch.ones(1).expand(1 << 40)}, path)
    with pytest.raises(TorchFormatError, match="more than the whole file"):
        torch_load(path)
    torch.save({"small": torch.arange(2.0).reshape(2, 1).expand(2, 3)}, path)
    np.testing.assert_array_equal(torch_load(path)["small"].numpy(), [[0, 0, 0], [1, 1, 1]])
