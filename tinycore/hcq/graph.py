"""The graph runner of queue devices: a TinyJit capture built into one compute queue per device, patched and
resubmitted.

At capture every kernel gets an argument block of its own (kept for the graph's life) and one `exec` in its
device's queue; each queue first waits for its device's timeline and ends by signalling it, and is bound to the
device once. Where the capture passes from one device to another, the first device's queue signals a graph signal
of its own and the next device's queue waits for it, so the calls keep their captured order; a copy between two
devices that share memory (`GraphDevice.shares_memory_with`) is a copy command in the destination's queue. A replay
writes only what changed into the argument blocks (the addresses of the new input buffers, the values of the
Variables) and submits each queue once: the timeline and graph-signal values and any symbolic launch sizes are
resolved at submit. A capture on one device is one submission.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, cast

from tinycore.device.buffer import Buffer
from tinycore.dtype import DType, dtypes
from tinycore.hcq import profile
from tinycore.hcq.queue import HCQArguments, HWQueue, QueueDevice
from tinycore.hcq.signal import HCQSignal
from tinycore.uop.symbolic import Variable, sym_infer
from tinycore.uop.uop import UOp

DeviceQueue = HWQueue[HCQSignal, Any]
"""The queues the graph records into: the device's compute queues."""


class GraphDevice(QueueDevice, Protocol):
    """What the graph uses of a queue device (tinycore.hcq.device.HCQCompiled, whose `graph` is `capture_graph`)."""

    profiling: bool
    submit_lock: threading.Lock
    timeline_signal: HCQSignal
    timeline_value: int

    def compute_queue(self) -> DeviceQueue:
        """A new compute queue."""

    def new_signal(self, value: int = 0, name: str = "signal") -> HCQSignal:
        """A new signal holding `value`."""

    def next_timeline_value(self) -> int:
        """The timeline value the next submission signals."""

    def shares_memory_with(self, other: GraphDevice) -> bool:
        """True when the two devices' queues can copy between each other's memory."""

    def synchronize(self) -> None:
        """Wait for every submitted command."""

TIMELINE_WAIT = Variable("hcq_timeline_wait", 0, 2**62, dtypes.int64)
TIMELINE_SIGNAL = Variable("hcq_timeline_signal", 0, 2**62, dtypes.int64)
SYNC_BASE = Variable("hcq_graph_sync_base", 0, 2**62, dtypes.int64)


def _call_device(call: Any) -> str:
    """The device a captured call runs on: its kernel's, or a copy's destination."""
    return str(call.runner.device if call.runner is not None else call.buffers[0].device)


def _queue_device(name: str) -> GraphDevice:
    """The opened device `name`, whose graph is `capture_graph`: a queue device (HCQCompiled), which this module
    cannot name (it imports this one), hence the cast to the protocol it fulfils."""
    from tinycore.device.registry import Device
    return cast(GraphDevice, Device[name])


def graph_device(calls: Sequence[Any], input_buffers: Sequence[Buffer]) -> GraphDevice | None:
    """The first queue device of the captured `calls` when the queues of their devices can run all of them, else
    None (TinyJit then replays call by call).

    That is the case when every kernel runs on a queue device, every copy is between two buffers that are not
    inputs (an input copy needs the host) on queue devices that share memory, and no Variable was captured with two
    values: a replay patches one value per Variable into every launch, where the call-by-call replay keeps each
    call's own (a Variable bound to each slab's first row in turn would replay the last slab's rows for all).
    """
    from tinycore.device.registry import Device
    if not calls:
        return None
    inputs = {id(buffer) for buffer in input_buffers}
    captured: dict[UOp, int] = {}
    for call in calls:
        for variable, value in call.var_vals.items():
            if captured.setdefault(variable, value) != value:
                return None
        devices = [call.runner.device] if call.runner is not None else [buffer.device for buffer in call.buffers]
        if not all(Device[name].graph is capture_graph for name in devices):  # queue devices, run by this graph
            return None
        opened = [_queue_device(name) for name in devices]
        if call.runner is None:
            if any(id(buffer) in inputs or id(buffer.base) in inputs for buffer in call.buffers):
                return None
            if not opened[0].shares_memory_with(opened[1]):
                return None
    return _queue_device(_call_device(calls[0]))


def capture_graph(calls: list[Any], input_buffers: list[Buffer], keep_alive: list[Buffer]) -> HCQGraph | None:
    """`GraphDevice.graph` (GraphContract): an HCQGraph of `calls` when the queues of their devices can run all of
    them (graph_device), else None."""
    device = graph_device(calls, input_buffers)
    return None if device is None else HCQGraph(device, calls, input_buffers, keep_alive)


