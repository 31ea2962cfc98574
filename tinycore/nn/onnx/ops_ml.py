"""ai.onnx.ml operators that are plain tensor arithmetic (Binarizer, ArrayFeatureExtractor), and TfIdfVectorizer
over integer or string tokens."""
from __future__ import annotations

import numpy as np

from tinycore.nn.onnx.common import index_dtype, is_strings
from tinycore.nn.onnx.registry import NodeContext, onnx_op
from tinycore.tensor import Tensor

ML = "ai.onnx.ml"


@onnx_op("Binarizer", 1, domain=ML)
def binarizer(x: Tensor, threshold: float = 0.0) -> Tensor:
    """1 where x exceeds the threshold, else 0, in x's dtype."""
    return (x > threshold).cast(x.dtype)


@onnx_op("ArrayFeatureExtractor", 1, domain=ML)
def array_feature_extractor(x: Tensor, indices: Tensor) -> Tensor:
    """The entries of x's last axis at `indices` (a 1-D x gives a (1, count) result)."""
    picked = x[..., indices.reshape(-1).cast(index_dtype(indices.device))]
    return picked.reshape(1, -1) if x.ndim == 1 else picked


@onnx_op("TfIdfVectorizer", 9, strings=True, context=True)
def tfidf_vectorizer(x: Tensor | np.ndarray, max_gram_length: int, max_skip_count: int, min_gram_length: int,
                     mode: str, ngram_counts: list[int], ngram_indexes: list[int],
                     pool_int64s: list[int] | None = None, pool_strings: list[str] | None = None,
                     weights: list[float] | None = None, *, context: NodeContext) -> Tensor:
    """Counts of the pool's n-grams (with up to max_skip_count skipped tokens between items) in each row of integer
    or string tokens (pool_int64s or pool_strings), as term frequencies, IDF weights or both. Counting runs on the
    host."""
    pool: list[int] | list[str] | None = pool_int64s if pool_int64s is not None else pool_strings
    if pool is None:
        raise ValueError("TfIdfVectorizer needs pool_int64s or pool_strings")
    if is_strings(x) != (pool_strings is not None and pool_int64s is None):
        raise TypeError("TfIdfVectorizer's tokens must be strings for pool_strings and integers for pool_int64s")
    tokens = x if isinstance(x, np.ndarray) else x.numpy()
    rows = tokens.reshape(1, -1) if tokens.ndim == 1 else tokens
    # the pool lists all 1-grams, then all 2-grams...; ngram_counts gives where each length starts (in n-grams)
    bounds = list(ngram_counts) + [len(ngram_indexes)]
    lookup: dict[tuple[int | str, ...], int] = {}
    offset = 0
    for length in range(1, len(ngram_counts) + 1):
        for position in range(bounds[length - 1], bounds[length]):
            lookup[tuple(pool[offset:offset + length])] = ngram_indexes[position]
            offset += length
    width = max(ngram_indexes) + 1
    counts = np.zeros((rows.shape[0], width), dtype=np.float32)
    for row_index, row in enumerate(rows):
        for length in range(max(min_gram_length, 1), max_gram_length + 1):
            skips = range(max_skip_count + 1) if length > 1 else range(1)
            for skip in skips:
                step = skip + 1
                for first in range(len(row) - (length - 1) * step):
                    gram = tuple(row[first + item * step] if isinstance(row[first + item * step], str)
                                 else int(row[first + item * step]) for item in range(length))
                    if gram in lookup:
                        counts[row_index, lookup[gram]] += 1
    scale = np.ones(width, dtype=np.float32)
    for position, weight in enumerate(weights or []):
        scale[ngram_indexes[position]] = weight
    if mode == "IDF":
        counts = (counts > 0).astype(np.float32) * scale
    elif mode == "TFIDF":
        counts = counts * scale
    return Tensor(counts.reshape(-1) if tokens.ndim == 1 else counts, device=context.device)
