"""Codegen as named passes: their order, the renderer's own passes at the declared points, and the rules of the
passes on hand-built graphs (expected results written out by hand or computed by numpy)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from codegen_kernels import ScalarRenderer, buffer, const, loop, reduce_inner

from tinycore.codegen import linearize
from tinycore.codegen.gating import StoreGate, gated_store_rules
from tinycore.codegen.indexing import IndexFolding, decided_select_rules, index_rules
from tinycore.codegen.interpreter import run_linear
from tinycore.dtype import dtypes
from tinycore.uop.ops import Ops
from tinycore.uop.patterns import PatternMatcher, UPat, graph_rewrite
from tinycore.uop.uop import UOp
from tinycore.viz import hook


def _recorded_pass_names(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    names: list[str] = []

    def record(run: Callable[..., UOp], sink: UOp, matcher: PatternMatcher, ctx: Any, bottom_up: bool,
               name: str) -> UOp:
        names.append(name)
        return run(sink, matcher, ctx, bottom_up, name)
    monkeypatch.setattr(hook, "REWRITE", record)
    return names


def test_codegen_passes_run_by_name_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    names = _recorded_pass_names(monkeypatch)
    uops = linearize(reduce_inner(3, 7).ast, ScalarRenderer(), [])
    expected = ["fold indices", "decided selects", "expand reduces", "place accumulators", "devectorize"]
    passes = [name for name in names if name in expected]
    assert passes == expected
    data, result = np.arange(21, dtype=np.float32).reshape(3, 7), np.zeros(3, np.float32)
    run_linear(uops, [result, data])
    np.testing.assert_allclose(result, data.sum(axis=1))


class _RendererWithPasses(ScalarRenderer):
    """Adds a pass at each declared point: the first turns every multiplication by 3.0 into one by 5.0."""

    seen: list[str] = []
    pre_matcher = PatternMatcher([
        (UPat(Ops.CONST, dtype=dtypes.float32, arg=3.0), lambda: UOp.const(dtypes.float32, 5.0)),
        (UPat(Ops.SINK), lambda: _RendererWithPasses.seen.append("pre")),
    ])
    extra_matcher = PatternMatcher([(UPat(Ops.SINK), lambda: _RendererWithPasses.seen.append("extra"))])
    post_matcher = PatternMatcher([(UPat(Ops.SINK), lambda: _RendererWithPasses.seen.append("post"))])


def test_a_renderer_adds_passes_at_the_declared_points(monkeypatch: pytest.MonkeyPatch) -> None:
    names = _recorded_pass_names(monkeypatch)
    _RendererWithPasses.seen = []
    i = loop(8, 0)
    out, a = buffer(0, dtypes.float32, 8), buffer(1, dtypes.float32, 8)
    ast = out.index(i * 1).store(a.index(i * 1).load() * UOp.const(dtypes.float32, 3.0)).sink()
    uops = linearize(ast, _RendererWithPasses(), [])
    assert _RendererWithPasses.seen == ["pre", "extra", "post"]
    order = [name for name in names if name.startswith("renderer: ") or name in ("expand reduces", "devectorize")]
    assert order == ["renderer: pre", "expand reduces", "renderer: extra", "devectorize", "renderer: post"]
    data, result = np.linspace(-2, 2, 8, dtype=np.float32), np.zeros(8, np.float32)
    run_linear(uops, [result, data])
    np.testing.assert_allclose(result, data * 5.0)


def test_index_rules_simplify_addresses_only() -> None:
    i = loop(8, 0)
    out, a = buffer(0, dtypes.int32, 8), buffer(1, dtypes.int32, 8)
    value = a.index((i * 4 + 1) // 4).load() + (i * 4 + 1) // 4
    rewritten = graph_rewrite(out.index(i * 1).store(value).sink(), index_rules, IndexFolding(), name="fold indices")
    store = rewritten.src[0]
    assert store.src[0].src[1] is i, "(i*4 + 1) // 4 is i for 0 <= i < 8"
    load, kept = store.src[1].src
    assert load.src[0].src[1] is i
    assert kept is (i * 4 + 1) // 4, "values are left as built"


@pytest.mark.parametrize("bound,taken", [(10, "if_true"), (0, "if_false"), (4, None)])
def test_decided_select_takes_the_branch_its_bounds_decide(bound: int, taken: str | None) -> None:
    i = loop(8, 0)
    if_true, if_false = UOp.const(dtypes.float32, 1.0), UOp.const(dtypes.float32, 2.0)
    select = (i < const(bound)).where(if_true, if_false)
    out = buffer(0, dtypes.float32, 8)
    rewritten = graph_rewrite(out.index(i * 1).store(select).sink(), decided_select_rules, name="decided selects")
    expected = {"if_true": if_true, "if_false": if_false, None: select}[taken]
    assert rewritten.src[0].src[1] is expected


def test_a_select_on_loaded_values_is_left_to_run_time() -> None:
    i = loop(8, 0)
    out, a = buffer(0, dtypes.float32, 8), buffer(1, dtypes.int32, 8)
    select = (a.index(i * 1).load() < const(-2 ** 31)).where(UOp.const(dtypes.float32, 1.0),
                                                               UOp.const(dtypes.float32, 2.0))
    sink = out.index(i * 1).store(select).sink()
    assert graph_rewrite(sink, decided_select_rules, name="decided selects") is sink


def test_gated_stores_add_the_gate_to_the_named_buffers_once() -> None:
    i = loop(8, 0)
    first, second, source = buffer(0, dtypes.float32, 8), buffer(1, dtypes.float32, 8), buffer(2, dtypes.float32, 8)
    value = source.index(i * 1).load()
    own = i < const(6)
    gate = i.ne(const(3))
    sink = UOp.sink(UOp(Ops.INDEX, first.dtype, (first, i, own)).store(value), second.index(i * 1).store(value))
    gated = graph_rewrite(sink, gated_store_rules, StoreGate(gate, frozenset({first})), name="gate stores")
    assert gated.src[0].src[0].src[2] is (own & gate), "the store's own gate is kept, the new one added once"
    assert gated.src[1] is sink.src[1], "a store into another buffer is left alone"


def test_viz_records_the_passes_and_graph_steps_of_a_kernel() -> None:
    from tinycore import Tensor
    from tinycore.viz import record
    was_enabled = hook.ENABLED
    record.reset()
    record.enable()
    try:
        values = np.arange(48, dtype=np.float32).reshape(6, 8) - 20.0
        result = (Tensor(values) * 1.8125).sum(axis=1).numpy()
        document = record.RECORDING.to_json()
    finally:
        if not was_enabled:
            record.disable()
        record.reset()
    np.testing.assert_allclose(result, (values * 1.8125).sum(axis=1), rtol=1e-6)
    wanted = ["fold indices", "decided selects", "expand reduces", "expand stores", "place accumulators",
              "devectorize"]
    recorded = [[step["name"] for step in kernel["passes"] if step["name"] in wanted] for kernel in document["kernels"]]
    assert wanted in recorded
