"""Linearization: program order, loop structure, accumulators, hoisting, sharing and index simplification."""
from __future__ import annotations

import gc
from collections.abc import Callable

import numpy as np
import pytest
from codegen_kernels import (
    CASES,
    Case,
    ScalarRenderer,
    VectorCPURenderer,
    buffer,
    const,
    elementwise_broadcast,
    flat_index,
    loop,
    matmul,
    reduce_inner,
    softmax_numerator,
)

from tinycore.codegen import linearize
from tinycore.codegen.interpreter import InterpreterError, run_linear
from tinycore.codegen.linearize import LinearizeError, linearize_stores
from tinycore.dtype import dtypes
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp


def loop_depths(uops: list[UOp]) -> dict[UOp, tuple[UOp, ...]]:
    """For every UOp of the program, the RANGEs open where it stands."""
    open_loops: list[UOp] = []
    depths: dict[UOp, tuple[UOp, ...]] = {}
    for uop in uops:
        if uop.op is Ops.END:
            assert open_loops and open_loops[-1] is uop.src[0], "END must close the innermost open RANGE"
            open_loops.pop()
        depths.setdefault(uop, tuple(open_loops))
        if uop.op is Ops.RANGE:
            open_loops.append(uop)
    assert not open_loops, "every RANGE is closed"
    return depths


@pytest.mark.parametrize("optimized", [False, True])
@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_program_is_well_formed(case, optimized: bool) -> None:
    uops = linearize(case.ast, VectorCPURenderer(), None if optimized else [])
    seen: set[UOp] = set()
    for uop in uops:
        for source in uop.src:
            assert source in seen, f"{uop.op} uses {source.op} before it is computed"
        seen.add(uop)
    depths = loop_depths(uops)
    for uop in uops:
        if uop.op is not Ops.END:
            for source in uop.src:
                # a value computed inside a loop is only used inside that loop
                assert set(depths[source]) <= set(depths[uop]) | {uop}, f"{uop.op} uses {source.op} out of its loop"
    assert uops[-1].op is Ops.SINK and isinstance(uops[-1].arg, str)
    assert not any(u.op in (Ops.REDUCE, Ops.UNROLL, Ops.CONTRACT) for u in uops)


def test_accumulator_is_initialised_before_the_loop_and_read_after() -> None:
    uops = linearize(reduce_inner(4, 7).ast, ScalarRenderer(), [])
    depths = loop_depths(uops)
    register = next(u for u in uops if u.op is Ops.DEFINE_REG)
    assert register.dtype.base == dtypes.float32 and register.dtype.addrspace == "reg"
    stores = [u for u in uops if u.op is Ops.STORE and u.src[0].src[0] is register]
    loads = [u for u in uops if u.op is Ops.LOAD and u.src[0].src[0] is register]
    init, update = stores
    assert init.src[1].op is Ops.CONST and init.src[1].arg == 0.0
    assert len(depths[init]) == 1 and len(depths[update]) == 2
    inner, result = loads
    assert len(depths[inner]) == 2 and len(depths[result]) == 1
    assert uops.index(result) > uops.index(next(u for u in uops if u.op is Ops.END))
    assert update.src[1].op is Ops.ADD and inner in update.src[1].src


@pytest.mark.parametrize("op,identity", [(Ops.ADD, 0.0), (Ops.MUL, 1.0), (Ops.MAX, -float("inf"))])
def test_accumulator_identity(op: Ops, identity: float) -> None:
    uops = linearize(reduce_inner(3, 7, op).ast, ScalarRenderer(), [])
    register = next(u for u in uops if u.op is Ops.DEFINE_REG)
    init = next(u for u in uops if u.op is Ops.STORE and u.src[0].src[0] is register)
    assert init.src[1].arg == identity


def test_int_max_identity_is_dtype_minimum() -> None:
    uops = linearize(reduce_inner(3, 7, Ops.MAX, dtypes.int32).ast, ScalarRenderer(), [])
    register = next(u for u in uops if u.op is Ops.DEFINE_REG)
    init = next(u for u in uops if u.op is Ops.STORE and u.src[0].src[0] is register)
    assert init.src[1].arg == -2 ** 31


