"""The symbolic engine: bounds, Variables, helpers, and the table of simplified forms codegen relies on.

The table below is the contract: index expressions that movement ops (reshape, permute, expand, pad, shrink and
their compositions) produce, and the form `symbolic` must bring them to. Every row is also checked by brute
force: the expression and its expected form agree at every point of the variables' ranges.
"""
from __future__ import annotations

import itertools
import random
from collections.abc import Callable

import pytest

from tinycore.dtype import dtypes
from tinycore.uop.ops import Ops
from tinycore.uop.patterns import graph_rewrite
from tinycore.uop.symbolic import (
    Variable,
    bounds,
    resolve,
    simplify_given_valid,
    smax,
    smin,
    ssimplify,
    sym_infer,
    symbolic,
    symbolic_simple,
)
from tinycore.uop.uop import UOp


def c_div(a: int, b: int) -> int:
    """C division (truncation toward zero), written independently of tinycore."""
    quotient = abs(a) // abs(b)
    return quotient if (a < 0) == (b < 0) else -quotient


def c_mod(a: int, b: int) -> int:
    """C remainder (sign of the dividend)."""
    return a - b * c_div(a, b)


i, j, k = Variable("i", 0, 9), Variable("j", 0, 2), Variable("k", 0, 3)
x, y = Variable("x", 0, 99), Variable("y", 0, 3)
n = Variable("n", -20, 20)
r0 = UOp(Ops.RANGE, dtypes.int, (UOp.const(dtypes.int, 6),), (0, 0))
r1 = UOp(Ops.RANGE, dtypes.int, (UOp.const(dtypes.int, 4),), (1, 0))

