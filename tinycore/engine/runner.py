"""A compiled kernel ready to launch (Runner), and the copy of one device Buffer into another.

Realize makes a Runner per kernel and BEAM search (engine/search.py) one per candidate it times, on copies of the
kernel's buffers; both import them from here.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from tinycore.helpers import DEBUG, collection_paused
from tinycore.plugins.contract import copies_to_buffer, expects_launches, launcher_of
from tinycore.uop.uop import UOp

if TYPE_CHECKING:
    from tinycore.codegen.opt import Opt
    from tinycore.device.buffer import Buffer
    from tinycore.renderer.renderer import ProgramSpec


class Runner:
    """A compiled kernel for one device: the program, its ProgramSpec and how to launch it.

    `prepared` is (spec, library, symbol) when the kernel was already rendered and compiled (with others, see
    prepare_runners); otherwise it is rendered with `opts` (None: the heuristic's) and compiled here.
    """

    def __init__(self, ast: UOp, device: str, prepared: tuple[ProgramSpec, bytes, str] | None = None,
                 opts: list[Opt] | None = None):
        from tinycore.device.registry import Device
        self.device = device
        opened = Device[device]
        if DEBUG >= 5:
            print(ast)
        started = time.perf_counter()
        if prepared is None:
            from tinycore.codegen import lower_to_program
            with collection_paused():
                self.spec = _without_program(lower_to_program(ast, opened.renderer, opts))
            library, symbol = opened.compiler.compile_cached(self.spec.src), self.spec.function_name
        else:
            self.spec, library, symbol = _without_program(prepared[0]), prepared[1], prepared[2]
        if DEBUG >= 4:
            print(self.spec.src)
        self.program = opened.runtime(symbol, library)
        if device not in launch_expectations:
            launch_expectations[device] = opened.expect_launches if expects_launches(opened) else None
        if hasattr(self.program, "display_name"):  # queue devices name kernels in profiles
            self.program.display_name = self.spec.name
        self.compile_seconds = time.perf_counter() - started
        self.name = self.spec.name
        self.globals = tuple(self.spec.globals)
        self.static_dims = None if self.spec.vars else self.spec.launch_dims()
        self._launch = launcher_of(self.program)
        self._fast = None
        if self.static_dims is not None and self._launch is not None:
            self._fast = self._launch(*self.static_dims)

    def __call__(self, buffers: Sequence[object], var_vals: dict[UOp, int], wait: bool = False) -> float | None:
        """Launch on the device handles `buffers` (in the AST's DEFINE_GLOBAL order)."""
        arguments = [buffers[position] for position in self.globals] if self.globals else list(buffers)
        if self._fast is not None and not wait:
            self._fast(arguments)
            return None
        if self.static_dims is not None:
            global_size, local_size = self.static_dims
            values: tuple[int, ...] = ()
        else:
            global_size, local_size = self.spec.launch_dims(var_vals)
            values = self.spec.vals(var_vals)
        return self.program(*arguments, global_size=global_size, local_size=local_size, vals=values, wait=wait)


def _without_program(spec: ProgramSpec) -> ProgramSpec:
    """`spec` without its linear program (`uops`, the renderer's input), which a runner never reads again.

    Runners live as long as their kernel may run again; with the program each held every node of its kernel's
    linearized code (after the digits demo's cold start, 21000 of the 27000 nodes alive), and every collection of
    the cyclic garbage collector walked them."""
    spec.uops = None
    return spec


launch_expectations: dict[str, Callable[[], None] | None] = {}
"""Each device with a compiled kernel: its `expect_launches` when it has one (DeviceContract), else None. Filled as
runners are made, so a realize never opens a device just to tell it that launches may come."""


def copy_buffers(destination: Buffer, source: Buffer) -> None:
    """Copy the device Buffer `source` into `destination` (same byte count, any two devices).

    A source allocator with `copy_to_buffer` (DISK) moves the data itself with bounded memory; otherwise the bytes
    go through host memory: read into a host-visible destination directly, or staged in one host buffer.
    """
    if source.nbytes != destination.nbytes:
        raise ValueError(f"copy of {source.nbytes} bytes from {source.device} into a {destination.nbytes} byte "
                         f"buffer on {destination.device}: the sizes must match")
    if source.nbytes == 0:
        return
    if copies_to_buffer(source.allocator):
        source.allocator.copy_to_buffer(source.ensure_allocated()._buf, destination)
        return
    staging = memoryview(bytearray(source.nbytes))
    source.copyout(staging)
    destination.copyin(staging)
