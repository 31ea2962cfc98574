"""The PYTHON runtimes: `PythonProgram` unpacks a UOps program and runs it with tinycore's interpreter on the
buffers' bytes; `CProgram` loads a shared object the C renderer's compiler built and calls its kernel function."""
from __future__ import annotations

import ctypes
import os
import pickle
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import numpy

from tinycore.codegen.interpreter import run_linear
from tinycore.dtype import PtrDType, to_numpy_dtype
from tinycore.uop.ops import Ops


class PythonProgram:
    """A loaded kernel: `program(*buffers, global_size=.., local_size=.., vals=(ints), wait=False)`.

    `buffers` are the allocator's memoryviews, in the order of the program's DEFINE_GLOBALs; `vals` the values of
    its DEFINE_VARs sorted by name. Thread indices (if any) are run by the interpreter itself, so the launch sizes
    are not needed.
    """

    def __init__(self, name: str, lib: bytes):
        self.name = name
        self.uops = pickle.loads(lib)
        self.globals = sorted((uop for uop in self.uops if uop.op is Ops.DEFINE_GLOBAL), key=lambda uop: uop.arg)
        self.variables = sorted({uop.arg[0] for uop in self.uops if uop.op is Ops.DEFINE_VAR})

    def __call__(self, *buffers: memoryview, global_size: Sequence[int] = (1, 1, 1),
                 local_size: Sequence[int] | None = None, vals: Sequence[int] = (), wait: bool = False) -> Any:
        """Run the kernel on `buffers` with the integer arguments `vals`; the elapsed seconds when `wait`."""
        if len(buffers) != len(self.globals):
            raise TypeError(f"kernel {self.name} takes {len(self.globals)} buffers, got {len(buffers)}")
        if len(vals) != len(self.variables):
            raise TypeError(f"kernel {self.name} takes values for {self.variables}, got {list(vals)}")
        start = time.perf_counter()
        arrays: list[Any] = [None] * (max((uop.arg for uop in self.globals), default=-1) + 1)
        for uop, memory in zip(self.globals, buffers, strict=True):
            element = uop.dtype.base.scalar if isinstance(uop.dtype, PtrDType) else uop.dtype.scalar
            arrays[uop.arg] = numpy.frombuffer(memory, dtype=to_numpy_dtype(element))
        run_linear(self.uops, arrays, dict(zip(self.variables, vals, strict=True)))
        return time.perf_counter() - start if wait else None


class CProgram:
    """A compiled C kernel: `program(*buffers, global_size=.., local_size=.., vals=(ints), wait=False)`.

    `lib` is the shared object's bytes. It is written to a temporary file and loaded with ctypes (the file is
    removed at once: the loaded library stays mapped). The kernel is the exported function `name`, taking the
    buffers' addresses in DEFINE_GLOBAL order and then the DEFINE_VAR values as ints.
    """

    def __init__(self, name: str, lib: bytes):
        self.name = name
        handle, path = tempfile.mkstemp(prefix="tiny-python-template-", suffix=".so")
        try:
            with os.fdopen(handle, "wb") as file:
                file.write(lib)
            self.library = ctypes.CDLL(path)
        finally:
            os.unlink(path)
        try:
            self.function = getattr(self.library, name)
        except AttributeError:
            raise RuntimeError(f"the compiled kernel has no function {name!r}: the renderer must name the function "
                               "after the kernel") from None
        self.function.restype = None

    def __call__(self, *buffers: memoryview, global_size: Sequence[int] = (1, 1, 1),
                 local_size: Sequence[int] | None = None, vals: Sequence[int] = (), wait: bool = False) -> Any:
        """Call the kernel with the buffers' addresses and the integer arguments; the elapsed seconds when `wait`."""
        arguments: list[Any] = [ctypes.c_void_p(_address(buffer)) for buffer in buffers]
        arguments += [ctypes.c_int(value) for value in vals]
        start = time.perf_counter()
        self.function(*arguments)
        return time.perf_counter() - start if wait else None


def _address(view: memoryview) -> int | None:
    """The address of a buffer handle (a writable memoryview; None, a null pointer, for an empty one)."""
    if view.nbytes == 0:
        return None
    return ctypes.addressof(ctypes.c_char.from_buffer(view))
