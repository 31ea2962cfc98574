"""CPU matmul and convolution tiles: results against numpy / torch for sizes the tiles do not divide, the shifted last
block (SHIFTED_UPCAST), fused multiply-adds in the accumulators, and the FLOP estimate of kernels that recompute."""
from __future__ import annotations

import contextlib
import pathlib
import platform
import re
from collections.abc import Iterator

import numpy as np
import pytest
from codegen_kernels import VectorCPURenderer, buffer, loop, matmul
from cpu_vectors import VECTOR_BYTES, cpu_vector_bytes

from tinycore import Tensor
from tinycore.codegen import linearize, lower_to_program
from tinycore.codegen.interpreter import run_linear
from tinycore.codegen.opt import Kernel, KernelOptError, Opt, OptOps
from tinycore.codegen.split_ranges import split_merged_axes
from tinycore.counters import GlobalCounters
from tinycore.device.registry import Device
from tinycore.dtype import dtypes
from tinycore.engine.memory import device_facts
from tinycore.helpers import Context
from tinycore.schedule import create_schedule
from tinycore.uop.ops import FUSED, Ops


def _array(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _close(result: np.ndarray, reference: np.ndarray) -> None:
    """float32 matmul tolerance: relative to the size of the sums (numpy's own float32 result differs as much)."""
    scale = max(float(np.abs(reference).max()), 1.0)
    np.testing.assert_allclose(result, reference, rtol=2e-5, atol=2e-5 * scale)


@contextlib.contextmanager
def _wide_host(core_cache: int | None) -> Iterator[None]:
    """The CPU renderer as a 2-worker AVX-512 host whose cores have `core_cache` bytes of L2 (None: unknown)."""
    renderer = Device["CPU"].renderer
    with cpu_vector_bytes(64), Context(NUM_CPU_THREADS=2):
        saved, renderer.core_cache_bytes = renderer.core_cache_bytes, core_cache
        try:
            yield
        finally:
            renderer.core_cache_bytes = saved


def _product_notes(a: Tensor, b: Tensor) -> list[str]:
    """The heuristic's choices for the product kernel of `a @ b`."""
    from tinycore.codegen.optimize import hand_coded_optimizations
    items = [item for item in create_schedule([(a @ b).uop], device_facts).items if not item.is_copy]
    product = [item.ast for item in items if any(node.op is Ops.REDUCE for node in item.ast.toposort)][0]
    return hand_coded_optimizations(Kernel(product), Device["CPU"].renderer)


@pytest.mark.parametrize("m, k, n", [(1000, 300, 1000), (7, 5, 3), (1, 64, 200), (200, 64, 1), (1, 1, 1), (13, 37, 29),
                                     (6, 16, 16), (5, 33, 15), (67, 129, 17), (130, 70, 250)])
def test_matmul_odd_sizes_match_numpy(m: int, k: int, n: int) -> None:
    a, b = _array(m, k), _array(k, n, seed=1)
    _close((Tensor(a) @ Tensor(b)).numpy(), a.astype(np.float64) @ b.astype(np.float64))


def test_batched_and_transposed_matmuls_match_numpy() -> None:
    a, b = _array(3, 50, 70), _array(3, 70, 45, seed=1)
    _close((Tensor(a) @ Tensor(b)).numpy(), a.astype(np.float64) @ b)
    c, d = _array(90, 70), _array(45, 70, seed=2)
    _close((Tensor(c) @ Tensor(d).T).numpy(), c.astype(np.float64) @ d.T)
    _close((Tensor(c).T @ Tensor(c)).numpy(), c.T.astype(np.float64) @ c)
    _close((Tensor(d) @ Tensor(c).T).numpy(), d.astype(np.float64) @ c.T)


def test_fused_epilogues_match_numpy() -> None:
    x, w, bias = _array(100, 70), _array(70, 90, seed=1), _array(90, seed=2)
    reference = np.maximum(x.astype(np.float64) @ w + bias, 0)
    _close((Tensor(x) @ Tensor(w) + Tensor(bias)).relu().numpy(), reference)
    _close(Tensor(x).linear(Tensor(w), Tensor(bias)).relu().numpy(), reference)


@pytest.mark.parametrize("shape, weight, options", [((4, 16, 20, 30), (24, 16, 3, 3), {}),
                                                     ((2, 3, 17, 19), (10, 3, 3, 3), {"padding": 1}),
                                                     ((2, 8, 21, 23), (13, 8, 5, 3), {"stride": 2}),
                                                     ((1, 4, 9, 70), (7, 4, 1, 1), {})])
def test_conv2d_matches_torch(shape: tuple[int, ...], weight: tuple[int, ...], options: dict[str, int]) -> None:
    torch = pytest.importorskip("torch")
    x, w, bias = _array(*shape), _array(*weight, seed=1), _array(weight[0], seed=2)
    reference = torch.nn.functional.conv2d(torch.from_numpy(x).double(), torch.from_numpy(w).double(),
                                           torch.from_numpy(bias).double(), **options).relu().numpy()
    _close(Tensor(x).conv2d(Tensor(w), Tensor(bias), **options).relu().numpy(), reference)


def test_shifted_upcast_recomputes_the_last_block_and_matches_numpy() -> None:
    case = matmul(13, 8, 20)
    # 13 rows in blocks of 6: 0-5, 6-11, 7-12 (the last shifted back); 20 columns in blocks of 8: 0-7, 8-15, 12-19
    opts = [Opt(OptOps.SHIFTED_UPCAST, 1, 8), Opt(OptOps.SHIFTED_UPCAST, 0, 6)]
    kernel = Kernel(case.ast).apply_opts(opts)
    assert kernel.recomputed == pytest.approx((18 / 13) * (24 / 20))
    output = np.zeros(13 * 20, dtype=np.float32)
    run_linear(linearize(case.ast, VectorCPURenderer(), opts), [output] + [array.copy() for array in case.inputs], {})
    result = output.reshape(13, 20)
    np.testing.assert_allclose(result, case.reference(*case.inputs), rtol=1e-5, atol=1e-5)


def test_shifted_upcast_of_an_in_place_update_stores_each_output_once() -> None:
    i = loop(10, 0)
    out = buffer(0, dtypes.float32, 10)
    ast = out.index(i).store(out.index(i).load() * 2.0).sink()  # in place: a second pass would double again
    opts = [Opt(OptOps.SHIFTED_UPCAST, 0, 4)]  # blocks 0-3, 4-7 and 6-9: 6 and 7 are computed twice
    program = linearize(ast, VectorCPURenderer(), opts)
    assert any(u.op is Ops.STORE and len(u.src[0].src) > 2 for u in program), "the shifted block's stores are gated"
    values = np.arange(10, dtype=np.float32) + 1
    output = values.copy()
    run_linear(program, [output], {})
    np.testing.assert_array_equal(output, values * 2)
    with pytest.raises(KernelOptError):
        Kernel(matmul(4, 8, 8).ast).apply_opt(Opt(OptOps.SHIFTED_UPCAST, 0, 6))  # larger than the axis


@pytest.mark.parametrize("vector_bytes", VECTOR_BYTES)
@pytest.mark.parametrize("rows, batch, columns, threads", [(28, 16, 32, 1), (130, 64, 48, 2), (784, 128, 64, 2)])
def test_in_place_gradient_update_with_a_shifted_row_block_matches_numpy(rows: int, batch: int, columns: int,
                                                                         threads: int, vector_bytes: int) -> None:
    # SGD's update fused into the weight gradient's matmul: w -= lr * x.T @ g, rows the row tile does not divide (6
    # rows with 8-lane vectors; with 16 lanes 12 rows, 10 where 12 would recompute too many: 28 = 2 x 12 + 4); with
    # 16-lane vectors 48 columns take one vector: in place, the last block cannot be shifted
    x, g, w = _array(batch, rows), _array(batch, columns, seed=1), _array(rows, columns, seed=2)
    from tinycore.codegen.optimize import hand_coded_optimizations
    with cpu_vector_bytes(vector_bytes) as lanes, Context(NUM_CPU_THREADS=threads):
        weight, probe = Tensor(w).realize(), Tensor(w).realize()
        gradient = (Tensor(x).unsqueeze(-1) * Tensor(g).unsqueeze(-2)).sum(0)
        items = [item for item in create_schedule([probe.assign(probe - 0.5 * gradient).uop], device_facts).items
                 if not item.is_copy]
        notes = hand_coded_optimizations(Kernel(items[-1].ast), Device["CPU"].renderer)
        if columns % (2 * lanes) == 0:
            assert f"UPCAST {2 * lanes} (matmul columns)" in notes, notes
            tile = 6 if lanes == 8 else (10 if rows == 28 else 12)
            assert f"SHIFTED_UPCAST {tile} (matmul rows, last block shifted)" in notes, notes
        else:
            assert f"UPCAST {lanes} (matmul columns)" in notes and "UNROLL 4 (matmul reduce)" in notes, notes
        weight.assign(weight - 0.5 * gradient).realize()
        _close(weight.numpy(), w - 0.5 * (x.T.astype(np.float64) @ g))


def test_in_place_matmul_update_matches_numpy() -> None:
    a, b = _array(13, 13), _array(13, 13, seed=1)
    x = Tensor(a).realize()
    x.assign(x @ Tensor(b)).realize()
    _close(x.numpy(), a.astype(np.float64) @ b)


def test_accumulation_is_a_fused_multiply_add_only_where_the_renderer_has_one() -> None:
    case = matmul(12, 32, 16)
    plain = linearize(case.ast, VectorCPURenderer())
    assert not any(u.op is Ops.MULACC for u in plain)

    class FusingRenderer(VectorCPURenderer):
        fused_multiply_add = True

    fused = [u for u in linearize(case.ast, FusingRenderer()) if u.op is Ops.MULACC]
    # a 6 x 16 tile: 12 accumulators of 8 lanes, each lane updated by one fused multiply-add per reduce step (this
    # renderer has no vector MULACC, so they are computed lane by lane)
    assert sum(u.dtype.count for u in fused) == 12 * 8 and all(u.arg == FUSED for u in fused)


def test_cpu_matmul_renders_fma_and_rounds_once() -> None:
    renderer = Device["CPU"].renderer
    assert renderer.fused_multiply_add  # both CPU renderers (C, LLVM) declare it; FMA or not is the target's
    source = lower_to_program(matmul(12, 32, 16).ast, renderer).src
    assert "TC_FMA_FLOAT8" in source or "fmuladd" in source
    # (1 + 2**-12)**2 - (1 + 2**-11) = 2**-24 exactly; rounding the product to float32 first loses it (gives 0)
    # (the reduce of 64 stays a loop: the accumulator takes -1 * (1 + 2**-11) first, then the square)
    a, b = np.zeros((1, 64), dtype=np.float32), np.zeros((64, 16), dtype=np.float32)
    a[0, :2], b[0], b[1] = (-1.0, 1 + 2.0 ** -12), 1 + 2.0 ** -11, 1 + 2.0 ** -12
    result = (Tensor(a) @ Tensor(b)).numpy()
    assert set(result.flatten().tolist()) <= {0.0, 2.0 ** -24}
    if platform.machine() in ("x86_64", "AMD64") and " fma " in pathlib.Path("/proc/cpuinfo").read_text():
        assert (result == 2.0 ** -24).all()  # one rounding, as the float64 reference has it


def test_flop_estimate_of_shifted_tiles_counts_the_needed_work() -> None:
    for m, k, n in ((1024, 64, 1024), (1000, 37, 1000), (13, 8, 20)):
        a, b = Tensor(_array(m, k)).realize(), Tensor(_array(k, n, seed=1)).realize()
        GlobalCounters.reset()
        (a @ b).realize()
        # 2*M*N*K by hand, a few partial sums at most; the recomputed outputs of shifted blocks are not counted
        assert 2 * m * n * k <= GlobalCounters.global_ops <= 2 * m * n * k + 16 * m * n
    x, w = Tensor(_array(32, 16, 64, 64)).realize(), Tensor(_array(32, 16, 3, 3, seed=1)).realize()
    GlobalCounters.reset()
    x.conv2d(w).realize()
    assert GlobalCounters.global_ops == 2 * 32 * 32 * 62 * 62 * 16 * 3 * 3


def test_uneven_worker_split_counts_every_worker() -> None:
    rows = 171  # odd: the workers get 85 and 86 row blocks, a loop bound that depends on core_id
    a, b = Tensor(_array(rows, 40)).realize(), Tensor(_array(40, 48, seed=1)).realize()
    with Context(NUM_CPU_THREADS=2):
        GlobalCounters.reset()
        result = (a @ b).realize()
    assert 2 * rows * 48 * 40 <= GlobalCounters.global_ops <= 2 * rows * 48 * 40 + 16 * rows * 48
    _close(result.numpy(), a.numpy().astype(np.float64) @ b.numpy())


def test_uneven_row_groups_count_every_group() -> None:
    # row groups of 66 and 65 blocks: the inner loop's bound depends on the group counter (an enclosing loop), and
    # the estimate averages it over the groups instead of counting that loop once (GFLOPS at DEBUG=2 read 20x low)
    x, y = _array(786, 512), _array(512, 256, seed=1)
    with _wide_host(2 * 1024 * 1024):
        a, b = Tensor(x).realize(), Tensor(y).realize()
        assert "BLOCK 66 (matmul row blocks grouped for the core's cache)" in _product_notes(a, b)
        GlobalCounters.reset()
        result = (a @ b).realize()
    assert 2 * 786 * 256 * 512 <= GlobalCounters.global_ops <= 2 * 786 * 256 * 512 + 16 * 786 * 256
    _close(result.numpy(), x.astype(np.float64) @ y)


def test_decided_bounds_checks_leave_no_select_in_a_convolution() -> None:
    x, w = Tensor(_array(2, 4, 12, 30)).realize(), Tensor(_array(8, 4, 3, 3, seed=1)).realize()
    items = [item for item in create_schedule([x.conv2d(w).uop], device_facts).items if not item.is_copy]
    program = lower_to_program(items[-1].ast, Device["CPU"].renderer)
    assert not any(u.op is Ops.WHERE for u in program.uops or []), "an always-true padding check stayed"


@pytest.mark.parametrize("left, right, transpose", [((300, 70), (70, 64), False), ((3, 100, 50), (50, 48), False),
                                                    ((2, 3, 90, 40), (3, 40, 32), False), ((300, 70), (48, 70), True),
                                                    ((256, 16), (16, 32), False)])
def test_packed_panel_matmuls_match_numpy(left: tuple[int, ...], right: tuple[int, ...], transpose: bool) -> None:
    a, b = _array(*left), _array(*right, seed=1)
    tb = Tensor(b).T if transpose else Tensor(b)
    reference = a.astype(np.float64) @ (b.T if transpose else b)
    _close((Tensor(a) @ tb).numpy(), reference)
    bias = _array(reference.shape[-1], seed=3)
    _close((Tensor(a) @ tb + Tensor(bias)).relu().numpy(), np.maximum(reference + bias, 0))


@pytest.mark.parametrize("vector_bytes", VECTOR_BYTES)
def test_packed_panel_matmul_kernel_gets_the_register_tile(vector_bytes: int) -> None:
    from tinycore.codegen.opt import Kernel as CodegenKernel
    from tinycore.codegen.optimize import hand_coded_optimizations
    x, y = _array(302, 64), _array(64, 256, seed=1)
    with cpu_vector_bytes(vector_bytes) as lanes:
        a, b = Tensor(x).realize(), Tensor(y).realize()
        items = [item for item in create_schedule([(a @ b).uop], device_facts).items if not item.is_copy]
        assert len(items) == 2  # the panels of b (two vectors wide, four with 32 registers), then the matmul
        reduce_kernels = [item.ast for item in items if any(node.op is Ops.REDUCE for node in item.ast.toposort)]
        notes = hand_coded_optimizations(CodegenKernel(reduce_kernels[0]), Device["CPU"].renderer)
        # 302 rows in 6-row tiles, the last block shifted: 6 x 2 vectors of 8 lanes, 6 x 4 of 16 (24 accumulators)
        assert f"UPCAST {(2 if lanes == 8 else 4) * lanes} (matmul columns, packed panels)" in notes and \
            "SHIFTED_UPCAST 6 (matmul rows, last block shifted)" in notes, notes
        _close((a @ b).numpy(), x.astype(np.float64) @ y)


def test_packed_panel_matmul_gradients_match_torch() -> None:
    torch = pytest.importorskip("torch")
    a, b = _array(260, 40), _array(40, 32, seed=1)
    ta, tb = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
    (ta @ tb).relu().sum().backward()
    pa, pb = torch.from_numpy(a).double().requires_grad_(), torch.from_numpy(b).double().requires_grad_()
    (pa @ pb).relu().sum().backward()
    assert ta.grad is not None and tb.grad is not None
    _close(ta.grad.numpy(), pa.grad.numpy())
    _close(tb.grad.numpy(), pb.grad.numpy())


def test_block_opt_groups_row_blocks_and_matches_numpy() -> None:
    case = matmul(24, 8, 16)
    opts = [Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.BLOCK, 0, 3)]
    kernel = Kernel(case.ast).apply_opts(opts)
    # rows: 4 groups of 3 blocks of 2; the group axis keeps its place (outermost), the block loop runs innermost
    assert [size for size, kind in zip(kernel.sizes, kernel.kinds, strict=True) if kind.name == "LOOP"] == [4, 2, 3]
    output = np.zeros(24 * 16, dtype=np.float32)
    run_linear(linearize(case.ast, VectorCPURenderer(), opts), [output] + [array.copy() for array in case.inputs], {})
    np.testing.assert_allclose(output.reshape(24, 16), case.reference(*case.inputs), rtol=1e-5, atol=1e-5)
    with pytest.raises(KernelOptError):
        Kernel(case.ast).apply_opt(Opt(OptOps.BLOCK, 0, 24))  # the whole axis: that is NEST


