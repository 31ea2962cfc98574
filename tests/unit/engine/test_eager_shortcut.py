"""The eager shortcut (tinycore/engine/eager.py): one elementwise op over realized buffers and constants, realized
from its cached launch without the schedule. Every case runs the structure three times (the first through the
general path, the later ones through the shortcut) and compares each result with numpy."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tiny_cpu", reason="the CPU device plugin (pip install -e plugins/tiny-cpu) runs these tests")
from tinycore import Tensor, TinyJit, dtypes  # noqa: E402
from tinycore.counters import GlobalCounters  # noqa: E402
from tinycore.engine import eager, realize  # noqa: E402
from tinycore.helpers import Context  # noqa: E402


@pytest.fixture
def shortcut_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that grows by one each time realize takes the shortcut."""
    calls: list[int] = []
    original = realize.run_eager_plan

    def counting(plan: eager.EagerPlan, inputs: list) -> object:
        calls.append(1)
        return original(plan, inputs)

    monkeypatch.setattr(realize, "run_eager_plan", counting)
    return calls


def _three_times(build, expected: np.ndarray) -> None:
    for _ in range(3):
        result = build().realize()
        got = result.numpy()
        assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
        np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_the_issue_op_takes_the_shortcut(shortcut_calls: list[int]) -> None:
    _three_times(lambda: Tensor([1.0]) + 1, np.array([2.0], dtype=np.float32))
    assert shortcut_calls  # the first graph compiles, the second makes the launch plan, the third is shortcut


@pytest.mark.parametrize("name, build, expected", [
    ("int plus int", lambda: Tensor([1, 2, 3]) + 4, np.array([5, 6, 7], dtype=np.int32)),
    ("int plus float promotes", lambda: Tensor([1, 2, 3]) + 0.5, np.array([1.5, 2.5, 3.5], dtype=np.float32)),
    ("scalar on the left", lambda: 10 - Tensor([1.0, 2.0]), np.array([9.0, 8.0], dtype=np.float32)),
    ("compare gives bool", lambda: Tensor([1.0, 5.0]) < 2, np.array([True, False])),
    ("bool and", lambda: Tensor([True, False]) & Tensor([True, True]), np.array([True, False])),
    ("two buffers", lambda: Tensor([1.0, 2.0]) * Tensor([3.0, 4.0]), np.array([3.0, 8.0], dtype=np.float32)),
    ("float16 times int scalar", lambda: Tensor([1.5, 2.0], dtype=dtypes.float16) * 2,
     np.array([3.0, 4.0], dtype=np.float16)),
    ("int32 plus int64", lambda: Tensor([1, 2], dtype=dtypes.int32) + Tensor([3, 4], dtype=dtypes.int64),
     np.array([4, 6], dtype=np.int64)),
    ("unary", lambda: Tensor([4.0, 9.0]).sqrt(), np.array([2.0, 3.0], dtype=np.float32)),
    ("cast", lambda: Tensor([1.7, -2.2]).cast(dtypes.int32), np.array([1, -2], dtype=np.int32)),
    ("2-d shape", lambda: Tensor([[1.0, 2.0], [3.0, 4.0]]) * 3, np.array([[3.0, 6.0], [9.0, 12.0]], dtype=np.float32)),
    ("broadcast of shapes", lambda: Tensor([[1.0], [2.0]]) + Tensor([[10.0, 20.0]]),
     np.array([[11.0, 21.0], [12.0, 22.0]], dtype=np.float32)),
    ("where", lambda: Tensor([True, False]).where(Tensor([1.0, 2.0]), 7.0), np.array([1.0, 7.0], dtype=np.float32)),
])
def test_values_match_numpy(name: str, build, expected: np.ndarray) -> None:
    _three_times(build, expected)


def test_the_same_buffer_twice(shortcut_calls: list[int]) -> None:
    for values in ([1.0, -2.0], [3.0, 4.0], [0.5, 6.0]):
        data = Tensor(values).realize()
        np.testing.assert_allclose((data * data).realize().numpy(), np.square(np.array(values, dtype=np.float32)))
    assert shortcut_calls


def test_a_new_structure_takes_the_shortcut_from_its_second_graph(shortcut_calls: list[int]) -> None:
    # a structure no other test builds (int16, 7 elements, * 3 - 1 is two ops: only the first is realized alone)
    values = [[3, -7, 11, 0, 5, -2, 9], [1, 2, 3, 4, 5, 6, 7], [-8, 8, -8, 8, 0, 1, -1]]
    for count, row in enumerate(values):
        got = (Tensor(row, dtype=dtypes.int16) * 3).realize().numpy()
        np.testing.assert_array_equal(got, np.array(row, dtype=np.int16) * np.int16(3))
        assert len(shortcut_calls) == count, "the first graph compiles and makes the plan, every later one is shortcut"


