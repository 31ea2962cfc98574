"""The UOp core (hash-consing, weak references, graph walks, builders, exec_alu) and the printers."""
from __future__ import annotations

import gc
import math

import numpy as np
import pytest

from tinycore.dtype import dtypes
from tinycore.uop.ops import Ops
from tinycore.uop.printer import pretty_print, print_uops_python, render_expr
from tinycore.uop.symbolic import Variable
from tinycore.uop.uop import UOp, UOpMetaClass, exec_alu

a, b = Variable("a", 0, 10), Variable("b", -5, 5)


class TestHashConsing:
    def test_equal_graphs_are_the_same_object(self) -> None:
        assert (a + 1) * b is (a + 1) * b
        assert UOp.const(dtypes.int, 3) is UOp.const(dtypes.int, 3)

    def test_args_equal_in_python_stay_distinct(self) -> None:
        one_int = UOp(Ops.CONST, dtypes.int, (), 1)
        one_float = UOp(Ops.CONST, dtypes.int, (), 1.0)
        one_bool = UOp(Ops.CONST, dtypes.int, (), True)
        assert len({id(one_int), id(one_float), id(one_bool)}) == 3
        assert UOp(Ops.CONST, dtypes.float, (), 0.0) is not UOp(Ops.CONST, dtypes.float, (), -0.0)

    def test_dead_graphs_are_freed(self) -> None:
        gc.collect()
        before = len(UOpMetaClass.ucache)
        nodes = [Variable("dead", 0, 1000) * index + index for index in range(1000)]
        assert len(UOpMetaClass.ucache) >= before + 2000
        del nodes
        gc.collect()
        assert len(UOpMetaClass.ucache) <= before + 5

    def test_replace(self) -> None:
        node = a + 1
        assert node.replace(op=Ops.MUL) is a * 1
        assert node.replace() is node
        with pytest.raises(TypeError, match="unknown fields"):
            node.replace(colour="red")


class TestGraphWalks:
    def test_toposort_sources_first(self) -> None:
        expression = (a + b) * (a + 1)
        order = list(expression.toposort)
        assert order[-1] is expression
        for node in order:
            for source in node.src:
                assert order.index(source) < order.index(node)
        assert len(order) == len(set(order)) == 6

    def test_toposort_deep(self) -> None:
        node = a
        for _ in range(30000):
            node = node + 1
        assert len(node.toposort) == 30002

    def test_substitute(self) -> None:
        expression = (a + b) * a
        assert expression.substitute({a: b}) is (b + b) * b
        assert expression.substitute({}) is expression


