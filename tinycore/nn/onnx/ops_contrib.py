"""com.microsoft contrib operators that exported and optimized transformer models carry: Attention,
SkipLayerNormalization, FastGelu, Gelu, BiasGelu, QuickGelu, FusedMatMul, BiasAdd, and the simplified (RMS)
normalizations; plus the LayerNormalization that onnxruntime accepts in the standard domain before opset 17.
"""
from __future__ import annotations

import math

from tinycore.dtype import dtypes
from tinycore.nn.onnx.common import axis_of
from tinycore.nn.onnx.ops_nn import layer_normalization
from tinycore.nn.onnx.registry import onnx_op
from tinycore.tensor import Tensor

MICROSOFT = "com.microsoft"


def _tanh_gelu(x: Tensor) -> Tensor:
    return 0.5 * x * (1 + (math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)).tanh())


@onnx_op("FastGelu", 1, domain=MICROSOFT)
def fast_gelu(x: Tensor, bias: Tensor | None = None) -> Tensor:
    """The tanh approximation of GELU of x (+ bias)."""
    return _tanh_gelu(x + bias if bias is not None else x)


@onnx_op("Gelu", 1, domain=MICROSOFT)
def gelu(x: Tensor) -> Tensor:
    """Exact (erf) GELU."""
    return 0.5 * x * (1 + (x / math.sqrt(2)).erf())


@onnx_op("BiasGelu", 1, domain=MICROSOFT)
def bias_gelu(x: Tensor, bias: Tensor) -> Tensor:
    """Exact GELU of x + bias."""
    return gelu(x + bias)


@onnx_op("QuickGelu", 1, domain=MICROSOFT)
def quick_gelu(x: Tensor, alpha: float = 1.702) -> Tensor:
    """x * sigmoid(alpha * x)."""
    return x * (alpha * x).sigmoid()


@onnx_op("BiasAdd", 1, domain=MICROSOFT)
def bias_add(x: Tensor, bias: Tensor, skip: Tensor) -> Tensor:
    """x + bias + skip."""
    return x + bias + skip


@onnx_op("FusedMatMul", 1, domain=MICROSOFT)
def fused_matmul(a: Tensor, b: Tensor, alpha: float = 1.0,
                 transA: int = 0, transB: int = 0,  # noqa: N803 (ONNX's attribute names)
                 transBatchA: int = 0, transBatchB: int = 0) -> Tensor:  # noqa: N803
    """alpha * A' @ B' with the last two axes of either operand optionally swapped."""
    if transBatchA or transBatchB:
        raise NotImplementedError("FusedMatMul with transBatchA/transBatchB is not supported")
    left = a.transpose(-1, -2) if transA else a
    right = b.transpose(-1, -2) if transB else b
    product = left.matmul(right)
    return product * alpha if alpha != 1.0 else product


def _normalized(x: Tensor, gamma: Tensor, beta: Tensor | None, epsilon: float, simplified: bool
                ) -> tuple[Tensor, Tensor, Tensor]:
    work = x.cast(dtypes.float32)
    if simplified:
        mean = Tensor.zeros(*work.shape[:-1], 1, device=x.device)
        inverse = (work * work).mean(-1, keepdim=True).add(epsilon).rsqrt()
        y = work * inverse
    else:
        mean = work.mean(-1, keepdim=True)
        inverse = ((work - mean) ** 2).mean(-1, keepdim=True).add(epsilon).rsqrt()
        y = (work - mean) * inverse
    y = y.cast(x.dtype) * gamma
    return (y + beta if beta is not None else y), mean, inverse


