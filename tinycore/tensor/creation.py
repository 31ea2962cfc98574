"""Tensor creation: constants, ranges, identity, and the counter-based random number generator."""
from __future__ import annotations

import array
import functools
import hashlib
import itertools
import math
import time
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, ClassVar, TypeAlias, TypedDict, TypeVar, Union, overload

from tinycore.dtype import ConstType, DType, DTypeLike, dtypes, to_dtype
from tinycore.errors import ArgumentAssertionError, ArgumentError
from tinycore.tensor.base import canonical_device
from tinycore.tensor.reduce import ReduceMixin
from tinycore.tensor.support import argfix, check_shape, optional_dtype
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp

if TYPE_CHECKING:
    from typing import Self

    from typing_extensions import ParamSpec, Unpack

    from tinycore.device.buffer import Buffer
    from tinycore.uop.uop import sint

    _Params = ParamSpec("_Params")
    _Shape: TypeAlias = Union[sint, Sequence[sint]]

TensorT = TypeVar("TensorT", bound="CreationMixin")
"""A tensor of the chain class whose methods these helpers call (the Tensor, at run time)."""

_Word = TypeVar("_Word", "CreationMixin", int)
"""A Threefry word: a Python int (keys derived on the host) or a uint32 Tensor (numbers drawn on a device)."""
_Value = TypeVar("_Value", "CreationMixin", int, "CreationMixin | int")


class _Grad(TypedDict, total=False):
    """The gradient option of a creation method."""
    requires_grad: bool | None


class _Device(TypedDict, total=False):
    """The device option of a creation method."""
    device: str | None


class _Placement(_Device, total=False):
    """Where a new tensor lives and its dtype."""
    dtype: DTypeLike | None


class _Like(_Placement, _Grad, total=False):
    """The options of full_like and the methods built on it."""


class _Draw(_Device, total=False):
    """The options of a uniform draw that uniform passes on to rand."""
    contiguous: bool


class _Random(_Draw, _Grad, total=False):
    """The options of rand (and of uniform, which takes the same)."""
    dtype: DTypeLike | None


class _DrawGrad(_Draw, _Grad, total=False):
    """A draw's options without its dtype (the caller sets it)."""


class _Undirected(_Grad, total=False):
    """A draw's options without its device and dtype (the caller takes both)."""
    contiguous: bool

# Threefry-2x32 with 20 rounds (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", 2011).
_THREEFRY_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_THREEFRY_PARITY = 0x1BD11BDA
_MASK32 = 0xFFFFFFFF
_MASK64 = 0xFFFFFFFFFFFFFFFF
_INDEX_BLOCK = 1 << 16  # the longest range kept as one index buffer
_INT32_MAX = 2 ** 31 - 1


def _device_of(device: str | None) -> str:
    """The canonical device name for `device` (default device for None)."""
    name = canonical_device(device)
    if isinstance(name, tuple):
        raise ValueError(f"this creation method makes a tensor on one device, got {name}: create it on one device "
                         "and .shard(devices, axis) or .to(devices) it")
    return name


def _creates_leaf(method: Callable[_Params, TensorT]) -> Callable[_Params, TensorT]:
    """Marks what a creation class method returns as a leaf tensor (see Tensor._mark_leaf)."""
    @functools.wraps(method)
    def create(*args: _Params.args, **kwargs: _Params.kwargs) -> TensorT:
        return method(*args, **kwargs)._mark_leaf()
    return create


@functools.lru_cache(maxsize=64)
def _index_buffer(count: int, device: str) -> UOp:
    """A realized int32 buffer holding 0, 1, ..., count-1 on `device` (cached: ranges are built from it)."""
    import array

    from tinycore.engine.memory import uop_from_bytes
    if count >= 2 ** 31:
        raise ValueError(f"arange of {count} elements does not fit int32 indices")
    values = array.array("i", range(count))
    node = uop_from_bytes(values.tobytes(), dtypes.int32, device)
    _shared_index_buffers.add(node.base)
    return node


