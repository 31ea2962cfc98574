"""OnnxRunner: build from an ONNX file, call with named inputs, get named output Tensors.

Building decodes and checks the file (parser.py) and resolves every node, subgraphs included, to an
implementation in the operator table (registry.py); an op or opset without one is refused then, naming the node.
A call checks the inputs against the graph's declared names, dtypes and shapes (symbolic dims must agree across
inputs), then runs the nodes in order, lazily: the outputs are unrealized Tensors.
"""
from __future__ import annotations

import inspect
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tinycore.device.buffer import Buffer
from tinycore.dtype import DType, dtypes
from tinycore.engine.memory import buffer_of
from tinycore.nn.onnx.common import (
    ONNX_BYTE_TYPES,
    ONNX_TYPE_NAMES,
    STRING_CODE,
    device_dtype,
    dtype_label,
    is_strings,
    string_array,
    tensor_from_numpy,
)
from tinycore.nn.onnx.parser import Graph, Model, Node, ValueInfo, ValueType, graph_ops, read_model
from tinycore.nn.onnx.registry import STRING_OPS, OpSpec, Value, find_op, known_versions
from tinycore.nn.onnx.rewrites import (
    PANEL_BYTES,
    pack_constant_matmul_weights,
    packed_weight,
    transpose_constant_gemm_weights,
)
from tinycore.nn.onnx.small_floats import carried_type, mark
from tinycore.tensor import Tensor
from tinycore.uop.ops import Ops

MAX_REMEMBERED_REPLAYS = 16
"""Most input signatures a runner remembers for `OnnxRunner._replayed` (each holds its input buffers)."""

HOST_READING_OPS = {"If", "Loop", "Scan", "NonZero", "Compress", "Unique", "NonMaxSuppression", "RoiAlign", "Det",
                    "Bernoulli", "Multinomial", "RandomNormal", "RandomUniform", "RandomNormalLike",
                    "RandomUniformLike", "Dropout", "Range", "SequenceAt", "SequenceInsert", "SequenceErase",
                    "SequenceMap", "SplitToSequence", "OptionalHasElement", "TfIdfVectorizer"}
"""Ops that read tensor values on the host (conditions, data-dependent sizes, host-side samplers): a graph where
they read values that depend on the inputs' data cannot be replayed by the JIT."""

STRING_MAKING_OPS = {"StringNormalizer", "StringConcat", "StringSplit", "RegexFullMatch", "LabelEncoder"}
"""Ops that compute on the host over string tensors (their inputs or outputs): a graph with one reading values that
depend on the inputs' data cannot be replayed by the JIT."""

SHAPE_OPS = {"Shape", "Size"}
"""Ops whose outputs depend only on their input's shape, which is fixed for one JIT signature."""

MAX_OPSETS = {"": 28, "ai.onnx.ml": 5, "com.microsoft": 1, "ai.onnx.preview.training": 1}
"""The newest opset version of each domain whose semantics the operator files follow."""


class RunContext:
    """The runner's NodeContext (registry.py): an op's node, a way to run subgraphs, the values in scope."""

    def __init__(self, node: Node, scope: Scope, device: str):
        self.node, self.scope, self.device = node, scope, device

    def run_subgraph(self, graph: Graph, inputs: Sequence[Value]) -> list[Value]:
        """Run `graph` with its declared inputs bound to `inputs` in order; values of enclosing scopes are visible."""
        if len(inputs) != len(graph.inputs):
            raise RuntimeError(f"{self.node.label}: subgraph {graph.name!r} takes {len(graph.inputs)} inputs, "
                               f"given {len(inputs)}")
        feeds = {info.name: value for info, value in zip(graph.inputs, inputs, strict=False)}
        return run_graph(graph, feeds, Scope(self.scope), self.device)


class Scope:
    """The values of one graph run, falling back to the enclosing graph's for names a subgraph captures."""

    def __init__(self, parent: Scope | None = None):
        self.values: dict[str, Value] = {}
        self.parent = parent

    def get(self, name: str) -> Value:
        """The value of `name` in this graph or the nearest enclosing one (KeyError when none defines it)."""
        scope: Scope | None = self
        while scope is not None:
            if name in scope.values:
                return scope.values[name]
            scope = scope.parent
        raise KeyError(name)


