"""The AMD command formats and the MOCK GPU: encodings checked against hand-computed bits (AQL, PM4, SDMA), and
Tensor programs on DEV=MOCK+AMD (the KFD interface over the simulated driver) against numpy. The queues themselves
(waits, barrier-AND, completion signals, copies, timestamps, real code objects) are in test_amd_kfd.py."""
from __future__ import annotations

import os
import struct
import subprocess
import sys

import pytest
from tiny_amd import amdcmd
from tiny_amd.amd_mock import MockAMDGPU


def test_pm4_type3_headers() -> None:
    # type 3 in bits 31:30, body words - 1 in 29:16, opcode in 15:8
    assert amdcmd.pm4_header(amdcmd.PM4_RELEASE_MEM, 7) == 0xC0064900
    assert amdcmd.pm4_header(amdcmd.PM4_WAIT_REG_MEM64, 8) == 0xC0079300


def test_release_mem_words() -> None:
    words = amdcmd.pm4_release(0x12_3456_7890, 0x1_0000_0005)
    assert words == [0xC0064900, 0x14 | (5 << 8), 2 << 29, 0x34567890, 0x12, 5, 1, 0]  # no interrupt
    assert amdcmd.pm4_release(0x1000, 0, clock=True)[2] == 3 << 29


def test_aql_dispatch_packet_layout() -> None:
    words = amdcmd.aql_dispatch(0xAB_0000_1000, 0xCD_0000_2000, [4, 2, 1], [32, 2, 1], 512)
    packet = struct.pack("<16I", *words)
    header, setup, wx, wy, wz = struct.unpack_from("<HHHHH", packet, 0)
    assert header == 2 | (1 << 8) | (2 << 9) | (2 << 11) and setup == 3 and (wx, wy, wz) == (32, 2, 1)
    assert struct.unpack_from("<III", packet, 12) == (128, 4, 1)  # grid in work-items
    assert struct.unpack_from("<II", packet, 24) == (0, 512)  # private and group segment bytes
    assert struct.unpack_from("<QQQ", packet, 32) == (0xAB_0000_1000, 0xCD_0000_2000, 0)


def test_sdma_packets() -> None:
    assert amdcmd.sdma_copy(0x2_0000_0010, 0x1_0000_0020, 100) == [1, 99, 0, 0x20, 1, 0x10, 2]
    assert amdcmd.sdma_fence(0x3_0000_0040, 7) == [5, 0x40, 3, 7]
    assert amdcmd.sdma_poll_geq(0x40, 9)[0] == 8 | (5 << 28) | (1 << 31)
    assert amdcmd.sdma_timestamp(0x80) == [13 | (2 << 8), 0x80, 0]


def test_memory_outside_allocations_faults() -> None:
    gpu = MockAMDGPU()
    address = gpu.allocate(16, "small")
    with pytest.raises(MemoryError, match="GPU page fault"):
        gpu.view(address + 8, 16)


SCRIPT = """
import numpy
from tinycore import Tensor, TinyJit
from tinycore.device.registry import Device
from tinycore.uop.symbolic import Variable
rng = numpy.random.default_rng(3)
a, b = rng.standard_normal((16, 40)).astype(numpy.float32), rng.standard_normal((40, 24)).astype(numpy.float32)
print("matmul", float(numpy.abs((Tensor(a) @ Tensor(b)).numpy() - a @ b).max()))
big = rng.standard_normal((2, 2048)).astype(numpy.float32)
print("sum", float(numpy.abs(Tensor(big).sum(1).numpy() - big.sum(1)).max()))
h = (Tensor(a).half() * 3).float().numpy()
print("half", float(numpy.abs(h - (a.astype(numpy.float16) * numpy.float16(3)).astype(numpy.float32)).max()))
@TinyJit
def step(x):
    return (x * 2 + 1).realize()
for i in range(3):
    out = step(Tensor(a + i))
print("jit", float(numpy.abs(out.numpy() - ((a + 2) * 2 + 1)).max()))
width = Variable("width", 1, 40)
s = (Tensor(a).shrink(((0, 16), (0, width.bind(7)))) * 2).sum(1)
print("symbolic", float(numpy.abs(s.numpy() - (a[:, :7] * 2).sum(1)).max()))
device = Device["AMD"]
print("device", type(device).__name__, device.gpu.launches > 0, device.gpu.copies > 0, device.gpu.releases > 0)
calls = device.driver.files.calls
print("kfd", calls["ACQUIRE_VM"], calls["CREATE_QUEUE"], calls["ALLOC_MEMORY_OF_GPU"] > 10, calls["CREATE_EVENT"])
"""


