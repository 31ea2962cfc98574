"""The CPU as a queue device: kernels and TinyJit replays as submissions to its C command queues."""
from __future__ import annotations

import numpy as np

from tinycore import Tensor, TinyJit, Variable
from tinycore.device.registry import Device
from tinycore.hcq import HCQCompiled


def cpu() -> HCQCompiled:
    device = Device["CPU"]
    assert isinstance(device, HCQCompiled)
    return device


def test_an_eager_kernel_is_one_submission() -> None:
    device = cpu()
    data = np.arange(6, dtype=np.float32)
    source = Tensor(data).realize()
    before, hardware_before = device.submissions, device.hardware_submissions()  # type: ignore[attr-defined]
    result = (source * 3 + 1).realize()
    assert device.submissions - before == 1
    assert device.hardware_submissions() - hardware_before == 1  # type: ignore[attr-defined]
    np.testing.assert_allclose(result.numpy(), data * 3 + 1)


def test_a_replay_is_one_submission_whatever_the_kernel_count() -> None:
    device = cpu()

    @TinyJit
    def ten_kernels(value: Tensor) -> Tensor:
        for _ in range(10):
            value = (value * 2 + 1).contiguous()
        return value.realize()

    for call in range(5):
        data = np.full(4, call, dtype=np.float32)
        source = Tensor(data).realize()
        before, hardware_before = device.submissions, device.hardware_submissions()  # type: ignore[attr-defined]
        result = ten_kernels(source)
        if call >= 2:
            assert ten_kernels.captured_kernel_count == 10
            assert device.submissions - before == 1
            assert device.hardware_submissions() - hardware_before == 1  # type: ignore[attr-defined]
        expected = data.copy()
        for _ in range(10):
            expected = expected * 2 + 1
        np.testing.assert_allclose(result.numpy(), expected)


def test_replay_with_new_inputs_and_new_variable_values() -> None:
    length = Variable("length", 1, 16)

    @TinyJit
    def prefix_sum(values: Tensor, count: object) -> Tensor:
        return (values.shrink(((0, count),)) * 2).sum().realize()

    for call, count in enumerate((3, 5, 9, 16, 1, 7)):
        data = np.random.default_rng(call).standard_normal(16).astype(np.float32)
        result = prefix_sum(Tensor(data).realize(), length.bind(count))
        np.testing.assert_allclose(result.numpy(), (data[:count] * 2).sum(), rtol=1e-5, atol=1e-6)


def test_a_wait_blocks_its_queue_not_the_host() -> None:
    device = cpu()
    gate, done = device.new_signal(0, name="gate"), device.new_signal(0, name="done")
    device.compute_queue().wait(gate, 1).signal(done, 7).submit(device)
    assert done.value == 0  # the queue's thread waits for the gate; submit returned
    device.copy_queue().signal(gate, 1).submit(device)
    done.wait(7, timeout_s=10)
    assert gate.timestamp <= done.timestamp


def test_a_bound_queue_writes_each_submissions_values_and_reports_a_refused_submission() -> None:
    import pytest

    from tinycore.uop.symbolic import Variable as SymbolicVariable
    device = cpu()
    first, second = device.new_signal(0, name="first"), device.new_signal(0, name="second")
    value = SymbolicVariable("queue_test_value", 0, 1000)
    queue = device.compute_queue().signal(first, value).signal(second, value + 5).bind(device)
    for number in (3, 40, 7):  # a later value below an earlier one too: each submission writes its own
        queue.submit(device, {value: number})
        second.wait(number + 5, timeout_s=10)
        assert (first.value, second.value) == (number, number + 5)
    refused = device.hardware_submissions()  # type: ignore[attr-defined]
    queue._target = (lambda *arguments: -2,) + queue._target[1:]  # type: ignore[attr-defined]
    with pytest.raises(RuntimeError, match="compute queue could not start its thread"):
        queue.submit(device, {value: 1})
    assert device.hardware_submissions() == refused  # type: ignore[attr-defined]
    assert first.value == 7


def test_copy_command_copies_bytes() -> None:
    device = cpu()
    source = Tensor(np.arange(8, dtype=np.float32)).realize()
    destination = Tensor.empty(8).realize()
    from tinycore.engine.memory import buffer_of
    from tinycore.schedule.fusion import view_base
    source_buffer, destination_buffer = (buffer_of(view_base(tensor.uop)) for tensor in (source, destination))
    done = device.new_signal(0)
    queue = device.copy_queue().copy(destination_buffer.ensure_allocated()._buf, source_buffer.ensure_allocated()._buf,
                                     32)
    queue.signal(done, 1).submit(device)
    done.wait(1, timeout_s=10)
    np.testing.assert_array_equal(destination.numpy(), np.arange(8, dtype=np.float32))


def test_a_capture_over_two_devices_replays_as_one_submission_per_device() -> None:
    from tinycore.hcq.graph import HCQGraph
    first, second = cpu(), Device["CPU:1"]
    assert isinstance(second, HCQCompiled)

    @TinyJit
    def across(value: Tensor) -> Tensor:
        moved = (value * 2 + 1).contiguous().to("CPU:1")
        return ((moved.exp() - 1).sum() + moved.max()).realize()

    for call in range(5):
        data = np.random.default_rng(call).standard_normal(8).astype(np.float32)
        before = (first.submissions, second.submissions)
        result = across(Tensor(data).realize())
        if call >= 2:
            assert isinstance(across._captured.replay, HCQGraph)  # type: ignore[attr-defined]
            assert (first.submissions - before[0], second.submissions - before[1]) == (1, 1)
        doubled = data * 2 + 1
        np.testing.assert_allclose(result.numpy(), (np.exp(doubled) - 1).sum() + doubled.max(), rtol=1e-5)
        assert result.device == "CPU:1"


def test_threads_launching_at_once_get_right_results_and_an_ordered_timeline() -> None:
    import threading

    from tinycore.device.buffer import Buffer
    from tinycore.dtype import dtypes
    from tinycore.engine.realize import _runners
    device = cpu()
    source_data = np.arange(64, dtype=np.float32)
    (Tensor(source_data).realize() * 2.5).realize()
    runner = [runner for (_, name, _), runner in _runners.items() if name == "CPU" and runner.name.startswith("E_")][-1]
    wrong: list[int] = []

    def launch_many(seed: int) -> None:
        rng = np.random.default_rng(seed)
        source = Buffer("CPU", 64, dtypes.float32).ensure_allocated()
        destination = Buffer("CPU", 64, dtypes.float32).ensure_allocated()
        for _ in range(200):
            data = rng.standard_normal(64).astype(np.float32)
            source.copyin(memoryview(data.tobytes()))
            runner([destination._buf, source._buf], {})
            got = np.frombuffer(destination.copyout(memoryview(bytearray(256))), np.float32)
            if not np.allclose(got, data * np.float32(2.5)):
                wrong.append(seed)

    threads = [threading.Thread(target=launch_many, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    device.synchronize()
    assert wrong == []
    assert device.timeline_signal.value == device.timeline_value - 1