def test_one_kernel_counted_per_op(shortcut_calls: list[int]) -> None:
    data = Tensor([1.0, 2.0]).realize()
    (data + 1).realize()
    (data + 1).realize()
    before = GlobalCounters.kernel_count
    (data + 1).realize()
    assert GlobalCounters.kernel_count == before + 1
    assert shortcut_calls


def test_each_result_has_a_buffer_of_its_own() -> None:
    data = Tensor([1.0, 2.0]).realize()
    first = (data + 1).realize()
    second = (data + 1).realize()
    first.assign(Tensor([100.0, 200.0])).realize()
    np.testing.assert_allclose(second.numpy(), [2.0, 3.0])
    np.testing.assert_allclose(first.numpy(), [100.0, 200.0])
    data.assign(Tensor([5.0, 6.0])).realize()
    np.testing.assert_allclose(second.numpy(), [2.0, 3.0])
    np.testing.assert_allclose((data + 1).realize().numpy(), [6.0, 7.0])


def test_an_unrealized_input_is_fused_into_one_kernel(shortcut_calls: list[int]) -> None:
    data = Tensor([1.0, 2.0]).realize()
    for count in range(3):
        before = GlobalCounters.kernel_count
        result = ((data + 1) * 2).realize()
        assert GlobalCounters.kernel_count == before + 1  # one fused kernel, not two
        np.testing.assert_allclose(result.numpy(), [4.0, 6.0])
        assert len(shortcut_calls) == count  # the chain's fused kernel is shortcut from its second graph on


@pytest.mark.parametrize("name, build, expected", [
    ("sub", lambda a, b: a - b, lambda a, b: a - b),
    ("scale and shift", lambda a, b: a * 2 + 1, lambda a, b: a * np.float32(2) + np.float32(1)),
    ("three ops", lambda a, b: (a + b) * (a - b), lambda a, b: (a + b) * (a - b)),
    ("shared subgraph", lambda a, b: (a * b) + (a * b) * 3, lambda a, b: (a * b) + (a * b) * np.float32(3)),
    ("compare and where", lambda a, b: (a < b).where(a, b * 2), lambda a, b: np.where(a < b, a, b * 2)),
    ("casts", lambda a, b: (a.cast(dtypes.int32) + 1).cast(dtypes.float32) * b,
     lambda a, b: (a.astype(np.int32) + 1).astype(np.float32) * b),
])
def test_chains_of_elementwise_ops_match_numpy(shortcut_calls: list[int], name: str, build, expected) -> None:
    rows = [([1.5, -2.0, 3.0], [0.5, 4.0, -1.0]), ([2.0, 2.0, 8.0], [3.0, -3.0, 9.5]),
            ([0.0, 1.0, -7.25], [1.0, 1.0, 1.0])]
    for first, second in rows * 2:
        a, b = np.array(first, dtype=np.float32), np.array(second, dtype=np.float32)
        got = build(Tensor(first).realize(), Tensor(second).realize()).realize().numpy()
        want = expected(a, b)
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-6)
    assert shortcut_calls, name


def test_a_chain_with_an_input_that_changes_shape_is_a_new_structure(shortcut_calls: list[int]) -> None:
    for size in (2, 3, 2, 3, 4):
        values = np.arange(size, dtype=np.float32)
        data = Tensor(values.tolist()).realize()
        np.testing.assert_allclose((data * 3 - 1).realize().numpy(), values * 3 - 1)


def test_gradient_of_a_leaf_made_by_an_eager_op() -> None:
    for _ in range(4):
        start = Tensor([1.0, 2.0, 3.0]).realize()
        weights = start * 2
        weights.requires_grad = True
        weights.realize()
        (weights * weights * Tensor([1.0, 10.0, 100.0])).sum().backward()
        np.testing.assert_allclose(weights.grad.numpy(), [4.0, 80.0, 1200.0])  # 2 * w * c


def test_gradient_through_the_same_op_left_lazy() -> None:
    for _ in range(3):
        weights = Tensor([1.0, 2.0, 3.0], requires_grad=True)
        (weights * 3).realize()  # the structure realized eagerly: its shortcut exists
        ((weights * 3) * Tensor([1.0, 10.0, 100.0])).sum().backward()
        np.testing.assert_allclose(weights.grad.numpy(), [3.0, 30.0, 300.0])


