"""A random graph builder shared by the scheduler's and the engine's differential tests: it grows a tensor-level
UOp graph one op at a time (elementwise, reduce and movement ops) beside the numpy value the graph must have."""
from __future__ import annotations

from typing import Protocol

import numpy as np

from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp


class BufferFactory(Protocol):
    """Makes a BUFFER-backed node holding `array` (the tests' fake memory or real device buffers)."""

    def buffer(self, array: np.ndarray) -> UOp: ...


class GraphBuilder:
    """Grows a random graph and the numpy value it should have, one op at a time."""

    def __init__(self, memory: BufferFactory, rng: np.random.Generator):
        self.memory, self.rng = memory, rng
        shape = tuple(int(size) for size in rng.integers(1, 4, size=int(rng.integers(1, 4))))
        self.value = rng.standard_normal(shape).astype(np.float32)
        self.node = memory.buffer(self.value)

    def step(self) -> None:
        choice = self.rng.integers(0, 9)
        shape = self.value.shape
        if choice == 0:  # elementwise with a new input
            other = self.rng.standard_normal(shape).astype(np.float32)
            self.node, self.value = self.node * self.memory.buffer(other) + 1, self.value * other + 1
        elif choice == 1:  # unary and constant ops
            self.node, self.value = (-self.node).maximum(self.node * 0.5), np.maximum(-self.value, self.value * 0.5)
        elif choice == 2:
            order = tuple(int(axis) for axis in self.rng.permutation(len(shape)))
            self.node, self.value = self.node.permute(order), self.value.transpose(order)
        elif choice == 3:
            sizes = list(shape) + [1]
            self.rng.shuffle(sizes)
            new_shape = tuple(int(size) for size in sizes)
            self.node, self.value = self.node.reshape(new_shape), self.value.reshape(new_shape)
        elif choice == 4:
            padding = tuple((int(self.rng.integers(0, 2)), int(self.rng.integers(0, 2))) for _ in shape)
            self.node, self.value = self.node.pad(padding), np.pad(self.value, padding)
        elif choice == 5:
            bounds = []
            for size in shape:
                start = int(self.rng.integers(0, size))
                bounds.append((start, int(self.rng.integers(start + 1, size + 1))))
            self.node = self.node.shrink(tuple(bounds))
            self.value = self.value[tuple(slice(start, end) for start, end in bounds)]
        elif choice == 6:
            flags = tuple(bool(flag) for flag in self.rng.integers(0, 2, size=len(shape)))
            self.node = self.node.flip(flags)
            self.value = self.value[tuple(slice(None, None, -1) if flag else slice(None) for flag in flags)]
        elif choice == 7:  # reduce, sometimes broadcast back and combined with the input
            axis = int(self.rng.integers(0, len(shape)))
            if self.rng.integers(0, 2):
                reduced, expected = self.node.r(Ops.ADD, (axis,)), self.value.sum(axis=axis, keepdims=True)
            else:
                reduced, expected = self.node.r(Ops.MAX, (axis,)), self.value.max(axis=axis, keepdims=True)
            if self.rng.integers(0, 2):
                self.node, self.value = self.node - reduced.expand(shape), self.value - expected
            else:
                self.node, self.value = reduced, expected
        else:  # broadcast along a new axis
            times = int(self.rng.integers(2, 4))
            self.node = self.node.reshape((1,) + shape).expand((times,) + shape)
            self.value = np.broadcast_to(self.value[None], (times,) + shape)