# (name, expression builder, expected rendering after `symbolic`)
INDEX_TABLE: list[tuple[str, Callable[[], UOp], str]] = [
    # reshape: splitting a flat index and joining split indices
    ("reshape split quotient", lambda: (i * 4 + k) // 4, "i"),
    ("reshape split remainder", lambda: (i * 4 + k) % 4, "k"),
    ("reshape middle axis", lambda: (i * 12 + j * 4 + k) // 4 % 3, "j"),
    ("reshape outer axis", lambda: (i * 12 + j * 4 + k) // 12, "i"),
    ("reshape inner axes", lambda: (i * 12 + j * 4 + k) % 12, "j*4+k"),
    ("reshape of reshape joins back", lambda: (x // 4) * 4 + x % 4, "x"),
    ("reshape of reshape three levels", lambda: (x // 12) * 12 + (x // 4 % 3) * 4 + x % 4, "x"),
    ("reshape nested division", lambda: x // 3 // 4, "x//12"),
    ("reshape nested remainder", lambda: x % 12 % 4, "x%4"),
    ("reshape remainder then division", lambda: x % 12 // 4, "x//4%3"),
    ("reshape to a coarser split", lambda: (r0 * 4 + r1) // 12, "ridx0//3"),
    ("reshape to a coarser split remainder", lambda: (r0 * 4 + r1) % 12, "ridx1+ridx0%3*4"),
    ("reshape common factor", lambda: (i * 8 + k * 2) // 4, "i*2+k//2"),
    ("remainder below divisor", lambda: y % 4, "y"),
    ("quotient below divisor", lambda: y // 4, "0"),
    # permute: a transposed view of a reshaped buffer
    ("permute of reshape", lambda: ((i * 3 + j) % 3) * 10 + (i * 3 + j) // 3, "i+j*10"),
    # expand: a broadcast axis has stride 0
    ("expand stride zero", lambda: i * 0 + k, "k"),
    ("expand of reshape", lambda: (i * 0 + j * 4 + k) // 4, "j"),
    # pad: shifted index and the bound checks that form the valid mask
    ("pad shifted index", lambda: (i + 2) - 2, "i"),
    ("pad lower check", lambda: ((i - 1) < 0).logical_not(), "!(i<1)"),
    ("pad upper check", lambda: (i - 1) < 4, "i<5"),
    ("pad check always true", lambda: (k + 1) < 5, "True"),
    ("pad check always false", lambda: k < 0, "False"),
    ("pad mask merge", lambda: (i < 7) & (i < 5) & (i >= 1) & (i >= 2), "(i<5)&!(i<2)"),
    ("pad mask contradiction", lambda: (i < 3) & (i >= 3), "False"),
    ("pad mask of redundant clause", lambda: (i < 20) & (k < 2), "k<2"),
    # shrink: an offset into a larger axis, then split
    ("shrink offset", lambda: (i + 2) * 4 + k, "i*4+k+8"),
    ("shrink then split quotient", lambda: ((i + 2) * 4 + k) // 4, "i+2"),
    ("shrink then split remainder", lambda: ((i + 2) * 4 + k + 1) % 4, "(k+1)%4"),
    # arithmetic the rules must regroup
    ("constants gathered", lambda: (x + 3) + (y + 4), "x+y+7"),
    ("like terms combined", lambda: x * 2 + y + x * 3, "x*5+y"),
    ("terms cancel", lambda: x + y - x, "y"),
    ("minus one times cancels", lambda: x + (-1 * x), "0"),
    ("terms sorted canonically", lambda: (y + x * 2) - (x * 2 + y) + (y + x), "x+y"),
    ("negation cancels", lambda: -(x * -1), "x"),
    ("distribute constant", lambda: (x + 2) * 3, "x*3+6"),
    ("comparison by bounds", lambda: x < 100, "True"),
    ("comparison moves constant", lambda: x + 3 < 10, "x<7"),
    ("comparison divides factor", lambda: x * 4 < 10, "x<3"),
    ("comparison of quotient", lambda: x // 4 < 3, "x<12"),
    ("max decided by bounds", lambda: x.maximum(-1), "x"),
    ("where true", lambda: (x < 100).where(x, y), "x"),
    ("where same", lambda: (x < 5).where(y, y), "y"),
    ("where under its condition", lambda: (x < 4).where(x % 4, 0), "where(x<4,x,0)"),
    # negative values: truncating division needs care
    ("negative: no floor rewrite", lambda: (n * 4 + 3) // 4, "(n*4+3)//4"),
    ("negative: common factor is exact", lambda: (n * 4) // 4, "n"),
    ("negative: remainder common factor", lambda: (n * 6) % 4, "n*3%2*2"),
    ("negative: divisor sign", lambda: n // -4, "-(n//4)"),
    ("negative: remainder divisor sign", lambda: n % -4, "n%4"),
    ("negative: small remainder", lambda: (n % 30), "n"),
    ("negative: quotient comparison", lambda: n // 4 < 0, "n<-3"),
]


@pytest.mark.parametrize("name,build,expected", INDEX_TABLE, ids=[row[0] for row in INDEX_TABLE])
def test_index_table(name: str, build: Callable[[], UOp], expected: str) -> None:
    expression = build()
    simplified = graph_rewrite(expression, symbolic)
    assert simplified.render() == expected
    variables = [node for node in expression.toposort if node.op in (Ops.DEFINE_VAR, Ops.RANGE)]
    domains = [range(node.vmin, node.vmax + 1) for node in variables]
    for values in itertools.product(*domains):
        assignment = dict(zip(variables, values, strict=True))
        assert evaluate(expression, assignment) == evaluate(simplified, assignment), (name, assignment)


def evaluate(root: UOp, assignment: dict[UOp, int]) -> int | bool:
    """Brute-force evaluation with C semantics (an oracle separate from tinycore's exec_alu)."""
    table = {Ops.ADD: lambda a, b: a + b, Ops.MUL: lambda a, b: a * b, Ops.IDIV: c_div, Ops.MOD: c_mod,
             Ops.MAX: max, Ops.NEG: lambda a: (not a) if isinstance(a, bool) else -a, Ops.CMPLT: lambda a, b: a < b,
             Ops.CMPNE: lambda a, b: a != b, Ops.CMPEQ: lambda a, b: a == b, Ops.AND: lambda a, b: a and b,
             Ops.OR: lambda a, b: a or b, Ops.WHERE: lambda cond, a, b: a if cond else b,
             Ops.SUB: lambda a, b: a - b}
    values: dict[UOp, int | bool] = {}
    for node in root.toposort:
        if node in assignment:
            values[node] = assignment[node]
        elif node.op is Ops.CONST:
            values[node] = node.arg
        else:
            values[node] = table[node.op](*[values[source] for source in node.src])
    return values[root]


class TestBounds:
    @pytest.mark.parametrize("expression,expected", [
        (lambda: UOp.const(dtypes.int, 5), (5, 5)),
        (lambda: Variable("v", -3, 8), (-3, 8)),
        (lambda: r0, (0, 5)),
        (lambda: UOp(Ops.SPECIAL, dtypes.int, (UOp.const(dtypes.int, 32),), "gidx0"), (0, 31)),
        (lambda: x + y, (0, 102)),
        (lambda: UOp(Ops.SUB, dtypes.int, (x, y)), (-3, 99)),
        (lambda: n * -2, (-40, 40)),
        (lambda: n * n, (-400, 400)),
        (lambda: x // 4, (0, 24)),
        (lambda: n // 4, (-5, 5)),
        (lambda: n // -4, (-5, 5)),
        (lambda: x // (y + 1), (0, 99)),
        (lambda: x % 7, (0, 6)),
        (lambda: n % 7, (-6, 6)),
        (lambda: UOp(Ops.MOD, dtypes.int, (Variable("w", 21, 27), UOp.const(dtypes.int, 10))), (1, 7)),
        (lambda: n.maximum(3), (3, 20)),
        (lambda: -n, (-20, 20)),
        (lambda: x < 100, (True, True)),
        (lambda: x < 0, (False, False)),
        (lambda: x < 50, (False, True)),
        (lambda: x.ne(-1), (True, True)),
        (lambda: y.eq(7), (False, False)),
        (lambda: (x < 50) & (y < 9), (False, True)),
        (lambda: (x < 100) & (y < 9), (True, True)),
        (lambda: (x < 0) | (y < 2), (False, True)),
        (lambda: (x < 50).where(y, n), (-20, 20)),
        (lambda: (x < 100).where(y, n), (0, 3)),
        (lambda: x.cast(dtypes.int64), (0, 99)),
        (lambda: n.cast(dtypes.uint8), (0, 255)),
        (lambda: y.cast(dtypes.bool), (False, True)),
        (lambda: UOp(Ops.AND, dtypes.int, (n, UOp.const(dtypes.int, 7))), (0, 7)),
        (lambda: UOp(Ops.SHL, dtypes.int, (y, UOp.const(dtypes.int, 2))), (0, 12)),
        (lambda: UOp(Ops.SHR, dtypes.int, (x, UOp.const(dtypes.int, 2))), (0, 24)),
    ])
    def test_bounds(self, expression: Callable[[], UOp], expected: tuple[int, int]) -> None:
        node = expression()
        assert (node.vmin, node.vmax) == expected

    def test_overflow_widens_to_dtype(self) -> None:
        big = Variable("big", 0, 2 ** 30)
        assert bounds(big * 4) == (dtypes.int.min, dtypes.int.max)

    def test_float_bounds_are_unknown(self) -> None:
        value = UOp(Ops.DEFINE_GLOBAL, dtypes.float.ptr(4), (), 0).index(UOp.const(dtypes.int, 0)).load()
        assert (value + 1.0).vmin == float("-inf") and (value + 1.0).vmax == float("inf")
        assert UOp.const(dtypes.float, 2.5).vmin == 2.5

    def test_deep_graph_bounds(self) -> None:
        node = x
        for _ in range(20000):
            node = UOp(Ops.MAX, dtypes.int, (node, y))
        assert (node.vmin, node.vmax) == (0, 99)


class TestVariable:
    def test_variable_node(self) -> None:
        variable = Variable("n", 1, 128)
        assert variable.op is Ops.DEFINE_VAR and variable.dtype == dtypes.int and variable.arg == ("n", 1, 128)
        assert Variable("n", 1, 128) is variable

    def test_bind_and_unbind(self) -> None:
        bound = Variable("n", 1, 128).bind(4)
        assert bound.op is Ops.BIND
        variable, value = bound.unbind()
        assert variable is Variable("n", 1, 128) and value == 4
        assert (bound.vmin, bound.vmax) == (1, 128)
        assert bound.expr == "n"

    def test_bind_out_of_range(self) -> None:
        with pytest.raises(ValueError, match="must lie in \\[1, 128\\]"):
            Variable("n", 1, 128).bind(200)

    def test_bad_variables(self) -> None:
        with pytest.raises(ValueError, match="swap"):
            Variable("n", 5, 1)
        with pytest.raises(TypeError, match="integer bounds"):
            Variable("n", 0.5, 1)  # type: ignore[arg-type]

    def test_symbolic_shape_expression(self) -> None:
        batch = Variable("batch", 1, 64)
        size = batch * 4 * 3
        assert sym_infer(size, {"batch": 5}) == 60
        assert sym_infer(size, {batch: 2}) == 24
        assert sym_infer(batch.bind(7) * 2, {}) == 14


class TestHelpers:
    def test_sym_infer(self) -> None:
        assert sym_infer(7, {}) == 7
        assert sym_infer((x * 4 + y) // 3 % 5, {"x": 10, "y": 2}) == ((10 * 4 + 2) // 3) % 5
        assert sym_infer(n // 4, {"n": -7}) == -1  # C truncation
        with pytest.raises(KeyError, match="no value for variable 'y'"):
            sym_infer(x + y, {"x": 1})

    def test_ssimplify(self) -> None:
        assert ssimplify(5) == 5
        assert ssimplify((x * 4 + y) // 4 - x) == 0
        assert isinstance(ssimplify((x * 4 + y) // 4 - x), int)
        assert ssimplify(x + 0) is x

    def test_resolve(self) -> None:
        assert resolve(x < 100) is True
        assert resolve(x < 0) is False
        assert resolve(x < 50) is True and resolve(x < 50, False) is False
        assert resolve(3 < 4) is True
        with pytest.raises(TypeError, match="bool UOp"):
            resolve(x)

    def test_smax_smin(self) -> None:
        assert smax(3, 7, 5) == 7 and smin([3, 7, 5]) == 3
        assert smax(x, -1) is x
        assert smin(y, 10) is y
        combined = smax(x, y * 40)
        assert combined.vmin == 0 and combined.vmax == 120

    def test_uop_simplify_method(self) -> None:
        assert ((i * 4 + k) // 4).simplify() is i
        assert ((i * 4 + k) % 4).ssimplify() is k


class TestRuleSets:
    def test_symbolic_simple_folds_constants(self) -> None:
        expression = UOp.const(dtypes.int, 6) * 7 + 0
        assert graph_rewrite(expression, symbolic_simple) is UOp.const(dtypes.int, 42)

    def test_constant_folding_uses_c_semantics(self) -> None:
        assert graph_rewrite(UOp.const(dtypes.int, -7) // 2, symbolic_simple).arg == -3
        assert graph_rewrite(UOp.const(dtypes.int, -7) % 2, symbolic_simple).arg == -1

    def test_constant_folding_wraps_int32(self) -> None:
        folded = graph_rewrite(UOp.const(dtypes.int, 2 ** 30) * 4, symbolic_simple)
        assert folded.arg == 0

    def test_identities(self) -> None:
        zero = UOp.const(dtypes.int, 0)
        for expression, expected in [(x * 1, x), (x + 0, x), (x // 1, x), (x * 0, zero), (x % 1, zero),
                                     (x.alu(Ops.NEG).alu(Ops.NEG), x), ((x < 5) & True, x < 5),
                                     ((x < 5) | False, x < 5), ((x < 5).logical_not().logical_not(), x < 5)]:
            assert graph_rewrite(expression, symbolic_simple) is expected, expression.render()

    def test_float_multiply_by_zero_is_kept(self) -> None:
        value = UOp(Ops.DEFINE_GLOBAL, dtypes.float.ptr(4), (), 0).index(UOp.const(dtypes.int, 0)).load()
        assert graph_rewrite(value * 0.0, symbolic).op is Ops.MUL  # nan * 0 is nan, not 0

    def test_index_valid_simplification(self) -> None:
        buffer = UOp(Ops.DEFINE_GLOBAL, dtypes.float.ptr(16), (), 0)
        valid = (i >= 1) & (i < 5)
        index = buffer.index(((i - 1) * 4 + k) // 4, valid=valid)
        simplified = graph_rewrite(index, symbolic)
        assert simplified.src[1].render() == "i-1"
        assert simplify_given_valid((i - 1) % 4, valid).render() == "i-1"

    def test_where_with_impossible_condition(self) -> None:
        assert graph_rewrite(((i < 3) & (i >= 5)).where(x, y), symbolic) is y


def _strides(shape: tuple[int, ...]) -> list[int]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return strides[::-1]


def _reshape_round_trip(shape_a: tuple[int, ...], shape_b: tuple[int, ...]) -> tuple[UOp, UOp, list[UOp]]:
    """Index of a buffer of shape_a viewed as shape_b and flattened back, and the plain flat index."""
    ranges = [UOp(Ops.RANGE, dtypes.int, (UOp.const(dtypes.int, size),), (axis, 0)) for axis, size in
              enumerate(shape_a)]
    flat = ranges[0] * _strides(shape_a)[0]
    for range_node, stride in zip(ranges[1:], _strides(shape_a)[1:], strict=True):
        flat = flat + range_node * stride
    components = [(flat // stride) % size for stride, size in zip(_strides(shape_b), shape_b, strict=True)]
    joined = components[0] * _strides(shape_b)[0]
    for component, stride in zip(components[1:], _strides(shape_b)[1:], strict=True):
        joined = joined + component * stride
    return joined, flat, ranges


def _merge_adjacent(shape: tuple[int, ...], generator: random.Random) -> tuple[int, ...]:
    """shape with one random pair of adjacent axes merged (a coarser view of the same buffer)."""
    if len(shape) < 2:
        return shape
    axis = generator.randrange(len(shape) - 1)
    return shape[:axis] + (shape[axis] * shape[axis + 1],) + shape[axis + 2:]


def test_reshape_round_trips() -> None:
    """Viewing a buffer through another shape and flattening back: always value-equal, and for views that merge
    or split whole axes, simplified to the plain flat index (the contract codegen relies on)."""
    generator = random.Random(11)
    for _ in range(150):
        shape_a = tuple(generator.randint(2, 6) for _ in range(generator.randint(1, 3)))
        aligned = _merge_adjacent(shape_a, generator)
        for shape_b, must_collapse in ((aligned, True), (tuple(reversed(shape_a)), False)):
            joined, flat, ranges = _reshape_round_trip(shape_a, shape_b)
            simplified = joined.simplify()
            if must_collapse:
                assert simplified is flat.simplify(), (shape_a, shape_b, simplified.render())
            for values in itertools.product(*[range(size) for size in shape_a]):
                assignment = dict(zip(ranges, values, strict=True))
                assert evaluate(simplified, assignment) == evaluate(flat, assignment)
            # and the other direction: a split view joined back is the flat index too
            joined_back, flat_back, _ = _reshape_round_trip(shape_b, shape_b)
            assert joined_back.simplify() is flat_back.simplify()
