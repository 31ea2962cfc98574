"""The CPU device end to end: hand-built linear programs rendered to C, compiled, run, compared with numpy."""
from __future__ import annotations

import ctypes
import math
import os

import numpy as np
import pytest
import torch
from tiny_cpu.allocator import ALIGNMENT, CPUAllocator
from tiny_cpu.compiler import ClangCompiler
from tiny_cpu.device import CPUDevice
from tiny_cpu.renderer import CRenderer, make_c_renderer
from tiny_cpu.runtime import CPUProgram

from tinycore.codegen.division import guard_divisions
from tinycore.codegen.narrow_floats import compute_narrow_floats
from tinycore.device.buffer import Buffer
from tinycore.device.compiler import CompileError
from tinycore.dtype import DType, dtypes, to_numpy_dtype
from tinycore.helpers import Context
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp

I32 = dtypes.int32
F32 = dtypes.float32


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Every test compiles into its own cache directory."""
    monkeypatch.setenv("TINYCORE_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def device() -> CPUDevice:
    return CPUDevice("CPU")


# ---------------------------------------------------------------- helpers


def const(value, dtype: DType = I32) -> UOp:
    return UOp.const(dtype, value)


def glob(position: int, dtype: DType, size: int) -> UOp:
    return UOp(Ops.DEFINE_GLOBAL, dtype.ptr(size), (), position)


def loop(end: int | UOp, axis: int = 0) -> UOp:
    return UOp(Ops.RANGE, I32, (end if isinstance(end, UOp) else const(end),), (axis, "loop"))


def end(store: UOp, *ranges: UOp) -> UOp:
    return UOp(Ops.END, dtypes.void, (store, *ranges))


def linear(*roots: UOp) -> list[UOp]:
    """Roots in order, each preceded by the sources it needs that are not listed yet (a simple linearizer)."""
    order: dict[UOp, None] = {}
    for root in roots:
        for node in root.toposort:
            order.setdefault(node, None)
    return list(order)


def run(device: CPUDevice, uops: list[UOp], arrays: list[np.ndarray], global_size=(1, 1, 1), vals=(),
        name: str = "kernel") -> list[np.ndarray]:
    """Render, compile and run `uops` on buffers holding `arrays` (position order); return the buffers' contents."""
    spec = device.renderer.to_program(uops, name)
    program = device.runtime(spec.name, device.compiler.compile_cached(spec.src))
    buffers = []
    for array in arrays:
        buffer = Buffer("CPU", array.size, _dtype_of(array), allocator=device.allocator)
        buffer.copyin(memoryview(np.ascontiguousarray(array)).cast("B"))
        buffers.append(buffer)
    program(*[buffer._buf for buffer in buffers], global_size=global_size, vals=vals)
    return [np.frombuffer(buffer.tobytes(), dtype=array.dtype).reshape(array.shape) for buffer, array in
            zip(buffers, arrays, strict=True)]


def _dtype_of(array: np.ndarray) -> DType:
    from tinycore.dtype import from_numpy_dtype
    return from_numpy_dtype(array.dtype)


def elementwise(device: CPUDevice, function, inputs: list[np.ndarray], out_dtype: DType,
                name: str = "kernel") -> np.ndarray:
    """out[i] = function(*loads) over a loop of len(inputs[0])."""
    size = inputs[0].size
    out = glob(0, out_dtype, size)
    ranged = loop(size)
    loads = [glob(position + 1, _dtype_of(array), size).index(ranged).load() for position, array in
             enumerate(inputs)]
    # what codegen does before rendering: divisions by zero guarded, ops on bfloat16 computed in float32
    store = compute_narrow_floats(guard_divisions([out.index(ranged).store(function(*loads))]),
                                  frozenset({dtypes.bfloat16}))[0]
    program = linear(end(store, ranged))
    result = np.zeros(size, dtype=to_numpy_dtype(out_dtype))
    return run(device, program, [result, *inputs], name=name)[0]


# ---------------------------------------------------------------- programs


def test_elementwise_add(device):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(1000).astype(np.float32), rng.standard_normal(1000).astype(np.float32)
    np.testing.assert_array_equal(elementwise(device, lambda x, y: x + y, [a, b], F32), a + b)


