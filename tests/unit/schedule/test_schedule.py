"""The scheduler: kernel boundaries (fusion), lowering to kernel ASTs, ordering and the schedule cache.

Kernel ASTs are checked by running them with a small reference interpreter written here (loops over the RANGEs,
loads and stores on numpy arrays) and comparing the results with numpy; no device or compiler is involved.
"""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from schedule_graphs import GraphBuilder

from tinycore.dtype import dtypes, to_numpy_dtype
from tinycore.engine.memory import device_facts
from tinycore.schedule import ScheduleItem, create_schedule, schedule_cached
from tinycore.schedule.cache import structure_key
from tinycore.uop.ops import GroupOp, Ops
from tinycore.uop.uop import UOp, exec_alu

DEVICE = UOp(Ops.DEVICE, arg="CPU")
_next_id = itertools.count(10**12)

# ---- a reference interpreter of kernel ASTs ----

_REDUCE_START = {Ops.ADD: 0.0, Ops.MUL: 1.0, Ops.MAX: -math.inf}


class Interpreter:
    """Evaluates one kernel AST element by element on flat numpy arrays (one per DEFINE_GLOBAL)."""

    def __init__(self, arrays: list[np.ndarray]):
        self.arrays = arrays

    def value(self, node: UOp, env: dict[UOp, int]):
        op = node.op
        if op is Ops.CONST:
            return node.arg
        if op is Ops.RANGE:
            return env[node]
        if op is Ops.LOAD:
            array, position, valid = self.address(node.src[0], env)
            if not valid:
                return 0
            assert 0 <= position < array.size, f"load at {position} out of bounds of {array.size}"
            return array[position].item()
        if op is Ops.REDUCE:
            ranges = node.src[1:]
            accumulator = _REDUCE_START[node.arg]
            for values in itertools.product(*(range(self.value(r.src[0], env)) for r in ranges)):
                inner = dict(env)
                inner.update(zip(ranges, values, strict=True))
                item = self.value(node.src[0], inner)
                accumulator = exec_alu(node.arg, dtypes.float64, [accumulator, item])
            return accumulator
        if op is Ops.CAST:
            return self.cast(self.value(node.src[0], env), node.dtype)
        if op in GroupOp.ALU:
            operands = [self.value(source, env) for source in node.src]
            result = exec_alu(op, node.dtype, operands)
            return result if not dtypes.is_float(node.dtype) else float(np.float32(result))
        raise AssertionError(f"interpreter cannot evaluate {op}")

    @staticmethod
    def cast(value, dtype):
        return float(value) if dtypes.is_float(dtype) else (bool(value) if dtype == dtypes.bool else int(value))

    def address(self, index: UOp, env: dict[UOp, int]):
        assert index.op is Ops.INDEX and index.src[0].op is Ops.DEFINE_GLOBAL
        valid = bool(self.value(index.src[2], env)) if len(index.src) > 2 else True
        return self.arrays[index.src[0].arg], self.value(index.src[1], env), valid

    def run(self, ast: UOp) -> None:
        assert ast.op is Ops.SINK
        for store in ast.src:
            assert store.op is Ops.STORE
            reduce_ranges = {r for node in store.toposort if node.op is Ops.REDUCE for r in node.src[1:]}
            loops = sorted((node for node in store.toposort if node.op is Ops.RANGE and node not in reduce_ranges),
                           key=lambda r: r.arg[0])
            for values in itertools.product(*(range(r.src[0].arg) for r in loops)):
                env = dict(zip(loops, values, strict=True))
                array, position, valid = self.address(store.src[0], env)
                assert valid and 0 <= position < array.size
                array[position] = self.value(store.src[1], env)


