"""`torch.compile(model, backend="tiny")`: Dynamo captures the model as one FX graph (tiny tensors are declared to it
as plain tensors on the device `tiny`, so it fakes them like CUDA tensors instead of breaking the graph at each
use); AOTAutograd splits it into forward and backward aten graphs; each aten graph runs on tiny tensors as one lazy
tinycore graph inside a TinyJit, so from the third call on a graph is one replay of its captured kernels."""
from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple

import torch
from torch._dynamo.backends.common import aot_autograd
from torch._dynamo.backends.registry import register_backend

from tiny_torch.dispatch import PENDING, flush
from tiny_torch.dtypes import to_tiny_dtype
from tiny_torch.storage import TinyStorage, new_flat
from tiny_torch.wrapper import TinyTensor
from tinycore import Tensor, TinyJit
from tinycore.dtype import DType

if TYPE_CHECKING:
    from tinycore.engine.jit import TinyJit as TinyJitType


def declare_tiny_tensors_plain() -> None:
    """Let Dynamo treat a TinyTensor as a plain tensor on device `tiny`.

    Dynamo models a tensor subclass that overrides __torch_dispatch__ as an opaque Python object and breaks the
    graph at every use. A TinyTensor only carries its storage in the subclass; its sizes, strides, dtype and device
    are PyTorch's own, so Dynamo may fake it (FakeTensor on `tiny`) and trace through it as it does a CUDA tensor.
    Dynamo has no public hook for this: its table of plain tensor types is extended."""
    from torch._dynamo.variables.builder import VariableBuilder
    for trace_numpy in (False, True):
        table = VariableBuilder._type_dispatch_impl(trace_numpy)
        if torch.Tensor not in table:
            raise RuntimeError("tiny device: this PyTorch's Dynamo has no table of plain tensor types; "
                               f"torch.compile(backend='tiny') needs torch 2.13 (found {torch.__version__})")
        table[TinyTensor] = table[torch.Tensor]


class _InputLayout(NamedTuple):
    """How a graph input views its storage, and which of the call's distinct storages that is."""
    size: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int
    dtype: torch.dtype
    storage_numel: int
    storage_position: int
    device_index: int


class _OutputLayout(NamedTuple):
    """Sizes, strides and dtype of a graph output, as the graph's first run gave them."""
    size: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype


def _input_layout(tensor: TinyTensor, storage_position: int) -> _InputLayout:
    return _InputLayout(tuple(tensor.shape), tuple(tensor.stride()), int(tensor.storage_offset()), tensor.dtype,
                        tensor.tiny_storage.numel, storage_position, tensor.device.index or 0)


def _memory_order(size: tuple[int, ...], stride: tuple[int, ...]) -> tuple[int, ...] | None:
    """The dims from outermost to innermost in memory, when (size, stride) is a dense non-overlapping layout."""
    order = tuple(sorted(range(len(size)), key=lambda dim: (-stride[dim], dim)))
    expected = 1
    for dim in reversed(order):
        if size[dim] != 1 and stride[dim] != expected:
            return None
        expected *= size[dim]
    return order