@pytest.mark.parametrize("vector_bytes", VECTOR_BYTES)
def test_large_matmul_groups_its_row_blocks_for_the_cache(vector_bytes: int) -> None:
    from tinycore.codegen.optimize import hand_coded_optimizations
    with cpu_vector_bytes(vector_bytes) as lanes, Context(NUM_CPU_THREADS=2):
        notes = hand_coded_optimizations(Kernel(matmul(1536, 1024, 64).ast), Device["CPU"].renderer)
    # 256 blocks of 6 rows (8 lanes) or 128 of 12 (16 lanes) read 6 MB of the first input: two groups of at most
    # 3 MB, one per worker (128 blocks of 6 rows, 64 of 12)
    group = 128 if lanes == 8 else 64
    assert f"BLOCK {group} (matmul row blocks grouped for the cache)" in notes, notes
    a, b = _array(1536, 1024), _array(1024, 32, seed=1)
    _close((Tensor(a) @ Tensor(b)).numpy(), a.astype(np.float64) @ b)


def test_scaled_partial_sums_are_fused_multiply_adds() -> None:
    """sum_b s_b * (x0*q0 + x1*q1 + c) (a quantized block's partial sum, scaled once): the partial's products are a
    FUSED MULACC chain too, with the accumulation's, and the result matches numpy's float64 one."""
    rng = np.random.default_rng(5)
    x0, q0, x1, q1, c = (rng.standard_normal((16, 64, 8)).astype(np.float32) for _ in range(5))
    s = rng.standard_normal((16, 64, 1)).astype(np.float32)
    tensors = [Tensor(array).realize() for array in (x0, q0, x1, q1, c, s)]
    t_x0, t_q0, t_x1, t_q1, t_c, t_s = tensors
    result = ((t_x0 * t_q0 + t_x1 * t_q1 + t_c) * t_s).sum((1, 2))
    expected = ((x0.astype(np.float64) * q0 + x1.astype(np.float64) * q1 + c) * s).sum((1, 2))
    items = [item for item in create_schedule([result.uop], device_facts).items if not item.is_copy]
    assert len(items) == 1

    class FusingRenderer(VectorCPURenderer):
        fused_multiply_add = True

    fused = [u for u in linearize(items[0].ast, FusingRenderer()) if u.op is Ops.MULACC]
    plain = [u for u in linearize(items[0].ast, VectorCPURenderer()) if u.op is Ops.MULACC]
    assert not plain and fused and all(u.arg == FUSED for u in fused)
    # per lane and step: two products of the partial and the scaled accumulation
    assert sum(u.dtype.count for u in fused) % 3 == 0
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-4, atol=1e-4 * float(np.abs(expected).max()))


