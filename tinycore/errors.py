"""Exception types for bad arguments to Tensor operations, matching what tinygrad (and torch) raise.

tinygrad raises RuntimeError for shapes that do not fit an operation (as torch does), IndexError for shapes that do
not broadcast and for axes out of range, and AttributeError for a dtype name it does not know. Earlier tinycore
raised ValueError and TypeError for the same mistakes, so each class here derives from both: `except RuntimeError`
(ported tinygrad code) and `except ValueError` (existing tinycore code) both catch it.
"""
from __future__ import annotations


class ShapeError(RuntimeError, ValueError):
    """Shapes that do not fit an operation: cat, matmul, reshape, permute, flip, pad, roll, gather, scatter, conv and
    pooling windows, stack, loss targets."""


class BroadcastError(IndexError, RuntimeError, ValueError):
    """Shapes that cannot be broadcast together (tinygrad: IndexError "shape mismatch"; torch: RuntimeError)."""


class ArgumentError(RuntimeError, ValueError):
    """An argument value an operation cannot take (linspace steps, einsum formulas, one_hot classes)."""


class DTypeMismatchError(RuntimeError, TypeError):
    """A dtype an operation cannot take (one_hot of floats, an integer raised to a negative integer power)."""


class DimensionError(IndexError, ShapeError):
    """An axis the tensor does not have, where torch raises RuntimeError and tinygrad IndexError (cat of
    zero-dimensional tensors)."""


class UnsupportedModeError(NotImplementedError, ValueError):
    """A mode an operation does not offer (pad's mode names, circular padding with negative amounts): tinygrad and
    torch raise NotImplementedError."""


class ArgumentAssertionError(AssertionError, ValueError):
    """An argument tinygrad rejects with an assert (multinomial's weights of rank 0 or 3+, a sample count of zero,
    more samples than weights without replacement): AssertionError for ported tinygrad code, ValueError for tinycore
    code written before."""


class UnknownDTypeError(AttributeError, TypeError):
    """A dtype given by a name (or an object) that is not a dtype (tinygrad: AttributeError from `dtypes`)."""