_shared_index_buffers: weakref.WeakSet[UOp] = weakref.WeakSet()
"""The cached index buffers: `Tensor.arange(n)` (int32 from 0 by 1) wraps one as it is, shared by every such tensor."""


def is_shared_buffer(uop: UOp) -> bool:
    """True when `uop` is (a view of) a cached index buffer: writing into it in place (setitem, assign) would change
    every other `Tensor.arange` of that length, so such a write makes a new buffer instead."""
    return uop.op is not Ops.MULTI and uop.base in _shared_index_buffers


# key buffers of random draws -> (creation order, device, words drawn); TinyJit refreshes them on every replay
_random_key_buffers: weakref.WeakKeyDictionary[Buffer, tuple[int, str, int]] = weakref.WeakKeyDictionary()
_key_sequence = itertools.count()


def _key_words(device: str, count: int) -> bytes:
    """The chunk keys of the next `count` words of `device`'s stream, as uint32 words (the counter advances)."""
    key0, key1, start = CreationMixin._next_counter(device, count)
    derived = CreationMixin._derived_keys(key0, key1, start & _MASK32, start >> 32, count)
    return array.array("I", [word for pair in derived for word in pair]).tobytes()


def random_key_buffers(buffers: list[Buffer]) -> list[tuple[Buffer, str, int]]:
    """The random key buffers among `buffers`, in the order they were drawn: (buffer, device, words) each."""
    found = {id(buffer): (buffer, _random_key_buffers[buffer]) for buffer in buffers if buffer in _random_key_buffers}
    return [(buffer, device, count) for buffer, (_, device, count) in sorted(found.values(), key=lambda x: x[1][0])]


def draw_random_keys(device: str, count: int) -> bytes:
    """The next chunk keys for a draw of `count` words on `device` (TinyJit writes them into a captured key buffer)."""
    return _key_words(device, count)


