"""Codegen end to end: hand-built kernel ASTs lowered with and without optimizations, run, compared with numpy."""
from __future__ import annotations

import numpy as np
import pytest
from codegen_kernels import (
    CASES,
    Case,
    GPURenderer,
    ScalarRenderer,
    VectorCPURenderer,
    buffer,
    elementwise_broadcast,
    flat_index,
    full_reduce,
    integer_arithmetic,
    loop,
    matmul,
    matmul_transposed,
    padded,
    padded_rows,
    random_array,
    reduce_inner,
    reduce_outer,
    softmax_numerator,
    two_outputs,
)

from tinycore.codegen import Opt, OptOps, linearize
from tinycore.codegen.interpreter import run_linear
from tinycore.codegen.opt import Kernel, KernelOptError
from tinycore.dtype import dtypes, to_numpy_dtype
from tinycore.helpers import Context
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp


def run_case(case: Case, renderer: object, opts: list[Opt] | None) -> np.ndarray:
    """Lower `case` and run it in the interpreter; returns the output buffer shaped like numpy's result."""
    uops = linearize(case.ast, renderer, opts)
    output = np.zeros(int(np.prod(case.output_shape)), dtype=to_numpy_dtype(case.output_dtype))
    run_linear(uops, [output] + [array.copy() for array in case.inputs], case.var_vals)
    return output.reshape(case.output_shape)


def check(case: Case, renderer: object, opts: list[Opt] | None) -> None:
    """The lowered kernel's output matches numpy."""
    result = run_case(case, renderer, opts)
    expected = case.expected()
    if dtypes.is_float(case.output_dtype):
        np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-5)
    else:
        np.testing.assert_array_equal(result, expected)


RENDERERS = {"vector_cpu": VectorCPURenderer(), "scalar": ScalarRenderer(), "gpu": GPURenderer()}


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
@pytest.mark.parametrize("renderer_name", sorted(RENDERERS))
def test_heuristic_matches_numpy(case: Case, renderer_name: str) -> None:
    check(case, RENDERERS[renderer_name], None)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_unoptimized_matches_numpy(case: Case) -> None:
    check(case, VectorCPURenderer(), [])


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_noopt_context_matches_numpy(case: Case) -> None:
    with Context(NOOPT=1):
        uops = linearize(case.ast, VectorCPURenderer())
    assert not any(u.dtype.count > 1 for u in uops), "NOOPT must not vectorize"
    check(case, VectorCPURenderer(), [])


def test_two_stores_in_one_kernel() -> None:
    case = two_outputs(32)
    uops = linearize(case.ast, VectorCPURenderer())
    first, second = np.zeros(32, np.float32), np.zeros(32, np.float32)
    run_linear(uops, [first, second] + [array.copy() for array in case.inputs])
    np.testing.assert_allclose(first, case.inputs[0] + case.inputs[1], rtol=1e-6)
    np.testing.assert_allclose(second, case.inputs[0] * case.inputs[1], rtol=1e-6)


EXPLICIT_OPTS = [
    (elementwise_broadcast(4, 16), [Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UPCAST, 0, 2)]),
    (elementwise_broadcast(6, 8), [Opt(OptOps.THREAD, 0, 3), Opt(OptOps.UPCAST, 1, 4)]),
    (elementwise_broadcast(7, 8), [Opt(OptOps.THREAD, 0, 3)]),
    (reduce_inner(4, 64), [Opt(OptOps.ACCUMULATORS, 1, 16), Opt(OptOps.UNROLL, 1, 2)]),
    (reduce_inner(4, 64, Ops.MAX), [Opt(OptOps.ACCUMULATORS, 1, 8)]),
    (reduce_inner(4, 64), [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.ACCUMULATORS, 0, 8)]),
    (reduce_outer(16, 8), [Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.UNROLL, 0, 4)]),
    (matmul(8, 32, 16), [Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UNROLL, 1, 4),
                         Opt(OptOps.THREAD, 0, 2)]),
    (matmul(6, 8, 8), [Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UPCAST, 0, 6), Opt(OptOps.UNROLL, 0, 8)]),
    (softmax_numerator(4, 16), [Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.ACCUMULATORS, 2, 8)]),
    (padded(16, 8, 8), [Opt(OptOps.UPCAST, 0, 8)]),
    (full_reduce(256), [Opt(OptOps.ACCUMULATORS, 0, 32), Opt(OptOps.UNROLL, 0, 2)]),
]


