"""ONNX inference on the CPU: tinycore's OnnxRunner beside onnxruntime (2 threads), interleaved in one process.

    python bench/bench_onnx.py [--rounds N] [--cases NAME ...]

The models are exported from torch with the TorchScript exporter (`dynamo=False`): a ResNet-style CNN on 3 x 64 x 64
images, a 4-layer transformer encoder (width 256, 64 tokens), and a statically quantized QDQ copy of the CNN made
with `onnxruntime.quantization` (int8 weights and activations). Each inference case runs batch 1 and batch 8; its
outputs are first checked against onnxruntime (1e-3 relative; the int8 copy within two quantization steps of its
output scale, since the two round some intermediate values differently), then each library runs it once per round
after `settle()`, the order turning from round to round. tinycore runs the jitted runner (the second call with the
same shapes replays) and both return numpy arrays, so the copy out is timed on both sides.
`load-100mb` times building a runner for a 100 MB model file (six 2048 x 2048 float32 layers) against creating an
onnxruntime session for it. Printed: median milliseconds and the paired median of onnxruntime's time over
tinycore's (above 1: tinycore is faster).
"""
from __future__ import annotations

import argparse
import io
import os
import pathlib
import tempfile
import warnings
from collections.abc import Callable

import numpy as np
import paired

os.environ.setdefault("DEV", "CPU")
warnings.filterwarnings("ignore", category=DeprecationWarning)  # the TorchScript exporter's notice
THREADS = 2
CASES = ["cnn-b1", "cnn-b8", "transformer-b1", "transformer-b8", "cnn-int8-b1", "cnn-int8-b8", "load-100mb"]


def _cnn() -> tuple[bytes, str, Callable[[int], np.ndarray]]:
    """A ResNet-style CNN: stem, three residual stages (one strided), global pooling, a classifier."""
    import torch

    def block(channels: int) -> torch.nn.Module:
        return torch.nn.Sequential(torch.nn.Conv2d(channels, channels, 3, padding=1), torch.nn.BatchNorm2d(channels),
                                   torch.nn.ReLU(), torch.nn.Conv2d(channels, channels, 3, padding=1),
                                   torch.nn.BatchNorm2d(channels))

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.BatchNorm2d(32),
                                            torch.nn.ReLU())
            self.first, self.down = block(32), torch.nn.Conv2d(32, 64, 3, stride=2, padding=1)
            self.second, self.third = block(64), block(64)
            self.head = torch.nn.Linear(64, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.stem(x)
            x = torch.relu(x + self.first(x))
            x = torch.relu(self.down(x))
            x = torch.relu(x + self.second(x))
            x = torch.relu(x + self.third(x))
            return self.head(torch.nn.functional.adaptive_avg_pool2d(x, 1).flatten(1))

    torch.manual_seed(0)
    model = Net()
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.running_mean.uniform_(-0.2, 0.2)
            module.running_var.uniform_(0.5, 1.5)
    data = _export(model, torch.randn(1, 3, 64, 64), "image")
    return data, "image", lambda batch: np.random.default_rng(batch).standard_normal((batch, 3, 64, 64),
                                                                                     dtype=np.float32)


def _transformer() -> tuple[bytes, str, Callable[[int], np.ndarray]]:
    """A 4-layer encoder (width 256, 4 heads, GELU MLP of 1024) over 64 tokens of a 1000-word vocabulary."""
    import torch

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embedding = torch.nn.Embedding(1000, 256)
            layer = torch.nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, activation="gelu", batch_first=True)
            self.encoder = torch.nn.TransformerEncoder(layer, 4, enable_nested_tensor=False)
            self.head = torch.nn.Linear(256, 1000)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            return self.head(self.encoder(self.embedding(tokens)))

    torch.manual_seed(0)
    data = _export(Net(), torch.zeros(1, 64, dtype=torch.int64), "tokens")
    return data, "tokens", lambda batch: np.random.default_rng(batch).integers(0, 1000, (batch, 64), dtype=np.int64)


