"""tinygrad-ported programs see torch's values at the edges of elementwise ops: pow's NaN placement and gradients,
bitwise ops' errors, div's rounding modes. Every oracle here is torch."""
import math
import warnings

import numpy as np
import pytest
import torch

from tinycore import Tensor

BASES = [-math.inf, -2.5, -2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 3.0, math.inf]
EXPONENTS = [-2.0, -1.5, -1.0, -0.3, 0.0, 0.3, 1.0, 1.1, 2.0, 3.0, 5.5]


def _close(actual: np.ndarray, expected: np.ndarray) -> None:
    np.testing.assert_allclose(actual, expected, rtol=1e-3, atol=1e-5, equal_nan=True)


def test_pow_of_two_tensors_matches_torch_values_and_both_gradients() -> None:
    grid_base, grid_exponent = np.meshgrid(np.array(BASES, np.float32), np.array(EXPONENTS, np.float32),
                                           indexing="ij")
    torch_base = torch.tensor(grid_base, requires_grad=True)
    torch_exponent = torch.tensor(grid_exponent, requires_grad=True)
    expected = torch_base ** torch_exponent
    expected_base, expected_exponent = torch.autograd.grad(expected.sum(), [torch_base, torch_exponent])
    base, exponent = Tensor(grid_base, requires_grad=True), Tensor(grid_exponent, requires_grad=True)
    value = base ** exponent
    base_gradient, exponent_gradient = value.sum().gradient(base, exponent)
    _close(value.numpy(), expected.detach().numpy())
    _close(base_gradient.numpy(), expected_base.numpy())
    _close(exponent_gradient.numpy(), expected_exponent.numpy())


@pytest.mark.parametrize("exponent", EXPONENTS + [1, 2, 3, -1, -2, 8.0, 0.5])
def test_tensor_to_a_constant_power_matches_torch(exponent: float) -> None:
    data = np.array(BASES, np.float32)
    torch_base = torch.tensor(data, requires_grad=True)
    expected = torch_base ** exponent
    (expected_gradient,) = torch.autograd.grad(expected.sum(), [torch_base])
    base = Tensor(data, requires_grad=True)
    value = base ** exponent
    (gradient,) = value.sum().gradient(base)
    _close(value.numpy(), expected.detach().numpy())
    _close(gradient.numpy(), expected_gradient.numpy())


@pytest.mark.parametrize("constant", BASES)
def test_constant_to_a_tensor_power_matches_torch(constant: float) -> None:
    data = np.array(EXPONENTS, np.float32)
    torch_exponent = torch.tensor(data, requires_grad=True)
    expected = constant ** torch_exponent
    (expected_gradient,) = torch.autograd.grad(expected.sum(), [torch_exponent])
    exponent = Tensor(data, requires_grad=True)
    value = constant ** exponent
    (gradient,) = value.sum().gradient(exponent)
    _close(value.numpy(), expected.detach().numpy())
    _close(gradient.numpy(), expected_gradient.numpy())


def test_negative_bases_to_fractional_powers_give_nan_gradients_as_torch() -> None:
    data = np.linspace(-30, -27, 12, dtype=np.float32)
    torch_base = torch.tensor(data, requires_grad=True)
    (expected,) = torch.autograd.grad((torch_base ** 1.2).sum(), [torch_base])
    base = Tensor(data, requires_grad=True)
    (gradient,) = (base ** 1.2).sum().gradient(base)
    assert np.isnan(expected.numpy()).all()
    _close(gradient.numpy(), expected.numpy())


@pytest.mark.parametrize("case", [
    ("bitwise_xor of floats", lambda lib: lib.tensor_of([1.0, 2.0]).bitwise_xor(lib.tensor_of([1.0, 2.0]))),
    ("bitwise_not of floats", lambda lib: lib.tensor_of([1.0, 2.0]).bitwise_not()),
    ("div rounding_mode typo", lambda lib: lib.tensor_of([5]).div(lib.tensor_of([1]), rounding_mode="typo")),
    ("unfold larger than the axis", lambda lib: lib.ones(8).unfold(0, 9, 3)),
    ("unfold negative step", lambda lib: lib.ones(8).unfold(0, 1, -1)),
    ("meshgrid indexing typo", lambda lib: lib.meshgrid(lib.tensor_of([1.0, 2.0]), indexing="bad")),
], ids=lambda case: case[0])
def test_bad_arguments_raise_runtime_error_as_torch(case) -> None:
    _, build = case
    with pytest.raises(RuntimeError):
        build(_Torch)
    with pytest.raises(RuntimeError):
        build(_Tiny)


class _Torch:
    tensor_of = staticmethod(torch.tensor)
    ones = staticmethod(torch.ones)

    @staticmethod
    def meshgrid(first, indexing: str):
        return torch.meshgrid(first, indexing=indexing)


