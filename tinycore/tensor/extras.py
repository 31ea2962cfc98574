"""Tensor extras: public random-bit generation, Keccak/SHA-3 hashing, `const`, image-layout aliases of conv2d/dot,
sharding over several devices, and clear errors for the names whose features (parameters slots, custom kernels,
video decoding) the engine does not provide."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn

from tinycore.dtype import ConstType, DTypeLike, dtypes
from tinycore.tensor.support import optional_dtype

if TYPE_CHECKING:
    from tinycore.tensor.tensor import Tensor

_MASK32 = 0xFFFFFFFF
_MASK64 = 0xFFFFFFFFFFFFFFFF

# Keccak-f[1600] round constants (FIPS 202, section 3.2.5), computed from the LFSR rc(t).


def _round_constants() -> list[int]:
    """The 24 iota round constants of Keccak-f[1600]."""
    state = 1
    bits: list[int] = []
    for _ in range(24 * 7):
        bits.append(state & 1)
        state = ((state << 1) ^ (0x171 if state & 0x80 else 0)) & 0xFF
    constants = []
    for round_index in range(24):
        value = 0
        for j in range(7):
            if bits[7 * round_index + j]:
                value |= 1 << ((1 << j) - 1)
        constants.append(value)
    return constants


def _rotation_offsets() -> list[int]:
    """The rho rotation offset of each lane, indexed x + 5*y (FIPS 202, section 3.2.2)."""
    offsets = [0] * 25
    x, y = 1, 0
    for step in range(24):
        offsets[x + 5 * y] = ((step + 1) * (step + 2) // 2) % 64
        x, y = y, (2 * x + 3 * y) % 5
    return offsets


def _pi_source() -> list[int]:
    """For each destination lane of the pi step, the lane it is taken from: B[y, 2x+3y] = A[x, y]."""
    source = [0] * 25
    for x in range(5):
        for y in range(5):
            source[y + 5 * ((2 * x + 3 * y) % 5)] = x + 5 * y
    return source


_ROUND_CONSTANTS = _round_constants()
_ROTATIONS = _rotation_offsets()
_PI_SOURCE = _pi_source()
# name -> (rate in bytes, domain separation suffix, output length in bytes)
_KECCAK_CONFIGS = {
    "sha3_224": (144, 0x06, 28), "sha3_256": (136, 0x06, 32), "sha3_384": (104, 0x06, 48),
    "sha3_512": (72, 0x06, 64), "shake_128": (168, 0x1F, 16), "shake_256": (136, 0x1F, 32),
}


def _not_available(name: str, missing: str, advice: str) -> NoReturn:
    """Raise the error of a Tensor feature the engine does not provide."""
    raise NotImplementedError(f"Tensor.{name} is not available in tinycore: {missing}. {advice}")


class ExtrasMixin:
    """Random bits, hashing, const, image aliases and the unsupported-feature methods of Tensor."""

    # ---- random bits ----

    def threefry(self: Any, seed: Tensor) -> Tensor:
        """Threefry-2x32-20 of this uint64 counter tensor under the uint64 key `seed` (low word is key 0).

        Each 64-bit counter is split into its low and high 32-bit words, encrypted, and the two output words are
        joined again (low word first) into a uint64 result.
        """
        if self.dtype != dtypes.uint64:
            raise TypeError(f"threefry needs a uint64 counter tensor, got {self.dtype}: "
                            "cast it with .cast(dtypes.uint64)")
        key = seed.cast(dtypes.uint64)
        key0, key1 = (key & _MASK32).cast(dtypes.uint32), (key >> 32).cast(dtypes.uint32)
        low, high = (self & _MASK32).cast(dtypes.uint32), (self >> 32).cast(dtypes.uint32)
        out_low, out_high = type(self)._threefry(low, high, key0, key1)
        return out_low.cast(dtypes.uint64) | (out_high.cast(dtypes.uint64) << 32)

    @classmethod
    def random_bits(cls, key: Tensor, counter: Tensor, num: int) -> Tensor:
        """`num` uint32 words of the Threefry stream with the uint32 `key` (two words) from the 64-bit `counter`
        (two uint32 words, low first), as tinygrad's `Tensor.random_bits` (the stream `rand` draws from).
        """
        if not isinstance(num, int) or num < 0:
            raise ValueError(f"random_bits num must be a non-negative int, got {num!r}")
        if tuple(key.shape) != (2,) or tuple(counter.shape) != (2,):
            raise ValueError(f"random_bits needs a key and a counter of shape (2,) (uint32 words, low first), got "
                             f"key {key.shape} and counter {counter.shape}")
        key, counter = key.cast(dtypes.uint32), counter.cast(dtypes.uint32)
        derived = cls._derived_keys(key[0:1], key[1:2], counter[0:1], counter[1:2], num)  # type: ignore[attr-defined]
        return cls._stream_words(derived, num, key.device)  # type: ignore[attr-defined]

    # ---- hashing ----

    def keccak(self: Any, cfg: str | tuple[int, int] = "sha3_256") -> Tensor:
        """Keccak hash of the uint8 bytes along the last dimension (SHA-3 "sha3_256" by default).

        `cfg` is a name (sha3_224, sha3_256, sha3_384, sha3_512, shake_128, shake_256) or a (rate in bytes,
        domain suffix byte) pair; the output is uint8 with the digest length in the last dimension.
        """
        if isinstance(cfg, str):
            if cfg not in _KECCAK_CONFIGS:
                raise ValueError(f"unknown keccak configuration {cfg!r}: use one of {sorted(_KECCAK_CONFIGS)} "
                                 "or a (rate, suffix) pair")
            rate, suffix, out_length = _KECCAK_CONFIGS[cfg]
        else:
            rate, suffix = cfg
            out_length = (200 - rate) // 2
        if rate % 8 != 0 or not 0 < rate < 200:
            raise ValueError(f"keccak rate must be a multiple of 8 bytes below 200, got {rate}")
        if self.dtype != dtypes.uint8 or self.ndim == 0:
            raise TypeError(f"keccak hashes uint8 data along the last dimension, got {self.dtype} of shape "
                            f"{self.shape}: bitcast the data to uint8 first")
        return self._keccak_bytes(rate, suffix, out_length)

    def _keccak_bytes(self: Any, rate: int, suffix: int, out_length: int) -> Tensor:
        """The sponge construction over uint8 rows: pad, absorb block by block, squeeze `out_length` bytes."""
        tensor_type = type(self)
        batch, length = tuple(self.shape[:-1]), int(self.shape[-1])
        padding = [0] * (rate - length % rate)
        padding[0] ^= suffix
        padding[-1] ^= 0x80
        pad_tensor = tensor_type(padding, dtype=dtypes.uint8, device=self.device).reshape((1,) * len(batch) + (-1,))
        data = self.cat(pad_tensor.expand(*batch, len(padding)), dim=-1)
        blocks = data.shape[-1] // rate
        shifts = tensor_type([8 * i for i in range(8)], dtype=dtypes.uint64, device=self.device)
        lanes = (data.reshape(*batch, blocks, rate // 8, 8).cast(dtypes.uint64) << shifts).sum(-1, dtype=dtypes.uint64)
        lanes = lanes.pad(((0, 0),) * (len(batch) + 1) + ((0, 25 - rate // 8),))
        state = tensor_type.zeros(*batch, 25, dtype=dtypes.uint64, device=self.device)
        tables = _KeccakTables(tensor_type, self.device)
        round_constants = [tensor_type([constant] + [0] * 24, dtype=dtypes.uint64, device=self.device)
                           for constant in _ROUND_CONSTANTS]
        for block in range(blocks):
            state = (state ^ lanes[..., block, :]).contiguous()
            for round_constant in round_constants:
                state = _keccak_round(state, tables, round_constant).realize()
        out_lanes = (out_length + 7) // 8
        squeezed = (state[..., :out_lanes].unsqueeze(-1) >> shifts) & 0xFF
        return squeezed.cast(dtypes.uint8).reshape(*batch, out_lanes * 8)[..., :out_length]

    def hash(self: Any) -> Tensor:
        """A 16-byte hash of the tensor's contents: the first 16 bytes of SHA3-256 over its raw bytes."""
        flat = self.flatten() if self.ndim else self.reshape(1)
        size = self.dtype.itemsize
        if self.dtype == dtypes.bool:
            flat = flat.cast(dtypes.uint8)
        unsigned = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}.get(size)
        if unsigned is None:
            raise TypeError(f"hash cannot take the bytes of {self.dtype} ({size} bytes per element)")
        words = flat.bitcast(unsigned) if flat.dtype != unsigned else flat
        shifts = type(self)([8 * i for i in range(size)], dtype=unsigned, device=self.device)
        raw = ((words.unsqueeze(-1) >> shifts) & 0xFF).cast(dtypes.uint8).flatten()
        return raw.keccak("sha3_256")[:16]

    # ---- constants and image aliases ----

    @classmethod
    def const(cls, b: ConstType, dtype: DTypeLike | None = None) -> Tensor:
        """A 0-d tensor holding the Python number `b` (dtype from the value when not given)."""
        if not isinstance(b, (bool, int, float)):
            raise TypeError(f"Tensor.const needs a Python number, got {type(b).__name__}: use Tensor(...) for data")
        return cls.full((), b, optional_dtype(dtype))  # type: ignore[attr-defined]

    def image_conv2d(self: Any, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride: Any = 1,
                     dilation: Any = 1, padding: Any = 0, dtype: DTypeLike | None = None) -> Tensor:
        """2D convolution with the image-texture argument layout (NCHW input, OIHW weight); same math as conv2d."""
        result = self.conv2d(weight, bias, groups=groups, stride=stride, dilation=dilation, padding=padding)
        return result.cast(dtype) if dtype is not None else result

    def image_dot(self: Any, w: Tensor, dtype: DTypeLike | None = None) -> Tensor:
        """Matrix product computed as for image-texture devices; same math as dot."""
        return self.dot(w, dtype=dtype)

    # ---- features the engine does not provide ----

    def as_param(self: Any, slot: int) -> Tensor:
        """Not available: marking a tensor as a function parameter slot needs the function-call engine."""
        _not_available("as_param", "the engine has no parameter slots for callable graphs",
                       "Pass tensors as ordinary inputs to a TinyJit-decorated function instead")

    @property
    def is_param(self: Any) -> bool:
        """Whether this tensor is a parameter slot: never, since the engine has no parameter slots."""
        return False

    def is_param_(self: Any, *args: Any, **kwargs: Any) -> Tensor:
        """Not available: parameter slots need the function-call engine."""
        _not_available("is_param_", "the engine has no parameter slots for callable graphs",
                       "Pass tensors as ordinary inputs to a TinyJit-decorated function instead")

    def linear_with_vars(self: Any, *lst: Tensor) -> NoReturn:
        """Not available: the engine exposes no LINEAR program graph."""
        _not_available("linear_with_vars", "the engine does not expose a linearized program graph",
                       "Call .realize() on the tensors, or use TinyJit to capture and replay the kernels")

    def schedule_linear(self: Any, *lst: Tensor) -> NoReturn:
        """Not available: the engine exposes no LINEAR schedule graph."""
        _not_available("schedule_linear", "the engine does not expose a linearized schedule graph",
                       "Call .realize() on the tensors, or use TinyJit to capture and replay the kernels")

    def call(self: Any, *lst: Tensor, fxn: Any = None, grad_fxn: Any = None) -> NoReturn:
        """Not available: calling a graph function needs the function-call engine."""
        _not_available("call", "the engine cannot call a graph function on tensors",
                       "Apply the Python function to the tensors directly, or wrap it in TinyJit")

    def callify(self: Any, *lst: Tensor) -> NoReturn:
        """Not available: turning tensors into a callable graph needs the function-call engine."""
        _not_available("callify", "the engine cannot turn a tensor graph into a callable",
                       "Wrap the computation in a TinyJit-decorated function instead")

    def custom_kernel(self: Any, *lst: Tensor, fxn: Any = None, grad_fxn: Any = None) -> NoReturn:
        """Not available: user-written UOp kernels are not accepted by the scheduler."""
        _not_available("custom_kernel", "the scheduler does not accept user-written UOp kernels",
                       "Express the computation with Tensor operations")

    def shard(self: Any, devices: tuple[str, ...], axis: int | None = None) -> Tensor:
        """This tensor over several devices: split into equal blocks along `axis` (device i holds block i), or
        copied whole to every device when `axis` is None. Operations then run on every device's part."""
        from tinycore.tensor.support import resolve_axis
        from tinycore.tensor.tensor import canonical_device
        from tinycore.uop.multi import shard
        from tinycore.uop.ops import Ops
        if not isinstance(devices, (tuple, list)):
            raise TypeError(f"shard needs a tuple of devices, got {type(devices).__name__} {devices!r}")
        names = canonical_device(tuple(devices))
        if self.uop.op is Ops.MULTI:
            raise RuntimeError(f"this tensor is already on {self.device}: gather it with .to(device) before sharding "
                               "it again")
        dim = None if axis is None else resolve_axis(axis, self.ndim)
        return self._result(shard(self.uop, names, dim))

    def shard_(self: Any, devices: tuple[str, ...], axis: int | None = None) -> Tensor:
        """Shard this tensor in place (see shard); returns self."""
        return self.replace(self.shard(devices, axis))

    def shard_like(self: Any, y: Tensor) -> Tensor:
        """This tensor sharded as `y` is (same devices, same axis); itself when it already is."""
        from tinycore.uop.ops import Ops
        if y.uop.op is not Ops.MULTI:
            raise ValueError(f"shard_like needs a multi-device tensor to copy the sharding of, got one on {y.device}")
        if self.uop.op is Ops.MULTI and (self.device, self.uop.arg) == (y.device, y.uop.arg):
            return self
        return self.shard(y.device, y.uop.arg)

    def decode_hevc_frame(self: Any, frame_pos: Any, shape: tuple[int, ...], state: Tensor,
                          ref_frames: list[Tensor] | None = None) -> NoReturn:
        """Not available: decoding HEVC needs a hardware video decoder, which no device plugin provides."""
        _not_available("decode_hevc_frame", "no device plugin drives a hardware HEVC video decoder",
                       "Decode the video on the host (for example with ffmpeg) and build a Tensor from the frames")


