"""WEBGPU bind group cache: repeated launches on the same buffers reuse their bind group, results stay numpy's
across many alloc/free cycles (freed buffers leave the cache, reused ids get fresh bind groups), caches stay bounded."""
from __future__ import annotations

import gc
from typing import Any

import numpy as np
import pytest
from tiny_webgpu.runtime import BIND_GROUP_CACHE_SIZE, WebGPUProgram

from tinycore.engine.jit import TinyJit
from tinycore.tensor import Tensor

RNG = np.random.default_rng(23)


def count_bind_groups(monkeypatch: pytest.MonkeyPatch, webgpu: Any) -> list[int]:
    """Wrap the GPU device's create_bind_group; the returned one-item list counts the calls."""
    device = webgpu.context.device
    original = device.create_bind_group
    created = [0]

    def counting(*args: Any, **kwargs: Any) -> Any:
        created[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(device, "create_bind_group", counting)
    return created


def webgpu_programs() -> list[WebGPUProgram]:
    """Every compiled WEBGPU program of this process."""
    from tinycore.engine.realize import _runners
    return [runner.program for (_ast, device, _threads), runner in _runners.items() if device == "WEBGPU"]


def test_jit_replays_reuse_bind_groups_and_match_numpy(webgpu: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    created = count_bind_groups(monkeypatch, webgpu)

    def step(value: Tensor) -> Tensor:
        value = (value * 2 + 1).realize()
        value = (value - 3).realize()
        return (value * value).realize()

    jitted = TinyJit(step)
    arrays = [RNG.standard_normal(33).astype(np.float32) for _ in range(2)]
    inputs = [Tensor(array, device="WEBGPU").realize() for array in arrays]
    warm_up = None
    for call in range(12):
        if call == 4:
            warm_up = created[0]
        result = jitted(inputs[call % 2])
        expected = ((arrays[call % 2] * 2 + 1) - 3) ** 2
        np.testing.assert_allclose(result.numpy(), expected, rtol=1e-5, atol=1e-5)
    assert warm_up is not None and warm_up > 0
    assert created[0] == warm_up  # the replays on the same two inputs created no bind group


def test_same_buffers_reuse_bind_group_views_at_other_offsets_do_not(webgpu: Any,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    array = RNG.standard_normal(64).astype(np.float32)
    base = Tensor(array, device="WEBGPU").realize()
    (base[0:16] + 1).realize()  # compile the kernel once
    created = count_bind_groups(monkeypatch, webgpu)
    for start in (0, 16, 32, 0, 16, 32, 0):
        np.testing.assert_allclose((base[start:start + 16] + 1).numpy(), array[start:start + 16] + 1, rtol=1e-6)
        # a temporary's buffer goes back to the allocator's cache when its last holder dies; collect anyway, so the
        # count below does not depend on when Python's collector last ran
        gc.collect()
    # the views at 16 and 32 bind their offsets once each (the one at 0 may reuse the warm-up's bind group, whose
    # output buffer comes back from the allocator's cache); never one per call
    assert 2 <= created[0] < 7


def test_alloc_free_cycles_stay_correct_and_drop_freed_buffers(webgpu: Any) -> None:
    allocator = webgpu.allocator
    for cycle in range(40):
        size = int(RNG.integers(1, 5)) * 8
        left = RNG.standard_normal(size).astype(np.float32)
        right = RNG.standard_normal(size).astype(np.float32)
        total = Tensor(left, device="WEBGPU") * Tensor(right, device="WEBGPU") + cycle
        np.testing.assert_allclose(total.numpy(), left * right + cycle, rtol=1e-5, atol=1e-5)
        del total
        if cycle % 3 == 0:
            allocator.free_cache()  # destroy the cached buffers: their ids may come back for new buffers
            live = {id(buffer) for buffer in allocator._live.values()}
            for program in webgpu_programs():
                for _group, _starts, buffers in program.bind_groups.entries.values():
                    assert all(id(buffer) in live for buffer in buffers)
            assert set(webgpu.context.bind_group_users) <= live


def test_bind_group_cache_stays_bounded(webgpu: Any) -> None:
    weights = RNG.standard_normal(16).astype(np.float32)
    scale = Tensor(weights, device="WEBGPU").realize()
    kept = []
    for _ in range(3 * BIND_GROUP_CACHE_SIZE):
        array = RNG.standard_normal(16).astype(np.float32)
        operand = Tensor(array, device="WEBGPU").realize()
        product = (operand * scale).realize()
        kept.append((operand, product))  # keep every buffer alive: each launch binds a new set
        np.testing.assert_allclose(product.numpy(), array * weights, rtol=1e-6)
    sizes = [len(program.bind_groups) for program in webgpu_programs()]
    assert sizes and max(sizes) <= BIND_GROUP_CACHE_SIZE
    assert max(program.bind_groups.created for program in webgpu_programs()) >= 3 * BIND_GROUP_CACHE_SIZE
