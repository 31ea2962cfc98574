"""Tests of Tensor.qr/svd, random bits, Keccak hashing, const, image aliases, fetch and the unsupported names."""
from __future__ import annotations

import gzip
import hashlib
import pathlib

import numpy as np
import pytest
import torch

import tinycore
from tinycore import Tensor, dtypes

RNG = np.random.default_rng(1234)


# ---- linear algebra ----

@pytest.mark.parametrize("shape", [(3, 2), (4, 4), (2, 3)])
def test_qr_matches_numpy(shape: tuple[int, int]) -> None:
    matrix = RNG.standard_normal(shape).astype(np.float32)
    orthogonal, upper = (result.numpy() for result in Tensor(matrix).qr())
    expected_q, expected_r = np.linalg.qr(matrix, mode="complete")
    assert orthogonal.shape == expected_q.shape and upper.shape == expected_r.shape
    np.testing.assert_allclose(orthogonal @ upper, matrix, atol=1e-5)
    np.testing.assert_allclose(orthogonal.T @ orthogonal, np.eye(shape[0]), atol=1e-5)
    np.testing.assert_allclose(np.abs(upper), np.abs(expected_r), atol=1e-5)
    np.testing.assert_array_equal(np.tril(upper, -1), 0)
    signs = np.sign(np.diag(expected_r)) * np.sign(np.diag(upper))
    count = min(shape)
    np.testing.assert_allclose(orthogonal[:, :count] * signs, expected_q[:, :count], atol=1e-5)


def test_qr_batched_float64() -> None:
    matrices = RNG.standard_normal((2, 3, 3))
    orthogonal, upper = (result.numpy() for result in Tensor(matrices).qr())
    np.testing.assert_allclose(orthogonal @ upper, matrices, atol=1e-12)
    np.testing.assert_allclose(np.abs(upper), np.abs(np.linalg.qr(matrices)[1]), atol=1e-12)


@pytest.mark.parametrize("shape", [(3, 2), (4, 4), (2, 3)])
@pytest.mark.parametrize("full_matrices", [True, False])
def test_svd_matches_numpy(shape: tuple[int, int], full_matrices: bool) -> None:
    matrix = RNG.standard_normal(shape).astype(np.float32)
    left, values, right = (result.numpy() for result in Tensor(matrix).svd(full_matrices=full_matrices))
    expected_left, expected_values, expected_right = np.linalg.svd(matrix, full_matrices=full_matrices)
    assert (left.shape, values.shape, right.shape) == (expected_left.shape, expected_values.shape,
                                                       expected_right.shape)
    np.testing.assert_allclose(values, expected_values, atol=1e-5)
    count = min(shape)
    np.testing.assert_allclose((left[:, :count] * values) @ right[:count], matrix, atol=1e-5)
    np.testing.assert_allclose(left.T @ left, np.eye(left.shape[1]), atol=1e-5)
    np.testing.assert_allclose(right @ right.T, np.eye(right.shape[0]), atol=1e-5)
    signs = np.sign(np.sum(left[:, :count] * expected_left[:, :count], axis=0))
    np.testing.assert_allclose(left[:, :count] * signs, expected_left[:, :count], atol=1e-4)


def test_svd_rank_deficient_matches_torch() -> None:
    matrix = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    left, values, right = (result.numpy() for result in Tensor(matrix).svd())
    np.testing.assert_allclose(values, torch.linalg.svdvals(torch.tensor(matrix)).numpy(), atol=1e-10)
    np.testing.assert_allclose((left[:, :3] * values) @ right, matrix, atol=1e-10)
    np.testing.assert_allclose(left.T @ left, np.eye(4), atol=1e-10)


def test_linalg_bad_input() -> None:
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        Tensor([1.0, 2.0]).qr()
    with pytest.raises(TypeError, match="floating point"):
        Tensor([[1, 2], [3, 4]]).svd()


# ---- random bits ----
# Tensor.threefry's known answers: on each device in tinycore/testing/test_ops.py.

def test_threefry_rejects_non_uint64() -> None:
    with pytest.raises(TypeError, match="uint64"):
        Tensor([1, 2], dtype=dtypes.int32).threefry(Tensor([1], dtype=dtypes.uint64))


def test_random_bits_counter_offsets() -> None:
    # tinygrad's stream: a key derived by encrypting the counter (low, high), then words i and i + half of the
    # encrypted pairs (i, i + half); the counter's low word carries into the high word
    key = Tensor([0x13198A2E, 0x03707344], dtype=dtypes.uint32)
    bits = Tensor.random_bits(key, Tensor([0xFFFFFFFF, 0], dtype=dtypes.uint32), 3)
    assert bits.dtype == dtypes.uint32 and bits.shape == (3,)
    packed_key = Tensor([0x0370734413198A2E], dtype=dtypes.uint64)
    derived = Tensor([0x00000000FFFFFFFF], dtype=dtypes.uint64).threefry(packed_key)
    pairs = Tensor([0 | (2 << 32), 1 | (3 << 32)], dtype=dtypes.uint64).threefry(derived)
    words = pairs.tolist()
    assert bits.tolist() == [words[0] & 0xFFFFFFFF, words[1] & 0xFFFFFFFF, words[0] >> 32]
    with pytest.raises(ValueError, match="shape"):
        Tensor.random_bits(Tensor([1], dtype=dtypes.uint32), Tensor([0, 0], dtype=dtypes.uint32), 3)


