"""The public namespace: `dir(tinycore)` lists the API and its submodules, not the helpers the package imports."""
from __future__ import annotations

import tinycore


def test_dir_lists_the_public_names_only() -> None:
    names = dir(tinycore)
    assert {"Any", "annotations", "importlib"}.isdisjoint(names), "imports of the package itself are not API"
    assert set(tinycore.__all__) <= set(names), "every public name, lazy ones included"
    assert not [name for name in names if name.startswith("_") and not name.startswith("__")], names
    assert "tensor" in names and tinycore.tensor.__name__ == "tinycore.tensor", "loaded submodules stay listed"
    assert tinycore.Device is not None and tinycore.TinyJit is not None, "lazy names still resolve"
