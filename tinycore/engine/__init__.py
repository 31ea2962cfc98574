"""The engine: device memory behind BUFFER nodes, and realizing tensor graphs (schedule, compile, run)."""
from __future__ import annotations

from tinycore.engine.memory import buffer_of, device_facts, new_buffer_uop, uop_from_bytes
from tinycore.engine.realize import realize_uops, run_schedule, to_host

__all__ = ["buffer_of", "device_facts", "new_buffer_uop", "realize_uops", "run_schedule", "to_host", "uop_from_bytes"]
