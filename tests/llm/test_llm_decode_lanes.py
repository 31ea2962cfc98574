"""Decode against numpy and the float32 reference: the K-quant minimums as one vector per block (sub-blocks as
lanes), the one-row Q4_K / Q5_K products built on them against gguf's own dequantization, and the jitted decode step
replaying as one queue submission per token."""
from __future__ import annotations

import os

import gguf
import numpy
import pytest
from gguf import quants
from llm_fixtures import greedy_reference, write_model

from tinycore import Tensor, dtypes
from tinycore.device.registry import Device
from tinycore.hcq import HCQCompiled
from tinycore.llm.model import Transformer
from tinycore.llm.weights import GGUFWeight
from tinycore.nn.gguf import k_minimum_lanes


def _scale_minimum_k4(scales: numpy.ndarray, sub: int) -> tuple[numpy.ndarray, numpy.ndarray]:
    """ggml's get_scale_min_k4 for the 12 scale bytes of every block (blocks, 12): sub-block `sub`'s 6-bit scale
    and minimum, written from the format's description."""
    if sub < 4:
        return scales[:, sub] & 63, scales[:, sub + 4] & 63
    scale = (scales[:, sub + 4] & 0xF) | ((scales[:, sub - 4] >> 6) << 4)
    minimum = (scales[:, sub + 4] >> 4) | ((scales[:, sub] >> 6) << 4)
    return scale, minimum


@pytest.mark.parametrize("block_bytes", [144, 176])
def test_k_minimum_lanes_match_the_format(block_bytes: int) -> None:
    """Lane j is sub-block j's minimum for every byte pattern (random blocks, plus all-ones and all-zeros scale
    bytes so the high-bit paths see both extremes)."""
    generator = numpy.random.default_rng(7)
    raw = generator.integers(0, 256, size=(64, block_bytes), dtype=numpy.uint8)
    raw[0, 4:16], raw[1, 4:16] = 255, 0
    got = k_minimum_lanes(Tensor(raw).reshape(4, 16, block_bytes)).numpy().reshape(64, 8)
    expected = numpy.stack([_scale_minimum_k4(raw[:, 4:16].astype(numpy.int32), sub)[1] for sub in range(8)],
                           axis=1)
    numpy.testing.assert_array_equal(got, expected)
    assert got.max() <= 63 and got.min() >= 0


@pytest.mark.parametrize("ggml_type", [12, 13, 14])
@pytest.mark.parametrize("inputs", [256, 2048])
@pytest.mark.parametrize("rows", [1, 3, 4])
def test_k_lane_products_match_gguf_dequantization(ggml_type: int, inputs: int, rows: int) -> None:
    """x @ W.T for 1 to 4 rows of x in lane form (Q4_K, Q5_K, Q6_K), against numpy on gguf's dequantized weight
    (float64 sum)."""
    generator = numpy.random.default_rng(ggml_type + inputs)
    outputs, block_bytes = 24, {12: 144, 13: 176, 14: 210}[ggml_type]
    raw = generator.integers(0, 256, size=(outputs * inputs // 256, block_bytes), dtype=numpy.uint8)
    if ggml_type == 14:  # the block's float16 factor is its last two bytes
        raw[:, 208:210] = numpy.frombuffer(numpy.float16(0.003).tobytes(), dtype=numpy.uint8)
    else:  # d and dmin
        raw[:, 0:2] = numpy.frombuffer(numpy.float16(0.003).tobytes(), dtype=numpy.uint8)
        raw[:, 2:4] = numpy.frombuffer(numpy.float16(0.02).tobytes(), dtype=numpy.uint8)
    weight = GGUFWeight("w", ggml_type, (outputs, inputs), Tensor(raw))
    x = generator.standard_normal((rows, inputs)).astype(numpy.float32)
    leading = (2, 2) if rows == 4 else (rows,)  # (batch, T) rows as a short prompt of a batch brings them
    got = weight.linear(Tensor(x.reshape(*leading, inputs), dtype=dtypes.float32)).numpy()
    assert got.shape == (*leading, outputs)
    got = got.reshape(rows, outputs)
    dense = quants.dequantize(raw.reshape(outputs, -1), gguf.GGMLQuantizationType(ggml_type)).reshape(outputs, -1)
    expected = x.astype(numpy.float64) @ dense.astype(numpy.float64).T
    numpy.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * numpy.abs(expected).max())


def _model_file(tmp_path: os.PathLike[str], matrix_type: str) -> str:
    block = 256 if matrix_type.endswith("_K") else 64
    path = os.path.join(os.fspath(tmp_path), f"decode_{matrix_type}.gguf")
    write_model(path, matrix_type=matrix_type, dim=block, hidden=2 * block, layers=2, heads=4, kv_heads=2, vocab=24)
    return path


@pytest.mark.parametrize("matrix_type", ["Q4_0", "Q8_0", "Q4_K"])
def test_a_replayed_decode_step_is_one_submission_and_matches_the_reference(tmp_path: os.PathLike[str],
                                                                             matrix_type: str) -> None:
    """Greedy decoding picks the float32 reference's tokens, and on a queue device every decode step after
    TinyJit's capture, the reading of its logits included, is one submission to the device's queue (all of the
    step's kernels). Other devices count no submissions: there only the tokens are checked."""
    device = Device[Device.DEFAULT]
    queued = isinstance(device, HCQCompiled)
    path = _model_file(tmp_path, matrix_type)
    model = Transformer.from_gguf(path, max_context=16)
    prompt, count = [1, 5, 7], 7
    submissions: list[int] = []
    before = device.submissions if queued else 0
    generated = []
    for token in model.generate(prompt, max_new_tokens=count):
        if queued:
            submissions.append(device.submissions - before)
            before = device.submissions
        generated.append(token)
    assert generated == greedy_reference(path, prompt, count)
    assert model._decode.captured_kernel_count > 0
    if queued:  # tokens 0 (prefill), 1 and 2 (TinyJit's first calls) run eagerly; every later one is a replay
        assert submissions[3:] == [1] * (count - 3), submissions
