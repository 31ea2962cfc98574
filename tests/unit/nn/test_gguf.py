"""GGUF loading: files built here (by a small writer following the format description) for every supported type,
dequantized results compared with numpy references written from the ggml block layouts; metadata of every value
type; and malformed files raising GGUFFormatError."""
from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gguf_writer import BLOCKS, random_blocks, string_bytes, write_gguf

from tinycore.dtype import dtypes
from tinycore.nn.file_checks import MalformedFileError
from tinycore.nn.gguf import GGUFFormatError, gguf_load, half_bits_to_float
from tinycore.tensor import Tensor

# ---- numpy references, one block at a time, from the ggml block layouts ----

def _f16(raw: bytes, position: int) -> float:
    return float(np.frombuffer(raw[position:position + 2], dtype="<f2")[0])


def reference_block(ggml_type: int, block: bytes) -> np.ndarray:
    """The float32 values of one block."""
    if ggml_type == 2:  # Q4_0: d, 16 bytes of nibbles: low nibbles are elements 0..15, high ones 16..31
        quants = np.frombuffer(block[2:18], dtype=np.uint8).astype(np.int32)
        return ((np.concatenate([quants & 15, quants >> 4]) - 8) * _f16(block, 0)).astype(np.float32)
    if ggml_type == 3:  # Q4_1: d, m, nibbles; value = q * d + m
        quants = np.frombuffer(block[4:20], dtype=np.uint8).astype(np.int32)
        return (np.concatenate([quants & 15, quants >> 4]) * _f16(block, 0) + _f16(block, 2)).astype(np.float32)
    if ggml_type == 8:  # Q8_0: d, 32 signed bytes
        return (np.frombuffer(block[2:34], dtype=np.int8).astype(np.float32) * _f16(block, 0)).astype(np.float32)
    if ggml_type == 12:
        return _reference_q4_k(block)
    if ggml_type == 14:
        return _reference_q6_k(block)
    raise AssertionError(ggml_type)


