"""Representative kernels rendered to WGSL and run on the WebGPU adapter through Tensor, checked against numpy."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tinycore.dtype import dtypes
from tinycore.tensor import Tensor

RNG = np.random.default_rng(7)


def on_webgpu(array: np.ndarray) -> Tensor:
    """`array` as a WEBGPU tensor."""
    return Tensor(array, device="WEBGPU")


def test_elementwise_float(webgpu: Any) -> None:
    a = RNG.standard_normal((5, 37)).astype(np.float32)
    b = RNG.standard_normal((5, 37)).astype(np.float32) + 3
    x, y = on_webgpu(a), on_webgpu(b)
    np.testing.assert_allclose((x * y + x / y - 1.5).numpy(), a * b + a / b - 1.5, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(x.maximum(y - 3).numpy(), np.maximum(a, b - 3), rtol=0)
    np.testing.assert_allclose((-x).relu().numpy(), np.maximum(-a, 0), rtol=0)


def test_math_builtins(webgpu: Any) -> None:
    a = RNG.uniform(0.1, 4.0, (64,)).astype(np.float32)
    x = on_webgpu(a)
    np.testing.assert_allclose(x.exp2().numpy(), np.exp2(a), rtol=1e-5)
    np.testing.assert_allclose(x.log2().numpy(), np.log2(a), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(x.sin().numpy(), np.sin(a), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(x.sqrt().numpy(), np.sqrt(a), rtol=1e-6)
    np.testing.assert_allclose(x.exp().numpy(), np.exp(a), rtol=1e-5)


def test_nan_and_inf(webgpu: Any) -> None:
    a = np.array([0.0, -1.0, np.inf, -np.inf, np.nan, 2.0, -0.0, 1e30], dtype=np.float32)
    x = on_webgpu(a)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(x.log2().numpy(), np.log2(a))
        np.testing.assert_array_equal(x.sqrt().numpy(), np.sqrt(a))
        np.testing.assert_array_equal(x.exp2().numpy(), np.exp2(a))
        np.testing.assert_array_equal((x * 1e10).numpy(), a * np.float32(1e10))
        np.testing.assert_array_equal((1 / x).numpy(), 1 / a)
    np.testing.assert_array_equal((x != x).numpy(), np.isnan(a))
    np.testing.assert_array_equal((x < 1).numpy(), a < 1)
    np.testing.assert_array_equal(x.isinf().numpy(), np.isinf(a))
    np.testing.assert_array_equal(Tensor.full((3,), float("-inf"), device="WEBGPU").numpy(), [-np.inf] * 3)


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_reduce(webgpu: Any, axis: int | None) -> None:
    a = RNG.standard_normal((23, 45)).astype(np.float32)
    x = on_webgpu(a)
    np.testing.assert_allclose(x.sum(axis=axis).numpy(), a.sum(axis=axis), rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(x.max(axis=axis).numpy(), a.max(axis=axis))


def test_reduce_integers_and_mean(webgpu: Any) -> None:
    a = RNG.integers(-1000, 1000, (17, 30)).astype(np.int32)
    x = on_webgpu(a)
    np.testing.assert_array_equal(x.sum(axis=1).numpy(), a.sum(axis=1))
    np.testing.assert_array_equal(x.min(axis=0).numpy(), a.min(axis=0))
    f = a.astype(np.float32)
    np.testing.assert_allclose(on_webgpu(f).mean(axis=0).numpy(), f.mean(axis=0), rtol=1e-5)


def test_matmul(webgpu: Any) -> None:
    a = RNG.standard_normal((33, 17)).astype(np.float32)
    b = RNG.standard_normal((17, 29)).astype(np.float32)
    np.testing.assert_allclose((on_webgpu(a) @ on_webgpu(b)).numpy(), a @ b, rtol=1e-4, atol=1e-4)
    batch = RNG.standard_normal((3, 8, 16)).astype(np.float32)
    np.testing.assert_allclose((on_webgpu(batch) @ on_webgpu(batch).transpose(1, 2)).numpy(),
                               batch @ batch.transpose(0, 2, 1), rtol=1e-4, atol=1e-4)


def test_where_and_padding_masks(webgpu: Any) -> None:
    a = RNG.standard_normal((6, 7)).astype(np.float32)
    x = on_webgpu(a)
    np.testing.assert_array_equal((x > 0).where(x, -x).numpy(), np.where(a > 0, a, -a))
    np.testing.assert_array_equal(x.pad(((1, 2), (3, 0))).numpy(), np.pad(a, ((1, 2), (3, 0))))
    padded = x.pad(((2, 2), (2, 2)))[1:-1, 1:-1] * 2 + 1
    np.testing.assert_allclose(padded.numpy(), np.pad(a, ((1, 1), (1, 1))) * 2 + 1, rtol=1e-6)
    np.testing.assert_array_equal(x.flip(1)[2:5].numpy(), a[:, ::-1][2:5])
    np.testing.assert_allclose(x.pad(((0, 0), (1, 1))).sum(axis=1).numpy(), a.sum(axis=1), rtol=1e-5, atol=1e-5)


def test_int32_ops(webgpu: Any) -> None:
    a = np.array([-7, 7, -8, 9, 0, 2**31 - 1, -2**31, 5], dtype=np.int32)
    b = np.array([2, -2, 3, -4, 5, 2, 3, -1], dtype=np.int32)
    x, y = on_webgpu(a), on_webgpu(b)
    np.testing.assert_array_equal((x // y).numpy(), a // b)
    np.testing.assert_array_equal((x % y).numpy(), a % b)
    np.testing.assert_array_equal((x + y).numpy(), a + b)
    np.testing.assert_array_equal((x * y).numpy(), a * b)
    np.testing.assert_array_equal((x & y).numpy(), a & b)
    np.testing.assert_array_equal((x | y).numpy(), a | b)
    np.testing.assert_array_equal((x ^ y).numpy(), a ^ b)
    np.testing.assert_array_equal((x << 3).numpy(), a << 3)
    np.testing.assert_array_equal((x >> 2).numpy(), a >> 2)
    np.testing.assert_array_equal((x < y).numpy(), a < b)
    np.testing.assert_array_equal(x.maximum(y).numpy(), np.maximum(a, b))
    u = np.array([1, 2**32 - 1, 2**31, 7], dtype=np.uint32)
    np.testing.assert_array_equal((on_webgpu(u) // 3).numpy(), u // 3)
    np.testing.assert_array_equal((on_webgpu(u) + 1).numpy(), u + np.uint32(1))


def test_casts_and_bitcast(webgpu: Any) -> None:
    a = np.array([-2.5, -1.0, 0.0, 0.7, 3.9, 200.0, 1e9], dtype=np.float32)
    x = on_webgpu(a)
    np.testing.assert_array_equal(x.cast(dtypes.int32).numpy(), a.astype(np.int32))
    np.testing.assert_array_equal(x.cast(dtypes.bool).numpy(), a.astype(bool))
    np.testing.assert_array_equal(x.bitcast(dtypes.uint32).numpy(), a.view(np.uint32))
    small = np.array([-3, 0, 3, 100], dtype=np.int32)
    np.testing.assert_array_equal(on_webgpu(small).cast(dtypes.int8).numpy(), small.astype(np.int8))
    np.testing.assert_array_equal(on_webgpu(small).cast(dtypes.float32).numpy(), small.astype(np.float32))


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16])
def test_packed_narrow_integers(webgpu: Any, dtype: Any) -> None:
    info = np.iinfo(dtype)
    a = RNG.integers(info.min, info.max, 13, endpoint=True).astype(dtype)
    b = RNG.integers(1, 9, 13).astype(dtype)
    x, y = on_webgpu(a), on_webgpu(b)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal((x + y).numpy(), a + b)
        np.testing.assert_array_equal((x * y).numpy(), a * b)
    np.testing.assert_array_equal((x // y).numpy(), a // b)
    np.testing.assert_array_equal((x < y).numpy(), a < b)
    np.testing.assert_array_equal(x.cast(dtypes.int32).numpy(), a.astype(np.int32))
    np.testing.assert_array_equal(x[3:11].numpy(), a[3:11])


def test_bool_buffers(webgpu: Any) -> None:
    a = RNG.standard_normal(11).astype(np.float32)
    mask = on_webgpu(a) > 0
    np.testing.assert_array_equal(mask.numpy(), a > 0)
    np.testing.assert_array_equal((mask & (on_webgpu(a) < 1)).numpy(), (a > 0) & (a < 1))
    np.testing.assert_array_equal(mask.logical_not().numpy(), ~(a > 0))
    np.testing.assert_array_equal(mask.where(1.0, 2.0).numpy(), np.where(a > 0, 1.0, 2.0).astype(np.float32))
    np.testing.assert_array_equal(mask.sum().numpy(), (a > 0).sum())


def test_float16_with_shader_f16(webgpu: Any) -> None:
    if not webgpu.renderer.has_f16:
        with pytest.raises(Exception, match="float16.*WEBGPU.*shader-f16"):
            (on_webgpu(np.ones(4, np.float16)) + 1).numpy()
        return
    a = RNG.standard_normal(19).astype(np.float16)
    b = RNG.standard_normal(19).astype(np.float16)
    np.testing.assert_array_equal((on_webgpu(a) * on_webgpu(b)).numpy(), a * b)
    np.testing.assert_allclose(on_webgpu(a).cast(dtypes.float32).sum().numpy(), a.astype(np.float32).sum(),
                               rtol=1e-5)


def test_long_reduce_loop(webgpu: Any) -> None:
    """A single-thread reduce of 1M elements: longer than the 65535-iteration loop limit of Mesa's llvmpipe."""
    a = RNG.standard_normal(1 << 20).astype(np.float32)
    np.testing.assert_allclose(on_webgpu(a).sum().numpy(), a.sum(dtype=np.float64), rtol=1e-3, atol=0.05)


