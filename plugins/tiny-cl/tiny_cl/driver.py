"""The OpenCL driver layer: platforms and devices numbered CL:0, CL:1, ... and one context and queue per device.

Devices are numbered across platforms in the order the ICD loader lists them (platform by platform). Each device
is opened once per process; the renderer factory and the device class share the opened context.
"""
from __future__ import annotations

import atexit
import threading
from dataclasses import dataclass, field
from typing import Any

_LOCK = threading.Lock()
_OPENED: dict[int, OpenedDevice] = {}


def import_pyopencl() -> Any:
    """The pyopencl module, or a RuntimeError saying how to install it."""
    try:
        import pyopencl
    except ImportError as error:
        raise RuntimeError("the CL device needs pyopencl: pip install pyopencl (and an OpenCL driver, e.g. "
                           "pip install pocl-binary-distribution for CPUs)") from error
    return pyopencl


def list_devices() -> list[tuple[Any, Any]]:
    """Every (platform, device) pair the OpenCL platforms report, in CL:N order."""
    pyopencl = import_pyopencl()
    try:
        platforms = pyopencl.get_platforms()
    except pyopencl.Error as error:
        raise RuntimeError(f"no OpenCL platform found ({error}); install an OpenCL driver, e.g. "
                           "pip install pocl-binary-distribution") from error
    return [(platform, device) for platform in platforms for device in platform.get_devices()]


def device_index(name: str) -> int:
    """The device number of a canonical CL name ("CL" -> 0, "CL:2" -> 2)."""
    family, _, index = name.partition(":")
    if family.upper() != "CL" or (index and not index.isdigit()):
        raise ValueError(f"{name!r} is not a CL device name: use CL, CL:0, CL:1, ...")
    return int(index) if index else 0


@dataclass
class OpenedDevice:
    """One opened OpenCL device: its context, in-order profiling queue and the properties codegen and runtime use."""

    index: int
    platform: Any
    device: Any
    context: Any
    queue: Any
    extensions: frozenset[str] = field(default_factory=frozenset)

    @property
    def name(self) -> str:
        """The device name the driver reports."""
        return str(self.device.name).strip()

    @property
    def platform_name(self) -> str:
        """The platform name the driver reports."""
        return str(self.platform.name).strip()

    @property
    def base_address_alignment(self) -> int:
        """The alignment in bytes sub-buffer origins need (CL_DEVICE_MEM_BASE_ADDR_ALIGN is given in bits)."""
        return max(1, int(self.device.mem_base_addr_align) // 8)

    @property
    def identity(self) -> str:
        """Platform, device and driver versions: what a compiled binary depends on."""
        return " | ".join((self.platform_name, str(self.platform.version), self.name, str(self.device.version),
                           str(self.device.driver_version)))

    def describe(self) -> str:
        """One line for messages: 'CL:0 = <device> on <platform> (<version>)'."""
        return f"CL:{self.index} = {self.name} on {self.platform_name} ({str(self.device.version).strip()})"

    def finish(self) -> None:
        """Wait for every command queued on this device."""
        self.queue.finish()


def open_device(name: str) -> OpenedDevice:
    """The opened OpenCL device for the canonical name `name` (opened on first use, then shared)."""
    index = device_index(name)
    with _LOCK:
        opened = _OPENED.get(index)
        if opened is not None:
            return opened
        pyopencl = import_pyopencl()
        found = list_devices()
        if not found:
            raise RuntimeError("the OpenCL platforms report no device; install a driver, e.g. "
                               "pip install pocl-binary-distribution")
        if index >= len(found):
            listed = ", ".join(f"CL:{number} = {device.name.strip()}" for number, (_, device) in enumerate(found))
            raise RuntimeError(f"asked for CL:{index} but OpenCL reports {len(found)} device(s): {listed}")
        platform, device = found[index]
        context = pyopencl.Context([device])
        queue = pyopencl.CommandQueue(context, device,
                                      properties=pyopencl.command_queue_properties.PROFILING_ENABLE)
        extensions = frozenset(str(device.extensions).split())
        opened = OpenedDevice(index, platform, device, context, queue, extensions)
        _OPENED[index] = opened
        return opened


def close_all() -> None:
    """Finish every opened device's queue and forget the devices (run at interpreter exit)."""
    with _LOCK:
        for opened in _OPENED.values():
            try:
                opened.finish()
            except Exception:  # noqa: BLE001 - shutting down: a failing driver must not hide the real exit status
                pass
        _OPENED.clear()


atexit.register(close_all)
