"""AMD as a queue (HCQ) device on the core's machinery, reached through the KFD interface (tiny_amd.kfd): the core
builds and submits the queues, these classes encode them as AQL packets (compute: kernel dispatches on a code object's
kernel descriptor, and AMD vendor packets jumping to PM4 for waits and signals) and SDMA packets (copy), write them to
the rings KFD made and ring the doorbells.

The same classes serve DEV=KFD+AMD (the amdkfd driver; not run on hardware here) and DEV=MOCK+AMD (tiny_amd.kfd_mock,
the simulated driver and GPU). Launch sizes given as Variables (TinyJit graphs of symbolic kernels) are symbolic words
of the dispatch packet, resolved by the core at submit.
"""
from __future__ import annotations

import struct
import time
import weakref
from typing import Any

from tiny_amd import amdcmd, kfd_ioctl
from tiny_amd.code_object import KernelDescriptor, LoadedImage, load_code_object, synthetic_image
from tiny_amd.kfd import KernelFiles, KFDDriver, KFDError, KFDMemory, KFDQueue
from tinycore.device.allocator import BufferSpec, LRUAllocator
from tinycore.hcq import HCQArguments, HCQCompiled, HCQSignal, HWQueue
from tinycore.hcq.device import HCQProgram
from tinycore.hcq.mock import MOCK_BINARY_MAGIC, shared_bytes, unpack_mock_binary
from tinycore.hcq.signal import DeviceTimeoutError
from tinycore.helpers import HCQ_TIMEOUT_MS
from tinycore.plugins import HCQQueues
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp

KERNARG_ALIGNMENT = 64
AQL_RING_BYTES = 1 << 16
SDMA_RING_BYTES = 1 << 16
SIGNAL_POOL_BYTES = 1 << 16
HOST_MEMORY = kfd_ioctl.ALLOC_GTT | kfd_ioctl.ALLOC_UNCACHED
"""Memory both sides read and write often (rings, signals, kernarg blocks, staging): system memory, uncached."""


class SignalPool:
    """16-byte signal slots carved from host-visible GPU memory, reused once their signal is gone."""

    def __init__(self, driver: KFDDriver):
        self.driver = driver
        self.free_slots: list[int] = []
        self.chunks: list[KFDMemory] = []

    def take(self) -> int:
        """The GPU address of a zeroed 16-byte slot."""
        if not self.free_slots:
            chunk = self.driver.allocate(SIGNAL_POOL_BYTES, "signals", HOST_MEMORY)
            self.chunks.append(chunk)
            self.free_slots = list(range(chunk.address + SIGNAL_POOL_BYTES - 16, chunk.address - 1, -16))
        address = self.free_slots.pop()
        self.driver.view(address, 16)[:] = bytes(16)
        return address

    def give_back(self, address: int) -> None:
        """Make a slot available again."""
        self.free_slots.append(address)


class AMDSignal(HCQSignal):
    """A signal in GPU memory: the 64-bit value, then the 64-bit GPU clock a timestamp writes (100 MHz ticks). A
    host wait sleeps in WAIT_EVENTS on the device's event, which the queues raise after each signal write."""

    timestamp_divider = amdcmd.CLOCK_TICKS_PER_MICROSECOND

    def __init__(self, device: Any = None, value: int = 0, name: str = "signal"):
        self.owner: AMDQueueDevice = device
        address = device.signal_pool.take()
        weakref.finalize(self, device.signal_pool.give_back, address)
        super().__init__(device, value, device.driver.view(address, 16), address, name)

    def wait(self, value: int, timeout_s: float | None = None) -> None:
        """Return once the signal holds at least `value`, sleeping on the device's event in between; past the
        timeout the device is marked broken and DeviceTimeoutError raised (as HCQSignal.wait)."""
        limit = HCQ_TIMEOUT_MS.value / 1000 if timeout_s is None else timeout_s
        deadline = time.perf_counter() + limit
        while self._read_value() < value:
            if time.perf_counter() > deadline:
                self._timed_out(value, limit)
            if self.owner.broken is not None:
                raise RuntimeError(self.owner.broken)
            self.owner.driver.wait_event(1)


