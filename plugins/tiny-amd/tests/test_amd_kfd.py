"""The KFD interface against the MOCK driver and GPU: ioctl request words and argument layouts checked against the
values kfd_ioctl.h gives, the code-object loader against llvm-readelf, and real clang-built code objects dispatched
through AQL packets whose kernel_object is the loaded kernel descriptor, with results compared to numpy. Everything
here ran on the simulated driver only; no AMD GPU was available."""
from __future__ import annotations

import ctypes
import struct
import subprocess
import tempfile
from pathlib import Path

import numpy
import pytest
from tiny_amd import amdcmd, kfd_ioctl
from tiny_amd.amd_hcq import QUEUES, AMDAllocator, AMDProgram, AMDQueueDevice, GPUBuffer
from tiny_amd.amd_mock import MockCompiler
from tiny_amd.code_object import CodeObjectError, load_code_object
from tiny_amd.compiler import AMDCompiler, toolchain_status
from tiny_amd.inspect import code_object_notes, readelf
from tiny_amd.kfd import KFDDriver, KFDError, LinuxFiles
from tiny_amd.kfd_mock import MockKFD
from tiny_amd.renderer import HIPRenderer
from tiny_amd.target import parse_target

from tinycore.codegen import lower_to_program
from tinycore.dtype import PtrDType, to_numpy_dtype
from tinycore.hcq.mock import unpack_mock_binary
from tinycore.hcq.signal import DeviceTimeoutError
from tinycore.testing.kernel_cases import CASES, Case, case_kernels, symbolic_kernel
from tinycore.uop.ops import Ops

needs_clang = pytest.mark.skipif(not toolchain_status()[0], reason="needs clang and ld.lld (apt-get install clang-19 "
                                                                   "lld-19 llvm-19)")


def _ints(words: list[amdcmd.Word]) -> list[int]:
    """Words that hold no symbolic value."""
    assert all(isinstance(word, int) for word in words)
    return [word for word in words if isinstance(word, int)]


def test_ioctl_request_words_are_the_headers() -> None:
    # _IOWR('K', nr, size) = 3 << 30 | size << 16 | 'K' << 8 | nr, with the sizes of the kfd_ioctl.h structures
    assert kfd_ioctl.GET_VERSION == 0x80084B01 and kfd_ioctl.ACQUIRE_VM == 0x40084B15
    assert kfd_ioctl.ALLOC_MEMORY_OF_GPU == 0xC0284B16 and kfd_ioctl.MAP_MEMORY_TO_GPU == 0xC0184B18
    assert kfd_ioctl.FREE_MEMORY_OF_GPU == 0x40084B17 and kfd_ioctl.UNMAP_MEMORY_FROM_GPU == 0xC0184B19
    assert kfd_ioctl.CREATE_QUEUE == 0xC0604B02 and kfd_ioctl.DESTROY_QUEUE == 0xC0084B03
    assert kfd_ioctl.CREATE_EVENT == 0xC0204B08 and kfd_ioctl.WAIT_EVENTS == 0xC0184B0C
    assert ctypes.sizeof(kfd_ioctl.EventData) == 48
    assert kfd_ioctl.CreateQueueArgs.doorbell_offset.offset == 24 and kfd_ioctl.CreateQueueArgs.queue_id.offset == 52
    assert kfd_ioctl.CreateQueueArgs.ctx_save_restore_address.offset == 72


def test_vendor_packet_jumps_to_an_indirect_buffer() -> None:
    words = amdcmd.aql_pm4_ib(0x12_3456_7800, 9)
    assert len(words) == 16 and words[0] & 0xFF == amdcmd.AQL_VENDOR_SPECIFIC and words[0] >> 16 == 1
    assert words[1] == 0xC0023F00 and words[2:4] == [0x34567800, 0x12] and words[4] == 9 | (1 << 23)
    assert words[5] == 0xA
    release = _ints(amdcmd.pm4_release(0x1000, 0))
    staged = _ints(amdcmd.aql_pm4(list(release)))  # the value 0 is a zero word inside the packet
    assert amdcmd.staged_pm4_words(staged) == release


def test_release_mem_with_an_interrupt_carries_the_event_id() -> None:
    words = amdcmd.pm4_release(0x2000, 7, interrupt_context=5)
    assert (words[2] >> 24) & 7 == 3 and words[2] >> 29 == 2 and words[7] == 5


