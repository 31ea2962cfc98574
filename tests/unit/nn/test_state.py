"""nn.state: state dicts, load_state_dict errors, and safetensors files (round trip, interop with the safetensors
package, malformed files)."""
from __future__ import annotations

import json
import pathlib
from typing import Any

import numpy as np
import pytest
import safetensors
import safetensors.numpy
import safetensors.torch
import torch

from tinycore import nn
from tinycore.dtype import dtypes
from tinycore.nn.state import (
    SafetensorsError,
    get_parameters,
    get_state_dict,
    load_state_dict,
    safe_load,
    safe_load_metadata,
    safe_save,
)
from tinycore.tensor import Tensor


class SmallNet:
    """A model with nested layers, a list and a dict, like the ones users write."""

    def __init__(self) -> None:
        self.conv = nn.Conv2d(1, 2, 3)
        self.norm = nn.BatchNorm2d(2)
        self.layers = [nn.Linear(8, 4), nn.Linear(4, 2, bias=False)]
        self.extra = {"scale": Tensor([2.0])}
        self.name = "not a tensor"


def test_get_state_dict_names_and_parameters() -> None:
    model = SmallNet()
    state = get_state_dict(model)
    assert list(state) == ["conv.weight", "conv.bias", "norm.weight", "norm.bias", "norm.num_batches_tracked",
                           "norm.running_mean", "norm.running_var", "layers.0.weight", "layers.0.bias",
                           "layers.1.weight", "extra.scale"]
    assert state["layers.0.weight"] is model.layers[0].weight
    assert get_parameters(model) == list(state.values())
    assert get_state_dict(model, prefix="model.")["model.conv.weight"] is model.conv.weight


def test_get_state_dict_survives_reference_cycles() -> None:
    first, second = nn.Linear(2, 2), nn.Linear(2, 2)
    first.partner, second.partner = second, first  # type: ignore[attr-defined]
    state = get_state_dict(first)
    assert state["weight"] is first.weight and state["partner.weight"] is second.weight


def test_safetensors_round_trip_through_a_model(tmp_path: pathlib.Path) -> None:
    model, other = SmallNet(), SmallNet()
    path = tmp_path / "model.safetensors"
    safe_save(get_state_dict(model), path, metadata={"format": "tinycore", "epoch": "3"})
    loaded = safe_load(path)
    load_state_dict(other, loaded)
    for key, tensor in get_state_dict(model).items():
        np.testing.assert_array_equal(get_state_dict(other)[key].numpy(), tensor.numpy(), err_msg=key)
    _, header_length, header = safe_load_metadata(path)
    assert header["__metadata__"] == {"format": "tinycore", "epoch": "3"}
    assert header_length % 8 == 0 and header["conv.weight"]["dtype"] == "F32"


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int8", "uint8", "int16", "int32", "int64",
                                   "uint32", "bool"])
def test_interop_with_the_safetensors_package(tmp_path: pathlib.Path, dtype: str) -> None:
    rng = np.random.default_rng(0)
    array = (rng.standard_normal((3, 4)) * 50).astype(dtype)
    scalar = np.asarray(rng.standard_normal(()) * 50).astype(dtype)
    written_by_them = tmp_path / "theirs.safetensors"
    safetensors.numpy.save_file({"array": array, "scalar": scalar, "empty": np.zeros((0, 3), dtype)},
                                str(written_by_them))
    ours = safe_load(written_by_them)
    np.testing.assert_array_equal(ours["array"].numpy(), array)
    np.testing.assert_array_equal(ours["scalar"].numpy(), scalar)
    assert ours["empty"].shape == (0, 3)
    written_by_us = tmp_path / "ours.safetensors"
    safe_save(ours, written_by_us)
    theirs = safetensors.numpy.load_file(str(written_by_us))
    np.testing.assert_array_equal(theirs["array"], array)
    assert theirs["scalar"].shape == () and theirs["scalar"] == scalar


def test_bfloat16_interop(tmp_path: pathlib.Path) -> None:
    values = torch.tensor([[1.5, -2.25, 3.0e10], [0.0, -0.0, 7.0]], dtype=torch.bfloat16)
    path = tmp_path / "bf16.safetensors"
    safetensors.torch.save_file({"values": values}, str(path))
    loaded = safe_load(path)["values"]
    assert loaded.dtype == dtypes.bfloat16
    np.testing.assert_array_equal(loaded.numpy(), values.float().numpy())
    copy_path = tmp_path / "copy.safetensors"
    safe_save({"values": loaded}, copy_path)
    assert torch.equal(safetensors.torch.load_file(str(copy_path))["values"], values)


def test_metadata_must_be_strings(tmp_path: pathlib.Path) -> None:
    with pytest.raises(SafetensorsError, match="metadata must map strings to strings"):
        safe_save({"x": Tensor([1.0])}, tmp_path / "x.safetensors", metadata={"epoch": 3})
    safe_save({"x": Tensor([1.0])}, tmp_path / "x.safetensors", metadata={"epoch": "3"})
    assert safetensors.safe_open(str(tmp_path / "x.safetensors"), "np").metadata() == {"epoch": "3"}


# ---- load_state_dict errors ----