def test_weight_gradient_read_by_two_kernels_is_stored_in_the_weights_layout() -> None:
    # Adam reads a weight's gradient in two kernels (m and v): the reduce, computed as (out, in), gets a buffer in the
    # weight's (in, out) order, so both read it contiguously (transposed, every element cost a cache line)
    x, w = _array(48, 40), _array(40, 24, seed=1)
    weight = Tensor(w, requires_grad=True)
    (Tensor(x) @ weight).relu().sum().backward()
    assert weight.grad is not None
    first, second = weight.grad * 0.1, weight.grad.square()
    items = [item for item in create_schedule([first.uop, second.uop], device_facts).items if not item.is_copy]
    names = [Kernel(item.ast).name() for item in items]
    assert "r_40_24_48" in names and "r_24_40_48" not in names, names
    torch = pytest.importorskip("torch")
    tw = torch.from_numpy(w).double().requires_grad_()
    (torch.from_numpy(x).double() @ tw).relu().sum().backward()
    assert tw.grad is not None
    reference = tw.grad.numpy()
    Tensor.realize(first, second)
    _close(first.numpy(), reference * 0.1)
    _close(second.numpy(), reference ** 2)


@pytest.mark.parametrize("vector_bytes", VECTOR_BYTES)
@pytest.mark.parametrize("rows, inner, columns", [(128, 10, 512), (20, 7, 48), (13, 5, 80), (64, 3, 32)])
def test_gathered_column_tile_matches_numpy(rows: int, inner: int, columns: int, vector_bytes: int) -> None:
    # dout @ W.T with a reduce too short for the dot tile (a classifier layer's input gradient): W's lanes are
    # gathered, one vector of them shared by a tile of rows
    from tinycore.codegen.optimize import hand_coded_optimizations
    d, w, h = _array(rows, inner), _array(columns, inner, seed=1), _array(rows, columns, seed=2)
    with cpu_vector_bytes(vector_bytes) as lanes:
        result = (Tensor(d) @ Tensor(w).T) * (Tensor(h) > 0)
        items = [item for item in create_schedule([result.uop], device_facts).items if not item.is_copy]
        notes = hand_coded_optimizations(Kernel(items[-1].ast), Device["CPU"].renderer)
        assert f"UPCAST {lanes} (matmul columns, gathered)" in notes, notes
        _close(result.numpy(), (d.astype(np.float64) @ w.T) * (h > 0))


