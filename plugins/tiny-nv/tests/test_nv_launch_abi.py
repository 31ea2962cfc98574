"""What a launch gives a kernel beyond its parameters, checked against the SASS of CUBINs NVRTC makes and on the
simulated GPU: constant buffer 0's driver-defined head (the offsets the compiled code reads), the QMD's register
count, SM shared memory configurations and local memory, and constant banks other than 0 linked by the CUBIN's
relocations. Nothing here ran on hardware."""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy
import pytest
from nv_kernels import CASES, case_kernels
from tiny_nv import nvcmd
from tiny_nv.cubin import kernel_image, module_data
from tiny_nv.inspect import disassemble, disassembler
from tiny_nv.nvrtc import compile_cuda, nvrtc_status
from tiny_nv.renderer import CUDARenderer

from tinycore.codegen import lower_to_program

ARCHS = ("sm_80", "sm_90")
_spec = importlib.util.spec_from_file_location("gpu_abi_check", Path(__file__).resolve().parent.parent /
                                               "gpu_abi_check.py")
assert _spec is not None and _spec.loader is not None
_abi_check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_abi_check)  # gpu_check.sh's hardware check: its lookup kernel serves here too

PROBE = r"""
extern "C" __global__ void probe(float* out, const float* a, int n) {
  __shared__ float s[64];
  float local[32];
  for (int i = 0; i < 32; i++) local[i] = a[i * n];
  s[threadIdx.x] = local[(int)a[threadIdx.x] & 31];
  __syncthreads();
  float* g = (blockIdx.x & 1) ? s : out;      // a generic pointer to shared or global memory
  float* l = (blockIdx.x & 2) ? local : out;  // a generic pointer to local memory
  out[blockIdx.x * blockDim.x + threadIdx.x] = g[threadIdx.x] + l[threadIdx.y] + gridDim.x + gridDim.y + gridDim.z
      + blockDim.y + blockDim.z;
}
"""
"""Reads every launch fact CUDA C can: blockDim, gridDim, the shared and local windows (generic pointers), and a
local array indexed at run time (a stack frame)."""

LOOKUP = _abi_check.LOOKUP
"""A constant table (.nv.constant3) and an initialized device global whose address sits in .nv.constant4, put there
by a relocation."""


@pytest.fixture(scope="module", autouse=True)
def _nvrtc() -> None:
    ok, detail = nvrtc_status()
    assert ok, f"these tests need NVRTC from its wheel: {detail}"


def _head_reads(cubin: bytes, arguments_offset: int) -> set[int]:
    """The c[0x0][...] offsets below the parameters that the kernel's SASS reads, as 4-byte words."""
    words = set()
    for line in disassemble(cubin).splitlines():
        for match in re.finditer(r"c\[0x0\]\[0x([0-9a-f]+)\]", line):
            offset = int(match.group(1), 16)
            if offset < arguments_offset:
                wide = re.search(r"\b(?:U?LDC|ULDC)\.64\b", line) is not None
                words.update({offset, offset + 4} if wide else {offset})
    return words


@pytest.mark.parametrize("arch", ARCHS)
def test_every_head_word_the_kernels_read_is_filled(arch: str) -> None:
    """The representative kernels and a probe reading every launch fact read only constant buffer 0 words (below the
    parameters) that the launch fills; the ones they read include the stack pointer and the memory descriptor."""
    assert disassembler(), "nvdisasm from its wheel is needed (the test extra installs it)"
    layout = nvcmd.QMD_V04 if arch == "sm_90" else nvcmd.QMD_V03
    filled = set()
    for offset, form, _value in layout.driver_constants([1, 1, 1], [1, 1, 1], 0, 0):
        filled.update(range(offset, offset + (8 if form == "<Q" else 4), 4))
    read = _head_reads(compile_cuda(PROBE, arch), layout.arguments_offset)
    for case in CASES:
        for item in case_kernels(case, numpy.random.default_rng(0))[2]:
            read |= _head_reads(compile_cuda(lower_to_program(item.ast, CUDARenderer(arch)).src, arch),
                                layout.arguments_offset)
    assert read <= filled, f"unfilled words read: {sorted(hex(word) for word in read - filled)}"
    assert {nvcmd.CB0_STACK_TOP, layout.memory_descriptor_offset, nvcmd.CB0_LOCAL_WINDOW, nvcmd.CB0_BLOCK_DIM,
            nvcmd.CB0_GRID_DIM} <= read
    # sm_80 code reads the shared window from constant buffer 0; sm_90 code takes it from a special register
    assert (nvcmd.CB0_SHARED_WINDOW in read) == (arch == "sm_80")