def _rotate_left(lanes: Tensor, amounts: Tensor) -> Tensor:
    """Rotate uint64 lanes left by per-lane amounts in 0..63 (an amount of 0 leaves the lane unchanged)."""
    rotated = (lanes << amounts) | (lanes >> ((64 - amounts) & 63))
    return (amounts == 0).where(lanes, rotated)


def _lane_gather_matrix(source: list[int]) -> list[list[int]]:
    """A 25x25 0/1 matrix M with (lanes @ M)[dest] = lanes[source[dest]]: lane gathers as exact uint64 matmuls."""
    return [[1 if source[dest] == src else 0 for dest in range(25)] for src in range(25)]


_LANES = [(x, y) for y in range(5) for x in range(5)]
_GATHER_PREVIOUS_COLUMN = _lane_gather_matrix([(x - 1) % 5 + 5 * y for x, y in _LANES])
_GATHER_NEXT_COLUMN = _lane_gather_matrix([(x + 1) % 5 + 5 * y for x, y in _LANES])
_GATHER_PI = _lane_gather_matrix(_PI_SOURCE)


class _KeccakTables:
    """The per-device uint64 tables of a Keccak-f[1600] round (rotation amounts and lane gather matrices)."""

    def __init__(self, tensor_type: Any, device: str):
        def table(values: list[Any]) -> Tensor:
            return tensor_type(values, dtype=dtypes.uint64, device=device)
        self.rotations = table(_ROTATIONS)
        self.previous_column = table(_GATHER_PREVIOUS_COLUMN)
        self.next_column = table(_GATHER_NEXT_COLUMN)
        self.pi = table(_GATHER_PI)


