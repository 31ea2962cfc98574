"""CUDA C from the CUDA renderer compiled by NVRTC (from its pip wheel) for sm_80 and sm_90, without a GPU: each
representative kernel becomes a CUDA ELF holding the kernel's symbol; the linear programs the CUDA renderer's
codegen produced run in the core's interpreter against numpy (the same programs the MOCK GPU runs; tensor-core ops
through the core's wave-collective interpreter); the half matmul is chosen for the tensor cores and its SASS has
HMMA."""
from __future__ import annotations

import numpy
import pytest
from nv_kernels import CASES, Case, case_kernels, kernels_of, symbolic_kernel
from tiny_nv.inspect import EM_CUDA, disassemble, disassembler, elf_machine, elf_symbols
from tiny_nv.nvrtc import NVRTCCompiler, compile_cuda, nvrtc_status, parse_arch
from tiny_nv.renderer import CUDARenderer
from tiny_nv.tensor_core import uses_tensor_cores, warp_program

from tinycore import Tensor
from tinycore.codegen import linearize, lower_to_program
from tinycore.device.compiler import CompileError
from tinycore.dtype import PtrDType, dtypes, to_numpy_dtype
from tinycore.uop.ops import Ops

ARCHS = ("sm_80", "sm_90")


@pytest.fixture(scope="module", autouse=True)
def _nvrtc() -> None:
    ok, detail = nvrtc_status()
    assert ok, f"the NV compile tests need NVRTC from its wheel: {detail}"


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_kernel_compiles_to_a_cuda_elf_with_its_symbol(case: Case, arch: str) -> None:
    renderer = CUDARenderer(arch)
    _inputs, _ordered, items = case_kernels(case, numpy.random.default_rng(0))
    assert items
    for item in items:
        program = lower_to_program(item.ast, renderer)
        cubin = compile_cuda(program.src, arch)
        assert elf_machine(cubin) == EM_CUDA
        assert program.function_name in elf_symbols(cubin)


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_cuda_codegen_gives_numpys_answer_in_the_interpreter(case: Case) -> None:
    renderer = CUDARenderer("sm_90")
    inputs, ordered, items = case_kernels(case, numpy.random.default_rng(1))
    assert len(items) == 1, f"{case.name} should be one kernel"
    uops = linearize(items[0].ast, renderer)
    result = _run(uops, ordered, {})
    expected = case.reference(*inputs).reshape(-1)
    numpy.testing.assert_allclose(result, expected, rtol=case.tolerance, atol=case.tolerance)


def _run(uops: list, inputs: list[numpy.ndarray], var_vals: dict[str, int]) -> numpy.ndarray:
    """Run a linear program whose buffer 0 is the output and the rest are `inputs`; returns buffer 0."""
    pointers = sorted((uop for uop in uops if uop.op is Ops.DEFINE_GLOBAL), key=lambda uop: uop.arg)
    output_type = pointers[0].dtype
    assert isinstance(output_type, PtrDType)
    output = numpy.zeros(output_type.size, to_numpy_dtype(output_type.base.scalar))
    warp_program(uops)([output, *(array.reshape(-1) for array in inputs)], var_vals)
    return output


@pytest.mark.parametrize("arch", ARCHS)
def test_symbolic_kernel_takes_the_size_as_a_parameter(arch: str) -> None:
    data, item, expected = symbolic_kernel(7)
    program = lower_to_program(item.ast, CUDARenderer(arch))
    assert "const int width" in program.src
    assert program.function_name in elf_symbols(compile_cuda(program.src, arch))
    uops = linearize(item.ast, CUDARenderer(arch))
    numpy.testing.assert_allclose(_run(uops, [data], {"width": 7}), expected, rtol=1e-5)


def test_reduce_uses_shared_memory_and_a_barrier() -> None:
    case = next(case for case in CASES if case.name == "reduce")
    _inputs, _ordered, items = case_kernels(case, numpy.random.default_rng(0))
    source = lower_to_program(items[0].ast, CUDARenderer("sm_90")).src
    assert "__shared__ float" in source and "__syncthreads();" in source and "threadIdx.x" in source
    assert "__launch_bounds__(128)" in source


def test_half_and_bfloat16_need_no_toolkit_headers() -> None:
    for name in ("half", "bfloat16"):
        case = next(case for case in CASES if case.name == name)
        _inputs, _ordered, items = case_kernels(case, numpy.random.default_rng(0))
        source = lower_to_program(items[0].ast, CUDARenderer("sm_80")).src
        assert "#include" not in source and ("tc_half" in source or "tc_bfloat16" in source)