@pytest.mark.parametrize("case,opts", EXPLICIT_OPTS, ids=lambda value: getattr(value, "name", None))
def test_explicit_opts_match_numpy(case: Case, opts: list[Opt]) -> None:
    check(case, VectorCPURenderer(), opts)


def test_bad_opt_raises_clear_error() -> None:
    kernel = Kernel(reduce_inner(4, 64).ast)
    with pytest.raises(KernelOptError, match="UPCAST applies to output loop axes"):
        kernel.apply_opt(Opt(OptOps.UPCAST, 1, 8))
    with pytest.raises(KernelOptError, match="multiple of the amount"):
        kernel.apply_opt(Opt(OptOps.ACCUMULATORS, 1, 7))
    with pytest.raises(KernelOptError, match="names axis 5"):
        kernel.apply_opt(Opt(OptOps.UNROLL, 5, 2))


def test_non_sink_ast_raises_clear_error() -> None:
    store = reduce_inner(4, 64).ast.src[0]
    with pytest.raises(ValueError, match="SINK of STOREs"):
        Kernel(store)


# ---- structure of the optimized programs ----

def vector_loads(uops: list[UOp]) -> list[UOp]:
    """Vector loads from global buffers."""
    return [u for u in uops if u.op is Ops.LOAD and u.dtype.count > 1 and u.src[0].src[0].op is Ops.DEFINE_GLOBAL]


def test_contiguous_elementwise_uses_vector_loads_and_stores() -> None:
    uops = linearize(elementwise_broadcast(4, 64).ast, VectorCPURenderer())
    loads = vector_loads(uops)
    assert loads and all(u.dtype == dtypes.float32.vec(8) for u in loads)
    assert any(u.op is Ops.STORE and u.src[1].dtype == dtypes.float32.vec(8) for u in uops)


def test_scalar_renderer_gets_no_vectors() -> None:
    uops = linearize(elementwise_broadcast(4, 64).ast, ScalarRenderer())
    assert not any(u.dtype.count > 1 for u in uops)


def test_reduce_over_contiguous_axis_gets_vector_accumulators() -> None:
    uops = linearize(reduce_inner(64, 256).ast, VectorCPURenderer())
    registers = [u for u in uops if u.op is Ops.DEFINE_REG]
    assert len(registers) == 2 and all(r.dtype.base == dtypes.float32.vec(8) for r in registers)
    assert vector_loads(uops)


def test_matmul_gets_register_tile() -> None:
    uops = linearize(matmul(66, 64, 64).ast, VectorCPURenderer())
    registers = [u for u in uops if u.op is Ops.DEFINE_REG]
    # a 6 x 16 tile: 6 rows of two 8-wide vectors (12 accumulators), each row's value of `a` broadcast
    assert len(registers) == 12 and all(r.dtype.base == dtypes.float32.vec(8) for r in registers)
    assert len(vector_loads(uops)) == 2  # two vectors of b per reduce step, the reduce not unrolled
    broadcasts = [u for u in uops if u.op is Ops.VECTORIZE and len(set(u.src)) == 1 and u.src[0].op is Ops.LOAD]
    assert len(broadcasts) == 6


def test_narrow_matmul_gets_one_vector_tile_and_unrolled_reduce() -> None:
    uops = linearize(matmul(64, 64, 8).ast, VectorCPURenderer())
    registers = [u for u in uops if u.op is Ops.DEFINE_REG]
    # 8 columns: an 8 x 8 tile of one vector per row, the reduce unrolled by 4
    assert len(registers) == 8 and all(r.dtype.base == dtypes.float32.vec(8) for r in registers)
    assert len(vector_loads(uops)) == 4
    broadcasts = [u for u in uops if u.op is Ops.VECTORIZE and len(set(u.src)) == 1 and u.src[0].op is Ops.LOAD]
    assert len(broadcasts) == 8 * 4


