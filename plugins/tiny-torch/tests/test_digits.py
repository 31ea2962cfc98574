"""The PyTorch digits CNN of examples/torch_digits.py trained on the tiny device, eager and through
torch.compile(backend="tiny"): test accuracy at least 95%, with no operator falling back to the CPU."""
from __future__ import annotations

import importlib.util
import pathlib

import pytest
import tiny_torch

EXAMPLE = pathlib.Path(__file__).resolve().parents[3] / "examples" / "torch_digits.py"


def load_example():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("torch_digits", EXAMPLE)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


@pytest.mark.parametrize("compile_model", [False, True], ids=["eager", "compiled"])
def test_digits_cnn_reaches_95_percent(compile_model: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TINY_TORCH_FALLBACK", "0")  # every operator the script reaches runs on tinycore
    before = set(tiny_torch.fallbacks_hit())  # other tests in the process may have used the fallback on purpose
    accuracy = load_example().train("tiny", compile_model=compile_model)
    assert accuracy >= 0.95, accuracy
    assert set(tiny_torch.fallbacks_hit()) - before == set()