def test_a_kernel_of_short_reduces_one_after_another_stays_on_one_worker() -> None:
    # a cross-entropy gradient over 10 classes: per row, reduces of 10 one after another; all its loop sizes
    # multiplied (128 x 10^4) would split it across the workers, whose wake-up costs more than the kernel
    from tinycore.codegen.optimize import Heuristic, hand_coded_optimizations
    logits, labels = _array(128, 10), np.random.default_rng(3).integers(0, 10, 128).astype(np.int32)
    x = Tensor(logits, requires_grad=True)
    x.sparse_categorical_crossentropy(Tensor(labels)).backward()
    assert x.grad is not None
    items = [item for item in create_schedule([x.grad.uop], device_facts).items if not item.is_copy]
    for item in items:
        assert Heuristic(Kernel(item.ast), Device["CPU"].renderer).work() < 128 * 10 * 40, Kernel(item.ast).name()
        with Context(NUM_CPU_THREADS=2):
            notes = hand_coded_optimizations(Kernel(item.ast), Device["CPU"].renderer)
        assert not any("multi-core" in note for note in notes), notes
    torch = pytest.importorskip("torch")
    tx = torch.from_numpy(logits).double().requires_grad_()
    torch.nn.functional.cross_entropy(tx, torch.from_numpy(labels).long()).backward()
    assert tx.grad is not None
    _close(x.grad.numpy(), tx.grad.numpy())


def test_only_products_of_256_rows_or_more_pack_the_weights() -> None:
    # a network's 128-row batch multiplies the weights in place, whether or not its input needs a gradient (the copy
    # into panels cost more than it saved); 256 rows pack them first
    w = _array(64, 128, seed=1)  # columns two vectors divide, 16-lane ones too
    weight = Tensor(w, requires_grad=True)
    for rows, needs_gradient, kernels in ((128, False, 1), (128, True, 1), (256, False, 2), (256, True, 2)):
        x = _array(rows, 64)
        result = Tensor(x, requires_grad=needs_gradient) @ weight
        items = [item for item in create_schedule([result.uop], device_facts).items if not item.is_copy]
        assert len(items) == kernels, (rows, needs_gradient)
        _close(result.numpy(), x.astype(np.float64) @ w)


@pytest.mark.parametrize("vector_bytes", VECTOR_BYTES)
def test_tile_stored_across_its_vectors_keeps_vector_accumulators(vector_bytes: int) -> None:
    # a classifier layer's in-place update, w (64, 10) -= lr * h.T @ d: the tile is two vectors of rows of w
    # (vectors along h's contiguous axis) by 5 of its 10 columns, stored lane by lane; its accumulators stay vectors
    h, d, w = _array(32, 64), _array(32, 10, seed=1), _array(64, 10, seed=2)
    from tinycore.codegen.optimize import hand_coded_optimizations
    with cpu_vector_bytes(vector_bytes) as lanes:
        weight, probe = Tensor(w).realize(), Tensor(w).realize()
        gradient = (Tensor(h).unsqueeze(-1) * Tensor(d).unsqueeze(-2)).sum(0)
        items = [item for item in create_schedule([probe.assign(probe - 0.5 * gradient).uop], device_facts).items
                 if not item.is_copy]
        notes = hand_coded_optimizations(Kernel(items[-1].ast), Device["CPU"].renderer)
        # 10 rows: two tiles of 5 with AVX2's 16 registers, one of 10 with 32
        rows = 5 if lanes == 8 else 10
        assert f"UPCAST {2 * lanes} (matmul columns)" in notes and f"UPCAST {rows} (matmul rows)" in notes, notes
        program = linearize(items[-1].ast, Device["CPU"].renderer)
        assert any(u.op is Ops.REDUCE and u.dtype.count == lanes for u in program) or \
            any(u.op in (Ops.MULACC, Ops.ADD) and u.dtype.count == lanes for u in program)
        weight.assign(weight - 0.5 * gradient).realize()
        _close(weight.numpy(), w - 0.5 * (h.T.astype(np.float64) @ d))