class AMDArguments(HCQArguments):
    """A kernarg block: an 8-byte address per buffer, then a 4-byte int per variable (tiny_amd.inspect)."""

    def set_buffer(self, index: int, handle: Any) -> None:
        """The GPU address of buffer argument `index`."""
        struct.pack_into("<Q", self.memory, self.offset + 8 * index, getattr(handle, "address", handle))

    def set_value(self, index: int, value: int) -> None:
        """The value of integer argument `index`."""
        struct.pack_into("<i", self.memory, self.offset + 8 * self.buffer_count + 4 * index, value)


def _address(signal: HCQSignal) -> int:
    if signal.address is None:
        raise ValueError(f"signal {signal.name!r} has no GPU address: make it with the AMD device's new_signal")
    return signal.address


def _event_of(signal: HCQSignal) -> tuple[int, int] | None:
    """(mailbox address, event id) of the device that waits on `signal`, None for a signal of no AMD device."""
    owner = getattr(signal, "owner", None)
    return None if owner is None else (owner.driver.event_mailbox, owner.driver.event_id)


class AMDComputeQueue(HWQueue):
    """AQL packets: kernel dispatches, and PM4 WAIT_REG_MEM64 / RELEASE_MEM in AMD vendor packets."""

    def _encode_wait(self, signal: HCQSignal, value: int | UOp) -> None:
        self.emit(*amdcmd.aql_pm4(amdcmd.pm4_wait_geq(_address(signal), value)))

    def _encode_signal(self, signal: HCQSignal, value: int | UOp) -> None:
        address = _address(signal)
        self.emit(*amdcmd.aql_pm4(amdcmd.pm4_release(address + 8, 0, clock=True)))
        self.emit(*amdcmd.aql_pm4(amdcmd.pm4_release(address, value)))
        event = _event_of(signal)
        if event is not None:  # wake a host sleeping in WAIT_EVENTS
            mailbox, event_id = event
            self.emit(*amdcmd.aql_pm4(amdcmd.pm4_release(mailbox, event_id, interrupt_context=event_id)))

    def _encode_timestamp(self, signal: HCQSignal) -> None:
        self.emit(*amdcmd.aql_pm4(amdcmd.pm4_release(_address(signal) + 8, 0, clock=True)))

    def _encode_exec(self, program: Any, arguments: HCQArguments, global_size: tuple[int | UOp, ...],
                     local_size: tuple[int | UOp, ...] | None) -> None:
        if arguments.address is None:
            raise ValueError("an AMD kernarg block needs a GPU address")
        groups = list(global_size) + [1] * (3 - len(global_size))
        local = list(local_size or (1, 1, 1)) + [1] * (3 - len(local_size or (1, 1, 1)))
        words = amdcmd.aql_dispatch(program.descriptor_address, arguments.address, groups, local,
                                    program.descriptor.group_segment_fixed_size)
        words[6] = program.descriptor.private_segment_fixed_size
        self.emit(*words)

    def _submit(self, device: Any) -> None:
        device.submit_aql([int(word) & 0xFFFFFFFF for word in self.words])


class AMDCopyQueue(HWQueue):
    """SDMA packets: COPY_LINEAR, and signals as FENCEs of the value's two halves with a TIMESTAMP and a TRAP."""

    def _encode_wait(self, signal: HCQSignal, value: int | UOp) -> None:
        # POLL_REGMEM compares 32 bits: the low word of the value (timeline values stay below 2**32)
        self.emit(*amdcmd.sdma_poll_geq(_address(signal), amdcmd.split(value)[0]))

    def _encode_signal(self, signal: HCQSignal, value: int | UOp) -> None:
        address = _address(signal)
        low, high = amdcmd.split(value)
        self.emit(*amdcmd.sdma_timestamp(address + 8))
        self.emit(*amdcmd.sdma_fence(address + 4, high))
        self.emit(*amdcmd.sdma_fence(address, low))
        event = _event_of(signal)
        if event is not None:
            self.emit(*amdcmd.sdma_trap(event[1]))

    def _encode_timestamp(self, signal: HCQSignal) -> None:
        self.emit(*amdcmd.sdma_timestamp(_address(signal) + 8))

    def _encode_copy(self, destination: Any, source: Any, nbytes: int | UOp) -> None:
        self.emit(*amdcmd.sdma_copy(getattr(destination, "address", destination), getattr(source, "address", source),
                                    nbytes))

    def _submit(self, device: Any) -> None:
        device.submit_sdma([int(word) & 0xFFFFFFFF for word in self.words])