def test_transposed_matmul_gets_dot_tile() -> None:
    from tinycore.codegen.optimize import DOT_TILE
    case = matmul_transposed(24, 64, 128)
    with Context(NUM_CPU_THREADS=1):
        uops = linearize(case.ast, VectorCPURenderer())
    registers = [u for u in uops if u.op is Ops.DEFINE_REG]
    # DOT_TILE rows of the larger input (b, 128 rows), one 8-wide vector accumulator each along the reduce
    assert len(registers) == DOT_TILE and all(r.dtype.base == dtypes.float32.vec(8) for r in registers)
    assert len(vector_loads(uops)) == DOT_TILE + 1  # DOT_TILE vectors of b, one of a, per reduce step
    # the loops: blocks of the larger input outside, the smaller input's 24 rows inside, then the reduce
    assert [u.src[0].arg for u in uops if u.op is Ops.RANGE] == [128 // DOT_TILE, 24, 64 // 8]
    output = np.zeros(24 * 128, np.float32)
    run_linear(uops, [output] + [array.copy() for array in case.inputs])
    np.testing.assert_allclose(output.reshape(24, 128), case.expected(), rtol=1e-5, atol=1e-5)


def test_small_axes_expansion_is_bounded() -> None:
    from tinycore.codegen.optimize import SMALL_AXES_EXPANSION
    # a 3x3 convolution-like reduce over 4x4 output tiles: upcasting and unrolling every small axis would copy the
    # body 4*4*3*3 = 144 times; the heuristic stops at SMALL_AXES_EXPANSION copies
    rows, columns, window = loop(4, 0), loop(4, 1), [loop(3, 2), loop(3, 3)]
    out, image = buffer(0, dtypes.float32, 16), buffer(1, dtypes.float32, 36)
    value = image.index(flat_index([rows, columns], [6, 1]) + flat_index(window, [6, 1])).load()
    ast = out.index(flat_index([rows, columns], [4, 1])).store(UOp(Ops.REDUCE, dtypes.float32, (value, *window),
                                                                  Ops.ADD)).sink()
    uops = linearize(ast, ScalarRenderer())
    loads = [u for u in uops if u.op is Ops.LOAD and u.src[0].src[0].op is Ops.DEFINE_GLOBAL]
    assert 1 < len(loads) <= SMALL_AXES_EXPANSION
    image_values = random_array((6, 6), dtypes.float32, 3)
    expected = np.array([[image_values[r:r + 3, c:c + 3].sum() for c in range(4)] for r in range(4)])
    output = np.zeros(16, np.float32)
    run_linear(uops, [output, image_values.reshape(-1).copy()])
    np.testing.assert_allclose(output.reshape(4, 4), expected, rtol=1e-5)


def test_big_kernel_is_split_across_workers() -> None:
    with Context(NUM_CPU_THREADS=4):
        for case in (elementwise_broadcast(1024, 1024), reduce_inner(512, 256)):
            uops = linearize(case.ast, VectorCPURenderer())
            specials = [u for u in uops if u.op is Ops.SPECIAL]
            assert len(specials) == 1 and specials[0].arg == "core_id" and specials[0].src[0].arg == 4


def test_small_elementwise_kernel_stays_on_one_worker() -> None:
    # 65,536 outputs without a reduce: memory-bound, waking a worker costs about what the kernel takes; twice that
    # many (Adam's update of a 512 x 256 weight) are split
    with Context(NUM_CPU_THREADS=4):
        small = linearize(elementwise_broadcast(256, 256).ast, VectorCPURenderer())
        split = linearize(elementwise_broadcast(512, 256).ast, VectorCPURenderer())
    assert not any(u.op is Ops.SPECIAL for u in small)
    assert [u.src[0].arg for u in split if u.op is Ops.SPECIAL] == [4]


def test_small_kernel_is_not_split() -> None:
    with Context(NUM_CPU_THREADS=4):
        uops = linearize(elementwise_broadcast(16, 64).ast, VectorCPURenderer())
    assert not any(u.op is Ops.SPECIAL for u in uops)


def test_gpu_renderer_maps_output_axes_to_thread_indices() -> None:
    uops = linearize(elementwise_broadcast(8, 32).ast, GPURenderer(), opts=[])
    specials = {u.arg: u.src[0].arg for u in uops if u.op is Ops.SPECIAL}
    assert specials == {"gidx0": 32, "gidx1": 8}
    assert not any(u.op is Ops.RANGE for u in uops)


def test_gpu_renderer_keeps_axes_beyond_global_max_as_loops() -> None:
    uops = linearize(elementwise_broadcast(4, 1024).ast, GPURenderer(), opts=[])
    specials = {u.arg: u.src[0].arg for u in uops if u.op is Ops.SPECIAL}
    assert specials == {"gidx0": 4}
    assert sum(u.op is Ops.RANGE for u in uops) == 1


# ---- the same kernels compiled by the CPU device's C renderer and compiler ----

def run_on_cpu(case: Case, opts: list[Opt] | None = None) -> np.ndarray:
    """Lower `case` for the CPU device, compile it and run it on numpy memory; returns the output."""
    from tinycore.codegen import lower_to_program
    from tinycore.device.registry import Device
    device = Device["CPU"]
    spec = lower_to_program(case.ast, device.renderer, opts)
    program = device.runtime(spec.function_name, device.compiler.compile_cached(spec.src))
    output = np.zeros(int(np.prod(case.output_shape)), dtype=to_numpy_dtype(case.output_dtype))
    arrays = [output] + [np.ascontiguousarray(array.copy()) for array in case.inputs]
    global_size, local_size = spec.launch_dims(case.var_vals)
    program(*[array.ctypes.data for array in arrays], global_size=global_size, local_size=local_size,
            vals=spec.vals(case.var_vals))
    return output.reshape(case.output_shape)


def check_on_cpu(case: Case, opts: list[Opt] | None = None) -> None:
    """The compiled kernel's output matches numpy."""
    result, expected = run_on_cpu(case, opts), case.expected()
    if dtypes.is_float(case.output_dtype):
        np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-4)
    else:
        np.testing.assert_array_equal(result, expected)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_cpu_device_matches_numpy(case: Case) -> None:
    check_on_cpu(case)


