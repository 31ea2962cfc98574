"""Conformance, renderers: every renderer offered for the device produces code its compiler accepts, and kernels
run at the launch limits (large grids, many buffers in one kernel)."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy
import pytest

from tinycore.counters import GlobalCounters
from tinycore.dtype import dtypes
from tinycore.tensor import Tensor
from tinycore.testing.capabilities import DeviceCapabilities
from tinycore.testing.support import assert_matches, not_applicable, sample

if TYPE_CHECKING:
    from tinycore.plugins.specs import RendererSpec
    from tinycore.uop.uop import UOp

pytestmark = pytest.mark.conformance_category("renderers")

GRAPHS: list[tuple[str, Callable[[str], Tensor]]] = [
    ("elementwise", lambda device: (Tensor.ones(4, 6, device=device) * 2.5).exp().sqrt() + 1.0),
    ("reduce", lambda device: Tensor.ones(5, 9, device=device).sum(1) + Tensor.ones(5, 9, device=device).max(1)),
    ("where_compare", lambda device: (Tensor.arange(12, device=device) < 5).where(1.0, -1.0)),
    ("integer", lambda device: (Tensor.arange(16, device=device) * 7 // 3) % 5),
    ("casts", lambda device: Tensor.arange(10, device=device).cast(dtypes.float32).cast(dtypes.uint8)),
    ("matmul", lambda device: Tensor.ones(8, 8, device=device) @ Tensor.ones(8, 8, device=device)),
]


def _renderers(device: str) -> list[tuple[str, RendererSpec]]:
    from tinycore.device.registry import renderer_specs
    return [(spec.name, spec) for spec, _record in renderer_specs(device.split(":")[0])]


def _schedule_asts(graph: Tensor) -> list[UOp]:
    from tinycore.engine.memory import device_facts
    from tinycore.schedule.cache import create_schedule
    from tinycore.uop.ops import Ops
    return [item.ast for item in create_schedule([graph.uop], device_facts).items if item.ast.op is not Ops.COPY]


@pytest.mark.parametrize("name,build", GRAPHS, ids=[item[0] for item in GRAPHS])
def test_every_renderer_compiles(device: str, name: str, build: Callable[[str], Tensor]) -> None:
    """Each kernel of the graph, rendered by every renderer of the device, is accepted by that renderer's compiler."""
    from tinycore.codegen import lower_to_program
    from tinycore.plugins.specs import load_object
    asts = _schedule_asts(build(device))
    if not asts:
        raise AssertionError(f"the {name} graph scheduled no kernel on {device}")
    built = 0
    problems = []
    for renderer_name, spec in _renderers(device):
        try:
            renderer, compiler = load_object(spec.factory)(device, None)
        except Exception as error:  # noqa: BLE001 - a renderer whose toolchain is missing here is not checked
            problems.append(f"{renderer_name}: cannot be built here ({error})")
            continue
        built += 1
        for ast in asts:
            program = lower_to_program(ast, renderer)
            if not program.src:
                raise AssertionError(f"renderer {renderer_name} on {device} rendered empty source for {name}")
            try:
                binary = compiler.compile_cached(program.src)
            except Exception as error:
                raise AssertionError(f"renderer {renderer_name} on {device}: its compiler rejected the {name} kernel "
                                     f"{program.name}: {str(error).splitlines()[0]}") from error
            if not isinstance(binary, (bytes, bytearray)) or not binary:
                raise AssertionError(f"compiler of renderer {renderer_name} on {device} returned "
                                     f"{type(binary).__name__}, expected non-empty bytes")
    if built == 0:
        not_applicable("no renderer of the device can be built here: " + "; ".join(problems))


def test_large_grid(device: str, capabilities: DeviceCapabilities) -> None:
    """An elementwise kernel over 2**20 elements and a column sum of a 1024 x 1024 matrix."""
    if not capabilities.large_grids:
        not_applicable("the device does not declare large_grids (kernels over a million elements)")
    data = sample((1024, 1024), seed=130)
    tensor = Tensor(data, device=device)
    assert_matches(tensor * 2.0 + 1.0, data * numpy.float32(2.0) + numpy.float32(1.0),
                   f"x * 2 + 1 over 2**20 elements on {device}")
    assert_matches(tensor.sum(0), data.sum(axis=0), f"column sums of a 1024 x 1024 matrix on {device}",
                   rtol=1e-4, atol=1e-3)


def test_more_buffers_than_a_kernel_takes_are_split(device: str) -> None:
    """A sum of more tensors than the renderer's `max_buffers` allows runs as several kernels, each within the
    limit, with numpy's exact answer (the same adds in the same order)."""
    from tinycore.device.registry import Device
    from tinycore.engine.memory import device_facts
    from tinycore.schedule import create_schedule
    limit = Device[device].renderer.max_buffers
    if not isinstance(limit, int):
        not_applicable("the renderer declares no max_buffers (no limit on buffers per kernel)")
        return
    if limit > 200:
        not_applicable(f"the renderer allows {limit} buffers per kernel; the check stays below 200 tensors")
    arrays = [sample((33,), seed=300 + index) for index in range(limit + 5)]
    tensors = [Tensor(array, device=device).realize() for array in arrays]
    total, expected = tensors[0], arrays[0]
    for tensor, array in zip(tensors[1:], arrays[1:], strict=True):
        total, expected = total + tensor, expected + array
    kernels = [item for item in create_schedule([total.uop], device_facts).items if not item.is_copy]
    if len(kernels) < 2 or any(len(item.buffers) > limit for item in kernels):
        raise AssertionError(f"the sum of {limit + 5} tensors on {device} (max_buffers={limit}) was scheduled as "
                             f"kernels taking {[len(item.buffers) for item in kernels]} buffers: the scheduler must "
                             f"split it into kernels of at most {limit}")
    assert_matches(total, expected, f"sum of {limit + 5} buffers on {device}", rtol=0, atol=0)


def test_many_buffers_in_one_kernel(device: str, capabilities: DeviceCapabilities) -> None:
    """A sum of many realized tensors runs as one kernel taking them all (up to the declared max_buffers)."""
    count = min(capabilities.max_buffers or 32, 32) - 1
    if count < 2:
        not_applicable(f"the device declares max_buffers={capabilities.max_buffers}")
    arrays = [sample((3, 5), seed=140 + index) for index in range(count)]
    tensors = [Tensor(array, device=device).realize() for array in arrays]
    total = tensors[0]
    for tensor in tensors[1:]:
        total = total + tensor
    before = GlobalCounters.kernel_count
    result = total.realize()
    kernels = GlobalCounters.kernel_count - before
    assert_matches(result, numpy.sum(arrays, axis=0, dtype=numpy.float32), f"sum of {count} buffers on {device}",
                   rtol=1e-5, atol=1e-5)
    if kernels != 1:
        raise AssertionError(f"the sum of {count} buffers ran as {kernels} kernels on {device}, expected one kernel "
                             f"taking {count + 1} buffers")
