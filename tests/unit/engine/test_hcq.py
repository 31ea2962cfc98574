"""The core's queue machinery (tinycore.hcq) on a queue executed in Python by the test: signals, waits that time
out, symbolic words resolved at submit, bound queues patched on resubmission, launches on the timeline."""
from __future__ import annotations

import time
from typing import Any

import pytest

from tinycore.device.allocator import Allocator
from tinycore.hcq import DeviceTimeoutError, HCQArguments, HCQCompiled, HCQProgram, HCQSignal, HWQueue
from tinycore.helpers import Context
from tinycore.plugins.specs import HCQQueues
from tinycore.uop.symbolic import Variable


class ListQueue(HWQueue):
    """Four words per command; `_submit` runs them at once in Python (waits must already be satisfied)."""

    def _encode_wait(self, signal: HCQSignal, value: Any) -> None:
        self.emit("wait", signal, value, 0)

    def _encode_signal(self, signal: HCQSignal, value: Any) -> None:
        self.emit("signal", signal, value, 0)

    def _encode_timestamp(self, signal: HCQSignal) -> None:
        self.emit("timestamp", signal, 0, 0)

    def _encode_exec(self, program: Any, arguments: HCQArguments, global_size: Any, local_size: Any) -> None:
        self.emit("exec", program, arguments, global_size[0])

    def _encode_copy(self, destination: Any, source: Any, nbytes: Any) -> None:
        self.emit("copy", destination, source, nbytes)

    def _submit(self, device: Any) -> None:
        device.submitted.append(list(self.words))
        for position in range(0, len(self.words), 4):
            operation, first, second, third = self.words[position:position + 4]
            if operation == "wait" and first.value < second:
                raise AssertionError(f"wait for {second} on {first.name} submitted before it can be met")
            if operation == "signal":
                first._words[1] = time.perf_counter_ns()
                first.value = second
            elif operation == "timestamp":
                first._words[1] = time.perf_counter_ns()
            elif operation == "exec":
                first.run(second, third)
            elif operation == "copy":
                first[:third] = second[:third]


class ByteAllocator(Allocator):
    def _alloc(self, size: int, options: Any) -> memoryview:
        return memoryview(bytearray(size))

    def _copyin(self, dest: memoryview, src: memoryview) -> None:
        dest[:src.nbytes] = src


class RecordingProgram(HCQProgram):
    """Records the argument words and the number of groups of every launch."""

    def __init__(self, device: HCQCompiled, name: str, lib: bytes):
        super().__init__(device, name, lib)
        self.launches: list[tuple[list[int], Any]] = []
        self.words_per_launch = 2

    def run(self, arguments: HCQArguments, groups: Any) -> None:
        end = arguments.offset + 8 * self.words_per_launch
        words = arguments.memory[arguments.offset:end].cast("q").tolist()
        self.launches.append((words, groups))


class ListDevice(HCQCompiled):
    kernarg_ring_bytes = 256

    def __init__(self) -> None:
        self.submitted: list[list[Any]] = []
        super().__init__("LIST", ByteAllocator("LIST"), None, None, RecordingProgram,  # type: ignore[arg-type]
                         queues=HCQQueues(ListQueue, None, HCQSignal))


def test_signal_holds_a_value_and_a_timestamp_in_microseconds() -> None:
    device = ListDevice()
    signal = device.new_signal(3, name="probe")
    assert signal.value == 3 and signal.timestamp == 0
    before = time.perf_counter_ns()
    device.compute_queue().signal(signal, 9).submit(device)
    assert signal.value == 9
    assert before / 1000 <= signal.timestamp <= time.perf_counter_ns() / 1000


