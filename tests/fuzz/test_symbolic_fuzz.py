"""Property tests of the symbolic engine: random integer expressions over bounded variables.

For every generated expression: the `symbolic`-simplified graph evaluates to the same value as the original at
random points inside the variable bounds (and at the corners), and every node's value lies in [vmin, vmax].
The oracle is an evaluator written here with C integer semantics (division truncates toward zero, remainder has
the sign of the dividend, int32 wrap-around), independent of tinycore's own evaluation.

CI runs 10,000 seeded cases plus a derandomized hypothesis search; TINYCORE_FUZZ_LONG=1 runs 200,000 cases.
"""
from __future__ import annotations

import itertools
import os
import random
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tinycore.dtype import dtypes
from tinycore.uop.ops import Ops
from tinycore.uop.symbolic import Variable
from tinycore.uop.uop import UOp

LONG_RUN = os.environ.get("TINYCORE_FUZZ_LONG", "") == "1"
SEEDED_CASES = 200_000 if LONG_RUN else 10_000
POINTS_PER_CASE = 6
EXHAUSTIVE_DOMAIN = 12  # domains this small are checked at every point
INT32_MIN, INT32_MAX = -(2 ** 31), 2 ** 31 - 1


def wrap_int32(value: int) -> int:
    """Two's complement wrap-around to int32."""
    return (value - INT32_MIN) % (2 ** 32) + INT32_MIN


def c_divide(numerator: int, denominator: int) -> int:
    """C integer division (toward zero); division by zero gives 0 as in the generated code's guard."""
    if denominator == 0:
        return 0
    quotient = abs(numerator) // abs(denominator)
    return quotient if (numerator < 0) == (denominator < 0) else -quotient


def c_remainder(numerator: int, denominator: int) -> int:
    """C integer remainder (sign of the dividend); remainder by zero gives 0."""
    if denominator == 0:
        return 0
    return numerator - denominator * c_divide(numerator, denominator)


ORACLE: dict[Ops, Callable[..., Any]] = {
    Ops.ADD: lambda a, b: a + b, Ops.SUB: lambda a, b: a - b, Ops.MUL: lambda a, b: a * b,
    Ops.IDIV: c_divide, Ops.MOD: c_remainder, Ops.MAX: max, Ops.NEG: lambda a: (not a) if isinstance(a, bool) else -a,
    Ops.CMPLT: lambda a, b: a < b, Ops.CMPNE: lambda a, b: a != b, Ops.CMPEQ: lambda a, b: a == b,
    Ops.WHERE: lambda condition, a, b: a if condition else b,
    Ops.AND: lambda a, b: a & b, Ops.OR: lambda a, b: a | b, Ops.XOR: lambda a, b: a ^ b,
}


def evaluate(root: UOp, values: dict[str, int]) -> dict[UOp, Any]:
    """The value of every node under `root` with variables set to `values` (int32 wrap for ints)."""
    results: dict[UOp, Any] = {}
    for node in root.toposort:
        if node.op is Ops.DEFINE_VAR:
            results[node] = values[node.arg[0]]
        elif node.op is Ops.CONST:
            results[node] = node.arg
        else:
            value = ORACLE[node.op](*[results[source] for source in node.src])
            results[node] = bool(value) if node.dtype == dtypes.bool else wrap_int32(int(value))
    return results