class _Tiny:
    tensor_of = Tensor
    ones = staticmethod(Tensor.ones)

    @staticmethod
    def meshgrid(first, indexing: str):
        return first.meshgrid(indexing=indexing)


def test_linspace_of_bool_is_refused_as_torch() -> None:
    with pytest.raises(RuntimeError):
        torch.linspace(5, 10, 3, dtype=torch.bool)
    with pytest.raises(ValueError):
        Tensor.linspace(5, 10, 3, dtype="bool")


def test_unfold_of_size_zero_gives_torch_shape() -> None:
    expected = torch.ones(3, 3, 3).unfold(1, 0, 8)
    assert Tensor.ones(3, 3, 3).unfold(1, 0, 8).shape == tuple(expected.shape)
    np.testing.assert_equal(Tensor.arange(8).unfold(0, 7, 3).numpy(), torch.arange(8).unfold(0, 7, 3).numpy())


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "softmin"])
@pytest.mark.parametrize("shape,axis", [((45, 65), 1), ((10, 10, 10), 0), ((10, 10, 10), 2), ((45,), 0)])
def test_row_function_gradients_match_torch(name: str, shape: tuple[int, ...], axis: int) -> None:
    """tinygrad's test_ops data (numpy's legacy seed 0, uniform in [-2, 2]): the gradient of the plain sum is
    within 1e-7 of torch's (0 up to rounding), and of a weighted sum within float32 rounding of its row sums."""
    np.random.seed(0)
    data = np.random.uniform(low=-2, high=2, size=shape).astype(np.float32)
    weights = np.random.default_rng(1).uniform(-1, 1, shape).astype(np.float32)
    expected_input = torch.tensor(data, requires_grad=True)
    expected = getattr(torch.nn.functional, name)(expected_input, dim=axis)
    for seed, tolerance in ((np.ones(shape, np.float32), 1e-7), (weights, 1e-6)):
        (expected_gradient,) = torch.autograd.grad((expected * torch.tensor(seed)).sum(), [expected_input],
                                                   retain_graph=True)
        source = Tensor(data, requires_grad=True)
        (gradient,) = (getattr(source, name)(axis) * Tensor(seed)).sum().gradient(source)
        np.testing.assert_allclose(gradient.numpy(), expected_gradient.numpy(), atol=tolerance, rtol=1e-3)


@pytest.mark.parametrize("values", [[0.0, 100.0], [-math.inf, 0.0, 1.0], [100.0, 0.0, -50.0, 80.0],
                                    [-3.0, -200.0, 5.0]])
