"""Reading an ONNX file into the runner's graph: nodes, initializers as Tensors, value types, subgraphs.

The protobuf is decoded by the `onnx` package (the `tinycore[onnx]` extra): it is the format's reference decoder,
bounds-checked in C++, and keeping up with each new opset's message fields is its job. What this module adds is
the checks a runner needs before anything runs (every value a node reads is defined, initializer data matches its
shape, external data stays inside the model's directory and inside its file) and the conversion of weights to
Tensors: inline data is copied once from the message, external data becomes a lazy view of its file on DISK, read
only when the weight is first used on a compute device.
"""
from __future__ import annotations

import dataclasses
import os
import pathlib
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Union

import numpy as np

from tinycore.dtype import DType, dtypes
from tinycore.helpers import prod
from tinycore.nn.file_checks import ByteSource, MalformedFileError
from tinycore.nn.onnx.common import (
    NARROWER,
    ONNX_BYTE_TYPES,
    ONNX_TYPE_NAMES,
    STRING_CODE,
    device_array,
    device_dtype,
    dtype_label,
    onnx_dtype,
    tensor_from_numpy,
)
from tinycore.nn.onnx.small_floats import mark
from tinycore.tensor import Tensor

if TYPE_CHECKING:
    import onnx

KIND = "ONNX"
STANDARD_DOMAINS = ("", "ai.onnx")
"""The names the standard operator domain goes by."""


class OnnxFormatError(MalformedFileError):
    """An ONNX file that cannot be decoded or whose graph is inconsistent. The message names the file and where."""


def require_onnx() -> None:
    """Raise ImportError with the install command when the `onnx` package is missing."""
    try:
        import onnx  # noqa: F401
    except ImportError as error:
        raise ImportError("reading ONNX files needs the onnx package: pip install 'tinycore[onnx]'") from error


@dataclasses.dataclass(frozen=True)
class ValueType:
    """The declared type of a graph input or output: tensor, sequence of tensors, or optional."""
    kind: str
    dtype: DType | None
    shape: tuple[int | str | None, ...] | None
    element: ValueType | None = None
    code: int = 0
    """The ONNX element type code of a tensor (0: unset), for the types held in a byte (ONNX_BYTE_TYPES)."""

    def describe(self) -> str:
        """A short spelling for messages: `float32[batch, 3]`, `sequence(float32[?])`."""
        if self.kind != "tensor":
            return f"{self.kind}({self.element.describe() if self.element else '?'})"
        dims = "?" if self.shape is None else ", ".join("?" if dim is None else str(dim) for dim in self.shape)
        label = "string" if self.code == STRING_CODE else dtype_label(self.dtype) if self.dtype else "?"
        return f"{label}[{dims}]"


@dataclasses.dataclass(frozen=True)
class ValueInfo:
    """A named graph input or output and its declared type (None when the file declares none)."""
    name: str
    type: ValueType | None


AttributeValue = Union[float, int, str, Tensor, np.ndarray, "Graph", list[float], list[int], list[str],
                       list[Tensor | np.ndarray], list["Graph"], ValueType, None]


@dataclasses.dataclass
class Node:
    """One operator call: op type, domain and the opset in force, input and output value names, attributes."""
    name: str
    op: str
    domain: str
    opset: int
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attributes: dict[str, AttributeValue]

    @property
    def label(self) -> str:
        """How messages name this node: `node 'conv1' (Conv, ai.onnx opset 13)`."""
        return f"node {self.name!r} ({self.op}, {self.domain or 'ai.onnx'} opset {self.opset})"


@dataclasses.dataclass
class Graph:
    """A graph or subgraph: nodes in order, initializers (string ones as numpy object arrays), declared inputs and
    outputs."""
    name: str
    nodes: list[Node]
    initializers: dict[str, Tensor | np.ndarray]
    inputs: list[ValueInfo]
    outputs: list[ValueInfo]


@dataclasses.dataclass
class Model:
    """A decoded model: the main graph, the opset version per domain, the producer, where the file came from."""
    graph: Graph
    opsets: dict[str, int]
    producer: str
    source: str


