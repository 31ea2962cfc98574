"""The core's GPU codegen on WEBGPU: workgroup sizes fixed in the shader, group reduces through `var<workgroup>`
arrays and `workgroupBarrier()`, register tiles, and the adapter's workgroup limits. Results are checked against
numpy; the WGSL is inspected only to see which path a kernel took."""
from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from tiny_webgpu.renderer import CPU_REGISTER_TILE, WGSLRenderer
from tiny_webgpu.runtime import simd_lanes

from tinycore.codegen import lower_to_program
from tinycore.dtype import dtypes
from tinycore.engine.memory import device_facts
from tinycore.schedule.scheduler import create_schedule
from tinycore.tensor import Tensor
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp

RNG = np.random.default_rng(11)


def on_webgpu(array: np.ndarray) -> Tensor:
    """`array` as a WEBGPU tensor."""
    return Tensor(array, device="WEBGPU")


def kernel_sources(tensor: Tensor, renderer: Any) -> list[str]:
    """The WGSL of every kernel that realizing `tensor` runs, rendered by `renderer`."""
    schedule = create_schedule([tensor.uop], device_facts)
    return [lower_to_program(item.ast, renderer).src for item in schedule.items if item.ast.op is not Ops.COPY]


def workgroup_of(source: str) -> tuple[int, int, int]:
    """The `@workgroup_size(x,y,z)` of a rendered kernel."""
    found = re.search(r"@workgroup_size\((\d+),(\d+),(\d+)\)", source)
    assert found is not None, source
    return int(found.group(1)), int(found.group(2)), int(found.group(3))


def test_workgroup_limits_come_from_the_adapter(webgpu: Any) -> None:
    limits = webgpu.context.device.limits
    renderer = webgpu.renderer
    assert renderer.local_max == (limits["max-compute-workgroup-size-x"], limits["max-compute-workgroup-size-y"],
                                  limits["max-compute-workgroup-size-z"])
    assert renderer.max_workgroup_invocations == limits["max-compute-invocations-per-workgroup"]
    assert renderer.shared_max == limits["max-compute-workgroup-storage-size"]
    assert renderer.max_groups == limits["max-compute-workgroups-per-dimension"]
    assert renderer.global_max[1:] == (renderer.max_groups, renderer.max_groups)
    assert 2 <= renderer.max_local_total <= renderer.max_workgroup_invocations
    assert renderer.cpu_adapter == (webgpu.context.adapter_type == "CPU")


def test_simd_lanes_from_the_adapter_name() -> None:
    assert simd_lanes("llvmpipe (LLVM 15.0.6, 256 bits)") == 8
    assert simd_lanes("llvmpipe (LLVM 12.0.0, 128 bits)") == 4
    assert simd_lanes("NVIDIA GeForce RTX 3060") == 8


@pytest.mark.parametrize("size", [1 << 20, 100003, 4099])
def test_full_reduce_is_a_group_reduce(webgpu: Any, size: int) -> None:
    """One output: the work-items of one workgroup reduce strided slices and combine them in workgroup memory
    (sizes the group does not divide included)."""
    a = RNG.standard_normal(size).astype(np.float32)
    x = on_webgpu(a)
    [source] = kernel_sources(x.sum(), webgpu.renderer)
    assert "var<workgroup>" in source and "workgroupBarrier();" in source
    group = workgroup_of(source)
    assert group[0] >= 2 and group[1:] == (1, 1)
    assert group[0] * 4 <= webgpu.renderer.shared_max
    np.testing.assert_allclose(x.sum().numpy(), a.sum(dtype=np.float64), rtol=1e-4, atol=1e-2)
    assert x.max().numpy() == a.max()
    integers = RNG.integers(-1000, 1000, size).astype(np.int32)
    assert on_webgpu(integers).sum().numpy() == integers.sum()


