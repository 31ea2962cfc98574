"""The lazy Tensor: a handle on one tensor-level UOp graph, with tinygrad's public API.

Each operation builds a node; nothing is computed until `realize()`, `numpy()`, `tolist()`, `item()` or `data()`.
The operations live in mixins grouped by concern (creation, elementwise, movement, reduce, indexing, nn, ...), each
subclassing the one below it (tinycore/tensor/base.py); this file has the constructor, the primitive node builders the
mixins share, realization and autograd.
"""
from __future__ import annotations

import contextlib
import math
import pathlib
import struct
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

from tinycore.dtype import ConstType, DType, DTypeLike, dtypes, from_numpy_dtype, to_dtype, to_numpy_dtype, truncate
from tinycore.errors import ShapeError
from tinycore.helpers import TRAINING, all_int, fully_flatten, get_shape
from tinycore.tensor.base import (  # noqa: F401
    NestedValues,
    TensorData,
    canonical_device,
    default_device,
    register_tensor_class,
)
from tinycore.tensor.base import Operand as OperandOf
from tinycore.tensor.creation import is_shared_buffer
from tinycore.tensor.extras import ExtrasMixin
from tinycore.uop.opcodes import GroupOp
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp

if TYPE_CHECKING:
    import numpy

Operand: TypeAlias = OperandOf["Tensor"]
"""The other side of a Tensor operation: a tensor, scalars (nested lists of them become tensors), a numpy array, or a
symbolic int."""


class _TensorRef(weakref.ref):
    """A weak reference to a live tensor that knows its registry key (set after creation, so that the reference is
    made by weakref.ref's C constructor: weakref.KeyedRef's is Python, two calls for every tensor made)."""

    __slots__ = ("key",)
    key: int


class _LiveTensors:
    """Live tensors by id(), weakly held: an entry leaves when its tensor dies. WeakValueDictionary's interface
    (`registry[id(t)] = t`, get, pop, values) for the few calls made of it, at about half the cost per tensor."""

    __slots__ = ("data", "_drop")

    def __init__(self) -> None:
        self.data: dict[int, _TensorRef] = {}
        data = self.data

        def drop(reference: _TensorRef) -> None:
            # a newer tensor may have the dead one's id already: only the dead one's entry leaves
            if data.get(reference.key) is reference:
                del data[reference.key]
        self._drop = drop

    def __setitem__(self, key: int, tensor: Tensor) -> None:
        reference = _TensorRef(tensor, self._drop)
        reference.key = key
        self.data[key] = reference

    def get(self, key: int) -> Tensor | None:
        """The live tensor of `key`, if any."""
        reference = self.data.get(key)
        return None if reference is None else reference()

    def pop(self, key: int, default: None = None) -> Tensor | None:
        """Remove and return the live tensor of `key`, if any."""
        reference = self.data.pop(key, None)
        return default if reference is None else reference()

    def values(self) -> list[Tensor]:
        """The live tensors."""
        return [tensor for reference in list(self.data.values()) if (tensor := reference()) is not None]

    def __len__(self) -> int:
        return len(self.data)


# Both registries are keyed by id(): a WeakSet would compare tensors with ==, which is elementwise for a Tensor.
_GRAD_TENSORS = _LiveTensors()
"""Every live tensor with requires_grad=True: the candidates for `backward`."""
_UNDECIDED_LEAVES = _LiveTensors()
"""Live tensors made from data or by a creation method (Tensor(...), empty, uniform, ...) whose requires_grad is
None ("not decided"): as in tinygrad, `backward` gives them gradients too. Results of operations are not leaves."""
_REALIZE_UOPS: Callable[[Sequence[UOp]], list[UOp]] | None = None
"""engine.realize.realize_uops, imported on first use like this module's other engine imports; kept here because an
import statement in Tensor.realize cost about 1 us per call."""


_REALIZE_ONE: Callable[[UOp, bool], UOp] | None = None
"""engine.realize.realize_one (Tensor.realize of one tensor), kept like `_REALIZE_UOPS`."""


def _load_realize_uops() -> Callable[[Sequence[UOp]], list[UOp]]:
    """engine.realize.realize_uops (and realize_one), imported on first use."""
    global _REALIZE_UOPS, _REALIZE_ONE
    from tinycore.engine.realize import realize_one, realize_uops
    _REALIZE_UOPS, _REALIZE_ONE = realize_uops, realize_one
    return realize_uops


def _load_realize_one() -> Callable[[UOp, bool], UOp]:
    """engine.realize.realize_one, imported on first use."""
    _load_realize_uops()
    assert _REALIZE_ONE is not None
    return _REALIZE_ONE


def _uses(graph: dict[UOp, None], node: UOp) -> bool:
    """True when `graph` reads `node` (a realized buffer view counts when the graph reads its buffer; a multi-device
    value counts when the graph reads any device's part)."""
    if node.op is Ops.MULTI:
        return any(_uses(graph, source) for source in node.src)
    return node in graph or (node.is_contiguous_buffer and node.base in graph)