class ExpressionGenerator:
    """Random integer and boolean expressions over a few bounded variables."""

    def __init__(self, generator: random.Random):
        self.generator = generator
        self.variables: list[UOp] = []
        for index in range(3):
            low = generator.choice([0, 0, 0, -5, -20, 1, 3])
            high = low + generator.choice([0, 1, 2, 3, 5, 9, 16, 40])
            self.variables.append(Variable(f"v{index}", low, high))

    def constant(self) -> int:
        """A small constant, biased toward the divisors index math uses."""
        return self.generator.choice([0, 1, 2, 3, 4, 5, 6, 8, 12, 16, -1, -2, -3, -4, -7, 7, 9, 10, 24, 100])

    def integer(self, depth: int) -> UOp:
        """A random integer expression of at most `depth` levels."""
        choose = self.generator.random
        if depth == 0 or choose() < 0.2:
            if choose() < 0.65:
                return self.generator.choice(self.variables)
            return UOp.const(dtypes.int, self.constant())
        kind = self.generator.randrange(12)
        left = self.integer(depth - 1)
        if kind == 0:
            return left + self.integer(depth - 1)
        if kind == 1:
            return left - self.integer(depth - 1)
        if kind == 2:
            return left * self.constant()
        if kind == 3:
            return left * self.integer(depth - 2) if depth >= 2 else left * self.constant()
        if kind == 4:
            return left // self.nonzero_divisor()
        if kind == 5:
            return left % self.nonzero_divisor()
        if kind == 6:
            return left.maximum(self.integer(depth - 1))
        if kind == 7:
            return left.minimum(self.integer(depth - 1))
        if kind == 8:
            return self.boolean(depth - 1).where(left, self.integer(depth - 1))
        if kind == 9:
            return -left
        if kind == 10:
            divisor = self.integer(depth - 1)
            return left // divisor if choose() < 0.5 else left % divisor
        return left + self.constant()

    def nonzero_divisor(self) -> int:
        """A constant divisor (sometimes negative)."""
        return self.generator.choice([1, 2, 3, 4, 5, 6, 8, 12, 16, -2, -3, -4, 7, 24])

    def boolean(self, depth: int) -> UOp:
        """A random boolean expression (comparisons, and/or, negation)."""
        kind = self.generator.randrange(8)
        if kind == 7:  # a padding mask on one variable: low <= v < high
            variable = self.generator.choice(self.variables)
            return (variable < self.constant()) & (variable < self.constant()).logical_not()
        left = self.integer(max(depth - 1, 0))
        if kind in (0, 1):
            return left < (self.constant() if self.generator.random() < 0.6 else self.integer(max(depth - 1, 0)))
        if kind == 2:
            return left.ne(self.constant())
        if kind == 3:
            return left.eq(self.integer(max(depth - 1, 0)))
        if kind == 4 and depth > 0:
            return self.boolean(depth - 1) & self.boolean(depth - 1)
        if kind == 5 and depth > 0:
            return self.boolean(depth - 1) | self.boolean(depth - 1)
        return (left < self.constant()).logical_not()

    def expression(self, depth: int) -> UOp:
        """An integer expression, or sometimes a boolean one."""
        return self.boolean(depth) if self.generator.random() < 0.2 else self.integer(depth)

    def points(self, count: int) -> list[dict[str, int]]:
        """Random assignments inside the bounds, plus the all-minimum and all-maximum corners."""
        names = [variable.arg[0] for variable in self.variables]
        domain = [range(variable.arg[1], variable.arg[2] + 1) for variable in self.variables]
        if len(domain[0]) * len(domain[1]) * len(domain[2]) <= EXHAUSTIVE_DOMAIN:
            return [dict(zip(names, values, strict=True)) for values in itertools.product(*domain)]
        found = [{name: variable.arg[1] for name, variable in zip(names, self.variables, strict=True)},
                 {name: variable.arg[2] for name, variable in zip(names, self.variables, strict=True)}]
        for _ in range(count):
            found.append({variable.arg[0]: self.generator.randint(variable.arg[1], variable.arg[2])
                          for variable in self.variables})
        return found


def overflows(root: UOp) -> bool:
    """True when some node's bounds reach the int32 limits (the expression may wrap; C leaves that undefined)."""
    for node in root.toposort:
        if node.dtype == dtypes.int and (node.vmin <= INT32_MIN or node.vmax >= INT32_MAX):
            return True
    return False


def check_expression(expression: UOp, points: list[dict[str, int]]) -> None:
    """Simplified equals original at every point, and bounds hold for every node of both graphs."""
    simplified = expression.simplify()
    assert simplified.dtype == expression.dtype
    node_bounds = {node: (node.vmin, node.vmax) for graph in (expression, simplified) for node in graph.toposort}
    for point in points:
        original_values = evaluate(expression, point)
        simplified_values = evaluate(simplified, point)
        expected, found = original_values[expression], simplified_values[simplified]
        assert expected == found, (f"{expression.render()} simplified to {simplified.render()}: at {point} "
                                   f"expected {expected}, got {found}")
        for values in (original_values, simplified_values):
            for node, value in values.items():
                low, high = node_bounds[node]
                assert low <= value <= high, f"{node.render()} has bounds [{low}, {high}] but is {value} at {point}"


def test_simplify_preserves_value_seeded() -> None:
    """10,000 seeded random expressions (200,000 with TINYCORE_FUZZ_LONG=1)."""
    generator = random.Random(1234)
    checked = 0
    while checked < SEEDED_CASES:
        expressions = ExpressionGenerator(generator)
        for _ in range(20):
            expression = expressions.expression(generator.randint(1, 4))
            if overflows(expression):
                continue
            check_expression(expression, expressions.points(POINTS_PER_CASE))
            checked += 1
    assert checked >= SEEDED_CASES


@settings(derandomize=True, max_examples=1000 if LONG_RUN else 150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2 ** 32 - 1), depth=st.integers(1, 5))
def test_simplify_preserves_value_hypothesis(seed: int, depth: int) -> None:
    """Hypothesis-chosen seeds and depths (derandomized, so CI runs the same cases every time)."""
    generator = random.Random(seed)
    expressions = ExpressionGenerator(generator)
    expression = expressions.expression(depth)
    if not overflows(expression):
        check_expression(expression, expressions.points(POINTS_PER_CASE))


def test_generator_covers_every_op() -> None:
    """The generated expressions exercise every op the engine simplifies (guards the fuzzer itself)."""
    generator = random.Random(7)
    seen: set[Ops] = set()
    for _ in range(300):
        seen |= {node.op for node in ExpressionGenerator(generator).expression(4).toposort}
    expected = {Ops.ADD, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.NEG, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ,
                Ops.WHERE, Ops.AND, Ops.OR, Ops.CONST, Ops.DEFINE_VAR}
    assert expected <= seen, f"never generated: {expected - seen}"
