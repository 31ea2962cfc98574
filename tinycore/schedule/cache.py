"""The schedule cache: a computation rebuilt on new buffers reuses the schedule made for the first one.

The key is the structure of the output graphs with BUFFER identities abstracted: each node is written as
(op, dtype, arg, source positions) in toposort order, and each BUFFER as (dtype, element count, device) plus its
position among the inputs. Two graphs with the same key differ only in which buffers they read, so their schedules
differ only in the buffers the items name: the cache keeps the items with buffer slots and fills them in.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tinycore.helpers import SCACHE
from tinycore.schedule.device_facts import DeviceFactsLookup, no_device_facts
from tinycore.schedule.nodes import strip_identity
from tinycore.schedule.scheduler import Schedule, ScheduleItem, create_schedule
from tinycore.uop.buffer import new_buffer_uop
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp, _arg_key

_VIEW = object()
"""Marks a template slot that is a BUFFER_VIEW of an earlier slot rather than a new buffer."""

CACHE_LIMIT = 4096
"""How many distinct graph structures the cache remembers (the oldest is forgotten first)."""


def _float_key(arg: float) -> tuple[str, str]:
    """A float made distinct where Python equality is too loose (0.0 == -0.0); other args are already exact
    together with the node's dtype (a CONST's value is truncated to its dtype)."""
    return ("float", repr(arg))


def structure_key(outputs: Sequence[UOp]) -> tuple[tuple[object, ...], list[UOp]]:
    """The structural key of `outputs` and their BUFFER nodes in order of first appearance.

    The key is built from primitive values (op numbers, dtype names) so hashing and comparing it is cheap.
    """
    if len(outputs) == 1 and "_nodes_below" not in outputs[0].__dict__:
        root = outputs[0]
        return _composed_structure_key(root) or _walked_structure_key(outputs)
    if len(outputs) > 1:
        # one walk over every output: the union of their toposorts walked each output's whole graph again, and the
        # outputs of one step (an optimizer's) share most of theirs
        return _walked_structure_key(outputs)
    numbering: dict[UOp, int] = {}
    parts: list[object] = []
    inputs: list[UOp] = []
    buffer_op = Ops.BUFFER
    nodes = outputs[0].toposort
    number = numbering.__getitem__
    # the common source counts spelled out: this walk runs on every realize
    for position, node in enumerate(nodes):
        numbering[node] = position
        op = node.op
        src = node.src
        if op is buffer_op:
            inputs.append(node)
            parts.append((-1, node.dtype.name, node.arg[1], number(src[0])))
            continue
        arg = node.arg
        if arg.__class__ is float:
            arg = _float_key(arg)
        count = len(src)
        sources = () if count == 0 else (number(src[0]),) if count == 1 else \
            (number(src[0]), number(src[1])) if count == 2 else tuple(map(number, src))
        parts.append((op._value_, node.dtype.name, arg, sources))
    parts.append(tuple([numbering[output] for output in outputs]))
    return tuple(parts), inputs


_COMPOSED: dict[tuple[object, ...], tuple[tuple[object, ...], tuple[int, ...]]] = {}
"""An op's description from its sources (`_composed_structure_key`) -> its graph's key and the source positions
of the graph's BUFFER nodes, in the key's input order."""
COMPOSED_LIMIT = 1024
"""How many op descriptions `_COMPOSED` keeps (it holds their constant sources alive): emptied when full."""
SMALL_CONSTANT_NODES = 6
"""The most nodes a buffer-free source may have for `_composed_structure_key` to describe it by identity."""


def _composed_structure_key(root: UOp) -> tuple[tuple[object, ...], list[UOp]] | None:
    """`structure_key([root])` for an op whose sources are BUFFER nodes and small graphs without buffers (an eager
    `x + 1`), by one dictionary lookup: such a graph's structure is fixed by the op, each buffer's dtype, size and
    device node, which sources are the same buffer, and the buffer-free sources themselves (hash-consed nodes,
    compared by identity). None for any other graph (the walk keys it)."""
    sources = root.src
    if not sources or len(sources) > 3:
        return None
    buffer_op = Ops.BUFFER
    described: list[object] = []
    buffers: list[UOp] = []
    for source in sources:
        if source.op is buffer_op:
            if source in buffers:
                described.append(buffers.index(source))
            else:
                buffers.append(source)
                described.append((source.dtype.name, source.arg[1], source.src[0]))
        elif source.__dict__.get(_SMALL_CONSTANT_ATTRIBUTE) or _is_small_constant(source):
            described.append(source)
        else:
            return None
    arg = root.arg
    # the op's number, not the Ops member: an Enum's hash is a Python-level call
    description = (root.op._value_, root.dtype.name, None if arg is None else _arg_key(arg), tuple(described))
    found = _COMPOSED.get(description)
    if found is not None:
        return found[0], [sources[position] for position in found[1]]
    key, inputs = _walked_structure_key((root,))
    positions = tuple(sources.index(buffer) for buffer in buffers)
    if inputs == buffers:  # always, by the walk's order; checked so that a mismatch costs only the shortcut
        if len(_COMPOSED) >= COMPOSED_LIMIT:
            _COMPOSED.clear()
        _COMPOSED[description] = (key, positions)
    return key, inputs


def _is_small_constant(node: UOp) -> bool:
    """True when `node`'s graph has no BUFFER and at most SMALL_CONSTANT_NODES nodes (a broadcast constant); kept
    on the node, whose graph never changes."""
    known = node.__dict__.get(_SMALL_CONSTANT_ATTRIBUTE)
    if known is None:
        known = node.__dict__[_SMALL_CONSTANT_ATTRIBUTE] = _count_small_constant(node)
    return known


_SMALL_CONSTANT_ATTRIBUTE = "_small_constant"


def _count_small_constant(node: UOp) -> bool:
    """`_is_small_constant(node)` by a walk that stops at the first BUFFER or past SMALL_CONSTANT_NODES nodes."""
    stack, seen = [node], 0
    while stack:
        current = stack.pop()
        seen += 1
        if current.op is Ops.BUFFER or seen > SMALL_CONSTANT_NODES:
            return False
        stack.extend(current.src)
    return True


def _walked_structure_key(roots: Sequence[UOp]) -> tuple[tuple[object, ...], list[UOp]]:
    """`structure_key(roots)` numbering the nodes as the walk finishes them, in the order of the union of the roots'
    toposorts (the same depth-first walk, sources in order, each root's after the previous one's): a new eager graph
    has no cached toposort, and building one only to number it was half the key's cost."""
    numbering: dict[UOp, int] = {}
    parts: list[object] = []
    inputs: list[UOp] = []
    buffer_op = Ops.BUFFER
    number = numbering.__getitem__
    stack: list[tuple[UOp, bool]] = [(root, False) for root in reversed(roots)]
    pop, push = stack.pop, stack.append
    while stack:
        node, sources_done = pop()
        if node in numbering:
            continue
        src = node.src
        if not sources_done:
            if src:
                push((node, True))
                for source in reversed(src):
                    if source not in numbering:
                        push((source, False))
                continue
        numbering[node] = len(parts)
        op = node.op
        if op is buffer_op:
            inputs.append(node)
            parts.append((-1, node.dtype.name, node.arg[1], number(src[0])))
            continue
        arg = node.arg
        if arg.__class__ is float:
            arg = _float_key(arg)
        count = len(src)
        sources = () if count == 0 else (number(src[0]),) if count == 1 else \
            (number(src[0]), number(src[1])) if count == 2 else tuple(map(number, src))
        parts.append((op._value_, node.dtype.name, arg, sources))
    parts.append(tuple([numbering[root] for root in roots]))
    return tuple(parts), inputs


