"""Integer prefill products (tinycore.llm.int8_linear): activations quantized per block of 32 as llama.cpp's Q8_0
does, each type's weight integers, and the products against numpy, which quantizes x the same way."""
from __future__ import annotations

import numpy
import pytest
from llm_fixtures import random_blocks, record_largest_allocation

from tinycore import Tensor
from tinycore.llm import int8_linear as int8_module
from tinycore.nn.gguf import GGML_TYPES, integer_blocks

QUANTIZED = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K"]
TYPE_IDS = {name: kind for kind, (name, _, _) in GGML_TYPES.items()}


def _numpy_quantized(x: numpy.ndarray) -> tuple[numpy.ndarray, numpy.ndarray]:
    """x (rows, inputs) float32 per block of 32: int8 values round(x * (127 / amax)) (halves to even) and float32
    scales amax / 127, 0 for a block of zeros."""
    blocks = x.reshape(x.shape[0], -1, 32)
    largest = numpy.abs(blocks).max(-1, keepdims=True)
    with numpy.errstate(divide="ignore"):
        inverse = numpy.where(largest > 0, numpy.float32(127) / largest, numpy.float32(0)).astype(numpy.float32)
    values = numpy.round(blocks * inverse).astype(numpy.int8)
    return values, (largest[..., 0] / numpy.float32(127)).astype(numpy.float32)


def _activations(rows: int, inputs: int, seed: int) -> numpy.ndarray:
    x = numpy.random.default_rng(seed).standard_normal((rows, inputs)).astype(numpy.float32)
    x[0, :32] = 0.0  # a block of zeros: scale 0, values 0
    x[1, 32:64] *= 1e-3  # a small block: its own scale, not the row's
    return x


def test_quantize_rows_matches_numpy() -> None:
    """quantize_rows gives numpy's values and scales exactly, a block of zeros included, and the lane sums of the
    values per half block; the same x node is quantized once."""
    x = _activations(5, 128, seed=1)
    tensor = Tensor(x).realize()
    int8_module.forget_quantized()
    quantized = int8_module.quantize_rows(tensor)
    values, scale = _numpy_quantized(x)
    numpy.testing.assert_array_equal(quantized.words.numpy(), values.view(numpy.int32))  # 4 bytes a word
    numpy.testing.assert_array_equal(quantized.scale.numpy(), scale)
    sums = values.astype(numpy.int32).reshape(5, 4, 2, 16).sum(-1)
    numpy.testing.assert_array_equal(quantized.sums.numpy(), sums)
    assert int8_module.quantize_rows(tensor) is quantized
    with pytest.raises(ValueError, match="multiple of 32"):
        int8_module.quantize_rows(Tensor.zeros(2, 48))


@pytest.mark.parametrize("type_name", QUANTIZED)
def test_integer_blocks_match_gguf(type_name: str) -> None:
    """Each type's integers (in -128..127) times their scale plus their minimum are gguf's dequantized values
    exactly."""
    import gguf
    blocks = random_blocks(type_name, 6, seed=TYPE_IDS[type_name])
    integers = integer_blocks(Tensor(blocks), TYPE_IDS[type_name])
    values = integers.values.numpy()
    assert values.dtype == numpy.int32 and values.min() >= -128 and values.max() <= 127
    halves = values.reshape(6, -1, 2, 16).astype(numpy.float32) * integers.scale.numpy()[..., None]
    if integers.minimum is not None:
        halves = halves + integers.minimum.numpy()[..., None, None]
    expected = gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType[type_name]).reshape(halves.shape)
    numpy.testing.assert_array_equal(halves, expected)