def _export(model: object, example: object, input_name: str) -> bytes:
    import torch
    assert isinstance(model, torch.nn.Module)
    model.eval()
    buffer = io.BytesIO()
    torch.onnx.export(model, (example,), buffer, input_names=[input_name], output_names=["output"], opset_version=17,
                      dynamo=False, dynamic_axes={input_name: {0: "batch"}})
    return buffer.getvalue()


def _quantized(data: bytes, input_name: str, sample: Callable[[int], np.ndarray]) -> bytes:
    """A static QDQ int8 copy, calibrated on eight random batches."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.batches = [{input_name: sample(1 + index)[:1]} for index in range(8)]

        def get_next(self) -> dict[str, np.ndarray] | None:
            return self.batches.pop() if self.batches else None

    with tempfile.TemporaryDirectory() as folder:
        source, target = pathlib.Path(folder, "float.onnx"), pathlib.Path(folder, "int8.onnx")
        source.write_bytes(data)
        quantize_static(str(source), str(target), Reader(), quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
        return target.read_bytes()


def _session(model: bytes | str) -> object:
    import onnxruntime
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = THREADS, 1
    return onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def _inference_calls(name: str) -> dict[str, Callable[[], object]]:
    """{library: one inference} for a `MODEL-bN` case, after checking tinycore's outputs against onnxruntime's."""
    from tinycore.nn.onnx import OnnxRunner
    model_name, batch_text = name.rsplit("-b", 1)
    batch = int(batch_text)
    data, input_name, sample = _transformer() if model_name == "transformer" else _cnn()
    if model_name == "cnn-int8":
        data = _quantized(data, input_name, sample)
    session, runner, feed = _session(data), OnnxRunner(data), {input_name: sample(batch)}

    def ours() -> list[np.ndarray]:
        return [value.numpy() for value in runner(feed).values()]

    def theirs() -> list[np.ndarray]:
        return session.run(None, feed)  # type: ignore[attr-defined, no-any-return]

    expected, actual = theirs(), ours()
    for got, reference in zip(actual, expected, strict=True):
        tolerance = 2 * float(np.abs(reference).max()) / 127 if model_name == "cnn-int8" else 1e-4
        np.testing.assert_allclose(got, reference, rtol=1e-3, atol=tolerance, err_msg=name)
    return {"tinycore": ours, "onnxruntime": theirs}


def _load_calls(folder: str) -> dict[str, Callable[[], object]]:
    """{library: build a runner / a session} for a 100 MB model written to `folder`."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from tinycore.nn.onnx import OnnxRunner
    rng = np.random.default_rng(0)
    width, layers = 2048, 6
    weights = [numpy_helper.from_array((rng.standard_normal((width, width), dtype=np.float32) * 0.02), f"w{index}")
               for index in range(layers)]
    nodes, previous = [], "x"
    for index in range(layers):
        nodes += [helper.make_node("MatMul", [previous, f"w{index}"], [f"m{index}"]),
                  helper.make_node("Relu", [f"m{index}"], [f"r{index}"])]
        previous = f"r{index}"
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
                              [helper.make_tensor_value_info(previous, TensorProto.FLOAT, [1, width])], weights)
    path = str(pathlib.Path(folder, "mlp100.onnx"))
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    print(f"<!-- load-100mb: {os.path.getsize(path) / 1e6:.0f} MB file -->")
    return {"tinycore": lambda: OnnxRunner(path), "onnxruntime": lambda: _session(path)}


def main() -> None:
    """The command line: `--rounds N` and `--cases NAME ...`."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--cases", nargs="+", default=CASES, choices=CASES)
    arguments = parser.parse_args()
    print(f"<!-- load average {' '.join(f'{value:.2f}' for value in os.getloadavg())} -->")
    paired.print_header("onnxruntime")
    with tempfile.TemporaryDirectory() as folder:
        for name in arguments.cases:
            calls = _load_calls(folder) if name == "load-100mb" else _inference_calls(name)
            rounds = max(3, arguments.rounds // 4) if name == "load-100mb" else arguments.rounds
            paired.time_pair(name, calls, rounds, peer="onnxruntime")


if __name__ == "__main__":
    main()
