"""The graph runner of queue devices: a TinyJit capture built into one compute queue, patched and resubmitted.

At capture every kernel gets an argument block of its own (kept for the graph's life) and one `exec` in a queue
that first waits for the device's timeline and ends by signalling it; the queue is bound to the device once. A
replay writes only what changed into that memory (the addresses of the new input buffers, the values of the
Variables) and submits the queue once: the timeline values and any symbolic launch sizes are resolved at submit.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tinycore.dtype import dtypes
from tinycore.hcq import profile
from tinycore.hcq.device import HCQArguments, HCQCompiled
from tinycore.hcq.queue import HWQueue
from tinycore.hcq.signal import HCQSignal
from tinycore.renderer.renderer import evaluate
from tinycore.uop.symbolic import Variable
from tinycore.uop.uop import UOp

TIMELINE_WAIT = Variable("hcq_timeline_wait", 0, 2**62, dtypes.int64)
TIMELINE_SIGNAL = Variable("hcq_timeline_signal", 0, 2**62, dtypes.int64)


def graph_device(calls: Sequence[Any], input_buffers: Sequence[Any]) -> HCQCompiled | None:
    """The queue device that can run every one of the captured `calls` as one queue, or None.

    That is the case when every call runs on one queue device: its kernels, and copies between two of its buffers
    that are not inputs (an input copy needs the host). Otherwise TinyJit replays call by call.
    """
    from tinycore.device.registry import Device
    devices = {call.runner.device for call in calls if call.runner is not None}
    if len(devices) != 1:
        return None
    device = Device[next(iter(devices))]
    if not isinstance(device, HCQCompiled):
        return None
    inputs = {id(buffer) for buffer in input_buffers}
    for call in calls:
        if call.runner is None:
            if any(buffer.device != device.device or id(buffer) in inputs or id(buffer.base) in inputs
                   for buffer in call.buffers):
                return None
    return device


class HCQGraph:
    """Captured calls of one queue device as one bound compute queue (see the module docstring)."""

    def __init__(self, device: HCQCompiled, calls: list[Any], input_buffers: list[Any], keep_alive: list[Any]):
        self.device, self.calls, self.keep_alive = device, calls, keep_alive
        input_index = {id(buffer): position for position, buffer in enumerate(input_buffers)}
        # (argument block, argument number, input number, view (size, dtype, offset) or None for the whole buffer)
        self.input_patches: list[tuple[HCQArguments, int, int, Any]] = []
        # (argument block, value number, the Variable or expression whose value goes there)
        self.value_patches: list[tuple[HCQArguments, int, UOp]] = []
        self.captured_values: dict[UOp, int] = {}
        self.argument_blocks: list[HCQArguments] = []  # the queue holds only their addresses
        self.timed: list[tuple[str, HCQSignal, HCQSignal]] = []
        queue = device.compute_queue().wait(device.timeline_signal, TIMELINE_WAIT)
        for call in calls:
            self.captured_values.update(call.var_vals)
            if call.runner is None:
                destination, source = call.buffers
                self._timed(queue, f"copy {source.nbytes} bytes", queue.copy, destination.ensure_allocated()._buf,
                            source.ensure_allocated()._buf, source.nbytes)
                continue
            self._add_kernel(queue, call, input_index)
        queue.signal(device.timeline_signal, TIMELINE_SIGNAL)
        self.queue: HWQueue = queue.bind(device)
        self.last_value = 0

    def _add_kernel(self, queue: HWQueue, call: Any, input_index: dict[int, int]) -> None:
        runner = call.runner
        buffers = [call.buffers[position] for position in runner.globals] if runner.globals else list(call.buffers)
        spec = runner.spec
        arguments = runner.program.new_arguments([buffer.ensure_allocated()._buf for buffer in buffers],
                                                 spec.vals(call.var_vals), persistent=True)
        self.argument_blocks.append(arguments)
        for number, buffer in enumerate(buffers):
            owner = buffer if id(buffer) in input_index else buffer.base
            if id(owner) in input_index:
                view = None if owner is buffer else (buffer.size, buffer.dtype, buffer.offset)
                self.input_patches.append((arguments, number, input_index[id(owner)], view))
        for number, variable in enumerate(spec.vars):
            self.value_patches.append((arguments, number, variable))
        self._timed(queue, runner.name, queue.exec, runner.program, arguments, spec.global_size, spec.local_size)

    def _timed(self, queue: HWQueue, name: str, add: Any, *arguments: Any) -> None:
        """Add a command (`add(*arguments)`), between two timestamps when the device is profiling."""
        if not self.device.profiling:
            add(*arguments)
            return
        start, end = self.device.new_signal(name=f"{name} start"), self.device.new_signal(name=f"{name} end")
        queue.timestamp(start)
        add(*arguments)
        queue.timestamp(end)
        self.timed.append((name, start, end))

    @property
    def kernel_count(self) -> int:
        """How many kernel launches (not copies) a replay runs."""
        return sum(1 for call in self.calls if call.runner is not None)

    def run(self, input_buffers: Sequence[Any], var_vals: Mapping[UOp, int] | None = None) -> None:
        """Replay with `input_buffers` in place of the captured inputs and `var_vals` for the Variables: patch the
        argument blocks in place, then one submission."""
        device = self.device
        # the previous replay must be done with the argument blocks before they change
        device.timeline_signal.wait(self.last_value)
        values: dict[UOp, int] = dict(self.captured_values) if self.value_patches or var_vals else {}
        if var_vals:
            values.update(var_vals)
        views: list[Any] = []
        for arguments, number, input_number, view in self.input_patches:
            buffer = input_buffers[input_number]
            if view is not None:
                buffer = buffer.view(*view).ensure_allocated()
                views.append(buffer)
            arguments.set_buffer(number, buffer._buf)
        for arguments, number, variable in self.value_patches:
            value = values.get(variable)
            arguments.set_value(number, value if value is not None else evaluate(variable, values))
        values[TIMELINE_WAIT] = device.timeline_value - 1
        values[TIMELINE_SIGNAL] = self.last_value = device.next_timeline_value()
        self.queue.submit(device, values)
        if self.timed:
            device.synchronize()
            for name, start, end in self.timed:
                profile.record(name, device.device, "compute", start.timestamp, end.timestamp)
        self.keep_alive_views = views
