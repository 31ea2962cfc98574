"""A float32 numpy transformer for the tests: reads a GGUF file with gguf's own reader, dequantizes every tensor with
gguf.quants.dequantize, and runs llama / qwen2 / qwen3 / qwen3moe over a whole token sequence without a cache."""
from __future__ import annotations

from typing import Any

import numpy


def _field(reader: Any, key: str, default: Any = None) -> Any:
    field = reader.fields.get(key)
    if field is None:
        return default
    value = field.contents()
    return value


def load(path: str) -> tuple[dict[str, Any], dict[str, numpy.ndarray]]:
    """Metadata (the keys the reference reads) and every tensor as float32 in numpy's (row-major) shape."""
    import os
    key = (path, os.stat(path).st_mtime_ns)
    if key not in _LOADED:
        _LOADED.clear()
        _LOADED[key] = _read(path)
    return _LOADED[key]


_LOADED: dict[tuple[str, int], tuple[dict[str, Any], dict[str, numpy.ndarray]]] = {}


def _read(path: str) -> tuple[dict[str, Any], dict[str, numpy.ndarray]]:
    import gguf
    reader = gguf.GGUFReader(path)
    architecture = _field(reader, "general.architecture")
    metadata = {key: _field(reader, key) for key in reader.fields}
    metadata["architecture"] = architecture
    tensors = {}
    for tensor in reader.tensors:
        shape = tuple(int(size) for size in reversed(tensor.shape.tolist()))
        values = gguf.quants.dequantize(numpy.asarray(tensor.data), tensor.tensor_type)
        tensors[tensor.name] = values.astype(numpy.float32).reshape(shape)
    return metadata, tensors


def _rms(x: numpy.ndarray, weight: numpy.ndarray, eps: float) -> numpy.ndarray:
    return x / numpy.sqrt((x * x).mean(-1, keepdims=True) + eps) * weight