class HCQGraph:
    """Captured calls of queue devices as one bound compute queue per device (see the module docstring)."""

    def __init__(self, device: GraphDevice, calls: list[Any], input_buffers: list[Buffer], keep_alive: list[Buffer]):
        self.device, self.calls, self.keep_alive, self.input_buffers = device, calls, keep_alive, input_buffers
        input_index = {id(buffer): position for position, buffer in enumerate(input_buffers)}
        # (argument block, argument number, input number, view (size, dtype, offset) or None for the whole buffer)
        self.input_patches: list[tuple[HCQArguments, int, int, tuple[int, DType, int] | None]] = []
        # (argument block, value number, the Variable or expression whose value goes there)
        self.value_patches: list[tuple[HCQArguments, int, UOp]] = []
        self.captured_values: dict[UOp, int] = {}
        self.argument_blocks: list[HCQArguments] = []  # the queues hold only their addresses
        self.timed: list[tuple[GraphDevice, str, HCQSignal, HCQSignal]] = []
        self.devices: list[GraphDevice] = [device]
        self.queues: dict[GraphDevice, DeviceQueue] = {}
        self.sync_signals: dict[GraphDevice, HCQSignal] = {}
        syncs = 0
        previous: GraphDevice | None = None
        for call in calls:
            self.captured_values.update(call.var_vals)
            name = _call_device(call)
            current = device if name == device.device else _queue_device(name)
            if current not in self.queues:
                if current not in self.devices:
                    self.devices.append(current)
                self.queues[current] = current.compute_queue().wait(current.timeline_signal, TIMELINE_WAIT)
            queue = self.queues[current]
            if previous is not None and previous is not current:
                # the order of the capture across devices: the next device waits for the previous one's signal
                syncs += 1
                signal = self.sync_signals.get(previous) or self.sync_signals.setdefault(
                    previous, previous.new_signal(0, name="graph sync"))
                self.queues[previous].signal(signal, SYNC_BASE + syncs)
                queue.wait(signal, SYNC_BASE + syncs)
            previous = current
            if call.runner is None:
                destination, source = call.buffers
                self._timed(current, queue, f"copy {source.nbytes} bytes", queue.copy,
                            destination.ensure_allocated()._buf, source.ensure_allocated()._buf, source.nbytes)
            else:
                self._add_kernel(current, queue, call, input_index)
        self.devices = [device for device in self.devices if device in self.queues]
        for current, queue in self.queues.items():
            queue.signal(current.timeline_signal, TIMELINE_SIGNAL).bind(current)
        self.sync_stride = syncs + 1
        self.replays = 0
        self.patched_handles: list[object] = [None] * len(self.input_patches)
        """The handle each input patch last wrote (None: not written since the blocks were made)."""
        self.last_values: dict[GraphDevice, int] = {current: 0 for current in self.queues}
        self.queue = self.queues[self.devices[0]] if self.devices else None
        # devices in reverse order: a queue that waits for an earlier device is already submitted when it signals
        self.submission_order = [(current, self.queues[current]) for current in reversed(self.devices)]

    def _add_kernel(self, device: GraphDevice, queue: DeviceQueue, call: Any, input_index: dict[int, int]) -> None:
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
        self._timed(device, queue, runner.name, queue.exec, runner.program, arguments, spec.global_size,
                    spec.local_size)

    def _timed(self, device: GraphDevice, queue: DeviceQueue, name: str, add: Callable[..., object],
               *arguments: object) -> None:
        """Add a command (`add(*arguments)`), between two timestamps when the device is profiling."""
        if not device.profiling:
            add(*arguments)
            return
        start, end = device.new_signal(name=f"{name} start"), device.new_signal(name=f"{name} end")
        queue.timestamp(start)
        add(*arguments)
        queue.timestamp(end)
        self.timed.append((device, name, start, end))

    def wait_idle(self) -> None:
        """Return once every device has finished this graph's last replay (its argument blocks, and the buffers its
        queues read and write, may then be released)."""
        for device, last in self.last_values.items():
            if last:
                device.timeline_signal.wait(last)

    def __del__(self) -> None:
        # queues of other devices may still run the last replay on their own threads: the argument blocks and
        # buffers this graph holds must outlive it, or those threads write into freed memory
        try:
            self.wait_idle()
        except Exception:  # noqa: BLE001 - a broken device already reported its timeout; never raise from __del__
            pass

    @property
    def kernel_count(self) -> int:
        """How many kernel launches (not copies) a replay runs."""
        return sum(1 for call in self.calls if call.runner is not None)

    def held_buffers(self) -> list[Buffer]:
        """None besides the calls' own: the queues hold device addresses, not Buffers."""
        return []

    def refreshed(self) -> HCQGraph:
        """A graph built again: its queues hold the addresses of the memory that was released."""
        return HCQGraph(self.device, self.calls, self.input_buffers, self.keep_alive)

    def run(self, input_buffers: Sequence[Buffer], var_vals: Mapping[UOp, int] | None = None) -> None:
        """Replay with `input_buffers` in place of the captured inputs and `var_vals` for the Variables: patch the
        argument blocks in place, then one submission per device."""
        values: dict[UOp, int] = dict(self.captured_values) if self.value_patches or var_vals else {}
        if var_vals:
            values.update(var_vals)
        with self.device.submit_lock:  # one replay's patches and submissions at a time (the first device's lock)
            for device, last in self.last_values.items():
                # the previous replay must be done with the argument blocks before they change (wait's own first
                # test made here: a replay on the CPU has finished by the next call, and wait is a Python frame)
                signal = device.timeline_signal
                if signal._read_value() < last:
                    signal.wait(last)
            views: list[Buffer] = []
            patched = self.patched_handles
            for position, (arguments, number, input_number, view) in enumerate(self.input_patches):
                buffer = input_buffers[input_number]
                if view is not None:
                    buffer = buffer.view(*view).ensure_allocated()
                    views.append(buffer)
                handle = buffer._buf
                if patched[position] is not handle:  # a replay on the same inputs writes the blocks once
                    arguments.set_buffer(number, handle)
                    patched[position] = handle
            for arguments, number, variable in self.value_patches:
                value = values.get(variable)
                arguments.set_value(number, value if value is not None else sym_infer(variable, values))
            self.replays += 1
            if len(self.queues) > 1:
                values[SYNC_BASE] = self.replays * self.sync_stride  # graph signals only grow from replay to replay
            last_values = self.last_values
            for device, queue in self.submission_order:
                values[TIMELINE_WAIT] = device.timeline_value - 1
                values[TIMELINE_SIGNAL] = last_values[device] = device.next_timeline_value()
                queue.submit(device, values)
        if self.timed:
            for device in self.devices:
                device.synchronize()
            for device, name, start, end in self.timed:
                profile.record(name, device.device, "compute", start.timestamp, end.timestamp)
        self.keep_alive_views = views
