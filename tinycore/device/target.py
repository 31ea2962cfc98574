"""DEV targets as the devices see them: the targets of the current DEV (`tinycore.helpers.DEV`, so
`Context(DEV=...)` switches them at run time), the default device DEV names, and the target for one device.

The grammar itself (Target, parse_dev, canonicalize, DevError) is in `tinycore.target`, re-exported here.
"""
from __future__ import annotations

from tinycore.helpers import DEV
from tinycore.target import GRAMMAR, DevError, Target, canonicalize, find_target, format_dev, parse_dev


def current_targets() -> tuple[Target, ...]:
    """The targets of the current DEV value (read at every call, so `Context(DEV=...)` takes effect); raises the
    DevError of a malformed DEV from the environment."""
    return DEV.targets


def dev_default_device() -> str | None:
    """The device DEV chooses as default (its first target naming a device), or None."""
    return next((target.device for target in current_targets() if target.device), None)


def target_for(device: str) -> Target:
    """The DEV target that applies to `device` (canonicalized): the target for exactly that device, else the one
    for its family without an index, else the target for every device (e.g. DEV=:LLVM), else an empty one.

    The returned Target's `device` is always the canonical `device`.
    """
    return find_target(current_targets(), device)


__all__ = ["GRAMMAR", "DevError", "Target", "canonicalize", "find_target", "format_dev", "parse_dev",
           "current_targets", "dev_default_device", "target_for"]
