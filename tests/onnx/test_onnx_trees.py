"""TreeEnsemble (ai.onnx.ml opset 5) against onnx's reference evaluator (a recursive per-sample walk in Python) on
random ensembles with every branch mode, NaN features, and each aggregation; post transforms against numpy applied
to the reference scores; the errors for inconsistent attributes."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from tinycore.nn.onnx import OnnxRunner  # noqa: E402

FEATURES, TARGETS = 3, 3


def _random_ensemble(rng: np.random.Generator, trees: int, max_depth: int) -> dict[str, object]:
    """Attributes of `trees` random trees over integer-valued thresholds (so EQ, NEQ and MEMBER nodes are hit)."""
    nodes: list[dict[str, object]] = []
    leaves: list[tuple[float, int]] = []
    members: list[float] = []

    def grow(depth: int) -> tuple[int, bool]:
        if depth == max_depth or (depth > 0 and rng.random() < 0.3):
            leaves.append((float(rng.normal()), int(rng.integers(TARGETS))))
            return len(leaves) - 1, True
        index = len(nodes)
        mode = int(rng.integers(7))
        node: dict[str, object] = {"mode": mode, "feature": int(rng.integers(FEATURES)),
                                   "split": float(rng.integers(-2, 3)), "missing": int(rng.integers(2))}
        nodes.append(node)
        if mode == 6:
            node["split"] = float("nan")
            # no 0.0 among the members: the reference walk reads a 0.0 member as the end of its set
            members.extend([float(value) for value in rng.choice([-3, -2, -1, 1, 2, 3], 3, replace=False)] + [np.nan])
        node["true"], node["true_leaf"] = grow(depth + 1)
        node["false"], node["false_leaf"] = grow(depth + 1)
        return index, False

    roots = []
    for _ in range(trees):
        index, _ = grow(0)
        roots.append(index)
    # member sets are listed in node order; grow appended them in creation (= node) order
    return dict(
        nodes_featureids=[node["feature"] for node in nodes],
        nodes_modes=numpy_helper.from_array(np.array([node["mode"] for node in nodes], np.uint8), "nodes_modes"),
        nodes_splits=numpy_helper.from_array(np.array([node["split"] for node in nodes], np.float32), "splits"),
        nodes_truenodeids=[node["true"] for node in nodes], nodes_falsenodeids=[node["false"] for node in nodes],
        nodes_trueleafs=[int(node["true_leaf"]) for node in nodes],  # type: ignore[call-overload]
        nodes_falseleafs=[int(node["false_leaf"]) for node in nodes],  # type: ignore[call-overload]
        nodes_missing_value_tracks_true=[node["missing"] for node in nodes],
        leaf_weights=numpy_helper.from_array(np.array([weight for weight, _ in leaves], np.float32), "weights"),
        leaf_targetids=[target for _, target in leaves], tree_roots=roots, n_targets=TARGETS,
        **({"membership_values": numpy_helper.from_array(np.array(members, np.float32), "members")}
           if members else {}))


def _model(attributes: dict[str, object]) -> onnx.ModelProto:
    node = helper.make_node("TreeEnsemble", ["X"], ["Y"], domain="ai.onnx.ml", **attributes)
    graph = helper.make_graph([node], "trees", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", FEATURES])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", TARGETS])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("ai.onnx.ml", 5)])


def _inputs(rng: np.random.Generator) -> np.ndarray:
    x = rng.integers(-3, 4, size=(40, FEATURES)).astype(np.float32) + rng.choice([0.0, 0.5], size=(40, FEATURES))
    x[rng.random(x.shape) < 0.15] = np.nan
    return x.astype(np.float32)


@pytest.mark.parametrize("aggregate", [0, 1, 2, 3])
def test_tree_ensemble_matches_the_reference_walk(aggregate: int):
    rng = np.random.default_rng(aggregate)
    for _ in range(3):
        attributes = _random_ensemble(rng, trees=4, max_depth=4)
        attributes["aggregate_function"] = aggregate
        model = _model(attributes)
        x = _inputs(rng)
        expected = ReferenceEvaluator(model).run(None, {"X": x})[0]
        got = OnnxRunner(model.SerializeToString())({"X": x})["Y"].numpy()
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def _softmax(scores: np.ndarray) -> np.ndarray:
    exps = np.exp(scores - scores.max(-1, keepdims=True))
    return exps / exps.sum(-1, keepdims=True)


def test_tree_ensemble_post_transforms_and_jit():
    rng = np.random.default_rng(7)
    attributes = _random_ensemble(rng, trees=5, max_depth=3)
    x = _inputs(rng)
    raw = ReferenceEvaluator(_model(attributes)).run(None, {"X": x})[0]
    nonzero_exps = np.where(raw != 0, np.exp(raw - raw.max(-1, keepdims=True)), 0.0)
    totals = nonzero_exps.sum(-1, keepdims=True)
    expected = {1: _softmax(raw), 2: 1 / (1 + np.exp(-raw)),
                3: np.where(totals > 0, nonzero_exps / np.where(totals > 0, totals, 1), 0.0)}
    for transform, wanted in expected.items():
        runner = OnnxRunner(_model({**attributes, "post_transform": transform}).SerializeToString())
        assert runner.jit, "the walk depends only on attributes: the graph replays through the JIT"
        for _ in range(3):
            got = runner({"X": x})["Y"].numpy()
            np.testing.assert_allclose(got, wanted, rtol=1e-5, atol=1e-6, err_msg=f"post_transform {transform}")


def test_tree_ensemble_probit_matches_onnxruntimes_formula_and_the_normal_quantile():
    from onnx.reference.ops.aionnxml._common_classifier import compute_probit
    from scipy import special  # installed with scikit-learn, a test dependency
    rng = np.random.default_rng(11)
    attributes = _random_ensemble(rng, trees=6, max_depth=3)
    weights = rng.uniform(0.02, 0.98, size=len(numpy_helper.to_array(attributes["leaf_weights"]))).astype(np.float32)
    attributes.update(aggregate_function=0, leaf_weights=numpy_helper.from_array(weights, "weights"))
    x = _inputs(rng)
    raw = ReferenceEvaluator(_model(attributes)).run(None, {"X": x})[0]
    inside = (raw > 0.01) & (raw < 0.99)
    assert inside.sum() > 20, "the averages of weights in (0, 1) are probabilities"
    got = OnnxRunner(_model({**attributes, "post_transform": 4}).SerializeToString())({"X": x})["Y"].numpy()
    formula = np.vectorize(compute_probit)(raw.astype(np.float64))
    np.testing.assert_allclose(got, formula, rtol=1e-4, atol=1e-5)
    # Winitzki's erfinv is within about 2e-3 of the exact quantile; a score of 0 (no tree reached the target) is 0
    np.testing.assert_allclose(got[inside], special.ndtri(raw[inside].astype(np.float64)), rtol=5e-3, atol=5e-3)
    assert (got[raw == 0] == 0).all()


def test_tree_ensemble_rejects_inconsistent_attributes():
    rng = np.random.default_rng(3)
    attributes = _random_ensemble(rng, trees=1, max_depth=2)
    attributes["tree_roots"] = [len(attributes["nodes_featureids"])]  # type: ignore[arg-type]
    runner = OnnxRunner(_model(attributes).SerializeToString())
    with pytest.raises(RuntimeError, match="tree_roots must name interior nodes"):
        runner({"X": _inputs(rng)})
    attributes = _random_ensemble(rng, trees=1, max_depth=2)
    attributes["leaf_targetids"] = [TARGETS] * len(attributes["leaf_targetids"])  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match=r"leaf_targetids must lie in \[0, n_targets=3\)"):
        OnnxRunner(_model(attributes).SerializeToString())({"X": _inputs(rng)})
