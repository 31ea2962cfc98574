"""tinycore.llm against transformers' own GGUF loader (which dequantizes to float32 and un-permutes llama's Q/K rows):
logits of llama (tied and untied), qwen2, qwen3 and qwen3moe files, and tokenization of SentencePiece and byte-level
BPE vocabularies (llama3 and qwen2 pre-tokenizers). Run with `nox -s llm_reference`."""
from __future__ import annotations

import os
import sys

import numpy
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from llm_fixtures import write_model  # noqa: E402

from tinycore.llm.model import Transformer  # noqa: E402
from tinycore.llm.tokenizer import Tokenizer, _byte_characters  # noqa: E402

TOKENS = [1, 5, 7, 3, 9, 2]


def _transformers_logits(directory: str, name: str, tokens: list[int]) -> numpy.ndarray:
    import torch
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(directory, gguf_file=name, torch_dtype=torch.float32)
    with torch.no_grad():
        return model(torch.tensor([tokens])).logits[0].numpy()


# transformers 5.x reads no head_dim for qwen3 (its default, 128, is used) and no moe_intermediate_size (768)
@pytest.mark.parametrize("options", [
    {"architecture": "llama", "tied": False},
    {"architecture": "llama", "matrix_type": "Q8_0"},
    {"architecture": "qwen2", "tied": False, "matrix_type": "Q4_0"},
    {"architecture": "qwen3", "tied": False, "head_dim": 128},
    {"architecture": "qwen3moe", "tied": False, "experts": 4, "experts_used": 2, "head_dim": 32, "hidden": 768,
     "layers": 1},
], ids=["llama", "llama-tied-q8_0", "qwen2-q4_0", "qwen3", "qwen3moe"])
def test_logits_match_transformers(tmp_path: os.PathLike[str], options: dict[str, object]) -> None:
    """Every position's logits equal transformers' float32 model loaded from the same GGUF within 1e-3."""
    directory = os.fspath(tmp_path)
    write_model(os.path.join(directory, "model.gguf"), **options)  # type: ignore[arg-type]
    expected = _transformers_logits(directory, "model.gguf", TOKENS)
    got = Transformer.from_gguf(os.path.join(directory, "model.gguf"))([TOKENS], 0).numpy()[0]
    numpy.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize(("factor", "original", "head_dim"), [(4.0, 32768, 128), (8.0, 4096, 64)])
def test_yarn_rope_matches_transformers_init(factor: float, original: int, head_dim: int) -> None:
    """tinycore's YaRN rope table equals cos and sin of transformers' own "yarn" rope initialisation (its inverse
    frequencies and attention scaling) for a qwen3 configuration read from the same GGUF keys."""
    from transformers import Qwen3Config
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from tinycore.llm.config import TransformerConfig
    from tinycore.llm.model import rope_tables
    reference_config = Qwen3Config(head_dim=head_dim, max_position_embeddings=int(original * factor),
                                   rope_parameters={"rope_type": "yarn", "rope_theta": 1000000.0, "factor": factor,
                                                    "original_max_position_embeddings": original})
    inverse, scaling = ROPE_INIT_FUNCTIONS["yarn"](reference_config, "cpu")
    metadata = {"general.architecture": "qwen3", "qwen3.embedding_length": head_dim * 4,
                "qwen3.attention.head_count": 4, "qwen3.block_count": 1, "qwen3.rope.freq_base": 1000000.0,
                "qwen3.rope.scaling.type": "yarn", "qwen3.rope.scaling.factor": factor,
                "qwen3.rope.scaling.original_context_length": original, "qwen3.context_length": int(original * factor)}
    table = rope_tables(TransformerConfig.from_metadata(metadata, vocab_size=16), 2048, None)
    angles = numpy.outer(numpy.arange(2048, dtype=numpy.float64), inverse.double().numpy())
    numpy.testing.assert_allclose(table[..., 0], numpy.cos(angles) * scaling, atol=1e-4)
    numpy.testing.assert_allclose(table[..., 1], numpy.sin(angles) * scaling, atol=1e-4)


