"""Realize end to end on the CPU device: schedule, compile, run, read back; results compared with numpy.

These tests are about the engine (kernel counts, caches, buffers, assign); op values, views, reductions, symbolic
shapes and copies between devices are checked on each device by the conformance suite, tinycore/testing/."""
from __future__ import annotations

import gc
import math
import weakref

import numpy as np
import pytest
from schedule_graphs import GraphBuilder

from tinycore.counters import GlobalCounters
from tinycore.dtype import dtypes, from_numpy_dtype
from tinycore.engine.memory import buffer_of, device_facts, new_buffer_uop, uop_from_bytes
from tinycore.engine.realize import get_runner, realize_uops, to_host
from tinycore.helpers import Context
from tinycore.schedule import create_schedule
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp

pytest.importorskip("tiny_cpu", reason="the CPU device plugin (pip install -e plugins/tiny-cpu) runs these tests")


def tensor(array, device: str = "CPU") -> UOp:
    """A realized BUFFER node holding `array`, viewed with its shape."""
    array = np.ascontiguousarray(array)
    return uop_from_bytes(array.tobytes(), from_numpy_dtype(array.dtype), device).reshape(array.shape)


def host(node: UOp, numpy_dtype=np.float32) -> np.ndarray:
    """The value of `node` read back through to_host."""
    return np.frombuffer(to_host(node), dtype=numpy_dtype).reshape(node.shape)


def random(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed * 7 + len(shape)).standard_normal(shape).astype(np.float32)


def count_kernels(*outputs: UOp) -> int:
    GlobalCounters.reset()
    realize_uops(list(outputs))
    return GlobalCounters.kernel_count


# ---- elementwise ----

def test_fused_elementwise_matches_numpy():
    first, second, third = random(4, 5), random(4, 5, seed=1), random(4, 5, seed=2)
    node = (tensor(first) + tensor(second)) * tensor(third)
    assert count_kernels(node) == 1
    np.testing.assert_allclose(host(node), (first + second) * third, rtol=1e-6)


# ---- reduce ----

def test_sum_of_product_is_one_kernel():
    first, second = random(8, 9), random(8, 9, seed=1)
    node = (tensor(first) * tensor(second)).r(Ops.ADD, (0, 1))
    assert count_kernels(node) == 1
    np.testing.assert_allclose(host(node), (first * second).sum(keepdims=True), rtol=1e-5)


def test_subtract_max():
    array = random(5, 6)
    node = tensor(array)
    graph = node - node.r(Ops.MAX, (1,)).expand((5, 6))
    assert count_kernels(graph) <= 2
    np.testing.assert_allclose(host(graph), array - array.max(axis=1, keepdims=True), rtol=1e-6)


def test_softmax_last_axis():
    array = random(4, 10)
    node = tensor(array)
    maximum = node.r(Ops.MAX, (1,)).expand((4, 10))
    exponent = ((node - maximum) * (1 / math.log(2))).exp2()
    graph = exponent * exponent.r(Ops.ADD, (1,)).expand((4, 10)).reciprocal()
    assert count_kernels(graph) <= 3
    expected = np.exp(array - array.max(axis=1, keepdims=True))
    np.testing.assert_allclose(host(graph), expected / expected.sum(axis=1, keepdims=True), rtol=1e-5)


# ---- movement ----

MOVEMENTS = [
    (lambda n: n.reshape((6, 4)).permute((1, 0)), lambda a: a.reshape(6, 4).T),
    (lambda n: n.permute((2, 0, 1)).reshape((4, 6)), lambda a: a.transpose(2, 0, 1).reshape(4, 6)),
    (lambda n: n.shrink(((0, 2), (1, 2), (0, 4))).expand((2, 5, 4)),
     lambda a: np.broadcast_to(a[:, 1:2, :], (2, 5, 4))),
    (lambda n: n.pad(((1, 0), (0, 2), (3, 1))), lambda a: np.pad(a, ((1, 0), (0, 2), (3, 1)))),
    (lambda n: n.shrink(((1, 2), (0, 3), (1, 3))), lambda a: a[1:2, 0:3, 1:3]),
    (lambda n: n.flip((True, False, True)), lambda a: a[::-1, :, ::-1]),
    (lambda n: n.pad(((1, 1), (1, 0), (0, 0))).flip((True, True, False)).shrink(((0, 3), (1, 4), (1, 4))),
     lambda a: np.pad(a, ((1, 1), (1, 0), (0, 0)))[::-1, ::-1, :][0:3, 1:4, 1:4]),
    (lambda n: n.pad(((0, 0), (2, 2), (0, 0))).reshape((2, 7, 2, 2)).permute((3, 1, 0, 2)),
     lambda a: np.pad(a, ((0, 0), (2, 2), (0, 0))).reshape(2, 7, 2, 2).transpose(3, 1, 0, 2)),
]


