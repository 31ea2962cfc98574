"""tinycore: a small deep-learning compiler whose device backends are separately installed plugins.

Public API: `from tinycore import Tensor, dtypes, Device, TinyJit, Context, getenv, Variable, nn, GlobalCounters, UOp,
fetch, function`.
Names whose modules are heavy (the device registry, the JIT, nn) are imported on first use.
"""
import importlib as _importlib

from tinycore.counters import GlobalCounters
from tinycore.dtype import dtypes
from tinycore.helpers import DEV as _DEV
from tinycore.helpers import Context, getenv
from tinycore.tensor import Tensor
from tinycore.uop.uop import UOp
from tinycore.viz.hook import VIZ as _VIZ

if _VIZ.value:  # VIZ=1: record from the first kernel on; write (and maybe serve) the recording at exit
    from tinycore.viz.record import enable as _enable_viz
    _enable_viz(at_exit=True)


def _check_dev(targets: tuple[object, ...]) -> None:
    """Check a new DEV against the installed plugins when it is set (the device layer loads only when DEV names
    something, so an unset DEV keeps `import tinycore` free of plugin discovery)."""
    if targets:
        from tinycore.device.registry import check_dev_targets
        check_dev_targets(targets)  # type: ignore[arg-type]


def _in_tiny_command() -> bool:
    """True in the `tiny` command, which reports a bad DEV itself (`tiny devices` still lists the devices)."""
    import os
    import sys
    arguments = getattr(sys, "orig_argv", sys.argv)
    return os.path.basename(sys.argv[0]) == "tiny" or "tinycore.cli" in arguments[:4]


# DEV from the environment is parsed and checked here, at import; Context(DEV=...) and DEV.value = ... when set
if _in_tiny_command():
    _DEV.watch(_check_dev, check_now=False)
else:
    _DEV.check()
    _DEV.watch(_check_dev)

_LAZY_NAMES = {
    "Device": ("tinycore.device.registry", "Device"),
    "TinyJit": ("tinycore.engine.jit", "TinyJit"),
    "Variable": ("tinycore.uop.symbolic", "Variable"),
    "nn": ("tinycore.nn", None),
    "fetch": ("tinycore.download", "fetch"),
    "function": ("tinycore.tensor.extras", "function"),
}

__all__ = ["Tensor", "dtypes", "Device", "TinyJit", "Context", "getenv", "Variable", "nn", "GlobalCounters", "UOp",
           "fetch", "function"]


def __getattr__(name: str) -> object:
    """Import the lazily provided public names (Device, TinyJit, Variable, nn) on first access."""
    found = _LAZY_NAMES.get(name)
    if found is None:
        raise AttributeError(f"module 'tinycore' has no attribute {name!r}")
    module_name, attribute = found
    module = _importlib.import_module(module_name)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public names and the loaded submodules (not the helpers this module imports for itself)."""
    from types import ModuleType
    submodules = {name for name, value in globals().items()
                  if isinstance(value, ModuleType) and value.__name__ == f"{__name__}.{name}"}
    dunders = {name for name in globals() if name.startswith("__") and name.endswith("__")}
    return sorted(set(__all__) | submodules | dunders)
