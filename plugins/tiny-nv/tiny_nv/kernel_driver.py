"""The NV interface on NVIDIA's kernel driver: the GPU reached through /dev/nvidiactl, /dev/nvidiaN and
/dev/nvidia-uvm with no CUDA runtime in between.

NVKernelGPU brings a GPU up the way a user-space driver does: an RM client, the device and subdevice, the usermode
doorbell page, a GPU virtual address space registered with UVM, a channel group with a context share, and one
GPFIFO channel for compute (the Hopper or Ampere compute class bound to subchannel 1, its shader local memory
windows set) and one for copies (the copy engine class on subchannel 4). GPU memory is RM video memory mapped by
UVM at the same virtual address the CPU maps it at, so one address serves both. Submitting is the channel's
business (tiny_nv.nvqueue.Channel: pushbuffer, GPFIFO entry, GP_PUT); ringing the doorbell writes the channel's work
submit token into the usermode page.

Everything goes through a KernelDriver: LinuxKernelDriver makes the real system calls; tiny_nv.mock_driver's
MockKernelDriver answers the same ioctls with the same structures on a simulated GPU. In CI only the mock has run
this code; a lent GPU runs it for real through plugins/tiny-nv/gpu_check.sh.
"""
from __future__ import annotations

import bisect
import ctypes
import errno
import os
from collections.abc import MutableSequence
from dataclasses import dataclass
from typing import Protocol, cast

from tiny_nv import nvcmd, rmapi
from tiny_nv.nvqueue import Channel


class KernelDriver(Protocol):
    """The system calls the NV interface makes."""

    def open(self, path: str) -> int:
        """A descriptor of device file `path` (OSError when it is missing)."""

    def close(self, fd: int) -> None:
        """Close `fd`."""

    def ioctl(self, fd: int, request: int, argument: ctypes.Structure | ctypes.Array) -> None:
        """ioctl(fd, request, &argument); the driver writes its answers into `argument` (OSError on failure)."""

    def reserve(self, size: int) -> int:
        """An address range of `size` bytes nobody else uses (the GPU and the CPU share its addresses)."""

    def release(self, address: int, size: int) -> None:
        """Give a reserved range back."""

    def map_memory(self, fd: int, size: int, offset: int, address: int) -> memoryview:
        """mmap(address, size, read/write, shared and fixed, fd, offset): the CPU's view of GPU memory."""

    def map_registers(self, fd: int, size: int, offset: int) -> MutableSequence[int]:
        """The 32-bit registers of an mmap'd register page (stores reach the GPU)."""

    def poll(self) -> None:
        """Let the GPU make progress (nothing to do on hardware, which runs by itself)."""


