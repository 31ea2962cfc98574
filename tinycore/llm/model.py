"""The decoder-only transformer of GGUF llama, qwen2, qwen3 and qwen3moe models: RMSNorm, grouped-query attention
with RoPE (interleaved pairs for llama, whose Q/K rows llama.cpp's converter permuted for that; halves for the qwen
family) and a KV cache, SwiGLU feed-forward or a mixture of experts, and an output head (tied to the embedding
when the file has no `output.weight`).

`model(tokens, start_pos)` returns logits for every position and writes the keys and values of those positions into
the cache. `generate` runs the prompt in chunks, then one jitted decode step per token whose position is a bound
Variable, so one captured graph serves every position.
"""
from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy

from tinycore.dtype import dtypes
from tinycore.engine.jit import TinyJit
from tinycore.llm.config import TransformerConfig, UnsupportedModelError
from tinycore.llm.weights import GROUPED_TYPES, ROW_GROUP, GGUFWeight, load_gguf_weights
from tinycore.nn.gguf import GGML_TYPES
from tinycore.tensor import Tensor
from tinycore.uop.symbolic import Variable
from tinycore.uop.uop import UOp

Position = int | UOp
"""A start position: a Python int, or a bound Variable inside the jitted decode step."""


@dataclass
class RowPositions:
    """Each row's own position in a decode step of several sequences: an int32 tensor (batch,) for the attention
    masks and the rope angles, and one bound Variable per row for the cache writes."""

    tensor: Tensor
    variables: list[UOp]


PREFILL_CHUNK = 64
"""Prompt tokens run through the model at once while prefilling."""


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """x / sqrt(mean(x**2) + eps) * weight over the last axis."""
    return x * (x.square().mean(-1, keepdim=True) + eps).rsqrt() * weight


def rope_tables(config: TransformerConfig, length: int, frequency_factors: numpy.ndarray | None) -> numpy.ndarray:
    """cos and sin of position * frequency for positions [0, length): float32 (length, rope_dim // 2, 2), with the
    frequencies and magnitude of YaRN when the model scales its rope that way."""
    exponents = numpy.arange(0, config.rope_dim, 2, dtype=numpy.float64) / config.rope_dim
    frequencies = 1.0 / config.rope_theta ** exponents
    if frequency_factors is not None:  # llama3-style scaling: a divisor per frequency, stored as rope_freqs.weight
        frequencies = frequencies / frequency_factors.astype(numpy.float64)
    positions = numpy.arange(length, dtype=numpy.float64) / config.rope_linear_factor
    magnitude = 1.0
    if config.rope_yarn_factor > 1.0:
        frequencies, magnitude = yarn_frequencies(config, frequencies)
    angles = numpy.outer(positions, frequencies)
    return (numpy.stack([numpy.cos(angles), numpy.sin(angles)], axis=-1) * magnitude).astype(numpy.float32)


def yarn_frequencies(config: TransformerConfig, frequencies: numpy.ndarray) -> tuple[numpy.ndarray, float]:
    """YaRN's rotary frequencies and the magnitude that multiplies cos and sin (so attention scores by its square).

    A pair of features whose frequency turns fewer than beta_slow times over the original context is interpolated
    (its frequency divided by the factor), one that turns more than beta_fast times is kept, and the pairs between
    (bounded by whole pair indices, as llama.cpp rounds them) blend the two along a linear ramp; the magnitude is
    attn_factor * (1 + 0.1 ln(factor))."""
    factor, pairs = config.rope_yarn_factor, config.rope_dim // 2

    def pair_turning(rotations: float) -> float:
        # the pair index i whose wavelength 2*pi*theta**(2i/d) fits `rotations` times into the original context
        return config.rope_dim * math.log(config.rope_original_context / (rotations * 2 * math.pi)) / \
            (2 * math.log(config.rope_theta))
    low = max(0.0, math.floor(pair_turning(config.rope_yarn_beta_fast)))
    high = min(config.rope_dim - 1.0, math.ceil(pair_turning(config.rope_yarn_beta_slow)))
    ramp = numpy.clip((numpy.arange(pairs, dtype=numpy.float64) - low) / max(0.001, high - low), 0.0, 1.0)
    kept = 1.0 - ramp  # 1 for the fast (high-frequency) pairs, 0 for the interpolated slow ones
    blended = frequencies / factor * (1.0 - kept) + frequencies * kept
    return blended, config.rope_yarn_attention_factor * (1.0 + 0.1 * math.log(factor))