class _Context:
    """What decoding needs throughout: the file's name for messages, the folder external data lives in, the device."""

    def __init__(self, source: str, folder: pathlib.Path | None, device: str | None):
        self.source, self.folder, self.device = source, folder, device
        self.external: dict[pathlib.Path, ByteSource] = {}

    def error(self, problem: str) -> OnnxFormatError:
        """The format error for this file and `problem`."""
        return OnnxFormatError(f"{self.source}: not a valid {KIND} file: {problem}")


def read_model(model: Tensor | str | os.PathLike[str] | bytes, device: str | None = None) -> Model:
    """Decode and check an ONNX model given as a path, the file's bytes, or a uint8 Tensor of them.

    Raises OnnxFormatError (a ValueError) for a file that is not valid ONNX, FileNotFoundError for a missing model
    or external data file, NotImplementedError for element types without a tinycore dtype.
    """
    require_onnx()
    data, source, folder = _model_bytes(model)
    proto = _decode(data, source)
    context = _Context(source, folder, device)
    opsets: dict[str, int] = {}
    for entry in proto.opset_import:
        domain = "" if entry.domain in STANDARD_DOMAINS else entry.domain
        opsets[domain] = int(entry.version)
    if not proto.opset_import:
        opsets[""] = 1 if proto.ir_version < 3 else 0
    if not proto.HasField("graph"):
        raise context.error("it has no graph (the file may be truncated)")
    graph = _graph(proto.graph, opsets, context, outer=frozenset())
    return Model(graph, opsets, f"{proto.producer_name} {proto.producer_version}".strip(), source)


def _model_bytes(model: Tensor | str | os.PathLike[str] | bytes) -> tuple[bytes, str, pathlib.Path | None]:
    """The model's serialized bytes, its name for messages, and the folder its external data is relative to."""
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model), "<ONNX bytes>", None
    if isinstance(model, Tensor):
        device = str(model.device)
        folder = pathlib.Path(device[5:]).parent if device.startswith("DISK:") else None
        source = ByteSource(model, KIND, OnnxFormatError)
        return source.read(0, source.size, "the model"), source.name, folder
    if isinstance(model, (str, os.PathLike)):
        path = pathlib.Path(model)
        if not path.is_file():
            raise FileNotFoundError(f"ONNX file {str(path)!r} does not exist (or is not a regular file)")
        return path.read_bytes(), str(path), path.resolve().parent
    raise TypeError(f"an ONNX model must be a path, bytes or a 1-D uint8 Tensor, got {type(model).__name__}")


def _decode(data: bytes, source: str) -> onnx.ModelProto:
    """The ModelProto in `data`; OnnxFormatError when the bytes are not one."""
    import onnx
    from google.protobuf.message import DecodeError
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as error:
        raise OnnxFormatError(f"{source}: not a valid {KIND} file: the protobuf does not decode ({error}); the file "
                              "may be truncated or not an ONNX model") from None
    return proto


def _value_type(proto: onnx.TypeProto, where: str) -> ValueType | None:
    """A TypeProto as a ValueType (None for an unset type)."""
    which = proto.WhichOneof("value")
    if which == "tensor_type":
        code = proto.tensor_type.elem_type
        dtype = None if code in (0, STRING_CODE) else onnx_dtype(code, where)
        shape: tuple[int | str | None, ...] | None = None
        if proto.tensor_type.HasField("shape"):
            shape = tuple(dim.dim_value if dim.HasField("dim_value") else (dim.dim_param or None)
                          for dim in proto.tensor_type.shape.dim)
        return ValueType("tensor", dtype, shape, code=code)
    if which in ("sequence_type", "optional_type"):
        inner = getattr(proto, which)
        element = _value_type(inner.elem_type, where) if inner.HasField("elem_type") else None
        return ValueType(which.split("_")[0], None, None, element)
    if which is None:
        return None
    raise NotImplementedError(f"{where}: ONNX {which} values are not supported")


