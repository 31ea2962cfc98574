"""Movement Tensor operations: views that change shape and layout (they become index arithmetic, not copies)."""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeAlias, Union

from tinycore.dtype import dtypes, least_upper_dtype
from tinycore.errors import ArgumentError, DimensionError, ShapeError, UnsupportedModeError
from tinycore.tensor.base import TensorBase
from tinycore.tensor.support import argfix, check_shape, resolve_axis

if TYPE_CHECKING:
    from typing import Self

    from tinycore.dtype import ConstType
    from tinycore.uop.uop import sint

    Sizes: TypeAlias = Union[sint, None, Sequence[Union[sint, None]]]
    """A shape given as one sequence or as its first size (the others follow as separate arguments); None keeps an
    axis' size where the method allows it."""
    Axes: TypeAlias = Union[int, Sequence[int]]
    """Axes given as one sequence or as the first of separate arguments."""


def _amount(value: sint) -> sint:
    """A padding amount: an int, or a symbolic int (an expression of bound Variables) kept as it is."""
    from tinycore.uop.uop import UOp
    if isinstance(value, UOp):
        if not dtypes.is_int(value.dtype) or value.vmin < 0:
            raise ShapeError(f"a symbolic padding amount must be a non-negative int expression, got {value}")
        return value
    return int(value)


def _removed(amount: sint) -> int:
    """How much a padding amount removes (a negative int amount), 0 for a symbolic one (never negative)."""
    return 0 if not isinstance(amount, int) else max(-amount, 0)


def _added(amount: Any) -> Any:
    """How much a padding amount adds: a symbolic one whole, an int one when positive."""
    return amount if not isinstance(amount, int) else max(amount, 0)


