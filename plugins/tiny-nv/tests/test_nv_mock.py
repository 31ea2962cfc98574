"""The NV command format and the MOCK GPU: encodings checked against hand-computed bits, then queues run on the
simulated GPU (semaphores with timestamps, acquires that stall a channel, copy-engine transfers, QMD launches) and
Tensor programs on DEV=MOCK+NV against numpy."""
from __future__ import annotations

import os
import subprocess
import sys
import types

import pytest
from tiny_nv import nvcmd
from tiny_nv.mock import MockGPU
from tiny_nv.nvqueue import Channel, NVComputeQueue, NVCopyQueue, NVSignal


def test_method_header_bits() -> None:
    # SEC_OP 1 (incrementing) in bits 31:29, 1 word in 28:16, subchannel 1 in 15:13, 0x2b4 >> 2 = 0xad in 11:0
    assert nvcmd.method_header(1, 0x2B4, 1) == 0x200120AD
    assert nvcmd.method_header(0, 0x5C, 5) == 0x20050017
    with pytest.raises(ValueError):
        nvcmd.method_header(0, 0x5D, 1)


def test_pushbuffer_decodes_to_the_method_writes() -> None:
    words = nvcmd.semaphore_words(0, 0x12_3456_7890, 7, nvcmd.SEM_OPERATION_RELEASE, timestamp=True)
    methods = list(nvcmd.decode_pushbuffer(words))
    assert [(m.method, m.value) for m in methods] == [
        (0x5C, 0x34567890), (0x60, 0x12), (0x64, 7), (0x68, 0),
        (0x6C, 1 | (1 << 20) | (1 << 24) | (1 << 25))]


def test_gpfifo_entry_bits_and_round_trip() -> None:
    entry = nvcmd.gpfifo_entry(0x1_2345_6780, 5)
    assert entry == 0x2345_6780 | (0x1 << 32) | (1 << 41) | (5 << 42)
    assert nvcmd.decode_gpfifo_entry(entry) == (0x1_2345_6780, 5)


def test_qmd_fields_sit_at_their_bits() -> None:
    qmd = bytearray(256)
    nvcmd.qmd_set(qmd, "CTA_RASTER_WIDTH", 0x01020304)  # bits 415:384 = bytes 48..51
    nvcmd.qmd_set(qmd, "CTA_THREAD_DIMENSION0", 256)  # bits 607:592 = bytes 74..75
    nvcmd.qmd_set(qmd, "CONSTANT_BUFFER_VALID0", 1)  # bit 640 = byte 80 bit 0
    assert qmd[48:52] == bytes([4, 3, 2, 1]) and qmd[74:76] == bytes([0, 1]) and qmd[80] == 1
    assert nvcmd.qmd_get(qmd, "CTA_RASTER_WIDTH") == 0x01020304 and nvcmd.qmd_get(qmd, "CTA_THREAD_DIMENSION0") == 256
    with pytest.raises(ValueError):
        nvcmd.qmd_set(qmd, "CTA_THREAD_DIMENSION0", 1 << 16)


def test_an_acquire_stalls_its_channel_until_another_releases() -> None:
    gpu = MockGPU()
    first, second = Channel(gpu, gpu, "first"), Channel(gpu, gpu, "second")
    gate, done = NVSignal(gpu, 0, "gate"), NVSignal(gpu, 0, "done")
    NVComputeQueue().wait(gate, 1).signal(done, 5).submit(first)
    assert done.value == 0 and first.gp_get() == 0  # stalled on the acquire
    NVCopyQueue().signal(gate, 1).submit(second)
    assert gate.value == 1 and done.value == 5 and first.gp_get() == 1
    assert done.timestamp > 0


def test_copy_engine_moves_bytes_and_faults_outside_memory() -> None:
    gpu = MockGPU()
    channel = Channel(gpu, gpu, "copy")
    source, destination = gpu.allocate(1000, "source"), gpu.allocate(1000, "destination")
    gpu.view(source, 1000)[:] = bytes(range(250)) * 4
    NVCopyQueue().copy(destination + 10, source, 900).submit(channel)
    assert bytes(gpu.view(destination + 10, 900)) == (bytes(range(250)) * 4)[:900]
    with pytest.raises(MemoryError, match="page fault"):
        NVCopyQueue().copy(destination + 500, source, 900).submit(Channel(gpu, gpu, "faulting"))


