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
  only; a reduce that is broadcast (EXPAND), padded, used inside another reduce or used by two kernels is a root,
  except on devices that loop over rows, where a reduce broadcast back over the axes it reduced and depending only on
  the kernel's outermost output loops joins the kernel (it runs once per row, see _add_reduce_roots);
- the source of a COPY is a root unless it is already a contiguous buffer or one contiguous range of a buffer
  (copied through a BUFFER_VIEW, see views.py); a COPY that is the value of an ASSIGN into a contiguous range is
  no root: it copies straight into the target; non-contiguous views of DISK buffers are refused;
- the value of an ASSIGN is a root when its kernel reads the target buffer through a different view or inside a
  reduce (the write would race with the reads); reads inside other roots' kernels, which run earlier, do not count.
- a kernel that would sum a product of two memory operands (a matrix product) beside other reduces keeps the
  product and makes the other reduces roots: the product's register tile needs a kernel of its own; a product's
  gathered operand is a root, and so is a product among a scatter's values (no tile fits those loads or stores);
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
    if not value.depends_on(buffer_node):
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
    _add_reduce_roots(roots, facts)
    # an ASSIGN whose kernel would read the target where it is not writing computes its value into a buffer of its
    # own first; reads inside other kernels (a gradient's reduce that reads the parameter) do not force that
    racing = [strip_identity(node.src[1]) for node in assigns
              if _reads_target_elsewhere(strip_identity(node.src[1]), node.src[0], roots)]
    if racing:
        roots.update(dict.fromkeys(racing))
        _add_reduce_roots(roots, facts)
    split_kernels_over_limit(roots, lambda found: _add_reduce_roots(found, facts), facts)
    return _stored_as_read(roots, everything, [*outputs, *forced])


_REORDERING = frozenset({Ops.RESHAPE, Ops.PERMUTE})


def _stored_as_read(roots: dict[UOp, None], everything: dict[UOp, None], kept: Sequence[UOp]) -> dict[UOp, None]:
    """`roots` with each REDUCE_AXIS root that is used only through one chain of reshapes and permutes with a
    permute in it replaced by the chain's top: its kernel stores the values in the order every user reads them.

    A weight's gradient is a reduce computed in the transposed layout (x.T @ dout reduced as (out, in)) and read
    through a permute; Adam reads it in two kernels, so it gets a buffer. Stored as reduced, each user would read it
    transposed, one cache line per element (a 512x512 gradient: 0.8 ms per user instead of 0.06 ms)."""
    users: dict[UOp, list[UOp]] = {}
    for node in everything:
        for source in node.src:
            users.setdefault(source, []).append(node)
    kept_roots = {strip_identity(node) for node in kept}  # outputs and forced roots stay as they are
    replaced: dict[UOp, UOp] = {}
    for root in roots:
        if root.op is not Ops.REDUCE_AXIS or root in kept_roots:
            continue
        top, permuted = root, False
        while len(users.get(top, ())) == 1 and users[top][0].op in _REORDERING and users[top][0] not in roots:
            top = users[top][0]
            permuted = permuted or top.op is Ops.PERMUTE
        if permuted:
            replaced[root] = top
    if not replaced:
        return roots
    return {replaced.get(root, root): None for root in roots}


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


Labels = tuple[frozenset[int], ...]
"""For each axis of a node evaluated inside a kernel, the loops its index there depends on: the kernel's output
axes (numbered from 0 in the root's shape) and the RANGEs of enclosing reduces (negative numbers)."""


def _root_labels(root: UOp) -> Labels | None:
    """Each output axis of `root`'s kernel depends on its own loop (size-1 axes on none)."""
    shape = root._shape
    if shape is None:
        return None
    return tuple(frozenset() if isinstance(size, int) and size == 1 else frozenset({axis})
                 for axis, size in enumerate(shape))


def _source_labels(node: UOp, labels: Labels | None, source: UOp) -> Labels | None:
    """The labels `source` is evaluated at when `node` is evaluated at `labels`; None where the index is more than
    the labels say (an offset, a flip, a reshape that mixes axes) or unknown."""
    if labels is None or source._shape is None:
        return None
    op = node.op
    if op is Ops.EXPAND:
        return tuple(frozenset() if isinstance(size, int) and size == 1 else label
                     for size, label in zip(source.shape, labels, strict=True))
    if op is Ops.PERMUTE:
        permuted: list[frozenset[int]] = [frozenset()] * len(labels)
        for position, axis in enumerate(node.arg):
            permuted[axis] = labels[position]
        return tuple(permuted)
    if op is Ops.RESHAPE:
        # only a reshape that adds or removes size-1 axes keeps each axis's index as it is
        kept = [label for size, label in zip(node.shape, labels, strict=True) if not (isinstance(size, int) and
                                                                                     size == 1)]
        kept_sizes = [size for size in node.shape if not (isinstance(size, int) and size == 1)]
        source_sizes = [size for size in source.shape if not (isinstance(size, int) and size == 1)]
        if kept_sizes != source_sizes:
            return None
        remaining = iter(kept)
        return tuple(frozenset() if isinstance(size, int) and size == 1 else next(remaining)
                     for size in source.shape)
    if (op in GroupOp.Elementwise or op in IDENTITY_OPS or op is Ops.CONTIGUOUS) and source.shape == node.shape:
        return labels
    return None


