"""Signals of queue-based (HCQ) devices: a 64-bit value and a 64-bit timestamp that the device writes and the host
reads, and the error a wait raises when a value never comes."""
from __future__ import annotations

import time
from typing import Protocol

from tinycore.helpers import HCQ_TIMEOUT_MS


class DeviceTimeoutError(RuntimeError):
    """A wait on a device signal ran past its timeout; the device is marked broken (its results are not trusted)."""


class BreakableDevice(Protocol):
    """What a signal needs of its device: a name, and a way to mark it broken."""

    device: str
    broken: str | None
    """Why the device refuses work, or None (tinycore.plugins.contract.DeviceContract.broken)."""

    def mark_broken(self, reason: str) -> None:
        """Refuse further work, with `reason` in every later error."""


class HCQSignal:
    """A value the device sets when it reaches a point in a queue, and the time (its timestamp) when it did.

    The default memory is 16 bytes of host memory, given as a writable memoryview: a little-endian unsigned 64-bit
    value then a 64-bit timestamp in raw ticks. `timestamp_divider` is the number of raw ticks per microsecond
    (1000 for nanoseconds). `address` is where a device finds the signal (None where it needs none).

    Hooks for a plugin whose signal memory the host cannot read directly (subclass and override): `_read_value`,
    `_write_value` and `_read_timestamp`.
    """

    timestamp_divider: float = 1000.0

    def __init__(self, device: BreakableDevice | None = None, value: int = 0, memory: memoryview | None = None,
                 address: int | None = None, name: str = "signal"):
        self.device = device
        self.name = name
        self.memory = memory if memory is not None else memoryview(bytearray(16))
        if self.memory.nbytes < 16:
            raise ValueError(f"signal {name!r} needs 16 bytes of memory, got {self.memory.nbytes}")
        self._words = self.memory.cast("B")[:16].cast("Q")
        self.address = address
        self._write_value(value)
        self._words[1] = 0

    # ---- the device-specific part (the defaults read and write host memory) ----

    def _read_value(self) -> int:
        return self._words[0]

    def _write_value(self, value: int) -> None:
        self._words[0] = value

    def _read_timestamp(self) -> int:
        return self._words[1]

    # ---- the interface the core uses ----

    @property
    def value(self) -> int:
        """The current value."""
        return self._read_value()

    @value.setter
    def value(self, new_value: int) -> None:
        self._write_value(new_value)

    @property
    def timestamp(self) -> float:
        """When the device last wrote this signal (or ran a timestamp command on it), in microseconds."""
        return self._read_timestamp() / self.timestamp_divider

    def wait(self, value: int, timeout_s: float | None = None) -> None:
        """Return once the signal holds at least `value`.

        Past `timeout_s` seconds (default HCQ_TIMEOUT_MS) the device is marked broken and DeviceTimeoutError is
        raised, naming the device, this signal and the value waited for.
        """
        if self._read_value() >= value:
            return
        limit = HCQ_TIMEOUT_MS.value / 1000 if timeout_s is None else timeout_s
        started = time.perf_counter()
        deadline = started + limit
        pause = 0.0
        while self._read_value() < value:
            now = time.perf_counter()
            if now > deadline:
                self._timed_out(value, limit)
            if self.device is not None and self.device.broken is not None:
                raise RuntimeError(self.device.broken)
            # spin first (a CPU queue finishes in microseconds), then back off to at most a millisecond
            if now - started > 0.0002:
                pause = min(0.001, pause * 2 or 0.00002)
                time.sleep(pause)

    def _timed_out(self, value: int, limit: float) -> None:
        device_name = self.device.device if self.device is not None else "a device"
        message = (f"{device_name}: signal {self.name!r} did not reach {value} within {limit:g} s (it holds "
                   f"{self._read_value()}); the device is marked broken, its results are not trusted. A queue may "
                   f"wait on a signal that nothing sets: check the waits and signals submitted, raise HCQ_TIMEOUT_MS "
                   f"for long kernels, or call recover() on the device once it is idle again")
        if self.device is not None:
            self.device.mark_broken(message)
        raise DeviceTimeoutError(message)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}={self.value}>"