@pytest.mark.parametrize("build,reference", MOVEMENTS)
def test_movement_then_elementwise(build, reference):
    array = random(2, 3, 4)
    graph = build(tensor(array)) + 1
    assert count_kernels(graph) == 1
    np.testing.assert_allclose(host(graph), reference(array) + 1, rtol=1e-6)


def test_reshape_permute_add_reads_input_without_copy():
    array = random(2, 3, 4)
    node = tensor(array)
    graph = node.reshape((6, 4)).permute((1, 0)) + 1
    schedule = create_schedule([graph], device_facts)
    assert len(schedule.items) == 1 and schedule.items[0].buffers[1] is node.base


def test_realized_view_is_returned_unchanged():
    node = tensor(random(2, 3))
    view = node.permute((1, 0))
    GlobalCounters.reset()
    assert realize_uops([view]) == [view]
    assert GlobalCounters.kernel_count == 0


# ---- effects ----

def test_assign_writes_into_the_target_buffer():
    array = random(3, 4)
    node = tensor(array)
    (result,) = realize_uops([node.assign(node * 2 + 1)])
    assert result is node
    np.testing.assert_allclose(host(node), array * 2 + 1, rtol=1e-6)


def test_assign_from_a_flipped_view_of_itself():
    array = random(3, 4)
    node = tensor(array)
    realize_uops([node.assign(node.flip((True, True)))])
    np.testing.assert_allclose(host(node), array[::-1, ::-1], rtol=1e-6)


def test_contiguous_and_clone_make_new_buffers():
    array = random(3, 4)
    node = tensor(array)
    (permuted,) = realize_uops([node.permute((1, 0)).contiguous()])
    (cloned,) = realize_uops([node.clone()])
    assert permuted.base is not node.base and cloned.base is not node.base
    np.testing.assert_allclose(host(permuted), array.T)
    np.testing.assert_allclose(host(cloned), array)


def test_multiple_outputs_share_work():
    first, second = random(3, 3), random(3, 3, seed=1)
    total = tensor(first) + tensor(second)
    assert count_kernels(total, total * 2, total.r(Ops.ADD, (0, 1))) == 3
    GlobalCounters.reset()
    results = realize_uops([total * 3, total - 1])
    np.testing.assert_allclose(host(results[0]), (first + second) * 3, rtol=1e-6)
    np.testing.assert_allclose(host(results[1]), first + second - 1, rtol=1e-6)


# ---- caches, memory and debug output ----

def test_eager_loop_on_new_buffers_uses_the_schedule_cache():
    for value in (1.0, 2.0, 5.0):
        node = tensor(np.array([value], dtype=np.float32))
        (result,) = realize_uops([node + UOp.const_on(dtypes.float32, 1.0, "CPU", (1,))])
        np.testing.assert_array_equal(host(result), [value + 1])


def test_programs_are_compiled_once_per_ast():
    schedule = create_schedule([tensor(random(2, 2)) * 3], device_facts)
    ast = schedule.items[0].ast
    assert get_runner(ast, "CPU") is get_runner(ast, "CPU")


def test_buffer_memory_is_freed_with_its_graph():
    node = new_buffer_uop("CPU", dtypes.float32, 16)
    buffer = buffer_of(node)
    buffer.ensure_allocated()
    alive = weakref.ref(buffer)
    del node, buffer
    gc.collect()
    assert alive() is None


def test_uop_from_bytes_rejects_partial_items():
    with pytest.raises(ValueError, match="whole number"):
        uop_from_bytes(b"\x00" * 6, dtypes.float32, "CPU")


def test_debug_levels_print(capsys):
    array = random(4, 4)
    with Context(DEBUG=1):
        realize_uops([tensor(array) * 5])
    assert "1 kernel" in capsys.readouterr().out
    with Context(DEBUG=2):
        realize_uops([tensor(array) * 7])
    lines = capsys.readouterr().out.splitlines()
    kernel_lines = [line for line in lines if "GFLOPS" in line]
    assert len(kernel_lines) == 1 and "GB/s" in kernel_lines[0] and " us " in kernel_lines[0]
    with Context(DEBUG=5):
        realize_uops([tensor(array) * 11.5])
    assert "Ops.STORE" in capsys.readouterr().out


