"""The NVIDIA kernel driver's user interface, as ctypes layouts: the resource manager (RM) escapes on /dev/nvidiactl
and /dev/nvidiaN, and the unified-memory (UVM) ioctls on /dev/nvidia-uvm.

Layouts, numbers and class ids follow NVIDIA's public headers in open-gpu-kernel-modules (src/common/sdk/nvidia/
inc/nvos.h, alloc/alloc_channel.h, class/*.h, ctrl/*.h; kernel-open/common/inc/nv-ioctl*.h, nv_escape.h;
kernel-open/nvidia-uvm/uvm_ioctl.h), written out here for the fields this plugin uses. The RM checks `paramsSize`
against its own layout, so a driver whose layouts moved answers with an error status instead of misreading.
"""
from __future__ import annotations

import ctypes

# ---- ioctl numbers ----
NV_IOCTL_MAGIC = ord("F")
NV_ESC_CARD_INFO = 200
NV_ESC_REGISTER_FD = 201
NV_ESC_ATTACH_GPUS_TO_FD = 212
NV_ESC_RM_ALLOC_MEMORY = 0x27
NV_ESC_RM_FREE = 0x29
NV_ESC_RM_CONTROL = 0x2A
NV_ESC_RM_ALLOC = 0x2B
NV_ESC_RM_MAP_MEMORY = 0x4E
NV_ESC_RM_UNMAP_MEMORY = 0x4F

UVM_INITIALIZE = 0x30000001
UVM_REGISTER_GPU_VASPACE = 25
UVM_REGISTER_CHANNEL = 27
UVM_MAP_EXTERNAL_ALLOCATION = 33
UVM_FREE = 34
UVM_REGISTER_GPU = 37
UVM_CREATE_EXTERNAL_RANGE = 73
UVM_MM_INITIALIZE = 75


def nv_ioctl_request(escape: int, size: int) -> int:
    """The request number of RM escape `escape` with a `size`-byte argument (Linux _IOWR('F', escape, size))."""
    if not 0 <= size < (1 << 14):
        raise ValueError(f"an NV ioctl argument is at most 16383 bytes, got {size}")
    return (3 << 30) | (size << 16) | (NV_IOCTL_MAGIC << 8) | escape


def split_request(request: int) -> tuple[int, int, int]:
    """(magic, escape, size) of an ioctl request number."""
    return (request >> 8) & 0xFF, request & 0xFF, (request >> 16) & 0x3FFF


# ---- RM classes ----
NV01_ROOT_CLIENT = 0x41
NV01_DEVICE_0 = 0x80
NV20_SUBDEVICE_0 = 0x2080
NV01_MEMORY_SYSTEM = 0x3E
NV01_MEMORY_LOCAL_USER = 0x40
NV01_MEMORY_VIRTUAL = 0x70
NV01_MEMORY_SYSTEM_OS_DESCRIPTOR = 0x71
FERMI_VASPACE_A = 0x90F1
FERMI_CONTEXT_SHARE_A = 0x9067
KEPLER_CHANNEL_GROUP_A = 0xA06C
TURING_USERMODE_A = 0xC461
HOPPER_USERMODE_A = 0xC661
AMPERE_CHANNEL_GPFIFO_A = 0xC56F
HOPPER_CHANNEL_GPFIFO_A = 0xC86F
AMPERE_COMPUTE_A = 0xC6C0
AMPERE_COMPUTE_B = 0xC7C0
ADA_COMPUTE_A = 0xC9C0
HOPPER_COMPUTE_A = 0xCBC0
AMPERE_DMA_COPY_A = 0xC6B5
AMPERE_DMA_COPY_B = 0xC7B5
HOPPER_DMA_COPY_A = 0xC8B5

