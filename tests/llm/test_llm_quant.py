"""Dequantization of every supported ggml type against the `gguf` package's numpy dequantization, on random blocks,
and the fusion of a quantized weight into the matmul that reads it."""
from __future__ import annotations

import numpy
import pytest
from llm_fixtures import random_blocks, record_largest_allocation

from tinycore import Tensor, dtypes
from tinycore.nn.gguf import GGML_TYPES, dequantize

QUANTIZED = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K"]
TYPE_IDS = {name: kind for kind, (name, _, _) in GGML_TYPES.items()}


@pytest.mark.parametrize("device_float16", [True, False], ids=["float16", "integer-factors"])
@pytest.mark.parametrize("type_name", QUANTIZED)
def test_dequantize_matches_gguf(type_name: str, device_float16: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Random blocks dequantize to what gguf.quants.dequantize gives, exactly (both are float32 arithmetic of the
    same integers and float16 factors), with the factors converted by the device's float16 type and, as on a
    device without one, by integer ops."""
    import gguf

    from tinycore.nn import gguf as gguf_module
    if not device_float16:
        monkeypatch.setattr(gguf_module, "_has_float16", lambda device: False)
    blocks = random_blocks(type_name, 6, seed=len(type_name) * 7 + TYPE_IDS[type_name])
    expected = gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType[type_name]).reshape(-1)
    got = dequantize(Tensor(blocks), TYPE_IDS[type_name]).numpy()
    numpy.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("type_name", ["F16", "BF16"])
def test_plain_types_match_gguf(type_name: str) -> None:
    """F16 and BF16 weights are read as their dtype and widened to float32 as gguf's dequantization does."""
    import gguf

    from tinycore.llm.weights import GGUFWeight
    generator = numpy.random.default_rng(3)
    raw = generator.integers(0, 1 << 14, size=(4, 8), dtype=numpy.uint16)  # finite, positive bit patterns
    dtype = dtypes.float16 if type_name == "F16" else dtypes.bfloat16
    weight = GGUFWeight("w", TYPE_IDS[type_name], (4, 8), Tensor(raw).bitcast(dtype))
    expected = gguf.quants.dequantize(raw.view(numpy.uint8), gguf.GGMLQuantizationType[type_name])
    numpy.testing.assert_allclose(weight.float().numpy(), expected.reshape(4, 8), rtol=0, atol=0)


def test_dequantize_rejects_plain_type() -> None:
    """Asking to dequantize a type that is not block-quantized names the quantized types."""
    with pytest.raises(NotImplementedError, match="Q4_K"):
        dequantize(Tensor.zeros(1, 2, dtype=dtypes.uint8), 0)


@pytest.mark.parametrize("type_name", ["Q8_0", "Q4_0", "Q4_K", "Q6_K"])
def test_decode_matmul_does_not_materialize_weight(type_name: str) -> None:
    """x @ W.T for one row x and a quantized W: no kernel of the schedule writes a buffer as large as W (the
    dequantized values live only inside the matmul kernel); the result matches numpy on gguf's dequantization."""
    import gguf

    from tinycore.engine.memory import device_facts
    from tinycore.llm.weights import GGUFWeight
    from tinycore.schedule.cache import create_schedule
    rows, columns = 64, 512
    block_elements = GGML_TYPES[TYPE_IDS[type_name]][1]
    blocks = random_blocks(type_name, rows * columns // block_elements, seed=11)
    weight = GGUFWeight("w", TYPE_IDS[type_name], (rows, columns), Tensor(blocks).realize())
    x = numpy.random.default_rng(5).standard_normal((1, columns)).astype(numpy.float32)
    result = weight.linear(Tensor(x).realize())
    schedule = create_schedule([result.uop], device_facts).items
    written = [item.buffers[0].arg[1] for item in schedule if not item.is_copy]
    assert max(written) < rows * columns // 8, f"a kernel writes {max(written)} elements: the weight was materialized"
    expected = x @ gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType[type_name]).reshape(rows, columns).T
    numpy.testing.assert_allclose(result.numpy(), expected, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("type_name", ["Q4_0", "Q6_K"])
def test_prefill_matmul_dequantizes_in_slabs(type_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """x @ W.T for several rows of x dequantizes W a slab of output rows at a time (never a float32 temporary larger
    than SLAB_BYTES); the result matches numpy on gguf's dequantization."""
    import gguf

    from tinycore.llm import weights as weights_module
    rows, columns = 96, 512
    monkeypatch.setattr(weights_module, "SLAB_BYTES", 32 * columns * 4)  # slabs of 32 rows: three of them
    assert weights_module._slab_rows(rows, columns) == 32
    block_elements = GGML_TYPES[TYPE_IDS[type_name]][1]
    blocks = random_blocks(type_name, rows * columns // block_elements, seed=12)
    weight = weights_module.GGUFWeight("w", TYPE_IDS[type_name], (rows, columns), Tensor(blocks).realize())
    prompt = weights_module.GROUPED_LANE_ROWS + 4  # more rows than either lane form takes
    x = numpy.random.default_rng(6).standard_normal((1, prompt, columns)).astype(numpy.float32)
    activations = Tensor(x).realize()
    largest = record_largest_allocation(monkeypatch, activations.device)
    result = weight.linear(activations).numpy()
    assert largest[0] <= 32 * columns * 4, f"a {largest[0]} byte buffer: more than one slab was dequantized at once"
    expected = x @ gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType[type_name]).reshape(rows, columns).T
    # float32 sums of 512 products in another order: errors relative to the sums' scale (random blocks are large)
    numpy.testing.assert_allclose(result, expected, rtol=1e-4, atol=1e-6 * numpy.abs(expected).max())


@pytest.mark.parametrize("type_name", QUANTIZED)
def test_decode_matmul_is_one_kernel(type_name: str) -> None:
    """x @ W.T for one row x and a quantized W runs as one kernel: the blocks' float16 factors and sub-block scales
    are converted inside the matmul, not by kernels of their own (every type but Q8_0 adds one small kernel of x's
    operands per group of 8 values: sums for the offset of unsigned values or the minimums, x mixed or scaled for
    the nibble and high-bit terms); the result matches numpy on gguf's dequantization."""
    import gguf

    from tinycore.engine.memory import device_facts
    from tinycore.llm.weights import GGUFWeight
    from tinycore.schedule.cache import create_schedule
    rows, columns = 48, 512
    blocks = random_blocks(type_name, rows * columns // GGML_TYPES[TYPE_IDS[type_name]][1], seed=13)
    weight = GGUFWeight("w", TYPE_IDS[type_name], (rows, columns), Tensor(blocks).realize())
    x = numpy.random.default_rng(7).standard_normal((1, 1, columns)).astype(numpy.float32)
    result = weight.linear(Tensor(x).realize())
    kernels = [item for item in create_schedule([result.uop], device_facts).items if not item.is_copy]
    assert len(kernels) == (1 if type_name == "Q8_0" else 2), \
        [item.ast for item in kernels]
    assert result.shape == (1, 1, rows)
    expected = x @ gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType[type_name]).reshape(rows, columns).T
    # float32 sums of 512 products in another order: errors relative to the sums' scale (random blocks are large)
    numpy.testing.assert_allclose(result.numpy(), expected, rtol=1e-4, atol=1e-6 * numpy.abs(expected).max())


# 8, 16 and 32 rows: in groups of ROW_GROUP (all but Q8_0, which takes the lane form up to LANE_ROWS rows only)
@pytest.mark.parametrize(("type_name", "rows"), [(type_name, rows) for type_name in ("Q4_0", "Q4_1", "Q5_0", "Q5_1",
                                                                                      "Q8_0")
                                                 for rows in (2, 3, 8, 16, 32) if type_name != "Q8_0" or rows <= 4])
def test_lane_products_of_several_rows(type_name: str, rows: int) -> None:
    """x @ W.T for a few rows of x (a short prompt, a batch's decode step) in lane form: W's blocks are not
    dequantized into a buffer, and the result matches numpy on gguf's dequantization."""
    import gguf

    from tinycore.engine.memory import device_facts
    from tinycore.llm.weights import GGUFWeight
    from tinycore.schedule.cache import create_schedule
    outputs, columns = 96, 256
    blocks = random_blocks(type_name, outputs * columns // 32, seed=15)
    weight = GGUFWeight("w", TYPE_IDS[type_name], (outputs, columns), Tensor(blocks).realize())
    x = numpy.random.default_rng(8).standard_normal((1, rows, columns)).astype(numpy.float32)
    result = weight.linear(Tensor(x).realize())
    schedule = create_schedule([result.uop], device_facts).items
    written = [item.buffers[0].arg[1] for item in schedule if not item.is_copy]
    # x's operands (up to 9 vectors of 8 per block and row) and the scales (one per block) are the largest buffers
    assert max(written) < outputs * columns, f"a kernel writes {max(written)} elements: W was dequantized"
    expected = x @ gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType[type_name]).reshape(outputs, columns).T
    assert result.shape == (1, rows, outputs)
    numpy.testing.assert_allclose(result.numpy(), expected, rtol=1e-4, atol=1e-6 * numpy.abs(expected).max())


@pytest.mark.parametrize("type_name", QUANTIZED)
def test_dequantize_blocks_keeps_leading_axes(type_name: str) -> None:
    """dequantize_blocks on blocks with two leading axes gives each block's values in place, in its block form."""
    import gguf

    from tinycore.nn.gguf import BLOCK_FORMS, dequantize_blocks
    blocks = random_blocks(type_name, 12, seed=14)
    form = BLOCK_FORMS[TYPE_IDS[type_name]]
    expected = gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType[type_name]).reshape(3, 4, *form)
    got = dequantize_blocks(Tensor(blocks.reshape(3, 4, -1)), TYPE_IDS[type_name]).numpy()
    numpy.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
    with pytest.raises(NotImplementedError, match="Q4_K"):
        dequantize_blocks(Tensor.zeros(1, 2, dtype=dtypes.uint8), 0)


@pytest.mark.parametrize("rows", [1, 3, 12, 24])
@pytest.mark.parametrize("type_name", ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"])
def test_repacked_weight_matches_numpy(type_name: str, rows: int) -> None:
    """A weight repacked into column chunks (blocks stored (chunks, outputs, blocks per chunk)) multiplies one row
    (decode), a few rows (lane form) and many rows (dequantized slabs) as numpy does on gguf's dequantization of the
    file's bytes; its float, rows and gather_rows still give the file's row order; the bytes are the same ones
    permuted, so the resident size does not change."""
    import gguf

    from tinycore.llm.weights import GGUFWeight
    outputs, inputs, chunks = 40, 512, 4
    blocks = random_blocks(type_name, outputs * inputs // 32, seed=17 + rows)
    weight = GGUFWeight("w", TYPE_IDS[type_name], (outputs, inputs), Tensor(blocks).realize())
    size = weight.nbytes
    weight.repack(chunks)
    assert weight.chunks == chunks and weight.nbytes == size
    stored = weight.data.numpy().reshape(chunks, outputs, inputs // 32 // chunks, -1)
    numpy.testing.assert_array_equal(stored.transpose(1, 0, 2, 3).reshape(blocks.shape), blocks)
    dense = gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType[type_name]).reshape(outputs, inputs)
    x = numpy.random.default_rng(rows).standard_normal((1, rows, inputs)).astype(numpy.float32)
    expected = x @ dense.T
    got = weight.linear(Tensor(x).realize()).numpy()
    numpy.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6 * numpy.abs(expected).max())
    numpy.testing.assert_allclose(weight.float().numpy(), dense, rtol=0, atol=0)
    numpy.testing.assert_allclose(weight.rows(7, 5).numpy(), dense[7:12], rtol=0, atol=0)
    indices = numpy.array([[3, 0], [39, 12]], dtype=numpy.int32)
    numpy.testing.assert_allclose(weight.gather_rows(Tensor(indices)).numpy(), dense[indices], rtol=0, atol=0)


@pytest.mark.parametrize(("type_name", "shape", "chunks"), [("Q4_0", (8, 64), 3), ("Q4_K", (8, 512), 2),
                                                           ("Q8_0", (2, 4, 64), 2), ("F32", (8, 64), 2)])
def test_repack_rejects_what_it_cannot_split(type_name: str, shape: tuple[int, ...], chunks: int) -> None:
    """Repacking names the weight when its type, rank or blocks per row do not allow the column chunks asked for."""
    from tinycore.llm.weights import GGUFWeight
    elements = int(numpy.prod(shape))
    if type_name == "F32":
        data = Tensor.zeros(*shape)
    else:
        data = Tensor(random_blocks(type_name, elements // GGML_TYPES[TYPE_IDS[type_name]][1], seed=3))
    weight = GGUFWeight("w", TYPE_IDS[type_name], shape, data)
    with pytest.raises(ValueError, match="cannot repack GGUFWeight"):
        weight.repack(chunks)
