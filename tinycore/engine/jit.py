"""TinyJit: run a function once, capture its kernel launches on the second call, replay them afterwards.

Call 1 runs the function as written. Call 2 runs it again while recording every kernel launch and copy that
realize performs. Later calls skip the Python function, scheduling and codegen entirely: they point the recorded
launches at the new inputs' buffers and run them in order. The tensors the function returns are realized on calls 1
and 2 (so a function may return them lazy); the return value is the one captured on call 2, and its tensors'
buffers are overwritten by every replay (as in tinygrad).

Intermediate buffers that the captured launches use only between two of them are planned: launches whose
temporaries are never alive at the same time share memory.
"""
from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from tinycore.counters import totals as _counts
from tinycore.engine.realize import (
    active_captures,
    capture_begin,
    capture_end,
    invalidate_known_results,
    remembered_results,
)
from tinycore.helpers import CAPTURING, JIT
from tinycore.plugins.contract import DeviceContract, GraphContract, GraphFactory

if TYPE_CHECKING:
    from tinycore.device.buffer import Buffer
    from tinycore.dtype import DType
    from tinycore.engine.realize import CapturedCall
    from tinycore.tensor.tensor import Tensor
    from tinycore.uop.symbolic import sint
    from tinycore.uop.uop import UOp

ReturnType = TypeVar("ReturnType")


class JitError(RuntimeError):
    """A TinyJit call that cannot be captured or replayed, with what to change."""


class JitInputError(JitError, AssertionError):
    """A replay whose inputs differ in shape, dtype or device from the captured ones (an AssertionError too, the type
    tinygrad raises there)."""


@functools.cache
def graph_class(device: DeviceContract) -> GraphFactory | None:
    """What replays a whole capture on `device` as one unit (its graph factory, unwrapped from a functools.partial),
    or None where the device has none and TinyJit replays launch by launch (as tinygrad's graph_class)."""
    graph = device.graph
    return cast("GraphFactory | None", graph.func if isinstance(graph, functools.partial) else graph)


def _tensor_type() -> type[Tensor]:
    """The Tensor class (imported on first use: the engine is below the tensor layer; kept after, since every
    TinyJit call asks and an import statement costs about a microsecond)."""
    if not _TENSOR_TYPE:
        from tinycore.tensor import Tensor
        _TENSOR_TYPE.append(Tensor)
    return _TENSOR_TYPE[0]


_TENSOR_TYPE: list[type[Tensor]] = []

_jit_enabled = [bool(JIT.value)]
"""JIT's setting as a bool, kept current by a watcher: every TinyJit call reads it, and the setting's truth test is
two Python calls."""
JIT.watch(lambda value: _jit_enabled.__setitem__(0, bool(value)))


def _collect_tensors(value: object, found: list[Tensor]) -> None:
    """Every Tensor inside `value` (nested lists, tuples and dict values), in order."""
    from tinycore.tensor import Tensor
    if isinstance(value, Tensor):
        found.append(value)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _collect_tensors(item, found)
    elif isinstance(value, dict):
        for item in value.values():
            _collect_tensors(item, found)


def _non_tensor_value(value: object) -> object | None:
    """The first value inside `value` (nested lists, tuples and dict values) that is neither a Tensor nor None."""
    from tinycore.tensor import Tensor
    if value is None or isinstance(value, Tensor):
        return None
    if isinstance(value, (list, tuple, dict)):
        for item in value.values() if isinstance(value, dict) else value:
            found = _non_tensor_value(item)
            if found is not None:
                return found
        return None
    return value


def _writes_pending(tensor: Tensor) -> bool:
    """True when `tensor` ends in a write (ASSIGN) into its buffer that has not run yet."""
    from tinycore.uop.ops import Ops
    node = tensor.uop
    parts = node.src if node.op is Ops.MULTI else (node,)
    return any(part.base.op is Ops.ASSIGN for part in parts)