def _graph_of(root: UOp) -> dict[UOp, None]:
    """Every node `root` depends on; for a multi-device root, every device's graph."""
    if root.op is not Ops.MULTI:
        return root.toposort
    graph: dict[UOp, None] = {}
    for source in root.src:
        graph.update(source.toposort)
    return graph


def _gradients(root: UOp, seed: UOp, targets: list[UOp]) -> dict[UOp, UOp]:
    """compute_gradient for `targets`, where the root and targets may be multi-device values.

    A replicated value is one value with a copy per device: its gradient is seeded on the first device's copy only
    (the others receive theirs through the copies that joined them). A replicated target's gradient is the sum of
    the gradients of its copies, on every device (an allreduce); a sharded target's is the gradient of each block.
    """
    from tinycore.gradient import compute_gradient
    from tinycore.uop.multi import allreduce, multi
    if root.op is Ops.MULTI:
        seeds = seed.src if seed.op is Ops.MULTI else tuple(seed.copy_to_device(d) for d in root.device)
        pairs = list(zip(root.src, seeds, strict=True))
        if root.arg is None:
            pairs = pairs[:1]
    else:
        pairs = [(root, seed)]
    inner = {source for target in targets for source in (target.src if target.op is Ops.MULTI else (target,))}
    found: dict[UOp, UOp] = {}
    for part_root, part_seed in pairs:
        for node, grad in compute_gradient(part_root, part_seed, inner).items():
            found[node] = grad if node not in found else found[node] + grad
    results: dict[UOp, UOp] = {}
    for target in targets:
        if target.op is not Ops.MULTI:
            if target in found:
                results[target] = found[target]
            continue
        # a copy made lazily from another device's copy passes its gradient on to that one: count it there only
        counted = [source for source in target.src if source in found and not any(
            other is not source and other in source.toposort for other in target.src)]
        if not counted:
            continue
        dtype = found[counted[0]].dtype
        parts = [found[source] if source in counted else UOp.const_on(dtype, 0, source.device, source.shape)
                 for source in target.src]
        results[target] = multi(allreduce(Ops.ADD, parts) if target.arg is None else parts, target.arg)
    return results


def _reads_memory(node: UOp) -> bool:
    """True when `node` reads a buffer (it is not a graph of constants only)."""
    return any(source.op in (Ops.BUFFER, Ops.BUFFER_VIEW) for source in node.toposort)


_MOVEMENT = GroupOp.Movement
_MULTI, _CONST, _BUFFER = Ops.MULTI, Ops.CONST, Ops.BUFFER
"""For Tensor.realize's checks: one global read each instead of a global and a class attribute (`Ops.X`)."""
_PYTHON_SCALARS = frozenset((bool, int, float))
"""The classes of the values in a flat list of Python numbers."""
_PACKERS: dict[tuple[int, DType], Callable[..., bytes]] = {}
"""struct.Struct(f"@{count}{dtype.fmt}").pack by (count, dtype), for flat lists: struct.pack with a format string
built per call (an f-string and the struct module's cache lookup) was about a microsecond of every `Tensor([1.0])`."""
_PACKERS_LIMIT = 256


def _packer(count: int, dtype: DType) -> Callable[..., bytes]:
    """The packer of `count` values of `dtype` (whose fmt is not None), made and kept on first use."""
    if len(_PACKERS) >= _PACKERS_LIMIT:
        _PACKERS.clear()
    found = _PACKERS[count, dtype] = struct.Struct(f"@{count}{dtype.fmt}").pack
    return found


def _flat_dtype(classes: set[type]) -> DType:
    """`dtypes.from_py(values)` for a flat list of Python numbers whose classes are `classes` (from_py's maximum
    over one dtype per value is the float default, else the int default, else bool; an empty list is float)."""
    if float in classes or not classes:
        return dtypes.default_float
    return dtypes.default_int if int in classes else dtypes.bool


_UOP_FROM_BYTES: Callable[[bytes, DType, str], UOp] | None = None
"""tinycore.engine.memory.uop_from_bytes once loaded (an import statement per Tensor() costs about a microsecond)."""


def _load_uop_from_bytes() -> Callable[[bytes, DType, str], UOp]:
    """tinycore.engine.memory.uop_from_bytes, imported on first use."""
    global _UOP_FROM_BYTES
    from tinycore.engine.memory import uop_from_bytes
    _UOP_FROM_BYTES = uop_from_bytes
    return uop_from_bytes


def _bytes_from_values(values: Sequence[ConstType], dtype: DType) -> bytes:
    """Python scalars packed as `dtype` in native byte order."""
    if dtype.fmt is None:
        raise TypeError(f"cannot pack Python values as {dtype}")
    try:
        return struct.pack(f"@{len(values)}{dtype.fmt}", *values)
    except (struct.error, OverflowError):
        converted = [truncate(dtypes.as_const(value, dtype), dtype) for value in values]
        return struct.pack(f"@{len(converted)}{dtype.fmt}", *converted)


