"""TinyJit: capture on the second call, replay afterwards; results checked against numpy.

Replay on a device (new inputs, captured weights, state updated through assign) is checked on each device by the
conformance suite, tinycore/testing/test_jit.py; these tests are about TinyJit itself."""
from __future__ import annotations

import gc

import numpy as np
import pytest

from tinycore import Context, GlobalCounters, Tensor, TinyJit
from tinycore.device.buffer import Buffer
from tinycore.engine.jit import JitError

RNG = np.random.default_rng(0)


def _random(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def test_captured_kernel_count_equals_eager_count() -> None:
    def work(x: Tensor) -> Tensor:
        hidden = (x * 2).contiguous()
        return (hidden.exp().sum() + hidden.max()).realize()

    x_np = _random(16)
    before = GlobalCounters.kernel_count
    work(Tensor(x_np))
    eager_kernels = GlobalCounters.kernel_count - before
    jitted = TinyJit(work)
    for _ in range(3):
        jitted(Tensor(_random(16)))
    assert jitted.captured_kernel_count == eager_kernels
    result = jitted(Tensor(x_np))
    expected = np.exp(x_np * 2).sum() + (x_np * 2).max()
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-5)


def test_inputs_inside_lists_and_dicts() -> None:
    @TinyJit
    def combine(pair: list[Tensor], named: dict[str, Tensor]) -> Tensor:
        return (pair[0] * pair[1] - named["bias"]).realize()

    for _ in range(4):
        a, b, c = _random(6), _random(6), _random(6)
        result = combine([Tensor(a), Tensor(b)], {"bias": Tensor(c)})
        np.testing.assert_allclose(result.numpy(), a * b - c, rtol=1e-6)


def test_method_decoration_keeps_instances_apart() -> None:
    class Scaler:
        def __init__(self, factor: float):
            self.factor = Tensor([factor])

        @TinyJit
        def __call__(self, x: Tensor) -> Tensor:
            return (x * self.factor).realize()

    scaler = Scaler(3.0)
    for _ in range(4):
        values = _random(5)
        np.testing.assert_allclose(scaler(Tensor(values)).numpy(), values * 3.0, rtol=1e-6)


def test_changed_shape_dtype_and_count_raise_clear_errors() -> None:
    @TinyJit
    def double(x: Tensor) -> Tensor:
        return (x * 2).realize()

    for _ in range(3):
        double(Tensor(_random(4)))
    with pytest.raises(JitError, match=r"shape=\(4,\).*shape=\(5,\)"):
        double(Tensor(_random(5)))
    with pytest.raises(JitError, match="dtype"):
        double(Tensor(np.arange(4, dtype=np.int32)))
    with pytest.raises(JitError, match="captured 1 tensor input"):
        double(Tensor(_random(4)), Tensor(_random(4)))


def test_reset_captures_again_with_new_shapes() -> None:
    @TinyJit
    def square(x: Tensor) -> Tensor:
        return (x * x).realize()

    for _ in range(3):
        square(Tensor(_random(4)))
    square.reset()
    for _ in range(3):
        values = _random(7)
        np.testing.assert_allclose(square(Tensor(values)).numpy(), values * values, rtol=1e-6)


def test_non_tensor_return_and_nothing_captured_raise() -> None:
    @TinyJit
    def returns_number(x: Tensor) -> float:
        return 1.5

    with pytest.raises(JitError, match="must return Tensors"):
        returns_number(Tensor(_random(2)))

    @TinyJit
    def computes_nothing(x: Tensor) -> Tensor:
        return x

    computes_nothing(Tensor(_random(2)))
    with pytest.raises(JitError, match="captured no kernel"):
        computes_nothing(Tensor(_random(2)))


def test_same_tensor_twice_is_refused() -> None:
    @TinyJit
    def add(x: Tensor, y: Tensor) -> Tensor:
        return (x + y).realize()

    shared = Tensor(_random(3))
    with pytest.raises(JitError, match="passed twice"):
        add(shared, shared)


def test_jit_off_runs_the_function_every_time() -> None:
    calls = []

    @TinyJit
    def negate(x: Tensor) -> Tensor:
        calls.append(1)
        return (-x).realize()

    with Context(JIT=0):
        for _ in range(4):
            values = _random(3)
            np.testing.assert_allclose(negate(Tensor(values)).numpy(), -values)
    assert len(calls) == 4


