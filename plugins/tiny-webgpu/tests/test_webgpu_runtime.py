"""The WEBGPU runtime: copies both ways (views, odd sizes), dtype and limit errors, dispatch splitting, timing,
adapter selection by interface and what `tiny devices` reports."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
import tiny_webgpu.hooks as hooks
from tiny_webgpu.renderer import KernelLayout, WGSLRenderer
from tiny_webgpu.runtime import WebGPUProgram

from tinycore.device.buffer import Buffer
from tinycore.dtype import dtypes
from tinycore.tensor import Tensor

RNG = np.random.default_rng(11)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint8, np.int16, np.bool_, np.float16])
def test_copies_both_ways(webgpu: Any, dtype: Any) -> None:
    for size in (1, 3, 7, 1000):
        array = (RNG.standard_normal(size) * 100).astype(dtype)
        on_device = Tensor(array, device="WEBGPU")
        np.testing.assert_array_equal(on_device.numpy(), array)
        np.testing.assert_array_equal(on_device.to("CPU").numpy(), array)
        back = Tensor(array, device="CPU").to("WEBGPU")
        assert back.device == "WEBGPU"
        np.testing.assert_array_equal(back.numpy(), array)


def test_views_at_unaligned_offsets(webgpu: Any) -> None:
    base = Buffer("WEBGPU", 11, dtypes.uint8).allocate()
    base.copyin(memoryview(bytes(range(11))))
    view = base.view(5, dtypes.uint8, 3)
    view.copyin(memoryview(bytes([200, 201, 202, 203, 204])))
    assert base.tobytes() == bytes([0, 1, 2, 200, 201, 202, 203, 204, 8, 9, 10])
    assert view.tobytes() == bytes([200, 201, 202, 203, 204])
    words = Buffer("WEBGPU", 6, dtypes.float32).allocate()
    words.copyin(memoryview(np.arange(6, dtype=np.float32).tobytes()))
    np.testing.assert_array_equal(np.frombuffer(words.view(3, dtypes.float32, 2).tobytes(), np.float32), [2, 3, 4])


def test_kernels_read_and_write_views(webgpu: Any) -> None:
    array = RNG.standard_normal(40).astype(np.float32)
    tensor = Tensor(array, device="WEBGPU").realize()
    np.testing.assert_allclose((tensor[13:29] * 2).numpy(), array[13:29] * 2, rtol=1e-6)
    narrow = RNG.integers(-100, 100, 23).astype(np.int8)
    np.testing.assert_array_equal((Tensor(narrow, device="WEBGPU").realize()[5:18] + 1).numpy(), narrow[5:18] + 1)


@pytest.mark.parametrize("dtype", [dtypes.float64, dtypes.int64])
def test_64_bit_dtypes_are_refused_naming_dtype_and_device(webgpu: Any, dtype: Any) -> None:
    tensor = Tensor([1, 2, 3], device="WEBGPU", dtype=dtype)
    with pytest.raises(Exception, match=f"{dtype!r}.*not supported on WEBGPU"):
        (tensor + 1).numpy()


def storage_buffer_limit(webgpu: Any) -> int:
    """maxStorageBuffersPerShaderStage as the adapter reports it (and the GPU device was created with)."""
    adapter_limit = int(webgpu.context.adapter.limits["max-storage-buffers-per-shader-stage"])
    assert webgpu.context.limit("max-storage-buffers-per-shader-stage") <= adapter_limit
    return webgpu.context.limit("max-storage-buffers-per-shader-stage")


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_a_sum_of_more_tensors_than_storage_buffers_is_split(webgpu: Any, dtype: Any) -> None:
    from tinycore.engine.memory import device_facts
    from tinycore.schedule import create_schedule
    limit = storage_buffer_limit(webgpu)
    assert webgpu.renderer.max_buffers == limit
    arrays = [(RNG.standard_normal(37) * 10).astype(dtype) for _ in range(limit + 9)]
    tensors = [Tensor(array, device="WEBGPU").realize() for array in arrays]
    total, expected = tensors[0], arrays[0]
    for tensor, array in zip(tensors[1:], arrays[1:], strict=True):
        total, expected = total + tensor, expected + array
    kernels = [item for item in create_schedule([total.uop], device_facts).items if not item.is_copy]
    assert len(kernels) == 2 and all(len(item.buffers) <= limit for item in kernels)
    np.testing.assert_array_equal(total.numpy(), expected)  # the same adds in the same order as numpy's


def test_a_reduce_of_more_tensors_than_storage_buffers_is_split(webgpu: Any) -> None:
    limit = storage_buffer_limit(webgpu)
    arrays = [RNG.integers(-20, 20, (6, 9)).astype(np.int32) for _ in range(limit + 3)]
    tensors = [Tensor(array, device="WEBGPU").realize() for array in arrays]
    total, expected = tensors[0] * tensors[1], arrays[0] * arrays[1]
    for tensor, array in zip(tensors[2:], arrays[2:], strict=True):
        total, expected = total + tensor, expected + array
    np.testing.assert_array_equal(total.sum(axis=1).numpy(), expected.sum(axis=1))


def test_the_renderer_still_refuses_a_kernel_over_the_limit(webgpu: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from tinycore.schedule import clear_schedule_cache
    limit = webgpu.renderer.max_storage_buffers
    inputs = [Tensor(np.full(4, index, np.float32), device="WEBGPU").realize() for index in range(limit + 1)]
    total = inputs[0]
    for tensor in inputs[1:]:
        total = total - tensor
    monkeypatch.setattr(webgpu.renderer, "max_buffers", None)  # the scheduler no longer splits for this device
    clear_schedule_cache()
    try:
        with pytest.raises(Exception, match="storage buffers.*maxStorageBuffersPerShaderStage"):
            total.numpy()
    finally:
        clear_schedule_cache()


def test_dispatch_split_respects_workgroups_per_dimension(webgpu: Any) -> None:
    program = next(iter(webgpu_programs(webgpu)))
    limit = program.max_groups
    per_group = program.layout.workgroup[0]
    threads = limit * per_group * 3 + 5
    groups, total, stride_y, _stride_z = program.dispatch_size((threads, 1, 1), (1, 1, 1))
    assert total == threads and max(groups) <= limit and groups[0] * groups[1] * groups[2] * per_group >= threads
    assert stride_y == groups[0] * per_group


def webgpu_programs(webgpu: Any) -> list[WebGPUProgram]:
    """The compiled programs of a flat (no local index) elementwise kernel on the device."""
    renderer = webgpu.renderer
    assert isinstance(renderer, WGSLRenderer)
    from tinycore.engine.realize import _runners
    (Tensor(np.ones(8, np.float32), device="WEBGPU") * 3).realize()
    return [runner.program for (_ast, device, _threads), runner in _runners.items()
            if device == "WEBGPU" and "lidx" not in runner.spec.src]


def test_large_launch_over_the_per_dimension_limit(webgpu: Any) -> None:
    count = 65535 * 64 + 4096  # more workgroups of 64 threads than one dimension allows
    array = np.arange(count, dtype=np.float32)
    np.testing.assert_array_equal((Tensor(array, device="WEBGPU") + 1).numpy(), array + 1)


def test_timed_launch_returns_seconds(webgpu: Any) -> None:
    program = webgpu_programs(webgpu)[0]
    handles = [Buffer("WEBGPU", 8, dtypes.float32).allocate()._buf for _ in program.layout.element_sizes]
    elapsed = program(*handles, global_size=(8, 1, 1), local_size=(1, 1, 1), wait=True)
    assert isinstance(elapsed, float) and 0 < elapsed < 10


def test_kernel_layout_header_round_trips() -> None:
    layout = KernelLayout([4, 1, 2], [False, True, True], ["n", "start_pos"], (64, 1, 1), True)
    parsed = KernelLayout.parse(layout.header() + "\nfn main() {}\n")
    assert (parsed.element_sizes, parsed.packed, parsed.variables) == ([4, 1, 2], [False, True, True],
                                                                       ["n", "start_pos"])
    with pytest.raises(ValueError, match="not a kernel rendered by the WGSL renderer"):
        KernelLayout.parse("fn main() {}")


def test_renderer_literals() -> None:
    renderer = WGSLRenderer(has_f16=False)
    assert renderer.render_const(float("inf"), dtypes.float32) == "bitcast<f32>(0x7f800000u)"
    assert renderer.render_const(-2 ** 31, dtypes.int32) == "(-2147483647i-1)"
    assert renderer.render_const(3, dtypes.uint8) == "3u"
    assert renderer.render_const(0.5, dtypes.float32) == "0.5f"
    with pytest.raises(TypeError, match="float16 is not supported on WEBGPU.*shader-f16"):
        renderer.render_const(1.0, dtypes.float16)


def test_probe_names_backend_and_type(webgpu: Any) -> None:
    ok, reason, count = hooks.probe()
    assert ok and count >= 1
    assert webgpu.context.backend in reason and webgpu.context.adapter_type in reason
    assert webgpu.description in reason


def test_tiny_devices_shows_the_adapter() -> None:
    environment = {**os.environ, "TINYCORE_PLUGINS": "webgpu", "NO_COLOR": "1"}
    environment.pop("DEV", None)
    result = subprocess.run([sys.executable, "-m", "tinycore.cli", "devices", "--json"], capture_output=True,
                            text=True, env=environment, timeout=120)
    assert result.returncode == 0, result.stderr
    (device,) = [row for row in json.loads(result.stdout)["devices"] if row["name"] == "WEBGPU"]
    assert device["status"] not in ("unavailable", "fails to open"), device
    assert "WebGPU adapter" in device["reason"] and "[" in device["reason"]


def test_opengl_interface_runs_kernels() -> None:
    script = ("import numpy as np\n"
              "from tinycore.tensor import Tensor\n"
              "from tinycore.device.registry import Device\n"
              "a = np.array([-7, 7, -8, 9], dtype=np.int32)\n"
              "x = Tensor(a, device='WEBGPU')\n"
              "assert (x % 3).tolist() == (a % 3).tolist(), (x % 3).tolist()\n"
              "assert (x // 2).tolist() == (a // 2).tolist()\n"
              "f = np.array([0.5, 2.0, 3.0], dtype=np.float32)\n"
              "assert np.allclose((Tensor(f, device='WEBGPU') * 2).sum().numpy(), 11.0)\n"
              "print(Device['WEBGPU'].description)\n")
    ok, reason, _count = hooks.probe()
    if "OpenGL" not in reason:
        pytest.fail(f"no OpenGL adapter ({reason}): Mesa's libgl1-mesa-dri provides llvmpipe")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "DEV": "GL+WEBGPU"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "OpenGL" in result.stdout


def test_scatter_reductions_use_atomics(webgpu: Any) -> None:
    """float32, int32 and uint32 scatter reductions with about 50 values per element run in parallel through WGSL
    atomics (atomicAdd / atomicMax / atomicMin on atomic<i32>, compare-exchange loops on float bits and products) and
    equal numpy's ufunc.at."""
    from tinycore.codegen import lower_to_program
    from tinycore.schedule import create_schedule
    count = 2000
    index = RNG.integers(-37, 37, count).astype(np.int32)
    cases = ((np.float32, "sum", np.add, "atomicCompareExchangeWeak"),
             (np.float32, "amin", np.minimum, "atomicCompareExchangeWeak"),
             (np.int32, "sum", np.add, "atomicAdd"), (np.int32, "amax", np.maximum, "atomicMax"),
             (np.uint32, "amin", np.minimum, "atomicMin"), (np.int32, "prod", np.multiply, "atomicCompareExchange"))
    for numpy_dtype, reduce, ufunc, atomic in cases:
        values = (RNG.integers(0, 2, count) * 2 - 1 if reduce == "prod" else RNG.integers(0, 50, count))
        values = values.astype(numpy_dtype)
        base = RNG.integers(1, 3, 37).astype(numpy_dtype)
        expected = base.copy()
        ufunc.at(expected, index, values)
        result = Tensor(base, device="WEBGPU").scatter_reduce(0, Tensor(index, device="WEBGPU"),
                                                              Tensor(values, device="WEBGPU"), reduce)
        kernels = [item for item in create_schedule([result.uop]).items if not item.is_copy]
        assert atomic in lower_to_program(kernels[-1].ast, webgpu.renderer).src
        np.testing.assert_array_equal(result.numpy(), expected, err_msg=f"{reduce} of {numpy_dtype.__name__}")