@onnx_op("SkipLayerNormalization", 1, domain=MICROSOFT)
def skip_layer_normalization(x: Tensor, skip: Tensor, gamma: Tensor, beta: Tensor | None = None,
                             bias: Tensor | None = None, epsilon: float = 1e-12
                             ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """LayerNorm(x + skip + bias) * gamma + beta over the last axis; also mean, inverse deviation and the sum."""
    total = x + skip + (bias if bias is not None else 0)
    y, mean, inverse = _normalized(total, gamma, beta, epsilon, simplified=False)
    return y, mean, inverse, total


@onnx_op("SkipSimplifiedLayerNormalization", 1, domain=MICROSOFT)
def skip_simplified_layer_normalization(x: Tensor, skip: Tensor, gamma: Tensor, bias: Tensor | None = None,
                                        epsilon: float = 1e-12) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """RMSNorm(x + skip + bias) * gamma over the last axis; also mean (zero), inverse RMS and the sum."""
    total = x + skip + (bias if bias is not None else 0)
    y, mean, inverse = _normalized(total, gamma, None, epsilon, simplified=True)
    return y, mean, inverse, total


@onnx_op("SimplifiedLayerNormalization", 1)
def simplified_layer_normalization(x: Tensor, scale: Tensor, axis: int = -1, epsilon: float = 1e-5,
                                   stash_type: int = 1) -> tuple[Tensor, Tensor]:
    """RMS normalization (onnxruntime's standard-domain contrib op)."""
    axes = tuple(range(axis_of(axis, x.ndim), x.ndim))
    work = x.cast(dtypes.float32)
    inverse = (work * work).mean(axes, keepdim=True).add(epsilon).rsqrt()
    return (work * inverse).cast(x.dtype) * scale, inverse


onnx_op("LayerNormalization", 1)(layer_normalization)
onnx_op("LayerNormalization", 1, domain=MICROSOFT)(layer_normalization)


def _attention_mask(mask: Tensor, batch: int, query_length: int, total_length: int, fill: float) -> Tensor:
    """An additive (batch, 1, query, total) mask from Attention's mask_index forms: 1-D end positions, 2-D or 3-D
    0/1 keep masks, or a 4-D keep mask."""
    positions = Tensor.arange(total_length, device=mask.device)
    if mask.ndim == 1:
        ends = mask[:batch].reshape(batch, 1, 1, 1)
        keep = positions.reshape(1, 1, 1, total_length) < ends
        if mask.shape[0] == 2 * batch:
            keep = keep.bitwise_and(positions.reshape(1, 1, 1, total_length) >= mask[batch:].reshape(batch, 1, 1, 1))
    elif mask.ndim == 2:
        keep = (mask != 0).reshape(batch, 1, 1, total_length)
    elif mask.ndim == 3:
        keep = (mask != 0).reshape(batch, 1, query_length, total_length)
    else:
        keep = (mask != 0)[:, :, -query_length:, :total_length]
    return keep.where(0.0, fill)


@onnx_op("Attention", 1, domain=MICROSOFT)
def attention(x: Tensor, weights: Tensor, bias: Tensor | None = None, mask_index: Tensor | None = None,
              past: Tensor | None = None, attention_bias: Tensor | None = None,
              past_sequence_length: Tensor | None = None, num_heads: int = 1, unidirectional: int = 0,
              qkv_hidden_sizes: list[int] | None = None, scale: float = 0.0, mask_filter_value: float = -10000.0,
              do_rotary: int = 0, past_present_share_buffer: int = 0) -> tuple[Tensor, Tensor]:
    """Multi-head self-attention with the packed QKV projection: softmax(Q K^T * scale + masks) V.

    Returns the attention output (batch, sequence, value hidden) and `present` (2, batch, heads, total, head
    size): the past keys and values with this call's appended."""
    if do_rotary:
        raise NotImplementedError("Attention with do_rotary is not supported")
    batch, length = x.shape[0], x.shape[1]
    projected = x.matmul(weights) + (bias if bias is not None else 0)
    sizes = list(qkv_hidden_sizes) if qkv_hidden_sizes else [weights.shape[1] // 3] * 3
    query, key, value = projected.split(sizes, dim=-1)

    def heads(tensor: Tensor) -> Tensor:
        return tensor.reshape(batch, length, num_heads, -1).transpose(1, 2)

    query, key, value = heads(query), heads(key), heads(value)
    if past is not None:
        key, value = past[0].cat(key, dim=2), past[1].cat(value, dim=2)
    total = key.shape[2]
    head_size = query.shape[-1]
    factor = scale if scale else 1 / math.sqrt(head_size)
    scores = query.matmul(key.transpose(-1, -2)) * factor
    if mask_index is not None:
        scores = scores + _attention_mask(mask_index, batch, length, total, mask_filter_value)
    if unidirectional:
        allowed = Tensor.ones(length, total, dtype=dtypes.bool, device=x.device).tril(total - length)
        scores = allowed.where(scores, mask_filter_value)
    if attention_bias is not None:
        scores = scores + attention_bias
    output = scores.softmax(-1).matmul(value).transpose(1, 2).reshape(batch, length, -1)
    return output, Tensor.stack(key, value, dim=0)