_STRUCTURE_ATTRIBUTE = "_structure_key"


def node_structure_key(node: UOp) -> tuple[tuple[object, ...], list[UOp]]:
    """`structure_key([node])`, kept on the node after the first call: a node's graph never changes, so neither
    does its key (realize asks again for every node realized twice, and the setitem front end for its inputs)."""
    found = node.__dict__.get(_STRUCTURE_ATTRIBUTE)
    if found is None:
        found = node.__dict__[_STRUCTURE_ATTRIBUTE] = structure_key([node])
    return found


def set_node_structure_key(node: UOp, keyed: tuple[tuple[object, ...], list[UOp]]) -> None:
    """Record `keyed` as `node`'s structure key, for a caller that derived it without the walk (it must equal
    `structure_key([node])`)."""
    node.__dict__.setdefault(_STRUCTURE_ATTRIBUTE, keyed)


@dataclass
class _Template:
    """A schedule with buffers replaced by slots: inputs first (by position), then new buffers.

    `plan` is free for the engine to keep what it derives from the template once (the compiled launches of its
    items); the scheduler never reads it.
    """

    items: list[tuple[UOp, tuple[int, ...], dict[UOp, int]]]
    new_buffers: list[tuple[Any, Any, Any]]
    results: list[tuple[str, Any, Any]]
    input_count: int
    has_assign: bool
    temporaries: tuple[int, ...]
    plan: Any = None

    def new_slot(self, slots: list[UOp], position: int) -> UOp:
        """The node of new-buffer slot `position` (counted from the first new buffer), given the earlier slots."""
        device, dtype, size = self.new_buffers[position]
        if device is _VIEW:
            base_slot, view_arg = size
            return UOp(Ops.BUFFER_VIEW, dtype, (slots[base_slot],), view_arg)
        return new_buffer_uop(device, dtype, size)

    def fill_slots(self, inputs: list[UOp]) -> list[UOp]:
        """Every slot's node: `inputs`, then a new BUFFER (or BUFFER_VIEW) node per new buffer."""
        slots = list(inputs)
        for position in range(len(self.new_buffers)):
            slots.append(self.new_slot(slots, position))
        return slots

    def outputs_for(self, outputs: Sequence[UOp], slots: list[UOp]) -> list[UOp]:
        """The realized node of each of `outputs` once the schedule ran on `slots`."""
        results = []
        for kind, first, second in self.results:
            if kind == "slot":
                buffer = slots[first]
                # the shape was checked when the template was made: the node is built without re-checking it
                results.append(buffer if second is None else
                               UOp.keyed(Ops.RESHAPE, buffer.dtype, (buffer,), second[0], second[1]))
            elif kind == "same":
                results.append(strip_identity(outputs[first]))
            else:
                placeholders = {placeholder: slots[slot] for placeholder, slot in second}
                results.append(first.substitute(placeholders))
        return results

    def instantiate(self, outputs: Sequence[UOp], inputs: list[UOp]) -> Schedule:
        """This schedule for graphs of the same structure reading `inputs`."""
        slots = self.fill_slots(inputs)
        items = [ScheduleItem(ast, tuple(slots[slot] for slot in buffer_slots), var_vals)
                 for ast, buffer_slots, var_vals in self.items]
        return Schedule(items, self.outputs_for(outputs, slots), self.has_assign,
                        tuple(slots[slot] for slot in self.temporaries))


