"""Transformer.from_gguf on tiny random-weight GGUF files written with gguf.GGUFWriter, against the float32 numpy
reference in llm_reference.py (gguf's reader and dequantization, no cache): every architecture, every weight type,
the KV cache, the jitted decode step and generation."""
from __future__ import annotations

import os

import llm_reference
import numpy
import pytest
from llm_fixtures import greedy_reference, write_model

from tinycore.llm.config import UnsupportedModelError
from tinycore.llm.model import Transformer

TOKENS = [1, 5, 7, 3, 9, 2, 11]


def _model_file(tmp_path: os.PathLike[str], name: str, **options: object) -> str:
    path = os.path.join(os.fspath(tmp_path), f"{name}.gguf")
    write_model(path, **options)  # type: ignore[arg-type]
    return path


def _check_logits(path: str, tokens: list[int] = TOKENS) -> Transformer:
    model = Transformer.from_gguf(path)
    expected = llm_reference.logits(path, tokens)
    got = model([tokens], 0).numpy()
    assert got.shape == (1, len(tokens), expected.shape[-1])
    numpy.testing.assert_allclose(got[0], expected, rtol=1e-3, atol=1e-3)
    return model


@pytest.mark.parametrize("options", [
    {"architecture": "llama"},
    {"architecture": "llama", "tied": False, "kv_heads": 1},
    {"architecture": "qwen2", "tied": False},
    {"architecture": "qwen3", "head_dim": 32},
    {"architecture": "llama", "rope_scaling": 4.0},
    {"architecture": "llama", "rope_factors": True},
    {"architecture": "llama", "rope_scaling": 4.0, "yarn_context": 4096},
    {"architecture": "qwen3", "rope_scaling": 8.0, "yarn_context": 2048, "head_dim": 32},
], ids=["llama-gqa-tied", "llama-mqa-untied", "qwen2-bias", "qwen3-qknorm", "rope-linear", "rope-freqs", "yarn-llama",
        "yarn-qwen3"])
def test_architectures_match_reference(tmp_path: os.PathLike[str], options: dict[str, object]) -> None:
    """Logits of every position equal the numpy float32 reference within 1e-3."""
    _check_logits(_model_file(tmp_path, "model", **options))


@pytest.mark.parametrize(("factor", "original", "rope_dim"), [(4.0, 4096, 64), (8.0, 32768, 128), (2.0, 512, 32)])
def test_yarn_rope_table_matches_transformers_formula(factor: float, original: int, rope_dim: int) -> None:
    """cos and sin of the YaRN rope table equal the reference's transformers-style inverse frequencies (interpolated
    and extrapolated frequencies blended by a ramp between the correction dimensions) times its attention scaling,
    at positions far past the original context's wavelengths."""
    from tinycore.llm.config import TransformerConfig
    from tinycore.llm.model import rope_tables
    metadata = {"general.architecture": "qwen3", "qwen3.embedding_length": rope_dim * 4,
                "qwen3.attention.head_count": 4, "qwen3.block_count": 1, "qwen3.rope.freq_base": 1000000.0,
                "qwen3.rope.scaling.type": "yarn", "qwen3.rope.scaling.factor": factor,
                "qwen3.rope.scaling.original_context_length": original, "qwen3.context_length": int(original * factor)}
    config = TransformerConfig.from_metadata(metadata, vocab_size=16)
    table = rope_tables(config, 4096, None)
    inverse, scaling = llm_reference.yarn_inverse_frequencies(rope_dim, 1000000.0, factor, original)
    angles = numpy.outer(numpy.arange(4096, dtype=numpy.float64), inverse)
    numpy.testing.assert_allclose(table[..., 0], numpy.cos(angles) * scaling, atol=2e-5)
    numpy.testing.assert_allclose(table[..., 1], numpy.sin(angles) * scaling, atol=2e-5)
    assert scaling > 1.0 and not numpy.allclose(inverse, 1.0 / 1000000.0 ** (numpy.arange(0, rope_dim, 2) / rope_dim))


def test_unknown_rope_scaling_names_supported_ones() -> None:
    """A rope scaling type the transformer does not implement is refused with the ones it does."""
    from tinycore.llm.config import TransformerConfig
    metadata = {"general.architecture": "llama", "llama.embedding_length": 64, "llama.attention.head_count": 4,
                "llama.block_count": 1, "llama.rope.scaling.type": "longrope", "llama.rope.scaling.factor": 4.0}
    with pytest.raises(UnsupportedModelError, match="yarn"):
        TransformerConfig.from_metadata(metadata, vocab_size=16)


@pytest.mark.parametrize("gating,normalize,bias,matrix_type", [(1, True, False, "F32"), (1, False, False, "F32"),
                                                                (3, None, False, "F32"), (2, True, True, "Q8_0")],
                         ids=["softmax-norm", "softmax", "softmax-topk", "sigmoid-bias-q8_0"])
