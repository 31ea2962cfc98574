"""The VIZ recording: passes recorded with hand-counted nodes and rules, realized programs against numpy, and
nothing recorded with VIZ off."""
from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import numpy as np
import pytest

from tinycore import Context, Tensor, dtypes
from tinycore.counters import GlobalCounters
from tinycore.uop.ops import Ops
from tinycore.uop.patterns import PatternMatcher, UPat, graph_rewrite
from tinycore.uop.uop import UOp
from tinycore.viz import hook, record


@pytest.fixture
def recording() -> Iterator[record.Recording]:
    """Recording on for one test, then as it was before."""
    was_enabled = hook.ENABLED
    record.reset()
    record.enable()
    try:
        yield record.RECORDING
    finally:
        if not was_enabled:
            record.disable()
        record.reset()


def _variable(name: str) -> UOp:
    return UOp(Ops.DEFINE_VAR, dtypes.int32, (), (name, 0, 10))


def _drop_add_zero() -> PatternMatcher:
    return PatternMatcher([(UPat(Ops.ADD, src=(UPat.var("x"), UPat.cvar("zero"))),
                            lambda x, zero: x if zero.arg == 0 else None)])


def test_a_named_pass_is_recorded_with_its_graph_rules_and_changes(recording: record.Recording) -> None:
    a, b, c = _variable("a"), _variable("b"), _variable("c")
    zero = UOp.const(dtypes.int32, 0)
    # SINK(a+0, (b+0)*(c+0)): three ADDs with zero, which the rule removes
    sink = UOp(Ops.SINK, dtypes.void, (a + zero, (b + zero) * (c + zero)))
    kernel = record.kernel_begin(sink)
    result = graph_rewrite(sink, _drop_add_zero(), name="drop add zero")
    record.kernel_end(sink, sink, _FakeSpec(), [], object())
    assert [step["name"] for step in kernel.passes] == ["kernel AST", "drop add zero"]
    ast_step, step = kernel.passes
    # by hand: a, b, c, 0, a+0, b+0, c+0, (b+0)*(c+0), SINK = 9 nodes before; a, b, c, b*c, SINK = 5 after
    assert len(ast_step["nodes"]) == 9
    assert len(step["nodes"]) == 5 == len(list(result.toposort))
    assert sorted(node["op"] for node in step["nodes"]) == sorted(["DEFINE_VAR"] * 3 + ["MUL", "SINK"])
    assert [count for _, count in step["rules"]] == [3]
    assert "test_record.py" in step["rules"][0][0]
    # the new MUL and the new SINK are the changed nodes; a, b and c were there before
    changed_ops = sorted(step["nodes"][index]["op"] for index in step["changed"])
    assert changed_ops == ["MUL", "SINK"]
    # edges point at sources listed earlier (toposort order)
    for node in step["nodes"]:
        assert all(source < node["id"] for source in node["src"])


class _FakeSpec:
    name, device, src = "hand_made", "NONE", "void hand_made() {}"


def test_rewrites_outside_a_kernel_or_of_single_expressions_are_not_recorded(recording: record.Recording) -> None:
    a, zero = _variable("a"), UOp.const(dtypes.int32, 0)
    assert graph_rewrite(a + zero, _drop_add_zero(), name="outside") is a
    record.kernel_begin(UOp(Ops.SINK, dtypes.void, (a,)))
    assert graph_rewrite(a + zero, _drop_add_zero(), name="an expression") is a
    assert [step["name"] for step in recording.kernels[0].passes] == ["kernel AST"]


def test_a_realized_program_records_its_kernels_schedule_and_timeline(recording: record.Recording) -> None:
    values = np.arange(24, dtype=np.float32).reshape(4, 6) - 11.5
    (Tensor([1.0]) + 1).realize()  # the device opens outside PROFILE: its bars are the engine's own host timings
    before = GlobalCounters.kernel_count
    with Context(PROFILE=1):
        result = (Tensor(values) * 1.75 + 0.3125).relu().sum(axis=1).numpy()
    launched = GlobalCounters.kernel_count - before
    np.testing.assert_allclose(result, np.maximum(values * 1.75 + 0.3125, 0).sum(axis=1), rtol=1e-6)
    document = recording.to_json()
    assert launched >= 1 and len(document["kernels"]) >= 1
    for kernel in document["kernels"]:
        assert kernel["name"] and kernel["source"] and kernel["linear"]
        assert kernel["passes"][0]["name"] == "kernel AST"
        assert kernel["linear"][-1].split()[1] == "SINK"
    schedule = document["schedules"][-1]
    kernel_items = [item for item in schedule["items"] if item["kind"] == "kernel"]
    assert len(kernel_items) == launched
    names = {kernel["id"]: kernel["name"] for kernel in document["kernels"]}
    assert all(names[item["kernel"]] == item["name"] for item in kernel_items)
    linked = sorted(group["kernel"] for group in schedule["groups"] if group["kernel"] is not None)
    assert linked == sorted(item["kernel"] for item in kernel_items)
    bars = [event for event in document["timeline"] if event["kernel"] in names]
    assert len(bars) == launched
    assert all(event["end_us"] >= event["start_us"] for event in bars)


