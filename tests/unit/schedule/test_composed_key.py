"""The schedule cache's one-lookup key for an op over buffers and small constants (an eager `x + 1`): the same key
as the graph walk gives, told apart where structures differ, and results that match numpy when structures that
look alike alternate."""
from __future__ import annotations

import numpy as np

from tinycore import Tensor
from tinycore.schedule import cache
from tinycore.schedule.cache import structure_key


def test_eager_add_key_by_hand() -> None:
    """`Tensor([1.0, 2.0]) + 1`: DEVICE, BUFFER, CONST, RESHAPE, EXPAND, ADD in walk order, the buffer as input 0."""
    data = Tensor([1.0, 2.0], device="CPU").realize()
    for _ in range(2):  # the first call fills the shortcut, the second reads it
        node = (data + 1).uop
        key, inputs = structure_key([node])
        assert key == ((5, "void", "CPU", ()), (-1, "float", 2, 0), (8, "float", ("float", "1.0"), (0,)),
                       (12, "float", (1,), (2,)), (14, "float", (2,), (3,)), (37, "float", None, (1, 4)), (5,))
        assert inputs == [data.uop]


def test_shortcut_matches_the_walk() -> None:
    """Every op shape the shortcut takes gives the walk's key and inputs, on its first and its repeated calls."""
    first, second = Tensor([1.0, -2.0]).realize(), Tensor([3.0, 4.0]).realize()
    integers = Tensor([1, 2]).realize()
    builders = [lambda: first + 1, lambda: first + second, lambda: first + first, lambda: second + first,
                lambda: first * 0.0, lambda: first * -0.0, lambda: first < second, lambda: integers + 1,
                lambda: first.sqrt(), lambda: (first > 0).where(first, second)]
    for _ in range(2):
        for build in builders:
            node = build().uop
            assert structure_key([node]) == cache._walked_structure_key((node,))


def test_alike_structures_keep_their_results() -> None:
    """`a + a` and `a + b`, `a * 0.0` and `a * -0.0` alternate through the cache with numpy's values."""
    values_a, values_b = np.array([1.5, -2.0], np.float32), np.array([0.25, 4.0], np.float32)
    for _ in range(3):
        a, b = Tensor(values_a), Tensor(values_b)
        np.testing.assert_array_equal((a + a).numpy(), values_a + values_a)
        np.testing.assert_array_equal((a + b).numpy(), values_a + values_b)
        np.testing.assert_array_equal((b + a).numpy(), values_b + values_a)
        np.testing.assert_array_equal(np.signbit((a * 0.0).numpy()), np.signbit(values_a * np.float32(0.0)))
        np.testing.assert_array_equal(np.signbit((a * -0.0).numpy()), np.signbit(values_a * np.float32(-0.0)))


def test_flat_list_dtypes() -> None:
    """A flat list's dtype is numpy's choice for the same values (bool < int < float), empty lists are float."""
    assert Tensor([True, False]).dtype == Tensor(np.array([True, False])).dtype
    assert Tensor([True, 2]).numpy().dtype == np.int32
    assert Tensor([1, 2.5]).numpy().dtype == np.float32
    assert Tensor([]).numpy().dtype == np.float32
    np.testing.assert_array_equal(Tensor([True, 2, 3.5]).numpy(), np.array([1.0, 2.0, 3.5], np.float32))


def test_outputs_sharing_a_graph_key_by_hand() -> None:
    """`[s * b, s + a]` with `s = a + b`: one walk numbers DEVICE, a, b, s, s * b, then s + a (s is numbered once)."""
    a, b = Tensor([1.0], device="CPU").realize(), Tensor([2.0], device="CPU").realize()
    shared = a + b
    key, inputs = structure_key([(shared * b).uop, (shared + a).uop])
    assert key == ((5, "void", "CPU", ()), (-1, "float", 1, 0), (-1, "float", 1, 0), (37, "float", None, (1, 2)),
                   (39, "float", None, (3, 2)), (37, "float", None, (3, 1)), (4, 5))
    assert inputs == [a.uop, b.uop]


def test_outputs_sharing_a_graph_realized_together() -> None:
    """Outputs realized together through the cache (twice: the second from its template) match numpy."""
    values_a, values_b = np.array([1.5, -2.0, 3.0], np.float32), np.array([0.5, 4.0, -1.0], np.float32)
    for _ in range(2):
        a, b = Tensor(values_a), Tensor(values_b)
        shared = a * b + 1
        first, second, third = shared * a, shared - b, (shared * shared + 1).sqrt()
        Tensor.realize(first, second, third)
        expected_shared = values_a * values_b + 1
        np.testing.assert_allclose(first.numpy(), expected_shared * values_a, rtol=1e-6)
        np.testing.assert_allclose(second.numpy(), expected_shared - values_b, rtol=1e-6)
        np.testing.assert_allclose(third.numpy(), np.sqrt(expected_shared * expected_shared + 1), rtol=1e-6)