def view_base_of(node: UOp) -> UOp:
    while node.op is not Ops.BUFFER:
        node = node.src[0]
    return node


def test_a_realized_node_is_not_recomputed():
    array = random(3, 4)
    doubled = tensor(array) * 2
    (first,) = realize_uops([doubled])
    # the same graph realized again gets a buffer of its own (so an assign into one never changes the other)
    (again,) = realize_uops([doubled])
    assert view_base_of(again) is not view_base_of(first)
    np.testing.assert_allclose(host(again), array * 2, rtol=1e-6)
    GlobalCounters.reset()
    (plus_one,) = realize_uops([doubled + 1])
    assert GlobalCounters.kernel_count == 1
    np.testing.assert_allclose(host(plus_one), array * 2 + 1, rtol=1e-6)


def test_a_result_dies_with_its_last_holder_and_is_then_computed_again():
    """A graph node lives as long as any graph or Tensor holds it, so what it remembers of its result must not keep
    the result's buffer alive: eager loops would write every other call into another buffer and hold twice the
    memory."""
    array = random(64, 32)
    doubled = tensor(array) * 2
    realize_uops([doubled])  # scheduled the first time; from here on it runs from its launch plan, as eager loops do
    gc.collect()
    gc.disable()
    try:
        (first,) = realize_uops([doubled])
        buffer = weakref.ref(buffer_of(view_base_of(first)))
        del first
        assert buffer() is None, "the result's buffer outlived every reference to the result"
        GlobalCounters.reset()
        (plus_one,) = realize_uops([doubled + 1])
        assert GlobalCounters.kernel_count == 1
        np.testing.assert_allclose(host(plus_one), array * 2 + 1, rtol=1e-6)
    finally:
        gc.enable()


def test_buffers_written_by_an_assign_or_a_first_schedule_die_with_their_last_holder() -> None:
    """Without the cyclic collector: a buffer an ASSIGN wrote (a leaf made with requires_grad copies its value into
    one) and the result of a graph scheduled for the first time are freed once nothing holds them, so the next
    allocation of that size reuses them instead of taking fresh pages; the values stay right."""
    from tinycore import Tensor
    array = random(32, 16)
    source = Tensor(array).realize()
    gc.collect()
    gc.disable()
    try:
        for offset in (0.5, 1.5):  # a constant not seen before: a new structure, scheduled the first time
            leaf = source.detach()
            leaf.requires_grad = True  # a lazy view: copied into a buffer of its own by an assign
            written = weakref.ref(buffer_of(leaf.uop.base))
            result = (leaf * 2 + offset).realize()
            np.testing.assert_allclose(result.numpy(), array * 2 + offset, rtol=1e-6)
            computed = weakref.ref(buffer_of(result.uop.base))
            del leaf, result
            assert written() is None, "the buffer the assign wrote outlived every holder"
            assert computed() is None, "a first schedule's result outlived every holder"
    finally:
        gc.enable()


def test_assign_invalidates_results_computed_from_the_old_value():
    array = random(3, 4)
    node = tensor(array)
    doubled = node * 2
    realize_uops([doubled])
    realize_uops([node.assign(node + 1)])
    np.testing.assert_allclose(host(doubled), (array + 1) * 2, rtol=1e-6)


def test_temporary_buffers_are_released_after_their_last_use():
    from tinycore.engine.realize import run_schedule
    array = random(4, 6)
    node = tensor(array)
    # reduces over the outer axis, broadcast back: each gets a buffer (the inner axis would fuse them as rows)
    maximum = node.r(Ops.MAX, (0,)).expand((4, 6))
    shifted = node - maximum
    graph = shifted * shifted.r(Ops.ADD, (0,)).expand((4, 6))
    schedule = create_schedule([graph], device_facts)
    assert len(schedule.temporaries) == 2
    run_schedule(schedule.items, schedule.temporaries)
    assert not any(buffer_of(temporary).is_allocated() for temporary in schedule.temporaries)
    shifted_reference = array - array.max(axis=0, keepdims=True)
    expected = shifted_reference * shifted_reference.sum(axis=0, keepdims=True)
    np.testing.assert_allclose(host(schedule.outputs[0]), expected, rtol=1e-5)