def test_qwen3moe_routing_matches_reference(tmp_path: os.PathLike[str], gating: int, normalize: bool | None,
                                            bias: bool, matrix_type: str) -> None:
    """qwen3moe with 4 experts, 2 used: each gating function (softmax, softmax over the top-k, sigmoid with a
    selection bias) with and without normalized top-k weights, for a prompt (dense) and one token (gathered)."""
    path = _model_file(tmp_path, "moe", architecture="qwen3moe", experts=4, experts_used=2, gating=gating,
                       normalize=normalize, selection_bias=bias, head_dim=32, layers=1, matrix_type=matrix_type)
    model = _check_logits(path)  # 7 tokens x 2 experts: every expert runs on every token
    # one token (2 chosen of 4): only the chosen experts' blocks are gathered
    last = model([TOKENS[-1:]], len(TOKENS) - 1).numpy()[0, -1]
    numpy.testing.assert_allclose(last, llm_reference.logits(path, TOKENS)[-1], rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("matrix_type", ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K",
                                         "Q6_K"])
def test_weight_types_match_reference(tmp_path: os.PathLike[str], matrix_type: str) -> None:
    """Every matrix (embedding included) stored as one type: logits equal the reference computed from gguf's
    dequantization of the same bytes."""
    block = 256 if matrix_type.endswith("_K") else 32
    _check_logits(_model_file(tmp_path, "typed", matrix_type=matrix_type, dim=block, hidden=block, layers=1,
                              heads=4, kv_heads=2, vocab=16), tokens=[1, 5, 7, 3])


