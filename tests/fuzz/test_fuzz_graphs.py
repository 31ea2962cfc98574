"""Differential fuzzing of whole Tensor graphs (elementwise, reduce, movement, cat/stack) against numpy.

CI checks 1,000 graphs from a fixed seed and expects 0 mismatches; TINYCORE_FUZZ_LONG=1 checks 20,000. Each graph
structure runs on several input data sets so its kernels compile once (see tests/fuzz/fuzz_graphs.py).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fuzz_graphs import GraphBuilder, check_outputs, run_graphs  # noqa: E402

from tinycore import Tensor  # noqa: E402

LONG_RUN = os.environ.get("TINYCORE_FUZZ_LONG", "") == "1"
GRAPHS = 20_000 if LONG_RUN else 1_000
DATA_PER_STRUCTURE = 3
SEED = 20240


def test_random_graphs_match_numpy() -> None:
    """Every output of every generated graph has numpy's shape, dtype and values (within tolerance)."""
    stats = run_graphs(GRAPHS, SEED, DATA_PER_STRUCTURE)
    report = "\n\n".join(str(failure) for failure in stats.failures[:5])
    assert stats.graphs == GRAPHS
    assert stats.outputs >= GRAPHS
    assert not stats.failures, f"{len(stats.failures)} of {GRAPHS} graphs differ from numpy:\n{report}"


def test_fuzzer_detects_a_wrong_result() -> None:
    """The checker reports a Tensor result that differs from numpy's (so a green run means something)."""
    builder = GraphBuilder(Tensor, 0, 0)
    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    node = builder.add("Tensor(np.arange(6, dtype=np.float32).reshape(2, 3)).flip(0)", "np.flip(np.arange(6, "
                       "dtype=np.float32).reshape(2, 3), 1)", (2, 3), "float32", 6.0, 0.0)
    message = check_outputs(builder, [node], together=False)
    assert message is not None and "values differ" in message
    assert not np.array_equal(node.tensor.numpy(), np.flip(values, 1))


def test_fuzzer_checks_dtype_and_shape() -> None:
    """A result of the wrong dtype or shape is reported even when the values agree."""
    builder = GraphBuilder(Tensor, 0, 0)
    wrong_dtype = builder.add("Tensor(np.ones(3, dtype=np.float32))", "np.ones(3, dtype=np.int32)", (3,), "int32",
                              1.0, 0.0)
    assert "dtype" in (check_outputs(builder, [wrong_dtype], together=False) or "")
    wrong_shape = builder.add("Tensor(np.ones((1, 3), dtype=np.float32))", "np.ones((1, 3), dtype=np.float32)",
                              (1, 3), "float32", 1.0, 0.0)
    wrong_shape.expected = np.ones(3, dtype=np.float32)
    assert "shape" in (check_outputs(builder, [wrong_shape], together=False) or "")


def test_graphs_are_reproducible() -> None:
    """The same seeds build the same graph (the trace of a failure reproduces it)."""
    first, second = GraphBuilder(Tensor, 7, 3), GraphBuilder(Tensor, 7, 3)
    first.build()
    second.build()
    assert first.lines == second.lines
    other_data = GraphBuilder(Tensor, 7, 4)
    other_data.build()
    structure = [line.split("  # ")[0] for line in first.lines if "Tensor(np.array" not in line]
    assert structure == [line.split("  # ")[0] for line in other_data.lines if "Tensor(np.array" not in line]
