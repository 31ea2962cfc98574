"""OnnxRunner: building from a path, bytes or a Tensor, external data through DISK, inputs checked, and the errors
for bad files and bad inputs (each names the input or node)."""
from __future__ import annotations

import pathlib

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from models import classifier_reference, save_with_external_data, small_classifier  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

from tinycore.nn.onnx import OnnxFormatError, OnnxRunner  # noqa: E402
from tinycore.tensor import Tensor  # noqa: E402
from tinycore.uop.ops import Ops  # noqa: E402


@pytest.fixture(scope="module")
def classifier() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    return small_classifier()


def _input(batch: int = 2) -> np.ndarray:
    return np.random.default_rng(1).standard_normal((batch, 3, 8, 8)).astype(np.float32)


def test_runs_from_path_bytes_and_tensor(classifier, tmp_path: pathlib.Path):
    model, weights = classifier
    path = tmp_path / "model.onnx"
    onnx.save_model(model, str(path))
    x = _input()
    expected = classifier_reference(x, weights)
    for source in (path, str(path), path.read_bytes(), Tensor(path.read_bytes())):
        outputs = OnnxRunner(source)({"x": x})
        assert list(outputs) == ["y"]
        np.testing.assert_allclose(outputs["y"].numpy(), expected, rtol=1e-4, atol=1e-6)


def test_inputs_as_tensor_and_symbolic_batch(classifier):
    model, weights = classifier
    runner = OnnxRunner(model.SerializeToString())
    for batch in (1, 3):
        x = _input(batch)
        result = runner({"x": Tensor(x)})["y"].numpy()
        np.testing.assert_allclose(result, classifier_reference(x, weights), rtol=1e-4, atol=1e-6)


def test_external_data_is_a_disk_view(classifier, tmp_path: pathlib.Path):
    model, weights = classifier
    path = save_with_external_data(model, tmp_path)
    runner = OnnxRunner(path)
    weight = runner.graph.initializers["conv_w"]
    sources = [node for node in weight.uop.toposort if node.op is Ops.BUFFER]
    assert [str(node.device) for node in sources] == [f"DISK:{(tmp_path / 'weights.bin').resolve()}"], \
        "external weights should be lazy views of their file on DISK, copied only when used"
    assert sources[0].size == 4 * 3 * 3 * 3, "the view covers the tensor's own bytes, not the whole file"
    x = _input()
    np.testing.assert_allclose(runner({"x": x})["y"].numpy(), classifier_reference(x, weights), rtol=1e-4,
                               atol=1e-6)


def test_missing_external_data_file_names_the_tensor(classifier, tmp_path: pathlib.Path):
    path = save_with_external_data(classifier[0], tmp_path)
    (tmp_path / "weights.bin").unlink()
    with pytest.raises(FileNotFoundError, match="conv_w.*weights.bin"):
        OnnxRunner(path)


def test_truncated_external_data_is_refused(classifier, tmp_path: pathlib.Path):
    path = save_with_external_data(classifier[0], tmp_path)
    data = tmp_path / "weights.bin"
    data.write_bytes(data.read_bytes()[:100])
    with pytest.raises(OnnxFormatError, match="past the end"):
        OnnxRunner(path)


def test_external_data_outside_the_model_folder_is_refused(classifier, tmp_path: pathlib.Path):
    folder = tmp_path / "inner"
    folder.mkdir()
    path = save_with_external_data(classifier[0], folder, data_name="weights.bin")
    loaded = onnx.load(str(path), load_external_data=False)
    for tensor in loaded.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = "../weights.bin"
    (tmp_path / "weights.bin").write_bytes((folder / "weights.bin").read_bytes())
    with pytest.raises(OnnxFormatError, match="outside the model's folder"):
        OnnxRunner(_saved(loaded, folder / "escape.onnx"))


