"""The node-level product graphs (tinycore.tensor.matmul) are the very nodes the Tensor operations make, and
the products they give match numpy and torch (values and gradients)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from cpu_vectors import VECTOR_BYTES, cpu_vector_bytes

from tinycore import Tensor, dtypes
from tinycore.dtype import DType, least_upper_dtype
from tinycore.tensor.nn import _matmul_panel, _multiply_with_tensors

RNG = np.random.default_rng(11)

# (left shape, right shape, packed): packed products have >= 256 rows and a column count the CPU panel divides, at
# least two panels of them (16 columns with 32-byte vectors, 64 with 64-byte ones)
SHAPES = [((5, 7), (7, 3), False), ((2, 5, 7), (7, 3), False), ((3, 1, 4, 6), (2, 6, 5), False),
          ((256, 64), (64, 128), True), ((2, 256, 64), (64, 128), True), ((3, 1, 128, 64), (2, 64, 256), True),
          ((300, 72), (2, 72, 128), True)]


def _operands(left_shape: tuple[int, ...], right_shape: tuple[int, ...], dtype: DType) -> tuple[Tensor, Tensor]:
    numpy_dtype = np.float32 if dtype == dtypes.float32 else np.float16 if dtype == dtypes.float16 else np.int32
    left = Tensor((RNG.uniform(-3, 3, left_shape)).astype(numpy_dtype))
    right = Tensor((RNG.uniform(-3, 3, right_shape)).astype(numpy_dtype))
    return left, right


@pytest.mark.parametrize("vector_bytes", VECTOR_BYTES)
@pytest.mark.parametrize("left_shape, right_shape, packed", SHAPES)
@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.int32])
def test_same_nodes_as_the_tensor_operations(left_shape: tuple[int, ...], right_shape: tuple[int, ...],
                                             packed: bool, dtype: DType, vector_bytes: int) -> None:
    left, right = _operands(left_shape, right_shape, dtype)
    with cpu_vector_bytes(vector_bytes) as lanes:
        panel = _matmul_panel(left, right)
        assert panel == ((2 if lanes == 8 else 4) * lanes if packed and dtype == dtypes.float32 else None)
        reference = _multiply_with_tensors(left, right, panel, None, least_upper_dtype(left.dtype, right.dtype))
        assert (left @ right).uop is reference.uop


@pytest.mark.parametrize("columns, wide, narrow", [(128, 64, 16), (192, 32, 16), (320, 32, 16), (96, None, 16),
                                                   (160, None, 16), (48, None, 16), (40, None, None)])
def test_panels_split_the_columns_evenly_where_half_panels_exist(columns: int, wide: int | None,
                                                                 narrow: int | None) -> None:
    # with 64-byte vectors the CPU packs 64-column panels, or 32-column ones where those split the columns into an
    # even count and 64 do not, else nothing (the workers take whole panels); with 32-byte vectors its 16-column
    # panels take any count of two or more, as before
    left, right = _operands((256, 64), (64, columns), dtypes.float32)
    for vector_bytes, expected in ((64, wide), (32, narrow)):
        with cpu_vector_bytes(vector_bytes):
            assert _matmul_panel(left, right) == expected, vector_bytes
            product = (left @ right).numpy()
        np.testing.assert_allclose(product, left.numpy().astype(np.float64) @ right.numpy(), rtol=1e-4, atol=1e-4)


def test_same_nodes_with_an_accumulate_dtype() -> None:
    left, right = _operands((6, 5), (5, 4), dtypes.float16)
    reference = _multiply_with_tensors(left, right, None, dtypes.float32, dtypes.float32)
    assert left.dot(right, dtype=dtypes.float32).uop is reference.uop
    plain = _multiply_with_tensors(left, right, None, None, dtypes.float16)
    assert left.dot(right).uop is plain.uop and plain.dtype == dtypes.float16


@pytest.mark.parametrize("left_shape, right_shape, packed", SHAPES)
def test_values_and_gradients_match_torch(left_shape: tuple[int, ...], right_shape: tuple[int, ...],
                                          packed: bool) -> None:
    left_data = RNG.standard_normal(left_shape).astype(np.float32)
    right_data = RNG.standard_normal(right_shape).astype(np.float32)
    left, right = Tensor(left_data, requires_grad=True), Tensor(right_data, requires_grad=True)
    torch_left = torch.tensor(left_data, requires_grad=True)
    torch_right = torch.tensor(right_data, requires_grad=True)
    product, torch_product = left @ right, torch_left @ torch_right
    weights = RNG.standard_normal(torch_product.shape).astype(np.float32)
    (product * Tensor(weights)).sum().backward()
    np.testing.assert_allclose(product.numpy(), torch_product.detach().numpy(), rtol=1e-4, atol=1e-4)
    (torch_product * torch.tensor(weights)).sum().backward()
    assert left.grad is not None and right.grad is not None
    assert torch_left.grad is not None and torch_right.grad is not None
    np.testing.assert_allclose(left.grad.numpy(), torch_left.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(right.grad.numpy(), torch_right.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_batch_sizes_that_do_not_broadcast_raise_as_before() -> None:
    left, right = _operands((3, 4, 5), (2, 5, 6), dtypes.float32)
    with pytest.raises(Exception) as fast:
        left @ right
    with pytest.raises(Exception) as reference:
        _multiply_with_tensors(left, right, None, None, dtypes.float32)
    assert type(fast.value) is type(reference.value) and "cannot be broadcast" in str(fast.value)


def _reads_transposed_copy_of(gradient: Tensor, source: Tensor) -> bool:
    """Whether the gradient's graph copies `source`'s last two axes exchanged into a contiguous buffer."""
    from tinycore.tensor.matmul import is_transposed_view
    from tinycore.uop.ops import Ops
    return any(node.op is Ops.CONTIGUOUS and is_transposed_view(node.src[0]) and node.src[0].src[0] is source.uop
               for node in gradient.uop.toposort)


# (tokens, inputs, outputs, batch axes of x): a transformer block's products at a reduced size, packed on the CPU
WEIGHT_GRADIENT_SHAPES = [(256, 64, 128, ()), (128, 64, 128, (2,)), (64, 48, 256, (2, 3))]


@pytest.mark.parametrize("vector_bytes", VECTOR_BYTES)
@pytest.mark.parametrize("tokens, inputs, outputs, batch", WEIGHT_GRADIENT_SHAPES)
def test_packed_weight_gradient_reads_a_transposed_copy_and_matches_torch(
        tokens: int, inputs: int, outputs: int, batch: tuple[int, ...], vector_bytes: int) -> None:
    # the weight gradient x.T @ dout of a packed product sums over the rows of x: it reads x.T from a contiguous
    # copy (tinycore.tensor.matmul.multiply_panels_gradient), the input gradient stays the graph's own
    x_data = RNG.standard_normal((*batch, tokens, inputs)).astype(np.float32)
    w_data = RNG.standard_normal((inputs, outputs)).astype(np.float32)
    dout = RNG.standard_normal((*batch, tokens, outputs)).astype(np.float32)
    with cpu_vector_bytes(vector_bytes):
        x, w = Tensor(x_data, requires_grad=True), Tensor(w_data, requires_grad=True)
        assert _matmul_panel(x, w) is not None
        ((x @ w) * Tensor(dout)).sum().backward()
        assert x.grad is not None and w.grad is not None
        assert _reads_transposed_copy_of(w.grad, x) and not _reads_transposed_copy_of(x.grad, x)
        weight_gradient, input_gradient = w.grad.numpy(), x.grad.numpy()
    torch_x, torch_w = torch.tensor(x_data, requires_grad=True), torch.tensor(w_data, requires_grad=True)
    ((torch_x @ torch_w) * torch.tensor(dout)).sum().backward()
    assert torch_x.grad is not None and torch_w.grad is not None
    np.testing.assert_allclose(weight_gradient, torch_w.grad.numpy(), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(input_gradient, torch_x.grad.numpy(), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("vector_bytes", VECTOR_BYTES)
def test_transposed_left_operand_is_copied_before_a_packed_product(vector_bytes: int) -> None:
    # x.T @ dout written out (a weight gradient by hand): the left operand is a transposed view, copied contiguous
    # first; values and both gradients against torch
    x_data = RNG.standard_normal((256, 320)).astype(np.float32)
    dout_data = RNG.standard_normal((256, 128)).astype(np.float32)
    weights = RNG.standard_normal((320, 128)).astype(np.float32)
    with cpu_vector_bytes(vector_bytes):
        x, dout = Tensor(x_data, requires_grad=True), Tensor(dout_data, requires_grad=True)
        product = x.T @ dout
        assert _matmul_panel(x.T, dout) is not None
        assert _reads_transposed_copy_of(product, x)
        (product * Tensor(weights)).sum().backward()
        assert x.grad is not None and dout.grad is not None
        found = product.numpy(), x.grad.numpy(), dout.grad.numpy()
    torch_x = torch.tensor(x_data, requires_grad=True)
    torch_dout = torch.tensor(dout_data, requires_grad=True)
    torch_product = torch_x.T @ torch_dout
    (torch_product * torch.tensor(weights)).sum().backward()
    assert torch_x.grad is not None and torch_dout.grad is not None
    for value, expected in zip(found, (torch_product.detach(), torch_x.grad, torch_dout.grad), strict=True):
        np.testing.assert_allclose(value, expected.numpy(), rtol=1e-4, atol=1e-3)