# ---- RM controls ----
NV0000_CTRL_CMD_GPU_GET_ID_INFO_V2 = 0x205
NV2080_CTRL_CMD_GPU_GET_GID_INFO = 0x2080014A
NV2080_CTRL_CMD_MC_GET_ARCH_INFO = 0x20801701
NVA06C_CTRL_CMD_GPFIFO_SCHEDULE = 0xA06C0101
NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN = 0xC36F0108
NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_BINARY = 2
NV2080_CTRL_MC_ARCH_INFO_ARCHITECTURE_GA100 = 0x170
NV2080_CTRL_MC_ARCH_INFO_ARCHITECTURE_GH100 = 0x180
NV2080_CTRL_MC_ARCH_INFO_ARCHITECTURE_AD100 = 0x190
NV2080_ENGINE_TYPE_GRAPHICS = 1

# ---- memory attributes (NVOS32_ATTR*, NVOS32_ALLOC_FLAGS*) ----
NVOS32_TYPE_IMAGE = 0
NVOS32_ATTR_LOCATION_VIDMEM = 0 << 25
NVOS32_ATTR_LOCATION_PCI = 1 << 25
NVOS32_ATTR_PHYSICALITY_CONTIGUOUS = 2 << 27
NVOS32_ATTR_PHYSICALITY_NONCONTIGUOUS = 1 << 27
NVOS32_ATTR_PAGE_SIZE_HUGE = 3 << 23
NVOS32_ATTR_COHERENCY_CACHED = 1 << 29
NVOS32_ATTR2_GPU_CACHEABLE_YES = 1 << 2  # ATTR2 GPU_CACHEABLE is bits 3:2
NVOS32_ALLOC_FLAGS_ALIGNMENT_FORCE = 1 << 8
NVOS32_ALLOC_FLAGS_MAP_NOT_REQUIRED = 1 << 10
NVOS32_ALLOC_FLAGS_PERSISTENT_VIDMEM = 1 << 11
NVOS02_FLAGS_LOCATION_PCI = 0 << 8
NVOS02_FLAGS_COHERENCY_CACHED = 1 << 12
NVOS02_FLAGS_MAPPING_NO_MAP = 1 << 30

UVM_MAX_GPUS = 256
UVM_GPU_MAPPING_TYPE_DEFAULT = 0
UVM_GPU_CACHING_TYPE_DEFAULT = 0

NV_OK = 0
NV_ERR_INVALID_ARGUMENT = 0x1F
NV_ERR_INVALID_CLASS = 0x22
NV_ERR_INVALID_OBJECT_HANDLE = 0x33
NV_ERR_INVALID_OBJECT_PARENT = 0x39
NV_ERR_INVALID_PARAM_STRUCT = 0x3B
NV_ERR_NOT_SUPPORTED = 0x56
NV_ERR_INVALID_ADDRESS = 0x1E
NV_ERR_NO_MEMORY = 0x51


class _Struct(ctypes.Structure):
    """A C struct with the platform's natural alignment (NV_ALIGN_BYTES(8) on 64-bit fields is the default)."""


class NVOS21Parameters(_Struct):
    """NV_ESC_RM_ALLOC: a new object of `hClass` under `hObjectParent`."""

    _fields_ = [("hRoot", ctypes.c_uint32), ("hObjectParent", ctypes.c_uint32), ("hObjectNew", ctypes.c_uint32),
                ("hClass", ctypes.c_uint32), ("pAllocParms", ctypes.c_uint64), ("paramsSize", ctypes.c_uint32),
                ("status", ctypes.c_uint32)]


class NVOS00Parameters(_Struct):
    """NV_ESC_RM_FREE."""

    _fields_ = [("hRoot", ctypes.c_uint32), ("hObjectParent", ctypes.c_uint32), ("hObjectOld", ctypes.c_uint32),
                ("status", ctypes.c_uint32)]


class NVOS54Parameters(_Struct):
    """NV_ESC_RM_CONTROL: command `cmd` on object `hObject`."""

    _fields_ = [("hClient", ctypes.c_uint32), ("hObject", ctypes.c_uint32), ("cmd", ctypes.c_uint32),
                ("flags", ctypes.c_uint32), ("params", ctypes.c_uint64), ("paramsSize", ctypes.c_uint32),
                ("status", ctypes.c_uint32)]