@pytest.mark.parametrize("matrix_type", ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K"])
def test_one_token_steps_of_every_type_match_reference(tmp_path: os.PathLike[str], matrix_type: str) -> None:
    """One token at a time (the one-row products that decode uses, each type's own kernel form) from the first
    position: every position's logits equal the reference computed from gguf's dequantization of the same bytes."""
    block = 256 if matrix_type.endswith("_K") else 64
    path = _model_file(tmp_path, "steps", matrix_type=matrix_type, dim=block, hidden=2 * block, layers=1, heads=4,
                       kv_heads=2, vocab=16)
    tokens = [1, 5, 7, 3]
    model = Transformer.from_gguf(path, max_context=8)
    got = numpy.concatenate([model([[token]], position).numpy()[0] for position, token in enumerate(tokens)])
    numpy.testing.assert_allclose(got, llm_reference.logits(path, tokens), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("matrix_type", ["Q8_0", "Q4_0", "Q5_1"])
def test_column_chunked_weights_match_reference(tmp_path: os.PathLike[str], matrix_type: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """With chunks of 32 inputs, the feed-forward down weight (128 inputs) is repacked into 4 column chunks at load
    (the 64-input matrices stay as they are); a prefill and one-token steps equal the reference's logits."""
    from tinycore.llm import weights as weights_module
    monkeypatch.setattr(weights_module, "CHUNK_INPUTS", 32)
    path = _model_file(tmp_path, "chunked", matrix_type=matrix_type, dim=64, hidden=128, layers=1, heads=4,
                       kv_heads=2, vocab=16)
    _, loaded = weights_module.load_gguf_weights(path)
    assert {name: weight.chunks for name, weight in loaded.items() if weight.chunks > 1} == {"blk.0.ffn_down.weight": 4}
    tokens = [1, 5, 7, 3]
    _check_logits(path, tokens)
    model = Transformer.from_gguf(path, max_context=8)
    got = numpy.concatenate([model([[token]], position).numpy()[0] for position, token in enumerate(tokens)])
    numpy.testing.assert_allclose(got, llm_reference.logits(path, tokens), rtol=1e-3, atol=1e-3)


def test_cache_and_jitted_decode_match_reference(tmp_path: os.PathLike[str]) -> None:
    """Prefill then positions one at a time through the jitted step (start_pos a bound Variable), and generate's
    greedy tokens: each position's logits equal the reference's for the whole sequence."""
    path = _model_file(tmp_path, "decode", matrix_type="Q4_0")
    model = Transformer.from_gguf(path, max_context=32)
    generated = list(model.generate(TOKENS[:3], max_new_tokens=6))
    sequence = TOKENS[:3] + generated
    expected = llm_reference.logits(path, sequence)
    assert generated == [int(numpy.argmax(row)) for row in expected[2:-1]]
    assert model._decode.captured_kernel_count > 0, "the decode step was not captured by TinyJit"
    # the cache continues from start_pos: feed the rest of a sequence after a prefix
    prefix = model([TOKENS[:4]], 0).numpy()[0]
    rest = model([TOKENS[4:]], 4).numpy()[0]
    full = llm_reference.logits(path, TOKENS)
    numpy.testing.assert_allclose(numpy.concatenate([prefix, rest]), full, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("options", [{"matrix_type": "Q4_0"},
                                     {"architecture": "qwen3moe", "experts": 4, "experts_used": 2, "head_dim": 32,
                                      "layers": 1}], ids=["llama-q4_0", "qwen3moe"])
def test_generate_batch_matches_each_prompt_alone(tmp_path: os.PathLike[str], options: dict[str, object]) -> None:
    """Three prompts of different lengths generated together (left-padded, one jitted step per position for the
    batch): each one's greedy tokens equal the reference's for that prompt alone, with and without a stop token;
    a batch of equal-length rows through model(...) gives each row's reference logits."""
    path = _model_file(tmp_path, "batch", **options)
    model = Transformer.from_gguf(path, max_context=32, max_batch=3)
    prompts = [TOKENS, TOKENS[2:4], [9]]
    outputs = model.generate_batch(prompts, 5)
    assert outputs == [greedy_reference(path, prompt, 5) for prompt in prompts]
    assert model._batch_decodes[3].captured_kernel_count > 0, "the batched decode step was not captured by TinyJit"
    stop = outputs[1][1]
    stopped = model.generate_batch(prompts, 5, stop=[stop])
    assert stopped == [greedy_reference(path, prompt, 5, stop=(stop,)) for prompt in prompts]
    rows = [TOKENS[:4], TOKENS[3:7]]
    logits = model(rows, 0).numpy()
    for got, tokens in zip(logits, rows, strict=True):
        numpy.testing.assert_allclose(got, llm_reference.logits(path, tokens), rtol=1e-3, atol=1e-3)
    # the single-sequence generate still works after a batch (its cache row was overwritten)
    assert list(model.generate(TOKENS[2:4], 5)) == outputs[1]


def test_generate_batch_rejects_bad_batches(tmp_path: os.PathLike[str]) -> None:
    """More prompts than max_batch, an empty prompt, a batch call over max_batch: errors that say what to do."""
    model = Transformer.from_gguf(_model_file(tmp_path, "small"), max_context=16, max_batch=2)
    with pytest.raises(ValueError, match="larger max_batch"):
        model.generate_batch([[1], [2], [3]], 2)
    with pytest.raises(ValueError, match="at least one token"):
        model.generate_batch([[1], []], 2)
    with pytest.raises(ValueError, match="larger max_batch"):
        model([[1], [2], [3]], 0)
    with pytest.raises(ValueError, match="max_batch must be a positive integer"):
        Transformer.from_gguf(_model_file(tmp_path, "small"), max_batch=0)


def test_sampling_is_seeded_and_respects_top_k(tmp_path: os.PathLike[str]) -> None:
    """The same seed gives the same tokens; top_k=1 is greedy whatever the temperature."""
    path = _model_file(tmp_path, "sample")
    model = Transformer.from_gguf(path, max_context=32)
    first = list(model.generate(TOKENS[:2], 5, temperature=1.0, seed=7))
    again = list(model.generate(TOKENS[:2], 5, temperature=1.0, seed=7))
    greedy = list(model.generate(TOKENS[:2], 5))
    assert first == again
    assert list(model.generate(TOKENS[:2], 5, temperature=5.0, top_k=1, seed=1)) == greedy


def test_unsupported_architecture_is_named(tmp_path: os.PathLike[str]) -> None:
    """A model of another architecture raises UnsupportedModelError naming it and the supported ones."""
    path = _model_file(tmp_path, "other", architecture="gemma")
    with pytest.raises(UnsupportedModelError, match="'gemma'.*llama, qwen2, qwen3, qwen3moe"):
        Transformer.from_gguf(path)


def test_context_overflow_is_an_error(tmp_path: os.PathLike[str]) -> None:
    """Positions past max_context are refused with what to do."""
    model = Transformer.from_gguf(_model_file(tmp_path, "small"), max_context=4)
    with pytest.raises(ValueError, match="larger max_context"):
        model([TOKENS[:5]], 0)
    with pytest.raises(ValueError, match="the context holds 4"):
        list(model.generate(TOKENS[:5], 1))


def test_unsupported_tensor_type_is_named(tmp_path: os.PathLike[str]) -> None:
    """A Q2_K tensor is refused naming the type and listing the supported ones."""
    import gguf
    import numpy as np

    from tinycore.nn.gguf import GGUFFormatError
    path = os.path.join(os.fspath(tmp_path), "q2k.gguf")
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_tensor("token_embd.weight", np.zeros((4, 84), dtype=np.uint8), raw_dtype=gguf.GGMLQuantizationType.Q2_K)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(GGUFFormatError, match=r"type 10 \(Q2_K\); supported: .*Q4_K"):
        Transformer.from_gguf(path)
