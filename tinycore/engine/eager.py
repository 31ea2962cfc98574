"""The eager shortcut: a few elementwise ops over realized buffers and constants, realized without their schedule.

Eager code realizes graphs like `x + 1`, `x * y` or `a - b` (ADD(a, NEG(b))) one at a time. Their cached schedule is
one kernel writing one new buffer, yet running it through the template (structure key, slots, outputs) costs several
times the launch. Here such a graph is recognised by a walk from its root: elementwise ops (at most `_CHAIN_NODES`
below the root) whose other sources are BUFFER nodes (possibly reshaped) or graphs of constants without buffers (the
broadcast scalar). Its key (each op with its dtype and arg, each buffer's dtype, size, device and reshape, which
sources are the same buffer, the constant graphs themselves) maps to an `EagerPlan` made from the general path's
launch plan the first time that path ran this structure; later graphs of the structure allocate the result and
launch. Anything else (a reduce, a movement op between ops, several devices, symbolic sizes, a plan of more than one
kernel) is not matched and takes the general path. Fusion and laziness stay as they are: the shortcut is taken only
at realize time, for a graph whose plan is the one fused kernel the general path made for it.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tinycore.counters import totals as _counts
from tinycore.device.buffer import Buffer
from tinycore.engine.memory import _BUFFER_ATTRIBUTE, _allocator_of, buffer_of
from tinycore.helpers import BEAM, DEBUG, NUM_CPU_THREADS, SCACHE
from tinycore.uop.buffer import _unique_ids, device_node
from tinycore.uop.opcodes import GroupOp
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp

# Ops members as module constants: eager_key reads several per realize, and a global is one read where `Ops.X` is
# two (before opcodes.fast_member_access, on Python 3.11, `Ops.X` was a Python-level call: ten times a global)
_BUFFER, _RESHAPE, _EXPAND, _CONST, _DEVICE = Ops.BUFFER, Ops.RESHAPE, Ops.EXPAND, Ops.CONST, Ops.DEVICE
_ELEMENTWISE = GroupOp.ALU | {Ops.CAST}
_CONSTANT_CHAIN = frozenset({Ops.RESHAPE, Ops.EXPAND})
_CHAIN_NODES = 6
"""How many elementwise ops below the root a shortcut graph may hold (hash-consing makes equal subgraphs one node,
so the walk's description determines the graph)."""
_CONSTANT_DEPTH = 4
"""How many RESHAPE/EXPAND steps a constant source may take before its CONST (`x + 1` takes one or two)."""
CACHE_LIMIT = 512
"""The most structures kept; the oldest goes first (eager programs use a handful)."""


shortcut_threads: int | None = None
"""NUM_CPU_THREADS (as realize's launch plans read it) while the shortcut may run: DEBUG < 1, SCACHE on, BEAM off;
None otherwise. Watchers on the four settings keep it current, so that realize reads one attribute, not four
settings."""
_mirrored: dict[str, object] = {}


def _mirror(name: str) -> Callable[[object], None]:
    """The watcher of the setting `name`: records its new value and recomputes `shortcut_threads`."""
    def watcher(value: object) -> None:
        global shortcut_threads
        _mirrored[name] = value
        try:
            allowed = _mirrored["DEBUG"] < 1 and _mirrored["SCACHE"] and not _mirrored["BEAM"]  # type: ignore[operator]
            shortcut_threads = int(_mirrored["NUM_CPU_THREADS"]) if allowed else None  # type: ignore[call-overload]
        except (KeyError, TypeError, ValueError):  # not all watched yet, or a value the general path will judge
            shortcut_threads = None
    return watcher


for _setting in (DEBUG, SCACHE, BEAM, NUM_CPU_THREADS):
    _setting.watch(_mirror(_setting.key))


class EagerPlan:
    """What realizing one structure takes: the kernel's launch, the order of its arguments (positions in the
    inputs, the result last), the result buffer (device, dtype, size), the result's shape node arguments and the
    counters one launch adds. `threads` (NUM_CPU_THREADS) and `generation` say which launch plan and schedule cache
    it came from. The result's BUFFER node sources, shape and allocator are kept too: each run builds its node and
    Buffer from them directly (new_buffer_uop's and Buffer's general paths are several Python calls)."""

    __slots__ = ("launch", "order", "device", "dtype", "size", "reshape", "ops", "mem", "threads", "generation",
                 "sources", "shape", "allocator", "one_input")

    def __init__(self, launch: Callable[[list[Any]], None], order: tuple[int, ...], result: tuple[str, Any, int],
                 reshape: tuple[Any, Any] | None, counts: tuple[Any, Any], tags: tuple[int, int]):
        self.launch, self.order, self.reshape = launch, order, reshape
        self.device, self.dtype, self.size = result
        self.ops, self.mem = counts
        self.threads, self.generation = tags
        self.sources, self.shape, self.allocator = (device_node(self.device),), (self.size,), _allocator_of(self.device)
        # the launch takes one input, then the result (`x + 1`): run_plan passes them without the order's loop
        self.one_input = order == (0, 1)


plans: dict[tuple[object, ...], EagerPlan] = {}


def eager_key(uop: UOp) -> tuple[tuple[object, ...], list[UOp]] | None:
    """The key of `uop` and its input BUFFER nodes in order when `uop` is elementwise ops (at most `_CHAIN_NODES`
    below the root: `a - b` is ADD(a, NEG(b)), `x * 2 + 1` two ops) over realized buffers (BUFFER or RESHAPE of a
    BUFFER) and buffer-free constant graphs; None for any other graph."""
    if uop.op not in _ELEMENTWISE:
        return None
    sources = uop.src
    if len(sources) == 2:
        # eager code's common graph, `x + 1` or `3 * x`: one BUFFER and one constant, keyed here as
        # _describe_sources keys it, without its frame, lists and loops (a constant off this pattern takes the walk)
        first, second = sources
        buffer, constant = (first, second) if first.op is _BUFFER else (second, first)
        if buffer.op is _BUFFER:
            node = constant
            if node.op is _EXPAND:
                node = node.src[0]
            if node.op is _RESHAPE:
                node = node.src[0]
            if node.op is _CONST and (not node.src or node.src[0].op is _DEVICE):
                described = (buffer.dtype, buffer.arg[1], buffer.src[0], None)
                if buffer is first:
                    return (uop.op, uop.dtype, uop.arg, described, constant), [buffer]
                return (uop.op, uop.dtype, uop.arg, constant, described), [buffer]
    parts: list[object] = [uop.op, uop.dtype, uop.arg]
    inputs: list[UOp] = []
    if _describe_sources(uop, parts, inputs, _CHAIN_NODES) < 0 or not inputs:
        return None
    return tuple(parts), inputs


def _describe_sources(uop: UOp, parts: list[object], inputs: list[UOp], budget: int) -> int:
    """Append to `parts` a description of each source of `uop` (and to `inputs` each new BUFFER): a buffer's dtype,
    size, device node and reshape, or its position when already seen; an elementwise source as its op, dtype, arg
    and source count followed by its own sources' descriptions; a constant graph itself. Returns how many more
    elementwise sources may be walked, or -1 when a source is none of these (or there are too many)."""
    for source in uop.src:
        node, reshape = source, None
        if node.op is _RESHAPE:
            node, reshape = node.src[0], source.arg
        if node.op is _BUFFER:
            for position, known in enumerate(inputs):
                if known is node:
                    parts.append((position, reshape))
                    break
            else:
                inputs.append(node)
                parts.append((node.dtype, node.arg[1], node.src[0], reshape))
            continue
        if source.op in _ELEMENTWISE:  # a fused op below the root: its whole subgraph is part of the key
            if budget <= 0:
                return -1
            parts.append(("op", source.op, source.dtype, source.arg, len(source.src)))
            budget = _describe_sources(source, parts, inputs, budget - 1)
            if budget < 0:
                return -1
            continue
        for _ in range(_CONSTANT_DEPTH):
            if node.op not in _CONSTANT_CHAIN:
                break
            node = node.src[0]
        if node.op is not _CONST or not (not node.src or node.src[0].op is _DEVICE):
            return -1
        parts.append(source)  # hash-consed: the same constant graph is the same node
    return budget


def remember_plan(key: tuple[object, ...], inputs: list[UOp], template: Any, plan: Any, keyed_inputs: list[UOp],
                  generation: int) -> None:
    """Keep the eager plan of `key` when the general path's `template` (just run on `inputs`) has a launch `plan` of
    exactly one kernel with a fixed launch, writing one new buffer that is the result."""
    if plan is None or plan.has_assign or len(plan.steps) != 1 or len(template.new_buffers) != 1:
        return
    threads, width, _ = plan.setting
    if width:  # BEAM's kernels: the shortcut does not run under BEAM
        return
    if len(keyed_inputs) != len(inputs):
        return
    if any(mine is not theirs for mine, theirs in zip(inputs, keyed_inputs, strict=True)):
        return
    step = plan.steps[0]
    results = template.results
    if step.launch is None or step.release or len(results) != 1 or results[0][0] != "slot":
        return
    _, slot, reshape = results[0]
    device, dtype, size = template.new_buffers[0]
    if slot != len(inputs) or not isinstance(device, str) or not isinstance(size, int):
        return
    if len(plans) >= CACHE_LIMIT:
        del plans[next(iter(plans))]
    plans[key] = EagerPlan(step.launch, step.slots, (device, dtype, size), reshape, (plan.ops, plan.mem),
                           (threads, generation))


def run_plan(plan: EagerPlan, inputs: list[UOp]) -> UOp:
    """Allocate the result of `plan` for `inputs`, launch its kernel, and return the realized result node."""
    # new_buffer_uop's work for a one-device node whose device node, shape and allocator the plan keeps
    arg = (next(_unique_ids), plan.size)
    node = UOp.keyed(_BUFFER, plan.dtype, plan.sources, arg, ("ints", arg))
    result = Buffer.allocated(plan.device, plan.size, plan.dtype, plan.allocator)
    attributes = node.__dict__
    attributes["device"], attributes["_shape"], attributes[_BUFFER_ATTRIBUTE] = plan.device, plan.shape, result
    handles: list[Any]
    if plan.one_input:
        known = inputs[0].__dict__.get(_BUFFER_ATTRIBUTE)
        if known is None or known._buf is None:
            known = buffer_of(inputs[0]).ensure_allocated()
        handles = [known._buf, result._buf]
    else:
        handles = []
        count = len(inputs)
        for position in plan.order:
            if position == count:
                handles.append(result._buf)
                continue
            source = inputs[position]
            known = source.__dict__.get(_BUFFER_ATTRIBUTE)
            if known is None or known._buf is None:
                known = buffer_of(source).ensure_allocated()
            handles.append(known._buf)
    plan.launch(handles)
    _counts.kernel_count += 1
    _counts.global_ops += plan.ops
    _counts.global_mem += plan.mem
    if plan.reshape is None:
        return node
    return UOp.keyed(_RESHAPE, node.dtype, (node,), plan.reshape[0], plan.reshape[1])


def clear() -> None:
    """Forget every eager plan."""
    plans.clear()
