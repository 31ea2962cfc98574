"""Quantized ops keep integer accumulators (the products and sums inside the kernel are int32, compared exactly with
numpy's int32 arithmetic), and com.microsoft contrib ops (Attention, SkipLayerNormalization, FastGelu) match
onnxruntime, which implements them."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
onnxruntime = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from tinycore.nn.onnx import OnnxRunner  # noqa: E402
from tinycore.uop.ops import Ops  # noqa: E402


def _model(node: onnx.NodeProto, inputs: list[tuple[str, int, list[int]]], outputs: list[tuple[str, int]],
           initializers: dict[str, np.ndarray] | None = None, microsoft: bool = False) -> bytes:
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(name, kind, shape) for name, kind, shape in
                                            inputs],
                              [helper.make_tensor_value_info(name, kind, None) for name, kind in outputs],
                              [numpy_helper.from_array(value, name) for name, value in (initializers or {}).items()])
    opsets = [helper.make_opsetid("", 21)] + ([helper.make_opsetid("com.microsoft", 1)] if microsoft else [])
    return helper.make_model(graph, opset_imports=opsets, ir_version=10).SerializeToString()


def _reductions(tensor) -> set[str]:
    return {node.dtype.name for node in tensor.uop.toposort if node.op is Ops.REDUCE_AXIS}


def test_matmul_integer_accumulates_in_int32():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (5, 64), dtype=np.uint8)
    b = rng.integers(-128, 128, (64, 7), dtype=np.int8)
    a_zero, b_zero = np.array(3, np.uint8), np.array(-2, np.int8)
    node = helper.make_node("MatMulInteger", ["a", "b", "a_zero", "b_zero"], ["y"])
    data = _model(node, [("a", TensorProto.UINT8, [5, 64]), ("b", TensorProto.INT8, [64, 7])],
                  [("y", TensorProto.INT32)], {"a_zero": a_zero, "b_zero": b_zero})
    y = OnnxRunner(data, jit=False)({"a": a, "b": b})["y"]  # lazy, to inspect its kernels
    assert _reductions(y) == {"int"}, "the product must be summed in int32"
    expected = (a.astype(np.int32) - 3) @ (b.astype(np.int32) + 2)
    np.testing.assert_array_equal(y.numpy(), expected)


def test_qlinear_conv_accumulates_in_int32_and_matches_onnxruntime():
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, (1, 4, 9, 9), dtype=np.uint8)
    weights = {"x_scale": np.array(0.02, np.float32), "x_zero": np.array(120, np.uint8),
               "w": rng.integers(-127, 128, (6, 4, 3, 3), dtype=np.int8),
               "w_scale": rng.uniform(0.005, 0.02, 6).astype(np.float32), "w_zero": np.zeros(6, np.int8),
               "y_scale": np.array(0.15, np.float32), "y_zero": np.array(128, np.uint8),
               "bias": rng.integers(-500, 500, 6, dtype=np.int32)}
    node = helper.make_node("QLinearConv", ["x", "x_scale", "x_zero", "w", "w_scale", "w_zero", "y_scale", "y_zero",
                                            "bias"], ["y"], pads=[1, 1, 1, 1], strides=[2, 2])
    data = _model(node, [("x", TensorProto.UINT8, [1, 4, 9, 9])], [("y", TensorProto.UINT8)], weights)
    y = OnnxRunner(data, jit=False)({"x": x})["y"]
    assert _reductions(y) == {"int"}
    expected = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.max(np.abs(y.numpy().astype(np.int32) - expected.astype(np.int32))) <= 1


def test_qlinear_matmul_matches_onnxruntime():
    rng = np.random.default_rng(2)
    a = rng.integers(0, 256, (3, 32), dtype=np.uint8)
    weights = {"a_scale": np.array(0.03, np.float32), "a_zero": np.array(100, np.uint8),
               "b": rng.integers(0, 256, (32, 5), dtype=np.uint8), "b_scale": np.array(0.01, np.float32),
               "b_zero": np.array(130, np.uint8), "y_scale": np.array(0.2, np.float32),
               "y_zero": np.array(90, np.uint8)}
    node = helper.make_node("QLinearMatMul", ["a", "a_scale", "a_zero", "b", "b_scale", "b_zero", "y_scale", "y_zero"],
                            ["y"])
    data = _model(node, [("a", TensorProto.UINT8, [3, 32])], [("y", TensorProto.UINT8)], weights)
    y = OnnxRunner(data, jit=False)({"a": a})["y"]
    assert _reductions(y) == {"int"}
    expected = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"a": a})[0]
    assert np.max(np.abs(y.numpy().astype(np.int32) - expected.astype(np.int32))) <= 1


def _against_onnxruntime(data: bytes, inputs: dict[str, np.ndarray], rtol: float = 1e-4, atol: float = 1e-5) -> None:
    expected = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, inputs)
    actual = list(OnnxRunner(data)(inputs).values())
    for value, reference in zip(actual, expected, strict=True):
        np.testing.assert_allclose(value.numpy(), reference, rtol=rtol, atol=atol)


def test_microsoft_attention_matches_onnxruntime():
    rng = np.random.default_rng(3)
    batch, length, hidden, heads = 2, 5, 16, 4
    weights = {"weights": rng.standard_normal((hidden, 3 * hidden)).astype(np.float32) * 0.3,
               "bias": rng.standard_normal(3 * hidden).astype(np.float32) * 0.1}
    mask = np.array([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], np.int32)
    for unidirectional in (0, 1):
        node = helper.make_node("Attention", ["x", "weights", "bias", "mask"], ["y"], domain="com.microsoft",
                                num_heads=heads, unidirectional=unidirectional)
        data = _model(node, [("x", TensorProto.FLOAT, [batch, length, hidden]),
                             ("mask", TensorProto.INT32, [batch, length])], [("y", TensorProto.FLOAT)], weights,
                      microsoft=True)
        _against_onnxruntime(data, {"x": rng.standard_normal((batch, length, hidden)).astype(np.float32),
                                    "mask": mask})


def test_skip_layer_normalization_and_fast_gelu_match_onnxruntime():
    rng = np.random.default_rng(4)
    weights = {"gamma": rng.standard_normal(8).astype(np.float32), "beta": rng.standard_normal(8).astype(np.float32),
               "bias": rng.standard_normal(8).astype(np.float32)}
    node = helper.make_node("SkipLayerNormalization", ["x", "skip", "gamma", "beta", "bias"], ["y"],
                            domain="com.microsoft", epsilon=1e-5)
    data = _model(node, [("x", TensorProto.FLOAT, [2, 3, 8]), ("skip", TensorProto.FLOAT, [2, 3, 8])],
                  [("y", TensorProto.FLOAT)], weights, microsoft=True)
    _against_onnxruntime(data, {"x": rng.standard_normal((2, 3, 8)).astype(np.float32),
                                "skip": rng.standard_normal((2, 3, 8)).astype(np.float32)})
    node = helper.make_node("FastGelu", ["x", "bias"], ["y"], domain="com.microsoft")
    data = _model(node, [("x", TensorProto.FLOAT, [2, 8])], [("y", TensorProto.FLOAT)], {"bias": weights["bias"]},
                  microsoft=True)
    _against_onnxruntime(data, {"x": rng.standard_normal((2, 8)).astype(np.float32) * 3})


@pytest.mark.parametrize("kind,numpy_type", [(TensorProto.INT8, np.int8), (TensorProto.UINT8, np.uint8),
                                             (TensorProto.INT16, np.int16), (TensorProto.UINT16, np.uint16)])
def test_quantize_linear_rounds_halves_to_even_and_saturates(kind, numpy_type):
    # ties (x.5 after scaling), values just off a tie, huge values past any rounding trick, and a per-axis zero point
    halves = np.arange(-300, 300, dtype=np.float32) + 0.5
    near = np.array([0.49999997, -0.49999997, 2.5000002, -2.4999998, 1e7, -1e7, 3e38, -3e38, 7e6 + 0.5], np.float32)
    x = np.stack([np.concatenate([halves, near]) * 0.5] * 2)
    info = np.iinfo(numpy_type)
    zero = np.array([info.min // 2 + 3 if info.min else 7, info.max // 2], numpy_type)
    node = helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["y"], axis=0)
    data = _model(node, [("x", TensorProto.FLOAT, list(x.shape))], [("y", kind)],
                  {"scale": np.array([0.5, 0.5], np.float32), "zero": zero})
    y = OnnxRunner(data)({"x": x})["y"].numpy()
    expected = np.clip(np.round(x / np.float32(0.5)) + zero[:, None].astype(np.float64), info.min, info.max)
    np.testing.assert_array_equal(y, expected.astype(numpy_type))


def test_qdq_pair_on_an_activation_keeps_float_values_and_matches_numpy():
    """DequantizeLinear of a QuantizeLinear result starts from the saturated float integers, without narrowing them
    to int8 and widening them back; the values are those of numpy's quantize-then-dequantize (onnx's reference)."""
    from tinycore.dtype import dtypes
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.standard_normal(200).astype(np.float32) * 3, np.float32([40.0, -40.0, 0.25, -0.75])])
    scale, zero = np.float32(0.1), np.int8(-5)
    graph = helper.make_graph(
        [helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["q"]),
         helper.make_node("DequantizeLinear", ["q", "scale", "zero"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [x.size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array(scale), "scale"), numpy_helper.from_array(np.array(zero), "zero")])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10).SerializeToString()
    expected = (np.clip(np.round(x / scale) + zero, -128, 127) - zero) * scale
    lazy = OnnxRunner(data, jit=False)({"x": x})["y"]
    narrowing = [node for node in lazy.uop.toposort if node.op is Ops.CAST and node.dtype == dtypes.int8]
    assert not narrowing, "the pair narrows to int8 and back"
    np.testing.assert_array_equal(lazy.numpy(), expected.astype(np.float32))
    np.testing.assert_array_equal(OnnxRunner(data)({"x": x})["y"].numpy(), expected.astype(np.float32))