@pytest.mark.parametrize("width, nested", [(200, False), (784, False), (256, True), (512, True)])
def test_weight_gradient_row_blocks_stay_outer_when_they_fit_in_l1(width: int, nested: bool) -> None:
    # x.T @ d over a batch of 128: a row block reads one line of x per batch row (8 KB); rows of x 800 or 3136 bytes
    # apart spread over the L1 sets, so the row blocks stay outermost; 1 or 2 KB apart they crowd 4 or 2 sets, and
    # the row blocks nest inside the column blocks as for other products
    from tinycore.codegen.optimize import hand_coded_optimizations
    x, d, w = _array(128, width), _array(128, 64, seed=1), _array(width, 64, seed=2)
    weight = Tensor(w).realize()
    update = weight.assign(weight - 0.5 * (Tensor(x).T @ Tensor(d)))
    items = [item for item in create_schedule([update.uop], device_facts).items if not item.is_copy]
    notes = hand_coded_optimizations(Kernel(items[-1].ast), Device["CPU"].renderer)
    assert ("row blocks inside column blocks" in notes) == nested, notes
    _close(update.numpy(), w.astype(np.float64) - 0.5 * (x.T.astype(np.float64) @ d))


@pytest.mark.parametrize("shape, weight, options, tiled", [((2, 16, 20, 30), (32, 16, 3, 3), {}, True),
                                                            ((2, 16, 6, 40), (32, 16, 3, 3), {}, True),
                                                            ((3, 5, 11, 18), (12, 5, 3, 3), {}, True),
                                                            ((2, 3, 17, 19), (9, 3, 5, 5), {"padding": 2}, True),
                                                            ((2, 4, 12, 34), (7, 4, 3, 3), {"stride": 2}, False)])
@pytest.mark.parametrize("vector_bytes", VECTOR_BYTES)
def test_convolution_tile_sweeps_pixels_and_unrolls_the_window(shape: tuple[int, ...], weight: tuple[int, ...],
                                                                options: dict[str, int], tiled: bool,
                                                                vector_bytes: int) -> None:
    # a stride-1 window along the row gets two vectors of pixels times 4 channels (rows narrower than two vectors:
    # one vector times up to 8), the window unrolled; a strided one (its input moves 2 per pixel, 1 per window step)
    # keeps the matmul tile
    torch = pytest.importorskip("torch")
    from tinycore.codegen.optimize import hand_coded_optimizations
    x, w = _array(*shape), _array(*weight, seed=1)
    reference = torch.nn.functional.conv2d(torch.from_numpy(x).double(), torch.from_numpy(w).double(), **options)
    with cpu_vector_bytes(vector_bytes) as lanes:
        tx, tw = Tensor(x).realize(), Tensor(w).realize()
        items = [item for item in create_schedule([tx.conv2d(tw, **options).uop], device_facts).items
                 if not item.is_copy]
        notes = hand_coded_optimizations(Kernel(items[-1].ast), Device["CPU"].renderer)
        assert (f"UNROLL {weight[3]} (convolution window)" in notes) == tiled, notes
        if tiled:
            output_width = shape[3] + 2 * options.get("padding", 0) - weight[3] + 1
            # two vectors of pixels by 4 channels, 8 with 32 vector registers (16-lane vectors)
            two_vector_channels = (4, 3, 2) if lanes == 8 else (8, 6, 4, 3, 2)
            pixels, channels = (2 * lanes, two_vector_channels) if output_width >= 2 * lanes else \
                (lanes, (8, 6, 4, 3, 2))
            assert any(note.startswith(("UPCAST", "SHIFTED_UPCAST")) and f" {pixels} (convolution pixels" in note
                       for note in notes), notes
            tile = next((c for c in channels if weight[0] % c == 0), None)
            assert any(note == f"UPCAST {tile} (convolution channels)" for note in notes) or tile is None, notes
        _close(tx.conv2d(tw, **options).numpy(), reference.numpy())


def _chain_steps(uops: list) -> list[int]:
    """The step of each fused multiply-add along its accumulator's chain, in program order (0: reads the
    accumulator register, k: takes the k-1th step's result)."""
    steps: dict = {}
    order = []
    for uop in uops:
        if uop.op is Ops.MULACC:
            source = uop.src[2]
            if source in steps:
                steps[uop] = steps[source] + 1
            elif source.op is Ops.LOAD:
                steps[uop] = 0
            else:
                continue
            order.append(steps[uop])
    return order


@pytest.mark.parametrize("vector_bytes", VECTOR_BYTES)
def test_convolution_body_runs_window_step_by_window_step(vector_bytes: int) -> None:
    # the unrolled window's first step for every accumulator, then the second, ...: each step's two input vectors
    # are live only while its FMAs run (accumulator by accumulator, all six stayed live and the tile spilled)
    torch = pytest.importorskip("torch")
    with cpu_vector_bytes(vector_bytes) as lanes:
        x, w = _array(2, 16, 12, 2 * lanes + 2), _array(8, 16, 3, 3, seed=1)
        tx, tw = Tensor(x).realize(), Tensor(w).realize()
        items = [item for item in create_schedule([tx.conv2d(tw).uop], device_facts).items if not item.is_copy]
        program = lower_to_program(items[-1].ast, Device["CPU"].renderer)
        steps = _chain_steps(list(program.uops or []))
        # 2 vectors x 4 channels (8 channels with 32 vector registers), a 3-wide window
        accumulators = 2 * (4 if lanes == 8 else 8)
        assert steps.count(0) == accumulators and steps.count(2) == accumulators, steps
        assert steps == sorted(steps), steps
        # each input vector feeds every channel's FMAs and is kept in a register, not folded into each FMA as a load
        assert len(re.findall(r"TC_IN_REGISTER\(val\d+\);", program.src)) == 6, program.src
        result = tx.conv2d(tw).numpy()
    reference = torch.nn.functional.conv2d(torch.from_numpy(x).double(), torch.from_numpy(w).double())
    _close(result, reference.numpy())


def test_loads_feeding_one_multiply_add_are_not_pinned_and_matmul_order_is_unchanged() -> None:
    # a dot product's vector accumulators take one FMA per load: nothing to keep; the matmul tile's accumulators
    # take one FMA per reduce step, so its body keeps graph order (each FMA reads its accumulator)
    x, y = Tensor(_array(1 << 16)).realize(), Tensor(_array(1 << 16, seed=1)).realize()
    items = [item for item in create_schedule([(x * y).sum().uop], device_facts).items if not item.is_copy]
    program = lower_to_program(items[-1].ast, Device["CPU"].renderer)
    assert "TC_IN_REGISTER" not in (program.src or "")
    np.testing.assert_allclose((x * y).sum().numpy(), (x.numpy().astype(np.float64) * y.numpy()).sum(), rtol=1e-4)
    a, b = Tensor(_array(64, 32)).realize(), Tensor(_array(32, 64, seed=1)).realize()
    items = [item for item in create_schedule([(a @ b).uop], device_facts).items if not item.is_copy]
    program = lower_to_program(items[-1].ast, Device["CPU"].renderer)
    assert set(_chain_steps(list(program.uops or []))) == {0}
    # the two vectors of the second input, 6 rows each
    assert len(re.findall(r"TC_IN_REGISTER\(val\d+\);", program.src)) == 2
    _close((a @ b).numpy(), a.numpy().astype(np.float64) @ b.numpy())