@needs_clang
@pytest.mark.parametrize("arch", ["gfx1100", "gfx90a"])
def test_loader_finds_the_descriptor_llvm_readelf_describes(arch: str) -> None:
    case = next(case for case in CASES if case.name == "reduce")
    _inputs, _ordered, items = case_kernels(case, numpy.random.default_rng(0))
    program = lower_to_program(items[0].ast, HIPRenderer(arch))
    elf = AMDCompiler(arch).compile(program.src)
    loaded = load_code_object(elf, program.function_name)
    _target, (note,) = code_object_notes(elf)
    descriptor = loaded.descriptor
    assert (descriptor.kernarg_size, descriptor.group_segment_fixed_size, descriptor.wave_size) == \
        (note.kernarg_size, note.lds_size, note.wave_size)
    tool = readelf()
    assert tool is not None
    with tempfile.NamedTemporaryFile(suffix=".hsaco") as file:
        file.write(elf)
        file.flush()
        symbols = subprocess.run([tool, "-s", "--wide", file.name], capture_output=True, text=True, check=True).stdout
    values = {line.split()[-1]: int(line.split()[1], 16) for line in symbols.splitlines()
              if line.strip() and line.split()[0].rstrip(":").isdigit()}
    assert loaded.descriptor_offset == values[f"{program.function_name}.kd"]
    assert loaded.descriptor_offset + descriptor.kernel_code_entry_byte_offset == values[program.function_name]
    with pytest.raises(CodeObjectError, match=r"no kernel descriptor other\.kd .*\.kd"):
        load_code_object(elf, "other")


def test_driver_calls_and_memory_on_the_mock() -> None:
    files = MockKFD("gfx1100")
    driver = KFDDriver(files)
    assert driver.version == (1, 14) and driver.gfx_target_version == 110000
    assert files.calls["ACQUIRE_VM"] == 1 and files.calls["CREATE_EVENT"] == 1
    host = driver.allocate(100, "host-visible", kfd_ioctl.ALLOC_GTT)
    assert host.size == 4096 and host.host is not None
    driver.view(host.address + 96, 4)[:] = b"abcd"
    assert bytes(files.gpu.view(host.address + 96, 4)) == b"abcd"  # the host mapping is the GPU's memory
    vram = driver.allocate(8192, "device-only", kfd_ioctl.ALLOC_VRAM)
    assert vram.host is None
    with pytest.raises(MemoryError, match="not in host-visible"):
        driver.view(vram.address, 4)
    driver.free(vram)
    assert files.calls["UNMAP_MEMORY_FROM_GPU"] == 1 and files.calls["FREE_MEMORY_OF_GPU"] == 1
    with pytest.raises(KFDError, match="AMDKFD_IOC_FREE_MEMORY_OF_GPU failed"):
        driver.call(driver.kfd, kfd_ioctl.FREE_MEMORY_OF_GPU, kfd_ioctl.FreeMemoryArgs(handle=vram.handle))
    with pytest.raises(KFDError, match="there is no GPU 1"):
        KFDDriver(MockKFD(), 1)


def test_queue_creation_is_checked_like_the_driver() -> None:
    files = MockKFD()
    driver = KFDDriver(files)
    ring = driver.allocate(4096, "ring")
    bad = kfd_ioctl.CreateQueueArgs(ring_base_address=ring.address, ring_size=4096, gpu_id=driver.gpu_id,
                                    queue_type=kfd_ioctl.QUEUE_TYPE_COMPUTE_AQL,
                                    read_pointer_address=ring.address, write_pointer_address=ring.address + 8)
    with pytest.raises(KFDError, match="EOP buffer"):  # an AQL queue without its end-of-pipe buffer
        driver.call(driver.kfd, kfd_ioctl.CREATE_QUEUE, bad)
    queue = driver.create_queue(kfd_ioctl.QUEUE_TYPE_SDMA, 4096)
    assert queue.queue_id == 1 and queue.doorbell_offset == 8
    driver.destroy_queue(queue)
    assert files.gpu.queues == []


def _device(arch: str = "gfx1100") -> AMDQueueDevice:
    renderer = HIPRenderer(arch, embed_program=True)
    return AMDQueueDevice("AMD", renderer, MockCompiler(arch), MockKFD(arch), 0, "test", parse_target(arch).wave_size)


def _renderer(device: AMDQueueDevice) -> HIPRenderer:
    renderer = device.renderer
    assert isinstance(renderer, HIPRenderer)
    return renderer


def _upload(device: AMDQueueDevice, array: numpy.ndarray) -> GPUBuffer:
    allocator = device.allocator
    assert isinstance(allocator, AMDAllocator)
    buffer: GPUBuffer = allocator.alloc(array.nbytes)
    allocator._copyin(buffer, memoryview(numpy.ascontiguousarray(array).tobytes()))
    return buffer


def _download(device: AMDQueueDevice, buffer: GPUBuffer, output: numpy.ndarray) -> None:
    allocator = device.allocator
    assert isinstance(allocator, AMDAllocator)
    staging = bytearray(output.nbytes)
    allocator._copyout(memoryview(staging), buffer)
    output[:] = numpy.frombuffer(staging, output.dtype)


