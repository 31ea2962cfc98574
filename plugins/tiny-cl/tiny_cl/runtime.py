"""The CL runtime: load a packed program binary and launch its kernel on the device's queue.

Launch sizes follow the core's convention: `global_size` counts work-groups and `local_size` work-items per group,
so the NDRange is their product. A kernel that does not depend on the work-group shape and is launched with one
work-item per group is enqueued without a local size, so the driver picks the work-group shape.

A buffer argument that is a view at an offset OpenCL cannot make a sub-buffer at (an `UnalignedView`) is staged:
its bytes are copied into a temporary buffer on the queue before the kernel and, when the kernel writes that
parameter, copied back after it. The queue is in order, so no host wait is added.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy

from tiny_cl.allocator import UnalignedView
from tiny_cl.compiler import unpack_binary
from tiny_cl.driver import OpenedDevice, import_pyopencl


class CLProgram:
    """A built kernel: `program(*buffers, global_size=(..), local_size=(..), vals=(ints), wait=False)`.

    Buffers are pyopencl Buffers (the CL allocator's handles) and `vals` the int32 DEFINE_VAR values in parameter
    order. With `wait=True` the call waits for the kernel and returns its device time in seconds, measured by the
    queue's event profiling.
    """

    def __init__(self, opened: OpenedDevice, name: str, lib: bytes):
        pyopencl = import_pyopencl()
        self.opened, self.name = opened, name
        binary, self.facts = unpack_binary(lib)
        program = pyopencl.Program(opened.context, [opened.device], [binary])
        try:
            program.build(options=["-w"], devices=[opened.device])
        except pyopencl.Error as error:
            raise RuntimeError(f"{opened.describe()} rejected the cached binary of kernel {name!r} ({error}); clear "
                               "the compile cache (CACHELEVEL=0 skips it) and retry") from error
        try:
            self.kernel = pyopencl.Kernel(program, name)
        except pyopencl.Error as error:
            raise RuntimeError(f"the built program has no kernel {name!r} ({error})") from error
        self.program = program

    def __call__(self, *buffers: Any, global_size: Sequence[int] = (1, 1, 1),
                 local_size: Sequence[int] | None = None, vals: Sequence[int] = (), wait: bool = False) -> float | None:
        pyopencl = import_pyopencl()
        if any(int(size) == 0 for size in global_size):
            return 0.0 if wait else None  # no work-items: OpenCL refuses an empty NDRange, and nothing would run
        staged = {position: buffer for position, buffer in enumerate(buffers) if isinstance(buffer, UnalignedView)}
        arguments = list(buffers)
        for position, view in staged.items():
            arguments[position] = self._stage_in(view)
        groups = [int(size) for size in global_size] + [1] * (3 - len(global_size))
        locals_ = [int(size) for size in (local_size or (1, 1, 1))] + [1] * (3 - len(local_size or (1, 1, 1)))
        dimensions = 3 if groups[2] > 1 or locals_[2] > 1 else (2 if groups[1] > 1 or locals_[1] > 1 else 1)
        work_items = tuple(group * local for group, local in zip(groups, locals_, strict=True))[:dimensions]
        free_shape = not self.facts.group_shape and all(size == 1 for size in locals_)
        shape = None if free_shape else tuple(locals_[:dimensions])
        for position, buffer in enumerate(arguments):
            self.kernel.set_arg(position, buffer)
        for position, value in enumerate(vals, start=len(buffers)):
            self.kernel.set_arg(position, numpy.int32(value))
        try:
            event = pyopencl.enqueue_nd_range_kernel(self.opened.queue, self.kernel, work_items, shape)
        except pyopencl.Error as error:
            raise RuntimeError(f"launching kernel {self.name!r} on {self.opened.describe()} with {work_items} "
                               f"work-items in groups of {shape or 'the driver choice'} failed: {error}") from error
        for position, view in staged.items():
            self._stage_out(view, arguments[position], position)
        if not wait:
            return None
        event.wait()
        return (event.profile.end - event.profile.start) * 1e-9

    def _stage_in(self, view: UnalignedView) -> Any:
        """A temporary buffer holding the bytes of `view`, filled on the queue."""
        pyopencl = import_pyopencl()
        temporary = pyopencl.Buffer(self.opened.context, pyopencl.mem_flags.READ_WRITE, max(view.size, 1))
        if view.size:
            pyopencl.enqueue_copy(self.opened.queue, temporary, view.parent, src_offset=view.offset, dst_offset=0,
                                  byte_count=view.size)
        return temporary

    def _stage_out(self, view: UnalignedView, temporary: Any, position: int) -> None:
        """Copy a staged parameter back into its view when the kernel writes it, then release the temporary (the
        driver keeps it until the queued copies finish)."""
        pyopencl = import_pyopencl()
        written = self.facts.written
        if view.size and (written is None or position in written):
            pyopencl.enqueue_copy(self.opened.queue, view.parent, temporary, src_offset=0, dst_offset=view.offset,
                                  byte_count=view.size)
        temporary.release()
