"""TinyJit functions that return lazy tensors, and slicing with bound Variables, against numpy."""
from __future__ import annotations

import numpy as np
import pytest

from tinycore import TinyJit, Variable
from tinycore.tensor import Tensor

RNG = np.random.default_rng(5)


def test_jit_realizes_the_lazy_tensors_it_returns() -> None:
    @TinyJit
    def add_and_scale(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
        return a + b, (a * b).sum()

    for _ in range(4):
        first, second = RNG.standard_normal(6).astype(np.float32), RNG.standard_normal(6).astype(np.float32)
        total, dot = add_and_scale(Tensor(first).realize(), Tensor(second).realize())
        np.testing.assert_allclose(total.numpy(), first + second, rtol=1e-6)
        np.testing.assert_allclose(dot.numpy(), (first * second).sum(), rtol=1e-5)
    assert add_and_scale.captured_kernel_count >= 1


MATRIX = np.arange(20, dtype=np.float32).reshape(4, 5)


@pytest.mark.parametrize("value", [1, 2, 3, 5])
def test_slices_with_a_bound_variable_match_numpy(value: int) -> None:
    v = Variable("v", 1, 5)
    t = Tensor(MATRIX)
    np.testing.assert_allclose(t[:, :v.bind(value)].sum(1).numpy(), MATRIX[:, :value].sum(1))
    np.testing.assert_allclose(t[:, v.bind(value):].sum(1).numpy(), MATRIX[:, value:].sum(1))
    np.testing.assert_allclose((t[:v.bind(min(value, 4))] * 2).sum(0).numpy(), (MATRIX[:min(value, 4)] * 2).sum(0))
    row = Variable("row", 0, 3)
    np.testing.assert_allclose(t[row.bind(min(value, 3))].numpy(), MATRIX[min(value, 3)])


@pytest.mark.parametrize("value", [1, 2, 3])
def test_shrink_with_variables_feeding_a_reduce_matches_numpy(value: int) -> None:
    v = Variable("v", 1, 3)
    bound = v.bind(value)
    t = Tensor(MATRIX)
    np.testing.assert_allclose(t.shrink(((0, 4), (0, bound))).sum(1).numpy(), MATRIX[:, :value].sum(1))
    np.testing.assert_allclose(t.shrink(((bound, 4), None)).max(0).numpy(), MATRIX[value:].max(0))
    np.testing.assert_allclose(t.shrink((None, (bound, bound + 2))).sum().numpy(), MATRIX[:, value:value + 2].sum())


def test_jit_with_a_symbolic_slice_replays_each_binding() -> None:
    v = Variable("v", 1, 5)

    @TinyJit
    def prefix_sums(t: Tensor, length: object) -> Tensor:
        return t[:, :length].sum(1) * 1.0

    t = Tensor(MATRIX).realize()
    for value in (2, 3, 1, 5, 4):
        np.testing.assert_allclose(prefix_sums(t, v.bind(value)).numpy(), MATRIX[:, :value].sum(1))


def test_symbolic_slice_errors_are_clear() -> None:
    v = Variable("v", 1, 5)
    t = Tensor(MATRIX)
    with pytest.raises(TypeError, match="step 1"):
        t[:, :v.bind(3):2]
    with pytest.raises(TypeError, match="Variables"):
        t[:, :v.bind(3)] = 1.0


@pytest.mark.parametrize("value", [1, 3, 6])
def test_unsqueezed_symbolic_views_index_without_dividing_by_the_variable(value: int) -> None:
    # a KV cache read as attention does: positions [0, end) of a realized buffer, permuted and unsqueezed, then a
    # product summed over the positions; the symbolic axis keeps its own index (no division or remainder by `end`)
    from tinycore.schedule import create_schedule
    from tinycore.uop.ops import Ops
    cache_values = RNG.standard_normal((1, 8, 2, 4)).astype(np.float32)
    weights_values = RNG.standard_normal((1, 2, 3, 8)).astype(np.float32)
    end = Variable("end", 1, 8).bind(value)
    cache = Tensor(cache_values).realize()
    weights = Tensor(weights_values).realize().shrink((None, None, None, (0, end)))
    view = cache.shrink((None, (0, end), None, None)).permute(0, 2, 1, 3).unsqueeze(2)  # (1, 2, 1, end, 4)
    result = (weights.unsqueeze(-1) * view).sum(-2)  # (1, 2, 3, 4)
    kernels = [item.ast for item in create_schedule([result.uop]).items if item.ast.op is Ops.SINK]
    assert kernels
    expected = np.einsum("bhgs,bshd->bhgd", weights_values[..., :value], cache_values[:, :value])
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-5, atol=1e-6)
    for ast in kernels:
        divisions = [node for node in ast.toposort if node.op in (Ops.IDIV, Ops.MOD) and
                     any(source.op is Ops.DEFINE_VAR for source in node.src[1].toposort)]
        assert not divisions, f"a division by the symbolic size in {[str(node) for node in divisions][:2]}"