@pytest.mark.parametrize("rows", [33, 64, 65])
@pytest.mark.parametrize("type_name", QUANTIZED)
def test_int8_linear_matches_numpy_integers(type_name: str, rows: int) -> None:
    """x @ W.T in integers equals numpy's: x quantized the same way, sum over blocks of x's scale times the block's
    integer products with W (gguf's dequantization of the same bytes is the weight's scale times its integers plus
    its minimum, so this is the integer math regrouped), in float64: equal up to float32 rounding. Two slabs of
    output rows, through the bound Variable."""
    import gguf
    outputs, inputs = 48, 512
    kind = TYPE_IDS[type_name]
    blocks = random_blocks(type_name, outputs * inputs // GGML_TYPES[kind][1], seed=21 + rows)
    x = _activations(rows, inputs, seed=rows)
    int8_module.forget_quantized()
    got = int8_module.int8_linear(Tensor(x).realize(), Tensor(blocks).realize(), kind, (outputs, inputs),
                                  slab_rows=24).numpy()
    values, scale = _numpy_quantized(x)
    dense = gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType[type_name]).reshape(outputs, inputs)
    quantized_x = (values.astype(numpy.float64) * scale[..., None]).reshape(rows, inputs)
    expected = quantized_x @ dense.astype(numpy.float64).T
    assert got.shape == (rows, outputs)
    numpy.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6 * numpy.abs(expected).max())
    # and the quantization error against the float product stays that of 8-bit activations
    exact = x.astype(numpy.float64) @ dense.astype(numpy.float64).T
    assert numpy.abs(got - exact).max() < 0.02 * numpy.abs(exact).max()


def test_weight_linear_takes_integers_when_enabled(monkeypatch: pytest.MonkeyPatch) -> None:
    """With INT8_PREFILL=1 on a device that declares int8 dot products, a prefill product of a quantized weight runs
    in integers (it then matches numpy's integer math, which the float slabs do not within this tolerance), and no
    buffer larger than the int8 slab budget is allocated (no float copy of the weight); off, the float path runs."""
    import gguf

    from tinycore.helpers import Context
    from tinycore.llm import weights as weights_module
    outputs, inputs, rows = 96, 512, 40
    monkeypatch.setattr(weights_module, "SLAB_BYTES", 32 * inputs)  # int8 slabs of 32 rows: three of them
    monkeypatch.setattr(weights_module, "fast_int8_dot_products", lambda device: True)
    blocks = random_blocks("Q4_K", outputs * inputs // 256, seed=5)
    weight = weights_module.GGUFWeight("w", TYPE_IDS["Q4_K"], (outputs, inputs), Tensor(blocks).realize())
    x = _activations(rows, inputs, seed=9)
    values, scale = _numpy_quantized(x)
    dense = gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType["Q4_K"]).reshape(outputs, inputs)
    integer = (values.astype(numpy.float64) * scale[..., None]).reshape(rows, inputs) @ dense.astype(numpy.float64).T
    activations = Tensor(x.reshape(1, rows, inputs)).realize()
    largest = record_largest_allocation(monkeypatch, activations.device)
    int8_module.forget_quantized()
    with Context(INT8_PREFILL=1):
        got = weight.linear(activations).numpy()[0]
    assert largest[0] <= 32 * inputs * 4, f"a {largest[0]} byte buffer: more than one slab at a time"
    tolerance = {"rtol": 1e-5, "atol": 1e-6 * numpy.abs(integer).max()}
    numpy.testing.assert_allclose(got, integer, **tolerance)
    with Context(INT8_PREFILL=0):
        floats = weight.linear(activations).numpy()[0]
    numpy.testing.assert_allclose(floats, x @ dense.T, rtol=1e-4, atol=1e-6 * numpy.abs(integer).max())
    with pytest.raises(AssertionError):
        numpy.testing.assert_allclose(floats, integer, **tolerance)


