"""The symbolic engine: value bounds of UOps, integer Variables, and the simplification rule sets.

Integer semantics are C's: IDIV truncates toward zero and MOD takes the sign of the dividend (see `exec_alu`).
Rules that depend on signs consult the bounds (`vmin`/`vmax`), so they hold for negative values too. Like C, the
rules assume signed integer arithmetic does not overflow; bounds that would overflow widen to the whole dtype
range, and no rule then relies on them.

Rule sets:
- `symbolic_simple`: constant folding and identities (x+0, x*1, x*0, x//1, double negation, ...).
- `symbolic`: adds canonical linear sums (regrouping of + and * with constants, like terms combined), division
  and remainder by constants using bounds, comparisons decided or simplified by bounds, where/and-of-masks rules.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from tinycore.dtype import ConstType, DType, dtypes
from tinycore.uop.opcodes import GroupOp, Ops
from tinycore.uop.patterns import PatternMatcher, UPat, graph_rewrite
from tinycore.uop.uop import PYTHON_ALU, UOp, exec_alu, sint, upper

Bounds = tuple[Any, Any]

# ---- bounds ----

_BOUNDS_KEY = "_bounds"


_DTYPE_RANGES: dict[DType, Bounds] = {dtype: (dtypes.min(dtype), dtypes.max(dtype)) for dtype in dtypes.all}
_SIGNED_INTS = frozenset(dtypes.sints)


def _dtype_bounds(dtype: DType) -> Bounds:
    """The whole range of `dtype` (floats: -inf..inf; bool: False..True; others: -inf..inf)."""
    return _DTYPE_RANGES.get(dtype.scalar, (-math.inf, math.inf))


def _int_const(dtype: DType, value: int) -> UOp:
    """A CONST of a signed integer dtype; skips the conversion work of UOp.const when `value` already fits."""
    low, high = _DTYPE_RANGES[dtype]
    if value.__class__ is int and low <= value <= high:
        return UOp(Ops.CONST, dtype, (), value)
    return UOp.const(dtype, value)


def _needs_sources(uop: UOp) -> bool:
    """True where the bounds of `uop` are computed from the bounds of its sources."""
    if uop.op in (Ops.CONST, Ops.DEFINE_VAR, Ops.VCONST) or not uop.src:
        return False
    if dtypes.is_float(uop.dtype):
        return False
    return uop.op in GroupOp.ALU or uop.op in (Ops.CAST, Ops.BIND, Ops.RANGE, Ops.SPECIAL)


def bounds(root: UOp) -> Bounds:
    """(vmin, vmax) of `root`: every value it can take lies in between (cached on each node).

    Computed without recursion, so arbitrarily deep graphs work.
    """
    cached = root.__dict__.get(_BOUNDS_KEY)
    if cached is not None:
        return cached
    stack = [root]
    while stack:
        node = stack[-1]
        if _BOUNDS_KEY in node.__dict__:
            stack.pop()
            continue
        if _needs_sources(node):
            missing = [source for source in node.src if _BOUNDS_KEY not in source.__dict__]
            if missing:
                stack.extend(missing)
                continue
        node.__dict__[_BOUNDS_KEY] = _clamp(node.dtype, _compute_bounds(node))
        stack.pop()
    return root.__dict__[_BOUNDS_KEY]


def _clamp(dtype: DType, found: Bounds) -> Bounds:
    """`found` if it fits in `dtype`, else the whole range of `dtype` (the computation may overflow)."""
    scalar = dtype.scalar
    if scalar == dtypes.bool:
        return (bool(found[0]), bool(found[1]))
    if dtypes.is_int(scalar):
        low, high = found
        if not (isinstance(low, int) and isinstance(high, int)):
            if not (math.isfinite(low) and math.isfinite(high)):
                return _dtype_bounds(scalar)
            low, high = math.floor(low), math.ceil(high)
        whole = _DTYPE_RANGES[scalar]
        if low < whole[0] or high > whole[1]:
            return whole
        return (int(low), int(high))
    return found


def _c_div(numerator: int, denominator: int) -> int:
    """Integer division truncating toward zero."""
    quotient = abs(numerator) // abs(denominator)
    return quotient if (numerator >= 0) == (denominator >= 0) else -quotient


def _compute_bounds(uop: UOp) -> Bounds:
    """The bounds of one node from the (already computed) bounds of its sources."""
    op, dtype = uop.op, uop.dtype
    if op is Ops.CONST:
        value = uop.arg
        if isinstance(value, float) and math.isnan(value):
            return (-math.inf, math.inf)
        return (value, value)
    if op is Ops.VCONST:
        return (min(uop.arg), max(uop.arg)) if uop.arg else _dtype_bounds(dtype)
    if op is Ops.DEFINE_VAR:
        return (uop.arg[1], uop.arg[2])
    if not _needs_sources(uop):
        return _dtype_bounds(dtype)
    source_bounds = [source.__dict__[_BOUNDS_KEY] for source in uop.src]
    if op is Ops.BIND:
        return source_bounds[0]
    if op in (Ops.RANGE, Ops.SPECIAL):
        return (0, max(0, source_bounds[-1 if op is Ops.RANGE else 0][1] - 1))
    if op is Ops.CAST:
        return _cast_bounds(uop.src[0].dtype, dtype, source_bounds[0])
    if op is Ops.WHERE:
        (condition_low, condition_high), if_true, if_false = source_bounds
        if condition_low:
            return if_true
        if not condition_high:
            return if_false
        return (min(if_true[0], if_false[0]), max(if_true[1], if_false[1]))
    if dtype.scalar == dtypes.bool and op not in GroupOp.Comparison:
        return _bool_bounds(op, source_bounds)
    if op in GroupOp.Comparison:
        return _comparison_bounds(op, source_bounds)
    return _integer_bounds(op, dtype, source_bounds)


def _cast_bounds(from_dtype: DType, to_dtype: DType, found: Bounds) -> Bounds:
    """Bounds of a value conversion."""
    low, high = found
    if to_dtype.scalar == dtypes.bool:
        if low == 0 and high == 0:
            return (False, False)
        return (True, True) if low > 0 or high < 0 else (False, True)
    if dtypes.is_int(to_dtype):
        if dtypes.is_float(from_dtype):
            if not (math.isfinite(low) and math.isfinite(high)):
                return _dtype_bounds(to_dtype)
            low, high = math.trunc(low), math.trunc(high)
        low, high = int(low), int(high)
        if low < dtypes.min(to_dtype) or high > dtypes.max(to_dtype):
            return _dtype_bounds(to_dtype)
        return (low, high)
    return _dtype_bounds(to_dtype)


def _bool_bounds(op: Ops, source_bounds: list[Bounds]) -> Bounds:
    """Bounds of a boolean ALU op (AND, OR, XOR, NEG, ...)."""
    if op is Ops.AND:
        return (source_bounds[0][0] and source_bounds[1][0], source_bounds[0][1] and source_bounds[1][1])
    if op is Ops.OR:
        return (source_bounds[0][0] or source_bounds[1][0], source_bounds[0][1] or source_bounds[1][1])
    if op is Ops.NEG:
        return (not source_bounds[0][1], not source_bounds[0][0])
    if all(low == high for low, high in source_bounds):
        value = exec_alu(op, dtypes.bool, [low for low, _ in source_bounds])
        return (value, value)
    return (False, True)


def _comparison_bounds(op: Ops, source_bounds: list[Bounds]) -> Bounds:
    """Bounds (False/True) of CMPLT, CMPNE, CMPEQ."""
    (low_a, high_a), (low_b, high_b) = source_bounds
    if op is Ops.CMPLT:
        if high_a < low_b:
            return (True, True)
        if low_a >= high_b:
            return (False, False)
        return (False, True)
    disjoint = high_a < low_b or high_b < low_a
    same_constant = low_a == high_a == low_b == high_b
    different: Bounds = (True, True) if disjoint else (False, False) if same_constant else (False, True)
    return different if op is Ops.CMPNE else (not different[1], not different[0])


def _integer_bounds(op: Ops, dtype: DType, source_bounds: list[Bounds]) -> Bounds:
    """Bounds of an integer ALU op."""
    whole = _dtype_bounds(dtype)
    if op is Ops.NEG:
        return (-source_bounds[0][1], -source_bounds[0][0])
    (low_a, high_a) = source_bounds[0]
    if len(source_bounds) < 2:
        return whole
    (low_b, high_b) = source_bounds[1]
    if op is Ops.ADD:
        return (low_a + low_b, high_a + high_b)
    if op is Ops.SUB:
        return (low_a - high_b, high_a - low_b)
    if op is Ops.MUL:
        corners = (low_a * low_b, low_a * high_b, high_a * low_b, high_a * high_b)
        return (min(corners), max(corners))
    if op is Ops.MAX:
        return (max(low_a, low_b), max(high_a, high_b))
    if op is Ops.IDIV:
        if low_b > 0 or high_b < 0:
            quotients = [_c_div(a, b) for a in (low_a, high_a) for b in (low_b, high_b)]
            return (min(quotients), max(quotients))
        largest = max(abs(low_a), abs(high_a))
        return (-largest, largest)
    if op is Ops.MOD:
        if low_b == high_b and low_b > 0 and low_a >= 0 and low_a // low_b == high_a // low_b:
            return (low_a % low_b, high_a % low_b)
        largest_remainder = max(0, max(abs(low_b), abs(high_b)) - 1)
        if low_a >= 0:
            return (0, min(high_a, largest_remainder))
        if high_a <= 0:
            return (max(low_a, -largest_remainder), 0)
        return (max(low_a, -largest_remainder), min(high_a, largest_remainder))
    if op is Ops.AND:
        if low_a >= 0 and low_b >= 0:
            return (0, min(high_a, high_b))
        if low_a >= 0 or low_b >= 0:
            return (0, high_a if low_a >= 0 else high_b)
        return whole
    if op in (Ops.OR, Ops.XOR):
        if low_a >= 0 and low_b >= 0:
            ceiling = (1 << max(high_a, high_b).bit_length()) - 1
            return (max(low_a, low_b) if op is Ops.OR else 0, ceiling)
        return whole
    if op is Ops.SHL and low_b == high_b and low_b >= 0:
        return (low_a << low_b, high_a << low_b)
    if op is Ops.SHR and low_b == high_b and low_b >= 0:
        return (low_a >> low_b, high_a >> low_b)
    return whole


# ---- Variables, evaluation and the small helpers shape code uses ----

def Variable(name: str, min_value: int, max_value: int, dtype: DType = dtypes.int) -> UOp:
    """A symbolic integer `name` known to lie in [min_value, max_value] (a DEFINE_VAR UOp).

    Bind it to a value with `.bind(value)` to use it as a size: `Tensor.empty(Variable("n", 1, 128).bind(4), 3)`.
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"Variable needs a non-empty string name, got {name!r}")
    if not (isinstance(min_value, int) and isinstance(max_value, int)):
        raise TypeError(f"Variable {name!r} needs integer bounds, got min={min_value!r} max={max_value!r}")
    if min_value > max_value:
        raise ValueError(f"Variable {name!r} has min {min_value} > max {max_value}: swap them")
    return UOp(Ops.DEFINE_VAR, dtype, (), (name, min_value, max_value))


