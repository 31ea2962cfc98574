"""Storage of the tiny device: one flat lazy tinycore Tensor per PyTorch storage, read and written through
(size, stride, storage_offset) views, so aliasing between views follows PyTorch's rules.

Views that PyTorch's view operators make (slices, transposes, expands, selects) become tinycore movement ops
(pad, reshape, shrink, permute, expand): no copy, no gather. Overlapping strides, which no movement op spells,
are read with a gather and written with a scatter over explicit indices."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tiny_torch.bitcast import reinterpret
from tinycore import Tensor
from tinycore.dtype import DType
from tinycore.uop import Ops
from tinycore.uop.buffer import new_buffer_uop


@dataclass(frozen=True)
class StridedPlan:
    """How a non-overlapping strided view sits in a flat buffer: the view's non-trivial dims `order` (largest
    stride first) index a chunk of `length` elements reshaped to `chunk_shape`."""
    order: tuple[int, ...]
    chunk_shape: tuple[int, ...]
    length: int


def strided_plan(size: tuple[int, ...], stride: tuple[int, ...]) -> StridedPlan | None:
    """The movement-op plan of a view, or None when its elements overlap (or strides are not nested)."""
    real = [dim for dim in range(len(size)) if size[dim] > 1 and stride[dim] != 0]
    order = sorted(real, key=lambda dim: -stride[dim])
    for outer, inner in zip(order, order[1:], strict=False):
        if stride[outer] % stride[inner] != 0 or stride[outer] < size[inner] * stride[inner]:
            return None
    if any(stride[dim] < 0 for dim in real):
        return None
    if not order:
        return StridedPlan((), (1,), 1)
    chunk = [size[order[0]]] + [stride[a] // stride[b] for a, b in zip(order, order[1:], strict=False)]
    chunk.append(stride[order[-1]])
    return StridedPlan(tuple(order), tuple(chunk), size[order[0]] * stride[order[0]])


def flat_indices(size: tuple[int, ...], stride: tuple[int, ...], offset: int) -> np.ndarray:
    """The flat buffer position of every element of a view, in the view's row-major order."""
    index = np.full(size, offset, dtype=np.int64)
    for dim, (extent, step) in enumerate(zip(size, stride, strict=False)):
        shape = [1] * len(size)
        shape[dim] = extent
        index = index + (np.arange(extent, dtype=np.int64) * step).reshape(shape)
    return index.reshape(-1)


def _window(flat: Tensor, offset: int, length: int) -> Tensor:
    """flat[offset:offset+length], zero padded past the end (a plan's chunk may run past the last element)."""
    numel = flat.shape[0]
    end = min(numel, offset + length)
    window = flat.shrink(((offset, end),))
    return window.pad(((0, offset + length - end),)) if end - offset < length else window


def new_flat(numel: int, dtype: DType, device: str) -> Tensor:
    """A new unallocated buffer of `numel` elements on `device` (a canonical tinycore device name, as a tensor's
    `.device` gives it): the node directly, a third of `Tensor.empty`'s cost, which a compiled step pays for each
    output of its graphs and optimizer replays."""
    return Tensor(new_buffer_uop(device, dtype, numel))


def is_buffer(flat: Tensor) -> bool:
    """True when `flat` is a computed buffer itself (reshapes of it aside), not a lazy value or a view."""
    node = flat.uop
    while node.op is Ops.RESHAPE:
        node = node.src[0]
    return node.op is Ops.BUFFER


