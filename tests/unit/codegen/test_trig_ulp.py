"""sin, cos and tanh of float32 within 1 ulp of numpy's float64 result rounded to float32, over small, moderate and
huge arguments, denormals and the special values, on the default device and under DEV=CPU:LLVM (the float32
decompositions of codegen/transcendental.py and Tensor.tanh are shared by both CPU renderers)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from ulp import ulp_distance

from tinycore import Tensor

REFERENCES = {"sin": np.sin, "cos": np.cos, "tanh": np.tanh}


# The float32 values closest (relative to their size) to a multiple of pi/2: 16367173 * 2**72 is 2**-29.86 quarter
# turns from one, the least over every exponent (the best approximations of 2**E 2/pi by m/q with q < 2**24, from
# their continued fractions), the next ones 2**-29.5 to 2**-28.5. Their sines need the reduction's last bits.
NEAREST_HALF_PI_MULTIPLES = np.array([16367173 * 2.0 ** 72, 16367173 * 2.0 ** 73, 10741887 * 2.0 ** 11,
                                      10741887 * 2.0 ** 12, 16573937 * 2.0 ** -16], dtype=np.float32)


def rounded(name: str, values: np.ndarray) -> np.ndarray:
    """numpy's `name` in float64, rounded once to float32."""
    with np.errstate(all="ignore"):
        return REFERENCES[name](values.astype(np.float64)).astype(np.float32)


def arguments(name: str) -> np.ndarray:
    """Small, moderate and huge arguments of both signs: dense grids where the function bends, every binade alike
    (uniform bit patterns), |x| up to 1e4 and the float32 maximum, denormals and the special values."""
    generator = np.random.default_rng(47)
    every_binade = generator.integers(0, 0x7F800000, 400_000, dtype=np.int64).astype(np.int32).view(np.float32)
    grids = [np.linspace(-1.0, 1.0, 200_001, dtype=np.float32), np.linspace(-12.0, 12.0, 200_001, dtype=np.float32),
             np.linspace(-1e4, 1e4, 400_001, dtype=np.float32), every_binade, -every_binade,
             np.geomspace(1e-30, 1e-3, 20_001, dtype=np.float32)]
    if name != "tanh":
        grids.append((np.arange(1, 20_001) * (np.pi / 2)).astype(np.float32))  # tiny after the reduction
        grids.append(np.concatenate([NEAREST_HALF_PI_MULTIPLES, -NEAREST_HALF_PI_MULTIPLES]))
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.1754942e-38, -3e-39, 2.0 ** -12,
                        -(2.0 ** -12), 0.99999994, 1.0, -1.0, 1.0000001, 3.4028235e38, -3.4028235e38], dtype=np.float32)
    return np.concatenate([*grids, special])


@pytest.mark.parametrize("name", ["sin", "cos", "tanh"])
def test_within_one_ulp_of_numpy_on_the_default_device(name: str) -> None:
    values = arguments(name)
    got = getattr(Tensor(values), name)().numpy()
    distance = ulp_distance(got, rounded(name, values))
    assert distance.max() <= 1, (values[distance.argmax()], got[distance.argmax()])


@pytest.mark.parametrize("name", ["sin", "cos", "tanh"])
def test_special_values_are_exact(name: str) -> None:
    values = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, -3e-39, 1e-30, -(2.0 ** -13), 30.0, -30.0],
                      dtype=np.float32)
    got = getattr(Tensor(values), name)().numpy()
    want = rounded(name, values)
    np.testing.assert_array_equal(got, want)  # nan for sin and cos of inf, +-1 for tanh of +-inf
    numbers = ~np.isnan(want)
    np.testing.assert_array_equal(np.signbit(got[numbers]), np.signbit(want[numbers]))  # sin(-0) and tanh(-0) are -0


@pytest.mark.parametrize("name", ["sin", "cos"])
def test_arguments_nearest_a_multiple_of_half_pi(name: str) -> None:
    # the reduced argument is 2**-30 of a quarter turn here: a reduction short of about 2**-58 quarter turns of
    # precision loses the last digits of these results (the fraction kept to 2**-46 quarter turns fails here)
    values = np.concatenate([NEAREST_HALF_PI_MULTIPLES, -NEAREST_HALF_PI_MULTIPLES])
    got = getattr(Tensor(values), name)().numpy()
    assert ulp_distance(got, rounded(name, values)).max() <= 1, (got, rounded(name, values))


def test_tanh_just_past_one_on_every_float32() -> None:
    # |x| in [1, 1.125]: z = exp(-2|x|) is largest there, so the polynomial that stands for 2 / (1 + z) and the
    # rounding of z count most; every float32 of the interval, both signs
    start, stop = np.array([1.0, 1.125], dtype=np.float32).view(np.int32)
    values = np.arange(start, stop + 1, dtype=np.int32).view(np.float32)
    values = np.concatenate([values, -values])
    assert ulp_distance(Tensor(values).tanh().numpy(), rounded("tanh", values)).max() <= 1


def test_tanh_near_zero_keeps_every_digit() -> None:
    # 2 sigmoid(2x) - 1 (the old tanh) rounds 1 + tiny first: tanh(1e-5) came out 1e-3 off relative
    values = np.geomspace(1e-8, 0.5, 10_001, dtype=np.float32)
    np.testing.assert_array_less(ulp_distance(Tensor(values).tanh().numpy(), rounded("tanh", values)), 2)


def test_tanh_gradient_is_finite_and_matches_its_derivative() -> None:
    values = np.array([-3e38, -1e20, -20.0, -1.0, -0.5, -1e-6, 0.0, 1e-6, 0.9999, 1.0, 1.0001, 20.0, 1e20, 3e38],
                      dtype=np.float32)
    tensor = Tensor(values, requires_grad=True)
    tensor.tanh().sum().backward()
    assert tensor.grad is not None
    gradient = tensor.grad.numpy()
    with np.errstate(over="ignore"):
        expected = np.cosh(values.astype(np.float64)) ** -2.0  # 1 - tanh^2, without 1 - 1 in float64 at |x| = 20
    assert np.isfinite(gradient).all(), gradient
    np.testing.assert_allclose(gradient, expected, rtol=1e-5, atol=1e-30)


_CHILD = """
import json, sys
import numpy as np
sys.path[:0] = [{directory!r}, {helpers!r}]
from test_trig_ulp import arguments, rounded, ulp_distance
from tinycore import Device, Tensor
assert type(Device['CPU'].renderer).__name__ == 'LLVMRenderer', type(Device['CPU'].renderer)
worst = {{}}
for name in ('sin', 'cos', 'tanh'):
    values = arguments(name)
    worst[name] = int(ulp_distance(getattr(Tensor(values), name)().numpy(), rounded(name, values)).max())
print(json.dumps(worst))
"""


def test_within_one_ulp_under_the_llvm_renderer() -> None:
    pytest.importorskip("llvmlite")
    environment = {**os.environ, "DEV": "CPU:LLVM"}
    here = Path(__file__).resolve()
    code = _CHILD.format(directory=str(here.parent), helpers=str(here.parents[2] / "helpers"))
    child = subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True, timeout=600)
    assert child.returncode == 0, child.stderr[-3000:]
    worst = json.loads(child.stdout.strip().splitlines()[-1])
    assert set(worst) == {"sin", "cos", "tanh"}
    assert max(worst.values()) <= 1, worst