def test_tinyjit_still_captures_the_launch() -> None:
    jitted = TinyJit(lambda value: (value * 2).realize())
    for step in range(5):
        value = Tensor([float(step), 1.0]).realize()
        np.testing.assert_allclose(jitted(value).numpy(), [2.0 * step, 2.0])


def test_debug_takes_the_general_path(shortcut_calls: list[int], capsys: pytest.CaptureFixture[str]) -> None:
    data = Tensor([1.0]).realize()
    (data + 3).realize()
    with Context(DEBUG=1):
        np.testing.assert_allclose((data + 3).realize().numpy(), [4.0])
    assert not shortcut_calls
    assert "realize: 1 kernel" in capsys.readouterr().out


def test_a_cleared_schedule_cache_drops_the_shortcut(shortcut_calls: list[int]) -> None:
    from tinycore.schedule.cache import clear_schedule_cache
    data = Tensor([2.0]).realize()
    (data - 5).realize()
    clear_schedule_cache()
    np.testing.assert_allclose((data - 5).realize().numpy(), [-3.0])
    assert not shortcut_calls


def test_key_refuses_other_graphs() -> None:
    data = Tensor([1.0, 2.0]).realize()
    assert eager.eager_key((data + 1).uop) is not None
    assert eager.eager_key(((data + 1) * 2).uop) is not None  # a chain of elementwise ops: keyed whole
    chain = data
    for _ in range(eager._CHAIN_NODES + 1):
        chain = chain * 2
    assert eager.eager_key((chain + 1).uop) is None  # more ops below the root than the walk takes
    assert eager.eager_key(((data + 1).reshape(2, 1) * 2).uop) is None  # a movement op between two ops
    assert eager.eager_key(data.sum().uop) is None
    assert eager.eager_key((Tensor([[1.0], [2.0]]).realize() + Tensor([[1.0, 2.0]]).realize()).uop) is None


def test_a_buffer_and_a_constant_are_keyed_as_the_walk_keys_them(shortcut_calls: list[int]) -> None:
    from tinycore.uop.ops import Ops
    data = Tensor([1.0, 2.0]).realize()
    buffer = data.uop
    described = (dtypes.float32, 2, buffer.src[0], None)  # the buffer's dtype, size, device node and no reshape
    for build in (lambda: data + 1, lambda: 3 * data, lambda: data < 2):
        node = build().uop
        constant = node.src[1] if node.src[0] is buffer else node.src[0]
        by_hand = (node.op, node.dtype, node.arg) + ((described, constant) if node.src[0] is buffer
                                                     else (constant, described))
        parts: list[object] = [node.op, node.dtype, node.arg]
        inputs: list = []
        assert eager._describe_sources(node, parts, inputs, eager._CHAIN_NODES) >= 0
        assert eager.eager_key(node) == (by_hand, [buffer]) == (tuple(parts), inputs)
    assert eager.eager_key((data + 1).uop) != eager.eager_key((1 + data).uop)  # the operands' order is kept
    assert eager.eager_key((data + 1).uop)[0][0] is Ops.ADD
    for values in ([1.0, -2.0], [3.0, 4.0], [0.5, 6.0]):  # the constant on the left, through the shortcut too
        np.testing.assert_allclose((3 * Tensor(values)).realize().numpy(), 3 * np.array(values, dtype=np.float32))
        np.testing.assert_allclose((Tensor(values) - 3).realize().numpy(), np.array(values, dtype=np.float32) - 3)
    assert shortcut_calls


def test_a_new_buffer_node_is_the_node_its_parts_build() -> None:
    from tinycore.uop.buffer import new_buffer_uop
    from tinycore.uop.ops import Ops
    from tinycore.uop.uop import UOp
    node = new_buffer_uop("CPU", dtypes.float32, 3)
    assert UOp(Ops.BUFFER, dtypes.float32, node.src, node.arg) is node
    assert node.arg[1] == 3 and node.device == "CPU"


def test_new_buffer_nodes_refuse_bad_sizes_and_a_new_tensor_holds_its_values() -> None:
    from tinycore.uop.buffer import device_node, new_buffer_uop
    for size in (-1, 2.0, "3"):
        with pytest.raises(ValueError, match="non-negative int element count"):
            new_buffer_uop("CPU", dtypes.float32, size)  # type: ignore[arg-type]
    first, second = new_buffer_uop("CPU", dtypes.float32, 0), new_buffer_uop("CPU", dtypes.float32, 0)
    assert first is not second and first.src == (device_node("CPU"),) and first.shape == (0,)
    for values in ([1.5, -2.0, 3.25], [7], [True, False]):  # new tensors share the DEVICE node, not their buffers
        tensor = Tensor(values)
        assert tensor.uop.src == (device_node("CPU"),)
        np.testing.assert_array_equal(tensor.numpy(), np.array(values, dtype=tensor.numpy().dtype))


