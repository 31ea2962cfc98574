"""Reverse-mode automatic differentiation over the tensor-level UOp graph.

`compute_gradient` walks the graph from the root back to the targets and applies one rule per op. A rule gets the
node and the gradient flowing into it and returns one gradient (or None) per source. Rules build tensor-level
UOps only: every operand of an ALU node has the node's shape and dtype, and constants are built with
`UOp.const_on` on the node's device and shape. Gradients flow only through floating-point nodes and stop at
DETACH; integer and bool tensors never receive one.
"""
from __future__ import annotations

import math
import weakref
from collections.abc import Callable

from tinycore.dtype import dtypes
from tinycore.helpers import argsort
from tinycore.uop.buffer import new_buffer_uop
from tinycore.uop.indexing import gather, mapped_parallel_axes, scatter_assign
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp

GradientRule = Callable[[UOp, UOp], tuple["UOp | None", ...]]


def _full(like: UOp, value: float) -> UOp:
    """A constant `value` with the dtype, device and shape of `like`."""
    return UOp.const_on(like.dtype, value, like.device, like.shape)


def _where(condition: UOp, if_true: UOp, if_false: UOp) -> UOp:
    """An elementwise select between two tensor-level nodes of the same shape and dtype."""
    return condition.alu(Ops.WHERE, if_true, if_false)


def _sum_to_shape(gradient: UOp, axes: tuple[int, ...]) -> UOp:
    """`gradient` summed over `axes` (kept as size 1), accumulating half-precision values in float32."""
    if not axes:
        return gradient
    if gradient.dtype in (dtypes.float16, dtypes.bfloat16):
        return gradient.cast(dtypes.float32).r(Ops.ADD, axes).cast(gradient.dtype)
    return gradient.r(Ops.ADD, axes)


def _float_gradient(source: UOp, gradient: UOp | None) -> UOp | None:
    """`gradient` if `source` can receive one (floating point), else None."""
    return gradient if dtypes.is_float(source.dtype.scalar) else None


# ---- elementwise rules ----

def _exp2(node: UOp, grad: UOp) -> tuple[UOp | None, ...]:
    return (grad * node * _full(node, math.log(2)),)


def _log2(node: UOp, grad: UOp) -> tuple[UOp | None, ...]:
    source = node.src[0]
    return (grad / (source * _full(source, math.log(2))),)


def _sin(node: UOp, grad: UOp) -> tuple[UOp | None, ...]:
    source = node.src[0]
    cosine = (_full(source, math.pi / 2) - source).sin()
    return (grad * cosine,)


def _sqrt(node: UOp, grad: UOp) -> tuple[UOp | None, ...]:
    return (grad / (node * _full(node, 2.0)),)


def _reciprocal(node: UOp, grad: UOp) -> tuple[UOp | None, ...]:
    return (-(grad * node * node),)


def _neg(node: UOp, grad: UOp) -> tuple[UOp | None, ...]:
    return (-grad,)


def _zero_gradient(node: UOp, grad: UOp) -> tuple[UOp | None, ...]:
    """Piecewise-constant ops (TRUNC): the derivative is zero almost everywhere."""
    return (_full(node.src[0], 0.0),)


def _add(node: UOp, grad: UOp) -> tuple[UOp | None, ...]:
    return (grad, grad)


def _sub(node: UOp, grad: UOp) -> tuple[UOp | None, ...]:
    return (grad, -grad)


def _mul(node: UOp, grad: UOp) -> tuple[UOp | None, ...]:
    left, right = node.src
    return (grad * right, grad * left)


def _fdiv(node: UOp, grad: UOp) -> tuple[UOp | None, ...]:
    numerator, denominator = node.src
    return (grad / denominator, -(grad * node) / denominator)


def _mod(node: UOp, grad: UOp) -> tuple[UOp | None, ...]:
    """Floating-point remainder with the sign of the dividend: x - y * trunc(x / y)."""
    dividend, divisor = node.src
    return (grad, -(grad * (dividend / divisor).trunc()))


def _max(node: UOp, grad: UOp) -> tuple[UOp | None, ...]:
    """max(x, y): the larger input gets the gradient; on ties each input gets half (as torch.maximum)."""
    left, right = node.src
    zero, half = _full(grad, 0.0), grad * _full(grad, 0.5)
    tie = _where(left.eq(right), half, zero)
    return (_where(right < left, grad, tie), _where(left < right, grad, tie))