def test_loop_invariant_load_is_hoisted_out_of_the_inner_loop() -> None:
    case = elementwise_broadcast(6, 10)
    uops = linearize(case.ast, ScalarRenderer(), [])
    depths = loop_depths(uops)
    row_buffer = next(u for u in uops if u.op is Ops.DEFINE_GLOBAL and u.arg == 3)  # c[i]
    row_load = next(u for u in uops if u.op is Ops.LOAD and u.src[0].src[0] is row_buffer)
    assert len(depths[row_load]) == 1, "c[i] does not depend on j: it is loaded once per row"


def test_reduce_used_by_elementwise_is_computed_once_per_row() -> None:
    uops = linearize(softmax_numerator(4, 16).ast, ScalarRenderer(), [])
    depths = loop_depths(uops)
    ranges = [u for u in uops if u.op is Ops.RANGE]
    assert len(ranges) == 3
    row, first, second = ranges
    assert depths[first] == (row,) and depths[second] == (row,), "the max loop and the output loop are siblings"
    end_of_first = next(u for u in uops if u.op is Ops.END and u.src[0] is first)
    assert uops.index(end_of_first) < uops.index(second)


def test_common_subexpressions_are_shared() -> None:
    i = loop(16, 0)
    out, a = buffer(0, dtypes.float32, 16), buffer(1, dtypes.float32, 16)
    x = a.index(i * 1).load()
    ast = out.index(i * 1).store(x * x + x).sink()
    uops = linearize(ast, ScalarRenderer(), [])
    assert sum(u.op is Ops.LOAD for u in uops) == 1
    data, result = np.arange(16, dtype=np.float32), np.zeros(16, np.float32)
    run_linear(uops, [result, data])
    np.testing.assert_allclose(result, data * data + data)


def test_reduces_over_the_same_ranges_share_one_loop() -> None:
    i, j = loop(4, 0), loop(9, 1)
    out, a = buffer(0, dtypes.float32, 4), buffer(1, dtypes.float32, 36)
    x = a.index(flat_index([i, j], [9, 1])).load()
    total = UOp(Ops.REDUCE, dtypes.float32, (x, j), Ops.ADD)
    squares = UOp(Ops.REDUCE, dtypes.float32, (x * x, j), Ops.ADD)
    ast = out.index(i * 1).store(squares - total * total).sink()
    uops = linearize(ast, ScalarRenderer(), [])
    assert sum(u.op is Ops.RANGE for u in uops) == 2
    assert sum(u.op is Ops.DEFINE_REG for u in uops) == 2
    data = np.random.default_rng(0).uniform(-1, 1, (4, 9)).astype(np.float32)
    result = np.zeros(4, np.float32)
    run_linear(uops, [result, data])
    np.testing.assert_allclose(result, (data * data).sum(1) - data.sum(1) ** 2, rtol=1e-5, atol=1e-5)


def test_reduce_inside_reduce() -> None:
    # out[i] = sum_j (a[i, j] - max_k a[i, k])
    i, j, k = loop(5, 0), loop(6, 1), loop(6, 2)
    out, a = buffer(0, dtypes.float32, 5), buffer(1, dtypes.float32, 30)
    maximum = UOp(Ops.REDUCE, dtypes.float32, (a.index(flat_index([i, k], [6, 1])).load(), k), Ops.MAX)
    centered = a.index(flat_index([i, j], [6, 1])).load() - maximum
    ast = out.index(i * 1).store(UOp(Ops.REDUCE, dtypes.float32, (centered, j), Ops.ADD)).sink()
    data = np.random.default_rng(1).uniform(-1, 1, (5, 6)).astype(np.float32)
    for opts in ([], None):
        uops = linearize(ast, VectorCPURenderer(), opts)
        result = np.zeros(5, np.float32)
        run_linear(uops, [result, data])
        np.testing.assert_allclose(result, (data - data.max(1, keepdims=True)).sum(1), rtol=1e-5, atol=1e-5)


