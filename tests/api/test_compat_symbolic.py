"""Tensors sliced with bound Variables in every op, shrunk back to concrete shapes and read, against numpy."""
from __future__ import annotations

import numpy as np
import pytest

from tinycore import Variable
from tinycore.tensor import Tensor

RNG = np.random.default_rng(11)
A = RNG.standard_normal((3, 10)).astype(np.float32)
B = RNG.standard_normal((10, 3)).astype(np.float32)


@pytest.mark.parametrize("i", [1, 3, 4])
def test_elementwise_result_shrinks_back_and_reads(i: int) -> None:
    vi = Variable("i", 1, 10).bind(i)
    a, b = Tensor(A), Tensor(A * 2)
    np.testing.assert_allclose((a[:, :vi] + 1).realize()[:3, :i].numpy(), A[:, :i] + 1, rtol=1e-6)
    np.testing.assert_allclose((a[:, :vi] + b[:, :vi])[:, :i].numpy(), A[:, :i] * 3, rtol=1e-6)


@pytest.mark.parametrize("i", [1, 4])
def test_pad_by_a_symbolic_amount_gives_a_concrete_shape(i: int) -> None:
    vi = Variable("i", 1, 10).bind(i)
    padded = (Tensor(A)[:, :vi] + 1).pad((None, (0, 10 - vi)))
    assert padded.shape == (3, 10)
    np.testing.assert_allclose(padded.numpy(), np.pad(A[:, :i] + 1, ((0, 0), (0, 10 - i))), rtol=1e-6)


@pytest.mark.parametrize("i", [2, 4])
def test_cat_along_a_symbolic_axis(i: int) -> None:
    vi = Variable("i", 1, 10).bind(i)
    extra = RNG.standard_normal((2, 3)).astype(np.float32)
    joined = Tensor(B)[:vi].cat(Tensor(extra), dim=0)
    np.testing.assert_allclose(joined[:i + 2, :3].numpy(), np.concatenate([B[:i], extra]), rtol=1e-6)
    side = Tensor(A)[:, :vi].cat(Tensor(extra.T), dim=1)
    np.testing.assert_allclose(side[:3, :i + 2].numpy(), np.concatenate([A[:, :i], extra.T], 1), rtol=1e-6)