@pytest.mark.parametrize("matrix_type", ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K"])
def test_model_prefill_in_integers_matches_reference(tmp_path: object, matrix_type: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A prompt of 37 tokens (past every lane form) with INT8_PREFILL=1: the logits stay within 2.5% of the largest
    reference logit (the float32 path: 1e-3). 8-bit activations round each value by up to 1/254 of its block's
    largest; measured 0.4-1.6% of the largest logit on these random models. Q6_K is left out here: its random model's
    attention scores are in the hundreds, so a 1% change flips whole softmax rows (two of 37 positions moved by more
    than half the logit scale, the others by about 2%); its product is checked above against numpy's integers."""
    import os

    import llm_reference
    from llm_fixtures import write_model

    from tinycore.helpers import Context
    from tinycore.llm import weights as weights_module
    from tinycore.llm.model import Transformer
    monkeypatch.setattr(weights_module, "fast_int8_dot_products", lambda device: True)
    block = 256 if matrix_type.endswith("_K") else 64
    path = os.path.join(str(tmp_path), "int8.gguf")
    write_model(path, matrix_type=matrix_type, dim=block, hidden=2 * block, layers=1, heads=4, kv_heads=2, vocab=16)
    tokens = [(7 * index + 3) % 16 for index in range(37)]
    expected = llm_reference.logits(path, tokens)
    int8_module.forget_quantized()
    with Context(INT8_PREFILL=1):
        got = Transformer.from_gguf(path, max_context=64)([tokens], 0).numpy()[0]
    numpy.testing.assert_allclose(got, expected, rtol=0, atol=0.025 * numpy.abs(expected).max())


@pytest.mark.parametrize("declared", [True, False])
def test_product_kernel_tiles_rows_and_outputs_where_declared(declared: bool) -> None:
    """Where the renderer declares int8 dot products, the product kernel's register tile takes ROW_GROUP rows per
    loaded weight word and DOT4_OUTPUTS outputs per loaded word of x (tinycore.codegen.optimize.Heuristic.dot4_tile);
    elsewhere it keeps the small-axis upcast of the rows alone. The product as this host runs it equals numpy's
    integer sums (Q8_0's bytes and scales read straight from the blocks)."""
    from tinycore.codegen import lower_to_program
    from tinycore.codegen.int8_dot import dot4_words
    from tinycore.codegen.opt import Kernel, OptOps
    from tinycore.codegen.optimize import DOT4_OUTPUTS, choose_optimizations
    from tinycore.device.registry import Device
    from tinycore.engine.memory import device_facts
    from tinycore.helpers import prod
    from tinycore.schedule import create_schedule
    outputs, inputs, rows = 16, 256, 8
    blocks = random_blocks("Q8_0", outputs * inputs // 32, seed=4)
    x = _activations(rows, inputs, seed=4)
    int8_module.forget_quantized()
    quantized = int8_module.quantize_rows(Tensor(x).realize())
    slab = int8_module.integer_slab(Tensor(blocks).realize(), TYPE_IDS["Q8_0"], inputs, 0, outputs)
    product = int8_module.int8_product(quantized, slab)
    asts = [item.ast for item in create_schedule([product.uop], device_facts).items if not item.is_copy]
    [ast] = [ast for ast in asts if dot4_words(ast) is not None]
    renderer = Device["CPU"].renderer
    before = renderer.int8_dot_products
    try:
        renderer.int8_dot_products = declared
        choices = choose_optimizations(Kernel(ast), renderer)
        program = lower_to_program(ast, renderer)
    finally:
        renderer.int8_dot_products = before
    upcast = prod(opt.amount for opt in choices.opts if opt.op is OptOps.UPCAST)
    assert upcast == int8_module.ROW_GROUP * (DOT4_OUTPUTS if declared else 1), choices.opts
    assert ("tc_dot4_u8s8_" in program.src) == declared
    got = product.numpy()
    values, scale = _numpy_quantized(x)
    integers = blocks.view(numpy.uint8).reshape(outputs, inputs // 32, 34)
    weight_scale = integers[..., :2].copy().view(numpy.float16)[..., 0].astype(numpy.float64)
    weight = integers[..., 2:].view(numpy.int8).astype(numpy.float64)  # (outputs, blocks, 32)
    sums = numpy.einsum("rbi,obi->rob", values.astype(numpy.float64), weight)  # exact integer sums per block
    expected = (sums * scale[:, None, :] * weight_scale[None]).sum(-1)
    numpy.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6 * numpy.abs(expected).max())
