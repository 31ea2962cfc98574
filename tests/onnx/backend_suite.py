"""onnx's backend test suite (onnx.backend.test.BackendTest) over tinycore's backend.

Node cases come from the on-disk cache that backend_cases.py writes; the simple, pytorch-converted and
pytorch-operator cases from the onnx wheel's data folder. Cases whose model must be downloaded (the "real"
models) are left out: the test machines have no network. `build_suite(module, names)` keeps only the node cases
one of the given case names.
"""
from __future__ import annotations

import json
import pathlib
import unittest
from collections.abc import Sequence

import onnx.backend.test.runner as onnx_runner
from backend_cases import write_node_cases
from onnx.backend.test import BackendTest
from onnx.backend.test.case.test_case import TestCase
from onnx.backend.test.loader import load_model_tests

from tinycore.nn.onnx.backend import TinycoreBackend


def node_cases_from_disk(node_dir: pathlib.Path) -> list[TestCase]:
    """The node cases written under `node_dir`, each pointing at its model folder."""
    cases = []
    for case_dir in sorted(path for path in node_dir.iterdir() if path.is_dir()):
        tolerances = json.loads((case_dir / "data.json").read_text())
        cases.append(TestCase(name=case_dir.name, model_name=case_dir.name[len("test_"):], url=None,
                              model_dir=str(case_dir), model=None, data_sets=None, kind="node",
                              rtol=tolerances["rtol"], atol=tolerances["atol"]))
    return cases


def build_suite(module: str, names: Sequence[str] | None = None) -> BackendTest:
    """BackendTest over TinycoreBackend with node cases read from the cache, real (downloaded) models left out.

    With `names` (case names without test_), only those node cases are loaded."""
    node_dir = write_node_cases()
    chosen = {f"test_{name}" for name in names} if names is not None else None

    def loader(data_dir: str = "", kind: str | None = None) -> list[TestCase]:
        if kind == "node":
            cases = node_cases_from_disk(node_dir)
            return cases if chosen is None else [case for case in cases if case.name in chosen]
        if kind == "real" or chosen is not None:
            return []
        return load_model_tests(kind=kind)

    original = onnx_runner.load_model_tests
    onnx_runner.load_model_tests = loader
    try:
        suite = BackendTest(TinycoreBackend, module)
    finally:
        onnx_runner.load_model_tests = original
    return suite


def cpu_cases(suite: BackendTest) -> dict[str, type[unittest.TestCase]]:
    """The suite's test classes with only their CPU variants (the suite also makes a CUDA variant of each case, which
    TinycoreBackend.supports_device declines)."""
    classes = suite.test_cases
    for test_class in classes.values():
        for name in [name for name in vars(test_class) if name.endswith("_cuda")]:
            delattr(test_class, name)
    return classes
