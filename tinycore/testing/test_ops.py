"""Conformance, ops: Tensor ops forward against numpy in float32: elementwise ops, broadcasting, odd shapes
(size 0 and 1), non-contiguous views, movement ops, fused and unfused graphs, symbolic shapes, random numbers,
NaN and infinity."""
from __future__ import annotations

from collections.abc import Callable
from typing import Union

import numpy
import pytest

from tinycore.dtype import dtypes
from tinycore.tensor import Tensor
from tinycore.testing.capabilities import DeviceCapabilities
from tinycore.testing.support import assert_matches, not_applicable, not_built, require_dtype, sample

pytestmark = pytest.mark.conformance_category("ops")

Unary = tuple[str, Callable[[Tensor], Tensor], Callable[[numpy.ndarray], numpy.ndarray], tuple[float, float], float]

UNARY_OPS: list[Unary] = [
    ("neg", lambda x: -x, numpy.negative, (-3, 3), 0.0),
    ("abs", Tensor.abs, numpy.abs, (-3, 3), 0.0),
    ("exp", Tensor.exp, numpy.exp, (-3, 3), 1e-5),
    ("exp2", Tensor.exp2, numpy.exp2, (-3, 3), 1e-5),
    ("log", Tensor.log, numpy.log, (0.1, 5), 1e-5),
    ("log2", Tensor.log2, numpy.log2, (0.1, 5), 1e-5),
    ("sqrt", Tensor.sqrt, numpy.sqrt, (0, 5), 1e-6),
    ("rsqrt", Tensor.rsqrt, lambda x: 1 / numpy.sqrt(x), (0.1, 5), 1e-5),
    ("reciprocal", Tensor.reciprocal, numpy.reciprocal, (0.5, 5), 1e-6),
    ("sin", Tensor.sin, numpy.sin, (-3, 3), 1e-5),
    ("cos", Tensor.cos, numpy.cos, (-3, 3), 1e-5),
    ("tanh", Tensor.tanh, numpy.tanh, (-3, 3), 1e-5),
    ("sigmoid", Tensor.sigmoid, lambda x: 1 / (1 + numpy.exp(-x)), (-3, 3), 1e-5),
    ("relu", Tensor.relu, lambda x: numpy.maximum(x, 0), (-3, 3), 0.0),
    ("floor", Tensor.floor, numpy.floor, (-3, 3), 0.0),
    ("ceil", Tensor.ceil, numpy.ceil, (-3, 3), 0.0),
    ("trunc", Tensor.trunc, numpy.trunc, (-3, 3), 0.0),
    ("square", Tensor.square, numpy.square, (-3, 3), 1e-6),
    ("sign", Tensor.sign, numpy.sign, (-3, 3), 0.0),
]

Operand = Union[Tensor, numpy.ndarray]
"""What the operations below take and give: the tensor under test, or the numpy array they are checked against."""

BINARY_OPS: list[tuple[str, Callable[[Operand, Operand], Operand], float]] = [
    ("add", lambda x, y: x + y, 1e-6), ("sub", lambda x, y: x - y, 1e-6), ("mul", lambda x, y: x * y, 1e-6),
    ("div", lambda x, y: x / y, 1e-6), ("maximum", lambda x, y: x.maximum(y) if isinstance(x, Tensor) else
                                        numpy.maximum(x, numpy.asarray(y)), 0.0),
    ("minimum", lambda x, y: x.minimum(y) if isinstance(x, Tensor) else numpy.minimum(x, numpy.asarray(y)), 0.0),
    ("lt", lambda x, y: x < y, 0.0), ("eq", lambda x, y: x == y, 0.0), ("ne", lambda x, y: x != y, 0.0),
    ("ge", lambda x, y: x >= y, 0.0),
]


@pytest.mark.parametrize("name,operation,reference,domain,rtol", UNARY_OPS, ids=[item[0] for item in UNARY_OPS])
def test_unary(device: str, name: str, operation: Callable[[Tensor], Tensor],
               reference: Callable[[numpy.ndarray], numpy.ndarray], domain: tuple[float, float], rtol: float) -> None:
    """Each unary op on a 3x4 float32 tensor matches numpy."""
    data = sample((3, 4), low=domain[0], high=domain[1], seed=len(name))
    expected = reference(data.astype(numpy.float64)).astype(numpy.float32)
    assert_matches(operation(Tensor(data, device=device)), expected, f"{name} on {device} (float32, shape (3, 4))",
                   rtol=rtol, atol=max(rtol, 1e-7))


