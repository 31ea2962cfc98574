"""Control flow and non-tensor values: If, Loop and Scan over subgraphs; sequences; optionals.

Conditions and trip counts are read on the host, so a branch or a loop runs only the nodes it needs; each
iteration's loop-carried values are realized to keep the lazy graph from growing with the trip count.
"""
from __future__ import annotations

from tinycore.dtype import dtypes
from tinycore.nn.onnx.common import as_ints, axis_of, index_dtype, onnx_dtype, scalar_of
from tinycore.nn.onnx.parser import Graph
from tinycore.nn.onnx.registry import NodeContext, Value, onnx_op
from tinycore.tensor import Tensor


@onnx_op("If", 1, context=True)
def if_(condition: Tensor, then_branch: Graph, else_branch: Graph, *, context: NodeContext) -> tuple[Value, ...]:
    """The outputs of `then_branch` when the condition holds, else those of `else_branch`."""
    chosen = then_branch if bool(condition.reshape(-1)[0].item()) else else_branch
    return tuple(context.run_subgraph(chosen, []))


def _stack(values: list[Tensor], axis: int = 0) -> Tensor:
    axis = axis_of(axis, values[0].ndim + 1)
    expanded = [value.unsqueeze(axis) for value in values]
    return expanded[0].cat(*expanded[1:], dim=axis) if len(expanded) > 1 else expanded[0]


@onnx_op("Loop", 1, context=True)
def loop(trip_count: Tensor | None, condition: Tensor | None, *initial: Value, body: Graph,
         context: NodeContext) -> tuple[Value, ...]:
    """Run `body` while the condition holds and fewer than `trip_count` iterations ran; the final loop-carried
    values, then each scan output stacked over the iterations."""
    limit = int(scalar_of(trip_count)) if trip_count is not None else None
    keep_going = bool(scalar_of(condition)) if condition is not None else True
    carried = list(initial)
    scans: list[list[Tensor]] = [[] for _ in range(len(body.outputs) - 1 - len(carried))]
    iteration = 0
    while keep_going and (limit is None or iteration < limit):
        counter = Tensor(iteration, dtype=index_dtype(context.device), device=context.device)
        outputs = context.run_subgraph(body, [counter, Tensor(keep_going, device=context.device), *carried])
        condition_out = outputs[0]
        carried = [value.realize() if isinstance(value, Tensor) else value for value in outputs[1:1 + len(carried)]]
        for collected, value in zip(scans, outputs[1 + len(carried):], strict=False):
            assert isinstance(value, Tensor)
            collected.append(value.realize())
        keep_going = bool(scalar_of(condition_out)) if isinstance(condition_out, Tensor) else keep_going
        iteration += 1
    stacked = [_stack(values) if values else Tensor.zeros(0, dtype=dtypes.float32, device=context.device)
               for values in scans]
    return (*carried, *stacked)


@onnx_op("Scan", 9, context=True)
def scan(*values: Tensor, body: Graph, num_scan_inputs: int, scan_input_axes: list[int] | None = None,
         scan_input_directions: list[int] | None = None, scan_output_axes: list[int] | None = None,
         scan_output_directions: list[int] | None = None, context: NodeContext) -> tuple[Tensor, ...]:
    """Run `body` once per slice of the scan inputs, threading the states; final states, then stacked outputs."""
    state_count = len(values) - num_scan_inputs
    states = list(values[:state_count])
    inputs = list(values[state_count:])
    input_axes = [axis_of(axis, value.ndim) for axis, value in
                  zip(scan_input_axes or [0] * len(inputs), inputs, strict=False)]
    directions = scan_input_directions or [0] * len(inputs)
    length = inputs[0].shape[input_axes[0]]
    output_count = len(body.outputs) - state_count
    collected: list[list[Tensor]] = [[] for _ in range(output_count)]
    for step in range(length):
        slices = []
        for value, axis, direction in zip(inputs, input_axes, directions, strict=False):
            position = length - 1 - step if direction else step
            slices.append(value[tuple([slice(None)] * axis + [position])])
        outputs = context.run_subgraph(body, [*states, *slices])
        states = [state.realize() for state in outputs[:state_count] if isinstance(state, Tensor)]
        for gathered, output in zip(collected, outputs[state_count:], strict=False):
            assert isinstance(output, Tensor)
            gathered.append(output.realize())
    out_axes = scan_output_axes or [0] * output_count
    out_directions = scan_output_directions or [0] * output_count
    stacked = []
    for gathered, axis, direction in zip(collected, out_axes, out_directions, strict=False):
        ordered = gathered[::-1] if direction else gathered
        stacked.append(_stack(ordered, axis))
    return (*states, *stacked)


@onnx_op("Scan", 8, context=True)
def scan_batched(sequence_lens: Tensor | None, *values: Tensor, body: Graph, num_scan_inputs: int,
                 directions: list[int] | None = None, context: NodeContext) -> tuple[Tensor, ...]:
    """Scan of opset 8: every state and scan input has a leading batch axis (scanned along axis 1), each batch entry
    scanned on its own; sequence_lens, when given, must cover the whole sequence."""
    state_count = len(values) - num_scan_inputs
    if sequence_lens is not None:
        lengths = set(sequence_lens.tolist())
        if lengths != {values[state_count].shape[1]}:
            raise NotImplementedError("Scan (opset 8) with sequence_lens shorter than the sequence is not supported")
    per_batch = []
    for index in range(values[0].shape[0]):
        per_batch.append(scan(*[value[index] for value in values], body=body, num_scan_inputs=num_scan_inputs,
                              scan_input_directions=directions, context=context))
    return tuple(_stack([outputs[position] for outputs in per_batch]) for position in range(len(per_batch[0])))


