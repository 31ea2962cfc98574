"""The KFD interface: an AMD GPU reached through the amdkfd kernel driver (/dev/kfd) and its render node.

KFDDriver is the host side, written once for the real driver and the MOCK one: it opens /dev/kfd and
/dev/dri/renderD<minor>, checks the interface version, makes the render node this process's GPU address space
(ACQUIRE_VM), allocates GPU memory at virtual addresses it reserves (ALLOC_MEMORY_OF_GPU, MAP_MEMORY_TO_GPU, then a
host mapping of the same pages), creates an AQL compute queue and an SDMA queue (CREATE_QUEUE with their rings,
read/write pointers, EOP and context-save areas), rings their doorbells (a page of /dev/kfd), and sleeps on a signal
event the queues raise (CREATE_EVENT, WAIT_EVENTS).

Every system call goes through a KernelFiles object: LinuxFiles (os, fcntl and libc's mmap) on a machine with an AMD
GPU, tiny_amd.kfd_mock.MockKFD (a simulated driver and GPU that decodes the same argument structures) in CI.
The LinuxFiles path has not run on AMD hardware (none was available to this project).
"""
from __future__ import annotations

import bisect
import ctypes
import ctypes.util
import fcntl
import os
import struct
from dataclasses import dataclass, field
from typing import Protocol

from tiny_amd import amdcmd, kfd_ioctl

KFD_PATH = "/dev/kfd"
KFD_TOPOLOGY = "/sys/devices/virtual/kfd/kfd/topology/nodes"
PAGE = 4096
EOP_BUFFER_BYTES = 4096
EVENT_PAGE_BYTES = kfd_ioctl.SIGNAL_EVENT_LIMIT * 8
REQUIRED_MAJOR_VERSION = 1


class KFDError(RuntimeError):
    """A KFD system call failed; the message names the call and what to check."""


class DoorbellPage(Protocol):
    """The doorbell page of /dev/kfd mapped into the process."""

    def write64(self, offset: int, value: int) -> None:
        """Store the 64-bit `value` at byte `offset` of the page (rings that queue's doorbell)."""


class KernelFiles(Protocol):
    """The system calls the KFD interface makes (LinuxFiles: the real ones; MockKFD: a simulated driver)."""

    def open(self, path: str) -> int:
        """A file descriptor for `path` (read-write)."""

    def close(self, fd: int) -> None:
        """Close `fd`."""

    def ioctl(self, fd: int, request: int, arguments: ctypes.Structure) -> None:
        """The ioctl `request` with `arguments` read and written in place; OSError on failure."""

    def topology(self) -> list[dict[str, int]]:
        """The KFD topology's GPU nodes (their properties file plus gpu_id), in node order."""

    def reserve(self, size: int) -> int:
        """`size` bytes of process virtual address space, aligned to their size's page, to map GPU memory at."""

    def release(self, address: int, size: int) -> None:
        """Give back an address range from `reserve`."""

    def map_memory(self, fd: int, offset: int, address: int, size: int) -> memoryview:
        """Map `size` bytes of `fd` at `offset` to `address` (fixed) and return the host's view of them."""

    def map_doorbells(self, fd: int, offset: int, size: int) -> DoorbellPage:
        """Map the doorbell page of /dev/kfd at `offset`."""

    def code_loaded(self, entry_address: int, code_object: bytes) -> None:
        """A kernel's machine code now sits at `entry_address` (the real GPU needs no word of it)."""


@dataclass
class KFDMemory:
    """One GPU allocation: its GPU virtual address (also its host address when mapped), size, KFD handle, flags
    and the host's view of it (None for memory the host cannot reach)."""

    address: int
    size: int
    handle: int
    flags: int
    host: memoryview | None