def test_reduction_with_register_accumulator(device):
    rows, cols = 7, 33
    x = np.random.default_rng(1).standard_normal((rows, cols)).astype(np.float32)
    out, data = glob(0, F32, rows), glob(1, F32, rows * cols)
    row = loop(rows, 0)
    accumulator = UOp(Ops.DEFINE_REG, F32.ptr(1, "reg"), (), 0)
    slot = accumulator.index(const(0))
    initial = slot.store(const(0.0, F32))
    column = loop(cols, 1)
    value = data.index(row * cols + column).load()
    running = UOp(Ops.LOAD, F32, (slot, initial))
    update = slot.store(running + value)
    closed = end(update, column)
    total = UOp(Ops.LOAD, F32, (slot, closed))
    program = linear(row, accumulator, initial, column, end(out.index(row).store(total), row))
    assert program.index(initial) < program.index(column) < program.index(closed) < program.index(total)
    result = run(device, program, [np.zeros(rows, np.float32), x.reshape(-1)])[0]
    np.testing.assert_allclose(result, x.sum(axis=1), rtol=1e-5, atol=1e-5)


def test_gated_loads_pad(device):
    x = np.arange(1, 11, dtype=np.float32)
    padded = len(x) + 5
    out, data = glob(0, F32, padded), glob(1, F32, len(x))
    index = loop(padded)
    valid = (index < 12).alu(Ops.AND, (index < 2).logical_not())
    gated = UOp(Ops.INDEX, F32.ptr(len(x)), (data, index + -2, valid))
    program = linear(end(out.index(index).store(gated.load() * 2.0), index))
    result = run(device, program, [np.zeros(padded, np.float32), x])[0]
    np.testing.assert_array_equal(result, np.pad(x, (2, 3)) * 2)


def test_gated_load_alternative_and_gated_store(device):
    x = np.arange(8, dtype=np.float32)
    out, data = glob(0, F32, 8), glob(1, F32, 8)
    index = loop(8)
    gate = index < 5
    load = UOp(Ops.LOAD, F32, (UOp(Ops.INDEX, F32.ptr(8), (data, index, gate)), const(-1.0, F32)))
    store_gate = index.alu(Ops.MOD, const(2)).eq(0)
    store = UOp(Ops.INDEX, F32.ptr(8), (out, index, store_gate)).store(load)
    result = run(device, linear(end(store, index)), [np.full(8, 9.0, np.float32), x])[0]
    expected = np.where(np.arange(8) % 2 == 0, np.where(np.arange(8) < 5, x, -1.0), 9.0)
    np.testing.assert_array_equal(result, expected)


def test_integer_division_c_semantics(device):
    pairs = [(7, 2), (-7, 2), (7, -2), (-7, -2), (0, 3), (-1, 5), (9, 3), (-9, 4), (5, 0)]
    # C: quotient truncates toward zero, remainder has the dividend's sign; by zero gives 0 (no trap)
    quotients = [3, -3, -3, 3, 0, 0, 3, -2, 0]
    remainders = [1, -1, 1, -1, 0, -1, 0, -1, 0]
    a = np.array([p[0] for p in pairs], np.int32)
    b = np.array([p[1] for p in pairs], np.int32)
    np.testing.assert_array_equal(elementwise(device, lambda x, y: x.alu(Ops.IDIV, y), [a, b], I32), quotients)
    np.testing.assert_array_equal(elementwise(device, lambda x, y: x.alu(Ops.MOD, y), [a, b], I32), remainders)
    by_constant = elementwise(device, lambda x: x.alu(Ops.IDIV, const(-2)), [a], I32)
    np.testing.assert_array_equal(by_constant, [-3, 3, -3, 3, 0, 0, -4, 4, -2])


def test_int64_uint8_bool(device):
    big = np.array([2**40, -(2**40), 3, 2**62], np.int64)
    np.testing.assert_array_equal(elementwise(device, lambda x: x * 3 + 1, [big], dtypes.int64), big * 3 + 1)
    small = np.array([200, 100, 255, 0], np.uint8)
    other = np.array([100, 200, 1, 0], np.uint8)
    added = elementwise(device, lambda x, y: (x + y).alu(Ops.CMPLT, const(50, dtypes.uint8)), [small, other],
                        dtypes.bool)
    np.testing.assert_array_equal(added, (small + other) < 50)  # wraps to 44, 44, 0, 0 before comparing
    flags = np.array([True, False, True, False])
    flipped = elementwise(device, lambda x, y: x.alu(Ops.XOR, y).alu(Ops.OR, x.logical_not()),
                          [flags, np.array([True, True, False, False])], dtypes.bool)
    np.testing.assert_array_equal(flipped, (flags ^ np.array([True, True, False, False])) | ~flags)