def yarn_inverse_frequencies(dim: int, base: float, factor: float, original_context: int, beta_fast: float = 32.0,
                             beta_slow: float = 1.0) -> tuple[numpy.ndarray, float]:
    """YaRN's inverse frequencies and attention scaling as transformers' rope initialisation computes them (its
    `_compute_yarn_parameters` with truncation and no explicit attention factor): the interpolated frequencies
    1 / (factor * base**(2i/d)) and the extrapolated 1 / base**(2i/d) blended by one minus a linear ramp between the
    correction dimensions of beta_fast and beta_slow rotations."""
    import math

    def correction_dim(rotations: float) -> float:
        return (dim * math.log(original_context / (rotations * 2 * math.pi))) / (2 * math.log(base))
    low = max(math.floor(correction_dim(beta_fast)), 0)
    high = min(math.ceil(correction_dim(beta_slow)), dim - 1)
    if low == high:
        high += 0.001
    linear = numpy.clip((numpy.arange(dim // 2, dtype=numpy.float64) - low) / (high - low), 0, 1)
    extrapolation_factor = 1 - linear
    position_frequencies = base ** (numpy.arange(0, dim, 2, dtype=numpy.float64) / dim)
    inverse = (1.0 / (factor * position_frequencies)) * (1 - extrapolation_factor) + \
        (1.0 / position_frequencies) * extrapolation_factor
    return inverse, 0.1 * math.log(factor) + 1.0


def _rope(x: numpy.ndarray, positions: numpy.ndarray, theta: float, interleaved: bool, factor: float,
          frequency_factors: numpy.ndarray | None, yarn: tuple[float, int, float] | None = None) -> numpy.ndarray:
    """x (T, heads, head_dim) rotated: pairs (2i, 2i+1) when interleaved, else (i, i + head_dim/2). `yarn`:
    (factor, original context, attention factor) of YaRN scaling, whose magnitude multiplies cos and sin."""
    head_dim = x.shape[-1]
    frequencies = 1.0 / theta ** (numpy.arange(0, head_dim, 2) / head_dim)
    scaling = 1.0
    if yarn is not None:
        frequencies, scaling = yarn_inverse_frequencies(head_dim, theta, yarn[0], yarn[1])
        scaling *= yarn[2]
    if frequency_factors is not None:
        frequencies = frequencies / frequency_factors
    angles = (positions[:, None] / factor) * frequencies[None, :]
    cos, sin = numpy.cos(angles)[:, None, :] * scaling, numpy.sin(angles)[:, None, :] * scaling
    if interleaved:
        first, second = x[..., 0::2], x[..., 1::2]
        out = numpy.empty_like(x)
        out[..., 0::2] = first * cos - second * sin
        out[..., 1::2] = first * sin + second * cos
        return out
    half = head_dim // 2
    first, second = x[..., :half], x[..., half:]
    return numpy.concatenate([first * cos - second * sin, second * cos + first * sin], axis=-1)


def _silu(x: numpy.ndarray) -> numpy.ndarray:
    return x / (1.0 + numpy.exp(-x))


def _softmax(x: numpy.ndarray) -> numpy.ndarray:
    shifted = numpy.exp(x - x.max(-1, keepdims=True))
    return shifted / shifted.sum(-1, keepdims=True)


def _experts(x: numpy.ndarray, weights: dict[str, numpy.ndarray], prefix: str, meta: dict[str, Any],
             architecture: str) -> numpy.ndarray:
    """Each token through its top-k experts, picked by sorting (one token at a time)."""
    used = int(meta[f"{architecture}.expert_used_count"])
    gating = int(meta.get(f"{architecture}.expert_gating_func") or 1)
    normalize = meta.get(f"{architecture}.expert_weights_norm")
    normalize = architecture == "qwen3moe" if normalize is None else bool(normalize)
    out = numpy.zeros_like(x)
    for token in range(x.shape[0]):
        logits = weights[prefix + "ffn_gate_inp.weight"] @ x[token]
        if gating == 2:
            probabilities = 1.0 / (1.0 + numpy.exp(-logits))
            ranking = probabilities + weights.get(prefix + "exp_probs_b.bias", 0.0)
        elif gating == 1:
            probabilities = ranking = _softmax(logits)
        else:
            probabilities = ranking = logits
        chosen = numpy.argsort(-ranking, kind="stable")[:used]
        gate = _softmax(logits[chosen]) if gating == 3 else probabilities[chosen]
        if normalize:
            gate = gate / gate.sum()
        for expert, share in zip(chosen, gate, strict=True):
            hidden = _silu(weights[prefix + "ffn_gate_exps.weight"][expert] @ x[token]) * \
                (weights[prefix + "ffn_up_exps.weight"][expert] @ x[token])
            out[token] += share * (weights[prefix + "ffn_down_exps.weight"][expert] @ hidden)
    return out


def logits(path: str, tokens: list[int]) -> numpy.ndarray:
    """(T, vocab) logits of the model in `path` for `tokens` from position 0."""
    meta, weights = load(path)
    architecture = meta["architecture"]
    dim = int(meta[f"{architecture}.embedding_length"])
    heads = int(meta[f"{architecture}.attention.head_count"])
    kv_heads = int(meta[f"{architecture}.attention.head_count_kv"])
    head_dim = int(meta.get(f"{architecture}.attention.key_length") or dim // heads)
    eps = float(meta[f"{architecture}.attention.layer_norm_rms_epsilon"])
    theta = float(meta[f"{architecture}.rope.freq_base"])
    factor = float(meta.get(f"{architecture}.rope.scaling.factor") or 1.0)
    yarn = None
    if meta.get(f"{architecture}.rope.scaling.type") == "yarn":
        original = int(meta.get(f"{architecture}.rope.scaling.original_context_length") or
                       meta[f"{architecture}.context_length"])
        yarn = (factor, original, float(meta.get(f"{architecture}.rope.scaling.attn_factor") or 1.0))
        factor = 1.0
    layers = int(meta[f"{architecture}.block_count"])
    x = weights["token_embd.weight"][tokens]
    positions = numpy.arange(len(tokens), dtype=numpy.float64)
    length = len(tokens)
    causal = numpy.tril(numpy.ones((length, length), dtype=bool))
    for layer in range(layers):
        prefix = f"blk.{layer}."
        h = _rms(x, weights[prefix + "attn_norm.weight"], eps)
        q = h @ weights[prefix + "attn_q.weight"].T + weights.get(prefix + "attn_q.bias", 0.0)
        k = h @ weights[prefix + "attn_k.weight"].T + weights.get(prefix + "attn_k.bias", 0.0)
        v = h @ weights[prefix + "attn_v.weight"].T + weights.get(prefix + "attn_v.bias", 0.0)
        q = q.reshape(length, heads, head_dim)
        k = k.reshape(length, kv_heads, head_dim)
        v = v.reshape(length, kv_heads, head_dim)
        if prefix + "attn_q_norm.weight" in weights:
            q = _rms(q, weights[prefix + "attn_q_norm.weight"], eps)
            k = _rms(k, weights[prefix + "attn_k_norm.weight"], eps)
        interleaved = architecture == "llama"
        q = _rope(q, positions, theta, interleaved, factor, weights.get("rope_freqs.weight"), yarn)
        k = _rope(k, positions, theta, interleaved, factor, weights.get("rope_freqs.weight"), yarn)
        repeat = heads // kv_heads
        k, v = numpy.repeat(k, repeat, axis=1), numpy.repeat(v, repeat, axis=1)
        scores = numpy.einsum("thd,shd->hts", q, k) / numpy.sqrt(head_dim)
        scores = numpy.where(causal[None], scores, -numpy.inf)
        attended = numpy.einsum("hts,shd->thd", _softmax(scores), v).reshape(length, heads * head_dim)
        x = x + attended @ weights[prefix + "attn_output.weight"].T
        h = _rms(x, weights[prefix + "ffn_norm.weight"], eps)
        if prefix + "ffn_gate_inp.weight" in weights:
            x = x + _experts(h, weights, prefix, meta, architecture)
        else:
            x = x + (_silu(h @ weights[prefix + "ffn_gate.weight"].T) * (h @ weights[prefix + "ffn_up.weight"].T)) \
                @ weights[prefix + "ffn_down.weight"].T
    head = weights.get("output.weight", weights["token_embd.weight"])
    return (_rms(x, weights["output_norm.weight"], eps) @ head.T).astype(numpy.float32)