_WalkEntry = tuple[UOp, bool, "Labels | None", "tuple[int, ...] | None"]
"""A node of a kernel's walk: reached without a reduce or broadcast in between, the labels it is evaluated at, and
the axes of the reduce right above it when only elementwise ops lie between."""


def _hoisted(labels: Labels | None, order: list[int]) -> bool:
    """True when a value evaluated at `labels` depends on the kernel's first (outermost) output loops only, at least
    one of them: the loop nest computes it once per iteration of those loops, before the inner loops start."""
    if labels is None:
        return False
    needed = frozenset().union(*labels)
    return bool(needed) and needed == frozenset(order[:len(needed)])


def _add_reduce_roots(roots: dict[UOp, None], facts: DeviceFactsLookup = no_device_facts) -> None:
    """Add to `roots` every REDUCE_AXIS that cannot be computed inside the single kernel that uses it.

    On devices whose kernels loop over their outputs (`DeviceFacts.loops_over_rows`), a reduce that a kernel
    broadcasts back over the axes it reduced (the max and the sum of a softmax, the mean of a variance) is computed
    inside that kernel when it depends only on the kernel's outermost output loops: the loop nest then computes it
    once per row, before the row's other loops, so nothing is computed more often than in a kernel of its own and the
    row is read from cache instead of memory. Everything else reached through a broadcast gets a kernel of its own.
    """
    claimed: dict[UOp, UOp] = {}
    reached: dict[UOp, Labels | None] = {}
    worklist = list(roots)
    processed: set[UOp] = set()
    while worklist:
        root = worklist.pop(0)
        if root in processed:
            continue
        processed.add(root)
        labels = _root_labels(root) if _loops_over_rows(root, facts) else None
        order = [axis for axis, label in enumerate(labels or ()) if label]
        for separate in _separated_from_products(root, roots):
            roots[separate] = None
            worklist.append(separate)
        fresh = 0
        # (node, reached without a reduce or broadcast in between, the labels it is evaluated at, the axes of the
        # reduce right above when only elementwise ops lie between it and the node)
        stack: list[_WalkEntry] = [(source, True, labels, None) for source in kernel_sources(root)]
        seen: set[_WalkEntry] = set()
        while stack:
            node, direct, node_labels, reduced = entry = stack.pop()
            if entry in seen:
                continue
            seen.add(entry)
            if node is not root and node in roots:
                continue
            if node.op in LEAF_BUFFERS or node.op in LEAF_VALUES:
                continue
            if node.op is Ops.REDUCE_AXIS:
                if node_labels is not None:  # the reduce replaces its index on the axes it reduces
                    node_labels = tuple(frozenset() if axis in node.arg[1] else label
                                        for axis, label in enumerate(node_labels))
                if node is not root:
                    # a reduce broadcast back is inlined once per kernel: reached at one index only
                    first_reach = reached.setdefault(node, node_labels)
                    inlined = direct or (_hoisted(node_labels, order) and first_reach == node_labels)
                    if not inlined or claimed.setdefault(node, root) is not root:
                        roots[node] = None
                        worklist.append(node)
                        continue
                fresh -= 1
                source_labels = None if node_labels is None else tuple(
                    frozenset({fresh}) if axis in node.arg[1] and node.src[0].shape[axis] != 1 else label
                    for axis, label in enumerate(node_labels))
                stack.append((node.src[0], False, source_labels, tuple(node.arg[1])))
                continue
            inner_broadcast = node.op is Ops.EXPAND and _broadcast_over_inner_reduce(node, reduced)
            if node.op is Ops.EXPAND and not direct and not inner_broadcast:
                source_labels = _source_labels(node, node_labels, node.src[0])
                if _hoisted(source_labels, order):
                    stack.append((node.src[0], False, source_labels, None))
                    continue
                computed = _broadcast_worth_computing_once(node, roots)
                if computed is not None:
                    roots[computed] = None
                    worklist.append(computed)
                    continue
            if node.op is Ops.GATHER:
                stack.append((node.src[0], False, None, None))
                stack.extend((source, direct, _source_labels(node, node_labels, source), None)
                             for source in node.src[1:])
                continue
            next_direct = direct and node.op not in _BROADCASTING
            # an inner broadcast keeps the axes in place: a broadcast inside its source (a block's factor spread
            # over its sub-blocks) is judged against the same reduce
            next_reduced = reduced if node.op in GroupOp.Elementwise or inner_broadcast else None
            stack.extend((source, next_direct, _source_labels(node, node_labels, source), next_reduced)
                         for source in node.src)