@pytest.mark.parametrize("threads, shares", [(2, 8), (3, 12)])
def test_big_kernels_split_into_shares_the_workers_claim(threads: int, shares: int) -> None:
    from tinycore.codegen.optimize import hand_coded_optimizations
    torch = pytest.importorskip("torch")
    x, w = _array(36, 16, 40, 40), _array(16, 16, 3, 3, seed=1)
    tx, tw = Tensor(x).realize(), Tensor(w).realize()
    with Context(NUM_CPU_THREADS=threads):
        items = [item for item in create_schedule([tx.conv2d(tw).uop], device_facts).items if not item.is_copy]
        notes = hand_coded_optimizations(Kernel(items[-1].ast), Device["CPU"].renderer)
        assert f"THREAD {shares} (multi-core)" in notes, notes
        small = [item for item in create_schedule([(tx[:2] + 1).sum(axis=1).uop], device_facts).items
                 if not item.is_copy]
        small_notes = hand_coded_optimizations(Kernel(small[-1].ast), Device["CPU"].renderer)
        assert not any(note.startswith("THREAD") and note != f"THREAD {threads} (multi-core)" for note in small_notes)
        result = tx.conv2d(tw).numpy()
    reference = torch.nn.functional.conv2d(torch.from_numpy(x).double(), torch.from_numpy(w).double())
    _close(result, reference.numpy())


@pytest.mark.parametrize("vector_bytes", VECTOR_BYTES)
@pytest.mark.parametrize("rows, inner, columns", [(128, 512, 10), (30, 64, 12), (17, 40, 8), (9, 33, 5)])
def test_fewer_columns_than_a_vector_take_narrower_vectors(rows: int, inner: int, columns: int,
                                                           vector_bytes: int) -> None:
    # a 10-class output layer with 16-lane vectors: 8 lanes with the last block shifted, not a gather of W's lanes
    from tinycore.codegen.optimize import hand_coded_optimizations
    h, w = _array(rows, inner), _array(inner, columns, seed=1)
    with cpu_vector_bytes(vector_bytes) as lanes:
        product = Tensor(h) @ Tensor(w)
        items = [item for item in create_schedule([product.uop], device_facts).items if not item.is_copy]
        notes = hand_coded_optimizations(Kernel(items[-1].ast), Device["CPU"].renderer)
        narrow = max(width for width in (4, 8) if width <= columns)
        if columns < 4:
            expected = None
        elif columns >= lanes:
            expected = f"{'SHIFTED_UPCAST' if columns % lanes else 'UPCAST'} {lanes} (matmul columns"
        else:
            expected = f"{'SHIFTED_UPCAST' if columns % narrow else 'UPCAST'} {narrow} (matmul columns, narrower"
        assert expected is None or any(note.startswith(expected) for note in notes), notes
        _close(product.numpy(), h.astype(np.float64) @ w)


@pytest.mark.parametrize("vector_bytes", VECTOR_BYTES)
def test_a_convolution_row_narrower_than_a_vector_keeps_the_convolution_tile(vector_bytes: int) -> None:
    torch = pytest.importorskip("torch")
    from tinycore.codegen.optimize import hand_coded_optimizations
    # rows of 14 output pixels; 8 output channels, less than a 16-lane vector, so conv2d does not sum it channels
    # last (tinycore.tensor.conv_layouts.channels_last_wins) and the convolution tile is what codegen gets
    x, w = _array(2, 8, 16, 16), _array(8, 8, 3, 3, seed=1)
    with cpu_vector_bytes(vector_bytes) as lanes:
        tx, tw = Tensor(x).realize(), Tensor(w).realize()
        items = [item for item in create_schedule([tx.conv2d(tw).uop], device_facts).items if not item.is_copy]
        notes = hand_coded_optimizations(Kernel(items[-1].ast), Device["CPU"].renderer)
        pixels = min(lanes, 8)
        assert "UNROLL 3 (convolution window)" in notes and \
            any(f" {pixels} (convolution pixels" in note for note in notes), notes
        reference = torch.nn.functional.conv2d(torch.from_numpy(x).double(), torch.from_numpy(w).double())
        _close(tx.conv2d(tw).numpy(), reference.numpy())


