"""Edge values of what codegen lowers before the LLVM renderer spells it (tinycore.codegen.ssa_lowering and the
renderer's own forms): integer division and remainder by 0 and by -1 in every integer width, MAX with NaN and of
bools, gated loads at both edges of a buffer, bool buffers. Run under DEV=CPU:LLVM in a child process (a process
opens CPU once), compared with numpy."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from test_cpu_llvm import SCRIPT

DIVIDENDS = [-128, -127, -7, -1, -128, 1, 7, 100, 127, -100, 5, -5]
DIVISORS = [0, -1, 1, 0, -1, 3, -3, 0, 7, 9, -2, 2]
INPUTS = {
    **{f"a_{name}": np.array(DIVIDENDS, dtype=name) for name in ("int8", "int16", "int32", "int64")},
    **{f"b_{name}": np.array(DIVISORS, dtype=name) for name in ("int8", "int16", "int32", "int64")},
    "a_uint32": np.array([0, 1, 7, 4294967295, 100, 5], dtype=np.uint32),
    "b_uint32": np.array([0, 0, 3, 4294967295, 7, 0], dtype=np.uint32),
    "int_min": np.array([-2**31, 2**31 - 1, -2**31 + 1], dtype=np.int32),
    "minus_one": np.array([-1, -1, -1], dtype=np.int32),
    "e": np.array([np.nan, 0.0, -np.inf, np.inf, 1.0, -0.0, np.nan, 2.0], dtype=np.float32),
    "f": np.array([1.0, np.nan, np.inf, -np.inf, -0.0, 0.0, np.nan, 2.0], dtype=np.float32),
    "p": np.array([True, False, True, False, True, True, False]),
    "q": np.array([True, True, False, False, False, True, True]),
    "x": np.arange(1, 11, dtype=np.float32),
}


def _safe(a: np.ndarray, b: np.ndarray, op) -> np.ndarray:  # type: ignore[no-untyped-def]
    """numpy's floor division / modulo with a zero divisor giving 0, as tinycore's."""
    with np.errstate(all="ignore"):
        return np.where(b == 0, 0, op(a, np.where(b == 0, 1, b))).astype(a.dtype)


CASES: dict[str, tuple[str, object]] = {
    **{f"division and remainder, {name}": (
        f"[(t['a_{name}'] // t['b_{name}']).numpy(), (t['a_{name}'] % t['b_{name}']).numpy()]",
        lambda v, name=name: [_safe(v[f"a_{name}"], v[f"b_{name}"], np.floor_divide),
                              _safe(v[f"a_{name}"], v[f"b_{name}"], np.mod)])
       for name in ("int8", "int16", "int32", "int64", "uint32")},
    "int min divided by -1, a constant and a buffer": (
        "[(t['int_min'] // -1).numpy(), (t['int_min'] // t['minus_one']).numpy(), "
        "(t['int_min'] % t['minus_one']).numpy()]",
        lambda v: [-v["int_min"], -v["int_min"], v["int_min"] * 0]),  # numpy's negation wraps: int min stays
    "maximum with NaN, infinities and signed zeros": (
        "[t['e'].maximum(t['f']).numpy(), t['e'].cast('float64').maximum(t['f'].cast('float64')).numpy()]",
        lambda v: [np.where(v["e"] < v["f"], v["f"], v["e"]),  # MAX is (a < b) ? b : a, as on the C renderer
                   np.where(v["e"] < v["f"], v["f"], v["e"]).astype(np.float64)]),
    "maximum of integers and of bools": (
        "[t['a_int8'].maximum(t['b_int8']).numpy(), t['a_int64'].max().numpy(), t['p'].maximum(t['q']).numpy(), "
        "t['p'].max().numpy()]",
        lambda v: [np.maximum(v["a_int8"], v["b_int8"]), v["a_int64"].max(), v["p"] | v["q"], v["p"].max()]),
    "gated loads at both edges of a buffer": (
        "[t['x'].pad((3, 4), value=-1.5).numpy(), t['x'].shrink(((2, 9),)).pad((2, 1)).numpy(), "
        "t['p'].pad((2, 2)).numpy(), t['a_int16'].pad((1, 1)).numpy()]",
        lambda v: [np.pad(v["x"], (3, 4), constant_values=-1.5), np.pad(v["x"][2:9], (2, 1)), np.pad(v["p"], (2, 2)),
                   np.pad(v["a_int16"], (1, 1))]),
    "bool buffers loaded, combined and stored": (
        "[(t['p'] & t['q']).numpy(), (t['p'] ^ t['q']).numpy(), (t['p'] != t['q']).numpy(), "
        "t['p'].logical_not().numpy(), t['p'].where(t['q'], t['p']).numpy(), (t['p'].cast('int32') + 1).numpy(), "
        "t['e'].cast('bool').numpy(), t['a_int8'].cast('bool').numpy(), t['p'].cast('float16').numpy(), "
        "(t['p'] + t['q']).numpy(), (t['p'] * t['q']).numpy(), (t['p'] < t['q']).numpy(), (t['p'] == t['q']).numpy()]",
        lambda v: [v["p"] & v["q"], v["p"] ^ v["q"], v["p"] != v["q"], ~v["p"], np.where(v["p"], v["q"], v["p"]),
                   v["p"].astype(np.int32) + 1, v["e"].astype(bool), v["a_int8"].astype(bool),
                   v["p"].astype(np.float16), v["p"] | v["q"], v["p"] & v["q"], v["p"] < v["q"], v["p"] == v["q"]]),
}


@pytest.fixture(scope="module")
def results() -> dict[str, list[tuple[list[object], str]]]:
    """Every case computed by tinycore under DEV=CPU:LLVM, in one child process."""
    encoded = json.dumps({key: (value.tolist(), str(value.dtype)) for key, value in INPUTS.items()})
    codes = json.dumps({name: code for name, (code, _reference) in CASES.items()})
    finished = subprocess.run([sys.executable, "-c", SCRIPT, encoded, codes], capture_output=True, text=True,
                              env={**os.environ, "DEV": "CPU:LLVM"}, timeout=300)
    assert finished.returncode == 0, finished.stderr[-4000:]
    loaded: dict[str, list[tuple[list[object], str]]] = json.loads(finished.stdout.splitlines()[-1])
    return loaded


@pytest.mark.parametrize("name", list(CASES))
def test_lowered_edge_values_match_numpy(results: dict[str, list[tuple[list[object], str]]], name: str) -> None:
    expected = CASES[name][1](INPUTS)  # type: ignore[operator]
    assert len(results[name]) == len(expected)
    for (values, dtype), wanted in zip(results[name], expected, strict=True):
        got, wanted = np.array(values, dtype=dtype), np.asarray(wanted)
        assert got.shape == wanted.shape and got.dtype == wanted.dtype, (got, wanted)
        np.testing.assert_array_equal(got, wanted)
        if np.issubdtype(wanted.dtype, np.floating):  # -0.0 and 0.0 compare equal: their signs too
            np.testing.assert_array_equal(np.signbit(got), np.signbit(wanted))
