"""Scatter reductions on the CPU: with enough workers (codegen.atomics.ATOMIC_MIN_WORKERS) the kernel splits the
values across workers and combines with GCC's __atomic builtins; every dtype's result equals numpy's ufunc.at."""
from __future__ import annotations

import os
import subprocess
import sys

SCRIPT = """
import numpy as np
from tinycore import Tensor, dtypes
from tinycore.codegen import lower_to_program
from tinycore.device import Device
from tinycore.schedule import create_schedule

generator = np.random.default_rng(5)
count = 70000
index = generator.integers(-37, 37, count).astype(np.int32)
renderer = Device["CPU"].renderer
ufuncs = {"sum": np.add, "prod": np.multiply, "amax": np.maximum, "amin": np.minimum}
for numpy_dtype in (np.float32, np.float64, np.int32, np.int64, np.int8):
    for reduce, ufunc in ufuncs.items():
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
        assert "core_id" in source and "__atomic" in source, source
        np.testing.assert_array_equal(result.numpy(), expected, err_msg=f"{reduce} of {numpy_dtype.__name__}")
print("ok")
"""


def test_scatter_reductions_combine_atomically_across_workers() -> None:
    env = {**os.environ, "DEV": "CPU", "NUM_CPU_THREADS": "4"}
    finished = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert finished.stdout.strip().endswith("ok")
