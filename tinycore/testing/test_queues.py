"""Conformance, queues: the command queues of a device whose plugin answers `tiny_hcq_queues` (tinycore.hcq).

Signals are set in queue order, a wait holds its queue until another queue signals, timestamps are monotonic
microseconds, the copy queue copies, a TinyJit graph replays as one submission with new inputs and new Variable
values, and a wait that times out raises the clear error, marks the device broken and leaves the process usable.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy
import pytest

from tinycore.tensor import Tensor
from tinycore.testing.support import assert_matches, not_applicable, sample

if TYPE_CHECKING:
    from tinycore.hcq import HCQCompiled
    from tinycore.uop.uop import UOp

pytestmark = pytest.mark.conformance_category("queues")

TIMEOUT_S = 20.0  # generous: a loaded CI machine may be slow, and a passing check never waits this long


@pytest.fixture
def queue_device(device: str) -> HCQCompiled:
    """The opened device, when it is a queue device (else the check does not apply)."""
    from tinycore.device.registry import Device, hcq_queues
    from tinycore.hcq import HCQCompiled
    opened = Device[device]
    if not isinstance(opened, HCQCompiled) or hcq_queues(opened) is None:
        not_applicable("the device's plugin does not answer tiny_hcq_queues (not a queue device)")
    opened.synchronize()
    return opened


def test_signals_are_set_in_queue_order(queue_device: HCQCompiled) -> None:
    """Three signals set by one queue, around a kernel, hold their values with nondecreasing timestamps."""
    signals = [queue_device.new_signal(0, name=f"order{number}") for number in range(3)]
    queue = queue_device.compute_queue().signal(signals[0], 10)
    queue.memory_barrier().signal(signals[1], 20).signal(signals[2], 30).submit(queue_device)
    signals[2].wait(30, TIMEOUT_S)
    assert [signal.value for signal in signals] == [10, 20, 30]
    stamps = [signal.timestamp for signal in signals]
    assert stamps == sorted(stamps) and stamps[0] > 0, f"signal timestamps out of order: {stamps}"


def test_a_wait_holds_its_queue_until_another_queue_signals(queue_device: HCQCompiled) -> None:
    """The compute queue waits for a signal the copy queue sets later; its own signal comes after that."""
    gate, done = queue_device.new_signal(0, name="gate"), queue_device.new_signal(0, name="done")
    queue_device.compute_queue().wait(gate, 5).signal(done, 1).submit(queue_device)
    time.sleep(0.01)
    assert done.value == 0, "the compute queue went past a wait whose signal was not set"
    queue_device.copy_queue().signal(gate, 5).submit(queue_device)
    done.wait(1, TIMEOUT_S)
    assert gate.timestamp <= done.timestamp


def test_timestamps_are_monotonic_microseconds(queue_device: HCQCompiled) -> None:
    """Two timestamps around a wait the host releases after 50 ms are 40 ms to 10 s apart, in microseconds."""
    first, second = queue_device.new_signal(name="first"), queue_device.new_signal(name="second")
    gate, done = queue_device.new_signal(0, name="gate"), queue_device.new_signal(0, name="done")
    queue = queue_device.compute_queue().timestamp(first).wait(gate, 1).timestamp(second)
    queue.signal(done, 1).submit(queue_device)
    time.sleep(0.05)
    gate.value = 1
    done.wait(1, TIMEOUT_S)
    elapsed = second.timestamp - first.timestamp
    assert 40_000 <= elapsed <= 10_000_000, f"50 ms measured as {elapsed} timestamp units; expected microseconds"


def test_copy_queue_copies(queue_device: HCQCompiled) -> None:
    """The copy queue moves bytes between two device buffers (part of one, all of another)."""
    from tinycore.device.buffer import Buffer
    from tinycore.dtype import dtypes
    data = sample((64,), seed=7)
    source = Buffer(queue_device.device, 64, dtypes.float32).ensure_allocated()
    destination = Buffer(queue_device.device, 64, dtypes.float32).ensure_allocated()
    source.copyin(memoryview(data.tobytes()))
    destination.copyin(memoryview(numpy.zeros(64, numpy.float32).tobytes()))
    done = queue_device.new_signal(0, name="copied")
    queue_device.copy_queue().copy(destination._buf, source._buf, 128).signal(done, 1).submit(queue_device)
    done.wait(1, TIMEOUT_S)
    got = numpy.frombuffer(destination.copyout(memoryview(bytearray(256))), numpy.float32)
    expected = numpy.concatenate([data[:32], numpy.zeros(32, numpy.float32)])
    assert_matches(got, expected, f"copy queue: 128 bytes of a 256-byte buffer on {queue_device.device}")


def test_graph_replay_is_one_submission_with_new_inputs_and_variables(queue_device: HCQCompiled) -> None:
    """A jitted prefix sum over a bound Variable gives numpy's answer for new data and new lengths, and every
    replay is one submission to the device."""
    from tinycore.engine.jit import TinyJit
    from tinycore.uop.symbolic import Variable
    length = Variable("queue_length", 1, 12)

    @TinyJit
    def step(values: Tensor, scale: Tensor, count: int | UOp) -> Tensor:
        return ((values.shrink(((0, count),)) * scale.shrink(((0, count),))).sum() + 1.0).realize()

    for call, count in enumerate((4, 7, 12, 1, 9)):
        values, scale = sample((12,), seed=200 + call), sample((12,), seed=300 + call)
        before = queue_device.submissions
        result = step(Tensor(values, device=queue_device.device).realize(),
                      Tensor(scale, device=queue_device.device).realize(), length.bind(count))
        if call >= 2 and queue_device.submissions - before != 1:
            raise AssertionError(f"replay {call - 1} made {queue_device.submissions - before} submissions; "
                                 "expected one")
        expected = (values[:count] * scale[:count]).sum() + numpy.float32(1.0)
        assert_matches(result, expected, f"jitted prefix dot product of length {count}", rtol=1e-5, atol=1e-5)


def test_a_wait_that_times_out_breaks_the_device_and_leaves_the_process_usable(queue_device: HCQCompiled) -> None:
    """A host wait on a signal a blocked queue never reaches raises DeviceTimeoutError naming the device, the
    signal and the value; launches then refuse with that reason; once the queue drains, recover() makes the
    device compute numpy's answer again."""
    from tinycore.hcq import DeviceTimeoutError
    gate, done = queue_device.new_signal(0, name="never_set"), queue_device.new_signal(0, name="after_gate")
    queue_device.compute_queue().wait(gate, 1).signal(done, 3).submit(queue_device)
    started = time.perf_counter()
    with pytest.raises(DeviceTimeoutError) as raised:
        done.wait(3, timeout_s=0.2)
    assert time.perf_counter() - started < TIMEOUT_S
    message = str(raised.value)
    for part in (queue_device.device, "after_gate", "3", "broken"):
        assert part in message, f"the timeout error does not name {part!r}: {message}"
    with pytest.raises(RuntimeError, match="broken"):
        (Tensor([1.0, 2.0], device=queue_device.device) + 1).realize()
    gate.value = 1  # the blocked queue goes on
    queue_device.recover(TIMEOUT_S)
    done.wait(3, TIMEOUT_S)
    data = sample((5,), seed=9)
    assert_matches(Tensor(data, device=queue_device.device) * 2 + 1, data * numpy.float32(2) + numpy.float32(1),
                   f"x * 2 + 1 after recover() on {queue_device.device}")
