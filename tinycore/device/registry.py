"""The device registry: `Device["cl:1"]`, `Device.DEFAULT`, and the selection of a device's renderer, interface
and allocator from what the installed plugins offer.

A device class is constructed as `device_class(canonical_name)` and asks for its parts here:
`select_renderer(name)`, `select_interface(name)`, `select_allocator(device)`, `target_for(name)`.
"""
from __future__ import annotations

import difflib
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING

from tinycore.device.target import DevError, Target, canonicalize, current_targets, dev_default_device, format_dev
from tinycore.device.target import target_for as _dev_target_for
from tinycore.helpers import DEV

if TYPE_CHECKING:
    from tinycore.device.allocator import Allocator
    from tinycore.device.compiled import Compiled
    from tinycore.device.compiler import Compiler
    from tinycore.plugins.manager import PluginManager, PluginRecord
    from tinycore.plugins.specs import DeviceSpec, HCQQueues, InterfaceSpec, RendererSpec
    from tinycore.renderer.renderer import Renderer

from tinycore.plugins.install import KNOWN_DISTRIBUTIONS, install_command


class DeviceNotInstalledError(RuntimeError):
    """A device name that no loaded plugin provides."""


class DeviceOpenError(RuntimeError):
    """A device that is provided by a plugin but could not be opened (the message says why)."""


class SelectionError(RuntimeError):
    """No renderer, interface or allocator could be chosen for a device (the message says why)."""


def _manager() -> PluginManager:
    """The process-wide plugin manager (imported lazily so that `import tinycore` stays cheap; the import runs once:
    every Tensor() without a device asks, and an import statement costs about a microsecond each time)."""
    getter = _MANAGER_GETTER
    if not getter:
        from tinycore.plugins.manager import get_plugin_manager
        getter.append(get_plugin_manager)
    return getter[0]()


_MANAGER_GETTER: list[Callable[[], PluginManager]] = []


def _dev_text() -> str:
    """The current DEV value, for messages (as written, even when malformed)."""
    return DEV.raw


def _describe_error(error: BaseException) -> str:
    """'TypeName: message' for an exception."""
    return f"{type(error).__name__}: {error}"


