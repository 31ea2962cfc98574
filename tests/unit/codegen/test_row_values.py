"""A row kernel's reduce loop stores the expensive value it accumulates into the output and the output loop reads it
back (softmax computes exp once per element), divisions by a per-row reduce become multiplications by its
reciprocal, and the results equal numpy's and torch's; kernels where that would be wrong keep recomputing."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from codegen_kernels import VectorCPURenderer, buffer, flat_index, loop

from tinycore import GlobalCounters, Tensor
from tinycore.codegen import Opt, OptOps, linearize, optimize_kernel
from tinycore.codegen.interpreter import run_linear
from tinycore.codegen.row_values import reciprocal_row_divisors, share_reduced_values
from tinycore.device import Device
from tinycore.dtype import dtypes
from tinycore.engine.memory import device_facts
from tinycore.helpers import NUM_CPU_THREADS, Context
from tinycore.schedule import create_schedule
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp

ROWS, COLUMNS = 6, 48


def _softmax_ast(columns: int = COLUMNS) -> UOp:
    """out[i, j] = exp2(a[i, j] - max_k a[i, k]) / sum_r exp2(a[i, r] - max_k a[i, k]), built by hand."""
    i, j, k, r = loop(ROWS, 0), loop(columns, 1), loop(columns, 2), loop(columns, 3)
    out, a = buffer(0, dtypes.float32, ROWS * columns), buffer(1, dtypes.float32, ROWS * columns)
    highest = UOp(Ops.REDUCE, dtypes.float32, (a.index(flat_index([i, k], [columns, 1])).load(), k), Ops.MAX)

    def exponent(column: UOp) -> UOp:
        return (a.index(flat_index([i, column], [columns, 1])).load() - highest).alu(Ops.EXP2)

    total = UOp(Ops.REDUCE, dtypes.float32, (exponent(r), r), Ops.ADD)
    return out.index(flat_index([i, j], [columns, 1])).store(exponent(j) / total).sink()


def _reference(data: np.ndarray) -> np.ndarray:
    wide = data.astype(np.float64)
    powers = np.exp2(wide - wide.max(1, keepdims=True))
    return powers / powers.sum(1, keepdims=True)


def _loops_of(uops: list[UOp]) -> dict[UOp, tuple[UOp, ...]]:
    """For every UOp of the program, the RANGEs open where it stands."""
    open_loops: list[UOp] = []
    depths: dict[UOp, tuple[UOp, ...]] = {}
    for uop in uops:
        if uop.op is Ops.END:
            open_loops.pop()
        depths[uop] = tuple(open_loops)
        if uop.op is Ops.RANGE:
            open_loops.append(uop)
    return depths


def test_the_rewritten_kernel_computes_the_exponential_once() -> None:
    ast = _softmax_ast()
    rewritten, shared = share_reduced_values(ast)
    assert len(shared) == 1
    assert sum(node.op is Ops.EXP2 for node in ast.toposort) == 2
    assert sum(node.op is Ops.EXP2 for node in rewritten.toposort) == 1
    output = ast.src[0].src[0].src[0]
    assert sum(store.src[0].src[0] is output for store in rewritten.src) == 2
    assert sum(node.op is Ops.LOAD and node.src[0].src[0] is output for node in rewritten.toposort) == 1


@pytest.mark.parametrize("opts", [None, [], [Opt(OptOps.UNROLL, 3, 4)], [Opt(OptOps.UNROLL, 3, COLUMNS)],
                                  [Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.ACCUMULATORS, 3, 8)],
                                  [Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.ACCUMULATORS, 3, 16)]])
def test_the_exponential_runs_only_in_the_reduce_loop_and_the_result_matches_numpy(opts: list[Opt] | None) -> None:
    renderer = VectorCPURenderer()
    uops = linearize(_softmax_ast(), renderer, opts)
    loops = _loops_of(uops)
    exponentials = [uop for uop in uops if uop.op is Ops.EXP2]
    assert exponentials
    # every exp2 runs where the sum's range (axis 3, or its outer part) is open, or with no loop but the rows' open
    # when the sum is unrolled completely; never in the output loop over the columns
    assert all(not any(r.arg[0] == 1 for r in loops[uop]) for uop in exponentials)
    data = np.random.default_rng(0).standard_normal((ROWS, COLUMNS)).astype(np.float32) * 4
    result = np.zeros((ROWS, COLUMNS), np.float32)
    run_linear(uops, [result.reshape(-1), data.reshape(-1)])
    np.testing.assert_allclose(result, _reference(data), rtol=3e-6, atol=1e-7)


def test_a_kernel_without_column_or_reduce_loops_stores_before_it_reads_back() -> None:
    # everything upcast or unrolled: the stores of the row values and the loads that read them back share one loop
    # body, where only the linearizer's store-before-load ordering keeps them apart
    opts = [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UNROLL, 1, 4), Opt(OptOps.UNROLL, 1, 4)]
    uops = linearize(_softmax_ast(4), VectorCPURenderer(), opts)
    assert not any(uop.op is Ops.RANGE and uop.arg[0] != 0 for uop in uops)
    data = np.random.default_rng(4).standard_normal((ROWS, 4)).astype(np.float32) * 4
    result = np.zeros((ROWS, 4), np.float32)
    run_linear(uops, [result.reshape(-1), data.reshape(-1)])
    np.testing.assert_allclose(result, _reference(data), rtol=3e-6, atol=1e-7)


@pytest.mark.parametrize("opts", [[Opt(OptOps.THREAD, 1, 2)], [Opt(OptOps.NEST, 0, 0)],
                                  [Opt(OptOps.SHIFTED_UPCAST, 1, 5)]])
def test_opts_that_split_or_move_the_row_loop_keep_the_recomputation(opts: list[Opt]) -> None:
    # workers splitting a row, or the row loop moved inside the column loop, or a column block computed twice,
    # would store the reduce loop's values over finished results
    kernel = optimize_kernel(_softmax_ast(), VectorCPURenderer(), opts)
    assert len(kernel.ast.src) == 1
    assert sum(node.op is Ops.EXP2 for node in kernel.ast.toposort) == 2


def test_cheap_values_are_not_stored() -> None:
    # log_softmax's x - max is one subtraction: a store and a load would cost as much
    i, j, r = loop(ROWS, 0), loop(COLUMNS, 1), loop(COLUMNS, 2)
    out, a = buffer(0, dtypes.float32, ROWS * COLUMNS), buffer(1, dtypes.float32, ROWS * COLUMNS)
    shift = UOp.const(dtypes.float32, 1.0)

    def shifted(column: UOp) -> UOp:
        return a.index(flat_index([i, column], [COLUMNS, 1])).load() - shift

    total = UOp(Ops.REDUCE, dtypes.float32, (shifted(r).alu(Ops.EXP2), r), Ops.ADD)
    ast = out.index(flat_index([i, j], [COLUMNS, 1])).store(shifted(j) - total.alu(Ops.LOG2)).sink()
    assert share_reduced_values(ast)[1] == []


def test_only_divisions_by_a_row_reduce_become_reciprocals() -> None:
    ast = reciprocal_row_divisors(_softmax_ast())
    assert not any(node.op is Ops.FDIV for node in ast.toposort)
    assert sum(node.op is Ops.RECIPROCAL for node in ast.toposort) == 1
    i = loop(8, 0)
    out, a, b = (buffer(n, dtypes.float32, 8) for n in range(3))
    plain = out.index(i * 1).store(a.index(i * 1).load() / b.index(i * 1).load()).sink()
    by_constant = out.index(i * 1).store(a.index(i * 1).load() / UOp.const(dtypes.float32, 3.0)).sink()
    assert reciprocal_row_divisors(plain) is plain
    assert reciprocal_row_divisors(by_constant) is by_constant


def test_cpu_softmax_output_loop_only_scales_what_the_reduce_loop_stored() -> None:
    values = np.random.default_rng(0).standard_normal((64, 1024)).astype(np.float32)
    items = [item for item in create_schedule([Tensor(values).softmax(-1).uop], device_facts).items
             if not item.is_copy]
    assert len(items) == 1
    uops = linearize(items[0].ast, Device["CPU"].renderer)
    loops = _loops_of(uops)
    output = next(uop for uop in uops if uop.op is Ops.DEFINE_GLOBAL and uop.arg == 0)
    last_store = [uop for uop in uops if uop.op is Ops.STORE and uop.src[0].src[0] is output][-1]
    body = [uop for uop in uops if loops[uop] == loops[last_store]]
    # exp2 decomposes into arithmetic with bit casts and shifts for its powers of two; the output loop has none of
    # them (and no exp2), and no division
    assert not any(uop.op in (Ops.EXP2, Ops.BITCAST, Ops.SHL, Ops.SHR) for uop in body)
    assert not any(uop.op is Ops.FDIV for uop in body)
    assert any(uop.op in (Ops.BITCAST, Ops.SHL) for uop in uops)  # the reduce loop computes exp2 as arithmetic
    assert any(uop.op is Ops.LOAD and uop.src[0].src[0] is output for uop in body)


@pytest.mark.parametrize("shape", [(4, 1), (5, 5), (3, 8), (9, 17), (2, 3, 37), (64, 1000), (128, 1024)])
@pytest.mark.parametrize("threads", [1, 2])
def test_softmax_matches_torch(shape: tuple[int, ...], threads: int) -> None:
    values = (np.random.default_rng(1).standard_normal(shape) * 5).astype(np.float32)
    with Context(NUM_CPU_THREADS=threads):
        GlobalCounters.reset()
        result = Tensor(values).softmax(-1).numpy()
    np.testing.assert_allclose(result, torch.softmax(torch.from_numpy(values), -1).numpy(), rtol=3e-6, atol=1e-7)
    assert NUM_CPU_THREADS.value == 0


def test_a_stored_value_used_twice_by_the_consumer() -> None:
    values = (np.random.default_rng(2).standard_normal((33, 96)) * 3).astype(np.float32)
    tensor = Tensor(values)
    powered = (tensor * tensor).sin() + 2
    result = (powered / powered.sum(-1, keepdim=True) + powered * powered).numpy()
    wide = np.sin((values * values).astype(np.float64)) + 2  # the square is rounded to float32 first
    np.testing.assert_allclose(result, wide / wide.sum(-1, keepdims=True) + wide * wide, rtol=2e-6, atol=4e-6)


def test_in_place_assign_reading_its_target_is_not_overwritten_early() -> None:
    # x is read in the output loop: a value stored into x by the reduce loop would replace it before that read
    generator = np.random.default_rng(3)
    first, second = (generator.standard_normal((16, 256)).astype(np.float32) for _ in range(2))
    target = Tensor(first).realize()
    target.assign(target * Tensor(second).softmax(-1)).realize()
    powers = np.exp(second.astype(np.float64) - second.max(1, keepdims=True))
    np.testing.assert_allclose(target.numpy(), first * powers / powers.sum(1, keepdims=True), rtol=3e-6, atol=1e-7)
