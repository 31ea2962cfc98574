"""Conformance, jit: TinyJit captures a function's kernels on the device and replays them with new inputs."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy
import pytest

from tinycore.tensor import Tensor
from tinycore.testing.support import assert_matches, not_built, sample

if TYPE_CHECKING:
    from tinycore.engine.jit import TinyJit

pytestmark = pytest.mark.conformance_category("jit")


def _tiny_jit() -> type[TinyJit]:
    try:
        from tinycore.engine.jit import TinyJit
    except ImportError as error:
        not_built(f"tinycore.TinyJit is not part of this tinycore ({error})")
    return TinyJit


def test_replay_with_new_inputs(device: str) -> None:
    """A jitted elementwise-and-reduce function gives numpy's answer on every call, captured or replayed; from the
    third call on its kernels are replayed without running the Python function."""
    jit = _tiny_jit()
    body_runs = []

    @jit
    def step(left: Tensor, right: Tensor) -> Tensor:
        body_runs.append(1)
        return ((left * right + 1.0).sum(1)).realize()

    for call in range(5):
        left, right = sample((3, 4), seed=80 + call), sample((3, 4), seed=90 + call)
        result = step(Tensor(left, device=device).realize(), Tensor(right, device=device).realize())
        assert_matches(result, (left * right + numpy.float32(1.0)).sum(axis=1),
                       f"jitted (x * y + 1).sum(1), call {call + 1}, on {device}", rtol=1e-5)
    if len(body_runs) != 2:
        raise AssertionError(f"the jitted function's body ran {len(body_runs)} times in 5 calls on {device}; "
                             "expected 2 (run, capture) and replays after that")


def test_replay_with_two_outputs(device: str) -> None:
    """Two outputs of one jitted function (one depending on the other) stay correct on replay."""
    jit = _tiny_jit()

    @jit
    def step(value: Tensor) -> tuple[Tensor, Tensor]:
        doubled = (value * 2.0).realize()
        return doubled, (doubled.exp() - value).realize()

    for call in range(4):
        data = sample((2, 5), seed=100 + call)
        doubled, second = step(Tensor(data, device=device).realize())
        assert_matches(doubled, data * numpy.float32(2.0), f"first output, call {call + 1}, on {device}")
        assert_matches(second, numpy.exp(data * numpy.float32(2.0)) - data, f"second output, call {call + 1}, on "
                       f"{device}", rtol=1e-5)


def test_replay_reads_a_captured_weight(device: str) -> None:
    """A realized tensor that the jitted function reads but does not take as an input (a weight) is read by every
    replay: ((x @ w).relu() + y).sum(1) matches numpy for eight calls."""
    jit = _tiny_jit()
    weight_data = sample((4, 5), seed=105)
    weight = Tensor(weight_data, device=device).realize()

    @jit
    def step(inputs: Tensor, bias: Tensor) -> Tensor:
        return ((inputs @ weight).relu() + bias).sum(1).realize()

    for call in range(8):
        inputs, bias = sample((3, 4), seed=106 + call), sample((3, 5), seed=116 + call)
        expected = (numpy.maximum(inputs @ weight_data, 0) + bias).sum(axis=1)
        assert_matches(step(Tensor(inputs, device=device).realize(), Tensor(bias, device=device).realize()), expected,
                       f"jitted ((x @ w).relu() + y).sum(1), call {call + 1}, on {device}", rtol=1e-5, atol=1e-5)


def test_replay_updates_state_through_assign(device: str) -> None:
    """A jitted function that assigns into a realized state tensor updates it on every replay (a running sum)."""
    jit = _tiny_jit()
    total = Tensor(numpy.zeros(3, numpy.float32), device=device).contiguous().realize()

    @jit
    def accumulate(value: Tensor) -> Tensor:
        total.assign(total + value).realize()
        return total

    expected = numpy.zeros(3, numpy.float32)
    for call in range(6):
        value = sample((3,), seed=126 + call)
        expected = expected + value
        accumulate(Tensor(value, device=device).realize())
        assert_matches(total, expected, f"state after {call + 1} jitted assigns of state + x on {device}", rtol=1e-5)