def apply_rope(x: Tensor, table: Tensor, interleaved: bool) -> Tensor:
    """Rotate the first rope_dim features of x (batch, T, heads, head_dim) by the angles in table (T, rope_dim//2, 2),
    or (batch, T, rope_dim//2, 2) for rows at positions of their own: pairs (2i, 2i+1) when interleaved, else
    (i, i + rope_dim/2)."""
    batch, length, heads, head_dim = x.shape
    half = table.shape[-2]
    rows = table.shape[0] if table.ndim == 4 else 1
    cos = table[..., 0].reshape(rows, length, 1, half)
    sin = table[..., 1].reshape(rows, length, 1, half)
    rotated, rest = x[..., :2 * half], x[..., 2 * half:]
    if interleaved:
        pairs = rotated.reshape(batch, length, heads, half, 2)
        first, second = pairs[..., 0], pairs[..., 1]
        out = (first * cos - second * sin).unsqueeze(-1).cat((first * sin + second * cos).unsqueeze(-1), dim=-1)
        out = out.reshape(batch, length, heads, 2 * half)
    else:
        first, second = rotated[..., :half], rotated[..., half:]
        out = (first * cos - second * sin).cat(second * cos + first * sin, dim=-1)
    return out if rest.shape[-1] == 0 else out.cat(rest, dim=-1)