class NVOS02Parameters(_Struct):
    """NV_ESC_RM_ALLOC_MEMORY (host memory the caller already mapped: NV01_MEMORY_SYSTEM_OS_DESCRIPTOR)."""

    _fields_ = [("hRoot", ctypes.c_uint32), ("hObjectParent", ctypes.c_uint32), ("hObjectNew", ctypes.c_uint32),
                ("hClass", ctypes.c_uint32), ("flags", ctypes.c_uint32), ("pMemory", ctypes.c_uint64),
                ("limit", ctypes.c_uint64), ("status", ctypes.c_uint32)]


class NVOS02WithFd(_Struct):
    """nv_ioctl_nvos02_parameters_with_fd."""

    _fields_ = [("params", NVOS02Parameters), ("fd", ctypes.c_int32)]


class NVOS33Parameters(_Struct):
    """NV_ESC_RM_MAP_MEMORY: a CPU mapping of a memory object (the answer is the mmap offset)."""

    _fields_ = [("hClient", ctypes.c_uint32), ("hDevice", ctypes.c_uint32), ("hMemory", ctypes.c_uint32),
                ("offset", ctypes.c_uint64), ("length", ctypes.c_uint64), ("pLinearAddress", ctypes.c_uint64),
                ("status", ctypes.c_uint32), ("flags", ctypes.c_uint32)]


class NVOS33WithFd(_Struct):
    """nv_ioctl_nvos33_parameters_with_fd: the mapping is made on `fd`, which the caller then mmaps."""

    _fields_ = [("params", NVOS33Parameters), ("fd", ctypes.c_int32)]


class NVRegisterFd(_Struct):
    """nv_ioctl_register_fd_t: ties a /dev/nvidiaN descriptor to the control descriptor's client."""

    _fields_ = [("ctl_fd", ctypes.c_int32)]


class NVPciInfo(_Struct):
    """nv_pci_info_t."""

    _fields_ = [("domain", ctypes.c_uint32), ("bus", ctypes.c_uint8), ("slot", ctypes.c_uint8),
                ("function", ctypes.c_uint8), ("vendor_id", ctypes.c_uint16), ("device_id", ctypes.c_uint16)]


class NVCardInfo(_Struct):
    """nv_ioctl_card_info_t: one entry per GPU slot (NV_ESC_CARD_INFO fills an array of them)."""

    _fields_ = [("valid", ctypes.c_uint32), ("pci_info", NVPciInfo), ("gpu_id", ctypes.c_uint32),
                ("interrupt_line", ctypes.c_uint16), ("reg_address", ctypes.c_uint64), ("reg_size", ctypes.c_uint64),
                ("fb_address", ctypes.c_uint64), ("fb_size", ctypes.c_uint64), ("minor_number", ctypes.c_uint32),
                ("dev_name", ctypes.c_uint8 * 10)]


CARD_SLOTS = 32


class NV0080AllocParameters(_Struct):
    """NV01_DEVICE_0."""

    _fields_ = [("deviceId", ctypes.c_uint32), ("hClientShare", ctypes.c_uint32), ("hTargetClient", ctypes.c_uint32),
                ("hTargetDevice", ctypes.c_uint32), ("flags", ctypes.c_uint32), ("vaSpaceSize", ctypes.c_uint64),
                ("vaStartInternal", ctypes.c_uint64), ("vaLimitInternal", ctypes.c_uint64), ("vaMode", ctypes.c_uint32)]


class NV2080AllocParameters(_Struct):
    """NV20_SUBDEVICE_0."""

    _fields_ = [("subDeviceId", ctypes.c_uint32)]


class NVHopperUsermodeParameters(_Struct):
    """HOPPER_USERMODE_A: the doorbell page (NV_HOPPER_USERMODE_A_PARAMS)."""

    _fields_ = [("bBar1Mapping", ctypes.c_uint8), ("bPriv", ctypes.c_uint8)]


