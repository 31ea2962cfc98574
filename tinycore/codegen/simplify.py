"""Light simplification used by codegen: constant folding, identities, lane picks, and linear forms of indices.

The full symbolic engine (tinycore.uop.symbolic, reached through `UOp.simplify` when present) does the index algebra
with bounds; the folding here keeps generated code small after ranges are replaced by constants and is always safe.
"""
from __future__ import annotations

from tinycore.dtype import dtypes
from tinycore.uop.ops import GroupOp, Ops
from tinycore.uop.uop import UOp, exec_alu


def _const_value(node: UOp) -> object:
    return node.arg if node.op is Ops.CONST else None


def _cast_constant(value: object, node: UOp) -> object:
    if dtypes.is_float(node.dtype):
        return float(value)  # type: ignore[arg-type]
    if dtypes.is_bool(node.dtype):
        return bool(value)
    return int(value)  # type: ignore[call-overload]


_ALU_VALUES = frozenset(op._value_ for op in GroupOp.ALU)
_COMMUTING_VALUES = frozenset((Ops.ADD._value_, Ops.MUL._value_))
_OTHER_VALUES = frozenset(op._value_ for op in (Ops.CAST, Ops.GEP, Ops.VECTORIZE, Ops.INDEX, Ops.LOAD, Ops.WHERE,
                                                Ops.AND))
# Ops members hash through Python code; the hot paths below test `op._value_` (a plain int) instead.


def fold_node(node: UOp) -> UOp:
    """One node simplified, assuming its sources are already simplified."""
    op = node.op
    value = op._value_
    if value in _ALU_VALUES:
        return _fold_alu(node)
    if value in _OTHER_VALUES:
        return _fold_other(node)
    return node


def _fold_alu(node: UOp) -> UOp:
    op, src, dtype = node.op, node.src, node.dtype
    CONST = Ops.CONST  # noqa: N806 - a local alias of the enum member
    if dtype.count == 1 and src:
        if all(source.op is CONST for source in src):
            try:
                return UOp.const(dtype, exec_alu(op, dtype, [source.arg for source in src]))
            except (OverflowError, ValueError, ZeroDivisionError, TypeError):
                return node
    if op is Ops.WHERE:
        return src[1 if src[0].arg else 2] if src[0].op is CONST else node
    if op is Ops.AND and dtype == dtypes.bool:
        left, right = src
        if right.op is CONST:
            return left if right.arg else right
        if left.op is CONST:
            return right if left.arg else left
        return node
    if len(src) != 2:
        return node
    if op._value_ in _COMMUTING_VALUES and src[0].op is CONST and src[1].op is not CONST:
        src = (src[1], src[0])
        node = UOp(op, dtype, src, node.arg)
    if dtype.count != 1 or dtypes.is_float(dtype):
        return node
    left, right = src
    if right.op is not CONST:
        return node
    right_value = right.arg
    if op is Ops.ADD:
        if right_value == 0:
            return left
    elif op is Ops.MUL:
        if right_value == 1:
            return left
        if right_value == 0:
            return right
    elif op is Ops.IDIV:
        return left if right_value == 1 else node
    elif op is Ops.MOD:
        return UOp.const(dtype, 0) if right_value == 1 else node
    else:
        return node
    # (x + c1) + c2 -> x + (c1 + c2); (x * c1) * c2 -> x * (c1 * c2)
    if left.op is op and left.src[1].op is CONST:
        combined = fold_node(UOp(op, dtype, (left.src[1], right)))
        return fold_node(UOp(op, dtype, (left.src[0], combined)))
    return node


def _fold_other(node: UOp) -> UOp:
    op, src = node.op, node.src
    if op is Ops.CAST:
        if src[0].op is Ops.CONST and node.dtype.count == 1:
            return UOp.const(node.dtype, _cast_constant(src[0].arg, node))
        return node
    if op is Ops.GEP:
        source = src[0]
        if source.op is Ops.VECTORIZE:
            picked = tuple(source.src[lane] for lane in node.arg)
            return picked[0] if len(picked) == 1 else UOp(Ops.VECTORIZE, node.dtype, picked)
        if source.dtype.count == 1 and node.arg == (0,):
            return source
        return node
    if op is Ops.VECTORIZE:
        if all(s.op is Ops.GEP and len(s.arg) == 1 for s in src):
            base = src[0].src[0]
            if all(s.src[0] is base for s in src) and tuple(s.arg[0] for s in src) == tuple(range(base.dtype.count)):
                return base
        return node
    if op is Ops.INDEX:
        if len(src) == 3 and src[2].op is Ops.CONST and src[2].arg:
            return UOp(Ops.INDEX, node.dtype, src[:2], node.arg)
        return node
    if op is Ops.LOAD:
        if src[0].op is Ops.INDEX and len(src[0].src) == 3 and src[0].src[2].op is Ops.CONST and not src[0].src[2].arg:
            return src[1] if len(src) > 1 else UOp.const(node.dtype, 0)
        return node
    return _fold_alu(node) if op._value_ in _ALU_VALUES else node


