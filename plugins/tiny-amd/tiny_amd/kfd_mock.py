"""The MOCK interface (DEV=MOCK+AMD): a simulated amdkfd kernel driver over a simulated GPU (tiny_amd.amd_mock).

MockKFD answers the system calls of tiny_amd.kfd.KernelFiles the way the amdkfd driver does, reading and writing the
kfd_ioctl.h argument structures: GET_VERSION, ACQUIRE_VM (of an opened render node), ALLOC_MEMORY_OF_GPU at a
reserved virtual address (with an mmap offset for the render node), MAP/UNMAP_MEMORY_TO/FROM_GPU, FREE, CREATE_QUEUE
(AQL compute or SDMA; the rings and pointers must lie in allocated memory and an AQL queue needs its EOP and context
save areas), DESTROY_QUEUE, CREATE_EVENT on an event page, SET_EVENT and WAIT_EVENTS. A write to the mapped doorbell
page runs the GPU; so does WAIT_EVENTS, which stands for the host sleeping while the GPU works. Interrupts the GPU
raises (RELEASE_MEM with an interrupt, SDMA TRAP) set the event whose id they carry.

The one thing the MOCK cannot do is run AMDGPU machine code: `code_loaded` registers, for the code entry address of
each loaded kernel, the linear program that the MOCK compiler packed next to the real code object, and the GPU runs
that program in the core's interpreter when a dispatch's kernel descriptor leads there.
"""
from __future__ import annotations

import ctypes
import time
from collections import Counter
from dataclasses import dataclass

from tiny_amd import amdcmd, kfd_ioctl
from tiny_amd.amd_mock import MockAMDGPU, MockQueue
from tiny_amd.matrix_core import collectives
from tiny_amd.target import parse_target
from tinycore.codegen.wave_interpreter import WaveProgram
from tinycore.hcq.mock import unpack_mock_binary

MOCK_GPU_ID = 0x4A1D
MOCK_RENDER_MINOR = 128
DOORBELL_PAGE_OFFSET = 0x8000_0000_0000
MOCK_VERSION = (1, 14)


def target_version(arch: str) -> int:
    """KFD's gfx_target_version of a gfx name ('gfx1100' -> 110000, 'gfx90a' -> 90010)."""
    digits = arch[3:]
    return int(digits[:-2]) * 10000 + int(digits[-2], 16) * 100 + int(digits[-1], 16)


@dataclass
class MockAllocation:
    """A buffer object: where it is mapped, its size and flags, whether it is mapped to the GPU."""

    address: int
    size: int
    flags: int
    mapped: bool = False


@dataclass
class MockEvent:
    """A KFD signal event: its slot on the event page, auto-reset, and whether it is set."""

    slot: int
    auto_reset: bool
    signaled: bool = False


class MockDoorbells:
    """The doorbell page: a 64-bit write at a queue's doorbell offset runs the GPU."""

    def __init__(self, driver: MockKFD):
        self.driver = driver

    def write64(self, offset: int, value: int) -> None:
        """Ring the doorbell at `offset` with `value`."""
        self.driver.doorbell(offset, value)