class FakeMemory:
    """BUFFER nodes backed by numpy arrays, and a runner of schedules over them."""

    def __init__(self):
        self.arrays: dict[UOp, np.ndarray] = {}

    def buffer(self, data: np.ndarray) -> UOp:
        data = np.asarray(data)
        dtype = dtypes.float32 if data.dtype == np.float32 else dtypes.int32
        node = UOp(Ops.BUFFER, dtype, (DEVICE,), (next(_next_id), data.size))
        self.arrays[node] = data.astype(to_numpy_dtype(dtype)).reshape(-1).copy()
        return node.reshape(data.shape)

    def run(self, items: list[ScheduleItem]) -> None:
        for item in items:
            arrays = []
            for node in item.buffers:
                if node not in self.arrays:
                    self.arrays[node] = np.zeros(node.arg[1], dtype=to_numpy_dtype(node.dtype))
                arrays.append(self.arrays[node])
            Interpreter(arrays).run(item.ast)

    def read(self, view: UOp) -> np.ndarray:
        """The value of a realized view (movement ops over a BUFFER), computed with numpy."""
        if view.op is Ops.BUFFER:
            return self.arrays[view]
        source = self.read(view.src[0])
        if view.op is Ops.RESHAPE:
            return source.reshape(view.arg)
        if view.op is Ops.PERMUTE:
            return source.transpose(view.arg)
        if view.op is Ops.SHRINK:
            return source[tuple(slice(start, end) for start, end in view.arg)]
        raise AssertionError(f"unexpected view op {view.op}")

    def realize(self, *outputs: UOp) -> list[np.ndarray]:
        schedule = create_schedule(list(outputs), device_facts)
        self.run(schedule.items)
        return [self.read(result) for result in schedule.outputs]


def kernels(*outputs: UOp) -> list[ScheduleItem]:
    return [item for item in create_schedule(list(outputs), device_facts).items if not item.is_copy]


def random(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed + len(shape)).standard_normal(shape).astype(np.float32)


def softmax_graph(node: UOp) -> UOp:
    shape = node.shape
    maximum = node.r(Ops.MAX, (len(shape) - 1,)).expand(shape)
    exponent = ((node - maximum) * (1 / math.log(2))).exp2()
    total = exponent.r(Ops.ADD, (len(shape) - 1,)).expand(shape)
    return exponent * total.reciprocal()


# ---- kernel counts for the canonical graphs ----

def test_elementwise_chain_is_one_kernel():
    memory = FakeMemory()
    first, second, third = (memory.buffer(random(4, 5, seed=k)) for k in range(3))
    assert len(kernels((first + second) * third)) == 1


def test_sum_of_product_is_one_kernel():
    memory = FakeMemory()
    first, second = memory.buffer(random(4, 5)), memory.buffer(random(4, 5, seed=1))
    assert len(kernels((first * second).r(Ops.ADD, (0, 1)))) == 1


def test_subtract_max_is_at_most_two_kernels():
    memory = FakeMemory()
    node = memory.buffer(random(4, 5))
    assert len(kernels(node - node.r(Ops.MAX, (1,)).expand((4, 5)))) <= 2


def test_reshape_permute_add_is_one_kernel_reading_the_input():
    memory = FakeMemory()
    node = memory.buffer(random(2, 3, 4))
    items = kernels(node.reshape((6, 4)).permute((1, 0)) + 1)
    assert len(items) == 1
    # the only input is the original buffer: no copy was made
    assert items[0].buffers[1:] == (node.base,)


def test_softmax_is_at_most_three_kernels():
    memory = FakeMemory()
    assert len(kernels(softmax_graph(memory.buffer(random(3, 7))))) <= 3


def test_reduce_with_same_shape_consumer_fuses():
    memory = FakeMemory()
    node = memory.buffer(random(4, 5))
    assert len(kernels(node.r(Ops.ADD, (1,)) * 2 + 1)) == 1


def test_shared_subgraph_is_computed_once():
    memory = FakeMemory()
    first, second = memory.buffer(random(3, 3)), memory.buffer(random(3, 3, seed=1))
    total = first + second
    items = kernels(total, total * 2)
    assert len(items) == 2
    # the second kernel reads the first one's output instead of recomputing first + second
    assert items[0].buffers[0] in items[1].buffers[1:]
    assert first.base not in items[1].buffers