def test_float16_and_float64(device):
    rng = np.random.default_rng(2)
    halves = [rng.standard_normal(64).astype(np.float16) for _ in range(2)]
    result = elementwise(device, lambda x, y: x * y + x, halves, dtypes.float16)
    np.testing.assert_array_equal(result, halves[0] * halves[1] + halves[0])
    positive = rng.uniform(0.1, 10, 64)
    math_ops = elementwise(device, lambda x: x.exp2() + x.log2() + x.sin() + x.sqrt() + x.reciprocal(),
                           [positive], dtypes.float64)
    expected = np.exp2(positive) + np.log2(positive) + np.sin(positive) + np.sqrt(positive) + 1 / positive
    np.testing.assert_allclose(math_ops, expected, rtol=1e-12)
    half_math = elementwise(device, lambda x: x.sqrt(), [halves[0] * halves[0]], dtypes.float16)
    np.testing.assert_allclose(half_math.astype(np.float32), np.abs(halves[0]).astype(np.float32), rtol=2e-3)


def test_casts_and_bitcasts(device):
    values = np.array([1.7, -1.7, 0.0, 3e4, -0.5, 100.25], np.float32)
    truncated = elementwise(device, lambda x: x.cast(I32), [values[[0, 1, 2, 4, 5]]], I32)
    np.testing.assert_array_equal(truncated, [1, -1, 0, 0, 100])
    as_bool = elementwise(device, lambda x: x.cast(dtypes.bool), [values], dtypes.bool)
    np.testing.assert_array_equal(as_bool, values.astype(bool))
    back = elementwise(device, lambda x: x.cast(dtypes.bool).cast(F32) + x.cast(dtypes.float64).cast(F32),
                       [values], F32)
    np.testing.assert_array_equal(back, values.astype(bool).astype(np.float32) + values)
    bits = elementwise(device, lambda x: x.bitcast(dtypes.uint32), [values], dtypes.uint32)
    np.testing.assert_array_equal(bits, values.view(np.uint32))
    half_bits = elementwise(device, lambda x: x.cast(dtypes.float16).bitcast(dtypes.int16), [values], dtypes.int16)
    np.testing.assert_array_equal(half_bits, values.astype(np.float16).view(np.int16))
    special = np.array([np.inf, -np.inf, np.nan, 1.0], np.float32)
    kept = elementwise(device, lambda x: x * 1.0 + x.alu(Ops.SUB, x) * 0.0, [special], F32)
    np.testing.assert_array_equal(np.isnan(kept), [True, True, True, False])
    passed = elementwise(device, lambda x: x.alu(Ops.MAX, const(-math.inf, F32)), [special], F32)
    np.testing.assert_array_equal(passed[[0, 1, 3]], special[[0, 1, 3]])


def test_bfloat16_through_float(device):
    values = np.array([1.0, -2.5, 3.14159, 1e-3, 65504.0, 1e38], np.float32)
    rounded = elementwise(device, lambda x: x.cast(dtypes.bfloat16).cast(F32), [values], F32)
    expected = torch.tensor(values).to(torch.bfloat16).to(torch.float32).numpy()
    np.testing.assert_array_equal(rounded, expected)
    doubled = elementwise(device, lambda x: (x.cast(dtypes.bfloat16) * UOp.const(dtypes.bfloat16, 2.0)).cast(F32),
                          [values], F32)
    np.testing.assert_array_equal(doubled, (torch.tensor(values).to(torch.bfloat16) * 2).float().numpy())


@pytest.mark.parametrize("op, function", [
    (Ops.MAX, np.maximum), (Ops.CMPNE, np.not_equal), (Ops.CMPEQ, np.equal), (Ops.CMPLT, np.less),
    (Ops.SHL, np.left_shift), (Ops.SHR, np.right_shift), (Ops.AND, np.bitwise_and), (Ops.OR, np.bitwise_or),
    (Ops.XOR, np.bitwise_xor), (Ops.SUB, np.subtract)])