def _collect_bindings(value: object, found: dict[UOp, int]) -> None:
    """The bound Variables (BIND UOps) inside `value` (nested lists, tuples and dict values): variable -> value."""
    from tinycore.uop.ops import Ops
    from tinycore.uop.uop import UOp
    if isinstance(value, UOp) and value.op is Ops.BIND:
        variable, bound = value.unbind()
        found[variable] = bound
    elif isinstance(value, (list, tuple)):
        for item in value:
            _collect_bindings(item, found)
    elif isinstance(value, dict):
        for item in value.values():
            _collect_bindings(item, found)


def _input_buffers(tensors: list[Tensor]) -> list[Buffer]:
    """The device Buffers holding the tensors' elements in C order (made contiguous and realized if needed); a
    multi-device tensor gives one Buffer per device, in device order."""
    from tinycore.engine.memory import buffer_of
    from tinycore.schedule.nodes import view_base
    buffers: list[Buffer] = []
    for tensor in tensors:
        parts = _contiguous_parts(tensor)  # realized already: no realize call per input
        if parts is None:
            parts = _contiguous_parts(tensor.realize())
        if parts is None:
            # realized as a view that is not contiguous: a contiguous copy takes its place (its buffer, also where
            # the view test cannot say so: a copy of symbolic shape is no view of a buffer of that shape)
            parts = _device_parts(tensor.replace(tensor.contiguous().realize()))
        buffers.extend(buffer_of(view_base(part)).ensure_allocated() for part in parts)
    return buffers


def _device_parts(tensor: Tensor) -> tuple[UOp, ...]:
    """The tensor's nodes, one per device (the sources of a multi-device tensor)."""
    from tinycore.uop.ops import Ops
    uop = tensor.uop
    return uop.src if uop.op is Ops.MULTI else (uop,)


def _contiguous_parts(tensor: Tensor) -> tuple[UOp, ...] | None:
    """The tensor's nodes (one per device) when each is a contiguous view of a realized buffer, else None."""
    from tinycore.schedule.nodes import is_contiguous_buffer_view
    parts = _device_parts(tensor)
    return parts if all(is_contiguous_buffer_view(part) for part in parts) else None


def _tensor_bindings(tensors: list[Tensor], found: dict[UOp, int]) -> None:
    """The bound Variables in the shapes of `tensors` (a tensor sliced with `Variable(...).bind(n)`)."""
    from tinycore.uop.ops import Ops
    for tensor in tensors:
        for size in tensor.shape:
            if not isinstance(size, int):
                for node in size.toposort:
                    if node.op is Ops.BIND:
                        variable, bound = node.unbind()
                        found[variable] = bound


def _unbound(size: sint) -> sint:
    """A size with its bound Variables unbound (the shape a capture serves for every binding)."""
    from tinycore.uop.ops import Ops
    if isinstance(size, int):
        return size
    return size.substitute({node: node.src[0] for node in size.toposort if node.op is Ops.BIND})


def _signature(tensors: list[Tensor]) -> list[tuple[object, ...]]:
    from tinycore.uop.ops import Ops
    return [(tuple(_unbound(size) for size in tensor.shape), tensor.dtype, tensor.device,
             tensor.uop.arg if tensor.uop.op is Ops.MULTI else None) for tensor in tensors]


class _KnownInputs:
    """The inputs of the last replay, by weak reference: their graph nodes, the Buffers they gave and the Variables
    bound in their shapes. A replay whose tensors still hold the same nodes (a training loop passing the same
    realized tensors, or tensors assigned in place) has the same signature and Buffers, so it skips the checks; the
    references are weak so that the TinyJit does not keep the memory of tensors dropped since."""

    __slots__ = ("nodes", "buffers", "shape_bindings")

    def __init__(self, inputs: list[Tensor], buffers: list[Buffer], int_shapes: bool = False):
        self.nodes = [weakref.ref(tensor.uop) for tensor in inputs]
        self.buffers = [weakref.ref(buffer) for buffer in buffers]
        self.shape_bindings: dict[UOp, int] = {}
        if not int_shapes:  # shapes known to be ints bind no Variable
            _tensor_bindings(inputs, self.shape_bindings)

    def buffers_for(self, inputs: list[Tensor]) -> list[Buffer] | None:
        """The Buffers of `inputs` when they hold the same nodes as last time (all still allocated), else None."""
        nodes = self.nodes
        if len(inputs) != len(nodes):
            return None
        for tensor, node in zip(inputs, nodes, strict=False):  # of one length, checked above
            if tensor.uop is not node():
                return None
        buffers = []
        for reference in self.buffers:
            buffer = reference()
            if buffer is None or buffer._buf is None:
                return None
            buffers.append(buffer)
        return buffers


