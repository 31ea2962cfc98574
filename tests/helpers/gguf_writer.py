"""A small GGUF 3 writer for the tests, following the format description (not the gguf package), and random
quantized blocks to fill its tensors."""
from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import numpy as np

# ggml type id -> (elements per block, bytes per block)
BLOCKS = {0: (1, 4), 1: (1, 2), 30: (1, 2), 2: (32, 18), 3: (32, 20), 8: (32, 34), 12: (256, 144), 14: (256, 210)}
SCALAR_FORMATS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def string_bytes(text: str) -> bytes:
    """`text` as GGUF writes a string: its UTF-8 length (uint64) and bytes."""
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def _value(value_type: int, value: Any) -> bytes:
    """One metadata value of GGUF type `value_type` (arrays as (element type, items))."""
    if value_type in SCALAR_FORMATS:
        return struct.pack("<" + SCALAR_FORMATS[value_type], value)
    if value_type == 8:
        return string_bytes(value)
    element_type, items = value
    return struct.pack("<IQ", element_type, len(items)) + b"".join(_value(element_type, item) for item in items)


def write_gguf(path: Path, metadata: list[tuple[str, int, Any]], tensors: list[tuple[str, tuple[int, ...], int, bytes]],
               alignment: int = 32) -> Path:
    """A GGUF 3 file: `metadata` as (key, value type, value), `tensors` as (name, shape, ggml type, raw bytes)."""
    header = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata))
    for key, value_type, value in metadata:
        header += string_bytes(key) + struct.pack("<I", value_type) + _value(value_type, value)
    offset, data = 0, b""
    for name, shape, ggml_type, raw in tensors:
        header += string_bytes(name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", size)
                                                                             for size in reversed(shape))
        header += struct.pack("<IQ", ggml_type, offset)
        padded = raw + b"\0" * (-len(raw) % alignment)
        data += padded
        offset += len(padded)
    header += b"\0" * (-len(header) % alignment)
    path.write_bytes(header + data)
    return path


def random_blocks(ggml_type: int, count: int, rng: np.random.Generator) -> bytes:
    """`count` blocks of random quants with finite float16 scales."""
    _, size = BLOCKS[ggml_type]
    blocks = rng.integers(0, 256, (count, size), dtype=np.uint8)
    halves = {2: [0], 3: [0, 2], 8: [0], 12: [0, 2], 14: [208]}[ggml_type]
    for position in halves:
        scales = (rng.standard_normal(count) * 0.1).astype("<f2")
        blocks[:, position:position + 2] = scales.view(np.uint8).reshape(-1, 2)
    return blocks.tobytes()