class Block:
    """One transformer layer and its KV cache."""

    def __init__(self, config: TransformerConfig, weights: dict[str, GGUFWeight], index: int, max_context: int,
                 device: str | None, max_batch: int = 1):
        def weight(name: str) -> GGUFWeight:
            full = f"blk.{index}.{name}"
            if full not in weights:
                raise UnsupportedModelError(f"the GGUF file lacks tensor {full!r}, which a {config.architecture} "
                                            "model needs")
            return weights[full]

        def optional(name: str) -> GGUFWeight | None:
            return weights.get(f"blk.{index}.{name}")
        self.config = config
        self.attention_norm = weight("attn_norm.weight").float()
        self.query, self.key, self.value = weight("attn_q.weight"), weight("attn_k.weight"), weight("attn_v.weight")
        self.output = weight("attn_output.weight")
        self.biases = [bias.float() if bias is not None else None for bias in
                       (optional("attn_q.bias"), optional("attn_k.bias"), optional("attn_v.bias"))]
        query_norm, key_norm = optional("attn_q_norm.weight"), optional("attn_k_norm.weight")
        self.query_norm = query_norm.float() if query_norm is not None else None
        self.key_norm = key_norm.float() if key_norm is not None else None
        self.ffn_norm = weight("ffn_norm.weight").float()
        if config.experts:
            self.router = weight("ffn_gate_inp.weight")
            self.gate, self.up, self.down = (weight("ffn_gate_exps.weight"), weight("ffn_up_exps.weight"),
                                             weight("ffn_down_exps.weight"))
            bias = optional("exp_probs_b.bias")
            self.selection_bias = bias.float() if bias is not None else None
        else:
            self.gate, self.up = weight("ffn_gate.weight"), weight("ffn_up.weight")
            self.down = weight("ffn_down.weight")
        # realized one at a time: identical graphs realized together would share one buffer
        shape = (max_batch, max_context, config.kv_heads, config.head_dim)
        self.cache_keys = Tensor.zeros(*shape, device=device).contiguous()
        self.cache_keys.realize()
        self.cache_values = Tensor.zeros(*shape, device=device).contiguous()
        self.cache_values.realize()

    def attention(self, x: Tensor, start_pos: Position, rope: Tensor, valid: Tensor | None = None,
                  positions: RowPositions | None = None, slot: Position = 0) -> Tensor:
        """Grouped-query attention of x (batch, T, dim) over the cached positions and its own, after writing its
        keys and values into the cache rows [slot, slot + batch) at start_pos. `valid` (batch, max_context) bool
        marks the positions that hold tokens of each sequence (False: left padding, never attended to except by the
        padding itself). With `positions` (T = 1, slot 0), each row's token sits at its own position (start_pos is then
        their largest) and attends to the row's positions up to its own."""
        config = self.config
        batch, length, _ = x.shape
        projected = []
        for weight, bias in zip((self.query, self.key, self.value), self.biases, strict=True):
            out = weight.linear(x)
            projected.append(out + bias if bias is not None else out)
        # the three products realized together: they share x's norm and the quantized products' x operands, which
        # the keys' and values' cache writes below would otherwise each compute again
        projected[0].realize(*projected[1:])
        query = projected[0].reshape(batch, length, config.heads, config.head_dim)
        key = projected[1].reshape(batch, length, config.kv_heads, config.head_dim)
        value = projected[2].reshape(batch, length, config.kv_heads, config.head_dim)
        if self.query_norm is not None and self.key_norm is not None:
            query = rms_norm(query, self.query_norm, config.norm_eps)
            key = rms_norm(key, self.key_norm, config.norm_eps)
        query = apply_rope(query, rope, config.rope_interleaved)
        key = apply_rope(key, rope, config.rope_interleaved)
        end = start_pos + length
        rows = (slot, slot + batch)  # slot: an int, or a bound Variable in prefill
        if positions is None:
            for cache, new in ((self.cache_keys, key), (self.cache_values, value)):
                cache.shrink((rows, (start_pos, end), None, None)).assign(new).realize()  # type: ignore[arg-type]
        else:
            # each row writes its one position through a Variable of its own: a small kernel per row, where one
            # masked rewrite of every row's window would move as many bytes as attention reads
            writes = [cache.shrink(((row, row + 1), (variable, variable + 1), None, None)).assign(  # type: ignore
                new[row:row + 1]) for row, variable in enumerate(positions.variables)
                for cache, new in ((self.cache_keys, key), (self.cache_values, value))]
            writes[0].realize(*writes[1:])
        group = config.heads // config.kv_heads
        # (batch, kv_heads, group, T, head_dim) against (batch, kv_heads, 1, S, head_dim): no repeated keys
        query = query.reshape(batch, length, config.kv_heads, group, config.head_dim).permute(0, 2, 3, 1, 4)
        keys = self.cache_keys.shrink((rows, (0, end), None, None)).permute(0, 2, 1, 3).unsqueeze(2)  # type: ignore
        values = self.cache_values.shrink((rows, (0, end), None, None)).permute(0, 2, 1, 3).unsqueeze(2)  # type: ignore
        scores = query.matmul(keys.transpose(-2, -1)) * (1.0 / math.sqrt(config.head_dim))
        allowed: Tensor | None = None
        if positions is not None:  # (batch, 1, 1, 1, S): a row's own positions, none past its token
            allowed = (self.key_positions(end, x.device).unsqueeze(0) <= positions.tensor.reshape(batch, 1))
            allowed = allowed.unsqueeze(1).unsqueeze(1).unsqueeze(1)
        if length > 1:
            key_positions = Tensor.arange(start_pos + length, device=x.device).reshape(1, -1) \
                if isinstance(start_pos, int) else self.key_positions(end, x.device).unsqueeze(0)
            query_positions = (Tensor.arange(length, device=x.device) + start_pos).reshape(-1, 1)
            allowed = key_positions <= query_positions
        if valid is not None:
            # (batch, 1, 1, 1, S): padding is no key, except each padded query's own position, so that its softmax
            # has a finite term (its output is never read, but a NaN in the cache would spread through 0 * NaN)
            window = valid.shrink(((0, batch), (0, end)))  # type: ignore[arg-type]
            usable = window.unsqueeze(1).unsqueeze(1).unsqueeze(1)
            if allowed is not None:
                usable = usable | (key_positions == query_positions)
            allowed = usable if allowed is None else allowed & usable
        if allowed is not None:
            scores = allowed.where(scores, -math.inf)
        attended = scores.softmax(-1).matmul(values)  # (batch, kv_heads, group, T, head_dim)
        attended = attended.permute(0, 3, 1, 2, 4).reshape(batch, length, config.heads * config.head_dim)
        return self.output.linear(attended)

    def key_positions(self, end: Position, device: str | tuple[str, ...]) -> Tensor:
        """The positions [0, end) as int32 (end may be a bound Variable: arange takes only a concrete length, so the
        whole context's range is shrunk)."""
        return Tensor.arange(self.cache_keys.shape[1], device=device).shrink(((0, end),))  # type: ignore[arg-type]

    def feed_forward(self, x: Tensor) -> Tensor:
        """The SwiGLU feed-forward network (or the mixture of experts) of x (batch, T, dim)."""
        if not self.config.experts:
            # the gate's product stored first: a kernel holding both matmuls' reductions is optimized as neither
            gate = self.gate.linear(x).contiguous()
            return self.down.linear(gate.silu() * self.up.linear(x))
        return self.mixture(x)

    def routing(self, logits: Tensor) -> Tensor:
        """Each token's weight for every expert (batch, T, experts): zero outside its top-k experts."""
        config = self.config
        if config.gating == "sigmoid":
            probabilities = logits.sigmoid()
            ranking = probabilities + self.selection_bias if self.selection_bias is not None else probabilities
        elif config.gating == "softmax":
            probabilities = ranking = logits.softmax(-1)
        else:
            probabilities = ranking = logits
        chosen = ranking.zeros_like().cast(dtypes.bool)
        remaining = ranking
        for _ in range(config.experts_used):  # k rounds of "the largest one left" (no sort needed for small k)
            best = remaining == remaining.max(-1, keepdim=True)
            chosen = chosen | best
            remaining = best.where(-math.inf, remaining)
        if config.gating == "softmax_weight":
            weights = chosen.where(logits, -math.inf).softmax(-1)
        else:
            weights = chosen.where(probabilities, 0.0)
        if config.normalize_top_k:
            weights = weights / weights.sum(-1, keepdim=True)
        return weights * config.expert_weights_scale

    def mixture(self, x: Tensor) -> Tensor:
        """The experts' SwiGLU outputs weighted by the routing. With fewer chosen (token, expert) pairs than experts
        (decode) only the chosen experts' blocks are gathered and dequantized; otherwise (prefill) every expert runs
        on every token with weight zero outside its top-k, which dequantizes each expert once instead of once per
        token."""
        batch, length, dim = x.shape
        tokens, used = batch * length, self.config.experts_used
        weights = self.routing(self.router.linear(x)).reshape(tokens, -1)
        rows = x.reshape(tokens, 1, 1, dim)
        if tokens * used < self.config.experts:
            chosen = self.chosen_experts(weights)  # (tokens, k)
            gate, up = self.gate.gather_rows(chosen), self.up.gather_rows(chosen)  # (tokens, k, hidden, dim)
            down = self.down.gather_rows(chosen)  # (tokens, k, dim, hidden)
            hidden = (rows * gate).sum(-1).contiguous().silu() * (rows * up).sum(-1)
            outputs = (hidden.unsqueeze(2) * down).sum(-1)  # (tokens, k, dim)
            share = weights.gather(-1, chosen)
        else:
            gate, up, down = self.gate.float(), self.up.float(), self.down.float()  # (E, hidden, dim), (E, dim, hidden)
            hidden = (rows * gate.unsqueeze(0)).sum(-1).silu() * (rows * up.unsqueeze(0)).sum(-1)
            outputs = (hidden.unsqueeze(2) * down.unsqueeze(0)).sum(-1)  # (tokens, E, dim)
            share = weights
        return (outputs * share.unsqueeze(-1)).sum(1).reshape(batch, length, dim)

    def chosen_experts(self, weights: Tensor) -> Tensor:
        """The indices (tokens, k) of the experts with nonzero routing weight: the chosen ones have positive weight
        and the others zero, so k rounds of argmax find them (an expert whose weight underflowed to zero may be
        replaced by another of weight zero, which changes nothing)."""
        experts = Tensor.arange(self.config.experts, device=weights.device).reshape(1, -1)
        remaining, found = weights, []
        for _ in range(self.config.experts_used):
            index = remaining.argmax(-1).reshape(-1, 1)
            found.append(index)
            remaining = (experts == index).where(-1.0, remaining)
        return found[0].cat(*found[1:], dim=1) if len(found) > 1 else found[0]

    def __call__(self, x: Tensor, start_pos: Position, rope: Tensor, valid: Tensor | None = None,
                 positions: RowPositions | None = None, slot: Position = 0) -> Tensor:
        """The layer's output for x (batch, T, dim) at positions start_pos.. (or `positions`, one per row) of the
        cache rows from `slot` (pre-norm residual blocks)."""
        # normalized activations are stored once (a few KB per token): fused into the matmuls that read them, the
        # norm's reduction would be recomputed for every output element
        h = x + self.attention(rms_norm(x, self.attention_norm, self.config.norm_eps).contiguous(), start_pos, rope,
                               valid, positions, slot)
        return h + self.feed_forward(rms_norm(h, self.ffn_norm, self.config.norm_eps).contiguous())


