"""The NV interface on the kernel driver (tiny_nv.kernel_driver) against the simulated driver and GPU
(tiny_nv.mock_driver): the ioctl structures have the layouts NVIDIA's headers give (offsets summed by hand from the
field lists), the bring-up makes its requests in the order the driver needs, the mock refuses what the driver
refuses, and kernels compiled by NVRTC run through QMDs (V04 on Hopper, V03 on Ampere) with results checked against
numpy. Nothing here ran on a GPU."""
from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import numpy
import pytest
from tiny_nv import nvcmd, rmapi
from tiny_nv.cubin import kernel_image
from tiny_nv.kernel_driver import NVDriverError, NVKernelGPU
from tiny_nv.mock_driver import MockKernelDriver
from tiny_nv.nvrtc import compile_cuda, nvrtc_status

KERNEL = ('extern "C" __global__ void scale(float* out, const float* in, int n) {'
          ' int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) out[i] = in[i] * 2.0f; }')


def test_structure_layouts_match_the_headers() -> None:
    assert [ctypes.sizeof(layout) for layout in (rmapi.NVOS21Parameters, rmapi.NVOS54Parameters,
                                                 rmapi.NVOS00Parameters, rmapi.NVOS33Parameters)] == [32, 32, 16, 48]
    assert rmapi.NVOS33WithFd.fd.offset == 48 and ctypes.sizeof(rmapi.NVOS33WithFd) == 56
    channel = rmapi.NVChannelAllocParams
    assert (channel.hUserdMemory.offset, channel.userdOffset.offset, channel.engineType.offset,
            channel.instanceMem.offset, channel.hPhysChannelGroup.offset, channel.errorNotifierMem.offset,
            channel.ProcessID.offset, channel.hmacNonce.offset, channel.tpcConfigID.offset) == \
        (32, 64, 128, 144, 240, 248, 296, 328, 360)
    memory = rmapi.NVMemoryAllocationParams
    assert (memory.rangeLo.offset, memory.size.offset, memory.address.offset, memory.hVASpace.offset,
            memory.numaNode.offset, ctypes.sizeof(memory)) == (48, 64, 96, 108, 120, 128)
    mapping = rmapi.UVMMapExternalAllocationParams
    assert ctypes.sizeof(rmapi.UVMGpuMappingAttributes) == 36
    assert (mapping.gpuAttributesCount.offset, mapping.rmCtrlFd.offset, mapping.rmStatus.offset) == \
        (24 + 256 * 36, 24 + 256 * 36 + 8, 24 + 256 * 36 + 20)
    card = rmapi.NVCardInfo
    assert (card.gpu_id.offset, card.reg_address.offset, card.minor_number.offset, ctypes.sizeof(card)) == \
        (16, 24, 56, 72)
    # _IOWR('F', 0x2A, 32) and _IOWR('F', 0x2B, 32): the request numbers of RM control and RM alloc
    assert rmapi.nv_ioctl_request(rmapi.NV_ESC_RM_CONTROL, 32) == 0xC020462A
    assert rmapi.nv_ioctl_request(rmapi.NV_ESC_RM_ALLOC, 32) == 0xC020462B


def test_bring_up_makes_its_requests_in_the_drivers_order() -> None:
    driver = MockKernelDriver(sm=90)
    gpu = NVKernelGPU(driver)
    assert gpu.sm == 90 and gpu.qmd is nvcmd.QMD_V04 and gpu.compute_class == rmapi.HOPPER_COMPUTE_A
    order = [request for _path, request in driver.requests]
    card_info = rmapi.nv_ioctl_request(rmapi.NV_ESC_CARD_INFO, ctypes.sizeof(rmapi.NVCardInfo) * rmapi.CARD_SLOTS)
    assert order[0] == card_info and order[1] == rmapi.UVM_INITIALIZE
    assert order.index(rmapi.UVM_REGISTER_GPU) < order.index(rmapi.UVM_REGISTER_GPU_VASPACE) < \
        order.index(rmapi.UVM_MAP_EXTERNAL_ALLOCATION)
    classes = sorted(obj.class_id for obj in driver.objects.values())
    assert classes.count(rmapi.HOPPER_CHANNEL_GPFIFO_A) == 2 and rmapi.HOPPER_COMPUTE_A in classes
    assert rmapi.HOPPER_DMA_COPY_A in classes and rmapi.FERMI_CONTEXT_SHARE_A in classes
    # both channels consumed what they were given (SET_OBJECT; the compute channel's memory windows) once the
    # channel group was scheduled
    for channel in gpu.channels.values():
        assert channel.gp_get() == channel.put