def _saved(model: onnx.ModelProto, path: pathlib.Path) -> pathlib.Path:
    path.write_bytes(model.SerializeToString())
    return path


def test_truncated_and_garbage_files_raise_format_errors(classifier, tmp_path: pathlib.Path):
    data = classifier[0].SerializeToString()
    with pytest.raises(OnnxFormatError, match="not a valid ONNX file"):
        OnnxRunner(b"\xff\xff\xff\xff not a protobuf")
    for cut in (10, len(data) // 2, len(data) - 3):
        with pytest.raises(OnnxFormatError):
            OnnxRunner(data[:cut])
    with pytest.raises(FileNotFoundError, match="does not exist"):
        OnnxRunner(tmp_path / "nothing.onnx")


def test_input_errors_name_the_input(classifier):
    runner = OnnxRunner(classifier[0].SerializeToString())
    with pytest.raises(RuntimeError, match="missing input 'x'"):
        runner({})
    with pytest.raises(RuntimeError, match="unknown input.*'image'"):
        runner({"x": _input(), "image": _input()})
    with pytest.raises(RuntimeError, match="input 'x' has dtype float64.*float32"):
        runner({"x": _input().astype(np.float64)})
    with pytest.raises(RuntimeError, match="input 'x' has shape \\(2, 4, 8, 8\\).*axis 1"):
        runner({"x": np.zeros((2, 4, 8, 8), np.float32)})
    with pytest.raises(RuntimeError, match="input 'x'.*rank 4"):
        runner({"x": np.zeros((3, 8, 8), np.float32)})


def test_symbolic_dims_must_agree_across_inputs():
    graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["c"])], "add",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["n"]),
                               helper.make_tensor_value_info("b", TensorProto.FLOAT, ["n"])],
                              [helper.make_tensor_value_info("c", TensorProto.FLOAT, ["n"])])
    runner = OnnxRunner(helper.make_model(graph).SerializeToString())
    np.testing.assert_equal(runner({"a": np.ones(3, np.float32), "b": np.ones(3, np.float32)})["c"].numpy(),
                            np.full(3, 2, np.float32))
    with pytest.raises(RuntimeError, match="dimension 'n' is 3"):
        runner({"a": np.ones(3, np.float32), "b": np.ones(4, np.float32)})


def test_unsupported_op_and_opset_are_refused_at_build():
    graph = helper.make_graph([helper.make_node("NoSuchOp", ["a"], ["b"], name="mystery")], "g",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(NotImplementedError, match="node 'mystery' \\(NoSuchOp, ai.onnx opset 17\\)"):
        OnnxRunner(model.SerializeToString())
    graph = helper.make_graph([helper.make_node("Relu", ["a"], ["b"], name="too_new")], "g",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 99)])
    with pytest.raises(NotImplementedError, match="node 'too_new' \\(Relu, ai.onnx opset 99\\).*newer"):
        OnnxRunner(model.SerializeToString())


def test_node_reading_an_undefined_value_is_a_format_error():
    graph = helper.make_graph([helper.make_node("Relu", ["ghost"], ["b"], name="reader")], "g",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])])
    with pytest.raises(OnnxFormatError, match="node 'reader'.*'ghost'"):
        OnnxRunner(helper.make_model(graph).SerializeToString())


def test_runtime_failure_names_the_node():
    graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["c"], name="adder")], "g",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("b", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("c", TensorProto.FLOAT, None)])
    runner = OnnxRunner(helper.make_model(graph).SerializeToString())
    with pytest.raises(RuntimeError, match="node 'adder'"):
        runner({"a": np.ones(3, np.float32), "b": np.ones(4, np.float32)})