def _whole_buffer_inputs(inputs: list[Tensor], signature: list[tuple[object, ...]]) -> list[Buffer] | None:
    """The inputs' Buffers when each input is a whole buffer node, or reshapes of it, of the captured shape, dtype
    and device, else None. Those facts are read off the nodes' arguments, without the shape inference and view test
    of the general check: a training step through a framework bridge passes new buffers of one layout every call."""
    from tinycore.engine.memory import buffer_of
    from tinycore.uop.ops import Ops
    if len(inputs) != len(signature):
        return None
    buffers = []
    for tensor, (shape, dtype, device, _) in zip(inputs, signature, strict=True):  # of one length, checked above
        node = tensor.uop
        if node.op is Ops.RESHAPE:
            if node.arg != shape:
                return None
            while node.op is Ops.RESHAPE:
                node = node.src[0]
            if node.op is not Ops.BUFFER:
                return None
        elif node.op is not Ops.BUFFER or shape != (node.arg[1],):
            return None
        if node.dtype != dtype or node.src[0].arg != device:
            return None
        buffers.append(buffer_of(node).ensure_allocated())
    return buffers


def _rebind_size(size: object, bindings: dict[UOp, int]) -> object:
    """A size (or a nested tuple of sizes) with its bound Variables bound to their values in `bindings`."""
    from tinycore.uop.ops import Ops
    from tinycore.uop.uop import UOp
    if isinstance(size, tuple):
        return tuple(_rebind_size(item, bindings) for item in size)
    if not isinstance(size, UOp):
        return size
    mapping = {node: node.src[0].bind(bindings[node.src[0]]) for node in size.toposort
               if node.op is Ops.BIND and node.src[0] in bindings}
    return size.substitute(mapping) if mapping else size


def _rebind_view(uop: UOp, bindings: dict[UOp, int], memo: dict[UOp, UOp]) -> UOp:
    """`uop` (a realized view: movement ops over a buffer) with the sizes in its movement ops' arguments rebound."""
    from tinycore.uop.ops import GroupOp
    if uop in memo:
        return memo[uop]
    sources = tuple(_rebind_view(source, bindings, memo) for source in uop.src)
    arg = _rebind_size(uop.arg, bindings) if uop.op in GroupOp.Movement else uop.arg
    memo[uop] = result = uop if sources == uop.src and arg == uop.arg else uop.replace(src=sources, arg=arg)
    return result


def _rebind(value: object, bindings: dict[UOp, int]) -> None:
    """Point the tensors returned by a replay (nested in lists, tuples and dict values) at this call's values of the
    Variables in their shapes, so a symbolic result reads as large as this call made it."""
    from tinycore.tensor import Tensor
    if isinstance(value, Tensor):
        uop = value.uop
        if all(isinstance(size, int) for size in uop.shape):
            return
        value.uop = _rebind_view(uop, bindings, {})
    elif isinstance(value, (list, tuple)):
        for item in value:
            _rebind(item, bindings)
    elif isinstance(value, dict):
        for item in value.values():
            _rebind(item, bindings)