def _is_product_reduce(node: UOp) -> bool:
    """True for a sum over the product of two broadcast operands that are not constants (a matrix product, a
    convolution): codegen's register tiles need such a reduce alone in its kernel."""
    if node.op is not Ops.REDUCE_AXIS or node.arg[0] is not Ops.ADD:
        return False
    product = node.src[0]
    while product.op is Ops.CAST:
        product = product.src[0]
    if product.op is not Ops.MUL:
        return False
    for operand in product.src:
        broadcast = False
        while operand.op in GroupOp.Movement or operand.op is Ops.CAST:
            broadcast = broadcast or operand.op is Ops.EXPAND
            operand = operand.src[0]
        if not broadcast or not _reads_memory(operand):
            return False
    return True


def _reads_memory(node: UOp) -> bool:
    """True when `node`'s value depends on a buffer (not only on constants and variables)."""
    return node.reaches(lambda current: current.op in LEAF_BUFFERS or current.op in ALWAYS_ROOTS)


def _separated_from_products(root: UOp, roots: dict[UOp, None]) -> list[UOp]:
    """The nodes that get kernels of their own so that a product reduce (see _is_product_reduce) `root`'s kernel
    computes keeps its register tile: the other reduces reached from the root through elementwise and
    non-broadcasting movement ops, the product's gathered operands (_gathered_operands), and in a scatter's kernel
    every product among its values. Summed in one kernel, the relu gradient of an MLP whose loss is a mean,
    `(h > 0) * (c @ W.T)` with h = x @ W, computed the product as a dot product per output with gathered loads
    (512^3: 70 ms at 7.6 GFLOPS, against 1.7 ms tiled)."""
    value = strip_identity(root.src[1]) if root.op is Ops.ASSIGN else None
    scatter = value is not None and value.op is Ops.SCATTER
    direct: list[UOp] = []
    # a scatter's kernel stores each value at the rows its indices give: no register tile fits that store, so every
    # product among its values gets a kernel of its own (an embedding's gradient from a classifier tied to it,
    # scattered into the table: 2048x5000 @ 5000x256 at 14 GFLOPS inside the scatter)
    stack = [value.src[1]] if scatter and value is not None else list(kernel_sources(root))
    seen: set[UOp] = set()
    while stack:
        node = stack.pop()
        if node in seen or (node is not root and node in roots):
            continue
        seen.add(node)
        if node.op is Ops.REDUCE_AXIS:
            direct.append(node)  # what lies under a reduce is judged by the rules above, not here
        elif node.op in GroupOp.Elementwise or node.op in IDENTITY_OPS or \
                (node.op in GroupOp.Movement and node.op not in _BROADCASTING):
            stack.extend(node.src)
    products = [node for node in direct if _is_product_reduce(node)]
    if scatter:
        return products
    if not products:
        return []
    kept = products[0]
    return [node for node in direct if node is not kept] + _gathered_operands(kept, roots)


def _gathered_operands(product: UOp, roots: dict[UOp, None]) -> list[UOp]:
    """The GATHERs among a product reduce's operands (under movement ops and casts), which then get buffers of their
    own: gathered inside the product, every load of that operand went through its index (the tile's loads are
    plain strided ones) and the rows were gathered again for every block of columns (an embedding lookup times a
    classifier tied to it, 2048x256 @ 256x5000: 73 ms at 114 GFLOPS)."""
    value = product.src[0]
    while value.op is Ops.CAST:
        value = value.src[0]
    found = []
    for operand in value.src:
        while operand.op in GroupOp.Movement or operand.op is Ops.CAST:
            operand = operand.src[0]
        if operand.op is Ops.GATHER and operand not in roots:
            found.append(operand)
    return found


def _loops_over_rows(root: UOp, facts: DeviceFactsLookup) -> bool:
    """True when `root`'s kernel runs on a device whose kernels loop over their output rows."""
    try:
        device = root.device
    except Exception:  # noqa: BLE001 - a node without a device (a bare constant graph) gets the general rule
        return False
    return isinstance(device, str) and facts(device).loops_over_rows


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