QUEUES = HCQQueues(AMDComputeQueue, AMDCopyQueue, AMDSignal)


class AMDProgram(HCQProgram):
    """A kernel: its code object loaded into executable GPU memory; dispatches point at its kernel descriptor.

    `lib` is the code object clang and ld.lld made, or (DEV=MOCK+AMD) the MOCK compiler's pack of the linear
    program and that code object; without a clang for the target the MOCK image holds a descriptor only."""

    def __init__(self, device: AMDQueueDevice, name: str, lib: bytes):
        super().__init__(device, name, lib)
        uops, code_object = unpack_mock_binary(lib) if lib.startswith(MOCK_BINARY_MAGIC) else (None, lib)
        if code_object:
            loaded = load_code_object(code_object, name)
        elif uops is not None:
            buffers = sum(1 for uop in uops if uop.op is Ops.DEFINE_GLOBAL)
            variables = len({uop.arg[0] for uop in uops if uop.op is Ops.DEFINE_VAR})
            wave32 = 1 << 10 if device.wave_size == 32 else 0
            loaded = synthetic_image(KernelDescriptor(shared_bytes(uops), 0, 8 * buffers + 4 * variables,
                                                      64, kernel_code_properties=wave32))
        else:
            raise ValueError(f"kernel {name}: empty code object")
        self.descriptor = loaded.descriptor
        if self.descriptor.private_segment_fixed_size:
            raise ValueError(f"kernel {name} needs {self.descriptor.private_segment_fixed_size} bytes of scratch per "
                             "work-item, which the KFD queues do not set up: simplify the kernel (fewer registers "
                             "spilled, no private arrays)")
        self.image = device.load_image(loaded, name)
        self.descriptor_address = self.image.address + loaded.descriptor_offset
        device.driver.files.code_loaded(self.descriptor_address + self.descriptor.kernel_code_entry_byte_offset, lib)
        self.buffer_count = sum(1 for uop in uops if uop.op is Ops.DEFINE_GLOBAL) if uops is not None else -1
        self.variable_count = len({uop.arg[0] for uop in uops if uop.op is Ops.DEFINE_VAR}) if uops else 0

    def new_arguments(self, buffers: Any, values: Any, persistent: bool = False) -> HCQArguments:
        """A kernarg block: 8 bytes a buffer address, then 4 a value (64-byte aligned in the kernarg ring)."""
        size = max(8 * len(buffers) + 4 * len(values), 8)
        if persistent:
            memory, address = self.device.kernarg_memory(size)
            offset = 0
        else:
            offset, address = self.device.kernargs.allocate(size)
            memory = self.device.kernargs.memory
        arguments = AMDArguments(memory, offset, address, len(buffers))
        for index, buffer in enumerate(buffers):
            arguments.set_buffer(index, buffer)
        for index, value in enumerate(values):
            arguments.set_value(index, int(value))
        return arguments

    def __call__(self, *buffers: Any, global_size: Any = (1, 1, 1), local_size: Any = None, vals: Any = (),
                 wait: bool = False) -> float | None:
        """Check the argument count against the kernarg segment, then the core's launch."""
        expected = self.descriptor.kernarg_size
        if max(8 * len(buffers) + 4 * len(vals), 0) != expected:
            raise TypeError(f"kernel {self.name} reads {expected} bytes of kernel arguments, {len(buffers)} buffers "
                            f"and {len(vals)} values make {8 * len(buffers) + 4 * len(vals)}")
        if any(int(size) == 0 for size in global_size):
            return 0.0 if wait else None
        return super().__call__(*buffers, global_size=global_size, local_size=local_size, vals=vals, wait=wait)


