"""The lazy Tensor as a package: `tensor.py` holds the class, its constructor, node builders, realization and
autograd; the other modules are the mixins it is built from, grouped by concern."""
from tinycore.tensor.tensor import Tensor, canonical_device

__all__ = ["Tensor", "canonical_device"]