class NVVaspaceAllocationParameters(_Struct):
    """FERMI_VASPACE_A (NV_VASPACE_ALLOCATION_PARAMETERS)."""

    _fields_ = [("index", ctypes.c_uint32), ("flags", ctypes.c_uint32), ("vaSize", ctypes.c_uint64),
                ("vaStartInternal", ctypes.c_uint64), ("vaLimitInternal", ctypes.c_uint64),
                ("bigPageSize", ctypes.c_uint32), ("vaBase", ctypes.c_uint64)]


NV_VASPACE_ALLOCATION_FLAGS_ENABLE_PAGE_FAULTING = 1 << 2
NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED = 1 << 3


class NVChannelGroupAllocationParameters(_Struct):
    """KEPLER_CHANNEL_GROUP_A (NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS)."""

    _fields_ = [("hObjectError", ctypes.c_uint32), ("hObjectEccError", ctypes.c_uint32),
                ("hVASpace", ctypes.c_uint32), ("engineType", ctypes.c_uint32),
                ("bIsCallingContextVgpuPlugin", ctypes.c_uint8)]


class NVCtxshareAllocationParameters(_Struct):
    """FERMI_CONTEXT_SHARE_A (NV_CTXSHARE_ALLOCATION_PARAMETERS)."""

    _fields_ = [("hVASpace", ctypes.c_uint32), ("flags", ctypes.c_uint32), ("subctxId", ctypes.c_uint32)]


NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_ASYNC = 2


class NVMemoryDescParams(_Struct):
    """NV_MEMORY_DESC_PARAMS."""

    _fields_ = [("base", ctypes.c_uint64), ("size", ctypes.c_uint64), ("addressSpace", ctypes.c_uint32),
                ("cacheAttrib", ctypes.c_uint32)]


NV_MAX_SUBDEVICES = 8


class NVChannelAllocParams(_Struct):
    """NV_CHANNEL_ALLOC_PARAMS (a GPFIFO channel: its ring's GPU address and size, its USERD memory)."""

    _fields_ = [("hObjectError", ctypes.c_uint32), ("hObjectBuffer", ctypes.c_uint32),
                ("gpFifoOffset", ctypes.c_uint64), ("gpFifoEntries", ctypes.c_uint32), ("flags", ctypes.c_uint32),
                ("hContextShare", ctypes.c_uint32), ("hVASpace", ctypes.c_uint32),
                ("hUserdMemory", ctypes.c_uint32 * NV_MAX_SUBDEVICES),
                ("userdOffset", ctypes.c_uint64 * NV_MAX_SUBDEVICES), ("engineType", ctypes.c_uint32),
                ("cid", ctypes.c_uint32), ("subDeviceId", ctypes.c_uint32), ("hObjectEccError", ctypes.c_uint32),
                ("instanceMem", NVMemoryDescParams), ("userdMem", NVMemoryDescParams),
                ("ramfcMem", NVMemoryDescParams), ("mthdbufMem", NVMemoryDescParams),
                ("hPhysChannelGroup", ctypes.c_uint32), ("internalFlags", ctypes.c_uint32),
                ("errorNotifierMem", NVMemoryDescParams), ("eccErrorNotifierMem", NVMemoryDescParams),
                ("ProcessID", ctypes.c_uint32), ("SubProcessID", ctypes.c_uint32),
                ("encryptIv", ctypes.c_uint32 * 3), ("decryptIv", ctypes.c_uint32 * 3),
                ("hmacNonce", ctypes.c_uint32 * 8), ("tpcConfigID", ctypes.c_uint32)]


class NVB0B5AllocationParameters(_Struct):
    """The copy engine classes (NVB0B5_ALLOCATION_PARAMETERS)."""

    _fields_ = [("version", ctypes.c_uint32), ("engineType", ctypes.c_uint32)]