@pytest.mark.parametrize("vector_bytes", VECTOR_BYTES)
@pytest.mark.parametrize("rows, inner, columns", [(128, 512, 512), (24, 64, 40), (6, 32, 16), (2, 64, 64)])
def test_dot_tile_of_a_backward_product_matches_numpy(rows: int, inner: int, columns: int, vector_bytes: int) -> None:
    # dout @ W.T: both inputs contiguous along the reduce; 8 rows of the larger input, with 64-byte vectors (32
    # registers) times 2 rows of the smaller one, lane sums folded by halves after the reduce
    from tinycore.codegen.optimize import hand_coded_optimizations
    d, w = _array(rows, inner), _array(columns, inner, seed=1)
    with cpu_vector_bytes(vector_bytes) as lanes:
        product = Tensor(d) @ Tensor(w).T
        items = [item for item in create_schedule([product.uop], device_facts).items if not item.is_copy]
        notes = hand_coded_optimizations(Kernel(items[-1].ast), Device["CPU"].renderer)
        larger = max(rows, columns)
        tile = 8 if larger % 8 == 0 else 4
        assert f"UPCAST {tile} (dot tile)" in notes and f"ACCUMULATORS {lanes} (dot reduce)" in notes, notes
        assert ("UPCAST 2 (dot tile, smaller input)" in notes) == (vector_bytes == 64 and tile == 8), notes
        program = linearize(items[-1].ast, Device["CPU"].renderer)
        halves = {u.dtype.count for u in program if u.op is Ops.GEP and len(u.arg) > 1 and
                  u.arg == tuple(range(u.arg[0], u.arg[0] + len(u.arg)))}
        assert {lanes // 2, lanes // 4} <= halves, halves
        _close(product.numpy(), d.astype(np.float64) @ w.T.astype(np.float64))


@pytest.mark.parametrize("vector_bytes", VECTOR_BYTES)
def test_uneven_worker_split_of_an_upcast_axis_is_one_loop(vector_bytes: int) -> None:
    # a convolution's weight gradient flattened to 144 outputs (torch.compile's graph): 9 vectors of 16 lanes split
    # over 2 workers (4 and 5 each); the split's trip count was simplified in some uses of its range and not in
    # others, which made two nested loops of one axis and a wrong gradient
    torch = pytest.importorskip("torch")
    x, w, g = _array(8, 1, 8, 8), _array(144, seed=1), _array(8, 16, 8, 8, seed=2)
    reference = torch.from_numpy(w).requires_grad_()
    torch.nn.functional.conv2d(torch.from_numpy(x), reference.reshape(16, 1, 3, 3), padding=1).backward(
        torch.from_numpy(g))
    with cpu_vector_bytes(vector_bytes), Context(NUM_CPU_THREADS=2):
        weight = Tensor(w, requires_grad=True)
        (Tensor(x).conv2d(weight.reshape(16, 1, 3, 3), padding=1) * Tensor(g)).sum().backward()
        assert weight.grad is not None
        items = [item for item in create_schedule([weight.grad.uop], device_facts).items if not item.is_copy]
        for item in items:
            loops = [u.arg[0] for u in linearize(item.ast, Device["CPU"].renderer) if u.op is Ops.RANGE]
            assert len(loops) == len(set(loops)), loops
        _close(weight.grad.numpy(), reference.grad.numpy())


def _inputs_the_split_indexes(uops: list) -> set[int]:
    """Element counts of the input buffers whose loads the worker index (SPECIAL core_id) moves."""
    core = [u for u in uops if u.op is Ops.SPECIAL and u.arg == "core_id"]
    assert len(core) == 1
    return {u.src[0].src[0].dtype.size for u in uops if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and
            u.src[0].src[0].op is Ops.DEFINE_GLOBAL and core[0] in u.src[0].toposort}


@pytest.mark.parametrize("vector_bytes", VECTOR_BYTES)
@pytest.mark.parametrize("rows, inner, columns, split", [(128, 784, 512, "columns"), (784, 128, 512, "rows"),
                                                         (512, 256, 96, "rows")])
def test_workers_split_the_axis_whose_input_they_would_read_again_most(rows: int, inner: int, columns: int,
                                                                       split: str, vector_bytes: int) -> None:
    # a 128-row batch times a 784 x 512 weight: split by rows, each of the 8 shares read the whole weight for its
    # 16 rows; split by columns, the shares read their 64 columns of it and share the batch's 400 KB
    x, w = _array(rows, inner), _array(inner, columns, seed=1)
    with cpu_vector_bytes(vector_bytes), Context(NUM_CPU_THREADS=2):
        product = Tensor(x) @ Tensor(w)
        items = [item for item in create_schedule([product.uop], device_facts).items if not item.is_copy]
        moved = _inputs_the_split_indexes(linearize(items[-1].ast, Device["CPU"].renderer))
        assert moved == ({inner * columns} if split == "columns" else {rows * inner}), moved
        _close(product.numpy(), x.astype(np.float64) @ w)


@pytest.mark.parametrize("vector_bytes", VECTOR_BYTES)
@pytest.mark.parametrize("shape", [(128, 16, 8, 8), (64, 32, 4, 4), (16, 16, 3, 8)])
def test_a_strided_channel_reduce_vectorizes_its_narrow_contiguous_axis(shape: tuple[int, ...],
                                                                        vector_bytes: int) -> None:
    # batchnorm's statistics of NCHW images: the channels are the contiguous output but strided in the input, so
    # vector lanes over them gather; the image rows, contiguous and narrower than a vector, take the accumulators
    from tinycore.codegen.optimize import hand_coded_optimizations
    data = _array(*shape)
    with cpu_vector_bytes(vector_bytes) as lanes:
        mean = Tensor(data).mean((0, 2, 3))
        items = [item for item in create_schedule([mean.uop], device_facts).items if not item.is_copy]
        notes = hand_coded_optimizations(Kernel(items[-1].ast), Device["CPU"].renderer)
        width = shape[-1]
        expected = width if width % lanes == 0 or width == lanes else next(
            (narrow for narrow in (8, 4) if narrow < lanes and width % narrow == 0), None)
        if expected is not None:
            assert f"ACCUMULATORS {expected} (contiguous reduce)" in notes, notes
            assert not any("contiguous output" in note for note in notes), notes
        _close(mean.numpy(), data.astype(np.float64).mean((0, 2, 3)))


@pytest.mark.parametrize("vector_bytes", VECTOR_BYTES)
@pytest.mark.parametrize("images, size, tile, second",
                         [(128, 7, 7, 2), (6, 7, 7, 2), (5, 7, 7, None), (3, 5, 5, 3), (128, 11, 8, None)])
def test_one_vector_tile_takes_its_rows_from_an_axis_a_tile_divides(vector_bytes: int, images: int, size: int,
                                                                    tile: int, second: int | None) -> None:
    # A @ B with one vector of columns and rows (images, size) whose inner axis no tile of 8, 6 or 4 divides: the
    # inner axis takes 7 or 5 rows when one divides it (neighbouring rows share a cache line; rows an image apart
    # may share an L1 set), with 32 vector registers widened by a second row axis to at most 16 rows; else the
    # outer axis takes a tile of 8, 6 or 4
    from tinycore.codegen.optimize import hand_coded_optimizations
    with cpu_vector_bytes(vector_bytes) as lanes:
        a, b = _array(images, size, 24), _array(24, lanes, seed=1)
        product = Tensor(a) @ Tensor(b)
        items = [item for item in create_schedule([product.uop], device_facts).items if not item.is_copy]
        notes = hand_coded_optimizations(Kernel(items[-1].ast), Device["CPU"].renderer)
        assert f"UPCAST {lanes} (matmul columns)" in notes and f"UPCAST {tile} (matmul rows)" in notes, notes
        wide = vector_bytes >= 64
        widened = [note for note in notes if note.endswith("(matmul rows, second axis)")]
        assert widened == ([f"UPCAST {second} (matmul rows, second axis)"] if wide and second else []), notes
        _close(product.numpy(), a.astype(np.float64) @ b)


@pytest.mark.parametrize("vector_bytes", VECTOR_BYTES)
def test_weight_gradient_tile_takes_the_kernel_rows_as_a_second_row_axis(vector_bytes: int) -> None:
    # summed channels last, a 3x3 weight gradient's row axis is its 3 kernel columns; with 32 vector registers the
    # 3 kernel rows join them (9 rows of 2 vectors of output channels), with 16 two input channels (6 rows)
    from tinycore.codegen.optimize import hand_coded_optimizations
    torch = pytest.importorskip("torch")
    x, w = _array(4, 16, 16, 16), _array(32, 16, 3, 3, seed=1)
    with cpu_vector_bytes(vector_bytes):
        weight = Tensor(w, requires_grad=True)
        Tensor(x).conv2d(weight, padding=1).square().sum().backward()
        assert weight.grad is not None
        items = [item for item in create_schedule([weight.grad.uop], device_facts).items if not item.is_copy]
        notes = [hand_coded_optimizations(Kernel(item.ast), Device["CPU"].renderer) for item in items]
        tiles = [note for note in notes if "UPCAST 3 (matmul rows)" in note]
        assert tiles, notes
        second = f"UPCAST {3 if vector_bytes >= 64 else 2} (matmul rows, second axis)"
        assert all(second in note for note in tiles), tiles
        found = weight.grad.numpy()
    tw = torch.from_numpy(w).double().requires_grad_()
    torch.nn.functional.conv2d(torch.from_numpy(x).double(), tw, padding=1).square().sum().backward()
    assert tw.grad is not None
    _close(found, tw.grad.numpy())


@pytest.mark.parametrize("rows, amount, sizes", [(26, 6, [6, 7, 6, 7]), (86, 22, [21, 22, 21, 22]),
                                                 (10, 3, [3, 3, 4])])
def test_block_opt_of_a_size_it_does_not_divide_makes_near_equal_groups(rows: int, amount: int,
                                                                         sizes: list[int]) -> None:
    case = matmul(rows, 8, 16)
    opts = [Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.BLOCK, 0, amount)]
    kernel = Kernel(case.ast).apply_opts(opts)
    outer, inner = kernel.axes[0], kernel.axes[-1]
    assert kernel.sizes[0] == len(sizes)
    # the inner loop's trip count, group by group, as the codegen computes it from the outer index
    from tinycore.uop.symbolic import simplify
    trips = [simplify(inner.src[0].substitute({outer: outer.const_like(group)})).arg for group in range(len(sizes))]
    assert trips == sizes and sum(trips) == rows
    output = np.zeros(rows * 16, dtype=np.float32)
    run_linear(linearize(case.ast, VectorCPURenderer(), opts), [output] + [array.copy() for array in case.inputs], {})
    np.testing.assert_allclose(output.reshape(rows, 16), case.reference(*case.inputs), rtol=1e-5, atol=1e-5)
    # the group index sets the inner trip count: it takes no further opts (BEAM proposes them)
    for opt in (Opt(OptOps.NEST, 0, 0), Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.THREAD, 0, 2)):
        with pytest.raises(KernelOptError, match="trip count"):
            Kernel(case.ast).apply_opts([*opts, opt])


