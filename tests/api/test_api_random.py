"""Random streams against tinygrad 0.14.0's own outputs (tests/api/data/random_known_answers.json).

The table was generated once with tinygrad 0.14.0 by tests/api/data/make_random_known_answers.py (not run in CI).
Uniform draws, integers, permutations, samples and dropout masks must match bit for bit. Values computed from the
draws with float arithmetic may differ in the last units: tinygrad's CPU device lets clang fuse `a * b + c` into one
rounding (FMA) where tinycore's rounds twice, as numpy does (uniform, the initialisers), and each library has its
own log and cos (randn, normal).
"""
from __future__ import annotations

import json
import pathlib
from typing import Any

import numpy as np
import pytest

from tinycore import Context, Tensor, TinyJit, dtypes

TABLE = json.loads(pathlib.Path(__file__).with_name("data").joinpath("random_known_answers.json").read_text())
# call -> the most float units (eps of the dtype, times the largest magnitude in the result) a value may differ by
ROUNDED = {"uniform": 1, "kaiming_uniform": 1, "glorot_uniform": 1, "scaled_uniform": 2, "randn": 4, "normal": 4}


def decode(result: dict[str, Any]) -> np.ndarray:
    """The reference array (exact bits for floats)."""
    dtype = np.dtype(result["dtype"]) if result["dtype"] != "bfloat16" else None
    if "hex" in result:
        if dtype is None:  # bfloat16: the top half of a float32
            raw = np.frombuffer(bytes.fromhex(result["hex"]), dtype=np.uint16).astype(np.uint32) << 16
            return raw.view(np.float32).reshape(result["shape"])
        return np.frombuffer(bytes.fromhex(result["hex"]), dtype=dtype).reshape(result["shape"])
    return np.array(result["values"], dtype=dtype).reshape(result["shape"])


def run_call(call: str, args: list[Any], kwargs: dict[str, Any]) -> np.ndarray:
    """The same call in tinycore, realized."""
    kwargs = {key: getattr(dtypes, value) if key == "dtype" else value for key, value in kwargs.items()}
    if call == "jit_calls":  # random draws inside a jitted function: each replay draws new numbers
        @TinyJit
        def step(x: Tensor) -> list[Tensor]:
            with Context(TRAINING=1):
                return [x.dropout(0.5).realize(), Tensor.rand(4).realize()]
        results = [[part.numpy().copy() for part in step(Tensor.ones(6).contiguous())] for _ in range(5)]
        return np.concatenate([np.concatenate(parts) for parts in results])
    if call == "random_bits_call":
        key = Tensor([0x12345678, 0x9ABCDEF0], dtype=dtypes.uint32)
        counter = Tensor([0xFFFFFFFE, 3], dtype=dtypes.uint32)
        return Tensor.random_bits(key, counter, 7).numpy()
    if "." in call:
        tensor_name, method = call.split(".")
        with Context(TRAINING=1):
            return getattr(Tensor(TABLE["fixed_tensors"][tensor_name]), method)(*args, **kwargs).numpy()
    result = getattr(Tensor, call)(*args, **kwargs)
    if result.dtype == dtypes.bfloat16:
        result = result.cast(dtypes.float32)
    return result.numpy()


@pytest.mark.parametrize("case", TABLE["cases"], ids=[case["name"] for case in TABLE["cases"]])
def test_random_stream_matches_tinygrad(case: dict[str, Any]) -> None:
    Tensor.manual_seed(case["seed"])
    for position, call in enumerate(case["calls"]):
        expected = decode(call["result"])
        got = run_call(call["call"], call["args"], call["kwargs"])
        where = f"{case['name']} call {position} ({call['call']}{tuple(call['args'])} {call['kwargs']})"
        assert got.shape == expected.shape, where
        if call["call"] in ROUNDED:
            scale = max(1.0, float(np.abs(expected.astype(np.float64)).max(initial=0.0)))
            tolerance = ROUNDED[call["call"]] * float(np.finfo(got.dtype).eps) * scale
            np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64), rtol=0, atol=tolerance,
                                       err_msg=where)
        elif expected.dtype.kind == "f":
            assert got.tobytes() == expected.astype(got.dtype).tobytes(), f"{where}: {got} != {expected}"
        else:
            np.testing.assert_array_equal(got, expected, err_msg=where)


def test_unknown_keyword_is_a_type_error() -> None:
    for make in (lambda: Tensor.rand(2, unknown_kwarg=1), lambda: Tensor.randn(2, unknown_kwarg=1),
                 lambda: Tensor.randint(2, unknown_kwarg=1), lambda: Tensor.uniform(2, unknown_kwarg=1),
                 lambda: Tensor.randperm(3, unknown_kwarg=1), lambda: Tensor.ones(2).rand_like(unknown_kwarg=1)):
        with pytest.raises(TypeError, match="unknown_kwarg"):
            make()


def test_bad_random_arguments_raise_tinygrads_errors() -> None:
    with pytest.raises(ValueError, match="float"):
        Tensor.rand(2, dtype=dtypes.int32)
    with pytest.raises(ValueError, match="low < high"):
        Tensor.randint(2, low=3, high=3)
    with pytest.raises(TypeError):
        Tensor.randint(2, low=0.5, high=3)
    with pytest.raises(ValueError, match="std"):
        Tensor.normal(2, std=-1.0)
    with pytest.raises(ValueError):
        Tensor([1.0, 2.0]).dropout(1.5)


def test_random_tensors_are_lazy_until_realized() -> None:
    from tinycore.helpers import GlobalCounters
    Tensor.manual_seed(0)
    before = GlobalCounters.kernel_count
    with Context(TRAINING=1):
        draws = [Tensor.rand(64, 64), Tensor.randn(32), Tensor.randint(16, high=5), Tensor([1.0] * 8).dropout(0.5)]
    assert GlobalCounters.kernel_count == before  # building the graphs ran nothing
    assert not any(draw._is_realized() for draw in draws)
    expected_first = decode(TABLE["cases"][0]["calls"][0]["result"])  # seed 0, rand(5)
    Tensor.manual_seed(0)
    lazy = Tensor.rand(5)
    assert GlobalCounters.kernel_count == before and not lazy._is_realized()
    assert lazy.numpy().tobytes() == expected_first.tobytes() and GlobalCounters.kernel_count > before