class _TensorType(type):
    """Tensor's metaclass, for the two class-level switches tinygrad programs read and set: `Tensor.training` and
    `Tensor.no_grad`."""

    _gradients_off: bool = False

    @property
    def training(cls) -> bool:
        """True in training mode: dropout drops, BatchNorm normalizes with (and updates) batch statistics, and
        optimizers step. One switch with `Context(TRAINING=1)` and the TRAINING environment variable: setting
        `Tensor.training = True` sets TRAINING, and `Context(TRAINING=0)` makes `Tensor.training` False."""
        return bool(TRAINING.value)

    @training.setter
    def training(cls, mode: bool) -> None:
        TRAINING.value = int(bool(mode))

    @property
    def no_grad(cls) -> bool:
        """True while results of operations record no gradient path: `backward()` and `gradient()` see them as
        constants (as torch.no_grad). Set it, or use `Tensor.inference_mode()` / `Tensor.test()`."""
        return _TensorType._gradients_off

    @no_grad.setter
    def no_grad(cls, mode: bool) -> None:
        _TensorType._gradients_off = bool(mode)


class _ModeSwitch(contextlib.ContextDecorator):
    """Sets one of Tensor's class-level switches for a block or a decorated function and restores it after."""

    switch = ""

    def __init__(self, mode: bool = True):
        self.mode = mode
        self._saved: list[bool] = []

    def __enter__(self) -> _ModeSwitch:
        self._saved.append(getattr(Tensor, self.switch))
        setattr(Tensor, self.switch, self.mode)
        return self

    def __exit__(self, *exc: object) -> None:
        setattr(Tensor, self.switch, self._saved.pop())


class TrainMode(_ModeSwitch):
    """`Tensor.train(mode=True)`: training mode (`Tensor.training`) for a `with` block or a decorated function,
    tinygrad's way of wrapping a training step (`@Tensor.train()` above a TinyJit step)."""

    switch = "training"


class NoGradMode(_ModeSwitch):
    """`Tensor.inference_mode(mode=True)` and `Tensor.test(mode=True)`: no gradient paths are recorded
    (`Tensor.no_grad`) for a `with` block or a decorated function."""

    switch = "no_grad"


def _numpy_arrays_as_lists(data: list[object] | tuple[object, ...]) -> list[object]:
    """`data` with each numpy array inside it (at any depth) replaced by its nested Python list."""
    def convert(value: object) -> object:
        if type(value).__module__ == "numpy" and hasattr(value, "tolist"):
            return value.tolist()
        if isinstance(value, (list, tuple)):
            return [convert(item) for item in value]
        return value
    return [convert(value) for value in data]


