"""Conformance, copies: data between the host, CPU (and DISK, when it works), two instances of the device and the
device, both ways."""
from __future__ import annotations

import numpy
import pytest

from tinycore.dtype import dtypes
from tinycore.tensor import Tensor
from tinycore.testing.capabilities import DeviceCapabilities
from tinycore.testing.support import assert_matches, not_applicable, not_built, require_dtype, sample

pytestmark = pytest.mark.conformance_category("copies")


@pytest.mark.parametrize("shape", [(0,), (1,), (13,), (257, 3)], ids=["size0", "size1", "odd", "rows"])
def test_host_round_trip(device: str, shape: tuple[int, ...]) -> None:
    """numpy -> device -> numpy keeps every value."""
    data = sample(shape, seed=120)
    assert_matches(Tensor(data, device=device), data, f"host -> {device} -> host, shape {shape}")


def test_bytes_round_trip(device: str, capabilities: DeviceCapabilities) -> None:
    """Raw bytes (an odd count of uint8) survive the trip."""
    require_dtype(capabilities, dtypes.uint8)
    payload = bytes(range(7, 200, 3))
    result = Tensor(payload, device=device)
    assert_matches(result, numpy.frombuffer(payload, numpy.uint8), f"{len(payload)} bytes to {device} and back")


@pytest.mark.runs_kernels
def test_device_to_cpu_and_back(device: str) -> None:
    """Computed values copied to CPU, changed there and copied back keep their values."""
    data = sample((3, 7), seed=121)
    on_device = Tensor(data, device=device) * 3.0
    on_cpu = on_device.to("CPU")
    if on_cpu.device.split(":")[0] != "CPU":
        raise AssertionError(f".to('CPU') gave a tensor on {on_cpu.device}")
    assert_matches(on_cpu, data * numpy.float32(3.0), f"{device} -> CPU")
    back = (on_cpu + 1.0).to(device)
    assert_matches(back, data * numpy.float32(3.0) + numpy.float32(1.0), f"{device} -> CPU -> {device}")
    assert_matches(back * 2.0, (data * numpy.float32(3.0) + numpy.float32(1.0)) * numpy.float32(2.0),
                   f"a kernel on {device} reading a buffer copied from CPU")


@pytest.mark.runs_kernels
def test_copy_of_non_contiguous_view(device: str) -> None:
    """A transposed, strided view copied to CPU arrives in C order."""
    data = sample((4, 6), seed=122)
    source = Tensor(data, device=device).realize()
    assert_matches(source.T[::2].to("CPU"), data.T[::2], f"x.T[::2] from {device} to CPU")
    assert_matches(Tensor(data, device="CPU").T[1:].to(device), data.T[1:], f"x.T[1:] from CPU to {device}")


def _second_instance(device: str) -> str:
    """Another instance of the device under test: index 1 (index 0 when the device under test is index 1)."""
    base, _, index = device.partition(":")
    return f"{base}:{0 if index == '1' else 1}"


@pytest.mark.runs_kernels
def test_between_two_instances_of_the_device(device: str) -> None:
    """A transposed view copied to a second instance of the device (DEVICE:1) arrives in C order, and a kernel on the
    second instance reads it."""
    from tinycore.device.registry import Device
    other = _second_instance(device)
    try:
        Device[other]
    except Exception as error:  # noqa: BLE001 - a device with one instance here has nothing to copy between
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        not_applicable(f"a second instance {other} does not open here: {reason[:160]}")
    data = sample((3, 4), seed=125)
    source = Tensor(data, device=device).realize()
    copied = source.T.to(other)
    result = (copied * 2.0).realize()
    if result.device != other:
        raise AssertionError(f"a kernel on the copy from {device} to {other} ran on {result.device}")
    assert_matches(copied, data.T, f"x.T from {device} to {other}")
    assert_matches(result, data.T * numpy.float32(2.0), f"a kernel on {other} reading a buffer copied from {device}")
    assert_matches(result.to(device), data.T * numpy.float32(2.0), f"{device} -> {other} -> {device}")


@pytest.mark.runs_kernels
def test_sharded_over_two_instances(device: str) -> None:
    """A tensor sharded over two instances of the device (rows split in two) gathers back unchanged, computes per
    shard, and its sum over the sharded axis (an allreduce across the instances) equals numpy's on both."""
    from tinycore.device.registry import Device
    other = _second_instance(device)
    try:
        Device[other]
    except Exception as error:  # noqa: BLE001 - a device with one instance here has nothing to shard over
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        not_applicable(f"a second instance {other} does not open here: {reason[:160]}")
    data = sample((6, 5), seed=126)
    sharded = Tensor(data, device=device).shard((device, other), axis=0)
    assert_matches(sharded, data, f"rows sharded over {device} and {other}, gathered")
    assert_matches(sharded * 2.0 + 1.0, data * numpy.float32(2.0) + numpy.float32(1.0), "a kernel on each shard")
    total = sharded.sum(axis=0).realize()
    for part in total.uop.src:
        assert_matches(Tensor(part), data.sum(axis=0), f"the allreduced sum on {part.device}", atol=1e-5)


def test_large_copy(device: str, capabilities: DeviceCapabilities) -> None:
    """Four MiB to the device and back."""
    if not capabilities.large_grids:
        data = sample((4096,), seed=123)
    else:
        data = sample((1 << 20,), seed=123)
    assert_matches(Tensor(data, device=device), data, f"{data.nbytes} bytes host -> {device} -> host")


@pytest.mark.runs_kernels
def test_disk_both_ways(device: str, tmp_path: object) -> None:
    """Values written to a DISK tensor from the device read back on the device."""
    from tinycore.device.registry import Device
    path = f"{tmp_path}/conformance.bin"
    try:
        Device[f"DISK:{path}"]
    except Exception as error:  # noqa: BLE001 - any failure to open DISK means the check cannot run
        not_built(f"the DISK device does not open here: {str(error).splitlines()[0]}")
    data = sample((16,), seed=124)
    on_disk = (Tensor(data, device=device) * 2.0).to(f"DISK:{path}").realize()
    with open(path, "rb") as file:
        stored = numpy.frombuffer(file.read(), dtype=numpy.float32)
    assert_matches(stored[:16], data * numpy.float32(2.0), f"file contents after {device} -> DISK")
    assert_matches(on_disk.to(device) + 1.0, data * numpy.float32(2.0) + numpy.float32(1.0),
                   f"{device} -> DISK -> {device}, then a kernel on {device}")
