"""Fuzzing the ONNX reader: seeded mutations (truncation, flipped bytes, extreme varints, spliced copies) of a valid
model's bytes. Each mutated file must build and run, or raise one of the documented errors: OnnxFormatError (a
ValueError) for a malformed file, NotImplementedError for an op, opset or type the runner lacks, FileNotFoundError
for a missing external file, and RuntimeError naming the node or input at run time. Nothing may crash or hang.
TINYCORE_FUZZ_LONG=1 runs ten times as many files."""
from __future__ import annotations

import os
import random

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from models import small_classifier  # noqa: E402

from tinycore.nn.onnx import OnnxFormatError, OnnxRunner  # noqa: E402

FILES = 3_000 if os.environ.get("TINYCORE_FUZZ_LONG") == "1" else 300
DOCUMENTED = (OnnxFormatError, NotImplementedError, FileNotFoundError, RuntimeError)


def _truncate(data: bytes, rng: random.Random) -> bytes:
    return data[:rng.randrange(len(data))]


def _flip(data: bytes, rng: random.Random) -> bytes:
    mutated = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        mutated[rng.randrange(len(mutated))] = rng.randrange(256)
    return bytes(mutated)


def _extreme_varint(data: bytes, rng: random.Random) -> bytes:
    position = rng.randrange(len(data))
    varint = bytes([0xFF] * rng.randint(1, 10) + [0x01])
    return data[:position] + varint + data[position + rng.randint(0, 3):]


def _splice(data: bytes, rng: random.Random) -> bytes:
    start, end = sorted(rng.randrange(len(data)) for _ in range(2))
    position = rng.randrange(len(data))
    return data[:position] + data[start:end] + data[position:]


MUTATIONS = [_truncate, _flip, _extreme_varint, _splice]


def test_mutated_models_load_or_raise_documented_errors():
    data = small_classifier()[0].SerializeToString()
    rng = random.Random(44)
    x = np.ones((1, 3, 8, 8), np.float32)
    outcomes = {"ran": 0, "refused": 0}
    for index in range(FILES):
        mutated = MUTATIONS[index % len(MUTATIONS)](data, rng)
        try:
            runner = OnnxRunner(mutated)
            inputs = {name: x for name in runner.graph_inputs}
            runner(inputs)
            outcomes["ran"] += 1
        except DOCUMENTED as error:
            assert str(error), f"mutation {index} raised {type(error).__name__} without a message"
            outcomes["refused"] += 1
    assert outcomes["refused"] > FILES // 4, outcomes