class Tensor(ExtrasMixin, metaclass=_TensorType):  # the top of the mixins' chain (see tinycore/tensor/base.py)
    """A lazily evaluated n-dimensional array on a device, with automatic differentiation.

    `Tensor(data, device=None, dtype=None, requires_grad=None)` accepts a Python scalar, a nested list or
    tuple, a numpy array, bytes (as uint8) or a tensor-level UOp.
    """

    __hash__ = object.__hash__
    train = TrainMode
    test = NoGradMode
    inference_mode = NoGradMode

    def __init__(self, data: Any = None, device: str | None = None, dtype: DTypeLike | None = None,
                 requires_grad: bool | None = None):
        self.grad: Tensor | None = None
        self._unrealized: UOp | None = None
        if data.__class__ is list and dtype is None and device is None \
                and (classes := set(map(type, data))) <= _PYTHON_SCALARS:
            # `Tensor([1.0])`, eager code's common case: _uop_from_data's flat-list branch inline (its call and the
            # tests of the other kinds of data cost about 0.2 us of a microseconds-long eager op)
            target = dtypes.default_float if float in classes or not classes else _flat_dtype(classes)
            storage = target if target.fmt is not None else dtypes.float32
            try:
                packed = (_PACKERS.get((len(data), storage)) or _packer(len(data), storage))(*data)
            except (struct.error, OverflowError):  # values to convert first: _bytes_from_values does
                packed = _bytes_from_values(data, storage)
            node = (_UOP_FROM_BYTES or _load_uop_from_bytes())(packed, storage, default_device())
            self.uop: UOp = node if storage is target else node.cast(target)
        else:
            wanted = None if dtype is None else to_dtype(dtype)
            if isinstance(data, pathlib.Path):
                data, wanted = self._uop_from_path(data, wanted), None
            if isinstance(data, UOp):
                if wanted is not None and wanted != data.dtype:
                    data = data.cast(wanted)
                if device is not None and canonical_device(device) != data.device:
                    data = data.copy_to_device(canonical_device(device))
                self.uop = data
            else:
                where = canonical_device(device) if device is not None else default_device()
                if isinstance(where, tuple):  # made on the first device, then copied to every one
                    self.uop = self._uop_from_data(data, where[0], wanted).copy_to_device(where)
                else:
                    self.uop = self._uop_from_data(data, where, wanted)
        self._requires_grad: bool | None = None
        if requires_grad is None:  # the setter's work for None is nothing on a new tensor: skipped
            # _UNDECIDED_LEAVES[id(self)] = self, without the registry's __setitem__ call
            reference = _TensorRef(self, _UNDECIDED_LEAVES._drop)
            reference.key = key = id(self)
            _UNDECIDED_LEAVES.data[key] = reference
        else:
            self.requires_grad = requires_grad

    @staticmethod
    def _uop_from_path(path: pathlib.Path, dtype: DType | None) -> UOp:
        """A DISK buffer over the whole file at `path` (uint8 unless `dtype` is given); nothing is read yet."""
        from tinycore.device.registry import Device
        from tinycore.uop.buffer import new_buffer_uop
        storage = dtype or dtypes.uint8
        if not path.is_file():
            raise FileNotFoundError(f"Tensor(Path): {str(path)!r} does not exist or is not a regular file")
        size = path.stat().st_size
        if size % storage.itemsize:
            raise ValueError(f"Tensor(Path): {str(path)!r} has {size} bytes, not a whole number of {storage} items "
                             f"({storage.itemsize} bytes each)")
        device = Device.canonicalize(f"DISK:{path.resolve()}")
        return new_buffer_uop(device, storage, size // storage.itemsize)

    @staticmethod
    def _uop_from_data(data: Any, device: str, dtype: DType | None) -> UOp:
        """The graph node holding `data` (scalars become constants, everything else a filled buffer)."""
        uop_from_bytes = _UOP_FROM_BYTES or _load_uop_from_bytes()
        if data.__class__ is list or isinstance(data, (list, tuple)):  # first: `Tensor([1.0])` tests only this
            classes = set(map(type, data))  # not a comprehension: that is a Python frame of its own
            flat = classes <= _PYTHON_SCALARS
            if flat:  # `Tensor([1.0])`, eager code's common case: packed as it is, cast only when storage differs
                # _flat_dtype and _bytes_from_values inline for the plain case (each a Python call per new tensor)
                target = dtype or (dtypes.default_float if float in classes or not classes else _flat_dtype(classes))
                storage = target if target.fmt is not None else dtypes.float32
                try:
                    packed = (_PACKERS.get((len(data), storage)) or _packer(len(data), storage))(*data)
                except (struct.error, OverflowError):  # values to convert first: _bytes_from_values does
                    packed = _bytes_from_values(data, storage)
                node = uop_from_bytes(packed, storage, device)
                return node if storage is target else node.cast(target)
            if not flat and any(type(value).__module__ == "numpy" for value in data):
                data = _numpy_arrays_as_lists(data)  # [np.array([1, 2]), ...] nests as the lists the arrays hold
            shape = (len(data),) if flat else get_shape(data)
            values = list(data) if flat else fully_flatten(data)
            if not flat:
                values = [value.item() if type(value).__module__ == "numpy" and hasattr(value, "item") else value
                          for value in values]
                for value in values:
                    if not isinstance(value, (bool, int, float)):
                        raise TypeError(f"Tensor data must hold Python numbers, found {type(value).__name__} "
                                        f"{value!r}")
            target = dtype or (_flat_dtype(classes) if flat else dtypes.from_py(values))
            storage = target if target.fmt is not None else dtypes.float32
            node = uop_from_bytes(_bytes_from_values(values, storage), storage, device)
            # a flat list's shape is its buffer's own
            return (node if flat else node.reshape(shape)).cast(target)
        if data is None:
            return UOp.const_on(dtype or dtypes.default_float, 0, device, (0,))
        if isinstance(data, (bool, int, float)):
            return UOp.const_on(dtype or dtypes.from_py(data), data, device, ())
        if isinstance(data, (bytes, bytearray, memoryview)):
            raw = bytes(data)
            result = uop_from_bytes(raw, dtypes.uint8, device)
            return result.cast(dtype) if dtype is not None else result
        if type(data).__module__ == "numpy" or hasattr(data, "__array_interface__"):
            import numpy
            array = numpy.asarray(data)
            if array.dtype.kind not in "biuf":
                raise TypeError(f"cannot make a Tensor from a numpy array of dtype {array.dtype}")
            source_dtype = from_numpy_dtype(array.dtype)
            contiguous = numpy.ascontiguousarray(array)
            node = uop_from_bytes(contiguous.tobytes(), source_dtype, device).reshape(array.shape)
            return node.cast(dtype) if dtype is not None else node
        raise TypeError(f"cannot make a Tensor from {type(data).__name__}: pass a Python scalar, a (nested) list, "
                        "a numpy array, bytes or a UOp")

    @classmethod
    def _wrap(cls, uop: UOp, requires_grad: bool | None = None) -> Tensor:
        """A Tensor over an existing node, without argument parsing."""
        tensor = cls.__new__(cls)
        tensor.uop, tensor.grad, tensor._unrealized, tensor._requires_grad = uop, None, None, None
        if requires_grad:
            tensor._requires_grad = True
            _GRAD_TENSORS[id(tensor)] = tensor
        return tensor

    def _mark_leaf(self) -> Tensor:
        """Record this tensor, made by a creation method, as a leaf that backward gives a gradient unless its
        requires_grad is False; returns self."""
        if self._requires_grad is None:
            _UNDECIDED_LEAVES[id(self)] = self
        return self

    def _result(self, uop: UOp, *others: object) -> Tensor:
        """A new Tensor over `uop`, which was built from this tensor and `others` (gradients flow if any needs)."""
        needs = self._requires_grad
        if not needs:  # a loop, not any() over a generator: every op of the front end passes here
            for other in others:
                if isinstance(other, Tensor) and other._requires_grad:
                    needs = True
                    break
        if needs and _TensorType._gradients_off:
            return type(self)._wrap(uop.detach())
        return type(self)._wrap(uop, True if needs else None)

    # ---- properties ----

    @property
    def requires_grad(self) -> bool | None:
        """True when gradients are computed for this tensor, None when undecided, False when never."""
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool | None) -> None:
        """Mark this tensor as a leaf that receives gradients. A lazy value is realized first: graph nodes are
        shared between equal computations, so only a buffer identifies this tensor."""
        if value is not None and not isinstance(value, bool):
            raise TypeError(f"requires_grad must be True, False or None, got {value!r}")
        if value and not self._is_realized() and self.uop.op is Ops.MULTI:
            self.uop = type(self)._wrap(self.uop.contiguous()).realize().uop
        elif value and not self._is_realized():
            fresh = type(self).empty(*self.shape, dtype=self.dtype, device=self.device)
            self.uop = fresh.assign(self.detach()).realize().uop
        self._requires_grad = value
        if value:
            _GRAD_TENSORS[id(self)] = self
        else:
            _GRAD_TENSORS.pop(id(self), None)
        if value is not None:
            _UNDECIDED_LEAVES.pop(id(self), None)

    @property
    def shape(self) -> tuple[Any, ...]:
        """The size of each axis."""
        return self.uop.shape

    @property
    def dtype(self) -> DType:
        """The element type."""
        return self.uop.dtype

    @property
    def device(self) -> Any:
        """The canonical name of the device the data lives on (a tuple of names for a multi-device tensor)."""
        return self.uop.device

    @property
    def ndim(self) -> int:
        """The number of axes."""
        return len(self.shape)

    def numel(self) -> int:
        """The number of elements."""
        return math.prod(self.shape)

    def element_size(self) -> int:
        """Bytes per element."""
        return self.dtype.itemsize

    def nbytes(self) -> int:
        """Bytes taken by all elements."""
        return self.numel() * self.element_size()

    def size(self, dim: int | None = None) -> Any:
        """The shape, or the size of axis `dim`."""
        if dim is None:
            return self.shape
        from tinycore.tensor.support import resolve_axis
        return self.shape[resolve_axis(dim, self.ndim)]

    def max_numel(self) -> int:
        """The largest element count the shape can take (the element count for a concrete shape)."""
        return math.prod(self.max_shape)

    @property
    def max_shape(self) -> tuple[int, ...]:
        """The shape with every symbolic size at its largest value."""
        return tuple(size if isinstance(size, int) else int(size.vmax) for size in self.shape)

    def is_floating_point(self) -> bool:
        """True for floating point dtypes."""
        return dtypes.is_float(self.dtype)

    def __len__(self) -> int:
        """The size of the first axis."""
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self) -> str:
        """A short description: shape, dtype, device and whether the value is computed."""
        state = "realized" if self._is_realized() else f"lazy {self.uop.op.name}"
        return (f"<Tensor shape={self.shape} dtype={self.dtype!r} on {self.device} ({state}) "
                f"with grad {None if self.grad is None else 'set'}>")

    def __bool__(self) -> bool:
        """Always an error: a tensor has no single truth value."""
        raise TypeError("the truth value of a Tensor is ambiguous: use .item(), .any() or .all()")

    # ---- primitive node builders used by the mixins ----

    def _alu(self, op: Ops, *others: Tensor) -> Tensor:
        """The ALU node `op` over this tensor and `others` (already broadcast and of matching dtypes)."""
        if len(others) == 1:  # a binary op, most of them: without the generator
            other = others[0]
            return self._result(self.uop.alu(op, other.uop), other)
        return self._result(self.uop.alu(op, *(other.uop for other in others)), *others)

    def cast(self, dtype: DTypeLike) -> Tensor:
        """The values converted to `dtype` (floats to ints truncate toward zero)."""
        target = to_dtype(dtype)
        return self if target == self.dtype else self._result(self.uop.cast(target))

    def bitcast(self, dtype: DTypeLike) -> Tensor:
        """The same bits read as `dtype`; the element size must match."""
        target = to_dtype(dtype)
        if self.requires_grad:
            raise RuntimeError("bitcast cannot be differentiated: detach() the tensor first")
        if target.itemsize != self.dtype.itemsize:
            return self._bitcast_resized(target)
        return self if target == self.dtype else self._result(self.uop.bitcast(target))

    def _bitcast_resized(self, target: DType) -> Tensor:
        """bitcast to a dtype of another element size: the last axis is rescaled (little-endian, as tinygrad), the
        bytes moved through unsigned ints of each size with shifts and masks."""
        unsigned = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}
        size, new_size = self.dtype.itemsize, target.itemsize
        if size not in unsigned or new_size not in unsigned or self.dtype == dtypes.bool or target == dtypes.bool:
            raise ValueError(f"bitcast from {self.dtype} to {target}: sizes of 1, 2, 4 or 8 bytes are supported")
        last = self.shape[-1] if self.ndim else 1
        if not isinstance(last, int) or (last * size) % new_size:
            raise RuntimeError(f"bitcast from {self.dtype} to {target} needs a concrete last axis whose bytes "
                               f"({last} x {size}) divide into {new_size}-byte elements")
        source = (self.reshape(1) if not self.ndim else self).bitcast(unsigned[size])
        wide, narrow = unsigned[max(size, new_size)], unsigned[min(size, new_size)]
        if new_size < size:  # each element split into its bytes' groups, lowest first
            ratio = size // new_size
            parts = [((source >> (8 * new_size * index)) & ((1 << (8 * new_size)) - 1)).cast(narrow)
                     for index in range(ratio)]
            joined = parts[0].unsqueeze(-1).cat(*[part.unsqueeze(-1) for part in parts[1:]], dim=-1)
            result = joined.reshape(source.shape[:-1] + (last * ratio,))
        else:  # groups of elements packed into one, the first in the lowest bytes
            ratio = new_size // size
            grouped = source.reshape(source.shape[:-1] + (last // ratio, ratio)).cast(wide)
            result = grouped[..., 0]
            for index in range(1, ratio):
                result = result | (grouped[..., index] << (8 * size * index))
        return result.bitcast(target)

    def _const(self, value: ConstType, dtype: DType | None = None, shape: Sequence[int] | None = None) -> Tensor:
        """A constant on this tensor's device with this tensor's shape (or `shape`) and dtype (or `dtype`)."""
        target = dtype or self.dtype
        return type(self)._wrap(UOp.const_on(target, value, self.device, self.shape if shape is None else shape))

    def const_like(self, value: ConstType, dtype: DTypeLike | None = None) -> Tensor:
        """A constant tensor shaped like this one."""
        return self._const(value, None if dtype is None else to_dtype(dtype))

    # ---- realization ----

    def _is_realized(self) -> bool:
        """True when the value sits in a device buffer (possibly behind movement ops), on every device."""
        if self.uop.op is Ops.MULTI:
            return all(source.base.op is Ops.BUFFER for source in self.uop.src)
        return self.uop.base.op is Ops.BUFFER

    def realize(self, *lst: Tensor, do_update_stats: bool = True) -> Tensor:
        """Compute this tensor and `lst` now, together (shared work is done once); returns self."""
        uop = self.uop
        op = uop.op
        if not lst and op is not _MULTI:  # one tensor (eager code): no repeats to tell apart
            if op is _BUFFER or (op is _CONST and not uop.src):
                return self  # realized, or a constant on no device (Tensor(UOp.const(...))): nothing to compute
            if op in _MOVEMENT:
                base = uop.src[0]
                while base.op in _MOVEMENT:  # uop.base without the property's call: eager code realizes every op
                    base = base.src[0]
                if base.op is _BUFFER:
                    return self
            # the graph kept for gradients: decided before realize (which reads no gradient state), so that realize
            # knows whether the node outlives it; `uop` is held here and in self.uop only, as realize_one expects
            kept = self._unrealized is None and (self._requires_grad or (self._requires_grad is None and (
                # _UNDECIDED_LEAVES.get(id(self)) is self, without the registry's get call
                (leaf := _UNDECIDED_LEAVES.data.get(id(self))) is not None and leaf() is self)))
            only = (_REALIZE_ONE or _load_realize_one())(uop, kept)
            if kept:
                self._unrealized = uop
            self.uop = only
            return self
        pending = [tensor for tensor in (self,) + lst if not tensor._is_realized()]
        if pending:
            from tinycore.engine.realize import realize_uops
            # equal lazy graphs are one hash-consed node; computed together they would share one buffer, so a
            # later assign to one would show in the other: each repeat gets a buffer of its own (graphs that
            # assign are the same write and keep sharing it)
            first: dict[UOp, Tensor] = {}
            repeats = [tensor for tensor in pending if first.setdefault(tensor.uop, tensor) is not tensor
                       and not any(node.op is Ops.ASSIGN for node in tensor.uop.toposort)]
            together = [tensor for tensor in pending if all(tensor is not repeat for repeat in repeats)]
            realized = realize_uops([tensor.uop for tensor in together])
            for repeat in repeats:
                realized.extend(realize_uops([repeat.uop]))
            for tensor, uop in zip(together + repeats, realized, strict=True):
                if tensor._unrealized is None and (tensor._requires_grad or (
                        tensor._requires_grad is None and _UNDECIDED_LEAVES.get(id(tensor)) is tensor)):
                    tensor._unrealized = tensor.uop
                tensor.uop = uop
        return self

    def _host_view(self) -> memoryview:
        """The realized bytes in C order."""
        if not all_int(self.shape):
            raise ValueError(f"cannot read a tensor with symbolic shape {self.shape}: bind its variables first")
        from tinycore.engine.realize import to_host
        if self.uop.op is Ops.CONST and not self.uop.src:
            return self.to(None)._host_view()  # a constant on no device is read through the default device
        self.realize()
        return to_host(self.uop)

    def numpy(self) -> numpy.ndarray:
        """The values as a new numpy array (bfloat16 and fp8 come back as float32)."""
        import numpy
        if self.dtype.fmt is None:
            return self.cast(dtypes.float32).numpy()
        raw = self._host_view()
        return numpy.frombuffer(raw, dtype=to_numpy_dtype(self.dtype)).reshape(self.shape).copy()

    def data(self) -> memoryview:
        """The values as a memoryview shaped like the tensor."""
        if self.dtype.fmt is None:
            return self.cast(dtypes.float32).data()
        raw = self._host_view().cast("B")
        if self.numel() == 0 or not self.shape:
            return raw.cast(self.dtype.fmt)  # type: ignore[call-overload]
        return raw.cast(self.dtype.fmt, self.shape)  # type: ignore[call-overload]

    def tolist(self) -> Any:
        """The values as (nested) Python lists, or a Python scalar for a 0-d tensor."""
        if self.dtype.fmt is None:
            return self.cast(dtypes.float32).tolist()
        if self.numel() == 0:
            return self.numpy().tolist()
        view = self._host_view().cast("B")
        if self.dtype.fmt == "e":  # memoryview casts to half only from Python 3.12 on: unpack with struct
            flat = list(struct.unpack(f"@{self.numel()}e", view))
        else:
            flat = view.cast(self.dtype.fmt).tolist()  # type: ignore[call-overload]
        if not self.shape:
            return flat[0]
        for size in reversed(self.shape[1:]):
            flat = [flat[start:start + size] for start in range(0, len(flat), size)]
        return flat

    def item(self) -> ConstType:
        """The single value of a one-element tensor as a Python scalar."""
        if self.numel() != 1:
            raise ShapeError(f"item() needs a tensor with one element, this one has shape {self.shape} "
                             f"({self.numel()} elements)")
        return self.reshape(()).tolist()

    def to(self, device: str | tuple[str, ...] | None) -> Tensor:
        """This tensor on `device` (itself when it is already there); a tuple of devices replicates it on each."""
        target = canonical_device(device)
        if target == self.device:
            return self
        if self.uop.op is Ops.CONST and not self.uop.src and isinstance(target, str):
            # a constant on no device is made on the target: there is nothing to copy
            return self._result(UOp.const_on(self.dtype, self.uop.arg, target, self.shape))
        if isinstance(target, tuple) and self.uop.op is Ops.MULTI and self.uop.arg is not None:
            return self.to(self.device[0]).to(target)  # a sharded tensor replicated: gathered first
        result = self._result(self.uop.copy_to_device(target))
        if self.grad is not None:
            result.grad = self.grad.to(target)
        return result

    def to_(self, device: str | tuple[str, ...] | None) -> Tensor:
        """Move this tensor to `device` in place."""
        moved = self.to(device)
        self.uop = moved.uop
        if self.grad is not None:
            self.grad = self.grad.to(device)
        return self

    def clone(self, device: str | None = None) -> Tensor:
        """A copy in a new buffer (on `device` if given), with a copy of `.grad` when there is one (as tinygrad)."""
        if device is None and self.uop.op is Ops.CONST and not self.uop.src:
            device = canonical_device(None)  # a constant on no device is cloned onto the default device
        source = self if device is None else self.to(device)
        copied = source._result(source.uop.clone())
        if self.grad is not None:
            copied.grad = self.grad.clone(device)
        return copied

    def contiguous(self) -> Tensor:
        """This value in its own contiguous buffer when realized (a no-op for one that already is)."""
        return self._result(self.uop.contiguous())

    def contiguous_backward(self) -> Tensor:
        """Identity forwards; makes the gradient contiguous."""
        return self._result(self.uop.contiguous_backward())

    def detach(self) -> Tensor:
        """The same value with gradients stopped."""
        return type(self)._wrap(self.uop.detach())

    def assign(self, value: Tensor | TensorData) -> Tensor:
        """Write `value` (broadcast and cast to this tensor's shape and dtype) into this tensor; returns self."""
        if not isinstance(value, Tensor):
            value = type(self)(value, device=self.device, dtype=self.dtype)
        if value.device != self.device:
            raise ValueError(f"assign from device {value.device} into a tensor on {self.device}: call .to() first")
        if tuple(value.shape) != tuple(self.shape):
            try:
                value = value._broadcast_to(self.shape)
            except ValueError as error:
                raise ValueError(f"assign of shape {value.shape} into a tensor of shape {self.shape}") from error
        if value.dtype != self.dtype:
            value = value.cast(self.dtype)
        if self.uop.op is Ops.MULTI and self._is_realized() and value.uop is not self.uop:
            self.uop = UOp(Ops.ASSIGN, self.dtype, (self.uop, value.uop))  # one ASSIGN per device
        elif self._is_realized() and self.uop.base.op is Ops.BUFFER and value.uop is not self.uop \
                and not is_shared_buffer(self.uop):
            whole = self.uop.is_contiguous_buffer
            self.uop = self.uop.assign(value.uop)
            if not whole:
                # a view (shrink, permute, ...) of another tensor's buffer: written now, so that the tensor owning
                # the buffer reads the new values (as in tinygrad and torch), which it would not see from a lazy write
                self.realize()
        elif self.uop.op is Ops.DETACH and self.uop.src[0].base.op is Ops.BUFFER and value.uop is not self.uop \
                and not is_shared_buffer(self.uop.src[0]):
            # t.detach() shares t's buffer (as in tinygrad and torch): written now, so that t reads the new values
            self.uop = self.uop.src[0].assign(value.uop).detach()
            self.realize()
        else:
            self.uop = value.uop
        return self

    def replace(self, other: Tensor) -> Tensor:
        """Make this tensor hold `other`'s value (same shape required); returns self."""
        if tuple(other.shape) != tuple(self.shape):
            raise ValueError(f"replace needs the same shape: {other.shape} vs {self.shape}")
        self.uop = other.uop
        return self

    # ---- autograd ----

    def _graph_root(self) -> UOp:
        """The node whose graph gradients flow through (the lazy graph even after realization)."""
        return self._unrealized if self._unrealized is not None else self.uop

    def _grad_targets(self, root: UOp) -> dict[Tensor, UOp]:
        """The tensors that the graph of `root` uses and that receive gradients, with their node in it: those with
        requires_grad=True, and floating-point leaves whose requires_grad is None (tinygrad's "not decided")."""
        graph = _graph_of(root)
        found: dict[Tensor, UOp] = {}
        undecided = [tensor for tensor in list(_UNDECIDED_LEAVES.values())
                     if tensor._requires_grad is None and dtypes.is_float(tensor.dtype)]
        for tensor in list(_GRAD_TENSORS.values()):
            for candidate in (tensor.uop, tensor._unrealized):
                if candidate is not None and _uses(graph, candidate):
                    found[tensor] = candidate
                    break
        for tensor in undecided:
            for candidate in (tensor.uop, tensor._unrealized):
                # a lazy constant (Tensor.zeros(3)) is the very node every equal constant is, so its gradient
                # would mix in every other use: only leaves over memory of their own are told apart
                if candidate is not None and _uses(graph, candidate) and _reads_memory(candidate):
                    found[tensor] = candidate
                    break
        return found

    def _seed_gradient(self, gradient: Tensor | None) -> Tensor:
        """The gradient of this tensor to start from (1 for a scalar)."""
        if gradient is None:
            if self.shape != ():
                raise ValueError(f"backward/gradient without gradient= needs a scalar, this tensor has shape "
                                 f"{self.shape}: reduce it first (e.g. .sum()) or pass gradient=")
            return self._const(1.0, self.dtype if dtypes.is_float(self.dtype) else dtypes.default_float)
        if tuple(gradient.shape) != tuple(self.shape):
            raise ValueError(f"gradient shape {gradient.shape} does not match the tensor's shape {self.shape}")
        return gradient

    def gradient(self, *targets: Tensor, gradient: Tensor | None = None) -> list[Tensor]:
        """The gradients of this tensor with respect to `targets` (no tensor's .grad is changed)."""
        seed = self._seed_gradient(gradient)
        root = self._graph_root()
        graph = _graph_of(root)
        target_uops = [target._unrealized if not _uses(graph, target.uop) and target._unrealized is not None
                       else target.uop for target in targets]
        grads = _gradients(root, seed.uop, target_uops)
        results = []
        for target, uop in zip(targets, target_uops, strict=True):
            found = grads.get(uop)
            # no differentiable path (a zero-size input, a sign-only use, an unused target): zeros, as tinygrad
            results.append(type(self)._wrap(found) if found is not None else target._zero_gradient())
        return results

    def _zero_gradient(self) -> Tensor:
        """The gradient of a tensor the differentiated value does not depend on: zeros of its shape."""
        return self._const(0.0, self.dtype if dtypes.is_float(self.dtype) else dtypes.default_float)

    def backward(self, gradient: Tensor | None = None) -> Tensor:
        """Accumulate into `.grad` the gradient of this tensor for every tensor with requires_grad that it uses."""
        seed = self._seed_gradient(gradient)
        root = self._graph_root()
        targets = self._grad_targets(root)
        if not targets:
            raise RuntimeError("backward found no floating-point tensor in this tensor's graph that takes a gradient "
                               "(every one has requires_grad=False)")
        grads = _gradients(root, seed.uop, list(targets.values()))
        for tensor, uop in targets.items():
            found = grads.get(uop)
            if found is None and not dtypes.is_float(tensor.dtype):
                continue
            new_grad = type(self)._wrap(found) if found is not None else tensor._zero_gradient()
            if tuple(new_grad.shape) != tuple(tensor.shape):
                raise RuntimeError(f"gradient shape {new_grad.shape} does not match tensor shape {tensor.shape}")
            tensor.grad = new_grad if tensor.grad is None else tensor.grad + new_grad
        return self


register_tensor_class(Tensor)