class NVMemoryAllocationParams(_Struct):
    """NV01_MEMORY_LOCAL_USER / NV01_MEMORY_SYSTEM (NV_MEMORY_ALLOCATION_PARAMS)."""

    _fields_ = [("owner", ctypes.c_uint32), ("type", ctypes.c_uint32), ("flags", ctypes.c_uint32),
                ("width", ctypes.c_uint32), ("height", ctypes.c_uint32), ("pitch", ctypes.c_int32),
                ("attr", ctypes.c_uint32), ("attr2", ctypes.c_uint32), ("format", ctypes.c_uint32),
                ("comprCovg", ctypes.c_uint32), ("zcullCovg", ctypes.c_uint32), ("rangeLo", ctypes.c_uint64),
                ("rangeHi", ctypes.c_uint64), ("size", ctypes.c_uint64), ("alignment", ctypes.c_uint64),
                ("offset", ctypes.c_uint64), ("limit", ctypes.c_uint64), ("address", ctypes.c_uint64),
                ("ctagOffset", ctypes.c_uint32), ("hVASpace", ctypes.c_uint32), ("internalflags", ctypes.c_uint32),
                ("tag", ctypes.c_uint32), ("numaNode", ctypes.c_int32)]


class NV0000GetIdInfoV2Params(_Struct):
    """NV0000_CTRL_GPU_GET_ID_INFO_V2_PARAMS: which device instance a GPU id is."""

    _fields_ = [("gpuId", ctypes.c_uint32), ("gpuFlags", ctypes.c_uint32), ("deviceInstance", ctypes.c_uint32),
                ("subDeviceInstance", ctypes.c_uint32), ("sliStatus", ctypes.c_uint32), ("boardId", ctypes.c_uint32),
                ("gpuInstance", ctypes.c_uint32), ("numaId", ctypes.c_int32)]


class NV2080GidInfoParams(_Struct):
    """NV2080_CTRL_GPU_GET_GID_INFO_PARAMS (the GPU's UUID, which UVM names it by)."""

    _fields_ = [("index", ctypes.c_uint32), ("flags", ctypes.c_uint32), ("length", ctypes.c_uint32),
                ("data", ctypes.c_uint8 * 256)]


class NV2080ArchInfoParams(_Struct):
    """NV2080_CTRL_MC_GET_ARCH_INFO_PARAMS."""

    _fields_ = [("architecture", ctypes.c_uint32), ("implementation", ctypes.c_uint32),
                ("revision", ctypes.c_uint32), ("subRevision", ctypes.c_uint8)]


class NVA06CScheduleParams(_Struct):
    """NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS (put a channel group on the runlist)."""

    _fields_ = [("bEnable", ctypes.c_uint8), ("bSkipSubmit", ctypes.c_uint8), ("bSkipEnable", ctypes.c_uint8)]


class NVC36FWorkSubmitTokenParams(_Struct):
    """NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS (what the doorbell is written with)."""

    _fields_ = [("workSubmitToken", ctypes.c_uint32)]


USERMODE_NOTIFY_CHANNEL_PENDING = 0x90
"""The usermode page's doorbell register (NVC361_NOTIFY_CHANNEL_PENDING): write a channel's work submit token."""
USERMODE_PAGE_BYTES = 0x10000


class UVMInitializeParams(_Struct):
    """UVM_INITIALIZE."""

    _fields_ = [("flags", ctypes.c_uint64), ("rmStatus", ctypes.c_uint32)]


UVM_INIT_FLAGS_MULTI_PROCESS_SHARING_MODE = 2


class UVMMmInitializeParams(_Struct):
    """UVM_MM_INITIALIZE: ties a second /dev/nvidia-uvm descriptor to the first (for its mm)."""

    _fields_ = [("uvmFd", ctypes.c_int32), ("rmStatus", ctypes.c_uint32)]