def test_each_outline_of_a_schedule_names_the_kernel_of_its_nodes(recording: record.Recording) -> None:
    values = np.arange(12, dtype=np.float32).reshape(3, 4) / 7 - 0.8125
    # two kernels realized together: a max (a REDUCE, no exp) and an exp (no REDUCE)
    largest, exponential = Tensor(values).max(axis=1), (Tensor(values) * 1.5).exp()
    Tensor.realize(largest, exponential)
    np.testing.assert_allclose(largest.numpy(), values.max(axis=1), rtol=1e-6)
    np.testing.assert_allclose(exponential.numpy(), np.exp(values * 1.5), rtol=1e-5)
    document = recording.to_json()
    schedule = document["schedules"][-1]
    nodes = schedule["graph"]["nodes"]
    linked = [group for group in schedule["groups"] if group["kernel"] is not None]
    assert len(linked) == sum(item["kind"] == "kernel" for item in schedule["items"]) >= 2
    for group in linked:
        kernel = document["kernels"][group["kernel"]]
        ast_ops = {node["op"] for node in kernel["passes"][0]["nodes"]}
        group_ops = {nodes[index]["op"] for index in group["nodes"]}
        # a max or a sum in the outlined part <-> a REDUCE in that kernel; EXP2 (exp) likewise
        assert ("REDUCE_AXIS" in group_ops) == ("REDUCE" in ast_ops), (group_ops, ast_ops)
        assert ("EXP2" in group_ops) == ("EXP2" in ast_ops), (group_ops, ast_ops)


def test_viz_off_records_nothing() -> None:
    was_enabled = hook.ENABLED
    record.disable()
    record.reset()
    try:
        values = np.linspace(-2, 2, 10, dtype=np.float32)
        np.testing.assert_allclose((Tensor(values) * 2.625 - 0.5).numpy(), values * 2.625 - 0.5, rtol=1e-6)
        assert hook.REWRITE is None
        document = record.RECORDING.to_json()
        assert document["kernels"] == [] and document["schedules"] == []
    finally:
        if was_enabled:
            record.enable()


def test_viz_at_exit_writes_the_file_and_does_not_serve_without_a_terminal(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(tmp_path, "recording.json")
    program = "from tinycore import Tensor; print((Tensor([1.0, 2.0]) * 3).tolist())"
    environment = {**os.environ, "VIZ": "1", "VIZ_PATH": path}
    environment.pop("VIZ_SERVE", None)
    finished = subprocess.run([sys.executable, "-c", program], env=environment, capture_output=True, text=True,
                              timeout=120, stdin=subprocess.DEVNULL)
    assert finished.returncode == 0, finished.stderr
    assert finished.stdout.strip() == "[3.0, 6.0]"
    assert f"tiny viz {path}" in finished.stderr
    from tinycore.viz.server import load_recording
    document = load_recording(path)
    assert len(document["kernels"]) >= 1 and len(document["schedules"]) >= 1


def test_a_graph_step_outside_graph_rewrite_is_recorded_through_the_hook(recording: record.Recording) -> None:
    a, b = _variable("a"), _variable("b")
    before = UOp(Ops.SINK, dtypes.void, (a + b,))
    after = UOp(Ops.SINK, dtypes.void, (a * b,))
    kernel = record.kernel_begin(before)
    hook.step("my step", after, before)
    hook.step("no before", after)
    assert [step["name"] for step in kernel.passes] == ["kernel AST", "my step", "no before"]
    step = kernel.passes[1]
    assert len(step["nodes"]) == 4  # a, b, a*b, SINK
    assert sorted(step["nodes"][index]["op"] for index in step["changed"]) == ["MUL", "SINK"]
    assert kernel.passes[2]["changed"] == []


def test_kernels_compiled_before_recording_starts_are_recorded_too() -> None:
    """A kernel this process already ran (compiled, its schedule cached) is lowered again once recording starts, so
    the recording has its passes and the schedule's outline names it."""
    values = np.arange(10, dtype=np.float32).reshape(2, 5) / 3 - 1.25
    Tensor(values).max(axis=1).realize()  # compiled and cached before recording
    was_enabled = hook.ENABLED
    record.reset()
    record.enable()
    try:
        largest = Tensor(values).max(axis=1)
        largest.realize()
        np.testing.assert_allclose(largest.numpy(), values.max(axis=1), rtol=1e-6)
        schedule = record.RECORDING.to_json()["schedules"][-1]
        linked = [group for group in schedule["groups"] if group["kernel"] is not None]
        assert len(linked) == 1 and record.RECORDING.kernels[linked[0]["kernel"]].passes
    finally:
        if not was_enabled:
            record.disable()
        record.reset()
