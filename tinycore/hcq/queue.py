"""Queues of queue-based (HCQ) devices: commands built by chained calls, then submitted to the device.

    queue = device.compute_queue().wait(signal, 3).exec(program, arguments, (4, 1, 1), None)
    queue.signal(device.timeline_signal, device.next_timeline_value()).submit(device)

A queue stores its commands as words (`self.words`) written by the encoding hooks that a plugin overrides; the core
never looks inside them. A word given as a UOp (a Variable, or an expression over Variables) is symbolic: its
position is remembered and its value written at `submit(device, var_vals)`. `bind(device)` hands the words to the
device once (a plugin copies them where its hardware reads them); a bound queue is resubmitted many times, with
only its symbolic words rewritten (`_patch`) before each submission.

Encoding hooks (each appends the words of one command with `self.emit(...)`):
  _encode_wait(signal, value)            wait until `signal` holds at least `value`
  _encode_signal(signal, value)          write the timestamp, then `value`, into `signal`
  _encode_timestamp(signal)              write the current time into `signal`'s timestamp
  _encode_exec(program, arguments, global_size, local_size)   launch a kernel on an argument block
  _encode_copy(destination, source, nbytes)                   copy device memory (handles of the allocator)
  _encode_memory_barrier()               make earlier writes visible to later commands (default: nothing)
Submission hooks:
  _submit(device)                        hand the (resolved) words to the hardware
  _bind(device)                          optional: copy the words to where the hardware reads them once
  _patch(position, value)                optional: write one resolved word into the bound copy
"""
from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar

from tinycore.hcq.signal import HCQSignal
from tinycore.uop.ops import Ops
from tinycore.uop.symbolic import sym_infer
from tinycore.uop.uop import UOp

QueueType = TypeVar("QueueType", bound="HWQueue[Any, Any]")
SignalType = TypeVar("SignalType", bound=HCQSignal)
"""The signal class a queue waits on and writes (a plugin's HCQSignal subclass)."""
ProgramType = TypeVar("ProgramType")
"""The program class a compute queue launches (a plugin's HCQProgram subclass)."""
Word = Any  # an int, a symbolic UOp, or (in queues executed by Python) any object the executor understands


class QueueDevice(Protocol):
    """What a queue reads from the device it is bound and submitted to (tinycore.hcq.device.HCQCompiled)."""

    device: str
    submissions: int

    def check_usable(self) -> None:
        """Raise when the device is broken (a queue is never submitted to it then)."""


class HCQArguments:
    """A kernel's argument block: buffer handles, then integer values, one signed 64-bit word each.

    `memory` holds the block at byte `offset`; `address` is where the device finds it (None where it needs none).
    A plugin whose hardware wants another layout subclasses it and overrides `set_buffer` and `set_value`.
    """

    def __init__(self, memory: memoryview, offset: int, address: int | None, buffer_count: int):
        self.memory, self.offset, self.address, self.buffer_count = memory, offset, address, buffer_count

    def set_buffer(self, index: int, handle: object) -> None:
        """Put the allocator handle of buffer argument `index` in the block."""
        struct.pack_into("q", self.memory, self.offset + 8 * index, handle)

    def set_value(self, index: int, value: int) -> None:
        """Put the value of integer argument `index` (a Variable's value) in the block."""
        struct.pack_into("q", self.memory, self.offset + 8 * (self.buffer_count + index), value)