@pytest.mark.parametrize("name,operation,rtol", BINARY_OPS, ids=[item[0] for item in BINARY_OPS])
def test_binary(device: str, name: str, operation: Callable[[Operand, Operand], Operand], rtol: float) -> None:
    """Each binary op on two 3x4 float32 tensors matches numpy (comparisons give bool)."""
    left, right = sample((3, 4), seed=1), sample((3, 4), seed=2, low=0.5, high=4.0)
    right[0, 0] = left[0, 0]  # equal operands for the comparisons
    expected = operation(left, right)
    assert_matches(operation(Tensor(left, device=device), Tensor(right, device=device)), expected,
                   f"{name} on {device} (float32, shape (3, 4))", rtol=rtol, atol=rtol)


def test_where(device: str) -> None:
    """where(condition, x, y) picks elementwise."""
    condition, left, right = sample((3, 4), dtypes.bool, seed=3), sample((3, 4), seed=4), sample((3, 4), seed=5)
    result = Tensor(condition, device=device).where(Tensor(left, device=device), Tensor(right, device=device))
    assert_matches(result, numpy.where(condition, left, right), f"where on {device}")


def test_pow(device: str) -> None:
    """x ** y for positive bases matches numpy."""
    base, exponent = sample((3, 4), seed=6, low=0.5, high=3.0), sample((3, 4), seed=7, low=-2, high=2)
    assert_matches(Tensor(base, device=device) ** Tensor(exponent, device=device), numpy.power(base, exponent),
                   f"pow on {device}", rtol=1e-5, atol=1e-6)


BROADCASTS = [((3, 1), (1, 4)), ((2, 3, 4), (4,)), ((1,), (5, 1)), ((2, 1, 3), (1, 4, 1))]


@pytest.mark.parametrize("left_shape,right_shape", BROADCASTS, ids=[f"{a}x{b}" for a, b in BROADCASTS])
def test_broadcasting(device: str, left_shape: tuple[int, ...], right_shape: tuple[int, ...]) -> None:
    """Binary ops broadcast like numpy."""
    left, right = sample(left_shape, seed=8), sample(right_shape, seed=9)
    assert_matches(Tensor(left, device=device) * Tensor(right, device=device) + 1.5, left * right + numpy.float32(1.5),
                   f"x * y + 1.5 with shapes {left_shape} and {right_shape} on {device}")


def test_scalar_operands(device: str) -> None:
    """Python scalars on either side of an op."""
    data = sample((3, 4), seed=10)
    result = 2.0 - Tensor(data, device=device) * 3.0
    assert_matches(result, numpy.float32(2.0) - data * numpy.float32(3.0), f"2 - x * 3 on {device}")


ODD_SHAPES = [(), (1,), (0,), (7,), (1, 1, 1), (3, 0, 2), (5, 7, 3), (13, 1)]


@pytest.mark.parametrize("shape", ODD_SHAPES, ids=[str(shape) for shape in ODD_SHAPES])
def test_odd_shapes(device: str, shape: tuple[int, ...]) -> None:
    """Elementwise graphs on scalars, size 0, size 1 and odd sizes."""
    left, right = sample(shape, seed=11), sample(shape, seed=12)
    result = (Tensor(left, device=device) + Tensor(right, device=device)) * 2.0
    assert_matches(result, (left + right) * numpy.float32(2.0), f"(x + y) * 2 with shape {shape} on {device}")