LAUNCH_SCRIPT = """
import numpy
from nv_kernels import CASES, case_kernels
from tiny_nv.mock import MockCompiler
from tiny_nv.nv_hcq import NVQueueProgram
from tiny_nv.renderer import CUDARenderer
from tinycore.codegen import lower_to_program
from tinycore.device.registry import Device
device = Device["NV"]
case = next(case for case in CASES if case.name == "reduce")
inputs, ordered, items = case_kernels(case, numpy.random.default_rng(3))
program = lower_to_program(items[0].ast, CUDARenderer("sm_90", embed_program=True))
kernel = NVQueueProgram(device, program.function_name, MockCompiler("sm_90").compile(program.src))
output, data = device.allocator.alloc(3 * 4), device.allocator.alloc(ordered[0].nbytes)
device.allocator._copyin(data, memoryview(ordered[0]).cast("B"))
global_size, local_size = program.launch_dims({})
seconds = kernel(output, data, global_size=global_size, local_size=local_size, wait=True)
result = numpy.empty(3, numpy.float32)
device.allocator._copyout(memoryview(result).cast("B"), output)
print(bool(numpy.abs(result - case.reference(*inputs)).max() < 1e-3), seconds is not None and seconds >= 0)
try:
    kernel(output, data, global_size=(global_size[0] + 1, 1, 1), local_size=local_size, wait=True)
except ValueError as error:
    print(str(error).splitlines()[-1])
"""


