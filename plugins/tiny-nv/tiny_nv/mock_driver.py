"""A simulated NVIDIA kernel driver: the ioctls of /dev/nvidiactl, /dev/nvidiaN and /dev/nvidia-uvm answered on the
MOCK GPU, so that tiny_nv.kernel_driver's NV interface runs unchanged in CI.

The mock reads each request the way the driver does: the ioctl number's size must be the structure's, the RM
alloc parameters are read from the caller's memory at `pAllocParms` with `paramsSize` checked against the class's
layout, handles must exist and each class must sit under the parent class the RM requires, UVM must be initialized
before GPUs, VA spaces and ranges are registered, and memory must be mapped into a created external range. Its
answers go back into the caller's structures. What it models is the resource tree, video memory (host memory here)
at the UVM-mapped addresses, the GPFIFO channels the GPU then runs (tiny_nv.mock.MockGPU decodes them), the work
submit tokens and the usermode doorbell page. It does not model the GPU's page tables, BAR1, interrupts, error
notifiers or anything the interface does not ask for.
"""
from __future__ import annotations

import ctypes
import errno
import mmap
from collections.abc import Callable, MutableSequence
from dataclasses import dataclass, field
from typing import Any, cast

from tiny_nv import rmapi
from tiny_nv.mock import MockGPU

LAZY_BACKING_BYTES = 64 << 20

MOCK_GPU_ID = 0x100
MOCK_UUID = bytes(range(0xA0, 0xB0))
MOCK_MINOR = 0


@dataclass
class RMObject:
    """An object of the resource tree."""

    handle: int
    class_id: int
    parent: int
    state: dict[str, Any] = field(default_factory=dict)


@dataclass
class MockChannelState:
    """What the GPU needs of a GPFIFO channel: its ring, size and USERD address (what MockGPU._run_channel reads)."""

    gpfifo: int
    gpfifo_entries: int
    userd: int
    name: str
    group: int
    classes: set[int] = field(default_factory=set)