def _graph(proto: onnx.GraphProto, opsets: Mapping[str, int], context: _Context, outer: frozenset[str]) -> Graph:
    """A GraphProto as a Graph, checking that each node reads only values defined before it (or outside)."""
    graph_name = proto.name or "main graph"
    initializers: dict[str, Tensor | np.ndarray] = {}
    for tensor in proto.initializer:
        initializers[tensor.name] = value_from_proto(tensor, context, f"initializer {tensor.name!r}")
    for sparse in proto.sparse_initializer:
        initializers[sparse.values.name] = _sparse_tensor(sparse, context)
    inputs = [ValueInfo(info.name, _value_type(info.type, f"input {info.name!r}")) for info in proto.input
              if info.name not in initializers]
    outputs = [ValueInfo(info.name, _value_type(info.type, f"output {info.name!r}")) for info in proto.output]
    defined = set(outer) | set(initializers) | {info.name for info in inputs} | {""}
    element_types = {tensor.name: int(tensor.data_type) for tensor in proto.initializer}
    element_types.update({info.name: int(info.type.tensor_type.elem_type) for info in proto.input
                          if info.type.HasField("tensor_type")})
    nodes = []
    for index, node_proto in enumerate(proto.node):
        domain = "" if node_proto.domain in STANDARD_DOMAINS else node_proto.domain
        opset = opsets.get(domain, opsets.get("", 1) if domain == "" else 1)
        node = Node(node_proto.name or f"{node_proto.op_type}_{index}", node_proto.op_type, domain, opset,
                    tuple(node_proto.input), tuple(node_proto.output), {})
        for name in node.inputs:
            if name not in defined:
                raise context.error(f"in {graph_name}, {node.label} reads {name!r}, which no earlier node, input or "
                                    "initializer defines")
        node.attributes = {attribute.name: _attribute(attribute, opsets, context, frozenset(defined), node)
                           for attribute in node_proto.attribute}
        if node.op == "Constant" and node_proto.attribute and node_proto.attribute[0].type == 4:
            element_types[node.outputs[0]] = int(node_proto.attribute[0].t.data_type)
        # small floats and 4- and 2-bit integers are held in 8-bit tensors: nodes whose output type follows such an
        # input are told its type
        if node.op == "QuantizeLinear" and len(node.inputs) > 2 and element_types.get(node.inputs[2]) in \
                ONNX_BYTE_TYPES:
            node.attributes["zero_point_type"] = element_types[node.inputs[2]]
        if node.op == "CastLike" and len(node.inputs) > 1 and element_types.get(node.inputs[1]) in ONNX_BYTE_TYPES:
            node.attributes["target_type"] = element_types[node.inputs[1]]
        defined.update(node.outputs)
        nodes.append(node)
    for info in outputs:
        if info.name not in defined:
            raise context.error(f"{graph_name} output {info.name!r} is not produced by any node, input or initializer")
    return Graph(graph_name, nodes, initializers, inputs, outputs)


def _attribute(proto: onnx.AttributeProto, opsets: Mapping[str, int], context: _Context, defined: frozenset[str],
               node: Node) -> AttributeValue:
    """One attribute's value: numbers and strings as Python values, tensors as Tensors, graphs as Graphs."""
    import onnx
    kind = proto.type
    where = f"{node.label} attribute {proto.name!r}"
    if proto.ref_attr_name:
        raise NotImplementedError(f"{where} refers to a function attribute; ONNX functions are not supported")
    kinds = onnx.AttributeProto.AttributeType
    if kind == kinds.FLOAT:
        return float(proto.f)
    if kind == kinds.INT:
        return int(proto.i)
    if kind == kinds.STRING:
        return proto.s.decode("utf-8", errors="replace")
    if kind == kinds.TENSOR:
        return value_from_proto(proto.t, context, where)
    if kind == kinds.GRAPH:
        return _graph(proto.g, opsets, context, defined)
    if kind == kinds.FLOATS:
        return [float(value) for value in proto.floats]
    if kind == kinds.INTS:
        return [int(value) for value in proto.ints]
    if kind == kinds.STRINGS:
        return [value.decode("utf-8", errors="replace") for value in proto.strings]
    if kind == kinds.TENSORS:
        return [value_from_proto(tensor, context, where) for tensor in proto.tensors]
    if kind == kinds.GRAPHS:
        return [_graph(graph, opsets, context, defined) for graph in proto.graphs]
    if kind == kinds.TYPE_PROTO:
        return _value_type(proto.tp, where)
    if kind == kinds.SPARSE_TENSOR:
        return _sparse_tensor(proto.sparse_tensor, context)
    raise context.error(f"{where} has unknown attribute type {kind}")


