"""Small random-weight GGUF models, for trying `tiny llm` without downloading one and for the tests.

`write_test_model(path)` writes a llama (or qwen) model of a few KB to a few MB whose matrices are random numbers
(float or raw quantized blocks). With `byte_vocabulary` its tokenizer is byte-level BPE over the 256 byte characters
without merges, plus the chatml tokens <|im_start|> and <|im_end|> and a chatml template, so it encodes any text and
chats; its answers are random bytes. `tiny llm --make-test-model PATH` writes one.

The file is written by `GGUFFileWriter`, a few lines of the format (see tinycore.nn.gguf), so no package beyond numpy
is needed.
"""
from __future__ import annotations

import os
import struct

import numpy

from tinycore.nn.gguf import DEFAULT_ALIGNMENT, GGML_TYPES

GGML_TYPE_IDS = {name: type_id for type_id, (name, _, _) in GGML_TYPES.items()}
"""ggml type name -> type id, for the types tinycore reads."""

HALF_FIELDS: dict[str, tuple[int, ...]] = {"Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,),
                                           "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,)}
"""Byte offsets of each quantized type's float16 factors inside a block."""

MODEL_FACTORS = {"Q4_0": 0.02, "Q4_1": 0.02, "Q5_0": 0.01, "Q5_1": 0.01, "Q8_0": 0.002, "Q4_K": 0.0005,
                 "Q5_K": 0.0003, "Q6_K": 0.005}
"""A block's largest factor per type that keeps random weights near unit scale."""

MetadataValue = int | float | bool | str | list[int] | list[str]
"""A metadata value: ints are written as u32 (i32 inside arrays), floats as f32."""

_U32, _I32, _F32, _BOOL, _STRING, _ARRAY = 4, 5, 6, 7, 8, 9


class GGUFFileWriter:
    """Collects metadata and tensors, then `write(path)` lays them out as GGUF version 3: header, key/values in the
    order added, tensor infos, and the data section with every tensor aligned to 32 bytes."""

    def __init__(self, architecture: str):
        self.metadata: list[tuple[str, int, bytes]] = []
        self.tensors: list[tuple[str, tuple[int, ...], int, bytes]] = []
        self.add("general.architecture", architecture)

    def add(self, key: str, value: MetadataValue, value_type: int | None = None) -> None:
        """Add the key `key` with `value` (`value_type`: a GGUF value type id, to override the default)."""
        if isinstance(value, list):
            element_type = _STRING if value and isinstance(value[0], str) else _I32
            packed = struct.pack("<IQ", element_type, len(value)) + b"".join(
                self._scalar(item, element_type) for item in value)
            self.metadata.append((key, _ARRAY, packed))
            return
        if value_type is None:
            value_type = _BOOL if isinstance(value, bool) else _U32 if isinstance(value, int) else \
                _F32 if isinstance(value, float) else _STRING
        self.metadata.append((key, value_type, self._scalar(value, value_type)))

    @staticmethod
    def _scalar(value: int | float | bool | str, value_type: int) -> bytes:
        if value_type == _STRING:
            encoded = str(value).encode()
            return struct.pack("<Q", len(encoded)) + encoded
        return struct.pack({_U32: "<I", _I32: "<i", _F32: "<f", _BOOL: "<?"}[value_type], value)

    def add_tensor(self, name: str, data: numpy.ndarray, type_name: str | None = None) -> None:
        """Add a tensor: a float32 or float16 array as it is, or with `type_name` (a quantized type, or BF16) the
        raw bytes (rows, bytes per row) of its blocks, whose element shape follows from the type's block size."""
        if type_name is None:
            type_name = {numpy.dtype(numpy.float32): "F32", numpy.dtype(numpy.float16): "F16"}[data.dtype]
            shape = tuple(data.shape)
        else:
            _, block_elements, block_bytes = GGML_TYPES[GGML_TYPE_IDS[type_name]]
            if data.shape[-1] % block_bytes:
                raise ValueError(f"{name}: a row of {data.shape[-1]} bytes is not whole {type_name} blocks")
            shape = (*data.shape[:-1], data.shape[-1] // block_bytes * block_elements)
        self.tensors.append((name, shape, GGML_TYPE_IDS[type_name], numpy.ascontiguousarray(data).tobytes()))

    def write(self, path: str | os.PathLike[str]) -> None:
        """Write the file."""
        def string(text: str) -> bytes:
            return self._scalar(text, _STRING)

        def padded(size: int) -> int:
            return -(-size // DEFAULT_ALIGNMENT) * DEFAULT_ALIGNMENT
        header = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(self.tensors), len(self.metadata)))
        for key, value_type, packed in self.metadata:
            header += string(key) + struct.pack("<I", value_type) + packed
        offset = 0
        for name, shape, type_id, data in self.tensors:
            header += string(name) + struct.pack("<I", len(shape))
            header += b"".join(struct.pack("<Q", size) for size in reversed(shape))
            header += struct.pack("<IQ", type_id, offset)
            offset += padded(len(data))
        header += bytes(padded(len(header)) - len(header))
        with open(path, "wb") as file:
            file.write(header)
            for _, _, _, data in self.tensors:
                file.write(data + bytes(padded(len(data)) - len(data)))


def byte_characters() -> list[str]:
    """The byte-level BPE alphabet: the character standing for each byte 0..255."""
    from tinycore.llm.tokenizer import _byte_characters
    characters = _byte_characters()
    return [characters[byte] for byte in range(256)]


def random_blocks(type_name: str, count: int, seed: int, largest: float = 0.2) -> numpy.ndarray:
    """`count` blocks of random bytes of ggml type `type_name` whose float16 factors are finite, of magnitude
    between largest/20 and `largest`."""
    _, _, block_bytes = GGML_TYPES[GGML_TYPE_IDS[type_name]]
    generator = numpy.random.default_rng(seed)
    blocks = generator.integers(0, 256, size=(count, block_bytes), dtype=numpy.uint8)
    for offset in HALF_FIELDS[type_name]:
        factors = (generator.uniform(largest / 20, largest, size=count) * generator.choice([-1, 1], size=count))
        blocks[:, offset:offset + 2] = factors.astype(numpy.float16).view(numpy.uint8).reshape(count, 2)
    return blocks


def weight_array(type_name: str, rows: int, columns: int, generator: numpy.random.Generator) -> numpy.ndarray:
    """A random (rows, columns) weight stored as `type_name`: float arrays for F32/F16, raw bytes otherwise (BF16 as
    its 16-bit patterns)."""
    if type_name in ("F32", "F16"):
        values = generator.standard_normal((rows, columns)) * 0.3
        return values.astype(numpy.float32 if type_name == "F32" else numpy.float16)
    if type_name == "BF16":
        values = (generator.standard_normal((rows, columns)) * 0.3).astype(numpy.float32)
        return (values.view(numpy.uint32) >> 16).astype(numpy.uint16).view(numpy.uint8).reshape(rows, columns * 2)
    if type_name not in MODEL_FACTORS:
        raise ValueError(f"no random weights of type {type_name!r}; types: F32, F16, BF16, "
                         f"{', '.join(MODEL_FACTORS)}")
    _, block_elements, block_bytes = GGML_TYPES[GGML_TYPE_IDS[type_name]]
    if columns % block_elements:
        raise ValueError(f"{type_name} rows hold whole blocks of {block_elements} values; {columns} columns do not")
    blocks = random_blocks(type_name, rows * columns // block_elements, int(generator.integers(1 << 30)),
                           MODEL_FACTORS[type_name])
    return blocks.reshape(rows, columns // block_elements * block_bytes)


def write_test_model(path: str | os.PathLike[str], architecture: str = "llama", matrix_type: str = "F32",
                     dim: int = 64, layers: int = 2, heads: int = 4, kv_heads: int = 2, hidden: int = 96,
                     vocab: int = 48, tied: bool = True, experts: int = 0, experts_used: int = 0, gating: int = 1,
                     normalize: bool | None = None, selection_bias: bool = False, rope_scaling: float = 0.0,
                     yarn_context: int = 0, rope_factors: bool = False, head_dim: int | None = None, seed: int = 0,
                     byte_vocabulary: bool = False, context: int = 64) -> None:
    """A random-weight model of `architecture` (llama, qwen2, qwen3, qwen3moe); matrices as `matrix_type`, vectors
    as F32; `context` tokens of context. `rope_scaling` is linear, or YaRN with `yarn_context` as the original
    context. `byte_vocabulary` gives it the byte-level vocabulary that encodes any text (then `vocab` is 258),
    otherwise `vocab` tokens named t0, t1, ... without merges."""
    generator = numpy.random.default_rng(seed)
    head_dim = head_dim or dim // heads
    writer = GGUFFileWriter(architecture)
    for key, value in (("block_count", layers), ("context_length", context), ("embedding_length", dim),
                       ("feed_forward_length", hidden), ("attention.head_count", heads),
                       ("attention.head_count_kv", kv_heads), ("attention.layer_norm_rms_epsilon", 1e-5),
                       ("rope.freq_base", 10000.0)):
        writer.add(f"{architecture}.{key}", value)
    if head_dim != dim // heads:
        writer.add(f"{architecture}.attention.key_length", head_dim)
        writer.add(f"{architecture}.attention.value_length", head_dim)
    if rope_scaling:
        writer.add(f"{architecture}.rope.scaling.type", "yarn" if yarn_context else "linear")
        writer.add(f"{architecture}.rope.scaling.factor", float(rope_scaling))
    if yarn_context:
        writer.add(f"{architecture}.rope.scaling.original_context_length", yarn_context)
    if experts:
        writer.add(f"{architecture}.expert_count", experts)
        writer.add(f"{architecture}.expert_used_count", experts_used)
        writer.add(f"{architecture}.expert_feed_forward_length", hidden)
        writer.add(f"{architecture}.expert_gating_func", gating)  # 3: softmax over the selected top-k (llama.cpp)
        if normalize is not None:
            writer.add(f"{architecture}.expert_weights_norm", normalize)
    if byte_vocabulary:
        tokens = byte_characters() + ["<|im_start|>", "<|im_end|>"]
        vocab = len(tokens)
        writer.add("tokenizer.ggml.token_type", [1] * 256 + [3, 3])
        writer.add("tokenizer.ggml.eos_token_id", 257)
        writer.add("tokenizer.chat_template", "{% for message in messages %}<|im_start|>{{ message.role }}\n...")
    else:
        tokens = [f"t{index}" for index in range(vocab)]
    writer.add("tokenizer.ggml.model", "gpt2")
    writer.add("tokenizer.ggml.tokens", tokens)

    def matrix(name: str, rows: int, columns: int, kind: str | None = None) -> None:
        kind = kind or matrix_type
        writer.add_tensor(name, weight_array(kind, rows, columns, generator),
                          None if kind in ("F32", "F16") else kind)

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
                writer.add_tensor(prefix + name + ".weight", stacked,
                                  None if matrix_type in ("F32", "F16") else matrix_type)
        else:
            matrix(prefix + "ffn_gate.weight", hidden, dim)
            matrix(prefix + "ffn_up.weight", hidden, dim)
            matrix(prefix + "ffn_down.weight", dim, hidden)
    writer.write(path)