def test_float16_bitcasts(webgpu: Any) -> None:
    """float16 <-> int16 / uint16 bitcasts keep the bits (naga rejects the vec2<f16> <-> u32 bitcasts once used)."""
    if not webgpu.renderer.has_f16:
        with pytest.raises(Exception, match="float16.*WEBGPU.*shader-f16"):
            (-on_webgpu(np.ones(4, np.float16))).bitcast(dtypes.int16).numpy()
        return
    halves = np.array([1.5, -2.0, 0.0, 65504.0, np.inf, -np.inf, 6e-8, -3e-5, 0.1], dtype=np.float16)
    for numpy_dtype, dtype in ((np.int16, dtypes.int16), (np.uint16, dtypes.uint16)):
        np.testing.assert_array_equal((-on_webgpu(halves)).bitcast(dtype).numpy(), (-halves).view(numpy_dtype))
        bits = np.arange(-32768, 32768, 7).astype(numpy_dtype)
        bits = bits[~np.isnan((bits ^ numpy_dtype(0x101)).view(np.float16))]  # NaN payloads may change via float32
        np.testing.assert_array_equal((on_webgpu(bits) ^ 0x101).bitcast(dtypes.float16).numpy().view(numpy_dtype),
                                      bits ^ numpy_dtype(0x101))