def test_tensor_programs_on_the_mock_gpu_match_numpy() -> None:
    environment = {**os.environ, "DEV": "MOCK+AMD", "TINYCORE_PLUGINS": "amd,cpu"}
    finished = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=environment,
                              timeout=240, check=False)
    output = finished.stdout + finished.stderr
    assert finished.returncode == 0, output
    results = {line.split()[0]: line.split()[1:] for line in finished.stdout.splitlines()}
    assert float(results["matmul"][0]) < 1e-4 and float(results["sum"][0]) < 1e-3
    assert float(results["half"][0]) == 0.0 and float(results["jit"][0]) == 0.0
    assert float(results["symbolic"][0]) < 1e-5
    assert results["device"] == ["AMDMockQueueDevice", "True", "True", "True"]
    assert results["kfd"] == ["1", "2", "True", "1"]  # one VM, an AQL and an SDMA queue, one event


MATRIX_SCRIPT = """
import numpy
from tinycore import Tensor, dtypes
from tinycore.device.registry import Device
rng = numpy.random.default_rng(4)
a, b = rng.standard_normal((32, 48)).astype(numpy.float16), rng.standard_normal((48, 64)).astype(numpy.float16)
out = (Tensor(a) @ Tensor(b)).float().numpy()
expected = (a.astype(numpy.float32) @ b.astype(numpy.float32)).astype(numpy.float16).astype(numpy.float32)
print("error", float(numpy.abs(out - expected).max()))
x, y = [(rng.standard_normal(shape).astype(numpy.float32).view(numpy.uint32) & numpy.uint32(0xFFFF0000))
        .view(numpy.float32) for shape in ((32, 48), (48, 64))]  # values bfloat16 holds exactly
out = (Tensor(x).cast(dtypes.bfloat16) @ Tensor(y).cast(dtypes.bfloat16)).float().numpy()
exact = x.astype(numpy.float64) @ y.astype(numpy.float64)
print("bf16", float((numpy.abs(out - exact) / (numpy.abs(exact) + 1)).max()))
device = Device["AMD"]
print("matrix", device.renderer.arch, sum(1 for program in device.gpu.code.values() if program.calls))
"""


@pytest.mark.parametrize("dev", ["MOCK+AMD", "MOCK+AMD::gfx942"], ids=["gfx1100-wmma", "gfx942-mfma"])
def test_half_and_bfloat16_matmuls_run_on_the_matrix_cores_of_the_mock_gpu(dev: str) -> None:
    environment = {**os.environ, "DEV": dev, "TINYCORE_PLUGINS": "amd,cpu"}
    finished = subprocess.run([sys.executable, "-c", MATRIX_SCRIPT], capture_output=True, text=True, env=environment,
                              timeout=240, check=False)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    results = {line.split()[0]: line.split()[1:] for line in finished.stdout.splitlines()}
    # float32 sums of exact half products, rounded once to half: numpy's answer rounded the same way
    assert float(results["error"][0]) <= 1e-3
    assert float(results["bf16"][0]) <= 8e-3  # the result rounded once to bfloat16
    assert results["matrix"] == [dev.split("::")[1] if "::" in dev else "gfx1100", "2"]