class _Replay:
    """The captured launches, with the positions where each input's buffer goes."""

    def __init__(self, calls: list[CapturedCall], input_buffers: list[Buffer], keep_alive: list[Buffer]):
        self.calls = calls
        self.keep_alive = keep_alive
        input_index = {id(buffer): position for position, buffer in enumerate(input_buffers)}
        # (call number, argument number, input number, view offset in bytes or None for the whole buffer)
        self.patches: list[tuple[int, int, int, tuple[int, DType, int] | None]] = []
        self.arguments: list[list[object]] = []  # device handles, opaque to the core
        self.buffer_objects: list[list[Buffer]] = [list(call.buffers) for call in calls]
        for call_number, call in enumerate(calls):
            handles = []
            for argument_number, buffer in enumerate(call.buffers):
                handles.append(buffer.ensure_allocated()._buf)
                owner = buffer if id(buffer) in input_index else buffer.base
                if id(owner) in input_index:
                    view = None if owner is buffer else (buffer.size, buffer.dtype, buffer.offset)
                    self.patches.append((call_number, argument_number, input_index[id(owner)], view))
            self.arguments.append(handles)

    @property
    def kernel_count(self) -> int:
        """How many kernel launches (not copies) a replay runs."""
        return sum(1 for call in self.calls if call.runner is not None)

    def held_buffers(self) -> list[Buffer]:
        """The Buffers of the last replay's arguments (its inputs in place of the captured ones)."""
        return [buffer for buffers in self.buffer_objects for buffer in buffers]

    def refreshed(self) -> _Replay:
        """This replay with device handles for every argument again, after free_intermediates released the
        intermediates."""
        for handles, buffers in zip(self.arguments, self.buffer_objects, strict=True):
            for position, buffer in enumerate(buffers):
                handles[position] = buffer.ensure_allocated()._buf
        return self

    def run(self, input_buffers: Sequence[Buffer], bindings: Mapping[UOp, int] | None = None) -> None:
        """Run every captured launch with `input_buffers` in place of the captured inputs and the values of
        `bindings` (variable -> value) for the captured values of those variables."""
        views: list[Buffer] = []
        for call_number, argument_number, input_number, view in self.patches:
            buffer = input_buffers[input_number]
            if view is not None:
                buffer = buffer.view(*view).ensure_allocated()
                views.append(buffer)
            self.arguments[call_number][argument_number] = buffer._buf
            self.buffer_objects[call_number][argument_number] = buffer
        for call, handles, buffers in zip(self.calls, self.arguments, self.buffer_objects, strict=True):
            if call.runner is None:
                from tinycore.engine.realize import copy_buffers
                copy_buffers(*buffers)
                continue
            if bindings and any(variable in call.var_vals for variable in bindings):
                values = {variable: bindings.get(variable, value) for variable, value in call.var_vals.items()}
                call.runner(handles, values)
            else:
                call.runner(handles, call.var_vals)


def _intermediates(calls: list[CapturedCall], kept: set[int]) -> list[Buffer]:
    """The base buffers that `calls` write before reading them (their values never outlive a replay), except those
    whose id is in `kept`."""
    first_written: dict[int, bool] = {}
    bases: dict[int, Buffer] = {}
    for call in calls:
        buffers = call.buffers
        if call.runner is None:
            writes, reads = [buffers[0]], [buffers[1]]
        else:
            writes = [buffers[position] for position in call.runner.spec.outs]
            reads = [buffers[position] for position in call.runner.spec.ins]
        for buffer in reads:
            first_written.setdefault(id(buffer.base), False)
        for buffer in writes:
            first_written.setdefault(id(buffer.base), True)
            bases[id(buffer.base)] = buffer.base
    return [bases[identity] for identity, written in first_written.items() if written and identity not in kept]