# ---- sequences ----

@onnx_op("SequenceEmpty", 11)
def sequence_empty(dtype: int = 1) -> list[Tensor]:
    """An empty sequence."""
    onnx_dtype(dtype, "SequenceEmpty")
    return []


@onnx_op("SequenceConstruct", 11)
def sequence_construct(*values: Tensor) -> list[Tensor]:
    """A sequence of the inputs."""
    return list(values)


def _position(position: Tensor | int | None, length: int, inserting: bool = False) -> int:
    index = int(scalar_of(position)) if position is not None else (length if inserting else length - 1)
    limit = length + 1 if inserting else length
    if not -limit <= index < limit and not (inserting and index == length):
        raise IndexError(f"sequence position {index} is out of range for a sequence of {length}")
    return index + length if index < 0 else index


@onnx_op("SequenceAt", 11)
def sequence_at(sequence: list[Tensor], position: Tensor) -> Tensor:
    """The element at `position` (negative counts from the end)."""
    return sequence[_position(position, len(sequence))]


@onnx_op("SequenceInsert", 11)
def sequence_insert(sequence: list[Tensor], value: Tensor, position: Tensor | None = None) -> list[Tensor]:
    """A copy of the sequence with `value` inserted at `position` (the end by default)."""
    result = list(sequence)
    result.insert(_position(position, len(sequence), inserting=True), value)
    return result


@onnx_op("SequenceErase", 11)
def sequence_erase(sequence: list[Tensor], position: Tensor | None = None) -> list[Tensor]:
    """A copy of the sequence without the element at `position` (the last by default)."""
    result = list(sequence)
    del result[_position(position, len(sequence))]
    return result


@onnx_op("SequenceLength", 11)
def sequence_length(sequence: list[Tensor]) -> Tensor:
    """The int64 number of elements."""
    return Tensor(len(sequence), dtype=index_dtype(sequence[0].device if sequence else None),
                  device=sequence[0].device if sequence else None)


@onnx_op("ConcatFromSequence", 11)
def concat_from_sequence(sequence: list[Tensor], axis: int, new_axis: int = 0) -> Tensor:
    """The elements joined along `axis`, or stacked along a new axis."""
    if new_axis:
        return _stack(sequence, axis)
    axis = axis_of(axis, sequence[0].ndim)
    return sequence[0].cat(*sequence[1:], dim=axis) if len(sequence) > 1 else sequence[0]


@onnx_op("SplitToSequence", 11, host_inputs=(1,))
def split_to_sequence(x: Tensor, split: list[int] | int | None = None, axis: int = 0, keepdims: int = 1
                      ) -> list[Tensor]:
    """x cut along `axis` into pieces of the given sizes (or of one size, or single slices) as a sequence."""
    axis = axis_of(axis, x.ndim)
    length = x.shape[axis]
    if split is None:
        pieces = [x[tuple([slice(None)] * axis + [slice(index, index + 1)])] for index in range(length)]
        return [piece.squeeze(axis) for piece in pieces] if not keepdims else pieces
    sizes = as_ints(split) or []
    if isinstance(split, int) or (isinstance(split, list) and len(sizes) == 1 and not isinstance(split, list)):
        sizes = [sizes[0]] * (length // sizes[0]) + ([length % sizes[0]] if length % sizes[0] else [])
    elif not isinstance(split, list):
        sizes = [sizes[0]] * (length // sizes[0]) + ([length % sizes[0]] if length % sizes[0] else [])
    result, start = [], 0
    for size in sizes:
        result.append(x[tuple([slice(None)] * axis + [slice(start, start + size)])])
        start += size
    return result


@onnx_op("SequenceMap", 17, context=True)
def sequence_map(sequence: list[Tensor], *extra: Value, body: Graph, context: NodeContext) -> tuple[list[Tensor], ...]:
    """`body` applied to each element (with extra inputs: sequences element-wise, tensors whole)."""
    outputs: list[list[Tensor]] = [[] for _ in body.outputs]
    for index, element in enumerate(sequence):
        arguments = [value[index] if isinstance(value, list) else value for value in extra]
        for gathered, value in zip(outputs, context.run_subgraph(body, [element, *arguments]), strict=False):
            assert isinstance(value, Tensor)
            gathered.append(value)
    return tuple(outputs)


# ---- optionals ----

@onnx_op("Optional", 15)
def optional(value: Value = None, type: object = None) -> Value:
    """An optional holding `value`, or an empty one."""
    return value


@onnx_op("OptionalHasElement", 15)
def optional_has_element(value: Value = None) -> Tensor:
    """Whether the optional holds a value."""
    return Tensor(value is not None)


@onnx_op("OptionalGetElement", 15)
def optional_get_element(value: Value) -> Value:
    """The value an optional holds (a plain tensor or sequence passes through)."""
    if value is None:
        raise ValueError("OptionalGetElement on an empty optional")
    return value