def test_realized_view_needs_no_kernel():
    memory = FakeMemory()
    node = memory.buffer(random(2, 3))
    schedule = create_schedule([node.permute((1, 0))], device_facts)
    assert schedule.items == [] and schedule.outputs[0] is node.permute((1, 0))


def matmul_graph(left: UOp, right: UOp) -> UOp:
    """left (m, k) @ right (k, n) as a broadcast product reduced over k."""
    (rows, inner), columns = left.shape, right.shape[1]
    product = left.reshape((rows, inner, 1)).expand((rows, inner, columns)) * \
        right.reshape((1, inner, columns)).expand((rows, inner, columns))
    return product.r(Ops.ADD, (1,)).reshape((rows, columns))


def test_costly_broadcast_into_a_reduce_is_computed_once():
    memory = FakeMemory()
    values, weights = random(6, 4), random(4, 32, seed=1)
    node = memory.buffer(values)
    costly = (node * 0.5).exp2().reciprocal() + node.sqrt()  # 2 costly ops on each of 24 elements
    items = kernels(matmul_graph(costly, memory.buffer(weights)))
    assert len(items) == 2
    # the matmul reads the computed values instead of evaluating exp2 once per output column
    assert not any(node.op is Ops.EXP2 for node in items[1].ast.toposort)
    (result,) = memory.realize(matmul_graph(costly, memory.buffer(weights)))
    with np.errstate(invalid="ignore"):
        expected = (1 / np.exp2(values * 0.5) + np.sqrt(values)) @ weights
    np.testing.assert_allclose(result, expected, rtol=1e-5, equal_nan=True)


def test_costly_broadcast_along_the_innermost_reduced_axis_stays_inlined():
    # a per-block scale (rows, blocks, 1) broadcast over each block's values and summed with them: the kernel's
    # innermost loop runs over the broadcast axis, so the scale is computed once per block, not stored and loaded
    memory = FakeMemory()
    scales, values = random(4, 8, 1), random(4, 8, 16, seed=1)
    node = memory.buffer(scales)
    costly = ((node * 0.5).exp2().reciprocal() + node.sqrt()).expand((4, 8, 16))
    total = (costly * memory.buffer(values)).r(Ops.ADD, (1, 2))
    items = kernels(total)
    assert len(items) == 1
    assert any(node.op is Ops.EXP2 for node in items[0].ast.toposort)
    (result,) = memory.realize(total)
    with np.errstate(invalid="ignore"):
        expected = ((1 / np.exp2(scales * 0.5) + np.sqrt(scales)) * values).sum((1, 2), keepdims=True)
    np.testing.assert_allclose(result, expected, rtol=1e-5, equal_nan=True)


def test_nested_broadcasts_along_inner_reduced_axes_stay_inlined():
    # a block factor (rows, blocks, 1, 1) spread over sub-blocks, times sub-block scales (rows, blocks, 4, 1), spread
    # over each sub-block's values: both broadcasts are along axes the loops nest innermost
    memory = FakeMemory()
    factors, scales, values = random(3, 5, 1, 1), random(3, 5, 4, 1, seed=1), random(3, 5, 4, 8, seed=2)
    node = memory.buffer(factors)
    costly = (node * 0.5).exp2().reciprocal().expand((3, 5, 4, 1)) * memory.buffer(scales)
    total = (costly.expand((3, 5, 4, 8)) * memory.buffer(values)).r(Ops.ADD, (1, 2, 3))
    assert len(kernels(total)) == 1
    (result,) = memory.realize(total)
    expected = ((1 / np.exp2(factors * 0.5)) * scales * values).sum((1, 2, 3), keepdims=True)
    np.testing.assert_allclose(result, expected, rtol=1e-5)