class CapturedJit:
    """What TinyJit captured (`TinyJit.captured`, as tinygrad names it): the launches, the return value, and a way to
    release the replay's intermediate memory between calls."""

    def __init__(self, replay: GraphContract, ret: object, pruned_count: int, input_buffers: list[Buffer]):
        from tinycore.tensor.creation import random_key_buffers
        self.replay, self.ret, self.pruned_count = replay, ret, pruned_count
        self.input_buffers = input_buffers
        self.released = False
        # the key buffers of random draws made inside the function: each replay draws the next keys, as tinygrad
        self.random_keys = random_key_buffers([buffer for call in replay.calls for buffer in call.buffers])
        self._totals: tuple[GraphContract, int, int, int] | None = None  # (replay, kernels, ops, bytes) of one replay

    @property
    def jit_cache(self) -> list[CapturedCall]:
        """The captured launches in replay order: CapturedCall objects with `runner` (None for a copy), `buffers`
        and `var_vals`. Launches dropped by `prune=True` are not in it (`pruned_count` says how many were)."""
        return list(self.replay.calls)

    def free_intermediates(self) -> None:
        """Give the memory of the replay's intermediate buffers back to the allocator until the next replay.

        Intermediates are the buffers a replay writes before it reads them. Inputs, buffers whose first use is a
        read (weights, state updated in place) and the returned tensors keep their memory; the next replay
        allocates the intermediates again (and a queue device rebuilds its command queue for the new addresses).
        """
        from tinycore.engine.memory import buffer_of
        from tinycore.engine.realize import invalidate_known_results
        from tinycore.schedule.fusion import is_realized_view, view_base
        kept = {id(buffer.base) for buffer in self.input_buffers}
        returned: list[Tensor] = []
        _collect_tensors(self.ret, returned)
        kept |= {id(buffer_of(view_base(tensor.uop)).base) for tensor in returned if is_realized_view(tensor.uop)}
        freed = _intermediates(self.replay.calls, kept)
        from tinycore.device.registry import Device
        for device in sorted({base.device for base in freed}):
            Device[device].synchronize()  # a replay still running must be done with the memory
        freed_ids = {id(base) for base in freed}
        views = [buffer for call in self.replay.calls for buffer in call.buffers
                 if buffer._base is not None and id(buffer._base) in freed_ids]
        views += [buffer for buffer in self.replay.held_buffers()
                  if buffer._base is not None and id(buffer._base) in freed_ids]
        for view in views:
            view.deallocate()
        for base in freed:
            base.deallocate()
        invalidate_known_results()
        self.released = bool(freed)

    def prepare(self) -> None:
        """Before a replay after free_intermediates: allocate the intermediates again and point the replay at them."""
        if not self.released:
            return
        for call in self.replay.calls:
            for buffer in call.buffers:
                buffer.ensure_allocated()
        self.replay = self.replay.refreshed()
        self.released = False

    def next_random_keys(self) -> None:
        """Write the next keys of each captured random draw into its key buffer (the streams advance)."""
        if not self.random_keys:
            return
        from tinycore.device.registry import Device
        from tinycore.tensor.creation import draw_random_keys
        for device in sorted({device for _, device, _ in self.random_keys}):
            Device[device].synchronize()  # the previous replay must be done reading the keys
        for buffer, device, count in self.random_keys:
            buffer.copyin(memoryview(draw_random_keys(device, count)))

    def totals(self) -> tuple[GraphContract, int, int, int]:
        """(replay, kernels, operations, bytes) of one replay of the current `replay`, kept in `_totals` (the sums of
        a replay's calls do not change)."""
        totals = self._totals
        if totals is None or totals[0] is not self.replay:
            kernels = ops = mem = 0
            for call in self.replay.calls:
                if call.runner is None:
                    mem += call.buffers[1].nbytes
                    continue
                kernels += 1
                ops += call.runner.spec.estimates.ops
                mem += call.runner.spec.estimates.mem
            totals = self._totals = (self.replay, kernels, ops, mem)
        return totals

    def count(self) -> None:
        """Add one replay's kernels, operations and bytes to GlobalCounters (as realize does for each launch)."""
        totals = self.totals()
        _counts.kernel_count += totals[1]
        _counts.global_ops += totals[2]
        _counts.global_mem += totals[3]


def _prune(calls: list[CapturedCall], input_buffers: list[Buffer]) -> tuple[list[CapturedCall], list[CapturedCall]]:
    """(kept, pruned): a launch is kept when it touches a buffer an input reaches (the inputs, and every buffer of
    a kept launch before it) or takes variables; the others compute the same thing on every call."""
    reached = {id(buffer.base) for buffer in input_buffers}
    kept: list[CapturedCall] = []
    pruned: list[CapturedCall] = []
    for call in calls:
        touched = {id(buffer.base) for buffer in call.buffers}
        if touched & reached or call.var_vals:
            kept.append(call)
            reached |= touched
        else:
            pruned.append(call)
    return kept, pruned


