"""tinycore: a small deep-learning compiler whose device backends are separately installed plugins.

Public API: `from tinycore import Tensor, dtypes, Device, TinyJit, Context, getenv, Variable, nn, GlobalCounters, UOp,
fetch, function`.
Names whose modules are heavy (the device registry, the JIT, nn) are imported on first use.
"""
import importlib as _importlib

from tinycore.counters import GlobalCounters
from tinycore.dtype import dtypes
from tinycore.helpers import Context, getenv
from tinycore.tensor import Tensor
from tinycore.uop.uop import UOp

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
