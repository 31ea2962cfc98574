"""GGUF language models: weights kept quantized on the device (weights), the tokenizer from the metadata
(tokenizer), the transformer with a KV cache and generation (model), chat templates and the OpenAI-compatible
server (chat, server)."""
from tinycore.llm.config import TransformerConfig, UnsupportedModelError
from tinycore.llm.model import Transformer
from tinycore.llm.tokenizer import Tokenizer
from tinycore.llm.weights import GGUFWeight, load_gguf_weights

__all__ = ["GGUFWeight", "Tokenizer", "Transformer", "TransformerConfig", "UnsupportedModelError",
           "load_gguf_weights"]
