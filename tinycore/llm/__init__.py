"""GGUF language models: weights kept quantized on the device (weights), the tokenizer from the metadata
(tokenizer), the transformer with a KV cache and generation (model), chat formats (chat), continuous batching of
many requests (batching), the OpenAI-compatible server (server), small random models to try (test_model) and
`tiny llm` (cli).

The names below are imported when first used, so `tiny` (which adds the `llm` subcommand's parser) stays fast."""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tinycore.llm.config import TransformerConfig, UnsupportedModelError
    from tinycore.llm.model import Transformer
    from tinycore.llm.tokenizer import Tokenizer
    from tinycore.llm.weights import GGUFWeight, load_gguf_weights

_EXPORTS = {"GGUFWeight": "weights", "load_gguf_weights": "weights", "Tokenizer": "tokenizer",
            "Transformer": "model", "TransformerConfig": "config", "UnsupportedModelError": "config"}

__all__ = ["GGUFWeight", "Tokenizer", "Transformer", "TransformerConfig", "UnsupportedModelError",
           "load_gguf_weights"]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"tinycore.llm.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'tinycore.llm' has no attribute {name!r}")
