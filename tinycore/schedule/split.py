"""Kernel splitting: no kernel takes more buffers than its device allows.

A renderer may declare `max_buffers`, the most buffers (outputs and inputs together) one kernel can take on its
device (WebGPU: the adapter's maxStorageBuffersPerShaderStage; None: no limit). After fusion has chosen its roots,
every kernel whose inlined graph reads too many distinct buffers gets some of its inner computed nodes (elementwise
subgraphs or reduces) as roots of their own: they are computed into intermediate buffers by earlier kernels and
read back as one buffer each.

The choice is made bottom-up over each kernel's graph, sources before users. A node whose inlined reads (plus the
kernel's output) still fit is left alone; a node that does not fit makes the fewest of its computed sources roots
that bring it under the limit, and among those the choice leaving it the fewest reads. Cutting late keeps each part
as large as the limit allows (on a tree of ops this is the classic greedy that makes the fewest parts). The values
computed are the same ops in the same order, only stored and loaded in between, so results are identical.

A node that reads more buffers than the limit allows even with all its computed sources split off (an op of three
different buffers on a device allowing three buffers per kernel, for instance) raises KernelBufferLimitError.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable

from tinycore.schedule.device_facts import DeviceFactsLookup
from tinycore.schedule.nodes import (
    IDENTITY_OPS,
    LEAF_BUFFERS,
    LEAF_VALUES,
    assign_target_view,
    kernel_sources,
    strip_identity,
    view_base,
)
from tinycore.uop.ops import GroupOp, Ops
from tinycore.uop.uop import UOp

_CUTTABLE = GroupOp.Elementwise | {Ops.REDUCE_AXIS}
"""Nodes that may become kernel roots of their own when a kernel takes too many buffers."""


class KernelBufferLimitError(RuntimeError):
    """A kernel needs more buffers than its device allows, and no split of it into several kernels fits."""


def device_buffer_limit(device: object, facts: DeviceFactsLookup) -> int | None:
    """The most buffers (outputs and inputs) one kernel may take on `device`: its `max_buffers` fact.

    None means no limit: a device that declares none, or several devices (a sharded node)."""
    if not isinstance(device, str):
        return None
    return facts(device).max_buffers


def split_kernels_over_limit(roots: dict[UOp, None], add_reduce_roots: Callable[[dict[UOp, None]], None],
                             facts: DeviceFactsLookup) -> None:
    """Add to `roots` the inner nodes that must get buffers of their own so that every kernel fits its device's
    buffer limit (from `facts`); `add_reduce_roots` is fusion's rule for reduces, applied again after each round of
    new roots.

    Rounds repeat until a round adds nothing: a new root changes what other kernels read (one buffer in place of
    the new root's inputs), so every kernel is checked again with exact counts."""
    limits: dict[object, int | None] = {}

    def limit_of(root: UOp) -> int | None:
        device = root.device
        if device not in limits:
            limits[device] = device_buffer_limit(device, facts)
        return limits[device]

    while True:
        added = False
        for root in list(roots):
            if not _has_kernel(root, roots):
                continue
            limit = limit_of(root)
            if limit is not None and _split_kernel(root, roots, limit, facts(root.device).renderer_name):
                added = True
        if not added:
            return
        add_reduce_roots(roots)


def _has_kernel(root: UOp, roots: dict[UOp, None]) -> bool:
    """True when the scheduler computes `root` with a kernel (not a copy, not an empty or no-op write)."""
    if root.op is Ops.COPY or root.size == 0:
        return False
    if root.op is Ops.ASSIGN:
        value = strip_identity(root.src[1])
        if value is strip_identity(root.src[0]) or (value.op is Ops.COPY and value not in roots):
            return False
    return True


def buffer_key(root: UOp) -> UOp:
    """What identifies the buffer a root is realized into: the target's buffer for an ASSIGN, else the root."""
    if root.op is Ops.ASSIGN:
        return view_base(assign_target_view(root.src[0]))
    return root


def _split_kernel(root: UOp, roots: dict[UOp, None], limit: int, renderer_name: str) -> bool:
    """Make inner nodes of `root`'s kernel roots until the kernel takes at most `limit` buffers; True when any
    node was added to `roots`."""
    output = buffer_key(root)
    reads: dict[UOp, frozenset[UOp]] = {}

    def reads_of(node: UOp) -> frozenset[UOp]:
        if node is not root and node in roots:
            return frozenset((buffer_key(node),))
        if node.op in LEAF_BUFFERS:
            return frozenset((node,))
        return reads.get(node, frozenset())

    added = False
    for node in _inlined_postorder(root, roots):
        if node.op in LEAF_VALUES or not node.src:
            continue
        sources = [reads_of(source) for source in node.src]
        found = frozenset().union(*sources)
        if node.op in GroupOp.Movement or node.op in IDENTITY_OPS or len(found | {output}) <= limit:
            reads[node] = found
            continue
        cuts, found = _choose_cuts(node, roots, reads_of, output, limit)
        if cuts is None:
            raise _limit_error(root, node, found, limit, renderer_name)
        for cut in cuts:
            roots[cut] = None
        added = added or bool(cuts)
        reads[node] = found
    for top in kernel_sources(root):
        total = reads_of(top) | {output}
        if len(total) > limit:
            raise _limit_error(root, top, reads_of(top), limit, renderer_name)
    return added


def _choose_cuts(node: UOp, roots: dict[UOp, None], reads_of: Callable[[UOp], frozenset[UOp]], output: UOp,
                 limit: int) -> tuple[tuple[UOp, ...] | None, frozenset[UOp]]:
    """The fewest computed sources of `node` to make roots so that its reads and the output fit in `limit`
    (among those, the choice leaving the fewest reads), and the reads that remain; (None, all its reads) when no
    choice fits."""
    bases = [view_base(source) for source in node.src]
    candidates = [base for base in dict.fromkeys(bases)
                  if base.op in _CUTTABLE and base not in roots and len(reads_of(base)) >= 2]
    everything = frozenset().union(*(reads_of(base) for base in bases))
    for count in range(1, len(candidates) + 1):
        best: tuple[tuple[UOp, ...], frozenset[UOp]] | None = None
        for cuts in itertools.combinations(candidates, count):
            remaining = frozenset().union(*(frozenset((base,)) if base in cuts else reads_of(base) for base in bases))
            if len(remaining | {output}) <= limit and (best is None or len(remaining) < len(best[1])):
                best = (cuts, remaining)
        if best is not None:
            return best
    return None, everything


def _inlined_postorder(root: UOp, roots: dict[UOp, None]) -> list[UOp]:
    """The nodes `root`'s kernel computes, each after its sources (the walk stops at other roots and leaves)."""
    order: list[UOp] = []
    visited: set[UOp] = set()
    stack: list[tuple[UOp, bool]] = [(top, False) for top in reversed(kernel_sources(root))]
    while stack:
        node, sources_done = stack.pop()
        if sources_done:
            order.append(node)
            continue
        if node in visited:
            continue
        visited.add(node)
        if (node is not root and node in roots) or node.op in LEAF_BUFFERS:
            continue
        stack.append((node, True))
        stack.extend((source, False) for source in reversed(node.src) if source not in visited)
    return order


def _limit_error(root: UOp, node: UOp, found: frozenset[UOp], limit: int,
                 renderer_name: str) -> KernelBufferLimitError:
    """The error for a node that cannot be computed within `limit` buffers however its kernel is split."""
    device = root.device
    return KernelBufferLimitError(
        f"{node.op.name} on {device} reads {len(found)} different buffers and needs one more for its result, but "
        f"kernels on {device} take at most {limit} buffers ({renderer_name}.max_buffers), and splitting "
        f"off its computed inputs does not bring it under that limit; move its inputs to a device that allows "
        f"more buffers per kernel (Tensor.to) and compute it there")