@pytest.mark.parametrize("case,opts", EXPLICIT_OPTS, ids=lambda value: getattr(value, "name", None))
def test_cpu_device_explicit_opts_match_numpy(case: Case, opts: list[Opt]) -> None:
    check_on_cpu(case, opts)


@pytest.mark.parametrize("case", [elementwise_broadcast(1024, 1024), matmul(96, 64, 128), reduce_inner(512, 256),
                                  reduce_outer(256, 512), softmax_numerator(1024, 1024), padded(1 << 20, 7, 9),
                                  matmul_transposed(64, 128, 96), matmul_transposed(200, 64, 24)],
                         ids=lambda case: case.name)
def test_cpu_device_multicore_matches_numpy(case: Case) -> None:
    with Context(NUM_CPU_THREADS=3):
        from tinycore.codegen import linearize as lower
        assert any(u.op is Ops.SPECIAL and u.arg == "core_id" for u in lower(case.ast, VectorCPURenderer()))
        check_on_cpu(case)


def test_debug_3_prints_the_optimizations(capsys: pytest.CaptureFixture[str]) -> None:
    with Context(DEBUG=3, NUM_CPU_THREADS=2):
        linearize(reduce_inner(512, 256).ast, VectorCPURenderer())
    printed = capsys.readouterr().out
    assert "r_512_256" in printed and "ACCUMULATORS 16" in printed and "THREAD 2" in printed


