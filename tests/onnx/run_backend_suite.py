"""The whole of onnx's backend test suite on tinycore (~2,000 cases). Not collected by default (its name does not
start with test_): `nox -s onnx_backend` runs it, or `pytest tests/onnx/run_backend_suite.py`."""
from __future__ import annotations

from backend_suite import build_suite, cpu_cases

globals().update(cpu_cases(build_suite(__name__)))
