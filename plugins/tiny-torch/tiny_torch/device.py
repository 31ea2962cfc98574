"""Registration of the `tiny` device with PyTorch: PrivateUse1 renamed, the torch.tiny module, the factories."""
from __future__ import annotations

import torch

from tiny_torch.dtypes import to_tiny_dtype
from tiny_torch.wrapper import TinyTensor, configured_devices, tinycore_device, wrap
from tinycore import Device, Tensor


class TinyModule:
    """`torch.tiny`: the device module PyTorch expects for a backend (device_count, is_available, ...)."""

    @staticmethod
    def is_available() -> bool:
        """True when tinycore's default device opens."""
        try:
            return bool(Device.DEFAULT)
        except Exception:
            return False

    @staticmethod
    def device_count() -> int:
        """The devices `tiny:N` may name: those TINY_TORCH_DEVICES lists, else the instances of DEV's default device
        that its availability probe reports (at least one)."""
        names = configured_devices()
        if names:
            return len(names)
        try:
            return max(1, int(Device.probe(Device.DEFAULT)[2]))
        except Exception:
            return 1

    @staticmethod
    def current_device() -> int:
        """The default tiny device index."""
        return 0

    @staticmethod
    def is_initialized() -> bool:
        """Always initialized: tinycore opens devices lazily itself."""
        return True

    @staticmethod
    def _is_in_bad_fork() -> bool:
        return False

    @staticmethod
    def manual_seed_all(seed: int) -> None:
        """Seed tinycore's generator (torch.manual_seed calls this too)."""
        Tensor.manual_seed(int(seed))

    @staticmethod
    def manual_seed(seed: int) -> None:
        """Seed tinycore's generator."""
        Tensor.manual_seed(int(seed))

    @staticmethod
    def synchronize(device: object = None) -> None:
        """Wait for every queued kernel of the tinycore device behind `device`."""
        index = torch.device(device).index if device is not None else 0
        Device[tinycore_device(index or 0)].synchronize()

    @staticmethod
    def get_rng_state(device: object = None) -> torch.Tensor:
        """Not tracked: tinycore's generator state is not exported to PyTorch."""
        return torch.empty(0, dtype=torch.uint8)

    @staticmethod
    def set_rng_state(state: torch.Tensor, device: object = None) -> None:
        """Accepted and ignored (see get_rng_state)."""


_REGISTERED = False
_LIBRARY: torch.library.Library | None = None


def _empty(size: list[int], dtype: torch.dtype | None, device: torch.device | None) -> TinyTensor:
    dtype = dtype or torch.get_default_dtype()
    index = (torch.device(device).index or 0) if device is not None else 0
    shape = tuple(int(extent) for extent in size)
    value = Tensor.zeros(*shape, dtype=to_tiny_dtype(dtype), device=tinycore_device(index)) if shape else \
        Tensor(0, dtype=to_tiny_dtype(dtype), device=tinycore_device(index))
    return wrap(value, index)


def _empty_memory_format(size: list[int], dtype: torch.dtype | None = None, layout: object = None,
                         device: torch.device | None = None, pin_memory: bool | None = None,
                         memory_format: object = None) -> TinyTensor:
    return _empty(size, dtype, device)


def _empty_strided(size: list[int], stride: list[int], dtype: torch.dtype | None = None, layout: object = None,
                   device: torch.device | None = None, pin_memory: bool | None = None) -> TinyTensor:
    return _empty(size, dtype, device)


def _copy_from(self: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    """The cross-device copy PyTorch's copy_ asks of a backend (`torch.tensor(data, device="tiny")`, `.to("tiny")`
    below the Python key): self's values into dst, either of them on tiny."""
    from tiny_torch.direct import copy_
    return copy_(dst, self, non_blocking)


def register() -> None:
    """Make `tiny` a PyTorch device (idempotent)."""
    global _REGISTERED, _LIBRARY
    if _REGISTERED:
        return
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend
    _setup_privateuseone_for_python_backend("tiny", TinyModule())
    _LIBRARY = torch.library.Library("aten", "IMPL")
    _LIBRARY.impl("empty.memory_format", _empty_memory_format, "PrivateUse1")
    _LIBRARY.impl("empty_strided", _empty_strided, "PrivateUse1")
    _LIBRARY.impl("_copy_from", _copy_from, "PrivateUse1")
    import tiny_torch.direct  # (registers the operators)
    for name, factory in tiny_torch.direct.FACTORIES.items():
        _LIBRARY.impl(name, factory, "PrivateUse1")
    import tiny_torch.ops  # noqa: F401
    import tiny_torch.optimizers  # noqa: F401
    import tiny_torch.rnn  # noqa: F401
    from tiny_torch.dispatch import run_backward_raising
    engine_run_backward = torch.autograd._engine_run_backward
    if not getattr(engine_run_backward, "tiny_torch_wrapped", False):
        torch.autograd._engine_run_backward = run_backward_raising(engine_run_backward)  # type: ignore[assignment]
    _REGISTERED = True