def test_a_channel_runs_only_when_its_doorbell_is_rung() -> None:
    driver = MockKernelDriver(sm=90)
    gpu = NVKernelGPU(driver)
    channel = gpu.channels["compute"]
    signal = gpu.allocate(16, "signal")
    words = nvcmd.semaphore_words(nvcmd.SUBCHANNEL_COMPUTE, signal, 7, nvcmd.SEM_OPERATION_RELEASE)
    tokens, gpu.tokens = gpu.tokens, {}  # a doorbell with a token no channel has
    with pytest.raises(ValueError, match="names no channel"):
        channel.submit(words)
    assert channel.gp_get() != channel.put and bytes(gpu.view(signal, 8)) == bytes(8)
    gpu.tokens = tokens
    gpu.ring(channel)
    assert channel.gp_get() == channel.put and int.from_bytes(gpu.view(signal, 8), "little") == 7


def test_the_mock_driver_refuses_what_the_driver_refuses() -> None:
    gpu = NVKernelGPU(MockKernelDriver(sm=90))
    with pytest.raises(NVDriverError, match="NV_ERR_INVALID_PARAM_STRUCT"):  # a layout of the wrong size
        gpu.rm_alloc(gpu.device, rmapi.FERMI_VASPACE_A, rmapi.NV2080AllocParameters())
    with pytest.raises(NVDriverError, match="NV_ERR_INVALID_OBJECT_PARENT"):  # a channel group under a subdevice
        gpu.rm_alloc(gpu.subdevice, rmapi.KEPLER_CHANNEL_GROUP_A, rmapi.NVChannelGroupAllocationParameters(
            engineType=rmapi.NV2080_ENGINE_TYPE_GRAPHICS))
    with pytest.raises(NVDriverError, match="UVM ioctl 33"):  # mapping memory where no external range was made
        mapping = rmapi.UVMMapExternalAllocationParams(base=0x7000000000, length=0x1000, gpuAttributesCount=1,
                                                       hClient=gpu.root, hMemory=gpu.allocations[gpu.starts[0]].handle)
        gpu._uvm(rmapi.UVM_MAP_EXTERNAL_ALLOCATION, mapping)
    with pytest.raises(NVDriverError, match="NV_ERR_INVALID_CLASS"):  # Hopper's classes on an Ampere GPU
        NVKernelGPU(MockKernelDriver(sm=80)).rm_alloc(gpu.device, rmapi.HOPPER_COMPUTE_A, None)
    with pytest.raises(ValueError, match="was not allocated on this channel"):  # SET_OBJECT of a foreign class
        gpu.channels["copy"].submit([nvcmd.method_header(nvcmd.SUBCHANNEL_COPY, nvcmd.NVC6C0_SET_OBJECT, 1),
                                     rmapi.HOPPER_COMPUTE_A])


def test_device_files_are_mapped_at_offset_zero_as_the_kernel_module_requires() -> None:
    """nv-mmap.c maps what NV_ESC_RM_MAP_MEMORY set up on the descriptor and refuses any other mmap offset (EINVAL):
    the first run on an H100 stopped there when the RM's cookie was passed as the offset. The simulated driver
    refuses it the same way, and the interface maps at 0."""
    driver = MockKernelDriver(sm=90)
    gpu = NVKernelGPU(driver)
    handle = gpu.allocations[gpu.starts[0]].handle
    fd, cookie = gpu._map_request(handle, 4096, gpu.device)
    assert cookie != 0  # the cookie is no offset: mapping at it is refused
    with pytest.raises(OSError, match="offset"):
        driver.map_memory(fd, 4096, cookie, driver.reserve(4096))
    assert len(driver.map_memory(fd, 4096, 0, driver.reserve(4096))) == 4096


@pytest.mark.parametrize(("arch", "offset"), [("sm_80", 0x160), ("sm_90", 0x210)])
def test_cubin_facts_match_the_qmd_layouts(arch: str, offset: int) -> None:
    ok, detail = nvrtc_status()
    assert ok, detail
    image = kernel_image(compile_cuda(KERNEL, arch), "scale")
    layout = nvcmd.QMD_V04 if arch == "sm_90" else nvcmd.QMD_V03
    assert image.parameters_offset == offset == layout.arguments_offset and image.parameters_size == 8 + 8 + 4
    assert 2 <= image.registers <= 255 and image.text_size > 0 and image.text_offset % 128 == 0
    with pytest.raises(ValueError, match=r"no kernel 'missing' \(it has \['scale'\]\)"):
        kernel_image(compile_cuda(KERNEL, arch), "missing")


