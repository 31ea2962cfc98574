"""Shape and device inference and the movement constructors of tensor-level UOps (tinycore.uop.shape)."""
from __future__ import annotations

import numpy as np
import pytest

from tinycore.dtype import dtypes
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp

DEVICE = UOp(Ops.DEVICE, arg="CPU")
_next_id = iter(range(10**9, 2 * 10**9))


def buffer(*shape: int, dtype=dtypes.float32, device: UOp = DEVICE) -> UOp:
    """A fresh BUFFER node viewed with `shape` (no memory is touched)."""
    count = int(np.prod(shape)) if shape else 1
    return UOp(Ops.BUFFER, dtype, (device,), (next(_next_id), count)).reshape(shape)


def test_buffer_shape_and_device():
    node = UOp(Ops.BUFFER, dtypes.float32, (DEVICE,), (next(_next_id), 12))
    assert node.shape == (12,)
    assert node.device == "CPU"
    assert node.size == 12


# (constructor, argument, numpy equivalent of the shape change)
MOVEMENT_CASES = [
    ("reshape", (6, 4), lambda array: array.reshape(6, 4)),
    ("reshape", (2, 3, 4), lambda array: array.reshape(2, 3, 4)),
    ("permute", (2, 0, 1), lambda array: array.transpose(2, 0, 1)),
    ("pad", ((1, 2), (0, 0), (3, 1)), lambda array: np.pad(array, ((1, 2), (0, 0), (3, 1)))),
    ("shrink", ((0, 1), (1, 3), (2, 4)), lambda array: array[0:1, 1:3, 2:4]),
    ("flip", (True, False, True), lambda array: array[::-1, :, ::-1]),
]


@pytest.mark.parametrize("name,argument,reference", MOVEMENT_CASES)
def test_movement_shapes_match_numpy(name, argument, reference):
    node = buffer(2, 3, 4)
    result = getattr(node, name)(argument)
    assert result.shape == reference(np.zeros((2, 3, 4))).shape


def test_expand_shape():
    node = buffer(3, 1)
    assert node.expand((3, 5)).shape == np.broadcast_to(np.zeros((3, 1)), (3, 5)).shape


@pytest.mark.parametrize("axes,expected", [((0,), (1, 3, 4)), ((1, 2), (2, 1, 1)), ((-1,), (2, 3, 1)),
                                           ((0, 1, 2), (1, 1, 1))])
def test_reduce_shape_keeps_reduced_axes(axes, expected):
    node = buffer(2, 3, 4)
    reduced = node.r(Ops.ADD, axes)
    assert reduced.shape == expected
    assert reduced.shape == np.zeros((2, 3, 4)).sum(axis=axes, keepdims=True).shape
    assert reduced.op is Ops.REDUCE_AXIS


def test_elementwise_and_wrappers_keep_shape():
    first, second = buffer(2, 3), buffer(2, 3)
    total = first + second
    assert total.shape == (2, 3)
    assert (total < second).shape == (2, 3)
    assert (total < second).where(first, second).shape == (2, 3)
    assert total.cast(dtypes.int32).shape == (2, 3)
    for wrapped in (total.contiguous(), total.detach(), total.contiguous_backward()):
        assert wrapped.shape == (2, 3)


def test_noop_constructors_return_self():
    node = buffer(2, 3)
    assert node.reshape((2, 3)) is node
    assert node.permute((0, 1)) is node
    assert node.expand((2, 3)) is node
    assert node.pad(((0, 0), (0, 0))) is node
    assert node.shrink(((0, 2), (0, 3))) is node
    assert node.flip((False, False)) is node
    assert node.r(Ops.ADD, ()) is node
    assert node.copy_to_device("CPU") is node
    assert node.contiguous() is node  # already a contiguous buffer


def test_chained_views_keep_every_node():
    # autograd finds tensors by their node, so a view of a view must keep the inner view in its graph
    node = buffer(2, 3, 4)
    inner = node.reshape((6, 4))
    outer = inner.reshape((4, 6))
    assert outer.src[0] is inner
    twice = node.permute((1, 2, 0)).permute((1, 2, 0))
    assert twice.shape == np.zeros((2, 3, 4)).transpose(1, 2, 0).transpose(1, 2, 0).shape
    assert twice.src[0].src[0] is node