def sym_infer(expression: sint, var_values: Mapping[str, int] | Mapping[UOp, int]) -> int:
    """The integer value of `expression` with the variables set to `var_values`.

    Keys of `var_values` may be variable names or DEFINE_VAR UOps; BINDs evaluate to their bound value unless
    the variable is given. An int evaluates to itself.
    """
    if isinstance(expression, int):
        return expression
    if not isinstance(expression, UOp):
        raise TypeError(f"sym_infer needs an int or a UOp, got {type(expression).__name__}")
    by_name = {(key.arg[0] if isinstance(key, UOp) else key): value for key, value in var_values.items()}
    for node in expression.toposort:
        if node.op is Ops.BIND:
            by_name.setdefault(node.src[0].arg[0], node.src[1].arg)
    values: dict[UOp, ConstType] = {}
    for node in expression.toposort:
        if node.op is Ops.DEFINE_VAR:
            if node.arg[0] not in by_name:
                raise KeyError(f"sym_infer: no value for variable {node.arg[0]!r}; got values for {sorted(by_name)}")
            values[node] = by_name[node.arg[0]]
        elif node.op is Ops.BIND:
            variable_name = node.src[0].arg[0]
            values[node] = by_name.get(variable_name, node.src[1].arg)
        elif node.op is Ops.CONST:
            values[node] = node.arg
        elif node.op is Ops.CAST:
            values[node] = dtypes.as_const(values[node.src[0]], node.dtype)
        elif node.op in GroupOp.ALU:
            values[node] = exec_alu(node.op, node.dtype, [values[source] for source in node.src])
        else:
            raise ValueError(f"sym_infer cannot evaluate {node.op}: only integer expressions over variables")
    result = values[expression]
    return int(result) if not isinstance(result, float) else result  # type: ignore[return-value]