def fold(root: UOp) -> UOp:
    """`root` with constant subexpressions folded and trivial identities removed (exact, no bounds used)."""
    memo: dict[UOp, UOp] = {}
    for node in root.toposort:
        new_src = tuple(memo[source] for source in node.src)
        rebuilt = node if new_src == node.src else node.replace(src=new_src)
        memo[node] = fold_node(rebuilt)
    return memo[root]


def dependents(root: UOp, keys: frozenset[UOp]) -> tuple[UOp, ...]:
    """The nodes of `root` that depend on any of `keys` (keys excluded), sources before users."""
    cache = root.__dict__.setdefault("_codegen_dependents", {})
    found = cache.get(keys)
    if found is None:
        affected: set[UOp] = set(keys)
        order = []
        for node in root.toposort:
            if node not in keys and any(source in affected for source in node.src):
                affected.add(node)
                order.append(node)
        found = cache[keys] = tuple(order)
    return found


def substitute_fold(root: UOp, mapping: dict[UOp, UOp]) -> UOp:
    """`root` with the keys of `mapping` replaced by their values, folding only the nodes that changed."""
    if root in mapping:
        return mapping[root]
    memo: dict[UOp, UOp] = dict(mapping)
    get = memo.get
    for node in dependents(root, frozenset(mapping)):
        new_src = tuple([get(source, source) for source in node.src])
        memo[node] = node if new_src == node.src else fold_node(UOp(node.op, node.dtype, new_src, node.arg))
    return get(root, root)


def simplify(root: UOp) -> UOp:
    """`root` simplified: folding here, then the symbolic engine's rules where the IR provides them."""
    folded = fold(root)
    symbolic = getattr(folded, "simplify", None)
    return symbolic() if callable(symbolic) else folded


def simplify_indices(root: UOp) -> UOp:
    """`root` with the index and validity expressions of every INDEX simplified by the symbolic rules."""
    memo: dict[UOp, UOp] = {}
    for node in root.toposort:
        new_src = tuple(memo[source] for source in node.src)
        if node.op is Ops.INDEX and len(new_src) > 1:
            new_src = new_src[:1] + tuple(simplify(source) for source in new_src[1:])
        memo[node] = node if new_src == node.src else node.replace(src=new_src)
    return memo[root]


LinearForm = tuple[dict[UOp, int], int]


def linear_form(node: UOp) -> LinearForm:
    """`node` as sum(coefficient * atom) + constant, where atoms are the non-linear parts (compared by identity)."""
    if node.op is Ops.CONST and not isinstance(node.arg, float):
        return {}, int(node.arg)
    if node.op is Ops.ADD:
        left_terms, left_const = linear_form(node.src[0])
        right_terms, right_const = linear_form(node.src[1])
        terms = dict(left_terms)
        for atom, coefficient in right_terms.items():
            terms[atom] = terms.get(atom, 0) + coefficient
        return {a: c for a, c in terms.items() if c != 0}, left_const + right_const
    if node.op is Ops.SUB:
        left_terms, left_const = linear_form(node.src[0])
        right_terms, right_const = linear_form(node.src[1])
        terms = dict(left_terms)
        for atom, coefficient in right_terms.items():
            terms[atom] = terms.get(atom, 0) - coefficient
        return {a: c for a, c in terms.items() if c != 0}, left_const - right_const
    if node.op is Ops.NEG:
        terms, constant = linear_form(node.src[0])
        return {a: -c for a, c in terms.items()}, -constant
    if node.op is Ops.MUL:
        for factor, other in ((node.src[1], node.src[0]), (node.src[0], node.src[1])):
            if factor.op is Ops.CONST and not isinstance(factor.arg, float):
                terms, constant = linear_form(other)
                scale = int(factor.arg)
                return {a: c * scale for a, c in terms.items() if c * scale != 0}, constant * scale
    return {node: 1}, 0


def constant_difference(first: UOp, second: UOp) -> int | None:
    """`second - first` when it is a provable integer constant, else None."""
    first_terms, first_const = linear_form(first)
    second_terms, second_const = linear_form(second)
    if first_terms != second_terms:
        return None
    return second_const - first_const