VIEWS: list[tuple[str, Callable[[Operand], Operand]]] = [
    ("permute", lambda x: x.permute(1, 0, 2) if isinstance(x, Tensor) else x.transpose(1, 0, 2)),
    ("flip", lambda x: x.flip(2) if isinstance(x, Tensor) else x[:, :, ::-1]),
    ("shrink", lambda x: x[1:, 1:3, ::2]),
    ("expand", lambda x: x[:, :1, :].expand(2, 3, 4) if isinstance(x, Tensor) else
     numpy.broadcast_to(x[:, :1, :], (2, 3, 4))),
    ("pad", lambda x: x.pad(((0, 0), (1, 2), (0, 1))) if isinstance(x, Tensor) else
     numpy.pad(x, ((0, 0), (1, 2), (0, 1)))),
    ("reshape_of_permute", lambda x: x.permute(2, 0, 1).reshape(4, 6) if isinstance(x, Tensor) else
     x.transpose(2, 0, 1).reshape(4, 6)),
    ("transpose_of_reshape", lambda x: x.reshape(6, 4).T),
    ("pad_flip_shrink", lambda x: x.pad(((1, 1), (1, 0), (0, 0))).flip(0, 1)[0:3, 1:4, 1:4] if isinstance(x, Tensor)
     else numpy.pad(x, ((1, 1), (1, 0), (0, 0)))[::-1, ::-1, :][0:3, 1:4, 1:4]),
    ("pad_reshape_permute", lambda x: x.pad(((0, 0), (2, 2), (0, 0))).reshape(2, 7, 2, 2).permute(3, 1, 0, 2)
     if isinstance(x, Tensor) else numpy.pad(x, ((0, 0), (2, 2), (0, 0))).reshape(2, 7, 2, 2).transpose(3, 1, 0, 2)),
]


@pytest.mark.parametrize("name,view", VIEWS, ids=[item[0] for item in VIEWS])
def test_non_contiguous_views(device: str, name: str, view: Callable[[Operand], Operand]) -> None:
    """Non-contiguous views (permuted, flipped, strided, expanded, padded, and chains of them) of realized buffers
    read back on their own, and read by an elementwise kernel."""
    data = sample((2, 3, 4), seed=13)
    source = Tensor(data, device=device).realize()
    assert_matches(view(source), view(data), f"{name} view of a realized (2, 3, 4) buffer read back from {device}")
    assert_matches(view(source) * 2.0 + 1.0, view(data) * numpy.float32(2.0) + numpy.float32(1.0),
                   f"{name} view of a realized (2, 3, 4) buffer, times 2 plus 1, on {device}")


def test_views_of_views_written_back(device: str) -> None:
    """contiguous() of a view chain gives the view's values in C order."""
    data = sample((4, 6), seed=14)
    result = Tensor(data, device=device).T[1:5, ::2].flip(0).contiguous()
    assert_matches(result, data.T[1:5, ::2][::-1], f"contiguous() of x.T[1:5, ::2].flip(0) on {device}")


def test_fused_and_unfused_graphs_agree(device: str) -> None:
    """The same graph in one fused kernel and split by realize() between ops both match numpy."""
    left, right = sample((4, 5), seed=15), sample((4, 5), seed=16, low=0.5, high=2)
    expected = numpy.exp((left * right - left) / right).sum(axis=1)
    fused = ((Tensor(left, device=device) * Tensor(right, device=device) - Tensor(left, device=device))
             / Tensor(right, device=device)).exp().sum(1)
    assert_matches(fused, expected, f"fused exp((x*y - x)/y).sum(1) on {device}", rtol=1e-5)
    step = (Tensor(left, device=device) * Tensor(right, device=device)).realize()
    step = (step - Tensor(left, device=device)).realize()
    step = (step / Tensor(right, device=device)).realize().exp().realize()
    assert_matches(step.sum(1), expected, f"the same graph realized op by op on {device}", rtol=1e-5)


def test_matmul(device: str) -> None:
    """A small matmul (reduction over a broadcast product)."""
    left, right = sample((3, 5), seed=17), sample((5, 4), seed=18)
    assert_matches(Tensor(left, device=device) @ Tensor(right, device=device), left @ right,
                   f"(3, 5) @ (5, 4) on {device}", rtol=1e-5, atol=1e-5)


def test_cat_and_creation(device: str) -> None:
    """cat, arange, full and eye built on the device."""
    left, right = sample((2, 3), seed=19), sample((1, 3), seed=20)
    assert_matches(Tensor(left, device=device).cat(Tensor(right, device=device), dim=0),
                   numpy.concatenate([left, right], 0), f"cat on {device}")
    assert_matches(Tensor.arange(2, 11, 3, device=device), numpy.arange(2, 11, 3, dtype=numpy.int32),
                   f"arange(2, 11, 3) on {device}")
    assert_matches(Tensor.full((2, 3), 7.5, device=device), numpy.full((2, 3), 7.5, numpy.float32),
                   f"full((2, 3), 7.5) on {device}")
    assert_matches(Tensor.eye(3, device=device), numpy.eye(3, dtype=numpy.float32), f"eye(3) on {device}")


