"""Vector legalisation: vector ALU ops the renderer cannot emit are split into per-lane scalar ops.

Vector loads and stores are kept (the packer only makes them for widths the renderer supports). Arithmetic on vectors
is kept only for the ops in the renderer's `vector_ops` (a set, or a dict by scalar dtype); without one, +, -, *,
negation and float division on floats and +, -, *, negation and bitwise ops on integers. Everything else becomes a
VECTORIZE of scalar ops over GEPs of the sources, and GEPs of VECTORIZEs fold away, so a chain of unsupported ops
stays scalar. A renderer with `vector_masks` keeps vector comparisons (bool vectors as lane masks), logic on them and
selects over them; a CAST of such a mask to numbers becomes a select of 1 and 0.
"""
from __future__ import annotations

from tinycore.dtype import DType, dtypes
from tinycore.plugins.contract import RendererContract
from tinycore.uop.ops import GroupOp, Ops
from tinycore.uop.patterns import PatternMatcher, UPat, graph_rewrite
from tinycore.uop.symbolic import fold_node, folding
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


def vector_op_supported(renderer: RendererContract, node: UOp) -> bool:
    """True when the vector ALU op, CAST or BITCAST `node` may stay one vector op for `renderer` (see
    RendererContract.vector_alu_ops and vector_masks)."""
    if node.op in (Ops.CAST, Ops.BITCAST):
        source = node.src[0].dtype
        plain = {dtypes.bool, dtypes.bfloat16}
        return source.scalar not in plain and node.dtype.scalar not in plain and \
            vector_alu_supported(renderer, node.op, source) and vector_alu_supported(renderer, node.op, node.dtype)
    if node.op is Ops.WHERE:
        return not dtypes.is_bool(node.dtype) and (renderer.vector_masks or node.src[0].dtype.count == 1) and \
            vector_alu_supported(renderer, node.op, node.src[1].dtype)
    if not dtypes.is_bool(node.dtype):
        return not any(dtypes.is_bool(source.dtype) for source in node.src) and \
            vector_alu_supported(renderer, node.op, node.src[0].dtype)
    if not renderer.vector_masks:
        return False
    operand = node.src[0].dtype
    if node.op in GroupOp.Comparison:
        return not dtypes.is_bool(operand) and vector_alu_supported(renderer, node.op, operand)
    return node.op in (Ops.AND, Ops.OR, Ops.XOR) and vector_alu_supported(renderer, node.op, dtypes.bool)


def _mask_select(node: UOp) -> UOp | None:
    """CAST of a bool vector to a number vector as WHERE(mask, 1, 0), so it stays a select of whole vectors."""
    if node.op is not Ops.CAST or not dtypes.is_bool(node.src[0].dtype) or dtypes.is_bool(node.dtype) or \
            node.dtype.scalar == dtypes.bfloat16:
        return None
    return node.src[0].where(UOp.const(node.dtype, 1), UOp.const(node.dtype, 0))


def _split_lanes(node: UOp) -> UOp:
    lanes = []
    for lane in range(node.dtype.count):
        sources = tuple(fold_node(source.gep(lane)) if source.dtype.count > 1 else source for source in node.src)
        scalar_dtype = dtypes.bool if node.op in GroupOp.Comparison else node.dtype.scalar
        lanes.append(fold_node(UOp(node.op, scalar_dtype, sources, node.arg)))
    return UOp(Ops.VECTORIZE, node.dtype, tuple(lanes))


def _legalize(ctx: RendererContract, node: UOp) -> UOp | None:
    """The vector op `node` as `ctx` can emit it: a CAST of a mask as a select of whole vectors, or the op lane by
    lane; None when it stays as it is."""
    if node.dtype.count == 1:
        return None
    if ctx.vector_masks:
        select = _mask_select(node)
        if select is not None and vector_op_supported(ctx, select):
            return select
    return None if vector_op_supported(ctx, node) else _split_lanes(node)


devectorize_rules = PatternMatcher([
    (UPat(tuple(GroupOp.ALU | {Ops.CAST, Ops.BITCAST}), name="node"), _legalize),
]) + folding
"""Vector ops the renderer (the context) cannot emit split into lanes, and the `folding` rules everywhere (GEPs of
VECTORIZEs fold away, so a chain of unsupported ops stays scalar)."""


def legalize(roots: list[UOp], renderer: RendererContract) -> list[UOp]:
    """`roots` (stores) with every vector op the renderer cannot emit split into lanes (the pass "devectorize")."""
    return list(graph_rewrite(UOp(Ops.SINK, dtypes.void, tuple(roots)), devectorize_rules, renderer,
                              name="devectorize").src)
