"""Fusion: which nodes of a tensor-level graph become buffers (kernel roots) and which are computed inline.

Rules:
- outputs that are not already views of a buffer, CONTIGUOUS, COPY and ASSIGN nodes are roots;
- elementwise ops and movement ops are always computed inside the kernel that uses them (movement ops become
  index arithmetic), recomputed where several kernels use them;
- a broadcast (EXPAND) computed under a reduce is recomputed for each broadcast element unless that work passes
  RECOMPUTE_LIMIT (then its source is a root), except a broadcast along trailing axes that the reduce right above
  it sums (only elementwise ops and such broadcasts between): codegen computes it once per step of the outer loops;
- a REDUCE_AXIS is computed inside its consumer's kernel when it is reached from that kernel's root through
  elementwise ops and non-broadcasting movement ops only (reshape, permute, shrink, flip), and from one kernel
  only; a reduce that is broadcast (EXPAND), padded, used inside another reduce or used by two kernels is a root;
- the source of a COPY is a root unless it is already a contiguous buffer or one contiguous range of a buffer
  (copied through a BUFFER_VIEW, see views.py); a COPY that is the value of an ASSIGN into a contiguous range is
  no root: it copies straight into the target; non-contiguous views of DISK buffers are refused;
- the value of an ASSIGN is a root when its kernel reads the target buffer through a different view or inside a
  reduce (the write would race with the reads); reads inside other roots' kernels, which run earlier, do not count.
- a GATHER reads its source at addresses it loads: the source is reached as through a broadcast (a reduce under it
  gets its own kernel), the index tensors as elementwise inputs; an ASSIGN whose value gathers from the target
  buffer computes that value first (the in-place writes would race with the gathered reads);
- a kernel that would take more buffers than its device's renderer allows (`max_buffers`) gets inner nodes as roots
  of their own until it fits (split.py).
"""
from __future__ import annotations

from collections.abc import Sequence

from tinycore.schedule.device_facts import DeviceFactsLookup, no_device_facts
from tinycore.schedule.nodes import (
    ALWAYS_ROOTS,
    IDENTITY_OPS,
    LEAF_BUFFERS,
    LEAF_VALUES,
    assign_target_view,
    buffer_under,
    is_contiguous_buffer_view,
    is_realized_view,
    kernel_sources,
    strip_identity,
    view_base,
)
from tinycore.schedule.split import split_kernels_over_limit
from tinycore.schedule.views import (
    contiguous_range,
    is_buffer_view,
    is_disk_device,
    leaf_device,
    non_contiguous_disk_error,
)
from tinycore.uop.ops import GroupOp, Ops
from tinycore.uop.uop import UOp

_BROADCASTING = frozenset({Ops.EXPAND, Ops.PAD})


def _inlined_nodes(value: UOp, roots: dict[UOp, None]) -> list[UOp]:
    """The nodes of `value` computed inside its kernel: the walk stops at other roots (their own kernels)."""
    found: dict[UOp, None] = {}
    stack = [value]
    while stack:
        node = stack.pop()
        if node in found:
            continue
        found[node] = None
        stack.extend(source for source in node.src if source not in roots and source not in found)
    return list(found)


def _reads_target_elsewhere(value: UOp, target: UOp, roots: dict[UOp, None]) -> bool:
    """True when the kernel computing `value` reads the buffer an ASSIGN writes at other elements than the one being
    written: through another view, or inside a reduce (the in-place write would race with those reads). Reads
    inside other roots happen in earlier kernels and do not count."""
    target_view = assign_target_view(target)
    buffer_node = view_base(target_view)
    if buffer_node not in value.toposort:
        return False
    if buffer_under(value) is buffer_node:
        return assign_target_view(value) is not target_view
    for node in _inlined_nodes(value, roots):
        if node.op in GroupOp.Movement or node.op in IDENTITY_OPS or node.op is Ops.ASSIGN:
            continue
        for source in node.src:
            if node.op is Ops.SCATTER and source is node.src[0]:
                continue  # the target a SCATTER writes in place (its own ASSIGN's target)
            if buffer_under(source) is buffer_node and (node.op in (Ops.REDUCE_AXIS, Ops.GATHER) or
                                                         assign_target_view(source) is not target_view):
                return True
    return False


