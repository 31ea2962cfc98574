"""Real models exported from torch with the TorchScript exporter (`dynamo=False`): a CNN, a transformer encoder, a
recurrent model and a detection-style head (Resize, Concat, NonMaxSuppression), plus a statically quantized QDQ
copy of the CNN. tinycore's outputs must match onnxruntime's within 1e-3 relative (the int8 copy: within one
quantization step of its output)."""
from __future__ import annotations

import io
import pathlib

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
onnxruntime = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")
from onnx import TensorProto, helper  # noqa: E402

from tinycore.nn.onnx import OnnxRunner  # noqa: E402

RTOL, ATOL = 1e-3, 1e-5


class SmallCNN(torch.nn.Module):
    """Conv, BatchNorm, ReLU, MaxPool, a residual block, global pooling and a classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                        torch.nn.MaxPool2d(2))
        self.block = torch.nn.Sequential(torch.nn.Conv2d(8, 8, 3, padding=1, groups=2), torch.nn.BatchNorm2d(8),
                                         torch.nn.ReLU(), torch.nn.Conv2d(8, 8, 1))
        self.head = torch.nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = self.stem(x)
        features = torch.relu(features + self.block(features))
        return self.head(torch.nn.functional.adaptive_avg_pool2d(features, 1).flatten(1)).softmax(-1)


class SmallTransformer(torch.nn.Module):
    """Token embedding, positional embedding, two encoder layers (multi-head attention, GELU MLP), a head."""

    def __init__(self) -> None:
        super().__init__()
        self.embedding = torch.nn.Embedding(50, 32)
        self.position = torch.nn.Parameter(torch.randn(16, 32) * 0.1)
        layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, activation="gelu", batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = torch.nn.Linear(32, 50)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden = self.embedding(tokens) + self.position[:tokens.shape[1]]
        return self.head(self.encoder(hidden))


class SmallRecurrent(torch.nn.Module):
    """A bidirectional LSTM followed by a GRU and a linear readout."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = torch.nn.LSTM(6, 8, batch_first=True, bidirectional=True)
        self.gru = torch.nn.GRU(16, 8, batch_first=True)
        self.readout = torch.nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden, _ = self.lstm(x)
        hidden, _ = self.gru(hidden)
        return self.readout(hidden)


class DetectionHead(torch.nn.Module):
    """Two feature levels, the coarse one upsampled (Resize) and concatenated; boxes around 64 fixed anchors of an
    8 x 8 image, and two class scores per anchor."""

    def __init__(self) -> None:
        super().__init__()
        self.fine = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.coarse = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.boxes = torch.nn.Conv2d(16, 4, 1)
        self.scores = torch.nn.Conv2d(16, 2, 1)
        self.register_buffer("centers", torch.rand(1, 64, 2, generator=torch.Generator().manual_seed(0)) * 16)

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        fine = torch.relu(self.fine(image))
        coarse = torch.nn.functional.interpolate(torch.relu(self.coarse(image)), scale_factor=2.0, mode="nearest")
        features = torch.cat([fine, coarse], dim=1)
        offsets = self.boxes(features).flatten(2).transpose(1, 2)
        centers = self.centers
        corners = torch.cat([centers - 2 + offsets[..., :2], centers + 2 + offsets[..., 2:].abs()], dim=-1)
        return corners, self.scores(features).flatten(2).sigmoid()


def _export(module: torch.nn.Module, example: tuple[torch.Tensor, ...], names: list[str], outputs: list[str],
            dynamic: dict[str, dict[int, str]] | None = None) -> bytes:
    torch.manual_seed(0)
    module.eval()
    buffer = io.BytesIO()
    torch.onnx.export(module, example, buffer, input_names=names, output_names=outputs, opset_version=17,
                      dynamo=False, dynamic_axes=dynamic)
    return buffer.getvalue()


def _compare(model: bytes, inputs: dict[str, np.ndarray], rtol: float = RTOL, atol: float = ATOL,
             device: str | None = None) -> None:
    session = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    expected = session.run(None, inputs)
    actual = OnnxRunner(model, device=device)(inputs)
    assert len(actual) == len(expected)
    for (name, value), reference in zip(actual.items(), expected, strict=True):
        np.testing.assert_allclose(value.numpy(), reference, rtol=rtol, atol=atol, err_msg=f"output {name}")


def test_cnn_matches_onnxruntime():
    torch.manual_seed(0)
    model = SmallCNN()
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 2.0)
    data = _export(model, (torch.randn(1, 3, 16, 16),), ["image"], ["probabilities"], {"image": {0: "batch"}})
    for batch in (1, 3):
        _compare(data, {"image": np.random.default_rng(batch).standard_normal((batch, 3, 16, 16), np.float32)})


