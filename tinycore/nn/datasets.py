"""Data sets as Tensors: scikit-learn's bundled digits, and MNIST / Fashion-MNIST from their canonical idx files.

MNIST files live in a cache directory (`<cache_dir>/datasets/mnist` or `.../fashion-mnist`); missing files are
downloaded from the canonical mirror when `download` is true, and every file is checked against its published MD5
before it is read.
"""
from __future__ import annotations

import gzip
import hashlib
import pathlib
from typing import TYPE_CHECKING

from tinycore.dtype import dtypes
from tinycore.helpers import cache_dir
from tinycore.tensor import Tensor

if TYPE_CHECKING:
    import numpy

MNIST_FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
               "t10k-labels-idx1-ubyte.gz")
"""The four canonical files: training images and labels, test images and labels."""

MNIST_MD5 = {
    "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
    "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
    "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
    "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c"}
"""Published MD5 checksums of the MNIST files."""

FASHION_MNIST_MD5 = {
    "train-images-idx3-ubyte.gz": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
    "train-labels-idx1-ubyte.gz": "25c81989df183df01b3e8a0aad5dffbe",
    "t10k-images-idx3-ubyte.gz": "bef4ecab320f06d8554ea6380940ec79",
    "t10k-labels-idx1-ubyte.gz": "bb300cfdad3c16e7a12a480ee83cd310"}
"""Published MD5 checksums of the Fashion-MNIST files."""

MNIST_URL = "https://storage.googleapis.com/cvdf-datasets/mnist/"
FASHION_MNIST_URL = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"