def ssimplify(value: sint) -> sint:
    """`value` simplified: ints stay ints, a UOp is simplified and becomes an int when it is constant."""
    if not isinstance(value, UOp):
        return value
    simplified = graph_rewrite(value, symbolic)
    return simplified.arg if simplified.op is Ops.CONST else simplified


def resolve(value: object, default: bool = True) -> bool:
    """A Python bool for `value`; a bool UOp is decided by its bounds, `default` when they do not decide it."""
    if not isinstance(value, UOp):
        return bool(value)
    if value.dtype.scalar != dtypes.bool:
        raise TypeError(f"resolve needs a bool UOp (a comparison), got dtype {value.dtype}: compare it first")
    low, high = bounds(value)
    return bool(low) if low == high else default


def _extreme(name: str, values: tuple[Any, ...], largest: bool) -> sint:
    """The maximum (`largest`) or minimum of ints and integer UOps, for smax and smin."""
    items = list(values[0]) if len(values) == 1 and not isinstance(values[0], (int, UOp)) else list(values)
    if not items:
        raise ValueError(f"{name} needs at least one value")
    if all(isinstance(item, int) for item in items):
        return max(items) if largest else min(items)
    result = None
    for item in items:
        if result is None:
            result = item
            continue
        left, right = (result, item) if isinstance(result, UOp) else (item, result)
        result = left.maximum(right) if largest else left.minimum(right)
    assert result is not None
    return ssimplify(result)


def smax(*values: Any) -> sint:
    """The maximum of ints and integer UOps (an int when all are ints); accepts one iterable too."""
    return _extreme("smax", values, largest=True)


def smin(*values: Any) -> sint:
    """The minimum of ints and integer UOps (an int when all are ints); accepts one iterable too."""
    return _extreme("smin", values, largest=False)


# ---- linear forms: sums of coefficient * term plus a constant ----

_MAX_LINEAR_NODES = 64


def _is_signed_int(dtype: DType) -> bool:
    return dtype in _SIGNED_INTS


def linear_form(uop: UOp, limit: int | None = _MAX_LINEAR_NODES) -> tuple[dict[UOp, int], int] | None:
    """`uop` as ({term: coefficient}, constant), flattening +, -, negation and multiplication by integer constants.

    Terms keep their first appearance order. None when the sum has more than `limit` nodes (None: no limit).
    """
    terms: dict[UOp, int] = {}
    constant = 0
    stack: list[tuple[UOp, int]] = [(uop, 1)]
    visited = 0
    while stack:
        node, multiplier = stack.pop()
        visited += 1
        if limit is not None and visited > limit:
            return None
        op = node.op
        if op is Ops.ADD:
            stack.append((node.src[1], multiplier))
            stack.append((node.src[0], multiplier))
        elif op is Ops.SUB:
            stack.append((node.src[1], -multiplier))
            stack.append((node.src[0], multiplier))
        elif op is Ops.NEG:
            stack.append((node.src[0], -multiplier))
        elif op is Ops.CONST and node.arg.__class__ is int:
            constant += multiplier * node.arg
        elif op is Ops.MUL and node.src[1].op is Ops.CONST and node.src[1].arg.__class__ is int:
            stack.append((node.src[0], multiplier * node.src[1].arg))
        elif op is Ops.MUL and node.src[0].op is Ops.CONST and node.src[0].arg.__class__ is int:
            stack.append((node.src[1], multiplier * node.src[0].arg))
        else:
            terms[node] = terms.get(node, 0) + multiplier
    return terms, constant


def _term_order(item: tuple[int, tuple[UOp, int]]) -> tuple[int, object, int]:
    """Sort key of a term: ranges by axis, then variables and thread indices by name, then the rest as they came."""
    position, (term, _) = item
    if term.op is Ops.DEFINE_VAR and len(term.arg) == 4:  # a stand-in of simplify_given_valid sorts as its subject
        term = term.arg[3]
    if term.op is Ops.RANGE:
        return (0, term.arg[0] if isinstance(term.arg, tuple) else term.arg, position)
    if term.op is Ops.DEFINE_VAR:
        return (1, term.arg[0], position)
    if term.op is Ops.SPECIAL:
        return (2, str(term.arg), position)
    return (3, 0, position)


def build_sum(terms: dict[UOp, int], constant: int, dtype: DType) -> UOp:
    """The canonical UOp of a linear form: left-nested ADDs of `term * coefficient`, the constant last.

    Terms are ordered canonically (ranges by axis, variables by name, other terms in their given order), so
    equal sums written in different orders become the same node.
    """
    terms = _merge_div_mod_pairs(terms)
    if len(terms) > 1:
        terms = dict(item for _, item in sorted(enumerate(terms.items()), key=_term_order))
    result: UOp | None = None
    for term, coefficient in terms.items():
        if coefficient == 0:
            continue
        piece = term if coefficient == 1 else UOp(Ops.MUL, dtype, (term, _int_const(dtype, coefficient)))
        result = piece if result is None else UOp(Ops.ADD, dtype, (result, piece))
    if result is None:
        return _int_const(dtype, constant)
    if constant != 0:
        result = UOp(Ops.ADD, dtype, (result, _int_const(dtype, constant)))
    return result