def _run_case(device: AMDQueueDevice, arch: str, case: Case) -> tuple[AMDProgram, numpy.ndarray, numpy.ndarray]:
    inputs, ordered, items = case_kernels(case, numpy.random.default_rng(2))
    assert len(items) == 1
    spec = lower_to_program(items[0].ast, _renderer(device))
    program = AMDProgram(device, spec.function_name, device.compiler.compile(spec.src))
    pointers = sorted((uop for uop in spec.uops or [] if uop.op is Ops.DEFINE_GLOBAL), key=lambda uop: uop.arg)
    types = [pointer.dtype for pointer in pointers if isinstance(pointer.dtype, PtrDType)]
    numpy_types = [to_numpy_dtype(kind.base.scalar) for kind in types]
    output = numpy.zeros(types[0].size, numpy_types[0])
    buffers = [_upload(device, output)] + [_upload(device, array.reshape(-1).astype(kind))
                                           for array, kind in zip(ordered, numpy_types[1:], strict=True)]
    program(*buffers, global_size=spec.global_size, local_size=spec.local_size, wait=True)
    _download(device, buffers[0], output)
    return program, output, case.reference(*inputs).reshape(-1)


@needs_clang
@pytest.mark.parametrize("arch", ["gfx1100", "gfx90a"])
@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_real_code_objects_dispatch_through_the_kfd_queues(case: Case, arch: str) -> None:
    device = _device(arch)
    program, result, expected = _run_case(device, arch, case)
    numpy.testing.assert_allclose(result.astype(numpy.float64), expected, rtol=case.tolerance, atol=case.tolerance)
    # the descriptor the GPU read is the one in clang's code object, as llvm-readelf describes it
    _uops, elf = unpack_mock_binary(program.lib)
    _target, (note,) = code_object_notes(elf)
    in_memory = device.driver.view(program.descriptor_address, 64)
    assert struct.unpack_from("<III", in_memory, 0) == (note.lds_size, 0, note.kernarg_size)
    assert bool(in_memory[57] & 0x04) == (note.wave_size == 32)  # kernel_code_properties bit 10
    # the dispatch packet in the AQL ring names that descriptor
    ring = device.aql.ring.host
    assert ring is not None
    packets = [ring[index:index + 64] for index in range(0, device.aql.write_pointer * 64, 64)]
    dispatches = [packet for packet in packets if struct.unpack_from("<Q", packet, 32)[0] == program.descriptor_address]
    assert len(dispatches) == 1 and struct.unpack_from("<I", dispatches[0], 28)[0] == note.lds_size
    assert device.gpu.launches == 1 and device.gpu.indirect_buffers > 0


@needs_clang
def test_symbolic_kernel_takes_its_variable_from_the_kernarg_block() -> None:
    device = _device("gfx1100")
    data, item, expected = symbolic_kernel(11)
    spec = lower_to_program(item.ast, _renderer(device))
    program = AMDProgram(device, spec.function_name, device.compiler.compile(spec.src))
    assert program.descriptor.kernarg_size == 8 * 2 + 4
    output = numpy.zeros(expected.size, numpy.float32)
    buffers = [_upload(device, output), _upload(device, data.reshape(-1))]
    sizes = [int(size) if isinstance(size, int) else size.substitute({}) for size in spec.global_size]
    assert all(isinstance(size, int) for size in sizes)
    program(*buffers, global_size=sizes, local_size=spec.local_size, vals=(11,), wait=True)
    _download(device, buffers[0], output)
    numpy.testing.assert_allclose(output, expected, rtol=1e-5)


@needs_clang
def test_a_descriptor_that_disagrees_with_the_kernel_is_refused() -> None:
    device = _device("gfx1100")
    _inputs, _ordered, items = case_kernels(next(case for case in CASES if case.name == "elementwise"),
                                            numpy.random.default_rng(0))
    spec = lower_to_program(items[0].ast, _renderer(device))
    program = AMDProgram(device, spec.function_name, device.compiler.compile(spec.src))
    struct.pack_into("<I", device.driver.view(program.descriptor_address, 64), 8, 40)  # kernarg_size in GPU memory
    buffers = [_upload(device, numpy.zeros(240, numpy.float32)) for _ in range(2)]
    with pytest.raises(ValueError, match="kernarg segment is 40 bytes, the kernel reads 16"):
        program(*buffers, global_size=spec.global_size, local_size=spec.local_size, wait=True)