def _did_you_mean(asked: str, names: list[str]) -> str:
    """A "; did you mean 'X'?" suffix when `asked` is close to one of `names`."""
    close = difflib.get_close_matches(asked, names, n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


class _DeviceRegistry:
    """The `Device` object: opened devices by canonical name, the default device, and plugin lookups."""

    def __init__(self) -> None:
        self._opened: dict[str, Compiled] = {}
        self._open_errors: dict[str, str] = {}
        self._probes: dict[str, tuple[bool, str, int]] = {}
        self._auto_default: str | None = None
        self._checked_default: tuple[str, PluginManager] | None = None
        self._requested: dict[str, Target] = {}
        self._lock = threading.RLock()
        self.selected_renderers: dict[str, str] = {}
        """Canonical device name -> name of the renderer that `select_renderer` chose for it."""
        self.selected_interfaces: dict[str, str] = {}
        """Canonical device name -> name of the interface that `select_interface` chose for it."""

    # ---- names and specs ---------------------------------------------------------------------------------------

    def canonicalize(self, name: str) -> str:
        """The canonical device name ("cpu" -> "CPU", "CL:0" -> "CL", "cl:1" -> "CL:1").

        Every form DEV accepts for one device is accepted ("GL+WEBGPU", "CPU:C", "NV::sm_90"): the device's name is
        returned and the interface, renderer and arch are used when the device is opened (an error now when the
        device is already open with other ones, or does not offer them)."""
        target = self._target_in_name(name)
        if target is None:
            return canonicalize(name)
        self.request(target)
        return target.device

    def _target_in_name(self, name: str) -> Target | None:
        """The DEV target a device name spells, or None for a plain name (or a DISK path, which has a ':' but names
        no renderer)."""
        if not isinstance(name, str):
            return None
        text = name.strip()
        family, _, rest = text.partition(":")
        if "+" not in text and (not rest or rest.isdigit()):
            return None
        try:
            target = Target.parse(text)
        except DevError:
            if "+" in text:
                raise
            return None  # "DISK:/tmp/file": a name with a path, not a target
        if not target.device:
            raise DevError(f"{name!r} names no device (a renderer for every device is a DEV setting, not a device); "
                           "give a device, e.g. 'CPU' or 'CPU:C'")
        if "+" not in text and not renderer_specs(target.device):
            return None  # a device without renderers (DISK) takes the rest of its name as a path: DISK:shm:name
        return target

    def request(self, target: Target) -> None:
        """Use `target`'s interface, renderer and arch when its device is opened (from `Tensor.to("GL+WEBGPU")`).

        Raises SelectionError when the device is already open with another renderer or interface (a device is
        opened once per process), or does not offer the ones named."""
        canonical = target.device
        check_dev_targets((target,), str(target))
        opened = self._opened.get(canonical)
        if opened is None:
            with self._lock:
                self._requested[canonical] = target
            return
        for kind, wanted, chosen in (("renderer", target.renderer, self.selected_renderers.get(canonical)),
                                     ("interface", target.interface, self.selected_interfaces.get(canonical))):
            if wanted and chosen and wanted != chosen:
                raise SelectionError(f"{canonical} is already open with {kind} {chosen}, so {str(target)!r} cannot be "
                                     f"used in this process: a device is opened once; set DEV={target} before its "
                                     "first use")

    def requested_target(self, canonical: str) -> Target | None:
        """The target asked for through a device name (`Tensor.to("GL+WEBGPU")`) before `canonical` was opened."""
        return self._requested.get(canonical)

    def specs(self) -> list[tuple[DeviceSpec, PluginRecord]]:
        """Every device of every loaded plugin with its plugin record, highest priority first."""
        return sorted(_manager().device_specs(), key=lambda pair: (-pair[0].priority, pair[0].name))

    def spec(self, name: str) -> tuple[DeviceSpec, PluginRecord]:
        """The DeviceSpec providing device `name` (any index) and its plugin; DeviceNotInstalledError if none."""
        family = canonicalize(name).split(":", 1)[0]
        for spec, record in self.specs():
            if spec.name == family:
                return spec, record
        raise DeviceNotInstalledError(self._not_installed_message(name, family))

    def _not_installed_message(self, name: str, family: str, dev_text: str | None = None) -> str:
        """Why device `name` is not available: what is installed and what to install."""
        installed = ", ".join(f"{spec.name} ({record.install_name} {record.version or ''})".replace(" )", ")")
                              for spec, record in self.specs()) or "none"
        message = f"no installed plugin provides device {family!r} (asked for {name!r}"
        dev_text = _dev_text() if dev_text is None else dev_text
        message += f", DEV={dev_text!r})" if dev_text else ")"
        message += f"; installed devices: {installed}"
        distribution = KNOWN_DISTRIBUTIONS.get(family)
        records = [record for record in _manager().records if distribution and record.distribution
                   and record.distribution.lower().replace("_", "-") == distribution]
        if records and records[0].status != "ok":
            return message + (f"; {distribution} is installed but its plugin is {records[0].status}: "
                              f"{records[0].reason}")
        if distribution:
            return message + f"; to get {family}: {install_command(distribution)}"
        return message + (f"; no distribution shipped with tinycore provides {family}: install the plugin that does "
                          "(it registers an entry point in the group 'tinycore.plugins'), or pick an installed device")

    def get_class(self, name: str) -> type:
        """The device class for `name`, imported from its DeviceSpec.device_class path."""
        from tinycore.plugins.specs import load_object
        spec, record = self.spec(name)
        try:
            return load_object(spec.device_class)
        except Exception as error:
            raise DeviceOpenError(f"could not open {canonicalize(name)}: importing its device class "
                                  f"{spec.device_class!r} from {record.install_name} failed: "
                                  f"{_describe_error(error)}") from error

    def probe(self, name: str) -> tuple[bool, str, int]:
        """Run device `name`'s availability probe once per process: (ok, reason, device count).

        A device without a probe counts as available with count 1; a probe that raises counts as unavailable.
        """
        from tinycore.plugins.specs import load_object
        spec, record = self.spec(name)
        with self._lock:
            if spec.name not in self._probes:
                if spec.probe is None:
                    result: tuple[bool, str, int] = (True, "no probe", 1)
                else:
                    try:
                        ok, reason, count = load_object(spec.probe)()
                        result = (bool(ok), str(reason), int(count))
                    except Exception as error:
                        result = (False, f"probe {spec.probe} raised {_describe_error(error)}", 0)
                self._probes[spec.name] = result
            return self._probes[spec.name]

    def open_error(self, name: str) -> str | None:
        """Why the last attempt to open `name` failed, or None when it has not failed."""
        return self._open_errors.get(canonicalize(name))

    # ---- opening -----------------------------------------------------------------------------------------------

    def __getitem__(self, name: str) -> Compiled:
        """The opened device `name` (canonicalized; every form DEV accepts for one device, e.g. "GL+WEBGPU"),
        constructed on first use and then shared."""
        canonical = self.canonicalize(name)
        opened = self._opened.get(canonical)
        if opened is not None:
            return opened
        with self._lock:
            if canonical in self._opened:
                return self._opened[canonical]
            try:
                device_class = self.get_class(canonical)
                instance = device_class(canonical)
            except DeviceOpenError as error:
                self._open_errors[canonical] = str(error)
                raise
            except DeviceNotInstalledError:
                raise
            except Exception as error:
                spec, record = self.spec(canonical)
                message = (f"could not open {canonical} (device class {spec.device_class} from "
                           f"{record.install_name}): {_describe_error(error)}")
                self._open_errors[canonical] = message
                raise DeviceOpenError(message) from error
            self._open_errors.pop(canonical, None)
            self._opened[canonical] = instance
            return instance

    def opened(self) -> dict[str, Compiled]:
        """The devices opened so far, by canonical name."""
        return dict(self._opened)

    def get_available_devices(self) -> Iterator[str]:
        """The device names (highest priority first) whose probe is ok and that open; skips the others."""
        for spec, _record in self.specs():
            if spec.priority < 0 or not self.probe(spec.name)[0]:
                continue
            try:
                self[spec.name]
            except Exception:
                continue
            yield spec.name

    # ---- the default device ------------------------------------------------------------------------------------

    @property
    def DEFAULT(self) -> str:
        """The default device: the first device DEV names, else the highest-priority device whose probe is ok and
        that opens (chosen once per process). Setting it puts that device first in DEV."""
        from_dev = dev_default_device()
        if from_dev is not None:
            # checked once per name and plugin manager: every Tensor() without a device asks (a sort of the specs)
            manager = _manager()
            if self._checked_default != (from_dev, manager):
                self.spec(from_dev)
                self._checked_default = (from_dev, manager)
            return from_dev
        with self._lock:
            if self._auto_default is None:
                self._auto_default = self._choose_default()
            return self._auto_default

    @DEFAULT.setter
    def DEFAULT(self, name: str) -> None:
        canonical = canonicalize(name)
        self.spec(canonical)
        targets = [target for target in current_targets() if target.device != canonical]
        existing = next((target for target in current_targets() if target.device == canonical), Target(canonical))
        DEV.value = format_dev([existing, *targets])

    @property
    def default(self) -> Compiled:
        """The opened default device."""
        return self[self.DEFAULT]

    def _choose_default(self) -> str:
        """The highest-priority device (priority >= 0) whose probe is ok and that opens; a clear error if none."""
        reasons = []
        for spec, record in self.specs():
            if spec.priority < 0:
                continue
            ok, reason, _count = self.probe(spec.name)
            if not ok:
                reasons.append(f"{spec.name} ({record.install_name}): unavailable: {reason}")
                continue
            try:
                self[spec.name]
            except Exception as error:
                reasons.append(f"{spec.name} ({record.install_name}): {error}")
                continue
            return spec.name
        if not reasons:
            return self._raise_no_devices()
        hint = "" if any(spec.name == "CPU" for spec, _record in self.specs()) else \
            f" or install the CPU device: {install_command('tiny-cpu')}"
        raise DeviceOpenError("no device could be opened as the default: " + "; ".join(reasons) +
                              f". Fix the reason of the device you want, choose one with DEV (e.g. DEV=CPU){hint}")

    def _raise_no_devices(self) -> str:
        """Raise the error for "no device plugin is loaded", naming the plugins that were skipped."""
        skipped = [f"{record.name} ({record.install_name}): {record.status}: {record.reason}"
                   for record in _manager().records if record.status != "ok"]
        detail = f"; plugins not loaded: {'; '.join(skipped)}" if skipped else ""
        raise DeviceNotInstalledError("no device plugin is installed" + detail +
                                      f"; install one, e.g. {install_command('tiny-cpu')}")

    def reset(self) -> None:
        """Forget opened devices, probe results and the chosen default (for tests and tools)."""
        with self._lock:
            self._opened.clear()
            self._open_errors.clear()
            self._probes.clear()
            self._auto_default = None
            self._requested.clear()
            self.selected_renderers.clear()
            self.selected_interfaces.clear()

    def __repr__(self) -> str:
        return f"<Device registry: opened {sorted(self._opened)}>"


Device = _DeviceRegistry()
"""The device registry: `Device["CPU"]`, `Device.DEFAULT`, `Device.canonicalize(name)`."""


# ---- parts of a device, asked for by device classes -----------------------------------------------------------

def target_for(device: str) -> Target:
    """The parsed DEV target that applies to `device` (renderer, arch, interface and indices as DEV gives them), with
    the parts a device name asked for (`Tensor.to("GL+WEBGPU")`) taking precedence."""
    found = _dev_target_for(device)
    requested = Device.requested_target(found.device)
    if requested is None:
        return found
    return replace(found, **{key: getattr(requested, key) for key in ("renderer", "arch", "interface", "indices")
                             if getattr(requested, key)})


def check_dev_targets(targets: tuple[Target, ...], dev_text: str | None = None) -> None:
    """Check DEV targets against the installed plugins when DEV is set: every device named is provided, and offers
    the renderer and interface named (a renderer for every device, DEV=:LLVM, must be offered by one of them).

    Raises DeviceNotInstalledError (with what to install) or SelectionError (with what is available)."""
    shown = dev_text if dev_text is not None else format_dev(targets)
    for target in targets:
        if not target.device:
            every_renderer = sorted({spec.name for device_spec, _record in Device.specs()
                                     for spec, _offered in renderer_specs(device_spec.name)})
            if target.renderer and target.renderer not in every_renderer:
                offered = every_renderer
                raise SelectionError(f"no installed device offers renderer {target.renderer!r} (DEV={shown!r}); "
                                     f"renderers offered: {', '.join(offered) or 'none'}"
                                     f"{_did_you_mean(target.renderer, offered)}")
            wanted_specs = [spec for device_spec, _record in Device.specs()
                            for spec, _offered in renderer_specs(device_spec.name) if spec.name == target.renderer]
            if wanted_specs and not any(renderer_status(spec)[0] for spec in wanted_specs):
                raise SelectionError(f"renderer {target.renderer!r} is unavailable here (DEV={shown!r}): "
                                     f"{renderer_status(wanted_specs[0])[1]}")
            continue
        family = target.family
        try:
            Device.spec(target.device)
        except DeviceNotInstalledError:
            raise DeviceNotInstalledError(Device._not_installed_message(target.device, family, shown)) from None
        device_renderers = renderer_specs(target.device)
        renderer_names = [spec.name for spec, _record in device_renderers]
        interface_names = [spec.name for spec, _record in interface_specs(target.device)]
        for kind, wanted, names in (("renderer", target.renderer, renderer_names),
                                    ("interface", target.interface, interface_names)):
            if wanted and wanted not in names:
                raise SelectionError(f"{family} has no {kind} {wanted!r} (DEV={shown!r}); available: "
                                     f"{', '.join(names) or 'none'}{_did_you_mean(wanted, names)}")
        wanted_specs = [spec for spec, _record in device_renderers if spec.name == target.renderer]
        if wanted_specs and not any(renderer_status(spec)[0] for spec in wanted_specs):
            others = [spec.name for spec, _record in device_renderers if spec.name != target.renderer
                      and renderer_status(spec)[0]]
            instead = f"; or choose another: {', '.join(f'DEV={family}:{name}' for name in others)}" if others else ""
            raise SelectionError(f"{family}'s renderer {target.renderer!r} is unavailable here (DEV={shown!r}): "
                                 f"{renderer_status(wanted_specs[0])[1]}{instead}")


_renderer_probes: dict[str, tuple[bool, str]] = {}
"""The result of each renderer probe (by its import path), run once per process."""


def renderer_status(spec: RendererSpec) -> tuple[bool, str]:
    """Whether what renderer `spec` needs is installed here: (ok, reason), from its probe (run once per process).

    A renderer without a probe counts as available; a probe that raises counts as unavailable."""
    from tinycore.plugins.specs import load_object
    if spec.probe is None:
        return True, ""
    if spec.probe not in _renderer_probes:
        try:
            ok, reason = load_object(spec.probe)()
            result = (bool(ok), str(reason))
        except Exception as error:
            result = (False, f"probe {spec.probe} raised {_describe_error(error)}")
        _renderer_probes[spec.probe] = result
    return _renderer_probes[spec.probe]


def renderer_specs(device: str) -> list[tuple[RendererSpec, PluginRecord]]:
    """The renderers offered for `device`'s family, in preference order, with the plugin offering each."""
    return _manager().renderer_specs(canonicalize(device).split(":", 1)[0])


def interface_specs(device: str) -> list[tuple[InterfaceSpec, PluginRecord]]:
    """The interfaces offered for `device`'s family, in preference order, with the plugin offering each."""
    return _manager().interface_specs(canonicalize(device).split(":", 1)[0])


def select_renderer(device: str) -> tuple[Renderer, Compiler, RendererSpec]:
    """Construct the renderer and compiler for `device`: (renderer, compiler, the RendererSpec used).

    DEV's renderer and arch for this device are honoured (`DEV=CPU:LLVM`, `DEV=:LLVM` for every device); without
    one, the renderers are tried in preference order and the first whose factory constructs wins.
    """
    from tinycore.plugins.specs import load_object
    canonical = canonicalize(device)
    family = canonical.split(":", 1)[0]
    target = target_for(canonical)
    offered = renderer_specs(canonical)
    names = [spec.name for spec, _record in offered]
    if not offered:
        raise SelectionError(f"no installed plugin offers a renderer for {family}; the plugin providing {family} "
                             "should return one from its tiny_renderers hook")
    if target.renderer:
        candidates = [(spec, record) for spec, record in offered if spec.name == target.renderer]
        if not candidates:
            raise SelectionError(f"{family} has no renderer {target.renderer!r} (DEV={_dev_text()!r}); available: "
                                 f"{', '.join(names)}{_did_you_mean(target.renderer, names)}")
    else:
        candidates = offered
    failures = []
    for spec, record in candidates:
        available, reason = renderer_status(spec)
        if not available:
            failures.append(f"{spec.name} from {record.install_name} is unavailable here: {reason}")
            continue
        try:
            renderer, compiler = load_object(spec.factory)(canonical, target.arch or None)
        except Exception as error:
            failures.append(f"{spec.name} from {record.install_name} ({spec.factory}): {_describe_error(error)}")
            continue
        Device.selected_renderers[canonical] = spec.name
        return renderer, compiler, spec
    hint = "" if target.renderer else f"; choose another with DEV={family}:RENDERER ({', '.join(names)})"
    raise SelectionError(f"no renderer for {canonical} could be constructed: {'; '.join(failures)}{hint}")


def select_interface(device: str) -> tuple[InterfaceSpec, object]:
    """Open the interface to `device`'s hardware: (the InterfaceSpec used, the interface object).

    DEV's interface and indices are honoured (`DEV=MOCK+NV`, `DEV=PCI:0,1+AMD`); without one, the non-mock
    interfaces are tried in preference order and the first whose factory constructs wins. A mock is never a
    fallback.
    """
    from tinycore.plugins.specs import load_object
    canonical = canonicalize(device)
    family = canonical.split(":", 1)[0]
    target = target_for(canonical)
    offered = interface_specs(canonical)
    names = [spec.name for spec, _record in offered]
    if target.interface:
        candidates = [(spec, record) for spec, record in offered if spec.name == target.interface]
        if not candidates:
            raise SelectionError(f"{family} has no interface {target.interface!r} (DEV={_dev_text()!r}); "
                                 f"available: {', '.join(names) or 'none'}{_did_you_mean(target.interface, names)}")
    else:
        candidates = [(spec, record) for spec, record in offered if not spec.is_mock]
        if not candidates:
            mocks = [spec.name for spec, _record in offered if spec.is_mock]
            extra = f" (mock interfaces {', '.join(mocks)} are used only when DEV names them, e.g. " \
                    f"DEV={mocks[0]}+{family})" if mocks else ""
            raise SelectionError(f"no installed plugin offers an interface to {family}{extra}")
    failures = []
    for spec, record in candidates:
        try:
            interface = load_object(spec.factory)(canonical, target.indices)
        except Exception as error:
            failures.append(f"{spec.name} from {record.install_name} ({spec.factory}): {_describe_error(error)}")
            continue
        Device.selected_interfaces[canonical] = spec.name
        return spec, interface
    raise SelectionError(f"no interface to {canonical} could be opened: {'; '.join(failures)}")


def select_allocator(device: object) -> Allocator:
    """The allocator for the opened device object `device`, from the first plugin whose tiny_allocator answers."""
    allocator = _manager().call_first("tiny_allocator", device=device)
    if allocator is None:
        name = getattr(device, "device", repr(device))
        raise SelectionError(f"no installed plugin returned an allocator for {name} from its tiny_allocator hook")
    return allocator


def hcq_queues(device: object) -> HCQQueues | None:
    """The HCQQueues of the opened queue-based device object `device`, or None when it is not queue-based."""
    return _manager().call_first("tiny_hcq_queues", device=device)
