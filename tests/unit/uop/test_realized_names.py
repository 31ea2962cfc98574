"""UOp.is_realized and UOp.buffer, tinygrad's names for "this value is in memory" and "its device Buffer"."""
from __future__ import annotations

import numpy as np

from tinycore import Tensor, dtypes
from tinycore.nn import Linear
from tinycore.nn.state import load_state_dict


def test_is_realized_before_and_after_realize():
    t = Tensor([1.0, 2.0, 3.0]) * 2
    assert not t.uop.is_realized
    t.realize()
    assert t.uop.is_realized
    assert t[1:].uop.is_realized  # a view of a buffer reads memory, nothing to compute


def test_buffer_of_a_clone_is_distinct_and_holds_the_values():
    a = Tensor(np.arange(16, dtype=np.float32).reshape(4, 4)).realize()
    b = a.clone().realize()
    assert a.uop.base.buffer is not b.uop.base.buffer
    np.testing.assert_equal(b.uop.base.buffer.numpy().reshape(4, 4),
                            np.arange(16, dtype=np.float32).reshape(4, 4))


def test_load_state_dict_realize_flag_seen_through_is_realized():
    source = Tensor.full((5, 3), 2, dtype=dtypes.uint8).contiguous().realize()
    lazy, eager = Linear(3, 5, bias=False), Linear(3, 5, bias=False)
    load_state_dict(lazy, {"weight": source.float() * 0.5}, realize=False)
    load_state_dict(eager, {"weight": source.float() * 0.5})
    assert not lazy.weight.uop.is_realized
    assert eager.weight.uop.is_realized
    np.testing.assert_equal(lazy.weight.numpy(), np.ones((5, 3)))
