"""Transformer ONNX operators of the standard domain: Attention (opset 23 on) and RotaryEmbedding."""
from __future__ import annotations

import math

from tinycore.dtype import DType, dtypes
from tinycore.nn.onnx.common import HALF_FLOATS, onnx_dtype, widened
from tinycore.nn.onnx.registry import onnx_op
from tinycore.tensor import Tensor

NEGATIVE_INFINITY = float("-inf")


def _heads(x: Tensor, count: int | None) -> Tensor:
    """(batch, sequence, heads * size) -> (batch, heads, sequence, size); 4-D inputs pass through."""
    if x.ndim == 4:
        return x
    if not count:
        raise ValueError("3-D Attention inputs need q_num_heads and kv_num_heads")
    return x.reshape(x.shape[0], x.shape[1], count, -1).transpose(1, 2)


def _additive(mask: Tensor, dtype: DType) -> Tensor:
    """A boolean keep-mask as 0 / -inf, or a float mask as it is."""
    return mask.where(0.0, NEGATIVE_INFINITY).cast(dtype) if mask.dtype == dtypes.bool else mask


def _window(query_length: int, key_length: int, offset: Tensor | int, left: int, right: int, causal: bool,
            device: str) -> Tensor | None:
    """The 0 / -inf bias of causality and a sliding window, aligned so the last query meets key `offset + i`."""
    if not causal and left < 0 and right < 0:
        return None
    rows = Tensor.arange(query_length, device=device).reshape(query_length, 1)
    columns = Tensor.arange(key_length, device=device).reshape(1, key_length)
    if isinstance(offset, Tensor):
        rows = rows.reshape(1, 1, query_length, 1) + offset.cast(dtypes.int32).reshape(-1, 1, 1, 1)
        columns = columns.reshape(1, 1, 1, key_length)
    else:
        rows = rows + offset
    distance = rows - columns
    allowed = Tensor.ones(*distance.shape, dtype=dtypes.bool, device=device)
    if causal:
        allowed = allowed.bitwise_and(distance >= 0)
    if left >= 0:
        allowed = allowed.bitwise_and(distance <= left)
    if right >= 0:
        allowed = allowed.bitwise_and(-distance <= right)
    return allowed.where(0.0, NEGATIVE_INFINITY)


