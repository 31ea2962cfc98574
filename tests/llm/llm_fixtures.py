"""Random GGUF blocks and tiny random-weight GGUF models for the tinycore.llm tests (from tinycore.llm.test_model),
greedy decoding by the float32 numpy reference of the transformer (llm_reference, which reads the file back with
gguf's own reader and dequantization), and the text of byte-vocabulary tokens."""
from __future__ import annotations

import numpy

from tinycore.llm.test_model import HALF_FIELDS, MODEL_FACTORS, random_blocks, weight_array, write_test_model

__all__ = ["HALF_FIELDS", "MODEL_FACTORS", "byte_text", "greedy_reference", "random_blocks", "weight_array",
           "write_model"]

write_model = write_test_model
"""A tiny random-weight model (tinycore.llm.test_model.write_test_model, whose output is byte for byte what the gguf
package's GGUFWriter writes: tests/llm/test_llm_test_model.py)."""


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