def test_costly_broadcast_along_an_outer_reduced_axis_is_computed_once():
    # broadcast along the blocks axis with the values axis inside it: every step of the inner loop would repeat it
    memory = FakeMemory()
    scales, values = random(4, 1, 16), random(4, 8, 16, seed=1)
    node = memory.buffer(scales)
    costly = ((node * 0.5).exp2().reciprocal() + node.sqrt()).expand((4, 8, 16))
    total = (costly * memory.buffer(values)).r(Ops.ADD, (1, 2))
    items = kernels(total)
    assert len(items) == 2
    (result,) = memory.realize(total)
    with np.errstate(invalid="ignore"):
        expected = ((1 / np.exp2(scales * 0.5) + np.sqrt(scales)) * values).sum((1, 2), keepdims=True)
    np.testing.assert_allclose(result, expected, rtol=1e-5, equal_nan=True)


def test_cheap_broadcast_into_a_reduce_stays_inlined():
    memory = FakeMemory()
    values, weights = random(6, 4), random(4, 8, seed=1)
    items = kernels(matmul_graph(memory.buffer(values) * 2.0, memory.buffer(weights)))
    assert len(items) == 1
    (result,) = memory.realize(matmul_graph(memory.buffer(values) * 2.0, memory.buffer(weights)))
    np.testing.assert_allclose(result, (values * 2) @ weights, rtol=1e-5)


def test_activation_after_a_reduce_joins_the_reduce_kernel():
    memory = FakeMemory()
    inputs, first, second = random(5, 8), random(8, 16, seed=1), random(16, 4, seed=2)
    hidden = matmul_graph(memory.buffer(inputs), memory.buffer(first))
    activated = (hidden < 0.0).where(0.0, hidden)
    output = matmul_graph(activated, memory.buffer(second))
    items = kernels(output)
    # two kernels: the first matmul with its activation, then the second matmul reading the activated values
    assert len(items) == 2
    assert not any(node.op is Ops.CMPLT for node in items[1].ast.toposort)
    (result,) = memory.realize(output)
    np.testing.assert_allclose(result, np.maximum(inputs @ first, 0) @ second, rtol=1e-4, atol=1e-5)


def test_constant_broadcast_into_a_reduce_is_recomputed():
    memory = FakeMemory()
    weights = random(8, 16)
    constants = UOp.const_on(dtypes.float32, 2.0, "CPU", (4, 1)).expand((4, 8))
    costly = (constants * 3.0 + 1.0).exp2()  # reads no buffer: cheaper to recompute than to store and load
    assert len(kernels(matmul_graph(costly, memory.buffer(weights)))) == 1
    (result,) = memory.realize(matmul_graph(costly, memory.buffer(weights)))
    np.testing.assert_allclose(result, np.full((4, 8), 128.0, np.float32) @ weights, rtol=1e-5)


# ---- values: the ASTs computed with the reference interpreter against numpy ----

def test_elementwise_values():
    memory = FakeMemory()
    arrays = [random(4, 5, seed=k) for k in range(3)]
    first, second, third = (memory.buffer(array) for array in arrays)
    (result,) = memory.realize((first + second) * third)
    np.testing.assert_allclose(result, (arrays[0] + arrays[1]) * arrays[2], rtol=1e-6)


