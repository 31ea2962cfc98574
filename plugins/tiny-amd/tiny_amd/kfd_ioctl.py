"""The amdkfd kernel interface (linux/include/uapi/linux/kfd_ioctl.h): the argument structures of the ioctls the KFD
queue device uses, their request numbers and flags. Layouts are the public header's; the host side (tiny_amd.kfd)
and the MOCK kernel driver (tiny_amd.kfd_mock) both read and write these exact bytes.
"""
from __future__ import annotations

import ctypes

KFD_IOCTL_BASE = ord("K")
_IOC_WRITE, _IOC_READ = 1, 2


class GetVersionArgs(ctypes.Structure):
    """kfd_ioctl_get_version_args."""

    _fields_ = [("major_version", ctypes.c_uint32), ("minor_version", ctypes.c_uint32)]


class CreateQueueArgs(ctypes.Structure):
    """kfd_ioctl_create_queue_args (doorbell_offset and queue_id come back from the driver)."""

    _fields_ = [("ring_base_address", ctypes.c_uint64), ("write_pointer_address", ctypes.c_uint64),
                ("read_pointer_address", ctypes.c_uint64), ("doorbell_offset", ctypes.c_uint64),
                ("ring_size", ctypes.c_uint32), ("gpu_id", ctypes.c_uint32), ("queue_type", ctypes.c_uint32),
                ("queue_percentage", ctypes.c_uint32), ("queue_priority", ctypes.c_uint32),
                ("queue_id", ctypes.c_uint32), ("eop_buffer_address", ctypes.c_uint64),
                ("eop_buffer_size", ctypes.c_uint64), ("ctx_save_restore_address", ctypes.c_uint64),
                ("ctx_save_restore_size", ctypes.c_uint32), ("ctl_stack_size", ctypes.c_uint32),
                ("sdma_engine_id", ctypes.c_uint32), ("pad", ctypes.c_uint32)]


class DestroyQueueArgs(ctypes.Structure):
    """kfd_ioctl_destroy_queue_args."""

    _fields_ = [("queue_id", ctypes.c_uint32), ("pad", ctypes.c_uint32)]


class CreateEventArgs(ctypes.Structure):
    """kfd_ioctl_create_event_args (event_id and event_slot_index come back; event_page_offset names the handle of
    the event page for the first signal event)."""

    _fields_ = [("event_page_offset", ctypes.c_uint64), ("event_trigger_data", ctypes.c_uint32),
                ("event_type", ctypes.c_uint32), ("auto_reset", ctypes.c_uint32), ("node_id", ctypes.c_uint32),
                ("event_id", ctypes.c_uint32), ("event_slot_index", ctypes.c_uint32)]


class EventIdArgs(ctypes.Structure):
    """kfd_ioctl_destroy_event_args / set_event_args / reset_event_args."""

    _fields_ = [("event_id", ctypes.c_uint32), ("pad", ctypes.c_uint32)]


class EventData(ctypes.Structure):
    """kfd_event_data: a 32-byte union of exception or signal data, the extension word, the event id."""

    _fields_ = [("event_specific", ctypes.c_uint8 * 32), ("kfd_event_data_ext", ctypes.c_uint64),
                ("event_id", ctypes.c_uint32), ("pad", ctypes.c_uint32)]


class WaitEventsArgs(ctypes.Structure):
    """kfd_ioctl_wait_events_args (timeout in milliseconds; wait_result comes back)."""

    _fields_ = [("events_ptr", ctypes.c_uint64), ("num_events", ctypes.c_uint32), ("wait_for_all", ctypes.c_uint32),
                ("timeout", ctypes.c_uint32), ("wait_result", ctypes.c_uint32)]


class AcquireVMArgs(ctypes.Structure):
    """kfd_ioctl_acquire_vm_args: the render node's file descriptor becomes this process's GPU address space."""

    _fields_ = [("drm_fd", ctypes.c_uint32), ("gpu_id", ctypes.c_uint32)]


class AllocMemoryArgs(ctypes.Structure):
    """kfd_ioctl_alloc_memory_of_gpu_args (handle and mmap_offset come back)."""

    _fields_ = [("va_addr", ctypes.c_uint64), ("size", ctypes.c_uint64), ("handle", ctypes.c_uint64),
                ("mmap_offset", ctypes.c_uint64), ("gpu_id", ctypes.c_uint32), ("flags", ctypes.c_uint32)]


class FreeMemoryArgs(ctypes.Structure):
    """kfd_ioctl_free_memory_of_gpu_args."""

    _fields_ = [("handle", ctypes.c_uint64)]


class MapMemoryArgs(ctypes.Structure):
    """kfd_ioctl_map_memory_to_gpu_args / unmap_memory_from_gpu_args (device_ids_array_ptr: a host array of
    gpu_ids; n_success comes back)."""

    _fields_ = [("handle", ctypes.c_uint64), ("device_ids_array_ptr", ctypes.c_uint64),
                ("n_devices", ctypes.c_uint32), ("n_success", ctypes.c_uint32)]


