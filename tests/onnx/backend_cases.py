"""onnx's node test cases written to disk once, in the layout onnx's BackendTest loads model directories from.

The onnx wheel ships its node cases as Python that computes inputs and expected outputs; writing them once per
onnx version (`model.onnx`, `test_data_set_N/input_M.pb`, `output_M.pb`, and `data.json` with the case's
tolerances) lets every later run read files instead of recomputing ~1,900 cases. The cache lives in
TINYCORE_ONNX_CASES or ~/.cache/tinycore/onnx-node-cases-<onnx version>, not in the repository (it is ~50 MB).
"""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import tempfile
import warnings

import onnx
from onnx import numpy_helper


def cache_dir() -> pathlib.Path:
    """Where the node cases of the installed onnx version are (or will be) written."""
    configured = os.environ.get("TINYCORE_ONNX_CASES")
    if configured:
        return pathlib.Path(configured)
    return pathlib.Path.home() / ".cache" / "tinycore" / f"onnx-node-cases-{onnx.__version__}"


def _serialized(value: object, type_proto: onnx.TypeProto, name: str) -> bytes:
    """One input or output value as the proto BackendTest reads for its declared type."""
    if type_proto.HasField("sequence_type"):
        return numpy_helper.from_list(value, name).SerializeToString()  # type: ignore[arg-type]
    if type_proto.HasField("optional_type"):
        return numpy_helper.from_optional(value, name).SerializeToString()  # type: ignore[arg-type]
    if isinstance(value, onnx.TensorProto):
        return value.SerializeToString()
    return numpy_helper.from_array(value, name).SerializeToString()  # type: ignore[arg-type]


def write_node_cases(directory: pathlib.Path | None = None) -> pathlib.Path:
    """Write every node case under `directory`/node unless a finished write is already there; the node folder.

    Several processes may ask at once (pytest-xdist workers collecting on a fresh machine): each writes into a
    private folder and renames it to `node` in one step, so a reader sees no folder or a whole one; a process whose
    rename loses to another's keeps the winner's and deletes its own."""
    root = directory or cache_dir()
    node_dir = root / "node"
    if _finished(root):
        return node_dir
    from onnx.backend.test.case.node import collect_testcases
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases()
    root.mkdir(parents=True, exist_ok=True)
    staging = pathlib.Path(tempfile.mkdtemp(prefix=".node-writing-", dir=root))
    for case in cases:
        assert case.model is not None and case.data_sets is not None
        case_dir = staging / case.name
        case_dir.mkdir(parents=True)
        (case_dir / "model.onnx").write_bytes(case.model.SerializeToString())
        (case_dir / "data.json").write_text(json.dumps({"rtol": case.rtol, "atol": case.atol}))
        graph = case.model.graph
        for index, (inputs, outputs) in enumerate(case.data_sets):
            data_dir = case_dir / f"test_data_set_{index}"
            data_dir.mkdir()
            for position, value in enumerate(inputs):
                info = graph.input[position]
                (data_dir / f"input_{position}.pb").write_bytes(_serialized(value, info.type, info.name))
            for position, value in enumerate(outputs):
                info = graph.output[position]
                (data_dir / f"output_{position}.pb").write_bytes(_serialized(value, info.type, info.name))
    (staging / FINISHED).write_text(onnx.__version__)
    if node_dir.exists() and not _finished(root):  # a write cut off before this layout: nothing reads it
        shutil.rmtree(node_dir, ignore_errors=True)
    try:
        staging.rename(node_dir)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        if not _finished(root):
            raise
    return node_dir


FINISHED = ".finished"
"""The file a whole write of the node cases ends with, inside the folder that is renamed to `node`."""


def _finished(root: pathlib.Path) -> bool:
    """Whether `root` holds a whole write (this layout's marker, or the earlier layout's `complete` beside it)."""
    return (root / "node" / FINISHED).exists() or (root / "complete").exists()
