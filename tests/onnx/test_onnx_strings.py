"""String tensors in OnnxRunner: held on the host as numpy object arrays, string ops run there, numbers cross to the
device at Cast, Equal, RegexFullMatch and LabelEncoder. Expected values are written out by hand or computed with
Python's str methods; the errors for strings given to numeric ops name the node and say what to do."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

from tinycore.nn.onnx import OnnxRunner  # noqa: E402
from tinycore.tensor import Tensor  # noqa: E402


def _runner(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
            initializers: list[onnx.TensorProto] | None = None, opset: int = 21, ml: int = 0) -> OnnxRunner:
    graph = helper.make_graph(nodes, "strings", inputs, outputs, initializer=initializers or [])
    opsets = [helper.make_opsetid("", opset)] + ([helper.make_opsetid("ai.onnx.ml", ml)] if ml else [])
    return OnnxRunner(helper.make_model(graph, opset_imports=opsets).SerializeToString())


def _info(name: str, kind: int, shape: list[int | str] | None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, kind, shape)


def test_strings_move_on_the_host_and_compare_to_a_device_bool():
    # Reshape, Transpose, Concat with a string initializer, Gather, then Equal gives a device bool tensor
    words = helper.make_tensor("words", TensorProto.STRING, [2], [b"b", b"z"])
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]), helper.make_node("Transpose", ["r"], ["t"]),
             helper.make_node("Reshape", ["t", "flat"], ["f"]), helper.make_node("Concat", ["f", "words"], ["c"],
                                                                                 axis=0),
             helper.make_node("Gather", ["c", "index"], ["g"]), helper.make_node("Equal", ["g", "words"], ["y"])]
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [2, 2])
    flat = helper.make_tensor("flat", TensorProto.INT64, [1], [-1])
    index = helper.make_tensor("index", TensorProto.INT64, [2], [2, -1])
    runner = _runner(nodes, [_info("x", TensorProto.STRING, [4])],
                     [_info("y", TensorProto.BOOL, [2]), _info("c", TensorProto.STRING, [6])],
                     [words, shape, flat, index])
    out = runner({"x": np.array(["a", "b", "c", "d"])})
    # reshape to [[a, b], [c, d]], transpose to [[a, c], [b, d]], flatten: a c b d, then b z
    assert out["c"].dtype == object and out["c"].tolist() == ["a", "c", "b", "d", "b", "z"]
    assert isinstance(out["y"], Tensor) and out["y"].numpy().tolist() == [True, True]
    assert runner.jit is False, "a graph with string inputs computes on the host: it cannot be replayed"


def test_string_flatten_squeeze_slice_tile_where():
    nodes = [helper.make_node("Flatten", ["x"], ["flat"], axis=-1),
             helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["sliced"]),
             helper.make_node("Unsqueeze", ["sliced", "axes"], ["grown"]),
             helper.make_node("Squeeze", ["grown", "axes"], ["back"]),
             helper.make_node("Tile", ["back", "repeats"], ["tiled"]),
             helper.make_node("Where", ["pick", "x", "other"], ["chosen"])]
    constants = [helper.make_tensor("starts", TensorProto.INT64, [1], [-1]),
                 helper.make_tensor("ends", TensorProto.INT64, [1], [-(2 ** 62)]),
                 helper.make_tensor("axes", TensorProto.INT64, [1], [2]),
                 helper.make_tensor("steps", TensorProto.INT64, [1], [-2]),
                 helper.make_tensor("repeats", TensorProto.INT64, [3], [1, 2, 1]),
                 helper.make_tensor("other", TensorProto.STRING, [], [b"-"])]
    runner = _runner(nodes, [_info("x", TensorProto.STRING, [2, 1, 3]), _info("pick", TensorProto.BOOL, [3])],
                     [_info(name, TensorProto.STRING, None) for name in ("flat", "tiled", "chosen")], constants)
    x = np.array([[["a", "b", "c"]], [["d", "e", "f"]]], dtype=object)
    out = runner({"x": x, "pick": np.array([True, False, True])})
    assert out["flat"].tolist() == x.reshape(2, 3).tolist()
    assert out["tiled"].tolist() == np.tile(x[:, :, ::-2], (1, 2, 1)).tolist() == [[["c", "a"], ["c", "a"]],
                                                                                   [["f", "d"], ["f", "d"]]]
    assert out["chosen"].tolist() == [[["a", "-", "c"]], [["d", "-", "f"]]]


def test_string_ops_match_python_str_methods():
    nodes = [helper.make_node("StringConcat", ["x", "suffix"], ["joined"], domain=""),
             helper.make_node("StringSplit", ["joined"], ["parts", "counts"], delimiter="-", maxsplit=1),
             helper.make_node("RegexFullMatch", ["x"], ["matched"], pattern=r"[a-z]+\d")]
    suffix = helper.make_tensor("suffix", TensorProto.STRING, [], [b"-end-x"])
    runner = _runner(nodes, [_info("x", TensorProto.STRING, [3])],
                     [_info("parts", TensorProto.STRING, None), _info("counts", TensorProto.INT64, None),
                      _info("matched", TensorProto.BOOL, None)], [suffix], opset=20)
    x = ["abc1", "x-y", "Q"]
    out = runner({"x": x})
    splits = [(item + "-end-x").split("-", 1) for item in x]
    assert out["parts"].shape == (3, 2) and out["parts"].tolist() == splits
    assert out["counts"].numpy().tolist() == [2, 2, 2]
    assert out["matched"].numpy().tolist() == [True, False, False]


def test_string_split_pads_and_counts_whitespace_runs():
    runner = _runner([helper.make_node("StringSplit", ["x"], ["parts", "counts"])],
                     [_info("x", TensorProto.STRING, [3])],
                     [_info("parts", TensorProto.STRING, None), _info("counts", TensorProto.INT64, None)], opset=20)
    out = runner({"x": np.array(["a  b c", "", "one"], dtype=object)})
    assert out["parts"].tolist() == [["a", "b", "c"], ["", "", ""], ["one", "", ""]]
    assert out["counts"].numpy().tolist() == [3, 0, 1]


def test_string_normalizer_drops_stopwords_case_blind_then_uppers():
    node = helper.make_node("StringNormalizer", ["x"], ["y"], case_change_action="UPPER", stopwords=["monday"])
    runner = _runner([node], [_info("x", TensorProto.STRING, [1, 4])], [_info("y", TensorProto.STRING, None)])
    out = runner({"x": np.array([["Monday", "tuesday", "MONDAY", "wednesday"]])})
    assert out["y"].shape == (1, 2) and out["y"].tolist() == [["TUESDAY", "WEDNESDAY"]]
    empty = runner({"x": np.array([["monday"] * 4])})["y"]
    assert empty.shape == (1, 1) and empty.tolist() == [[""]]


def test_cast_between_strings_and_numbers():
    nodes = [helper.make_node("Cast", ["x"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["n"], ["s"], to=TensorProto.STRING),
             helper.make_node("Cast", ["x"], ["i"], to=TensorProto.INT64)]
    runner = _runner(nodes, [_info("x", TensorProto.STRING, [3]), _info("n", TensorProto.INT32, [2])],
                     [_info("f", TensorProto.FLOAT, None), _info("s", TensorProto.STRING, None),
                      _info("i", TensorProto.INT64, None)])
    out = runner({"x": np.array([b"1.5", b"-2e1", b"7"]), "n": np.array([12, -3], dtype=np.int32)})
    np.testing.assert_array_equal(out["f"].numpy(), np.array([1.5, -20.0, 7.0], dtype=np.float32))
    assert out["s"].tolist() == ["12", "-3"]
    assert out["i"].numpy().tolist() == [1, -20, 7]
    with pytest.raises(RuntimeError, match="must be numbers"):
        runner({"x": np.array(["1", "two", "3"]), "n": np.array([1, 2], dtype=np.int32)})


def test_label_encoder_maps_strings_and_ints():
    to_ints = helper.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml", keys_strings=["a", "b", "c"],
                               values_int64s=[10, 20, 30], default_int64=-7)
    to_strings = helper.make_node("LabelEncoder", ["y"], ["z"], domain="ai.onnx.ml", keys_int64s=[10, 30],
                                  values_strings=["ten", "thirty"])
    runner = _runner([to_ints, to_strings], [_info("x", TensorProto.STRING, [2, 2])],
                     [_info("y", TensorProto.INT64, None), _info("z", TensorProto.STRING, None)], ml=2)
    out = runner({"x": np.array([["a", "q"], ["c", "b"]])})
    assert out["y"].numpy().tolist() == [[10, -7], [30, 20]]
    assert out["z"].tolist() == [["ten", "_Unused"], ["thirty", "_Unused"]]


def test_tfidf_over_string_tokens():
    node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], mode="TF", min_gram_length=1, max_gram_length=2,
                            max_skip_count=0, ngram_counts=[0, 2], ngram_indexes=[0, 1, 2],
                            pool_strings=["a", "b", "a", "b"])
    runner = _runner([node], [_info("x", TensorProto.STRING, [5])], [_info("y", TensorProto.FLOAT, None)])
    out = runner({"x": np.array(["a", "b", "a", "c", "a"])})["y"].numpy()
    # unigrams a: 3, b: 1; bigram (a, b): 1
    np.testing.assert_array_equal(out, np.array([3, 1, 1], dtype=np.float32))


def test_tfidf_over_integers_counts_each_call_anew():
    # the counting reads the tokens on the host, so the graph must not be replayed by the JIT with the first counts
    node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], mode="TF", min_gram_length=1, max_gram_length=1,
                            max_skip_count=0, ngram_counts=[0], ngram_indexes=[0, 1], pool_int64s=[1, 2])
    runner = _runner([node], [_info("x", TensorProto.INT64, [4])], [_info("y", TensorProto.FLOAT, None)])
    assert runner.jit is False
    for tokens in ([1, 1, 1, 2], [2, 2, 2, 2], [1, 2, 3, 4], [1, 1, 1, 1]):
        counts = runner({"x": np.array(tokens, dtype=np.int64)})["y"].numpy()
        np.testing.assert_array_equal(counts, np.array([tokens.count(1), tokens.count(2)], dtype=np.float32))


def test_string_input_to_a_numeric_op_names_the_node():
    runner = _runner([helper.make_node("Relu", ["x"], ["y"], name="act")], [_info("x", TensorProto.STRING, [2])],
                     [_info("y", TensorProto.STRING, None)])
    with pytest.raises(TypeError, match=r"node 'act' \(Relu.*string tensor.*Cast to FLOAT"):
        runner({"x": np.array(["1", "2"])})


def test_string_inputs_are_checked():
    runner = _runner([helper.make_node("Identity", ["x"], ["y"])], [_info("x", TensorProto.STRING, [2])],
                     [_info("y", TensorProto.STRING, None)])
    with pytest.raises(RuntimeError, match="input 'x' has shape"):
        runner({"x": np.array(["a", "b", "c"])})
    with pytest.raises(RuntimeError, match="input 'x' is a string tensor"):
        runner({"x": np.array([1.0, 2.0])})
    numeric = _runner([helper.make_node("Relu", ["x"], ["y"])], [_info("x", TensorProto.FLOAT, [2])],
                      [_info("y", TensorProto.FLOAT, None)])
    with pytest.raises(RuntimeError, match="input 'x' is an array of <U1.*float32"):
        numeric({"x": np.array(["a", "b"])})
