"""Row values computed once: a reduce's loop stores the value it accumulates into the output, the row's loop reads it.

In a kernel whose reduce runs once per row before the loop over the row's outputs (docs/architecture.md, "Fusion, row
reduces"), the output loop often needs again, element by element, the value the reduce loop accumulated: softmax
sums exp(x - max) over the row and then divides exp(x - max) by that sum. When that value is expensive, the reduce
loop also stores it into the output buffer at the element the output loop will write, and the output loop loads it
back instead of computing it again (the row is in cache by then). The loaded value is the stored one bit for bit, so
results do not change.

The rewrite is made on the kernel AST before opts and the opts chosen for the original AST are then applied to the
rewritten one (same axes, same positions), so heuristics and BEAM see one kernel and results stay comparable.

A division by a per-row reduce (softmax's sum, a norm) becomes a multiplication by its reciprocal, computed once per
row: a vector division costs several multiplies' time in the row's loop. The result may differ from the correctly
rounded quotient by an ulp, well inside the rounding the reduce itself brings (its summation order is the codegen's).
"""
from __future__ import annotations

from dataclasses import dataclass

from tinycore.codegen.opt import Kernel, KernelOptError, OptOps
from tinycore.dtype import PtrDType, dtypes
from tinycore.uop.axis import axis_id, range_dependencies, range_size
from tinycore.uop.ops import GroupOp, Ops
from tinycore.uop.patterns import PatternMatcher, UPat, graph_rewrite
from tinycore.uop.uop import UOp

TRANSCENDENTAL_COST = 16
"""The cost of an exp2, log2, sin or sqrt in ALU ops: each is a polynomial and a range reduction on the CPU."""
DIVISION_COST = 4
"""The cost of a division or reciprocal in ALU ops (a vector division takes several multiplies' time)."""
MIN_SHARED_COST = 8
"""A value is stored and loaded back when computing it again costs at least this many ALU ops: a store in the reduce
loop and a load from cache cost about one or two."""
SAFE_OPTS = (OptOps.UPCAST, OptOps.UNROLL, OptOps.ACCUMULATORS, OptOps.THREAD)
"""Opts that keep the output loop inside the loops the reduce depends on and write each element once (NEST and BLOCK
can move the row's loop outside the reduce's, SHIFTED_UPCAST writes some elements twice)."""


@dataclass(frozen=True)
class SharedValue:
    """One rewrite: `column` is the output loop that reads back what the reduce loop over `reduced` stored."""

    column: UOp
    reduced: UOp


def recompute_cost(value: UOp, loop: UOp, deps: dict[UOp, frozenset[UOp]]) -> int:
    """ALU ops of `value` that vary along `loop` (the rest is computed once, outside the loop), transcendentals and
    divisions weighted by what they cost on the CPU."""
    cost = 0
    for node in value.toposort:
        if node.op not in GroupOp.ALU or loop not in deps.get(node, frozenset()):
            continue
        if node.op in (Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.POW):
            cost += TRANSCENDENTAL_COST
        elif node.op in (Ops.FDIV, Ops.RECIPROCAL, Ops.IDIV, Ops.MOD):
            cost += DIVISION_COST
        else:
            cost += 1
    return cost


def share_reduced_values(ast: UOp) -> tuple[UOp, list[SharedValue]]:
    """`ast` with, for each plain store whose value divides (or otherwise combines) a per-row reduce with the same
    expensive expression the reduce accumulates, that expression stored into the output inside the reduce's loop and
    loaded back by the output loop. Returns the AST unchanged and an empty list when nothing applies.

    Conditions, per store: its buffer is written by no other store and read nowhere in the kernel (an in-place
    assign reads its target); the store is unmasked; its innermost output range (the column) has the size of the
    reduce range; the reduce depends on exactly the store's other output ranges (it runs once per row, before the
    column loop); the expression has the buffer's element type and costs at least MIN_SHARED_COST.
    """
    reduce_ranges = {r for node in ast.toposort if node.op is Ops.REDUCE for r in node.src[1:]}
    deps = range_dependencies(ast)
    written: dict[UOp, int] = {}
    for store in ast.src:
        if store.src[0].op is Ops.INDEX:
            written[store.src[0].src[0]] = written.get(store.src[0].src[0], 0) + 1
    loaded = {node.src[0].src[0] for node in ast.toposort if node.op is Ops.LOAD and node.src[0].op is Ops.INDEX}
    stores: list[UOp] = []
    extra: list[UOp] = []
    shared: list[SharedValue] = []
    for store in ast.src:
        rewritten = _share_in_store(store, reduce_ranges, deps, written, loaded)
        if rewritten is None:
            stores.append(store)
            continue
        new_store, stored, info = rewritten
        stores.append(new_store)
        extra.append(stored)
        shared.append(info)
    if not shared:
        return ast, []
    return UOp(Ops.SINK, ast.dtype, tuple(stores + extra), ast.arg), shared