class LinuxKernelDriver:
    """The real system calls, through os, fcntl and libc's mmap."""

    def __init__(self) -> None:
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.libc.mmap.restype = ctypes.c_void_p
        self.libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                   ctypes.c_long]
        self.libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        self.next_hint = 0x2000000000  # GPU and CPU share these addresses: keep them clear of the heap

    def open(self, path: str) -> int:
        """os.open with read and write."""
        return os.open(path, os.O_RDWR | os.O_CLOEXEC)

    def close(self, fd: int) -> None:
        """os.close."""
        os.close(fd)

    def ioctl(self, fd: int, request: int, argument: ctypes.Structure | ctypes.Array) -> None:
        """libc ioctl on the argument's memory (pointers inside it stay valid: they name this process's memory)."""
        if self.libc.ioctl(fd, ctypes.c_ulong(request), ctypes.byref(argument)) < 0:
            code = ctypes.get_errno()
            raise OSError(code, f"ioctl {request:#x} on fd {fd}: {os.strerror(code)}")

    def _mmap(self, address: int, size: int, protection: int, flags: int, fd: int, offset: int) -> int:
        result = self.libc.mmap(address or None, size, protection, flags, fd, offset)
        if result in (None, ctypes.c_void_p(-1).value):
            code = ctypes.get_errno()
            raise OSError(code, f"mmap of {size} bytes at {address:#x} (fd {fd}): {os.strerror(code)}")
        return int(result)

    def reserve(self, size: int) -> int:
        """An inaccessible anonymous mapping (MAP_NORESERVE) near the next hint."""
        import mmap
        address = self._mmap(self.next_hint, size, 0,  # PROT_NONE
                             mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_NORESERVE", 0x4000), -1, 0)
        self.next_hint = address + size + (2 << 20)
        return address

    def release(self, address: int, size: int) -> None:
        """munmap."""
        self.libc.munmap(address, size)

    def map_memory(self, fd: int, size: int, offset: int, address: int) -> memoryview:
        """A shared fixed mapping of `fd` at `address`."""
        import mmap
        self._mmap(address, size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED | 0x10, fd, offset)  # MAP_FIXED
        return memoryview((ctypes.c_uint8 * size).from_address(address)).cast("B")

    def map_registers(self, fd: int, size: int, offset: int) -> MutableSequence[int]:
        """A shared mapping of `fd`'s registers as 32-bit words."""
        import mmap
        address = self._mmap(0, size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED, fd, offset)
        return cast(MutableSequence[int], (ctypes.c_uint32 * (size // 4)).from_address(address))

    def poll(self) -> None:
        """The GPU runs by itself."""


class NVDriverError(RuntimeError):
    """The kernel driver refused a request (its NV_STATUS in the message)."""


@dataclass
class GPUAllocation:
    """GPU memory: its RM handle, size, the CPU's view and the descriptor the view was mapped through."""

    handle: int
    size: int
    view: memoryview
    fd: int
    purpose: str


SM_OF_ARCHITECTURE = {rmapi.NV2080_CTRL_MC_ARCH_INFO_ARCHITECTURE_GA100: 80,
                      rmapi.NV2080_CTRL_MC_ARCH_INFO_ARCHITECTURE_GH100: 90,
                      rmapi.NV2080_CTRL_MC_ARCH_INFO_ARCHITECTURE_AD100: 89}
SHADER_LOCAL_MEMORY_WINDOW = 0x729300000000
"""Where generic addresses fall into a thread's local memory (a window, not memory: no allocation backs it)."""
SHARED_MEMORY_WINDOW_HOPPER, SHARED_MEMORY_WINDOW_AMPERE = 0x729400000000, 0xFE000000
"""Where generic addresses fall into a block's shared memory."""
LOCAL_MEMORY_PER_THREAD = 0x1000
"""Local memory (stack, with its reserve) each thread can have: the QMD's high local memory size is at most this."""
THREADS_PER_TPC = 2 * 2048
"""Two SMs a TPC, up to 2048 resident threads an SM (sm_80 to sm_90): the local memory one TPC needs at most."""
LOCAL_MEMORY_PER_TPC = LOCAL_MEMORY_PER_THREAD * THREADS_PER_TPC
TPC_SLOTS = 72
"""TPCs the local memory is sized for: the most any supported GPU has (GH100 and AD102: 72)."""


class NVKernelGPU:
    """One GPU through the kernel driver: its memory (allocate, view, free by GPU address) and its channels."""

    def __init__(self, driver: KernelDriver, index: int = 0, name: str = "NV"):
        self.driver, self.name = driver, name
        self.allocations: dict[int, GPUAllocation] = {}
        self.starts: list[int] = []
        self.tokens: dict[int, int] = {}
        self.control_fd = driver.open("/dev/nvidiactl")
        cards = (rmapi.NVCardInfo * rmapi.CARD_SLOTS)()
        self._escape(self.control_fd, rmapi.NV_ESC_CARD_INFO, cards)
        present = [card for card in cards if card.valid]
        if index >= len(present):
            raise RuntimeError(f"{name}: the NVIDIA driver reports {len(present)} GPU(s), asked for index {index}")
        card = present[index]
        self.minor = card.minor_number
        self.uvm_fd = driver.open("/dev/nvidia-uvm")
        self.uvm_mm_fd = driver.open("/dev/nvidia-uvm")
        self._uvm(rmapi.UVM_INITIALIZE, rmapi.UVMInitializeParams(flags=0))
        self._uvm(rmapi.UVM_MM_INITIALIZE, rmapi.UVMMmInitializeParams(uvmFd=self.uvm_fd), fd=self.uvm_mm_fd)
        self.root = self.rm_alloc(0, rmapi.NV01_ROOT_CLIENT, None)
        identity = rmapi.NV0000GetIdInfoV2Params(gpuId=card.gpu_id)
        self.rm_control(self.root, rmapi.NV0000_CTRL_CMD_GPU_GET_ID_INFO_V2, identity)
        self.gpu_fd = self._open_gpu_file()
        self.device = self.rm_alloc(self.root, rmapi.NV01_DEVICE_0, rmapi.NV0080AllocParameters(
            deviceId=identity.deviceInstance, hClientShare=self.root, vaMode=2))  # 2: several VA spaces
        self.subdevice = self.rm_alloc(self.device, rmapi.NV20_SUBDEVICE_0, rmapi.NV2080AllocParameters(0))
        arch = rmapi.NV2080ArchInfoParams()
        self.rm_control(self.subdevice, rmapi.NV2080_CTRL_CMD_MC_GET_ARCH_INFO, arch)
        self.sm = SM_OF_ARCHITECTURE.get(arch.architecture, 0) + (6 if arch.architecture == 0x170 and
                                                                 arch.implementation else 0)
        if self.sm < 80:
            raise RuntimeError(f"{name}: GPU architecture {arch.architecture:#x} is not Ampere, Ada or Hopper, the "
                               "ones this interface drives; use DEV=CUDA+NV")
        self.hopper = self.sm >= 90
        self.shared_window = SHARED_MEMORY_WINDOW_HOPPER if self.hopper else SHARED_MEMORY_WINDOW_AMPERE
        self.local_window = SHADER_LOCAL_MEMORY_WINDOW
        self.local_bytes_per_thread = LOCAL_MEMORY_PER_THREAD
        self.qmd = nvcmd.QMD_V04 if self.hopper else nvcmd.QMD_V03
        self.compute_class = rmapi.HOPPER_COMPUTE_A if self.hopper else (
            rmapi.ADA_COMPUTE_A if self.sm == 89 else rmapi.AMPERE_COMPUTE_B)
        self.copy_class = rmapi.HOPPER_DMA_COPY_A if self.hopper else rmapi.AMPERE_DMA_COPY_B
        self.gpfifo_class = rmapi.HOPPER_CHANNEL_GPFIFO_A if self.hopper else rmapi.AMPERE_CHANNEL_GPFIFO_A
        usermode_class = rmapi.HOPPER_USERMODE_A if self.hopper else rmapi.TURING_USERMODE_A
        self.usermode = self.rm_alloc(self.subdevice, usermode_class,
                                      rmapi.NVHopperUsermodeParameters() if self.hopper else None)
        self.doorbell = self._map_registers(self.usermode, rmapi.USERMODE_PAGE_BYTES)
        gid = rmapi.NV2080GidInfoParams(flags=rmapi.NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_BINARY)
        self.rm_control(self.subdevice, rmapi.NV2080_CTRL_CMD_GPU_GET_GID_INFO, gid)
        self.uuid = bytes(gid.data[:16])
        self.vaspace = self.rm_alloc(self.device, rmapi.FERMI_VASPACE_A, rmapi.NVVaspaceAllocationParameters(
            vaBase=0x1000, vaSize=0x1FFFFFB000000,
            flags=rmapi.NV_VASPACE_ALLOCATION_FLAGS_ENABLE_PAGE_FAULTING |
            rmapi.NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED))
        self._uvm(rmapi.UVM_REGISTER_GPU, rmapi.UVMRegisterGpuParams(
            gpu_uuid=(ctypes.c_uint8 * 16)(*self.uuid), rmCtrlFd=self.control_fd, hClient=self.root))
        self._uvm(rmapi.UVM_REGISTER_GPU_VASPACE, rmapi.UVMRegisterGpuVaspaceParams(
            gpuUuid=(ctypes.c_uint8 * 16)(*self.uuid), rmCtrlFd=self.control_fd, hClient=self.root,
            hVaSpace=self.vaspace))
        self.channel_group = self.rm_alloc(self.device, rmapi.KEPLER_CHANNEL_GROUP_A,
                                           rmapi.NVChannelGroupAllocationParameters(
                                               engineType=rmapi.NV2080_ENGINE_TYPE_GRAPHICS))
        self.context_share = self.rm_alloc(self.channel_group, rmapi.FERMI_CONTEXT_SHARE_A,
                                           rmapi.NVCtxshareAllocationParameters(
                                               hVASpace=self.vaspace,
                                               flags=rmapi.NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_ASYNC))
        self.channels = {"compute": self._channel("compute", self.compute_class, nvcmd.SUBCHANNEL_COMPUTE),
                         "copy": self._channel("copy", self.copy_class, nvcmd.SUBCHANNEL_COPY)}
        self.rm_control(self.channel_group, rmapi.NVA06C_CTRL_CMD_GPFIFO_SCHEDULE, rmapi.NVA06CScheduleParams(1))
        self._set_up_compute()

    # ---- the driver's calls ----

    def _escape(self, fd: int, escape: int, argument: ctypes.Structure | ctypes.Array) -> None:
        self.driver.ioctl(fd, rmapi.nv_ioctl_request(escape, ctypes.sizeof(argument)), argument)

    def _uvm(self, request: int, argument: ctypes.Structure, fd: int | None = None) -> None:
        self.driver.ioctl(self.uvm_fd if fd is None else fd, request, argument)
        status = getattr(argument, "rmStatus", 0)
        if status:
            raise NVDriverError(f"{self.name}: UVM ioctl {request} failed with {rmapi.status_name(status)}")

    def rm_alloc(self, parent: int, class_id: int, parameters: ctypes.Structure | None) -> int:
        """A new RM object of `class_id` under `parent` (the handle the RM chose)."""
        request = rmapi.NVOS21Parameters(hRoot=getattr(self, "root", 0), hObjectParent=parent, hObjectNew=0,
                                         hClass=class_id,
                                         pAllocParms=ctypes.addressof(parameters) if parameters is not None else 0,
                                         paramsSize=ctypes.sizeof(parameters) if parameters is not None else 0)
        self._escape(self.control_fd, rmapi.NV_ESC_RM_ALLOC, request)
        if request.status:
            raise NVDriverError(f"{self.name}: RM alloc of class {class_id:#x} under {parent:#x} failed with "
                                f"{rmapi.status_name(request.status)}")
        return int(request.hObjectNew)

    def rm_control(self, handle: int, command: int, parameters: ctypes.Structure) -> None:
        """RM control `command` on object `handle`; the RM writes its answer into `parameters`."""
        request = rmapi.NVOS54Parameters(hClient=self.root, hObject=handle, cmd=command,
                                         params=ctypes.addressof(parameters), paramsSize=ctypes.sizeof(parameters))
        self._escape(self.control_fd, rmapi.NV_ESC_RM_CONTROL, request)
        if request.status:
            raise NVDriverError(f"{self.name}: RM control {command:#x} on {handle:#x} failed with "
                                f"{rmapi.status_name(request.status)}")

    def rm_free(self, handle: int) -> None:
        """Free RM object `handle` (and what the RM made under it)."""
        request = rmapi.NVOS00Parameters(hRoot=self.root, hObjectParent=0, hObjectOld=handle)
        self._escape(self.control_fd, rmapi.NV_ESC_RM_FREE, request)

    def _open_gpu_file(self) -> int:
        fd = self.driver.open(f"/dev/nvidia{self.minor}")
        self._escape(fd, rmapi.NV_ESC_REGISTER_FD, rmapi.NVRegisterFd(ctl_fd=self.control_fd))
        return fd

    def _map_request(self, memory: int, size: int, parent: int, flags: int = 0) -> tuple[int, int]:
        """(descriptor, the RM's cookie for the mapping) of a CPU mapping of RM object `memory`. The descriptor is then
        mmap'd at offset 0: the kernel module keeps the mapping NV_ESC_RM_MAP_MEMORY set up on that descriptor and
        refuses any other offset (EINVAL; the first run on an H100 found it, where the simulated driver had accepted
        the cookie as the offset)."""
        fd = self._open_gpu_file()
        request = rmapi.NVOS33WithFd(params=rmapi.NVOS33Parameters(hClient=self.root, hDevice=parent, hMemory=memory,
                                                                    offset=0, length=size, flags=flags), fd=fd)
        self._escape(self.control_fd, rmapi.NV_ESC_RM_MAP_MEMORY, request)
        if request.params.status:
            raise NVDriverError(f"{self.name}: mapping RM memory {memory:#x} failed with "
                                f"{rmapi.status_name(request.params.status)}")
        return fd, int(request.params.pLinearAddress)

    def _map_registers(self, handle: int, size: int) -> MutableSequence[int]:
        fd, _cookie = self._map_request(handle, size, self.subdevice, flags=2)  # NVOS33 ACCESS write only
        return self.driver.map_registers(fd, size, 0)

    # ---- memory ----

    def allocate(self, size: int, purpose: str) -> int:
        """The GPU (and CPU) address of `size` new bytes of video memory."""
        page = (2 << 20) if size >= (2 << 20) else 0x1000
        size = -(-max(size, 1) // page) * page
        address = self.driver.reserve(size)
        handle = self.rm_alloc(self.device, rmapi.NV01_MEMORY_LOCAL_USER, rmapi.NVMemoryAllocationParams(
            owner=self.root, type=rmapi.NVOS32_TYPE_IMAGE, size=size, alignment=page,
            flags=rmapi.NVOS32_ALLOC_FLAGS_ALIGNMENT_FORCE | rmapi.NVOS32_ALLOC_FLAGS_MAP_NOT_REQUIRED |
            rmapi.NVOS32_ALLOC_FLAGS_PERSISTENT_VIDMEM,
            attr=rmapi.NVOS32_ATTR_LOCATION_VIDMEM | rmapi.NVOS32_ATTR_PHYSICALITY_NONCONTIGUOUS,
            attr2=rmapi.NVOS32_ATTR2_GPU_CACHEABLE_YES))
        self._uvm(rmapi.UVM_CREATE_EXTERNAL_RANGE, rmapi.UVMCreateExternalRangeParams(base=address, length=size))
        mapping = rmapi.UVMMapExternalAllocationParams(base=address, length=size, offset=0, gpuAttributesCount=1,
                                                       rmCtrlFd=self.control_fd, hClient=self.root, hMemory=handle)
        mapping.perGpuAttributes[0].gpuUuid = (ctypes.c_uint8 * 16)(*self.uuid)
        self._uvm(rmapi.UVM_MAP_EXTERNAL_ALLOCATION, mapping)
        fd, _cookie = self._map_request(handle, size, self.device)
        view = self.driver.map_memory(fd, size, 0, address)
        self.allocations[address] = GPUAllocation(handle, size, view, fd, purpose)
        bisect.insort(self.starts, address)
        return address

    def free(self, address: int) -> None:
        """Release the allocation at `address`."""
        allocation = self.allocations.pop(address, None)
        if allocation is None:
            raise ValueError(f"{self.name}: free of {address:#x}, which is not the start of an allocation")
        self.starts.remove(address)
        self._uvm(rmapi.UVM_FREE, rmapi.UVMFreeParams(base=address, length=allocation.size))
        self.rm_free(allocation.handle)
        self.driver.close(allocation.fd)
        self.driver.release(address, allocation.size)

    def view(self, address: int, size: int) -> memoryview:
        """The CPU's view of `size` bytes at GPU address `address`."""
        position = bisect.bisect_right(self.starts, address) - 1
        if position >= 0:
            start = self.starts[position]
            allocation = self.allocations[start]
            if address + size <= start + allocation.size:
                return allocation.view[address - start:address - start + size]
        raise MemoryError(f"{self.name}: {size} bytes at {address:#x} are outside every allocation")

    def handle_of(self, address: int) -> tuple[int, int]:
        """(RM handle, offset) of the allocation holding `address`."""
        position = bisect.bisect_right(self.starts, address) - 1
        if position < 0:
            raise MemoryError(f"{self.name}: {address:#x} is outside every allocation")
        start = self.starts[position]
        return self.allocations[start].handle, address - start

    def poll(self) -> None:
        """Let the GPU make progress (the mock's step; nothing on hardware)."""
        self.driver.poll()

    # ---- channels ----

    def _channel(self, name: str, engine_class: int, subchannel: int) -> Channel:
        channel = Channel(self, self, f"{self.name} {name}")
        userd, userd_offset = self.handle_of(channel.userd)
        parameters = rmapi.NVChannelAllocParams(gpFifoOffset=channel.gpfifo, gpFifoEntries=channel.gpfifo_entries,
                                                hContextShare=self.context_share,
                                                engineType=rmapi.NV2080_ENGINE_TYPE_GRAPHICS, subDeviceId=1)
        parameters.hUserdMemory[0] = userd
        parameters.userdOffset[0] = userd_offset
        handle = self.rm_alloc(self.channel_group, self.gpfifo_class, parameters)
        self.rm_alloc(handle, engine_class, rmapi.NVB0B5AllocationParameters(version=1) if subchannel ==
                      nvcmd.SUBCHANNEL_COPY else None)
        token = rmapi.NVC36FWorkSubmitTokenParams(workSubmitToken=0xFFFFFFFF)
        self.rm_control(handle, rmapi.NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN, token)
        self.tokens[id(channel)] = int(token.workSubmitToken)
        channel.submit([nvcmd.method_header(subchannel, nvcmd.NVC6C0_SET_OBJECT, 1), engine_class])
        return channel

    def _set_up_compute(self) -> None:
        """Bind the compute class's local and shared memory windows and its local memory (what every launch
        needs before the first QMD)."""
        local_bytes = LOCAL_MEMORY_PER_TPC * TPC_SLOTS
        self.local_memory = self.allocate(local_bytes, "shader local memory")
        header, sub = nvcmd.method_header, nvcmd.SUBCHANNEL_COMPUTE
        shared = self.shared_window
        words = [header(sub, nvcmd.NVC6C0_SET_SHADER_LOCAL_MEMORY_WINDOW_A, 2), self.local_window >> 32,
                 self.local_window & 0xFFFFFFFF,
                 header(sub, nvcmd.NVC6C0_SET_SHADER_SHARED_MEMORY_WINDOW_A, 2), shared >> 32, shared & 0xFFFFFFFF,
                 header(sub, nvcmd.NVC6C0_SET_SHADER_LOCAL_MEMORY_A, 2), self.local_memory >> 32,
                 self.local_memory & 0xFFFFFFFF,
                 header(sub, nvcmd.NVC6C0_SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_A, 3), LOCAL_MEMORY_PER_TPC >> 32,
                 LOCAL_MEMORY_PER_TPC & 0xFFFFFFFF, 0xFF]
        self.channels["compute"].submit(words)

    def ring(self, channel: Channel) -> None:
        """The doorbell: the channel's work submit token into the usermode page."""
        self.doorbell[rmapi.USERMODE_NOTIFY_CHANNEL_PENDING // 4] = self.tokens.get(id(channel), 0)

    def close(self) -> None:
        """Free the RM client (the RM frees everything under it) and close the descriptors."""
        try:
            self.rm_free(self.root)
        except OSError as error:
            if error.errno != errno.EBADF:
                raise
        for fd in (self.gpu_fd, self.uvm_mm_fd, self.uvm_fd, self.control_fd):
            self.driver.close(fd)


def open_kernel_driver(device: str, indices: tuple[int, ...]) -> NVKernelGPU:
    """The NV interface (DEV=NV+NV): GPU `indices[0]` (else the device's index) through the kernel driver."""
    if not os.path.exists("/dev/nvidiactl"):
        raise RuntimeError("/dev/nvidiactl does not exist: the NVIDIA kernel driver is not loaded")
    index = indices[0] if indices else int(device.split(":")[1]) if ":" in device and \
        device.split(":")[1].isdigit() else 0
    return NVKernelGPU(LinuxKernelDriver(), index, device)