def test_symbolic_shapes(device: str, capabilities: DeviceCapabilities) -> None:
    """A kernel over a shape with a bound Variable runs for two values, and one kernel serves both (the value is a
    kernel parameter, not baked into the code)."""
    if not capabilities.symbolic:
        not_applicable("the device does not declare symbolic (integer kernel parameters)")
    from tinycore.engine.memory import device_facts
    from tinycore.schedule.cache import create_schedule
    from tinycore.uop.ops import Ops
    from tinycore.uop.symbolic import Variable
    data = sample((4, 10), seed=21)
    source = Tensor(data, device=device).realize()
    width = Variable("conformance_width", 1, 10)
    kernels = []
    for value in (3, 7):
        bound = width.bind(value)
        result = (source.shrink(((0, 4), (0, bound))) * 2.0).sum(1)
        schedule = create_schedule([result.uop], device_facts)
        kernels.append([item.ast for item in schedule.items if item.ast.op is not Ops.COPY])
        assert_matches(result, (data[:, :value] * numpy.float32(2.0)).sum(axis=1),
                       f"(x[:, :w] * 2).sum(1) with w bound to {value} on {device}", rtol=1e-5)
    if len(kernels[0]) != 1 or len(kernels[1]) != 1 or kernels[0][0] is not kernels[1][0]:
        raise AssertionError(f"(x[:, :w] * 2).sum(1) on {device} scheduled {len(kernels[0])} and {len(kernels[1])} "
                             "kernel(s) for w = 3 and w = 7, and not one shared kernel: the variable must be a kernel "
                             "parameter")


def test_random_same_seed_same_numbers(device: str) -> None:
    """rand and randn after manual_seed give the same numbers again after reseeding (another seed gives others);
    rand's are distinct and in [0, 1)."""
    Tensor.manual_seed(1234)
    first, first_normal = Tensor.rand(4, 8, device=device).numpy(), Tensor.randn(3, 5, device=device).numpy()
    Tensor.manual_seed(1234)
    again, again_normal = Tensor.rand(4, 8, device=device).numpy(), Tensor.randn(3, 5, device=device).numpy()
    assert_matches(again, first, f"rand(4, 8) on {device} twice with seed 1234", rtol=0, atol=0)
    assert_matches(again_normal, first_normal, f"randn(3, 5) on {device} twice with seed 1234", rtol=0, atol=0)
    Tensor.manual_seed(1235)
    other = Tensor.rand(4, 8, device=device).numpy()
    if numpy.array_equal(other, first):
        raise AssertionError(f"rand(4, 8) on {device} gave the same numbers with seeds 1234 and 1235")
    if not (numpy.all(first >= 0) and numpy.all(first < 1)):
        raise AssertionError(f"rand on {device} gave values outside [0, 1): min {first.min()}, max {first.max()}")
    if len(numpy.unique(first)) < first.size - 1:
        raise AssertionError(f"rand(4, 8) on {device} repeats values: {len(numpy.unique(first))} distinct of 32")


def test_random_matches_cpu(device: str) -> None:
    """The same seed gives the same numbers on this device as on CPU (rand and randn)."""
    if device.split(":")[0] == "CPU":
        not_applicable("the device under test is CPU, the reference itself")
    from tinycore.device.registry import Device
    try:
        Device["CPU"]
    except Exception as error:  # noqa: BLE001 - without CPU there is nothing to compare with
        not_built(f"CPU does not open here, so there is no reference to compare with: {error}")
    results = []
    for target in (device, "CPU"):
        Tensor.manual_seed(99)
        results.append((Tensor.rand(4, 8, device=target).numpy(), Tensor.randn(3, 5, device=target).numpy()))
    assert_matches(results[0][0], results[1][0], f"rand(4, 8) with seed 99 on {device} against CPU", rtol=0, atol=0)
    assert_matches(results[0][1], results[1][1], f"randn(3, 5) with seed 99 on {device} against CPU", rtol=1e-6,
                   atol=1e-6)