def _sparse_tensor(proto: onnx.SparseTensorProto, context: _Context) -> Tensor:
    """A SparseTensorProto as a dense Tensor (values scattered at their flat or coordinate indices)."""
    values = tensor_from_proto(proto.values, context, "sparse tensor values").numpy()
    indices = tensor_from_proto(proto.indices, context, "sparse tensor indices").numpy().astype(np.int64)
    shape = tuple(int(dim) for dim in proto.dims)
    dense = np.zeros(shape, dtype=values.dtype)
    if indices.ndim == 2:
        indices = np.ravel_multi_index(tuple(indices.T), shape) if indices.size else indices.reshape(-1)
    if indices.size and (indices.min() < 0 or indices.max() >= max(prod(shape), 1)):
        raise context.error(f"sparse tensor indices fall outside its shape {list(shape)}")
    dense.reshape(-1)[indices] = values.reshape(-1)
    return Tensor(dense, device=context.device)


def value_from_proto(proto: onnx.TensorProto, context: _Context | None, where: str) -> Tensor | np.ndarray:
    """A TensorProto as the runner holds it: a Tensor, or for STRING data a numpy object array of str on the host
    (no device has a string dtype)."""
    if int(proto.data_type) != STRING_CODE:
        return tensor_from_proto(proto, context, where)
    shape = tuple(int(dim) for dim in proto.dims)
    if len(proto.string_data) != prod(shape):
        source = context.source if context is not None else "<ONNX tensor>"
        raise OnnxFormatError(f"{source}: not a valid {KIND} file: {where} has {len(proto.string_data)} strings but "
                              f"shape {list(shape)}")
    strings = np.empty(len(proto.string_data), dtype=object)
    for index, item in enumerate(proto.string_data):
        strings[index] = item.decode("utf-8", errors="replace")
    return strings.reshape(shape)


def tensor_from_proto(proto: onnx.TensorProto, context: _Context | None, where: str) -> Tensor:
    """A TensorProto as a Tensor on the context's device (external data: a lazy DISK view of its file)."""
    context = context or _Context("<ONNX tensor>", None, None)
    code = int(proto.data_type)
    if code == STRING_CODE:
        raise TypeError(f"{where}: a string tensor is held as a numpy array, not a Tensor (read it with "
                        "value_from_proto)")
    dtype = onnx_dtype(code, where)
    shape = tuple(int(dim) for dim in proto.dims)
    if any(dim < 0 for dim in shape):
        raise context.error(f"{where} has negative dimensions {list(shape)}")
    if proto.data_location == proto.EXTERNAL:
        external = _external_tensor(proto, context, where, dtype, shape)
        return mark(external, code) if code in ONNX_BYTE_TYPES else external
    import onnx.numpy_helper
    if code in ONNX_BYTE_TYPES:
        # packed 4- and 2-bit values, and the small floats, come back from onnx as ml_dtypes arrays
        try:
            array = onnx.numpy_helper.to_array(proto)
        except (ValueError, TypeError, IndexError) as error:
            raise context.error(f"{where}: its data does not match shape {list(shape)} ({error})") from None
        return tensor_from_numpy(np.asarray(array), context.device)
    if proto.HasField("raw_data") and dtype.fmt is not None:
        expected = prod(shape) * dtype.itemsize if shape else dtype.itemsize
        if len(proto.raw_data) != expected:
            raise context.error(f"{where} has {len(proto.raw_data)} data bytes but shape {list(shape)} of "
                                f"{ONNX_TYPE_NAMES[code]} needs {expected}")
        raw = proto.raw_data
        if _straight_copy(dtype, context.device):
            # the bytes go to the device buffer as they are: a numpy array in between cost two more copies of
            # every weight (a third of building a runner for a large model)
            from tinycore.device.registry import Device
            from tinycore.engine.memory import uop_from_bytes
            device = Device.canonicalize(context.device) if context.device is not None else Device.DEFAULT
            return Tensor(uop_from_bytes(raw, dtype, device).reshape(shape))
        array = np.frombuffer(raw, dtype=np.dtype(dtype.fmt).newbyteorder("<")).reshape(shape)
    else:
        try:
            array = onnx.numpy_helper.to_array(proto)
        except (ValueError, TypeError, IndexError) as error:
            raise context.error(f"{where}: its data does not match shape {list(shape)} ({error})") from None
    return _tensor_from_array(np.asarray(array), dtype, context.device)


