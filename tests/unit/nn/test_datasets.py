"""nn.datasets: the scikit-learn digits split, and the MNIST loader on small idx files written by the tests."""
from __future__ import annotations

import gzip
import hashlib
import pathlib

import numpy as np
import pytest
from sklearn.datasets import load_digits

from tinycore.dtype import dtypes
from tinycore.nn import datasets


def test_digits_split_is_held_out_and_complete() -> None:
    x_train, y_train, x_test, y_test = datasets.digits(test_fraction=0.25, seed=3)
    reference = load_digits()
    assert x_train.shape == (1348, 1, 8, 8) and x_test.shape == (449, 1, 8, 8)
    assert y_train.shape == (1348,) and y_test.shape == (449,)
    assert x_train.dtype == dtypes.float32 and y_train.dtype == dtypes.int32
    train_images, test_images = x_train.numpy(), x_test.numpy()
    assert train_images.min() >= 0.0 and train_images.max() <= 1.0
    # together the two parts are exactly the data set (as sorted rows), and no image is in both
    combined = np.concatenate([train_images, test_images]).reshape(-1, 64) * 16
    np.testing.assert_array_equal(np.sort(combined, axis=0), np.sort(reference.data, axis=0))
    np.testing.assert_array_equal(np.sort(np.concatenate([y_train.numpy(), y_test.numpy()])),
                                  np.sort(reference.target))
    first_test_image = test_images[0].reshape(64) * 16
    matches = np.flatnonzero((reference.data == first_test_image).all(axis=1))
    assert len(matches) >= 1 and reference.target[matches[0]] == y_test.numpy()[0]
    # the same seed gives the same split
    np.testing.assert_array_equal(datasets.digits(test_fraction=0.25, seed=3)[3].numpy(), y_test.numpy())
    with pytest.raises(ValueError, match="test_fraction"):
        datasets.digits(test_fraction=1.5)


def _idx_bytes(array: np.ndarray) -> bytes:
    """An idx file (big-endian header: 0, 0, type 0x08 for uint8, rank, sizes) holding `array`."""
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(size.to_bytes(4, "big") for size in array.shape)
    return header + array.astype(np.uint8).tobytes()


def _write_mnist(folder: pathlib.Path, train: int = 5, test: int = 3) -> tuple[dict[str, str], list[np.ndarray]]:
    """Small gzip idx files with the canonical names; returns their MD5s and the arrays written."""
    rng = np.random.default_rng(0)
    arrays = [rng.integers(0, 256, (train, 28, 28)), rng.integers(0, 10, (train,)),
              rng.integers(0, 256, (test, 28, 28)), rng.integers(0, 10, (test,))]
    folder.mkdir(parents=True, exist_ok=True)
    checksums = {}
    for name, array in zip(datasets.MNIST_FILES, arrays, strict=True):
        path = folder / name
        path.write_bytes(gzip.compress(_idx_bytes(array)))
        checksums[name] = hashlib.md5(path.read_bytes(), usedforsecurity=False).hexdigest()
    return checksums, arrays


def test_mnist_reads_idx_files(tmp_path: pathlib.Path) -> None:
    checksums, arrays = _write_mnist(tmp_path)
    x_train, y_train, x_test, y_test = datasets.mnist(directory=tmp_path, download=False, checksums=checksums)
    assert x_train.shape == (5, 1, 28, 28) and y_train.shape == (5,) and x_test.shape == (3, 1, 28, 28)
    assert x_train.dtype == dtypes.uint8 and y_test.dtype == dtypes.uint8
    np.testing.assert_array_equal(x_train.numpy()[:, 0], arrays[0])
    np.testing.assert_array_equal(y_train.numpy(), arrays[1])
    np.testing.assert_array_equal(x_test.numpy()[:, 0], arrays[2])
    np.testing.assert_array_equal(y_test.numpy(), arrays[3])


def test_mnist_checksum_mismatch_is_refused(tmp_path: pathlib.Path) -> None:
    checksums, _ = _write_mnist(tmp_path)
    with pytest.raises(ValueError, match="has MD5 .* expected"):
        datasets.mnist(directory=tmp_path, download=False)  # the published checksums: these files are not those
    wrong = dict(checksums, **{"t10k-labels-idx1-ubyte.gz": "0" * 32})
    with pytest.raises(ValueError, match="t10k-labels-idx1-ubyte.gz has MD5"):
        datasets.mnist(directory=tmp_path, download=False, checksums=wrong)


def test_mnist_missing_file_without_download(tmp_path: pathlib.Path) -> None:
    checksums, _ = _write_mnist(tmp_path)
    (tmp_path / "train-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(FileNotFoundError, match="train-labels-idx1-ubyte.gz is missing"):
        datasets.mnist(directory=tmp_path, download=False, checksums=checksums)


def test_mnist_downloads_missing_files_into_the_cache(tmp_path: pathlib.Path) -> None:
    """Missing files are fetched from the mirror (here a local file:// URL) and verified."""
    mirror, cache = tmp_path / "mirror", tmp_path / "cache"
    checksums, arrays = _write_mnist(mirror)
    x_train, _, _, y_test = datasets.mnist(directory=cache, base_url=mirror.as_uri(), checksums=checksums)
    assert sorted(path.name for path in cache.iterdir()) == sorted(datasets.MNIST_FILES)
    np.testing.assert_array_equal(x_train.numpy()[:, 0], arrays[0])
    np.testing.assert_array_equal(y_test.numpy(), arrays[3])


def test_read_idx_validates_the_header(tmp_path: pathlib.Path) -> None:
    good = _idx_bytes(np.arange(6).reshape(2, 3))
    (tmp_path / "good.idx").write_bytes(good)
    np.testing.assert_array_equal(datasets.read_idx(tmp_path / "good.idx"), np.arange(6).reshape(2, 3))
    (tmp_path / "short.idx").write_bytes(good[:-1])
    with pytest.raises(ValueError, match=r"shape \(2, 3\)"):
        datasets.read_idx(tmp_path / "short.idx")
    (tmp_path / "magic.idx").write_bytes(b"\x01\x02\x03\x04" + good[4:])
    with pytest.raises(ValueError, match="not an idx file"):
        datasets.read_idx(tmp_path / "magic.idx")
    (tmp_path / "big.idx").write_bytes(bytes([0, 0, 0x0C, 1]) + (2).to_bytes(4, "big") +
                                        np.array([1, -2], dtype=">i4").tobytes())
    np.testing.assert_array_equal(datasets.read_idx(tmp_path / "big.idx"), [1, -2])