FUZZ_CASES = [elementwise_broadcast(4, 16), reduce_inner(4, 32), reduce_outer(8, 16), matmul(4, 8, 16),
              softmax_numerator(2, 16), padded_rows(2, 16, 1, 1), integer_arithmetic(32), full_reduce(64)]


@pytest.mark.parametrize("seed", range(24))
def test_random_opt_sequences_match_numpy(seed: int) -> None:
    """Random valid opt sequences (what a search would try) never change the result."""
    generator = np.random.default_rng(seed)
    case = FUZZ_CASES[seed % len(FUZZ_CASES)]
    kernel = Kernel(case.ast)
    chosen: list[Opt] = []
    for _ in range(int(generator.integers(1, 4))):
        candidates = [Opt(op, axis, amount) for op in OptOps for axis in range(len(kernel.axes))
                      for amount in (2, 4, 8)]
        generator.shuffle(candidates)
        for opt in candidates:
            try:
                kernel.apply_opt(opt)
            except KernelOptError:
                continue
            chosen.append(opt)
            break
    assert chosen, "at least one opt applies to every fuzz kernel"
    check(case, VectorCPURenderer(), chosen)


def test_substitute_fold_rebuilds_only_what_depends_on_the_keys() -> None:
    from tinycore.codegen.simplify import substitute_fold
    first, second = loop(8, 0), loop(8, 1)
    untouched = second * 5 + 1
    expression = (first * 4 + 3) * untouched
    result = substitute_fold(expression, {first: UOp.const(dtypes.int32, 2)})
    # the part without `first` is the same node; the folded constant moves to the right of the product
    assert result.op is Ops.MUL and result.src[0] is untouched
    assert result.src[1].op is Ops.CONST and result.src[1].arg == 2 * 4 + 3
    assert substitute_fold(expression, {expression: untouched}) is untouched


@pytest.mark.parametrize("opts", [None, [Opt(OptOps.UNROLL, 1, 2)],
                                  [Opt(OptOps.UNROLL, 1, 3), Opt(OptOps.UPCAST, 0, 4)]])
@pytest.mark.parametrize("reduce_op", [Ops.ADD, Ops.MAX, Ops.MUL])
def test_reduce_of_a_value_invariant_along_the_loop(opts: list[Opt] | None, reduce_op: Ops) -> None:
    # out[i] = reduce over j < 6 of a[i]: the value does not change along j (an average pool's element count)
    rows, window = loop(8, 0), loop(6, 1)
    out, source = buffer(0, dtypes.float32, 8), buffer(1, dtypes.float32, 8)
    value = source.index(flat_index([rows], [1])).load()
    ast = out.index(flat_index([rows], [1])).store(UOp(Ops.REDUCE, dtypes.float32, (value, window), reduce_op)).sink()
    values = random_array((8,), dtypes.float32, 5)
    output = np.zeros(8, np.float32)
    run_linear(linearize(ast, ScalarRenderer(), opts), [output, values.copy()])
    expected = {Ops.ADD: values * 6, Ops.MAX: values, Ops.MUL: values.astype(np.float64) ** 6}[reduce_op]
    np.testing.assert_allclose(output, expected, rtol=1e-5)


def test_lanes_casting_different_dtypes_are_not_packed_into_one_cast() -> None:
    """A bool comparison and a float, each cast to int32 and stored side by side: the two CAST lanes convert
    different types, so they must not become one vector CAST (the float lane came out as a bool before)."""
    from tinycore import Tensor
    values = np.array([2.5, -3.75, 0.5], dtype=np.float32)
    limits = np.array([1.0, 0.0, 0.5], dtype=np.float32)
    for index in range(len(values)):
        a, b = values[index:index + 1], limits[index:index + 1]
        result = (Tensor(a) >= Tensor(b)).cat(Tensor(a).cast("int32"), dim=-1).numpy()
        np.testing.assert_array_equal(result, np.concatenate([(a >= b).astype(np.int32), a.astype(np.int32)]))