def test_wait_past_its_timeout_names_device_signal_and_value_and_breaks_the_device() -> None:
    device = ListDevice()
    signal = device.new_signal(1, name="never")
    started = time.perf_counter()
    with pytest.raises(DeviceTimeoutError, match=r"LIST: signal 'never' did not reach 5 within 0.05 s \(it holds 1\)"):
        signal.wait(5, timeout_s=0.05)
    assert time.perf_counter() - started < 5
    with pytest.raises(RuntimeError, match="marked broken"):
        device.compute_queue().signal(signal, 2).submit(device)
    with pytest.raises(RuntimeError, match="marked broken"):
        device.synchronize()
    device.recover()
    device.compute_queue().signal(signal, 5).submit(device)
    signal.wait(5, timeout_s=0.05)


def test_wait_on_a_broken_device_raises_its_reason_at_once() -> None:
    device = ListDevice()
    assert device.broken is None, "DeviceContract.broken defaults to None (usable)"
    signal = device.new_signal(0, name="pending")
    device.mark_broken("LIST was marked broken by an earlier timeout")
    started = time.perf_counter()
    with pytest.raises(RuntimeError, match="marked broken by an earlier timeout"):
        signal.wait(1, timeout_s=30)
    assert time.perf_counter() - started < 5, "the wait did not run out its 30 s timeout"


def test_symbolic_words_are_resolved_at_submit() -> None:
    device = ListDevice()
    signal, count = device.new_signal(), Variable("count", 0, 100)
    queue = device.compute_queue().signal(signal, count * 2 + 1)
    queue.submit(device, {count: 4})
    assert signal.value == 9
    with pytest.raises(KeyError, match="count"):
        device.compute_queue().signal(signal, count).submit(device, {})


def test_a_bound_queue_is_resubmitted_with_only_its_symbolic_words_patched() -> None:
    device = ListDevice()
    signal, value = device.new_signal(), Variable("value", 0, 1000)
    queue = device.compute_queue().signal(signal, value).bind(device)
    for number in (5, 17, 3):
        queue.submit(device, {value: number})
        assert signal.value == number
    assert len(device.submitted) == 3
    with pytest.raises(RuntimeError, match="bound"):
        queue.signal(signal, 1)


def test_launch_writes_arguments_signals_the_timeline_and_times_the_kernel() -> None:
    device = ListDevice()
    program: RecordingProgram = device.runtime("kernel", b"")
    program(1234, 99, global_size=(4, 1, 1))
    assert program.launches == [([1234, 99], 4)]
    assert device.timeline_signal.value == 1 and device.timeline_value == 2
    device.synchronize()
    seconds = program(5, 6, global_size=(2, 1, 1), wait=True)
    assert seconds is not None and 0 <= seconds < 1
    assert device.timeline_signal.value == 2


def test_argument_ring_wraps_after_the_device_is_done() -> None:
    device = ListDevice()
    program: RecordingProgram = device.runtime("kernel", b"")
    for number in range(10):  # 64 bytes a block, 256 in the ring: it wraps twice
        program(number, number + 1, global_size=(1, 1, 1))
    assert [words for words, _ in program.launches] == [[number, number + 1] for number in range(10)]
    assert device.kernargs.offset <= 256


def test_host_access_to_memory_waits_for_the_queues() -> None:
    device = ListDevice()
    waited = []
    device.allocator.before_host_access = lambda: waited.append(True)
    handle = device.allocator.alloc(8)
    device.allocator.copyin(handle, memoryview(b"12345678"))
    assert waited == [True]
    assert bytes(handle) == b"12345678"


def test_host_copy_settles_only_when_the_timeline_is_behind_and_never_on_a_broken_device() -> None:
    device = ListDevice()
    handle = device.allocator.alloc(4)
    device.allocator.copyin(handle, memoryview(b"abcd"))  # timeline reached: no wait
    assert bytes(handle) == b"abcd"
    device.timeline_value += 1  # a submission whose signal has not come: the copy must wait for it and time out
    with Context(HCQ_TIMEOUT_MS=50), pytest.raises(DeviceTimeoutError, match="did not reach 1"):
        device.allocator.copyin(handle, memoryview(b"efgh"))
    assert bytes(handle) == b"abcd", "the host wrote memory the device may still be using"
    device.timeline_signal.value = 1  # the signal arrives: copies settle again
    device.broken = None
    device.allocator.copyin(handle, memoryview(b"ijkl"))
    assert bytes(handle) == b"ijkl"
    device.mark_broken("LIST was marked broken by an earlier timeout")
    with pytest.raises(RuntimeError, match="marked broken by an earlier timeout"):
        device.allocator.copyin(handle, memoryview(b"mnop"))