def _keccak_round(state: Tensor, tables: _KeccakTables, round_constant: Tensor) -> Tensor:
    """One Keccak-f[1600] round (theta, rho, pi, chi, iota) on uint64 states of shape (..., 25), lane x + 5y."""
    batch = tuple(state.shape[:-1])
    grid = state.reshape(*batch, 5, 5)  # [y, x]
    columns = grid[..., 0, :] ^ grid[..., 1, :] ^ grid[..., 2, :] ^ grid[..., 3, :] ^ grid[..., 4, :]
    column_lanes = columns.unsqueeze(-2).expand(*batch, 5, 5).reshape(*batch, 25)
    previous = column_lanes.dot(tables.previous_column)
    following = column_lanes.dot(tables.next_column)
    mixed = state ^ previous ^ ((following << 1) | (following >> 63))
    permuted = _rotate_left(mixed, tables.rotations).dot(tables.pi)
    next_lane = permuted.dot(tables.next_column)
    after_next = next_lane.dot(tables.next_column)
    return permuted ^ ((~next_lane) & after_next) ^ round_constant


def function(*args: Any, **kwargs: Any) -> NoReturn:
    """Not available: graph functions with parameter slots need the function-call engine."""
    raise NotImplementedError("tinycore.function is not available: the engine cannot compile a Python function into "
                              "a callable graph with parameter slots. Use tinycore.TinyJit to capture and replay it")
