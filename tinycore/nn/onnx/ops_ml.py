"""ai.onnx.ml operators that are plain tensor arithmetic: Binarizer and ArrayFeatureExtractor."""
from __future__ import annotations

from tinycore.dtype import dtypes
from tinycore.nn.onnx.registry import onnx_op
from tinycore.tensor import Tensor

ML = "ai.onnx.ml"


@onnx_op("Binarizer", 1, domain=ML)
def binarizer(x: Tensor, threshold: float = 0.0) -> Tensor:
    """1 where x exceeds the threshold, else 0, in x's dtype."""
    return (x > threshold).cast(x.dtype)


@onnx_op("ArrayFeatureExtractor", 1, domain=ML)
def array_feature_extractor(x: Tensor, indices: Tensor) -> Tensor:
    """The entries of x's last axis at `indices` (a 1-D x gives a (1, count) result)."""
    picked = x[..., indices.reshape(-1).cast(dtypes.int64)]
    return picked.reshape(1, -1) if x.ndim == 1 else picked
