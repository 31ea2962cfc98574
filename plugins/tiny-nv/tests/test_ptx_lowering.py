"""Edge values of what codegen lowers before the PTX renderer spells it (tinycore.codegen.ssa_lowering): integer
division and remainder by 0 and by -1 (int min too), MAX with NaN and of bools, gated loads at both edges of a buffer,
bool buffers. The MOCK GPU (DEV=MOCK+NV:PTX, a child process) runs the lowered linear programs, compared with numpy;
ptxas assembles the PTX of the same kernels."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from nv_kernels import kernels_of
from test_nv_ptx import assemble, ptxas  # noqa: F401  (ptxas: the fixture)
from tiny_nv.ptx import PTXRenderer

from tinycore.codegen import lower_to_program
from tinycore.tensor import Tensor

INPUTS = {
    "a8": np.array([-128, -127, -7, 0, 7, 100, 5, -5], dtype=np.int8),
    "b8": np.array([-1, 0, 3, -1, -3, 9, 0, 2], dtype=np.int8),
    "a32": np.array([-2**31, 2**31 - 1, -7, 0, 7, -100, 5, -2**31], dtype=np.int32),
    "b32": np.array([-1, -1, 0, 5, -3, 7, 0, 3], dtype=np.int32),
    "a64": np.array([-2**63, 7, -7, 100, 1, 0, 5, -5], dtype=np.int64),
    "b64": np.array([-1, 0, 2, -3, -1, 4, 0, 3], dtype=np.int64),
    "au": np.array([0, 1, 7, 4294967295, 100, 5, 3, 9], dtype=np.uint32),
    "bu": np.array([0, 0, 3, 4294967295, 7, 0, 1, 2], dtype=np.uint32),
    "e": np.array([np.nan, 0.0, -np.inf, np.inf, 1.0, -0.0, np.nan, 2.0], dtype=np.float32),
    "f": np.array([1.0, np.nan, np.inf, -np.inf, -0.0, 0.0, np.nan, 2.0], dtype=np.float32),
    "p": np.array([True, False, True, False, True, True, False, False]),
    "q": np.array([True, True, False, False, False, True, True, False]),
    "x": np.arange(1, 9, dtype=np.float32),
}
CODES = {
    **{f"division and remainder, {key}": f"[t['a{key}'] // t['b{key}'], t['a{key}'] % t['b{key}']]"
       for key in ("8", "32", "64", "u")},
    "maximum": "[t['e'].maximum(t['f']), t['a8'].maximum(t['b8']), t['p'].maximum(t['q']), t['p'].max()]",
    "gated loads and bools": "[t['x'].pad((3, 4), value=-1.5), t['p'].pad((2, 2)), t['p'] ^ t['q'], "
                             "t['p'].where(t['q'], t['p']), t['e'].cast('bool'), t['p'].cast('int8') * 3, "
                             "t['p'] + t['q'], t['p'] * t['q'], t['p'] < t['q'], t['p'] == t['q']]",
}
SCRIPT = """
import json, sys
import numpy as np
from tinycore import Tensor
t = {key: Tensor(np.array(value, dtype=dtype)) for key, (value, dtype) in json.loads(sys.argv[1]).items()}
print(json.dumps({name: [[(n := v.numpy()).tolist(), str(n.dtype)] for v in eval(code)]
                  for name, code in json.loads(sys.argv[2]).items()}))
"""


def _safe(a: np.ndarray, b: np.ndarray, op) -> np.ndarray:  # type: ignore[no-untyped-def]
    """numpy's floor division / modulo with a zero divisor giving 0, as tinycore's (int min // -1 wraps)."""
    with np.errstate(all="ignore"):
        return np.where(b == 0, 0, op(a, np.where(b == 0, 1, b))).astype(a.dtype)


def _expected(v: dict[str, np.ndarray]) -> dict[str, list[np.ndarray]]:
    return {**{f"division and remainder, {key}": [_safe(v[f"a{key}"], v[f"b{key}"], np.floor_divide),
                                                  _safe(v[f"a{key}"], v[f"b{key}"], np.mod)]
               for key in ("8", "32", "64", "u")},
            "maximum": [np.where(v["e"] < v["f"], v["f"], v["e"]), np.maximum(v["a8"], v["b8"]), v["p"] | v["q"],
                        np.array(v["p"].max())],
            "gated loads and bools": [np.pad(v["x"], (3, 4), constant_values=-1.5), np.pad(v["p"], (2, 2)),
                                      v["p"] ^ v["q"], np.where(v["p"], v["q"], v["p"]),
                                      v["e"].astype(bool), v["p"].astype(np.int8) * 3, v["p"] | v["q"],
                                      v["p"] & v["q"], v["p"] < v["q"], v["p"] == v["q"]]}


@pytest.fixture(scope="module")
def results() -> dict[str, list[tuple[list[object], str]]]:
    """Every case computed under DEV=MOCK+NV:PTX, in one child process."""
    encoded = json.dumps({key: (value.tolist(), str(value.dtype)) for key, value in INPUTS.items()})
    finished = subprocess.run([sys.executable, "-c", SCRIPT, encoded, json.dumps(CODES)], capture_output=True,
                              text=True, env={**os.environ, "DEV": "MOCK+NV:PTX"}, timeout=300)
    assert finished.returncode == 0, finished.stderr[-4000:]
    loaded: dict[str, list[tuple[list[object], str]]] = json.loads(finished.stdout.splitlines()[-1])
    return loaded


@pytest.mark.parametrize("name", list(CODES))
def test_lowered_edge_values_match_numpy(results: dict[str, list[tuple[list[object], str]]], name: str) -> None:
    expected = _expected(INPUTS)[name]
    assert len(results[name]) == len(expected)
    for (values, dtype), wanted in zip(results[name], expected, strict=True):
        got = np.array(values, dtype=dtype)
        assert got.shape == wanted.shape and got.dtype == wanted.dtype, (got, wanted)
        np.testing.assert_array_equal(got, wanted)
        if np.issubdtype(wanted.dtype, np.floating):
            np.testing.assert_array_equal(np.signbit(got), np.signbit(wanted))


@pytest.mark.parametrize("name", list(CODES))
def test_lowered_kernels_assemble(name: str, ptxas: str, tmp_path: Path) -> None:  # noqa: F811
    t = {key: Tensor(value) for key, value in INPUTS.items()}  # noqa: F841  (the codes read t)
    for tensor in eval(CODES[name]):
        for item in kernels_of(tensor):
            assemble(ptxas, lower_to_program(item.ast, PTXRenderer("sm_80")).src, "sm_80", tmp_path)