# ---- hashing ----

def test_keccak_sha3_256_matches_hashlib() -> None:
    for message in (b"abc", bytes(range(200))):
        digest = Tensor(message, dtype=dtypes.uint8).keccak()
        assert digest.dtype == dtypes.uint8 and digest.shape == (32,)
        assert bytes(digest.tolist()) == hashlib.sha3_256(message).digest()


def test_keccak_batched_configs_match_hashlib() -> None:
    rows = [b"abcd", b"wxyz"]
    data = Tensor([list(row) for row in rows], dtype=dtypes.uint8)
    sha512 = data.keccak("sha3_512").numpy()
    shake = data.keccak("shake_128").numpy()
    for index, row in enumerate(rows):
        assert sha512[index].tobytes() == hashlib.sha3_512(row).digest()
        assert shake[index].tobytes() == hashlib.shake_128(row).digest(16)


def test_keccak_bad_input() -> None:
    with pytest.raises(TypeError, match="uint8"):
        Tensor([1.0, 2.0]).keccak()
    with pytest.raises(ValueError, match="unknown keccak"):
        Tensor(b"ab", dtype=dtypes.uint8).keccak("md5")


def test_hash_is_sha3_prefix_of_raw_bytes() -> None:
    values = np.array([[1.5, -2.0], [3.25, 0.0]], dtype=np.float32)
    digest = Tensor(values).hash()
    assert digest.shape == (16,) and digest.dtype == dtypes.uint8
    assert bytes(digest.tolist()) == hashlib.sha3_256(values.tobytes()).digest()[:16]


# ---- const and image aliases ----

def test_const() -> None:
    value = Tensor.const(2.5)
    assert value.shape == () and value.dtype == dtypes.default_float and value.item() == 2.5
    assert Tensor.const(3, dtypes.int16).dtype == dtypes.int16
    with pytest.raises(TypeError, match="Python number"):
        Tensor.const([1, 2])  # type: ignore[arg-type]


def test_image_conv2d_matches_torch() -> None:
    images = RNG.standard_normal((1, 4, 5, 5)).astype(np.float32)
    weight = RNG.standard_normal((6, 2, 3, 3)).astype(np.float32)
    bias = RNG.standard_normal(6).astype(np.float32)
    result = Tensor(images).image_conv2d(Tensor(weight), Tensor(bias), groups=2, padding=1, stride=2).numpy()
    expected = torch.nn.functional.conv2d(torch.tensor(images), torch.tensor(weight), torch.tensor(bias), groups=2,
                                          padding=1, stride=2).numpy()
    np.testing.assert_allclose(result, expected, atol=1e-4)


def test_image_dot_matches_numpy() -> None:
    left = RNG.standard_normal((3, 4)).astype(np.float32)
    right = RNG.standard_normal((4, 2)).astype(np.float32)
    np.testing.assert_allclose(Tensor(left).image_dot(Tensor(right)).numpy(), left @ right, atol=1e-5)


# ---- fetch ----

def test_fetch_file_url(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TINYCORE_CACHE_DIR", str(tmp_path / "cache"))
    source = tmp_path / "payload.bin"
    source.write_bytes(b"hello tinycore")
    path = tinycore.fetch(source.as_uri(), name="payload.bin", subdir="tests",
                          sha256=hashlib.sha256(b"hello tinycore").hexdigest())
    assert path == tmp_path / "cache" / "downloads" / "tests" / "payload.bin"
    assert path.read_bytes() == b"hello tinycore"
    source.write_bytes(b"changed")
    assert tinycore.fetch(source.as_uri(), name="payload.bin", subdir="tests").read_bytes() == b"hello tinycore"
    assert tinycore.fetch(source.as_uri(), name="fresh.bin", allow_caching=False).read_bytes() == b"changed"


def test_fetch_gunzip_and_errors(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TINYCORE_CACHE_DIR", str(tmp_path / "cache"))
    packed = tmp_path / "data.gz"
    packed.write_bytes(gzip.compress(b"unpacked"))
    assert tinycore.fetch(packed.as_uri(), gunzip=True).read_bytes() == b"unpacked"
    with pytest.raises(ValueError, match="SHA-256 mismatch"):
        tinycore.fetch(packed.as_uri(), name="other", sha256="0" * 64)
    with pytest.raises(ConnectionError, match="could not download"):
        tinycore.fetch((tmp_path / "missing.bin").as_uri())


# ---- names the engine cannot provide ----

@pytest.mark.parametrize("call", [
    lambda tensor: tensor.as_param(0),
    lambda tensor: tensor.custom_kernel(fxn=lambda *args: None),
    lambda tensor: tensor.call(fxn=tensor),
    lambda tensor: tensor.callify(),
    lambda tensor: tensor.decode_hevc_frame(0, (2, 2), tensor),
])
def test_unavailable_features_raise(call: object) -> None:
    tensor = Tensor([1.0, 2.0])
    with pytest.raises(NotImplementedError, match="not available in tinycore"):
        call(tensor)  # type: ignore[operator]


def test_function_unavailable() -> None:
    with pytest.raises(NotImplementedError, match="TinyJit"):
        tinycore.function(lambda tensor: tensor)
