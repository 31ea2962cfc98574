"""TinyJit as tinygrad 0.14 programs use it: prune=True, .captured (jit_cache, free_intermediates), reset(), copies
to another device inside the jitted function, and GlobalCounters during replays."""
from __future__ import annotations

import gc

import numpy as np
import pytest

from tinycore import Tensor, TinyJit
from tinycore.helpers import GlobalCounters


def _weights() -> Tensor:
    # depends on no input: a kernel that prune=True runs once at capture and drops from the replay
    return (Tensor.arange(16).reshape(4, 4).float() * 0.5 + 1).contiguous()


def _expected(values: np.ndarray) -> np.ndarray:
    weights = np.arange(16, dtype=np.float32).reshape(4, 4) * 0.5 + 1
    return ((values @ weights) + 1).astype(np.float32)


@pytest.mark.parametrize("prune", [False, True])
def test_prune_drops_launches_that_do_not_depend_on_the_inputs(prune: bool) -> None:
    @TinyJit(prune=prune)
    def step(x: Tensor) -> Tensor:
        return (x @ _weights() + 1).realize()

    rng = np.random.default_rng(0)
    for _ in range(5):
        values = rng.standard_normal((3, 4)).astype(np.float32)
        np.testing.assert_allclose(step(Tensor(values)).numpy(), _expected(values), rtol=1e-5, atol=1e-5)
    assert step.captured is not None
    kernels = step.captured_kernel_count
    if prune:
        assert step.captured.pruned_count >= 1 and kernels >= 1
    else:
        assert step.captured.pruned_count == 0
    assert len(step.captured.jit_cache) == sum(1 for call in step.captured.jit_cache if call.runner is not None)


def test_pruned_replay_runs_fewer_kernels_than_the_unpruned_one() -> None:
    counts = []
    for prune in (False, True):
        jitted = TinyJit(lambda x: (x @ _weights() + 1).realize(), prune=prune)
        for _ in range(3):
            jitted(Tensor.ones(3, 4).contiguous())
        GlobalCounters.reset()
        result = jitted(Tensor.full((3, 4), 2.0).contiguous())
        counts.append(GlobalCounters.kernel_count)  # replays count their kernels, as in tinygrad
        np.testing.assert_allclose(result.numpy(), _expected(np.full((3, 4), 2.0, np.float32)), rtol=1e-6)
    unpruned, pruned = counts
    assert pruned < unpruned and pruned >= 1


def test_captured_is_none_until_capture_and_reset_forgets_it() -> None:
    @TinyJit
    def double(x: Tensor) -> Tensor:
        return (x * 2).realize()

    assert double.captured is None
    double(Tensor([1.0, 2.0]).contiguous())
    assert double.captured is None  # the first call only runs the function
    double(Tensor([1.0, 2.0]).contiguous())
    assert double.captured is not None and len(double.captured.jit_cache) >= 1
    assert double.captured.ret is not None
    assert double(Tensor([3.0, 4.0]).contiguous()).tolist() == [6.0, 8.0]
    double.reset()
    assert double.captured is None
    assert double(Tensor([5.0, 6.0, 7.0]).contiguous()).tolist() == [10.0, 12.0, 14.0]  # a new shape after reset


def test_free_intermediates_releases_memory_and_the_next_replay_still_works() -> None:
    @TinyJit
    def chain(x: Tensor) -> Tensor:
        hidden = (x * 3).contiguous().realize()
        hidden = (hidden.exp() + 1).contiguous().realize()
        return (hidden.sum(axis=1) * 2).realize()

    rng = np.random.default_rng(1)
    for _ in range(3):
        values = rng.standard_normal((64, 256)).astype(np.float32)
        chain(Tensor(values))
    assert chain.captured is not None
    gc.collect()
    before = GlobalCounters.mem_used
    chain.captured.free_intermediates()
    assert GlobalCounters.mem_used < before  # the planned intermediates (64 x 256 floats each) went back
    values = rng.standard_normal((64, 256)).astype(np.float32)
    expected = ((np.exp(values * 3) + 1).sum(axis=1) * 2).astype(np.float32)
    np.testing.assert_allclose(chain(Tensor(values)).numpy(), expected, rtol=1e-5)


def test_copies_to_another_device_are_captured_and_replayed() -> None:
    @TinyJit
    def moved(x: Tensor) -> Tensor:
        return (x.to("CPU:1") * 2 + 1).realize()

    for step in range(5):
        values = np.arange(6, dtype=np.float32) + step
        result = moved(Tensor(values))
        assert result.device == "CPU:1"
        np.testing.assert_array_equal(result.numpy(), values * 2 + 1)
    assert moved.captured is not None
    assert any(call.runner is None for call in moved.captured.jit_cache)  # the copy is part of the replay
