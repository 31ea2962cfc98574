"""Vector legalisation: vector ALU ops the renderer cannot emit are split into per-lane scalar ops.

Vector loads and stores are kept (the packer only makes them for widths the renderer supports). Arithmetic on vectors
is kept only for the ops in the renderer's `vector_ops` (a set, or a dict by scalar dtype); without one, +, -, *,
negation and float division on floats and +, -, *, negation and bitwise ops on integers. Everything else becomes a
VECTORIZE of scalar ops over GEPs of the sources, and GEPs of VECTORIZEs fold away, so a chain of unsupported ops
stays scalar.
"""
from __future__ import annotations

from tinycore.dtype import DType, dtypes
from tinycore.plugins.contract import RendererContract
from tinycore.uop.ops import GroupOp, Ops
from tinycore.uop.symbolic import fold_node
from tinycore.uop.uop import UOp

DEFAULT_VECTOR_FLOAT_OPS = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.NEG, Ops.FDIV})
DEFAULT_VECTOR_INT_OPS = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.NEG, Ops.AND, Ops.OR, Ops.XOR})


def vector_alu_supported(renderer: RendererContract, op: Ops, dtype: DType) -> bool:
    """True when `renderer` can emit `op` on vectors of scalar `dtype` (its `vector_alu_ops` or the defaults)."""
    declared = renderer.vector_alu_ops
    if declared is not None:
        allowed = declared.get(dtype.scalar, ()) if isinstance(declared, dict) else declared
        return op in allowed
    if dtypes.is_float(dtype):
        return op in DEFAULT_VECTOR_FLOAT_OPS
    if dtypes.is_int(dtype):
        return op in DEFAULT_VECTOR_INT_OPS
    return False


def _split_lanes(node: UOp) -> UOp:
    lanes = []
    for lane in range(node.dtype.count):
        sources = tuple(fold_node(source.gep(lane)) if source.dtype.count > 1 else source for source in node.src)
        scalar_dtype = dtypes.bool if node.op in GroupOp.Comparison else node.dtype.scalar
        lanes.append(fold_node(UOp(node.op, scalar_dtype, sources, node.arg)))
    return UOp(Ops.VECTORIZE, node.dtype, tuple(lanes))


def legalize(roots: list[UOp], renderer: RendererContract) -> dict[UOp, UOp]:
    """The rewritten form of every node under `roots` (a mapping old node -> legal node)."""
    memo: dict[UOp, UOp] = {}
    for node in UOp(Ops.SINK, dtypes.void, tuple(roots)).toposort:
        new_src = tuple(memo[source] for source in node.src)
        rebuilt = node if new_src == node.src else node.replace(src=new_src)
        if rebuilt.dtype.count > 1 and rebuilt.op in (GroupOp.ALU | {Ops.CAST, Ops.BITCAST}):
            operand_dtype = rebuilt.src[0].dtype if rebuilt.op is not Ops.WHERE else rebuilt.src[1].dtype
            supported = rebuilt.op not in (Ops.CAST, Ops.BITCAST) and not dtypes.is_bool(rebuilt.dtype) and \
                vector_alu_supported(renderer, rebuilt.op, operand_dtype)
            if not supported:
                rebuilt = _split_lanes(rebuilt)
        memo[node] = fold_node(rebuilt)
    return memo
