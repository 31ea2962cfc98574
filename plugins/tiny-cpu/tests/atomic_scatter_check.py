"""Scatter reductions split across the CPU's workers, checked in a child process (the worker count is read when the
device opens): every dtype's result against numpy's ufunc.at, and the kernel's source for the renderer's atomic
updates. test_cpu_atomics.py runs it for the C renderer, test_cpu_llvm.py for LLVM IR;
`python atomic_scatter_check.py C` (or LLVM) runs it alone, with DEV and NUM_CPU_THREADS from the environment."""
from __future__ import annotations

import os
import subprocess
import sys

ATOMIC_MARKERS = {"C": ("__atomic",), "LLVM": ("atomicrmw", "cmpxchg")}
"""What the renderer's source contains where it updates atomically (GCC's builtins; LLVM's instructions)."""


def check(renderer_name: str) -> None:
    """In this process: scatter_reduce of 70,000 values into 37 slots with each reduction and dtype, compared with
    numpy; a ValueError when the kernel's source has none of the renderer's atomic markers."""
    import numpy as np

    from tinycore import Tensor
    from tinycore.codegen import lower_to_program
    from tinycore.device import Device
    from tinycore.schedule import create_schedule

    generator = np.random.default_rng(5)
    count = 70000
    index = generator.integers(-37, 37, count).astype(np.int32)
    renderer = Device["CPU"].renderer
    ufuncs = {"sum": np.add, "prod": np.multiply, "amax": np.maximum, "amin": np.minimum}
    numpy_dtypes: list[type] = [np.float32, np.float64, np.int32, np.int64, np.int8]
    if renderer_name == "LLVM":
        numpy_dtypes.append(np.float16)
    for numpy_dtype in numpy_dtypes:
        for reduce, ufunc in ufuncs.items():
            if numpy_dtype == np.float16 and reduce in ("sum", "prod"):
                continue  # half sums round differently in another order: only order-free reduces compare exactly
            if reduce == "prod":
                values = (generator.integers(0, 2, count) * 2 - 1).astype(numpy_dtype)
            else:
                values = generator.integers(-100, 100, count).astype(numpy_dtype)
            base = generator.integers(1, 3, 37).astype(numpy_dtype)
            expected = base.copy()
            ufunc.at(expected, index, values)
            result = Tensor(base).scatter_reduce(0, Tensor(index), Tensor(values), reduce)
            kernels = [item for item in create_schedule([result.uop]).items if not item.is_copy]
            source = lower_to_program(kernels[-1].ast, renderer).src
            if "core_id" not in source or not any(marker in source for marker in ATOMIC_MARKERS[renderer_name]):
                raise ValueError(f"{reduce} of {numpy_dtype.__name__}: no split across workers with atomic updates "
                                 f"({ATOMIC_MARKERS[renderer_name]}) in\n{source}")
            np.testing.assert_array_equal(result.numpy(), expected, err_msg=f"{reduce} of {numpy_dtype.__name__}")


def run_in_child(renderer_name: str) -> None:
    """`check(renderer_name)` in a child process on 4 workers of the CPU device with that renderer."""
    device = "CPU" if renderer_name == "C" else f"CPU:{renderer_name}"
    environment = {**os.environ, "DEV": device, "NUM_CPU_THREADS": "4"}
    finished = subprocess.run([sys.executable, __file__, renderer_name], capture_output=True, text=True,
                              env=environment, timeout=300)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert finished.stdout.strip().endswith("ok")


if __name__ == "__main__":
    check(sys.argv[1])
    print("ok")
