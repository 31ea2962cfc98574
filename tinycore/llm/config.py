"""A transformer's hyperparameters, read from GGUF metadata (`{architecture}.*` keys), with a clear error for what a
file lacks or what is not supported."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ARCHITECTURES = ("llama", "qwen2", "qwen3", "qwen3moe")
"""The `general.architecture` values Transformer.from_gguf runs."""

GATING = {1: "softmax", 2: "sigmoid", 3: "softmax_weight"}
"""`{arch}.expert_gating_func` values: softmax over all experts then top-k; sigmoid (top-k chosen with the
selection bias); softmax over the selected top-k logits."""


class UnsupportedModelError(NotImplementedError):
    """A GGUF model whose architecture, tensor type or option this package does not run."""


@dataclass(frozen=True)
class TransformerConfig:
    """Everything the forward pass needs besides the weights."""

    architecture: str
    dim: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    hidden_dim: int
    vocab_size: int
    norm_eps: float
    rope_theta: float
    rope_dim: int
    rope_interleaved: bool
    rope_linear_factor: float
    context_length: int
    rope_yarn_factor: float = 1.0
    """YaRN's context extension factor (1: no YaRN); the fields below apply only when it is above 1."""
    rope_original_context: int = 0
    """The context length the model was trained with (`rope.scaling.original_context_length`)."""
    rope_yarn_attention_factor: float = 1.0
    """A multiplier of YaRN's magnitude correction 1 + 0.1 ln(factor) (`rope.scaling.attn_factor`)."""
    rope_yarn_beta_fast: float = 32.0
    """Rotations over the original context above which a frequency is kept as trained (extrapolated)."""
    rope_yarn_beta_slow: float = 1.0
    """Rotations below which a frequency is interpolated (divided by the factor); between the two, a linear ramp."""
    experts: int = 0
    experts_used: int = 0
    expert_hidden_dim: int = 0
    gating: str = "softmax"
    normalize_top_k: bool = False
    expert_weights_scale: float = 1.0

    @classmethod
    def from_metadata(cls, metadata: dict[str, Any], vocab_size: int) -> TransformerConfig:
        """The configuration of the model described by `metadata` (`vocab_size` from the embedding's shape)."""
        architecture = metadata.get("general.architecture")
        if architecture not in ARCHITECTURES:
            raise UnsupportedModelError(f"architecture {architecture!r} (general.architecture) is not supported; "
                                        f"supported: {', '.join(ARCHITECTURES)}")

        def key(name: str, default: Any = None) -> Any:
            value = metadata.get(f"{architecture}.{name}", default)
            if value is None:
                raise UnsupportedModelError(f"the GGUF metadata lacks {architecture}.{name}, which a {architecture} "
                                            "model needs")
            return value
        dim, heads = int(key("embedding_length")), int(key("attention.head_count"))
        head_dim = int(key("attention.key_length", dim // heads))
        if int(key("attention.value_length", head_dim)) != head_dim:
            raise UnsupportedModelError("attention.value_length differs from attention.key_length: not supported")
        scaling = str(key("rope.scaling.type", "none"))
        factor = float(key("rope.scaling.factor", 1.0))
        if scaling not in ("none", "linear", "yarn") and factor != 1.0:
            raise UnsupportedModelError(f"rope scaling {scaling!r} ({architecture}.rope.scaling.type) is not "
                                        "supported; supported: none, linear, yarn, and llama3 frequency factors "
                                        "(rope_freqs.weight)")
        yarn = scaling == "yarn" and factor > 1.0
        context_length = int(key("context_length", 2048))
        experts = int(key("expert_count", 0))
        if architecture == "qwen3moe" and experts == 0:
            raise UnsupportedModelError("a qwen3moe model needs qwen3moe.expert_count")
        gating_id = int(key("expert_gating_func", 1))
        if gating_id not in GATING:
            raise UnsupportedModelError(f"expert gating function {gating_id} is not supported; supported: "
                                        f"{', '.join(f'{number} ({name})' for number, name in GATING.items())}")
        return cls(architecture=architecture, dim=dim, layers=int(key("block_count")), heads=heads,
                   kv_heads=int(key("attention.head_count_kv", heads)), head_dim=head_dim,
                   hidden_dim=int(key("feed_forward_length", 0)), vocab_size=vocab_size,
                   norm_eps=float(key("attention.layer_norm_rms_epsilon", 1e-5)),
                   rope_theta=float(key("rope.freq_base", 10000.0)),
                   rope_dim=int(key("rope.dimension_count", head_dim)),
                   rope_interleaved=architecture == "llama",
                   rope_linear_factor=factor if scaling == "linear" else 1.0,
                   rope_yarn_factor=factor if yarn else 1.0,
                   rope_original_context=int(key("rope.scaling.original_context_length", context_length)),
                   rope_yarn_attention_factor=float(key("rope.scaling.attn_factor", 1.0)),
                   rope_yarn_beta_fast=float(key("rope.scaling.yarn_beta_fast", 32.0)),
                   rope_yarn_beta_slow=float(key("rope.scaling.yarn_beta_slow", 1.0)),
                   context_length=context_length, experts=experts,
                   experts_used=int(key("expert_used_count", 0)),
                   expert_hidden_dim=int(key("expert_feed_forward_length", 0)), gating=GATING[gating_id],
                   normalize_top_k=bool(key("expert_weights_norm", architecture == "qwen3moe")),
                   expert_weights_scale=float(key("expert_weights_scale", 1.0)) or 1.0)