def _share_in_store(store: UOp, reduce_ranges: set[UOp], deps: dict[UOp, frozenset[UOp]], written: dict[UOp, int],
                    loaded: set[UOp]) -> tuple[UOp, UOp, SharedValue] | None:
    """(the store reading the value back, the store inside the reduce loop, what was shared), or None."""
    index, value = store.src[0], store.src[1]
    if store.arg is not None or index.op is not Ops.INDEX or len(index.src) != 2:
        return None
    buffer = index.src[0]
    if buffer.op is not Ops.DEFINE_GLOBAL or written.get(buffer) != 1 or buffer in loaded:
        return None
    outputs = {node for node in store.toposort if node.op is Ops.RANGE and node not in reduce_ranges}
    if not outputs or deps[index] != outputs:
        return None
    column = max(outputs, key=axis_id)
    rows = outputs - {column}
    element = index.dtype.base if isinstance(index.dtype, PtrDType) else index.dtype
    nodes = set(value.toposort)
    for reduce in value.toposort:
        if reduce.op is not Ops.REDUCE or len(reduce.src) != 2 or deps[reduce] != rows:
            continue
        reduced = reduce.src[1]
        size = range_size(reduced)
        if size is None or size != range_size(column):
            continue
        for candidate in reversed(reduce.src[0].toposort):
            if reduced not in deps[candidate] or candidate.dtype != element or candidate.op not in GroupOp.ALU:
                continue
            twin = candidate.substitute({reduced: column})
            if twin not in nodes or recompute_cost(twin, column, range_dependencies(twin)) < MIN_SHARED_COST:
                continue
            stored = buffer.index(index.src[1].substitute({column: reduced})).store(candidate)
            reread = index.load()
            return index.store(value.substitute({twin: reread})), stored, SharedValue(column, reduced)
    return None


def _reciprocal_divisor(ctx: dict[UOp, frozenset[UOp]], node: UOp, dividend: UOp, divisor: UOp) -> UOp | None:
    """dividend / divisor as dividend * (1 / divisor) where the divisor holds a REDUCE and varies along fewer loops
    than the dividend. `ctx` holds the ranges each node depends on; a node a rule rebuilt depends on the same ranges
    as the one it replaced, so it is looked up once, when first met."""
    if not dtypes.is_float(node.dtype) or not any(inner.op is Ops.REDUCE for inner in divisor.toposort):
        return None
    for operand in (dividend, divisor):
        if operand not in ctx:
            ctx.update(range_dependencies(operand))
    return dividend * divisor.alu(Ops.RECIPROCAL) if ctx[divisor] < ctx[dividend] else None


reciprocal_divisor_rules = PatternMatcher([
    (UPat(Ops.FDIV, src=(UPat.var("dividend"), UPat.var("divisor")), name="node"), _reciprocal_divisor),
])
"""FDIV by a per-row REDUCE as a multiplication by its reciprocal (context: range_dependencies of the kernel)."""


def reciprocal_row_divisors(ast: UOp) -> UOp:
    """`ast` with every float division whose divisor holds a REDUCE and varies along fewer loops than the dividend
    (constant along the row the dividend runs over) written as a multiplication by the divisor's reciprocal."""
    return graph_rewrite(ast, reciprocal_divisor_rules, range_dependencies(ast), name="reciprocal row divisors")


def share_row_values(kernel: Kernel) -> tuple[Kernel, list[str]]:
    """`kernel` rebuilt from its original AST with row values shared (share_reduced_values) and the same opts, when
    the rewrite applies and every opt keeps it correct, and with per-row divisors as reciprocals
    (reciprocal_row_divisors); a note for each rewrite made."""
    notes = []
    rewritten, shared = share_reduced_values(kernel.original_ast)
    result = _with_opts(rewritten, kernel, {axis_id(info.column) for info in shared}) if shared else None
    if result is None:
        result = kernel
    else:
        notes.append("row values stored by the reduce loop, read back by the output loop")
    divided = reciprocal_row_divisors(result.ast)
    if divided is not result.ast:
        result.ast = divided
        notes.append("row divisors as reciprocals")
    return result, notes


def _with_opts(ast: UOp, kernel: Kernel, columns: set[int]) -> Kernel | None:
    """A Kernel of `ast` with `kernel`'s opts applied; None when an opt could let workers or blocks write an element
    of the `columns` axes twice (or does not apply)."""
    if columns and any(opt.op not in SAFE_OPTS for opt in kernel.applied):
        return None
    result = Kernel(ast)
    try:
        for opt in kernel.applied:
            if opt.op is OptOps.THREAD and axis_id(result.axes[opt.axis]) in columns:
                # workers splitting a row would each store the whole row's values over the others' results
                return None
            result.apply_opt(opt)
    except KernelOptError:
        return None
    return result