@needs_clang
def test_a_wave64_code_object_is_refused_by_a_wave32_gpu() -> None:
    renderer = HIPRenderer("gfx90a", embed_program=True)
    device = AMDQueueDevice("AMD", renderer, MockCompiler("gfx90a"), MockKFD("gfx1100"), 0, "test", 32)
    with pytest.raises(ValueError, match="built for wave64, this GPU runs wave32"):
        _run_case(device, "gfx90a", next(case for case in CASES if case.name == "elementwise"))


def test_a_pm4_wait_stalls_the_aql_queue_until_the_sdma_queue_signals() -> None:
    device = _device()
    gate, done = device.new_signal(0, "gate"), device.new_signal(0, "done")
    device.compute_queue().wait(gate, 3).signal(done, 11).submit(device)
    assert done.value == 0 and device.aql.read_pointer == 0  # stalled on the wait
    header = struct.unpack_from("<I", device.aql.ring.host or b"", 0)[0]
    assert header & 0xFF == amdcmd.AQL_VENDOR_SPECIFIC and header >> 16 == amdcmd.AMD_AQL_FORMAT_PM4_IB
    device.copy_queue().signal(gate, 3).submit(device)
    assert gate.value == 3 and gate.timestamp > 0
    done.wait(11, timeout_s=5)
    assert done.value == 11 and device.aql.read_pointer == device.aql.write_pointer
    assert device.gpu.interrupts >= 2  # the SDMA trap and the compute queue's release raised the event


def test_a_wait_on_a_value_the_host_sets_sleeps_in_wait_events() -> None:
    device = _device()
    gate = device.new_signal(0, "gate")
    device.compute_queue().wait(gate, 1).signal(device.timeline_signal, device.next_timeline_value()).submit(device)
    gate.value = 1  # the GPU sees it on its own; the MOCK one when the host sleeps in WAIT_EVENTS
    device.synchronize()
    assert device.driver.files.calls["WAIT_EVENTS"] >= 1  # type: ignore[attr-defined]


def test_a_wait_nothing_satisfies_times_out_and_breaks_the_device() -> None:
    device = _device()
    gate = device.new_signal(0, "gate")
    device.compute_queue().wait(gate, 1).signal(device.timeline_signal, device.next_timeline_value()).submit(device)
    with pytest.raises(DeviceTimeoutError, match="did not reach"):
        device.timeline_signal.wait(device.timeline_value - 1, timeout_s=0.05)
    assert device.broken is not None


def test_barrier_and_and_completion_signals_through_the_ring() -> None:
    device = _device()
    dependency, completion = device.new_signal(1, "dependency"), device.new_signal(1, "completion")
    assert dependency.address is not None and completion.address is not None
    device.submit_aql(_ints(amdcmd.aql_barrier_and([dependency.address], completion.address)))
    assert device.gpu.barriers == 0 and completion.value == 1
    device.copy_queue().signal(dependency, 0).submit(device)
    device.driver.wait_event(1)
    assert device.gpu.barriers == 1 and completion.value == 0


def test_the_ring_wraps_and_its_slots_are_reused() -> None:
    device = _device()
    signal = device.new_signal(0, "counter")
    for value in range(1, device.slots + 40, 7):  # more packets than the ring has slots
        queue = device.compute_queue()
        for step in range(7):
            queue.signal(signal, value + step)
        queue.submit(device)
    assert signal.value == value + 6 and device.aql.write_pointer > device.slots


def test_queue_classes_are_the_hcq_answer() -> None:
    assert QUEUES.compute_queue.__name__ == "AMDComputeQueue" and QUEUES.signal.__name__ == "AMDSignal"


def test_linux_files_read_the_topology_and_map_memory_at_a_reserved_address(tmp_path: Path) -> None:
    # the real system-call layer, on a topology directory and an ordinary file instead of the GPU's
    for node, gpu_id, properties in (("0", "0", "cpu_cores_count 8\n"),
                                     ("1", "4660", "gfx_target_version 110000\ndrm_render_minor 129\n")):
        (tmp_path / node).mkdir()
        (tmp_path / node / "gpu_id").write_text(gpu_id + "\n")
        (tmp_path / node / "properties").write_text(properties)
    files = LinuxFiles(str(tmp_path))
    assert files.topology() == [{"gfx_target_version": 110000, "drm_render_minor": 129, "gpu_id": 4660}]
    backing = tmp_path / "backing"
    backing.write_bytes(bytes(8192))
    fd = files.open(str(backing))
    try:
        address = files.reserve(8192)
        view = files.map_memory(fd, 4096, address, 4096)
        view[:5] = b"hello"
        assert ctypes.string_at(address, 5) == b"hello"  # the host address is the mapping's
        files.release(address, 8192)
    finally:
        files.close(fd)
    assert backing.read_bytes()[4096:4101] == b"hello"  # a shared mapping of the file at that offset
