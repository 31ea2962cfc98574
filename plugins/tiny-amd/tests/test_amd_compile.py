"""HIP-style C from the AMD renderer compiled by clang and ld.lld for every supported target, without a GPU: each
representative kernel becomes a code object whose metadata note (llvm-readelf --notes) names the kernel, has the
kernarg size the runtime packs, the LDS the kernel declares, the target's wave size and the target; the matrix-core
kernels' disassembly holds the WMMA / MFMA instruction; the linear programs the renderer's codegen produced run in
the core's interpreter against numpy."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy
import pytest
from tiny_amd import compiler as amd_compiler
from tiny_amd.compiler import AMDCompiler, ToolchainMissingError, find_toolchain, toolchain_status
from tiny_amd.inspect import code_object_notes, pack_kernargs
from tiny_amd.matrix_core import collectives, matrix_core_matmul, matrix_instruction, uses_matrix_cores
from tiny_amd.renderer import HIPRenderer
from tiny_amd.target import TARGETS, gfx_name, parse_target

from tinycore.codegen import linearize, lower_to_program
from tinycore.codegen.wave_interpreter import WaveProgram
from tinycore.dtype import DType, PtrDType, dtypes, to_numpy_dtype
from tinycore.renderer.renderer import ProgramSpec
from tinycore.testing.kernel_cases import CASES, Case, case_kernels, symbolic_kernel
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp

ARCHS = tuple(TARGETS)


@pytest.fixture(scope="module", autouse=True)
def _toolchain() -> None:
    ok, detail = toolchain_status()
    assert ok, f"the AMD compile tests need clang and ld.lld: {detail}"


def _expected_kernargs(uops: list[UOp]) -> int:
    """The kernarg bytes the runtime packs for this program: one address per buffer, one int per variable."""
    buffers = sum(1 for uop in uops if uop.op is Ops.DEFINE_GLOBAL)
    variables = sum(1 for uop in uops if uop.op is Ops.DEFINE_VAR)
    return len(pack_kernargs([0] * buffers, [0] * variables))


def _lds_bytes(uops: list[UOp]) -> int:
    """The bytes of LDS the program declares (its DEFINE_LOCALs)."""
    total = 0
    for uop in uops:
        if uop.op is Ops.DEFINE_LOCAL:
            assert isinstance(uop.dtype, PtrDType)
            total += max(uop.dtype.size, 1) * uop.dtype.base.itemsize
    return total


def _check_code_object(binary: bytes, arch: str, name: str, uops: list[UOp]) -> None:
    assert binary[:4] == b"\x7fELF"
    target, kernels = code_object_notes(binary)
    assert target == f"amdgcn-amd-amdhsa--{arch}"
    assert [kernel.name for kernel in kernels] == [name]
    kernel = kernels[0]
    assert kernel.symbol == f"{name}.kd"
    assert kernel.kernarg_size == _expected_kernargs(uops)
    assert kernel.lds_size == _lds_bytes(uops)
    assert kernel.wave_size == parse_target(arch).wave_size
    assert kernel.scratch_size == 0


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_kernel_compiles_to_a_code_object_matching_the_runtime(case: Case, arch: str) -> None:
    renderer, compiler = HIPRenderer(arch), AMDCompiler(arch)
    _inputs, _ordered, items = case_kernels(case, numpy.random.default_rng(0))
    assert items
    for item in items:
        uops = linearize(item.ast, renderer)
        program = lower_to_program(item.ast, renderer)
        _check_code_object(compiler.compile(program.src), arch, program.function_name, uops)


def test_group_reduce_uses_lds_and_barriers() -> None:
    reduce_case = next(case for case in CASES if case.name == "reduce")
    _inputs, _ordered, items = case_kernels(reduce_case, numpy.random.default_rng(0))
    uops = linearize(items[-1].ast, HIPRenderer("gfx1100"))
    assert _lds_bytes(uops) > 0, "the 4096-wide sum should be a group reduce through LDS"
    source = lower_to_program(items[-1].ast, HIPRenderer("gfx1100")).src
    assert "__attribute__((shared))" in source and "__builtin_amdgcn_s_barrier()" in source
    disassembly = AMDCompiler("gfx1100").disassemble(AMDCompiler("gfx1100").compile(source))
    assert "s_barrier" in disassembly and "ds_" in disassembly  # LDS (data share) loads and stores


@pytest.mark.parametrize("arch", ARCHS)
def test_symbolic_kernel_takes_the_variable_as_a_kernarg(arch: str) -> None:
    _data, item, _expected = symbolic_kernel()
    renderer = HIPRenderer(arch)
    uops = linearize(item.ast, renderer)
    assert any(uop.op is Ops.DEFINE_VAR for uop in uops)
    program = lower_to_program(item.ast, renderer)
    _check_code_object(AMDCompiler(arch).compile(program.src), arch, program.function_name, uops)


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_hip_codegen_gives_numpys_answer_in_the_interpreter(case: Case) -> None:
    renderer = HIPRenderer("gfx1100")
    inputs, ordered, items = case_kernels(case, numpy.random.default_rng(1))
    assert len(items) == 1, f"{case.name} should be one kernel"
    result = _run(linearize(items[0].ast, renderer), ordered, {})
    numpy.testing.assert_allclose(result, case.reference(*inputs).reshape(-1), rtol=case.tolerance,
                                  atol=case.tolerance)


def test_symbolic_program_gives_numpys_answer_in_the_interpreter() -> None:
    data, item, expected = symbolic_kernel(9)
    uops = linearize(item.ast, HIPRenderer("gfx90a"))
    result = _run(uops, [data], {"width": 9})
    numpy.testing.assert_allclose(result, expected, rtol=1e-5)


def _run(uops: list[UOp], inputs: list[numpy.ndarray], var_vals: dict[str, int],
         arch: str = "gfx1100") -> numpy.ndarray:
    """Run a linear program whose buffer 0 is the output and the rest are `inputs`; returns buffer 0. A matrix-core
    kernel's instruction runs wave-collectively (what the MOCK GPU does)."""
    pointers = sorted((uop for uop in uops if uop.op is Ops.DEFINE_GLOBAL), key=lambda uop: uop.arg)
    output_type = pointers[0].dtype
    assert isinstance(output_type, PtrDType)
    output = numpy.zeros(output_type.size, to_numpy_dtype(output_type.base.scalar))
    WaveProgram(uops, collectives(arch), parse_target(arch).wave_size)(
        [output, *(array.reshape(-1) for array in inputs)], var_vals)
    return output