def test_group_reduce_of_few_outputs(webgpu: Any) -> None:
    """Column sums of a tall matrix: few outputs, each reduced by a workgroup."""
    a = RNG.standard_normal((4099, 24)).astype(np.float32)
    x = on_webgpu(a)
    [source] = kernel_sources(x.sum(0), webgpu.renderer)
    assert "workgroupBarrier();" in source
    np.testing.assert_allclose(x.sum(0).numpy(), a.sum(0, dtype=np.float64), rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(x.max(0).numpy(), a.max(0))
    np.testing.assert_allclose(x.mean(0).numpy(), a.mean(0, dtype=np.float64), rtol=1e-4, atol=1e-5)


def test_reduce_of_many_outputs(webgpu: Any) -> None:
    """Row sums of 1024 rows: on CPU adapters one invocation per row (no workgroup memory), in workgroups."""
    a = RNG.standard_normal((1024, 520)).astype(np.float32)
    x = on_webgpu(a)
    [source] = kernel_sources(x.sum(1), webgpu.renderer)
    if webgpu.renderer.cpu_adapter:
        assert "workgroupBarrier" not in source
        assert workgroup_of(source)[0] > 1
    np.testing.assert_allclose(x.sum(1).numpy(), a.sum(1, dtype=np.float64), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("shape", [(1 << 16,), (96, 40), (3, 50, 64), (7, 13)])
def test_elementwise_in_workgroups(webgpu: Any, shape: tuple[int, ...]) -> None:
    """Elementwise kernels run in workgroups of the size the shader fixes, within the preferred invocations."""
    a = RNG.standard_normal(shape).astype(np.float32)
    b = RNG.standard_normal(shape).astype(np.float32)
    x, y = on_webgpu(a), on_webgpu(b)
    [source] = kernel_sources(x * y + x, webgpu.renderer)
    group = workgroup_of(source)
    assert group[0] * group[1] * group[2] <= webgpu.renderer.max_local_total
    if shape[-1] % 2 == 0:
        assert group[0] * group[1] * group[2] > 1 and "local_invocation_id" in source
    np.testing.assert_allclose((x * y + x).numpy(), a * b + a, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("rows, inner, columns", [(256, 256, 256), (72, 33, 40), (36, 17, 20), (5, 7, 3)])
def test_matmul_register_tile(webgpu: Any, rows: int, inner: int, columns: int) -> None:
    """Matmuls get a register tile of the renderer's size, smaller tiles where the sizes do not allow it."""
    a = RNG.standard_normal((rows, inner)).astype(np.float32)
    b = RNG.standard_normal((inner, columns)).astype(np.float32)
    x, y = on_webgpu(a), on_webgpu(b)
    [source] = kernel_sources(x @ y, webgpu.renderer)
    accumulators = len(re.findall(r"var acc\d+", source))
    tile_rows, tile_columns = webgpu.renderer.register_tile or (8, 8)
    if (rows, columns) == (256, 256):
        assert accumulators == tile_rows * tile_columns
    elif (rows, columns) == (72, 40):
        assert accumulators == min(tile_rows, 8) * min(tile_columns, 8)
    np.testing.assert_allclose((x @ y).numpy(), a @ b, rtol=1e-4, atol=1e-4)


def test_gpu_tuning_runs_on_the_adapter(webgpu: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tuning for GPU adapters (8x8 tiles, 16-item group reduces of every reduce, 256-invocation workgroups) gives
    numpy's answers here too (shapes not used elsewhere, so no compiled kernel is reused)."""
    renderer = webgpu.renderer
    for name, value in (("register_tile", None), ("group_size", None), ("group_max_outputs", None),
                        ("max_local_total", min(256, renderer.max_workgroup_invocations))):
        monkeypatch.setattr(renderer, name, value)
    a = RNG.standard_normal((1000, 333)).astype(np.float32)
    x = on_webgpu(a)
    [source] = kernel_sources(x.sum(1), renderer)
    assert "workgroupBarrier();" in source and workgroup_of(source) == (16, 1, 1)
    np.testing.assert_allclose(x.sum(1).numpy(), a.sum(1, dtype=np.float64), rtol=1e-4, atol=1e-3)
    left = RNG.standard_normal((200, 72)).astype(np.float32)
    right = RNG.standard_normal((72, 48)).astype(np.float32)
    product = on_webgpu(left) @ on_webgpu(right)
    [source] = kernel_sources(product, renderer)
    assert len(re.findall(r"var acc\d+", source)) == 64
    np.testing.assert_allclose(product.numpy(), left @ right, rtol=1e-4, atol=1e-4)


def _local_program(size: int, local_bytes: int = 0) -> list[UOp]:
    """out[lidx0] = lidx0 in one workgroup of `size`, with an unused workgroup array of `local_bytes` bytes."""
    out = UOp(Ops.DEFINE_GLOBAL, dtypes.int32.ptr(size), (), 0)
    local = UOp(Ops.SPECIAL, dtypes.int32, (UOp.const(dtypes.int32, size),), "lidx0")
    program = [out, local]
    if local_bytes:
        program.append(UOp(Ops.DEFINE_LOCAL, dtypes.int32.ptr(local_bytes // 4, "local"), (), 0))
    index = out.index(local)
    store = index.store(local)
    return program + [index, store, UOp(Ops.SINK, dtypes.void, (store,), "fill")]


def test_workgroups_over_the_adapter_limits_are_refused() -> None:
    renderer = WGSLRenderer(max_workgroup_size=(64, 64, 16), max_workgroup_invocations=128,
                            max_workgroup_storage=1024, adapter_name="a small adapter")
    assert "@workgroup_size(64,1,1)" in renderer.render(_local_program(64))
    with pytest.raises(ValueError, match="maxComputeWorkgroupSizeX = 64"):
        renderer.render(_local_program(128))
    renderer.max_workgroup_size = (256, 64, 16)
    with pytest.raises(ValueError, match="maxComputeInvocationsPerWorkgroup = 128"):
        renderer.render(_local_program(256))
    with pytest.raises(ValueError, match="maxComputeWorkgroupStorageSize = 1024"):
        renderer.render(_local_program(16, local_bytes=2048))


def test_launch_must_match_the_shader_workgroup(webgpu: Any) -> None:
    source = webgpu.renderer.render(_local_program(16))
    program = webgpu.runtime("fill", webgpu.compiler.compile(source))
    handle = webgpu.allocator.alloc(64)
    try:
        program(handle, global_size=(1, 1, 1), local_size=(16, 1, 1), wait=True)
        result = np.empty(16, np.int32)
        webgpu.allocator.copyout(memoryview(result).cast("B"), handle)
        np.testing.assert_array_equal(result, np.arange(16))
        with pytest.raises(RuntimeError, match="workgroups of 16x1x1.*local size 8x1x1"):
            program(handle, global_size=(2, 1, 1), local_size=(8, 1, 1))
    finally:
        webgpu.allocator.free(handle, 64)


def test_cpu_adapter_tuning_values() -> None:
    cpu = WGSLRenderer(max_workgroup_size=(1024, 1024, 1024), max_workgroup_invocations=1024, cpu_adapter=True,
                       simd_lanes=4)
    assert (cpu.register_tile, cpu.group_size, cpu.local_max) == (CPU_REGISTER_TILE, 4, (1024, 1024, 1024))
    assert cpu.max_local_total < 256
    gpu = WGSLRenderer(max_workgroup_size=(1024, 1024, 64), max_workgroup_invocations=1024)
    assert (gpu.register_tile, gpu.group_size, gpu.group_max_outputs, gpu.max_local_total) == (None, None, None, 256)
