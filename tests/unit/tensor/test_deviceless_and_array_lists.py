"""Tensors over a constant with no device (Tensor(UOp.const(...))) and tensors from lists of numpy arrays, as
tinygrad makes them; values checked against numpy."""
from __future__ import annotations

import numpy as np

from tinycore import Device, Tensor, UOp, dtypes


def test_list_of_numpy_arrays_nests_as_numpy_does():
    for data in ([np.array([1, 2, 3])] * 3,
                 [np.array([1.0, 2.0, 3.0]), np.array([1, 2, 3]), np.array([4, 5, 6])],
                 [np.array(1.0), np.array(2.0), np.array(3.0)]):
        np.testing.assert_equal(Tensor(data).numpy(), np.array(data))


def test_deviceless_constant_realize_keeps_the_constant():
    t = Tensor(UOp.const(dtypes.float, 2.0))
    node = t.uop
    t.realize()
    assert t.uop is node and t.device is None


def test_deviceless_constant_reads_and_clones_onto_a_device():
    assert Tensor(UOp.const(dtypes.float, 2.0)).numpy() == np.float32(2.0)
    assert Tensor(UOp.const(dtypes.int, 3)).tolist() == 3
    cloned = Tensor(UOp.const(dtypes.float, 2.0)).clone()
    assert cloned.device == Device.DEFAULT and cloned.numpy() == np.float32(2.0)
    moved = Tensor(UOp.const(dtypes.float, 2.0)).clone(device="CPU")
    assert moved.device == "CPU" and (moved + 1).numpy() == np.float32(3.0)