@pytest.mark.parametrize("i", [1, 2, 4])
def test_mean_and_var_divide_by_the_bound_count(i: int) -> None:
    vi = Variable("i", 1, 10).bind(i)
    t = Tensor(B)
    np.testing.assert_allclose(t[:vi].mean().numpy(), B[:i].mean(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(t[:vi].mean(0).numpy(), B[:i].mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(t[:vi].mean(1)[:i].numpy(), B[:i].mean(1), rtol=1e-5, atol=1e-6)
    if i > 1:
        np.testing.assert_allclose(t[:vi].var(0).numpy(), B[:i].var(0, ddof=1), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("i", [1, 3, 7])
def test_reducing_a_constant_over_a_symbolic_range(i: int) -> None:
    vi = Variable("i", 1, 10).bind(i)
    assert Tensor.ones(10)[:vi].sum().item() == i
    assert (Tensor.ones(10)[:vi] * 2).sum().item() == 2 * i
    assert Tensor.full((10,), 3.0)[:vi].max().item() == 3.0


@pytest.mark.parametrize("i", [1, 4])
def test_shrink_and_slice_with_a_variable_offset_read_concretely(i: int) -> None:
    vi = Variable("i", 1, 10).bind(i)
    t = Tensor(RNG.standard_normal((7, 11)).astype(np.float32))
    expected = t.numpy()[3:5, i:i + 2]
    assert t.shrink(((3, 5), (vi, vi + 2))).shape == (2, 2)
    np.testing.assert_allclose(t.shrink(((3, 5), (vi, vi + 2))).numpy(), expected)
    np.testing.assert_allclose(t[3:5, vi:vi + 2].numpy(), expected)
    np.testing.assert_allclose(t[3:5, :vi:1][:2, :i].numpy(), t.numpy()[3:5, :i])


@pytest.mark.parametrize("i", [1, 3])
def test_matmul_over_a_symbolic_inner_axis(i: int) -> None:
    vi = Variable("i", 1, 10).bind(i)
    np.testing.assert_allclose((Tensor(A)[:, :vi] @ Tensor(B)[:vi, :]).numpy(), A[:, :i] @ B[:i], rtol=1e-5,
                               atol=1e-6)


def test_cat_of_two_symbolic_axes_matches_numpy() -> None:
    for i, j in ((2, 3), (4, 2)):
        vi, vj = Variable("i", 1, 10).bind(i), Variable("j", 1, 10).bind(j)
        joined = Tensor(B)[:vi].cat(Tensor(B * 3)[:vj], dim=0)
        np.testing.assert_allclose(joined[:i + j, :3].numpy(), np.concatenate([B[:i], B[:j] * 3]), rtol=1e-6)


def test_jit_replays_symbolic_inputs_for_every_binding_and_rebinds_its_result() -> None:
    from tinycore import TinyJit

    @TinyJit
    def plus_one(a: Tensor) -> Tensor:
        return (a + 1).realize()

    a = Tensor(A).realize()
    for i in (1, 2, 3, 5, 4):
        vi = Variable("i", 1, 10).bind(i)
        result = plus_one(a[:, :vi])
        np.testing.assert_allclose(result[:3, :i].numpy(), A[:, :i] + 1, rtol=1e-6)
    assert plus_one.captured is not None and len(plus_one.captured.jit_cache) == 1
    with pytest.raises(AssertionError):
        plus_one(Tensor(np.zeros((4, 10), np.float32))[:, :Variable("i", 1, 10).bind(7)])


def test_reshaping_a_concrete_shape_to_a_symbolic_one_is_refused() -> None:
    with pytest.raises(ValueError, match="slice with the bound Variable"):
        Tensor(A.reshape(30)).reshape((3, Variable("i", 1, 10).bind(4)))


@pytest.mark.parametrize("target", ["uint8", "uint16", "uint64"])
def test_bitcast_to_another_element_size_rescales_the_last_axis(target: str) -> None:
    from tinycore import dtypes
    values = RNG.standard_normal((5, 4)).astype(np.float32)
    wanted = values.view(getattr(np, target))
    np.testing.assert_array_equal(Tensor(values).bitcast(getattr(dtypes, target)).numpy(), wanted)
    vi = Variable("i", 1, 10).bind(3)
    symbolic = Tensor(values)[:vi].bitcast(getattr(dtypes, target))
    np.testing.assert_array_equal(symbolic[:3, :wanted.shape[1]].numpy(), wanted[:3])
    back = Tensor(wanted).bitcast(dtypes.float32).numpy()
    np.testing.assert_array_equal(back, values)


@pytest.mark.parametrize("i", [4, 9])
def test_conv_over_a_symbolic_spatial_axis_matches_torch(i: int) -> None:
    torch = pytest.importorskip("torch")
    x = RNG.standard_normal((2, 3, 12, 7)).astype(np.float32)
    w = RNG.standard_normal((5, 3, 3, 3)).astype(np.float32)
    v = Variable("v", 3, 12).bind(i)
    result = Tensor(x)[:, :, :v].conv2d(Tensor(w), padding=1)
    expected = torch.nn.functional.conv2d(torch.tensor(x[:, :, :i]), torch.tensor(w), padding=1).numpy()
    np.testing.assert_allclose(result[:2, :5, :i, :7].numpy(), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("n", [1, 3])
def test_attention_with_a_symbolic_batch_heads_or_sequence_matches_torch(n: int) -> None:
    torch = pytest.importorskip("torch")
    q = RNG.standard_normal((4, 3, 5, 8)).astype(np.float32)
    v = Variable("n", 1, 4).bind(n)
    t = Tensor(q)

    def reference(part: np.ndarray, causal: bool) -> np.ndarray:
        view = torch.tensor(part)
        return torch.nn.functional.scaled_dot_product_attention(view, view, view, is_causal=causal).numpy()

    batch = t[:v].scaled_dot_product_attention(t[:v], t[:v])
    np.testing.assert_allclose(batch[:n].numpy(), reference(q[:n], False), rtol=1e-5, atol=1e-6)
    heads = t[:, :v].scaled_dot_product_attention(t[:, :v], t[:, :v], is_causal=True)
    np.testing.assert_allclose(heads[:4, :n].numpy(), reference(q[:, :n], True), rtol=1e-5, atol=1e-6)
    sequence = t[:, :, :v + 1].scaled_dot_product_attention(t[:, :, :v + 1], t[:, :, :v + 1], is_causal=True)
    np.testing.assert_allclose(sequence[:4, :3, :n + 1].numpy(), reference(q[:, :, :n + 1], True), rtol=1e-5,
                               atol=1e-6)