def _settle_pruned(pruned: list[CapturedCall]) -> None:
    """Give the temporaries that pruned launches touch memory of their own and run those launches once more, so the
    kept launches read what they computed (during capture the temporaries went back to the allocator)."""
    from tinycore.engine.realize import copy_buffers
    rerun = [call for call in pruned if any(buffer._base is None and buffer._buf is None for buffer in call.buffers)]
    for call in rerun:
        for buffer in call.buffers:
            buffer.ensure_allocated()
    for call in rerun:
        if call.runner is None:
            copy_buffers(*call.buffers)
        else:
            call.runner([buffer._buf for buffer in call.buffers], call.var_vals)


def _plan_temporaries(calls: list[CapturedCall]) -> list[Buffer]:
    """Give buffers freed during capture (temporaries) memory shared between non-overlapping lifetimes.

    Returns the pool buffers that must stay alive with the replay.
    """
    from tinycore.device.buffer import Buffer
    from tinycore.dtype import dtypes
    first_use: dict[int, int] = {}
    last_use: dict[int, int] = {}
    temporaries: dict[int, Buffer] = {}
    for position, call in enumerate(calls):
        for buffer in call.buffers:
            if buffer._base is None and buffer._buf is None:
                temporaries[id(buffer)] = buffer
                first_use.setdefault(id(buffer), position)
                last_use[id(buffer)] = position
    pools: list[tuple[Buffer, int]] = []  # (pool buffer, position of its current occupant's last use)
    replacement: dict[int, Buffer] = {}
    for key in sorted(temporaries, key=lambda identity: first_use[identity]):
        buffer = temporaries[key]
        chosen = None
        for slot, (pool, busy_until) in enumerate(pools):
            if busy_until < first_use[key] and pool.device == buffer.device and pool.nbytes >= buffer.nbytes:
                chosen = slot
                break
        if chosen is None:
            pools.append((Buffer(buffer.device, max(buffer.nbytes, 1), dtypes.uint8).ensure_allocated(), -1))
            chosen = len(pools) - 1
        pool = pools[chosen][0]
        pools[chosen] = (pool, last_use[key])
        replacement[key] = Buffer(buffer.device, buffer.size, buffer.dtype, base=pool, offset=0).ensure_allocated()
    for call in calls:
        call.buffers = [replacement.get(id(buffer), buffer) for buffer in call.buffers]
    return [pool for pool, _ in pools]