class Transformer:
    """A GGUF decoder-only language model. Build it with `Transformer.from_gguf(path)`."""

    def __init__(self, config: TransformerConfig, weights: dict[str, GGUFWeight], max_context: int | None = None,
                 device: str | None = None, metadata: dict[str, object] | None = None, max_batch: int = 1):
        self.config = config
        self.metadata = metadata or {}
        self.max_context = min(max_context or config.context_length, config.context_length)
        if self.max_context < 1:
            raise ValueError(f"max_context must be at least 1, got {self.max_context}")
        if not isinstance(max_batch, int) or max_batch < 1:
            raise ValueError(f"max_batch must be a positive integer, got {max_batch!r}")
        self.max_batch = max_batch
        self.device = device
        self.embedding = weights["token_embd.weight"]
        if "output_norm.weight" not in weights:
            raise UnsupportedModelError("the GGUF file lacks tensor 'output_norm.weight'")
        self.norm = weights["output_norm.weight"].float()
        self.head = weights.get("output.weight", self.embedding)
        factors = weights.get("rope_freqs.weight")
        table = rope_tables(config, self.max_context, factors.float().numpy() if factors is not None else None)
        self.rope = Tensor(table, device=device).realize()
        self.blocks = [Block(config, weights, index, self.max_context, device, max_batch)
                       for index in range(config.layers)]
        self.cached_tokens: list[int] = []
        self.position = Variable("start_pos", 0, self.max_context - 1)
        self._decode = TinyJit(self._decode_step)
        self._batch_decodes: dict[int, TinyJit] = {}  # one captured step per batch size
        self._slot_decodes: dict[int, TinyJit] = {}  # one captured step per row count
        self.row_positions = [Variable(f"row_{row}_pos", 0, self.max_context - 1) for row in range(max_batch)]
        self._prefill_variables: dict[int, tuple[UOp, UOp]] = {}  # chunk length -> (start, last row) Variables
        self._prefill_slot = Variable("prefill_slot", 0, max_batch - 1)

    @classmethod
    def from_gguf(cls, path: str | os.PathLike[str], max_context: int | None = None,
                  device: str | None = None, max_batch: int = 1) -> Transformer:
        """The model in the GGUF file at `path`, its weights read through DISK and kept as stored (quantized blocks
        stay bytes on `device`). `max_context` caps the KV cache (default: the model's context length); `max_batch`
        is the number of sequences the cache holds (for `generate_batch` and batched calls)."""
        metadata, weights = load_gguf_weights(path, device)
        if "token_embd.weight" not in weights:
            raise UnsupportedModelError("the GGUF file lacks tensor 'token_embd.weight'")
        supported = {0, 1, 2, 3, 6, 7, 8, 12, 13, 14, 30}
        for weight in weights.values():
            if weight.ggml_type not in supported:
                raise UnsupportedModelError(f"tensor {weight.name!r} has type {weight.type_name}, which the "
                                            "transformer does not run; supported: "
                                            f"{', '.join(GGML_TYPES[kind][0] for kind in sorted(supported))}")
        config = TransformerConfig.from_metadata(metadata, vocab_size=weights["token_embd.weight"].shape[0])
        return cls(config, weights, max_context, device, metadata, max_batch)

    def forward(self, tokens: Tensor, start_pos: Position, last_only: bool = False,
                valid: Tensor | None = None, positions: RowPositions | None = None, slot: Position = 0,
                last_index: Position | None = None) -> Tensor:
        """Logits (batch, T, vocab) for `tokens` (batch, T) at positions start_pos.. (only the last position's,
        (batch, 1, vocab), when `last_only`; position `last_index` of T's instead of the last when it is given),
        writing their keys and values into the cache rows [slot, slot + batch). `valid` (batch, max_context) bool:
        the positions holding tokens (left padding excluded from attention). `positions`, with T = 1: each row's
        own position (start_pos their largest)."""
        batch, length = tokens.shape
        x = self.embedding.gather_rows(tokens)
        if positions is not None:
            # gathered once per step: left lazy, every layer's rope would select its rows from the whole table again
            rope = self.rope[positions.tensor].reshape(batch, 1, *self.rope.shape[1:]).realize()
        else:
            # reshaped to the static length: a shrink by a bound Variable leaves the size as (start + T) - start
            rope = self.rope.shrink(((start_pos, start_pos + length), None, None))  # type: ignore[arg-type]
            if not isinstance(start_pos, int):
                rope = rope.reshape(length, *self.rope.shape[1:])
        for block in self.blocks:
            # realized at every layer: each layer's cache write realizes its keys and values, and without this it
            # would recompute every earlier layer (lazy x) again; in prefill it also frees each layer's temporaries
            x = block(x, start_pos, rope, valid, positions, slot).realize()
        if last_only:
            x = x[:, -1:] if last_index is None else \
                x.shrink((None, (last_index, last_index + 1), None))  # type: ignore[arg-type]
        return self.head.linear(rms_norm(x, self.norm, self.config.norm_eps).contiguous())

    def __call__(self, tokens: Tensor | Sequence[Sequence[int]], start_pos: int = 0) -> Tensor:
        """Logits (batch, T, vocab) of every position of `tokens` (batch, T), read after the cached positions
        [0, start_pos) of each of the batch's sequences (at most max_batch of them)."""
        tokens = tokens if isinstance(tokens, Tensor) else Tensor(list(tokens), dtype=dtypes.int32, device=self.device)
        if tokens.ndim != 2:
            raise ValueError(f"tokens must be (batch, T), got shape {tokens.shape}")
        if not 1 <= tokens.shape[0] <= self.max_batch:
            raise ValueError(f"the KV cache holds {self.max_batch} sequence(s): batch must be 1..{self.max_batch}, got "
                             f"{tokens.shape[0]}; load the model with a larger max_batch")
        if tokens.shape[0] > 1:
            self.cached_tokens = []  # the first row of the cache no longer holds generate's sequence
        if not isinstance(start_pos, int) or start_pos < 0 or start_pos + tokens.shape[1] > self.max_context:
            raise ValueError(f"positions [{start_pos}, {start_pos}+{tokens.shape[1]}) do not fit the context of "
                             f"{self.max_context} tokens: pass a larger max_context")
        return self.forward(tokens, start_pos).realize()

    def _decode_step(self, token: Tensor, start_pos: UOp) -> Tensor:
        return self.forward(token, start_pos).reshape(1, -1).realize()

    def _batch_decode_step(self, tokens: Tensor, start_pos: UOp, valid: Tensor) -> Tensor:
        return self.forward(tokens, start_pos, valid=valid).reshape(tokens.shape[0], -1).realize()

    def _slot_decode_step(self, tokens: Tensor, positions: Tensor, end: UOp, variables: list[UOp]) -> Tensor:
        rows = RowPositions(positions, variables)
        return self.forward(tokens, end, positions=rows).reshape(tokens.shape[0], -1).realize()

    def _prefill(self, ids: Sequence[int], start_pos: int, slot: int = 0) -> numpy.ndarray:
        """Run ids from position start_pos in chunks into cache row `slot`; the last position's logits.

        A chunk's start is a bound Variable and its length is padded up to a power of two, so every prompt runs
        the kernels of at most seven chunk shapes, in any slot (a bound Variable too): compiled once, where concrete
        starts and lengths made each new prompt length compile a model's worth of kernels before its first token.
        The padding's keys and values land past the prompt, where nothing attends before a later token overwrites
        them."""
        logits = None
        for begin in range(0, len(ids), PREFILL_CHUNK):
            chunk, position = list(ids[begin:begin + PREFILL_CHUNK]), start_pos + begin
            length = 1 << (len(chunk) - 1).bit_length()
            length = length if position + length <= self.max_context else len(chunk)
            start, last = self._prefill_variables.setdefault(length, (
                Variable(f"prefill_start_{length}", 0, self.max_context - length),
                Variable(f"prefill_last_{length}", 0, length - 1)))
            tokens = Tensor([chunk + [0] * (length - len(chunk))], dtype=dtypes.int32, device=self.device)
            logits = self.forward(tokens, start.bind(position), last_only=True, slot=self._prefill_slot.bind(slot),
                                  last_index=last.bind(len(chunk) - 1))
        assert logits is not None
        return numpy.asarray(logits.numpy()).reshape(-1)

    def prefill_slot(self, slot: int, ids: Sequence[int], start_pos: int = 0) -> numpy.ndarray:
        """Write the keys and values of `ids` at positions [start_pos, start_pos + len(ids)) of the cache's row
        `slot` (the positions before start_pos keep what they hold); the logits (vocab,) after the last id. The
        slots are the max_batch sequences that `decode_slots` advances together."""
        if not 0 <= slot < self.max_batch:
            raise ValueError(f"slot {slot} is not a row of the KV cache, which holds {self.max_batch} (max_batch)")
        if not ids or start_pos < 0 or start_pos + len(ids) > self.max_context:
            raise ValueError(f"positions [{start_pos}, {start_pos}+{len(ids)}) are not a non-empty range inside the "
                             f"context of {self.max_context} tokens")
        if slot == 0:
            self.cached_tokens = []  # generate's sequence in row 0 is overwritten
        return self._prefill([int(token) for token in ids], start_pos, slot)

    def step_rows(self, rows: int) -> int:
        """How many cache rows a decode step of the first `rows` rows should run: rounded up to whole groups of
        ROW_GROUP where the weights' lane form converts each block once per group of rows (Q4_0, Q4_1, Q5_0, Q5_1)
        and the cache has the rows, else `rows`. A step of 6 rows, which converts every block for each row, took
        3.3x the time of a step of 8 (1B Q4_0 model); the extra rows compute throw-away tokens."""
        padded = -(-rows // ROW_GROUP) * ROW_GROUP
        grouped = bool(self.blocks) and self.blocks[0].query.ggml_type in GROUPED_TYPES
        return padded if grouped and rows > ROW_GROUP and padded <= self.max_batch else rows

    def decode_slots(self, tokens: Sequence[int], positions: Sequence[int]) -> numpy.ndarray:
        """One decode step of the cache rows 0..len(tokens)-1, each row its own sequence: row r's token tokens[r]
        is written at position positions[r] and attends to that row's positions [0, positions[r]]. Returns the
        logits (rows, vocab). One jitted step per row count serves every mix of positions, so requests at different
        points of their generation (and rows of free slots, given any token at a position they do not need) share a
        step."""
        rows = len(tokens)
        if not 1 <= rows <= self.max_batch or len(positions) != rows:
            raise ValueError(f"decode_slots takes 1..{self.max_batch} rows (max_batch) and one position per token; "
                             f"got {rows} tokens and {len(positions)} positions")
        if min(positions) < 0 or max(positions) >= self.max_context:
            raise ValueError(f"positions must lie in [0, {self.max_context}), got {list(positions)}")
        self.cached_tokens = []  # row 0 no longer holds generate's sequence
        step = self._slot_decodes.setdefault(rows, TinyJit(self._slot_decode_step))
        token_tensor = Tensor([[int(token)] for token in tokens], dtype=dtypes.int32, device=self.device)
        position_tensor = Tensor([int(position) for position in positions], dtype=dtypes.int32, device=self.device)
        variables = [self.row_positions[row].bind(int(position)) for row, position in enumerate(positions)]
        logits = step(token_tensor, position_tensor, self.position.bind(int(max(positions))), variables)
        return numpy.asarray(logits.numpy()).reshape(rows, -1)

    def generate(self, ids: Sequence[int], max_new_tokens: int, temperature: float = 0.0, top_k: int = 0,
                 top_p: float = 1.0, seed: int | None = None, stop: Sequence[int] = ()) -> Iterator[int]:
        """Yield up to `max_new_tokens` new token ids after the prompt `ids` (stopping after a token in `stop`, or at
        the end of the context). The prompt's prefix already in the cache from the last call is not run again.
        temperature 0 picks the most likely token; otherwise tokens are sampled from the softmax at that
        temperature, restricted to the `top_k` most likely (0: all) and to the smallest set whose probability
        reaches `top_p`."""
        ids = [int(token) for token in ids]
        if not ids:
            raise ValueError("generate needs at least one prompt token")
        if len(ids) >= self.max_context:
            raise ValueError(f"the prompt has {len(ids)} tokens; the context holds {self.max_context}: pass a larger "
                             "max_context or a shorter prompt")
        _checked_sampling(temperature, top_k, top_p)
        generator = numpy.random.default_rng(seed)
        reused = 0
        while reused < min(len(ids) - 1, len(self.cached_tokens)) and ids[reused] == self.cached_tokens[reused]:
            reused += 1
        logits = self._prefill(ids[reused:], reused)
        self.cached_tokens = list(ids)
        for count in range(max_new_tokens):
            token = sample(logits, temperature, top_k, top_p, generator)
            yield token
            if token in stop or count + 1 == max_new_tokens or len(self.cached_tokens) >= self.max_context:
                return
            position = len(self.cached_tokens)
            self.cached_tokens.append(token)
            step = self._decode(Tensor([[token]], dtype=dtypes.int32, device=self.device), self.position.bind(position))
            logits = numpy.asarray(step.numpy()).reshape(-1)

    def generate_batch(self, prompts: Sequence[Sequence[int]], max_new_tokens: int, temperature: float = 0.0,
                       top_k: int = 0, top_p: float = 1.0, seed: int | None = None,
                       stop: Sequence[int] = ()) -> list[list[int]]:
        """The new tokens of each of `prompts` (at most max_batch of them, of any lengths), generated together: up to
        `max_new_tokens` each, a sequence ending after a token in `stop` or at the end of the context. Shorter
        prompts are left-padded, and the padding is masked out of attention, so each sequence gets what it would get
        alone (rope rotations depend only on the distance between positions). Sampling as in `generate`, one draw
        per sequence and step from one generator seeded by `seed`."""
        sequences = [[int(token) for token in prompt] for prompt in prompts]
        if not 1 <= len(sequences) <= self.max_batch:
            raise ValueError(f"generate_batch takes 1..{self.max_batch} prompts (max_batch), got {len(sequences)}; "
                             "load the model with a larger max_batch")
        if any(not sequence for sequence in sequences):
            raise ValueError("generate_batch needs at least one token in every prompt")
        longest = max(len(sequence) for sequence in sequences)
        if longest >= self.max_context:
            raise ValueError(f"the longest prompt has {longest} tokens; the context holds {self.max_context}: pass a "
                             "larger max_context or shorter prompts")
        _checked_sampling(temperature, top_k, top_p)
        generator = numpy.random.default_rng(seed)
        batch = len(sequences)
        if max_new_tokens < 1:
            return [[] for _ in sequences]
        self.cached_tokens = []  # the cache's rows are overwritten: nothing is reused by the next generate
        valid_rows = numpy.zeros((batch, self.max_context), dtype=bool)
        for row, sequence in enumerate(sequences):
            valid_rows[row, longest - len(sequence):] = True
        valid = Tensor(valid_rows, device=self.device).realize()
        padded = [[0] * (longest - len(sequence)) + sequence for sequence in sequences]
        logits = None
        for begin in range(0, longest, PREFILL_CHUNK):
            chunk = Tensor([row[begin:begin + PREFILL_CHUNK] for row in padded], dtype=dtypes.int32, device=self.device)
            logits = self.forward(chunk, begin, last_only=True, valid=valid)
        assert logits is not None
        rows = numpy.asarray(logits.numpy()).reshape(batch, -1)
        outputs: list[list[int]] = [[] for _ in sequences]
        finished = [False] * batch
        step = self._batch_decodes.setdefault(batch, TinyJit(self._batch_decode_step))
        position = longest
        while True:
            chosen = [sample(rows[row], temperature, top_k, top_p, generator) for row in range(batch)]
            for row, token in enumerate(chosen):
                if not finished[row]:
                    outputs[row].append(token)
                    finished[row] = token in stop or len(outputs[row]) == max_new_tokens
            if all(finished) or position >= self.max_context:
                return outputs
            tokens = Tensor([[token] for token in chosen], dtype=dtypes.int32, device=self.device)
            rows = numpy.asarray(step(tokens, self.position.bind(position), valid).numpy()).reshape(batch, -1)
            position += 1


def _checked_sampling(temperature: float, top_k: int, top_p: float) -> None:
    if temperature < 0 or not 0 < top_p <= 1 or top_k < 0:
        raise ValueError(f"sampling needs temperature >= 0, 0 < top_p <= 1, top_k >= 0; got {temperature}, "
                         f"{top_p}, {top_k}")


def sample(logits: numpy.ndarray, temperature: float, top_k: int, top_p: float,
           generator: numpy.random.Generator) -> int:
    """A token id from `logits`: the argmax at temperature 0, else a draw from the tempered, top-k and top-p
    restricted softmax."""
    if temperature == 0:
        return int(numpy.argmax(logits))
    scaled = logits.astype(numpy.float64) / temperature
    order = numpy.argsort(-scaled, kind="stable")
    if top_k:
        order = order[:top_k]
    probabilities = numpy.exp(scaled[order] - scaled[order[0]])
    probabilities /= probabilities.sum()
    if top_p < 1.0:
        keep = int(numpy.searchsorted(numpy.cumsum(probabilities), top_p) + 1)
        order, probabilities = order[:keep], probabilities[:keep] / probabilities[:keep].sum()
    return int(order[generator.choice(len(order), p=probabilities)])