def test_jit_turned_off_after_capture_runs_the_function_and_replays_again_after() -> None:
    calls = []

    @TinyJit
    def double(x: Tensor) -> Tensor:
        calls.append(1)
        return (x * 2).realize()

    for _ in range(3):  # run, capture, replay
        double(Tensor(_random(3)).realize())
    assert len(calls) == 2
    with Context(JIT=0):
        values = _random(3)
        np.testing.assert_allclose(double(Tensor(values).realize()).numpy(), values * 2)
    assert len(calls) == 3
    values = _random(3)
    np.testing.assert_allclose(double(Tensor(values).realize()).numpy(), values * 2)
    assert len(calls) == 3


def test_lazy_and_transposed_inputs_are_realized_contiguous_on_every_call() -> None:
    @TinyJit
    def scaled(x: Tensor) -> Tensor:
        return (x * 3 + 1).realize()

    rng = np.random.default_rng(5)
    for call in range(5):
        values = rng.standard_normal((2, 3)).astype(np.float32)
        if call % 2:  # a realized tensor seen through a permute: not a contiguous view of its buffer
            given, expected = Tensor(values.T.copy()).realize().permute(1, 0), values * 3 + 1
        else:  # a lazy graph
            given, expected = Tensor(values) - 1, (values - 1) * 3 + 1
        np.testing.assert_allclose(scaled(given).numpy(), expected, rtol=1e-6)


def test_temporaries_share_memory_and_replays_do_not_grow() -> None:
    @TinyJit
    def chain(x: Tensor) -> Tensor:
        for _ in range(6):
            x = (x * 1.5 + 1).contiguous()
        return x.sum().realize()

    values = _random(64)
    for _ in range(3):
        chain(Tensor(values))
    replay = chain.replay
    assert replay is not None
    temporaries = {id(buffer) for call in replay.calls for buffer in call.buffers if buffer._base is not None}
    assert 0 < len(replay.keep_alive) < len(temporaries)

    def live_buffers() -> int:
        gc.collect()
        return sum(1 for item in gc.get_objects() if isinstance(item, Buffer))

    inputs = [Tensor(_random(64)) for _ in range(2)]
    for tensor in inputs:
        tensor.realize()
    chain(inputs[0])
    before = live_buffers()
    for iteration in range(1000):
        chain(inputs[iteration % 2])
    assert live_buffers() <= before
    expected = inputs[1].numpy()
    for _ in range(6):
        expected = expected * 1.5 + 1
    np.testing.assert_allclose(chain(inputs[1]).numpy(), expected.sum(), rtol=1e-4)


def test_jit_variable_bound_to_several_values_inside_the_function() -> None:
    """A Variable the function binds itself to a different value in each kernel it realizes (a slab start per
    slab) keeps each kernel's own value on replay: the queue graph, which patches one value per Variable, is not
    used for such a capture, and every replay equals numpy's."""
    from tinycore import Variable
    rows = Variable("jit_slab_start", 0, 6)
    data = np.arange(32, dtype=np.float32).reshape(8, 4)
    weight = Tensor(data).realize()

    @TinyJit
    def slabs(x: Tensor) -> Tensor:
        pieces = [(weight.shrink(((rows.bind(start), rows.bind(start) + 2), None)) * x).sum(1).realize()
                  for start in (0, 2, 4, 6)]
        return pieces[0].cat(*pieces[1:]).realize()
    for scale in (1.0, 2.0, -1.5, 3.0):
        np.testing.assert_allclose(slabs(Tensor([scale] * 4)).numpy(), (data * scale).sum(1), rtol=1e-6)


def test_jit_bound_variable_argument_replays_with_new_value() -> None:
    """A bound Variable passed to a TinyJit function replaces the captured value on every replay: one capture of
    (x[:n] * 2).sum() serves every n, each equal to numpy's."""
    import numpy

    from tinycore import Tensor, TinyJit, Variable
    data = numpy.arange(10, dtype=numpy.float32)
    source = Tensor(data).realize()
    width = Variable("jit_width", 1, 10)

    @TinyJit
    def partial_sum(scale: Tensor, bound: object) -> Tensor:
        return (source.shrink(((0, bound),)) * scale).sum().realize()
    for value in (2, 3, 5, 9, 1):
        result = partial_sum(Tensor([2.0]).reshape(()), width.bind(value)).numpy()
        assert float(result) == float(data[:value].sum() * 2), f"n={value}"
    assert partial_sum.captured_kernel_count >= 1