def test_logcumsumexp_keeps_small_early_terms_as_torch(values: list[float]) -> None:
    expected_input = torch.tensor(values, requires_grad=True)
    expected = torch.logcumsumexp(expected_input, 0)
    (expected_gradient,) = torch.autograd.grad(expected.sum(), [expected_input])
    source = Tensor(values, requires_grad=True)
    value = source.logcumsumexp()
    (gradient,) = value.sum().gradient(source)
    np.testing.assert_allclose(value.numpy(), expected.detach().numpy(), atol=1e-7, rtol=1e-6)
    # torch's gradient is rounded apart from the exact one by a few ulp (3.99999 where 4 is exact)
    np.testing.assert_allclose(gradient.numpy(), expected_gradient.numpy(), atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_logcumsumexp_along_each_axis_matches_torch(axis: int) -> None:
    data = np.random.default_rng(2).normal(0, 3, (6, 7, 8)).astype(np.float32)
    expected = torch.logcumsumexp(torch.tensor(data), axis).numpy()
    np.testing.assert_allclose(Tensor(data).logcumsumexp(axis).numpy(), expected, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("name", ["var", "std"])
@pytest.mark.parametrize("axis,correction", [((0, 3), 1), ((0, 4), 5), ((0, 3), 5), ((0, 4), 1), ((0, 3), 0)])
def test_var_and_std_without_degrees_of_freedom_match_torch(name: str, axis: tuple[int, ...],
                                                             correction: int) -> None:
    np.random.seed(0)
    data = np.random.uniform(-2, 2, (1, 2, 3, 1, 5)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*degrees of freedom is <= 0")
        expected = getattr(torch.tensor(data), name)(axis, correction=correction).numpy()
    np.testing.assert_allclose(getattr(Tensor(data), name)(axis, correction=correction).numpy(), expected,
                               rtol=1e-5, atol=1e-7)



@pytest.mark.parametrize("mode", ["reflect", "replicate"])
@pytest.mark.parametrize("padding", [(0, 2, 3, 2), (-1, 2, 2, -1), (3, -3, 0, -3), (3, -5, 1, -5), (0, 0, 0, -5),
                                     (4, 4, 0, 4)])
def test_reflect_and_replicate_padding_with_negative_amounts_match_torch(mode: str, padding: tuple[int, ...]) -> None:
    data = np.random.default_rng(3).uniform(-2, 2, (1, 1, 5, 5)).astype(np.float32)
    expected_input = torch.tensor(data, requires_grad=True)
    expected = torch.nn.functional.pad(expected_input, padding, mode=mode)
    (expected_gradient,) = torch.autograd.grad(expected.sum(), [expected_input])
    source = Tensor(data, requires_grad=True)
    value = source.pad(padding, mode=mode)
    (gradient,) = value.sum().gradient(source)
    np.testing.assert_allclose(value.numpy(), expected.detach().numpy())
    np.testing.assert_allclose(gradient.numpy(), expected_gradient.numpy())


def test_padding_errors_are_torch_types() -> None:
    source, expected_source = Tensor.ones(1, 1, 5, 5), torch.ones(1, 1, 5, 5)
    for raised, call in ((NotImplementedError, lambda pad, x: pad(x, (3, 0), mode="typo")),
                         (RuntimeError, lambda pad, x: pad(x, (3, 5, 0, 0), mode="reflect")),
                         (RuntimeError, lambda pad, x: pad(x, (3, 6, 0, 0), mode="circular"))):
        with pytest.raises(raised):
            call(torch.nn.functional.pad, expected_source)
        with pytest.raises(raised):
            call(Tensor.pad, source)
    with pytest.raises(NotImplementedError):  # tinygrad's answer; torch computes it
        source.pad((3, -5, 1, -5), mode="circular")


@pytest.mark.parametrize("low,high", [(-2.5, 1.5), (3.0, 0.0), (None, 0.0), (0.0, None), (0.0, 0.0)])
def test_clip_values_and_gradient_at_the_bounds_match_torch(low: float | None, high: float | None) -> None:
    data = np.array([-3.0, -2.5, 0.0, 1.5, 2.0, math.nan], np.float32)
    expected_input = torch.tensor(data, requires_grad=True)
    expected = expected_input.clip(low, high)
    (expected_gradient,) = torch.autograd.grad(expected.sum(), [expected_input])
    source = Tensor(data, requires_grad=True)
    value = source.clip(low, high)
    (gradient,) = value.sum().gradient(source)
    np.testing.assert_allclose(value.numpy(), expected.detach().numpy())
    np.testing.assert_allclose(gradient.numpy(), expected_gradient.numpy())


def test_clip_without_bounds_is_a_runtime_error_as_torch() -> None:
    with pytest.raises(RuntimeError):
        torch.ones(3).clip(None, None)
    with pytest.raises(RuntimeError):
        Tensor.ones(3).clip(None, None)


def test_joining_errors_are_tinygrads_and_torchs_types() -> None:
    scalar = Tensor(3.14)
    with pytest.raises(RuntimeError):
        torch.cat((torch.tensor(3.14), torch.tensor(3.14)))
    with pytest.raises(IndexError):  # tinygrad's type
        scalar.cat(scalar)
    with pytest.raises(RuntimeError):
        scalar.cat(scalar)
    with pytest.raises(ValueError):
        Tensor.stack((Tensor([1, 2]), Tensor([3, 4])), Tensor([5, 6]))
    np.testing.assert_allclose(Tensor.stack(scalar, scalar).numpy(), torch.stack((torch.tensor(3.14),) * 2).numpy())


def test_scatter_and_loss_argument_errors_are_runtime_errors_as_torch() -> None:
    index = torch.randint(3, size=(3, 4, 5))
    tiny_index = Tensor(index.numpy().astype(np.int32))
    cases = [
        (lambda: torch.ones(3, 4, 5).half().scatter(1, index, torch.ones(3, 4, 5)),
         lambda: Tensor.ones(3, 4, 5).half().scatter(1, tiny_index, Tensor.ones(3, 4, 5))),
        (lambda: torch.ones(4, 5, 6).scatter_reduce(0, index, torch.ones(4, 5, 6), reduce="INVALID"),
         lambda: Tensor.ones(4, 5, 6).scatter_reduce(0, tiny_index, Tensor.ones(4, 5, 6), reduce="INVALID")),
        (lambda: torch.nn.functional.cross_entropy(torch.ones(32, 10), torch.ones(32, 1)),
         lambda: Tensor.ones(32, 10).cross_entropy(Tensor.ones(32, 1))),
    ]
    for expected, actual in cases:
        with pytest.raises(RuntimeError):
            expected()
        with pytest.raises(RuntimeError):
            actual()


def test_attention_with_a_mask_and_causal_is_a_runtime_error() -> None:
    """torch raises only on its math path (here: a mask that needs a gradient); its fused kernels ignore the pair."""
    data = torch.ones(2, 2, 4, 8, requires_grad=True)
    with pytest.raises(RuntimeError):
        torch.nn.functional.scaled_dot_product_attention(data, data, data, attn_mask=data[..., :4], is_causal=True)
    source = Tensor.ones(2, 2, 4, 8)
    with pytest.raises(RuntimeError):
        source.scaled_dot_product_attention(source, source, attn_mask=Tensor.ones(2, 2, 4, 4), is_causal=True)