def find_roots(outputs: Sequence[UOp], forced: Sequence[UOp] = (),
               facts: DeviceFactsLookup = no_device_facts) -> dict[UOp, None]:
    """The nodes that become buffers when `outputs` are realized together (an ordered set). `forced` are nodes the
    scheduler asks to be roots as well (ASSIGN values computed before any assign writes, to order the writes);
    `facts` tells the buffer limit and view support of each device."""
    roots: dict[UOp, None] = {}
    for output in outputs:
        output = strip_identity(output)
        if not is_realized_view(output):
            roots[output] = None
    roots.update(dict.fromkeys(forced))
    everything: dict[UOp, None] = {}
    for output in outputs:
        everything.update(output.toposort)
    assigns = []
    folded = _copies_into_ranges(everything, outputs, facts)
    for node in everything:
        if node.op not in ALWAYS_ROOTS or node in folded:
            continue
        roots[node] = None
        if (node.op is Ops.COPY and not is_contiguous_buffer_view(node.src[0])
                and not _copies_as_range(node.src[0], facts)):
            roots[strip_identity(node.src[0])] = None
        if node.op is Ops.ASSIGN:
            assigns.append(node)
    _add_reduce_roots(roots)
    # an ASSIGN whose kernel would read the target where it is not writing computes its value into a buffer of its
    # own first; reads inside other kernels (a gradient's reduce that reads the parameter) do not force that
    racing = [strip_identity(node.src[1]) for node in assigns
              if _reads_target_elsewhere(strip_identity(node.src[1]), node.src[0], roots)]
    if racing:
        roots.update(dict.fromkeys(racing))
        _add_reduce_roots(roots)
    split_kernels_over_limit(roots, _add_reduce_roots, facts)
    return roots


def _copies_as_range(source: UOp, facts: DeviceFactsLookup) -> bool:
    """True when a COPY of `source` moves one contiguous range of an existing buffer (no kernel gathers it first).

    A non-contiguous view of a DISK buffer raises here: gathering it would need a kernel on DISK."""
    found = contiguous_range(strip_identity(source))
    if found is not None and _supports_views(facts, found[0].device):
        return True
    if is_buffer_view(source) and is_disk_device(leaf_device(source)):
        raise non_contiguous_disk_error(source, "copy")
    return False


def _copies_into_ranges(everything: dict[UOp, None], outputs: Sequence[UOp], facts: DeviceFactsLookup) -> set[UOp]:
    """The COPY nodes that are the value of an ASSIGN into a contiguous range of a buffer and used nowhere else:
    they copy straight into the target (no buffer of their own, no kernel writing the target).

    An ASSIGN into a non-contiguous view of a DISK buffer raises here: it would need a kernel on DISK."""
    assigns = [node for node in everything if node.op is Ops.ASSIGN]
    if not assigns:
        return set()
    users: dict[UOp, int] = {}
    for node in everything:
        for source in node.src:
            users[source] = users.get(source, 0) + 1
    output_set = {strip_identity(output) for output in outputs}
    folded: set[UOp] = set()
    for assign in assigns:
        target = assign_target_view(assign.src[0])
        value = strip_identity(assign.src[1])
        found = contiguous_range(target)
        if found is None or not _supports_views(facts, found[0].device):
            if is_buffer_view(target) and is_disk_device(leaf_device(target)):
                raise non_contiguous_disk_error(target, "write")
            continue
        if value.op is Ops.COPY and value not in output_set and users.get(value, 0) == 1:
            folded.add(value)
    return folded


def _supports_views(facts: DeviceFactsLookup, device: object) -> bool:
    """True when `device` (one device name; a node on several devices has none) can hold buffer views."""
    return isinstance(device, str) and facts(device).supports_views


