"""Random GGUF blocks and tiny random-weight GGUF models for the tinycore.llm tests (written with the `gguf` package's
GGUFWriter), and a float32 numpy reference of the transformer that reads the file back with gguf's own reader and
dequantization."""
from __future__ import annotations

import numpy

HALF_FIELDS: dict[str, tuple[int, ...]] = {"Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,),
                                           "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,)}
"""Byte offsets of each quantized type's float16 factors inside a block."""


def random_blocks(type_name: str, count: int, seed: int) -> numpy.ndarray:
    """`count` blocks of random bytes of ggml type `type_name` whose float16 factors are finite (scale-sized)."""
    import gguf
    kind = gguf.GGMLQuantizationType[type_name]
    _, block_bytes = gguf.GGML_QUANT_SIZES[kind]
    generator = numpy.random.default_rng(seed)
    blocks = generator.integers(0, 256, size=(count, block_bytes), dtype=numpy.uint8)
    for offset in HALF_FIELDS[type_name]:
        factors = (generator.uniform(0.01, 0.2, size=count) * generator.choice([-1, 1], size=count))
        blocks[:, offset:offset + 2] = factors.astype(numpy.float16).view(numpy.uint8).reshape(count, 2)
    return blocks