@onnx_op("Attention", 23)
def attention(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None = None, past_key: Tensor | None = None,
              past_value: Tensor | None = None, nonpad_kv_seqlen: Tensor | None = None, is_causal: int = 0,
              kv_num_heads: int | None = None, q_num_heads: int | None = None, qk_matmul_output_mode: int = 0,
              scale: float | None = None, softcap: float = 0.0, softmax_precision: int | None = None,
              left_window_size: int = -1, right_window_size: int = -1
              ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Scaled dot-product attention with grouped KV heads, a KV cache, boolean or additive masks, causality, a
    sliding window, softcapping and per-batch valid KV lengths. Returns Y, the present key and value, and the QK
    product at the stage qk_matmul_output_mode names. 16-bit float inputs are computed in float32 and rounded once
    at the end (common.HALF_FLOATS)."""
    if q.dtype in HALF_FLOATS:
        options = dict(is_causal=is_causal, kv_num_heads=kv_num_heads, q_num_heads=q_num_heads,
                       qk_matmul_output_mode=qk_matmul_output_mode, scale=scale, softcap=softcap,
                       softmax_precision=softmax_precision, left_window_size=left_window_size,
                       right_window_size=right_window_size)
        mask = widened(attn_mask) if attn_mask is not None else None
        past = [widened(state) if state is not None else None for state in (past_key, past_value)]
        output, _, _, product = attention(widened(q), widened(k), widened(v), mask, past[0], past[1],
                                          nonpad_kv_seqlen, **options)  # type: ignore[arg-type]
        present_key = past_key.cat(k, dim=2) if past_key is not None and past_value is not None else k
        present_value = past_value.cat(v, dim=2) if past_key is not None and past_value is not None else v
        if q.ndim == 3:
            present_key, present_value = _heads(present_key, kv_num_heads), _heads(present_value, kv_num_heads)
        return output.cast(q.dtype), present_key, present_value, product.cast(q.dtype)
    three_d = q.ndim == 3
    query, key, value = _heads(q, q_num_heads), _heads(k, kv_num_heads), _heads(v, kv_num_heads)
    if past_key is not None and past_value is not None:
        key, value = past_key.cat(key, dim=2), past_value.cat(value, dim=2)
    present_key, present_value = key, value
    query_length, key_length = query.shape[2], key.shape[2]
    factor = scale if scale is not None else 1 / math.sqrt(query.shape[3])
    if query.shape[1] != key.shape[1]:
        repeats = query.shape[1] // key.shape[1]
        key, value = key.repeat_interleave(repeats, 1), value.repeat_interleave(repeats, 1)
    # the scale is split over both operands, as the reference does, so half-precision products round alike
    root = math.sqrt(factor)
    scores = (query * root).matmul((key * root).transpose(-1, -2))
    if softcap:
        scores = softcap * (scores / softcap).tanh()
    product = scores
    bias: Tensor | None = None
    if attn_mask is not None:
        mask = attn_mask
        if mask.shape[-1] < key_length:
            padding = [(0, 0)] * (mask.ndim - 1) + [(0, key_length - mask.shape[-1])]
            mask = mask.pad(tuple(padding), value=False if mask.dtype == dtypes.bool else NEGATIVE_INFINITY)
        bias = _additive(mask, scores.dtype)
    offset: Tensor | int = past_key.shape[2] if past_key is not None else 0
    if nonpad_kv_seqlen is not None and past_key is None:
        offset = nonpad_kv_seqlen - query_length
    window = _window(query_length, key_length, offset, left_window_size, right_window_size, bool(is_causal),
                     q.device)
    if window is not None:
        bias = window if bias is None else bias + window
    if nonpad_kv_seqlen is not None:
        valid = Tensor.arange(key_length, device=q.device).reshape(1, 1, 1, key_length) < \
            nonpad_kv_seqlen.reshape(-1, 1, 1, 1)
        padding_bias = valid.where(0.0, NEGATIVE_INFINITY)
        bias = padding_bias if bias is None else bias + padding_bias
    biased = scores + bias if bias is not None else scores
    if qk_matmul_output_mode == 2:
        product = biased
    work = biased.cast(onnx_dtype(softmax_precision, "Attention")) if softmax_precision else biased
    row_max = work.max(-1, keepdim=True)
    all_masked = row_max == NEGATIVE_INFINITY
    exponent = (work - all_masked.where(0.0, row_max)).exp()
    total = exponent.sum(-1, keepdim=True)
    weights = exponent / (total == 0).where(1.0, total)
    if bias is not None:
        weights = (bias.max(-1, keepdim=True) == NEGATIVE_INFINITY).where(0.0, weights)
    weights = weights.cast(q.dtype)
    if qk_matmul_output_mode == 3:
        product = weights
    output = weights.matmul(value)
    if three_d:
        output = output.transpose(1, 2).reshape(output.shape[0], output.shape[2], -1)
    return output, present_key, present_value, product.cast(q.dtype)


@onnx_op("RotaryEmbedding", 23)
def rotary_embedding(x: Tensor, cos_cache: Tensor, sin_cache: Tensor, position_ids: Tensor | None = None,
                     interleaved: int = 0, num_heads: int = 0, rotary_embedding_dim: int = 0) -> Tensor:
    """Rotary position embedding of the first rotary_embedding_dim features of each head (halves or interleaved
    pairs); x is (batch, heads, sequence, size) or (batch, sequence, heads * size)."""
    original = x.shape
    work = x.transpose(1, 2) if x.ndim == 4 else x.reshape(x.shape[0], x.shape[1], num_heads, -1)
    size = work.shape[3]
    dim = rotary_embedding_dim or size
    rotate, keep = work[..., :dim], work[..., dim:]
    if position_ids is not None:
        cos_cache, sin_cache = cos_cache[position_ids], sin_cache[position_ids]
    cos, sin = cos_cache.unsqueeze(2), sin_cache.unsqueeze(2)
    if interleaved:
        first, second = rotate[..., 0::2], rotate[..., 1::2]
    else:
        first, second = rotate[..., :dim // 2], rotate[..., dim // 2:]
    real, imaginary = cos * first - sin * second, sin * first + cos * second
    if interleaved:
        rotated = Tensor.stack(real, imaginary, dim=-1).reshape(rotate.shape)
    else:
        rotated = real.cat(imaginary, dim=-1)
    result = rotated.cat(keep, dim=-1) if keep.shape[-1] else rotated
    return result.transpose(1, 2) if len(original) == 4 else result.reshape(original)


@onnx_op("CausalConvWithState", 27)
def causal_conv_with_state(x: Tensor, weight: Tensor, bias: Tensor | None = None, past_state: Tensor | None = None,
                           activation: str = "none") -> tuple[Tensor, Tensor]:
    """A depthwise causal 1-D convolution over (batch, channels, length) continuing from `past_state` (the last
    kernel - 1 steps of the previous call, zeros by default), optionally followed by SiLU; and the new state."""
    batch, channels, _ = x.shape
    size = weight.shape[2]
    state = past_state if past_state is not None else Tensor.zeros(batch, channels, size - 1, dtype=x.dtype,
                                                                   device=x.device)
    padded = state.cat(x, dim=2) if size > 1 else x
    # a 16-bit input is convolved in float32 and rounded once (common.HALF_FLOATS)
    wide_bias = widened(bias) if bias is not None else None
    output = widened(padded).conv2d(widened(weight), wide_bias, groups=channels).cast(x.dtype)
    if activation in ("silu", "swish"):
        wide = output.cast(dtypes.float32)
        output = (wide * wide.sigmoid()).cast(x.dtype)
    return output, padded[:, :, padded.shape[2] - (size - 1):]


@onnx_op("LinearAttention", 27)
def linear_attention(query: Tensor, key: Tensor, value: Tensor, past_state: Tensor | None = None,
                     decay: Tensor | None = None, beta: Tensor | None = None, chunk_size: int = 0,
                     kv_num_heads: int = 1, q_num_heads: int = 1, scale: float = 0.0,
                     update_rule: str = "gated_delta") -> tuple[Tensor, Tensor]:
    """Recurrent linear attention over (batch, time, heads * size) inputs: a (key size x value size) state per KV
    head, decayed (gated rules), corrected toward each value (delta rules), read by each query; outputs and the
    final state. `chunk_size` is only a hint."""
    batch, steps = query.shape[0], query.shape[1]
    q = _heads(query, q_num_heads).cast(dtypes.float32)
    k = _heads(key, kv_num_heads).cast(dtypes.float32)
    v = _heads(value, kv_num_heads).cast(dtypes.float32)
    key_size, value_size = q.shape[3], v.shape[3]
    group = q_num_heads // kv_num_heads
    if decay is not None:
        decay = (decay.reshape(batch, steps, kv_num_heads, 1) if decay.shape[-1] == kv_num_heads else
                 decay.reshape(batch, steps, kv_num_heads, key_size)).transpose(1, 2).cast(dtypes.float32)
    if beta is not None:
        beta = beta.reshape(batch, steps, beta.shape[-1], 1).transpose(1, 2).cast(dtypes.float32)
    state = past_state.cast(dtypes.float32) if past_state is not None else \
        Tensor.zeros(batch, kv_num_heads, key_size, value_size, device=query.device)
    factor = scale if scale else 1 / math.sqrt(key_size)
    outputs = []
    for step in range(steps):
        k_t, v_t = k[:, :, step], v[:, :, step]
        if decay is not None:
            state = state * decay[:, :, step].exp().unsqueeze(-1)
        if beta is not None:
            retrieved = (state * k_t.unsqueeze(-1)).sum(2)
            v_t = beta[:, :, step] * (v_t - retrieved)
        state = state + k_t.unsqueeze(-1) * v_t.unsqueeze(-2)
        readable = state.repeat_interleave(group, 1) if group > 1 else state
        outputs.append(factor * (q[:, :, step].unsqueeze(-1) * readable).sum(2))
    output = Tensor.stack(*outputs, dim=2).transpose(1, 2).reshape(batch, steps, q_num_heads * value_size)
    state_dtype = past_state.dtype if past_state is not None else query.dtype
    return output.cast(query.dtype), state.cast(state_dtype)