@pytest.fixture
def plan_runs(monkeypatch) -> list[int]:
    """Counts the realizes that ran from a launch plan (a cached structure's launches, no schedule items)."""
    from tinycore.engine import realize
    runs = [0]
    original = realize._run_plan

    def counting(*arguments):
        runs[0] += 1
        return original(*arguments)
    monkeypatch.setattr(realize, "_run_plan", counting)
    return runs


def test_repeated_structures_run_from_the_launch_plan_on_new_buffers(plan_runs):
    # the first realize of a structure schedules it, the second makes its launch plan, later ones run the plan
    kept = []
    for seed in range(5):
        array = random(4, 6, seed=seed)
        node = tensor(array)
        # reduces over the outer axis keep kernels (and temporaries) of their own, see above
        maximum = node.r(Ops.MAX, (0,)).expand((4, 6))
        shifted = node - maximum
        graph = shifted * shifted.r(Ops.ADD, (0,)).expand((4, 6))
        GlobalCounters.reset()
        gc.collect()  # buffers of earlier tests' garbage are freed now, not while measuring
        gc.disable()
        try:
            memory_before = GlobalCounters.mem_used
            results = realize_uops([graph])
            memory_after = GlobalCounters.mem_used
        finally:
            gc.enable()
        assert GlobalCounters.kernel_count == 3
        # the two temporaries went back to the allocator; only the result's 24 floats stay
        assert memory_after - memory_before == 24 * 4
        shifted_reference = array - array.max(axis=0, keepdims=True)
        expected = shifted_reference * shifted_reference.sum(axis=0, keepdims=True)
        np.testing.assert_allclose(host(results[0]), expected, rtol=1e-5)
        kept.append(results)  # the next round's assignment must not free this result while memory is measured
    assert plan_runs[0] >= 3


def test_launch_plan_runs_copies_and_assigns(plan_runs):
    target = tensor(np.zeros(5, dtype=np.float32))
    for step in range(4):
        array = random(5, seed=step)
        copied = tensor(array, "CPU:1").copy_to_device("CPU") * 2
        realize_uops([target.assign(target + copied)])
        np.testing.assert_allclose(host(target), sum(random(5, seed=k) * 2 for k in range(step + 1)), rtol=1e-5)
    assert plan_runs[0] >= 2


def test_launch_plan_keeps_the_values_of_bound_variables(plan_runs):
    from tinycore.uop.symbolic import Variable
    array = random(8)
    for value in (3, 5, 3, 5, 3, 5, 7):
        bound = Variable("n", 1, 8).bind(value)
        node = tensor(array).shrink(((0, bound),)) + 1
        (result,) = realize_uops([node])
        np.testing.assert_allclose(buffer_of(view_base_of(result)).numpy()[:value], array[:value] + 1, rtol=1e-6)
    assert plan_runs[0] >= 2  # the third 3 and the third 5


class _DeviceMemory:
    """The `buffer` factory the graph fuzzer of test_schedule uses, backed by real CPU buffers."""

    @staticmethod
    def buffer(array: np.ndarray) -> UOp:
        return tensor(np.asarray(array, dtype=np.float32))


@pytest.mark.parametrize("seed", range(12))
def test_random_graphs_on_the_device_match_numpy(seed):
    rng = np.random.default_rng(1000 + seed)
    builder = GraphBuilder(_DeviceMemory(), rng)
    for _ in range(int(rng.integers(2, 7))):
        builder.step()
        if builder.value.size > 200:
            break
    np.testing.assert_allclose(host(builder.node + 0), builder.value, rtol=1e-4, atol=1e-5)


def test_new_kernels_of_a_schedule_compile_together(monkeypatch):
    import os
    import random as python_random

    from tinycore.device.registry import Device
    compiler = Device["CPU"].compiler
    calls = []
    original = compiler.compile
    monkeypatch.setattr(compiler, "compile", lambda src: calls.append(src) or original(src))
    array = random(6, 5)
    constants = [python_random.uniform(1, 2) for _ in range(4)]  # never seen before: no cache can answer
    node = tensor(array)
    outputs = [node * constants[0], node + constants[1], (node * constants[2]).r(Ops.ADD, (1,)),
               (node - constants[3]).r(Ops.MAX, (0,))]
    results = realize_uops(outputs)
    assert len(calls) == min(4, os.cpu_count() or 1)  # one compiler run per batch, not one per kernel
    np.testing.assert_allclose(host(results[0]), array * constants[0], rtol=1e-6)
    np.testing.assert_allclose(host(results[1]), array + constants[1], rtol=1e-6)
    # float32 sums (the constant may be taken out of the sum): rounding relative to the summed magnitudes
    np.testing.assert_allclose(host(results[2]), (array * constants[2]).sum(1, keepdims=True), rtol=1e-5,
                               atol=1e-6 * float(np.abs(array * constants[2]).sum(1).max()))
    np.testing.assert_allclose(host(results[3]), (array - constants[3]).max(0, keepdims=True), rtol=1e-6)