def _pow(node: UOp, grad: UOp) -> tuple[UOp | None, ...]:
    """x ** y: d/dx = y * x ** (y - 1) (zero where y == 0), d/dy = x ** y * ln(x) (zero where x == 0, y >= 0)."""
    base, exponent = node.src
    zero, one = _full(node, 0.0), _full(node, 1.0)
    base_gradient = grad * exponent * base.alu(Ops.POW, exponent - one)
    base_gradient = _where(exponent.eq(zero), zero, base_gradient)
    exponent_gradient = grad * node * base.log2() * _full(node, math.log(2))
    nonnegative_exponent = (exponent < zero).ne(_true_like(node))
    exponent_gradient = _where(base.eq(zero).alu(Ops.AND, nonnegative_exponent), zero, exponent_gradient)
    return (base_gradient, exponent_gradient)


def _true_like(like: UOp) -> UOp:
    """A bool constant True with the device and shape of `like`."""
    return UOp.const_on(dtypes.bool, True, like.device, like.shape)


def _where_rule(node: UOp, grad: UOp) -> tuple[UOp | None, ...]:
    condition = node.src[0]
    zero = _full(grad, 0.0)
    return (None, _where(condition, grad, zero), _where(condition, zero, grad))


def _mulacc(node: UOp, grad: UOp) -> tuple[UOp | None, ...]:
    first, second, _ = node.src
    return (grad * second, grad * first, grad)


def _cast(node: UOp, grad: UOp) -> tuple[UOp | None, ...]:
    source = node.src[0]
    return (grad.cast(source.dtype) if dtypes.is_float(source.dtype.scalar) else None,)


def _no_gradient(node: UOp, grad: UOp) -> tuple[UOp | None, ...]:
    """Ops that are not differentiable (bit operations, comparisons, BITCAST, random bits)."""
    return (None,) * len(node.src)


# ---- movement rules ----

def _reshape(node: UOp, grad: UOp) -> tuple[UOp | None, ...]:
    return (grad.reshape(node.src[0].shape),)


def _permute(node: UOp, grad: UOp) -> tuple[UOp | None, ...]:
    return (grad.permute(tuple(argsort(list(node.arg)))),)


def _expand(node: UOp, grad: UOp) -> tuple[UOp | None, ...]:
    """Broadcasting copies a value, so its gradient is the sum over every broadcast axis."""
    source_shape = node.src[0].shape
    axes = tuple(axis for axis, (old, new) in enumerate(zip(source_shape, node.arg, strict=True))
                 if not _same_size(old, new))
    return (_sum_to_shape(grad, axes),)


def _same_size(first: object, second: object) -> bool:
    """Equality of two sizes (ints by value, symbolic sizes by identity)."""
    if isinstance(first, int) and isinstance(second, int):
        return first == second
    return first is second


def _pad(node: UOp, grad: UOp) -> tuple[UOp | None, ...]:
    bounds = tuple((before, before + size) for (before, _), size in zip(node.arg, node.src[0].shape, strict=True))
    return (grad.shrink(bounds),)


def _shrink(node: UOp, grad: UOp) -> tuple[UOp | None, ...]:
    padding = tuple((start, size - end) for (start, end), size in zip(node.arg, node.src[0].shape, strict=True))
    return (grad.pad(padding),)


def _flip(node: UOp, grad: UOp) -> tuple[UOp | None, ...]:
    return (grad.flip(node.arg),)


# ---- reductions ----

def _reduce(node: UOp, grad: UOp) -> tuple[UOp | None, ...]:
    reduce_op, axes = node.arg
    source = node.src[0]
    expanded_grad = grad.expand(source.shape)
    if reduce_op is Ops.ADD:
        return (expanded_grad,)
    if reduce_op is Ops.MAX:
        # every position equal to the maximum shares the gradient evenly (as torch.amax)
        is_max = source.eq(node.expand(source.shape)).cast(source.dtype)
        count = _sum_to_shape(is_max, axes).expand(source.shape)
        return (is_max / count * expanded_grad,)
    if reduce_op is Ops.MUL:
        return (expanded_grad * _product_of_others(source, axes),)
    raise NotImplementedError(f"no gradient rule for REDUCE_AXIS with {reduce_op}")


