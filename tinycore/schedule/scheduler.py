"""The scheduler: tensor-level outputs to an ordered list of ScheduleItems (kernels and copies)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from tinycore.dtype import dtypes
from tinycore.schedule.device_facts import DeviceFactsLookup, no_device_facts
from tinycore.schedule.empty import fold_empty
from tinycore.schedule.factor import factor_reduces
from tinycore.schedule.fusion import find_roots
from tinycore.schedule.lower import lower_kernel
from tinycore.schedule.nodes import (
    assign_target_view,
    earlier_assigns,
    is_contiguous_buffer_view,
    is_realized_view,
    strip_identity,
    view_base,
)
from tinycore.schedule.split_reduce import split_large_reduces
from tinycore.schedule.views import range_node
from tinycore.uop.buffer import new_buffer_uop
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp


class ScheduleItem(NamedTuple):
    """One step of a schedule.

    A kernel: `ast` is its kernel AST (a SINK) and `buffers` its BUFFER nodes, outputs first then inputs, in
    DEFINE_GLOBAL order; `var_vals` the values of its DEFINE_VARs. A copy: `ast` is a COPY node with no sources
    and `buffers` is (destination, source), each a BUFFER or a BUFFER_VIEW (a contiguous range of a buffer: a
    slice, reshape or same-size bitcast of it is copied without a kernel and without touching the rest).
    """

    ast: UOp
    buffers: tuple[UOp, ...]
    var_vals: dict[UOp, int] = {}  # shared default, never mutated

    @property
    def is_copy(self) -> bool:
        """True for a copy between devices."""
        return self.ast.op is Ops.COPY


@dataclass
class Schedule:
    """The items to run in order, for each output the realized node that replaces it, and whether any item
    overwrites an existing buffer (an ASSIGN)."""

    items: list[ScheduleItem]
    outputs: list[UOp]
    has_assign: bool = False
    temporaries: tuple[UOp, ...] = ()  # new BUFFERs no output refers to: freed after their last use


def _output_view(root: UOp) -> UOp:
    """A new buffer holding `root` in C order, viewed with `root`'s shape (or the target of an ASSIGN)."""
    if root.op is Ops.ASSIGN:
        return assign_target_view(root.src[0])
    device = root.device
    if isinstance(device, tuple):
        raise NotImplementedError(f"realizing a node on several devices {device} is not supported")
    size = root.size
    if isinstance(size, int):
        return new_buffer_uop(device, root.dtype, size).reshape(root.shape)
    # a symbolic size: room for the largest value the variables allow, the first `size` elements used
    largest = int(size.vmax)
    return new_buffer_uop(device, root.dtype, largest).shrink(((0, size),)).reshape(root.shape)


def create_schedule(outputs: Sequence[UOp], facts: DeviceFactsLookup = no_device_facts) -> Schedule:
    """The kernels and copies that realize `outputs` together, in dependency order; `facts` gives each device's
    buffer limit and view support (the engine passes the opened devices' facts).

    Two ASSIGNs may each read, inside their kernels, the buffer the other overwrites (a step updating `x` and `W`
    of `x @ W` together: each gradient reads the other parameter). No order of the two kernels is right, so the
    value of an ASSIGN on such a cycle is computed into a buffer of its own first, and the write only copies it.
    """
    outputs = split_large_reduces(factor_reduces(fold_empty(outputs)), facts)
    forced: dict[UOp, None] = {}
    while True:
        roots = find_roots(outputs, tuple(forced), facts)
        realized = {root: _output_view(root) for root in roots}
        steps: dict[UOp, ScheduleItem | None] = {}
        dependencies: dict[UOp, tuple[UOp, ...]] = {}
        for root in roots:
            steps[root], dependencies[root] = _schedule_root(root, realized)
        try:
            order = _order(roots, dependencies, realized, steps)
            break
        except _AssignCycleError as cycle:
            values = [strip_identity(assign.src[1]) for assign in cycle.assigns]
            splittable = [value for value in values if value not in roots and not is_realized_view(value)]
            if not splittable:
                raise RuntimeError("the schedule has a cycle: an ASSIGN's value depends on reads that must follow "
                                   "it") from None
            forced.update(dict.fromkeys(splittable))
    items = [item for item in (steps[root] for root in order) if item is not None]
    results = []
    for output in outputs:
        stripped = strip_identity(output)
        results.append(realized[stripped] if stripped in realized else stripped)
    kept = {view_base(result) for result in results}
    temporaries = tuple(view_base(realized[root]) for root in roots if root.op is not Ops.ASSIGN
                        and view_base(realized[root]) not in kept)
    return Schedule(items, results, any(root.op is Ops.ASSIGN for root in roots), temporaries)


class _AssignCycleError(Exception):
    """Raised by _order: `assigns` must each follow a reader of the buffer it overwrites that (through the others)
    depends on it."""

    def __init__(self, assigns: list[UOp]):
        super().__init__("the schedule has a cycle through ASSIGNs")
        self.assigns = assigns