class GPUBuffer:
    """An allocation in GPU memory (or a view into one): its GPU address and size."""

    def __init__(self, address: int, size: int, memory: KFDMemory | None, base: GPUBuffer | None = None):
        self.address, self.size, self.memory, self.base = address, size, memory, base


class AMDAllocator(LRUAllocator):
    """VRAM buffers; host copies go through host-visible staging memory and the SDMA queue, ordered after the kernels
    already queued."""

    def __init__(self, device_name: str, device: AMDQueueDevice):
        super().__init__(device_name)
        self.owner = device

    def _alloc(self, size: int, options: BufferSpec | None) -> GPUBuffer:
        memory = self.owner.driver.allocate(size, f"a buffer of {size} bytes", kfd_ioctl.ALLOC_VRAM)
        return GPUBuffer(memory.address, size, memory)

    def _free(self, opaque: GPUBuffer, size: int, options: BufferSpec | None) -> None:
        if opaque.memory is not None:
            self.owner.driver.free(opaque.memory)

    def _copy(self, destination: int, source: int, nbytes: int) -> None:
        device = self.owner
        queue = AMDCopyQueue()
        queue.wait(device.timeline_signal, device.timeline_value - 1).copy(destination, source, nbytes)
        queue.signal(device.timeline_signal, device.next_timeline_value())
        queue._submit(device)
        device.host_copies += 1
        device.synchronize()

    def _copyin(self, dest: GPUBuffer, src: memoryview) -> None:
        staging = self.owner.driver.allocate(src.nbytes, "staging", HOST_MEMORY)
        assert staging.host is not None
        staging.host[:src.nbytes] = src.cast("B")
        self._copy(dest.address, staging.address, src.nbytes)
        self.owner.driver.free(staging)

    def _copyout(self, dest: memoryview, src: GPUBuffer) -> None:
        staging = self.owner.driver.allocate(dest.nbytes, "staging", HOST_MEMORY)
        assert staging.host is not None
        self._copy(staging.address, src.address, dest.nbytes)
        dest.cast("B")[:] = staging.host[:dest.nbytes]
        self.owner.driver.free(staging)

    def _offset(self, opaque: GPUBuffer, size: int, offset: int) -> GPUBuffer:
        return GPUBuffer(opaque.address + offset, size, None, opaque)


