"""Combining stores (scatter reductions): the atomic form where the renderer declares atomics for the dtype, the
ordered form (load, combine, store, repeatable axes in order) elsewhere; both run against numpy's ufunc.at."""
from __future__ import annotations

import numpy as np

from tinycore import Tensor, dtypes
from tinycore.codegen import linearize
from tinycore.codegen.atomics import resolve_combining_stores
from tinycore.codegen.interpreter import run_linear
from tinycore.dtype import DType
from tinycore.plugins.contract import RendererContract
from tinycore.schedule import create_schedule
from tinycore.uop.axis import AxisType, axis_kind
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp


class AtomicGPU(RendererContract):
    """A renderer without CPU workers that declares float32 atomics."""

    has_threads = False
    has_local = False
    atomic_dtypes: frozenset[DType] = frozenset({dtypes.float32})


class NoAtomics(AtomicGPU):
    """The same renderer without atomics."""

    atomic_dtypes: frozenset[DType] = frozenset()


def _scatter_ast(count: int, reduce: str) -> UOp:
    target = Tensor.empty(37)
    added = target.scatter_reduce(0, Tensor.empty(count, dtype=dtypes.int32), Tensor.empty(count), reduce)
    return [item for item in create_schedule([added.uop]).items if not item.is_copy][-1].ast


def _kinds(ast: UOp) -> set[AxisType | None]:
    return {axis_kind(node) for node in ast.toposort if node.op is Ops.RANGE}


def test_atomic_form_keeps_the_reduce_and_runs_every_axis_in_parallel() -> None:
    ast = _scatter_ast(1000, "sum")
    assert _kinds(ast) == {AxisType.SEQUENTIAL} and ast.src[0].arg == "add"
    atomic = resolve_combining_stores(ast, AtomicGPU())
    assert _kinds(atomic) == {AxisType.LOOP}
    assert atomic.src[0].arg == "add" and not any(node.op is Ops.LOAD and node.src[0] is atomic.src[0].src[0]
                                                  for node in atomic.toposort)
    ordered = resolve_combining_stores(ast, NoAtomics())
    assert _kinds(ordered) == {AxisType.SEQUENTIAL} and ordered.src[0].arg is None
    assert any(node.op is Ops.LOAD and node.src[0] is ordered.src[0].src[0] for node in ordered.toposort)


def test_both_forms_equal_numpy_in_the_interpreter() -> None:
    """The interpreter runs the atomic form (one read-modify-write per store) and the ordered form alike."""
    generator = np.random.default_rng(3)
    index = generator.integers(-37, 37, 500).astype(np.int32)
    values = generator.uniform(-2, 2, 500).astype(np.float32)
    for reduce, ufunc in (("sum", np.add), ("amax", np.maximum), ("amin", np.minimum), ("prod", np.multiply)):
        ast = _scatter_ast(500, reduce)
        expected = np.linspace(-1, 1, 37).astype(np.float32)
        ufunc.at(expected, index, values)
        for renderer in (AtomicGPU(), NoAtomics()):
            target = np.linspace(-1, 1, 37).astype(np.float32)
            run_linear(linearize(ast, renderer), [target, index, values])
            np.testing.assert_allclose(target, expected, rtol=1e-5, atol=1e-5)


class AtomicWorkGroups(RendererContract):
    """A GPU renderer with work-groups of several work-items that declares int32 atomics."""

    has_threads = False
    has_local = True
    atomic_dtypes: frozenset[DType] = frozenset({dtypes.int32})


def test_work_items_of_one_group_lose_no_update_in_the_interpreters() -> None:
    """4,096 work-items in work-groups combining into 3 addresses: every update counts. The interpreter (which the
    MOCK GPUs use) runs a group's work-items one after another up to each barrier, so a combining store is one
    indivisible read-modify-write."""
    from tinycore.codegen.interpreter import Program
    generator = np.random.default_rng(5)
    index = generator.integers(0, 3, 4096).astype(np.int32)
    values = generator.integers(-9, 9, 4096).astype(np.int32)
    target = Tensor.empty(3, dtype=dtypes.int32)
    added = target.scatter_reduce(0, Tensor.empty(4096, dtype=dtypes.int32), Tensor.empty(4096, dtype=dtypes.int32),
                                  "sum")
    ast = [item for item in create_schedule([added.uop]).items if not item.is_copy][-1].ast
    uops = linearize(ast, AtomicWorkGroups())
    specials = {str(uop.arg)[:4] for uop in uops if uop.op is Ops.SPECIAL}
    assert specials == {"gidx", "lidx"}, specials
    expected = np.array([5, -5, 7], np.int32)
    np.add.at(expected, index, values)
    result = np.array([5, -5, 7], np.int32)
    Program(uops)([result, index, values])
    np.testing.assert_array_equal(result, expected)