def _merge_div_mod_pairs(terms: dict[UOp, int]) -> dict[UOp, int]:
    """Join the pieces of a split index, exact in C semantics for every sign of x:

    `(x//d)*(k*d) + (x%d)*k` becomes `x*k` (x == d*(x//d) + x%d), and `((x//d)%m)*(k*d) + (x%d)*k` becomes
    `(x%(d*m))*k`. Repeated until no pair is left, so a split into three or more axes joins back.
    """
    if not any(term.op is Ops.MOD for term in terms):
        return terms
    merged = dict(terms)
    changed = True
    while changed:
        changed = False
        for term, coefficient in list(merged.items()):
            if term.op is not Ops.MOD or term.src[1].op is not Ops.CONST or term not in merged:
                continue
            dividend, divisor = term.src[0], term.src[1].arg
            quotient = UOp(Ops.IDIV, term.dtype, term.src)
            joined: UOp | None = None
            partner: UOp | None = None
            if merged.get(quotient) == coefficient * divisor:
                joined, partner = dividend, quotient
            else:
                for other in merged:
                    if other.op is Ops.MOD and other.src[0] is quotient and other.src[1].op is Ops.CONST and \
                            merged[other] == coefficient * divisor:
                        joined, partner = dividend % (divisor * other.src[1].arg), other
                        break
            if joined is None or partner is None:
                continue
            del merged[partner]
            del merged[term]
            merged[joined] = merged.get(joined, 0) + coefficient
            changed = True
    return merged


def _normalize_sum(root: UOp) -> UOp | None:
    """Canonical linear form of an integer ADD/SUB/NEG/MUL-by-constant node (None when already canonical)."""
    if not _is_signed_int(root.dtype):
        return None
    form = linear_form(root)
    if form is None:
        return None
    rebuilt = build_sum(form[0], form[1], root.dtype)
    return rebuilt if rebuilt is not root else None


# ---- division and remainder by constants ----

def _gcd_of_form(terms: dict[UOp, int], constant: int, divisor: int) -> int:
    return math.gcd(divisor, constant, *terms.values())


_MAX_FACTORED_DIVISOR = 1 << 16