def test_load_state_dict_missing_and_extra_keys() -> None:
    model = nn.Linear(3, 2)
    with pytest.raises(KeyError, match=r"missing keys .*\['bias'\]"):
        load_state_dict(model, {"weight": Tensor.ones(2, 3)})
    with pytest.raises(KeyError, match=r"unexpected keys .*\['other'\]"):
        load_state_dict(model, {"weight": Tensor.ones(2, 3), "bias": Tensor.ones(2), "other": Tensor.ones(1)})
    loaded = load_state_dict(model, {"weight": Tensor.full((2, 3), 4.0)}, strict=False, verbose=False)
    assert loaded == [model.weight]
    np.testing.assert_array_equal(model.weight.numpy(), np.full((2, 3), 4.0))


def test_load_state_dict_wrong_shape_and_dtype_name_the_key() -> None:
    model = nn.Linear(3, 2)
    with pytest.raises(ValueError, match=r"Shape mismatch in layer `bias`: Expected shape \(2,\), but found \(3,\)"):
        load_state_dict(model, {"weight": Tensor.ones(2, 3), "bias": Tensor.ones(3)})


def test_load_state_dict_consume() -> None:
    model = nn.Linear(1, 1)
    state = {"weight": Tensor([[3.0]]), "bias": Tensor([1.0])}
    load_state_dict(model, state, consume=True)
    assert state == {}
    np.testing.assert_array_equal(model.weight.numpy(), [[3.0]])
    np.testing.assert_array_equal(model.bias.numpy() if model.bias is not None else None, [1.0])


# ---- malformed files ----

def _write(path: pathlib.Path, header: Any, data: bytes = b"", header_length: int | None = None) -> pathlib.Path:
    encoded = header if isinstance(header, bytes) else json.dumps(header).encode()
    length = len(encoded) if header_length is None else header_length
    path.write_bytes(length.to_bytes(8, "little") + encoded + data)
    return path


GOOD_ENTRY = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}

MALFORMED: dict[str, tuple[Any, bytes, int | None, str]] = {
    "header_length_too_big": ({"x": GOOD_ENTRY}, bytes(8), 10_000, "header length 10000 exceeds"),
    "not_json": (b"{not json", b"", None, "not valid UTF-8 JSON"),
    "not_an_object": ([1, 2], b"", None, "expected an object"),
    "unknown_dtype": ({"x": {**GOOD_ENTRY, "dtype": "F7"}}, bytes(8), None, "unsupported dtype 'F7'"),
    "negative_shape": ({"x": {**GOOD_ENTRY, "shape": [-2]}}, bytes(8), None, "non-negative integers"),
    "offsets_past_end": ({"x": {**GOOD_ENTRY, "data_offsets": [0, 16]}}, bytes(8), None, "outside the 8 data bytes"),
    "size_disagrees": ({"x": {**GOOD_ENTRY, "shape": [3]}}, bytes(8), None, "needs 12"),
    "bad_offsets": ({"x": {**GOOD_ENTRY, "data_offsets": [0]}}, bytes(8), None, "expected [start, end]"),
    "missing_field": ({"x": {"dtype": "F32", "shape": [2]}}, bytes(8), None, "expected dtype, shape and"),
    "overlap": ({"x": GOOD_ENTRY, "y": {**GOOD_ENTRY, "data_offsets": [4, 12]}}, bytes(12), None, "overlaps"),
    "gap": ({"x": {**GOOD_ENTRY, "data_offsets": [4, 12]}}, bytes(12), None, "gap at byte 0"),
    "trailing_bytes": ({"x": GOOD_ENTRY}, bytes(12), None, "cover 8 data bytes but the file has 12"),
    "bad_metadata": ({"__metadata__": {"a": 1}, "x": GOOD_ENTRY}, bytes(8), None, "__metadata__ must be"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_files_raise_clear_errors(tmp_path: pathlib.Path, case: str) -> None:
    header, data, header_length, message = MALFORMED[case]
    path = _write(tmp_path / f"{case}.safetensors", header, data, header_length)
    with pytest.raises(SafetensorsError) as raised:
        safe_load(path)
    assert str(path) in str(raised.value) and message in str(raised.value)
    with pytest.raises(SafetensorsError):
        safe_load_metadata(path)


def test_truncated_and_missing_files(tmp_path: pathlib.Path) -> None:
    short = tmp_path / "short.safetensors"
    short.write_bytes(b"\x01\x02")
    with pytest.raises(SafetensorsError, match="fewer than the 8-byte header length"):
        safe_load(short)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        safe_load(tmp_path / "absent.safetensors")
    valid = tmp_path / "valid.safetensors"
    safe_save({"x": Tensor([1.0, 2.0, 3.0])}, valid)
    truncated = tmp_path / "truncated.safetensors"
    truncated.write_bytes(valid.read_bytes()[:-4])
    with pytest.raises(SafetensorsError, match="outside"):
        safe_load(truncated)


def test_safe_load_from_a_tensor_of_bytes(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "x.safetensors"
    safetensors.numpy.save_file({"x": np.arange(6, dtype=np.int32).reshape(2, 3)}, str(path))
    loaded = safe_load(Tensor(path.read_bytes()))
    np.testing.assert_array_equal(loaded["x"].numpy(), np.arange(6).reshape(2, 3))
