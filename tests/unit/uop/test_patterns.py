"""UPat matching, PatternMatcher dispatch and graph_rewrite semantics (fixpoint, order, ctx, deep graphs)."""
from __future__ import annotations

import pytest

from tinycore.dtype import dtypes
from tinycore.uop.ops import Ops
from tinycore.uop.patterns import PatternMatcher, RewriteCycleError, UPat, graph_rewrite
from tinycore.uop.symbolic import Variable
from tinycore.uop.uop import UOp


def const(value: int) -> UOp:
    return UOp.const(dtypes.int, value)


a, b, c = Variable("a", 0, 10), Variable("b", 0, 10), Variable("c", 0, 10)


class TestUPatMatch:
    def test_op_and_name(self) -> None:
        found = UPat(Ops.ADD, name="root").match(a + b)
        assert found == [{"root": a + b}]
        assert UPat(Ops.MUL).match(a + b) == []

    def test_set_of_ops(self) -> None:
        pattern = UPat({Ops.ADD, Ops.MUL}, name="x")
        assert pattern.match(a * b) == [{"x": a * b}]
        assert pattern.match(a // b) == []

    def test_dtype_and_set_of_dtypes(self) -> None:
        float_const = UOp.const(dtypes.float, 1.5)
        assert UPat(dtype=dtypes.float).match(float_const) == [{}]
        assert UPat(dtype=dtypes.int).match(float_const) == []
        assert UPat(dtype=(dtypes.int, dtypes.float)).match(float_const) == [{}]

    def test_scalar_dtype_matches_vectors(self) -> None:
        vector = UOp(Ops.VECTORIZE, dtypes.float.vec(4), (UOp.const(dtypes.float, 1.0),) * 4)
        assert UPat(dtype=dtypes.float).match(vector) == [{}]

    def test_ordered_sources(self) -> None:
        pattern = UPat(Ops.ADD, src=(UPat.var("x"), UPat.cvar("c")))
        assert pattern.match(a + 3) == [{"x": a, "c": const(3)}]
        assert pattern.match(UOp(Ops.ADD, dtypes.int, (const(3), a))) == []

    def test_permuted_sources(self) -> None:
        pattern = UPat(Ops.ADD, src=[UPat.var("x"), UPat.cvar("c")])
        swapped = UOp(Ops.ADD, dtypes.int, (const(3), a))
        assert pattern.match(swapped) == [{"x": a, "c": const(3)}]
        # both orders match when both sources are constants
        assert len(pattern.match(UOp(Ops.ADD, dtypes.int, (const(1), const(2))))) == 2

    def test_single_pattern_for_all_sources(self) -> None:
        pattern = UPat(Ops.ADD, src=UPat(Ops.CONST))
        assert pattern.match(UOp(Ops.ADD, dtypes.int, (const(1), const(2)))) == [{}]
        assert pattern.match(a + 1) == []

    def test_arg(self) -> None:
        assert UPat(Ops.CONST, arg=3).match(const(3)) == [{}]
        assert UPat(Ops.CONST, arg=3).match(const(4)) == []
        # True is not the integer 1 for matching
        assert UPat(Ops.CONST, arg=1).match(UOp.const(dtypes.bool, True)) == []

    def test_allow_any_len(self) -> None:
        buffer = UOp(Ops.DEFINE_GLOBAL, dtypes.float.ptr(8), (), 0)
        gated = buffer.index(a, valid=a < 5)
        assert UPat(Ops.INDEX, src=(UPat.var("buffer"), UPat.var("index"))).match(gated) == []
        found = UPat(Ops.INDEX, src=(UPat.var("buffer"), UPat.var("index")), allow_any_len=True).match(gated)
        assert found == [{"buffer": buffer, "index": a}]

    def test_repeated_name_requires_same_node(self) -> None:
        pattern = UPat(Ops.ADD, src=(UPat.var("x"), UPat.var("x")))
        assert pattern.match(a + a) == [{"x": a}]
        assert pattern.match(a + b) == []

    def test_any(self) -> None:
        pattern = UPat.any(UPat(Ops.ADD, name="x"), UPat(Ops.MUL, name="x"))
        assert pattern.match(a * b) == [{"x": a * b}]
        assert pattern.match(a % b) == []

    def test_operator_overloads_build_patterns(self) -> None:
        pattern = UPat.var("x") + UPat.cvar("c")
        assert pattern.op == (Ops.ADD,) and pattern.src_kind == "permutation"
        assert (UPat.var("x") // 4).match(a // 4) == [{"x": a}]
        assert (UPat.var("x") // 4).match(a // 5) == []
        assert (UPat.var("x") < UPat.var("y")).match(a < b) == [{"x": a, "y": b}]
        assert (UPat.var("x") * 2).match(UOp(Ops.MUL, dtypes.int, (const(2), a))) == [{"x": a}]

    def test_const_helper(self) -> None:
        assert UPat.const(dtypes.int, 0).match(const(0)) == [{}]
        assert UPat.const(dtypes.float, 0).match(const(0)) == []

    def test_named_copy(self) -> None:
        pattern = UPat(Ops.ADD, src=(UPat.var("x"), UPat.cvar("c"))).named("root")
        assert pattern.match(a + 2) == [{"root": a + 2, "x": a, "c": const(2)}]

    def test_bad_src_raises(self) -> None:
        with pytest.raises(TypeError, match="tuple, a list or a UPat"):
            UPat(Ops.ADD, src="x")  # type: ignore[arg-type]


class TestPatternMatcher:
    def test_first_matching_rule_wins(self) -> None:
        rules = PatternMatcher([(UPat.var("x") + 0, lambda x: x), (UPat(Ops.ADD, name="root"), lambda root: const(99))])
        assert rules.rewrite(a + 0) is a
        assert rules.rewrite(a + 1) is const(99)
        assert rules.rewrite(a * 2) is None

    def test_none_and_same_node_fall_through(self) -> None:
        rules = PatternMatcher([(UPat(Ops.ADD, name="x"), lambda x: None), (UPat(Ops.ADD, name="x"), lambda x: x),
                                (UPat(Ops.ADD, name="x"), lambda x: const(7))])
        assert rules.rewrite(a + 1) is const(7)

    def test_ctx_is_passed_when_declared(self) -> None:
        seen = []
        rules = PatternMatcher([(UPat(Ops.DEFINE_VAR, name="x"), lambda ctx, x: seen.append((ctx, x)))])
        rules.rewrite(a, ctx="context")
        assert seen == [("context", a)]

    def test_pattern_without_op_applies_to_every_op(self) -> None:
        rules = PatternMatcher([(UPat(dtype=dtypes.bool, name="x"), lambda x: UOp.const(dtypes.bool, True))])
        assert rules.rewrite(a < b) is UOp.const(dtypes.bool, True)
        assert rules.rewrite((a < b) & (b < c)) is UOp.const(dtypes.bool, True)
        assert rules.rewrite(a + b) is None

    def test_rule_may_ignore_captures(self) -> None:
        rules = PatternMatcher([(UPat(Ops.ADD, src=(UPat.var("x"), UPat.cvar("c"))), lambda x: x)])
        assert rules.rewrite(a + 5) is a

    def test_missing_capture_is_reported(self) -> None:
        with pytest.raises(ValueError, match="needs \\['y'\\]"):
            PatternMatcher([(UPat.var("x") + 0, lambda x, y: x)])

    def test_bad_rule_entry(self) -> None:
        with pytest.raises(TypeError, match="\\(UPat, callable\\) pair"):
            PatternMatcher([(UPat(Ops.ADD), "not callable")])  # type: ignore[list-item]

    def test_composition_keeps_order(self) -> None:
        first = PatternMatcher([(UPat(Ops.ADD, name="x"), lambda x: const(1))])
        second = PatternMatcher([(UPat(Ops.ADD, name="x"), lambda x: const(2))])
        assert (first + second).rewrite(a + b) is const(1)
        assert (second + first).rewrite(a + b) is const(2)
        assert len(first + second) == 2

    def test_dispatch_by_op_does_not_try_other_rules(self) -> None:
        calls = []

        def record(x: UOp) -> None:
            calls.append(x)
        rules = PatternMatcher([(UPat(Ops.MUL, name="x"), record) for _ in range(200)])
        rules.rewrite(a + b)
        assert calls == []
        assert len(rules.by_op[Ops.MUL]) == 200 and len(rules.by_op[Ops.ADD]) == 0

    def test_compiled_matches_interpreter(self) -> None:
        pattern = UPat(Ops.ADD, src=[UPat(Ops.MUL, src=[UPat.var("x"), UPat.cvar("c")]), UPat.var("y")])
        expressions = [a * 3 + b, b + a * 3, UOp(Ops.ADD, dtypes.int, (b, UOp(Ops.MUL, dtypes.int, (const(3), a)))),
                       a + b, a * b + c]
        rules = PatternMatcher([(pattern, lambda x, c, y: UOp(Ops.SINK, dtypes.void, (x, c, y)))])
        for expression in expressions:
            found = pattern.match(expression)
            expected = UOp(Ops.SINK, dtypes.void, (found[0]["x"], found[0]["c"], found[0]["y"])) if found else None
            assert rules.rewrite(expression) is expected


class TestGraphRewrite:
    def test_rewrites_to_fixpoint(self) -> None:
        # x+1 -> x applied repeatedly: (((a+1)+1)+1) -> a
        rules = PatternMatcher([(UPat.var("x") + 1, lambda x: x)])
        assert graph_rewrite(((a + 1) + 1) + 1, rules) is a

    def test_replacement_is_rewritten_again(self) -> None:
        # MUL -> ADD, and ADD of equal operands -> the operand: needs a second pass on the replacement
        rules = PatternMatcher([(UPat(Ops.MUL, src=(UPat.var("x"), UPat.var("y"))), lambda x, y: x + y),
                                (UPat(Ops.ADD, src=(UPat.var("x"), UPat.var("x"))), lambda x: x)])
        assert graph_rewrite((a * a) * (a * a), rules) is a

    def test_sources_before_node_by_default(self) -> None:
        order: list[str] = []

        def visit(x: UOp) -> None:
            order.append(x.arg[0])
        rules = PatternMatcher([(UPat(Ops.DEFINE_VAR, name="x"), visit), (UPat(Ops.ADD, name="x"),
                                                                          lambda x: order.append("add"))])
        graph_rewrite(a + b, rules)
        assert order == ["a", "b", "add"]

    def test_bottom_up_visits_node_first(self) -> None:
        order: list[str] = []
        rules = PatternMatcher([(UPat(Ops.DEFINE_VAR, name="x"), lambda x: order.append(x.arg[0])),
                                (UPat(Ops.ADD, name="x"), lambda x: order.append("add"))])
        graph_rewrite(a + b, rules, bottom_up=True)
        assert order[0] == "add" and order[1:3] == ["a", "b"]

    def test_bottom_up_stops_descent_when_node_replaced(self) -> None:
        # bottom-up sees (a+0)*0 first and replaces the whole product before visiting a+0
        seen: list[UOp] = []
        rules = PatternMatcher([(UPat.var("x") * 0, lambda x: const(0)),
                                (UPat(Ops.ADD, name="x"), lambda x: seen.append(x))])
        assert graph_rewrite((a + 0) * 0, rules, bottom_up=True) is const(0)
        assert seen == []

    def test_ctx_reaches_rules(self) -> None:
        rules = PatternMatcher([(UPat(Ops.DEFINE_VAR, name="x"), lambda ctx, x: ctx.get(x))])
        assert graph_rewrite(a + b, rules, ctx={a: c}) is c + b

    def test_shared_nodes_rewritten_once(self) -> None:
        calls: list[UOp] = []

        def count(x: UOp) -> None:
            calls.append(x)
        shared = a * b
        rules = PatternMatcher([(UPat(Ops.MUL, name="x"), count)])
        graph_rewrite((shared + shared) + shared, rules)
        assert calls == [shared]

    def test_deep_graph_without_recursion(self) -> None:
        node = a
        for _ in range(20000):
            node = node + 0
        rules = PatternMatcher([(UPat.var("x") + 0, lambda x: x)])
        assert graph_rewrite(node, rules) is a

    def test_wide_and_deep_graph(self) -> None:
        node = a
        for index in range(5000):
            node = (node * 1) + const(index % 3)
        rules = PatternMatcher([(UPat.var("x") * 1, lambda x: x)])
        result = graph_rewrite(node, rules)
        assert Ops.MUL not in {n.op for n in result.toposort}
        assert len(result.toposort) < len(node.toposort)

    def test_cycle_is_reported(self) -> None:
        rules = PatternMatcher([(UPat(Ops.DEFINE_VAR, name="x"), lambda x: x + 1)])
        with pytest.raises(RewriteCycleError, match="loop_test"):
            graph_rewrite(a, rules, name="loop_test")

    def test_bottom_up_loop_is_reported(self) -> None:
        rules = PatternMatcher([(UPat(Ops.ADD, name="x"), lambda x: x.src[1] + x.src[0])])
        with pytest.raises(RewriteCycleError):
            graph_rewrite(a + b, rules, bottom_up=True)