def _straight_copy(dtype: DType, device: str | None) -> bool:
    """Whether raw little-endian data of `dtype` is already what the tensor on `device` holds (no narrowing, no
    bit-carried type, a little-endian host)."""
    if sys.byteorder != "little" or dtype.fmt is None or dtype.itemsize == 0:
        return False
    if dtype in (dtypes.bfloat16, dtypes.fp8e4m3, dtypes.fp8e5m2, dtypes.fp8e4m3fnuz, dtypes.fp8e5m2fnuz):
        return False
    return dtype not in NARROWER or device_dtype(dtype, device) == dtype


def _tensor_from_array(array: np.ndarray, dtype: DType, device: str | None) -> Tensor:
    """A Tensor of `dtype` from a numpy array (float8 arrays from ml_dtypes are carried as their bits)."""
    if dtype in (dtypes.bfloat16, dtypes.fp8e4m3, dtypes.fp8e5m2, dtypes.fp8e4m3fnuz, dtypes.fp8e5m2fnuz):
        bits = {1: np.uint8, 2: np.uint16}[dtype.itemsize]
        return Tensor(np.require(array, requirements="C").view(bits), device=device).bitcast(dtype)
    if array.dtype.byteorder not in ("=", "|"):
        array = array.astype(array.dtype.newbyteorder("="))
    if dtype in NARROWER:
        array, dtype = device_array(array, device), device_dtype(dtype, device)
    return Tensor(np.require(array, requirements="C"), device=device, dtype=dtype)


def _external_tensor(proto: onnx.TensorProto, context: _Context, where: str, dtype: DType,
                     shape: tuple[int, ...]) -> Tensor:
    """A tensor whose data lies in an external file: checked location and range, then a DISK view of it."""
    entries = {entry.key: entry.value for entry in proto.external_data}
    location = entries.get("location")
    if not location:
        raise context.error(f"{where} keeps its data externally but names no location")
    if context.folder is None:
        raise ValueError(f"{where} keeps its data in {location!r}, relative to the model's folder: load the model "
                         "from its path (or a DISK Tensor of it), not from bytes")
    relative = pathlib.PurePath(location)
    if relative.is_absolute() or ".." in relative.parts:
        raise context.error(f"{where} names external data {location!r} outside the model's folder")
    path = context.folder / relative
    if not path.is_file():
        raise FileNotFoundError(f"{context.source}: {where} keeps its data in {str(path)!r}, which does not exist; "
                                "copy the model's data files next to it")
    try:
        offset = int(entries.get("offset", "0"))
        length = int(entries["length"]) if "length" in entries else None
    except ValueError:
        raise context.error(f"{where} has a non-integer external offset or length: {entries}") from None
    needed = (prod(shape) if shape else 1) * dtype.itemsize
    if length is not None and length != needed:
        raise context.error(f"{where} has {length} external bytes but shape {list(shape)} of {dtype.name} needs "
                            f"{needed}")
    if dtype.fmt is None and dtype not in (dtypes.bfloat16,) and dtype.itemsize != 1:
        raise NotImplementedError(f"{where}: external data of dtype {dtype.name} is not supported")
    key = path.resolve()
    if key not in context.external:
        context.external[key] = ByteSource(path, KIND, OnnxFormatError)
    view = context.external[key].tensor_at(offset, dtype, shape, where)
    return view.to(context.device) if context.device is not None else view


def graph_ops(graph: Graph) -> list[Node]:
    """Every node of `graph` and of the subgraphs in its attributes, depth first."""
    found: list[Node] = []
    for node in graph.nodes:
        found.append(node)
        for value in node.attributes.values():
            subgraphs: Sequence[object] = value if isinstance(value, list) else [value]
            for subgraph in subgraphs:
                if isinstance(subgraph, Graph):
                    found += graph_ops(subgraph)
    return found