def test_driver_constants_layout() -> None:
    """Block then grid sizes, the windows, the stack pointer below the top of the 16 MiB local window, and the memory
    descriptor where each layout's compiled code loads it (0x118 before Hopper's 0x160 parameters, 0x208)."""
    head = dict((offset, value) for offset, _form, value in
                nvcmd.QMD_V03.driver_constants([5, 6, 7], [32, 2, 1], 0xFE000000, 0x7293_0000_0000))
    assert [head[offset] for offset in (0x0, 0x4, 0x8, 0xC, 0x10, 0x14)] == [32, 2, 1, 5, 6, 7]
    assert head[0x18] == 0xFE000000 and head[0x20] == 0x7293_0000_0000 and head[0x28] == 0x1000000 - 0x240
    assert head[0x118] == 0 and 0x208 in dict((o, v) for o, _f, v in nvcmd.QMD_V04.driver_constants(
        [1] * 3, [1] * 3, 0, 0))


def test_qmd_resource_fields_sit_at_their_bits() -> None:
    """V03: REGISTER_COUNT_V bits 656:648, TARGET_SM_CONFIG 662:657, MIN 567:562, MAX 574:569, high local memory
    1623:1600; V04: MIN/MAX/TARGET at 613:608, 619:614, 625:620 (clc9c0qmd.h, clcbc0qmd.h)."""
    qmd = bytearray(256)
    nvcmd.QMD_V03.set(qmd, "REGISTER_COUNT_V", 0x1FF)
    assert int.from_bytes(qmd[81:83], "little") == 0x1FF  # bits 648..656 = byte 81 bit 0 .. byte 82 bit 0
    nvcmd.QMD_V03.set(qmd, "TARGET_SM_CONFIG_SHARED_MEM_SIZE", 0x3F)
    assert (int.from_bytes(qmd[82:83], "little") >> 1) == 0x3F  # bits 657..662
    nvcmd.QMD_V03.set(qmd, "SHADER_LOCAL_MEMORY_HIGH_SIZE", 0x640)
    assert int.from_bytes(qmd[200:203], "little") == 0x640  # bits 1600..1623 = bytes 200..202
    qmd4 = bytearray(0x180)
    nvcmd.QMD_V04.set(qmd4, "MIN_SM_CONFIG_SHARED_MEM_SIZE", 3)
    nvcmd.QMD_V04.set(qmd4, "MAX_SM_CONFIG_SHARED_MEM_SIZE", 0x3A)
    nvcmd.QMD_V04.set(qmd4, "TARGET_SM_CONFIG_SHARED_MEM_SIZE", 5)
    assert int.from_bytes(qmd4[76:79], "little") & 0x3FFFF == 3 | (0x3A << 6) | (5 << 12)  # bits 608..625
    nvcmd.QMD_V03.set(qmd, "CONSTANT_BUFFER_VALID3", 1)
    nvcmd.QMD_V03.set(qmd, "CONSTANT_BUFFER_SIZE_SHIFTED4_3", 16)
    assert qmd[80] == 1 << 3 and int.from_bytes(qmd[152:160], "little") >> 51 == 16  # bank 3: bits 1216..1279


def test_shared_memory_configurations() -> None:
    """The smallest carveout holding the block and the system's 1 KiB as min and target, the largest as max, in 4 KiB
    units plus one; a block larger than the SM holds is refused."""
    assert nvcmd.shared_memory_configuration(0, 90) == (3, 3, 58)  # 8 KiB, 8 KiB, 228 KiB
    assert nvcmd.shared_memory_configuration(40_000, 80) == (17, 17, 42)  # 64 KiB, 164 KiB
    assert nvcmd.shared_memory_configuration(99 * 1024, 86) == (26, 26, 26)  # 100 KiB on sm_86
    with pytest.raises(ValueError, match="holds at most 100 KiB"):
        nvcmd.shared_memory_configuration(100 * 1024, 89)