_ALLOC_LAYOUTS: dict[int, type[ctypes.Structure] | None] = {
    rmapi.NV01_ROOT_CLIENT: None, rmapi.NV01_DEVICE_0: rmapi.NV0080AllocParameters,
    rmapi.NV20_SUBDEVICE_0: rmapi.NV2080AllocParameters, rmapi.HOPPER_USERMODE_A: rmapi.NVHopperUsermodeParameters,
    rmapi.TURING_USERMODE_A: None, rmapi.FERMI_VASPACE_A: rmapi.NVVaspaceAllocationParameters,
    rmapi.KEPLER_CHANNEL_GROUP_A: rmapi.NVChannelGroupAllocationParameters,
    rmapi.FERMI_CONTEXT_SHARE_A: rmapi.NVCtxshareAllocationParameters,
    rmapi.NV01_MEMORY_LOCAL_USER: rmapi.NVMemoryAllocationParams,
    rmapi.HOPPER_CHANNEL_GPFIFO_A: rmapi.NVChannelAllocParams,
    rmapi.AMPERE_CHANNEL_GPFIFO_A: rmapi.NVChannelAllocParams,
    rmapi.HOPPER_COMPUTE_A: None, rmapi.AMPERE_COMPUTE_B: None, rmapi.ADA_COMPUTE_A: None,
    rmapi.HOPPER_DMA_COPY_A: rmapi.NVB0B5AllocationParameters,
    rmapi.AMPERE_DMA_COPY_B: rmapi.NVB0B5AllocationParameters,
}
_CHANNEL_CLASSES = (rmapi.HOPPER_CHANNEL_GPFIFO_A, rmapi.AMPERE_CHANNEL_GPFIFO_A)
_PARENTS: dict[int, tuple[int, ...]] = {  # class -> the classes its parent may be
    rmapi.NV01_DEVICE_0: (rmapi.NV01_ROOT_CLIENT,), rmapi.NV20_SUBDEVICE_0: (rmapi.NV01_DEVICE_0,),
    rmapi.HOPPER_USERMODE_A: (rmapi.NV20_SUBDEVICE_0,), rmapi.TURING_USERMODE_A: (rmapi.NV20_SUBDEVICE_0,),
    rmapi.FERMI_VASPACE_A: (rmapi.NV01_DEVICE_0,), rmapi.KEPLER_CHANNEL_GROUP_A: (rmapi.NV01_DEVICE_0,),
    rmapi.FERMI_CONTEXT_SHARE_A: (rmapi.KEPLER_CHANNEL_GROUP_A,), rmapi.NV01_MEMORY_LOCAL_USER: (rmapi.NV01_DEVICE_0,),
    rmapi.HOPPER_CHANNEL_GPFIFO_A: (rmapi.KEPLER_CHANNEL_GROUP_A,),
    rmapi.AMPERE_CHANNEL_GPFIFO_A: (rmapi.KEPLER_CHANNEL_GROUP_A,),
    rmapi.HOPPER_COMPUTE_A: _CHANNEL_CLASSES, rmapi.AMPERE_COMPUTE_B: _CHANNEL_CLASSES,
    rmapi.ADA_COMPUTE_A: _CHANNEL_CLASSES, rmapi.HOPPER_DMA_COPY_A: _CHANNEL_CLASSES,
    rmapi.AMPERE_DMA_COPY_B: _CHANNEL_CLASSES,
}
_HOPPER_ONLY = (rmapi.HOPPER_USERMODE_A, rmapi.HOPPER_CHANNEL_GPFIFO_A, rmapi.HOPPER_COMPUTE_A, rmapi.HOPPER_DMA_COPY_A)
_CONTROL_LAYOUTS: dict[int, tuple[type[ctypes.Structure], int]] = {  # command -> (parameters, class of the object)
    rmapi.NV0000_CTRL_CMD_GPU_GET_ID_INFO_V2: (rmapi.NV0000GetIdInfoV2Params, rmapi.NV01_ROOT_CLIENT),
    rmapi.NV2080_CTRL_CMD_MC_GET_ARCH_INFO: (rmapi.NV2080ArchInfoParams, rmapi.NV20_SUBDEVICE_0),
    rmapi.NV2080_CTRL_CMD_GPU_GET_GID_INFO: (rmapi.NV2080GidInfoParams, rmapi.NV20_SUBDEVICE_0),
    rmapi.NVA06C_CTRL_CMD_GPFIFO_SCHEDULE: (rmapi.NVA06CScheduleParams, rmapi.KEPLER_CHANNEL_GROUP_A),
    rmapi.NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN: (rmapi.NVC36FWorkSubmitTokenParams, 0),
}


class RegisterPage(MutableSequence[int]):
    """The usermode page as the CPU sees it: 32-bit registers; a store to the doorbell runs the named channel."""

    def __init__(self, words: int, on_write: Callable[[int, int], None]):
        self.words, self.on_write = [0] * words, on_write

    def __getitem__(self, index: Any) -> Any:
        return self.words[index]

    def __setitem__(self, index: Any, value: Any) -> None:
        self.words[index] = value
        self.on_write(int(index), int(value))

    def __delitem__(self, index: Any) -> None:
        raise TypeError("registers cannot be deleted")

    def __len__(self) -> int:
        return len(self.words)

    def insert(self, index: int, value: int) -> None:
        """Registers are fixed."""
        raise TypeError("registers cannot be inserted")