def test_reduce_depending_on_outer_reduce_range() -> None:
    # out[i] = sum_j a[j] * (sum_k b[j, k]): the inner reduce runs inside the outer reduce's loop
    i, j, k = loop(3, 0), loop(4, 1), loop(5, 2)
    out, a, b = buffer(0, dtypes.float32, 3), buffer(1, dtypes.float32, 12), buffer(2, dtypes.float32, 20)
    inner = UOp(Ops.REDUCE, dtypes.float32, (b.index(flat_index([j, k], [5, 1])).load(), k), Ops.ADD)
    value = a.index(flat_index([i, j], [4, 1])).load() * inner
    ast = out.index(i * 1).store(UOp(Ops.REDUCE, dtypes.float32, (value, j), Ops.ADD)).sink()
    uops = linearize(ast, ScalarRenderer(), [])
    depths = loop_depths(uops)
    k_range = next(u for u in uops if u.op is Ops.RANGE and u.src[0].arg == 5)
    assert len(depths[k_range]) == 2
    x = np.random.default_rng(2).uniform(-1, 1, (3, 4)).astype(np.float32)
    y = np.random.default_rng(3).uniform(-1, 1, (4, 5)).astype(np.float32)
    result = np.zeros(3, np.float32)
    run_linear(uops, [result, x, y])
    np.testing.assert_allclose(result, x @ y.sum(1), rtol=1e-5, atol=1e-5)


def test_split_index_is_simplified() -> None:
    # a reshape-like index (i // 8) * 8 + i % 8 is just i
    i = loop(64, 0)
    out, a = buffer(0, dtypes.float32, 64), buffer(1, dtypes.float32, 64)
    index = (i // const(8)) * 8 + i % const(8)
    ast = out.index(i * 1).store(a.index(index).load() + 1.0).sink()
    uops = linearize(ast, ScalarRenderer(), [])
    load = next(u for u in uops if u.op is Ops.LOAD)
    assert load.src[0].src[1].op is Ops.RANGE
    assert not any(u.op in (Ops.IDIV, Ops.MOD) for u in uops)


def test_upcast_indices_fold_to_constants_offsets() -> None:
    uops = linearize(elementwise_broadcast(4, 64).ast, VectorCPURenderer())
    assert not any(u.op in (Ops.IDIV, Ops.MOD) for u in uops)


def test_matmul_program_has_one_reduce_loop_per_tile() -> None:
    uops = linearize(matmul(64, 64, 64).ast, VectorCPURenderer())
    ranges = [u for u in uops if u.op is Ops.RANGE]
    assert len(ranges) == 3  # column blocks, row blocks, reduce
    assert ranges[-1].src[0].arg == 64  # an 8 x 16 tile keeps the reduce rolled


def test_reduce_range_used_outside_its_reduce_is_rejected() -> None:
    i, j = loop(4, 0), loop(5, 1)
    out, a = buffer(0, dtypes.float32, 20), buffer(1, dtypes.float32, 20)
    total = UOp(Ops.REDUCE, dtypes.float32, (a.index(flat_index([i, j], [5, 1])).load(), j), Ops.ADD)
    store = out.index(flat_index([i, j], [5, 1])).store(total)
    with pytest.raises(LinearizeError, match="not nested"):
        linearize_stores([store], ScalarRenderer())


def test_interpreter_reports_out_of_bounds_access() -> None:
    i = loop(8, 0)
    out, a = buffer(0, dtypes.float32, 8), buffer(1, dtypes.float32, 4)
    ast = out.index(i * 1).store(a.index(i * 1).load()).sink()
    uops = linearize(ast, ScalarRenderer(), [])
    with pytest.raises(InterpreterError, match="outside a buffer of 4"):
        run_linear(uops, [np.zeros(8, np.float32), np.zeros(4, np.float32)])


@pytest.mark.parametrize("build", [lambda: matmul(32, 48, 40), lambda: softmax_numerator(8, 64)],
                         ids=["matmul", "softmax_numerator"])
def test_linearizing_a_kernel_leaves_nothing_for_the_cyclic_collector(build: Callable[[], Case]) -> None:
    """Codegen runs with the cyclic collector paused, so its garbage must go by reference counting: a reference
    cycle per kernel (a nested function naming itself, an object held by its own callback) kept each kernel's walk
    state until a collection walked it."""
    renderer = VectorCPURenderer()
    case = build()
    linearize(case.ast, renderer)  # the first use compiles rule sets and fills caches that stay
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds stays in gc.garbage, to be read
    try:
        program = linearize(case.ast, renderer)
        gc.collect()
        # the pytest worker's own threads may leave garbage of theirs meanwhile: only codegen's counts
        left = [found for found in gc.garbage if isinstance(found, UOp) or
                str(getattr(found, "__module__", "")).startswith("tinycore")]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert program and left == []