class UVMRegisterGpuParams(_Struct):
    """UVM_REGISTER_GPU."""

    _fields_ = [("gpu_uuid", ctypes.c_uint8 * 16), ("numaEnabled", ctypes.c_uint8), ("numaNodeId", ctypes.c_int32),
                ("rmCtrlFd", ctypes.c_int32), ("hClient", ctypes.c_uint32), ("hSmcPartRef", ctypes.c_uint32),
                ("rmStatus", ctypes.c_uint32)]


class UVMRegisterGpuVaspaceParams(_Struct):
    """UVM_REGISTER_GPU_VASPACE."""

    _fields_ = [("gpuUuid", ctypes.c_uint8 * 16), ("rmCtrlFd", ctypes.c_int32), ("hClient", ctypes.c_uint32),
                ("hVaSpace", ctypes.c_uint32), ("rmStatus", ctypes.c_uint32)]


class UVMCreateExternalRangeParams(_Struct):
    """UVM_CREATE_EXTERNAL_RANGE: reserve [base, base+length) of the shared CPU/GPU address space."""

    _fields_ = [("base", ctypes.c_uint64), ("length", ctypes.c_uint64), ("rmStatus", ctypes.c_uint32)]


class UVMGpuMappingAttributes(_Struct):
    """UvmGpuMappingAttributes."""

    _fields_ = [("gpuUuid", ctypes.c_uint8 * 16), ("gpuMappingType", ctypes.c_uint32),
                ("gpuCachingType", ctypes.c_uint32), ("gpuFormatType", ctypes.c_uint32),
                ("gpuElementBits", ctypes.c_uint32), ("gpuCompressionType", ctypes.c_uint32)]


class UVMMapExternalAllocationParams(_Struct):
    """UVM_MAP_EXTERNAL_ALLOCATION: map RM memory `hMemory` at GPU virtual address `base` (same as the CPU's)."""

    _fields_ = [("base", ctypes.c_uint64), ("length", ctypes.c_uint64), ("offset", ctypes.c_uint64),
                ("perGpuAttributes", UVMGpuMappingAttributes * UVM_MAX_GPUS),
                ("gpuAttributesCount", ctypes.c_uint64), ("rmCtrlFd", ctypes.c_int32), ("hClient", ctypes.c_uint32),
                ("hMemory", ctypes.c_uint32), ("rmStatus", ctypes.c_uint32)]


class UVMFreeParams(_Struct):
    """UVM_FREE."""

    _fields_ = [("base", ctypes.c_uint64), ("length", ctypes.c_uint64), ("rmStatus", ctypes.c_uint32)]


class UVMRegisterChannelParams(_Struct):
    """UVM_REGISTER_CHANNEL (lets UVM service faults of a channel)."""

    _fields_ = [("gpuUuid", ctypes.c_uint8 * 16), ("rmCtrlFd", ctypes.c_int32), ("hClient", ctypes.c_uint32),
                ("hChannel", ctypes.c_uint32), ("base", ctypes.c_uint64), ("length", ctypes.c_uint64),
                ("rmStatus", ctypes.c_uint32)]


def status_name(status: int) -> str:
    """A readable name of an NV_STATUS code (the common ones; others as hex)."""
    names = {NV_OK: "NV_OK", NV_ERR_INVALID_ARGUMENT: "NV_ERR_INVALID_ARGUMENT", NV_ERR_INVALID_CLASS:
             "NV_ERR_INVALID_CLASS", NV_ERR_INVALID_OBJECT_HANDLE: "NV_ERR_INVALID_OBJECT_HANDLE",
             NV_ERR_INVALID_OBJECT_PARENT: "NV_ERR_INVALID_OBJECT_PARENT", NV_ERR_INVALID_PARAM_STRUCT:
             "NV_ERR_INVALID_PARAM_STRUCT", NV_ERR_NOT_SUPPORTED: "NV_ERR_NOT_SUPPORTED",
             NV_ERR_INVALID_ADDRESS: "NV_ERR_INVALID_ADDRESS", NV_ERR_NO_MEMORY: "NV_ERR_NO_MEMORY"}
    return names.get(status, f"NV_STATUS {status:#x}")