@pytest.mark.parametrize("arch", ARCHS)
def test_stack_and_module_data_from_the_cubin(arch: str) -> None:
    """The probe's local array makes a stack frame the CUBIN declares; the lookup kernel's constant banks 3 (the
    table) and 4 (the global's address) are found, and linking at an address puts the global's address into bank 4."""
    probe = kernel_image(compile_cuda(PROBE, arch), "probe")
    assert probe.stack_bytes >= 32 * 4 and probe.shared_bytes >= 64 * 4
    assert nvcmd.local_bytes_per_thread(probe.stack_bytes) >= probe.stack_bytes + nvcmd.STACK_RESERVE
    data = module_data(compile_cuda(LOOKUP, arch))
    banks = dict((bank, (address, size)) for bank, address, size in data.banks(0x10000))
    assert set(banks) == {3, 4} and banks[3][1] == 64 * 4 and banks[4][1] == 8
    linked = data.linked(0x10000)
    table = numpy.frombuffer(linked[data.offsets[".nv.constant3"]:][:256], numpy.float32)
    numpy.testing.assert_array_equal(table, numpy.arange(64, dtype=numpy.float32) * 0.5)
    pointer = int.from_bytes(linked[data.offsets[".nv.constant4"]:][:8], "little")
    assert pointer == 0x10000 + data.offsets[".nv.global.init"]
    bias = numpy.frombuffer(linked[pointer - 0x10000:][:16], numpy.float32)
    numpy.testing.assert_array_equal(bias, [1, 2, 3, 4])


BANK_SCRIPT = """
import sys
import numpy
from tinycore import Tensor, dtypes
from tinycore.codegen import lower_to_program
from tinycore.device.registry import Device
from tinycore.hcq.mock import pack_mock_binary, program_from_source
from tinycore.testing.kernel_cases import kernels_of
from tiny_nv.nv_hcq import NVQueueProgram
from tiny_nv.nvrtc import compile_cuda
from tiny_nv.renderer import CUDARenderer
arch, source, spoil = sys.argv[1], sys.argv[2], sys.argv[3]
device = Device["NV"]
index = numpy.arange(32, dtype=numpy.int32) * 5
item = kernels_of(Tensor(index).cast(dtypes.float32) + 1)[0]
program = lower_to_program(item.ast, CUDARenderer(arch, embed_program=True))
# the interpreter runs tinycore's program; the CUBIN beside it is NVRTC's lookup kernel, whose banks the GPU checks
lib = pack_mock_binary(program_from_source(program.src), compile_cuda(open(source).read(), arch))
kernel = NVQueueProgram(device, "lookup", lib)
if spoil == "bank":
    device.gpu.view(kernel.resources.constant_banks[0][1], 4)[:] = b"\\xff" * 4
if spoil == "global":
    pointer = int.from_bytes(device.gpu.view(kernel.resources.constant_banks[1][1], 8), "little")
    device.gpu.view(pointer, 4)[:] = bytes(4)
output, data = device.allocator.alloc(32 * 4), device.allocator.alloc(32 * 4)
device.allocator._copyin(data, memoryview(index).cast("B"))
global_size, local_size = program.launch_dims({})
try:
    kernel(output, data, global_size=global_size, local_size=local_size, wait=True)
    result = numpy.empty(32, numpy.float32)
    device.allocator._copyout(memoryview(result).cast("B"), output)
    print("ran", bool((result == index + 1).all()), [bank for bank, _a, _s in kernel.resources.constant_banks])
except Exception as error:
    print(type(error).__name__, str(error).splitlines()[-1])
"""


@pytest.mark.parametrize(("dev", "arch"), [("MOCK+NV", "sm_90"), ("MOCK+NV::sm_80", "sm_80")])
@pytest.mark.parametrize(("spoil", "expected"), [("none", "ran True [3, 4]"),
                                                 ("bank", "does not hold the CUBIN's .nv.constant3"),
                                                 ("global", "does not hold the data of its symbol")])
def test_constant_banks_are_bound_and_linked_on_the_mock(tmp_path, dev: str, arch: str, spoil: str,
                                                         expected: str) -> None:
    """A kernel whose CUBIN (NVRTC's) has a constant table in bank 3 and a device global's address in bank 4 launches
    on the simulated GPU through a QMD that binds both banks: the GPU checks bank 3 holds the table and bank 4's
    relocated word points at the global's initial data, and refuses the launch when either is spoiled."""
    source = tmp_path / "lookup.cu"
    source.write_text(LOOKUP)
    environment = {**os.environ, "DEV": dev, "TINYCORE_PLUGINS": "nv,cpu"}
    result = subprocess.run([sys.executable, "-c", BANK_SCRIPT, arch, str(source), spoil], capture_output=True,
                            text=True, env=environment, timeout=300)
    assert expected in result.stdout, result.stdout + result.stderr[-3000:]