SCRIPT = """
import numpy
from tinycore import Tensor
from tinycore.device.registry import Device
from tinycore.hcq.mock import unpack_mock_binary
from tiny_nv import nvcmd
from tiny_nv.cubin import _sections, kernel_image
rng = numpy.random.default_rng(1)
a, b = rng.standard_normal((37, 19)).astype(numpy.float32), rng.standard_normal((19, 11)).astype(numpy.float32)
result = ((Tensor(a) @ Tensor(b)).relu() * 3).numpy()
gpu = Device["NV"].gpu.driver.gpu
layout = nvcmd.qmd_layout(nvcmd.qmd_get(gpu.last_qmd, "QMD_MAJOR_VERSION"))
address = layout.get(gpu.last_qmd, "PROGRAM_ADDRESS_LOWER") | (layout.get(gpu.last_qmd, "PROGRAM_ADDRESS_UPPER") << 32)
start = max(start for start in gpu.starts if start <= address)
lib = bytes(gpu.view(start, gpu.extent(start)))
_uops, cubin = unpack_mock_binary(lib)
name = next(section[6:] for section in _sections(cubin) if section.startswith(".text."))
image = kernel_image(cubin, name)
registers = layout.get(gpu.last_qmd, "REGISTER_COUNT" if layout.major_version == 4 else "REGISTER_COUNT_V")
registers = registers == image.registers > 0
print(numpy.abs(result - numpy.maximum(a @ b, 0) * 3).max() < 1e-4, layout.major_version, registers,
      address == start + 16 + int.from_bytes(lib[8:12], "little") + image.text_offset)  # header, program, CUBIN
"""


@pytest.mark.parametrize(("dev", "expected"), [("MOCK+NV", "True 4 True True"), ("MOCK+NV::sm_80", "True 3 True True")])
def test_tensor_program_runs_through_the_kernel_driver_interface(dev: str, expected: str) -> None:
    """A matmul with relu compiled by NVRTC runs on DEV=MOCK+NV through the kernel driver interface: the answer is
    numpy's, the QMD is V04 on Hopper (V03 for sm_80) with the CUBIN's register count, and the program address
    points at the kernel's code inside the upload."""
    environment = {**os.environ, "DEV": dev, "TINYCORE_PLUGINS": "nv,cpu"}
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=environment,
                            timeout=300)
    assert result.stdout.strip().splitlines()[-1:] == [expected], result.stdout + result.stderr[-3000:]


def test_host_and_gpu_see_the_same_memory() -> None:
    driver = MockKernelDriver(sm=90)
    gpu = NVKernelGPU(driver)
    address = gpu.allocate(3 << 20, "buffer")
    values = numpy.arange(1000, dtype=numpy.float32)
    gpu.view(address + 4096, values.nbytes)[:] = values.tobytes()
    assert numpy.array_equal(numpy.frombuffer(driver.gpu.view(address + 4096, values.nbytes), numpy.float32), values)
    gpu.free(address)
    with pytest.raises(MemoryError):
        driver.gpu.view(address, 4)


TENSOR_CORE_SCRIPT = """
import numpy
from tinycore import Tensor, dtypes
from tinycore.device.registry import Device
from tiny_nv import nvcmd
rng = numpy.random.default_rng(5)
a, b = rng.standard_normal((2, 32, 16)).astype(numpy.float32), rng.standard_normal((2, 16, 16)).astype(numpy.float32)
def bfloat16(x):
    bits = x.view(numpy.uint32).astype(numpy.uint64)
    return (((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16).astype(numpy.uint32).view(numpy.float32)
result = (Tensor(a).cast(dtypes.bfloat16) @ Tensor(b).cast(dtypes.bfloat16)).cast(dtypes.float32).numpy()
exact = numpy.matmul(bfloat16(a).astype(numpy.float64), bfloat16(b).astype(numpy.float64)).astype(numpy.float32)
qmd = Device["NV"].gpu.driver.gpu.last_qmd
grid = [nvcmd.QMD_V04.get(qmd, name) for name in ("GRID_WIDTH", "GRID_HEIGHT", "GRID_DEPTH")]
print(bool(numpy.allclose(result, bfloat16(exact), rtol=2 ** -7, atol=1e-6)), grid,
      nvcmd.QMD_V04.get(qmd, "CTA_THREAD_DIMENSION0"))
"""