def test_kernel_launch_through_a_qmd() -> None:
    """A reduce kernel launched through a QMD on the simulated GPU behind the simulated kernel driver gives numpy's
    answer and a kernel time; a QMD whose grid is not the one the kernel was made for is refused."""
    environment = {**os.environ, "DEV": "MOCK+NV", "TINYCORE_PLUGINS": "nv,cpu",
                   "PYTHONPATH": os.pathsep.join([os.path.dirname(__file__), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-c", LAUNCH_SCRIPT], capture_output=True, text=True, env=environment,
                            timeout=300)
    lines = result.stdout.strip().splitlines()
    assert lines[:1] == ["True True"] and "the kernel was made for" in lines[-1], result.stdout + result.stderr[-3000:]


SCRIPT = """
import numpy
from tinycore import Tensor, dtypes
from tinycore.device.registry import Device
rng = numpy.random.default_rng(0)
a, b = rng.standard_normal((33, 70)).astype(numpy.float32), rng.standard_normal((70, 9)).astype(numpy.float32)
x, y = Tensor(a), Tensor(b)
checks = {
    "matmul": numpy.abs((x @ y).numpy() - a @ b).max() < 1e-4,
    "softmax": numpy.abs(x.softmax(1).numpy() - numpy.exp(a) / numpy.exp(a).sum(1, keepdims=True)).max() < 1e-5,
    "half": numpy.abs((x.cast(dtypes.float16) * 2).numpy() - (a.astype(numpy.float16) * 2)).max() == 0,
}
gpu = Device["NV"].gpu.driver.gpu  # the simulated GPU behind the simulated kernel driver
print(sorted(name for name, ok in checks.items() if ok), gpu.launches > 0, gpu.copies > 0)
"""


def test_tensor_programs_on_dev_mock_nv() -> None:
    environment = {**os.environ, "DEV": "MOCK+NV", "TINYCORE_PLUGINS": "nv,cpu"}
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=environment,
                            timeout=300)
    assert result.stdout.strip().splitlines()[-1:] == ["['half', 'matmul', 'softmax'] True True"], \
        result.stdout + result.stderr


def test_gpu_bench_script_runs_on_the_mock(tmp_path) -> None:
    """gpu_check.sh's bench, at tiny sizes on DEV=MOCK+NV: every figure is produced and checked against numpy."""
    import json
    from pathlib import Path
    script = Path(__file__).resolve().parent.parent / "gpu_bench.py"
    report = tmp_path / "bench.json"
    environment = {**os.environ, "DEV": "MOCK+NV", "TINYCORE_PLUGINS": "nv,cpu"}
    result = subprocess.run([sys.executable, str(script), "--small", "--json", str(report)], capture_output=True,
                            text=True, env=environment, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    figures = json.loads(report.read_text())
    assert figures["copies"]["host_to_device_GBps"] > 0 and figures["elementwise"]["elementwise_GBps"] > 0
    assert figures["matmul_fp16"]["TFLOPS"] > 0 and figures["matmul_fp32"]["TFLOPS"] > 0


JIT_SCRIPT = """
import numpy
from tinycore import Tensor, TinyJit
from tinycore.device.registry import Device
device = Device["NV"]

@TinyJit
def step(x, y):
    return ((x @ y).relu() + 1).sum(1)

rng = numpy.random.default_rng(0)
for attempt in range(4):
    a, b = rng.standard_normal((8, 16)).astype(numpy.float32), rng.standard_normal((16, 8)).astype(numpy.float32)
    submissions, launches = device.submissions, device.gpu.driver.gpu.launches
    error = numpy.abs(step(Tensor(a), Tensor(b)).numpy() - (numpy.maximum(a @ b, 0) + 1).sum(1)).max()
    print(type(device).__name__, attempt, bool(error < 1e-4), device.submissions - submissions,
          device.gpu.driver.gpu.launches - launches)
"""


def test_tinyjit_replays_one_queue_submission_on_the_mock() -> None:
    """On DEV=MOCK+NV the core's HCQ machinery drives the NV queues: a replay of a captured two-kernel function is
    one compute submission (the graph); host copies go to the copy channel without being queue submissions."""
    environment = {**os.environ, "DEV": "MOCK+NV", "TINYCORE_PLUGINS": "nv,cpu"}
    result = subprocess.run([sys.executable, "-c", JIT_SCRIPT], capture_output=True, text=True, env=environment,
                            timeout=300)
    lines = result.stdout.strip().splitlines()
    assert lines[-2:] == ["NVKernelQueueDevice 2 True 1 2", "NVKernelQueueDevice 3 True 1 2"], \
        result.stdout + result.stderr


def test_symbolic_launch_sizes_are_written_into_the_qmd_at_submit() -> None:
    from tiny_nv.nv_hcq import NVArguments, NVQueueComputeQueue

    from tinycore.uop.symbolic import Variable

    class Program:
        program_address, shared_bytes, parameters_size, register_count = 0x1234_5600, 0, 0x170, 0
        resources = nvcmd.LaunchResources(sm=80)
        device = types.SimpleNamespace(qmd=nvcmd.QMD_V03, gpu=types.SimpleNamespace(
            shared_window=0xFE000000, local_window=0x7293_0000_0000))

    class Device:
        device, submissions, gpu = "NV", 0, MockGPU()
        channels: dict = {}

        def check_usable(self) -> None:
            pass

    device = Device()
    block = device.gpu.allocate(0x400, "arguments")
    device.channels["compute"] = Channel(device.gpu, device.gpu, "compute")
    arguments = NVArguments(device.gpu.view(block, 0x400), 0, block, 1)
    width = Variable("width", 1, 1000)
    queue = NVQueueComputeQueue()
    queue.exec(Program(), arguments, (width * 2, 1, 1), (32, 1, 1))
    qmd = device.gpu.view(block, nvcmd.QMD_BYTES)
    with pytest.raises(MemoryError, match="0x12345600 is outside every allocation"):
        queue.submit(device, {width: 21})  # nothing is mapped at the program address: the GPU faults on the launch
    assert nvcmd.qmd_get(qmd, "CTA_RASTER_WIDTH") == 42 and nvcmd.qmd_get(qmd, "CTA_THREAD_DIMENSION0") == 32
    assert nvcmd.qmd_get(qmd, "PROGRAM_ADDRESS_LOWER") == 0x1234_5600
    # constant buffer 0's head (after the QMD) carries the same launch sizes: gridDim.x written at submit
    head = device.gpu.view(block + nvcmd.QMD_BYTES, 0x30).cast("I")
    assert list(head[:6]) == [32, 1, 1, 42, 1, 1] and head[nvcmd.CB0_STACK_TOP // 4] == nvcmd.STACK_TOP
