"""Tensor-level properties of UOps: shape, device and the movement-op constructors (a mixin of UOp)."""
from __future__ import annotations


class ShapeMixin:
    """Shape and device inference and movement constructors for tensor-level UOps."""

    __slots__ = ()