class _GraphRunner:
    """One aten graph. Call 1 runs it on the tiny tensors as they are (and learns which outputs are inputs and what
    layout each output has); later calls run it in a TinyJit per input layout, over the inputs' storage buffers."""

    def __init__(self, graph_module: torch.fx.GraphModule):
        self.graph_module = graph_module
        self.jits: dict[tuple, TinyJitType] = {}
        placeholders = [node for node in graph_module.graph.nodes if node.op == "placeholder"]
        output_node = next(node for node in graph_module.graph.nodes if node.op == "output")
        outputs = torch.utils._pytree.tree_flatten(output_node.args[0])[0]
        # an output that is an input is handed back as it is: a replay would return the buffer of the capture call
        self.passthrough = {position: placeholders.index(node) for position, node in enumerate(outputs)
                            if isinstance(node, torch.fx.Node) and node in placeholders}
        self.mutates = any(node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload)
                           and node.target._schema.is_mutable for node in graph_module.graph.nodes)
        self.output_layouts: list[object] | None = None
        self.computed_layouts: list[_OutputLayout] = []  # the outputs a replay computes (not handed-back inputs)
        self.replay_strides: list[tuple[int, ...]] = []  # the strides a replay gives each of them
        self.target_specs: list[tuple[int, DType]] = []  # element count and dtype of each one's buffer

    def __call__(self, *inputs: object) -> list[object]:
        tiny_inputs = [value for value in inputs if isinstance(value, TinyTensor)]
        jittable = not self.mutates and all(not isinstance(value, torch.Tensor) or isinstance(value, TinyTensor)
                                            for value in inputs) and tiny_inputs
        if self.output_layouts is None or not jittable or not self.computed_layouts:
            return self._run_eager(inputs)
        storages = list({id(tensor.tiny_storage): tensor.tiny_storage for tensor in tiny_inputs}.values())
        for storage in storages:
            if not storage.realized:
                PENDING[id(storage)] = storage
        if PENDING:
            flush()
        storage_position = {id(storage): position for position, storage in enumerate(storages)}
        layouts = tuple(_input_layout(value, storage_position[id(value.tiny_storage)])
                        if isinstance(value, TinyTensor) else value for value in inputs)
        jit = self.jits.get(layouts)
        if jit is None:
            jit = self.jits[layouts] = TinyJit(self._body(layouts, len(storages)))  # type: ignore[operator]
        device = storages[0].flat.device
        targets = [new_flat(numel, dtype, device) for numel, dtype in self.target_specs]
        jit(*(storage.flat for storage in storages), *targets)
        return self._wrap_outputs(inputs, targets, tiny_inputs[0].device.index or 0)

    def _run_eager(self, inputs: Sequence[object]) -> list[object]:
        outputs = list(self.graph_module(*inputs))
        flats = []
        for value in outputs:
            if isinstance(value, TinyTensor):
                value.tiny_storage.flat = value.tiny_storage.flat.contiguous()
                flats.append(value.tiny_storage.flat)
        if flats:
            flats[0].realize(*flats[1:])
        self.output_layouts = [_OutputLayout(tuple(value.shape), tuple(value.stride()), value.dtype)
                               if isinstance(value, TinyTensor) else value for value in outputs]
        self.computed_layouts = [layout for position, layout in enumerate(self.output_layouts)
                                 if position not in self.passthrough and isinstance(layout, _OutputLayout)]
        # overlapping or offset layouts come back contiguous from a replay
        self.replay_strides = [layout.stride if _memory_order(layout.size, layout.stride) is not None
                               else tuple(torch.empty(layout.size, device="meta").stride())
                               for layout in self.computed_layouts]
        self.target_specs = [(math.prod(layout.size), to_tiny_dtype(layout.dtype)) for layout in self.computed_layouts]
        if any(math.prod(layout.size) == 0 for layout in self.computed_layouts):
            self.computed_layouts = []  # an empty output has no buffer to write: such a graph keeps running eagerly
        return outputs

    def _body(self, layouts: tuple[object, ...], storage_count: int) -> Callable[..., None]:
        """The function a TinyJit captures: the graph over storages rebuilt from the flat buffers it is given, each
        computed output written, laid out in memory as its strides say, into the target buffer given after them
        (a new buffer each call, so no replay overwrites the values an earlier call handed out)."""
        output_layouts = self.output_layouts
        assert output_layouts is not None

        def body(*buffers: Tensor) -> None:
            storages = [TinyStorage(flat) for flat in buffers[:storage_count]]
            targets = iter(buffers[storage_count:])
            rebuilt = [TinyTensor(storages[layout.storage_position], layout.size, layout.stride, layout.offset,
                                  layout.device_index) if isinstance(layout, _InputLayout) else layout
                       for layout in layouts]
            outputs = list(self.graph_module(*rebuilt))
            for position, (value, expected) in enumerate(zip(outputs, output_layouts, strict=True)):
                if position in self.passthrough or not isinstance(expected, _OutputLayout):
                    continue
                order = _memory_order(expected.size, expected.stride)
                computed = value.tiny_value()
                if order is not None and value.dim() > 0:
                    computed = computed.permute(order)
                next(targets).assign(computed.reshape(value.numel()))
        return body

    def _wrap_outputs(self, inputs: Sequence[object], values: list[Tensor], index: int) -> list[object]:
        """The replay's output buffers as tiny tensors with the graph's sizes and strides; outputs that are inputs
        handed back as they are."""
        assert self.output_layouts is not None
        results: list[object] = []
        computed = iter(zip(values, self.replay_strides, strict=True))
        for position, layout in enumerate(self.output_layouts):
            if position in self.passthrough:
                results.append(inputs[self.passthrough[position]])
            elif isinstance(layout, _OutputLayout):
                value, stride = next(computed)
                storage = TinyStorage(value)
                storage.realized = True
                results.append(TinyTensor(storage, layout.size, stride, 0, index))
            else:
                results.append(layout)
        return results


COMPILED_GRAPHS: weakref.WeakSet[_GraphRunner] = weakref.WeakSet()
"""The aten graphs compiled by the tiny backend that are still alive (each with its TinyJits, one per input layout)."""


def _compile_graph(graph_module: torch.fx.GraphModule, example_inputs: Sequence[torch.Tensor]) -> Callable:
    """One aten graph as a boxed function: AOTAutograd hands over its list of inputs, which is emptied so that the
    inputs are not kept alive longer than the graph needs them. A call with the inputs as separate arguments is
    taken too."""
    runner = _GraphRunner(graph_module)
    COMPILED_GRAPHS.add(runner)

    def run(*inputs: object) -> list[object]:
        if len(inputs) == 1 and isinstance(inputs[0], list):
            arguments = list(inputs[0])
            inputs[0].clear()
            return runner(*arguments)
        return runner(*inputs)
    # the mark goes on the undecorated function: AOTAutograd wraps the backward's function in torch._dynamo.disable
    # once more, which unwraps to the innermost function and copies its attributes onto the new wrapper
    run._boxed_call = True  # type: ignore[attr-defined]
    disabled = torch._dynamo.disable(run)  # the graph runs tinycore code, which Dynamo must not trace again
    disabled._boxed_call = True  # type: ignore[attr-defined]
    return disabled


declare_tiny_tensors_plain()
tiny_backend = aot_autograd(fw_compiler=_compile_graph, bw_compiler=_compile_graph)
"""The torch.compile backend named "tiny"."""
register_backend(name="tiny")(tiny_backend)
