"""Shared helpers over tensor-level nodes for the scheduler's passes (fusion, splitting, views, lowering): node
kinds, and the walks through identity and movement ops that find the buffer or view under a node."""
from __future__ import annotations

from tinycore.uop.ops import GroupOp, Ops
from tinycore.uop.uop import UOp

LEAF_BUFFERS = frozenset({Ops.BUFFER, Ops.BUFFER_VIEW})
"""Nodes that are device memory already."""
IDENTITY_OPS = frozenset({Ops.DETACH, Ops.CONTIGUOUS_BACKWARD})
"""Nodes that pass their source through unchanged in the forward pass."""
LEAF_VALUES = frozenset({Ops.CONST, Ops.DEFINE_VAR, Ops.BIND, Ops.DEVICE})
"""Nodes that are values known without memory."""
ALWAYS_ROOTS = frozenset({Ops.CONTIGUOUS, Ops.COPY, Ops.ASSIGN})
"""Nodes that always get their own buffer."""


def strip_identity(node: UOp) -> UOp:
    """`node` with DETACH / CONTIGUOUS_BACKWARD wrappers removed."""
    while node.op in IDENTITY_OPS:
        node = node.src[0]
    return node


def view_base(node: UOp) -> UOp:
    """The node under `node`'s movement and identity ops."""
    while node.op in GroupOp.Movement or node.op in IDENTITY_OPS:
        node = node.src[0]
    return node


def is_realized_view(node: UOp) -> bool:
    """True when `node` is a buffer or movement ops over one (nothing to compute)."""
    return view_base(node).op in LEAF_BUFFERS


def is_contiguous_buffer_view(node: UOp) -> bool:
    """True when `node`'s elements in C order are exactly a whole buffer's elements."""
    node = strip_identity(node)
    while node.op is Ops.RESHAPE:
        node = strip_identity(node.src[0])
    return node.op in LEAF_BUFFERS


def assign_target_view(target: UOp) -> UOp:
    """The view an ASSIGN writes through: `target` with earlier ASSIGNs in its chain replaced by their targets."""
    chain: list[UOp] = []
    node = strip_identity(target)
    while node.op not in LEAF_BUFFERS:
        if node.op is not Ops.ASSIGN:
            chain.append(node)
        node = strip_identity(node.src[0])
    for movement in reversed(chain):
        node = movement.replace(src=(node,))
    return node


def earlier_assigns(target: UOp) -> list[UOp]:
    """The ASSIGN nodes in the chain of an ASSIGN target (writes that must happen first)."""
    return [node for node in target.toposort if node.op is Ops.ASSIGN]


def buffer_under(node: UOp) -> UOp:
    """The node under a chain of movement ops, identity ops and ASSIGNs (through their targets)."""
    while node.op in GroupOp.Movement or node.op in IDENTITY_OPS or node.op is Ops.ASSIGN:
        node = node.src[0]
    return node


def kernel_sources(root: UOp) -> tuple[UOp, ...]:
    """The nodes a root's kernel computes from: the value of an ASSIGN, the source of CONTIGUOUS, else the root."""
    if root.op is Ops.ASSIGN:
        return (root.src[1],)
    if root.op is Ops.CONTIGUOUS:
        return (root.src[0],)
    if root.op is Ops.COPY:
        return ()
    return (root,)