class TestBuilders:
    def test_const_truncates(self) -> None:
        assert UOp.const(dtypes.uint8, 300).arg == 44
        assert UOp.const(dtypes.int8, 200).arg == -56
        assert UOp.const(dtypes.float32, 0.1).arg == float(np.float32(0.1))
        assert UOp.const(dtypes.bool, 2).arg is True

    def test_arithmetic_dtypes(self) -> None:
        assert (a < 3).dtype == dtypes.bool
        assert (a + 1).dtype == dtypes.int
        assert (a < 3).where(a, 2).dtype == dtypes.int
        assert a.cast(dtypes.float).dtype == dtypes.float

    def test_vmin_vmax_properties(self) -> None:
        assert ((a * 2 + b) // 3).vmin == -1 and ((a * 2 + b) // 3).vmax == 8

    def test_bind_and_expr(self) -> None:
        assert a.bind(3).unbind() == (a, 3)
        assert a.expr == "a" and a.bind(4).expr == "a"
        with pytest.raises(TypeError, match="needs a Variable"):
            (a + 1).bind(3)
        with pytest.raises(TypeError, match="bound Variable"):
            a.unbind()


class TestExecAlu:
    @pytest.mark.parametrize("numerator,denominator", [(7, 2), (-7, 2), (7, -2), (-7, -2), (0, 3), (6, 3)])
    def test_integer_division_is_c(self, numerator: int, denominator: int) -> None:
        # numpy's fmod and trunc-division give the C results
        assert exec_alu(Ops.IDIV, dtypes.int, [numerator, denominator]) == int(np.trunc(numerator / denominator))
        assert exec_alu(Ops.MOD, dtypes.int, [numerator, denominator]) == int(np.fmod(numerator, denominator))

    def test_wraps_to_dtype(self) -> None:
        assert exec_alu(Ops.ADD, dtypes.int8, [100, 100]) == int((np.array([100], np.int8) + np.int8(100))[0])
        assert exec_alu(Ops.MUL, dtypes.uint8, [16, 17]) == (16 * 17) % 256

    def test_float_ops(self) -> None:
        assert exec_alu(Ops.SQRT, dtypes.float64, [2.0]) == math.sqrt(2.0)
        assert math.isnan(exec_alu(Ops.SQRT, dtypes.float64, [-1.0]))
        assert exec_alu(Ops.RECIPROCAL, dtypes.float64, [0.0]) == math.inf
        assert exec_alu(Ops.EXP2, dtypes.float32, [3.0]) == 8.0


class TestPrinters:
    @pytest.mark.parametrize("build,expected", [
        (lambda: (a * 4 + b) // 4, "(a*4+b)//4"),
        (lambda: a * 4 + b // 4, "a*4+b//4"),
        (lambda: (a + b) * (a + 1), "(a+b)*(a+1)"),
        (lambda: a - b, "a-b"),
        (lambda: UOp(Ops.ADD, dtypes.int, (a, UOp(Ops.MUL, dtypes.int, (b, UOp.const(dtypes.int, -3))))), "a-b*3"),
        (lambda: UOp(Ops.ADD, dtypes.int, (a, UOp.const(dtypes.int, -2))), "a-2"),
        (lambda: UOp(Ops.MUL, dtypes.int, (a, UOp.const(dtypes.int, -1))), "-a"),
        (lambda: (a < 4) & (b < 3), "(a<4)&(b<3)"),
        (lambda: (a < 4).logical_not(), "!(a<4)"),
        (lambda: a.maximum(b), "max(a,b)"),
        (lambda: (a < 2).where(a, b), "where(a<2,a,b)"),
        (lambda: a.cast(dtypes.float), "float32(a)"),
        (lambda: a % 3 % 2, "a%3%2"),
        (lambda: a % (b % 2), "a%(b%2)"),
        (lambda: UOp(Ops.RANGE, dtypes.int, (UOp.const(dtypes.int, 8),), (2, 0)) * 2, "ridx2*2"),
        (lambda: UOp(Ops.SPECIAL, dtypes.int, (UOp.const(dtypes.int, 8),), "gidx0") + 1, "gidx0+1"),
        (lambda: UOp.const(dtypes.float, math.inf), "inf"),
    ])
    def test_render_expr(self, build: object, expected: str) -> None:
        node = build()  # type: ignore[operator]
        assert render_expr(node) == expected
        assert node.render() == expected

    def test_render_matches_python_arithmetic(self) -> None:
        # the infix text evaluates (as Python, for non-negative values where // and % agree with C) to the same value
        expression = ((a * 4 + b + 5) // 3) % 4 + a * 2
        text = render_expr(expression)
        for value_a in range(0, 11):
            for value_b in range(0, 6):
                expected = (((value_a * 4 + value_b + 5) // 3) % 4) + value_a * 2
                assert eval(text, {"a": value_a, "b": value_b}) == expected  # noqa: S307

    def test_pretty_print_shares_nodes(self) -> None:
        shared = a * 2
        text = pretty_print(shared + shared)
        lines = text.splitlines()
        assert len(lines) == 4
        assert lines[-1].startswith("x3 = UOp(Ops.ADD, dtypes.int")
        assert "(x2, x2)" in lines[-1]
        assert repr(shared + shared) == text

    def test_python_printer_round_trip(self) -> None:
        buffer = UOp(Ops.DEFINE_GLOBAL, dtypes.float.ptr(16), (), 0)
        index = buffer.index((a * 4 + b) % 16, valid=(a < 4) & (b >= 0))
        graph = index.store(index.load() * 2.5 + UOp.const(dtypes.float, -math.inf)).sink()
        code = print_uops_python(graph)
        namespace: dict[str, object] = {}
        exec(code, namespace)  # noqa: S102
        assert namespace["result"] is graph

    def test_python_printer_enum_args(self) -> None:
        node = UOp(Ops.REDUCE_AXIS, dtypes.float, (UOp.const(dtypes.float, 1.0),), (Ops.ADD, (0, 1)))
        namespace: dict[str, object] = {}
        exec(print_uops_python(node, "rebuilt"), namespace)  # noqa: S102
        assert namespace["rebuilt"] is node

    def test_python_printer_rejects_opaque_args(self) -> None:
        with pytest.raises(TypeError, match="cannot write an arg"):
            print_uops_python(UOp(Ops.CUSTOM, dtypes.int, (), object()))