def _write_vocabulary(path: str, model: str, tokens: list[str], types: list[int], scores: list[float] | None = None,
                      merges: list[str] | None = None, pre: str | None = None) -> None:
    import gguf
    writer = gguf.GGUFWriter(path, "qwen2" if pre == "qwen2" else "llama")
    writer.add_block_count(1)
    writer.add_context_length(64)
    writer.add_embedding_length(8)
    writer.add_feed_forward_length(8)
    writer.add_head_count(1)
    writer.add_tokenizer_model(model)
    if pre is not None:
        writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    if scores is not None:
        writer.add_token_scores(scores)
    if merges is not None:
        writer.add_token_merges(merges)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


TEXTS = ["hello world", "test hello", "hé wörld", "a\nb", "12345 don't", "hé wörld\n\n  x", "test hello  two"]


def test_sentencepiece_matches_transformers(tmp_path: os.PathLike[str]) -> None:
    """A scored SentencePiece vocabulary with byte tokens: ids and decoded text equal transformers' (texts that do
    not start with a space: llama.cpp, which this package follows, always adds the space prefix, transformers'
    Metaspace does not when the text starts with one)."""
    from transformers import AutoTokenizer
    pieces = ["▁", "h", "e", "l", "o", "w", "r", "d", "ll", "▁h", "▁w", "▁he", "or", "llo", "▁hello", "▁wor", "ld",
              "▁t", "t", "s", "▁te", "es", "st", "▁test", "a"]
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{byte:02X}>" for byte in range(256)] + pieces
    types = [2, 3, 3] + [6] * 256 + [1] * len(pieces)
    scores = [0.0] * 259 + [-float(index) for index in range(len(pieces))]
    directory = os.fspath(tmp_path)
    _write_vocabulary(os.path.join(directory, "spm.gguf"), "llama", tokens, types, scores)
    ours = Tokenizer.from_gguf(os.path.join(directory, "spm.gguf"))
    theirs = AutoTokenizer.from_pretrained(directory, gguf_file="spm.gguf")
    for text in TEXTS:
        ids = ours.encode(text)
        assert ids == theirs.encode(text), text
        assert ours.decode(ids) == theirs.decode(ids, skip_special_tokens=True), text


@pytest.mark.parametrize("pre", ["llama-bpe", "qwen2"])
def test_byte_level_bpe_matches_transformers(tmp_path: os.PathLike[str], pre: str) -> None:
    """A byte-level BPE vocabulary with ranked merges and special tokens: ids equal transformers' for the llama3 and
    qwen2 pre-tokenizers (digit groups of three against single digits)."""
    from transformers import AutoTokenizer
    alphabet = _byte_characters()
    space = alphabet[ord(" ")]
    merges = ["h e", "l l", "he ll", "hell o", f"{space} w", "o r", f"{space}w or", "l d", "1 2", "12 3", "' t",
              "d o", "do n", f"{space} t", "e s"]
    tokens = [alphabet[byte] for byte in range(256)] + ["he", "ll", "hell", "hello", f"{space}w", "or",
                                                         f"{space}wor", "ld", "12", "123", "'t", "do", "don",
                                                         f"{space}t", "es", "<|begin_of_text|>", "<|eot_id|>"]
    types = [1] * (len(tokens) - 2) + [3, 3]
    directory = os.fspath(tmp_path)
    _write_vocabulary(os.path.join(directory, "bpe.gguf"), "gpt2", tokens, types, merges=merges, pre=pre)
    ours = Tokenizer.from_gguf(os.path.join(directory, "bpe.gguf"))
    theirs = AutoTokenizer.from_pretrained(directory, gguf_file="bpe.gguf")
    for text in [*TEXTS, "test<|eot_id|>hello", "  two  spaces"]:
        ids = ours.encode(text, add_bos=False)
        assert ids == theirs.encode(text, add_special_tokens=False), text
        assert ours.decode(ids) == theirs.decode(ids), text