THREEFRY_ANSWERS: list[tuple[tuple[int, int, int, int], tuple[int, int]]] = [
    ((0, 0, 0, 0), (0x6B200159, 0x99BA4EFE)),
    ((0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xC4923A9C, 0x483DF7A0)),
]
"""Known answers of Threefry-2x32-20 (Salmon et al. 2011, the Random123 kat_vectors): (counter word 0, counter word 1,
key 0, key 1) -> (output word 0, output word 1)."""


@pytest.mark.parametrize("words,answer", THREEFRY_ANSWERS, ids=["zeros", "ones", "pi"])
def test_threefry_known_answers(device: str, capabilities: DeviceCapabilities, words: tuple[int, int, int, int],
                                answer: tuple[int, int]) -> None:
    """The uint32 Threefry rounds behind rand and randn (additions that wrap, rotations, xor) give the published
    answers on the device."""
    require_dtype(capabilities, dtypes.uint32)
    counter0, counter1, key0, key1 = words
    word0 = Tensor(numpy.array([counter0], numpy.uint32), device=device)
    word1 = Tensor(numpy.array([counter1], numpy.uint32), device=device)
    output0, output1 = Tensor._threefry(word0, word1, key0, key1)  # type: ignore[attr-defined]
    expected = numpy.array(answer, numpy.uint32).reshape(2, 1)
    assert_matches(numpy.stack([output0.numpy(), output1.numpy()]), expected,
                   f"Threefry-2x32-20 of counter ({counter0:#x}, {counter1:#x}) under key ({key0:#x}, {key1:#x}) "
                   f"on {device}")


def test_threefry_uint64_known_answers(device: str, capabilities: DeviceCapabilities) -> None:
    """Tensor.threefry on uint64 counters and keys (split into words and joined again) gives the published answers."""
    require_dtype(capabilities, dtypes.uint64, dtypes.uint32)
    counters = [words[0] | words[1] << 32 for words, _ in THREEFRY_ANSWERS]
    keys = [words[2] | words[3] << 32 for words, _ in THREEFRY_ANSWERS]
    expected = numpy.array([answer[0] | answer[1] << 32 for _, answer in THREEFRY_ANSWERS], numpy.uint64)
    result = Tensor(numpy.array(counters, numpy.uint64), device=device).threefry(
        Tensor(numpy.array(keys, numpy.uint64), device=device))
    assert_matches(result, expected, f"Tensor.threefry of three uint64 counters on {device}")


SPECIAL_VALUES = numpy.array([numpy.nan, 1.0, numpy.inf, -numpy.inf, 0.0, -2.5], numpy.float32)
SPECIAL_OPERANDS = numpy.array([2.0, 0.0, 0.0, numpy.inf, -numpy.inf, 0.0], numpy.float32)


def test_nan_and_infinity_follow_ieee(device: str) -> None:
    """NaN compares unequal and unordered and propagates through arithmetic; inf - inf and inf * 0 are NaN, 1 / 0 is
    inf; isnan and isinf find them (a renderer compiled with fast-math flags fails here). The operands are data, not
    literals, so no compiler may fold them away."""
    values, operands = Tensor(SPECIAL_VALUES, device=device), Tensor(SPECIAL_OPERANDS, device=device)
    data, other = SPECIAL_VALUES, SPECIAL_OPERANDS
    with numpy.errstate(invalid="ignore", divide="ignore"):
        checks = [("x <= 2", values <= 2.0, data <= 2.0), ("x >= 0", values >= 0.0, data >= 0.0),
                  ("x < y", values < operands, data < other), ("x == x", values == values, data == data),
                  ("x != x", values != values, data != data), ("x + y", values + operands, data + other),
                  ("x * y", values * operands, data * other), ("x / y", values / operands, data / other),
                  ("1 / x", values.reciprocal(), numpy.float32(1) / data),
                  ("isnan(x)", values.isnan(), numpy.isnan(data)), ("isinf(x)", values.isinf(), numpy.isinf(data))]
    for what, got, expected in checks:
        assert_matches(got, expected, f"{what} for x = {data.tolist()}, y = {other.tolist()} on {device}", rtol=0,
                       atol=0)