def _split_by_factor(terms: dict[UOp, int], constant: int, divisor: int, dtype: DType) -> tuple[int, UOp, UOp] | None:
    """For a non-negative sum e and a divisor d, find the largest factor g of d (1 < g < d) with e == g*B + R where
    B gathers the terms whose coefficients g divides and 0 <= R < g; then e//d == B//(d/g) and
    e%d == (B%(d/g))*g + R. Returns (g, B, R) or None."""
    if divisor > _MAX_FACTORED_DIVISOR:
        return None
    factors = sorted({f for low in range(2, math.isqrt(divisor) + 1) if divisor % low == 0
                      for f in (low, divisor // low)} - {divisor}, reverse=True)
    for factor in factors:
        big_terms = {term: value // factor for term, value in terms.items() if value % factor == 0}
        if not big_terms:
            continue
        rest_terms = {term: value for term, value in terms.items() if value % factor != 0}
        rest = build_sum(rest_terms, constant % factor, dtype)
        low, high = bounds(rest)
        if low >= 0 and high < factor:
            return factor, build_sum(big_terms, constant // factor, dtype), rest
    return None


def _divide_by_constant(numerator: UOp, divisor_uop: UOp) -> UOp | None:
    """Simplify numerator // divisor for a constant divisor."""
    divisor = divisor_uop.arg
    dtype = numerator.dtype
    if not _is_signed_int(dtype) or divisor == 0:
        return None
    if divisor < 0:
        return UOp(Ops.MUL, dtype, (numerator // -divisor, UOp.const(dtype, -1)))
    if divisor == 1:
        return numerator
    if numerator.op is Ops.IDIV and numerator.src[1].op is Ops.CONST and numerator.src[1].arg > 0:
        # (x // a) // b == x // (a*b) for a, b > 0 (both truncate toward zero)
        return numerator.src[0] // (numerator.src[1].arg * divisor)
    if numerator.op is Ops.MOD and numerator.src[1].op is Ops.CONST and numerator.src[1].arg > 0 and \
            numerator.src[1].arg % divisor == 0:
        # (x % (k*d)) // d == (x // d) % k: true for x >= 0, and both sides are odd functions of x
        return (numerator.src[0] // divisor) % (numerator.src[1].arg // divisor)
    form = linear_form(numerator)
    if form is None:
        return None
    terms, constant = form
    common = _gcd_of_form(terms, constant, divisor)
    if common > 1:
        reduced = build_sum({term: value // common for term, value in terms.items()}, constant // common, dtype)
        return reduced // (divisor // common)
    low, _ = bounds(numerator)
    if low < 0:
        return None
    quotient_terms = {term: value // divisor for term, value in terms.items()}
    quotient_constant = constant // divisor
    if quotient_constant == 0 and not any(quotient_terms.values()):
        split = _split_by_factor(terms, constant, divisor, dtype)
        if split is None:
            return None
        factor, big, _ = split
        return big // (divisor // factor)
    remainder = build_sum({term: value % divisor for term, value in terms.items()}, constant % divisor, dtype)
    if bounds(remainder)[0] < 0:
        return None
    quotient = build_sum(quotient_terms, quotient_constant, dtype)
    if bounds(remainder)[1] < divisor:
        return quotient
    return quotient + remainder // divisor


def _remainder_by_constant(numerator: UOp, divisor_uop: UOp) -> UOp | None:
    """Simplify numerator % divisor for a constant divisor."""
    divisor = divisor_uop.arg
    dtype = numerator.dtype
    if not _is_signed_int(dtype) or divisor == 0:
        return None
    if divisor < 0:
        return numerator % -divisor
    if divisor == 1:
        return UOp.const(dtype, 0)
    low, high = bounds(numerator)
    if -divisor < low and high < divisor:
        return numerator
    if numerator.op is Ops.MOD and numerator.src[1].op is Ops.CONST and numerator.src[1].arg % divisor == 0:
        # (x % (k*d)) % d == x % d: the inner remainder keeps the sign of x and is congruent to x modulo d
        return numerator.src[0] % divisor
    form = linear_form(numerator)
    if form is None:
        return None
    terms, constant = form
    common = _gcd_of_form(terms, constant, divisor)
    if common > 1:
        reduced = build_sum({term: value // common for term, value in terms.items()}, constant // common, dtype)
        return (reduced % (divisor // common)) * common
    if low < 0:
        return None
    remainder_terms = {term: value % divisor for term, value in terms.items()}
    if remainder_terms == terms and constant % divisor == constant:
        split = _split_by_factor(terms, constant, divisor, dtype)
        if split is None:
            return None
        factor, big, rest = split
        return (big % (divisor // factor)) * factor + rest
    remainder = build_sum(remainder_terms, constant % divisor, dtype)
    if bounds(remainder)[0] < 0:
        return None
    return remainder % divisor


# ---- comparisons ----

def _sum_to_compare(left: UOp) -> tuple[dict[UOp, int], int, int] | None:
    """(terms, constant, gcd of the coefficients) of a signed integer sum compared with a constant, or None when
    there is nothing to move or divide out."""
    if not _is_signed_int(left.dtype):
        return None
    form = linear_form(left)
    if form is None or not form[0]:
        return None
    terms, constant = form
    common = math.gcd(*terms.values())
    return None if constant == 0 and common == 1 else (terms, constant, common)


def _reduced_comparison(op: Ops, terms: dict[UOp, int], common: int, dtype: DType, value: int) -> UOp | None:
    """`op(sum(terms) / common, value)`, or None when `value` does not fit `dtype`."""
    if not _DTYPE_RANGES[dtype][0] <= value <= _DTYPE_RANGES[dtype][1]:
        return None
    reduced = build_sum({term: coefficient // common for term, coefficient in terms.items()}, 0, dtype)
    return UOp(op, dtypes.bool, (reduced, _int_const(dtype, value)))


def _less_than_constant(left: UOp, limit_uop: UOp) -> UOp | None:
    """Simplify `left < limit` for a constant limit: move constants, divide out common factors, undo //."""
    dtype = left.dtype
    limit = limit_uop.arg
    if _is_signed_int(dtype) and left.op is Ops.IDIV and left.src[1].op is Ops.CONST and left.src[1].arg > 0:
        divisor = left.src[1].arg
        new_limit = limit * divisor if limit > 0 else (limit - 1) * divisor + 1
        if _DTYPE_RANGES[dtype][0] <= new_limit <= _DTYPE_RANGES[dtype][1]:
            return left.src[0] < new_limit
        return None
    found = _sum_to_compare(left)
    if found is None:
        return None
    terms, constant, common = found
    new_limit = limit - constant
    if common > 1:
        new_limit = -((-new_limit) // common)  # ceil: g*e < k  <=>  e < ceil(k / g) for g > 0
    return _reduced_comparison(Ops.CMPLT, terms, common, dtype, new_limit)


def _compare_equal_constant(root: UOp, left: UOp, value_uop: UOp) -> UOp | None:
    """Simplify `left != c` / `left == c`: move constants, divide out common factors."""
    found = _sum_to_compare(left)
    if found is None:
        return None
    terms, constant, common = found
    target = value_uop.arg - constant
    if target % common != 0:
        return UOp.const(dtypes.bool, root.op is Ops.CMPNE)
    return _reduced_comparison(root.op, terms, common, left.dtype, target // common)


# ---- boolean chains (masks) ----

def _is_not(uop: UOp) -> UOp | None:
    """x when `uop` is the boolean negation of x (x != True), else None."""
    if uop.op is Ops.CMPNE and uop.dtype == dtypes.bool and uop.src[1].op is Ops.CONST and uop.src[1].arg is True:
        return uop.src[0]
    return None


def _flatten_chain(root: UOp) -> list[UOp]:
    """The operands of a chain of the same associative op, in order."""
    operands: list[UOp] = []
    stack = [root]
    while stack:
        node = stack.pop()
        if node.op is root.op and node.dtype == root.dtype:
            stack.append(node.src[1])
            stack.append(node.src[0])
        else:
            operands.append(node)
    return operands


def _simplify_and_chain(root: UOp) -> UOp | None:
    """Simplify `a & b & ...` of bools: drop duplicates and true clauses, detect x & !x, merge x<c1 & x<c2."""
    if root.dtype != dtypes.bool:
        return None
    clauses = _flatten_chain(root)
    kept: dict[UOp, None] = {}
    upper: dict[UOp, UOp] = {}  # x -> the clause x < c with the smallest c
    lower: dict[UOp, UOp] = {}  # x -> the clause !(x < c) with the largest c
    for clause in clauses:
        low, high = bounds(clause)
        if not high:
            return UOp.const(dtypes.bool, False)
        if low:
            continue
        negated = _is_not(clause)
        if (negated is not None and negated in kept) or (clause.ne(True) in kept):
            return UOp.const(dtypes.bool, False)
        if clause.op is Ops.CMPLT and clause.src[1].op is Ops.CONST:
            subject = clause.src[0]
            previous = upper.get(subject)
            if previous is not None:
                if clause.src[1].arg < previous.src[1].arg:
                    del kept[previous]
                    upper[subject] = clause
                    kept[clause] = None
                continue
            upper[subject] = clause
        elif negated is not None and negated.op is Ops.CMPLT and negated.src[1].op is Ops.CONST:
            subject = negated.src[0]
            previous = lower.get(subject)
            if previous is not None:
                previous_limit = _is_not(previous).src[1].arg  # type: ignore[union-attr]
                if negated.src[1].arg > previous_limit:
                    del kept[previous]
                    lower[subject] = clause
                    kept[clause] = None
                continue
            lower[subject] = clause
        kept[clause] = None
    for subject, clause in upper.items():
        if subject in lower:
            low_limit = _is_not(lower[subject]).src[1].arg  # type: ignore[union-attr]
            if low_limit >= clause.src[1].arg:
                return UOp.const(dtypes.bool, False)
    if not kept:
        return UOp.const(dtypes.bool, True)
    result: UOp | None = None
    for clause in kept:
        result = clause if result is None else UOp(Ops.AND, dtypes.bool, (result, clause))
    return result if result is not root else None


def _simplify_or_chain(root: UOp) -> UOp | None:
    """Simplify `a | b | ...` of bools: drop duplicates and false clauses, detect x | !x."""
    if root.dtype != dtypes.bool:
        return None
    kept: dict[UOp, None] = {}
    for clause in _flatten_chain(root):
        low, high = bounds(clause)
        if low:
            return UOp.const(dtypes.bool, True)
        if not high:
            continue
        negated = _is_not(clause)
        if (negated is not None and negated in kept) or (clause.ne(True) in kept):
            return UOp.const(dtypes.bool, True)
        kept[clause] = None
    if not kept:
        return UOp.const(dtypes.bool, False)
    result: UOp | None = None
    for clause in kept:
        result = clause if result is None else UOp(Ops.OR, dtypes.bool, (result, clause))
    return result if result is not root else None


# ---- simplification under a valid mask ----

_VARIABLE_LIKE = (Ops.DEFINE_VAR, Ops.RANGE, Ops.SPECIAL)


def _bounds_given(valid: UOp) -> dict[UOp, tuple[int, int]] | None:
    """Tighter bounds for variables and ranges that the clauses `v < c` / `!(v < c)` of the mask `valid` imply.

    None when the mask contains no such clause; an empty interval (low > high) means the mask is never true.
    """
    found: dict[UOp, tuple[int, int]] = {}
    for clause in _flatten_chain(valid) if valid.op is Ops.AND else [valid]:
        negated = _is_not(clause)
        comparison = negated if negated is not None else clause
        if comparison.op is not Ops.CMPLT or comparison.src[1].op is not Ops.CONST:
            continue
        subject, limit = comparison.src[0], comparison.src[1].arg
        if subject.op not in _VARIABLE_LIKE or not dtypes.is_int(subject.dtype):
            continue
        low, high = found.get(subject, bounds(subject))
        found[subject] = (max(low, limit), high) if negated is not None else (low, min(high, limit - 1))
    return found or None


def simplify_given_valid(value: UOp, valid: UOp) -> UOp | None:
    """`value` simplified knowing that `valid` holds (None when that changes nothing).

    Each variable or range that a clause of `valid` bounds is replaced by a stand-in variable with the tighter
    bounds, the expression is simplified, and the stand-ins are put back.
    """
    tightened = _bounds_given(valid)
    if tightened is None or value.op is Ops.CONST:
        return None
    stand_ins: dict[UOp, UOp] = {}
    for subject, (low, high) in tightened.items():
        if low > high:
            return None
        if (low, high) != bounds(subject):
            # the fourth arg entry (the subject) keeps the stand-in in the subject's place in canonical sums
            name = subject.arg[0] if subject.op is Ops.DEFINE_VAR else f"valid:{subject.op.name}:{subject.arg!r}"
            stand_ins[subject] = UOp(Ops.DEFINE_VAR, subject.dtype, (), (name, low, high, subject))
    if not stand_ins:
        return None
    replaced = value.substitute(stand_ins)
    simplified = graph_rewrite(replaced, symbolic, name="simplify_given_valid")
    if simplified is replaced:
        return None
    restored = simplified.substitute({stand_in: subject for subject, stand_in in stand_ins.items()})
    if restored is value:
        return None
    # simplify again with the real bounds, so the result is a fixpoint of `symbolic` and the rule cannot loop
    final = graph_rewrite(restored, symbolic, name="simplify_given_valid")
    return final if final is not value else None


def _where_given_condition(condition: UOp, if_true: UOp, if_false: UOp) -> UOp | None:
    """where(valid, a, b): a simplified under valid; b when valid can never hold."""
    tightened = _bounds_given(condition)
    if tightened is None:
        return None
    if any(low > high for low, high in tightened.values()):
        return if_false
    simplified = simplify_given_valid(if_true, condition)
    return condition.where(simplified, if_false) if simplified is not None else None


def _index_given_valid(root: UOp) -> UOp | None:
    """INDEX(buffer, index, valid): the index simplified under valid."""
    if len(root.src) != 3 or root.src[2].dtype != dtypes.bool:
        return None
    simplified = simplify_given_valid(root.src[1], root.src[2])
    return root.replace(src=(root.src[0], simplified, root.src[2])) if simplified is not None else None


# ---- rule sets ----

def _fold_constants(root: UOp) -> UOp | None:
    """An ALU op on constants becomes a constant (evaluated like the generated code would)."""
    if root.dtype.count != 1 or root.op not in PYTHON_ALU:
        return None
    for source in root.src:
        if source.op is not Ops.CONST:
            return None
    try:
        value = exec_alu(root.op, root.dtype, [source.arg for source in root.src])
    except (OverflowError, ValueError, ZeroDivisionError, TypeError):
        return None  # left for the generated code to compute, as C would (a division by zero, say)
    return UOp.const(root.dtype, value)


def _fold_cast(root: UOp, value: UOp) -> UOp | None:
    """A CAST of a constant is a constant of the new dtype."""
    if root.dtype.count != 1 or value.dtype.count != 1:
        return None
    return UOp.const(root.dtype, value.arg)


def _is_int_or_bool(dtype: DType) -> bool:
    return dtypes.is_int(dtype) or dtypes.is_bool(dtype)


def _fold_by_bounds(root: UOp) -> UOp | None:
    """An integer or bool ALU node whose bounds pin it to one value becomes that constant."""
    if root.dtype.count != 1 or not _is_int_or_bool(root.dtype):
        return None
    low, high = bounds(root)
    if low != high:
        return None
    return _int_const(root.dtype, low) if root.dtype in _SIGNED_INTS else UOp.const(root.dtype, low)


def _same_if_not_float(x: UOp) -> UOp | None:
    """x + 0 is x, except for floats where -0.0 + 0 is +0.0."""
    return None if dtypes.is_float(x.dtype) else x


def _zero_if_int(x: UOp) -> UOp | None:
    return x.const_like(0) if _is_int_or_bool(x.dtype) else None


def _maximum_by_bounds(x: UOp, y: UOp) -> UOp | None:
    """max(x, y) is x when x can never be below y."""
    if not _is_int_or_bool(x.dtype):
        return None
    if bounds(x)[0] >= bounds(y)[1]:
        return x
    if bounds(y)[0] >= bounds(x)[1]:
        return y
    return None


def _where_of_not(condition: UOp, if_true: UOp, if_false: UOp) -> UOp | None:
    negated = _is_not(condition)
    return negated.where(if_false, if_true) if negated is not None else None


_const = UPat.cvar
_any = UPat.var
_bool = dtypes.bool

symbolic_simple = PatternMatcher([
    # constant folding
    (UPat(GroupOp.ALU, name="root"), _fold_constants),
    (UPat(Ops.CAST, name="root", src=(UPat(Ops.CONST, name="value"),)), _fold_cast),
    # identities
    (_any("x") + 0, _same_if_not_float),
    (_any("x") * 1, lambda x: x),
    (_any("x") * 0, _zero_if_int),
    (_any("x") // 1, lambda x: x),
    (_any("x") % 1, _zero_if_int),
    (_any("x") - 0, _same_if_not_float),
    (UPat(Ops.NEG, src=(UPat(Ops.NEG, src=(_any("x"),)),)), lambda x: x),
    (UPat(Ops.IDIV, src=(_any("x"), UPat.const(None, -1))), lambda x: -x if dtypes.is_int(x.dtype) else None),
    # booleans
    (_any("x", _bool) & True, lambda x: x),
    (_any("x", _bool) & False, lambda x: x.const_like(False)),
    (_any("x", _bool) | False, lambda x: x),
    (_any("x", _bool) | True, lambda x: x.const_like(True)),
    (_any("x", _bool) ^ False, lambda x: x),
    (_any("x", _bool).ne(False), lambda x: x),
    (_any("x", _bool).eq(True), lambda x: x),
    (UPat(Ops.CMPNE, src=(UPat(Ops.CMPNE, src=(_any("x", _bool), UPat.const(_bool, True))),
                          UPat.const(_bool, True))), lambda x: x),
    # the same operand twice
    (UPat(Ops.AND, src=(_any("x"), _any("x"))), lambda x: x),
    (UPat(Ops.OR, src=(_any("x"), _any("x"))), lambda x: x),
    (UPat(Ops.MAX, src=(_any("x"), _any("x"))), lambda x: x),
    (UPat(Ops.CMPLT, src=(_any("x"), _any("x"))), lambda x: UOp.const(_bool, False)
     if _is_int_or_bool(x.dtype) else None),
    (UPat(Ops.CMPNE, src=(_any("x"), _any("x"))), lambda x: UOp.const(_bool, False)
     if _is_int_or_bool(x.dtype) else None),
    (UPat(Ops.CMPEQ, src=(_any("x"), _any("x"))), lambda x: UOp.const(_bool, True)
     if _is_int_or_bool(x.dtype) else None),
    # where
    (UPat(Ops.WHERE, src=(UPat.var("condition"), _any("x"), _any("x"))), lambda condition, x: x),
    (UPat(Ops.WHERE, src=(UPat.cvar("condition"), _any("a"), _any("b"))),
     lambda condition, a, b: a if condition.arg else b),
])


symbolic = symbolic_simple + PatternMatcher([
    # bounds decide the value
    (UPat(GroupOp.ALU, name="root"), _fold_by_bounds),
    # canonical linear sums (signed ints): regrouping, constants last, like terms combined, x + -1*x cancels
    (UPat((Ops.ADD, Ops.SUB, Ops.NEG, Ops.MUL), name="root"), _normalize_sum),
    # division and remainder by constants
    (UPat(Ops.IDIV, src=(_any("numerator"), UPat.cvar("divisor_uop"))), _divide_by_constant),
    (UPat(Ops.MOD, src=(_any("numerator"), UPat.cvar("divisor_uop"))), _remainder_by_constant),
    # comparisons
    (UPat(Ops.CMPLT, src=(_any("left"), UPat.cvar("limit_uop"))), _less_than_constant),
    (UPat((Ops.CMPNE, Ops.CMPEQ), src=(_any("left"), UPat.cvar("value_uop")), name="root"),
     _compare_equal_constant),
    (UPat(Ops.MAX, src=(_any("x"), _any("y"))), _maximum_by_bounds),
    # where and masks
    (UPat(Ops.WHERE, src=(_any("condition"), UPat.const(_bool, True), UPat.const(_bool, False))),
     lambda condition: condition),
    (UPat(Ops.WHERE, src=(_any("condition"), UPat.const(_bool, False), UPat.const(_bool, True))),
     lambda condition: condition.ne(True)),
    (UPat(Ops.WHERE, src=(_any("condition", _bool), _any("if_true"), _any("if_false"))), _where_of_not),
    (UPat(Ops.WHERE, src=(_any("condition", _bool), _any("if_true"), _any("if_false"))), _where_given_condition),
    (UPat(Ops.INDEX, name="root"), _index_given_valid),
    (UPat(Ops.AND, name="root"), _simplify_and_chain),
    (UPat(Ops.OR, name="root"), _simplify_or_chain),
])


def simplify(uop: UOp) -> UOp:
    """`uop` rewritten with the `symbolic` rules to a fixpoint."""
    return graph_rewrite(uop, symbolic, name="simplify")


def simplify_indices(root: UOp) -> UOp:
    """`root` with each INDEX (address and validity mask) simplified by the `symbolic` rules, values left as built.

    Only addresses are simplified: rewriting values could, for instance, drop clauses of a load's mask that an
    enclosing where() implies, which would turn a masked load into an out-of-bounds one.

    An address that holds loads (a gather's or a scatter's, whose coordinates are read from memory) is simplified
    with each of those loads stood in for by an opaque leaf, then the loads (their own INDEXes simplified first, in
    toposort order) are put back: the where() that guards such a load inside the address is a value too.
    """
    mapping: dict[UOp, UOp] = {}
    for node in root.toposort:
        if node.op is not Ops.INDEX:
            continue
        loads = [inner for inner in node.toposort if inner.op is Ops.LOAD]
        if not loads:
            mapping[node] = simplify(node)
            continue
        stand_ins = {load: UOp(Ops.NOOP, load.dtype, (), ("a load inside an address", position))
                     for position, load in enumerate(loads)}
        simplified = simplify(node.substitute(stand_ins))
        mapping[node] = simplified.substitute({stand_in: load.substitute(mapping)
                                               for load, stand_in in stand_ins.items()})
    return root.substitute(mapping)


# ---- folding while building: exact rules applied to one new node (its sources are already folded) ----

def _constant_operand_last(root: UOp) -> UOp | None:
    """c + x and c * x become x + c and x * c (the other rules look for constants on the right)."""
    left, right = root.src
    if left.op is Ops.CONST and right.op is not Ops.CONST:
        return UOp(root.op, root.dtype, (right, left), root.arg)
    return None


def _regroup_constants(root: UOp, inner: UOp, x: UOp, first: UOp, second: UOp) -> UOp | None:
    """(x + c1) + c2 -> x + (c1 + c2), and the same for *, for scalar integers (exact with wrapping)."""
    if inner.op is not root.op or root.dtype.count != 1 or not dtypes.is_int(root.dtype):
        return None
    combined = _fold_constants(UOp(root.op, root.dtype, (first, second)))
    return None if combined is None else fold_node(UOp(root.op, root.dtype, (x, combined)))


def _lanes_of_vector(root: UOp, vector: UOp) -> UOp:
    """GEP of a VECTORIZE picks the lanes' sources."""
    picked = tuple(vector.src[lane] for lane in root.arg)
    return picked[0] if len(picked) == 1 else UOp(Ops.VECTORIZE, root.dtype, picked)


def _vector_of_own_lanes(root: UOp) -> UOp | None:
    """VECTORIZE(GEP(v, 0), GEP(v, 1), ...) over all the lanes of v, in order, is v."""
    sources = root.src
    if not sources or any(source.op is not Ops.GEP or len(source.arg) != 1 for source in sources):
        return None
    base = sources[0].src[0]
    if all(source.src[0] is base for source in sources) and \
            tuple(source.arg[0] for source in sources) == tuple(range(base.dtype.count)):
        return base
    return None


def _index_without_mask(root: UOp, buffer: UOp, index: UOp, valid: UOp) -> UOp | None:
    """INDEX(buffer, index, True) is INDEX(buffer, index)."""
    return UOp(Ops.INDEX, root.dtype, (buffer, index), root.arg) if valid.arg else None


def _load_never_valid(root: UOp, address: UOp) -> UOp | None:
    """A LOAD whose mask is the constant False reads its alternative (or zero)."""
    if len(address.src) != 3 or address.src[2].op is not Ops.CONST or address.src[2].arg:
        return None
    return root.src[1] if len(root.src) > 1 else UOp.const(root.dtype, 0)


def _quotient_or_remainder_by_bounds(root: UOp, x: UOp, divisor: UOp) -> UOp | None:
    """x // d is 0 and x % d is x when 0 <= x < d (bounds only, so it stays cheap for one node)."""
    if not _is_signed_int(root.dtype) or not isinstance(divisor.arg, int) or divisor.arg <= 0:
        return None
    low, high = bounds(x)
    if low < 0 or high >= divisor.arg:
        return None
    return x if root.op is Ops.MOD else _int_const(root.dtype, 0)


folding = symbolic_simple + PatternMatcher([
    (UPat((Ops.ADD, Ops.MUL), name="root", src=(_any(), _any())), _constant_operand_last),
    (UPat((Ops.ADD, Ops.MUL), name="root", src=(UPat((Ops.ADD, Ops.MUL), name="inner",
                                                     src=(_any("x"), UPat.cvar("first"))), UPat.cvar("second"))),
     _regroup_constants),
    (UPat(Ops.GEP, name="root", src=(UPat(Ops.VECTORIZE, name="vector"),)), _lanes_of_vector),
    (UPat(Ops.GEP, name="root", src=(_any("x"),)), lambda root, x: x if x.dtype.count == 1 and root.arg == (0,)
     else None),
    (UPat(Ops.VECTORIZE, name="root"), _vector_of_own_lanes),
    (UPat(Ops.INDEX, name="root", src=(_any("buffer"), _any("index"), UPat.cvar("valid"))), _index_without_mask),
    (UPat(Ops.LOAD, name="root", src=(UPat(Ops.INDEX, name="address"),), allow_any_len=True), _load_never_valid),
])
"""The exact rules (no bounds): `symbolic_simple`, constants moved right and regrouped, lanes of vectors picked,
masks known to be true or false removed. What codegen applies to every node it builds or substitutes."""

index_folding = folding + PatternMatcher([
    (UPat((Ops.IDIV, Ops.MOD), name="root", src=(_any("x"), UPat.cvar("divisor"))), _quotient_or_remainder_by_bounds),
])
"""`folding` plus x // d -> 0 and x % d -> x where the bounds of x lie in [0, d): what the scheduler applies to each
index expression as it builds one."""


def fold_node(node: UOp, rules: PatternMatcher = folding) -> UOp:
    """`node` rewritten at its root by `rules` until none applies; its sources are taken as already folded."""
    rewrite = rules.rewrite
    while (replacement := rewrite(node)) is not None:
        node = replacement
    return node


def fold(root: UOp) -> UOp:
    """`root` with the `folding` rules applied everywhere (exact: constants folded, trivial identities removed)."""
    return graph_rewrite(root, folding, name="fold")


def linear_terms(node: UOp) -> tuple[dict[UOp, int], int]:
    """`node` as ({term: non-zero coefficient}, constant) however long the sum (see `linear_form`)."""
    form = linear_form(node, limit=None)
    assert form is not None
    terms, constant = form
    return {term: coefficient for term, coefficient in terms.items() if coefficient != 0}, constant


def constant_difference(first: UOp, second: UOp) -> int | None:
    """`second - first` when it is a provable integer constant (their linear forms differ by a constant), else None."""
    return constant_differences(first, (second,))[0]


def _base_and_offset(node: UOp) -> tuple[UOp | None, int]:
    """(x, c) for `x + c` with an integer constant c, (None, c) for the constant c itself, else (node, 0)."""
    if node.op is Ops.ADD:
        offset = node.src[1]
        if offset.op is Ops.CONST and offset.arg.__class__ is int:
            return node.src[0], offset.arg
    elif node.op is Ops.CONST and node.arg.__class__ is int:
        return None, node.arg
    return node, 0


def constant_differences(first: UOp, others: Sequence[UOp]) -> list[int | None]:
    """`constant_difference(first, other)` for each of `others`, the linear form of `first` built at most once.

    Folded addresses of neighbouring lanes are mostly `x + c` and `x + d` over one node x: their difference is read
    off the two constants, without walking x (half of the lane comparisons when codegen packs vector stores)."""
    first_base, first_offset = _base_and_offset(first)
    first_form: tuple[dict[UOp, int], int] | None = None
    differences: list[int | None] = []
    for other in others:
        base, offset = _base_and_offset(other)
        if base is first_base:
            differences.append(offset - first_offset)
            continue
        if first_form is None:
            first_form = linear_terms(first)
        terms, constant = linear_terms(other)
        differences.append(constant - first_form[1] if terms == first_form[0] else None)
    return differences


# UOp's methods (simplify, ssimplify, variable, vmin/vmax) call these through the table in tinycore.uop.uop
upper.simplify, upper.ssimplify, upper.variable, upper.bounds = simplify, ssimplify, Variable, bounds
