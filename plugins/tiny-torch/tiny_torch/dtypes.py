"""The mapping between PyTorch dtypes and tinycore DTypes, both ways."""
from __future__ import annotations

import torch

from tinycore.dtype import DType, dtypes

_TORCH_TO_TINY: dict[torch.dtype, DType] = {
    torch.bool: dtypes.bool, torch.int8: dtypes.int8, torch.uint8: dtypes.uint8, torch.int16: dtypes.int16,
    torch.uint16: dtypes.uint16, torch.int32: dtypes.int32, torch.uint32: dtypes.uint32, torch.int64: dtypes.int64,
    torch.uint64: dtypes.uint64, torch.float16: dtypes.float16, torch.bfloat16: dtypes.bfloat16,
    torch.float32: dtypes.float32, torch.float64: dtypes.float64,
}
_TINY_TO_TORCH: dict[DType, torch.dtype] = {tiny: torch_dtype for torch_dtype, tiny in _TORCH_TO_TINY.items()}


def to_tiny_dtype(dtype: torch.dtype) -> DType:
    """The tinycore DType of a PyTorch dtype; TypeError naming the supported ones when tinycore has no counterpart
    (complex and quantized dtypes)."""
    if dtype not in _TORCH_TO_TINY:
        supported = ", ".join(str(name).removeprefix("torch.") for name in _TORCH_TO_TINY)
        raise TypeError(f"the tiny device has no dtype {dtype}: tinycore supports {supported}; "
                        f"convert first, e.g. tensor.to(torch.float32)")
    return _TORCH_TO_TINY[dtype]


def to_torch_dtype(dtype: DType) -> torch.dtype:
    """The PyTorch dtype of a tinycore DType; TypeError for tinycore dtypes PyTorch lacks (fp8 variants)."""
    if dtype not in _TINY_TO_TORCH:
        raise TypeError(f"tinycore dtype {dtype} has no PyTorch counterpart on the tiny device; cast it first")
    return _TINY_TO_TORCH[dtype]
