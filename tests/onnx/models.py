"""Small ONNX models built with onnx.helper for the tests: a conv + matmul classifier with every weight an
initializer, saved inline or with external data."""
from __future__ import annotations

import pathlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def small_classifier(seed: int = 0) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Conv -> Relu -> GlobalAveragePool -> Flatten -> Gemm -> Softmax over a (batch, 3, 8, 8) input; the model and
    its weights by name."""
    rng = np.random.default_rng(seed)
    weights = {"conv_w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
               "conv_b": rng.standard_normal(4).astype(np.float32),
               "fc_w": rng.standard_normal((4, 5)).astype(np.float32),
               "fc_b": rng.standard_normal(5).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "conv_w", "conv_b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["p"], name="pool"),
             helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["g"], name="fc"),
             helper.make_node("Softmax", ["g"], ["y"], name="softmax", axis=-1)]
    graph = helper.make_graph(nodes, "classifier",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 5])],
                              [numpy_helper.from_array(value, name) for name, value in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="tinycore-tests")
    return model, weights


def classifier_reference(x: np.ndarray, weights: dict[str, np.ndarray]) -> np.ndarray:
    """The classifier computed with torch (the oracle)."""
    import torch
    conv = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(weights["conv_w"]), torch.tensor(weights["conv_b"]),
                                      padding=1)
    pooled = conv.relu().mean((2, 3))
    logits = pooled @ torch.tensor(weights["fc_w"]) + torch.tensor(weights["fc_b"])
    return logits.softmax(-1).numpy()


def save_with_external_data(model: onnx.ModelProto, folder: pathlib.Path, data_name: str = "weights.bin"
                            ) -> pathlib.Path:
    """Save `model` to folder/model.onnx with every initializer in folder/`data_name`; the model's path."""
    path = folder / "model.onnx"
    copy = onnx.ModelProto()
    copy.CopyFrom(model)  # saving with external data rewrites the message's initializers in place
    onnx.save_model(copy, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=data_name, size_threshold=0)
    return path
