"""tinygrad's multi-device behaviours that ported programs rely on, against numpy and hand-computed values."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from tinycore import Context, Tensor, UOp, dtypes
from tinycore.uop.multi import allreduce
from tinycore.uop.ops import Ops

DEVICES = ("CPU:1", "CPU:2")
FOUR = ("CPU:1", "CPU:2", "CPU:3", "CPU:4")


def test_uop_axis_and_bounds() -> None:
    sharded = Tensor.arange(16).reshape(8, 2).shard(FOUR, axis=0)
    assert sharded.uop.axis == 0
    assert sharded.uop.bounds == [(0, 2), (2, 4), (4, 6), (6, 8)]
    assert Tensor.ones(4).shard(DEVICES).uop.axis is None
    assert Tensor.ones(4).uop.axis is None
    with pytest.raises(ValueError, match="sharded on an axis"):
        _ = Tensor.ones(4).shard(DEVICES).uop.bounds


@pytest.mark.parametrize("first_axis,second_axis", [(0, 1), (1, 0), (None, 1), (1, None)])
def test_elementwise_between_different_shardings_reshards(first_axis: int | None, second_axis: int | None) -> None:
    left = np.arange(24, dtype=np.float32).reshape(4, 6)
    right = np.arange(24, dtype=np.float32).reshape(4, 6)[::-1].copy() * 0.5
    result = Tensor(left).shard(DEVICES, first_axis) * 2 + Tensor(right).shard(DEVICES, second_axis)
    assert result.uop.axis == (first_axis if first_axis is not None else second_axis)
    np.testing.assert_array_equal(result.numpy(), left * 2 + right)


def test_rand_like_and_full_like_keep_the_sharding() -> None:
    for axis in (None, 0, 1):
        template = Tensor.empty(8, 4).shard(DEVICES, axis)
        drawn = template.rand_like()
        filled = template.full_like(3.5)
        assert drawn.device == template.device and drawn.uop.axis == axis and drawn.shape == (8, 4)
        assert filled.device == template.device and filled.uop.axis == axis
        values = drawn.numpy()
        assert values.shape == (8, 4) and ((values >= 0) & (values < 1)).all()
        np.testing.assert_array_equal(filled.numpy(), np.full((8, 4), 3.5, np.float32))
    with pytest.raises(RuntimeError, match="sharded like it"):
        template.rand_like(device=("CPU:3", "CPU:4"))
    with pytest.raises(RuntimeError, match="sharded like it"):
        template.full_like(1.0, device=("CPU:3", "CPU:4"))
    with pytest.raises(ValueError, match="single device"):
        Tensor.rand(4, device=DEVICES)


def test_dropout_on_a_sharded_tensor_keeps_or_doubles() -> None:
    with Context(TRAINING=1):
        output = Tensor.ones(512).shard(DEVICES, axis=0).dropout(0.5).numpy()
    assert set(np.unique(output)) == {0.0, 2.0}
    assert 160 < int((output == 0).sum()) < 352


def test_shard_like_a_single_device_tensor_moves_there() -> None:
    moved = Tensor([1.0, 2.0]).shard_like(Tensor([0.0, 0.0], device="CPU:3"))
    assert moved.device == "CPU:3"
    np.testing.assert_array_equal(moved.numpy(), [1.0, 2.0])


def test_causal_attention_on_a_batch_sharded_over_devices() -> None:
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((4, 2, 5, 8)).astype(np.float32) for _ in range(3))
    sharded = Tensor(q).shard(DEVICES, 0).scaled_dot_product_attention(Tensor(k).shard(DEVICES, 0),
                                                                      Tensor(v).shard(DEVICES, 0), is_causal=True)
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(8)
    scores = np.where(np.tril(np.ones((5, 5), bool)), scores, -np.inf)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    expected = (weights / weights.sum(-1, keepdims=True)) @ v
    np.testing.assert_allclose(sharded.numpy(), expected, rtol=1e-5, atol=1e-6)


def test_a_deviceless_constant_meets_a_sharded_tensor() -> None:
    sharded = Tensor([1.0, 2, 3, 4]).shard(DEVICES, axis=0)
    np.testing.assert_array_equal((sharded + Tensor(UOp.const(dtypes.float, 1.0))).numpy(), [2, 3, 4, 5])


def test_gradient_reaches_a_sharded_leaf() -> None:
    x = Tensor([[1.0, 2, 3, 4], [5, 6, 7, 8]]).shard(DEVICES, axis=0)
    w = Tensor([1.0, 2, 3, 4]).shard(DEVICES)
    (x * w).mean().backward()
    np.testing.assert_allclose(w.grad.numpy(), [0.75, 1.0, 1.25, 1.5])  # column means of x over 4 elements each


def test_context_knows_scache_allreduce_cast_and_wino() -> None:
    with Context(SCACHE=0, ALLREDUCE_CAST=0, WINO=1):
        result = Tensor.arange(32).reshape(4, 8).float().shard(FOUR, 0).sum(0)
        np.testing.assert_array_equal(result.numpy(), np.arange(32).reshape(4, 8).sum(0))


@pytest.mark.parametrize("cast,narrow", [(1, True), (0, False)])
def test_allreduce_cast_keeps_half_partials_half(cast: int, narrow: bool) -> None:
    values = (np.arange(32, dtype=np.float16).reshape(4, 8) * np.float16(0.25))
    with Context(ALLREDUCE_CAST=cast):
        total = Tensor(values).shard(DEVICES, 0).sum(0)
        copies = [node for node in total.uop.toposort if node.op is Ops.COPY and node.src[0].op is not Ops.COPY]
        crossing = {node.src[0].dtype for node in copies if node.src[0].device in DEVICES}
        np.testing.assert_allclose(total.numpy().astype(np.float32), values.astype(np.float32).sum(0), rtol=1e-3)
    assert (dtypes.float not in crossing) is narrow


def test_allreduce_helper_sums_each_device() -> None:
    parts = [Tensor(np.full(3, float(index + 1), np.float32), device=device).uop
             for index, device in enumerate(DEVICES)]
    reduced = [Tensor(node).numpy() for node in allreduce(Ops.ADD, parts)]
    for value in reduced:
        np.testing.assert_array_equal(value, [3.0, 3.0, 3.0])


def test_linear_schedule_lists_the_ring_copies_and_runs() -> None:
    from tinycore.engine.realize import run_linear
    devices = FOUR
    data = np.arange(4 * 400, dtype=np.float32).reshape(4, 400)
    with Context(RING=2):
        total = Tensor(data).shard(devices, axis=0).realize().sum(0)
        linear, var_vals = total.linear_with_vars()
    copies = [call for call in linear.src if call.src[0].op is Ops.COPY]
    kernels = [call for call in linear.src if call.src[0].op is Ops.SINK]
    pairs = {(call.src[1].buffer.device, call.src[2].buffer.device) for call in copies}
    # a reduce-scatter and an all-gather: each of the 4 chunks crosses 3 links, twice, always to the next device
    assert len(copies) == 4 * 3 * 2 and len(pairs) == 4 and kernels and var_vals == {}
    assert all(int(destination.split(":")[1]) == int(source.split(":")[1]) % 4 + 1 for destination, source in pairs)
    run_linear(linear, var_vals)
    np.testing.assert_array_equal(total.numpy(), data.sum(0))


def test_linear_schedule_runs_a_sharded_kernel_as_one_call_over_its_devices() -> None:
    from tinycore.engine.realize import run_linear
    data = np.arange(4 * 64, dtype=np.float32).reshape(4, 64)
    with Context(RING=0, ALL2ALL=0):
        total = Tensor(data).shard(FOUR, axis=0).realize().sum(0)
        linear, var_vals = total.linear_with_vars()
    kinds = [call.src[0].op for call in linear.src]
    # the naive allreduce: each device's partial sum, every partial sent to the 3 other devices, each device's total
    assert kinds == [Ops.SINK] + [Ops.COPY] * 12 + [Ops.SINK]
    for kernel in (linear.src[0], linear.src[-1]):
        assert kernel.device == FOUR and len(kernel.items) == 4
        assert all(argument.device == FOUR for argument in kernel.src[1:])
    partials = linear.src[0].src[1].buffer  # tinygrad's MultiBuffer: one Buffer of the 64 partial sums per device
    assert [buffer.device for buffer in partials.bufs] == list(FOUR) and partials.size == 64
    assert partials.dtype == dtypes.float32 and not partials.is_allocated()
    copies = [(call.src[1].buffer.device, call.src[2].buffer.device) for call in linear.src[1:-1]]
    assert sorted(copies) == sorted((destination, source) for destination in FOUR for source in FOUR
                                    if destination != source)
    assert len(linear.items) == 4 + 12 + 4
    run_linear(linear, var_vals)
    np.testing.assert_array_equal(total.numpy(), data.sum(0))


def test_linear_schedule_batchnorm_on_sharded_input_is_one_kernel_on_every_device() -> None:
    from tinycore.engine.realize import run_linear
    from tinycore.nn import BatchNorm2d
    data = np.random.default_rng(3).standard_normal((8, 4, 3, 3)).astype(np.float32)
    norm = BatchNorm2d(4)
    for parameter in (norm.weight, norm.bias, norm.running_mean, norm.running_var):
        parameter.shard_(FOUR).realize()
    output = norm(Tensor(data).shard(FOUR, axis=0).realize())
    linear, var_vals = output.linear_with_vars()
    kernels = [call for call in linear.src if call.src[0].op is Ops.SINK]
    assert [call.device for call in kernels] == [FOUR]
    run_linear(linear, var_vals)
    expected = torch.nn.functional.batch_norm(torch.tensor(data), torch.zeros(4), torch.ones(4), torch.ones(4),
                                              torch.zeros(4), training=False, eps=1e-5).numpy()
    np.testing.assert_allclose(output.numpy(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cast", [0, 1])
def test_linear_schedule_copy_dtypes_follow_allreduce_cast(cast: int) -> None:
    with Context(ALLREDUCE_CAST=cast, RING=0):
        total = Tensor(np.ones((4, 4), np.float16)).shard(DEVICES, axis=0).sum(0)
        linear = total.schedule_linear()
    crossing = {call.src[1].buffer.dtype for call in linear.src
                if call.src[0].op is Ops.COPY and call.src[2].device in DEVICES}
    assert crossing == ({dtypes.half} if cast else {dtypes.float})


def test_scache_zero_neither_reads_nor_fills_the_schedule_cache() -> None:
    from tinycore.schedule.cache import cached_template, schedule_cached, structure_key
    graph = (Tensor.arange(12).float().reshape(3, 4) * 7 + 1).sum(1).uop
    key = structure_key([graph])[0]
    with Context(SCACHE=0):
        schedule_cached([graph])
        assert cached_template(key) is None
    schedule_cached([graph])
    assert cached_template(key) is not None  # filled once the cache is on again
    with Context(SCACHE=0):
        assert cached_template(key) is None  # and not read while it is off