@pytest.mark.parametrize("core_cache", [None, 2 * 1024 * 1024])
def test_packed_matmul_groups_rows_for_a_large_private_cache_and_splits_the_panels(core_cache: int | None) -> None:
    x, y = _array(1024, 1024), _array(1024, 1024, seed=1)
    with _wide_host(core_cache):
        a, b = Tensor(x).realize(), Tensor(y).realize()
        notes = _product_notes(a, b)
        found = (a @ b).numpy()
    # 6 rows x 4 vectors: 171 blocks of 6 rows, the last shifted (4.2 MB of the first input)
    assert notes[:2] == ["UPCAST 64 (matmul columns, packed panels)",
                         "SHIFTED_UPCAST 6 (matmul rows, last block shifted)"], notes
    if core_cache is None:
        # no GROUP_BYTES groups: no count of them divides 171 blocks evenly between the workers; the row blocks run
        # inside the column blocks, split into 4 shares per worker
        assert notes[2:] == ["row blocks inside column blocks", "THREAD 8 (multi-core)"], notes
    else:
        # panels of 256 KB (1024 reduce steps x 64 columns), an eighth of the cache: two groups (of 86 and 85
        # blocks) rather than groups of half the cache, every worker running both over its own 8 panels
        assert notes[2:] == ["BLOCK 86 (matmul row blocks grouped for the core's cache)",
                             "THREAD 2 (multi-core, by column panels)"], notes
    _close(found, x.astype(np.float64) @ y)


def test_wide_panels_of_a_short_reduce_keep_half_cache_groups() -> None:
    # panels of 768 reduce steps x 64 columns (192 KB) leave room in a 2 MB cache for a group of the first input
    # beside them: groups of half the cache (683 blocks of 6 rows, 12.6 MB, in 12 groups of 57), not two groups
    x, y = _array(4096, 768), _array(768, 768, seed=1)
    with _wide_host(2 * 1024 * 1024):
        a, b = Tensor(x).realize(), Tensor(y).realize()
        notes = _product_notes(a, b)
        found = (a @ b).numpy()
    assert notes == ["UPCAST 64 (matmul columns, packed panels)", "SHIFTED_UPCAST 6 (matmul rows, last block shifted)",
                     "BLOCK 57 (matmul row blocks grouped for the core's cache)",
                     "THREAD 2 (multi-core, by column panels)"], notes
    _close(found, x.astype(np.float64) @ y)


@pytest.mark.parametrize("vector_bytes", VECTOR_BYTES)
@pytest.mark.parametrize("options", [{"dilation": 2, "padding": 2}, {"groups": 4, "padding": 1}])
def test_dot_tile_of_a_weight_gradient_upcasts_the_window(vector_bytes: int, options: dict[str, int]) -> None:
    # a dilated or grouped 3x3 weight gradient summed along image rows is a dot tile whose smaller input is indexed
    # by the window: the 3 x 3 window positions share each vector of the output gradient (which one at a time read
    # again for every position), with as many output channels as the accumulators leave room for
    from tinycore.codegen.optimize import hand_coded_optimizations
    torch = pytest.importorskip("torch")
    channels = 16
    x, w = _array(4, channels, 16, 16), _array(32, channels // options.get("groups", 1), 3, 3, seed=2)
    with cpu_vector_bytes(vector_bytes):
        weight = Tensor(w, requires_grad=True)
        Tensor(x).conv2d(weight, **options).square().sum().backward()
        assert weight.grad is not None
        items = [item for item in create_schedule([weight.grad.uop], device_facts).items if not item.is_copy]
        notes = [hand_coded_optimizations(Kernel(item.ast), Device["CPU"].renderer) for item in items]
        notes += [hand_coded_optimizations(Kernel(split_merged_axes(item.ast)), Device["CPU"].renderer)
                  for item in items]
        windows = [note for note in notes if note.count("UPCAST 3 (dot tile, window)") == 2]
        assert windows, notes
        rows = "UPCAST 2 (dot tile)" if vector_bytes >= 64 else None
        assert all((rows in note) if rows else not any("(dot tile)" in line for line in note) for note in windows)
        found = weight.grad.numpy()
    tw = torch.from_numpy(w).double().requires_grad_()
    torch.nn.functional.conv2d(torch.from_numpy(x).double(), tw, **options).square().sum().backward()
    assert tw.grad is not None
    _close(found, tw.grad.numpy())