def test_ptx_output_when_asked() -> None:
    source = 'extern "C" __global__ void twice(float* x) { x[threadIdx.x] *= 2.0f; }'
    ptx = compile_cuda(source, "sm_90", ptx=True).decode()
    assert ".target sm_90" in ptx and ".entry twice" in ptx


def test_compile_error_carries_the_build_log_and_source() -> None:
    with pytest.raises(CompileError) as caught:
        NVRTCCompiler("sm_90").compile('extern "C" __global__ void broken() { undefined_name = 1; }')
    assert 'identifier "undefined_name" is undefined' in caught.value.log
    assert "--- source ---" in str(caught.value) and "sm_90" in str(caught.value)


@pytest.mark.parametrize("arch", ["sm_9", "compute_90", "sm_30", "gfx1100"])
def test_unknown_arch_is_refused_with_the_expected_form(arch: str) -> None:
    with pytest.raises(ValueError, match="expected sm_XX"):
        parse_arch(arch)


def test_compiler_uses_the_disk_cache(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    compiler = NVRTCCompiler("sm_80")
    source = 'extern "C" __global__ void cached(int* x) { x[0] = 7; }'
    first = compiler.compile_cached(source)
    assert compiler.cache_path(compiler.cache_key(source)).exists() or compiler.cache_key(source)
    assert NVRTCCompiler("sm_80").compile_cached(source) == first
    assert NVRTCCompiler("sm_90").cache_key(source) != compiler.cache_key(source)


@pytest.mark.skipif(disassembler() is None, reason="no nvdisasm/cuobjdump wheel installed "
                                                     "(pip install nvidia-cuda-nvdisasm)")
def test_disassembly_shows_the_kernel() -> None:
    cubin = compile_cuda('extern "C" __global__ void add_one(float* x) { x[threadIdx.x] += 1.0f; }', "sm_90")
    sass = disassemble(cubin)
    assert "add_one" in sass and "FADD" in sass


@pytest.mark.parametrize("arch", ARCHS)
def test_half_matmul_runs_on_the_tensor_cores(arch: str) -> None:
    case = next(case for case in CASES if case.name == "half_matmul")
    inputs, ordered, items = case_kernels(case, numpy.random.default_rng(2))
    renderer = CUDARenderer(arch)
    uops = linearize(items[0].ast, renderer)
    assert uses_tensor_cores(uops), "a 16x32 @ 32x16 half matmul should be chosen for the tensor cores"
    program = lower_to_program(items[0].ast, renderer)
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in program.src and "#include" not in program.src
    assert program.local_size == [32, 1, 1] and program.global_size == [2, 1, 1]  # 16x16 output: 2 tiles of 16x8
    cubin = compile_cuda(program.src, arch)
    if disassembler() is not None:
        assert "HMMA.16816.F32" in disassemble(cubin)
    numpy.testing.assert_allclose(_run(uops, ordered, {}), case.reference(*inputs).reshape(-1), rtol=2e-2, atol=2e-2)
    without = linearize(items[0].ast, CUDARenderer(arch, tensor_cores=False))
    assert not uses_tensor_cores(without)


def test_tensor_cores_need_sm_80() -> None:
    assert getattr(CUDARenderer("sm_75"), "tensor_core_opt", None) is None
    assert getattr(CUDARenderer("sm_80"), "tensor_core_opt", None) is not None


def _bfloat16(values: numpy.ndarray) -> numpy.ndarray:
    """float32 values rounded to bfloat16 (to nearest, ties to even), as float32."""
    bits = values.astype(numpy.float32).view(numpy.uint32).astype(numpy.uint64)
    return (((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16).astype(numpy.uint32).view(numpy.float32)


@pytest.mark.parametrize("arch", ARCHS)
def test_bfloat16_matmul_runs_on_the_tensor_cores(arch: str) -> None:
    rng = numpy.random.default_rng(3)
    a, b = rng.standard_normal((32, 48)).astype(numpy.float32), rng.standard_normal((48, 16)).astype(numpy.float32)
    items = kernels_of((Tensor(a).cast(dtypes.bfloat16) @ Tensor(b).cast(dtypes.bfloat16)).cast(dtypes.float32))
    renderer = CUDARenderer(arch)
    uops = linearize(items[-1].ast, renderer)
    assert uses_tensor_cores(uops)
    program = lower_to_program(items[-1].ast, renderer)
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in program.src and "#include" not in program.src
    assert program.global_size == [1, 1, 1] and program.local_size == [128, 1, 1]  # one staged block of 2 x 2 warps
    cubin = compile_cuda(program.src, arch)
    if disassembler() is not None:
        assert "HMMA.16816.F32.BF16" in disassemble(cubin)
    exact = (_bfloat16(a).astype(numpy.float64) @ _bfloat16(b).astype(numpy.float64)).astype(numpy.float32)
    # the matmul's result is bfloat16 (then cast to float): numpy's product rounded the same way, within one unit
    numpy.testing.assert_allclose(_run(uops, _buffer_order(uops, items[-1], [a, b]), {}),
                                  _bfloat16(exact).reshape(-1), rtol=2 ** -7, atol=1e-6)


@pytest.mark.parametrize("arch", ARCHS)
def test_batched_half_matmul_runs_on_the_tensor_cores(arch: str) -> None:
    rng = numpy.random.default_rng(4)
    a = rng.standard_normal((3, 16, 32)).astype(numpy.float32)
    b = rng.standard_normal((3, 32, 24)).astype(numpy.float32)
    items = kernels_of((Tensor(a).cast(dtypes.float16) @ Tensor(b).cast(dtypes.float16)).cast(dtypes.float32))
    renderer = CUDARenderer(arch)
    uops = linearize(items[-1].ast, renderer)
    assert uses_tensor_cores(uops)
    program = lower_to_program(items[-1].ast, renderer)
    assert program.global_size == [3, 1, 3] and program.local_size == [32, 1, 1]  # 3 x 1 tiles, 3 matrices
    assert program.function_name in elf_symbols(compile_cuda(program.src, arch))
    exact = numpy.matmul(a.astype(numpy.float16).astype(numpy.float64), b.astype(numpy.float16).astype(numpy.float64))
    # the matmul's result is half (then cast to float): numpy's product rounded the same way, within one unit
    numpy.testing.assert_allclose(_run(uops, _buffer_order(uops, items[-1], [a, b]), {}),
                                  exact.astype(numpy.float16).astype(numpy.float32).reshape(-1), rtol=2 ** -10,
                                  atol=1e-6)


def _buffer_order(uops: list, item: object, inputs: list[numpy.ndarray]) -> list[numpy.ndarray]:
    """`inputs` in the order of the kernel's input buffers (buffer 0 is the output)."""
    sizes = [uop.dtype.size for uop in sorted((uop for uop in uops if uop.op is Ops.DEFINE_GLOBAL),
                                               key=lambda uop: uop.arg)][1:]
    assert sorted(sizes) == sorted(array.size for array in inputs) and len(set(sizes)) == len(sizes)
    return [next(array for array in inputs if array.size == size) for size in sizes]


@pytest.mark.parametrize("arch", ARCHS)
def test_tensor_core_blocks_share_tiles_through_shared_memory(arch: str) -> None:
    """A 64 x 48 @ 48 x 32 half matmul: blocks of 2 x 2 warps copy each K step's A and B slices into shared memory
    (two buffers, one barrier a step) and read their fragments there; NV_TC_STAGING=0 gives one warp a block loading
    from global memory. Both give numpy's answer (rounded to half) and HMMA in the SASS; the staged one reads shared
    memory (LDS)."""
    from tiny_nv.tensor_core import NV_TC_STAGING

    from tinycore.helpers import Context
    rng = numpy.random.default_rng(6)
    a, b = rng.standard_normal((64, 48)).astype(numpy.float32), rng.standard_normal((48, 32)).astype(numpy.float32)
    items = kernels_of((Tensor(a).cast(dtypes.float16) @ Tensor(b).cast(dtypes.float16)).cast(dtypes.float32))
    exact = (a.astype(numpy.float16).astype(numpy.float64) @ b.astype(numpy.float16).astype(numpy.float64))
    expected = exact.astype(numpy.float16).astype(numpy.float32).reshape(-1)
    for staging, sizes in ((1, ([2, 2, 1], [128, 1, 1])), (0, ([4, 4, 1], [32, 1, 1]))):
        with Context(NV_TC_STAGING=staging):
            renderer = CUDARenderer(arch)
            uops = linearize(items[-1].ast, renderer)
            program = lower_to_program(items[-1].ast, renderer)
        assert uses_tensor_cores(uops) and (program.global_size, program.local_size) == sizes
        assert ("__shared__ tc_half" in program.src and "__syncthreads();" in program.src) == bool(staging)
        if disassembler() is not None:
            sass = disassemble(compile_cuda(program.src, arch))
            assert "HMMA.16816.F32" in sass and ("LDS" in sass) == bool(staging)
        numpy.testing.assert_allclose(_run(uops, _buffer_order(uops, items[-1], [a, b]), {}), expected,
                                      rtol=2 ** -10, atol=1e-5)
    assert NV_TC_STAGING.value == 1  # staging is the default