@dataclass
class KFDQueue:
    """A hardware queue made by CREATE_QUEUE: its ring, read and write pointers, doorbell and id."""

    kind: int
    ring: KFDMemory
    pointers: KFDMemory
    doorbell_offset: int
    queue_id: int
    extra: list[KFDMemory] = field(default_factory=list)

    @property
    def read_pointer(self) -> int:
        """The read pointer the GPU advances (AQL: packets, SDMA: bytes)."""
        assert self.pointers.host is not None
        return int(self.pointers.host.cast("Q")[0])

    @property
    def write_pointer(self) -> int:
        """The write pointer the host advances (AQL: packets, SDMA: bytes)."""
        assert self.pointers.host is not None
        return int(self.pointers.host.cast("Q")[1])

    @write_pointer.setter
    def write_pointer(self, value: int) -> None:
        assert self.pointers.host is not None
        self.pointers.host.cast("Q")[1] = value


class KFDDriver:
    """A process's view of one GPU through KFD: memory, queues, doorbells and the interrupt event."""

    def __init__(self, files: KernelFiles, index: int = 0):
        self.files = files
        nodes = files.topology()
        if index >= len(nodes):
            raise KFDError(f"KFD lists {len(nodes)} GPU(s), there is no GPU {index}: use DEV=AMD or DEV=AMD:<index> "
                           "with an index below that")
        self.node = nodes[index]
        self.gpu_id = self.node["gpu_id"]
        self.gfx_target_version = self.node["gfx_target_version"]
        self.kfd = files.open(KFD_PATH)
        self.render = files.open(f"/dev/dri/renderD{self.node['drm_render_minor']}")
        version = kfd_ioctl.GetVersionArgs()
        self.call(self.kfd, kfd_ioctl.GET_VERSION, version)
        if version.major_version != REQUIRED_MAJOR_VERSION:
            raise KFDError(f"KFD interface version {version.major_version}.{version.minor_version}; tinycore speaks "
                           f"{REQUIRED_MAJOR_VERSION}.x: update the amdgpu kernel driver")
        self.version = (version.major_version, version.minor_version)
        self.call(self.kfd, kfd_ioctl.ACQUIRE_VM, kfd_ioctl.AcquireVMArgs(drm_fd=self.render, gpu_id=self.gpu_id))
        self.memory: dict[int, KFDMemory] = {}
        self.starts: list[int] = []
        self.doorbells: DoorbellPage | None = None
        self.doorbell_base = -1
        self.event_page = self.allocate(EVENT_PAGE_BYTES, "event page", kfd_ioctl.ALLOC_GTT | kfd_ioctl.ALLOC_UNCACHED)
        event = kfd_ioctl.CreateEventArgs(event_page_offset=self.event_page.handle, event_type=kfd_ioctl.EVENT_SIGNAL,
                                          auto_reset=1)
        self.call(self.kfd, kfd_ioctl.CREATE_EVENT, event)
        self.event_id = int(event.event_id)
        self.event_mailbox = self.event_page.address + 8 * int(event.event_slot_index)

    # ---- system calls ----

    def call(self, fd: int, request: int, arguments: ctypes.Structure) -> None:
        """One ioctl, with a KFDError naming it on failure."""
        try:
            self.files.ioctl(fd, request, arguments)
        except OSError as error:
            name = kfd_ioctl.REQUEST_NAMES.get(request, hex(request))
            raise KFDError(f"AMDKFD_IOC_{name} failed: {error} (is the user in the render and video groups, and is "
                           "the amdgpu driver loaded with KFD?)") from error

    # ---- memory ----

    def allocate(self, size: int, purpose: str, flags: int = kfd_ioctl.ALLOC_GTT) -> KFDMemory:
        """`size` bytes of GPU memory (`flags`: VRAM or GTT, ...) mapped to the GPU and, unless it is VRAM that is
        not PUBLIC, to the host at the same address."""
        size = -(-max(size, 1) // PAGE) * PAGE
        address = self.files.reserve(size)
        arguments = kfd_ioctl.AllocMemoryArgs(va_addr=address, size=size, gpu_id=self.gpu_id,
                                              flags=flags | kfd_ioctl.ALLOC_WRITABLE | kfd_ioctl.ALLOC_NO_SUBSTITUTE)
        try:
            self.call(self.kfd, kfd_ioctl.ALLOC_MEMORY_OF_GPU, arguments)
        except KFDError as error:
            self.files.release(address, size)
            raise MemoryError(f"the GPU could not allocate {size} bytes for {purpose}: {error}") from error
        devices = (ctypes.c_uint32 * 1)(self.gpu_id)
        mapping = kfd_ioctl.MapMemoryArgs(handle=arguments.handle, device_ids_array_ptr=ctypes.addressof(devices),
                                          n_devices=1)
        self.call(self.kfd, kfd_ioctl.MAP_MEMORY_TO_GPU, mapping)
        if mapping.n_success != 1:
            raise KFDError(f"MAP_MEMORY_TO_GPU mapped {purpose} on {mapping.n_success} of 1 GPU")
        host = None
        if not flags & kfd_ioctl.ALLOC_VRAM or flags & kfd_ioctl.ALLOC_PUBLIC:
            host = self.files.map_memory(self.render, int(arguments.mmap_offset), address, size)
        memory = KFDMemory(address, size, int(arguments.handle), flags, host)
        self.memory[address] = memory
        bisect.insort(self.starts, address)
        return memory

    def free(self, memory: KFDMemory) -> None:
        """Unmap and free an allocation."""
        devices = (ctypes.c_uint32 * 1)(self.gpu_id)
        self.call(self.kfd, kfd_ioctl.UNMAP_MEMORY_FROM_GPU,
                  kfd_ioctl.MapMemoryArgs(handle=memory.handle, device_ids_array_ptr=ctypes.addressof(devices),
                                          n_devices=1))
        self.call(self.kfd, kfd_ioctl.FREE_MEMORY_OF_GPU, kfd_ioctl.FreeMemoryArgs(handle=memory.handle))
        self.files.release(memory.address, memory.size)
        del self.memory[memory.address]
        self.starts.remove(memory.address)

    def view(self, address: int, size: int) -> memoryview:
        """The host's view of `size` bytes at GPU address `address`."""
        position = bisect.bisect_right(self.starts, address) - 1
        memory = self.memory.get(self.starts[position]) if position >= 0 else None
        if memory is None or memory.host is None or address + size > memory.address + memory.size:
            raise MemoryError(f"{address:#x}+{size} is not in host-visible GPU memory of this process")
        offset = address - memory.address
        return memory.host[offset:offset + size]

    # ---- queues ----

    def create_queue(self, kind: int, ring_bytes: int) -> KFDQueue:
        """An AQL compute queue (kfd_ioctl.QUEUE_TYPE_COMPUTE_AQL) or an SDMA queue with a ring of `ring_bytes`."""
        uncached = kfd_ioctl.ALLOC_GTT | kfd_ioctl.ALLOC_UNCACHED
        ring = self.allocate(ring_bytes, "a queue ring", uncached)
        pointers = self.allocate(PAGE, "queue pointers", uncached)
        extra: list[KFDMemory] = []
        arguments = kfd_ioctl.CreateQueueArgs(
            ring_base_address=ring.address, ring_size=ring.size, gpu_id=self.gpu_id, queue_type=kind,
            read_pointer_address=pointers.address, write_pointer_address=pointers.address + 8,
            queue_percentage=kfd_ioctl.MAX_QUEUE_PERCENTAGE, queue_priority=7)
        if kind == kfd_ioctl.QUEUE_TYPE_COMPUTE_AQL:
            assert ring.host is not None
            for slot in range(ring.size // amdcmd.AQL_PACKET_BYTES):  # every slot starts as an INVALID packet
                struct.pack_into("<H", ring.host, slot * amdcmd.AQL_PACKET_BYTES, amdcmd.AQL_INVALID)
            eop = self.allocate(EOP_BUFFER_BYTES, "end-of-pipe buffer", kfd_ioctl.ALLOC_VRAM)
            save_bytes, control_bytes = self.context_save_sizes()
            save = self.allocate(save_bytes, "context save area", kfd_ioctl.ALLOC_GTT)
            extra += [eop, save]
            arguments.eop_buffer_address, arguments.eop_buffer_size = eop.address, eop.size
            arguments.ctx_save_restore_address, arguments.ctx_save_restore_size = save.address, save_bytes
            arguments.ctl_stack_size = control_bytes
        self.call(self.kfd, kfd_ioctl.CREATE_QUEUE, arguments)
        base = int(arguments.doorbell_offset) & ~(kfd_ioctl.DOORBELL_PAGE_BYTES - 1)
        if self.doorbells is None:
            self.doorbells = self.files.map_doorbells(self.kfd, base, kfd_ioctl.DOORBELL_PAGE_BYTES)
            self.doorbell_base = base
        elif base != self.doorbell_base:
            raise KFDError(f"queue doorbells on two pages ({self.doorbell_base:#x}, {base:#x}) are not supported")
        return KFDQueue(kind, ring, pointers, int(arguments.doorbell_offset) - base, int(arguments.queue_id), extra)

    def context_save_sizes(self) -> tuple[int, int]:
        """(context save area bytes, control stack bytes) for a compute queue, from the node's cwsr_size and
        ctl_stack_size when the topology gives them, else a generous size for every wave of the GPU."""
        waves = self.node.get("simd_count", 64) * self.node.get("max_waves_per_simd", 16)
        control = self.node.get("ctl_stack_size") or -(-(waves * 8 + 48) // PAGE) * PAGE
        total = self.node.get("cwsr_size") or control + self.node.get("simd_count", 64) * 64 * 1024
        return -(-(total + self.node.get("debug_memory_size", 0)) // PAGE) * PAGE, control

    def ring_doorbell(self, queue: KFDQueue, value: int) -> None:
        """Tell the GPU `queue` has new work (AQL: the last packet index written; SDMA: the write pointer)."""
        assert self.doorbells is not None
        self.doorbells.write64(queue.doorbell_offset, value)

    def destroy_queue(self, queue: KFDQueue) -> None:
        """Destroy `queue` and free its memory."""
        self.call(self.kfd, kfd_ioctl.DESTROY_QUEUE, kfd_ioctl.DestroyQueueArgs(queue_id=queue.queue_id))
        for memory in (queue.ring, queue.pointers, *queue.extra):
            self.free(memory)

    # ---- events ----

    def wait_event(self, timeout_ms: int) -> bool:
        """Sleep until the queues raise this process's event or `timeout_ms` passes; whether it was raised."""
        data = kfd_ioctl.EventData(event_id=self.event_id)
        arguments = kfd_ioctl.WaitEventsArgs(events_ptr=ctypes.addressof(data), num_events=1, wait_for_all=1,
                                             timeout=timeout_ms)
        self.call(self.kfd, kfd_ioctl.WAIT_EVENTS, arguments)
        if arguments.wait_result == kfd_ioctl.WAIT_FAIL:
            raise KFDError("WAIT_EVENTS failed: the GPU may have hung or been reset (see dmesg)")
        return bool(arguments.wait_result == kfd_ioctl.WAIT_COMPLETE)


class _MappedDoorbells:
    """The doorbell page of a real /dev/kfd mapping."""

    def __init__(self, address: int):
        self.address = address

    def write64(self, offset: int, value: int) -> None:
        """A 64-bit store to the doorbell."""
        ctypes.c_uint64.from_address(self.address + offset).value = value


class LinuxFiles:
    """The real system calls (for a machine with an AMD GPU and the amdgpu driver). Not run on hardware here."""

    PROT_NONE, PROT_READ, PROT_WRITE = 0, 1, 2
    MAP_SHARED, MAP_PRIVATE, MAP_FIXED, MAP_ANONYMOUS, MAP_NORESERVE = 0x01, 0x02, 0x10, 0x20, 0x4000

    def __init__(self, topology_path: str = KFD_TOPOLOGY):
        self.topology_path = topology_path
        self.libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        self.libc.mmap.restype = ctypes.c_void_p
        self.libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                   ctypes.c_long]
        self.libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]

    def open(self, path: str) -> int:
        """os.open read-write, close-on-exec."""
        return os.open(path, os.O_RDWR | os.O_CLOEXEC)

    def close(self, fd: int) -> None:
        """os.close."""
        os.close(fd)

    def ioctl(self, fd: int, request: int, arguments: ctypes.Structure) -> None:
        """fcntl.ioctl on the structure's own memory."""
        fcntl.ioctl(fd, request, memoryview(arguments).cast("B"), True)  # type: ignore[call-overload]

    def topology(self) -> list[dict[str, int]]:
        """The GPU nodes under /sys/devices/virtual/kfd/kfd/topology/nodes."""
        nodes = []
        for name in sorted(os.listdir(self.topology_path), key=lambda text: int(text) if text.isdigit() else -1):
            try:
                with open(os.path.join(self.topology_path, name, "gpu_id")) as handle:
                    gpu_id = int(handle.read().strip() or 0)
                with open(os.path.join(self.topology_path, name, "properties")) as handle:
                    properties = {key: int(value) for key, value in
                                  (line.split() for line in handle if len(line.split()) == 2)}
            except (OSError, ValueError):
                continue
            if gpu_id:
                nodes.append({**properties, "gpu_id": gpu_id})
        return nodes

    def _mmap(self, address: int, size: int, protection: int, flags: int, fd: int, offset: int) -> int:
        result = self.libc.mmap(address or None, size, protection, flags, fd, offset)
        if result in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), f"mmap of {size} bytes failed: {os.strerror(ctypes.get_errno())}")
        return int(result)

    def reserve(self, size: int) -> int:
        """An anonymous PROT_NONE mapping (the GPU virtual address and the host one are the same)."""
        return self._mmap(0, size, self.PROT_NONE, self.MAP_PRIVATE | self.MAP_ANONYMOUS | self.MAP_NORESERVE, -1, 0)

    def release(self, address: int, size: int) -> None:
        """munmap."""
        self.libc.munmap(address, size)

    def map_memory(self, fd: int, offset: int, address: int, size: int) -> memoryview:
        """mmap of the render node at `offset`, fixed at `address`."""
        self._mmap(address, size, self.PROT_READ | self.PROT_WRITE, self.MAP_SHARED | self.MAP_FIXED, fd, offset)
        return memoryview((ctypes.c_uint8 * size).from_address(address)).cast("B")

    def map_doorbells(self, fd: int, offset: int, size: int) -> DoorbellPage:
        """mmap of /dev/kfd's doorbell page."""
        return _MappedDoorbells(self._mmap(0, size, self.PROT_READ | self.PROT_WRITE, self.MAP_SHARED, fd, offset))

    def code_loaded(self, entry_address: int, code_object: bytes) -> None:
        """Nothing: the GPU reads the machine code itself."""



@dataclass
class KFDSelection:
    """What DEV=KFD+AMD (or DEV=AMD on a machine with /dev/kfd) selects: the files to reach the driver through."""

    device: str
    files: KernelFiles
    index: int
    name: str = "KFD"

    @property
    def description(self) -> str:
        """What this is."""
        return f"{self.device} = GPU {self.index} through the amdkfd kernel driver ({KFD_PATH})"


def open_kfd(device: str, indices: tuple[int, ...]) -> KFDSelection:
    """The KFD interface for `device`; raises when /dev/kfd or a GPU node is missing (then HIP is tried)."""
    from tiny_amd.target import device_index
    if not os.path.exists(KFD_PATH):
        raise FileNotFoundError(f"{KFD_PATH} does not exist: load the amdgpu kernel driver (and add the user to the "
                                "render and video groups)")
    files = LinuxFiles()
    index = indices[0] if indices else device_index(device)
    if index >= len(files.topology()):
        raise FileNotFoundError(f"{KFD_PATH} lists no GPU {index}")
    return KFDSelection(device, files, index)
