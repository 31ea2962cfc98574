"""Random GGUF blocks and tiny random-weight GGUF models for the tinycore.llm tests (written with the `gguf` package's
GGUFWriter), and a float32 numpy reference of the transformer that reads the file back with gguf's own reader and
dequantization."""
from __future__ import annotations

import numpy

HALF_FIELDS: dict[str, tuple[int, ...]] = {"Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,),
                                           "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,)}
"""Byte offsets of each quantized type's float16 factors inside a block."""


def random_blocks(type_name: str, count: int, seed: int, largest: float = 0.2) -> numpy.ndarray:
    """`count` blocks of random bytes of ggml type `type_name` whose float16 factors are finite, of magnitude
    between largest/20 and `largest`."""
    import gguf
    kind = gguf.GGMLQuantizationType[type_name]
    _, block_bytes = gguf.GGML_QUANT_SIZES[kind]
    generator = numpy.random.default_rng(seed)
    blocks = generator.integers(0, 256, size=(count, block_bytes), dtype=numpy.uint8)
    for offset in HALF_FIELDS[type_name]:
        factors = (generator.uniform(largest / 20, largest, size=count) * generator.choice([-1, 1], size=count))
        blocks[:, offset:offset + 2] = factors.astype(numpy.float16).view(numpy.uint8).reshape(count, 2)
    return blocks


# a block's largest factor per type that keeps random weights near unit scale in the model tests
MODEL_FACTORS = {"Q4_0": 0.02, "Q4_1": 0.02, "Q5_0": 0.01, "Q5_1": 0.01, "Q8_0": 0.002, "Q4_K": 0.0005,
                 "Q5_K": 0.0003, "Q6_K": 0.005}


def weight_array(type_name: str, rows: int, columns: int, generator: numpy.random.Generator) -> numpy.ndarray:
    """A random (rows, columns) weight stored as `type_name`: float arrays for F32/F16, raw bytes otherwise (BF16 as
    its 16-bit patterns)."""
    import gguf
    if type_name in ("F32", "F16"):
        values = generator.standard_normal((rows, columns)) * 0.3
        return values.astype(numpy.float32 if type_name == "F32" else numpy.float16)
    if type_name == "BF16":
        values = (generator.standard_normal((rows, columns)) * 0.3).astype(numpy.float32)
        return (values.view(numpy.uint32) >> 16).astype(numpy.uint16).view(numpy.uint8).reshape(rows, columns * 2)
    block_elements, block_bytes = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[type_name]]
    blocks = random_blocks(type_name, rows * columns // block_elements, int(generator.integers(1 << 30)),
                           MODEL_FACTORS[type_name])
    return blocks.reshape(rows, columns // block_elements * block_bytes)


def write_model(path: str, architecture: str = "llama", matrix_type: str = "F32", dim: int = 64, layers: int = 2,
                heads: int = 4, kv_heads: int = 2, hidden: int = 96, vocab: int = 48, tied: bool = True,
                experts: int = 0, experts_used: int = 0, gating: int = 1, normalize: bool | None = None,
                selection_bias: bool = False, rope_scaling: float = 0.0, yarn_context: int = 0,
                rope_factors: bool = False, head_dim: int | None = None, seed: int = 0,
                byte_vocabulary: bool = False) -> None:
    """A tiny random-weight model of `architecture` written with gguf.GGUFWriter; matrices as `matrix_type`,
    vectors as F32. `rope_scaling` is linear, or YaRN with `yarn_context` as the original context. `byte_vocabulary`
    gives it a byte-level BPE vocabulary (the 256 byte characters, no merges) and the chatml special tokens
    <|im_start|> and <|im_end|> (the end of turn), with a chatml chat template."""
    import gguf
    generator = numpy.random.default_rng(seed)
    head_dim = head_dim or dim // heads
    writer = gguf.GGUFWriter(path, architecture)
    writer.add_block_count(layers)
    writer.add_context_length(64)
    writer.add_embedding_length(dim)
    writer.add_feed_forward_length(hidden)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    if head_dim != dim // heads:
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    if rope_scaling:
        writer.add_rope_scaling_type(gguf.RopeScalingType.YARN if yarn_context else gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(rope_scaling)
    if yarn_context:
        writer.add_rope_scaling_orig_ctx_len(yarn_context)
    if experts:
        writer.add_expert_count(experts)
        writer.add_expert_used_count(experts_used)
        writer.add_expert_feed_forward_length(hidden)
        # 3 (softmax over the selected top-k) is llama.cpp's value that gguf's enum does not list
        writer.add_uint32(f"{architecture}.expert_gating_func", gating)
        if normalize is not None:
            writer.add_expert_weights_norm(normalize)
    if byte_vocabulary:
        from tinycore.llm.tokenizer import _byte_characters
        tokens = [_byte_characters()[byte] for byte in range(256)] + ["<|im_start|>", "<|im_end|>"]
        vocab = len(tokens)
        writer.add_token_types([1] * 256 + [3, 3])
        writer.add_eos_token_id(257)
        writer.add_chat_template("{% for message in messages %}<|im_start|>{{ message.role }}\n...")
    else:
        tokens = [f"t{index}" for index in range(vocab)]
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_merges([])

    def matrix(name: str, rows: int, columns: int, kind: str | None = None) -> None:
        kind = kind or matrix_type
        data = weight_array(kind, rows, columns, generator)
        raw_dtype = None if kind in ("F32", "F16") else gguf.GGMLQuantizationType[kind]
        writer.add_tensor(name, data, raw_dtype=raw_dtype)

    def vector(name: str, size: int, around: float = 1.0) -> None:
        writer.add_tensor(name, (around + 0.1 * generator.standard_normal(size)).astype(numpy.float32))
    matrix("token_embd.weight", vocab, dim)
    vector("output_norm.weight", dim)
    if not tied:
        matrix("output.weight", vocab, dim)
    if rope_factors:
        writer.add_tensor("rope_freqs.weight", generator.uniform(1.0, 4.0, head_dim // 2).astype(numpy.float32))
    for layer in range(layers):
        prefix = f"blk.{layer}."
        vector(prefix + "attn_norm.weight", dim)
        vector(prefix + "ffn_norm.weight", dim)
        matrix(prefix + "attn_q.weight", heads * head_dim, dim)
        matrix(prefix + "attn_k.weight", kv_heads * head_dim, dim)
        matrix(prefix + "attn_v.weight", kv_heads * head_dim, dim)
        matrix(prefix + "attn_output.weight", dim, heads * head_dim)
        if architecture == "qwen2":
            for name, size in (("attn_q.bias", heads * head_dim), ("attn_k.bias", kv_heads * head_dim),
                               ("attn_v.bias", kv_heads * head_dim)):
                vector(prefix + name, size, around=0.0)
        if architecture in ("qwen3", "qwen3moe"):
            vector(prefix + "attn_q_norm.weight", head_dim)
            vector(prefix + "attn_k_norm.weight", head_dim)
        if experts:
            matrix(prefix + "ffn_gate_inp.weight", experts, dim, "F32")
            if selection_bias:
                vector(prefix + "exp_probs_b.bias", experts, around=0.0)
            for name, rows, columns in (("ffn_gate_exps", hidden, dim), ("ffn_up_exps", hidden, dim),
                                        ("ffn_down_exps", dim, hidden)):
                stacked = numpy.stack([weight_array(matrix_type, rows, columns, generator) for _ in range(experts)])
                raw_dtype = None if matrix_type in ("F32", "F16") else gguf.GGMLQuantizationType[matrix_type]
                writer.add_tensor(prefix + name + ".weight", stacked, raw_dtype=raw_dtype)
        else:
            matrix(prefix + "ffn_gate.weight", hidden, dim)
            matrix(prefix + "ffn_up.weight", hidden, dim)
            matrix(prefix + "ffn_down.weight", dim, hidden)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def greedy_reference(path: str, ids: list[int], count: int, stop: tuple[int, ...] = ()) -> list[int]:
    """The tokens greedy decoding picks after `ids`, by the numpy reference (whole sequence each step)."""
    import llm_reference
    sequence = list(ids)
    generated: list[int] = []
    for _ in range(count):
        token = int(numpy.argmax(llm_reference.logits(path, sequence)[-1]))
        generated.append(token)
        if token in stop:
            break
        sequence.append(token)
    return generated


def byte_text(tokens: list[int]) -> str:
    """The text of byte-vocabulary tokens (ids below 256 stand for the bytes of the byte-level alphabet, in order)."""
    return bytes(token for token in tokens if token < 256).decode("utf-8", errors="replace")