class AMDQueueDevice(HCQCompiled):
    """AMD on the core's queue machinery: one AQL compute queue and one SDMA queue made through KFD."""

    def __init__(self, device: str, renderer: Any, compiler: Any, files: KernelFiles, index: int, description: str,
                 wave_size: int):
        self.driver = KFDDriver(files, index)
        self.wave_size = wave_size
        self.signal_pool = SignalPool(self.driver)
        self.aql = self.driver.create_queue(kfd_ioctl.QUEUE_TYPE_COMPUTE_AQL, AQL_RING_BYTES)
        self.slots = AQL_RING_BYTES // amdcmd.AQL_PACKET_BYTES
        # one indirect buffer per AQL slot: a slot is rewritten only after the GPU is done with its packet
        self.indirect_buffers = self.driver.allocate(self.slots * 4 * amdcmd.AQL_PM4_WORDS, "PM4 indirect buffers",
                                                     HOST_MEMORY)
        self.sdma = self.driver.create_queue(kfd_ioctl.QUEUE_TYPE_SDMA, SDMA_RING_BYTES)
        super().__init__(device, AMDAllocator(device, self), renderer, compiler, AMDProgram, QUEUES)
        self.kernargs.alignment = KERNARG_ALIGNMENT
        self.interface_description = description
        self.host_copies = 0

    @property
    def gpu(self) -> Any:
        """The simulated GPU under DEV=MOCK+AMD (its counters show what ran); None on a real one."""
        return getattr(self.driver.files, "gpu", None)

    def kernarg_memory(self, nbytes: int) -> tuple[memoryview, int | None]:
        """Kernarg memory: host-visible GPU memory."""
        memory = self.driver.allocate(nbytes, "kernel arguments", HOST_MEMORY)
        assert memory.host is not None
        return memory.host[:nbytes], memory.address

    def load_image(self, loaded: LoadedImage, name: str) -> KFDMemory:
        """`loaded` copied into executable GPU memory, relocated for its address."""
        memory = self.driver.allocate(len(loaded.image), f"code of {name}",
                                      kfd_ioctl.ALLOC_GTT | kfd_ioctl.ALLOC_EXECUTABLE)
        assert memory.host is not None
        memory.host[:len(loaded.image)] = loaded.relocated(memory.address)
        return memory

    def _wait_for_room(self, queue: KFDQueue, room: int, capacity: int, ring: Any) -> None:
        """Let the GPU drain `queue` until `room` units are free (`ring()` rings its doorbell with what is written)."""
        deadline = time.perf_counter() + HCQ_TIMEOUT_MS.value / 1000
        while capacity - (queue.write_pointer - queue.read_pointer) < room:
            ring()
            if time.perf_counter() > deadline:
                message = f"{self.device}: the queue ring stayed full for {HCQ_TIMEOUT_MS.value} ms"
                self.mark_broken(message)
                raise DeviceTimeoutError(message)
            self.driver.wait_event(1)

    def submit_aql(self, words: list[int]) -> None:
        """Write whole AQL packets to the compute ring (body first, header last; a staged PM4 packet becomes a jump
        to its slot's indirect buffer), then ring the doorbell."""
        if len(words) % amdcmd.AQL_PACKET_WORDS:
            raise ValueError(f"{len(words)} words are not whole AQL packets")
        queue, ring = self.aql, self.aql.ring
        assert ring.host is not None
        start = queue.write_pointer
        for offset in range(0, len(words), amdcmd.AQL_PACKET_WORDS):
            packet = words[offset:offset + amdcmd.AQL_PACKET_WORDS]
            self._wait_for_room(queue, 1, self.slots, lambda: self._ring_aql(start))
            index = queue.write_pointer
            slot = index % self.slots
            pm4 = amdcmd.staged_pm4_words(packet)
            if pm4 is not None:
                ib_address = self.indirect_buffers.address + slot * 4 * amdcmd.AQL_PM4_WORDS
                self.driver.view(ib_address, 4 * len(pm4))[:] = struct.pack(f"<{len(pm4)}I", *pm4)
                packet = amdcmd.aql_pm4_ib(ib_address, len(pm4))
            position = slot * amdcmd.AQL_PACKET_BYTES
            ring.host[position + 4:position + amdcmd.AQL_PACKET_BYTES] = struct.pack("<15I", *packet[1:])
            ring.host[position:position + 4] = struct.pack("<I", packet[0])
            queue.write_pointer = index + 1
        self._ring_aql(start)

    def _ring_aql(self, start: int) -> None:
        if self.aql.write_pointer > start:
            self.driver.ring_doorbell(self.aql, self.aql.write_pointer - 1)

    def submit_sdma(self, words: list[int]) -> None:
        """Write SDMA packets to the copy ring (wrapping at its end), then ring the doorbell with the byte pointer."""
        queue, ring = self.sdma, self.sdma.ring
        assert ring.host is not None
        data = struct.pack(f"<{len(words)}I", *words)
        if len(data) > ring.size:
            raise ValueError(f"{len(data)} bytes of SDMA packets exceed the {ring.size} byte copy ring")
        self._wait_for_room(queue, len(data), ring.size, lambda: None)
        write = queue.write_pointer
        for index in range(0, len(data), 4):
            position = (write + index) % ring.size
            ring.host[position:position + 4] = data[index:index + 4]
        queue.write_pointer = write + len(data)
        self.driver.ring_doorbell(queue, queue.write_pointer)


def open_queue_device(device: str, renderer: Any, compiler: Any, files: KernelFiles, index: int,
                      description: str, wave_size: int) -> AMDQueueDevice:
    """An AMDQueueDevice, with a KFD failure turned into a RuntimeError that says what to check."""
    try:
        return AMDQueueDevice(device, renderer, compiler, files, index, description, wave_size)
    except KFDError as error:
        raise RuntimeError(f"{device}: the KFD interface could not open the GPU: {error}") from error
