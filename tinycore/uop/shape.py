"""Tensor-level properties of UOps: shape, device and the movement-op constructors (a mixin of UOp).

Shapes are tuples whose entries are Python ints or symbolic integer UOps (expressions over DEFINE_VAR / BIND).
Every constructor returns `self` when the requested operation changes nothing, so graphs stay small and equal
computations stay the same hash-consed node.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeGuard, TypeVar, Union

from tinycore.dtype import ConstType, DType, dtypes, truncate
from tinycore.helpers import cached_node_property, prod
from tinycore.uop.opcodes import GroupOp, Ops

if TYPE_CHECKING:
    from typing import Self  # Python 3.11; the annotations are strings at run time (3.10 included)

Node = TypeVar("Node", bound="ShapeMixin")
Size = Union[int, "ShapeMixin"]
"""A size as this module sees it: a Python int or a symbolic integer node. UOp derives from ShapeMixin, which
therefore cannot name it: the mixin's methods speak of `Self` (a UOp, on a UOp), and `tinycore.uop.uop.sint` is
`int | UOp`."""

# ops whose shape is the shape of their first source
_SAME_SHAPE_AS_FIRST = frozenset(GroupOp.Elementwise | {Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD, Ops.DETACH,
                                                        Ops.COPY, Ops.ASSIGN, Ops.SCATTER})
# ops that are scalars
_SCALAR_OPS = frozenset({Ops.CONST, Ops.DEFINE_VAR, Ops.BIND})
# the reduce operations REDUCE_AXIS accepts
REDUCE_OPS = frozenset({Ops.ADD, Ops.MUL, Ops.MAX})


def _size_eq(first: Size, second: Size) -> bool:
    """Equality of two sizes that never builds a comparison node (symbolic sizes compare by identity)."""
    if isinstance(first, int) and isinstance(second, int):
        return first == second
    return first is second


def shapes_equal(first: tuple[Size, ...], second: tuple[Size, ...]) -> bool:
    """Equality of two shapes that never builds comparison nodes."""
    return len(first) == len(second) and all(_size_eq(a, b) for a, b in zip(first, second, strict=True))


def _add_size(size: int | Node, amount: int | Node) -> int | Node:
    """size + amount, without a node when amount is 0 or both are ints."""
    if _is_int(amount) and amount == 0:
        return size
    if _is_int(size) and size == 0:
        return amount
    if _is_int(size) and _is_int(amount):
        return size + amount
    # a symbolic size is simplified, so that equal sizes built differently ((i+2)-i, 2) compare equal
    total: Any = size  # int + node or node + node: a node, whose class (UOp) this module cannot name
    return (total + amount).ssimplify()  # type: ignore[no-any-return]


_device_nodes: dict[str | tuple[str, ...], ShapeMixin] = {}
_const_cache: dict[tuple[object, ...], ShapeMixin] = {}  # recently built constants, so eager code does not rebuild them
_CONST_CACHE_LIMIT = 4096


def _fill_sources(node: ShapeMixin, name: str) -> None:
    """Compute the cached property `name` of every node below `node`, sources first, when a source lacks it.

    Inference then never recurses deeper than one level, so graphs thousands of ops deep work.
    """
    stack: list[tuple[ShapeMixin, bool]] = [(source, False) for source in node.src if name not in source.__dict__]
    if not stack:
        return
    # a walk over only the nodes that lack the property (not the whole graph below `node`, which an eager
    # program extending one lazy graph op by op would otherwise walk once per op)
    expanded: set[int] = set()
    while stack:
        current, sources_done = stack.pop()
        if name in current.__dict__:
            continue
        if sources_done:
            getattr(current, name)
        elif id(current) not in expanded:
            expanded.add(id(current))
            stack.append((current, True))
            stack.extend((source, False) for source in current.src if name not in source.__dict__)


def _is_int(value: object) -> TypeGuard[int]:
    """True for a Python int (bool excluded)."""
    return isinstance(value, int) and not isinstance(value, bool)


class ShapeMixin:
    """Shape and device inference and movement constructors for tensor-level UOps."""

    __slots__ = ()
    op: Ops
    dtype: DType
    src: tuple[Self, ...]
    arg: Any

    # ---- inference ----

    @cached_node_property
    def _shape(self) -> tuple[int | Self, ...] | None:
        """The shape, or None for nodes that have none (DEVICE, kernel-level nodes)."""
        _fill_sources(self, "_shape")
        op = self.op
        if op in _SAME_SHAPE_AS_FIRST:
            return self.src[0]._shape
        if op in GroupOp.Movement:
            if op is Ops.PERMUTE:
                source_shape = self.src[0].shape
                return tuple(source_shape[axis] for axis in self.arg)
            if op is Ops.PAD:
                source_shape = self.src[0].shape
                return tuple(_add_size(_add_size(size, low), high)
                             for size, (low, high) in zip(source_shape, self.arg, strict=True))
            if op is Ops.SHRINK:
                return tuple(_add_size(end, -start) if _is_int(start) else _add_size(end, -start)
                             for start, end in self.arg)
            if op is Ops.FLIP:
                return self.src[0].shape
            return self.arg  # RESHAPE, EXPAND
        if op is Ops.REDUCE_AXIS:
            axes = self.arg[1]
            return tuple(1 if axis in axes else size for axis, size in enumerate(self.src[0].shape))
        if op is Ops.GATHER:
            return self.arg[0]
        if op is Ops.MULTI:
            first = self.src[0].shape
            if self.arg is None:
                return first
            return first[:self.arg] + (sum(source.shape[self.arg] for source in self.src),) + first[self.arg + 1:]
        if op is Ops.BUFFER:
            return (self.arg[1],)
        if op is Ops.BUFFER_VIEW:
            return (self.arg[0],)
        if op in _SCALAR_OPS:
            return ()
        return None

    @property
    def shape(self) -> tuple[int | Self, ...]:
        """The shape of this tensor-level node (a tuple of ints or symbolic sizes)."""
        shape = self._shape
        if shape is None:
            raise ValueError(f"a {self.op.name} node has no shape: shapes exist only on tensor-level nodes")
        return shape

    @property
    def ndim(self) -> int:
        """The number of axes."""
        return len(self.shape)

    @property
    def size(self) -> int | Self:
        """The number of elements (a symbolic UOp if the shape is symbolic)."""
        return prod(self.shape)

    @cached_node_property
    def device(self) -> Any:
        """The canonical device name this node lives on (None for device-free nodes such as DEFINE_VAR)."""
        _fill_sources(self, "device")
        op = self.op
        if op is Ops.DEVICE:
            return self.arg
        if op is Ops.COPY:
            return self.src[1].arg
        if op is Ops.MULTI:
            return tuple(source.device for source in self.src)
        for source in self.src:
            found = source.device
            if found is not None:
                return found
        return None

    @property
    def base(self) -> Self:
        """This node with its movement ops stripped: the node that holds the data a view reads."""
        node: Any = self
        while node.op in GroupOp.Movement:
            node = node.src[0]
        return node

    def _new(self, op: Ops, arg: object, src: tuple[Self, ...] | None = None) -> Self:
        """A new node `op` over this one (keeping the dtype)."""
        node_class: Any = type(self)
        return node_class(op, self.dtype, (self,) if src is None else src, arg)

    # ---- movement ----

    def reshape(self, shape: Sequence[int | Self]) -> Self:
        """This node viewed with `shape` (same element count)."""
        new_shape = tuple(shape)
        current = self.shape
        if new_shape == current:
            return self  # type: ignore[return-value]
        if all(size.__class__ is int for size in new_shape) and all(size.__class__ is int for size in current):
            # plain int shapes (the common case), checked without the symbolic-size branches below
            negative = any(size < 0 for size in new_shape)  # type: ignore[operator]
            assert not negative, f"reshape to negative size {new_shape}"
            assert prod(new_shape) == prod(current), f"reshape from {current} to {new_shape} changes the size"
            return self._new(Ops.RESHAPE, new_shape)
        assert all(not _is_int(size) or size >= 0 for size in new_shape), f"reshape to negative size {new_shape}"
        if all(_is_int(size) for size in new_shape + current):
            assert prod(new_shape) == prod(current), f"reshape from {current} to {new_shape} changes the size"
        return self._new(Ops.RESHAPE, new_shape)

    def permute(self, order: Sequence[int]) -> Self:
        """This node with its axes reordered: axis i of the result is axis order[i] of this node."""
        new_order = tuple(order)
        assert sorted(new_order) == list(range(len(self.shape))), \
            f"permute order {new_order} is not a permutation of {len(self.shape)} axes"
        if new_order == tuple(range(len(new_order))):
            return self  # type: ignore[return-value]
        return self._new(Ops.PERMUTE, new_order)

    def expand(self, shape: Sequence[int | Self]) -> Self:
        """This node broadcast to `shape`: only size-1 axes may change size."""
        new_shape = tuple(shape)
        current = self.shape
        assert len(new_shape) == len(current), f"expand from {current} to {new_shape} changes the number of axes"
        if new_shape == current:
            return self  # type: ignore[return-value]
        assert all(_size_eq(old, new) or _size_eq(old, 1) for old, new in zip(current, new_shape, strict=True)), \
            f"expand from {current} to {new_shape}: only size-1 axes can grow"
        return self._new(Ops.EXPAND, new_shape)

    def pad(self, padding: Sequence[tuple[int | Self, int | Self]]) -> Self:
        """This node grown by `padding` ((before, after) per axis); the new area reads zero."""
        new_padding = tuple((before, after) for before, after in padding)
        assert len(new_padding) == len(self.shape), f"pad {new_padding} does not match shape {self.shape}"
        if all(before.__class__ is int and after.__class__ is int for before, after in new_padding):
            # plain int amounts (the common case), checked without the symbolic-size branches below
            if all(pair == (0, 0) for pair in new_padding):
                return self  # type: ignore[return-value]
            assert all(before >= 0 and after >= 0  # type: ignore[operator]  # ints, checked above
                       for before, after in new_padding), \
                f"pad {new_padding} has a negative size"
            return self._new(Ops.PAD, new_padding)
        assert all(not _is_int(size) or size >= 0 for pair in new_padding for size in pair), \
            f"pad {new_padding} has a negative size"
        if all(_size_eq(before, 0) and _size_eq(after, 0) for before, after in new_padding):
            return self  # type: ignore[return-value]
        return self._new(Ops.PAD, new_padding)

    def shrink(self, bounds: Sequence[tuple[int | Self, int | Self]]) -> Self:
        """The part [start, end) of each axis of this node."""
        new_bounds = tuple((start, end) for start, end in bounds)
        current = self.shape
        assert len(new_bounds) == len(current), f"shrink {new_bounds} does not match shape {current}"
        if all(start.__class__ is int and end.__class__ is int and size.__class__ is int
               for (start, end), size in zip(new_bounds, current, strict=True)):
            # plain ints (the common case), checked without the symbolic-size branches below
            if all(start == 0 and end == size for (start, end), size in zip(new_bounds, current, strict=True)):
                return self  # type: ignore[return-value]
            assert all(0 <= start <= end <= size  # type: ignore[operator]  # ints, checked above
                       for (start, end), size in zip(new_bounds, current, strict=True)), \
                f"shrink {new_bounds} is out of bounds for shape {current}"
            return self._new(Ops.SHRINK, new_bounds)
        pairs = zip(new_bounds, current, strict=True)
        if all(_size_eq(start, 0) and _size_eq(end, size) for (start, end), size in pairs):
            return self  # type: ignore[return-value]
        assert all(not (_is_int(start) and _is_int(end) and _is_int(size)) or 0 <= start <= end <= size
                   for (start, end), size in zip(new_bounds, current, strict=True)), \
            f"shrink {new_bounds} is out of bounds for shape {current}"
        return self._new(Ops.SHRINK, new_bounds)

    def flip(self, axes: Sequence[bool]) -> Self:
        """This node reversed along the axes marked True."""
        flags = tuple(bool(flag) for flag in axes)
        assert len(flags) == len(self.shape), f"flip {flags} does not match shape {self.shape}"
        if not any(flags):
            return self  # type: ignore[return-value]
        return self._new(Ops.FLIP, flags)

    # ---- reduce ----

    def r(self, op: Ops, axes: Sequence[int]) -> Self:
        """The reduction `op` (ADD, MUL or MAX) over `axes`; reduced axes keep size 1."""
        assert op in REDUCE_OPS, f"reduce op must be one of ADD, MUL, MAX, got {op}"
        ndim = len(self.shape)
        normalized = tuple(sorted({axis + ndim if axis < 0 else axis for axis in axes}))
        assert all(0 <= axis < ndim for axis in normalized), f"reduce axes {tuple(axes)} out of range for {ndim} axes"
        if not normalized:
            return self  # type: ignore[return-value]
        return self._new(Ops.REDUCE_AXIS, (op, normalized))

    # ---- constants ----

    @classmethod
    def const_on(cls, dtype: DType, value: ConstType, device: str | tuple[str, ...],
                 shape: Sequence[int | Self] = ()) -> Self:
        """A tensor-level constant `value` of `dtype` on `device`, broadcast to `shape`."""
        target = tuple(shape)
        value_key = repr(value) if value.__class__ is float else value
        key = (device, dtype.name, value.__class__, value_key, target)
        found = _const_cache.get(key)
        if found is not None and found.dtype is dtype:
            return found  # type: ignore[return-value]  # the cache holds nodes of this class (UOp)
        node_class: Any = cls
        device_node = _device_nodes.get(device)
        if device_node is None:
            device_node = _device_nodes[device] = node_class(Ops.DEVICE, arg=device)
        constant = node_class(Ops.CONST, dtype, (device_node,), truncate(dtypes.as_const(value, dtype), dtype))
        result = constant.reshape((1,) * len(target)).expand(target) if target else constant
        if len(_const_cache) >= _CONST_CACHE_LIMIT:
            _const_cache.clear()
        _const_cache[key] = result
        return result

    # ---- realization and effects ----

    @property
    def is_contiguous_buffer(self) -> bool:
        """True for a BUFFER or reshapes of one: a view whose C-order elements are the buffer's elements."""
        node: Any = self
        while node.op is Ops.RESHAPE:
            node = node.src[0]
        return node.op is Ops.BUFFER

    def contiguous(self) -> Self:
        """This value in its own contiguous buffer (no node when it already is one)."""
        if self.is_contiguous_buffer or self.op is Ops.CONTIGUOUS:
            return self  # type: ignore[return-value]
        return self._new(Ops.CONTIGUOUS, None)

    def clone(self) -> Self:
        """A CONTIGUOUS node even over a realized buffer: realizing it copies the data into a new buffer."""
        return self._new(Ops.CONTIGUOUS, None)

    def copy_to_device(self, device: str | tuple[str, ...]) -> Self:
        """This value copied to `device` (no node when it is already there)."""
        if device == self.device:
            return self  # type: ignore[return-value]
        node_class: Any = type(self)
        return node_class(Ops.COPY, self.dtype, (self, node_class(Ops.DEVICE, arg=device)))

    def assign(self, value: Self) -> Self:
        """`value` written into this node's buffer (this node must be a realized buffer or a view of one)."""
        written: Any = self.base
        while written.op is Ops.ASSIGN or written.op is Ops.DETACH:
            written = written.src[0].base
        if written.op is Ops.MULTI:  # written on each device (the constructor maps it)
            return self._new(Ops.ASSIGN, None, (self, value))  # type: ignore[arg-type]
        assert written.op is Ops.BUFFER, f"assign target must be a realized buffer view, got {written.op}"
        assert shapes_equal(value.shape, self.shape), \
            f"assign of shape {value.shape} into shape {self.shape}"
        return self._new(Ops.ASSIGN, None, (self, value))  # type: ignore[arg-type]

    def detach(self) -> Self:
        """The same value, with gradients stopped."""
        return self._new(Ops.DETACH, None)

    def contiguous_backward(self) -> Self:
        """The same value forwards; its gradient is made contiguous."""
        return self._new(Ops.CONTIGUOUS_BACKWARD, None)
