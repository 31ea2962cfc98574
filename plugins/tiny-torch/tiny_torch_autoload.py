"""The `torch.backends` entry point: PyTorch calls `register` at the end of `import torch`."""
from __future__ import annotations

import warnings


def register() -> None:
    """Register the tiny device; a failure warns instead of breaking `import torch`."""
    try:
        import tiny_torch  # noqa: F401  (importing registers the device)
    except Exception as error:  # a broken tinycore install must not make torch unimportable
        warnings.warn(f"tiny-torch: the tiny device is unavailable: {error}", stacklevel=2)