def test_transformer_matches_onnxruntime():
    torch.manual_seed(0)
    data = _export(SmallTransformer(), (torch.randint(0, 50, (2, 12)),), ["tokens"], ["logits"])
    tokens = np.random.default_rng(0).integers(0, 50, (2, 12)).astype(np.int64)
    _compare(data, {"tokens": tokens})


def test_transformer_on_a_device_without_int64():
    """WGSL has no 64-bit integers: the int64 token ids, shapes and Gather indices are held as int32 on WEBGPU (Mesa's
    software adapter; the core test session installs every plugin, so a WEBGPU that cannot open fails here)."""
    torch.manual_seed(0)
    data = _export(SmallTransformer(), (torch.randint(0, 50, (2, 12)),), ["tokens"], ["logits"])
    tokens = np.random.default_rng(1).integers(0, 50, (2, 12)).astype(np.int64)
    _compare(data, {"tokens": tokens}, device="WEBGPU")


def test_recurrent_matches_onnxruntime():
    torch.manual_seed(0)
    data = _export(SmallRecurrent(), (torch.randn(2, 7, 6),), ["sequence"], ["readout"])
    _compare(data, {"sequence": np.random.default_rng(0).standard_normal((2, 7, 6), np.float32)})


def test_detection_head_with_nms_matches_onnxruntime():
    torch.manual_seed(0)
    data = _export(DetectionHead(), (torch.randn(1, 3, 8, 8),), ["image"], ["boxes", "scores"])
    model = onnx.load_from_string(data)
    # NonMaxSuppression on the exported boxes (corners given as x1, y1, x2, y2: center_point_box=0 reads y, x pairs,
    # which is the same suppression up to the axes' names)
    limits = (("max_boxes", TensorProto.INT64, 5), ("iou", TensorProto.FLOAT, 0.3), ("floor", TensorProto.FLOAT, 0.2))
    settings = [helper.make_tensor(name, kind, [1], [value]) for name, kind, value in limits]
    model.graph.initializer.extend(settings)
    model.graph.node.append(helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_boxes", "iou", "floor"],
                                             ["selected"], name="nms"))
    model.graph.output.append(helper.make_tensor_value_info("selected", TensorProto.INT64, ["kept", 3]))
    image = np.random.default_rng(0).standard_normal((1, 3, 8, 8), np.float32)
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    boxes, scores, selected = session.run(None, {"image": image})
    actual = OnnxRunner(model.SerializeToString())({"image": image})
    np.testing.assert_allclose(actual["boxes"].numpy(), boxes, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(actual["scores"].numpy(), scores, rtol=RTOL, atol=ATOL)
    assert len(selected) > 0
    np.testing.assert_array_equal(actual["selected"].numpy(), selected)


class _Calibration:
    """Calibration batches for onnxruntime's static quantization."""

    def __init__(self, name: str, shape: tuple[int, ...]):
        rng = np.random.default_rng(7)
        self.batches = iter([{name: rng.standard_normal(shape, np.float32)} for _ in range(8)])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self.batches, None)


def test_int8_qdq_cnn_within_one_quantization_step(tmp_path: pathlib.Path):
    quantization = pytest.importorskip("onnxruntime.quantization")
    torch.manual_seed(0)
    source = tmp_path / "cnn.onnx"
    source.write_bytes(_export(SmallCNN(), (torch.randn(1, 3, 16, 16),), ["image"], ["probabilities"]))
    quantized = tmp_path / "cnn_int8.onnx"
    quantization.quantize_static(str(source), str(quantized), _Calibration("image", (1, 3, 16, 16)),
                                 quant_format=quantization.QuantFormat.QDQ,
                                 activation_type=quantization.QuantType.QUInt8,
                                 weight_type=quantization.QuantType.QInt8)
    model = onnx.load(str(quantized))
    ops = {node.op_type for node in model.graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    # the output's step: the scale of the last DequantizeLinear before it (or of the one feeding the final Softmax)
    producers = {output: node for node in model.graph.node for output in node.output}
    node = producers[model.graph.output[0].name]
    while node.op_type != "DequantizeLinear":
        node = producers[node.input[0]]
    scales = {tensor.name: onnx.numpy_helper.to_array(tensor) for tensor in model.graph.initializer}
    step = float(scales[node.input[1]])
    image = np.random.default_rng(11).standard_normal((1, 3, 16, 16), np.float32)
    session = onnxruntime.InferenceSession(str(quantized), providers=["CPUExecutionProvider"])
    expected = session.run(None, {"image": image})[0]
    actual = OnnxRunner(quantized)({"image": image})["probabilities"].numpy()
    assert np.max(np.abs(actual - expected)) <= step + 1e-6, (np.max(np.abs(actual - expected)), step)
