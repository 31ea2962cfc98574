"""tinycore as an `onnx.backend` (onnx.backend.base.Backend): what onnx's backend test suite drives.

`TinycoreBackend.prepare(model_proto, "CPU")` builds an OnnxRunner from the serialized model and returns a rep
whose `run(inputs)` takes the inputs positionally and returns numpy arrays of the dtypes the model declares
(bfloat16, 8-bit floats and 4-bit integers as their ml_dtypes types, as onnx's reference outputs are).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import ModelProto, TypeProto
from onnx.backend.base import Backend, BackendRep

from tinycore.dtype import dtypes
from tinycore.nn.onnx.runner import OnnxRunner
from tinycore.tensor import Tensor

_BIT_VIEWS = {16: ("bfloat16", np.uint16), 17: ("float8_e4m3fn", np.uint8), 18: ("float8_e4m3fnuz", np.uint8),
              19: ("float8_e5m2", np.uint8), 20: ("float8_e5m2fnuz", np.uint8), 23: ("float4_e2m1fn", np.uint8),
              24: ("float8_e8m0fnu", np.uint8)}
_NARROW_INTS = {21: "uint4", 22: "int4", 25: "uint2", 26: "int2"}


def to_numpy(value: object, elem_type: int | None) -> object:
    """A runner output as numpy: Tensors converted (to ml_dtypes types where declared), sequences element-wise."""
    if isinstance(value, list):
        return [to_numpy(item, elem_type) for item in value]
    if value is None or not isinstance(value, Tensor):
        return value
    if elem_type in _BIT_VIEWS:
        import ml_dtypes
        name, bits = _BIT_VIEWS[elem_type]
        storage = dtypes.uint16 if bits is np.uint16 else dtypes.uint8
        tensor = value if value.dtype.itemsize == storage.itemsize else value.cast(dtypes.float32)
        if tensor.dtype.itemsize != storage.itemsize:
            return tensor.numpy().astype(getattr(ml_dtypes, name))
        return tensor.bitcast(storage).numpy().view(getattr(ml_dtypes, name))
    if elem_type in _NARROW_INTS:
        import ml_dtypes
        return value.numpy().astype(getattr(ml_dtypes, _NARROW_INTS[elem_type]))
    return value.numpy()


def _elem_type(type_proto: TypeProto) -> int | None:
    """The element type code of a tensor, sequence or optional TypeProto."""
    which = type_proto.WhichOneof("value")
    if which == "tensor_type":
        return int(type_proto.tensor_type.elem_type)
    if which in ("sequence_type", "optional_type"):
        return _elem_type(getattr(type_proto, which).elem_type)
    return None


class TinycoreRep(BackendRep):
    """A prepared model: positional inputs in, numpy outputs out."""

    def __init__(self, runner: OnnxRunner, input_names: list[str], output_types: list[int | None]):
        super().__init__()
        self.runner, self.input_names, self.output_types = runner, input_names, output_types

    def run(self, inputs: object, **kwargs: object) -> tuple[object, ...]:
        """Run on `inputs` (a sequence in the graph's input order, or one array)."""
        values = inputs if isinstance(inputs, (list, tuple)) else [inputs]
        outputs = self.runner(dict(zip(self.input_names, values, strict=False)))
        return tuple(to_numpy(value, kind) for value, kind in zip(outputs.values(), self.output_types, strict=False))


class TinycoreBackend(Backend):
    """The onnx backend API over OnnxRunner, on DEV's device (the suite asks for "CPU")."""

    @classmethod
    def prepare(cls, model: ModelProto, device: str = "CPU", **kwargs: object) -> TinycoreRep:
        """Build a runner for `model`; unsupported ops raise NotImplementedError here."""
        runner = OnnxRunner(model.SerializeToString())
        initializers = {tensor.name for tensor in model.graph.initializer}
        names = [info.name for info in model.graph.input if info.name not in initializers]
        return TinycoreRep(runner, names, [_elem_type(info.type) for info in model.graph.output])

    @classmethod
    def run_model(cls, model: ModelProto, inputs: object, device: str = "CPU", **kwargs: object) -> tuple[object, ...]:
        """Prepare and run in one step."""
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        """The suite's device names: tinycore runs its "CPU" cases on DEV's device."""
        return device == "CPU"


def input_names(model: ModelProto) -> Sequence[str]:
    """The graph inputs a caller feeds (initializers excluded)."""
    initializers = {tensor.name for tensor in model.graph.initializer}
    return [info.name for info in model.graph.input if info.name not in initializers]