def _accepted_attributes(spec: OpSpec) -> set[str] | None:
    """The attribute names an implementation takes (None when it takes any)."""
    parameters = inspect.signature(spec.function).parameters.values()
    if any(parameter.kind is inspect.Parameter.VAR_KEYWORD for parameter in parameters):
        return None
    return {parameter.name for parameter in parameters if parameter.kind is not inspect.Parameter.VAR_POSITIONAL}


_ACCEPTED: dict[int, set[str] | None] = {}


def host_value(value: Value) -> Any:
    """An input the op needs on the host (a shape, axes, pads) as Python values."""
    if isinstance(value, Tensor):
        return value.tolist() if value.ndim else value.item()
    return value


TYPE_KEEPING_OPS = frozenset((
    "Identity", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Expand", "Tile", "Slice", "Gather",
    "GatherElements", "GatherND", "Concat", "Split", "DepthToSpace", "SpaceToDepth", "ReverseSequence", "Where",
    "Compress", "Pad", "ScatterElements", "ScatterND"))
"""Ops whose outputs have the element type of their data inputs: they pass on the ONNX type of a byte-held input
(small floats, 4- and 2-bit integers), which the tensor's uint8/int8 dtype does not say."""


def _keep_type(inputs: list[Value], outputs: tuple[Value, ...]) -> None:
    """Tag `outputs` with the ONNX type of the first tagged input, if any (movement ops on small floats)."""
    code = next((carried_type(value) for value in inputs if isinstance(value, Tensor) and carried_type(value)), None)
    if code is None:
        return
    for output in outputs:
        for item in output if isinstance(output, list) else [output]:
            if isinstance(item, Tensor) and item.dtype.itemsize == 1:
                mark(item, code)


def _casts_to_strings(node: Node) -> bool:
    """Whether `node` is a Cast to STRING (which takes numbers and makes strings)."""
    return node.op == "Cast" and bool(node.attributes.get("to") == STRING_CODE)


def string_spec(node: Node, spec: OpSpec, values: Sequence[Value]) -> OpSpec:
    """The implementation to run when string tensors are involved: `spec` itself if it takes strings, else the op's
    string form (Reshape, Concat, Equal, Cast...); TypeError naming the node for an op that has none."""
    if spec.strings:
        return spec
    variant = STRING_OPS.get((node.domain, node.op))
    if variant is not None:
        return variant
    which = [index for index, value in enumerate(values) if is_strings(value)]
    known = ", ".join(sorted(name for _, name in STRING_OPS))
    raise TypeError(f"{node.label}: input {which} is a string tensor, and {node.op} takes numbers. String tensors "
                    f"are held on the host and only the string ops and these take them: {known}; convert the "
                    "strings to numbers first (Cast to FLOAT or INT64, or LabelEncoder)")


def run_node(node: Node, spec: OpSpec, scope: Scope, device: str) -> None:
    """Run one node, storing its outputs in `scope`; errors are re-raised naming the node."""
    raw = [None if name == "" else scope.get(name) for name in node.inputs]
    if any(is_strings(value) for value in raw) or _casts_to_strings(node):
        spec = string_spec(node, spec, raw)
    values: list[Value] = []
    for index, value in enumerate(raw):
        values.append(host_value(value) if index in spec.host_inputs and value is not None else value)
    accepted = _ACCEPTED.setdefault(id(spec.function), _accepted_attributes(spec))
    attributes: dict[str, object] = {key: value for key, value in node.attributes.items()
                                     if accepted is None or key in accepted}
    if spec.context:
        attributes["context"] = RunContext(node, scope, device)
    try:
        result = spec.function(*values, **attributes)
    except NotImplementedError as error:
        raise NotImplementedError(f"{node.label}: {error}") from error
    except (RuntimeError, ValueError, TypeError, IndexError, AssertionError, ZeroDivisionError) as error:
        raise RuntimeError(f"{node.label} failed: {type(error).__name__}: {error}") from error
    outputs = result if isinstance(result, tuple) else (result,)
    if node.op in TYPE_KEEPING_OPS:
        _keep_type(values, outputs)
    for name, value in zip(node.outputs, outputs, strict=False):
        if name:
            scope.values[name] = value
    missing = [name for name in node.outputs[len(outputs):] if name]
    if missing:
        raise RuntimeError(f"{node.label} produced {len(outputs)} outputs, the graph reads {missing} too")