class TinyJit(Generic[ReturnType]):
    """Decorate a function (or method) whose work is realizing tensors, to replay its kernels on later calls.

    The function must take its changing data as Tensor arguments (also inside lists, tuples and dicts) and
    return the tensors it computes (realized by the jit if they are not). Bound Variables passed as arguments
    (`Variable("n", 1, 9).bind(4)`) replace the values captured for those variables on every replay, so one capture
    serves every value. Shapes,
    dtypes and devices of the inputs must stay the same from call to call; `reset()` forgets the capture. `JIT=0`
    turns capturing off (every call runs the function).
    """

    def __new__(cls, function: Callable[..., ReturnType] | None = None, *, prune: bool = False) -> Any:
        """`TinyJit(f)`, `@TinyJit`, or `@TinyJit(prune=True)` (without a function: a decorator)."""
        if function is None:
            return functools.partial(cls, prune=prune)
        return super().__new__(cls)

    def __init__(self, function: Callable[..., ReturnType], *, prune: bool = False):
        """`prune=True` drops the launches that do not depend on the inputs from the replay (they run at capture,
        and their results stay in place), as tinygrad's `TinyJit(prune=True)`."""
        if not callable(function):
            raise TypeError(f"TinyJit needs a function, got {type(function).__name__}")
        self.prune = bool(prune)
        self.function = function
        functools.update_wrapper(self, function)  # type: ignore[arg-type]
        self.reset()

    def reset(self) -> None:
        """Forget the captured launches: the next call runs the function, the one after captures again."""
        self.count = 0
        self.replay: GraphContract | None = None  # a _Replay, or the first device's graph (DeviceContract.graph)
        self._captured: CapturedJit | None = None
        self.captured_signature: list[tuple[object, ...]] | None = None
        self.captured_return: ReturnType | None = None
        self._returned_inputs: list[tuple[int, int]] = []  # (position among the returned tensors, input position)
        self._known_inputs: _KnownInputs | None = None
        self._instance_jits: weakref.WeakKeyDictionary[object, TinyJit[ReturnType]] = weakref.WeakKeyDictionary()

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        """A jitted method: each instance gets a capture of its own, since the kernels read that instance's tensors
        (a shared capture would replay the first instance's weights for every other one)."""
        if instance is None:
            return self
        try:
            jit = self._instance_jits.get(instance)
            if jit is None:
                jit = self._instance_jits[instance] = type(self)(self.function, prune=self.prune)
        except TypeError:  # an instance that cannot be weakly referenced or hashed shares this capture
            jit = self
        return functools.partial(jit.__call__, instance)

    @property
    def captured(self) -> CapturedJit | None:
        """The capture (None before the second call): `jit_cache` (the launches), `free_intermediates()`, `ret`."""
        return self._captured

    @property
    def captured_kernel_count(self) -> int:
        """Kernel launches the replay runs (0 before capture)."""
        return self.replay.kernel_count if self.replay is not None else 0

    def __call__(self, *args: Any, **kwargs: Any) -> ReturnType:
        # keyword arguments by name, as tinygrad: a replay called with them in another order maps the same inputs
        values = list(args) + [kwargs[name] for name in sorted(kwargs)] if kwargs else list(args)
        tensor_type = _TENSOR_TYPE[0] if _TENSOR_TYPE else _tensor_type()
        only_tensors = True
        for value in values:  # a loop, not all() over a generator: this runs on every call
            if value.__class__ is not tensor_type:
                only_tensors = False
                break
        if only_tensors:
            inputs: list[Tensor] = values  # the common call: nothing nested to look into, no Variables to bind
        else:
            inputs = []
            _collect_tensors(values, inputs)
        if len(inputs) > 1 and len({id(tensor) for tensor in inputs}) != len(inputs):
            raise JitError("the same Tensor is passed twice to a TinyJit function: pass it once")
        if not _jit_enabled[0]:
            return self.function(*args, **kwargs)
        if active_captures and CAPTURING:  # capturing(), read without its call
            raise JitError("having TinyJit inside another TinyJit is not supported: jit only the outer function "
                           "(call the inner one's undecorated function there)")
        if self.replay is not None:
            bindings: dict[UOp, int] = {}
            if not only_tensors:  # only arguments other than Tensors can hold bound Variables
                _collect_bindings(values, bindings)
            return self._replay(inputs, bindings)
        input_buffers = _input_buffers(inputs)
        self.count += 1
        if self.count == 1:
            return self._call_and_realize(args, kwargs)
        recorded = capture_begin()
        try:
            result = self._call_and_realize(args, kwargs)
        finally:
            capture_end()
        other = _non_tensor_value(result)
        if other is not None:  # checked at capture, as tinygrad: the replay hands back the captured value
            raise JitError(f"a TinyJit function returned a {type(other).__name__} next to its Tensors: a replay "
                           "would return the captured value again; return only Tensors (or None)")
        if not recorded:
            raise JitError(f"TinyJit captured no kernel in {getattr(self.function, '__name__', 'the function')}: "
                           "it must realize tensors (return them realized, or call .realize())")
        pruned: list[CapturedCall] = []
        if self.prune:
            recorded, pruned = _prune(recorded, input_buffers)
            _settle_pruned(pruned)
        pools = _plan_temporaries(recorded)
        from tinycore.device.registry import Device
        first = recorded[0]  # a kernel's device, or a copy's destination's: its graph may run the whole capture
        graph = Device[first.runner.device if first.runner is not None else first.buffers[0].device].graph
        replay = graph(recorded, input_buffers, pools) if graph is not None else None
        self.replay = replay if replay is not None else _Replay(recorded, input_buffers, pools)
        self._captured = CapturedJit(self.replay, result, len(pruned), input_buffers)
        self.captured_signature = _signature(inputs)
        self.captured_return = result
        returned: list[Tensor] = []
        _collect_tensors(result, returned)
        # a function that returns one of its inputs (`b.assign(a + 1)`) returns that call's input on each replay
        self._returned_inputs = [(position, index) for position, tensor in enumerate(returned)
                                 for index, given in enumerate(inputs) if tensor is given]
        return result

    def _call_and_realize(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run the function and realize the tensors it returns (together, as tinygrad does), so a function that
        returns lazy tensors is captured with the kernels that compute them."""
        from tinycore.tensor import Tensor
        result = self.function(*args, **kwargs)
        self._check_return(result)
        outputs: list[Tensor] = []
        _collect_tensors(result, outputs)
        # a write into an input (t[2:4] = a, t.assign(...)) stays lazy until read; it is part of the step, so it is
        # realized (and captured) with the outputs, as tinygrad's eager setitem is
        written: list[Tensor] = []
        _collect_tensors((args, kwargs), written)
        outputs += [tensor for tensor in written if _writes_pending(tensor) and all(tensor is not output
                                                                                     for output in outputs)]
        if outputs:
            Tensor.realize(*outputs)
        return result

    def _check_return(self, result: object) -> None:
        found: list[Tensor] = []
        _collect_tensors(result, found)
        if result is not None and not found:
            raise JitError(f"a TinyJit function must return Tensors (or None), got {type(result).__name__}: "
                           "return the tensors it computes")

    def _replay(self, inputs: list[Tensor], bindings: dict[UOp, int]) -> ReturnType:
        captured, known = self._captured, self._known_inputs
        assert captured is not None
        if known is None or (input_buffers := known.buffers_for(inputs)) is None:
            assert self.captured_signature is not None
            plain = _whole_buffer_inputs(inputs, self.captured_signature)
            if plain is not None:
                input_buffers, known = plain, _KnownInputs(inputs, plain, int_shapes=True)
            else:
                input_buffers = self._checked_input_buffers(inputs)
                known = _KnownInputs(inputs, input_buffers)
            self._known_inputs = known
        if known.shape_bindings:
            bindings.update(known.shape_bindings)
        # the tests before each call: a replay runs these lines on every TinyJit call, where a call is 0.1 us
        if captured.released:
            captured.prepare()
        if captured.random_keys:
            captured.next_random_keys()
        self.replay = replay = captured.replay
        replay.run(input_buffers, bindings)
        totals = captured._totals
        if totals is None or totals[0] is not replay:
            totals = captured.totals()
        _counts.kernel_count += totals[1]
        _counts.global_ops += totals[2]
        _counts.global_mem += totals[3]
        if remembered_results:  # the replay wrote buffers outside realize: results remembered before are stale
            invalidate_known_results()
        if self._returned_inputs:
            returned: list[Tensor] = []
            _collect_tensors(self.captured_return, returned)
            for position, index in self._returned_inputs:
                returned[position].uop = inputs[index].uop
        if bindings:
            _rebind(self.captured_return, bindings)
        return self.captured_return  # type: ignore[return-value]  # set with the replay, on the capturing call

    def _checked_input_buffers(self, inputs: list[Tensor]) -> list[Buffer]:
        """The inputs' Buffers for a replay, after checking their shapes, dtypes and devices against the capture's."""
        assert self.captured_signature is not None
        signature = _signature(inputs)
        if signature != self.captured_signature:
            if len(signature) != len(self.captured_signature):
                raise JitError(f"TinyJit captured {len(self.captured_signature)} tensor input(s), this call passes "
                               f"{len(signature)}: pass the same tensors, or call reset() to capture again")
            for position, (now, then) in enumerate(zip(signature, self.captured_signature, strict=True)):
                if now != then:
                    raise JitInputError(f"TinyJit input {position} changed from shape={then[0]} dtype={then[1]} "
                                   f"device={then[2]} (sharded axis {then[3]}) to shape={now[0]} dtype={now[1]} "
                                   f"device={now[2]} (sharded axis {now[3]}): "
                                   "use one TinyJit per input signature, or call reset() to capture again")
        return _input_buffers(inputs)
