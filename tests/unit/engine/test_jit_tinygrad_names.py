"""TinyJit behaviours tinygrad programs rely on: keyword inputs in any order, Context(CAPTURING=0), a jit inside a
jit refused, a returned input, graph_class. Results are checked against numpy or hand-computed values."""
from __future__ import annotations

import functools

import numpy as np
import pytest

from tinycore import Context, Tensor, TinyJit
from tinycore.engine.jit import JitError

RNG = np.random.default_rng(7)


def _random(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def test_keyword_inputs_in_another_order_replay_the_same_mapping():
    @TinyJit
    def divide(first: Tensor, second: Tensor) -> Tensor:
        return (first / second).realize()

    for call in range(4):
        a, b = _random(3, 3), _random(3, 3) + 4.0  # away from zero, so the quotient is well conditioned
        # the first two calls name `second` first, the replays name `first` first
        out = divide(second=Tensor(b), first=Tensor(a)) if call < 2 else divide(first=Tensor(a), second=Tensor(b))
        np.testing.assert_allclose(out.numpy(), a / b, rtol=1e-6)


def test_capturing_zero_leaves_a_launch_out_of_the_capture():
    @TinyJit
    def add(a: Tensor, b: Tensor) -> Tensor:
        with Context(CAPTURING=0):
            Tensor.zeros(4, 4).contiguous().realize()
        return (a + b).realize()

    for i in range(4):
        np.testing.assert_equal(add(Tensor([i]), Tensor([i])).numpy(), [2 * i])
    assert add.captured is not None
    assert len(add.captured.jit_cache) == 1


def test_jit_inside_a_capturing_jit_is_refused():
    @TinyJit
    def inner(t: Tensor) -> Tensor:
        return t + 1

    @TinyJit
    def outer(t: Tensor) -> Tensor:
        return inner(t) * 3

    np.testing.assert_equal(outer(Tensor([1])).numpy(), [6])  # the first call captures nothing: it runs
    with pytest.raises(RuntimeError, match="having TinyJit inside another TinyJit is not supported"):
        outer(Tensor([1]))
    assert issubclass(JitError, RuntimeError)


def test_returned_input_is_this_calls_input():
    @TinyJit
    def fill(a: Tensor, b: Tensor) -> Tensor:
        return b.assign(a + 1)

    for i in range(5):
        a = Tensor([i])
        result = fill(a, Tensor.empty_like(a))
        assert result.item() == i + 1


def test_graph_class_unwraps_a_partial():
    from tinycore.engine.jit import graph_class
    def factory(calls: list[object], inputs: list[object], pools: list[object]) -> None:
        return None

    class WithPartial:
        graph = functools.partial(factory)

    class WithoutGraph:
        graph = None

    assert graph_class(WithPartial()) is factory  # type: ignore[arg-type]
    assert graph_class(WithoutGraph()) is None  # type: ignore[arg-type]