def test_second_call_with_the_same_shapes_replays(classifier):
    model, weights = classifier
    runner = OnnxRunner(model.SerializeToString())
    assert runner.jit
    results = []
    for seed in range(4):
        x = np.random.default_rng(seed).standard_normal((2, 3, 8, 8)).astype(np.float32)
        results.append(runner({"x": x})["y"].numpy())
        np.testing.assert_allclose(results[-1], classifier_reference(x, weights), rtol=1e-4, atol=1e-6)
    (jitted,) = runner._jits.values()
    assert jitted.captured is not None and jitted.captured_kernel_count > 0, "calls 3 and 4 should replay"
    x = np.random.default_rng(9).standard_normal((5, 3, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(runner({"x": x})["y"].numpy(), classifier_reference(x, weights), rtol=1e-4, atol=1e-6)
    assert len(runner._jits) == 2, "another batch size gets its own capture"


def test_replays_fill_the_runners_input_buffers_from_numpy():
    """Once a call with numpy inputs is captured, a call with arrays of the same names, dtypes and shapes copies them
    into the runner's input buffers and replays (OnnxRunner._replayed). Values against numpy over new data each call,
    two batch sizes in turn; inputs given in another order than the graph's, a Tensor input, a strided array and a
    wrong dtype each take the checked path, which still raises for the dtype."""
    rng = np.random.default_rng(3)
    weight = rng.standard_normal((6, 5)).astype(np.float32)
    from onnx import numpy_helper
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["s"]),
         helper.make_node("Relu", ["s"], ["y"])], "g",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["n", 6]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, ["n", 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [numpy_helper.from_array(weight, "w")])
    runner = OnnxRunner(helper.make_model(graph).SerializeToString())

    def expected(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.maximum(a.astype(np.float64) @ weight.astype(np.float64) + b, 0)

    for call in range(8):
        rows = 3 if call % 2 else 4
        a = rng.standard_normal((rows, 6)).astype(np.float32)
        b = rng.standard_normal((rows, 5)).astype(np.float32)
        feeds = {"b": b, "a": a} if call >= 6 else {"a": a, "b": b}
        np.testing.assert_allclose(runner(feeds)["y"].numpy(), expected(a, b), rtol=1e-5, atol=1e-5)
    assert len(runner._replays) == 2, "a captured call per batch size (inputs in the graph's order)"
    a = rng.standard_normal((4, 6)).astype(np.float32)
    b = rng.standard_normal((4, 5)).astype(np.float32)
    np.testing.assert_allclose(runner({"a": Tensor(a), "b": b})["y"].numpy(), expected(a, b), rtol=1e-5, atol=1e-5)
    wide = rng.standard_normal((4, 12)).astype(np.float32)
    np.testing.assert_allclose(runner({"a": wide[:, ::2], "b": b})["y"].numpy(), expected(wide[:, ::2], b),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(runner({"a": a, "b": b})["y"].numpy(), expected(a, b), rtol=1e-5, atol=1e-5)
    with pytest.raises(RuntimeError, match="input 'a' has dtype"):
        runner({"a": a.astype(np.float64), "b": b})


def test_graphs_reading_input_values_on_the_host_are_not_jitted():
    graph = helper.make_graph([helper.make_node("NonZero", ["a"], ["b"])], "g",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("b", TensorProto.INT64, None)])
    runner = OnnxRunner(helper.make_model(graph).SerializeToString())
    assert not runner.jit
    for values in ([0, 1, 0, 2], [3, 0, 0, 0], [1, 1, 1, 1]):
        np.testing.assert_array_equal(runner({"a": np.array(values, np.float32)})["b"].numpy(),
                                      np.array(np.nonzero(values), dtype=np.int64))


def test_int64_values_saturate_when_narrowed_for_a_device_without_int64():
    """Slice's "to the end" is INT64_MAX: narrowed to int32 it must stay the largest int32, not wrap to -1."""
    from tinycore.nn.onnx.common import device_array
    values = np.array([2**63 - 1, -2**63, 5, -7], dtype=np.int64)
    narrowed = device_array(values, "WEBGPU")
    assert narrowed.dtype == np.int32
    np.testing.assert_array_equal(narrowed, [2**31 - 1, -2**31, 5, -7])
    np.testing.assert_array_equal(device_array(values, "CPU"), values)


def test_nodes_of_initializers_alone_are_computed_once_not_replayed():
    """A weight's DequantizeLinear and Transpose depend on no input: the runner computes them once, on the first
    call, so later calls (and the JIT's replays) do not read the int8 weight again."""
    from onnx import numpy_helper

    from tinycore.dtype import dtypes
    rng = np.random.default_rng(0)
    weight = rng.integers(-127, 128, (6, 5), dtype=np.int8)
    x = rng.standard_normal((2, 5)).astype(np.float32)
    expected = x @ ((weight.astype(np.float32) - 3) * np.float32(0.05)).T
    nodes = [helper.make_node("DequantizeLinear", ["w", "scale", "zero"], ["wf"]),
             helper.make_node("Transpose", ["wf"], ["wt"], perm=[1, 0]), helper.make_node("MatMul", ["x", "wt"], ["y"])]
    initializers = [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(np.array(np.float32(0.05)), "scale"),
                    numpy_helper.from_array(np.array(np.int8(3)), "zero")]
    data = helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializers)).SerializeToString()
    lazy = OnnxRunner(data, jit=False)
    for _ in range(2):
        y = lazy({"x": x})["y"]
        assert all(node.dtype != dtypes.int8 for node in y.uop.toposort), "the int8 weight is dequantized per call"
        np.testing.assert_allclose(y.numpy(), expected, rtol=1e-5, atol=1e-6)
    jitted = OnnxRunner(data)
    for _ in range(4):
        np.testing.assert_allclose(jitted({"x": x})["y"].numpy(), expected, rtol=1e-5, atol=1e-6)