def _reference_q4_k(block: bytes) -> np.ndarray:
    """Q4_K: d, dmin, 12 bytes of packed 6-bit scales and mins for 8 sub-blocks of 32, 128 bytes of nibbles."""
    d, dmin = _f16(block, 0), _f16(block, 2)
    scales = block[4:16]
    out = np.zeros(256, dtype=np.float32)
    for sub in range(8):
        if sub < 4:
            scale, minimum = scales[sub] & 63, scales[sub + 4] & 63
        else:
            scale = (scales[sub + 4] & 0xF) | ((scales[sub - 4] >> 6) << 4)
            minimum = (scales[sub + 4] >> 4) | ((scales[sub] >> 6) << 4)
        chunk = block[16 + 32 * (sub // 2):16 + 32 * (sub // 2) + 32]
        for index in range(32):
            quant = chunk[index] & 0xF if sub % 2 == 0 else chunk[index] >> 4
            out[32 * sub + index] = np.float32(d * scale) * quant - np.float32(dmin * minimum)
    return out


def _reference_q6_k(block: bytes) -> np.ndarray:
    """Q6_K: 128 bytes of low nibbles, 64 bytes of 2-bit high parts, 16 signed scales, d."""
    low, high = block[0:128], block[128:192]
    scales = np.frombuffer(block[192:208], dtype=np.int8)
    d = _f16(block, 208)
    out = np.zeros(256, dtype=np.float32)
    for half in range(2):
        for index in range(32):
            first, second = low[64 * half + index], low[64 * half + 32 + index]
            upper = high[32 * half + index]
            quants = [(first & 0xF) | (((upper >> 0) & 3) << 4), (second & 0xF) | (((upper >> 2) & 3) << 4),
                      (first >> 4) | (((upper >> 4) & 3) << 4), (second >> 4) | (((upper >> 6) & 3) << 4)]
            for part, quant in enumerate(quants):
                position = 128 * half + 32 * part + index
                out[position] = np.float32(d * scales[position // 16]) * (quant - 32)
    return out


def reference(ggml_type: int, raw: bytes) -> np.ndarray:
    elements, size = BLOCKS[ggml_type]
    return np.concatenate([reference_block(ggml_type, raw[start:start + size]) for start in range(0, len(raw), size)])


# ---- tests ----

@pytest.mark.parametrize(("ggml_type", "name"), [(2, "Q4_0"), (3, "Q4_1"), (8, "Q8_0"), (12, "Q4_K"), (14, "Q6_K")])
def test_quantized_types_match_the_numpy_reference(tmp_path: Path, ggml_type: int, name: str) -> None:
    rng = np.random.default_rng(ggml_type)
    elements, _ = BLOCKS[ggml_type]
    shape = (3, 2 * max(elements, 256))
    raw = random_blocks(ggml_type, shape[0] * shape[1] // elements, rng)
    path = write_gguf(tmp_path / f"{name}.gguf", [], [(name, shape, ggml_type, raw)])
    _, tensors = gguf_load(path, device="CPU")
    loaded = tensors[name]
    assert loaded.shape == shape and loaded.dtype == dtypes.float32 and loaded.device == "CPU"
    np.testing.assert_allclose(loaded.numpy(), reference(ggml_type, raw).reshape(shape), rtol=1e-6, atol=1e-6)


def test_plain_types_load_bit_exact(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    f32 = rng.standard_normal((4, 6)).astype(np.float32)
    f16 = rng.standard_normal((5,)).astype(np.float16)
    bf16 = (rng.standard_normal((2, 3)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    path = write_gguf(tmp_path / "plain.gguf", [], [("f32", (4, 6), 0, f32.tobytes()), ("f16", (5,), 1, f16.tobytes()),
                                                    ("bf16", (2, 3), 30, bf16.tobytes())])
    _, tensors = gguf_load(path, device="CPU")
    np.testing.assert_array_equal(tensors["f32"].numpy(), f32)
    assert tensors["f16"].dtype == dtypes.float16 and tensors["bf16"].dtype == dtypes.bfloat16
    np.testing.assert_array_equal(tensors["f16"].numpy().view(np.uint16), f16.view(np.uint16))
    np.testing.assert_array_equal(tensors["bf16"].bitcast(dtypes.uint16).numpy(), bf16.reshape(2, 3))


def test_metadata_of_every_value_type(tmp_path: Path) -> None:
    metadata = [("u8", 0, 200), ("i8", 1, -5), ("u16", 2, 60000), ("i16", 3, -300), ("u32", 4, 1 << 31),
                ("i32", 5, -(1 << 30)), ("f32", 6, 1.5), ("bool", 7, True), ("str", 8, "héllo"),
                ("u64", 10, 1 << 60), ("i64", 11, -(1 << 60)), ("f64", 12, 0.1),
                ("ints", 9, (5, [1, 2, 3])), ("strs", 9, (8, ["a", "", "ccc"])),
                ("nested", 9, (9, [(4, [1]), (8, ["x", "y"])])), ("general.alignment", 4, 64)]
    path = write_gguf(tmp_path / "meta.gguf", metadata, [("t", (32,), 0, np.ones(32, np.float32).tobytes())],
                      alignment=64)
    loaded, tensors = gguf_load(path, device="CPU")
    expected = {key: value for key, _, value in metadata}
    expected.update(ints=[1, 2, 3], strs=["a", "", "ccc"], nested=[[1], ["x", "y"]])
    assert loaded == expected
    np.testing.assert_array_equal(tensors["t"].numpy(), np.ones(32, np.float32))


def test_tensor_input_on_cpu_and_lazy_disk_tensors(tmp_path: Path) -> None:
    raw = random_blocks(8, 4, np.random.default_rng(3))
    path = write_gguf(tmp_path / "q8.gguf", [], [("q", (128,), 8, raw)])
    file_tensor = Tensor(np.frombuffer(path.read_bytes(), dtype=np.uint8), device="CPU")
    _, tensors = gguf_load(file_tensor)
    assert tensors["q"].device == "CPU"
    np.testing.assert_allclose(tensors["q"].numpy(), reference(8, raw), rtol=1e-6)


def test_half_bits_cover_every_float16() -> None:
    bits = np.arange(1 << 16, dtype=np.uint32)
    got = half_bits_to_float(Tensor(bits, device="CPU")).numpy()
    expected = bits.astype(np.uint16).view(np.float16).astype(np.float32)
    np.testing.assert_array_equal(got, expected)  # NaNs compare equal by position in assert_array_equal


def test_block_factors_cover_every_float16() -> None:
    """The float16 factor at the start of a block (read through the device's float16 type on CPU) as float32 for
    every bit pattern, infinities, NaNs and subnormals included."""
    from tinycore.nn.gguf import _half
    blocks = np.arange(1 << 16, dtype=np.uint16).view(np.uint8).reshape(-1, 2)
    got = _half(Tensor(blocks, device="CPU"), 0).numpy().reshape(-1)
    expected = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)
    np.testing.assert_array_equal(got, expected)


def test_file_written_by_the_gguf_package(tmp_path: Path) -> None:
    gguf = pytest.importorskip("gguf")
    from gguf.quants import dequantize
    rng = np.random.default_rng(7)
    path = tmp_path / "by_gguf.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_uint32("test.count", 7)
    writer.add_array("test.list", [1, 2, 3])
    expected = {}
    for quant in (gguf.GGMLQuantizationType.Q4_0, gguf.GGMLQuantizationType.Q4_K, gguf.GGMLQuantizationType.Q6_K):
        raw = np.frombuffer(random_blocks(int(quant), 2, rng), dtype=np.uint8).reshape(2, -1)
        writer.add_tensor(quant.name, raw, raw_dtype=quant)
        expected[quant.name] = dequantize(raw, quant)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    metadata, tensors = gguf_load(path, device="CPU")
    assert metadata["test.count"] == 7 and metadata["test.list"] == [1, 2, 3]
    for name, values in expected.items():
        np.testing.assert_allclose(tensors[name].numpy(), values.reshape(tensors[name].shape), rtol=1e-6)


def _bad(tmp_path: Path, **changes: Any) -> Path:
    tensors = [("a", (32,), 0, b"\0" * 128), ("b", (32,), 0, b"\0" * 128)]
    return write_gguf(tmp_path / "bad.gguf", changes.get("metadata", []), changes.get("tensors", tensors))


@pytest.mark.parametrize(("build", "message"), [
    (lambda path: path.write_bytes(b"GGUX" + b"\0" * 40), "magic"),
    (lambda path: path.write_bytes(b"GGUF" + struct.pack("<IQQ", 1, 0, 0)), "version 1"),
    (lambda path: path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1 << 60)), "key/value count"),
    (lambda path: path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 1 << 60, 0)), "tensor count"),
    (lambda path: path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1 << 62) + b"\0" * 16),
     "length of key 0"),
    (lambda path: path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + string_bytes("k") +
                                   struct.pack("<IIQ", 9, 4, 1 << 61)), "length of the value"),
    (lambda path: path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + string_bytes("k") + struct.pack("<I", 99)),
     "unknown value type"),
    (lambda path: path.write_bytes(b"GGUF" + struct.pack("<IQ", 3, 0)), "past the end"),
])
def test_malformed_headers(tmp_path: Path, build: Any, message: str) -> None:
    path = tmp_path / "bad.gguf"
    build(path)
    with pytest.raises(GGUFFormatError, match=message) as caught:
        gguf_load(path)
    assert isinstance(caught.value, MalformedFileError) and str(path) in str(caught.value)