@pytest.mark.parametrize("arch", ARCHS)
def test_gpu_abi_check_compiles_without_a_gpu(arch: str) -> None:
    """gpu_check.sh's launch check (run on hardware only: the simulated GPU does not execute SASS) compiles both its
    kernels for `arch`; the probe has a stack and the lookup kernel constant banks 3 and 4."""
    script = Path(__file__).resolve().parent.parent / "gpu_abi_check.py"
    result = subprocess.run([sys.executable, str(script), "--compile-only", arch], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    words = result.stdout.split()
    assert words[:2] == ["probe", "stack"] and int(words[2]) > 0 and "banks [3, 4]" in result.stdout


ZEROED_GLOBAL = r"""
__device__ float big[1 << 20];
extern "C" __global__ void k(float* out, int w) { big[threadIdx.x + w] = 1; out[threadIdx.x] = big[threadIdx.x * 3]; }
"""


@pytest.mark.parametrize("arch", ARCHS)
def test_a_zeroed_device_global_is_allocated_and_linked(arch: str) -> None:
    """A zero-initialized device global (.nv.global, no bytes in the file) gets its 4 MiB, zeroed, and bank 4 holds its
    address once linked; NVRTC's CUBINs of function-pointer tables and globals carry no relocations in the code."""
    data = module_data(compile_cuda(ZEROED_GLOBAL, arch))
    assert len(data.contents[".nv.global"]) == 4 << 20 and not any(data.contents[".nv.global"][:4096])
    linked = data.linked(0x100000)
    assert int.from_bytes(linked[data.offsets[".nv.constant4"]:][:8], "little") == \
        0x100000 + data.offsets[".nv.global"]
    assert all(relocation.target.startswith(".nv.constant") for relocation in data.relocations)


def test_sass_version_and_memory_barrier_fields() -> None:
    """SASS_VERSION (V03 bits 1663:1656, V04 543:536) is the code's sm_XY as two nibbles; CWD_MEMBAR_TYPE (V03
    369:368, V04 1137:1136) asks for the system memory barrier as each block ends."""
    resources = nvcmd.LaunchResources(sm=89, code_sm=86)
    for layout, sass_byte, membar_byte in ((nvcmd.QMD_V03, 207, 46), (nvcmd.QMD_V04, 67, 142)):
        qmd = bytearray(layout.size)
        for field, value in layout.launch_fields([1, 1, 1], [32, 1, 1], 0x1000, 0x2000, 0x200, resources):
            layout.set(qmd, field, value)
        assert qmd[sass_byte] == 0x86 and qmd[membar_byte] & 3 == nvcmd.CWD_MEMBAR_TYPE_L1_SYSMEMBAR
    assert nvcmd.sass_version(90) == 0x90 and kernel_image(compile_cuda(PROBE, "sm_90"), "probe").arch == 90


DEEP_STACK_SCRIPT = """
import sys
from tinycore.device.registry import Device
from tiny_nv.nv_hcq import NVQueueProgram
from tiny_nv.nvrtc import compile_cuda
source = r'''
extern "C" __global__ void deep(float* out, const int* index) {
  float scratch[4096];
  for (int i = 0; i < 4096; i++) scratch[i] = out[i];
  out[threadIdx.x] = scratch[index[threadIdx.x] & 4095];
}
'''
try:
    NVQueueProgram(Device["NV"], "deep", compile_cuda(source, "sm_90"))
except ValueError as error:
    print(str(error))
"""


def test_a_kernel_whose_stack_exceeds_the_local_memory_is_refused_at_load() -> None:
    """A 16 KiB local array is more than the 4 KiB a thread the GPU's local memory was sized for: loading the kernel
    says so (on hardware the launch would fault)."""
    environment = {**os.environ, "DEV": "MOCK+NV", "TINYCORE_PLUGINS": "nv,cpu"}
    result = subprocess.run([sys.executable, "-c", DEEP_STACK_SCRIPT], capture_output=True, text=True,
                            env=environment, timeout=300)
    assert "kernel deep needs 16384 bytes of stack per thread" in result.stdout, result.stdout + result.stderr[-3000:]
