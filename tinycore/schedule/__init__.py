"""Scheduling: tensor-level graphs to ordered kernels (ASTs over buffers) and copies."""
from __future__ import annotations

from tinycore.schedule.cache import clear_schedule_cache, schedule_cached, structure_key
from tinycore.schedule.fusion import find_roots
from tinycore.schedule.lower import lower_kernel
from tinycore.schedule.scheduler import Schedule, ScheduleItem, create_schedule

__all__ = ["Schedule", "ScheduleItem", "create_schedule", "schedule_cached", "clear_schedule_cache",
           "structure_key", "find_roots", "lower_kernel"]