def _request(direction: int, number: int, structure: type[ctypes.Structure]) -> int:
    """The ioctl request word: direction in bits 31:30, argument size in 29:16, 'K' in 15:8, the number in 7:0."""
    return (direction << 30) | (ctypes.sizeof(structure) << 16) | (KFD_IOCTL_BASE << 8) | number


GET_VERSION = _request(_IOC_READ, 0x01, GetVersionArgs)
CREATE_QUEUE = _request(_IOC_READ | _IOC_WRITE, 0x02, CreateQueueArgs)
DESTROY_QUEUE = _request(_IOC_READ | _IOC_WRITE, 0x03, DestroyQueueArgs)
CREATE_EVENT = _request(_IOC_READ | _IOC_WRITE, 0x08, CreateEventArgs)
DESTROY_EVENT = _request(_IOC_WRITE, 0x09, EventIdArgs)
SET_EVENT = _request(_IOC_WRITE, 0x0A, EventIdArgs)
WAIT_EVENTS = _request(_IOC_READ | _IOC_WRITE, 0x0C, WaitEventsArgs)
ACQUIRE_VM = _request(_IOC_WRITE, 0x15, AcquireVMArgs)
ALLOC_MEMORY_OF_GPU = _request(_IOC_READ | _IOC_WRITE, 0x16, AllocMemoryArgs)
FREE_MEMORY_OF_GPU = _request(_IOC_WRITE, 0x17, FreeMemoryArgs)
MAP_MEMORY_TO_GPU = _request(_IOC_READ | _IOC_WRITE, 0x18, MapMemoryArgs)
UNMAP_MEMORY_FROM_GPU = _request(_IOC_READ | _IOC_WRITE, 0x19, MapMemoryArgs)

REQUEST_NAMES = {GET_VERSION: "GET_VERSION", CREATE_QUEUE: "CREATE_QUEUE", DESTROY_QUEUE: "DESTROY_QUEUE",
                 CREATE_EVENT: "CREATE_EVENT", DESTROY_EVENT: "DESTROY_EVENT", SET_EVENT: "SET_EVENT",
                 WAIT_EVENTS: "WAIT_EVENTS", ACQUIRE_VM: "ACQUIRE_VM", ALLOC_MEMORY_OF_GPU: "ALLOC_MEMORY_OF_GPU",
                 FREE_MEMORY_OF_GPU: "FREE_MEMORY_OF_GPU", MAP_MEMORY_TO_GPU: "MAP_MEMORY_TO_GPU",
                 UNMAP_MEMORY_FROM_GPU: "UNMAP_MEMORY_FROM_GPU"}
ARGUMENT_TYPES: dict[int, type[ctypes.Structure]] = {
    GET_VERSION: GetVersionArgs, CREATE_QUEUE: CreateQueueArgs, DESTROY_QUEUE: DestroyQueueArgs,
    CREATE_EVENT: CreateEventArgs, DESTROY_EVENT: EventIdArgs, SET_EVENT: EventIdArgs, WAIT_EVENTS: WaitEventsArgs,
    ACQUIRE_VM: AcquireVMArgs, ALLOC_MEMORY_OF_GPU: AllocMemoryArgs, FREE_MEMORY_OF_GPU: FreeMemoryArgs,
    MAP_MEMORY_TO_GPU: MapMemoryArgs, UNMAP_MEMORY_FROM_GPU: MapMemoryArgs}

# queue types
QUEUE_TYPE_COMPUTE, QUEUE_TYPE_SDMA, QUEUE_TYPE_COMPUTE_AQL = 0, 1, 2
MAX_QUEUE_PERCENTAGE, MAX_QUEUE_PRIORITY = 100, 15

# memory flags
ALLOC_VRAM, ALLOC_GTT, ALLOC_DOORBELL, ALLOC_USERPTR = 1 << 0, 1 << 1, 1 << 2, 1 << 4
ALLOC_UNCACHED, ALLOC_COHERENT, ALLOC_AQL_QUEUE_MEM = 1 << 25, 1 << 26, 1 << 27
ALLOC_NO_SUBSTITUTE, ALLOC_PUBLIC, ALLOC_EXECUTABLE, ALLOC_WRITABLE = 1 << 28, 1 << 29, 1 << 30, 1 << 31

# events
EVENT_SIGNAL = 0
WAIT_COMPLETE, WAIT_TIMEOUT, WAIT_FAIL = 0, 1, 2
SIGNAL_EVENT_LIMIT = 4096
"""Slots of the event page: 8 bytes each, UNSIGNALED_EVENT_SLOT until the GPU writes an event id there."""
UNSIGNALED_EVENT_SLOT = (1 << 64) - 1
DOORBELL_PAGE_BYTES = 0x2000