def test_assign_reading_its_target_only_in_an_earlier_kernel_is_in_place():
    # an optimizer-like update: the gradient reads the parameter inside a reduce, in a kernel of its own (two
    # assigns use it); the parameter's update then reads the parameter only where it writes, so no temporary
    weights, state = random(4, 4, seed=1), random(4, 4, seed=2)
    parameter, moment = tensor(weights), tensor(state)
    gradient = (parameter.reshape((4, 4, 1)).expand((4, 4, 4)) *
                parameter.permute((1, 0)).reshape((1, 4, 4)).expand((4, 4, 4))).r(Ops.ADD, (1,)).reshape((4, 4))
    new_moment = moment.assign(moment * 0.5 + gradient)
    new_parameter = parameter.assign(parameter - gradient * 0.25)
    schedule = create_schedule([new_moment, new_parameter], device_facts)
    assert len([item for item in schedule.items if not item.is_copy]) == 3  # gradient, moment, parameter
    realize_uops([new_moment, new_parameter])
    expected_gradient = weights @ weights.T
    np.testing.assert_allclose(host(moment), state * 0.5 + expected_gradient, rtol=1e-5)
    np.testing.assert_allclose(host(parameter), weights - expected_gradient * 0.25, rtol=1e-5)


def test_a_structure_realized_again_under_another_thread_count_is_split_for_it(monkeypatch):
    # the heuristic splits a kernel across NUM_CPU_THREADS workers: a kernel (and a launch plan) compiled under one
    # setting must not be reused under another, or two threads run the one-worker kernel on one thread
    from tinycore.engine import realize
    created: list = []
    original = realize.Runner.__init__

    def recording(self, *arguments, **keywords):
        original(self, *arguments, **keywords)
        created.append(self)
    monkeypatch.setattr(realize.Runner, "__init__", recording)
    array = random(64, 1024, seed=11)
    shifted = array - array.max(axis=1, keepdims=True)
    expected = np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)
    node = tensor(array)
    for threads in (1, 2, 1, 2):
        with Context(NUM_CPU_THREADS=threads):
            for _ in range(3):  # the second realize makes the launch plan, the third runs it
                maximum = node.r(Ops.MAX, (1,)).expand((64, 1024))
                exponential = ((node - maximum) * (1 / math.log(2))).exp2()
                graph = exponential / exponential.r(Ops.ADD, (1,)).expand((64, 1024))
                (result,) = realize_uops([graph])
                np.testing.assert_allclose(host(result), expected, rtol=2e-6, atol=1e-8)
    # one kernel per setting, compiled once each: the second round of each setting reuses its own (two workers take
    # SHARES_PER_WORKER shares each of a kernel this size)
    from tinycore.codegen.optimize import SHARES_PER_WORKER
    assert [runner.static_dims[0][0] for runner in created] == [1, 2 * SHARES_PER_WORKER]


def test_each_realize_tells_the_device_that_launches_may_come(monkeypatch):
    # a device with expect_launches (the CPU device wakes its sleeping worker threads there) hears of every realize
    # before its launches, once per realize, from the plan path and the schedule path alike
    from tinycore.device.registry import Device
    from tinycore.engine import realize as realize_module
    from tinycore.plugins.contract import DeviceContract, expects_launches
    assert expects_launches(Device["CPU"]) and not expects_launches(DeviceContract())
    first = tensor(random(8, 8, seed=1))
    realize_uops([(first + 1.0).contiguous()])  # a kernel compiled on CPU: the device is in the engine's table
    calls: list[str] = []
    monkeypatch.setitem(realize_module._expectations, "CPU", lambda: calls.append("expected"))
    for seed in range(3):  # the first schedules, the others replay the launch plan
        value = random(8, 8, seed=seed + 2)
        (result,) = realize_uops([(tensor(value) * 2.0 + 1.0).contiguous()])
        np.testing.assert_allclose(host(result), value * 2.0 + 1.0, rtol=1e-6)
    assert calls == ["expected"] * 3
    realize_uops([first, (tensor(random(4, 4)) - 1.0).contiguous()])
    assert len(calls) == 4
