"""The graphs of softmax and log_softmax built on nodes directly.

`Tensor.softmax` spells itself as a max, a subtraction, an exp, a sum and a division, each a Tensor operation that
checks its arguments, broadcasts and promotes: about 80 us of Python for a (4096, 1024) softmax back to back and
150-200 us after a pause, against a 1.3-1.9 ms kernel on two cores (torch spends tens of microseconds). For float32
and float64 tensors of int shape on one device, softmax and log_softmax call the builders here, which make the same
nodes without the per-step Tensors. Nodes are shared between equal computations, so the result is the very node the
Tensor operations make (tests/unit/tensor/test_row_functions.py checks that); gradients follow from the nodes. A
(4096, 1024) softmax's graph: 78 -> 45 us back to back; the whole call, paired against torch in one process, 1.12 ->
1.20x.
"""
from __future__ import annotations

from tinycore.dtype import dtypes
from tinycore.tensor.support import LN_2, LOG2_E
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp


def fast_row_function(source: UOp) -> bool:
    """True when softmax and log_softmax of `source` may be built here: float32 or float64, at least one axis, int
    shape, one device."""
    return source.dtype in (dtypes.float32, dtypes.float64) and len(source.shape) > 0 and \
        isinstance(source.device, str) and all(size.__class__ is int for size in source.shape)


def _shifted(source: UOp, axis: int) -> UOp:
    """source - max(source, axis) (the maximum kept as a size-1 axis and broadcast back)."""
    maximum = source.r(Ops.MAX, (axis,)).expand(source.shape)
    return source.alu(Ops.ADD, maximum.alu(Ops.NEG))


def _exp(value: UOp) -> UOp:
    """e ** value as Tensor.exp spells it: 2 ** (value * log2(e))."""
    scale = UOp.const_on(value.dtype, LOG2_E, value.device, value.shape)
    return value.alu(Ops.MUL, scale).alu(Ops.EXP2)


def softmax_nodes(source: UOp, axis: int) -> UOp:
    """softmax of `source` (see fast_row_function) along the non-negative `axis`."""
    exponent = _exp(_shifted(source, axis))
    total = exponent.r(Ops.ADD, (axis,)).expand(source.shape)
    return exponent.alu(Ops.FDIV, total)


def log_softmax_nodes(source: UOp, axis: int) -> UOp:
    """log_softmax of `source` (see fast_row_function) along the non-negative `axis`: shifted - log(sum(exp))."""
    shifted = _shifted(source, axis)
    total = _exp(shifted).r(Ops.ADD, (axis,))
    # Tensor.log: log2(x) * ln(2)
    logarithm = total.alu(Ops.LOG2).alu(Ops.MUL, UOp.const_on(total.dtype, LN_2, total.device, total.shape))
    return shifted.alu(Ops.ADD, logarithm.expand(source.shape).alu(Ops.NEG))
