"""The node-level convolution graph (tinycore.tensor.convolution) is the very node the Tensor operations make, and
the convolutions it gives match torch (values and gradients)."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812

from tinycore import Tensor, dtypes
from tinycore.dtype import DType, least_upper_dtype
from tinycore.engine.memory import device_facts
from tinycore.helpers import make_tuple
from tinycore.schedule import create_schedule
from tinycore.tensor.conv_layouts import folds_strides, pads_into_a_copy, space_to_depth
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp

RNG = np.random.default_rng(12)

# (input shape, weight shape, groups, stride, dilation, padding)
CASES: list[tuple[tuple[int, ...], tuple[int, ...], int, Any, Any, Any]] = [
    ((2, 3, 9, 9), (4, 3, 3, 3), 1, 1, 1, 0),
    ((2, 3, 9, 8), (4, 3, 3, 2), 1, 2, 1, 1),
    ((1, 4, 10, 11), (6, 2, 3, 3), 2, (2, 3), (2, 1), (1, 2)),
    ((2, 2, 7, 7), (2, 2, 2, 2), 1, 2, 1, 0),
    ((2, 2, 8, 8), (3, 2, 2, 3), 1, 3, 1, (0, 1, 2, 0)),
    ((2, 3, 12), (5, 3, 4), 1, 2, 2, 3),
    ((1, 2, 5, 6, 7), (3, 2, 2, 3, 2), 1, 1, (1, 2, 1), 1),
    ((1, 1, 3, 3), (1, 1, 3, 3), 1, 1, 1, 0),
]


def _reference(source: Tensor, weight: Tensor, groups: int, stride: Any, dilation: Any, padding: Any) -> Tensor:
    """The convolution through the Tensor-operation path (what conv2d did for every call before)."""
    spatial = weight.ndim - 2
    result_dtype: DType = least_upper_dtype(source.dtype, weight.dtype)
    flat_padding = source._flat_padding(padding, spatial)
    strides, dilations = make_tuple(stride, spatial), make_tuple(dilation, spatial)
    if folds_strides(source, weight, groups, strides, dilations, flat_padding, None):
        # CPU renderers fold a float convolution's strides into channels (tested below); its stride-1 convolution
        # is the node path's, which the unstrided cases compare
        pairs = [(flat_padding[2 * index], flat_padding[2 * index + 1]) for index in reversed(range(spatial))]
        return space_to_depth(source, weight, strides, pairs, groups)
    if pads_into_a_copy(source, flat_padding):  # CPU renderers read a padded copy, as conv2d does
        source, flat_padding = source.pad(flat_padding).contiguous(), [0] * len(flat_padding)
    return source._convolve_with_tensors(weight, groups, flat_padding, stride, dilation, None, result_dtype)


@pytest.mark.parametrize("input_shape, weight_shape, groups, stride, dilation, padding", CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_same_nodes_as_the_tensor_operations(input_shape: tuple[int, ...], weight_shape: tuple[int, ...],
                                             groups: int, stride: Any, dilation: Any, padding: Any,
                                             dtype: type) -> None:
    source = Tensor(RNG.integers(-3, 4, input_shape).astype(dtype))
    weight = Tensor(RNG.integers(-3, 4, weight_shape).astype(dtype))
    found = source.conv2d(weight, groups=groups, stride=stride, dilation=dilation, padding=padding)
    assert found.uop is _reference(source, weight, groups, stride, dilation, padding).uop


@pytest.mark.parametrize("input_shape, weight_shape, groups, stride, dilation, padding", CASES)
def test_values_and_gradients_match_torch(input_shape: tuple[int, ...], weight_shape: tuple[int, ...], groups: int,
                                          stride: Any, dilation: Any, padding: Any) -> None:
    source_data = RNG.standard_normal(input_shape).astype(np.float32)
    weight_data = RNG.standard_normal(weight_shape).astype(np.float32)
    bias_data = RNG.standard_normal(weight_shape[0]).astype(np.float32)
    source, weight = Tensor(source_data, requires_grad=True), Tensor(weight_data, requires_grad=True)
    bias = Tensor(bias_data, requires_grad=True)
    torch_source, torch_weight = torch.tensor(source_data, requires_grad=True), torch.tensor(weight_data,
                                                                                              requires_grad=True)
    torch_bias = torch.tensor(bias_data, requires_grad=True)
    spatial = len(weight_shape) - 2
    torch_padding = padding
    if isinstance(padding, tuple) and len(padding) == 2 * spatial:  # flat (left, right, top, bottom): pad first
        torch_source_padded = F.pad(torch_source, padding)
        torch_padding = 0
    else:
        torch_source_padded = torch_source
    convolution = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[spatial]
    expected = convolution(torch_source_padded, torch_weight, torch_bias, stride=stride, padding=torch_padding,
                           dilation=dilation, groups=groups)
    found = source.conv2d(weight, bias, groups=groups, stride=stride, dilation=dilation, padding=padding)
    upstream = RNG.standard_normal(tuple(expected.shape)).astype(np.float32)
    (found * Tensor(upstream)).sum().backward()
    (expected * torch.tensor(upstream)).sum().backward()
    np.testing.assert_allclose(found.numpy(), expected.detach().numpy(), rtol=1e-4, atol=1e-4)
    for mine, theirs in ((source, torch_source), (weight, torch_weight), (bias, torch_bias)):
        assert mine.grad is not None and theirs.grad is not None
        np.testing.assert_allclose(mine.grad.numpy(), theirs.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_the_tensor_path_still_serves_what_the_node_path_does_not() -> None:
    source = Tensor(RNG.standard_normal((1, 2, 6, 6)).astype(np.float32))
    weight = Tensor(RNG.standard_normal((3, 2, 3, 3)).astype(np.float16))
    mixed = source.conv2d(weight)
    expected = F.conv2d(torch.tensor(source.numpy()), torch.tensor(weight.numpy()).float())
    assert mixed.dtype == dtypes.float32
    np.testing.assert_allclose(mixed.numpy(), expected.numpy(), rtol=1e-3, atol=1e-3)
    cropped = source.conv2d(weight.cast(dtypes.float32), padding=(-1, 0, 0, 0))
    expected = F.conv2d(torch.tensor(source.numpy())[..., :, 1:], torch.tensor(weight.numpy()).float())
    np.testing.assert_allclose(cropped.numpy(), expected.numpy(), rtol=1e-3, atol=1e-3)
    with pytest.raises(Exception, match="does not fit"):
        source.conv2d(Tensor(np.ones((1, 2, 7, 7), np.float32)))


@pytest.mark.parametrize("padding", [1, (2, 0), (1, 2, 0, 1)])
def test_padded_convolution_reads_a_padded_copy_on_the_cpu(padding: Any) -> None:
    # a padded view's loads are gated lane by lane at the borders (the tiles lose their vector loads, the weight
    # gradient ran at 7 GFLOPS); the CPU's kernels read a padded copy, written once, and gate nothing
    source_data = RNG.standard_normal((2, 3, 9, 10)).astype(np.float32)
    weight_data = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    source, weight = Tensor(source_data, requires_grad=True), Tensor(weight_data, requires_grad=True)
    result = source.conv2d(weight, padding=padding)
    (result * result).sum().backward()
    assert source.grad is not None and weight.grad is not None
    graphs = [result.uop, source.grad.uop, weight.grad.uop]
    kernels = [item.ast for item in create_schedule(graphs, device_facts).items if item.ast.op is Ops.SINK]
    reduces = [ast for ast in kernels if any(node.op is Ops.REDUCE for node in ast.toposort)]
    assert reduces
    for ast in reduces:
        gated = [node for node in ast.toposort if node.op is Ops.INDEX and len(node.src) > 2 and
                 any(other.op is Ops.DEFINE_GLOBAL for other in node.src[:1])]
        loads_from_source = [node for node in gated if node.src[0].dtype.size == source_data.size]
        assert not loads_from_source, "a convolution kernel reads the padded view of its input"
    flat = Tensor._flat_padding(padding, 2)
    torch_padding = tuple(flat)
    torch_source = torch.tensor(source_data, requires_grad=True)
    torch_weight = torch.tensor(weight_data, requires_grad=True)
    expected = F.conv2d(F.pad(torch_source, torch_padding), torch_weight)
    (expected * expected).sum().backward()
    np.testing.assert_allclose(result.numpy(), expected.detach().numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(source.grad.numpy(), torch_source.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(weight.grad.numpy(), torch_weight.grad.numpy(), rtol=1e-4, atol=2e-4)


def _matches_torch_with_one_input_gradient_convolution(input_shape: tuple[int, ...], weight_shape: tuple[int, ...],
                                                       padding: Any, stride: Any = 1, groups: int = 1,
                                                       dilation: Any = 1, bias: bool = False) -> tuple[UOp, UOp]:
    """Convolve (flat padding or per axis, as conv2d takes it), backpropagate a random upstream gradient, check that
    the input gradient schedules one reduce kernel (a convolution of the output gradient, not the sliding-window
    view's transpose), and compare the result and every gradient with torch. Returns the graphs of the result and of
    the weight's gradient as they were before anything was realized."""
    source_data = RNG.standard_normal(input_shape).astype(np.float32)
    weight_data = RNG.standard_normal(weight_shape).astype(np.float32)
    bias_data = RNG.standard_normal(weight_shape[0]).astype(np.float32)
    spatial = len(weight_shape) - 2
    source, weight = Tensor(source_data, requires_grad=True), Tensor(weight_data, requires_grad=True)
    bias_tensor = Tensor(bias_data, requires_grad=True) if bias else None
    result = source.conv2d(weight, bias_tensor, groups=groups, stride=stride, dilation=dilation, padding=padding)
    upstream = RNG.standard_normal(result.shape).astype(np.float32)
    (result * Tensor(upstream)).sum().backward()
    assert source.grad is not None and weight.grad is not None
    graphs = (result.uop, weight.grad.uop)
    kernels = [item.ast for item in create_schedule([source.grad.uop], device_facts).items if item.ast.op is Ops.SINK]
    assert sum(any(node.op is Ops.REDUCE for node in ast.toposort) for ast in kernels) == 1, len(kernels)
    torch_source = torch.tensor(source_data, requires_grad=True)
    torch_weight = torch.tensor(weight_data, requires_grad=True)
    torch_bias = torch.tensor(bias_data, requires_grad=True) if bias else None
    convolution = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[spatial]
    expected = convolution(F.pad(torch_source, tuple(Tensor._flat_padding(padding, spatial))), torch_weight,
                           torch_bias, stride=stride, dilation=dilation, groups=groups)
    (expected * torch.from_numpy(upstream)).sum().backward()
    np.testing.assert_allclose(result.numpy(), expected.detach().numpy(), rtol=1e-4, atol=1e-4)
    pairs = [(source, torch_source), (weight, torch_weight)] + ([(bias_tensor, torch_bias)] if bias else [])
    for mine, theirs in pairs:
        assert mine is not None and theirs is not None and mine.grad is not None and theirs.grad is not None
        np.testing.assert_allclose(mine.grad.numpy(), theirs.grad.numpy(), rtol=1e-4, atol=2e-4)
    return graphs


@pytest.mark.parametrize("input_shape, weight_shape, padding", [((2, 3, 9, 10), (4, 3, 3, 3), 1),
                                                                ((2, 3, 9, 10), (4, 3, 3, 3), (1, 2, 0, 1)),
                                                                ((2, 3, 12), (5, 3, 4), (3, 1)),
                                                                ((1, 2, 5, 6, 7), (3, 2, 2, 3, 2), 1),
                                                                ((2, 3, 9, 10), (4, 3, 3, 3), 0)])
def test_convolution_input_gradient_is_one_convolution(input_shape: tuple[int, ...], weight_shape: tuple[int, ...],
                                                       padding: Any) -> None:
    # the input gradient is the output gradient (padded) convolved with the flipped, channel-swapped weight: one
    # reduce kernel, not the sliding-window view's transpose (a product per channel, kernel position and output
    # position, folded back by two more reduces); unpadded convolutions included
    _matches_torch_with_one_input_gradient_convolution(input_shape, weight_shape, padding)


@pytest.mark.parametrize("input_shape, weight_shape, stride, padding, groups", [
    ((2, 3, 9, 10), (4, 3, 3, 3), 2, 1, 1),
    ((2, 4, 16, 16), (6, 2, 3, 3), 2, 1, 2),
    ((2, 3, 9, 8), (4, 3, 1, 1), 2, 0, 1),
    ((2, 3, 11, 9), (4, 3, 5, 2), (3, 2), (2, 1), 1),
    ((2, 3, 10, 10), (4, 3, 2, 2), 3, (0, 1, 2, 0), 1),
    ((2, 3, 17), (5, 3, 4), 3, 2, 1),
    ((1, 2, 7, 6, 7), (3, 2, 3, 2, 3), (2, 1, 2), 1, 1),
])
def test_strided_convolution_folds_its_strides_into_channels_on_the_cpu(input_shape: tuple[int, ...],
                                                                       weight_shape: tuple[int, ...], stride: Any,
                                                                       padding: Any, groups: int) -> None:
    # n = stride * m + phase: the phases become channels and a window step of `stride` a step of one, so the
    # convolution and both gradients read contiguous rows; the stride-1 convolution's input gradient is one
    # convolution of the output gradient (then unfolded by a copy)
    spatial = len(weight_shape) - 2
    probe_source, probe_weight = Tensor.empty(*input_shape), Tensor.empty(*weight_shape)
    assert folds_strides(probe_source, probe_weight, groups, make_tuple(stride, spatial), (1,) * spatial,
                         probe_source._flat_padding(padding, spatial), None)
    _matches_torch_with_one_input_gradient_convolution(input_shape, weight_shape, padding, stride=stride,
                                                       groups=groups)


@pytest.mark.parametrize("input_shape, weight_shape, padding, groups, dilation", [
    ((2, 4, 9, 10), (6, 2, 3, 3), 1, 2, 1),
    ((2, 6, 9, 10), (6, 1, 3, 3), (1, 2, 0, 1), 6, 1),
    ((2, 6, 12), (9, 2, 4), (3, 1), 3, 1),
    ((1, 4, 5, 6, 7), (4, 1, 2, 3, 2), 1, 4, 1),
    ((2, 4, 8, 8), (8, 2, 3, 3), 0, 2, 1),
    ((2, 3, 11, 12), (4, 3, 3, 3), 2, 1, 2),
    ((2, 4, 11, 12), (4, 2, 3, 2), (3, 1, 0, 3), 2, (2, 3)),
    ((2, 3, 15), (5, 3, 3), 3, 1, 3),
])
def test_grouped_and_dilated_convolution_input_gradient_is_one_convolution(input_shape: tuple[int, ...],
                                                                          weight_shape: tuple[int, ...],
                                                                          padding: Any, groups: int,
                                                                          dilation: Any) -> None:
    # within each group the weight's channel axes swap, and a dilated window stays dilated: the input gradient is
    # one grouped (dilated) convolution of the output gradient, depthwise included
    _matches_torch_with_one_input_gradient_convolution(input_shape, weight_shape, padding, groups=groups,
                                                       dilation=dilation)


@pytest.mark.parametrize("input_shape, weight_shape, padding", [
    ((3, 16, 7, 7), (32, 16, 3, 3), 1),
    ((2, 16, 14, 14), (32, 16, 3, 3), 1),
    ((2, 8, 4, 6), (16, 8, 3, 3), 1),
    ((2, 16, 9, 5), (24, 16, 2, 3), (1, 2, 0, 1)),
    ((2, 12, 6, 7), (16, 12, 3, 3), 0),
    ((2, 16, 7), (16, 16, 5), 2),
])
def test_narrow_images_are_convolved_channels_last(input_shape: tuple[int, ...], weight_shape: tuple[int, ...],
                                                   padding: Any) -> None:
    # image rows narrower than a vector: the convolution, its weight gradient and its input gradient are summed with
    # the output channels innermost (matrix-product tiles) and viewed back
    result, weight_gradient = _matches_torch_with_one_input_gradient_convolution(input_shape, weight_shape, padding,
                                                                                 bias=True)
    batch, out_channels, *outs = result.shape
    assert any(node.op is Ops.CONTIGUOUS and node.shape == (batch, *outs, out_channels)
               for node in result.toposort), "the convolution is not summed channels last"
    assert any(node.op is Ops.CONTIGUOUS and node.shape == (*weight_shape[1:], out_channels)
               for node in weight_gradient.toposort), "the weight gradient is not summed channels last"


@pytest.mark.parametrize("batch, positions, weight, expected", [
    (32, 62 * 62, 4608, 1), (32, 8 * 8, 4608, 16), (128, 7 * 7, 4608, 32), (128, 14 * 14, 4608, 8),
    (6, 400, 9, 3), (5, 100, 9, 5), (1, 10, 9, 1),
    # a part per image would write 1024 x 36864 partial sums, past 2^22: 64 parts of 16 images (2.4M)
    (1024, 64 * 64, 64 * 64 * 9, 16),
])
def test_images_per_part_is_the_smallest_divisor_holding_enough_positions(batch: int, positions: int, weight: int,
                                                                          expected: int) -> None:
    from tinycore.tensor.convolution import PART_MAX_ELEMENTS, PART_MIN_POSITIONS, images_per_part
    assert (PART_MIN_POSITIONS, PART_MAX_ELEMENTS) == (1024, 1 << 22)  # the expected counts assume these
    assert images_per_part(batch, positions, weight) == expected


@pytest.mark.parametrize("input_shape, weight_shape, padding, parts", [
    ((2, 3, 34, 34), (16, 3, 3, 3), 1, 2),
    ((3, 4, 35, 35), (16, 4, 3, 3), 0, 3),
    ((2, 3, 33, 36), (16, 3, 2, 3), (1, 2, 0, 1), 2),
    ((4, 3, 600), (16, 3, 5), 2, 2),
    ((2, 2, 12, 12, 12), (16, 2, 3, 3, 3), 1, 2),
])
def test_wide_image_weight_gradient_is_summed_channels_last_in_parts(input_shape: tuple[int, ...],
                                                                     weight_shape: tuple[int, ...], padding: Any,
                                                                     parts: int) -> None:
    # rows at least a vector wide: the convolution keeps its layout, but its weight gradient is summed with the
    # output channels innermost, one partial sum per part of the batch (each part at least 1024 output positions),
    # the parts then added up
    _, weight_gradient = _matches_torch_with_one_input_gradient_convolution(input_shape, weight_shape, padding)
    out_channels, *per_output = weight_shape
    assert any(node.op is Ops.CONTIGUOUS and node.shape == (parts, *per_output, out_channels)
               for node in weight_gradient.toposort), "the weight gradient is not summed in parts channels last"


@pytest.mark.parametrize("input_shape, weight_shape, groups, dilation", [
    ((2, 3, 34, 34), (4, 3, 3, 3), 1, 1),
    ((2, 4, 34, 34), (16, 2, 3, 3), 2, 1),
    ((2, 3, 34, 34), (16, 3, 3, 3), 1, 2),
])
def test_weight_gradient_keeps_the_weight_layout_where_channels_last_does_not_apply(
        input_shape: tuple[int, ...], weight_shape: tuple[int, ...], groups: int, dilation: int) -> None:
    # fewer output channels than a vector (no vector columns to tile), groups and dilation: the reduce over the batch
    # and output positions in the weight's own layout, still matching torch
    _, weight_gradient = _matches_torch_with_one_input_gradient_convolution(input_shape, weight_shape, 1,
                                                                            groups=groups, dilation=dilation)
    assert not any(node.op is Ops.CONTIGUOUS and node.shape[-1] == weight_shape[0] and len(node.shape) >= 3 and
                   node.shape[-2] == weight_shape[-1] for node in weight_gradient.toposort)


@pytest.mark.parametrize("input_shape, weight_shape, stride, padding, output_padding, groups", [
    ((2, 8, 7, 7), (8, 4, 4, 4), 2, 1, 0, 1),
    ((2, 6, 5, 6), (6, 3, 3, 3), 2, 0, 1, 2),
    ((1, 4, 9), (4, 5, 5), 3, 2, 2, 1),
    ((2, 4, 6, 6), (4, 4, 3, 3), 1, 1, 0, 1),
    ((2, 3, 5, 4), (3, 2, 2, 1), 3, 0, 2, 1),  # kernels smaller than the stride: phases past the last tap are zeros
    ((1, 2, 4, 3, 5), (2, 3, 3, 2, 4), 2, 1, 1, 1),
    ((2, 6, 7), (6, 2, 5), 4, 3, 1, 3),
])
@pytest.mark.parametrize("by_phases", [False, True])
def test_transposed_convolution_reads_a_copy_of_its_spread_input_on_the_cpu(input_shape: tuple[int, ...],
                                                                           weight_shape: tuple[int, ...],
                                                                           stride: int, padding: int,
                                                                           output_padding: int, groups: int,
                                                                           by_phases: bool,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # the input spread by the stride (zeros between its rows and columns) and padded is copied once: read as a view,
    # every load of the convolution was gated by the masks and no tile applied (stride 2: 83 ms at 8 GFLOPS); large
    # ones are computed per stride phase instead (here forced either way), whose stride-1 convolutions copy likewise
    import tinycore.tensor.conv_layouts as layouts
    monkeypatch.setattr(layouts, "PHASES_MIN_WORK", 0 if by_phases else 1 << 62)
    source_data = RNG.standard_normal(input_shape).astype(np.float32)
    weight_data = RNG.standard_normal(weight_shape).astype(np.float32)
    source, weight = Tensor(source_data, requires_grad=True), Tensor(weight_data, requires_grad=True)
    result = source.conv_transpose2d(weight, stride=stride, padding=padding, output_padding=output_padding,
                                     groups=groups)
    upstream = RNG.standard_normal(result.shape).astype(np.float32)
    (result * Tensor(upstream)).sum().backward()
    assert source.grad is not None and weight.grad is not None
    kernels = [item.ast for item in create_schedule([result.uop], device_facts).items if item.ast.op is Ops.SINK]
    for ast in kernels:
        if any(node.op is Ops.REDUCE for node in ast.toposort):
            assert not any(node.op is Ops.INDEX and len(node.src) > 2 and
                           not (node.src[2].op is Ops.CONST and node.src[2].arg is True) for node in ast.toposort), \
                "the transposed convolution reads its spread input through a gated view"
    spatial = len(weight_shape) - 2
    convolution = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[spatial]
    torch_source = torch.tensor(source_data, requires_grad=True)
    torch_weight = torch.tensor(weight_data, requires_grad=True)
    expected = convolution(torch_source, torch_weight, stride=stride, padding=padding, output_padding=output_padding,
                           groups=groups)
    (expected * torch.from_numpy(upstream)).sum().backward()
    np.testing.assert_allclose(result.numpy(), expected.detach().numpy(), rtol=1e-4, atol=1e-4)
    for mine, theirs in ((source, torch_source), (weight, torch_weight)):
        assert mine.grad is not None and theirs.grad is not None
        np.testing.assert_allclose(mine.grad.numpy(), theirs.grad.numpy(), rtol=1e-4, atol=2e-4)


def test_strided_transposed_convolution_is_one_stride_1_convolution_per_phase_on_the_cpu(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # stride 2 in two axes: four stride-1 transposed convolutions of the 2x2 taps of each phase, each a convolution
    # kernel of its own, and no convolution over the input spread with zeros (whose first axis would be 2x - 1 long);
    # from PHASES_MIN_WORK multiply-adds on (this one has 2 * 5 * 49 * 3 * 16)
    import tinycore.tensor.conv_layouts as layouts
    assert not layouts.transposes_by_phases(Tensor.empty(2, 5, 7, 7), Tensor.empty(5, 3, 4, 4), 1, (2, 2), (1, 1))
    monkeypatch.setattr(layouts, "PHASES_MIN_WORK", 2 * 5 * 49 * 3 * 16)
    source, weight = Tensor(RNG.standard_normal((2, 5, 7, 7)).astype(np.float32)), \
        Tensor(RNG.standard_normal((5, 3, 4, 4)).astype(np.float32))
    result = source.conv_transpose2d(weight, stride=2, padding=1)
    kernels = [item.ast for item in create_schedule([result.uop], device_facts).items if item.ast.op is Ops.SINK]
    reduces = [ast for ast in kernels if any(node.op is Ops.REDUCE for node in ast.toposort)]
    assert len(reduces) == 4
    for ast in reduces:
        ranges = {node.src[0].arg for node in ast.toposort if node.op is Ops.RANGE and node.src[0].op is Ops.CONST}
        assert 2 in ranges and 4 not in ranges, "a convolution takes the whole 4x4 kernel"
    expected = F.conv_transpose2d(torch.from_numpy(source.numpy()), torch.from_numpy(weight.numpy()), stride=2,
                                  padding=1)
    np.testing.assert_allclose(result.numpy(), expected.numpy(), rtol=1e-4, atol=1e-4)