def _product_of_others(source: UOp, axes: tuple[int, ...]) -> UOp:
    """For each element, the product of the other elements of its reduction group (zeros handled as torch does).

    With P the product of the group's non-zero elements and Z its count of zeros: a non-zero element gets P / x
    when Z == 0 and 0 otherwise; a zero element gets P when it is the only zero (Z == 1) and 0 otherwise.
    """
    zero, one = _full(source, 0.0), _full(source, 1.0)
    is_zero = source.eq(zero)
    nonzero_product = _where(is_zero, one, source).r(Ops.MUL, axes).expand(source.shape)
    zero_count = _sum_to_shape(_where(is_zero, one, zero), axes).expand(source.shape)
    for_nonzero = _where(zero_count.eq(zero), nonzero_product / _where(is_zero, one, source), zero)
    for_zero = _where(zero_count.eq(one), nonzero_product, zero)
    return _where(is_zero, for_zero, for_nonzero)


# ---- identity-like and device ops ----

def _identity(node: UOp, grad: UOp) -> tuple[UOp | None, ...]:
    return (grad,)


def _contiguous_backward(node: UOp, grad: UOp) -> tuple[UOp | None, ...]:
    return (grad.contiguous(),)


def _copy(node: UOp, grad: UOp) -> tuple[UOp | None, ...]:
    return (grad.copy_to_device(node.src[0].device), None)


# ---- indexing with integer tensors ----

def _fresh_copy(value: UOp) -> UOp:
    """A new buffer assigned `value` (a target a scatter may write in place)."""
    size = value.size
    if not isinstance(size, int):
        raise NotImplementedError(f"gradients through indexing need a concrete shape, got {value.shape}")
    return new_buffer_uop(value.device, value.dtype, size).reshape(value.shape).assign(value)


def _gather(node: UOp, grad: UOp) -> tuple[UOp | None, ...]:
    """Each gathered element's gradient is added back where it was read from (repeated reads accumulate)."""
    source, indices = node.src[0], node.src[1:]
    axis_map = node.arg[1]
    target = _fresh_copy(_full(source, 0.0))
    added = scatter_assign(target, grad, indices, axis_map, "add", mapped_parallel_axes(axis_map))
    return (added,) + (None,) * len(indices)


def _scatter(node: UOp, grad: UOp) -> tuple[UOp | None, ...]:
    """Written values get the gradient of the elements they land on (a gather); the target keeps the gradient where
    nothing overwrote it (plain assignment) or everywhere ('add')."""
    values, indices = node.src[1], node.src[2:]
    axis_map, reduce, parallel = node.arg
    if reduce not in (None, "add"):
        raise NotImplementedError(f"no gradient rule for a scatter that combines by {reduce!r}: only plain writes "
                                  "and sums are differentiable; detach() the values if no gradient is needed")
    values_grad = gather(grad, indices, values.shape, axis_map)
    if reduce == "add":
        return (grad, values_grad) + (None,) * len(indices)
    kept = scatter_assign(_fresh_copy(grad), _full(values, 0.0), indices, axis_map, None, parallel)
    return (kept, values_grad) + (None,) * len(indices)


def _assign(node: UOp, grad: UOp) -> tuple[UOp | None, ...]:
    """An assignment's value is the assigned value; the overwritten target gets no gradient."""
    return (None, grad)


GRADIENT_RULES: dict[Ops, GradientRule] = {
    Ops.EXP2: _exp2, Ops.LOG2: _log2, Ops.SIN: _sin, Ops.SQRT: _sqrt, Ops.RECIPROCAL: _reciprocal, Ops.NEG: _neg,
    Ops.TRUNC: _zero_gradient, Ops.ADD: _add, Ops.SUB: _sub, Ops.MUL: _mul, Ops.FDIV: _fdiv, Ops.MOD: _mod,
    Ops.MAX: _max, Ops.POW: _pow, Ops.WHERE: _where_rule, Ops.MULACC: _mulacc, Ops.CAST: _cast,
    Ops.BITCAST: _no_gradient, Ops.IDIV: _no_gradient, Ops.CMPLT: _no_gradient, Ops.CMPNE: _no_gradient,
    Ops.CMPEQ: _no_gradient, Ops.AND: _no_gradient, Ops.OR: _no_gradient, Ops.XOR: _no_gradient,
    Ops.SHL: _no_gradient, Ops.SHR: _no_gradient, Ops.THREEFRY: _no_gradient,
    Ops.RESHAPE: _reshape, Ops.PERMUTE: _permute, Ops.EXPAND: _expand, Ops.PAD: _pad, Ops.SHRINK: _shrink,
    Ops.FLIP: _flip, Ops.REDUCE_AXIS: _reduce, Ops.CONTIGUOUS: _identity,
    Ops.CONTIGUOUS_BACKWARD: _contiguous_backward, Ops.DETACH: _no_gradient, Ops.COPY: _copy, Ops.ASSIGN: _assign,
    Ops.GATHER: _gather, Ops.SCATTER: _scatter,
}
"""One rule per differentiable (or explicitly non-differentiable) tensor-level op."""


