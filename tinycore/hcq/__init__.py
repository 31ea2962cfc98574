"""Hardware command queues (HCQ): the machinery the core drives for queue-based devices.

- signal.py: HCQSignal (a 64-bit value and a timestamp the device writes), DeviceTimeoutError
- queue.py: HWQueue, generic over its signal and program classes (wait, signal, timestamp, exec, copy,
  memory_barrier, bind, submit; the encoding hooks), HCQArguments (a kernel's argument block)
- device.py: HCQCompiled (timeline, argument blocks, synchronize, recover), HCQProgram
- graph.py: HCQGraph, a TinyJit capture as one bound queue, patched and resubmitted on replay
- profile.py: PROFILE=1 traces from queue timestamps

A plugin provides the encodings by answering the `tiny_hcq_queues` hook (tinycore.plugins.hookspecs).
"""
from __future__ import annotations

from tinycore.hcq.device import HCQCompiled, HCQProgram, KernargRing
from tinycore.hcq.queue import HCQArguments, HWQueue
from tinycore.hcq.signal import DeviceTimeoutError, HCQSignal

__all__ = ["HCQArguments", "HCQCompiled", "HCQProgram", "KernargRing", "HWQueue", "DeviceTimeoutError", "HCQSignal"]
