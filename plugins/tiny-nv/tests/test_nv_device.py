"""The NV device without a GPU: DEV=NV::sm_90 renders and compiles every kernel of a Tensor program with NVRTC and
refuses at the first launch with a clear error; plain DEV=NV says how to work without a GPU."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

SCRIPT = """
import numpy
from tinycore import Tensor
from tinycore.device.registry import Device
device = Device["NV"]
print("renderer", type(device.renderer).__name__, device.renderer.arch, type(device.compiler).__name__)
x = Tensor(numpy.arange(6, dtype=numpy.float32), device="NV")
print("copied", x.to("CPU").numpy().tolist() if False else "yes")
try:
    (x * 2 + 1).sum().numpy()
except Exception as error:
    print("error", type(error).__name__, str(error))
"""


def _run(dev: str) -> str:
    environment = {**os.environ, "DEV": dev, "TINYCORE_PLUGINS": "nv,cpu"}
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=environment,
                            timeout=120)
    return result.stdout + result.stderr


def test_compile_only_compiles_then_refuses_the_launch() -> None:
    from tiny_nv.hooks import probe
    if probe()[0]:
        pytest.skip("a GPU is present: compile-only mode is for machines without one")
    output = _run("NV::sm_90")
    assert "renderer CUDARenderer sm_90 NVRTCCompiler" in output
    assert "error NoGPUForLaunchError NV is compile-only here" in output
    assert "compiled for sm_90" in output and "DEV=MOCK+NV" in output


def test_plain_nv_without_a_gpu_says_how_to_compile_only() -> None:
    from tiny_nv.hooks import probe
    if probe()[0]:
        pytest.skip("a GPU is present")
    output = _run("NV")
    assert "DEV=NV::sm_90" in output and "DEV=MOCK+NV" in output