class MockKernelDriver:
    """The kernel driver of one simulated GPU (`sm`: 90 for Hopper, 80/86/89 for Ampere and Ada)."""

    def __init__(self, sm: int = 90, name: str = "MOCK NV"):
        self.sm, self.name = sm, name
        self.gpu = MockGPU(name)
        self.gpu.sm = sm
        self.files: dict[int, dict[str, Any]] = {}
        self.next_fd = 1000
        self.objects: dict[int, RMObject] = {}
        self.next_handle = 0xCAF00000
        self.reservations: dict[int, int] = {}
        self.next_address = 0x2000000000
        self.uvm_ranges: dict[int, int] = {}
        self.mapped: dict[int, int] = {}  # GPU address -> memory handle
        self.channels_by_token: dict[int, MockChannelState] = {}
        self.pending: list[MockChannelState] = []  # rung before their channel group was scheduled
        self.requests: list[tuple[str, int]] = []  # (file, ioctl number or UVM command) in order, for tests

    # ---- files ----

    def open(self, path: str) -> int:
        """Descriptors of /dev/nvidiactl, /dev/nvidia-uvm and /dev/nvidia0."""
        if path not in ("/dev/nvidiactl", "/dev/nvidia-uvm", f"/dev/nvidia{MOCK_MINOR}"):
            raise FileNotFoundError(errno.ENOENT, f"{self.name}: no such device file", path)
        fd = self.next_fd
        self.next_fd += 1
        self.files[fd] = {"path": path}
        return fd

    def close(self, fd: int) -> None:
        """Close `fd`."""
        if self.files.pop(fd, None) is None:
            raise OSError(errno.EBADF, f"{self.name}: close of {fd}, which is not open")

    def _file(self, fd: int) -> dict[str, Any]:
        if fd not in self.files:
            raise OSError(errno.EBADF, f"{self.name}: fd {fd} is not open")
        return self.files[fd]

    # ---- ioctl ----

    def ioctl(self, fd: int, request: int, argument: ctypes.Structure | ctypes.Array) -> None:
        """Decode and answer one request, writing into `argument` as the driver writes into the caller's memory."""
        file = self._file(fd)
        self.requests.append((file["path"], request))
        if file["path"] == "/dev/nvidia-uvm":
            self._uvm(file, request, argument)
            return
        magic, escape, size = rmapi.split_request(request)
        if magic != rmapi.NV_IOCTL_MAGIC or size != ctypes.sizeof(argument):
            raise OSError(errno.EINVAL, f"{self.name}: ioctl {request:#x} is not an NV escape of this argument's size")
        expected: dict[int, type[Any]] = {
            rmapi.NV_ESC_CARD_INFO: rmapi.NVCardInfo * rmapi.CARD_SLOTS, rmapi.NV_ESC_REGISTER_FD: rmapi.NVRegisterFd,
            rmapi.NV_ESC_RM_ALLOC: rmapi.NVOS21Parameters, rmapi.NV_ESC_RM_CONTROL: rmapi.NVOS54Parameters,
            rmapi.NV_ESC_RM_FREE: rmapi.NVOS00Parameters, rmapi.NV_ESC_RM_MAP_MEMORY: rmapi.NVOS33WithFd}
        if escape not in expected or ctypes.sizeof(expected[escape]) != size:
            raise OSError(errno.EINVAL, f"{self.name}: escape {escape:#x} with {size} bytes is not one the mock knows")
        if escape == rmapi.NV_ESC_CARD_INFO:
            self._card_info(argument)  # type: ignore[arg-type]
        elif escape == rmapi.NV_ESC_REGISTER_FD:
            control = self._file(argument.ctl_fd)  # type: ignore[union-attr]
            if control["path"] != "/dev/nvidiactl":
                raise OSError(errno.EINVAL, f"{self.name}: REGISTER_FD needs a /dev/nvidiactl descriptor")
            file["registered"] = True
        elif escape == rmapi.NV_ESC_RM_ALLOC:
            argument.status = self._alloc(cast(rmapi.NVOS21Parameters, argument))  # type: ignore[union-attr]
        elif escape == rmapi.NV_ESC_RM_CONTROL:
            argument.status = self._control(cast(rmapi.NVOS54Parameters, argument))  # type: ignore[union-attr]
        elif escape == rmapi.NV_ESC_RM_FREE:
            argument.status = self._free(argument.hObjectOld)  # type: ignore[union-attr]
        else:
            argument.params.status = self._map(cast(rmapi.NVOS33WithFd, argument))  # type: ignore[union-attr]

    def _card_info(self, cards: ctypes.Array) -> None:
        for card in cards:
            ctypes.memset(ctypes.addressof(card), 0, ctypes.sizeof(card))
        first = cards[0]
        first.valid, first.gpu_id, first.minor_number = 1, MOCK_GPU_ID, MOCK_MINOR
        first.pci_info.vendor_id, first.pci_info.device_id = 0x10DE, 0x2335

    def _read(self, address: int, size: int, layout: type[ctypes.Structure]) -> ctypes.Structure:
        """The caller's structure at `address` (copy_from_user)."""
        return layout.from_buffer_copy(ctypes.string_at(address, size))

    def _alloc(self, request: rmapi.NVOS21Parameters) -> int:
        class_id = request.hClass
        if class_id not in _ALLOC_LAYOUTS or (class_id in _HOPPER_ONLY and self.sm < 90):
            return rmapi.NV_ERR_INVALID_CLASS
        layout = _ALLOC_LAYOUTS[class_id]
        if (layout is None and request.paramsSize not in (0,)) or \
                (layout is not None and request.paramsSize != ctypes.sizeof(layout)) or \
                (layout is not None and not request.pAllocParms):
            return rmapi.NV_ERR_INVALID_PARAM_STRUCT
        parameters = self._read(request.pAllocParms, request.paramsSize, layout) if layout is not None else None
        if class_id == rmapi.NV01_ROOT_CLIENT:
            handle = self._new_handle()
            self.objects[handle] = RMObject(handle, class_id, 0)
            request.hObjectNew = handle
            return rmapi.NV_OK
        parent = self.objects.get(request.hObjectParent)
        if request.hRoot not in self.objects or parent is None:
            return rmapi.NV_ERR_INVALID_OBJECT_HANDLE
        if parent.class_id not in _PARENTS[class_id]:
            return rmapi.NV_ERR_INVALID_OBJECT_PARENT
        handle = request.hObjectNew or self._new_handle()
        if handle in self.objects:
            return rmapi.NV_ERR_INVALID_OBJECT_HANDLE
        created = RMObject(handle, class_id, parent.handle)
        status = self._create(created, parent, parameters)
        if status == rmapi.NV_OK:
            self.objects[handle] = created
            request.hObjectNew = handle
        return status

    def _create(self, created: RMObject, parent: RMObject, parameters: Any) -> int:
        class_id = created.class_id
        if class_id == rmapi.NV01_MEMORY_LOCAL_USER:
            if parameters.size == 0 or parameters.owner not in self.objects:
                return rmapi.NV_ERR_INVALID_ARGUMENT
            # large allocations (the shader local memory) as anonymous mappings: pages are made when first touched,
            # as on the GPU, instead of zero-filling a gigabyte of host memory up front
            created.state["backing"] = mmap.mmap(-1, parameters.size) if parameters.size >= LAZY_BACKING_BYTES \
                else bytearray(parameters.size)
        elif class_id == rmapi.FERMI_CONTEXT_SHARE_A:
            vaspace = self.objects.get(parameters.hVASpace)
            if vaspace is None or vaspace.class_id != rmapi.FERMI_VASPACE_A:
                return rmapi.NV_ERR_INVALID_OBJECT_HANDLE
            parent.state["context_share"] = created.handle
        elif class_id == rmapi.KEPLER_CHANNEL_GROUP_A and parameters.engineType != rmapi.NV2080_ENGINE_TYPE_GRAPHICS:
            return rmapi.NV_ERR_NOT_SUPPORTED
        elif class_id in _CHANNEL_CLASSES:
            return self._create_channel(created, parent, parameters)
        elif class_id in _PARENTS and _PARENTS[class_id] == _CHANNEL_CLASSES:
            parent.state["channel"].classes.add(class_id)
        return rmapi.NV_OK

    def _create_channel(self, created: RMObject, group: RMObject, parameters: rmapi.NVChannelAllocParams) -> int:
        if parameters.hContextShare != group.state.get("context_share"):
            return rmapi.NV_ERR_INVALID_OBJECT_HANDLE
        userd = self.objects.get(parameters.hUserdMemory[0])
        entries = parameters.gpFifoEntries
        if userd is None or userd.class_id != rmapi.NV01_MEMORY_LOCAL_USER or entries == 0 or entries & (entries - 1):
            return rmapi.NV_ERR_INVALID_ARGUMENT
        userd_address = next((address for address, handle in self.mapped.items() if handle == userd.handle), None)
        if userd_address is None or parameters.gpFifoOffset not in self.mapped and not self._is_mapped(
                parameters.gpFifoOffset, 8 * entries):
            return rmapi.NV_ERR_INVALID_ADDRESS  # the GPU reaches both through the VA space the mock maps
        state = MockChannelState(parameters.gpFifoOffset, entries, userd_address + parameters.userdOffset[0],
                                 f"channel {created.handle:#x}", group.handle)
        created.state["channel"] = state
        created.state["token"] = 0x10 + len(self.channels_by_token)
        self.channels_by_token[created.state["token"]] = state
        return rmapi.NV_OK

    def _is_mapped(self, address: int, size: int) -> bool:
        try:
            self.gpu.view(address, size)
        except MemoryError:
            return False
        return True

    def _control(self, request: rmapi.NVOS54Parameters) -> int:
        target = self.objects.get(request.hObject)
        if request.hClient not in self.objects or target is None:
            return rmapi.NV_ERR_INVALID_OBJECT_HANDLE
        if request.cmd not in _CONTROL_LAYOUTS:
            return rmapi.NV_ERR_NOT_SUPPORTED
        layout, owner_class = _CONTROL_LAYOUTS[request.cmd]
        if request.paramsSize != ctypes.sizeof(layout) or not request.params:
            return rmapi.NV_ERR_INVALID_PARAM_STRUCT
        if owner_class and target.class_id != owner_class or not owner_class and target.class_id not in \
                _CHANNEL_CLASSES:
            return rmapi.NV_ERR_NOT_SUPPORTED
        parameters: Any = self._read(request.params, request.paramsSize, layout)
        if request.cmd == rmapi.NV0000_CTRL_CMD_GPU_GET_ID_INFO_V2:
            if parameters.gpuId != MOCK_GPU_ID:
                return rmapi.NV_ERR_INVALID_ARGUMENT
            parameters.deviceInstance = 0
        elif request.cmd == rmapi.NV2080_CTRL_CMD_MC_GET_ARCH_INFO:
            parameters.architecture = {90: rmapi.NV2080_CTRL_MC_ARCH_INFO_ARCHITECTURE_GH100,
                                       89: rmapi.NV2080_CTRL_MC_ARCH_INFO_ARCHITECTURE_AD100}.get(
                self.sm, rmapi.NV2080_CTRL_MC_ARCH_INFO_ARCHITECTURE_GA100)
            parameters.implementation = 2 if self.sm == 86 else 0
        elif request.cmd == rmapi.NV2080_CTRL_CMD_GPU_GET_GID_INFO:
            if parameters.flags != rmapi.NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_BINARY:
                return rmapi.NV_ERR_NOT_SUPPORTED
            parameters.length = 16
            ctypes.memmove(parameters.data, MOCK_UUID, 16)
        elif request.cmd == rmapi.NVA06C_CTRL_CMD_GPFIFO_SCHEDULE:
            target.state["scheduled"] = bool(parameters.bEnable)
            for waiting in [channel for channel in self.pending if channel.group == target.handle]:
                self.pending.remove(waiting)  # work submitted before the group was on the runlist runs now
                self.gpu.ring(waiting)  # type: ignore[arg-type]
        else:
            parameters.workSubmitToken = target.state["token"]
        ctypes.memmove(request.params, ctypes.addressof(parameters), request.paramsSize)  # copy_to_user
        return rmapi.NV_OK

    def _free(self, handle: int) -> int:
        if handle not in self.objects:
            return rmapi.NV_ERR_INVALID_OBJECT_HANDLE
        for child in [obj.handle for obj in self.objects.values() if obj.parent == handle]:
            self._free(child)
        removed = self.objects.pop(handle)
        if "token" in removed.state:
            self.channels_by_token.pop(removed.state["token"], None)
        return rmapi.NV_OK

    def _map(self, request: rmapi.NVOS33WithFd) -> int:
        parameters = request.params
        memory = self.objects.get(parameters.hMemory)
        if memory is None or parameters.hDevice not in self.objects:
            return rmapi.NV_ERR_INVALID_OBJECT_HANDLE
        target = self._file(request.fd)
        if target["path"] == "/dev/nvidia-uvm" or not target.get("registered"):
            return rmapi.NV_ERR_INVALID_ARGUMENT  # the mapping is made on a registered /dev/nvidiaN descriptor
        if memory.class_id == rmapi.NV01_MEMORY_LOCAL_USER:
            if parameters.offset + parameters.length > len(memory.state["backing"]):
                return rmapi.NV_ERR_INVALID_ARGUMENT
        elif memory.class_id not in (rmapi.HOPPER_USERMODE_A, rmapi.TURING_USERMODE_A):
            return rmapi.NV_ERR_INVALID_ARGUMENT
        cookie = (memory.handle & 0xFFFFF) << 16
        target["mapping"] = (memory, cookie, int(parameters.offset), int(parameters.length))
        parameters.pLinearAddress = cookie
        return rmapi.NV_OK

    def _new_handle(self) -> int:
        self.next_handle += 1
        return self.next_handle

    # ---- UVM ----

    def _uvm(self, file: dict[str, Any], request: int, argument: Any) -> None:
        if request == rmapi.UVM_INITIALIZE:
            file["uvm"] = True
            argument.rmStatus = rmapi.NV_OK
            return
        if request == rmapi.UVM_MM_INITIALIZE:
            source = self.files.get(argument.uvmFd)
            argument.rmStatus = rmapi.NV_OK if source is not None and source.get("uvm") else \
                rmapi.NV_ERR_INVALID_ARGUMENT
            return
        if not file.get("uvm"):
            raise OSError(errno.EINVAL, f"{self.name}: UVM request {request} before UVM_INITIALIZE")
        handlers: dict[int, tuple[type[ctypes.Structure], Callable[[Any], int]]] = {
            rmapi.UVM_REGISTER_GPU: (rmapi.UVMRegisterGpuParams, self._uvm_register_gpu),
            rmapi.UVM_REGISTER_GPU_VASPACE: (rmapi.UVMRegisterGpuVaspaceParams, self._uvm_register_vaspace),
            rmapi.UVM_CREATE_EXTERNAL_RANGE: (rmapi.UVMCreateExternalRangeParams, self._uvm_create_range),
            rmapi.UVM_MAP_EXTERNAL_ALLOCATION: (rmapi.UVMMapExternalAllocationParams, self._uvm_map),
            rmapi.UVM_FREE: (rmapi.UVMFreeParams, self._uvm_free)}
        if request not in handlers or not isinstance(argument, handlers[request][0]):
            raise OSError(errno.EINVAL, f"{self.name}: UVM request {request} is not one the mock knows with this "
                                        "argument")
        argument.rmStatus = handlers[request][1](argument)

    def _uvm_register_gpu(self, argument: rmapi.UVMRegisterGpuParams) -> int:
        if bytes(argument.gpu_uuid) != MOCK_UUID or argument.hClient not in self.objects:
            return rmapi.NV_ERR_INVALID_ARGUMENT
        self.uvm_gpu_registered = True
        return rmapi.NV_OK

    def _uvm_register_vaspace(self, argument: rmapi.UVMRegisterGpuVaspaceParams) -> int:
        vaspace = self.objects.get(argument.hVaSpace)
        if not getattr(self, "uvm_gpu_registered", False) or vaspace is None or \
                vaspace.class_id != rmapi.FERMI_VASPACE_A:
            return rmapi.NV_ERR_INVALID_ARGUMENT
        return rmapi.NV_OK

    def _uvm_create_range(self, argument: rmapi.UVMCreateExternalRangeParams) -> int:
        reserved = self.reservations.get(argument.base)
        if reserved is None or argument.length > reserved:
            return rmapi.NV_ERR_INVALID_ADDRESS  # an external range covers address space the process reserved
        self.uvm_ranges[argument.base] = argument.length
        return rmapi.NV_OK

    def _uvm_map(self, argument: rmapi.UVMMapExternalAllocationParams) -> int:
        memory = self.objects.get(argument.hMemory)
        if argument.base not in self.uvm_ranges or argument.length > self.uvm_ranges[argument.base]:
            return rmapi.NV_ERR_INVALID_ADDRESS
        if memory is None or memory.class_id != rmapi.NV01_MEMORY_LOCAL_USER or argument.gpuAttributesCount != 1 or \
                bytes(argument.perGpuAttributes[0].gpuUuid) != MOCK_UUID:
            return rmapi.NV_ERR_INVALID_ARGUMENT
        backing = memory.state["backing"]
        if argument.offset + argument.length > len(backing):
            return rmapi.NV_ERR_INVALID_ARGUMENT
        self.gpu.map_at(argument.base, backing, f"RM memory {memory.handle:#x}")
        self.mapped[argument.base] = memory.handle
        return rmapi.NV_OK

    def _uvm_free(self, argument: rmapi.UVMFreeParams) -> int:
        if argument.base not in self.uvm_ranges:
            return rmapi.NV_ERR_INVALID_ADDRESS
        del self.uvm_ranges[argument.base]
        if self.mapped.pop(argument.base, None) is not None:
            self.gpu.free(argument.base)
        return rmapi.NV_OK

    # ---- address space and mappings ----

    def reserve(self, size: int) -> int:
        """Addresses nobody else uses (2 MiB aligned, a gap after each range)."""
        address = self.next_address
        self.next_address += -(-size // (2 << 20)) * (2 << 20) + (2 << 20)
        self.reservations[address] = size
        return address

    def release(self, address: int, size: int) -> None:
        """Forget a reservation."""
        self.reservations.pop(address, None)

    def map_memory(self, fd: int, size: int, offset: int, address: int) -> memoryview:
        """The CPU's view of the memory object mapped on `fd` (the same bytes the GPU sees)."""
        memory, cookie, start, length = self._mapping(fd, offset)
        if memory.class_id != rmapi.NV01_MEMORY_LOCAL_USER or size > length:
            raise OSError(errno.EINVAL, f"{self.name}: mmap of {size} bytes does not fit the mapping")
        return memoryview(memory.state["backing"])[start:start + size]

    def map_registers(self, fd: int, size: int, offset: int) -> MutableSequence[int]:
        """The usermode page: a store to its doorbell runs the channel whose token it is."""
        memory, _cookie, _start, _length = self._mapping(fd, offset)
        if memory.class_id not in (rmapi.HOPPER_USERMODE_A, rmapi.TURING_USERMODE_A):
            raise OSError(errno.EINVAL, f"{self.name}: {memory.handle:#x} is not a register page")
        return RegisterPage(size // 4, self._register_write)

    def _mapping(self, fd: int, offset: int) -> tuple[RMObject, int, int, int]:
        # as the kernel module: the descriptor maps what NV_ESC_RM_MAP_MEMORY set up on it, at offset 0 only
        mapping = self._file(fd).get("mapping")
        if mapping is None:
            raise OSError(errno.EINVAL, f"{self.name}: mmap of fd {fd} without NV_ESC_RM_MAP_MEMORY")
        if offset != 0:
            raise OSError(errno.EINVAL, f"{self.name}: mmap of fd {fd} at offset {offset:#x} (the driver takes 0)")
        return mapping  # type: ignore[no-any-return]

    def _register_write(self, index: int, value: int) -> None:
        if index * 4 != rmapi.USERMODE_NOTIFY_CHANNEL_PENDING:
            return
        channel = self.channels_by_token.get(value)
        if channel is None:
            raise ValueError(f"{self.name}: doorbell rung with token {value:#x}, which names no channel")
        if not self.objects[channel.group].state.get("scheduled"):
            if channel not in self.pending:
                self.pending.append(channel)
            return
        self.gpu.ring(channel)  # type: ignore[arg-type]

    def poll(self) -> None:
        """Let the GPU run its channels (a queue stalled on a semaphore the host set moves on)."""
        self.gpu.poll()


def open_mock_driver(device: str, indices: tuple[int, ...]) -> Any:
    """The MOCK interface (DEV=MOCK+NV): the kernel driver interface on a simulated driver and GPU of the
    architecture the device compiles for."""
    from tiny_nv.kernel_driver import NVKernelGPU
    from tiny_nv.target import device_arch
    return NVKernelGPU(MockKernelDriver(int(device_arch(device)[3:]), f"MOCK {device}"), 0, device)
