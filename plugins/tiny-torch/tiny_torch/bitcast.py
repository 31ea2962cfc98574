"""Reinterpreting the bits of a flat tinycore Tensor as another dtype (`tensor.view(torch.int32)`): tinycore's
bitcast for equal element sizes; for different sizes the elements are split into (or joined from) unsigned
integer pieces with shifts, in little-endian order as PyTorch's CPU storage has them."""
from __future__ import annotations

from tinycore import Tensor
from tinycore.dtype import DType, dtypes

_UNSIGNED = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}


def _to_unsigned(flat: Tensor) -> Tensor:
    if flat.dtype == dtypes.bool:
        return flat.cast(dtypes.uint8)
    return flat.bitcast(_UNSIGNED[flat.dtype.itemsize])


def _from_unsigned(flat: Tensor, dtype: DType) -> Tensor:
    if dtype == dtypes.bool:
        return flat != 0
    return flat.bitcast(dtype)


def reinterpret(flat: Tensor, dtype: DType) -> Tensor:
    """The bytes of the 1-d `flat` read as elements of `dtype`. A tail too short for a whole element of `dtype` is
    zero padded (its bits are past the end of any view PyTorch allows)."""
    if flat.dtype == dtype:
        return flat
    source_size, target_size = flat.dtype.itemsize, dtype.itemsize
    unsigned = _to_unsigned(flat)
    if source_size == target_size:
        return _from_unsigned(unsigned, dtype)
    if source_size > target_size:
        ratio = source_size // target_size
        mask = (1 << (8 * target_size)) - 1
        pieces = [((unsigned >> (8 * target_size * piece)) & mask).cast(_UNSIGNED[target_size])
                  for piece in range(ratio)]
        return _from_unsigned(Tensor.stack(*pieces, dim=-1).reshape(-1), dtype)
    ratio = target_size // source_size
    length = int(flat.shape[0])
    if length % ratio:
        unsigned = unsigned.pad(((0, ratio - length % ratio),))
    grouped = unsigned.reshape(-1, ratio).cast(_UNSIGNED[target_size])
    joined = grouped[:, 0]
    for piece in range(1, ratio):
        joined = joined | (grouped[:, piece] << (8 * source_size * piece))
    return _from_unsigned(joined, dtype)


def reinterpreted_length(numel: int, source: DType, target: DType) -> int:
    """How many elements of `target` the bytes of `numel` elements of `source` hold (a partial last one counted)."""
    total = numel * source.itemsize
    return -(-total // target.itemsize)
