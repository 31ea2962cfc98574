"""Indexing Tensor operations: __getitem__/__setitem__, gather, scatter, masked selection, sorting.

Basic indices (ints, slices, None, Ellipsis) become movement ops. Index tensors become GATHER nodes (a load at the
address read from the index: cost proportional to the result), or one-hot masks that select by comparison with a
range when the indexed axes are tiny; short runs of host-known indices become shrinks and a concatenation.
Assignment through index tensors (__setitem__, scatter, scatter_reduce) becomes a SCATTER written in place (see
tinycore/uop/indexing.py for what repeated indices do). Selections whose size depends on the data (bool masks,
nonzero, masked_select) read the mask to the host.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias, TypeGuard, TypeVar, Union

from tinycore.dtype import dtypes
from tinycore.errors import ArgumentError, DTypeMismatchError, ShapeError
from tinycore.helpers import CHECK_INDEX, prod
from tinycore.tensor import segments  # noqa: F401 - registers the sort-and-segment lowering of scatter reductions
from tinycore.tensor.creation import CreationMixin, is_shared_buffer
from tinycore.tensor.recipes import LEAF_ATTRIBUTE, LEAF_INDEX, LEAF_MULTI, RecipeBook, key_of, leaf_info
from tinycore.tensor.support import broadcast_shape, resolve_axis
from tinycore.uop.indexing import AxisEntry, scatter_assign, writes_in_place
from tinycore.uop.indexing import gather as gather_node
from tinycore.uop.multi import multi
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp

if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import EllipsisType
    from typing import Self

    import numpy
    from typing_extensions import TypeIs

    from tinycore.dtype import ConstType
    from tinycore.tensor.base import NestedValues
    from tinycore.uop.uop import sint

    Index: TypeAlias = Union[int, slice, None, EllipsisType, "IndexingMixin", UOp, Sequence[NestedValues],
                             numpy.ndarray, numpy.generic]
    """One item of an index: an int, a slice, None, Ellipsis, an index tensor or bool mask, a list or numpy array
    of ints or bools, or a symbolic int."""
    Indices: TypeAlias = Union[Index, tuple[Index, ...]]
    """What `tensor[...]` takes: one index item or a tuple of them."""
    SetValue: TypeAlias = Union["IndexingMixin", ConstType, list[NestedValues], tuple[NestedValues, ...]]
    """What `tensor[...] = value` writes: a tensor, a scalar, or (nested) lists of scalars."""


TensorT = TypeVar("TensorT", bound="IndexingMixin")
"""A tensor of the chain class whose methods these helpers call (the Tensor, at run time)."""


def _is_tensor(value: object) -> TypeIs[IndexingMixin]:
    """True for a Tensor (every Tensor is an IndexingMixin)."""
    return isinstance(value, IndexingMixin)


def _is_int(value: object) -> TypeGuard[int | numpy.integer]:
    """True for Python and numpy integers (not bools)."""
    return not isinstance(value, bool) and (isinstance(value, int) or (type(value).__module__ == "numpy" and
                                                                        hasattr(value, "__index__") and
                                                                        getattr(value, "ndim", 1) == 0))


def _axis_bounds(ndim: int, axis: int, start: int | UOp, end: int | UOp) -> tuple[tuple[Any, Any] | None, ...]:
    """Shrink bounds that keep every axis except `axis`, which is cut to [start, end)."""
    return tuple((start, end) if position == axis else None for position in range(ndim))


def _symbolic_slice(item: slice, size: Any) -> tuple[Any, Any]:
    """The [start, end) of a step-1 slice with a Variable (or an expression of them) as start or stop; a negative int
    counts from the end as usual."""
    if item.step not in (None, 1):
        raise TypeError(f"a slice with a Variable needs step 1, got step {item.step}: shrink with Variables, then "
                        "slice with an int step")

    def position(value: Any, default: Any) -> Any:
        if value is None:
            return default
        if _is_int(value) and int(value) < 0:
            if not isinstance(size, int):
                raise TypeError(f"a negative slice bound {value} on an axis of symbolic size {size} is not supported")
            return max(int(value) + size, 0)
        return min(int(value), size) if _is_int(value) and isinstance(size, int) else value

    return position(item.start, 0), position(item.stop, size)


_SETITEM_RECIPES = RecipeBook()
"""The graphs __setitem__ built, by structure of its inputs (see tinycore/tensor/recipes.py)."""
_TENSOR_ITEM = ("tensor",)
"""Marks an index tensor's place among a setitem key's arguments (its structure is in the leaves' part)."""


def _setitem_key(tensor: TensorT, indices: Any,
                 value: Any) -> tuple[tuple[Any, ...], list[UOp], list[list[UOp]]] | None:
    """The recipe key of `tensor[indices] = value`, its leaves (the target, index tensors and value) and their
    buffers; None when the call is not one a recipe can stand for: an index or value that is not a plain int,
    slice, None, Ellipsis, integer Tensor or Python scalar (host lists, bool masks and Variables depend on more than
    structure), a target that is not a realized buffer or a view of one (a multi-device tensor, setitems chained
    before a realize), or a value or index that reads the buffer being written (the built graph then depends on
    which buffer that is)."""
    # this runs on every setitem, ahead of the recipe it finds: plain loops, no helper per item
    target = tensor.uop
    if target.base.op is not Ops.BUFFER:
        return None  # a lazy target (setitems chained before a realize): its structure is new at every call
    tensor_class = tensor.__class__
    leaves = [target]
    arguments: list[Any] = []
    for item in (indices if indices.__class__ is tuple else (indices,)):
        kind = item.__class__
        if kind is slice:
            start, stop, step = item.start, item.stop, item.step
            if (start is None or start.__class__ is int) and (stop is None or stop.__class__ is int) and \
                    (step is None or step.__class__ is int):
                arguments.append((start, stop, step))
            else:
                return None
        elif kind is tensor_class:
            leaves.append(item.uop)
            arguments.append(_TENSOR_ITEM)
        elif kind is int or item is None or item is Ellipsis:
            arguments.append(item)
        else:
            return None
    kind = value.__class__
    if kind is tensor_class:
        leaves.append(value.uop)
        arguments.append(_TENSOR_ITEM)
    elif kind is float:
        arguments.append((float, repr(value)))  # repr tells 0.0 from -0.0
    elif kind is int or kind is bool:
        arguments.append((kind, value))
    else:
        return None
    infos = [leaf.__dict__.get(LEAF_ATTRIBUTE) or leaf_info(leaf) for leaf in leaves]
    written = infos[0][1]
    last = len(leaves) - 1
    if infos[0][2] == LEAF_MULTI:
        return None
    for position in range(1, last + 1):
        _, own, leaf_kind = infos[position]
        if leaf_kind != LEAF_INDEX and (leaf_kind == LEAF_MULTI or position < last or kind is not tensor_class):
            return None  # a bool mask or a float index tensor (an error the step-by-step path reports)
        for buffer in own:
            if buffer in written:
                return None
    buffers = [info[1] for info in infos]
    flat = [buffer for own in buffers for buffer in own]
    if len(flat) == len(leaves) and len(set(flat)) == len(flat):
        # one buffer per leaf, none shared: no two leaves share a node (the common case)
        return (tuple(arguments), tuple([info[0] for info in infos])), leaves, buffers
    key, buffers = key_of(leaves, infos, tuple(arguments))
    return key, leaves, buffers


ONEHOT_MAX_ELEMENTS = 4
"""Indexed axes holding at most this many elements together are selected by a one-hot mask (compare and reduce,
vectorizable, no dependent load); larger ones by a GATHER."""
HOST_RUNS_MAX = 4
"""Host index lists with more runs of consecutive values than this become a GATHER rather than a concatenation."""


def _index_position(axes: list[int]) -> int:
    """Where numpy puts the broadcast index axes: at the first indexed axis when the indexed axes are consecutive,
    else in front."""
    return axes[0] if axes == list(range(axes[0], axes[0] + len(axes))) else 0


def _placed_index(index: UOp, index_shape: tuple[sint, ...], before: int, shape: tuple[sint, ...]) -> UOp:
    """An index of a shape that broadcasts to `index_shape`, expanded to the result `shape` where the index axes
    start at axis `before`."""
    own = tuple(index.shape)
    if own == shape:
        return index
    full = (1,) * before + (1,) * (len(index_shape) - len(own)) + own
    full = full + (1,) * (len(shape) - len(full))
    # the nodes reshape() and expand() would build, without their checks: `full` has the index's elements and
    # broadcasts to `shape` by construction (this runs on every setitem, whose cost is per call)
    reshaped = index if full == own else UOp(Ops.RESHAPE, index.dtype, (index,), full)
    return reshaped if full == tuple(shape) else UOp(Ops.EXPAND, index.dtype, (reshaped,), tuple(shape))


def _buffer_below(node: UOp) -> UOp:
    """The BUFFER under movement ops and ASSIGN chains."""
    while node.op is not Ops.BUFFER:
        node = node.src[0]
    return node


def _reads_any(node: UOp, buffers: list[UOp]) -> bool:
    """True when the graph of `node` contains one of `buffers`. A walk that stops at the first hit and caches no
    walk on the small index nodes a setitem builds (one already cached is used)."""
    cached = node.__dict__.get("_nodes_below")
    if cached is not None:
        return node in buffers or any(buffer in cached for buffer in buffers)
    return node.reaches(lambda current: current in buffers)


class _HostIndex:
    """An index array whose values are known on the host (from a Python list or numpy array)."""

    def __init__(self, values: list[int], shape: tuple[int, ...]):
        """Flat index `values` (C order) of an index array of `shape`."""
        self.values, self.shape = values, shape


class IndexingMixin(CreationMixin):
    """Indexing, gather/scatter, masked selection, sort and topk."""

    # ---- index normalisation ----

    def _normalize_indices(self, indices: Indices) -> list[Any]:
        """The index as a list of int / slice / None / _HostIndex / Tensor items with Ellipsis expanded."""
        items = list(indices) if isinstance(indices, tuple) else [indices]
        normalized: list[Any] = []
        tensor_class = type(self)
        def position() -> int:
            """The axis the next item indexes (-1 after an Ellipsis: unknown); only bool masks need it."""
            if any(done is Ellipsis for done in normalized):
                return -1
            return sum(1 for done in normalized if done is not None)

        for item in items:
            if item.__class__ is slice or item is None or item.__class__ is int:  # the common items first: the
                normalized.append(item)                                         # cost of an index is per call
            elif item.__class__ is tensor_class and dtypes.is_int(item.dtype):
                normalized.append(item)
            elif _is_int(item):
                normalized.append(int(item))
            elif isinstance(item, (list, tuple)) or type(item).__module__ == "numpy":
                import numpy
                array = numpy.asarray(item)
                if array.dtype == numpy.bool_:
                    normalized.extend(self._bool_mask_indices(type(self)(array, device=self.device), position()))
                    continue
                if array.size and array.dtype.kind not in "iu":
                    raise IndexError(f"index lists must hold ints or bools, got {array.dtype}")
                normalized.append(_HostIndex([int(value) for value in array.reshape(-1)], tuple(array.shape)))
            elif _is_tensor(item):
                if item.dtype == dtypes.bool:
                    normalized.extend(self._bool_mask_indices(item, position()))
                elif not dtypes.is_int(item.dtype):
                    raise IndexError(f"index tensors must have an integer or bool dtype, got {item.dtype}")
                else:
                    normalized.append(item)
            elif item is None or item is Ellipsis or isinstance(item, slice) or _is_int(item):
                normalized.append(int(item) if _is_int(item) else item)
            elif isinstance(item, UOp) and dtypes.is_int(item.dtype) and item.shape == ():
                normalized.append(item)  # a (bound) Variable or an expression of them: a symbolic position
            else:
                raise IndexError(f"unsupported index {item!r} of type {type(item).__name__}: use ints, slices, "
                                 "None, Ellipsis, lists or tensors")
        ellipses = consumed = 0
        for item in normalized:  # identity tests: == on a Tensor item would build a comparison
            if item is Ellipsis:
                ellipses += 1
            elif item is not None:
                consumed += 1
        if ellipses > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")
        ndim = len(self.uop.shape)
        if consumed > ndim:
            raise IndexError(f"too many indices for tensor of dimension {ndim}: {consumed} were given")
        fill = [slice(None)] * (ndim - consumed)
        if ellipses:
            found = next(index for index, item in enumerate(normalized) if item is Ellipsis)
            normalized[found:found + 1] = fill
        else:
            normalized.extend(fill)
        return normalized

    def _bool_mask_indices(self, mask: Self, position: int) -> list[_HostIndex]:
        """A bool mask index at axis `position` (-1: unknown) turned into one host index per masked axis (reads the
        mask)."""
        if position >= 0 and tuple(mask.shape) != tuple(self.shape[position:position + mask.ndim]):
            raise IndexError(f"bool mask of shape {mask.shape} does not match the indexed dimensions "
                             f"{self.shape[position:position + mask.ndim]} of shape {self.shape}")
        positions = mask.nonzero().numpy()
        return [_HostIndex([int(value) for value in positions[:, axis]], (positions.shape[0],))
                for axis in range(mask.ndim)]

    # ---- basic indexing ----

    def _slice_axis(self, axis: int, start: int, stop: int, step: int) -> Self:
        """Elements start, start+step, ... (before stop) of `axis`."""
        count = len(range(start, stop, step))
        if count == 0:
            return self.shrink(_axis_bounds(self.ndim, axis, 0, 0))
        low, high = (start, start + (count - 1) * step + 1) if step > 0 else (start + (count - 1) * step, start + 1)
        result = self.shrink(_axis_bounds(self.ndim, axis, low, high))
        if step < 0:
            result = result.flip(axis)
        stride = abs(step)
        if stride > 1:
            pairs = [(0, 0)] * self.ndim
            pairs[axis] = (0, count * stride - result.shape[axis])
            padded = result._pad_constant(pairs, 0)
            shape = list(padded.shape)
            split = padded.reshape(shape[:axis] + [count, stride] + shape[axis + 1:])
            picked = split.shrink(_axis_bounds(split.ndim, axis + 1, 0, 1))
            result = picked.reshape(shape[:axis] + [count] + shape[axis + 1:])
        return result

    def _unslice_axis(self, axis: int, size: int, start: int, stop: int, step: int, fill: ConstType) -> Self:
        """The inverse placement of `_slice_axis`: this tensor's axis spread back into `size` slots (rest `fill`)."""
        count = len(range(start, stop, step))
        pairs = [(0, 0)] * self.ndim
        if count == 0:
            pairs[axis] = (0, size)
            return self._pad_constant(pairs, fill) if fill == 0 else self._pad_with(pairs, fill)
        stride = abs(step)
        result = self
        if stride > 1:
            shape = list(result.shape)
            spread = result.reshape(shape[:axis] + [count, 1] + shape[axis + 1:])
            inner = [(0, 0)] * spread.ndim
            inner[axis + 1] = (0, stride - 1)
            spread = spread._pad_with(inner, fill)
            merged = spread.reshape(shape[:axis] + [count * stride] + shape[axis + 1:])
            result = merged.shrink(_axis_bounds(merged.ndim, axis, 0, (count - 1) * stride + 1))
        if step < 0:
            result = result.flip(axis)
        low = start if step > 0 else start + (count - 1) * step
        pairs[axis] = (low, size - low - result.shape[axis])
        return result._pad_with(pairs, fill)

    def _pad_with(self, pairs: list[tuple[int, int]], fill: ConstType) -> Self:
        """Constant padding with `fill` (bool False/True included)."""
        if fill is False or fill == 0:
            return self._pad_constant(pairs, 0)
        return self._pad_constant(pairs, fill)

    def _apply_basic(self, items: list[Any]) -> tuple[Self, list[tuple[Any, ...]], list[tuple[int, Any]]]:
        """Basic indices applied; returns the view, the steps taken (to invert them) and the advanced indices with
        the axis of the view they index."""
        result = self
        axis = 0
        steps: list[tuple[Any, ...]] = []
        advanced: list[tuple[int, Any]] = []
        for item in items:
            if item is None:
                result = result.unsqueeze(axis)
                steps.append(("new", axis))
                axis += 1
            elif isinstance(item, int):
                size = result.shape[axis]
                if not -size <= item < size:
                    raise IndexError(f"index {item} is out of bounds for dimension {axis} with size {size}")
                position = item + size if item < 0 else item
                result = result._slice_axis(axis, position, position + 1, 1)
                result = result.reshape(result.shape[:axis] + result.shape[axis + 1:])
                steps.append(("int", axis, position, size))
            elif isinstance(item, UOp):
                result = result.shrink(_axis_bounds(result.ndim, axis, item, item + 1))
                result = result.reshape(result.shape[:axis] + result.shape[axis + 1:])
                steps.append(("symbolic", axis))
            elif isinstance(item, slice) and (any(isinstance(part, UOp) for part in (item.start, item.stop))
                                              or not isinstance(result.shape[axis], int)):
                # a Variable bound, or an axis of symbolic size (slicing it with ints shrinks it back to a concrete one)
                result = result.shrink(_axis_bounds(result.ndim, axis, *_symbolic_slice(item, result.shape[axis])))
                steps.append(("symbolic", axis))
                axis += 1
            elif isinstance(item, slice):
                size = result.shape[axis]
                if item.step == 0:
                    raise ValueError("slice step cannot be zero")
                start, stop, step = item.indices(size)
                result = result._slice_axis(axis, start, stop, step)
                steps.append(("slice", axis, size, start, stop, step))
                axis += 1
            else:
                advanced.append((axis, item))
                axis += 1
        return result, steps, advanced

    def _invert_basic(self, steps: list[tuple[Any, ...]], fill: ConstType) -> Self:
        """This tensor (shaped like a basic-indexed view) placed back into the original shape, `fill` elsewhere."""
        result = self
        for step in reversed(steps):
            if step[0] == "symbolic":
                raise TypeError(f"assignment through an index with Variables (axis {step[1]}) is not supported: "
                                "index with ints, or assign into a shrink of a realized tensor")
            if step[0] == "new":
                result = result.reshape(result.shape[:step[1]] + result.shape[step[1] + 1:])
            elif step[0] == "int":
                _, axis, position, size = step
                result = result.unsqueeze(axis)._unslice_axis(axis, size, position, position + 1, 1, fill)
            else:
                _, axis, size, start, stop, stride = step
                result = result._unslice_axis(axis, size, start, stop, stride, fill)
        return result

    # ---- advanced indexing ----

    def _index_tensor(self, index: Any, size: int, axis: int | None = None, wrap: bool = False) -> Self:
        """An index (host or tensor) as an int32 tensor; negative host values are wrapped, negative tensor values
        only when `wrap` (GATHER and SCATTER kernels wrap them themselves).

        With CHECK_INDEX=1 an index tensor is read to the host and an out-of-range value raises IndexError naming
        the value and the axis; otherwise out-of-range values select zeros (and scatters skip them)."""
        where = f"dimension {axis}" if axis is not None else "dimension"
        if isinstance(index, _HostIndex):
            for value in index.values:
                if not -size <= value < size:
                    raise IndexError(f"index {value} is out of bounds for {where} with size {size}")
            values = [value + size if value < 0 else value for value in index.values]
            home = self.device[0] if isinstance(self.device, tuple) else self.device
            tensor = type(self)(values, device=home, dtype=dtypes.int32) if values else \
                type(self).full((0,), 0, dtypes.int32, home)
            # a multi-device tensor's host indices are copied to each of its devices
            return tensor.reshape(index.shape).to(self.device) if home != self.device else tensor.reshape(index.shape)
        if CHECK_INDEX.value and index.numel():
            import numpy
            host = index.numpy()
            bad = (host < -size) | (host >= size)
            if bad.any():
                position = tuple(int(coordinate) for coordinate in numpy.argwhere(bad)[0])
                raise IndexError(f"index {int(host[position])} (at position {position} of the index tensor) is out "
                                 f"of bounds for {where} with size {size}")
        tensor = index.cast(dtypes.int32) if index.dtype != dtypes.int32 else index
        if isinstance(self.device, tuple) and not isinstance(tensor.device, tuple):
            tensor = tensor.to(self.device)  # an index tensor on one device indexes every device's part
        return (tensor < 0).where(tensor + size, tensor) if wrap else tensor

    def _take_host(self, axis: int, index: _HostIndex) -> Self:
        """Rows of `axis` picked by host-known indices, as shrinks joined by cat (runs of consecutive indices
        become one shrink); more than a few runs become a gather."""
        size = self.shape[axis]
        values = []
        for value in index.values:
            if not -size <= value < size:
                raise IndexError(f"index {value} is out of bounds for dimension {axis} with size {size}")
            values.append(value + size if value < 0 else value)
        shape = list(self.shape)
        if not values:
            empty = self.shrink(_axis_bounds(self.ndim, axis, 0, 0))
            return empty.reshape(shape[:axis] + list(index.shape) + shape[axis + 1:])
        runs: list[list[int]] = []
        for value in values:
            if runs and runs[-1][1] == value:
                runs[-1][1] += 1
            else:
                runs.append([value, value + 1])
        if len(runs) > HOST_RUNS_MAX:
            return self._gather_axes([axis], [self._index_tensor(index, size, axis)])
        pieces = []
        for low, high in runs:
            pieces.append(self.shrink(_axis_bounds(self.ndim, axis, low, high)))
        joined = pieces[0].cat(*pieces[1:], dim=axis) if len(pieces) > 1 else pieces[0]
        return joined.reshape(shape[:axis] + list(index.shape) + shape[axis + 1:])

    def _apply_advanced(self, advanced: list[tuple[int, Any]]) -> Self:
        """Index tensors applied to their axes (numpy placement rules for the broadcast index shape)."""
        if len(advanced) == 1 and isinstance(advanced[0][1], _HostIndex):
            return self._take_host(*advanced[0])
        axes = [axis for axis, _ in advanced]
        one_hot = prod(self.shape[axis] for axis in axes) <= ONEHOT_MAX_ELEMENTS
        indices = [self._index_tensor(index, self.shape[axis], axis, wrap=one_hot) for axis, index in advanced]
        return self._one_hot_axes(axes, indices) if one_hot else self._gather_axes(axes, indices)

    def _gather_axes(self, axes: list[int], indices: list[Self]) -> Self:
        """A GATHER of `axes` at the int32 `indices` (numpy placement of the broadcast index shape)."""
        if len(indices) == 1 and axes == [0]:
            # x[idx] (embeddings, eager lookups): the node gather_node would build, made without its checks, which
            # hold by construction here (an int32 index placed to the output shape; a map of output axes)
            source, only = self.uop, indices[0].uop
            only_shape = only.shape
            own_shape = source.shape
            shape = tuple(only_shape) + tuple(own_shape[1:])
            spread = _placed_index(only, only_shape, 0, shape)
            only_map = (-1,) + tuple(range(len(only_shape), len(shape)))
            return self._result(UOp(Ops.GATHER, source.dtype, (source, spread), (shape, only_map)))
        index_shape = broadcast_shape(*(index.shape for index in indices))
        rest = [axis for axis in range(self.ndim) if axis not in axes]
        before = _index_position(axes)
        shape = tuple(self.shape[axis] for axis in rest[:before]) + tuple(index_shape) + \
            tuple(self.shape[axis] for axis in rest[before:])
        placed = [_placed_index(index.uop, tuple(index_shape), before, shape) for index in indices]
        axis_map = []
        for axis in range(self.ndim):
            if axis in axes:
                axis_map.append(-1 - axes.index(axis))
            else:
                position = rest.index(axis)
                axis_map.append(position if position < before else position + len(index_shape))
        node = gather_node(self.uop, placed, shape, axis_map)
        return self._result(node)

    def _one_hot_axes(self, axes: list[int], indices: list[Self]) -> Self:
        """The selection of `_gather_axes` by comparison with a range and a reduce (cheaper for tiny axes, where the
        mask fuses into the consumer's kernel)."""
        index_shape = broadcast_shape(*(index.shape for index in indices))
        rest = [axis for axis in range(self.ndim) if axis not in axes]
        moved = self.permute(rest + axes)
        rest_shape = [self.shape[axis] for axis in rest]
        indexed_sizes = [self.shape[axis] for axis in axes]
        view = moved.reshape(rest_shape + [1] * len(index_shape) + indexed_sizes)
        mask: Any = None
        for position, (index, size) in enumerate(zip(indices, indexed_sizes, strict=True)):
            shape = [1] * len(indexed_sizes)
            shape[position] = size
            home = self.device[0] if isinstance(self.device, tuple) else self.device
            arange = type(self).arange(size, dtype=dtypes.int32, device=home).reshape(shape)
            arange = arange.to(self.device) if home != self.device else arange
            hit = index._broadcast_to(index_shape).reshape(index_shape + (1,) * len(indexed_sizes)).eq(arange)
            mask = hit if mask is None else mask & hit
        reduce_axes = tuple(range(len(rest_shape) + len(index_shape), view.ndim))
        if self.dtype == dtypes.bool:
            picked = mask.where(view, False).any(reduce_axes)
        else:
            picked = mask.where(view, view._const(0, shape=())).sum(reduce_axes).cast(self.dtype)
        before = _index_position(axes)
        order = list(range(len(rest_shape)))
        order = order[:before] + list(range(len(rest_shape), len(rest_shape) + len(index_shape))) + order[before:]
        return picked.permute(order)

    def __getitem__(self, indices: Indices) -> Self:
        """numpy-style indexing: ints, slices with steps, None, Ellipsis, lists, int tensors and bool masks."""
        if _is_tensor(indices) and dtypes.is_int(indices.dtype) and self.ndim and \
                isinstance(self.shape[0], int) and self.shape[0] > ONEHOT_MAX_ELEMENTS:
            return self._gather_axes([0], [self._index_tensor(indices, self.shape[0], 0)])
        items = self._normalize_indices(indices)
        result, _, advanced = self._apply_basic(items)
        if advanced:
            result = result._apply_advanced(advanced)
        return result

    def __setitem__(self, indices: Indices, value: SetValue) -> None:
        """Write `value` (broadcast, cast to this dtype) into the indexed elements."""
        keyed = None if CHECK_INDEX.value else _setitem_key(self, indices, value)
        if keyed is not None:
            recipe = _SETITEM_RECIPES.get(keyed[0])
            if recipe is not None:
                self.uop = recipe.build(keyed[1], keyed[2])
                return
        self._setitem_built(indices, value)
        if keyed is not None:
            _SETITEM_RECIPES.record(keyed[0], keyed[1], keyed[2], self.uop)

    def _setitem_built(self, indices: Indices, value: SetValue) -> None:
        """__setitem__ building its graph step by step (what a recipe records)."""
        items = self._normalize_indices(indices)
        if not _is_tensor(value):
            value = type(self)(value, device=self.device, dtype=self.dtype) if isinstance(value, (list, tuple)) \
                else self._const(value, self.dtype, ())
        value = value.cast(self.dtype)
        if all(item is None or isinstance(item, (int, slice, UOp)) for item in items):
            view, steps, _ = self._apply_basic(items)
            placed = value._broadcast_to(view.shape)._invert_basic(steps, 0)
            selected = type(self).full(view.shape, True, dtypes.bool, self.device)._invert_basic(steps, False)
            self.assign(selected.where(placed, self))
        else:
            self._assign_advanced(items, value)

    def _assign_advanced(self, items: list[Any], value: Self) -> None:
        """`self[items] = value` for items with index tensors or lists: one SCATTER into this tensor's buffer whose
        axis map follows numpy's placement of the result (the shape self[items] has)."""
        entries: list[tuple[Any, ...]] = []  # per axis of self: ("int", p) / ("slice", view axis, start, step, count)
        advanced: list[tuple[int, Any]] = []  # (view axis, index) / ("index", view axis, number)
        view_sizes: list[int] = []
        axis = 0
        own_shape = self.shape
        for item in items:
            if item is None:
                view_sizes.append(1)
                continue
            size = own_shape[axis]
            if isinstance(item, UOp) or (item.__class__ is slice and
                                         (isinstance(item.start, UOp) or isinstance(item.stop, UOp))):
                raise NotImplementedError("assignment through index tensors next to a symbolic position or slice is "
                                          "not supported: use a plain int or slice on that axis")
            if isinstance(item, int):
                if not -size <= item < size:
                    raise IndexError(f"index {item} is out of bounds for dimension {axis} with size {size}")
                entries.append(("int", item + size if item < 0 else item))
            elif isinstance(item, slice):
                if item.step == 0:
                    raise ValueError("slice step cannot be zero")
                start, stop, step = item.indices(size)
                entries.append(("slice", len(view_sizes), start, step))
                view_sizes.append(len(range(start, stop, step)))
            else:
                entries.append(("index", len(view_sizes), len(advanced)))
                advanced.append((len(view_sizes), self._index_tensor(item, size, axis)))
                view_sizes.append(size)
            axis += 1
        index_axes = [view_axis for view_axis, _ in advanced]
        index_shapes = [index.shape for _, index in advanced]
        index_shape = tuple(index_shapes[0] if all(other == index_shapes[0] for other in index_shapes) else
                            broadcast_shape(*index_shapes))
        rest = [view_axis for view_axis in range(len(view_sizes)) if view_axis not in index_axes]
        before = _index_position(index_axes)
        shape = tuple(view_sizes[view_axis] for view_axis in rest[:before]) + index_shape + \
            tuple(view_sizes[view_axis] for view_axis in rest[before:])
        result_axes = {view_axis: position if position < before else position + len(index_shape)
                       for position, view_axis in enumerate(rest)}
        result_axis = result_axes.__getitem__

        axis_map: list[AxisEntry] = []
        for entry in entries:
            if entry[0] == "int":
                axis_map.append((None, entry[1], 0))
            elif entry[0] == "slice":
                _, view_axis, start, step = entry
                axis_map.append(result_axis(view_axis) if (start, step) == (0, 1) else
                                (result_axis(view_axis), start, step))
            else:
                axis_map.append(-1 - entry[2])
        placed = [type(self)._wrap(_placed_index(index.uop, index_shape, before, shape)) for _, index in advanced]
        parallel = [result_axis(view_axis) for view_axis in rest]
        self.uop = self._scatter_into(value._broadcast_to(shape), placed, tuple(axis_map), None, parallel,
                                      in_place=True)

    def _scatter_into(self, values: Self, indices: list[Self], axis_map: tuple[AxisEntry, ...],
                      reduce: str | None, parallel: list[int], in_place: bool) -> UOp:
        """The node of this tensor with `values` scattered at the wrapped int32 `indices` (see uop/indexing.py):
        written into this tensor's own buffer when `in_place` and it has one, else into a new buffer."""
        if values.numel() == 0:
            return self.uop
        if in_place and writes_in_place(self.uop) and not is_shared_buffer(self.uop):
            target = self.uop
            buffers = [_buffer_below(part) for part in (self.uop.src if self.uop.op is Ops.MULTI else (self.uop,))]
            if any(_reads_any(tensor.uop, buffers) for tensor in [values, *indices]):
                # reading the buffer being written would see earlier writes of the same kernel
                values = values.contiguous()
                indices = [index.contiguous() for index in indices]
        elif self.uop.op is Ops.MULTI:  # a new buffer per device, split like this tensor
            parts = [type(self).empty(part.shape, dtype=self.dtype, device=part.device).uop for part in self.uop.src]
            target = multi(parts, self.uop.arg).assign(self.uop)
        else:
            fresh = type(self).empty(self.shape, dtype=self.dtype, device=self.device)
            target = fresh.uop.assign(self.uop)
        return scatter_assign(target, values.uop, [index.uop for index in indices], axis_map, reduce, parallel)

    # ---- gather and scatter ----

    def _check_index_like(self, dim: int, index: Self, name: str) -> int:
        """Validate a gather/scatter index and return the resolved axis."""
        axis = resolve_axis(dim, self.ndim)
        if not _is_tensor(index) or not dtypes.is_int(index.dtype):
            raise TypeError(f"{name} index must be an integer Tensor")
        if index.ndim != self.ndim:
            raise ShapeError(f"{name} index must have the same number of dimensions as the tensor: "
                             f"{index.ndim} vs {self.ndim}")
        for position, (have, wanted) in enumerate(zip(self.shape, index.shape, strict=True)):
            if position != axis and wanted > have:
                raise ShapeError(f"{name} index shape {index.shape} is larger than tensor shape {self.shape} "
                                 f"on dimension {position}")
        return axis

    def gather(self, dim: int, index: Self) -> Self:
        """out[i][j][k] = self[index[i][j][k]][j][k] (for dim 0): a load at the address read from `index`."""
        axis = self._check_index_like(dim, index, "gather")
        bounds = tuple(None if position == axis else (0, wanted) for position, wanted in enumerate(index.shape))
        source = self.shrink(bounds)
        wrapped = self._index_tensor(index, self.shape[axis], axis)
        axis_map = [-1 if position == axis else position for position in range(self.ndim)]
        return source._result(gather_node(source.uop, [wrapped.uop], index.shape, axis_map))

    def _scatter_values(self, index: Self, src: Self | ConstType) -> Self:
        """`src` (a tensor covering index's shape, or a scalar) as values shaped like `index` in this dtype."""
        if _is_tensor(src):
            if src.ndim != self.ndim or any(have < wanted for have, wanted in zip(src.shape, index.shape, strict=True)):
                raise ShapeError(f"scatter src shape {src.shape} must cover index shape {index.shape}")
            if src.dtype != self.dtype:
                raise DTypeMismatchError(f"scatter src dtype {src.dtype} differs from the tensor's {self.dtype}: cast "
                                         "one of them (as torch and tinygrad, no implicit conversion)")
            return src.shrink(tuple((0, wanted) for wanted in index.shape)).cast(self.dtype)
        return self._const(src, self.dtype, index.shape)

    def _scatter_along(self, axis: int, index: Self, values: Self, reduce: str | None) -> Self:
        """A new tensor: this one with `values` scattered along `axis` at `index` (`reduce` as in uop/indexing.py)."""
        wrapped = self._index_tensor(index, self.shape[axis], axis)
        axis_map = tuple(-1 if position == axis else position for position in range(self.ndim))
        parallel = [position for position in range(self.ndim) if position != axis]
        return self._result(self._scatter_into(values, [wrapped], axis_map, reduce, parallel, in_place=False), values)

    def scatter(self, dim: int, index: Self, src: Self | ConstType, reduce: str | None = None) -> Self:
        """self with self[index[i][j]][j] = src[i][j] (dim 0); reduce 'add' or 'multiply' combines instead.

        Where indices repeat, the write of the last position (in C order of `index`) wins."""
        axis = self._check_index_like(dim, index, "scatter")
        if reduce not in (None, "add", "multiply"):
            raise ValueError(f"scatter reduce must be None, 'add' or 'multiply', got {reduce!r}")
        values = self._scatter_values(index, src)
        return self._scatter_along(axis, index, values, {None: None, "add": "add", "multiply": "mul"}[reduce])

    def scatter_reduce(self, dim: int, index: Self, src: Self, reduce: str,
                       include_self: bool = True) -> Self:
        """self combined with src at index by 'sum', 'prod', 'mean', 'amax' or 'amin' (every value counts, repeated
        indices included)."""
        axis = self._check_index_like(dim, index, "scatter_reduce")
        if reduce not in ("sum", "prod", "mean", "amax", "amin"):
            raise ArgumentError(f"scatter_reduce reduce must be 'sum', 'prod', 'mean', 'amax' or 'amin', got "
                                f"{reduce!r}")
        values = self._scatter_values(index, src)
        base = self
        if not include_self:
            hit = self._const(False, dtypes.bool)._scatter_along(axis, index, self._const(True, dtypes.bool,
                                                                                            index.shape), None)
            identity = {"sum": 0, "mean": 0, "prod": 1, "amax": dtypes.min(self.dtype),
                        "amin": dtypes.max(self.dtype)}[reduce]
            base = hit.where(self._const(identity, shape=()), self)
        if reduce != "mean":
            kind = {"sum": "add", "prod": "mul", "amax": "max", "amin": "min"}[reduce]
            return base._scatter_along(axis, index, values, kind)
        total = base._scatter_along(axis, index, values, "add")
        counts = self._const(1 if include_self else 0, dtypes.int32)._scatter_along(
            axis, index, self._const(1, dtypes.int32, index.shape), "add")
        divisor = counts.maximum(1).cast(self.dtype)
        mean = total / divisor if dtypes.is_float(self.dtype) else total // divisor
        return counts.eq(0).where(self, mean.cast(self.dtype))

    # ---- data-dependent selections ----

    def nonzero(self, size: int | None = None, fill_value: ConstType = 0) -> Self:
        """The (count, ndim) int32 coordinates of the nonzero elements (reads the tensor to the host)."""
        import numpy
        positions = numpy.argwhere(self.numpy()).astype(numpy.int32).reshape(-1, self.ndim)
        if size is not None:
            padded = numpy.full((size, self.ndim), fill_value, dtype=numpy.int32)
            padded[:min(size, len(positions))] = positions[:size]
            positions = padded
        if positions.size == 0:
            return type(self).full(positions.shape, 0, dtypes.int32, self.device)
        return type(self)(positions, device=self.device)

    def masked_select(self, mask: Self, size: int | None = None, fill_value: ConstType = 0) -> Self:
        """The elements where `mask` (broadcast) is true, as a 1-D tensor (reads the mask to the host)."""
        import numpy
        shape = broadcast_shape(self.shape, mask.shape)
        flat_mask = mask._broadcast_to(shape).flatten().numpy().astype(bool)
        positions = [int(value) for value in numpy.nonzero(flat_mask)[0]]
        source = self._broadcast_to(shape).flatten()
        selected = source._take_host(0, _HostIndex(positions, (len(positions),)))
        if size is None:
            return selected
        if size <= selected.shape[0]:
            return selected.shrink(((0, size),))
        return selected.pad(((0, size - selected.shape[0]),), value=fill_value)

    # ---- sorting ----

    def sort(self, dim: int = -1, descending: bool = False) -> tuple[Self, Self]:
        """(values, int32 indices) sorted along `dim`; equal values keep their order (stable)."""
        if self.ndim == 0:
            return self, self._const(0, dtypes.int32)
        axis = resolve_axis(dim, self.ndim)
        moved = self.transpose(axis, -1)
        length = moved.shape[-1]
        mine = moved.unsqueeze(-1)  # [..., i, 1]
        others = moved.unsqueeze(-2)  # [..., 1, j]
        positions = type(self).arange(length, dtype=dtypes.int32, device=self.device)
        earlier = positions.reshape(1, length) < positions.reshape(length, 1)  # [i, j]: j < i
        before = (others > mine) if descending else (others < mine)
        rank = (before | (others.eq(mine) & earlier)).sum(-1)  # [..., i]
        onehot = rank.unsqueeze(-1).eq(positions)  # [..., i, r]
        if self.dtype == dtypes.bool:
            values = onehot.where(mine, False).any(-2)
        else:
            values = onehot.where(mine, mine._const(0, shape=())).sum(-2).cast(self.dtype)
        indices = onehot.where(positions.reshape(length, 1), 0).sum(-2).cast(dtypes.int32)
        return values.transpose(axis, -1), indices.transpose(axis, -1)

    def argsort(self, dim: int = -1, descending: bool = False) -> Self:
        """The int32 indices that sort the tensor along `dim`."""
        return self.sort(dim, descending)[1]

    def topk(self, k: int, dim: int = -1, largest: bool = True, sorted_: bool = True) -> tuple[Self, Self]:
        """(values, int32 indices) of the k largest (or smallest) elements along `dim`."""
        axis = resolve_axis(dim, self.ndim) if self.ndim else 0
        length = self.shape[axis] if self.ndim else 1
        if not isinstance(k, int) or not 0 <= k <= length:
            raise ValueError(f"topk k={k!r} must be an int in [0, {length}] for dim {dim} of shape {self.shape}")
        values, indices = self.sort(axis, descending=largest)
        if self.ndim == 0:
            return values, indices
        bounds = tuple((0, k) if position == axis else None for position in range(self.ndim))
        return values.shrink(bounds), indices.shrink(bounds)
