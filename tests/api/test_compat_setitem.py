"""tinygrad's setitem and TinyJit tests as programs meet them: writes into `Tensor.arange` results stay in that
tensor (arange of int32 from 0 by 1 wraps a cached index buffer), writes through `detach()`, a jitted step that only
writes its input, jitted methods per instance, non-Tensor returns. Oracles: numpy and torch."""
import numpy as np
import pytest

from tinycore import Tensor


def test_setitem_into_arange_leaves_later_aranges_alone() -> None:
    written = Tensor.arange(10)
    written[4:1:-2] = 11
    expected = np.arange(10)
    expected[4:1:-2] = 11
    np.testing.assert_equal(written.numpy(), expected)
    np.testing.assert_equal(Tensor.arange(10).numpy(), np.arange(10))


def test_inplace_mul_into_realized_arange() -> None:
    scaled = Tensor.arange(12).realize()
    scaled[:3] *= 10
    expected = np.arange(12)
    expected[:3] *= 10
    np.testing.assert_equal(scaled.numpy(), expected)
    np.testing.assert_equal(Tensor.arange(12).numpy(), np.arange(12))


def test_fancy_setitem_and_assign_into_arange() -> None:
    indexed = Tensor.arange(7)
    indexed[[0, 5]] = Tensor([-1, -2], dtype=indexed.dtype)
    expected = np.arange(7)
    expected[[0, 5]] = [-1, -2]
    np.testing.assert_equal(indexed.numpy(), expected)
    replaced = Tensor.arange(7).realize().assign(Tensor.full((7,), 3, dtype=indexed.dtype))
    np.testing.assert_equal(replaced.numpy(), np.full(7, 3))
    np.testing.assert_equal(Tensor.arange(7).numpy(), np.arange(7))


def test_loop_of_scalar_writes_builds_arange() -> None:
    Tensor.arange(10).realize()[:] = 5  # a write that must not reach the shared range
    built = Tensor.empty(10)
    for position in range(10):
        built[position] = position
    np.testing.assert_equal(built.numpy(), np.arange(10, dtype=np.float32))
    np.testing.assert_equal(Tensor.arange(10).numpy(), np.arange(10))


def test_tinyjit_step_that_only_writes_into_its_input() -> None:
    from tinycore import TinyJit, dtypes

    @TinyJit
    def write_block(target: Tensor, block: Tensor) -> None:
        target[2:4, 3:5] = block

    for call in range(1, 6):  # the first calls run and capture, the later ones replay
        target = Tensor.zeros(6, 6).contiguous().realize()
        write_block(target, Tensor.full((2, 2), call, dtype=dtypes.float32).contiguous())
        expected = np.zeros((6, 6), dtype=np.float32)
        expected[2:4, 3:5] = call
        np.testing.assert_equal(target.numpy(), expected)


def test_setitem_through_detach_writes_the_original() -> None:
    import torch

    reference = torch.zeros(3, 3)
    reference.detach()[1, 2] = 5
    original = Tensor.zeros(3, 3).contiguous().realize()
    detached = original.detach()
    detached[1, 2] = 5
    np.testing.assert_equal(original.numpy(), reference.numpy())
    np.testing.assert_equal(detached.numpy(), reference.numpy())


def test_assign_through_detach_keeps_gradients_of_the_original() -> None:
    import torch

    reference = torch.ones(4, requires_grad=True)
    with torch.no_grad():
        reference.detach().copy_(reference.detach() * 3)
    (reference * reference).sum().backward()
    weights = Tensor.ones(4, requires_grad=True).contiguous().realize()
    weights.detach().assign(weights.detach() * 3)
    (weights * weights).sum().backward()
    np.testing.assert_equal(weights.numpy(), reference.detach().numpy())
    assert weights.grad is not None and reference.grad is not None
    np.testing.assert_equal(weights.grad.numpy(), reference.grad.numpy())


@pytest.mark.parametrize("flag", [{"CHECK_OOB": 0}, {"IGNORE_OOB": 1}])
def test_tinyjit_row_write_at_a_variable_offset_under_tinygrad_bounds_flags(flag: dict[str, int]) -> None:
    from tinycore import Context, TinyJit, Variable, dtypes

    with Context(**flag):  # tinygrad's bounds-check flags: accepted, as tinygrad programs set them
        @TinyJit
        def write_row(target: Tensor, row: Tensor, offset: Variable) -> None:
            target.shrink(((offset, offset + 1), None)).assign(row).realize()

        target = Tensor.zeros(6, 6).contiguous().realize()
        expected = np.zeros((6, 6), dtype=np.float32)
        for position in range(6):
            write_row(target, Tensor.full((1, 6), position + 1, dtype=dtypes.float32).contiguous(),
                      Variable("offset", 0, 6).bind(position))
            expected[position] = position + 1
            np.testing.assert_equal(target.numpy(), expected)


def test_jitted_method_captures_per_instance() -> None:
    from tinycore import TinyJit

    class Scaled:
        def __init__(self, scale: float) -> None:
            self.scale = Tensor([scale])

        @TinyJit
        def forward(self, x: Tensor) -> Tensor:
            return (x * self.scale).realize()

    first, second = Scaled(2.0), Scaled(3.0)
    values = np.array([5.0, -1.0], dtype=np.float32)
    for _ in range(3):  # run, capture, replay
        np.testing.assert_equal(first.forward(Tensor(values)).numpy(), values * 2)
    np.testing.assert_equal(second.forward(Tensor(values)).numpy(), values * 3)
    np.testing.assert_equal(second.forward(Tensor(values)).numpy(), values * 3)
    np.testing.assert_equal(first.forward(Tensor(values)).numpy(), values * 2)


def test_tinyjit_refuses_a_number_in_its_return_at_capture() -> None:
    from tinycore import TinyJit
    from tinycore.engine.jit import JitError

    @TinyJit
    def add_and_count(a: Tensor, b: Tensor, count: int) -> tuple[Tensor, int]:
        return (a + b).realize(), count

    first = add_and_count(Tensor([1.0]), Tensor([2.0]), 0)  # the first call runs the function, as tinygrad
    np.testing.assert_equal(first[0].numpy(), [3.0])
    assert first[1] == 0
    with pytest.raises(JitError, match="int"):  # a replay would hand back count=1 for every later call
        add_and_count(Tensor([1.0]), Tensor([2.0]), 1)