def test_batched_bfloat16_tensor_core_matmul_runs_through_qmds() -> None:
    """A batched bfloat16 matmul on the tensor cores (mma.m16n8k16.bf16, a block of 2 x 2 warps sharing its tiles
    through shared memory, the batch on gidx2) launched through a QMD V04 on DEV=MOCK+NV: the grid and block are
    written into the QMD and numpy agrees."""
    environment = {**os.environ, "DEV": "MOCK+NV", "TINYCORE_PLUGINS": "nv,cpu"}
    result = subprocess.run([sys.executable, "-c", TENSOR_CORE_SCRIPT], capture_output=True, text=True,
                            env=environment, timeout=300)
    assert result.stdout.strip().splitlines()[-1:] == ["True [1, 1, 2] 128"], result.stdout + result.stderr[-3000:]


WRONG_QMD_SCRIPT = """
import dataclasses
import sys
import numpy
from tinycore import Tensor
import tiny_nv.nv_hcq as nv_hcq
from tiny_nv import nvcmd
loaded = nv_hcq.NVQueueProgram.__init__
def wrong(self, device, name, lib):
    loaded(self, device, name, lib)
    if sys.argv[1] == "registers":
        self.resources = dataclasses.replace(self.resources, registers=self.resources.registers + 1)
    elif sys.argv[1] == "parameters":
        self.parameters_size -= 16
    elif sys.argv[1] == "window":
        device.gpu.shared_window += 0x1000
nv_hcq.NVQueueProgram.__init__ = wrong
if sys.argv[1] == "stack":
    nvcmd.STACK_TOP = nvcmd.LOCAL_WINDOW_SPAN + 0x100  # above the thread's local window
if sys.argv[1] == "carveout":
    nvcmd.SHARED_CARVEOUTS_KIB[90] = (0, 1)  # a configuration too small for the block and the system's reserve
try:
    (Tensor(numpy.ones((4, 4), numpy.float32)) * 3).numpy()
except Exception as error:
    print(type(error).__name__, str(error).splitlines()[-1])
"""


@pytest.mark.parametrize(("change", "message"), [("registers", "registers, the kernel uses"),
                                                 ("parameters", "the kernel's parameters end at"),
                                                 ("window", "gives the shared memory window as"),
                                                 ("stack", "is not inside the thread's high local memory"),
                                                 ("carveout", "do not hold the block's")])
def test_the_mock_gpu_refuses_a_qmd_that_does_not_fit_the_kernel(change: str, message: str) -> None:
    """A QMD whose register count differs from the CUBIN's, whose constant buffer 0 does not cover the parameters,
    whose constant buffer 0 head gives a shared memory window other than the compute class's or a stack pointer
    outside the thread's local memory, or whose SM shared memory configuration cannot hold the block, is refused by
    the simulated GPU (it would fault or compute garbage on hardware)."""
    environment = {**os.environ, "DEV": "MOCK+NV", "TINYCORE_PLUGINS": "nv,cpu"}
    result = subprocess.run([sys.executable, "-c", WRONG_QMD_SCRIPT, change], capture_output=True, text=True,
                            env=environment, timeout=300)
    assert message in result.stdout, result.stdout + result.stderr[-3000:]


def test_the_linux_driver_maps_files_and_reports_failed_ioctls(tmp_path) -> None:
    """LinuxKernelDriver's system calls on an ordinary file (no GPU needed): a shared fixed mapping inside a reserved
    range and a register mapping write through to the file; an ioctl the file does not know raises OSError."""
    from tiny_nv.kernel_driver import LinuxKernelDriver
    driver = LinuxKernelDriver()
    backing = tmp_path / "backing"
    backing.write_bytes(bytes(1 << 16))
    fd = driver.open(str(backing))
    address = driver.reserve(1 << 16)
    view = driver.map_memory(fd, 1 << 16, 0, address)
    view[8:12] = b"abcd"
    registers = driver.map_registers(fd, 4096, 0)
    registers[1] = 0x11223344
    assert os.pread(fd, 12, 0) == bytes(4) + bytes.fromhex("44332211") + b"abcd"
    with pytest.raises(OSError, match="ioctl 0xc020462b"):
        driver.ioctl(fd, rmapi.nv_ioctl_request(rmapi.NV_ESC_RM_ALLOC, 32), rmapi.NVOS21Parameters())
    driver.release(address, 1 << 16)
    driver.close(fd)
