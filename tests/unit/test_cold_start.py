"""What a program's first run pays before its first kernel: modules imported that it does not use.

Each check runs in a fresh interpreter, since this process has long imported everything.
"""
from __future__ import annotations

import gc
import subprocess
import sys

import numpy as np
import pytest
from sklearn.datasets import load_digits

from tinycore import Tensor
from tinycore.helpers import collection_paused
from tinycore.nn import datasets


def _modules_after(code: str) -> set[str]:
    """The names in sys.modules after a fresh interpreter runs `code`."""
    script = f"{code}\nimport sys\nprint('\\n'.join(sys.modules))"
    finished = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True)
    return set(finished.stdout.split())


def test_digits_reads_scikit_learns_file_without_importing_it() -> None:
    # importing sklearn.datasets (and with it scipy) took 1.5 s of the digits demo's cold start
    loaded = _modules_after("from tinycore.nn import datasets\ndatasets.digits()")
    assert "sklearn" not in loaded and "scipy" not in loaded


def test_import_leaves_out_what_only_downloads_and_batch_compiles_use() -> None:
    # urllib.request (with http.client, ssl and email) and concurrent.futures (with logging): ~90 ms of imports
    loaded = _modules_after("import tinycore\nfrom tinycore import nn\nimport tinycore.engine.realize")
    assert not loaded & {"urllib.request", "http.client", "ssl", "concurrent.futures", "sklearn"}


def test_digits_arrays_are_scikit_learns() -> None:
    pixels, labels = datasets._digits_arrays()
    reference = load_digits()
    np.testing.assert_array_equal(pixels, reference.data)
    np.testing.assert_array_equal(labels, reference.target)


def test_collection_paused_restores_the_collector() -> None:
    assert gc.isenabled()
    with collection_paused():
        assert not gc.isenabled()
        with collection_paused():  # nested: the inner block leaves the outer's setting alone
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(KeyError), collection_paused():
        raise KeyError("an error inside the block")
    assert gc.isenabled()
    gc.disable()
    try:
        with collection_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # a collector the caller turned off stays off
    finally:
        gc.enable()


def test_codegen_and_scheduling_run_without_the_collector(monkeypatch: pytest.MonkeyPatch) -> None:
    # each few hundred allocations of graph nodes started a collection walking the live graphs
    import tinycore.codegen
    import tinycore.engine.realize
    seen: dict[str, bool] = {}
    lower, schedule = tinycore.codegen.lower_to_program, tinycore.engine.realize.schedule_cached

    def recording_lower(*arguments: object, **keywords: object) -> object:
        seen["codegen"] = gc.isenabled()
        return lower(*arguments, **keywords)  # type: ignore[arg-type]

    def recording_schedule(*arguments: object, **keywords: object) -> object:
        seen["schedule"] = gc.isenabled()
        return schedule(*arguments, **keywords)  # type: ignore[arg-type]
    monkeypatch.setattr(tinycore.codegen, "lower_to_program", recording_lower)
    monkeypatch.setattr(tinycore.engine.realize, "schedule_cached", recording_schedule)
    value = float(np.random.default_rng(0).random())  # a constant no earlier kernel has, so it is compiled here
    result = (Tensor.arange(12).reshape(3, 4).float() * value).sum(axis=1).numpy()
    np.testing.assert_allclose(result, np.arange(12).reshape(3, 4).sum(axis=1) * value, rtol=1e-6)
    assert seen == {"codegen": False, "schedule": False} and gc.isenabled()