def test_copy_goes_through_the_copy_queue() -> None:
    device = ListDevice()
    source, destination = memoryview(bytearray(b"abcdefgh")), memoryview(bytearray(8))
    device.copy_queue().copy(destination, source, 5).submit(device)
    assert bytes(destination) == b"abcde\x00\x00\x00"


def test_trace_events_are_chrome_complete_events_named_by_device_and_queue(tmp_path: Any) -> None:
    from tinycore.hcq import profile
    events = [profile.ProfileEvent("E_4", "CPU", "compute", 10.0, 12.5),
              profile.ProfileEvent("copy 16 bytes", "CPU", "copy", 13.0, 13.25),
              profile.ProfileEvent("r_3_4", "PYTHON", "compute", 20.0, 21.0)]
    document: list[Any] = profile.trace_events(events)["traceEvents"]
    complete = [event for event in document if event["ph"] == "X"]
    assert [(event["name"], event["ts"], event["dur"]) for event in complete] == [
        ("E_4", 10.0, 2.5), ("copy 16 bytes", 13.0, 0.25), ("r_3_4", 20.0, 1.0)]
    names = {(event["pid"], event.get("tid")): event["args"]["name"] for event in document if event["ph"] == "M"}
    assert names[(complete[0]["pid"], None)] == "CPU" and names[(complete[2]["pid"], None)] == "PYTHON"
    assert names[(complete[0]["pid"], complete[0]["tid"])] == "compute"
    assert names[(complete[1]["pid"], complete[1]["tid"])] == "copy"
    saved = profile.EVENTS[:]
    try:
        profile.EVENTS[:] = events
        path = profile.write(str(tmp_path / "trace.json"))
        import json
        with open(path) as file:
            assert json.load(file)["traceEvents"] == json.loads(json.dumps(document))
    finally:
        profile.EVENTS[:] = saved


class FakeBuffer:
    """What the graph runner reads of a Buffer: its handle, base and device."""

    def __init__(self, handle: int):
        self._buf, self.device, self.nbytes, self._base = handle, "LIST", 8, None

    @property
    def base(self) -> FakeBuffer:
        return self

    def ensure_allocated(self) -> FakeBuffer:
        return self


def test_graph_replay_patches_inputs_and_variables_and_submits_once() -> None:
    from types import SimpleNamespace

    from tinycore.hcq.graph import HCQGraph
    device = ListDevice()
    program: RecordingProgram = device.runtime("kernel", b"")
    program.words_per_launch = 3  # two buffers and the value of `count`
    count = Variable("count", 1, 64)
    spec = SimpleNamespace(name="kernel", vars=[count], global_size=(count * 2, 1, 1), local_size=None,
                           vals=lambda var_vals: (var_vals[count],))
    runner = SimpleNamespace(program=program, spec=spec, globals=(0, 1), name="kernel", device="LIST")
    captured_input, output = FakeBuffer(1000), FakeBuffer(2000)
    calls = [SimpleNamespace(runner=runner, buffers=[output, captured_input], var_vals={count: 3})]
    graph = HCQGraph(device, calls, [captured_input], [])
    assert graph.kernel_count == 1 and program.launches == []
    for replay, (handle, value) in enumerate([(5000, 4), (6000, 9), (7000, 1)]):
        before = len(device.submitted)
        graph.run([FakeBuffer(handle)], {count: value})
        assert len(device.submitted) - before == 1
        # the new input's address and the new value in the argument block; the symbolic size resolved at submit
        assert program.launches[-1] == ([2000, handle, value], value * 2)
        assert device.timeline_signal.value == replay + 1
