"""The PYTHON device: the UOPS renderer and the interpreter runtime (or the optional C renderer and its shared
objects), bytearray memory, and its capabilities."""
from __future__ import annotations

import threading
from typing import Any

from tiny_python_template.allocator import PythonAllocator
from tiny_python_template.queue import PythonQueueProgram, QueueThread
from tiny_python_template.runtime import CProgram, PythonProgram
from tinycore.dtype import dtypes
from tinycore.hcq import HCQCompiled
from tinycore.testing.capabilities import DeviceCapabilities


class PythonDevice(HCQCompiled):
    """The PYTHON device, a queue device (see queue.py): its kernels run on a queue thread. The conformance suite
    reads `capabilities` to know which checks apply."""

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
        self.kernel_runtime: Any = CProgram if spec.name == "C" else PythonProgram
        self.capabilities = getattr(renderer, "capabilities", None) or type(self).capabilities
        self._threads: dict[str, QueueThread] = {}
        self._threads_lock = threading.Lock()
        super().__init__(device, PythonAllocator(device), renderer, compiler, PythonQueueProgram)

    def hardware_queue(self, name: str) -> QueueThread:
        """The thread running the queue `name` ("compute" or "copy"), started at its first submission."""
        found = self._threads.get(name)
        if found is None:
            with self._threads_lock:
                found = self._threads.setdefault(name, QueueThread(self, name))
        return found
