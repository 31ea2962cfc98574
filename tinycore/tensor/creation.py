"""Tensor creation: constants, ranges, identity, and the counter-based random number generator."""
from __future__ import annotations

import functools
import math
import time
from typing import TYPE_CHECKING, Any, ClassVar

from tinycore.dtype import ConstType, DTypeLike, dtypes, to_dtype
from tinycore.tensor.support import argfix, check_shape, optional_dtype, product
from tinycore.uop.uop import UOp

if TYPE_CHECKING:
    from tinycore.tensor.tensor import Tensor

# Threefry-2x32 with 20 rounds (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", 2011).
_THREEFRY_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_THREEFRY_PARITY = 0x1BD11BDA
_MASK32 = 0xFFFFFFFF


def _device_of(device: str | None) -> str:
    """The canonical device name for `device` (default device for None)."""
    from tinycore.tensor.tensor import canonical_device
    return canonical_device(device)


def _creates_leaf(method: Any) -> Any:
    """Marks what a creation class method returns as a leaf tensor (see Tensor._mark_leaf)."""
    @functools.wraps(method)
    def create(cls: Any, *args: Any, **kwargs: Any) -> Any:
        return method(cls, *args, **kwargs)._mark_leaf()
    return create


@functools.lru_cache(maxsize=64)
def _index_buffer(count: int, device: str) -> UOp:
    """A realized int32 buffer holding 0, 1, ..., count-1 on `device` (cached: ranges are built from it)."""
    import array

    from tinycore.engine.memory import uop_from_bytes
    if count >= 2 ** 31:
        raise ValueError(f"arange of {count} elements does not fit int32 indices")
    values = array.array("i", range(count))
    return uop_from_bytes(values.tobytes(), dtypes.int32, device)


