"""Tensor extras: public random-bit generation, `const`, image-layout aliases of conv2d/dot, sharding over several
devices, and, kept together with the reason each gives, the names whose features (parameter slots, custom kernels,
video decoding) the engine does not provide. Keccak/SHA-3 hashing is in keccak.py."""
from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn

from tinycore.dtype import ConstType, DTypeLike, dtypes
from tinycore.tensor.base import canonical_device
from tinycore.tensor.keccak import KeccakMixin
from tinycore.tensor.support import optional_dtype

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Self

    from tinycore.engine.linear import LinearSchedule
    from tinycore.uop.uop import UOp

_MASK32 = 0xFFFFFFFF

def _not_available(name: str, missing: str, advice: str) -> NoReturn:
    """Raise the error of a Tensor feature the engine does not provide."""
    raise NotImplementedError(f"Tensor.{name} is not available in tinycore: {missing}. {advice}")


class ExtrasMixin(KeccakMixin):
    """Random bits, const, image aliases and the unsupported-feature methods of Tensor."""

    # ---- random bits ----

    def threefry(self, seed: Self) -> Self:
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
    def random_bits(cls, key: Self, counter: Self, num: int) -> Self:
        """`num` uint32 words of the Threefry stream with the uint32 `key` (two words) from the 64-bit `counter`
        (two uint32 words, low first), as tinygrad's `Tensor.random_bits` (the stream `rand` draws from).
        """
        if not isinstance(num, int) or num < 0:
            raise ValueError(f"random_bits num must be a non-negative int, got {num!r}")
        if tuple(key.shape) != (2,) or tuple(counter.shape) != (2,):
            raise ValueError(f"random_bits needs a key and a counter of shape (2,) (uint32 words, low first), got "
                             f"key {key.shape} and counter {counter.shape}")
        key, counter = key.cast(dtypes.uint32), counter.cast(dtypes.uint32)
        derived = cls._derived_keys(key[0:1], key[1:2], counter[0:1], counter[1:2], num)
        return cls._stream_words(derived, num, key.device)

    # ---- constants and image aliases ----

    @classmethod
    def const(cls, b: ConstType, dtype: DTypeLike | None = None) -> Self:
        """A 0-d tensor holding the Python number `b` (dtype from the value when not given)."""
        if not isinstance(b, (bool, int, float)):
            raise TypeError(f"Tensor.const needs a Python number, got {type(b).__name__}: use Tensor(...) for data")
        return cls.full((), b, optional_dtype(dtype))

    def image_conv2d(self, weight: Self, bias: Self | None = None, groups: int = 1,
                     stride: int | Sequence[int] = 1, dilation: int | Sequence[int] = 1,
                     padding: int | Sequence[int] = 0, dtype: DTypeLike | None = None) -> Self:
        """2D convolution with the image-texture argument layout (NCHW input, OIHW weight); same math as conv2d."""
        result = self.conv2d(weight, bias, groups=groups, stride=stride, dilation=dilation, padding=padding)
        return result.cast(dtype) if dtype is not None else result

    def image_dot(self, w: Self, dtype: DTypeLike | None = None) -> Self:
        """Matrix product computed as for image-texture devices; same math as dot."""
        return self.dot(w, dtype=dtype)

    # ---- features the engine does not provide ----

    def as_param(self, slot: int) -> Self:
        """Not available: marking a tensor as a function parameter slot needs the function-call engine."""
        _not_available("as_param", "the engine has no parameter slots for callable graphs",
                       "Pass tensors as ordinary inputs to a TinyJit-decorated function instead")

    @property
    def is_param(self) -> bool:
        """Whether optimizers given this tensor train it (tinygrad 0.14's flag): True unless set False with
        `is_param_(False)` or `t.is_param = False`; a tensor with `requires_grad=False` (running statistics,
        counters) is not one unless set True."""
        flag = self.__dict__.get("_is_param")
        return self.requires_grad is not False if flag is None else flag

    @is_param.setter
    def is_param(self, flag: bool) -> None:
        self.__dict__["_is_param"] = bool(flag)

    def is_param_(self, is_param: bool = True) -> Self:
        """Set whether optimizers train this tensor (False: a buffer they only realize); returns self."""
        self.is_param = is_param
        return self

    def linear_with_vars(self, *lst: Self) -> tuple[LinearSchedule, dict[UOp, int]]:
        """The kernels and copies that realize this tensor and `lst`, in order, without running them (see
        tinycore/engine/linear.py), and the values of the Variables they read. The tensors then name the buffers
        the schedule fills: run it with `tinycore.engine.realize.run_linear` before reading them."""
        from tinycore.engine.linear import linear_with_vars
        return linear_with_vars([self, *lst])

    def schedule_linear(self, *lst: Self) -> LinearSchedule:
        """The kernels and copies that realize this tensor and `lst`, in order, without running them (see
        linear_with_vars)."""
        return self.linear_with_vars(*lst)[0]

    def call(self, *lst: Self, fxn: object = None, grad_fxn: object = None) -> NoReturn:
        """Not available: calling a graph function needs the function-call engine."""
        _not_available("call", "the engine cannot call a graph function on tensors",
                       "Apply the Python function to the tensors directly, or wrap it in TinyJit")

    def callify(self, *lst: Self) -> NoReturn:
        """Not available: turning tensors into a callable graph needs the function-call engine."""
        _not_available("callify", "the engine cannot turn a tensor graph into a callable",
                       "Wrap the computation in a TinyJit-decorated function instead")

    def custom_kernel(self, *lst: Self, fxn: object = None, grad_fxn: object = None) -> NoReturn:
        """Not available: user-written UOp kernels are not accepted by the scheduler."""
        _not_available("custom_kernel", "the scheduler does not accept user-written UOp kernels",
                       "Express the computation with Tensor operations")

    def shard(self, devices: tuple[str, ...], axis: int | None = None) -> Self:
        """This tensor over several devices: split into equal blocks along `axis` (device i holds block i), or
        copied whole to every device when `axis` is None. Operations then run on every device's part."""
        from tinycore.tensor.support import resolve_axis
        from tinycore.uop.multi import shard
        from tinycore.uop.ops import Ops
        if not isinstance(devices, (tuple, list)):
            raise TypeError(f"shard needs a tuple of devices, got {type(devices).__name__} {devices!r}")
        names = canonical_device(tuple(devices))
        if self.uop.op is Ops.MULTI:
            raise RuntimeError(f"this tensor is already on {self.device}: gather it with .to(device) before sharding "
                               "it again")
        dim = None if axis is None else resolve_axis(axis, self.ndim)
        # a new tensor, as tinygrad's shard makes: a leaf that backward gives a gradient unless told otherwise
        return self._result(shard(self.uop, names, dim))._mark_leaf()

    def shard_(self, devices: tuple[str, ...], axis: int | None = None) -> Self:
        """Shard this tensor in place (see shard); returns self."""
        return self.replace(self.shard(devices, axis))

    def shard_like(self, y: Self) -> Self:
        """This tensor sharded as `y` is (same devices, same axis), or moved to `y`'s device when `y` is on one;
        itself when it already is."""
        from tinycore.uop.ops import Ops
        if y.uop.op is not Ops.MULTI:  # y lives on one device: so does the result
            return self.to(y.device)
        if self.uop.op is Ops.MULTI and (self.device, self.uop.arg) == (y.device, y.uop.arg):
            return self
        return self.shard(y.device, y.uop.arg)

    def decode_hevc_frame(self, frame_pos: object, shape: tuple[int, ...], state: Self,
                          ref_frames: list[Self] | None = None) -> NoReturn:
        """Not available: decoding HEVC needs a hardware video decoder, which no device plugin provides."""
        _not_available("decode_hevc_frame", "no device plugin drives a hardware HEVC video decoder",
                       "Decode the video on the host (for example with ffmpeg) and build a Tensor from the frames")


def function(*args: object, **kwargs: object) -> NoReturn:
    """Not available: graph functions with parameter slots need the function-call engine."""
    raise NotImplementedError("tinycore.function is not available: the engine cannot compile a Python function into "
                              "a callable graph with parameter slots. Use tinycore.TinyJit to capture and replay it")