def _make_template(schedule: Schedule, outputs: Sequence[UOp], inputs: list[UOp]) -> _Template:
    """`schedule` with its buffers turned into slots."""
    slot_of: dict[UOp, int] = {buffer: position for position, buffer in enumerate(inputs)}
    new_buffers: list[tuple[Any, Any, Any]] = []

    def slot(buffer: UOp) -> int:
        # a loop, not a recursion over BUFFER_VIEW chains: a closure that calls itself is a reference cycle, which
        # kept this schedule's buffers (its results included) allocated until the cyclic collector ran
        chain = [buffer]
        while chain[-1] not in slot_of and chain[-1].op is Ops.BUFFER_VIEW:
            chain.append(chain[-1].src[0])
        for node in reversed(chain):
            if node in slot_of:
                continue
            if node.op is Ops.BUFFER_VIEW:  # a range of another slot's buffer, rebuilt over that slot
                entry: tuple[Any, Any, Any] = (_VIEW, node.dtype, (slot_of[node.src[0]], node.arg))
            else:
                entry = (node.src[0].arg, node.dtype, node.arg[1])
            slot_of[node] = len(inputs) + len(new_buffers)
            new_buffers.append(entry)
        return slot_of[buffer]

    items = [(item.ast, tuple(slot(buffer) for buffer in item.buffers), item.var_vals) for item in schedule.items]
    results: list[tuple[str, Any, Any]] = []
    for position, (output, result) in enumerate(zip(outputs, schedule.outputs, strict=True)):
        if result is strip_identity(output):
            results.append(("same", position, None))
        elif result.op is Ops.RESHAPE and result.src[0].op is Ops.BUFFER:
            # a new buffer, or an input assigned into (every in-place write): rebuilt without walking a graph
            results.append(("slot", slot(result.src[0]), (result.shape, _arg_key(result.shape))))
        elif result.op is Ops.BUFFER and result not in inputs:
            results.append(("slot", slot(result), None))
        else:
            buffers = [node for node in result.toposort if node.op is Ops.BUFFER]
            mapping = {buffer: UOp(Ops.BUFFER, buffer.dtype, buffer.src, (-1 - slot(buffer), buffer.arg[1]))
                       for buffer in buffers}
            results.append(("graph", result.substitute(mapping), tuple((placeholder, slot_of[buffer])
                                                                         for buffer, placeholder in mapping.items())))
    temporaries = tuple(slot(buffer) for buffer in schedule.temporaries)
    return _Template(items, new_buffers, results, len(inputs), schedule.has_assign, temporaries)