@pytest.mark.parametrize(("tensors", "message"), [
    ([("a", (32,), 0, b"\0" * 128), ("a", (32,), 0, b"\0" * 128)], "appears twice"),
    ([("a", (32,), 99, b"\0" * 128)], "unsupported ggml type 99"),
    ([("a", (1 << 40,), 0, b"\0" * 128)], "needs bytes"),
    ([("a", (33,), 2, b"\0" * 128)], "not a multiple of the block size"),
])
def test_malformed_tensor_infos(tmp_path: Path, tensors: list[Any], message: str) -> None:
    with pytest.raises(GGUFFormatError, match=message):
        gguf_load(_bad(tmp_path, tensors=tensors))


def test_overlapping_and_misaligned_tensors(tmp_path: Path) -> None:
    path = _bad(tmp_path)
    raw = bytearray(path.read_bytes())
    second_offset = raw.rindex(struct.pack("<IQ", 0, 128))
    raw[second_offset + 4:second_offset + 12] = struct.pack("<Q", 96)
    path.write_bytes(bytes(raw))
    with pytest.raises(GGUFFormatError, match="overlaps"):
        gguf_load(path)
    raw[second_offset + 4:second_offset + 12] = struct.pack("<Q", 100)
    path.write_bytes(bytes(raw))
    with pytest.raises(GGUFFormatError, match="not a multiple of the alignment"):
        gguf_load(path)
    with pytest.raises(GGUFFormatError, match="alignment"):
        gguf_load(_bad(tmp_path, metadata=[("general.alignment", 4, 3)]))