class MockKFD:
    """A simulated amdkfd driver and GPU; the KernelFiles that DEV=MOCK+AMD's KFD interface calls."""

    def __init__(self, arch: str = "gfx1100"):
        target = parse_target(arch)
        self.arch = arch
        self.gpu = MockAMDGPU(f"MOCK AMD ({arch})", target.wave_size)
        self.gpu.interrupt = self._interrupt
        self.node = {"gpu_id": MOCK_GPU_ID, "gfx_target_version": target_version(arch),
                     "drm_render_minor": MOCK_RENDER_MINOR, "simd_count": 8, "max_waves_per_simd": 16}
        self.paths: dict[int, str] = {}
        self.next_fd, self.next_handle, self.next_queue = 3, 1, 1
        self.vm_acquired = False
        self.reserved: dict[int, int] = {}
        self.allocations: dict[int, MockAllocation] = {}
        self.events: dict[int, MockEvent] = {}
        self.event_page: MockAllocation | None = None
        self.queues: dict[int, MockQueue] = {}
        self.doorbell_values: dict[int, int] = {}
        self.calls: Counter[str] = Counter()

    # ---- files ----

    def open(self, path: str) -> int:
        """A descriptor for /dev/kfd or this GPU's render node."""
        if path not in ("/dev/kfd", f"/dev/dri/renderD{MOCK_RENDER_MINOR}"):
            raise FileNotFoundError(f"the MOCK driver has no {path}")
        fd, self.next_fd = self.next_fd, self.next_fd + 1
        self.paths[fd] = path
        return fd

    def close(self, fd: int) -> None:
        """Forget `fd`."""
        self.paths.pop(fd)

    def topology(self) -> list[dict[str, int]]:
        """One GPU node."""
        return [dict(self.node)]

    def reserve(self, size: int) -> int:
        """An address range in the GPU's address space (zeroed memory behind it)."""
        address = self.gpu.allocate(size, "reserved range")
        self.reserved[address] = size
        return address

    def release(self, address: int, size: int) -> None:
        """Give back a reserved range."""
        if self.reserved.pop(address, None) != size:
            raise ValueError(f"release of {size} bytes at {address:#x}, which was not reserved so")
        self.gpu.free(address)

    def map_memory(self, fd: int, offset: int, address: int, size: int) -> memoryview:
        """The host's view of the buffer object whose mmap offset is `offset` (through the render node)."""
        if self.paths.get(fd, "").startswith("/dev/kfd") or fd not in self.paths:
            raise OSError(22, "buffer objects are mapped through the render node")
        allocation = self.allocations.get(offset >> 12)
        if allocation is None or allocation.address != address or allocation.size != size:
            raise OSError(22, f"mmap offset {offset:#x} names no buffer object of {size} bytes at {address:#x}")
        if allocation.flags & kfd_ioctl.ALLOC_VRAM and not allocation.flags & kfd_ioctl.ALLOC_PUBLIC:
            raise OSError(13, "VRAM that is not PUBLIC cannot be mapped by the host")
        return self.gpu.view(address, size)

    def map_doorbells(self, fd: int, offset: int, size: int) -> MockDoorbells:
        """The doorbell page."""
        if self.paths.get(fd) != "/dev/kfd" or offset != DOORBELL_PAGE_OFFSET or size != kfd_ioctl.DOORBELL_PAGE_BYTES:
            raise OSError(22, f"no doorbell page at offset {offset:#x} of {size} bytes")
        return MockDoorbells(self)

    def code_loaded(self, entry_address: int, code_object: bytes) -> None:
        """Register the linear program that stands in for the machine code at `entry_address`."""
        uops, _binary = unpack_mock_binary(code_object)
        # the matrix units: wave-collective ops in the interpreter
        self.gpu.code[entry_address] = WaveProgram(uops, collectives(self.arch), self.gpu.wave_size)

    # ---- ioctls ----

    def ioctl(self, fd: int, request: int, arguments: ctypes.Structure) -> None:
        """Decode one KFD ioctl from the argument bytes and carry it out."""
        structure = kfd_ioctl.ARGUMENT_TYPES.get(request)
        if self.paths.get(fd) != "/dev/kfd" or structure is None:
            raise OSError(25, f"ioctl {request:#x} is not a KFD request on /dev/kfd")
        if (request >> 16) & 0x3FFF != ctypes.sizeof(arguments):
            raise OSError(22, f"ioctl {request:#x} says {(request >> 16) & 0x3FFF} bytes, the arguments are "
                              f"{ctypes.sizeof(arguments)}")
        name = kfd_ioctl.REQUEST_NAMES[request]
        self.calls[name] += 1
        if name != "GET_VERSION" and name != "ACQUIRE_VM" and not self.vm_acquired:
            raise OSError(22, f"{name} before ACQUIRE_VM")
        args = structure.from_buffer(arguments)  # the same bytes, read as the request's structure
        getattr(self, f"_{name.lower()}")(args)

    def _check_gpu(self, gpu_id: int) -> None:
        if gpu_id != MOCK_GPU_ID:
            raise OSError(22, f"gpu_id {gpu_id:#x} is not this GPU's ({MOCK_GPU_ID:#x})")

    def _get_version(self, args: kfd_ioctl.GetVersionArgs) -> None:
        args.major_version, args.minor_version = MOCK_VERSION

    def _acquire_vm(self, args: kfd_ioctl.AcquireVMArgs) -> None:
        self._check_gpu(args.gpu_id)
        if not self.paths.get(args.drm_fd, "").startswith("/dev/dri/renderD"):
            raise OSError(9, "ACQUIRE_VM needs an open render node")
        self.vm_acquired = True

    def _alloc_memory_of_gpu(self, args: kfd_ioctl.AllocMemoryArgs) -> None:
        self._check_gpu(args.gpu_id)
        domains = args.flags & (kfd_ioctl.ALLOC_VRAM | kfd_ioctl.ALLOC_GTT | kfd_ioctl.ALLOC_DOORBELL |
                                kfd_ioctl.ALLOC_USERPTR)
        if bin(domains).count("1") != 1:
            raise OSError(22, f"flags {args.flags:#x} must name exactly one memory domain")
        if self.reserved.get(args.va_addr, -1) < args.size or args.size % 4096:
            raise OSError(22, f"{args.size} bytes at {args.va_addr:#x} is not a reserved, page-sized range")
        handle, self.next_handle = self.next_handle, self.next_handle + 1
        self.allocations[handle] = MockAllocation(args.va_addr, args.size, args.flags)
        args.handle, args.mmap_offset = handle, handle << 12

    def _devices(self, args: kfd_ioctl.MapMemoryArgs) -> MockAllocation:
        allocation = self.allocations.get(args.handle)
        if allocation is None:
            raise OSError(22, f"no buffer object {args.handle}")
        for gpu_id in (ctypes.c_uint32 * args.n_devices).from_address(args.device_ids_array_ptr):
            self._check_gpu(gpu_id)
        args.n_success = args.n_devices
        return allocation

    def _map_memory_to_gpu(self, args: kfd_ioctl.MapMemoryArgs) -> None:
        self._devices(args).mapped = True

    def _unmap_memory_from_gpu(self, args: kfd_ioctl.MapMemoryArgs) -> None:
        self._devices(args).mapped = False

    def _free_memory_of_gpu(self, args: kfd_ioctl.FreeMemoryArgs) -> None:
        if self.allocations.pop(args.handle, None) is None:
            raise OSError(22, f"no buffer object {args.handle}")

    def _mapped(self, address: int, size: int, what: str) -> None:
        """`size` bytes at `address` must lie in one buffer object mapped to the GPU."""
        for allocation in self.allocations.values():
            if allocation.mapped and allocation.address <= address and address + size <= \
                    allocation.address + allocation.size:
                return
        raise OSError(14, f"the {what} ({size} bytes at {address:#x}) is not in GPU-mapped memory")

    def _create_queue(self, args: kfd_ioctl.CreateQueueArgs) -> None:
        self._check_gpu(args.gpu_id)
        kinds = {kfd_ioctl.QUEUE_TYPE_COMPUTE_AQL: "aql", kfd_ioctl.QUEUE_TYPE_SDMA: "sdma"}
        if args.queue_type not in kinds:
            raise OSError(22, f"queue type {args.queue_type} is not simulated (AQL compute or SDMA)")
        if args.ring_size < 256 or args.ring_size & (args.ring_size - 1):
            raise OSError(22, f"ring size {args.ring_size} is not a power of two of at least 256 bytes")
        self._mapped(args.ring_base_address, args.ring_size, "ring")
        self._mapped(args.read_pointer_address, 8, "read pointer")
        self._mapped(args.write_pointer_address, 8, "write pointer")
        if args.queue_type == kfd_ioctl.QUEUE_TYPE_COMPUTE_AQL:
            self._mapped(args.eop_buffer_address, args.eop_buffer_size, "EOP buffer")
            self._mapped(args.ctx_save_restore_address, args.ctx_save_restore_size, "context save area")
            if not args.ctl_stack_size or args.ctl_stack_size > args.ctx_save_restore_size:
                raise OSError(22, "an AQL queue needs a control stack inside its context save area")
        queue_id, self.next_queue = self.next_queue, self.next_queue + 1
        self.queues[queue_id] = MockQueue(kinds[args.queue_type], args.ring_base_address, args.ring_size,
                                          args.read_pointer_address, args.write_pointer_address,
                                          f"{kinds[args.queue_type]} queue {queue_id}")
        self.gpu.queues.append(self.queues[queue_id])
        args.queue_id, args.doorbell_offset = queue_id, DOORBELL_PAGE_OFFSET + 8 * queue_id

    def _destroy_queue(self, args: kfd_ioctl.DestroyQueueArgs) -> None:
        queue = self.queues.pop(args.queue_id, None)
        if queue is None:
            raise OSError(22, f"no queue {args.queue_id}")
        self.gpu.queues.remove(queue)

    def _create_event(self, args: kfd_ioctl.CreateEventArgs) -> None:
        if args.event_type != kfd_ioctl.EVENT_SIGNAL:
            raise OSError(22, f"event type {args.event_type} is not simulated (signal events only)")
        if self.event_page is None:
            page = self.allocations.get(args.event_page_offset)
            if page is None or page.size < kfd_ioctl.SIGNAL_EVENT_LIMIT * 8:
                raise OSError(22, "the first signal event needs the handle of an event page "
                                  f"({kfd_ioctl.SIGNAL_EVENT_LIMIT * 8} bytes)")
            self.event_page = page
            self.gpu.view(page.address, page.size).cast("Q")[:] = \
                memoryview(b"\xff" * page.size).cast("Q")  # every slot unsignaled
        slot = len(self.events)
        self.events[slot] = MockEvent(slot, bool(args.auto_reset))
        args.event_id, args.event_slot_index = slot, slot

    def _destroy_event(self, args: kfd_ioctl.EventIdArgs) -> None:
        self.events.pop(args.event_id)

    def _set_event(self, args: kfd_ioctl.EventIdArgs) -> None:
        self.events[args.event_id].signaled = True

    def _interrupt(self, context: int) -> None:
        """The interrupt handler: set the signal event whose id the interrupt carries, clear its slot."""
        event = self.events.get(context)
        if event is None:
            return
        event.signaled = True
        if self.event_page is not None:
            self.gpu.view(self.event_page.address + 8 * event.slot, 8).cast("Q")[0] = kfd_ioctl.UNSIGNALED_EVENT_SLOT

    def _wait_events(self, args: kfd_ioctl.WaitEventsArgs) -> None:
        wanted = [self.events[data.event_id] for data in
                  (kfd_ioctl.EventData * args.num_events).from_address(args.events_ptr)]
        check = all if args.wait_for_all else any
        self.gpu.run()  # the host sleeps; the GPU works
        if not check(event.signaled for event in wanted):
            time.sleep(min(args.timeout, 1) / 1000)
            self.gpu.run()
        if check(event.signaled for event in wanted):
            for event in wanted:
                event.signaled = event.signaled and not event.auto_reset
            args.wait_result = kfd_ioctl.WAIT_COMPLETE
        else:
            args.wait_result = kfd_ioctl.WAIT_TIMEOUT

    # ---- doorbells ----

    def doorbell(self, offset: int, value: int) -> None:
        """A doorbell write: the queue's new work must be in place (AQL: `value` is the last packet index written;
        SDMA: the write pointer), then the GPU runs."""
        queue = self.queues.get(offset // 8)
        if queue is None or offset % 8:
            raise ValueError(f"{self.gpu.name}: a doorbell write at offset {offset:#x} names no queue")
        write = int(self.gpu.view(queue.write_pointer, 8).cast("Q")[0])
        expected = write - 1 if queue.kind == "aql" else write
        if value != expected:
            raise ValueError(f"{self.gpu.name}: the {queue.name} doorbell got {value}, its write pointer says "
                             f"{expected}")
        if queue.kind == "aql" and int(self.gpu.view(queue.read_pointer, 8).cast("Q")[0]) <= value:
            slots = queue.size // amdcmd.AQL_PACKET_BYTES
            header = int(self.gpu.view(queue.base + (value % slots) * amdcmd.AQL_PACKET_BYTES, 2).cast("H")[0])
            if header & 0xFF == amdcmd.AQL_INVALID:
                raise ValueError(f"{self.gpu.name}: the doorbell of {queue.name} rang for packet {value}, whose header "
                                 "is still INVALID (write the header last, then ring)")
        self.doorbell_values[offset] = value
        self.gpu.run()


class MockSelection:
    """What DEV=MOCK+AMD selects: the device itself builds its simulated driver and GPU; this records it."""

    name = "MOCK"

    def __init__(self, device: str):
        self.device = device

    @property
    def description(self) -> str:
        """What this is."""
        return f"{self.device} = the MOCK GPU (a simulated amdkfd driver; AQL, PM4 and SDMA decoded in Python)"


def open_mock(device: str, indices: tuple[int, ...]) -> MockSelection:
    """The MOCK interface for `device` (the queue device makes one simulated driver and GPU per device)."""
    return MockSelection(device)
