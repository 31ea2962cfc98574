"""`tiny onnx`: the model's description, a timed run on random or given inputs, and --check against onnxruntime."""
from __future__ import annotations

import pathlib

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from models import small_classifier  # noqa: E402

from tinycore.cli import main  # noqa: E402


def test_describes_runs_and_checks(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]):
    model, _ = small_classifier()
    path = tmp_path / "classifier.onnx"
    onnx.save_model(model, str(path))
    x = np.random.default_rng(3).standard_normal((2, 3, 8, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    assert main(["onnx", str(path), "--input", f"x={tmp_path / 'x.npy'}", "--runs", "1", "--check"]) == 0
    printed = capsys.readouterr().out
    assert "input     x: float32[batch, 3, 8, 8]" in printed
    assert "output    y: float32[batch, 5]" in printed
    assert "opsets    ai.onnx 17" in printed
    assert "nodes     6: Conv 1, Relu 1, GlobalAveragePool 1, Flatten 1, Gemm 1, Softmax 1" in printed
    assert "result    y: shape (2, 5) float32" in printed
    assert "check     y: ok" in printed
    assert "ms per run" in printed


def test_random_inputs_take_symbolic_sizes(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]):
    path = tmp_path / "classifier.onnx"
    onnx.save_model(small_classifier()[0], str(path))
    assert main(["onnx", str(path), "--dim", "batch=3", "--runs", "0"]) == 0
    assert "result    y: shape (3, 5) float32" in capsys.readouterr().out


def test_check_reports_a_mismatch(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str],
                                  monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "classifier.onnx"
    onnx.save_model(small_classifier()[0], str(path))
    import tinycore.nn.onnx.cli as onnx_cli
    monkeypatch.setattr(onnx_cli, "_onnxruntime_outputs", lambda *_: [np.zeros((1, 5), np.float32)])
    assert main(["onnx", str(path), "--runs", "0", "--check"]) == 1
    assert "check     y: MISMATCH" in capsys.readouterr().out


def test_a_malformed_model_is_one_line_and_status_2(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]):
    path = tmp_path / "broken.onnx"
    path.write_bytes(small_classifier()[0].SerializeToString()[:40])
    assert main(["onnx", str(path)]) == 2
    error = capsys.readouterr().err
    assert "not a valid ONNX file" in error and "Traceback" not in error