def test_hash_consing_of_constructors():
    node = buffer(2, 3)
    assert node.permute((1, 0)) is node.permute((1, 0))
    assert node.pad(((1, 0), (0, 1))) is node.pad(((1, 0), (0, 1)))


def test_const_on_broadcasts():
    constant = UOp.const_on(dtypes.float32, 2, "CPU", (3, 4))
    assert constant.shape == (3, 4)
    assert constant.device == "CPU"
    assert constant.base.op is Ops.CONST and constant.base.arg == 2.0
    scalar = UOp.const_on(dtypes.int32, 7, "CPU")
    assert scalar.shape == () and scalar.op is Ops.CONST and scalar.arg == 7


def test_const_on_truncates_to_dtype():
    assert UOp.const_on(dtypes.int32, 2.7, "CPU").arg == 2
    assert UOp.const_on(dtypes.bool, 3, "CPU").arg is True


def test_copy_to_device():
    node = buffer(4)
    copied = node.copy_to_device("DISK")
    assert copied.op is Ops.COPY
    assert copied.device == "DISK"
    assert copied.shape == (4,)
    assert copied.src[1].op is Ops.DEVICE and copied.src[1].arg == "DISK"


def test_assign_and_contiguous_nodes():
    target, value = buffer(2, 2), buffer(2, 2) * 2
    assigned = target.assign(value)
    assert assigned.op is Ops.ASSIGN and assigned.shape == (2, 2) and assigned.src == (target, value)
    permuted = target.permute((1, 0))
    assert permuted.contiguous().op is Ops.CONTIGUOUS
    assert target.clone().op is Ops.CONTIGUOUS


def test_device_inference_through_graph():
    node = buffer(3, device=UOp(Ops.DEVICE, arg="CL"))
    assert (node * 2 + node).device == "CL"
    assert node.r(Ops.MAX, (0,)).device == "CL"


def test_symbolic_shapes():
    variable = UOp(Ops.DEFINE_VAR, dtypes.int32, (), ("n", 1, 10))
    node = UOp(Ops.BUFFER, dtypes.float32, (DEVICE,), (next(_next_id), 40))
    view = node.reshape((4, 10)).shrink(((0, 4), (0, variable)))
    assert view.shape[0] == 4 and view.shape[1] is variable
    assert view.reshape((4, variable)) is view
    expanded = view.r(Ops.ADD, (1,)).expand((4, variable))
    assert expanded.shape[1] is variable
    assert (view + view).shape == view.shape


@pytest.mark.parametrize("build", [
    lambda node: node.reshape((5, 5)),
    lambda node: node.permute((0, 0, 1)),
    lambda node: node.expand((4, 3, 4)),
    lambda node: node.shrink(((0, 3), (0, 3), (0, 4))),
    lambda node: node.pad(((0, -1), (0, 0), (0, 0))),
    lambda node: node.flip((True,)),
    lambda node: node.r(Ops.SUB, (0,)),
    lambda node: node.r(Ops.ADD, (3,)),
])
def test_invalid_movement_raises(build):
    with pytest.raises(AssertionError):
        build(buffer(2, 3, 4))


def test_kernel_level_nodes_have_no_shape():
    with pytest.raises(ValueError, match="no shape"):
        _ = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(4), (), 0).shape


def test_inference_on_a_deep_graph_built_op_by_op():
    # eager programs extend one lazy graph op by op: each new node infers from its sources, so a chain 20000 deep
    # (far past Python's recursion limit) infers shape and device without walking the whole chain per node
    node = buffer(3, 4)
    for step in range(20000):  # built without inference (raw nodes), so the last node's query fills the chain
        node = UOp(Ops.RESHAPE, dtypes.float32, (node,), (4, 3) if step % 2 == 0 else (3, 4))
        node = UOp(Ops.ADD, dtypes.float32, (node, node))
        if step == 10000:
            assert node.shape == (4, 3)  # a query half way leaves the upper half to fill later
    assert node.shape == np.zeros((3, 4)).shape and node.device == "CPU"
    diamond = buffer(2, 5)
    for _ in range(200):  # shared sources: each node is inferred once however many users it has
        diamond = diamond.reshape((5, 2)).reshape((2, 5)) + diamond
    assert diamond.shape == (2, 5) and diamond.device == "CPU"