_cache: dict[tuple[object, ...], _Template] = {}


def cached_template(key: tuple[object, ...]) -> _Template | None:
    """The template cached under the structure key `key` (see structure_key), if any (none under SCACHE=0)."""
    return _cache.get(key) if SCACHE.value else None


def schedule_cached(outputs: Sequence[UOp], facts: DeviceFactsLookup = no_device_facts,
                    keyed: tuple[tuple[object, ...], list[UOp]] | None = None) -> Schedule:
    """`create_schedule(outputs, facts)`, reusing the schedule of an earlier graph of the same structure (a device's
    facts must not change once its schedules are cached). `keyed` is `structure_key(outputs)` when the caller has
    it already."""
    if not SCACHE.value:
        return create_schedule(outputs, facts)
    key, inputs = structure_key(outputs) if keyed is None else keyed
    template = _cache.get(key)
    if template is not None:
        return template.instantiate(outputs, inputs)
    schedule = create_schedule(outputs, facts)
    if len(_cache) >= CACHE_LIMIT:
        del _cache[next(iter(_cache))]
    _cache[key] = _make_template(schedule, outputs, inputs)
    return schedule


def clear_schedule_cache() -> None:
    """Forget every cached schedule."""
    global _generation
    _cache.clear()
    _generation += 1


_generation = 0
"""Counts clear_schedule_cache calls: a template kept outside the cache is used only within its generation."""
_TEMPLATE_ATTRIBUTE = "_template"


def schedule_generation() -> int:
    """How many times the schedule cache was cleared (templates kept elsewhere are tagged with it)."""
    return _generation


def known_template(key: tuple[object, ...]) -> tuple[int, _Template] | None:
    """The template cached under `key` once it has a launch plan, tagged with the cache's generation, for a caller
    that hands it to the nodes of that structure it builds (see set_node_template); None before."""
    template = _cache.get(key) if SCACHE.value else None
    return None if template is None or template.plan is None else (_generation, template)


def set_node_template(node: UOp, known: tuple[int, _Template]) -> None:
    """Record that `node` (whose structure key is the template's) is realized by the template in `known`."""
    node.__dict__[_TEMPLATE_ATTRIBUTE] = known


def template_of(node: UOp, key: tuple[object, ...]) -> _Template | None:
    """`cached_template(key)` for `node` of structure `key`, without hashing the key when the node carries its
    template from this cache generation."""
    if not SCACHE.value:
        return None
    known = node.__dict__.get(_TEMPLATE_ATTRIBUTE)
    if known is not None and known[0] == _generation:
        return known[1]
    return _cache.get(key)
