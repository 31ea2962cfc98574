"""The PYTHON device: the UOPS renderer and the interpreter runtime (or the optional C renderer and its shared
objects), bytearray memory, and its capabilities."""
from __future__ import annotations

from tiny_python_template.allocator import PythonAllocator
from tiny_python_template.runtime import CProgram, PythonProgram
from tinycore.device.compiled import Compiled
from tinycore.dtype import dtypes
from tinycore.testing.capabilities import DeviceCapabilities


class PythonDevice(Compiled):
    """The PYTHON device. The conformance suite reads `capabilities` to know which checks apply."""

    capabilities = DeviceCapabilities(
        # bfloat16 has no numpy type for the runtime to view memory with
        dtypes=frozenset({dtypes.bool, dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8,
                          dtypes.uint16, dtypes.uint32, dtypes.uint64, dtypes.float16, dtypes.float32,
                          dtypes.float64}),
        max_buffers=None, local_memory=False, threads=False, symbolic=True,
        large_grids=False)  # one Python step per UOp per element: a million elements takes minutes

    def __init__(self, device: str = "PYTHON"):
        from tinycore.device.registry import select_renderer
        renderer, compiler, spec = select_renderer(device)
        # each renderer's binaries need their own runtime; a renderer may declare its own capabilities (C has no
        # float16), which then replace the device's
        runtime = CProgram if spec.name == "C" else PythonProgram
        self.capabilities = getattr(renderer, "capabilities", None) or type(self).capabilities
        super().__init__(device, PythonAllocator(device), renderer, compiler, runtime)
