"""ONNX's 8-bit and 4-bit floats: the runner's bit conversions against ml_dtypes (onnx's reference), over every bit
pattern, every midpoint between neighbours (ties to even), out-of-range values, infinities and NaNs."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tinycore.nn.onnx import OnnxRunner
from tinycore.nn.onnx.small_floats import decode, encode
from tinycore.tensor import Tensor

FORMATS = {TensorProto.FLOAT8E4M3FN: ml_dtypes.float8_e4m3fn, TensorProto.FLOAT8E4M3FNUZ: ml_dtypes.float8_e4m3fnuz,
           TensorProto.FLOAT8E5M2: ml_dtypes.float8_e5m2, TensorProto.FLOAT8E5M2FNUZ: ml_dtypes.float8_e5m2fnuz,
           TensorProto.FLOAT4E2M1: ml_dtypes.float4_e2m1fn}
ALL_FORMATS = {**FORMATS, TensorProto.FLOAT8E8M0: ml_dtypes.float8_e8m0fnu}


def patterns(code: int) -> np.ndarray:
    """Every bit pattern of the format (16 for the 4-bit one)."""
    return np.arange(16 if code == TensorProto.FLOAT4E2M1 else 256, dtype=np.uint8)


def probes(code: int) -> np.ndarray:
    """Every value of the format, the midpoints between neighbours and a little off them, beyond the largest,
    tiny values, infinities, NaN and signed zeros, as float32."""
    values = np.unique(patterns(code).view(FORMATS[code]).astype(np.float32))
    values = values[np.isfinite(values)]
    middles = (values[1:] + values[:-1]) / 2
    nudged = np.concatenate([np.nextafter(middles, np.float32(np.inf)), np.nextafter(middles, np.float32(-np.inf))])
    largest = float(ml_dtypes.finfo(FORMATS[code]).max)
    extra = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, largest * 1.01, -largest * 1.01, largest * 1.1, 1e30, -1e30,
                      1e-30, -1e-30, 1e-8, 3.0e-3, -2.5e-3], np.float32)
    return np.concatenate([values, middles, nudged, extra]).astype(np.float32)


def reference_bits(values: np.ndarray, code: int, saturate: bool) -> np.ndarray:
    """onnx's reference conversion: clip to the finite range when saturating, then ml_dtypes' cast."""
    target = FORMATS[code]
    if saturate:
        largest = float(ml_dtypes.finfo(target).max)
        values = np.where(np.isnan(values), values, np.clip(values, -largest, largest))
    return values.astype(target).view(np.uint8)


@pytest.mark.parametrize("code", list(ALL_FORMATS), ids=lambda code: TensorProto.DataType.Name(code))
def test_decode_every_pattern(code: int) -> None:
    bits = patterns(code)
    expected = bits.view(ALL_FORMATS[code]).astype(np.float32)
    got = decode(Tensor(bits), code).numpy()
    np.testing.assert_array_equal(got, expected)
    numbers = ~np.isnan(expected)  # a NaN's sign bit carries no meaning
    np.testing.assert_array_equal(np.signbit(got[numbers]), np.signbit(expected[numbers]))


@pytest.mark.parametrize("saturate", [True, False])
@pytest.mark.parametrize("code", list(FORMATS), ids=lambda code: TensorProto.DataType.Name(code))
def test_encode_matches_ml_dtypes(code: int, saturate: bool) -> None:
    values = probes(code)
    got = encode(Tensor(values), code, saturate).numpy()
    expected = reference_bits(values, code, saturate or code == TensorProto.FLOAT4E2M1)
    got_values, expected_values = got.view(FORMATS[code]).astype(np.float32), expected.view(FORMATS[code])
    both_nan = np.isnan(got_values) & np.isnan(expected_values.astype(np.float32))
    mismatched = (got != expected) & ~both_nan
    assert not mismatched.any(), (values[mismatched][:8], got[mismatched][:8], expected[mismatched][:8])


@pytest.mark.parametrize("round_mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [True, False])
def test_encode_e8m0_matches_onnx(round_mode: str, saturate: bool) -> None:
    powers = np.ldexp(np.float32(1), np.arange(-126, 128)).astype(np.float32)
    values = np.concatenate([powers, powers * 1.5, powers * 1.25, powers * 1.75, np.nextafter(powers, np.inf),
                             [np.inf, -np.inf, np.nan, 0.0, -3.0, 3.4e38]]).astype(np.float32)
    expected = numpy_helper.to_float8e8m0(values, saturate, round_mode).view(np.uint8)
    got = encode(Tensor(values), TensorProto.FLOAT8E8M0, saturate, round_mode).numpy()
    np.testing.assert_array_equal(got, expected)


def _run_cast(source: np.ndarray, source_code: int, target_code: int, saturate: int) -> np.ndarray:
    """One Cast node run by OnnxRunner, its output as numpy bits or values."""
    node = helper.make_node("Cast", ["x"], ["y"], to=target_code, saturate=saturate)
    graph = helper.make_graph([node], "cast", [helper.make_tensor_value_info("x", source_code, list(source.shape))],
                              [helper.make_tensor_value_info("y", target_code, list(source.shape))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    return OnnxRunner(model.SerializeToString())({"x": source})["y"].numpy()


def test_cast_between_float8_types_through_the_runner() -> None:
    bits = np.arange(256, dtype=np.uint8)
    source = bits.view(ml_dtypes.float8_e4m3fnuz)
    got = _run_cast(source, TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2, 0)
    expected = source.astype(np.float32).astype(ml_dtypes.float8_e5m2).view(np.uint8)
    # 0x80 is NaN: a NaN's sign carries no meaning, so compare it as a NaN
    nan = np.isnan(source.astype(np.float32))
    np.testing.assert_array_equal(got[~nan], expected[~nan])
    assert np.isnan(got[nan].view(ml_dtypes.float8_e5m2).astype(np.float32)).all()
    as_float = _run_cast(source, TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT, 1)
    np.testing.assert_array_equal(as_float, source.astype(np.float32))


def test_quantize_and_dequantize_with_a_float8_zero_point() -> None:
    x = np.array([0.0, 1.0, -3.5, 1000.0, 1e-3, -7.0], np.float32)
    scale = np.float32(0.5)
    zero = np.zeros((), ml_dtypes.float8_e4m3fn)
    nodes = [helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "scale", "zero"], ["y"])]
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6])],
                              [numpy_helper.from_array(np.array(scale), "scale"),
                               numpy_helper.from_array(zero, "zero")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    onnx.checker.check_model(model)
    got = OnnxRunner(model.SerializeToString())({"x": x})["y"].numpy()
    expected = np.clip(x / scale, -448, 448).astype(ml_dtypes.float8_e4m3fn).astype(np.float32) * scale
    np.testing.assert_array_equal(got, expected)


def test_float8_type_survives_movement_ops_and_jit_replays() -> None:
    """A Reshape between a float8 input and a Cast keeps the input's type (its bits are not read as uint8), and the
    third call, a JIT replay, gives the same answer as the first."""
    source = np.array([[0.5, -2.0], [448.0, 1e-2]], np.float32).astype(ml_dtypes.float8_e4m3fn)
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["flat"]),
             helper.make_node("Cast", ["flat"], ["y"], to=TensorProto.FLOAT)]
    graph = helper.make_graph(nodes, "reshape_cast",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT8E4M3FN, [2, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
                              [numpy_helper.from_array(np.array([4], np.int64), "shape")])
    runner = OnnxRunner(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString())
    expected = source.astype(np.float32).reshape(4)
    for _ in range(3):
        np.testing.assert_array_equal(runner({"x": source})["y"].numpy(), expected)


def test_int2_cast_and_quantize() -> None:
    """2-bit integers: a Cast gives 0 outside the range (as onnx's reference), QuantizeLinear saturates."""
    x = np.array([-3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 5.0], np.float32)
    cast = _run_cast(x, TensorProto.FLOAT, TensorProto.INT2, 1)
    np.testing.assert_array_equal(cast, [0, -2, -1, 0, 1, 0, 0])
    node = helper.make_node("QuantizeLinear", ["x", "scale"], ["y"], output_dtype=TensorProto.UINT2)
    graph = helper.make_graph([node], "q2", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [7])],
                              [helper.make_tensor_value_info("y", TensorProto.UINT2, [7])],
                              [numpy_helper.from_array(np.array(1.0, np.float32), "scale")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    got = OnnxRunner(model.SerializeToString())({"x": x})["y"].numpy()
    np.testing.assert_array_equal(got, np.clip(np.round(x), 0, 3))


def test_a_float_input_for_a_float8_input_names_the_type() -> None:
    node = helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT)
    graph = helper.make_graph([node], "cast", [helper.make_tensor_value_info("x", TensorProto.FLOAT8E5M2, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    runner = OnnxRunner(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString())
    with pytest.raises(RuntimeError, match="FLOAT8E5M2"):
        runner({"x": np.array([1.0, 2.0], np.float32)})