class TinyStorage:
    """A PyTorch storage on the tiny device: `flat` is the current value of every element, a lazy tinycore Tensor
    replaced (never mutated) by writes, so views created earlier see the new values on their next read."""

    def __init__(self, flat: Tensor):
        self.flat = flat
        self.version = 0
        self.pending_writes = 0
        self.realized = False

    @property
    def numel(self) -> int:
        """Number of elements in the storage."""
        return int(self.flat.shape[0])

    @property
    def dtype(self) -> DType:
        """The tinycore dtype of the elements."""
        return self.flat.dtype

    def read(self, size: tuple[int, ...], stride: tuple[int, ...], offset: int) -> Tensor:
        """The view (size, stride, offset) of this storage as a lazy tinycore Tensor."""
        numel = int(np.prod(size)) if size else 1
        if numel == 0:
            return Tensor.empty(*size, dtype=self.dtype, device=self.flat.device) if size else self.flat[:0]
        if _is_contiguous(size, stride):
            return self.flat.shrink(((offset, offset + numel),)).reshape(size)
        plan = strided_plan(size, stride)
        if plan is None:
            index = Tensor(flat_indices(size, stride, offset).astype(np.int32), device=self.flat.device)
            return self.flat.gather(0, index).reshape(size)
        chunk = _window(self.flat, offset, plan.length).reshape(plan.chunk_shape)
        chunk = chunk.shrink(tuple((0, size[dim]) for dim in plan.order) + ((0, 1),))
        chunk = chunk.reshape(tuple(size[dim] for dim in plan.order))
        ascending = sorted(plan.order)
        chunk = chunk.permute(tuple(plan.order.index(dim) for dim in ascending))
        squeezed = tuple(size[dim] if dim in plan.order else 1 for dim in range(len(size)))
        return chunk.reshape(squeezed).expand(size)

    def write(self, size: tuple[int, ...], stride: tuple[int, ...], offset: int, value: Tensor) -> None:
        """Replace the elements of the view (size, stride, offset) by `value` (already of that shape and dtype)."""
        numel = int(np.prod(size)) if size else 1
        self.version += 1
        self.realized = False
        if numel == 0:
            return
        value = value.cast(self.dtype) if value.dtype != self.dtype else value
        if _is_contiguous(size, stride) and offset == 0 and numel == self.numel:
            self.flat = value.reshape(numel)
            return
        plan = strided_plan(size, stride)
        if plan is None:
            index = flat_indices(size, stride, offset)
            self.flat = self.flat.scatter(0, Tensor(index.astype(np.int32), device=self.flat.device),
                                          value.reshape(numel))
            return
        # an expanded (stride 0) dim writes one element: its first slice, as PyTorch's kernels do
        first = tuple((0, 1) if size[dim] > 1 and stride[dim] == 0 else None for dim in range(len(size)))
        value = value.shrink(first)
        ascending = sorted(plan.order)
        value = value.reshape(tuple(size[dim] for dim in ascending)).permute(
            tuple(ascending.index(dim) for dim in plan.order))
        value = value.reshape(tuple(size[dim] for dim in plan.order) + (1,))
        mask = Tensor.ones(*value.shape, dtype="bool", device=self.flat.device)
        padding = tuple((0, extent - current) for extent, current in zip(plan.chunk_shape, value.shape, strict=False))
        placed, placed_mask = (self._place(part.pad(padding).reshape(plan.length), offset) for part in (value, mask))
        self.flat = placed_mask.where(placed, self.flat)

    def _place(self, chunk: Tensor, offset: int) -> Tensor:
        """A chunk starting at `offset`, zero padded (or cut) to the length of the storage."""
        end = min(self.numel, offset + chunk.shape[0])
        chunk = chunk.shrink(((0, end - offset),))
        return chunk.pad(((offset, self.numel - end),))

    def realize(self) -> None:
        """Compute the pending value now (bounds the lazy graph behind a storage written every step)."""
        self.flat = self.flat.contiguous().realize()
        self.realized = True


def _is_contiguous(size: tuple[int, ...], stride: tuple[int, ...]) -> bool:
    """True when (size, stride) is row-major contiguous (dims of size 1 may have any stride)."""
    expected = 1
    for extent, step in zip(reversed(size), reversed(stride), strict=False):
        if extent != 1 and step != expected:
            return False
        expected *= extent
    return True


class BitcastStorage(TinyStorage):
    """The storage of `tensor.view(dtype)`: the bytes of another storage read as `dtype`. Reads and writes go to that
    storage (reinterpreted each way), so the two tensors alias as PyTorch's do."""

    def __init__(self, base: TinyStorage, dtype: DType):  # noqa: D107 (no super: flat is a property here)
        self.base = base
        self.view_dtype = dtype
        self.version = 0
        self.pending_writes = 0
        self.realized = False

    @property  # type: ignore[override]
    def flat(self) -> Tensor:
        """The base storage's current elements reinterpreted as this storage's dtype."""
        return reinterpret(self.base.flat, self.view_dtype)

    @flat.setter
    def flat(self, value: Tensor) -> None:
        self.base.flat = reinterpret(value, self.base.dtype).shrink(((0, self.base.numel),))
        self.base.version += 1

    @property
    def dtype(self) -> DType:
        """The dtype the bytes are read as."""
        return self.view_dtype