def test_gather_at_a_constant_index_is_a_slice_not_a_reduction():
    """Gather with a Constant index (the q, k, v split of torch's packed attention projection) selects one slice:
    a view of x, with no comparison-and-sum reduction over the gathered axis. Values against numpy's take."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    nodes = [helper.make_node("Constant", [], ["middle"], value=helper.make_tensor("m", TensorProto.INT64, [], [1])),
             helper.make_node("Constant", [], ["last"], value=helper.make_tensor("l", TensorProto.INT64, [1], [-1])),
             helper.make_node("Gather", ["x", "middle"], ["a"], axis=1),
             helper.make_node("Gather", ["x", "last"], ["b"], axis=2),
             helper.make_node("Gather", ["x", "index"], ["c"], axis=0)]
    data = helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4, 5]),
                     helper.make_tensor_value_info("index", TensorProto.INT64, [])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in "abc"])).SerializeToString()
    runner = OnnxRunner(data, jit=False)
    for _ in range(2):
        outputs = runner({"x": x, "index": np.array(2, dtype=np.int64)})
        for name in "ab":
            assert not any(node.op is Ops.REDUCE_AXIS for node in outputs[name].uop.toposort), name
        np.testing.assert_array_equal(outputs["a"].numpy(), np.take(x, 1, axis=1))
        np.testing.assert_array_equal(outputs["b"].numpy(), np.take(x, [-1], axis=2))
        np.testing.assert_array_equal(outputs["c"].numpy(), x[2])


def test_gemm_weight_read_transposed_is_stored_transposed_once():
    """Gemm with transB=1 on a weight (torch's Linear) reads the weight transposed once, stored contiguous (a
    permuted view the matmul kernel would gather lane by lane). Values against numpy, jitted and not."""
    from onnx import numpy_helper
    rng = np.random.default_rng(0)
    weight, bias = rng.standard_normal((6, 5)).astype(np.float32), rng.standard_normal(6).astype(np.float32)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    nodes = [helper.make_node("Identity", ["w"], ["shared"]),
             helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1, alpha=0.5),
             helper.make_node("Gemm", ["x", "shared"], ["z"], transB=1),
             helper.make_node("Gemm", ["y", "x"], ["q"], transA=1)]
    data = helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in "yzq"],
        [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b")])).SerializeToString()
    y, z = 0.5 * x @ weight.T + bias, x @ weight.T
    lazy = OnnxRunner(data, jit=False)
    for _ in range(2):
        outputs = lazy({"x": x})
        np.testing.assert_allclose(outputs["y"].numpy(), y, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(outputs["z"].numpy(), z, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(outputs["q"].numpy(), y.T @ x, rtol=1e-5, atol=1e-5)
    stored = [value for value in lazy._constants().values() if isinstance(value, Tensor) and value.shape == (5, 6)]
    assert len(stored) == 1, "one copy of the weight, shared through the Identity"
    assert {node.op for node in stored[0].uop.toposort} <= {Ops.BUFFER, Ops.DEVICE, Ops.RESHAPE}, "a contiguous copy"
    np.testing.assert_array_equal(stored[0].numpy(), weight.T)
    jitted = OnnxRunner(data)
    for _ in range(4):
        np.testing.assert_allclose(jitted({"x": x})["y"].numpy(), y, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("tokens", [4, 16])
def test_gemm_of_merged_attention_heads_reads_them_in_row_order(tokens: int):
    """A Gemm whose A is a permuted view (attention heads merged back: (heads, tokens, 8) -> (tokens, heads * 8), the
    out_proj of torch's MultiheadAttention export) has A stored in row order first where it has at least 8 rows (on
    CPU); a shorter A is read as the view. Values against numpy in float64, jitted and not."""
    from onnx import numpy_helper

    from tinycore.nn.onnx.ops_math import _gathers_rows
    from tinycore.tensor.conv_layouts import loops_over_rows
    rng = np.random.default_rng(2)
    weight, bias = rng.standard_normal((12, 32)).astype(np.float32), rng.standard_normal(12).astype(np.float32)
    heads = rng.standard_normal((4, tokens, 8)).astype(np.float32)
    nodes = [helper.make_node("Transpose", ["h"], ["t"], perm=[1, 0, 2]),
             helper.make_node("Reshape", ["t", "shape"], ["merged"]),
             helper.make_node("Gemm", ["merged", "w", "b"], ["y"], transB=1)]
    data = helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("h", TensorProto.FLOAT, [4, tokens, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b"),
         numpy_helper.from_array(np.array([tokens, 32], np.int64), "shape")])).SerializeToString()
    merged = heads.astype(np.float64).transpose(1, 0, 2).reshape(tokens, 32)
    expected = merged @ weight.T.astype(np.float64) + bias
    view = Tensor(heads).permute(1, 0, 2).reshape(tokens, 32)
    assert _gathers_rows(view) == (tokens >= 8 and loops_over_rows(view))
    assert not _gathers_rows(Tensor(merged.astype(np.float32)))
    lazy, jitted = OnnxRunner(data, jit=False), OnnxRunner(data)
    for _ in range(3):
        np.testing.assert_allclose(lazy({"h": heads})["y"].numpy(), expected, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(jitted({"h": heads})["y"].numpy(), expected, rtol=1e-5, atol=1e-5)


def test_softmax_of_a_matmul_reads_the_product_stored_in_its_own_order():
    """Attention scores (MatMul of q and k transposed) feed Softmax and LogSoftmax: the product is stored in its own
    order (a CONTIGUOUS before the softmax), so the softmax reads rows as vectors rather than through the product's
    permuted reduce layout. A scaled product (elementwise after the reduce) is left to fuse. Values against numpy."""
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((2, 8, 16)).astype(np.float32), rng.standard_normal((2, 8, 16)).astype(np.float32)
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["q", "kt"], ["scores"]),
             helper.make_node("Softmax", ["scores"], ["p"], axis=-1),
             helper.make_node("LogSoftmax", ["scores"], ["lp"], axis=-1),
             helper.make_node("Mul", ["scores", "scale"], ["scaled"]),
             helper.make_node("Softmax", ["scaled"], ["ps"], axis=-1)]
    from onnx import numpy_helper
    data = helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(name, TensorProto.FLOAT, [2, 8, 16]) for name in "qk"],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in ("p", "lp", "ps")],
        [numpy_helper.from_array(np.array([0.25], dtype=np.float32), "scale")])).SerializeToString()
    scores = q.astype(np.float64) @ k.transpose(0, 2, 1)

    def log_softmax(values: np.ndarray) -> np.ndarray:
        shifted = values - values.max(-1, keepdims=True)
        return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))

    outputs = OnnxRunner(data, jit=False)({"q": q, "k": k})
    for name in ("p", "lp"):
        assert any(node.op is Ops.CONTIGUOUS for node in outputs[name].uop.toposort), name
    assert not any(node.op is Ops.CONTIGUOUS for node in outputs["ps"].uop.toposort)
    np.testing.assert_allclose(outputs["p"].numpy(), np.exp(log_softmax(scores)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(outputs["lp"].numpy(), log_softmax(scores), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(outputs["ps"].numpy(), np.exp(log_softmax(scores * 0.25)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("size, pads, batch, bias, kernel", [((16, 16), [1, 1, 1, 1], 1, True, (3, 3)),
                                                              ((17, 13), [0, 1, 2, 0], 2, False, (3, 3)),
                                                              ((9, 10), [0, 0, 0, 0], 1, True, (3, 3)),
                                                              ((3, 3), [1, 1, 1, 1], 3, True, (3, 3)),
                                                              ((15, 12), [2, 2, 2, 2], 1, True, (5, 5)),
                                                              ((19, 16), [3, 3, 3, 3], 2, False, (7, 7)),
                                                              ((11, 14), [1, 2, 1, 2], 1, True, (3, 5))])
def test_stride_2_conv_of_odd_kernel_multiplies_no_zero_taps(size: tuple[int, int], pads: list[int], batch: int,
                                                             bias: bool, kernel: tuple[int, int]):
    """A Conv with stride 2 and an odd kernel (a ResNet's 3x3 downsampling, its 7x7 stem) runs as a column copy and
    one reduce over the kernel's taps: about 2 * taps operations per output channel, input channel and pixel, not
    the even kernel of Tensor.conv2d's fold (16 taps for 3x3, ops_nn._conv_by_columns, on CPU). Values against
    torch in float64, even and odd sizes, asymmetric pads."""
    torch = pytest.importorskip("torch")
    from onnx import numpy_helper

    from tinycore import Device, GlobalCounters
    rng = np.random.default_rng(1)
    x = rng.standard_normal((batch, 5, *size)).astype(np.float32)
    weight, offsets = rng.standard_normal((7, 5, *kernel)).astype(np.float32), rng.standard_normal(7).astype(np.float32)
    initializers = [numpy_helper.from_array(weight, "w")] + ([numpy_helper.from_array(offsets, "b")] if bias else [])
    node = helper.make_node("Conv", ["x", "w"] + (["b"] if bias else []), ["y"], strides=[2, 2], pads=pads)
    data = helper.make_model(helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 5, *size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializers)).SerializeToString()
    padded = torch.nn.functional.pad(torch.tensor(x, dtype=torch.float64), (pads[1], pads[3], pads[0], pads[2]))
    expected = torch.nn.functional.conv2d(padded, torch.tensor(weight, dtype=torch.float64),
                                          torch.tensor(offsets, dtype=torch.float64) if bias else None,
                                          stride=2).numpy()
    runner = OnnxRunner(data, jit=False)
    GlobalCounters.reset()
    np.testing.assert_allclose(runner({"x": x})["y"].numpy(), expected, rtol=1e-4, atol=1e-4)
    if Device.DEFAULT == "CPU":
        taps = GlobalCounters.global_ops / (2 * expected.size * 5)
        assert taps < kernel[0] * kernel[1] + 1, f"{taps:.1f} multiply-adds per output and input channel: conv2d's " \
            f"fold, not the {kernel[0] * kernel[1]} taps"
    jitted = OnnxRunner(data)
    for _ in range(3):
        np.testing.assert_allclose(jitted({"x": x})["y"].numpy(), expected, rtol=1e-4, atol=1e-4)


def test_matmul_weights_are_stored_in_column_panels_once():
    """A fixed MatMul weight (shared by two nodes through an Identity) is stored once as contiguous panels of 16
    columns and read through a (K, N) view of them; a weight of less than two whole panels and a Gemm's weight are
    left as they are. Values against numpy, jitted and not."""
    from onnx import numpy_helper

    from tinycore.nn.onnx.rewrites import PACKED_SUFFIX
    rng = np.random.default_rng(1)
    weight = rng.standard_normal((8, 48)).astype(np.float32)
    gemm_weight = rng.standard_normal((32, 8)).astype(np.float32)
    narrow, bias = rng.standard_normal((8, 12)).astype(np.float32), rng.standard_normal(32).astype(np.float32)
    x = rng.standard_normal((2, 5, 8)).astype(np.float32)
    nodes = [helper.make_node("Identity", ["w"], ["shared"]),
             helper.make_node("MatMul", ["x", "w"], ["y"]),
             helper.make_node("MatMul", ["x", "shared"], ["z"]),
             helper.make_node("MatMul", ["x", "narrow"], ["n"]),
             helper.make_node("Reshape", ["x", "rows"], ["flat"]),
             helper.make_node("Gemm", ["flat", "g", "b"], ["q"], transB=1)]
    data = helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 8])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in "yznq"],
        [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(gemm_weight, "g"),
         numpy_helper.from_array(narrow, "narrow"), numpy_helper.from_array(bias, "b"),
         numpy_helper.from_array(np.array([10, 8], dtype=np.int64), "rows")])).SerializeToString()
    expected = {"y": x @ weight, "z": x @ weight, "n": x @ narrow, "q": x.reshape(10, 8) @ gemm_weight.T + bias}
    lazy, jitted = OnnxRunner(data, jit=False), OnnxRunner(data)
    for runner in (lazy, jitted):
        for _ in range(4):
            outputs = runner({"x": x})
            for name, value in expected.items():
                np.testing.assert_allclose(outputs[name].numpy(), value, rtol=1e-5, atol=1e-5, err_msg=name)
    constants = lazy._constants()
    packed = {name: value for name, value in constants.items() if name.endswith(PACKED_SUFFIX)}
    assert sorted(packed) == ["w" + PACKED_SUFFIX]
    for name, reference in [("w", weight)]:
        value = packed[name + PACKED_SUFFIX]
        assert isinstance(value, Tensor) and value.shape == reference.shape
        ops = {node.op for node in value.uop.toposort}
        assert Ops.PERMUTE in ops and ops <= {Ops.BUFFER, Ops.DEVICE, Ops.RESHAPE, Ops.PERMUTE}, "a view, no compute"
        np.testing.assert_array_equal(value.numpy(), reference)
        columns = reference.shape[1]
        panels = reference.reshape(8, columns // 16, 16).transpose(1, 0, 2)
        base = value.uop.base.buffer.numpy().view(np.float32)  # the stored bytes, panel after panel
        np.testing.assert_array_equal(base.reshape(panels.shape), panels)


def test_packed_matmul_weights_stay_within_their_byte_budget():
    """Packed copies sit beside the stored weights, so ONNX_PANEL_BYTES bounds them: weights are packed in graph
    order while they fit, and 0 packs none. Every product's values against numpy either way."""
    from onnx import numpy_helper

    from tinycore.helpers import Context
    from tinycore.nn.onnx.rewrites import PACKED_SUFFIX
    rng = np.random.default_rng(4)
    first, second = (rng.standard_normal((8, 32)).astype(np.float32) for _ in range(2))  # 1 KiB each
    x = rng.standard_normal((9, 8)).astype(np.float32)
    data = helper.make_model(helper.make_graph(
        [helper.make_node("MatMul", ["x", "a"], ["y"]), helper.make_node("MatMul", ["x", "b"], ["z"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [9, 8])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in "yz"],
        [numpy_helper.from_array(first, "a"), numpy_helper.from_array(second, "b")])).SerializeToString()
    for budget, expected_packed in [(0, set()), (1024, {"a"}), (2048, {"a", "b"})]:
        with Context(ONNX_PANEL_BYTES=budget):
            runner = OnnxRunner(data)
            outputs = runner({"x": x})
            constants = runner._constants()
        np.testing.assert_allclose(outputs["y"].numpy(), x @ first, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(outputs["z"].numpy(), x @ second, rtol=1e-5, atol=1e-5)
        # a packed copy is a permuted view of its panels; an unpacked name is bound to the stored weight itself
        packed = {name[:-len(PACKED_SUFFIX)] for name, value in constants.items() if name.endswith(PACKED_SUFFIX)
                  and isinstance(value, Tensor) and Ops.PERMUTE in {node.op for node in value.uop.toposort}}
        assert packed == expected_packed, budget


def test_matmul_weight_whose_product_is_sliced_is_not_packed():
    """A product read by a Slice (here after a bias Add) keeps its weight unpacked: a window off the panel boundaries
    would make its kernel index every lane through a division. Values against numpy."""
    from onnx import numpy_helper

    from tinycore.nn.onnx.rewrites import PACKED_SUFFIX
    rng = np.random.default_rng(2)
    weight, bias = rng.standard_normal((8, 48)).astype(np.float32), rng.standard_normal(48).astype(np.float32)
    x = rng.standard_normal((5, 8)).astype(np.float32)
    bounds = [numpy_helper.from_array(np.array([value], dtype=np.int64), name)
              for value, name in [(3, "start"), (40, "end"), (1, "axis")]]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["p"]), helper.make_node("Add", ["p", "b"], ["s"]),
             helper.make_node("Slice", ["s", "start", "end", "axis"], ["y"])]
    data = helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b"), *bounds])).SerializeToString()
    runner = OnnxRunner(data)
    for _ in range(3):
        np.testing.assert_allclose(runner({"x": x})["y"].numpy(), (x @ weight + bias)[:, 3:40], rtol=1e-5, atol=1e-5)
    assert not [name for name in runner._constants() if name.endswith(PACKED_SUFFIX)]


def test_panel_matmul_reads_the_packed_weight_only_for_products_of_several_rows():
    """One-row products (a 2048-wide gemv ran 2.3x slower from panels) read the weight as stored, 8 rows and more
    the packed copy. Values against numpy."""
    from tinycore.nn.onnx.rewrites import pack_panels, panel_matmul
    rng = np.random.default_rng(3)
    weight = rng.standard_normal((24, 64)).astype(np.float32)
    stored = Tensor(weight).realize()
    packed = pack_panels(stored)
    for shape, reads_packed in [((24,), False), ((1, 24), False), ((2, 3, 24), False), ((8, 24), True),
                                ((2, 5, 24), True)]:
        x = rng.standard_normal(shape).astype(np.float32)
        product = panel_matmul(Tensor(x), packed, stored)
        bases = {node for node in product.uop.toposort if node.op is Ops.BUFFER}
        assert (packed.uop.base in bases) is reads_packed, shape
        assert (stored.uop.base in bases) is not reads_packed, shape
        np.testing.assert_allclose(product.numpy(), x @ weight, rtol=1e-5, atol=1e-5)