_IDX_TYPES = {0x08: "u1", 0x09: "i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def digits(test_fraction: float = 0.2, seed: int = 0, device: str | None = None
           ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """scikit-learn's 1,797 8x8 handwritten digits, split into a training and a held-out test set.

    Returns (X_train, Y_train, X_test, Y_test): images float32 in [0, 1] of shape (N, 1, 8, 8) and int32 labels.
    The split is a seeded random permutation; `test_fraction` of the samples (rounded) are held out.
    """
    import numpy
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must be between 0 and 1 (exclusive), got {test_fraction}")
    pixels, targets = _digits_arrays()
    images = (pixels.astype(numpy.float32) / 16.0).reshape(-1, 1, 8, 8)
    labels = targets.astype(numpy.int32)
    order = numpy.random.default_rng(seed).permutation(len(labels))
    test_count = round(len(labels) * test_fraction)
    test_index, train_index = order[:test_count], order[test_count:]
    return (Tensor(images[train_index], device=device), Tensor(labels[train_index], device=device),
            Tensor(images[test_index], device=device), Tensor(labels[test_index], device=device))


def _digits_arrays() -> tuple[numpy.ndarray, numpy.ndarray]:
    """The digits' pixels (1797, 64) and labels (1797,), read from the file scikit-learn ships.

    Importing sklearn.datasets pulls in scipy and takes about 1.5 s, most of a demo's cold start; the package's own
    CSV (64 pixel columns, then the label) is found without importing the package and read with numpy. Where that
    file is not where scikit-learn 1.x keeps it, load_digits reads it.
    """
    import importlib.util

    import numpy
    specification = importlib.util.find_spec("sklearn")
    if specification is None:
        raise ModuleNotFoundError("the digits data set ships with scikit-learn: pip install scikit-learn")
    for folder in specification.submodule_search_locations or ():
        path = pathlib.Path(folder) / "datasets" / "data" / "digits.csv.gz"
        if path.is_file():
            with gzip.open(path, "rt", encoding="utf-8") as handle:
                table = numpy.loadtxt(handle, delimiter=",")
            return table[:, :-1], table[:, -1].astype(numpy.int64)
    from sklearn.datasets import load_digits
    bunch = load_digits()
    return bunch.data, bunch.target


def _md5(path: pathlib.Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def read_idx(path: str | pathlib.Path) -> numpy.ndarray:
    """The array stored in an idx file (gzip-compressed when the name ends in .gz), checked against its header."""
    import numpy
    path = pathlib.Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as handle:
            data = handle.read()
    except OSError as error:
        raise ValueError(f"{path}: cannot read the idx file ({error})") from None
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _IDX_TYPES:
        raise ValueError(f"{path}: not an idx file (its magic number is {data[:4].hex() or 'missing'})")
    rank = data[3]
    header_size = 4 + 4 * rank
    if len(data) < header_size:
        raise ValueError(f"{path}: the idx header needs {header_size} bytes, the file has {len(data)}")
    shape = tuple(int.from_bytes(data[4 + 4 * axis:8 + 4 * axis], "big") for axis in range(rank))
    element = numpy.dtype(_IDX_TYPES[data[2]])
    expected = header_size + int(numpy.prod(shape, dtype=numpy.int64)) * element.itemsize
    if len(data) != expected:
        raise ValueError(f"{path}: the idx header says shape {shape} ({expected} bytes in all), the file has "
                         f"{len(data)} bytes")
    return numpy.frombuffer(data, dtype=element, offset=header_size).reshape(shape).astype(element.newbyteorder("="))


def _fetch(url: str, destination: pathlib.Path) -> None:
    """Download `url` to `destination` (through a temporary file, so a failed download leaves nothing)."""
    import shutil
    import urllib.request  # with http and ssl, a tenth of `import tinycore`: only a download needs it
    destination.parent.mkdir(parents=True, exist_ok=True)
    partial = destination.with_name(destination.name + ".part")
    try:
        with urllib.request.urlopen(url, timeout=60) as response, open(partial, "wb") as handle:
            shutil.copyfileobj(response, handle)
    except OSError as error:
        partial.unlink(missing_ok=True)
        raise RuntimeError(f"downloading {url} to {destination} failed ({error}); place the file there by hand "
                           "or check the network") from None
    partial.replace(destination)


def mnist(device: str | None = None, fashion: bool = False, directory: str | pathlib.Path | None = None,
          download: bool = True, base_url: str | None = None, checksums: dict[str, str] | None = None
          ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """MNIST (or Fashion-MNIST) as (X_train, Y_train, X_test, Y_test) uint8 Tensors.

    Images have shape (N, 1, rows, cols), labels (N,). Files are read from `directory` (default: the cache
    directory's datasets/mnist or datasets/fashion-mnist); missing ones are downloaded from `base_url` (the
    canonical mirror by default) when `download` is true. Each file must match its MD5 in `checksums` (the
    published checksums by default); a mismatch raises and the file is left for inspection.
    """
    name = "fashion-mnist" if fashion else "mnist"
    folder = pathlib.Path(directory) if directory is not None else cache_dir() / "datasets" / name
    expected = checksums if checksums is not None else (FASHION_MNIST_MD5 if fashion else MNIST_MD5)
    url = base_url if base_url is not None else (FASHION_MNIST_URL if fashion else MNIST_URL)
    arrays = []
    for file_name in MNIST_FILES:
        path = folder / file_name
        if not path.is_file():
            if not download:
                raise FileNotFoundError(f"{name}: {path} is missing; put the canonical {file_name} there or call "
                                        "with download=True")
            _fetch(url.rstrip("/") + "/" + file_name, path)
        if file_name not in expected:
            raise KeyError(f"{name}: no checksum given for {file_name}")
        found = _md5(path)
        if found != expected[file_name]:
            raise ValueError(f"{name}: {path} has MD5 {found}, expected {expected[file_name]}: the file is corrupt or "
                             "not the canonical one; delete it to download it again")
        arrays.append(read_idx(path))
    train_images, train_labels, test_images, test_labels = arrays
    for images, labels, split in ((train_images, train_labels, "train"), (test_images, test_labels, "test")):
        if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
            raise ValueError(f"{name}: the {split} files hold images {images.shape} and labels {labels.shape}; "
                             "expected (N, rows, cols) images and N labels")
    return (Tensor(train_images[:, None], device=device, dtype=dtypes.uint8),
            Tensor(train_labels, device=device, dtype=dtypes.uint8),
            Tensor(test_images[:, None], device=device, dtype=dtypes.uint8),
            Tensor(test_labels, device=device, dtype=dtypes.uint8))
