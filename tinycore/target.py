"""The DEV grammar: which device, renderer, architecture and interface to use (no other tinycore module is
imported here, so `tinycore.helpers.DEV` parses with it when DEV is set).

Grammar:

    DEV    = target (';' target)*
    target = [IFACE[:INDICES]+] DEVICE[:INDEX] [:RENDERER[:ARCH]]

    DEV=CPU            the CPU device
    DEV=CPU:LLVM       the CPU device with the LLVM renderer
    DEV=CL:1           the second OpenCL device (a number in the renderer place is a device index)
    DEV=:LLVM          the LLVM renderer on every device, default device chosen by priority
    DEV=MOCK+NV        the NV device through its MOCK interface
    DEV=PCI:0,1+AMD    the AMD device through its PCI interface, hardware indices 0 and 1
    DEV=NV::sm_90      the NV device, default renderer, architecture sm_90
    DEV=CPU;CL:LLVM    default device CPU; when CL is opened, it uses LLVM

Device, interface and renderer names are case-insensitive and upper-cased; the architecture is kept as written.
The first target that names a device chooses the default device.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace

GRAMMAR = ("DEV = target(';' target)*, target = [IFACE[:INDICES]+]DEVICE[:INDEX][:RENDERER[:ARCH]] "
           "(e.g. DEV=CPU, DEV=CPU:LLVM, DEV=CL:1, DEV=:LLVM, DEV=MOCK+NV, DEV=PCI:0,1+AMD, DEV=NV::sm_90)")

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
_RENDERER = re.compile(r"[A-Za-z0-9_]+\Z")
_ARCH = re.compile(r"[^\s:;+]+\Z")


class DevError(ValueError, RuntimeError):
    """A malformed DEV string or device name (a ValueError; also a RuntimeError, which tinygrad raises for a
    malformed target)."""


@dataclass(frozen=True)
class Target:
    """One parsed DEV target. Empty strings (and an empty `indices`) mean "not given".

    device: canonical device name, index included ("CPU", "CL:1"); empty for a target that applies to every device.
    renderer, arch: the renderer name (upper case) and target architecture (as written).
    interface, indices: the interface name (upper case) and the hardware indices given with it.
    """

    device: str = ""
    renderer: str = ""
    arch: str = ""
    interface: str = ""
    indices: tuple[int, ...] = ()

    @property
    def family(self) -> str:
        """The device name without its index ("CL:1" -> "CL")."""
        return self.device.split(":", 1)[0]

    @staticmethod
    def parse(text: str) -> Target:
        """Parse one target; raise DevError saying what is wrong and showing the grammar."""
        return _parse_target(text, text)

    def __str__(self) -> str:
        """The target in DEV syntax; `Target.parse(str(target)) == target`."""
        prefix = ""
        if self.interface:
            prefix = self.interface + (":" + ",".join(map(str, self.indices)) if self.indices else "") + "+"
        tail = ""
        if self.renderer or self.arch:
            tail = ":" + self.renderer + (":" + self.arch if self.arch else "")
        return prefix + self.device + tail


def _fail(whole: str, problem: str) -> DevError:
    """The error for a malformed DEV string."""
    return DevError(f"malformed DEV={whole!r}: {problem}; the grammar is {GRAMMAR}")


def canonicalize(name: str) -> str:
    """The canonical device name: family upper-cased, index 0 dropped ("cpu" -> "CPU", "cl:0" -> "CL",
    "cl:1" -> "CL:1", "disk:/tmp/x" -> "DISK:/tmp/x")."""
    if not isinstance(name, str) or not name.strip():
        raise DevError(f"device name must be a non-empty string like 'CPU' or 'CL:1', got {name!r}")
    family, separator, rest = name.strip().partition(":")
    if not _NAME.match(family):
        raise DevError(f"device name {name!r} must start with a letter and contain only letters, digits and '_' "
                       "before any ':' (e.g. 'CPU', 'CL:1')")
    family = family.upper()
    if not separator or (rest.isdigit() and int(rest) == 0):
        return family
    if rest.isdigit():
        return f"{family}:{int(rest)}"
    return f"{family}:{rest}"


def _parse_target(text: str, whole: str) -> Target:
    """Parse one target of the DEV string `whole`."""
    text = text.strip()
    if not text:
        raise _fail(whole, "empty target (two ';' in a row, or a ';' at either end)")
    interface = ""
    indices: tuple[int, ...] = ()
    if "+" in text:
        if text.count("+") > 1:
            raise _fail(whole, f"too many '+' in target {text!r}: at most one interface per target")
        interface_part, text = text.split("+")
        interface_name, _, index_text = interface_part.partition(":")
        if not _NAME.match(interface_name):
            raise _fail(whole, f"interface name {interface_name!r} before '+' must be a name like MOCK or PCI")
        interface = interface_name.upper()
        if ":" in interface_part:
            parts = index_text.split(",")
            if not all(part.strip().isdigit() for part in parts):
                raise _fail(whole, f"interface indices {index_text!r} must be comma-separated numbers like 0 or 0,1")
            indices = tuple(int(part) for part in parts)
    fields = text.split(":")
    device_name, rest = fields[0], fields[1:]
    if device_name and not _NAME.match(device_name):
        raise _fail(whole, f"device name {device_name!r} must start with a letter and contain only letters, "
                           "digits and '_'")
    device = device_name.upper()
    if rest and rest[0].isdigit():
        if not device:
            raise _fail(whole, f"device index {rest[0]!r} given without a device name")
        device = canonicalize(f"{device}:{rest[0]}")
        rest = rest[1:]
    if len(rest) > 2:
        raise _fail(whole, f"too many ':' in target {text!r}: after the device come at most a renderer and an arch")
    renderer = rest[0] if rest else ""
    arch = rest[1] if len(rest) > 1 else ""
    if renderer and not _RENDERER.match(renderer):
        raise _fail(whole, f"renderer name {renderer!r} must contain only letters, digits and '_'")
    if len(rest) > 1 and not _ARCH.match(arch):
        raise _fail(whole, f"arch {arch!r} must be non-empty and contain no spaces, ':', ';' or '+'")
    if not (device or renderer or arch or interface):
        raise _fail(whole, f"target {text!r} names no device, renderer, arch or interface")
    return Target(device, renderer.upper(), arch, interface, indices)


@functools.lru_cache(maxsize=64)
def parse_dev(text: str) -> tuple[Target, ...]:
    """Parse a whole DEV string into its targets (an empty string gives no targets).

    Raises DevError for a malformed string, or when two targets are for the same device.
    """
    if not isinstance(text, str):
        raise DevError(f"DEV must be a string like 'CPU' or 'CPU:LLVM', got {text!r}")
    if not text.strip():
        return ()
    targets = tuple(_parse_target(part, text) for part in text.split(";"))
    devices = [target.device for target in targets]
    for device in dict.fromkeys(devices):
        if devices.count(device) > 1:
            shown = device or "(every device)"
            raise _fail(text, f"{devices.count(device)} targets are for {shown}; give each device once")
    return targets


def format_dev(targets: tuple[Target, ...] | list[Target]) -> str:
    """The DEV string for `targets`; `parse_dev(format_dev(targets)) == tuple(targets)`."""
    return ";".join(str(target) for target in targets)


def find_target(targets: tuple[Target, ...] | list[Target], device: str) -> Target:
    """The target of `targets` that applies to `device` (canonicalized): the target for exactly that device, else the
    one for its family without an index, else the target for every device (e.g. DEV=:LLVM), else an empty one.

    The returned Target's `device` is always the canonical `device`.
    """
    canonical = canonicalize(device)
    family = canonical.split(":", 1)[0]
    found = (next((target for target in targets if target.device == canonical), None)
             or next((target for target in targets if target.device == family), None)
             or next((target for target in targets if not target.device), None))
    return replace(found, device=canonical) if found is not None else Target(device=canonical)