def run_graph(graph: Graph, feeds: Mapping[str, Value], scope: Scope, device: str,
              folded: Mapping[str, Value] | None = None, skipped: frozenset[int] = frozenset()) -> list[Value]:
    """Run every node of `graph` with `feeds` bound; the graph's outputs in order. `folded` holds values computed
    before (constant_nodes), bound like initializers; the nodes at the indices in `skipped` made them and are not
    run."""
    scope.values.update(graph.initializers)
    if folded:
        scope.values.update(folded)
    scope.values.update(feeds)
    for index, node in enumerate(graph.nodes):
        if index in skipped:
            continue
        spec = find_op(node.domain, node.op, node.opset)
        assert spec is not None, f"{node.label} was not checked when the runner was built"
        run_node(node, spec, scope, device)
    return [scope.get(info.name) for info in graph.outputs]


def unsupported_nodes(graph: Graph) -> list[str]:
    """A line for each node (subgraphs included) whose op or opset has no implementation."""
    problems = []
    for node in graph_ops(graph):
        if node.domain in MAX_OPSETS and node.opset > MAX_OPSETS[node.domain]:
            problems.append(f"{node.label}: opset {node.opset} of {node.domain or 'ai.onnx'} is newer than the "
                            f"{MAX_OPSETS[node.domain]} this runner follows")
        elif find_op(node.domain, node.op, node.opset) is None:
            versions = known_versions(node.domain, node.op)
            reason = (f"implemented from opset {versions[0]} on" if versions else
                      f"no implementation of {node.domain or 'ai.onnx'}::{node.op}")
            problems.append(f"{node.label}: {reason}")
    return problems


def constant_nodes(graph: Graph) -> list[int]:
    """The indices of the nodes whose outputs depend only on initializers and Constant nodes (a weight's
    DequantizeLinear, a transposed or reshaped weight): the runner computes them once, instead of in every call (and
    in every replay of the JIT, which captures their kernels like any other). Ops that sample random values, read
    subgraphs or need the run's context are left to run each time."""
    fixed = set(graph.initializers)
    indices = []
    for index, node in enumerate(graph.nodes):
        spec = find_op(node.domain, node.op, node.opset)
        if spec is None or spec.context or node.op in HOST_READING_OPS or node.op in SHAPE_OPS:
            continue
        if any(isinstance(value, Graph) for value in node.attributes.values()):
            continue
        inputs = [name for name in node.inputs if name]
        if node.op == "Constant" or (inputs and all(name in fixed for name in inputs)):
            fixed.update(name for name in node.outputs if name)
            indices.append(index)
    return indices


def _tensors_in(values: Sequence[Value]) -> list[Tensor]:
    """The Tensors among `values`, those inside sequences included."""
    found: list[Tensor] = []
    for value in values:
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, Tensor):
                found.append(item)
    return found


def _as_constant(value: Tensor) -> Tensor:
    """A one-element tensor as a constant of the same shape, dtype and ONNX type: kernels then hold its value (a
    quantization scale or zero point, an epsilon) as an immediate instead of loading it, gated, in every lane."""
    constant = Tensor.full(value.shape, value.item(), dtype=value.dtype, device=value.device)
    code = carried_type(value)
    return mark(constant, code) if code is not None else constant