def test_a_shortcut_result_is_remembered_and_forgotten_with_its_node(shortcut_calls: list[int]) -> None:
    import gc
    data = Tensor([1.0, 2.0]).realize()
    for _ in range(2):
        (data * 5).realize()
    doubled = (data * 5).uop
    result = realize.realize_uops([doubled])[0]
    assert shortcut_calls
    # a later graph over the same node reads the result's buffer instead of computing it again
    later = realize._with_known_results(doubled + 1)
    assert result in later.toposort and doubled not in later.toposort
    np.testing.assert_allclose(Tensor(doubled + 1).numpy(), [6.0, 11.0])
    gc.collect()
    count = len(realize._remembered_references)
    del doubled, later
    gc.collect()
    assert len(realize._remembered_references) < count  # the dead node's entry left with it


def test_a_new_buffer_node_knows_its_device_and_shape_as_inference_finds_them() -> None:
    from tinycore.uop.buffer import new_buffer_uop
    from tinycore.uop.shape import ShapeMixin
    node = new_buffer_uop("CPU", dtypes.int32, 5)
    # the stored values against the inference run on the node itself
    assert ShapeMixin.device.function(node) == node.device == "CPU"
    assert ShapeMixin._shape.function(node) == node.shape == (5,)


def test_settings_turn_the_shortcut_off_and_on(shortcut_calls: list[int]) -> None:
    from tinycore.helpers import NUM_CPU_THREADS
    data = Tensor([1.0, 2.0]).realize()
    for _ in range(3):
        (data + 2).realize()
    assert shortcut_calls
    shortcut_calls.clear()
    for setting in ({"SCACHE": 0}, {"DEBUG": 1}, {"BEAM": 1}):
        with Context(**setting):
            assert eager.shortcut_threads is None
    with Context(SCACHE=0):
        np.testing.assert_allclose((data + 2).realize().numpy(), [3.0, 4.0])
    other = 1 if int(NUM_CPU_THREADS.value) != 1 else 2
    with Context(NUM_CPU_THREADS=other):
        assert eager.shortcut_threads == other
        np.testing.assert_allclose((data + 2).realize().numpy(), [3.0, 4.0])  # the plan of another setting
    assert not shortcut_calls
    for _ in range(2):  # the first takes the general path again (its plan is the one kept from then on)
        np.testing.assert_allclose((data + 2).realize().numpy(), [3.0, 4.0])
    assert shortcut_calls


def test_a_result_is_remembered_only_when_its_node_outlives_the_tensor(shortcut_calls: list[int]) -> None:
    import gc
    data = Tensor([1.0, 2.0]).realize()
    for _ in range(2):
        (data * 4).realize()
    gc.collect()
    realize.invalidate_known_results()
    assert not realize._remembered_references
    # only the Tensor holds its node: nothing would read the entry, so none is made
    alone = (data * 4).realize()
    assert shortcut_calls and not realize._remembered_references
    np.testing.assert_allclose(alone.numpy(), [4.0, 8.0])
    # the node held elsewhere too: remembered, and a later graph over it reads the result instead of computing it
    shortcut_calls.clear()
    lazy = data * 4
    held = lazy.uop
    lazy.realize()
    assert shortcut_calls and len(realize._remembered_references) == 1
    later = realize._with_known_results(held + 1)
    assert lazy.uop in later.toposort and held not in later.toposort
    np.testing.assert_allclose(Tensor(held + 1).numpy(), [5.0, 9.0])
    del held, later
    gc.collect()
    assert not realize._remembered_references


def test_a_tensor_that_keeps_its_graph_for_gradients_remembers_and_differentiates(shortcut_calls: list[int]) -> None:
    weights = Tensor([1.0, -2.0, 3.0], requires_grad=True).realize()
    for _ in range(2):
        (weights * 3).realize()
    shortcut_calls.clear()
    tripled = (weights * 3).realize()
    assert shortcut_calls  # the shortcut ran, and the lazy graph stays the tensor's graph for backward
    assert tripled._unrealized is not None and len(realize._remembered_references) >= 1
    np.testing.assert_allclose(tripled.numpy(), [3.0, -6.0, 9.0])
    tripled.backward(Tensor([1.0, 2.0, 3.0]))  # through the kept graph: the gradient of 3 w, times the seed
    assert weights.grad is not None
    np.testing.assert_allclose(weights.grad.numpy(), [3.0, 6.0, 9.0])