class CreationMixin:
    """Constructors (class methods) and *_like methods of Tensor."""

    _seed: ClassVar[int | None] = None
    _rng_counter: ClassVar[int] = 0

    # ---- constants ----

    @classmethod
    @_creates_leaf
    def full(cls, shape: Any, fill_value: ConstType, dtype: DTypeLike | None = None, device: str | None = None,
             requires_grad: bool | None = None, **_: Any) -> Tensor:
        """A tensor of `shape` filled with `fill_value` (dtype from the value when not given)."""
        sizes = check_shape(argfix(shape) if not isinstance(shape, int) else (shape,))
        if not isinstance(fill_value, (int, float, bool)):
            raise TypeError(f"fill_value must be a Python number, got {type(fill_value).__name__}")
        target = optional_dtype(dtype) or dtypes.from_py(fill_value)
        result = cls._wrap(UOp.const_on(target, fill_value, _device_of(device), sizes))  # type: ignore[attr-defined]
        if requires_grad is not None:
            result.requires_grad = requires_grad
        return result

    @classmethod
    def zeros(cls, *shape: Any, dtype: DTypeLike | None = None, device: str | None = None, **kw: Any) -> Tensor:
        """A tensor of zeros (default float dtype)."""
        return cls.full(argfix(*shape), 0, dtype or dtypes.default_float, device, **kw)

    @classmethod
    def ones(cls, *shape: Any, dtype: DTypeLike | None = None, device: str | None = None, **kw: Any) -> Tensor:
        """A tensor of ones (default float dtype)."""
        return cls.full(argfix(*shape), 1, dtype or dtypes.default_float, device, **kw)

    @classmethod
    @_creates_leaf
    def empty(cls, *shape: Any, device: str | None = None, dtype: DTypeLike | None = None,
              requires_grad: bool | None = None, **_: Any) -> Tensor:
        """A tensor whose contents are not initialised (a new buffer)."""
        from tinycore.uop.buffer import new_buffer_uop
        sizes = check_shape(argfix(*shape))
        target = optional_dtype(dtype) or dtypes.default_float
        largest = tuple(size if isinstance(size, int) else int(size.vmax) for size in sizes)
        node = new_buffer_uop(_device_of(device), target, product(largest)).reshape(largest)
        if largest != sizes:
            node = node.shrink(tuple((0, size) for size in sizes))
        return cls._wrap(node, requires_grad)  # type: ignore[attr-defined]

    def full_like(self: Any, fill_value: ConstType, dtype: DTypeLike | None = None, device: str | None = None,
                  **kw: Any) -> Tensor:
        """A tensor shaped like this one filled with `fill_value` (this tensor's dtype and device by default)."""
        return type(self).full(self.shape, fill_value, dtype or self.dtype, device or self.device, **kw)

    def zeros_like(self: Any, **kwargs: Any) -> Tensor:
        """Zeros shaped like this tensor."""
        return self.full_like(0, **kwargs)

    def ones_like(self: Any, **kwargs: Any) -> Tensor:
        """Ones shaped like this tensor."""
        return self.full_like(1, **kwargs)

    def empty_like(self: Any, dtype: DTypeLike | None = None, device: str | None = None) -> Tensor:
        """An uninitialised tensor shaped like this one."""
        return type(self).empty(self.shape, dtype=dtype or self.dtype, device=device or self.device)

    # ---- ranges ----

    @classmethod
    def _indices(cls, count: int, device: str | None = None) -> Tensor:
        """0, 1, ..., count-1 as int32."""
        if count == 0:
            return cls.full((0,), 0, dtypes.int32, device)
        return cls._wrap(_index_buffer(count, _device_of(device)))  # type: ignore[attr-defined]

    @classmethod
    @_creates_leaf
    def arange(cls, start: int | float, stop: int | float | None = None, step: int | float = 1,
               dtype: DTypeLike | None = None, device: str | None = None, **_: Any) -> Tensor:
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
        indices = cls._indices(count, device)
        if dtypes.is_float(target):
            return (indices.cast(target) * step + start).cast(target)  # type: ignore[attr-defined]
        result = (indices * step + start).cast(target) if (step, start) != (1, 0) else indices.cast(target)
        return result

    @classmethod
    @_creates_leaf
    def linspace(cls, start: int | float, stop: int | float, steps: int, dtype: DTypeLike | None = None,
                 device: str | None = None) -> Tensor:
        """`steps` evenly spaced values from `start` to `stop`, both included."""
        if not isinstance(steps, int) or steps < 0:
            raise ValueError(f"linspace steps must be a non-negative int, got {steps!r}")
        target = optional_dtype(dtype) or dtypes.default_float
        if steps == 1:
            return cls.full((1,), start, target, device)
        delta = (stop - start) / (steps - 1) if steps > 1 else 0.0
        values = cls._indices(steps, device).cast(dtypes.float32) * delta + start
        return values.cast(target)

    @classmethod
    @_creates_leaf
    def eye(cls, n: int, m: int | None = None, dtype: DTypeLike | None = None, device: str | None = None) -> Tensor:
        """The `n` x `m` identity matrix."""
        columns = n if m is None else m
        check_shape((n, columns))
        rows = cls._indices(n, device).reshape(n, 1)
        return (rows == cls._indices(columns, device).reshape(1, columns)).cast(optional_dtype(dtype) or
                                                                                  dtypes.default_float)

    # ---- random ----

    @staticmethod
    def manual_seed(seed: int = 0) -> None:
        """Seed the random number generator: the same seed gives the same numbers on every device."""
        CreationMixin._seed = int(seed)
        CreationMixin._rng_counter = 0

    @classmethod
    def _next_key(cls) -> tuple[int, int]:
        """The (key0, key1) pair of the next random call."""
        if CreationMixin._seed is None:
            CreationMixin._seed = int(time.time())
        counter = CreationMixin._rng_counter
        CreationMixin._rng_counter += 1
        return CreationMixin._seed & _MASK32, (counter + ((CreationMixin._seed >> 32) << 16)) & _MASK32

    @staticmethod
    def _threefry(word0: Tensor, word1: Tensor, key0: int, key1: int) -> tuple[Tensor, Tensor]:
        """Threefry-2x32-20 of the uint32 counter words (word0, word1) under the key (key0, key1)."""
        keys = (key0 & _MASK32, key1 & _MASK32, (key0 ^ key1 ^ _THREEFRY_PARITY) & _MASK32)
        word0, word1 = word0 + keys[0], word1 + keys[1]
        for block in range(5):
            for rotation in _THREEFRY_ROTATIONS[block % 2]:
                word0 = word0 + word1
                word1 = ((word1 << rotation) | (word1 >> (32 - rotation))) ^ word0
            word0 = word0 + keys[(block + 1) % 3]
            word1 = word1 + ((keys[(block + 2) % 3] + block + 1) & _MASK32)
        return word0, word1

    @classmethod
    def _random_bits(cls, count: int, device: str | None) -> Tensor:
        """`count` random uint32 values from the generator."""
        key0, key1 = cls._next_key()
        counters = cls._indices(count, device).bitcast(dtypes.uint32)  # type: ignore[attr-defined]
        bits, _ = cls._threefry(counters, counters._const(0), key0, key1)  # type: ignore[attr-defined]
        return bits

    @classmethod
    @_creates_leaf
    def rand(cls, *shape: Any, device: str | None = None, dtype: DTypeLike | None = None, contiguous: bool = True,
             requires_grad: bool | None = None, **_: Any) -> Tensor:
        """Uniform random values in [0, 1)."""
        sizes = check_shape(argfix(*shape))
        target = optional_dtype(dtype) or dtypes.default_float
        if not dtypes.is_float(target):
            raise TypeError(f"rand needs a floating point dtype, got {target}")
        mantissa = min(dtypes.finfo(target)[1] + 1, 32)
        bits = cls._random_bits(product(sizes), device)
        compute = dtypes.float64 if mantissa > 24 else dtypes.float32
        values = (bits >> (32 - mantissa)).cast(compute) * (2.0 ** -mantissa)
        result = values.cast(target).reshape(sizes)
        if contiguous:
            result = result.contiguous()
        if requires_grad is not None:
            result.requires_grad = requires_grad
        return result

    def rand_like(self: Any, **kwargs: Any) -> Tensor:
        """Uniform random values shaped like this tensor."""
        kwargs.setdefault("dtype", self.dtype if dtypes.is_float(self.dtype) else None)
        kwargs.setdefault("device", self.device)
        return type(self).rand(*self.shape, **kwargs)

    @classmethod
    @_creates_leaf
    def randn(cls, *shape: Any, dtype: DTypeLike | None = None, requires_grad: bool | None = None,
              **kwargs: Any) -> Tensor:
        """Standard normal random values (Box-Muller transform of uniform values)."""
        sizes = check_shape(argfix(*shape))
        uniform = cls.rand(2, *sizes, dtype=dtypes.float32, contiguous=False, **kwargs)
        radius = (1 - uniform[0]).log().mul(-2).sqrt()  # type: ignore[attr-defined]
        result = (radius * (uniform[1] * (2 * math.pi)).cos()).cast(optional_dtype(dtype) or dtypes.default_float)
        result = result.contiguous()
        if requires_grad is not None:
            result.requires_grad = requires_grad
        return result

    def randn_like(self: Any, dtype: DTypeLike | None = None, **kwargs: Any) -> Tensor:
        """Standard normal values shaped like this tensor."""
        kwargs.setdefault("device", self.device)
        return type(self).randn(*self.shape, dtype=dtype or (self.dtype if dtypes.is_float(self.dtype) else None),
                                **kwargs)

    @classmethod
    def randint(cls, *shape: Any, low: int = 0, high: int = 10, dtype: DTypeLike = dtypes.int32,
                **kwargs: Any) -> Tensor:
        """Random integers in [low, high)."""
        if not isinstance(low, int) or not isinstance(high, int) or high <= low:
            raise ValueError(f"randint needs int bounds with low < high, got low={low!r}, high={high!r}")
        target = to_dtype(dtype)
        if not dtypes.is_int(target):
            raise TypeError(f"randint needs an integer dtype, got {target}")
        values = cls.rand(*shape, dtype=dtypes.float64 if high - low > 2 ** 24 else dtypes.float32, **kwargs)
        return (values * (high - low)).floor().cast(dtypes.int64).add(low).cast(target)

    @classmethod
    @_creates_leaf
    def normal(cls, *shape: Any, mean: float = 0.0, std: float = 1.0, requires_grad: bool | None = None,
               **kwargs: Any) -> Tensor:
        """Normal random values with the given mean and standard deviation."""
        result = (std * cls.randn(*shape, **kwargs) + mean)
        if requires_grad is not None:
            result.requires_grad = requires_grad
        return result

    @classmethod
    @_creates_leaf
    def uniform(cls, *shape: Any, low: float = 0.0, high: float = 1.0, dtype: DTypeLike | None = None,
                requires_grad: bool | None = None, **kwargs: Any) -> Tensor:
        """Uniform random values in [low, high)."""
        target = optional_dtype(dtype) or dtypes.default_float
        result = ((high - low) * cls.rand(*shape, **kwargs) + low).cast(target)
        if requires_grad is not None:
            result.requires_grad = requires_grad
        return result

    @classmethod
    @_creates_leaf
    def scaled_uniform(cls, *shape: Any, **kwargs: Any) -> Tensor:
        """Uniform in [-1, 1) scaled by 1/sqrt(number of elements)."""
        sizes = argfix(*shape)
        return cls.uniform(*sizes, low=-1.0, high=1.0, **kwargs).mul(max(product(sizes), 1) ** -0.5)

    @classmethod
    @_creates_leaf
    def glorot_uniform(cls, *shape: Any, **kwargs: Any) -> Tensor:
        """Glorot (Xavier) uniform initialisation: bound sqrt(6 / (fan_in + fan_out))."""
        sizes = argfix(*shape)
        bound = math.sqrt(6 / max(sizes[0] + product(sizes[1:]), 1))
        return cls.uniform(*sizes, low=-1.0, high=1.0, **kwargs).mul(bound)

    @classmethod
    @_creates_leaf
    def kaiming_uniform(cls, *shape: Any, a: float = 0.01, **kwargs: Any) -> Tensor:
        """He uniform initialisation for a leaky ReLU of slope `a`: bound sqrt(3) * gain / sqrt(fan_in)."""
        sizes = argfix(*shape)
        bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(max(product(sizes[1:]), 1))
        return cls.uniform(*sizes, low=-bound, high=bound, **kwargs)

    @classmethod
    @_creates_leaf
    def kaiming_normal(cls, *shape: Any, a: float = 0.01, **kwargs: Any) -> Tensor:
        """He normal initialisation: standard deviation gain / sqrt(fan_in)."""
        sizes = argfix(*shape)
        std = math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(max(product(sizes[1:]), 1))
        return cls.normal(*sizes, mean=0.0, std=std, **kwargs)

    @classmethod
    def randperm(cls, n: int, device: str | None = None, dtype: DTypeLike = dtypes.int32, **kwargs: Any) -> Tensor:
        """A random permutation of 0..n-1."""
        return cls.rand(n, device=device, **kwargs).argsort().cast(to_dtype(dtype))  # type: ignore[attr-defined]

    def multinomial(self: Any, num_samples: int = 1, replacement: bool = False) -> Tensor:
        """Indices sampled from the (unnormalised) probabilities along the last axis of a 1-D or 2-D tensor."""
        if not 1 <= self.ndim <= 2:
            raise ValueError(f"multinomial needs a 1-D or 2-D tensor of weights, got shape {self.shape}")
        if not replacement and num_samples != 1:
            raise ValueError("multinomial without replacement supports only num_samples=1")
        weights = self.unsqueeze(0) if self.ndim == 1 else self
        cumulative = weights.float().cumsum(1)
        cumulative = (cumulative / cumulative[:, -1:]).unsqueeze(1)
        draws = type(self).rand(weights.shape[0], num_samples, 1, device=self.device)
        samples = (cumulative < draws).sum(2).cast(dtypes.int32).minimum(weights.shape[1] - 1)
        return samples.squeeze(0) if self.ndim == 1 else samples

    @classmethod
    @_creates_leaf
    def from_blob(cls, ptr: int, shape: tuple[int, ...], **kwargs: Any) -> Tensor:
        """A tensor holding a copy of the `shape` elements at host address `ptr` (dtype= and device= as keywords)."""
        import ctypes

        from tinycore.engine.memory import uop_from_bytes
        dtype = optional_dtype(kwargs.pop("dtype", None)) or dtypes.default_float
        sizes = check_shape(shape)
        data = ctypes.string_at(ptr, product(sizes) * dtype.itemsize)
        node = uop_from_bytes(data, dtype, _device_of(kwargs.pop("device", None))).reshape(sizes)
        return cls._wrap(node)  # type: ignore[attr-defined]

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> Tensor:
        """A uint8 tensor of the bytes at `url`."""
        import urllib.request
        with urllib.request.urlopen(url) as response:
            return cls(response.read(), **kwargs)  # type: ignore[call-arg,return-value]

    @classmethod
    def invalids(cls, *shape: Any, device: str | None = None, dtype: DTypeLike | None = None) -> Tensor:
        """A tensor whose values must not be read before they are written (uninitialised memory)."""
        return cls.empty(*shape, device=device, dtype=dtype)