def test_integer_binary_ops(device, op, function):
    a = np.array([5, -3, 12, 7, 0, 31], np.int32)
    b = np.array([1, 2, 3, 7, 4, 0], np.int32)
    out_dtype = dtypes.bool if op in (Ops.CMPNE, Ops.CMPEQ, Ops.CMPLT) else I32
    np.testing.assert_array_equal(elementwise(device, lambda x, y: x.alu(op, y), [a, b], out_dtype), function(a, b))


def test_float_ternary_and_pow(device):
    rng = np.random.default_rng(3)
    a, b, c = (rng.uniform(0.5, 2, 32).astype(np.float32) for _ in range(3))
    result = elementwise(device, lambda x, y, z: (x < y).where(x.alu(Ops.MULACC, y, z), x.alu(Ops.POW, y) / z)
                         .alu(Ops.NEG), [a, b, c], F32)
    np.testing.assert_allclose(result, -np.where(a < b, a * b + c, np.power(a, b) / c), rtol=1e-6)
    fractions = np.array([2.5, -2.5, 0.99, -0.99, 7.0, 1e10], np.float32)
    np.testing.assert_array_equal(elementwise(device, lambda x: x.trunc(), [fractions], F32), np.trunc(fractions))


def test_vectorized_float8_loads_and_stores(device):
    count = 64
    rng = np.random.default_rng(4)
    a = rng.standard_normal(count + 1).astype(np.float32)
    b = rng.standard_normal(count).astype(np.float32)
    out, first, second = glob(0, F32, count), glob(1, F32, count + 1), glob(2, F32, count)
    group = loop(count // 8)
    base = group * 8
    lanes_a = first.index(base + 1).load(dtype=F32.vec(8))  # unaligned by one element
    lanes_b = second.index(base).load(dtype=F32.vec(8))
    offsets = UOp(Ops.VCONST, F32.vec(8), (), tuple(float(lane) for lane in range(8)))
    result = lanes_a * lanes_b + offsets
    spread = UOp(Ops.VECTORIZE, F32.vec(8), tuple(result.gep(7 - lane) for lane in range(8)))
    program = linear(end(out.index(base).store(spread), group))
    source = device.renderer.render(program)
    assert "float8" in source
    got = run(device, program, [np.zeros(count, np.float32), a, b])[0]
    expected = (a[1:] * b + np.tile(np.arange(8, dtype=np.float32), count // 8)).reshape(-1, 8)[:, ::-1]
    np.testing.assert_allclose(got, expected.reshape(-1), rtol=1e-6)


def test_gated_vector_load(device):
    x = np.arange(1, 17, dtype=np.float32)
    out, data = glob(0, F32, 32), glob(1, F32, 16)
    group = loop(4)
    gate = (group < 1).logical_not().alu(Ops.AND, group < 3)  # groups 1 and 2 read x, the others pad with zeros
    gated = UOp(Ops.INDEX, F32.ptr(16), (data, group * 8 + -8, gate))
    lanes = gated.load(dtype=F32.vec(8)) + UOp.const(F32.vec(8), 0.5)
    got = run(device, linear(end(out.index(group * 8).store(lanes), group)), [np.zeros(32, np.float32), x])[0]
    np.testing.assert_array_equal(got, np.pad(x, (8, 8)) + 0.5)


def test_vector_comparison_where_and_cast(device):
    a = np.arange(-8, 8, dtype=np.float32)
    out, data = glob(0, I32, 16), glob(1, F32, 16)
    group = loop(4)
    lanes = data.index(group * 4).load(dtype=F32.vec(4))
    zero = UOp.const(F32.vec(4), 0.0)
    chosen = (lanes < zero).where(-lanes, lanes * 2.0).cast(I32.vec(4))
    got = run(device, linear(end(out.index(group * 4).store(chosen), group)), [np.zeros(16, np.int32), a])[0]
    np.testing.assert_array_equal(got, np.where(a < 0, -a, a * 2).astype(np.int32))


def test_core_id_split_two_workers(device):
    size, workers = 1000, 2
    x = np.random.default_rng(5).standard_normal(size).astype(np.float32)
    out, data = glob(0, F32, size), glob(1, F32, size)
    core = UOp(Ops.SPECIAL, I32, (const(workers),), "core_id")
    share = size // workers
    index = loop(share)
    position = core * share + index
    program = linear(core, end(out.index(position).store(data.index(position).load() * 3.0 + 1.0), index))
    spec = device.renderer.to_program(program, "split")
    assert spec.global_size[0] == workers and "core_id" in spec.src
    for threads in (0, 1):
        with Context(NUM_CPU_THREADS=threads):
            got = run(device, program, [np.zeros(size, np.float32), x], global_size=(workers, 1, 1))[0]
        np.testing.assert_allclose(got, x * 3 + 1, rtol=1e-6)


def test_define_var_if_and_wait_timing(device):
    x = np.arange(10, dtype=np.float32)
    out, data = glob(0, F32, 10), glob(1, F32, 10)
    limit = UOp(Ops.DEFINE_VAR, I32, (), ("limit", 1, 10))
    index = loop(limit)
    condition = index.alu(Ops.MOD, const(3)).ne(0)
    opened = UOp(Ops.IF, dtypes.void, (condition,))
    store = out.index(index).store(data.index(index).load() + 100.0)
    closed = UOp(Ops.ENDIF, dtypes.void, (opened,))
    program = [out, data, limit, index, condition, opened, data.index(index), data.index(index).load(),
               data.index(index).load() + 100.0, out.index(index), store, closed, end(store, index)]
    program = list(dict.fromkeys(linear(limit, index, condition, opened) + program))
    spec = device.renderer.to_program(program, "guarded")
    assert [variable.arg[0] for variable in spec.vars] == ["limit"] and spec.vals({"limit": 7}) == (7,)
    compiled = device.runtime(spec.name, device.compiler.compile_cached(spec.src))
    buffers = [Buffer("CPU", 10, F32, allocator=device.allocator).copyin(memoryview(array))
               for array in (np.zeros(10, np.float32), x)]
    elapsed = compiled(*[buffer._buf for buffer in buffers], vals=(7,), wait=True)
    assert isinstance(elapsed, float) and elapsed > 0
    expected = np.where((np.arange(10) < 7) & (np.arange(10) % 3 != 0), x + 100, 0)
    np.testing.assert_array_equal(buffers[0].numpy(), expected)


# ---------------------------------------------------------------- device parts


def test_cpu_allocator_alignment_reuse_views():
    allocator = CPUAllocator("CPU")
    addresses = [allocator.alloc(size) for size in (1, 100, 4096)]
    assert all(address % ALIGNMENT == 0 for address in addresses)
    allocator.free(addresses[1], 100)
    assert allocator.alloc(100) == addresses[1]
    buffer = Buffer("CPU", 16, F32, allocator=allocator).copyin(memoryview(np.arange(16, dtype=np.float32)))
    view = buffer.view(4, dtypes.int32, 8)
    np.testing.assert_array_equal(view.numpy(), np.arange(16, dtype=np.float32)[8:12].view(np.int32))
    view.copyin(memoryview(np.array([1, 2, 3, 4], np.int32)))
    np.testing.assert_array_equal(buffer.numpy()[8:12].view(np.int32), [1, 2, 3, 4])
    host = buffer.as_memoryview()
    assert ctypes.addressof(ctypes.c_char.from_buffer(host)) == buffer._buf
    with pytest.raises(MemoryError, match="CPU.*bytes"):
        allocator.alloc(1 << 62)


def test_compiler_errors_and_cc_override(monkeypatch):
    with pytest.raises(CompileError) as error:
        ClangCompiler().compile("void broken( { }")
    assert "error" in error.value.log and "broken" in error.value.log
    monkeypatch.setenv("CC", "gcc")
    assert ClangCompiler().command[0].endswith("gcc")
    monkeypatch.setenv("CC", "no-such-compiler-tinycore")
    with pytest.raises(RuntimeError, match="CC="):
        ClangCompiler()


def test_disk_cache_hit_and_corrupt_entry(tmp_path, monkeypatch):
    renderer, compiler = make_c_renderer("CPU", None)
    assert isinstance(renderer, CRenderer)
    calls = []
    original = compiler.compile
    monkeypatch.setattr(compiler, "compile", lambda src: calls.append(src) or original(src))
    source = "void tc_cache_probe(float* restrict data0) { data0[0] = 42.0f; }\n"
    first = compiler.compile_cached(source)
    second_compiler = ClangCompiler()
    monkeypatch.setattr(second_compiler, "compile", lambda src: calls.append(src) or original(src))
    assert second_compiler.compile_cached(source) == first and len(calls) == 1
    path = compiler.cache_path(compiler.cache_key(source))
    path.write_bytes(path.read_bytes()[:-20])
    third = ClangCompiler()
    monkeypatch.setattr(third, "compile", lambda src: calls.append(src) or original(src))
    library = third.compile_cached(source)
    assert len(calls) == 2
    program = CPUProgram("tc_cache_probe", library)
    buffer = Buffer("CPU", 1, F32, allocator=CPUAllocator()).ensure_allocated()
    program(buffer._buf)
    assert buffer.numpy()[0] == 42.0


def test_no_files_left_behind(device, tmp_path):
    before = set(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else set()
    x = np.ones(4, np.float32)
    elementwise(device, lambda value: value + 1.0, [x], F32, name="leftover_probe")
    leftovers = list((tmp_path / "cache").rglob("*.so"))
    assert leftovers == []
    if before:
        import gc
        gc.collect()
        assert len(set(os.listdir("/proc/self/fd")) - before) <= 1


def test_compile_batch_keeps_same_named_kernels_apart():
    compiler = ClangCompiler()
    kernels = [("tc_same", "void tc_same(float* restrict data0) { data0[0] = 1.5f; }\n"),
               ("tc_same", "void tc_same(float* restrict data0) { data0[0] = -2.0f; }\n"),
               ("tc_other", "void tc_other(float* restrict data0, const int core_id) { data0[core_id] = 7.0f; }\n")]
    library, symbols = compiler.compile_batch(kernels)
    assert len(set(symbols)) == 3 and all(symbol.startswith(name) for symbol, (name, _) in
                                          zip(symbols, kernels, strict=True))
    buffer = Buffer("CPU", 2, F32, allocator=CPUAllocator()).ensure_allocated()
    for symbol, expected in zip(symbols[:2], (1.5, -2.0), strict=True):
        CPUProgram(symbol, library)(buffer._buf)
        assert buffer.numpy()[0] == expected
    CPUProgram(symbols[2], library)(buffer._buf, global_size=(2, 1, 1))
    np.testing.assert_array_equal(buffer.numpy(), [7.0, 7.0])
    with pytest.raises(CompileError, match="expected once"):
        compiler.compile_batch([("tc_missing", "void tc_elsewhere(float* data0) { }\n")])


def test_a_program_dropped_while_a_library_loads_releases_without_deadlock():
    """The collector can run a dropped program's __del__ inside ctypes.CDLL, while _load holds the paths lock on the
    same thread (a test run hung there): releasing under the held lock must finish, and the path is freed."""
    import threading

    from tiny_cpu import runtime
    source = "void tc_drop(float* restrict data0) { data0[0] = 3.0f; }\n"
    program = CPUProgram("tc_drop", ClangCompiler().compile_cached(source))
    path, finished = program._path, threading.Event()

    def release_under_the_lock() -> None:
        with runtime._PATHS_LOCK:
            program.__del__()
        finished.set()

    threading.Thread(target=release_under_the_lock, daemon=True).start()
    assert finished.wait(20), "releasing a program under the held paths lock deadlocked"
    assert path is None or path not in runtime._LIVE_PATHS


def test_launcher_runs_one_and_several_workers():
    source = "void tc_fill(float* restrict data0, const int core_id) { data0[core_id] = (float)(core_id + 1); }\n"
    program = CPUProgram("tc_fill", ClangCompiler().compile_cached(source))
    buffer = Buffer("CPU", 4, F32, allocator=CPUAllocator()).ensure_allocated()
    buffer.copyin(memoryview(np.zeros(4, np.float32).tobytes()))
    program.launcher((1, 1, 1))([buffer._buf])
    np.testing.assert_array_equal(buffer.numpy(), [1.0, 0.0, 0.0, 0.0])
    program.launcher((4, 1, 1))([buffer._buf])
    np.testing.assert_array_equal(buffer.numpy(), [1.0, 2.0, 3.0, 4.0])
