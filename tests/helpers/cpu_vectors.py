"""Run CPU kernels with a chosen vector size, whatever the host's: 32 bytes (AVX2) or 64 (AVX-512)."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

VECTOR_BYTES = (32, 64)
"""Both sizes the CPU renderers choose from (tiny_cpu/target.py): tests of the heuristics run both on every host
(64-byte vectors compile everywhere; without AVX-512 the compiler splits them into two registers)."""


@contextlib.contextmanager
def cpu_vector_bytes(count: int) -> Iterator[int]:
    """The CPU renderer set to `count`-byte vectors and matmul panels as tiny-cpu packs them for that size (four
    vectors of 64 bytes, two of 32), with empty kernel and schedule caches (a kernel compiled for the other size is
    not reused); yields the float32 lanes per vector."""
    import tinycore.engine.realize as realize
    from tinycore.device.registry import Device
    from tinycore.schedule.cache import clear_schedule_cache
    renderer = Device["CPU"].renderer
    saved = (renderer.preferred_vector_bytes, renderer.matmul_panel_bytes, realize._runners, realize._beam_runners)
    renderer.preferred_vector_bytes, renderer.matmul_panel_bytes = count, (4 if count >= 64 else 2) * count
    realize._runners, realize._beam_runners = {}, {}
    clear_schedule_cache()
    try:
        yield count // 4
    finally:
        renderer.preferred_vector_bytes, renderer.matmul_panel_bytes, realize._runners, realize._beam_runners = saved
        clear_schedule_cache()
