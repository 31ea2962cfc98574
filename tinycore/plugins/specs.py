"""What the hooks return: small frozen descriptions whose code lives behind import-path strings.

Nothing in this module imports a plugin's heavy code. An import path is written `"package.module:attribute"`
and resolved with `load_object` only when the thing it names is needed (a device is opened, a probe is run).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


def load_object(import_path: str) -> Any:
    """The object named by `import_path` ("package.module:attribute.sub"), importing its module.

    Raises ImportError naming the path when the module or the attribute is missing.
    """
    module_name, separator, attribute_path = import_path.partition(":")
    if not separator or not module_name or not attribute_path:
        raise ValueError(f"import path {import_path!r} is not of the form 'package.module:attribute'")
    module = importlib.import_module(module_name)
    value: Any = module
    for attribute in attribute_path.split("."):
        try:
            value = getattr(value, attribute)
        except AttributeError:
            raise ImportError(f"{import_path!r}: module {module_name!r} has no attribute {attribute_path!r}") from None
    return value


def _check_import_path(kind: str, field_name: str, value: str | None, optional: bool = False) -> None:
    """Raise a clear error when `value` is not a 'module:attribute' string."""
    if value is None and optional:
        return
    if not isinstance(value, str) or value.count(":") != 1 or not all(value.split(":")):
        raise ValueError(f"{kind}.{field_name} must be an import path 'package.module:attribute', got {value!r}")


@dataclass(frozen=True)
class DeviceSpec:
    """A device a plugin provides.

    name: the device family, upper case ("CPU", "CL"); opened as `Device["CL"]`, `Device["CL:1"]`, ...
    priority: higher wins when the default device is chosen; a negative priority is never chosen by default
      (the device is only opened by name, e.g. DISK).
    device_class: import path of the device class; the registry calls `device_class(canonical_name)`.
    description: one line for `tiny devices`.
    probe: optional import path of a cheap function `probe() -> (ok: bool, reason: str, count: int)` saying
      whether the hardware or toolchain is present, without opening the device. It must not hang or raise.
    """

    name: str
    priority: int
    device_class: str
    description: str = ""
    probe: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or self.name != self.name.upper() or ":" in self.name:
            raise ValueError(f"DeviceSpec.name must be a non-empty upper-case name without ':', got {self.name!r}")
        if not isinstance(self.priority, int):
            raise ValueError(f"DeviceSpec.priority must be an int, got {self.priority!r}")
        _check_import_path("DeviceSpec", "device_class", self.device_class)
        _check_import_path("DeviceSpec", "probe", self.probe, optional=True)


@dataclass(frozen=True)
class RendererSpec:
    """A renderer (and its compiler) for a device.

    name: upper case, selected with `DEV=DEVICE:NAME` ("C", "LLVM", "PTX").
    factory: import path of `factory(device: str, arch: str | None) -> (renderer, compiler)`; it raises when
      the renderer cannot be built here (a missing compiler, library or unsupported arch), with the reason.
    probe: optional import path of a cheap function `probe() -> (ok: bool, reason: str)` saying whether what the
      renderer needs (a library, a compiler) is installed, without constructing it; the reason says what to install
      when it is not. `tiny devices` shows an unavailable renderer with that reason, and a DEV naming it is refused.
      It must not hang or raise.
    """

    name: str
    factory: str
    description: str = ""
    probe: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or self.name != self.name.upper() or ":" in self.name:
            raise ValueError(f"RendererSpec.name must be a non-empty upper-case name without ':', got {self.name!r}")
        _check_import_path("RendererSpec", "factory", self.factory)
        _check_import_path("RendererSpec", "probe", self.probe, optional=True)


@dataclass(frozen=True)
class InterfaceSpec:
    """A way to reach a device's hardware (a driver API, a kernel interface, a mock).

    name: upper case, selected with `DEV=NAME+DEVICE` or `DEV=NAME:INDICES+DEVICE`.
    factory: import path of `factory(device: str, indices: tuple[int, ...]) -> interface object`.
    is_mock: a mock is used only when DEV names it, never as a fallback.
    """

    name: str
    factory: str
    is_mock: bool = False
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or self.name != self.name.upper() or ":" in self.name:
            raise ValueError(f"InterfaceSpec.name must be a non-empty upper-case name without ':', got {self.name!r}")
        _check_import_path("InterfaceSpec", "factory", self.factory)


@dataclass(frozen=True)
class HCQQueues:
    """The queue and signal types of a queue-based (HCQ) device, driven by the core's HCQ machinery.

    compute_queue and copy_queue are `tinycore.hcq.HWQueue` subclasses (copy_queue None: copies go on the compute
    queue), signal an `tinycore.hcq.HCQSignal` subclass; see the `tiny_hcq_queues` hook for what each must do.
    """

    compute_queue: type
    copy_queue: type | None
    signal: type
