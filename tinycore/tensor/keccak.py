"""Keccak-f[1600] and the SHA-3 / SHAKE sponge as Tensor operations (`Tensor.keccak`, `Tensor.hash`), computed on
the tensor's device with uint64 lanes (FIPS 202)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Generic, TypeVar

from tinycore.dtype import dtypes
from tinycore.tensor.linalg import LinalgMixin

if TYPE_CHECKING:
    from typing import Self


TensorT = TypeVar("TensorT", bound="KeccakMixin")
"""A tensor of the chain class whose methods these helpers call (the Tensor, at run time)."""

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


class KeccakMixin(LinalgMixin):
    """Keccak hashing of Tensor bytes."""


    def keccak(self, cfg: str | tuple[int, int] = "sha3_256") -> Self:
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

    def _keccak_bytes(self, rate: int, suffix: int, out_length: int) -> Self:
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

    def hash(self) -> Self:
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


def _rotate_left(lanes: TensorT, amounts: TensorT) -> TensorT:
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


class _KeccakTables(Generic[TensorT]):
    """The per-device uint64 tables of a Keccak-f[1600] round (rotation amounts and lane gather matrices)."""

    def __init__(self, tensor_type: type[TensorT], device: str):
        def table(values: list[int] | list[list[int]]) -> TensorT:
            return tensor_type(values, dtype=dtypes.uint64, device=device)
        self.rotations = table(_ROTATIONS)
        self.previous_column = table(_GATHER_PREVIOUS_COLUMN)
        self.next_column = table(_GATHER_NEXT_COLUMN)
        self.pi = table(_GATHER_PI)


def _keccak_round(state: TensorT, tables: _KeccakTables[TensorT], round_constant: TensorT) -> TensorT:
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