def jittable(graph: Graph) -> bool:
    """Whether every value the graph reads on the host is fixed once the input shapes are: derived only from
    initializers, constants and shapes. Such a graph launches the same kernels on every call with the same shapes,
    so TinyJit can capture and replay it."""
    fixed = set(graph.initializers) | {""}
    for node in graph.nodes:
        spec = find_op(node.domain, node.op, node.opset)
        if spec is None:
            return False
        inputs_fixed = all(name in fixed for name in node.inputs)
        reads_host = (node.op in HOST_READING_OPS or node.op in STRING_MAKING_OPS or _casts_to_strings(node) or
                      any(isinstance(value, Graph) for value in node.attributes.values()))
        for index in spec.host_inputs:
            if index < len(node.inputs) and node.inputs[index] not in fixed:
                return False
        if reads_host and not inputs_fixed:
            return False
        if node.op in SHAPE_OPS or node.op == "Constant" or (inputs_fixed and node.inputs):
            fixed.update(node.outputs)
    typed = [*graph.inputs, *graph.outputs]
    if any(info.type is not None and info.type.code == STRING_CODE for info in typed):
        return False
    return all(info.type is None or info.type.kind == "tensor" for info in graph.outputs)


class OnnxRunner:
    """Runs an ONNX model with tinycore: `OnnxRunner(path)(dict(name=value))` -> dict of output Tensors.

    The model may be a path, the file's bytes, or a 1-D uint8 Tensor of them (external data files are then found
    next to the model's path). Weights live on `device` (default: DEV's device).
    """

    def __init__(self, model: Tensor | str | os.PathLike[str] | bytes, device: str | None = None, jit: bool = True):
        from tinycore.device.registry import Device
        load_operators()
        self.device: str = Device.canonicalize(device) if device is not None else Device.DEFAULT
        self.model: Model = read_model(model, self.device)
        self.graph: Graph = self.model.graph
        problems = unsupported_nodes(self.graph)
        if problems:
            more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
            shown = "\n  ".join(problems[:20]) + more
            raise NotImplementedError(f"{self.model.source}: {len(problems)} node(s) cannot run:\n  {shown}")
        self.graph_inputs: dict[str, ValueType | None] = {info.name: info.type for info in self.graph.inputs}
        self.graph_outputs: tuple[str, ...] = tuple(info.name for info in self.graph.outputs)
        self.opsets: dict[str, int] = self.model.opsets
        self.jit: bool = jit and jittable(self.graph)
        """Whether calls run through TinyJit (one per set of input shapes and dtypes): the second call with the same
        shapes captures the kernels, later calls replay them. The returned tensors are then the JIT's output buffers,
        overwritten by the next call with the same shapes (copy them with .clone() to keep them)."""
        self._jits: dict[tuple[object, ...], Any] = {}
        self._replays: dict[tuple[object, ...], tuple[Any, list[tuple[Tensor, Buffer]]]] = {}
        """Jitted calls whose inputs were all numpy arrays, by the arrays' names, dtypes and shapes (in the order
        given): the captured TinyJit and the runner's own input Tensors, whose buffers a later call with arrays of
        the same names, dtypes and shapes fills before replaying (`_replayed`)."""
        fixed = {*self.graph.initializers, *(name for index in constant_nodes(self.graph)
                                             for name in self.graph.nodes[index].outputs)}
        transpose_constant_gemm_weights(self.graph, fixed)
        self._packed: dict[str, str] = pack_constant_matmul_weights(self.graph, {*fixed, *(
            name for index in constant_nodes(self.graph) for name in self.graph.nodes[index].outputs)})
        self._constant_nodes: frozenset[int] = frozenset(constant_nodes(self.graph))
        self._folded: dict[str, Value] | None = None

    def _constants(self) -> dict[str, Value]:
        """The outputs of the graph's constant nodes, computed and realized on the first call (not when building,
        which stays a matter of reading the file)."""
        if self._folded is None:
            scope = Scope()
            scope.values.update(self.graph.initializers)
            made: list[str] = []
            for index in sorted(self._constant_nodes):
                node = self.graph.nodes[index]
                spec = find_op(node.domain, node.op, node.opset)
                assert spec is not None, f"{node.label} was not checked when the runner was built"
                run_node(node, spec, scope, self.device)
                made.extend(name for name in node.outputs if name)
                transposed = scope.values.get(node.outputs[0])
                if node.op == "Transpose" and isinstance(transposed, Tensor):
                    # stored in its new layout: a realized transpose would stay a view, which every kernel reading
                    # the weight (a matmul's column blocks) would gather lane by lane
                    scope.values[node.outputs[0]] = transposed.contiguous()
            folded = {name: scope.values[name] for name in made}
            tensors = _tensors_in(list(folded.values()))
            if tensors:
                Tensor.realize(*tensors)
            budget = PANEL_BYTES.value
            for packed, source in self._packed.items():
                weight = folded[source] if source in folded else self.graph.initializers[source]
                panels = packed_weight(weight, budget) if isinstance(weight, Tensor) else None
                folded[packed] = weight if panels is None else panels
                budget -= 0 if panels is None else panels.nbytes()
            for name, value in [*self.graph.initializers.items(), *folded.items()]:
                if isinstance(value, Tensor) and value.numel() == 1:
                    folded[name] = _as_constant(value)
            self._folded = folded
        return self._folded

    def _run(self, feeds: Mapping[str, Value]) -> list[Value]:
        """The graph's outputs for `feeds`, the constant nodes' outputs taken from _constants."""
        return run_graph(self.graph, feeds, Scope(), self.device, self._constants(), self._constant_nodes)

    def _input(self, info: ValueInfo, value: object, dims: dict[str, int]) -> Value:
        """One user input as a graph value, checked against its declared type."""
        kind = info.type.kind if info.type is not None else "tensor"
        if kind == "optional" and value is None:
            return None
        if kind == "sequence" or (kind == "optional" and isinstance(value, (list, tuple))):
            element = info.type.element if info.type is not None else None
            if not isinstance(value, (list, tuple)):
                raise RuntimeError(f"input {info.name!r} is a sequence of tensors; pass a list, got "
                                   f"{type(value).__name__}")
            element_info = ValueInfo(info.name, element)
            items: list[Tensor] = []
            for item in value:
                converted = self._tensor_input(element_info, item, {})
                if not isinstance(converted, Tensor):
                    raise RuntimeError(f"input {info.name!r}: sequences of strings are not supported (string tensors "
                                       "are)")
                items.append(converted)
            return items
        element_type = info.type.element if kind == "optional" and info.type is not None else info.type
        return self._tensor_input(ValueInfo(info.name, element_type), value, dims)

    def _tensor_input(self, info: ValueInfo, value: object, dims: dict[str, int]) -> Tensor | np.ndarray:
        """One tensor input, converted to a Tensor on the runner's device (a string tensor: a numpy object array of
        str on the host) and checked."""
        expected: DType | None = info.type.dtype if info.type is not None else None
        if info.type is not None and info.type.code == STRING_CODE:
            if isinstance(value, Tensor):
                raise RuntimeError(f"input {info.name!r} is a string tensor; pass a numpy array or list of str, not "
                                   "a Tensor")
            try:
                strings = string_array(value, f"input {info.name!r}")
            except TypeError as error:
                raise RuntimeError(str(error)) from error
            self._check_shape(info, strings.shape, dims)
            return strings
        if isinstance(value, Tensor):
            tensor = value.to(self.device)
        elif isinstance(value, np.ndarray) or np.isscalar(value) and isinstance(value, np.generic):
            array = np.asarray(value)
            if array.dtype.kind in "OUS":
                raise RuntimeError(f"input {info.name!r} is an array of {array.dtype} (strings or objects), the model "
                                   f"expects {info.type.describe() if info.type else 'numbers'}; convert it first")
            tensor = tensor_from_numpy(array, self.device)
        else:
            try:
                tensor = Tensor(value, device=self.device, dtype=expected)
            except (TypeError, ValueError) as error:
                raise RuntimeError(f"input {info.name!r}: cannot make a tensor of {type(value).__name__} ({error})"
                                   ) from error
        if expected is not None and tensor.dtype not in (expected, device_dtype(expected, self.device)):
            wanted = dtype_label(expected)
            if info.type is not None and info.type.code in ONNX_BYTE_TYPES:
                wanted = (f"{ONNX_TYPE_NAMES[info.type.code]} (an ml_dtypes array, or its bits as {wanted}: the runner "
                          "holds this type one value per byte)")
            raise RuntimeError(f"input {info.name!r} has dtype {dtype_label(tensor.dtype)}, the model expects "
                               f"{wanted}; convert it first (numpy: .astype)")
        if info.type is not None and info.type.code in ONNX_BYTE_TYPES:
            tensor = mark(tensor, info.type.code)
        shape = info.type.shape if info.type is not None else None
        if shape is not None and len(shape) == 0 and tensor.shape == (1,):
            scalar = tensor.reshape(())
            return mark(scalar, info.type.code) if info.type is not None and info.type.code else scalar
        self._check_shape(info, tuple(int(size) for size in tensor.shape), dims)
        return tensor

    @staticmethod
    def _check_shape(info: ValueInfo, given_shape: tuple[int, ...], dims: dict[str, int]) -> None:
        """RuntimeError naming the input when `given_shape` differs from its declared shape (symbolic dims bound in
        `dims`, the same in every input)."""
        shape = info.type.shape if info.type is not None else None
        if shape is None:
            return
        if len(shape) != len(given_shape):
            raise RuntimeError(f"input {info.name!r} has shape {given_shape}, the model expects rank "
                               f"{len(shape)} ({info.type.describe() if info.type else '?'})")
        for axis, (declared, given) in enumerate(zip(shape, given_shape, strict=False)):
            if isinstance(declared, str):
                bound = dims.setdefault(declared, int(given))
                if bound != given:
                    raise RuntimeError(f"input {info.name!r} has size {given} on axis {axis}, but dimension "
                                       f"{declared!r} is {bound} in another input")
            elif isinstance(declared, int) and declared > 0 and declared != given:
                raise RuntimeError(f"input {info.name!r} has shape {given_shape}, the model expects "
                                   f"{info.type.describe() if info.type else '?'} (axis {axis} is {given}, "
                                   f"not {declared})")

    def __call__(self, inputs: Mapping[str, object], debug: bool = False) -> dict[str, Value]:
        """Run the model on `inputs` (name -> numpy array, Tensor or Python value); the outputs by name."""
        if self._replays and not debug:
            replayed = self._replayed(inputs)
            if replayed is not None:
                return replayed
        unknown = [name for name in inputs if name not in self.graph_inputs]
        if unknown:
            raise RuntimeError(f"unknown input(s) {unknown}; the model's inputs are {list(self.graph_inputs)}")
        dims: dict[str, int] = {}
        feeds: dict[str, Value] = {}
        for info in self.graph.inputs:
            if info.name not in inputs:
                if info.type is not None and info.type.kind == "optional":
                    feeds[info.name] = None
                    continue
                described = info.type.describe() if info.type is not None else "a tensor"
                raise RuntimeError(f"missing input {info.name!r} ({described}); the model's inputs are "
                                   f"{list(self.graph_inputs)}")
            feeds[info.name] = self._input(info, inputs[info.name], dims)
        if self.jit and all(isinstance(value, Tensor) for value in feeds.values()):
            return self._jitted(feeds, inputs)
        results = self._run(feeds)
        return dict(zip(self.graph_outputs, results, strict=False))

    def _replayed(self, inputs: Mapping[str, object]) -> dict[str, Value] | None:
        """The outputs of a replay, when `inputs` are C-contiguous numpy arrays of the names, dtypes and shapes of a
        captured call (checked then, so not again): their bytes are copied into the runner's input buffers of that
        call and its TinyJit replays. None otherwise. This skips making a Tensor per input and checking it (about
        20 us of Python warm, more in a call after a pause, when the code is out of the CPU's caches)."""
        key: list[object] = []
        for name, value in inputs.items():
            if value.__class__ is not np.ndarray or not value.flags.c_contiguous:  # type: ignore[attr-defined]
                return None
            key.append((name, value.dtype, value.shape))  # type: ignore[attr-defined]
        entry = self._replays.get(tuple(key))
        if entry is None:
            return None
        jit, targets = entry
        for value, (_, buffer) in zip(inputs.values(), targets, strict=True):
            buffer.copyin(memoryview(value).cast("B"))  # type: ignore[arg-type]
        results = jit(*[tensor for tensor, _ in targets])
        return dict(zip(self.graph_outputs, results, strict=False))

    def _remember_replay(self, inputs: Mapping[str, object], feeds: dict[str, Value], jit: Any) -> None:
        """Record a captured jitted call for `_replayed` when every input was a C-contiguous numpy array held
        byte for byte by the Tensor the runner made of it (same dtype and shape, no ONNX type tag), given in the
        graph's input order."""
        if jit.captured is None or list(inputs) != list(feeds) or len(self._replays) >= MAX_REMEMBERED_REPLAYS:
            return
        key: list[object] = []
        targets: list[tuple[Tensor, Buffer]] = []
        for name, value in inputs.items():
            tensor = feeds[name]
            if value.__class__ is not np.ndarray or not value.flags.c_contiguous or \
                    not isinstance(tensor, Tensor) or carried_type(tensor) is not None or \
                    tuple(tensor.shape) != value.shape or tensor.dtype.fmt is None or \
                    np.dtype(tensor.dtype.fmt) != value.dtype or not tensor.uop.is_contiguous_buffer or \
                    tensor.uop.base.op is not Ops.BUFFER:
                return
            key.append((name, value.dtype, value.shape))
            targets.append((tensor, buffer_of(tensor.uop.base)))
        self._replays[tuple(key)] = (jit, targets)

    def _jitted(self, feeds: dict[str, Value], inputs: Mapping[str, object] | None = None) -> dict[str, Value]:
        """Run through the TinyJit of these input shapes and dtypes (made on first use); `inputs`, the caller's
        values the feeds were made of, are remembered for `_replayed` once the TinyJit has captured."""
        from tinycore.engine.jit import TinyJit
        names = list(feeds)
        tensors = [feeds[name] for name in names]
        signature = tuple((name, tuple(tensor.shape), tensor.dtype) for name, tensor in zip(names, tensors,
                                                                                              strict=True)
                          if isinstance(tensor, Tensor))

        declared = [self.graph_inputs.get(name) for name in names]
        codes = [value_type.code if value_type is not None else 0 for value_type in declared]

        def run(*values: Tensor) -> list[Value]:
            # the JIT hands over its own tensors: the ONNX types of the byte-held inputs are tagged again
            tagged = [mark(value, code) if code in ONNX_BYTE_TYPES else value
                      for value, code in zip(values, codes, strict=True)]
            outputs = self._run(dict(zip(names, tagged, strict=True)))
            return [output.contiguous() if isinstance(output, Tensor) else output for output in outputs]

        if signature not in self._jits:
            self._jits[signature] = TinyJit(run)
        jit = self._jits[signature]
        results = jit(*[tensor.contiguous().realize() for tensor in tensors if isinstance(tensor, Tensor)])
        if inputs is not None:
            self._remember_replay(inputs, feeds, jit)
        return dict(zip(self.graph_outputs, results, strict=False))

    def get_empty_input_data(self, device: str | None = None, dtype: DType | None = None) -> dict[str, Tensor]:
        """Uninitialized tensors for each input (symbolic dims as 1), as tinygrad's runner offers."""
        result = {}
        for name, value_type in self.graph_inputs.items():
            shape = tuple(dim if isinstance(dim, int) and dim > 0 else 1 for dim in (value_type.shape or ())) \
                if value_type is not None else ()
            chosen = dtype or (value_type.dtype if value_type is not None and value_type.dtype else dtypes.float32)
            result[name] = Tensor.empty(*shape, device=device or self.device, dtype=chosen)
        return result


def load_operators() -> None:
    """Import every operator file so that its registrations run (here, above them: they import only the table)."""
    from tinycore.nn.onnx import (  # noqa: F401
        ops_attention,
        ops_contrib,
        ops_control,
        ops_detection,
        ops_loss,
        ops_math,
        ops_ml,
        ops_nn,
        ops_quant,
        ops_random,
        ops_reduce,
        ops_rnn,
        ops_sampling,
        ops_shape,
        ops_strings,
        ops_trees,
    )