class MovementMixin(TensorBase):
    """reshape, permute, expand, pad, shrink, flip and the operations built from them."""

    def reshape(self, shape: Sizes, *args: sint | None) -> Self:
        """The same elements viewed with a new shape (one size may be -1; None keeps that axis' size)."""
        sizes = list(argfix(shape, *args))
        sizes = [self.shape[index] if size is None else size for index, size in enumerate(sizes)]
        if not all(isinstance(size, int) for size in sizes + list(self.shape)):
            if all(isinstance(size, int) for size in self.shape):
                raise ValueError(f"cannot reshape the concrete shape {self.shape} to the symbolic {tuple(sizes)}: "
                                 "slice with the bound Variable instead (t[:, :v]), as tinygrad requires")
            return self._result(self.uop.reshape(tuple(sizes)))
        if sum(1 for size in sizes if size == -1) > 1:
            raise ShapeError(f"reshape to {tuple(sizes)}: only one size can be -1")
        for size in sizes:
            if not isinstance(size, int) or isinstance(size, bool) or size < -1:
                raise ValueError(f"reshape to {tuple(sizes)}: sizes must be ints >= 0 (or a single -1)")
        if -1 in sizes:
            known = math.prod([size for size in sizes if size != -1])
            if known == 0 or self.numel() % known != 0:
                raise ShapeError(f"cannot reshape tensor of shape {self.shape} ({self.numel()} elements) to "
                                 f"{tuple(sizes)}")
            sizes[sizes.index(-1)] = self.numel() // known
        if math.prod(sizes) != self.numel():
            raise ShapeError(f"cannot reshape tensor of shape {self.shape} ({self.numel()} elements) to "
                             f"{tuple(sizes)} ({math.prod(sizes)} elements)")
        return self._result(self.uop.reshape(tuple(sizes)))

    def view(self, shape: Sizes, *args: sint | None) -> Self:
        """Alias of reshape."""
        return self.reshape(shape, *args)

    def permute(self, order: Axes, *args: int) -> Self:
        """The axes reordered: axis i of the result is axis order[i] of this tensor."""
        axes = tuple(resolve_axis(axis, self.ndim) for axis in argfix(order, *args))
        if sorted(axes) != list(range(self.ndim)):
            raise ShapeError(f"permute order {argfix(order, *args)} is not a permutation of the {self.ndim} axes "
                             f"of shape {self.shape}")
        return self._result(self.uop.permute(axes))

    def expand(self, shape: Sizes, *args: sint) -> Self:
        """Broadcast to `shape` (size-1 axes stretch, new axes are added on the left, -1 keeps a size)."""
        sizes = argfix(shape, *args)
        if len(sizes) < self.ndim:
            raise ShapeError(f"expand of shape {self.shape} to {sizes}: the target has fewer dimensions")
        current = (1,) * (len(sizes) - self.ndim) + tuple(self.shape)
        target = tuple(old if new == -1 else new for old, new in zip(current, sizes, strict=True))
        for old, new in zip(current, target, strict=True):
            if old != new and old != 1:
                raise ShapeError(f"cannot expand shape {self.shape} to {sizes}: axis of size {old} can only "
                                 f"become {old} (only size-1 axes can be expanded)")
        check_shape(target)
        return self._result(self.uop.reshape(current).expand(target))

    def shrink(self, arg: Sequence[tuple[sint, sint] | None]) -> Self:
        """The part [start, end) of each axis (None keeps the whole axis)."""
        bounds = tuple(arg)
        if len(bounds) != self.ndim:
            raise ShapeError(f"shrink needs one (start, end) or None per axis: got {len(bounds)} for shape "
                             f"{self.shape}")
        resolved = []
        for size, bound in zip(self.shape, bounds, strict=True):
            start, end = (0, size) if bound is None else bound
            if not 0 <= start <= end <= size:
                raise ShapeError(f"shrink {bounds} is out of bounds for shape {self.shape}")
            resolved.append((start, end))
        return self._result(self.uop.shrink(tuple(resolved)))

    def flip(self, axis: Axes, *args: int) -> Self:
        """The elements reversed along the given axes."""
        axes = [resolve_axis(item, self.ndim) for item in argfix(axis, *args)]
        if len(set(axes)) != len(axes):
            raise ShapeError(f"flip axes {argfix(axis, *args)} repeat a dimension")
        return self._result(self.uop.flip(tuple(index in axes for index in range(self.ndim))))

    # ---- pad ----

    def _pad_pairs(self, padding: Sequence[Any]) -> list[tuple[sint, sint]]:
        """Per-axis (before, after) pairs from either form of `padding`."""
        items = list(padding)
        if all(isinstance(item, int) and not isinstance(item, bool) for item in items):
            if len(items) % 2 != 0 or len(items) // 2 > self.ndim:
                raise ShapeError(f"flat padding {tuple(items)} needs an even number of values, at most "
                                 f"{2 * self.ndim} for shape {self.shape}")
            pairs: list[tuple[sint, sint]] = [(0, 0)] * self.ndim
            for index in range(len(items) // 2):
                pairs[self.ndim - 1 - index] = (items[2 * index], items[2 * index + 1])
            return pairs
        if len(items) != self.ndim:
            raise ShapeError(f"padding {tuple(items)} needs one (before, after) pair or None per axis of shape "
                             f"{self.shape}")
        return [(0, 0) if item is None else (_amount(item[0]), _amount(item[1])) for item in items]

    def pad(self, padding: Sequence[Any], mode: str = "constant", value: ConstType = 0.0) -> Self:
        """Padding per axis: a flat (left, right, top, bottom, ...) sequence starting from the last axis, or one
        (before, after) pair or None per axis. Modes: constant (with `value`), reflect, replicate, circular.
        Negative amounts remove elements."""
        if mode not in ("constant", "reflect", "replicate", "circular"):
            raise UnsupportedModeError(f"pad mode {mode!r} is not supported: use 'constant', 'reflect', 'replicate' "
                                       "or 'circular'")
        pairs = self._pad_pairs(padding)
        if mode != "constant" and value != 0.0:
            raise ValueError(f"pad value is only used with mode='constant', got value={value} with mode={mode!r}")
        grow = [(_added(before), _added(after)) for before, after in pairs]
        if mode == "circular" and any(_removed(before) or _removed(after) for before, after in pairs):
            raise UnsupportedModeError(f"circular padding with negative amounts {pairs} is not supported")
        if mode != "constant":
            # as torch: the reflected or repeated elements come from the whole axis, and the negative amounts then
            # remove elements from the padded result
            grown = self
            for axis, (before, after) in enumerate(grow):
                if before or after:
                    grown = grown._pad_axis(axis, before, after, mode)
            return grown._remove_negative(pairs)
        return self._remove_negative(pairs)._pad_constant(grow, value)

    def _remove_negative(self, pairs: list[tuple[Any, Any]]) -> Self:
        """This tensor with the negative amounts of `pairs` removed from each axis."""
        bounds = []
        for size, (before, after) in zip(self.shape, pairs, strict=True):
            start, end = _removed(before), size - _removed(after)
            if isinstance(start, int) and isinstance(end, int) and start > end:
                raise ShapeError(f"negative padding {pairs} removes more than an axis holds (shape {self.shape})")
            bounds.append((start, end))
        return self.shrink(tuple(bounds))

    def _pad_constant(self, pairs: list[tuple[int, int]], value: ConstType) -> Self:
        """Constant padding (zero directly, other values through a mask)."""
        if all(before == 0 and after == 0 for before, after in pairs):
            return self
        padded = self._result(self.uop.pad(tuple(pairs)))
        if value == 0:
            return padded
        inside = type(self).full(self.shape, True, dtypes.bool, self.device)
        mask = type(self)._wrap(inside.uop.pad(tuple(pairs)))
        return mask.where(padded, value)

    def _pad_axis(self, axis: int, before: int, after: int, mode: str) -> Self:
        """Reflect, replicate or circular padding of one axis."""
        size = self.shape[axis]
        if mode == "reflect" and (before >= size or after >= size):
            raise ShapeError(f"reflect padding ({before}, {after}) must be smaller than the axis size {size}")
        if mode == "circular" and (before > size or after > size):
            raise ShapeError(f"circular padding ({before}, {after}) can be at most the axis size {size}")
        if mode in ("reflect", "replicate") and size == 0:
            raise ShapeError(f"{mode} padding of an empty axis (shape {self.shape})")

        def part(tensor: Self, start: int, end: int) -> Self:
            """The slice [start, end) of the padded axis."""
            return tensor.shrink(tuple((start, end) if index == axis else None for index in range(self.ndim)))
        pieces = []
        if mode == "reflect":
            pieces = [part(self, 1, before + 1).flip(axis), self, part(self, size - after - 1, size - 1).flip(axis)]
        elif mode == "replicate":
            def edge_shape(amount: int) -> tuple[int, ...]:
                """This tensor's shape with the padded axis of size `amount`."""
                return tuple(amount if index == axis else s for index, s in enumerate(self.shape))
            left = part(self, 0, 1).expand(edge_shape(before))
            right = part(self, size - 1, size).expand(edge_shape(after))
            pieces = [left, self, right]
        else:
            pieces = [part(self, size - before, size), self, part(self, 0, after)]
        return pieces[0].cat(*pieces[1:], dim=axis)

    def pad_to(self, shape: Sizes, *args: sint | None, value: ConstType = 0) -> Self:
        """Padding at the end of each axis up to `shape` (None keeps an axis)."""
        sizes = argfix(shape, *args)
        if len(sizes) != self.ndim:
            raise ValueError(f"pad_to shape {sizes} needs {self.ndim} sizes")
        return self.pad(tuple((0, 0 if new is None else new - old) for old, new in zip(self.shape, sizes, strict=True)),
                        value=value)

    def shrink_to(self, shape: Sizes, *args: sint | None) -> Self:
        """The leading part of each axis, of `shape` (None keeps an axis)."""
        sizes = argfix(shape, *args)
        if len(sizes) != self.ndim:
            raise ValueError(f"shrink_to shape {sizes} needs {self.ndim} sizes")
        return self.shrink(tuple(None if new is None else (0, new) for new in sizes))

    # ---- derived views ----

    def transpose(self, dim0: int = 1, dim1: int = 0) -> Self:
        """Axes dim0 and dim1 swapped."""
        first, second = resolve_axis(dim0, self.ndim), resolve_axis(dim1, self.ndim)
        order = list(range(self.ndim))
        order[first], order[second] = order[second], order[first]
        return self.permute(order)

    @property
    def T(self) -> Self:
        """The first two axes swapped (the matrix transpose)."""
        return self.transpose()

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Self:
        """Axes start_dim..end_dim merged into one."""
        if self.ndim == 0:
            return self.reshape(1)
        start, end = resolve_axis(start_dim, self.ndim), resolve_axis(end_dim, self.ndim)
        if start > end:
            raise ValueError(f"flatten start_dim {start_dim} comes after end_dim {end_dim}")
        shape = self.shape
        return self.reshape(shape[:start] + (math.prod(shape[start:end + 1]),) + shape[end + 1:])

    def unflatten(self, dim: int, sizes: Sequence[int]) -> Self:
        """Axis `dim` split into `sizes`."""
        axis = resolve_axis(dim, self.ndim)
        return self.reshape(self.shape[:axis] + tuple(sizes) + self.shape[axis + 1:])

    def squeeze(self, dim: int | None = None) -> Self:
        """Size-1 axes removed (only axis `dim` when given, and only if it has size 1)."""
        if dim is None:
            return self.reshape(tuple(size for size in self.shape if size != 1))
        if self.ndim == 0:
            resolve_axis(dim, 0)
            return self
        axis = resolve_axis(dim, self.ndim)
        if self.shape[axis] != 1:
            return self
        return self.reshape(self.shape[:axis] + self.shape[axis + 1:])

    def unsqueeze(self, dim: int) -> Self:
        """A size-1 axis inserted at `dim`."""
        axis = resolve_axis(dim, self.ndim, allow_end=True)
        return self.reshape(self.shape[:axis] + (1,) + self.shape[axis:])

    def repeat(self, repeats: int | Sequence[int], *args: int) -> Self:
        """The tensor tiled `repeats[i]` times along axis i (extra leading repeats add axes)."""
        counts = argfix(repeats, *args)
        if len(counts) < self.ndim:
            raise ValueError(f"repeat needs at least {self.ndim} counts for shape {self.shape}, got {counts}")
        check_shape(counts, "repeat counts")
        base = self.reshape((1,) * (len(counts) - self.ndim) + tuple(self.shape))
        interleaved = [size for pair in ((1, size) for size in base.shape) for size in pair]
        expanded = [size for pair in zip(counts, base.shape, strict=True) for size in pair]
        return base.reshape(interleaved).expand(expanded).reshape(tuple(c * s for c, s in
                                                                        zip(counts, base.shape, strict=True)))

    def repeat_interleave(self, repeats: int, dim: int | None = None) -> Self:
        """Each element repeated `repeats` times along `dim` (the flattened tensor when None)."""
        source = self.flatten() if dim is None else self
        axis = 0 if dim is None else resolve_axis(dim, self.ndim)
        if not isinstance(repeats, int) or repeats < 0:
            raise ValueError(f"repeat_interleave repeats must be a non-negative int, got {repeats!r}")
        expanded = source.unsqueeze(axis + 1)
        target = list(expanded.shape)
        target[axis + 1] = repeats
        return expanded.expand(target).flatten(axis, axis + 1)

    def roll(self, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Self:
        """Elements shifted cyclically by `shifts` along `dims` (the flattened tensor when None)."""
        if dims is None:
            return self.flatten().roll(shifts, 0).reshape(self.shape)
        shift_list = [shifts] if isinstance(shifts, int) else list(shifts)
        dim_list = [dims] if isinstance(dims, int) else list(dims)
        if len(shift_list) != len(dim_list):
            raise ShapeError(f"roll needs as many shifts as dims, got {shift_list} and {dim_list}")
        result = self
        for shift, dim in zip(shift_list, dim_list, strict=True):
            axis = resolve_axis(dim, self.ndim)
            size = self.shape[axis]
            if size == 0 or shift % size == 0:
                continue
            amount = shift % size

            def part(start: int, end: int, source: Self = result, axis: int = axis) -> Self:
                """The slice [start, end) of the padded axis."""
                return source.shrink(tuple((start, end) if index == axis else None for index in range(self.ndim)))
            result = part(size - amount, size).cat(part(0, size - amount), dim=axis)
        return result

    # ---- joining and splitting ----

    def cat(self, *args: Self, dim: int = 0) -> Self:
        """This tensor and `args` joined along `dim` (dtypes promoted); `Tensor.cat((a, b))` works too."""
        if isinstance(self, (list, tuple)):
            if not self or args:
                raise ArgumentError("cat takes the tensors either as one sequence or as separate arguments, got "
                                    f"{len(self)} in a sequence and {len(args)} more")
            return self[0].cat(*self[1:], dim=dim)
        tensors = [self, *args]
        if any(tensor.ndim == 0 for tensor in tensors):
            raise DimensionError("zero-dimensional tensors cannot be concatenated: unsqueeze them or use stack")
        axis = resolve_axis(dim, self.ndim)
        for tensor in tensors:
            mismatched = tensor.ndim != self.ndim or any(
                a != b for index, (a, b) in enumerate(zip(tensor.shape, self.shape, strict=True)) if index != axis)
            if mismatched:
                raise ShapeError(f"cat along dim {dim} needs equal sizes on the other axes: {self.shape} and "
                                 f"{tensor.shape}")
            if tensor.device != self.device:
                raise ValueError(f"cat of tensors on different devices: {self.device} and {tensor.device}")
        common = least_upper_dtype(*(tensor.dtype for tensor in tensors))
        total = sum(tensor.shape[axis] for tensor in tensors)
        offset = 0
        result: Any = None
        for tensor in tensors:
            size = tensor.shape[axis]
            pairs = [(offset, total - offset - size) if index == axis else (0, 0) for index in range(self.ndim)]
            padded = tensor.cast(common)._pad_constant(pairs, 0)
            offset += size
            if result is None:
                result = padded
            elif common == dtypes.bool:
                result = result | padded
            else:
                result = result + padded
        return result

    def stack(self, *args: Self, dim: int = 0) -> Self:
        """This tensor and `args` (of one shape) joined along a new axis `dim`; `Tensor.stack((a, b))` (a sequence
        as the one argument) works too."""
        if isinstance(self, (list, tuple)):
            if not self or args:
                raise ArgumentError("stack takes the tensors either as one sequence or as separate arguments, got "
                                    f"{len(self)} in a sequence and {len(args)} more")
            return self[0].stack(*self[1:], dim=dim)
        tensors = [self, *args]
        for tensor in tensors:
            if tuple(tensor.shape) != tuple(self.shape):
                raise ShapeError(f"stack needs tensors of one shape, got {self.shape} and {tensor.shape}")
        axis = resolve_axis(dim, self.ndim, allow_end=True)
        return tensors[0].unsqueeze(axis).cat(*(tensor.unsqueeze(axis) for tensor in tensors[1:]), dim=axis)

    def split(self, sizes: int | Sequence[int], dim: int = 0) -> tuple[Self, ...]:
        """Pieces along `dim`: of `sizes` each (the last may be smaller) or of the listed sizes."""
        axis = resolve_axis(dim, self.ndim)
        length = self.shape[axis]
        if isinstance(sizes, int):
            if sizes <= 0:
                raise ValueError(f"split size must be positive, got {sizes}")
            pieces = [min(sizes, length - start) for start in range(0, length, sizes)] or [0]
        else:
            pieces = list(sizes)
            if sum(pieces) != length:
                raise ShapeError(f"split sizes {pieces} sum to {sum(pieces)}, but dim {dim} has size {length}")
        result = []
        offset = 0
        for piece in pieces:
            result.append(self.shrink(tuple((offset, offset + piece) if index == axis else None
                                            for index in range(self.ndim))))
            offset += piece
        return tuple(result)

    def chunk(self, chunks: int, dim: int = 0) -> list[Self]:
        """`chunks` pieces of (nearly) equal size along `dim`."""
        if not isinstance(chunks, int) or chunks <= 0:
            raise ValueError(f"chunk count must be a positive int, got {chunks!r}")
        axis = resolve_axis(dim, self.ndim)
        length = self.shape[axis]
        if length == 0:
            return [self] * chunks
        return list(self.split(math.ceil(length / chunks), dim=axis))

    def unfold(self, dim: int, size: int, step: int) -> Self:
        """Windows of `size` elements taken every `step` along `dim`, as a new last axis."""
        axis = resolve_axis(dim, self.ndim)
        if step <= 0:
            raise ArgumentError(f"unfold step must be > 0, got {step}")
        if not 0 <= size <= self.shape[axis]:
            raise ArgumentError(f"unfold size {size} does not fit axis {dim} of size {self.shape[axis]}: it must be "
                                f"in [0, {self.shape[axis]}]")
        windows = self.transpose(axis, -1)._pool((size,), step, 1)
        return windows.transpose(axis, -2)

    def meshgrid(self, *args: Self, indexing: str = "ij") -> tuple[Self, ...]:
        """Coordinate grids from 1-D tensors ('ij' or 'xy' indexing)."""
        if indexing not in ("ij", "xy"):
            raise ArgumentError(f"meshgrid indexing must be 'ij' or 'xy', got {indexing!r}")
        tensors = [self, *args]
        shape = tuple(tensor.numel() for tensor in tensors)
        if indexing == "xy" and len(tensors) >= 2:
            shape = (shape[1], shape[0]) + shape[2:]
        grids = []
        for index, tensor in enumerate(tensors):
            position = index
            if indexing == "xy" and index < 2 and len(tensors) >= 2:
                position = 1 - index
            view = [1] * len(shape)
            view[position] = tensor.numel()
            grids.append(tensor.reshape(view).expand(shape))
        return tuple(grids)

    def rearrange(self, formula: str, **sizes: int) -> Self:
        """einops-style rearrangement, e.g. 'b c (h p) w -> b (c p) h w' with p=2 given as a keyword size."""
        if "->" not in formula:
            raise ValueError(f"rearrange formula {formula!r} needs '->' between the input and output patterns")
        source_text, target_text = formula.split("->")
        source_groups, target_groups = _parse_pattern(source_text), _parse_pattern(target_text)
        if len(source_groups) != self.ndim:
            raise ValueError(f"rearrange pattern {source_text.strip()!r} names {len(source_groups)} axes, the tensor "
                             f"has {self.ndim} (shape {self.shape})")
        source_names = [name for group in source_groups for name in group]
        target_names = [name for group in target_groups for name in group]
        if sorted(source_names) != sorted(target_names) or len(set(source_names)) != len(source_names):
            raise ValueError(f"rearrange {formula!r}: both sides must name the same axes once each")
        known = dict(sizes)
        for group, size in zip(source_groups, self.shape, strict=True):
            unknown = [name for name in group if name not in known]
            rest = math.prod([known[name] for name in group if name in known])
            if len(unknown) > 1:
                raise ValueError(f"rearrange cannot infer the sizes of {unknown} in {group}: give them as keywords")
            if unknown:
                if rest == 0 or size % rest:
                    raise ValueError(f"rearrange group {group} does not divide the axis of size {size}")
                known[unknown[0]] = size // rest
            elif rest != size:
                raise ValueError(f"rearrange group {group} has size {rest}, the axis has {size}")
        split = self.reshape([known[name] for name in source_names])
        moved = split.permute([source_names.index(name) for name in target_names])
        return moved.reshape([math.prod([known[name] for name in group]) for group in target_groups])


def _parse_pattern(text: str) -> list[list[str]]:
    """An einops pattern as groups of axis names ('b (h w) c' -> [['b'], ['h', 'w'], ['c']])."""
    groups: list[list[str]] = []
    current: list[str] | None = None
    for token in text.replace("(", " ( ").replace(")", " ) ").split():
        if token == "(":
            if current is not None:
                raise ValueError(f"nested parentheses in rearrange pattern {text!r}")
            current = []
        elif token == ")":
            if current is None:
                raise ValueError(f"unbalanced parentheses in rearrange pattern {text!r}")
            groups.append(current)
            current = None
        elif current is not None:
            current.append(token)
        else:
            groups.append([token])
    if current is not None:
        raise ValueError(f"unbalanced parentheses in rearrange pattern {text!r}")
    return groups
