"""Representative kernels for GPU plugins' compile tests: kernel ASTs of small Tensor programs (scheduled on the host
device, then lowered by the plugin's renderer), with numpy's answer for each. Elementwise, reduces (group reduces
through local memory on GPU renderers), a tiled matmul, half, bfloat16 and a symbolic size."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy

from tinycore.dtype import dtypes
from tinycore.engine.memory import device_facts
from tinycore.schedule.scheduler import ScheduleItem, create_schedule
from tinycore.tensor import Tensor
from tinycore.uop.ops import Ops
from tinycore.uop.symbolic import Variable


@dataclass
class Case:
    """A Tensor program over numpy inputs and numpy's result for it."""

    name: str
    inputs: Callable[[numpy.random.Generator], list[numpy.ndarray]]
    build: Callable[..., Tensor]
    reference: Callable[..., numpy.ndarray]
    tolerance: float = 1e-5


def _floats(*shape: int) -> Callable[[numpy.random.Generator], list[numpy.ndarray]]:
    return lambda rng: [rng.standard_normal(shape).astype(numpy.float32)]


def _pair(first: tuple[int, ...], second: tuple[int, ...]) -> Callable[[numpy.random.Generator], list[numpy.ndarray]]:
    return lambda rng: [rng.standard_normal(first).astype(numpy.float32),
                        rng.standard_normal(second).astype(numpy.float32)]


def _bf16(values: numpy.ndarray) -> numpy.ndarray:
    """float32 values rounded to bfloat16 (nearest even) and widened back."""
    bits = values.astype(numpy.float32).view(numpy.uint32).astype(numpy.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return rounded.astype(numpy.uint32).view(numpy.float32)


CASES = [
    Case("elementwise", _floats(4, 300), lambda x: (x * 2 + 1).exp2().sqrt(),
         lambda x: numpy.sqrt(numpy.exp2(x * 2 + 1))),
    Case("reduce", _floats(3, 4096), lambda x: x.sum(axis=1), lambda x: x.sum(axis=1), 1e-3),
    Case("max_reduce", _floats(2, 1000), lambda x: x.max(axis=1), lambda x: x.max(axis=1)),
    Case("matmul", _pair((16, 24), (24, 32)), lambda a, b: a @ b, lambda a, b: a @ b, 1e-4),
    Case("half", _floats(5, 64), lambda x: (x.cast(dtypes.float16) * 3 - 1).cast(dtypes.float32),
         lambda x: (x.astype(numpy.float16) * numpy.float16(3) - numpy.float16(1)).astype(numpy.float32), 1e-3),
    Case("bfloat16", _floats(6, 40), lambda x: (x.cast(dtypes.bfloat16) + 1).cast(dtypes.float32),
         lambda x: _bf16(_bf16(x) + 1), 0.0),
    Case("half_matmul", _pair((16, 32), (32, 16)),
         lambda a, b: (a.cast(dtypes.float16) @ b.cast(dtypes.float16)).cast(dtypes.float32),
         lambda a, b: (a.astype(numpy.float16).astype(numpy.float32) @ b.astype(numpy.float16).astype(numpy.float32)),
         2e-2),
]


def kernels_of(tensor: Tensor) -> list[ScheduleItem]:
    """The kernel steps (not copies) of realizing `tensor`."""
    return [item for item in create_schedule([tensor.uop], device_facts).items if not item.is_copy]


def case_kernels(case: Case, rng: numpy.random.Generator) -> tuple[list[numpy.ndarray], list[numpy.ndarray],
                                                                   list[ScheduleItem]]:
    """(the case's inputs, the same in the last kernel's buffer order after its output, the kernels of its program
    over them)."""
    inputs = case.inputs(rng)
    tensors = [Tensor(array) for array in inputs]
    items = kernels_of(case.build(*tensors))
    owners = {node: array for tensor, array in zip(tensors, inputs, strict=True)
              for node in tensor.uop.toposort if node.op is Ops.BUFFER}
    ordered = [owners[buffer] for buffer in items[-1].buffers[1:] if buffer in owners] if items else inputs
    return inputs, ordered, items


def symbolic_kernel(value: int = 7) -> tuple[numpy.ndarray, ScheduleItem, numpy.ndarray]:
    """(input, kernel, numpy's answer) of (x[:, :w] * 2).sum(1) with w a variable bound to `value`: one kernel with
    an integer parameter serves every w."""
    data = numpy.random.default_rng(5).standard_normal((4, 16)).astype(numpy.float32)
    width = Variable("width", 1, 16)
    # shrink's annotation names ints; a bound variable is the symbolic size it also takes
    result = (Tensor(data).shrink(((0, 4), (0, width.bind(value)))) * 2.0).sum(1)  # type: ignore[arg-type]
    items = kernels_of(result)
    assert len(items) == 1 and items[0].var_vals, "the symbolic program should be one kernel with a variable"
    return data, items[0], (data[:, :value] * numpy.float32(2.0)).sum(axis=1)