class CreationMixin(ReduceMixin):
    """Constructors (class methods) and *_like methods of Tensor."""

    _seed: ClassVar[int] = int(time.time())
    _device_keys: ClassVar[dict[str, int]] = {}
    _device_counters: ClassVar[dict[str, int]] = {}

    # ---- constants ----

    @classmethod
    @_creates_leaf
    def full(cls, shape: _Shape, fill_value: ConstType, dtype: DTypeLike | None = None,
             device: str | tuple[str, ...] | None = None,
             requires_grad: bool | None = None) -> Self:
        """A tensor of `shape` filled with `fill_value` (dtype from the value when not given)."""
        sizes = check_shape(argfix(shape) if not isinstance(shape, int) else (shape,))
        if not isinstance(fill_value, (int, float, bool)):
            raise TypeError(f"fill_value must be a Python number, got {type(fill_value).__name__}")
        target = optional_dtype(dtype) or dtypes.from_py(fill_value)
        constant = UOp.const_on(target, fill_value, canonical_device(device), sizes)
        result = cls._wrap(constant)
        if requires_grad is not None:
            result.requires_grad = requires_grad
        return result

    @classmethod
    def zeros(cls, *shape: _Shape, dtype: DTypeLike | None = None, device: str | None = None,
              **kw: Unpack[_Grad]) -> Self:
        """A tensor of zeros (default float dtype)."""
        return cls.full(argfix(*shape), 0, dtype or dtypes.default_float, device, **kw)

    @classmethod
    def ones(cls, *shape: _Shape, dtype: DTypeLike | None = None, device: str | None = None,
             **kw: Unpack[_Grad]) -> Self:
        """A tensor of ones (default float dtype)."""
        return cls.full(argfix(*shape), 1, dtype or dtypes.default_float, device, **kw)

    @classmethod
    @_creates_leaf
    def empty(cls, *shape: _Shape, device: str | tuple[str, ...] | None = None, dtype: DTypeLike | None = None,
              requires_grad: bool | None = None) -> Self:
        """A tensor whose contents are not initialised (a new buffer)."""
        from tinycore.uop.buffer import new_buffer_uop
        sizes = check_shape(argfix(*shape))
        target = optional_dtype(dtype) or dtypes.default_float
        largest = tuple(size if isinstance(size, int) else int(size.vmax) for size in sizes)
        where = canonical_device(device)
        if isinstance(where, tuple):  # a buffer on each device (replicated)
            from tinycore.uop.multi import multi
            node = multi([new_buffer_uop(name, target, math.prod(largest)).reshape(largest) for name in where], None)
        else:
            node = new_buffer_uop(where, target, math.prod(largest)).reshape(largest)
        if largest != sizes:
            node = node.shrink(tuple((0, size) for size in sizes))
        return cls._wrap(node, requires_grad)

    def _multi_like(self, make: Callable[[tuple[sint, ...], str | None], Self]) -> Self:
        """A new tensor sharded as this multi-device one: `make(shape, device)` builds each device's block (for a
        replicated tensor, one value on the default device copied to every device)."""
        from tinycore.uop.multi import multi
        devices = self.device
        if self.uop.axis is None:
            return make(self.shape, None).shard(devices, None)
        block_shape = self.uop.src[0].shape
        blocks = [make(block_shape, device).uop for device in devices]
        return type(self)._wrap(multi(blocks, self.uop.axis))

    def full_like(self, fill_value: ConstType, dtype: DTypeLike | None = None, device: str | None = None,
                  **kw: Unpack[_Grad]) -> Self:
        """A tensor shaped like this one filled with `fill_value` (this tensor's dtype and device by default; a
        multi-device tensor's result is sharded the same way)."""
        if isinstance(self.device, tuple):
            if device is not None:
                raise RuntimeError(f"cannot give device={device!r} to full_like of a tensor on {self.device}: the "
                                   "result is sharded like it; move it afterwards with .to() or .shard()")
            return self._multi_like(lambda shape, where: type(self).full(shape, fill_value, dtype or self.dtype,
                                                                         where, **kw))
        return type(self).full(self.shape, fill_value, dtype or self.dtype, device or self.device, **kw)

    def zeros_like(self, **kwargs: Unpack[_Like]) -> Self:
        """Zeros shaped like this tensor."""
        return self.full_like(0, **kwargs)

    def ones_like(self, **kwargs: Unpack[_Like]) -> Self:
        """Ones shaped like this tensor."""
        return self.full_like(1, **kwargs)

    def empty_like(self, dtype: DTypeLike | None = None, device: str | None = None) -> Self:
        """An uninitialised tensor shaped like this one."""
        return type(self).empty(self.shape, dtype=dtype or self.dtype, device=device or self.device)

    # ---- ranges ----

    @classmethod
    def _indices(cls, count: int, device: str | None = None) -> Self:
        """0, 1, ..., count-1 as int32 (int64 from 2**31 elements on), lazily.

        Up to _INDEX_BLOCK elements come from a cached index buffer; longer ranges are row * _INDEX_BLOCK + column
        over two such buffers, so no buffer of `count` elements exists until the range is realized.
        """
        if count == 0:
            return cls.full((0,), 0, dtypes.int32, device)
        if count <= _INDEX_BLOCK:
            return cls._wrap(_index_buffer(count, _device_of(device)))
        target = dtypes.int64 if count - 1 > _INT32_MAX else dtypes.int32
        rows = (count + _INDEX_BLOCK - 1) // _INDEX_BLOCK
        row_indices = cls._indices(rows, device)
        row_starts = row_indices.cast(target).reshape(rows, 1) * _INDEX_BLOCK
        columns = cls._indices(_INDEX_BLOCK, device).cast(target).reshape(1, _INDEX_BLOCK)
        return (row_starts + columns).flatten()[:count]

    @classmethod
    @_creates_leaf
    def arange(cls, start: int | float, stop: int | float | None = None, step: int | float = 1,
               dtype: DTypeLike | None = None, device: str | None = None, **_: object) -> Self:
        """Values from `start` (inclusive) to `stop` (exclusive) spaced by `step`."""
        if stop is None:
            start, stop = 0, start
        for name, value in (("start", start), ("stop", stop), ("step", step)):
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise TypeError(f"arange {name} must be an int or float, got {value!r}")
        if step == 0:
            raise ValueError("arange step must not be zero")
        count = max(math.ceil((stop - start) / step), 0)
        target = optional_dtype(dtype) or (dtypes.default_float if any(isinstance(value, float) for value in
                                                                         (start, stop, step)) else dtypes.default_int)
        if dtype is None and target == dtypes.default_int and count and not all(
                dtypes.min(target) <= value <= dtypes.max(target) for value in (start, start + (count - 1) * step)):
            target = dtypes.int64  # as tinygrad: a range past the default int's limits is int64
        indices = cls._indices(count, device)
        if dtypes.is_float(target):
            return (indices.cast(target) * step + start).cast(target)
        if (step, start) == (1, 0):
            return indices.cast(target)
        return indices.cast(target) * step + start

    @classmethod
    @_creates_leaf
    def linspace(cls, start: int | float, stop: int | float, steps: int, dtype: DTypeLike | None = None,
                 device: str | None = None) -> Self:
        """`steps` evenly spaced values from `start` to `stop`, both included."""
        if not isinstance(steps, int) or steps < 0:
            raise ArgumentError(f"linspace steps must be a non-negative int, got {steps!r}")
        target = optional_dtype(dtype) or dtypes.default_float
        if target == dtypes.bool:
            raise ArgumentError("linspace with bool dtype is not supported: make the values in a number dtype and "
                                "compare them")
        if steps == 1:
            return cls.full((1,), start, target, device)
        delta = (stop - start) / (steps - 1) if steps > 1 else 0.0
        values = cls._indices(steps, device).cast(dtypes.float32) * delta + start
        return values.cast(target)

    @classmethod
    @_creates_leaf
    def eye(cls, n: int, m: int | None = None, dtype: DTypeLike | None = None, device: str | None = None) -> Self:
        """The `n` x `m` identity matrix."""
        columns = n if m is None else m
        check_shape((n, columns))
        rows = cls._indices(n, device).reshape(n, 1)
        return (rows == cls._indices(columns, device).reshape(1, columns)).cast(optional_dtype(dtype) or
                                                                                  dtypes.default_float)

    # ---- random ----
    # The stream is tinygrad 0.14's, so seeded programs draw the same numbers in both: each device gets the key
    # (low 32 bits of sha256 of the order in which it was first used since the seed, low 32 bits of the seed) and a
    # 64-bit counter that advances by the number of 32-bit words each call draws. A call's words come from a key
    # derived by encrypting its start counter, then from encrypting counters (i, i + half) for i < half.

    @staticmethod
    def manual_seed(seed: int = 0) -> None:
        """Seed the random number generator: the same seed gives tinygrad 0.14's numbers, on every device."""
        CreationMixin._seed = int(seed)
        CreationMixin._device_keys = {}
        CreationMixin._device_counters = {}

    @staticmethod
    def _next_counter(device: str, words: int) -> tuple[int, int, int]:
        """(key word 0, key word 1, start counter) of the next `words` random words on `device`."""
        keys = CreationMixin._device_keys
        if device not in keys:
            digest = hashlib.sha256(len(keys).to_bytes(4, "big")).digest()
            keys[device] = int.from_bytes(digest, "big") & _MASK32
            CreationMixin._device_counters[device] = 0
        start = CreationMixin._device_counters[device]
        CreationMixin._device_counters[device] = (start + words) & _MASK64
        return keys[device], CreationMixin._seed & _MASK32, start

    @overload
    @staticmethod
    def _threefry(word0: int, word1: int, key0: int, key1: int) -> tuple[int, int]: ...

    @overload
    @staticmethod
    def _threefry(word0: TensorT, word1: TensorT, key0: TensorT | int, key1: TensorT | int) -> tuple[TensorT, TensorT]:
        ...

    @staticmethod
    def _threefry(word0: _Word, word1: _Word, key0: _Word | int, key1: _Word | int) -> tuple[_Word, _Word]:
        """Threefry-2x32-20 of the counter words (word0, word1) under the key (key0, key1).

        Words and keys are uint32 Tensors (broadcast together) or Python ints, in any mix; Python ints are reduced
        to 32 bits after every step, so the same function derives keys on the host and draws numbers on devices.
        """
        def wrap(value: _Value) -> _Value:
            return value & _MASK32 if isinstance(value, int) else value

        keys = (wrap(key0), wrap(key1), wrap(key0 ^ key1 ^ _THREEFRY_PARITY))
        word0, word1 = wrap(word0 + keys[0]), wrap(word1 + keys[1])
        for block in range(5):
            for rotation in _THREEFRY_ROTATIONS[block % 2]:
                word0 = wrap(word0 + word1)
                word1 = wrap((wrap(word1 << rotation) | (word1 >> (32 - rotation))) ^ word0)
            word0 = wrap(word0 + keys[(block + 1) % 3])
            word1 = wrap(wrap(word1 + keys[(block + 2) % 3]) + (block + 1))
        return word0, word1

    @overload
    @classmethod
    def _derived_keys(cls, key0: int, key1: int, counter_low: int, counter_high: int,
                      count: int) -> list[tuple[int, int]]: ...

    @overload
    @classmethod
    def _derived_keys(cls, key0: TensorT, key1: TensorT, counter_low: TensorT, counter_high: TensorT,
                      count: int) -> list[tuple[TensorT, TensorT]]: ...

    @classmethod
    def _derived_keys(cls, key0: _Word, key1: _Word, counter_low: _Word, counter_high: _Word,
                      count: int) -> Sequence[tuple[_Word, _Word]]:
        """The (word 0, word 1) key of each chunk of 2**32 - 1 words: the chunk's start counter encrypted under the
        stream's key. Python ints in, ints out (rand); uint32 Tensors of shape (1,) in, Tensors out (random_bits)."""
        keys = []
        for offset in range(0, count, _MASK32):
            if isinstance(counter_low, int):
                total = ((counter_high << 32) | counter_low) + offset
                chunk_low: _Word = total & _MASK32
                chunk_high: _Word = (total >> 32) & _MASK32
            else:
                chunk_low = counter_low + (offset & _MASK32)
                chunk_high = counter_high + (offset >> 32) + (chunk_low < counter_low).cast(dtypes.uint32)
            keys.append(cls._threefry(chunk_low, chunk_high, key0, key1))
        return keys

    @classmethod
    def _stream_words(cls, derived: list[tuple[Self, Self]], count: int, device: str) -> Self:
        """`count` uint32 words under the chunk keys `derived` ((word 0, word 1) uint32 Tensors of shape (1,)): word
        i of a chunk of n is the first output of Threefry on the counter pair (i, i + half) for i < half = ceil(n / 2),
        the second output after that."""
        chunks = []
        for number, (derived0, derived1) in enumerate(derived):
            chunk = min(count - number * _MASK32, _MASK32)
            half = (chunk + 1) // 2
            first_counters = cls._indices(half, device).bitcast(dtypes.uint32)
            first, second = cls._threefry(first_counters, first_counters + half, derived0, derived1)
            chunks.append(first.cat(second)[:chunk])
        if not chunks:
            return cls.full((0,), 0, dtypes.uint32, device)
        return chunks[0].cat(*chunks[1:]) if len(chunks) > 1 else chunks[0]

    @classmethod
    def _random_bits(cls, count: int, device: str | None) -> Self:
        """The next `count` uint32 words of `device`'s stream (the counter advances by `count`).

        The chunk keys are derived on the host and passed to the kernel in a small buffer, not as constants: every
        draw of the same size is then the same kernel (compiled once), and TinyJit refreshes the buffer with the next
        keys on each replay, so a jitted function draws new numbers every call, as in tinygrad.
        """
        from tinycore.engine.memory import buffer_of, uop_from_bytes
        canonical = _device_of(device)
        if count == 0:
            return cls.full((0,), 0, dtypes.uint32, canonical)
        key_node = uop_from_bytes(_key_words(canonical, count), dtypes.uint32, canonical)
        _random_key_buffers[buffer_of(key_node)] = (next(_key_sequence), canonical, count)
        keys = cls._wrap(key_node)
        derived = [(keys[2 * number:2 * number + 1], keys[2 * number + 1:2 * number + 2])
                   for number in range((count + _MASK32 - 1) // _MASK32)]
        return cls._stream_words(derived, count, canonical)

    @staticmethod
    def _words_to_floats(words: TensorT, count: int, dtype: DType) -> TensorT:
        """`count` floats of `dtype` in [0, 1) from uint32 `words` (one per `dtype.itemsize` bytes, little-endian).

        Each element's top mantissa-many bits become the mantissa of a number in [1, 2); 1 is then subtracted.
        """
        exponent, mantissa = dtypes.finfo(dtype)
        bits = dtype.itemsize * 8
        one = ((1 << (exponent - 1)) - 1) << mantissa  # the bits of 1.0: the exponent bias, a zero mantissa
        if dtype.itemsize == 4:
            elements = words
        elif dtype.itemsize == 8:
            pairs = words.reshape(-1, 2).cast(dtypes.uint64)
            elements = pairs[:, 0] | (pairs[:, 1] << 32)
        else:
            per_word = 4 // dtype.itemsize
            shifts = [position * bits for position in range(per_word)]
            parts = [(words >> shift) & ((1 << bits) - 1) for shift in shifts]
            elements = parts[0].stack(*parts[1:], dim=1).flatten()
        unsigned = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}[dtype.itemsize]
        floats = ((elements.cast(unsigned) >> (bits - mantissa)) | one).bitcast(dtype)
        return floats[:count] - 1

    @classmethod
    @_creates_leaf
    def rand(cls, *shape: _Shape, device: str | None = None, dtype: DTypeLike | None = None, contiguous: bool = True,
             requires_grad: bool | None = None) -> Self:
        """Uniform random values in [0, 1), tinygrad 0.14's values after the same `manual_seed` (lazy until read).

        `requires_grad` is tinycore's addition; an unknown keyword is a TypeError, as in tinygrad.
        """
        sizes = check_shape(argfix(*shape))
        target = optional_dtype(dtype) or dtypes.default_float
        if not dtypes.is_float(target):
            raise ValueError(f"rand only supports float dtypes, got {target}")
        if not all(isinstance(size, int) for size in sizes):
            raise ValueError(f"rand needs a concrete shape, got {sizes}")
        if device is not None and not isinstance(device, str):
            raise ValueError(f"rand only supports a single device, got device={device!r}")
        count = math.prod(sizes)
        words = cls._random_bits((count * target.itemsize + 3) // 4, device)
        result = cls._words_to_floats(words, count, target).reshape(sizes)
        if contiguous:
            result = result.contiguous()
        if requires_grad is not None:
            result.requires_grad = requires_grad
        return result

    def rand_like(self, **kwargs: Unpack[_Random]) -> Self:
        """Uniform random values shaped like this tensor (its dtype and device unless given; a multi-device tensor's
        result is sharded the same way, each device drawing its own block)."""
        dtype = kwargs.pop("dtype", self.dtype)
        device = kwargs.pop("device", None if isinstance(self.device, tuple) else self.device)
        rest: _Undirected = kwargs  # the same dict, device and dtype taken out (others, unknown too, pass to rand)
        if isinstance(self.device, tuple):
            if device is not None:
                raise RuntimeError(f"cannot give a device to rand_like of a tensor on {self.device}: the result is "
                                   "sharded like it; move it afterwards with .to() or .shard()")
            return self._multi_like(lambda shape, where: type(self).rand(*shape, device=where, dtype=dtype, **rest))
        return type(self).rand(*self.shape, device=device, dtype=dtype, **rest)

    @classmethod
    @_creates_leaf
    def randn(cls, *shape: _Shape, dtype: DTypeLike | None = None, requires_grad: bool | None = None,
              **kwargs: Unpack[_Device]) -> Self:
        """Standard normal random values: the Box-Muller transform of two uniform float32 draws, as tinygrad."""
        result = cls.empty(*shape, **kwargs).randn_like(dtype=dtype)
        if requires_grad is not None:
            result.requires_grad = requires_grad
        return result

    def randn_like(self, dtype: DTypeLike | None = None, **kwargs: Unpack[_DrawGrad]) -> Self:
        """Standard normal values shaped like this tensor (this tensor's dtype unless given)."""
        target = to_dtype(dtype or self.dtype)
        uniform = self.stack(self).rand_like(dtype=dtypes.float32, **kwargs)
        radius = (1 - uniform[1]).log().mul(-2).sqrt()
        return (uniform[0] * (2 * math.pi)).cos().mul(radius).cast(target)

    @classmethod
    def randint(cls, *shape: _Shape, low: int = 0, high: int = 10, dtype: DTypeLike = dtypes.int32,
                **kwargs: Unpack[_DrawGrad]) -> Self:
        """Random integers in [low, high): the uniform float draw scaled by high - low and truncated, as tinygrad."""
        if not isinstance(low, int) or not isinstance(high, int):
            raise TypeError(f"randint needs int bounds, got low={low!r}, high={high!r}")
        target = to_dtype(dtype)
        if not dtypes.is_int(target):
            raise TypeError(f"randint needs an integer dtype, got {target}")
        if low >= high:
            raise ValueError(f"randint needs low < high, got low={low}, high={high}")
        return cls.uniform(*shape, low=low, high=high, dtype=target, **kwargs)

    @classmethod
    @_creates_leaf
    def normal(cls, *shape: _Shape, mean: float = 0.0, std: float = 1.0, requires_grad: bool | None = None,
               **kwargs: Unpack[_Placement]) -> Self:
        """Normal random values with the given mean and standard deviation (std >= 0)."""
        if std < 0:
            raise ValueError(f"normal needs std >= 0, got std={std}")
        result = std * cls.randn(*shape, **kwargs) + mean
        if requires_grad is not None:
            result.requires_grad = requires_grad
        return result

    @classmethod
    @_creates_leaf
    def uniform(cls, *shape: _Shape, low: float = 0.0, high: float = 1.0, dtype: DTypeLike | None = None,
                requires_grad: bool | None = None, **kwargs: Unpack[_Draw]) -> Self:
        """Uniform random values in [low, high): a default-float draw scaled, cast to `dtype`, then shifted."""
        if low >= high:
            raise ValueError(f"uniform needs low < high, got low={low}, high={high}")
        target = optional_dtype(dtype) or dtypes.default_float
        result = ((high - low) * cls.rand(*shape, **kwargs)).cast(target) + low
        if requires_grad is not None:
            result.requires_grad = requires_grad
        return result

    @classmethod
    @_creates_leaf
    def scaled_uniform(cls, *shape: _Shape, **kwargs: Unpack[_Random]) -> Self:
        """Uniform in [-1, 1) scaled by 1/sqrt(number of elements)."""
        sizes = argfix(*shape)
        return cls.uniform(*sizes, low=-1.0, high=1.0, **kwargs).mul(max(math.prod(sizes), 1) ** -0.5)

    @classmethod
    @_creates_leaf
    def glorot_uniform(cls, *shape: _Shape, **kwargs: Unpack[_Random]) -> Self:
        """Glorot (Xavier) uniform initialisation: uniform in +-sqrt(6 / (fan_in + fan_out))."""
        sizes = argfix(*shape)
        bound = (6 / max(sizes[0] + math.prod(sizes[1:]), 1)) ** 0.5
        return cls.uniform(*sizes, low=-bound, high=bound, **kwargs)

    @classmethod
    @_creates_leaf
    def kaiming_uniform(cls, *shape: _Shape, a: float = 0.01, **kwargs: Unpack[_Random]) -> Self:
        """He uniform initialisation for a leaky ReLU of slope `a`: uniform in +-sqrt(6 / (1 + a^2) / fan_in)."""
        sizes = argfix(*shape)
        bound = (6 / (1 + a ** 2) / max(math.prod(sizes[1:]), 1)) ** 0.5
        return cls.uniform(*sizes, low=-bound, high=bound, **kwargs)

    @classmethod
    @_creates_leaf
    def kaiming_normal(cls, *shape: _Shape, a: float = 0.01, **kwargs: Unpack[_Like]) -> Self:
        """He normal initialisation: standard deviation sqrt(2 / (1 + a^2) / fan_in)."""
        sizes = argfix(*shape)
        std = (2 / (1 + a ** 2) / max(math.prod(sizes[1:]), 1)) ** 0.5
        return cls.normal(*sizes, mean=0.0, std=std, **kwargs)

    @classmethod
    def randperm(cls, n: int, device: str | None = None, dtype: DTypeLike = dtypes.int32,
                 **kwargs: Unpack[_Undirected]) -> Self:
        """A random permutation of 0..n-1 (the order that sorts n uniform draws)."""
        return cls.rand(n, device=device, **kwargs).argsort().cast(to_dtype(dtype))

    def multinomial(self, num_samples: int = 1, replacement: bool = False) -> Self:
        """`num_samples` indices drawn from the (unnormalised) weights along the last axis of a 1-D or 2-D tensor.

        With replacement (or one sample), each draw counts the cumulative probabilities it reaches; without, the
        weights' Efraimidis-Spirakis keys (log2 of a uniform draw over the weight) pick the top `num_samples`.
        """
        if not 1 <= self.ndim <= 2:
            raise ArgumentAssertionError(f"multinomial needs a 1-D or 2-D tensor of weights, got shape {self.shape}")
        if not isinstance(num_samples, int) or num_samples <= 0:
            raise ArgumentAssertionError(f"multinomial needs a positive number of samples, got {num_samples!r}")
        weights = self.unsqueeze(0) if self.ndim == 1 else self
        if not replacement and num_samples > weights.shape[1]:
            raise ArgumentAssertionError(f"multinomial without replacement cannot draw {num_samples} samples from "
                             f"{weights.shape[1]} weights: pass replacement=True or fewer samples")
        if replacement or num_samples == 1:
            cumulative = weights.cumsum(1).float()
            cumulative = cumulative / cumulative[:, -1].unsqueeze(1)
            draws = type(self).rand(num_samples, cumulative.shape[0], 1).to(self.device)
            indices = (draws >= cumulative).sum(2).permute((1, 0))
        else:
            keys = weights.rand_like(dtype=dtypes.float32).log2() / weights
            indices = keys.topk(num_samples, dim=1)[1]
        return (indices.squeeze(0) if self.ndim == 1 else indices).cast(dtypes.int32)

    @classmethod
    @_creates_leaf
    def from_blob(cls, ptr: int, shape: tuple[int, ...], **kwargs: Unpack[_Placement]) -> Self:
        """A tensor holding a copy of the `shape` elements at host address `ptr` (dtype= and device= as keywords)."""
        import ctypes

        from tinycore.engine.memory import uop_from_bytes
        dtype = optional_dtype(kwargs.pop("dtype", None)) or dtypes.default_float
        sizes = check_shape(shape)
        data = ctypes.string_at(ptr, math.prod(sizes) * dtype.itemsize)
        node = uop_from_bytes(data, dtype, _device_of(kwargs.pop("device", None))).reshape(sizes)
        return cls._wrap(node)

    @classmethod
    def from_url(cls, url: str, **kwargs: Unpack[_Like]) -> Self:
        """A uint8 tensor of the bytes at `url`."""
        import urllib.request
        with urllib.request.urlopen(url) as response:
            return cls(response.read(), **kwargs)

    @classmethod
    def invalids(cls, *shape: _Shape, device: str | None = None, dtype: DTypeLike | None = None) -> Self:
        """A tensor whose values must not be read before they are written (uninitialised memory)."""
        return cls.empty(*shape, device=device, dtype=dtype)