MATRIX_INSTRUCTIONS = {("wmma", "half"): "v_wmma_f32_16x16x16_f16", ("wmma", "bfloat16"): "v_wmma_f32_16x16x16_bf16",
                       ("wmma-gfx12", "half"): "v_wmma_f32_16x16x16_f16",
                       ("wmma-gfx12", "bfloat16"): "v_wmma_f32_16x16x16_bf16",
                       ("mfma", "half"): "v_mfma_f32_16x16x16",
                       ("mfma", "bfloat16"): "v_mfma_f32_16x16x16"}


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16], ids=["half", "bfloat16"])
def test_matrix_core_matmul_uses_the_targets_matrix_instruction(arch: str, dtype: object) -> None:
    source, global_size, local_size = matrix_core_matmul(arch, dtype, 32, 48, 64)  # type: ignore[arg-type]
    target = parse_target(arch)
    assert global_size == (3, 2, 1) and local_size == (target.wave_size, 1, 1)
    compiler = AMDCompiler(arch)
    binary = compiler.compile(source)
    notes_target, kernels = code_object_notes(binary)
    assert notes_target.endswith(arch) and kernels[0].kernarg_size == len(pack_kernargs([0, 0, 0], []))
    assert kernels[0].wave_size == target.wave_size
    dtype_name = "half" if dtype == dtypes.float16 else "bfloat16"
    instruction = MATRIX_INSTRUCTIONS[(target.matrix_core, dtype_name)]
    assert instruction in compiler.disassemble(binary)


def _representable(values: numpy.ndarray, dtype: DType) -> numpy.ndarray:
    """float32 values that `dtype` (half or bfloat16) holds exactly."""
    if dtype == dtypes.float16:
        return values.astype(numpy.float16).astype(numpy.float32)
    return (values.view(numpy.uint32) & numpy.uint32(0xFFFF0000)).view(numpy.float32)


