"""Combining stores: a scatter reduction's store, made atomic where the renderer can, ordered where it cannot.

The lowering writes a reducing SCATTER as `STORE(INDEX(target, address), value)` with the reduce ("add", "mul",
"max", "min") as the STORE's arg: combine `value` into the element at the address. Its iteration axes that may repeat
an address are SEQUENTIAL. Before any optimization, each kernel gets one of two forms:

- atomic: when the renderer lists the stored dtype in `atomic_dtypes`, the store keeps its arg (the renderer emits an
  atomic read-modify-write) and the SEQUENTIAL axes become LOOP axes, split across workers or work-items like any
  other. Every value counts; the order in which float values are combined may differ between runs.
- ordered: otherwise (or where the atomic form would be slower, see ATOMIC_MIN_WORKERS) the store becomes
  `STORE(address, combine(LOAD(address), value))` and the SEQUENTIAL axes stay in order inside one worker (exact and
  deterministic).
"""
from __future__ import annotations

from math import prod

from tinycore.codegen.opt import default_worker_count
from tinycore.codegen.optimize import MIN_THREAD_WORK
from tinycore.plugins.contract import RendererContract
from tinycore.uop.axis import AxisType, axis_kind, range_size
from tinycore.uop.indexing import combine_scatter
from tinycore.uop.ops import Ops
from tinycore.uop.patterns import PatternMatcher, UPat, graph_rewrite
from tinycore.uop.uop import UOp

ATOMIC_MIN_WORKERS = 4
"""On renderers that split kernels across CPU workers (`has_threads`), the fewest workers for which a scatter reduction
takes the atomic form. On one worker the compare-exchange loop costs about 3x the ordered loop (one million float32
additions into 1,000 and into 1,000,000 elements, gcc on x86-64: 2.6 ms against 0.9 ms, 28 ms against 10 ms), so with
fewer workers than this the ordered form is faster. Kernels too small to be split (MIN_THREAD_WORK) stay ordered."""


def combines_atomically(renderer: RendererContract, store: UOp) -> bool:
    """True when the combining `store` can be an atomic update on `renderer` (a scalar of a declared dtype)."""
    value = store.src[1]
    return store.arg is not None and value.dtype.count == 1 and value.dtype in renderer.atomic_dtypes


def _ordered_store(ctx: set[UOp], store: UOp) -> UOp | None:
    """A combining store of `ctx` (those that stay ordered) as a load, the combination and a plain store."""
    if store not in ctx:
        return None
    address, value = store.src[0], store.src[1]
    return address.store(combine_scatter(store.arg, address.load(), value))


ordered_store_rules = PatternMatcher([(UPat(Ops.STORE, name="store"), _ordered_store)])
"""The combining stores of the context (a set) in their ordered form."""

parallel_axis_rules = PatternMatcher([
    (UPat(Ops.RANGE, name="axis"), lambda axis: axis.replace(arg=(axis.arg[0], AxisType.LOOP))
     if axis_kind(axis) is AxisType.SEQUENTIAL else None),
])
"""SEQUENTIAL axes as LOOP axes (once every combining store is atomic, none needs its order)."""


def resolve_combining_stores(ast: UOp, renderer: RendererContract) -> UOp:
    """`ast` (a kernel's SINK of STOREs) with every combining store made atomic or ordered (see the module)."""
    combining = [store for store in ast.src if store.op is Ops.STORE and store.arg is not None]
    if not combining:
        return ast
    pays = _atomics_pay(ast, renderer)
    ordered = {store for store in combining if not (pays and combines_atomically(renderer, store))}
    if ordered:
        return graph_rewrite(ast, ordered_store_rules, ordered, name="ordered combining stores")
    # a plain store under a SEQUENTIAL axis may repeat an address (last write wins): its order must stay
    if any(store.arg is None and _has_sequential(store) for store in ast.src):
        return ast
    return graph_rewrite(ast, parallel_axis_rules, name="parallel atomic axes")


def _has_sequential(store: UOp) -> bool:
    return any(node.op is Ops.RANGE and axis_kind(node) is AxisType.SEQUENTIAL for node in store.toposort)


def _atomics_pay(ast: UOp, renderer: RendererContract) -> bool:
    """False where the atomic form would run slower than the ordered one (see ATOMIC_MIN_WORKERS)."""
    if not renderer.has_threads:
        return True
    work = prod(range_size(node) or 1 for node in ast.toposort if node.op is Ops.RANGE)
    return default_worker_count() >= ATOMIC_MIN_WORKERS and work >= MIN_THREAD_WORK