CompositeGradient = Callable[[UOp, UOp], dict[UOp, UOp]]
"""The gradient of a composite op: (its node, the gradient flowing into it) -> gradient per operand."""

_composite_gradients: weakref.WeakKeyDictionary[UOp, CompositeGradient] = weakref.WeakKeyDictionary()


def with_gradient(value: UOp, rule: CompositeGradient) -> UOp:
    """Give the node `value` of a composite op its own gradient: the autograd calls `rule(value, gradient)` for the
    gradients of the operands it names instead of differentiating `value`'s graph. The forward graph is unchanged
    (nodes are shared between equal computations, so any equal node gets the rule too: the rule must hold for the
    computation, not for one call). Used where the graph's own transpose is a poor way to compute a gradient (a
    convolution's input gradient through its sliding-window view)."""
    _composite_gradients[value] = rule
    return value


def _nodes_on_gradient_path(root: UOp, targets: set[UOp], stop: frozenset[UOp] = frozenset()) -> set[UOp]:
    """The floating-point nodes between the targets and the root through which a gradient can flow (not through
    the nodes in `stop`)."""
    on_path: set[UOp] = set()
    for node in root.toposort:
        if not dtypes.is_float(node.dtype.scalar) or node in stop:
            continue
        if node in targets or (node.op is not Ops.DETACH and any(source in on_path for source in node.src)):
            on_path.add(node)
    return on_path


def _accumulate(gradients: dict[UOp, UOp], on_path: set[UOp], source: UOp, gradient: UOp | None) -> None:
    """Add `gradient` to what `source` has gathered, where a gradient can flow into it."""
    if gradient is None or source not in on_path:
        return
    gradient = _float_gradient(source, gradient)
    if gradient is None:
        return
    previous = gradients.get(source)
    gradients[source] = gradient if previous is None else previous + gradient


def compute_gradient(root: UOp, root_grad: UOp, targets: set[UOp],
                     plain: frozenset[UOp] = frozenset(), stop: frozenset[UOp] = frozenset()) -> dict[UOp, UOp]:
    """The gradient of `root` with respect to each of `targets`, given the gradient `root_grad` flowing into root.

    Returns a dict from target to its gradient graph (same shape and dtype as the target). Targets that `root`
    does not depend on through a differentiable path (or that are not floating point) are absent from the dict.
    Nodes given their own gradient (`with_gradient`) use it, except those in `plain` (a rule that differentiates
    its own graph for some operands). No gradient flows through the nodes in `stop` (a rule that gives some
    operands' gradients itself differentiates its graph for the others only along their own paths).
    """
    # A realized tensor is a reshape of its buffer, and reshapes of reshapes merge into one node, so a graph built
    # from a realized tensor may reach its buffer without passing through the tensor's own node. Such targets are
    # differentiated through their buffer and the result viewed back with the target's shape.
    internal = {target: target.base if target.is_contiguous_buffer else target for target in targets}
    internal_targets = set(internal.values())
    on_path = _nodes_on_gradient_path(root, internal_targets, stop)
    if root not in on_path:
        return {}
    gradients: dict[UOp, UOp] = {root: root_grad}
    for node in reversed(list(root.toposort)):
        if node not in on_path or node not in gradients:
            continue
        if node in internal_targets and not any(source in on_path for source in node.src):
            continue  # a leaf target: nothing further back
        composite = _composite_gradients.get(node) if node not in plain else None
        if composite is not None:
            for operand, operand_gradient in composite(node, gradients[node]).items():
                _accumulate(gradients, on_path, operand, operand_gradient)
            continue
        rule = GRADIENT_RULES.get(node.op)
        if rule is None:
            raise NotImplementedError(f"no gradient rule for {node.op.name} (dtype {node.dtype}); it is on the path "
                                      "from the differentiated value to a target. Detach the value with .detach() "
                                      "if no gradient is needed through it")
        source_gradients = rule(node, gradients[node])
        for source, source_gradient in zip(node.src, source_gradients, strict=True):
            _accumulate(gradients, on_path, source, source_gradient)
    return {target: gradients[source].reshape(target.shape) for target, source in internal.items()
            if source in gradients}
