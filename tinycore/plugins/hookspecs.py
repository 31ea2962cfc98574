"""The plugin contract: the hooks a tinycore device plugin may implement (pluggy project name "tinycore").

A plugin is a module named by an entry point in the group `tinycore.plugins`. The module declares
`TINYCORE_PLUGIN_API = 1` (the plugin API level it was written for, see `tinycore.plugins.PLUGIN_API_LEVEL`)
and implements any of the hooks below, each marked with `tinycore.plugins.hookimpl`:

    from tinycore.plugins import DeviceSpec, RendererSpec, hookimpl

    TINYCORE_PLUGIN_API = 1

    @hookimpl
    def tiny_devices():
        return [DeviceSpec("MYDEV", priority=10, device_class="tiny_mydev.device:MyDevice",
                           probe="tiny_mydev.hooks:probe")]

    @hookimpl
    def tiny_renderers(device):
        return [RendererSpec("MYC", factory="tiny_mydev.renderer:make_renderer")] if device == "MYDEV" else []

Rules for every hook: return descriptions, not objects that needed heavy imports (import paths are strings);
never open hardware, start threads or compile anything; never raise for a device the plugin does not know
(return an empty list or None). A hook that raises marks its plugin broken; the error and traceback are shown by
`tiny plugins` and every other plugin keeps working.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from tinycore.plugins.contract import AllocatorContract, DeviceContract
    from tinycore.plugins.specs import DeviceSpec, HCQQueues, InterfaceSpec, RendererSpec

hookspec = pluggy.HookspecMarker("tinycore")


@hookspec
def tiny_devices() -> list[DeviceSpec]:
    """The devices this plugin provides.

    Called once per process, the first time anything asks for a device (`Device[...]`, `Device.DEFAULT`,
    `tiny devices`), after the plugin module is imported.
    Returns a list of DeviceSpec (name, priority, device-class import path, description, optional probe path).
    Must not import the device class, probe the hardware or load drivers: the registry does those when needed.
    """
    raise NotImplementedError("a hook specification is never called; plugins implement it")


@hookspec
def tiny_renderers(device: str) -> list[RendererSpec]:
    """Renderers this plugin offers for the device family `device` ("CPU", "CL", ...), best first.

    Called when a device of that family is opened (and by `tiny devices`); any plugin may answer for any
    device, so a distribution can add, say, an LLVM renderer to CPU. The device's own plugin's renderers come
    first, then other plugins' in discovery order; `DEV=DEVICE:RENDERER` picks one by name, otherwise the first
    whose factory constructs wins.
    Returns a list of RendererSpec, or an empty list for a device this plugin does not render for.
    Must not construct a renderer or run a compiler: only the registry calls the factory.
    """
    raise NotImplementedError("a hook specification is never called; plugins implement it")


@hookspec(firstresult=True)
def tiny_allocator(device: DeviceContract) -> AllocatorContract[Any] | None:
    """The allocator for the opened device object `device` (its `.device` attribute is the canonical name).

    Called by a device class while it is being constructed, when it asks `tinycore.device.select_allocator`.
    Returns an Allocator instance, or None to let another plugin answer (the first non-None result wins).
    Must not allocate device memory yet, nor keep a reference that outlives the device.
    """
    raise NotImplementedError("a hook specification is never called; plugins implement it")


@hookspec
def tiny_interfaces(device: str) -> list[InterfaceSpec]:
    """The ways to reach the hardware of the device family `device`, best first (a driver API, KFD, a mock).

    Called when a device of that family is opened (and by `tiny devices`).
    Returns a list of InterfaceSpec. A mock interface (is_mock=True) is used only when DEV names it
    (`DEV=MOCK+NV`); it is never a fallback.
    Must not open the interface: only the registry calls the factory.
    """
    raise NotImplementedError("a hook specification is never called; plugins implement it")


@hookspec(firstresult=True)
def tiny_hcq_queues(device: DeviceContract) -> HCQQueues | None:
    """For a queue-based (HCQ) device object `device`: the queue and signal types the core's HCQ machinery drives.

    Called once by `tinycore.hcq.HCQCompiled.__init__` while the device is being constructed (the device class
    derives from HCQCompiled; its `.device` attribute is the canonical name). Returns an HCQQueues, or None when
    this plugin does not drive `device` (the first non-None result wins). Must not create queues or signals, open
    hardware or start threads: it returns types, which the core instantiates.

    What the returned HCQQueues holds:
      compute_queue: a subclass of `tinycore.hcq.HWQueue`, constructed with no arguments, one per submission or
        graph. It implements the encoding hooks `_encode_wait(signal, value)`, `_encode_signal(signal, value)`,
        `_encode_timestamp(signal)`, `_encode_exec(program, arguments, global_size, local_size)`, optionally
        `_encode_copy` and `_encode_memory_barrier`, each appending its hardware's words with `self.emit(...)`;
        and `_submit(device)`, which hands `self.words` to the hardware. A queue that is resubmitted (a TinyJit
        graph) is bound once: `_bind(device)` may copy the words to where the hardware reads them, and
        `_patch(position, value)` then rewrites one symbolic word (a Variable's value, resolved at submit) there.
        A submission must not wait for its commands to finish: the core waits on signals.
      copy_queue: the same for a copy engine (`_encode_copy`, waits, signals, timestamps), or None to copy on
        the compute queue.
      signal: a subclass of `tinycore.hcq.HCQSignal`, constructed as `signal(device, value=0, name="...")`, whose
        value and timestamp the hardware writes (`timestamp_divider`: raw ticks per microsecond) and the host
        reads; its `address` is what the encodings put in commands.
    The device's programs derive from `tinycore.hcq.HCQProgram`; their argument blocks (`HCQArguments`) come from
    the device's kernarg memory. tiny-cpu (a command ring run by C threads) and the template plugin (a Python
    thread) are complete examples.
    """
    raise NotImplementedError("a hook specification is never called; plugins implement it")
