"""Small shared helpers: environment variables, Context/ContextVar, shape utilities, the disk cache directory.

This is the one module that reads environment variables; everything else asks it. `GlobalCounters` is re-exported
here because tinygrad programs import it from `helpers` (it lives in the leaf module `tinycore.counters`).
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import gc
import getpass
import os
import pathlib
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from tinycore.counters import GlobalCounters as GlobalCounters
from tinycore.target import DevError, Target, find_target, format_dev, parse_dev

T = TypeVar("T")
_Key = TypeVar("_Key")
_Item = TypeVar("_Item")
_Setting = TypeVar("_Setting", int, float, str)

if TYPE_CHECKING:
    from _typeshed import SupportsRichComparison


@overload
def getenv(key: str) -> int: ...


@overload
def getenv(key: str, default: _Setting) -> _Setting: ...


@functools.cache
def getenv(key: str, default: int | float | str = 0) -> int | float | str:
    """The environment variable `key` converted to the type of `default` (cached: read once per process)."""
    value = os.environ.get(key)
    if value is None:
        return default
    return type(default)(value)


def environ(key: str, default: str | None = None) -> str | None:
    """The raw, uncached environment variable `key` (for values that tests change at run time)."""
    return os.environ.get(key, default)


class ContextVar:
    """A named setting whose value comes from the environment and can be changed temporarily with Context.

    Integer settings (DEBUG, BEAM, ...) compare like ints: `if DEBUG >= 2:`. String settings (DEV) hold strings.
    """

    _cache: dict[str, ContextVar] = {}
    key: str

    def __init__(self, key: str, default_value: int | float | str):
        if key in ContextVar._cache:
            raise RuntimeError(f"ContextVar {key} is already defined")
        self.key = key
        self._value = getenv(key, default_value)
        self._watchers: list[Callable[[object], None]] = []
        ContextVar._cache[key] = self

    @property
    def value(self) -> Any:
        """The current setting."""
        return self._value

    @value.setter
    def value(self, new_value: Any) -> None:
        # watchers check the value first (and may raise), so a refused value is never stored
        for watcher in self._watchers:
            watcher(new_value)
        self._value = new_value

    def watch(self, watcher: Callable[[object], None]) -> None:
        """Call `watcher(new_value)` before every change (a module that mirrors the setting elsewhere keeps up)."""
        self._watchers.append(watcher)
        watcher(self._value)

    def __bool__(self) -> bool:
        return bool(self.value)

    def __ge__(self, other: float) -> bool:
        return self.value >= other

    def __gt__(self, other: float) -> bool:
        return self.value > other

    def __lt__(self, other: float) -> bool:
        return self.value < other

    def __le__(self, other: float) -> bool:
        return self.value <= other

    def __eq__(self, other: object) -> bool:
        return bool(self.value == other)

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        return f"ContextVar({self.key}={self.value!r})"


class Context(contextlib.ContextDecorator):
    """Temporarily set ContextVars: `with Context(DEBUG=2, DEV="CPU"): ...` (also usable as a decorator)."""

    def __init__(self, **kwargs: object):
        unknown = [key for key in kwargs if key not in ContextVar._cache]
        if unknown:
            raise KeyError(f"Context got unknown setting(s) {unknown}; known: {sorted(ContextVar._cache)}")
        self.kwargs = kwargs
        self.saved: list[dict[str, object]] = []

    def __enter__(self) -> Context:
        saved = {key: ContextVar._cache[key].value for key in self.kwargs}
        try:
            for key, value in self.kwargs.items():
                ContextVar._cache[key].value = value
        except BaseException:
            for key, value in saved.items():
                ContextVar._cache[key].value = value
            raise
        self.saved.append(saved)
        return self

    def __exit__(self, *exc: object) -> None:
        for key, value in self.saved.pop().items():
            ContextVar._cache[key].value = value


OSX = sys.platform == "darwin"
LINUX = sys.platform.startswith("linux")
WIN = sys.platform == "win32"
CI = os.getenv("CI", "") != ""  # tinygrad's name: tests and examples read it to shorten work on CI machines

DEBUG = ContextVar("DEBUG", 0)
BEAM = ContextVar("BEAM", 0)
IGNORE_BEAM_CACHE = ContextVar("IGNORE_BEAM_CACHE", 0)  # 1: a BEAM search does not reuse results cached on disk
BEAM_BUDGET = ContextVar("BEAM_BUDGET", 60.0)  # seconds one kernel's BEAM search may take before it keeps its best
BEAM_UPCAST_MAX = ContextVar("BEAM_UPCAST_MAX", 256)  # most copies of a kernel's body (upcast x unroll) BEAM tries
BEAM_MIN_PROGRESS = ContextVar("BEAM_MIN_PROGRESS", 0.01)  # a BEAM step gaining less than this fraction ends the search
NOOPT = ContextVar("NOOPT", 0)
TRAINING = ContextVar("TRAINING", 0)


class DevTargets(list):  # type: ignore[type-arg]
    """DEV's value: the parsed targets in order (a list of Target, as tinygrad keeps it). `str()` gives the DEV
    string, and it compares equal to any DEV string that parses to the same targets."""

    def __str__(self) -> str:
        return format_dev(self)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            try:
                return list(parse_dev(other)) == list(self)
            except DevError:
                return False
        return list.__eq__(self, other)

    __hash__ = None  # type: ignore[assignment]


class DevVar(ContextVar):
    """The DEV setting as an object: `DEV.device`, `DEV.renderer`, `DEV.arch`, `DEV.interface`, `DEV.indices` (of the
    first target), `DEV.target(name)` (the parsed target for one device), `DEV.value` (every target, a list).

    It is set like any setting (`Context(DEV="CL:1")`, `DEV.value = "CPU:LLVM"`) from a string, a Target or a list
    of them, and parsed when set: a malformed value raises DevError there and is not stored. Checks that need the
    installed plugins (that the device exists, that it has the renderer or interface named) are watchers the device
    layer adds. A malformed DEV in the environment is kept until `check()` (tinycore's import runs it) raises it.
    """

    def __init__(self, key: str, default_value: str):
        super().__init__(key, default_value)
        self._targets: tuple[Target, ...] = ()
        self._error: DevError | None = None
        try:
            self._targets = self._parse(self._value)
        except DevError as error:
            self._error = error

    @staticmethod
    def _parse(value: object) -> tuple[Target, ...]:
        """The targets of a DEV value given as a string, a Target or a sequence of Targets."""
        if isinstance(value, Target):
            return (value,)
        if isinstance(value, (list, tuple)) and all(isinstance(item, Target) for item in value):
            return parse_dev(format_dev(list(value)))  # the same checks as for a string (one target per device)
        if isinstance(value, str):
            return parse_dev(value)
        raise DevError(f"DEV must be a string like 'CPU' or 'CPU:LLVM', a Target or a list of Targets, got {value!r}")

    @property
    def targets(self) -> tuple[Target, ...]:
        """The parsed targets (raises the DevError of a malformed DEV from the environment)."""
        if self._error is not None:
            raise self._error
        return self._targets

    @property
    def value(self) -> DevTargets:
        """Every target, in order (tinygrad's `DEV.value`); empty when DEV is not set."""
        return DevTargets(self.targets)

    @value.setter
    def value(self, new_value: object) -> None:
        targets = self._parse(new_value)
        for watcher in self._watchers:  # the device layer checks the devices named exist (and may raise)
            watcher(targets)
        self._targets, self._error, self._value = targets, None, format_dev(targets)

    def watch(self, watcher: Callable[[Any], None], check_now: bool = True) -> None:
        """Call `watcher(targets)` before every change, and now for the current value unless `check_now` is False
        (or the value is malformed)."""
        self._watchers.append(watcher)
        if check_now and self._error is None:
            watcher(self._targets)

    def check(self) -> None:
        """Raise the DevError of a malformed DEV from the environment (nothing when DEV is well formed)."""
        self.targets  # noqa: B018 - raises the stored error

    @property
    def raw(self) -> str:
        """The DEV string as it was set, even when malformed (for messages)."""
        return str(self._value)

    @property
    def text(self) -> str:
        """The DEV string ("" when unset)."""
        return format_dev(self.targets)

    def _first(self) -> Target:
        return self.targets[0] if self.targets else Target()

    @property
    def device(self) -> str:
        """The device of the first target ("" when DEV names none)."""
        return self._first().device

    @property
    def renderer(self) -> str:
        """The renderer of the first target ("" when not given)."""
        return self._first().renderer

    @property
    def arch(self) -> str:
        """The architecture of the first target ("" when not given)."""
        return self._first().arch

    @property
    def interface(self) -> str:
        """The interface of the first target ("" when not given)."""
        return self._first().interface

    @property
    def indices(self) -> tuple[int, ...]:
        """The interface indices of the first target (empty when not given)."""
        return self._first().indices

    def target(self, device: str, **defaults: str) -> Target:
        """The parsed target for `device`: DEV's target for it (or its family, or every device), with the fields it
        leaves empty taken from `defaults` (renderer=, arch=, interface=)."""
        found = find_target(self.targets, device)
        unknown = sorted(set(defaults) - {"renderer", "arch", "interface"})
        if unknown:
            raise TypeError(f"DEV.target() got unknown field(s) {unknown}; give renderer=, arch= or interface=")
        filled: dict[str, Any] = {key: value for key, value in defaults.items() if value and not getattr(found, key)}
        return replace(found, **filled)

    def __bool__(self) -> bool:
        return bool(self.targets)

    def __eq__(self, other: object) -> bool:
        return bool(self.value == other)

    def __hash__(self) -> int:
        return hash(self.key)

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"DEV={self._value!r}"


DEV = DevVar("DEV", "")
JIT = ContextVar("JIT", 1)
CAPTURING = ContextVar("CAPTURING", 1)  # 0: launches run while TinyJit captures stay out of the capture
RING = ContextVar("RING", 1)  # allreduce: 0 never ring, 1 ring above a size, 2 always ring
ALL2ALL = ContextVar("ALL2ALL", 0)  # allreduce: 1 all-to-all above a size, 2 always all-to-all
ALLREDUCE_CAST = ContextVar("ALLREDUCE_CAST", 1)  # 1: a half/bfloat16 sum is allreduced in its own dtype
SCACHE = ContextVar("SCACHE", 1)  # 0: every realize schedules afresh (the schedule cache is neither read nor filled)
WINO = ContextVar("WINO", 0)  # accepted for tinygrad programs; convolutions have one lowering here: no effect
CHECK_OOB = ContextVar("CHECK_OOB", 0)  # accepted for tinygrad programs; no symbolic bounds prover here: no effect
IGNORE_OOB = ContextVar("IGNORE_OOB", 0)  # accepted for tinygrad programs: nothing here proves index bounds
SPLIT_REDUCEOP = ContextVar("SPLIT_REDUCEOP", 1)
NUM_CPU_THREADS = ContextVar("NUM_CPU_THREADS", 0)
CHECK_INDEX = ContextVar("CHECK_INDEX", 0)  # 1: index tensors are read and bounds-checked (IndexError) when used
SCATTER_SORT = ContextVar("SCATTER_SORT", -1)  # scatter reductions sorted and segmented: 1 always, 0 never, -1 auto
CACHELEVEL = ContextVar("CACHELEVEL", 2)
# the default dtypes by name ("float32", "half", "int64"); tinycore.dtype keeps dtypes.default_float/int in step
DEFAULT_FLOAT = ContextVar("DEFAULT_FLOAT", "")
DEFAULT_INT = ContextVar("DEFAULT_INT", "")
PROFILE = ContextVar("PROFILE", 0)
PROFILE_PATH = ContextVar("PROFILE_PATH", "")
HCQ_TIMEOUT_MS = ContextVar("HCQ_TIMEOUT_MS", 30000)


_Value = TypeVar("_Value")


class cached_node_property(Generic[_Value]):  # noqa: N801 - named like the functools decorator it replaces
    """`functools.cached_property` without its lock: the value is computed on first access and stored in the
    instance's `__dict__`, which later reads find first. Python 3.11's cached_property takes a lock on every first
    access, and graph nodes compute their shape, device and toposort once each, for every node an eager op builds.
    Two threads reading a value first at once may both compute it (the values are equal)."""

    def __init__(self, function: Callable[[Any], _Value]):
        self.function = function
        self.name = function.__name__
        self.__doc__ = function.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, instance: None, owner: type | None = None) -> cached_node_property[_Value]: ...

    @overload
    def __get__(self, instance: object, owner: type | None = None) -> _Value: ...

    def __get__(self, instance: object | None, owner: type | None = None) -> cached_node_property[_Value] | _Value:
        if instance is None:
            return self
        value = self.function(instance)
        instance.__dict__[self.name] = value
        return value


@contextlib.contextmanager
def collection_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for the block (unless it is off already), on again after it.

    Scheduling and codegen build and drop hundreds of thousands of graph nodes and tuples, and each few hundred
    allocations started a collection that walked the live graphs: a tenth of the digits demo's cold start. Their
    garbage is freed by reference counting; the few cycles they leave are collected once the block is over."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def prod(items: Iterable[Any], start: Any = 1) -> Any:
    """The product of `items` (works on ints and symbolic UOps)."""
    result = start
    for item in items:
        result = result * item
    return result


def dedup(items: Iterable[T]) -> list[T]:
    """`items` without repeats, first occurrence kept."""
    return list(dict.fromkeys(items))


def argsort(items: Sequence[SupportsRichComparison]) -> list[int]:
    """The indices that sort `items`."""
    return sorted(range(len(items)), key=items.__getitem__)


def all_same(items: Sequence[object]) -> bool:
    """True when every element equals the first (and for an empty sequence)."""
    return all(item == items[0] for item in items)


def all_int(items: Iterable[object]) -> bool:
    """True when every element is a Python int (not a symbolic value)."""
    return all(isinstance(item, int) for item in items)


def flatten(items: Iterable[Iterable[T]]) -> list[T]:
    """One level of nesting removed."""
    return [item for inner in items for item in inner]


def make_tuple(value: int | Sequence[int], count: int) -> tuple[int, ...]:
    """`value` repeated `count` times if it is an int, else `value` as a tuple."""
    return (value,) * count if isinstance(value, int) else tuple(value)


def round_up(value: int, multiple: int) -> int:
    """`value` rounded up to a multiple of `multiple`."""
    return (value + multiple - 1) // multiple * multiple


def ceildiv(numerator: Any, denominator: Any) -> Any:
    """Ceiling division that works on ints and symbolic values."""
    return -(numerator // -denominator)


def cache_dir() -> pathlib.Path:
    """The directory for on-disk caches (compiled kernels): $TINYCORE_CACHE_DIR, else XDG or ~/.cache."""
    base = os.environ.get("TINYCORE_CACHE_DIR")
    if base:
        return pathlib.Path(base)
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(xdg) / "tinycore"


def write_atomically(path: pathlib.Path, data: bytes, what: str) -> bool:
    """Write `data` to `path` through a temporary file in the same directory renamed over it, so a reader sees the
    old entry or the new one, never half of one. A disk cache only: an unwritable directory is no error (at DEBUG >= 2
    it says so, naming `what`), the caller carries on without the entry. True when written."""
    temporary_name = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary_name = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.replace(temporary_name, path)
        temporary_name = None
        return True
    except OSError as error:
        if DEBUG >= 2:
            print(f"cannot write {what} {path} ({error}); continuing without it")
        return False
    finally:
        if temporary_name is not None:
            try:
                os.unlink(temporary_name)
            except OSError:
                pass


def colored(text: str, color: str | None, stream: object = None) -> str:
    """`text` in ANSI colour, unless NO_COLOR is set or `stream` (default stdout) is not a terminal."""
    stream = stream if stream is not None else sys.stdout
    if color is None or os.environ.get("NO_COLOR") is not None or not getattr(stream, "isatty", lambda: False)():
        return text
    codes = {"red": 31, "green": 32, "yellow": 33, "blue": 34, "magenta": 35, "cyan": 36, "white": 37}
    return f"\x1b[{codes[color]}m{text}\x1b[0m"


def unwrap(value: T | None) -> T:
    """`value`, asserting it is not None."""
    assert value is not None
    return value


def to_function_name(name: str) -> str:
    """A C identifier made from a kernel's display name."""
    return "".join(character if character.isalnum() or character == "_" else "_" for character in name)


def fully_flatten(value: Any) -> list[Any]:
    """Every leaf of nested lists/tuples, in order."""
    if isinstance(value, (list, tuple)):
        return [leaf for item in value for leaf in fully_flatten(item)]
    return [value]


def get_shape(value: object) -> tuple[int, ...]:
    """The shape of nested lists/tuples; a clear error when they are ragged."""
    if not isinstance(value, (list, tuple)):
        return ()
    shapes = [get_shape(item) for item in value]
    if not all_same(shapes):
        raise ValueError(f"inhomogeneous shape: nested lists have sub-shapes {dedup(shapes)}")
    return (len(shapes),) + (shapes[0] if shapes else ())


def temp(name: str, append_user: bool = False) -> str:
    """The path `name` inside the system's temporary directory (with `.<user>` appended when `append_user`)."""
    file_name = f"{name}.{getpass.getuser()}" if append_user else name
    return (pathlib.Path(tempfile.gettempdir()) / file_name).as_posix()


def mv_address(view: memoryview) -> int:
    """The address of the first byte of the writable, C-contiguous memoryview `view` (for passing it to C)."""
    if view.readonly:
        raise ValueError("mv_address needs a writable memoryview (e.g. memoryview(bytearray(n)))")
    if not view.c_contiguous:
        raise ValueError("mv_address needs a C-contiguous memoryview")
    return ctypes.addressof(ctypes.c_char.from_buffer(view))


def round_down(value: int, multiple: int) -> int:
    """`value` rounded down to a multiple of `multiple`."""
    return value - value % multiple


def partition(items: Iterable[T], predicate: Callable[[T], bool]) -> tuple[list[T], list[T]]:
    """(the items for which `predicate` holds, the others), each in order."""
    chosen: list[T] = []
    others: list[T] = []
    for item in items:
        (chosen if predicate(item) else others).append(item)
    return chosen, others


def merge_dicts(dicts: Iterable[dict[_Key, _Item]]) -> dict[_Key, _Item]:
    """One dict with every key of `dicts`; a key given two different values is a RuntimeError naming it."""
    merged: dict[_Key, _Item] = {}
    for mapping in dicts:
        for key, value in mapping.items():
            if key in merged and merged[key] != value:
                raise RuntimeError(f"merge_dicts: key {key!r} has two values, {merged[key]!r} and {value!r}")
            merged[key] = value
    return merged


def flat_mv(view: memoryview) -> memoryview:
    """`view` as a flat memoryview of bytes (an empty view is returned as is)."""
    return view if len(view) == 0 else view.cast("B", shape=(view.nbytes,))


def to_mv(address: int, size: int) -> memoryview:
    """A writable memoryview of the `size` bytes at host address `address` (no copy: the memory must stay alive)."""
    return memoryview((ctypes.c_uint8 * size).from_address(address)).cast("B")


def from_mv(view: memoryview, element_type: Any = ctypes.c_char) -> Any:
    """The writable memoryview `view` as a ctypes array of `element_type` over the same memory (no copy)."""
    array_type = element_type * len(view)
    return array_type.from_address(mv_address(view))


class Timing(contextlib.ContextDecorator):
    """Print how long a block took: `with Timing("load: "):` prints `load:   12.34 ms` (plus `on_exit(nanoseconds)`
    when given); `enabled=False` only measures. The time in nanoseconds is kept in `.et`."""

    def __init__(self, prefix: str = "", on_exit: Callable[[int], str] | None = None, enabled: bool = True):
        self.prefix, self.on_exit, self.enabled = prefix, on_exit, enabled
        self.et = 0

    def __enter__(self) -> Timing:
        self.started = time.perf_counter_ns()
        return self

    def __exit__(self, *exc: object) -> None:
        self.et = time.perf_counter_ns() - self.started
        if self.enabled:
            suffix = self.on_exit(self.et) if self.on_exit is not None else ""
            print(f"{self.prefix}{self.et * 1e-6:6.2f} ms{suffix}")
