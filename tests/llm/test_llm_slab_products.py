"""Prefill products of quantized weights a slab of output rows at a time (tinycore.llm.weights._slab_linear): the
captured replays that run them after the first calls, against numpy on gguf's dequantization."""
from __future__ import annotations

import numpy
import pytest
from llm_fixtures import random_blocks

from tinycore import GlobalCounters, Tensor, TinyJit
from tinycore.llm import weights as weights_module
from tinycore.nn.gguf import GGML_TYPES

TYPE_IDS = {name: kind for kind, (name, _, _) in GGML_TYPES.items()}
OUTPUTS, INPUTS, SLAB = 96, 512, 32
ROWS = weights_module.GROUPED_LANE_ROWS + 4  # more rows than either lane form takes


def _weight(type_name: str, seed: int, chunks: int = 1) -> tuple[weights_module.GGUFWeight, numpy.ndarray]:
    """A random (OUTPUTS, INPUTS) weight of `type_name` (repacked into `chunks` column chunks) and its float32
    values from gguf's numpy dequantization."""
    import gguf
    blocks = random_blocks(type_name, OUTPUTS * INPUTS // GGML_TYPES[TYPE_IDS[type_name]][1], seed=seed)
    weight = weights_module.GGUFWeight("w", TYPE_IDS[type_name], (OUTPUTS, INPUTS), Tensor(blocks).realize())
    if chunks > 1:
        weight.repack(chunks)
    dense = gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType[type_name]).reshape(OUTPUTS, INPUTS)
    return weight, dense


def _close(got: numpy.ndarray, expected: numpy.ndarray) -> None:
    # float32 sums of 512 products in another order: errors relative to the sums' scale (random blocks are large)
    numpy.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6 * numpy.abs(expected).max())


@pytest.fixture(autouse=True)
def _small_slabs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Slabs of SLAB rows (three per weight) and no captured products left from another test."""
    monkeypatch.setattr(weights_module, "SLAB_BYTES", SLAB * INPUTS * 4)
    monkeypatch.setattr(weights_module, "_slab_products", {})
    assert weights_module._slab_rows(OUTPUTS, INPUTS) == SLAB


@pytest.mark.parametrize(("type_name", "chunks"), [("Q4_K", 1), ("Q6_K", 1), ("Q8_0", 4)])
def test_replayed_slab_products_match_numpy(type_name: str, chunks: int) -> None:
    """Two weights of one type and shape share a captured product: calls 3 and on replay it with each one's bytes
    and a new x, every slab with its own rows, and no call overwrites an earlier call's result."""
    first, first_dense = _weight(type_name, seed=3, chunks=chunks)
    second, second_dense = _weight(type_name, seed=4, chunks=chunks)
    kept: list[tuple[Tensor, numpy.ndarray]] = []
    for call in range(4):
        for weight, dense in ((first, first_dense), (second, second_dense)):
            x = numpy.random.default_rng(10 * call + len(kept)).standard_normal((1, ROWS, INPUTS)).astype(
                numpy.float32)
            kept.append((weight.linear(Tensor(x).realize()), x @ dense.T))
    assert len(weights_module._slab_products) == 1
    for result, expected in kept:
        _close(result.numpy(), expected)


def test_slab_product_inside_a_captured_step_matches_numpy() -> None:
    """Slab products in a function under TinyJit (a batch's decode step with more rows than the fused forms take):
    the replays multiply each slab by its own rows (a slab start bound as one Variable replayed the last slab's
    rows for every slab)."""
    weight, dense = _weight("Q4_K", seed=5)
    step = TinyJit(lambda x: weight.linear(x).realize())
    for call in range(4):
        x = numpy.random.default_rng(call).standard_normal((weights_module.FUSED_ROWS + 4, INPUTS)).astype(
            numpy.float32)
        _close(step(Tensor(x).realize()).numpy(), x @ dense.T)


def test_integer_slab_product_inside_a_captured_step_matches_numpy() -> None:
    """The integer prefill product (tinycore.llm.int8_linear) in a function under TinyJit: each replayed slab uses
    its own rows. x is quantized per block of 32 to int8 (as llama.cpp's Q8_0), so the result is near x @ W.T within
    that rounding; a slab with another slab's rows is off by the products' own scale."""
    from tinycore.llm.int8_linear import int8_linear
    weight, dense = _weight("Q4_K", seed=11)
    step = TinyJit(lambda x: int8_linear(x, weight.data, weight.ggml_type, weight.shape, SLAB).realize())
    for call in range(4):
        x = numpy.random.default_rng(20 + call).standard_normal((8, INPUTS)).astype(numpy.float32)
        expected = x @ dense.T
        numpy.testing.assert_allclose(step(Tensor(x).realize()).numpy(), expected, rtol=0,
                                      atol=0.02 * numpy.abs(expected).max())


def test_slab_product_computes_x_once() -> None:
    """A lazy x is computed by one kernel, not once per slab: 1 + 2 kernels per slab (dequantize, multiply) + 1
    (the pieces joined)."""
    weight, dense = _weight("Q8_0", seed=6)  # no scales stored first (Q4_K's are: a kernel more per slab)
    x = numpy.random.default_rng(7).standard_normal((1, ROWS, INPUTS)).astype(numpy.float32)
    lazy = Tensor(x).realize() * 2
    GlobalCounters.reset()
    result = weight.linear(lazy).realize()
    assert GlobalCounters.kernel_count == 1 + 2 * (OUTPUTS // SLAB) + 1
    _close(result.numpy(), 2 * x @ dense.T)


def test_replayed_slab_products_hold_no_slab() -> None:
    """Between calls a captured product holds none of its float32 slabs: the device memory in use after a call is
    what it was before, plus the result."""
    weight, _ = _weight("Q4_K", seed=8)
    x = Tensor(numpy.random.default_rng(9).standard_normal((1, ROWS, INPUTS)).astype(numpy.float32)).realize()
    for _ in range(2):  # the plain call and the captured one
        weight.linear(x)
    before = GlobalCounters.mem_used
    result = weight.linear(x)
    assert GlobalCounters.mem_used - before == result.nbytes()