def _add_reduce_roots(roots: dict[UOp, None]) -> None:
    """Add to `roots` every REDUCE_AXIS that cannot be computed inside the single kernel that uses it."""
    claimed: dict[UOp, UOp] = {}
    worklist = list(roots)
    processed: set[UOp] = set()
    while worklist:
        root = worklist.pop(0)
        if root in processed:
            continue
        processed.add(root)
        # (node, reached without a reduce or broadcast in between, the axes of the reduce right above when only
        # elementwise ops lie between it and the node)
        stack: list[tuple[UOp, bool, tuple[int, ...] | None]] = [(source, True, None)
                                                                  for source in kernel_sources(root)]
        seen: set[tuple[UOp, bool, tuple[int, ...] | None]] = set()
        while stack:
            node, direct, reduced = entry = stack.pop()
            if entry in seen:
                continue
            seen.add(entry)
            if node is not root and node in roots:
                continue
            if node.op in LEAF_BUFFERS or node.op in LEAF_VALUES:
                continue
            if node.op is Ops.REDUCE_AXIS:
                if node is not root:
                    if not direct or claimed.setdefault(node, root) is not root:
                        roots[node] = None
                        worklist.append(node)
                        continue
                stack.append((node.src[0], False, tuple(node.arg[1])))
                continue
            inner_broadcast = node.op is Ops.EXPAND and _broadcast_over_inner_reduce(node, reduced)
            if node.op is Ops.EXPAND and not direct and not inner_broadcast:
                computed = _broadcast_worth_computing_once(node, roots)
                if computed is not None:
                    roots[computed] = None
                    worklist.append(computed)
                    continue
            if node.op is Ops.GATHER:
                stack.append((node.src[0], False, None))
                stack.extend((source, direct, None) for source in node.src[1:])
                continue
            next_direct = direct and node.op not in _BROADCASTING
            # an inner broadcast keeps the axes in place: a broadcast inside its source (a block's factor spread
            # over its sub-blocks) is judged against the same reduce
            next_reduced = reduced if node.op in GroupOp.Elementwise or inner_broadcast else None
            stack.extend((source, next_direct, next_reduced) for source in node.src)


def _broadcast_over_inner_reduce(expand: UOp, reduced: tuple[int, ...] | None) -> bool:
    """True when `expand` broadcasts only along trailing axes that the reduce right above it sums over (only
    elementwise ops between them): the kernel loops over those axes innermost, inside the loops its source depends
    on, so codegen computes the source once per step of the outer loops, not once per broadcast element (a
    quantized block's scale under the loop over the block's values)."""
    if reduced is None:
        return False
    source_shape, shape = expand.src[0].shape, expand.shape
    broadcast = [axis for axis, (size, before) in enumerate(zip(shape, source_shape, strict=True)) if size != before]
    if not broadcast or any(axis not in reduced for axis in broadcast):
        return False
    first = broadcast[0]
    return all(size == 1 or axis in broadcast for axis, size in enumerate(source_shape) if axis > first)

RECOMPUTE_LIMIT = 64
"""Broadcast work a kernel may repeat: ALU ops of the broadcast subgraph times its expansion factor."""
_COSTLY_OPS = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL, Ops.FDIV, Ops.IDIV, Ops.MOD, Ops.POW})


def _broadcast_worth_computing_once(expand: UOp, roots: dict[UOp, None]) -> UOp | None:
    """The computed node under `expand` when a kernel would otherwise repeat it too often, else None.

    An EXPAND reached below a reduce makes the kernel compute its source once per broadcast element: a softmax
    gradient broadcast into a matmul's reduce would be recomputed for every output column. When the inlined work
    (ALU ops, costly ones counted 8 times, times the expansion factor) passes RECOMPUTE_LIMIT, or the source holds a
    reduce (which gets a buffer anyway, so the ops above it join its kernel), the source gets a buffer of its own.
    Sources that read no buffer (index arithmetic, constants) are always recomputed.
    """
    base = expand.src[0]
    while base.op in GroupOp.Movement or base.op in IDENTITY_OPS:
        base = base.src[0]
    if base in roots or base.op not in GroupOp.Elementwise:
        return None
    work, reads_memory, has_reduce = 0, False, False
    for node in _inlined_nodes(base, roots):
        if node in roots or node.op in LEAF_BUFFERS:
            reads_memory = True
        elif node.op is Ops.REDUCE_AXIS:
            has_reduce = reads_memory = True
        elif node.op in GroupOp.ALU:
            work += 8 if node.op in _COSTLY_OPS else 1
    if not reads_memory:
        return None
    if has_reduce:
        return base
    expanded, source = expand.shape, expand.src[0].shape
    factor = 1
    for size, source_size in zip(expanded, source, strict=False):
        if isinstance(size, int) and isinstance(source_size, int) and source_size == 1:
            factor *= size
        elif not isinstance(size, int) and source_size == 1:
            factor *= RECOMPUTE_LIMIT
    return base if work * factor >= RECOMPUTE_LIMIT else None