class HWQueue(Generic[SignalType, ProgramType]):
    """The commands of one queue. Subclass it and override the encoding hooks listed in the module docstring; a
    plugin's queue names its signal and program classes: `class MyComputeQueue(HWQueue[MySignal, MyProgram])`."""

    def __init__(self) -> None:
        self.words: list[Word] = []
        self.symbolic: list[tuple[int, UOp, bool]] = []  # (position, expression, whether it is a bare Variable)
        self.command_count = 0
        self.bound_to: QueueDevice | None = None

    # ---- building ----

    def emit(self, *words: Word) -> None:
        """Append the words of one command; UOp words are resolved at submit."""
        start = len(self.words)
        self.words.extend(words)
        if UOp in map(type, words):
            for offset, word in enumerate(words):
                if isinstance(word, UOp):
                    self.symbolic.append((start + offset, word, word.op is Ops.DEFINE_VAR))
                    self.words[start + offset] = 0
        self.command_count += 1

    def _check_open(self, what: str) -> None:
        if self.bound_to is not None:
            raise RuntimeError(f"cannot add {what} to a queue bound to {self.bound_to.device}: build a new queue")

    def wait(self: QueueType, signal: SignalType, value: int | UOp) -> QueueType:
        """Wait (on the device) until `signal` holds at least `value`."""
        self._check_open("a wait")
        self._encode_wait(signal, value)
        return self

    def signal(self: QueueType, signal: SignalType, value: int | UOp) -> QueueType:
        """Set `signal` to `value` (and its timestamp) once every earlier command of this queue is done."""
        self._check_open("a signal")
        self._encode_signal(signal, value)
        return self

    def timestamp(self: QueueType, signal: SignalType) -> QueueType:
        """Write the device's current time into `signal`'s timestamp (read it with `signal.timestamp`)."""
        self._check_open("a timestamp")
        self._encode_timestamp(signal)
        return self

    def exec(self: QueueType, program: ProgramType, arguments: HCQArguments, global_size: Sequence[int | UOp],
             local_size: Sequence[int | UOp] | None = None) -> QueueType:
        """Launch `program` on its argument block `arguments` over `global_size` groups of `local_size`."""
        self._check_open("an exec")
        self._encode_exec(program, arguments, tuple(global_size), None if local_size is None else tuple(local_size))
        return self

    def copy(self: QueueType, destination: object, source: object, nbytes: int | UOp) -> QueueType:
        """Copy `nbytes` from the allocation `source` to `destination` (allocator handles of this device)."""
        self._check_open("a copy")
        self._encode_copy(destination, source, nbytes)
        return self

    def memory_barrier(self: QueueType) -> QueueType:
        """Make the writes of earlier commands visible to later ones."""
        self._check_open("a memory barrier")
        self._encode_memory_barrier()
        return self

    # ---- submitting ----

    def bind(self: QueueType, device: QueueDevice) -> QueueType:
        """Hand the commands to `device` once; later `submit`s rewrite only the symbolic words."""
        self._bind(device)
        self.bound_to = device
        return self

    def submit(self: QueueType, device: QueueDevice, var_vals: Mapping[UOp, int] | None = None) -> QueueType:
        """Resolve the symbolic words with `var_vals` (keyed by Variable) and run the commands on `device`."""
        if self.bound_to is not None and self.bound_to is not device:
            raise RuntimeError(f"a queue bound to {self.bound_to.device} cannot be submitted to {device.device}")
        device.check_usable()
        if self.symbolic:
            values = var_vals or {}
            patch = self._patch if self.bound_to is not None else self._write_word
            for position, expression, is_variable in self.symbolic:
                value = values.get(expression) if is_variable else None
                patch(position, value if value is not None else sym_infer(expression, dict(values)))
        device.submissions += 1
        self._submit(device)
        return self

    def _write_word(self, position: int, value: int) -> None:
        self.words[position] = value

    # ---- the device-specific part ----

    def _encode_wait(self, signal: SignalType, value: int | UOp) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement _encode_wait")

    def _encode_signal(self, signal: SignalType, value: int | UOp) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement _encode_signal")

    def _encode_timestamp(self, signal: SignalType) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement _encode_timestamp")

    def _encode_exec(self, program: ProgramType, arguments: HCQArguments, global_size: tuple[int | UOp, ...],
                     local_size: tuple[int | UOp, ...] | None) -> None:
        raise NotImplementedError(f"{type(self).__name__} has no exec: it is not a compute queue")

    def _encode_copy(self, destination: object, source: object, nbytes: int | UOp) -> None:
        raise NotImplementedError(f"{type(self).__name__} has no copy command")

    def _encode_memory_barrier(self) -> None:
        """Default: nothing (devices whose commands see each other's writes in order)."""

    def _submit(self, device: QueueDevice) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement _submit")

    def _bind(self, device: QueueDevice) -> None:
        """Default: nothing (the words stay in `self.words`, which `_submit` reads)."""

    def _patch(self, position: int, value: int) -> None:
        """Default: rewrite the word in `self.words` (a plugin with a bound copy writes there)."""
        self.words[position] = value