def _matmul_kernel(arch: str, rows: int, depth: int, columns: int, dtype: DType = dtypes.float16,
                   matrix_cores: bool = True) -> tuple[list[numpy.ndarray], numpy.ndarray, list[UOp], ProgramSpec,
                                                       bool]:
    """(inputs, numpy's answer, linear program, program spec, whether it calls a matrix instruction) of a Tensor
    matmul of `dtype` inputs with a float32 result."""
    def inputs(rng: numpy.random.Generator) -> list[numpy.ndarray]:
        return [_representable(rng.standard_normal((rows, depth)).astype(numpy.float32), dtype),
                _representable(rng.standard_normal((depth, columns)).astype(numpy.float32), dtype)]
    case = Case("matmul", inputs, lambda a, b: (a.cast(dtype) @ b.cast(dtype)).cast(dtypes.float32),
                lambda a, b: a.astype(numpy.float64) @ b.astype(numpy.float64))
    arrays, ordered, (item,) = case_kernels(case, numpy.random.default_rng(7))
    renderer = HIPRenderer(arch, matrix_cores=matrix_cores)
    spec = lower_to_program(item.ast, renderer)
    uops = linearize(item.ast, renderer)
    matrix = uses_matrix_cores(uops, matrix_instruction(arch, dtype))
    return ordered, case.reference(*arrays), uops, spec, matrix


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16], ids=["half", "bfloat16"])
def test_codegen_puts_matmuls_on_the_matrix_cores(arch: str, dtype: DType) -> None:
    inputs, expected, uops, spec, matrix = _matmul_kernel(arch, 32, 48, 64, dtype)
    target = parse_target(arch)
    assert matrix and spec.local_size == [target.wave_size, 1, 1] and sorted(spec.global_size) == [1, 2, 4]
    compiler = AMDCompiler(arch)
    binary = compiler.compile(spec.src)
    dtype_name = "half" if dtype == dtypes.float16 else "bfloat16"
    assert MATRIX_INSTRUCTIONS[(target.matrix_core, dtype_name)] in compiler.disassemble(binary)
    _check_code_object(binary, arch, spec.function_name, uops)
    # exact products summed in float32, the result rounded once to the input dtype
    tolerance = 1e-3 if dtype == dtypes.float16 else 8e-3
    result = _run(uops, inputs, {}, arch).reshape(expected.shape)
    numpy.testing.assert_allclose(result, expected, rtol=tolerance, atol=tolerance)


def test_matrix_cores_are_left_out_when_asked_or_when_the_shape_does_not_fit() -> None:
    _inputs, _expected, uops, _spec, matrix = _matmul_kernel("gfx1100", 32, 48, 64, matrix_cores=False)
    assert not matrix and not any(uop.op is Ops.CUSTOM for uop in uops)
    inputs, expected, uops, _spec, matrix = _matmul_kernel("gfx1100", 24, 48, 64)  # 24 rows: not whole tiles
    assert not matrix and not any(uop.op is Ops.CUSTOM for uop in uops)
    # the scalar kernel sums in half precision (the tolerance of the shared half_matmul case)
    numpy.testing.assert_allclose(_run(uops, inputs, {}).reshape(expected.shape), expected, rtol=2e-2, atol=2e-2)


def test_matrix_core_matmul_rejects_bad_shapes_and_dtypes() -> None:
    with pytest.raises(ValueError, match="multiples of 16"):
        matrix_core_matmul("gfx1100", dtypes.float16, 16, 16, 20)
    with pytest.raises(ValueError, match="float16 or bfloat16"):
        matrix_core_matmul("gfx1100", dtypes.float32, 16, 16, 16)


def test_unknown_target_lists_the_supported_ones() -> None:
    with pytest.raises(ValueError, match="gfx90a .*gfx942 .*gfx1100 .*gfx1201"):
        HIPRenderer("gfx1030")


def test_a_target_too_new_for_the_clang_here_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(amd_compiler, "toolchains", lambda: ((15, "/usr/bin/clang-15", "/usr/bin/ld.lld-15"),))
    assert find_toolchain("gfx90a")[0] == 15  # and not gfx1100: test_amd_clang_versions.py
    with pytest.raises(ToolchainMissingError, match="gfx1201 .*needs clang 18 or newer.*clang 15 is the newest here.*"
                                                    "apt-get install -y clang-19 lld-19"):
        find_toolchain("gfx1201")
    monkeypatch.setattr(amd_compiler, "toolchains", lambda: ())
    assert toolchain_status() == (False, "no clang-N with a matching ld.lld-N (N >= 15) on PATH to compile AMD "
                                         f"kernels: {amd_compiler.INSTALL_HINT}")


def test_kfd_target_versions_name_the_gfx_targets() -> None:
    assert [gfx_name(version) for version in (90010, 90402, 110000, 120001)] == \
        ["gfx90a", "gfx942", "gfx1100", "gfx1201"]


def test_compile_only_compiles_then_refuses_the_launch(tmp_path: object) -> None:
    script = ("from tinycore import Tensor\n"
              "try:\n"
              "    (Tensor([1.0, 2.0, 3.0]) * 2).realize()\n"
              "except Exception as error:\n"
              "    print('error', type(error).__name__, error)\n")
    environment = {**os.environ, "DEV": "AMD::gfx1100", "TINYCORE_CACHE_DIR": str(tmp_path)}
    finished = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                              env=environment, check=False)
    output = finished.stdout + finished.stderr
    assert "error NoGPUForLaunchError AMD is compile-only here" in output
    assert "compiled for gfx1100" in output and "bytes of code object" in output and "DEV=MOCK+AMD" in output
