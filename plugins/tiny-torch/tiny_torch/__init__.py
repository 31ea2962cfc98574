"""tiny-torch: tinycore as a PyTorch device. `import tiny_torch` (or just `import torch` with this distribution
installed) makes `torch.device("tiny")` work; `torch.compile(model, backend="tiny")` compiles to tinycore."""
from tiny_torch.device import register as _register
from tiny_torch.dispatch import DIRECT, FALLBACKS_HIT, OPERATORS
from tiny_torch.wrapper import TinyTensor

_register()
from tiny_torch.compiler import tiny_backend  # noqa: E402  (needs the device registered)
from tiny_torch.helpers import calculate_storage_offset, mod, unwrap, update_metadata, wrap  # noqa: E402


def mapped_operators() -> list[str]:
    """The aten overloads the tiny device runs on tinycore (not counting views, which every view operator is)."""
    return sorted(str(overload) for overload in {**OPERATORS, **DIRECT})


def fallbacks_hit() -> list[str]:
    """The aten operators that ran on the CPU fallback so far in this process."""
    return sorted(FALLBACKS_HIT)


__all__ = ["TinyTensor", "mapped_operators", "fallbacks_hit", "tiny_backend", "unwrap", "wrap",
           "calculate_storage_offset", "update_metadata", "mod"]