def _schedule_root(root: UOp, realized: dict[UOp, UOp]) -> tuple[ScheduleItem | None, tuple[UOp, ...]]:
    """The item that computes `root` (None when there is nothing to do) and the roots it reads."""
    if root.op is Ops.COPY:
        return _copy_item(root.src[0], view_base(realized[root]), realized)
    if root.size == 0:
        return None, ()
    if root.op is Ops.ASSIGN and strip_identity(root.src[1]) is strip_identity(root.src[0]):
        return None, tuple(earlier_assigns(root.src[0]))
    value = strip_identity(root.src[1]) if root.op is Ops.ASSIGN else root
    if root.op is Ops.ASSIGN and value.op is Ops.COPY and value not in realized:
        # a copy folded into the assign (see fusion.find_roots): it writes the target's range directly
        destination = range_node(assign_target_view(root.src[0]))
        if destination is None:
            raise RuntimeError(f"an ASSIGN of a copy into {assign_target_view(root.src[0]).op} is not a range")
        item, reads = _copy_item(value.src[0], destination, realized)
        return item, reads + tuple(earlier_assigns(root.src[0]))
    ast, buffers, reads, var_vals = lower_kernel(root, realized)
    if root.op is Ops.ASSIGN:
        reads = reads + tuple(earlier_assigns(root.src[0]))
    return ScheduleItem(ast, buffers, var_vals), reads


def _copy_item(source: UOp, destination: UOp, realized: dict[UOp, UOp]) -> tuple[ScheduleItem, tuple[UOp, ...]]:
    """The copy of `source` into the BUFFER / BUFFER_VIEW `destination`, and the roots it reads.

    A source that is a root reads its new buffer; a contiguous range of an existing buffer is read through a
    BUFFER_VIEW of that range (nothing else of the buffer is touched)."""
    source = strip_identity(source)
    if source in realized:
        source_buffer = view_base(realized[source])
    elif is_contiguous_buffer_view(source):
        source_buffer = view_base(source)
    else:
        found = range_node(source)
        if found is None:
            raise RuntimeError(f"the source of a copy ({source.op}) is neither realized nor a range of a buffer")
        source_buffer = found
    copy = UOp(Ops.COPY, dtypes.void, (), (source_buffer.device, destination.device))
    return ScheduleItem(copy, (destination, source_buffer)), ((source,) if source in realized else ())


def _whole_buffer(node: UOp) -> UOp:
    """The BUFFER under BUFFER_VIEW nodes."""
    while node.op is Ops.BUFFER_VIEW:
        node = node.src[0]
    return node


def _order(roots: dict[UOp, None], dependencies: dict[UOp, tuple[UOp, ...]], realized: dict[UOp, UOp],
           steps: dict[UOp, ScheduleItem | None]) -> list[UOp]:
    """The roots in an order where each comes after the roots it reads, and an ASSIGN after the other items that
    read the buffer it overwrites (they read the old value). Raises _AssignCycleError, naming the ASSIGNs whose kernels
    read a buffer another ASSIGN on the cycle overwrites, when no such order exists."""
    edges: dict[UOp, set[UOp]] = {root: set(dependencies[root]) for root in roots}
    after_readers: dict[UOp, set[UOp]] = {}
    assigns = [root for root in roots if root.op is Ops.ASSIGN]
    if assigns:
        upstream_cache: dict[UOp, set[UOp]] = {}

        def upstream(root: UOp) -> set[UOp]:
            found = upstream_cache.get(root)
            if found is None:
                found = upstream_cache[root] = _upstream(root, dependencies)
            return found

        readers: dict[UOp, list[UOp]] = {}
        for root, item in steps.items():
            if item is not None:
                for buffer in item.buffers[1:]:
                    readers.setdefault(_whole_buffer(buffer), []).append(root)
        for assign in assigns:
            for reader in readers.get(_whole_buffer(view_base(realized[assign])), ()):
                if reader is not assign and reader not in upstream(assign) and assign not in upstream(reader):
                    edges[assign].add(reader)
                    after_readers.setdefault(assign, set()).add(reader)
    order: list[UOp] = []
    placed: set[UOp] = set()
    path: dict[UOp, None] = {}  # the nodes being visited, in the order they were entered
    for start in roots:
        stack = [(start, False)]
        while stack:
            node, children_done = stack.pop()
            if node in placed:
                continue
            if children_done:
                placed.add(node)
                del path[node]
                order.append(node)
                continue
            if node in path:
                raise _AssignCycleError(_readers_on_cycle(list(path), node, after_readers))
            path[node] = None
            stack.append((node, True))
            stack.extend((dependency, False) for dependency in edges[node] if dependency not in placed)
    return order


def _readers_on_cycle(path: list[UOp], entry: UOp, after_readers: dict[UOp, set[UOp]]) -> list[UOp]:
    """The ASSIGNs on the cycle `path[path.index(entry):]` (closed by an edge back to `entry`) that a
    must-follow-the-readers edge of the cycle points at: they read a buffer another ASSIGN overwrites."""
    cycle = path[path.index(entry):]
    found = []
    for position, node in enumerate(cycle):
        following = cycle[position + 1] if position + 1 < len(cycle) else entry
        if following.op is Ops.ASSIGN and following in after_readers.get(node, ()):
            found.append(following)
    return found


def _upstream(root: UOp, dependencies: dict[UOp, tuple[UOp, ...]]) -> set[UOp]:
    """Every root that `root` depends on, directly or not."""
    seen: set[UOp] = set()
    stack = list(dependencies[root])
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            stack.extend(dependencies[node])
    return seen