def test_reduce_values():
    memory = FakeMemory()
    first, second = random(4, 5), random(4, 5, seed=1)
    total, maximum, rows = memory.realize((memory.buffer(first) * memory.buffer(second)).r(Ops.ADD, (0, 1)),
                                          memory.buffer(first).r(Ops.MAX, (0,)),
                                          memory.buffer(first).r(Ops.MUL, (1,)))
    np.testing.assert_allclose(total, (first * second).sum(keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(maximum, first.max(axis=0, keepdims=True), rtol=1e-6)
    np.testing.assert_allclose(rows, first.prod(axis=1, keepdims=True), rtol=1e-5)


def test_subtract_max_values():
    memory = FakeMemory()
    array = random(4, 5)
    node = memory.buffer(array)
    (result,) = memory.realize(node - node.r(Ops.MAX, (1,)).expand((4, 5)))
    np.testing.assert_allclose(result, array - array.max(axis=1, keepdims=True), rtol=1e-6)


def test_softmax_values():
    memory = FakeMemory()
    array = random(3, 7)
    (result,) = memory.realize(softmax_graph(memory.buffer(array)))
    expected = np.exp(array - array.max(axis=1, keepdims=True))
    np.testing.assert_allclose(result, expected / expected.sum(axis=1, keepdims=True), rtol=1e-5)


MOVEMENT_COMPOSITIONS = [
    (lambda node: node.reshape((6, 4)).permute((1, 0)), lambda array: array.reshape(6, 4).T),
    (lambda node: node.permute((2, 0, 1)).reshape((4, 6)), lambda array: array.transpose(2, 0, 1).reshape(4, 6)),
    (lambda node: node.reshape((2, 12)).reshape((3, 8)), lambda array: array.reshape(3, 8)),
    (lambda node: node.reshape((4, 3, 2)).permute((1, 2, 0)).reshape((3, 8)),
     lambda array: array.reshape(4, 3, 2).transpose(1, 2, 0).reshape(3, 8)),
    (lambda node: node.pad(((1, 0), (0, 2), (3, 1))), lambda array: np.pad(array, ((1, 0), (0, 2), (3, 1)))),
    (lambda node: node.shrink(((1, 2), (0, 3), (1, 3))), lambda array: array[1:2, 0:3, 1:3]),
    (lambda node: node.flip((True, False, True)), lambda array: array[::-1, :, ::-1]),
    (lambda node: node.shrink(((0, 2), (1, 2), (0, 4))).expand((2, 5, 4)),
     lambda array: np.broadcast_to(array[:, 1:2, :], (2, 5, 4))),
    (lambda node: node.pad(((1, 1), (1, 0), (0, 0))).flip((True, True, False)).shrink(((0, 3), (1, 4), (1, 4))),
     lambda array: np.pad(array, ((1, 1), (1, 0), (0, 0)))[::-1, ::-1, :][0:3, 1:4, 1:4]),
    (lambda node: node.pad(((0, 0), (2, 2), (0, 0))).reshape((2, 7, 2, 2)).permute((3, 1, 0, 2)),
     lambda array: np.pad(array, ((0, 0), (2, 2), (0, 0))).reshape(2, 7, 2, 2).transpose(3, 1, 0, 2)),
    (lambda node: node.flip((False, True, False)).reshape((24,)).pad(((2, 3),)).shrink(((1, 27),)),
     lambda array: np.pad(array[:, ::-1, :].reshape(24), ((2, 3),))[1:27]),
]


@pytest.mark.parametrize("build,reference", MOVEMENT_COMPOSITIONS)
def test_movement_compositions(build, reference):
    memory = FakeMemory()
    array = random(2, 3, 4)
    node = memory.buffer(array)
    items = kernels(build(node) * 2 + 1)
    assert len(items) == 1
    (result,) = memory.realize(build(node) * 2 + 1)
    np.testing.assert_allclose(result, reference(array) * 2 + 1, rtol=1e-6)


def test_reduce_over_movement_and_padding():
    memory = FakeMemory()
    array = random(3, 4)
    node = memory.buffer(array)
    graph = node.pad(((1, 1), (0, 2))).permute((1, 0)).r(Ops.ADD, (1,))
    (result,) = memory.realize(graph)
    np.testing.assert_allclose(result, np.pad(array, ((1, 1), (0, 2))).T.sum(axis=1, keepdims=True), rtol=1e-5)


def test_reduce_of_reduce_and_reshaped_reduce():
    memory = FakeMemory()
    array = random(2, 3, 4)
    node = memory.buffer(array)
    offsets = memory.buffer(np.arange(6.0, dtype=np.float32))
    nested, reshaped = memory.realize(node.r(Ops.ADD, (2,)).r(Ops.MAX, (1,)),
                                      node.r(Ops.ADD, (2,)).reshape((6,)) + offsets)
    np.testing.assert_allclose(nested, array.sum(axis=2, keepdims=True).max(axis=1, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(reshaped, array.sum(axis=2).reshape(6) + np.arange(6), rtol=1e-5)


def test_padded_reduce_output_is_realized_and_correct():
    memory = FakeMemory()
    array = random(3, 4)
    node = memory.buffer(array)
    (result,) = memory.realize(node.r(Ops.ADD, (1,)).pad(((1, 0), (0, 1))) + 1)
    np.testing.assert_allclose(result, np.pad(array.sum(axis=1, keepdims=True), ((1, 0), (0, 1))) + 1, rtol=1e-5)


def test_constants_and_casts():
    memory = FakeMemory()
    array = random(2, 3)
    node = memory.buffer(array)
    constant = UOp.const_on(dtypes.float32, 3.5, "CPU", (2, 3))
    compared = (node < constant).cast(dtypes.float32)
    (result, filled) = memory.realize(compared + node, UOp.const_on(dtypes.float32, 2.0, "CPU", (2, 2)))
    np.testing.assert_allclose(result, (array < 3.5).astype(np.float32) + array, rtol=1e-6)
    np.testing.assert_allclose(filled, np.full((2, 2), 2.0))


def test_assign_in_place():
    memory = FakeMemory()
    array = random(2, 3)
    target = memory.buffer(array)
    schedule = create_schedule([target.assign(target * 2 + 1)], device_facts)
    assert len(schedule.items) == 1 and schedule.items[0].buffers == (target.base,)
    memory.run(schedule.items)
    np.testing.assert_allclose(memory.read(schedule.outputs[0]), array * 2 + 1, rtol=1e-6)


def test_assign_reading_another_view_of_the_target_uses_a_temporary():
    memory = FakeMemory()
    array = random(2, 3)
    target = memory.buffer(array)
    (result,) = memory.realize(target.assign(target.flip((True, True)) + target))
    np.testing.assert_allclose(result, array[::-1, ::-1] + array, rtol=1e-6)


def test_assign_into_a_shrunk_view():
    memory = FakeMemory()
    array = random(4, 4)
    target = memory.buffer(array)
    window = target.shrink(((1, 3), (0, 2)))
    (result,) = memory.realize(window.assign(window * 0 + 7))
    expected = array.copy()
    expected[1:3, 0:2] = 7
    np.testing.assert_allclose(memory.arrays[target.base].reshape(4, 4), expected)
    np.testing.assert_allclose(result, expected[1:3, 0:2])


def test_readers_run_before_an_assign_that_overwrites_their_input():
    memory = FakeMemory()
    array = random(3,)
    target = memory.buffer(array)
    doubled = target * 2
    schedule = create_schedule([doubled, target.assign(target + 10)], device_facts)
    memory.run(schedule.items)
    np.testing.assert_allclose(memory.read(schedule.outputs[0]), array * 2, rtol=1e-6)
    np.testing.assert_allclose(memory.read(schedule.outputs[1]), array + 10, rtol=1e-6)


def test_copy_between_devices():
    memory = FakeMemory()
    node = memory.buffer(random(2, 3))
    schedule = create_schedule([node.permute((1, 0)).copy_to_device("DISK")], device_facts)
    kinds = [item.is_copy for item in schedule.items]
    assert kinds == [False, True]  # a kernel makes the permuted view contiguous, then one copy
    destination, source = schedule.items[1].buffers
    assert destination.src[0].arg == "DISK" and source is schedule.items[0].buffers[0]


def test_size_zero_output_has_no_kernel():
    memory = FakeMemory()
    node = memory.buffer(np.zeros((0, 3), dtype=np.float32))
    assert kernels(node + 1) == []


# ---- the schedule cache ----

def test_structure_key_abstracts_buffer_identity():
    memory = FakeMemory()
    first, second, third = (memory.buffer(random(3)) for _ in range(3))
    assert structure_key([first + second])[0] == structure_key([second + third])[0]
    assert structure_key([first + first])[0] != structure_key([first + second])[0]
    assert structure_key([first + 1])[0] != structure_key([first + 2])[0]


def test_schedule_cache_reuses_asts_with_new_buffers():
    memory = FakeMemory()
    first = memory.buffer(np.array([1.0, 2.0], dtype=np.float32))
    one = UOp.const_on(dtypes.float32, 1.0, "CPU", (2,))
    schedule = schedule_cached([first + one], device_facts)
    second = memory.buffer(np.array([5.0, 7.0], dtype=np.float32))
    again = schedule_cached([second + one], device_facts)
    assert again.items[0].ast is schedule.items[0].ast
    assert again.items[0].buffers[1] is second.base
    assert again.items[0].buffers[0] is not schedule.items[0].buffers[0]
    memory.run(again.items)
    np.testing.assert_allclose(memory.read(again.outputs[0]), [6.0, 8.0])


def test_schedule_cache_hit_skips_scheduling(monkeypatch: pytest.MonkeyPatch) -> None:
    import tinycore.schedule.cache as cache_module
    memory = FakeMemory()
    one = UOp.const_on(dtypes.float32, 1.0, "CPU", (1,))
    schedule_cached([memory.buffer(np.ones(1, dtype=np.float32)) + one], device_facts)
    calls = []
    monkeypatch.setattr(cache_module, "create_schedule",
                        lambda outputs, facts: calls.append(outputs) or create_schedule(outputs, facts))
    hits = [memory.buffer(np.full(1, float(value), dtype=np.float32)) + one for value in range(20)]
    for value, graph in enumerate(hits):
        schedule = schedule_cached([graph], device_facts)
        memory.run(schedule.items)
        np.testing.assert_allclose(memory.read(schedule.outputs[0]), [value + 1.0])
    assert calls == []
    schedule_cached([memory.buffer(np.ones(1, dtype=np.float32)) * one], device_facts)
    assert len(calls) == 1


def test_assign_of_a_flipped_view_goes_through_a_temporary():
    memory = FakeMemory()
    array = random(2, 3)
    target = memory.buffer(array)
    schedule = create_schedule([target.assign(target.flip((True, True)))], device_facts)
    assert len(schedule.items) == 2
    memory.run(schedule.items)
    np.testing.assert_allclose(memory.read(schedule.outputs[0]), array[::-1, ::-1])


def test_chained_assigns_write_in_order():
    memory = FakeMemory()
    array = random(4, 4)
    target = memory.buffer(array)
    first = target.assign(target * 2)
    second = first.shrink(((0, 2), (0, 4))).assign(first.shrink(((0, 2), (0, 4))) + 1)
    schedule = create_schedule([second], device_facts)
    memory.run(schedule.items)
    expected = array * 2
    expected[0:2] += 1
    np.testing.assert_allclose(memory.arrays[target.base].reshape(4, 4), expected, rtol=1e-6)
    np.testing.assert_allclose(memory.read(schedule.outputs[0]), expected[0:2], rtol=1e-6)


def test_reduce_over_the_assign_target_is_computed_before_the_write():
    memory = FakeMemory()
    array = random(3, 4)
    target = memory.buffer(array)
    total = target.r(Ops.ADD, (0, 1)).expand((3, 4))
    (result,) = memory.realize(target.assign(target - total))
    np.testing.assert_allclose(result, array - array.sum(), rtol=1e-5)


# ---- a differential fuzzer: random graphs of elementwise, reduce and movement ops against numpy ----

@pytest.mark.parametrize("seed", range(40))
def test_random_graphs_match_numpy(seed):
    rng = np.random.default_rng(seed)
    memory = FakeMemory()
    builder = GraphBuilder(memory, rng)
    for _ in range(int(rng.integers(2, 7))):
        builder.step()
        if builder.value.size > 200:
            break
    (result,) = memory.realize(builder.node + 0)
    np.testing.assert_allclose(result, builder.value, rtol=1e-4, atol=1e-5)
