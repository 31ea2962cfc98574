"""Differential fuzzer: random graphs of elementwise, reduce and movement ops, checked against numpy.

Each graph starts from 1-3 random float32 or int32 arrays of small shapes (ranks 0..4, sizes 1..7, size-1 axes,
now and then a size-0 axis) and applies 3-12 random operations to both the numpy arrays and Tensors built from
them. Every operation is written once as a pair of Python expressions (one for the Tensor, one for numpy) that
are evaluated against the graph's named values, so the printed trace of a failing graph is a runnable
reproduction.

Float tolerances follow a static error model: a value produced only by correctly rounded operations (add, sub,
mul, sqrt, max, movement, ...) from the inputs is expected bit for bit, so comparisons and casts to int32 are only
applied to such values; transcendental functions and reductions carry an absolute error estimate that widens the
tolerance of everything computed from them. Integers and booleans are compared exactly, dtypes and shapes always.

A graph is built from two seeds: the structure seed picks operations and shapes, the data seed the input values.
Running one structure on several data seeds reuses its compiled kernels, which keeps CI runs short (each new
kernel costs one C compiler run).

Run: python tests/fuzz/fuzz_graphs.py --graphs N --seed S [--data-per-structure D] [--verbose]
"""
from __future__ import annotations

import argparse
import math
import random
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

FLOAT_ROUNDING = 1.2e-7  # one float32 ulp, relative
TRANSCENDENTAL_ERROR = 2e-6  # relative error allowed for exp, log, sin, tanh, sigmoid
RELATIVE_TOLERANCE = 1e-4
ABSOLUTE_TOLERANCE = 1e-4  # times the magnitude of the expected values (at least 1)
FLOAT_LIMIT = 1000.0  # float values are clipped back to [-FLOAT_CLIP, FLOAT_CLIP] past this bound
FLOAT_CLIP = 100.0
INT_LIMIT = 100_000.0
INT_CLIP = 1000.0
MAX_NUMEL = 3000
LARGE_GRAPH_CHANCE = 0.05  # graphs allowed to expand to sizes that split kernels across CPU workers
LARGE_MAX_NUMEL = 150_000
DIM_POOL = (1, 1, 2, 3, 4, 5, 7)
DTYPE_NAMES = {np.dtype(np.float32): "float32", np.dtype(np.int32): "int32", np.dtype(np.bool_): "bool"}
# tinygrad's names, for the oracle check (--tinygrad)
DTYPE_ALIASES = {"float": "float32", "int": "int32", "weakfloat": "float32", "weakint": "int32"}
RANK = {"bool": 0, "int32": 1, "float32": 2}


@dataclass
class Node:
    """One value of a graph: its name in the trace, static facts, and its numpy and Tensor values."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    bound: float
    error: float
    expected: np.ndarray
    tensor: Any

    @property
    def numel(self) -> int:
        """The element count."""
        return math.prod(self.shape)

    @property
    def exact(self) -> bool:
        """True when numpy and the Tensor must agree bit for bit."""
        return self.error == 0.0


@dataclass
class Failure:
    """A graph whose Tensor results differ from numpy (or that raised)."""

    structure_seed: int
    data_seed: int
    message: str
    trace: str

    def __str__(self) -> str:
        return (f"graph structure_seed={self.structure_seed} data_seed={self.data_seed}: {self.message}\n"
                f"{self.trace}")


@dataclass
class RunStats:
    """What a fuzzing run did."""

    graphs: int = 0
    operations: int = 0
    outputs: int = 0
    failures: list[Failure] = field(default_factory=list)
    seconds: float = 0.0


def promote(*dtypes_in: str) -> str:
    """The common dtype of bool < int32 < float32 (the Tensor's rule for these three)."""
    return max(dtypes_in, key=lambda name: RANK[name])


def float_rounding(dtype: str, bound: float) -> float:
    """The rounding error of one correctly rounded operation producing values up to `bound`."""
    return FLOAT_ROUNDING * bound if dtype == "float32" else 0.0


class GraphBuilder:
    """Builds one random graph, applying each operation to numpy arrays and Tensors side by side."""

    def __init__(self, tensor_class: Any, structure_seed: int, data_seed: int):
        self.tensor_class = tensor_class
        self.rng = random.Random(structure_seed)
        self.data_rng = np.random.default_rng(data_seed)
        self.nodes: list[Node] = []
        self.lines: list[str] = []
        self.large = self.rng.random() < LARGE_GRAPH_CHANCE
        self.max_numel = LARGE_MAX_NUMEL if self.large else MAX_NUMEL

    # ---- bookkeeping ----

    def _scope(self, kind: str) -> dict[str, Any]:
        names: dict[str, Any] = {"np": np, "Tensor": self.tensor_class}
        for node in self.nodes:
            names[node.name] = node.tensor if kind == "tensor" else node.expected
        return names

    def add(self, tensor_expression: str, numpy_expression: str, shape: tuple[int, ...], dtype: str, bound: float,
            error: float) -> Node:
        """Evaluate one operation on both sides and record it as a new node."""
        name = f"t{len(self.nodes)}"
        self.lines.append(f"{name} = {tensor_expression}  # numpy: {numpy_expression}")
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            expected = np.asarray(eval(numpy_expression, self._scope("numpy")))  # noqa: S307
        tensor = eval(tensor_expression, self._scope("tensor"))  # noqa: S307
        expected_dtype = {"float32": np.float32, "int32": np.int32, "bool": np.bool_}[dtype]
        if expected.dtype != expected_dtype:
            raise AssertionError(f"fuzzer oracle bug: {numpy_expression} gave {expected.dtype}, meant {dtype}")
        if tuple(expected.shape) != tuple(shape):
            raise AssertionError(f"fuzzer oracle bug: {numpy_expression} gave shape {expected.shape}, meant {shape}")
        node = Node(name, tuple(shape), dtype, bound, error, expected, tensor)
        self.nodes.append(node)
        return self.keep_bounded(node)

    def keep_bounded(self, node: Node) -> Node:
        """Clip a node whose static bound grew too large back to a small range (an exact operation)."""
        limit, clip = (FLOAT_LIMIT, FLOAT_CLIP) if node.dtype == "float32" else (INT_LIMIT, INT_CLIP)
        if node.dtype == "bool" or node.bound <= limit:
            return node
        value = int(clip) if node.dtype == "int32" else clip
        return self.add(f"{node.name}.clip({-value}, {value})", f"np.clip({node.name}, {-value}, {value})",
                        node.shape, node.dtype, clip, node.error)

    @staticmethod
    def as_numpy(node: Node, dtype: str) -> str:
        """`node`'s numpy name, cast to `dtype` when it differs."""
        return node.name if node.dtype == dtype else f"{node.name}.astype(np.{dtype})"

    def pick(self, accept: Any = None) -> Node | None:
        """A random node (recent ones more often) that `accept` allows."""
        candidates = [node for node in self.nodes if accept is None or accept(node)]
        if not candidates:
            return None
        weights = [1.0 + index for index in range(len(candidates))]
        return self.rng.choices(candidates, weights)[0]

    # ---- inputs ----

    def random_shape(self) -> tuple[int, ...]:
        """A small random shape from the dimension pool."""
        rank = self.rng.choice((0, 1, 2, 2, 3, 3, 4))
        return tuple(self.rng.choice(DIM_POOL) for _ in range(rank))

    def add_inputs(self) -> None:
        """1-3 inputs whose shapes broadcast against a common base shape."""
        base = list(self.random_shape())
        if base and self.rng.random() < 0.06:
            base[self.rng.randrange(len(base))] = 0
        for _ in range(self.rng.choice((1, 2, 2, 3))):
            shape = list(base[self.rng.randrange(len(base) + 1):]) if self.rng.random() < 0.3 else list(base)
            shape = [1 if self.rng.random() < 0.2 else size for size in shape]
            if self.rng.random() < 0.15:
                shape = list(self.random_shape())
            dtype = "int32" if self.rng.random() < 0.2 else "float32"
            ties = self.rng.random() < 0.3
            self._add_input(tuple(shape), dtype, ties)

    def _add_input(self, shape: tuple[int, ...], dtype: str, ties: bool) -> None:
        if dtype == "int32":
            values = self.data_rng.integers(-5, 6, size=shape).astype(np.int32)
            bound = 5.0
        else:
            values = self.data_rng.uniform(-3, 3, size=shape).astype(np.float32)
            if ties:
                values = (np.round(values * 2) / 2).astype(np.float32)
            bound = 3.0
        values = np.asarray(values, dtype=np.dtype(dtype))
        name = f"t{len(self.nodes)}"
        self.lines.append(f"{name} = Tensor(np.array({values.tolist()!r}, dtype=np.{dtype}).reshape({shape}))")
        tensor = self.tensor_class(values.copy())
        self.nodes.append(Node(name, shape, dtype, bound, 0.0, values, tensor))

    # ---- operations ----

    def unary(self) -> Node | None:
        """neg, abs, relu, exp, log, sqrt, sigmoid, tanh, sin, reciprocal or a cast."""
        node = self.pick(lambda candidate: candidate.dtype != "bool")
        if node is None:
            return None
        name, dtype, bound, error = node.name, node.dtype, node.bound, node.error
        as_float = self.as_numpy(node, "float32")
        choice = self.rng.choice(("neg", "abs", "relu", "exp", "log", "sqrt", "sigmoid", "tanh", "sin",
                                  "reciprocal", "cast"))
        if choice == "neg":
            return self.add(f"-{name}", f"-{name}", node.shape, dtype, bound, error)
        if choice == "abs":
            return self.add(f"{name}.abs()", f"np.abs({name})", node.shape, dtype, bound, error)
        if choice == "relu":
            return self.add(f"{name}.relu()", f"np.maximum({name}, 0)", node.shape, dtype, bound, error)
        if choice == "exp":
            top = math.exp(2.0)
            return self.add(f"{name}.clip(-4, 2).exp()",
                            f"np.exp(np.clip({name}, -4, 2).astype(np.float32))", node.shape, "float32", top,
                            top * error + TRANSCENDENTAL_ERROR * top)
        if choice == "log":
            top = math.log(bound + 1)
            return self.add(f"({name}.abs() + 1).log()", f"np.log((np.abs({name}) + 1).astype(np.float32))",
                            node.shape, "float32", top, error + TRANSCENDENTAL_ERROR * max(top, 1.0))
        if choice == "sqrt":
            if node.exact:
                return self.add(f"{name}.abs().sqrt()", f"np.sqrt(np.abs({as_float}))", node.shape, "float32",
                                math.sqrt(bound), 0.0)
            return self.add(f"({name}.abs() + 1).sqrt()", f"np.sqrt(np.abs({name}) + np.float32(1))", node.shape,
                            "float32", math.sqrt(bound + 1), error + FLOAT_ROUNDING * math.sqrt(bound + 1))
        if choice == "sigmoid":
            return self.add(f"{name}.sigmoid()", f"(1 / (1 + np.exp(-{as_float})))", node.shape, "float32", 1.0,
                            0.25 * error + TRANSCENDENTAL_ERROR)
        if choice == "tanh":
            return self.add(f"{name}.tanh()", f"np.tanh({as_float})", node.shape, "float32", 1.0,
                            error + TRANSCENDENTAL_ERROR)
        if choice == "sin":
            return self.add(f"{name}.sin()", f"np.sin({as_float})", node.shape, "float32", 1.0,
                            error + TRANSCENDENTAL_ERROR * max(1.0, bound))
        if choice == "reciprocal":
            return self.add(f"({name}.abs() + 1).reciprocal()",
                            f"(np.float32(1) / (np.abs({name}) + 1).astype(np.float32))", node.shape, "float32",
                            1.0, error + 2 * FLOAT_ROUNDING)
        return self.cast(node)

    def cast(self, node: Node) -> Node | None:
        """int32 -> float32, bool -> int32/float32, or an exact float32 -> int32 (truncation)."""
        if node.dtype == "float32":
            if not node.exact:
                return None
            return self.add(f"{node.name}.cast('int32')", f"{node.name}.astype(np.int32)", node.shape, "int32",
                            node.bound, 0.0)
        target = "float32" if node.dtype == "int32" or self.rng.random() < 0.5 else "int32"
        return self.add(f"{node.name}.cast('{target}')", f"{node.name}.astype(np.{target})", node.shape, target,
                        max(node.bound, 1.0), node.error)

    def cast_any(self) -> Node | None:
        """A cast of any value, booleans included."""
        node = self.pick()
        return None if node is None else self.cast(node)

    def _broadcast_partner(self, node: Node) -> Node | None:
        """Another numeric node whose shape broadcasts with `node`'s (or `node` itself)."""
        def fits(candidate: Node) -> bool:
            if candidate.dtype == "bool":
                return False
            try:
                shape = np.broadcast_shapes(candidate.shape, node.shape)
            except ValueError:
                return False
            return math.prod(shape) <= self.max_numel
        return self.pick(fits)

    def binary(self) -> Node | None:
        """+ - * / maximum minimum with broadcasting, or with a Python scalar on either side."""
        left = self.pick(lambda candidate: candidate.dtype != "bool")
        if left is None:
            return None
        operation = self.rng.choice(("+", "-", "*", "/", "maximum", "minimum"))
        if self.rng.random() < 0.2:
            return self._binary_scalar(left, operation)
        right = self._broadcast_partner(left)
        if right is None:
            return None
        shape = tuple(np.broadcast_shapes(left.shape, right.shape))
        dtype = promote(left.dtype, right.dtype)
        if operation == "/":
            dtype = "float32"
            left_numpy, right_numpy = self.as_numpy(left, dtype), f"(np.abs({right.name}) + 1).astype(np.float32)"
            return self.add(f"{left.name} / ({right.name}.abs() + 1)", f"({left_numpy} / {right_numpy})", shape,
                            dtype, left.bound, left.error + left.bound * right.error + 2 * FLOAT_ROUNDING * left.bound)
        left_numpy, right_numpy = self.as_numpy(left, dtype), self.as_numpy(right, dtype)
        if operation in ("maximum", "minimum"):
            return self.add(f"{left.name}.{operation}({right.name})", f"np.{operation}({left_numpy}, {right_numpy})",
                            shape, dtype, max(left.bound, right.bound), max(left.error, right.error))
        if operation == "*":
            bound = left.bound * right.bound
            error = left.error * right.bound + right.error * left.bound + left.error * right.error
        else:
            bound = left.bound + right.bound
            error = left.error + right.error
        if error:
            error += float_rounding(dtype, bound)
        return self.add(f"{left.name} {operation} {right.name}", f"({left_numpy} {operation} {right_numpy})", shape,
                        dtype, bound, error)

    def _binary_scalar(self, node: Node, operation: str) -> Node | None:
        scalar: float | int = self.rng.choice((2, -1, 3)) if self.rng.random() < 0.5 else self.rng.choice(
            (0.5, 1.5, -2.25))
        dtype = "float32" if isinstance(scalar, float) or operation == "/" else node.dtype
        numpy_scalar = f"np.{dtype}({scalar})"
        value = self.as_numpy(node, dtype)
        reversed_order = self.rng.random() < 0.4 and operation != "/"
        if operation in ("maximum", "minimum"):
            return self.add(f"{node.name}.{operation}({scalar})", f"np.{operation}({value}, {numpy_scalar})",
                            node.shape, dtype, max(node.bound, abs(scalar)), node.error)
        if operation == "/":
            bound = node.bound / abs(scalar)
            return self.add(f"{node.name} / {scalar}", f"({value} / {numpy_scalar})", node.shape, dtype, bound,
                            node.error / abs(scalar) + 2 * FLOAT_ROUNDING * bound)
        bound = node.bound * abs(scalar) if operation == "*" else node.bound + abs(scalar)
        error = node.error * abs(scalar) if operation == "*" else node.error
        if error:
            error += float_rounding(dtype, bound)
        if reversed_order:
            return self.add(f"{scalar} {operation} {node.name}", f"({numpy_scalar} {operation} {value})", node.shape,
                            dtype, bound, error)
        return self.add(f"{node.name} {operation} {scalar}", f"({value} {operation} {numpy_scalar})", node.shape,
                        dtype, bound, error)

    def compare_where(self) -> Node | None:
        """A comparison of exact values (bit-identical on both sides), then where() selecting between values."""
        left = self.pick(lambda candidate: candidate.exact and candidate.dtype != "bool")
        if left is None:
            return None
        right = self._broadcast_partner(left)
        if right is None or not right.exact:
            return None
        dtype = promote(left.dtype, right.dtype)
        operation = self.rng.choice(("<", ">", "==", "!=", "<=", ">="))
        shape = tuple(np.broadcast_shapes(left.shape, right.shape))
        condition = self.add(f"({left.name} {operation} {right.name})",
                             f"({self.as_numpy(left, dtype)} {operation} {self.as_numpy(right, dtype)})", shape,
                             "bool", 1.0, 0.0)
        if self.rng.random() < 0.15:
            return condition
        return self.where(condition)

    def where(self, condition: Node) -> Node | None:
        """condition.where(x, y) with x, y nodes or scalars broadcasting against the condition."""
        def operand() -> tuple[str, str, str, tuple[int, ...], float, float]:
            if self.rng.random() < 0.25:
                scalar = self.rng.choice((0, 1, -2.5, 0.75))
                dtype = "float32" if isinstance(scalar, float) else "int32"
                return str(scalar), f"np.{dtype}({scalar})", dtype, (), abs(scalar), 0.0
            found = self._broadcast_partner(condition) or condition
            if found.dtype == "bool":
                return "0.5", "np.float32(0.5)", "float32", (), 0.5, 0.0
            return found.name, found.name, found.dtype, found.shape, found.bound, found.error
        first, second = operand(), operand()
        dtype = promote(first[2], second[2])
        try:
            shape = tuple(np.broadcast_shapes(condition.shape, first[3], second[3]))
        except ValueError:
            return None
        if math.prod(shape) > self.max_numel:
            return None
        first_numpy = first[1] if first[2] == dtype else f"{first[1]}.astype(np.{dtype})"
        second_numpy = second[1] if second[2] == dtype else f"{second[1]}.astype(np.{dtype})"
        return self.add(f"{condition.name}.where({first[0]}, {second[0]})",
                        f"np.where({condition.name}, {first_numpy}, {second_numpy})", shape, dtype,
                        max(first[4], second[4]), max(first[5], second[5]))

    def _random_axes(self, node: Node) -> tuple[Any, tuple[int, ...]]:
        """An axis argument (None, int or tuple, possibly negative) and the axes it resolves to."""
        rank = len(node.shape)
        if rank == 0 or self.rng.random() < 0.15:
            return None, tuple(range(rank))
        count = self.rng.randint(1, rank)
        axes = tuple(sorted(self.rng.sample(range(rank), count)))
        written = tuple(axis - rank if self.rng.random() < 0.4 else axis for axis in axes)
        if count == 1 and self.rng.random() < 0.6:
            return written[0], axes
        return written, axes

    def reduce(self) -> Node | None:
        """sum, max, min, mean or prod over random axes, with or without keepdim."""
        node = self.pick(lambda candidate: candidate.dtype != "bool" or self.rng.random() < 0.3)
        if node is None:
            return None
        axis, axes = self._random_axes(node)
        keepdim = self.rng.random() < 0.4
        count = math.prod(node.shape[axis_index] for axis_index in axes)
        shape = tuple(1 if index in axes else size for index, size in enumerate(node.shape) if keepdim or
                      index not in axes)
        arguments = f"axis={axis!r}, keepdim={keepdim}"
        numpy_arguments = f"axis={axis!r}, keepdims={keepdim}"
        choice = "sum" if node.dtype == "bool" else self.rng.choice(("sum", "sum", "max", "min", "mean", "prod"))
        accumulate = "float32" if node.dtype == "float32" else "int32"
        if choice == "sum":
            error = count * (node.error + float_rounding(accumulate, node.bound)) if (
                node.error or accumulate == "float32") else 0.0
            return self.add(f"{node.name}.sum({arguments})",
                            f"np.sum({node.name}, {numpy_arguments}, dtype=np.{accumulate})", shape, accumulate,
                            node.bound * max(count, 1), error)
        if choice in ("max", "min"):
            if count == 0:
                return None
            return self.add(f"{node.name}.{choice}({arguments})", f"np.{choice}({node.name}, {numpy_arguments})",
                            shape, node.dtype, node.bound, node.error)
        if choice == "mean":
            if count == 0:
                return None
            error = node.error + 2 * count * FLOAT_ROUNDING * node.bound
            return self.add(f"{node.name}.mean({arguments})",
                            f"np.mean({node.name}, {numpy_arguments}, dtype=np.float32).astype(np.float32)", shape,
                            "float32", node.bound, error)
        if count * math.log(max(node.bound, 1.0)) > math.log(1e4):
            return None
        bound = max(node.bound, 1.0) ** count
        error = 0.0
        if node.dtype == "float32":
            error = count * node.error * node.bound ** max(count - 1, 0) + count * FLOAT_ROUNDING * bound
        return self.add(f"{node.name}.prod({arguments})",
                        f"np.prod({node.name}, {numpy_arguments}, dtype=np.{node.dtype})", shape, node.dtype, bound,
                        error)

    def reduce_broadcast(self) -> Node | None:
        """x - x.max(axis, keepdim=True) style: a reduction with keepdim combined with its own input."""
        node = self.pick(lambda candidate: candidate.dtype == "float32" and candidate.numel > 0 and
                         len(candidate.shape) > 0)
        if node is None:
            return None
        axis, axes = self._random_axes(node)
        reduction = self.rng.choice(("max", "sum", "mean"))
        count = math.prod(node.shape[index] for index in axes)
        numpy_reduced = f"np.{reduction}({node.name}, axis={axis!r}, keepdims=True)"
        error = node.error if reduction == "max" else node.error + 2 * count * FLOAT_ROUNDING * node.bound
        bound = node.bound * (count if reduction == "sum" else 1)
        error = node.error + error + (FLOAT_ROUNDING * (node.bound + bound) if error or node.error else 0.0)
        if error == 0.0:
            error = 0.0  # max of exact values minus exact values stays exact
        return self.add(f"({node.name} - {node.name}.{reduction}(axis={axis!r}, keepdim=True))",
                        f"({node.name} - {numpy_reduced})", node.shape, "float32", node.bound + bound, error)

    def _random_reshape(self, numel: int) -> tuple[int, ...]:
        rank = self.rng.choice((0, 1, 2, 2, 3, 3, 4))
        if numel == 0:
            empty = [self.rng.choice((1, 2, 3)) for _ in range(max(rank, 1))]
            empty[self.rng.randrange(len(empty))] = 0
            return tuple(empty)
        shape: list[int] = []
        remaining = numel
        for _ in range(max(rank - 1, 0)):
            divisors = [divisor for divisor in range(1, remaining + 1) if remaining % divisor == 0 and divisor <= 8]
            size = self.rng.choice(divisors)
            shape.append(size)
            remaining //= size
        if rank == 0:
            return () if numel == 1 else (numel,)
        shape.append(remaining)
        self.rng.shuffle(shape)
        return tuple(shape)

    def movement(self) -> Node | None:
        """reshape, permute, expand, pad, getitem with slices, flip, transpose, squeeze or unsqueeze."""
        node = self.pick()
        if node is None:
            return None
        name, shape, rank = node.name, node.shape, len(node.shape)
        keep = (node.dtype, node.bound, node.error)
        choice = self.rng.choice(("reshape", "permute", "expand", "pad", "pad", "getitem", "getitem", "flip",
                                  "transpose", "squeeze", "unsqueeze", "shrink"))
        if choice == "reshape":
            new_shape = self._random_reshape(node.numel)
            written = list(new_shape)
            if written and node.numel > 0 and self.rng.random() < 0.3:
                written[self.rng.randrange(len(written))] = -1
            return self.add(f"{name}.reshape({tuple(written)})", f"{name}.reshape({tuple(written)})", new_shape,
                            *keep)
        if choice == "permute" and rank >= 2:
            order = list(range(rank))
            self.rng.shuffle(order)
            return self.add(f"{name}.permute({tuple(order)})", f"np.transpose({name}, {tuple(order)})",
                            tuple(shape[index] for index in order), *keep)
        if choice == "transpose" and rank >= 2:
            first, second = self.rng.sample(range(-rank, rank), 2)
            if first % rank == second % rank:
                return None
            swapped = list(shape)
            swapped[first], swapped[second] = swapped[second], swapped[first]
            return self.add(f"{name}.transpose({first}, {second})", f"np.swapaxes({name}, {first}, {second})",
                            tuple(swapped), *keep)
        if choice == "expand":
            return self._expand(node)
        if choice == "pad" and rank >= 1:
            return self._pad(node)
        if choice == "getitem":
            return self._getitem(node)
        if choice == "shrink" and rank >= 1:
            bounds = []
            for size in shape:
                start = self.rng.randint(0, size)
                bounds.append((start, self.rng.randint(start, size)) if self.rng.random() < 0.7 else None)
            slices = ", ".join(":" if pair is None else f"{pair[0]}:{pair[1]}" for pair in bounds)
            new_shape = tuple(size if pair is None else pair[1] - pair[0]
                              for size, pair in zip(shape, bounds, strict=True))
            return self.add(f"{name}.shrink({tuple(bounds)!r})", f"{name}[{slices}]", new_shape, *keep)
        if choice == "flip" and rank >= 1:
            axes = tuple(self.rng.sample(range(-rank, rank), self.rng.randint(1, rank)))
            if len({axis % rank for axis in axes}) != len(axes):
                return None
            flip_axes = axes[0] if len(axes) == 1 and self.rng.random() < 0.5 else axes
            return self.add(f"{name}.flip({flip_axes!r})", f"np.flip({name}, {flip_axes!r})", shape, *keep)
        if choice == "squeeze":
            if rank == 0 or self.rng.random() < 0.3:
                new_shape = tuple(size for size in shape if size != 1)
                return self.add(f"{name}.squeeze()", f"np.squeeze({name})", new_shape, *keep)
            dim = self.rng.randrange(-rank, rank)
            if shape[dim] != 1:
                return self.add(f"{name}.squeeze({dim})", name, shape, *keep)
            new_shape = tuple(size for index, size in enumerate(shape) if index != dim % rank)
            return self.add(f"{name}.squeeze({dim})", f"np.squeeze({name}, {dim})", new_shape, *keep)
        if choice == "unsqueeze" and rank < 5:
            dim = self.rng.randrange(-rank - 1, rank + 1)
            position = dim % (rank + 1)
            new_shape = shape[:position] + (1,) + shape[position:]
            return self.add(f"{name}.unsqueeze({dim})", f"np.expand_dims({name}, {dim})", new_shape, *keep)
        return None

    def widen(self) -> Node | None:
        """A new leading axis expanded so far that kernels over it split across CPU workers."""
        node = self.pick(lambda candidate: 0 < candidate.numel <= 64 and len(candidate.shape) < 4)
        if node is None:
            return None
        size = self.rng.randint(70_000 // node.numel + 1, self.max_numel // node.numel)
        new_shape = (size, *node.shape)
        return self.add(f"{node.name}.unsqueeze(0).expand({new_shape})",
                        f"np.broadcast_to({node.name}[None], {new_shape})", new_shape, node.dtype, node.bound,
                        node.error)

    def _expand(self, node: Node) -> Node | None:
        ones = [index for index, size in enumerate(node.shape) if size == 1]
        sizes = (2, 3, 4, 97, 1000, 20000) if self.large else (2, 3, 4)
        new_shape = [self.rng.choice(sizes) if index in ones and self.rng.random() < 0.7 else size
                     for index, size in enumerate(node.shape)]
        if self.rng.random() < 0.3 and len(new_shape) < 4:
            new_shape.insert(0, self.rng.choice(sizes))
        new_shape_tuple = tuple(new_shape)
        if math.prod(new_shape_tuple) > self.max_numel or new_shape_tuple == node.shape:
            return None
        offset = len(new_shape) - len(node.shape)
        written = [-1 if index >= offset and node.shape[index - offset] == size and self.rng.random() < 0.3 else size
                   for index, size in enumerate(new_shape)]
        return self.add(f"{node.name}.expand({tuple(written)})", f"np.broadcast_to({node.name}, {new_shape_tuple})",
                        new_shape_tuple, node.dtype, node.bound, node.error)

    def _pad(self, node: Node) -> Node | None:
        mode = self.rng.choice(("constant",) * 6 + ("reflect", "replicate", "circular"))
        pairs: list[tuple[int, int]] = []
        for size in node.shape:
            if mode == "constant":
                low = -size if self.rng.random() < 0.15 else 0
                before = self.rng.randint(max(low, -1), 2)
                after = self.rng.randint(max(low, -1) if size + min(before, 0) > 0 else 0, 2)
                if size + min(before, 0) + min(after, 0) < 0:
                    before, after = 0, 1
            else:
                limit = {"reflect": size - 1, "replicate": 2 if size else 0, "circular": size}[mode]
                limit = min(max(limit, 0), 2)
                before, after = self.rng.randint(0, limit), self.rng.randint(0, limit)
            pairs.append((before, after))
        new_shape = tuple(size + before + after for size, (before, after) in zip(node.shape, pairs, strict=True))
        if math.prod(new_shape) > self.max_numel:
            return None
        cut = ", ".join(f"{max(-before, 0)}:{size - max(-after, 0)}" for size, (before, after) in
                        zip(node.shape, pairs, strict=True))
        grow = tuple((max(before, 0), max(after, 0)) for before, after in pairs)
        numpy_mode = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}[mode]
        value: float = 0
        if mode == "constant" and node.dtype == "float32" and self.rng.random() < 0.2:
            value = -1.5
        value_argument = f", value={value}" if value else ""
        numpy_value = f", constant_values={value}" if value else ""
        mode_argument = f", mode='{mode}'" if mode != "constant" else ""
        return self.add(f"{node.name}.pad({tuple(pairs)}{mode_argument}{value_argument})",
                        f"np.pad({node.name}[{cut}], {grow}, mode='{numpy_mode}'{numpy_value})", new_shape,
                        node.dtype, max(node.bound, abs(value)), node.error)

    def _getitem(self, node: Node) -> Node | None:
        parts: list[str] = []
        new_shape: list[int] = []
        for size in node.shape:
            kind = self.rng.random()
            if kind < 0.15 and size > 0:
                index = self.rng.randrange(-size, size)
                parts.append(str(index))
            elif kind < 0.25:
                parts.append(":")
                new_shape.append(size)
            else:
                step = self.rng.choice((1, 1, 2, 3, -1, -2))
                start = self.rng.choice((None, self.rng.randint(-size - 1, size + 1)))
                stop = self.rng.choice((None, self.rng.randint(-size - 1, size + 1)))
                parts.append(f"{'' if start is None else start}:{'' if stop is None else stop}:{step}")
                new_shape.append(len(range(*slice(start, stop, step).indices(size))))
            if self.rng.random() < 0.08:
                parts.append("None")
                new_shape.append(1)
        if parts and self.rng.random() < 0.1:
            cut = self.rng.randrange(len(parts))
            # an Ellipsis standing for a run of full slices
            if all(part == ":" for part in parts[cut:cut + 1]):
                parts[cut] = "..."
        if not parts:
            parts = ["None"]
            new_shape = [1]
        index_text = ", ".join(parts)
        return self.add(f"{node.name}[{index_text}]", f"{node.name}[{index_text}]", tuple(new_shape), node.dtype,
                        node.bound, node.error)

    def join(self) -> Node | None:
        """cat or stack of two values with compatible shapes (a slice of the first when nothing else fits)."""
        first = self.pick(lambda candidate: len(candidate.shape) > 0)
        if first is None:
            return None
        stack = self.rng.random() < 0.35
        rank = len(first.shape)
        dim = self.rng.randrange(-rank - 1, rank + 1) if stack else self.rng.randrange(-rank, rank)
        axis = dim % (rank + 1) if stack else dim % rank

        def fits(candidate: Node) -> bool:
            if len(candidate.shape) != rank:
                return False
            if stack:
                return candidate.shape == first.shape
            return all(a == b for index, (a, b) in enumerate(zip(candidate.shape, first.shape, strict=True))
                       if index != axis)
        second = self.pick(fits)
        if second is None or self.rng.random() < 0.2:
            size = first.shape[axis if not stack else 0]
            if stack:
                second = self.add(f"{first.name}.flip(0)", f"np.flip({first.name}, 0)", first.shape, first.dtype,
                                  first.bound, first.error)
            else:
                start = self.rng.randint(0, size)
                parts = ", ".join(f"{start}:" if index == axis else ":" for index in range(rank))
                new_shape = tuple(size - start if index == axis else s for index, s in enumerate(first.shape))
                second = self.add(f"{first.name}[{parts}]", f"{first.name}[{parts}]", new_shape, first.dtype,
                                  first.bound, first.error)
        dtype = promote(first.dtype, second.dtype)
        if stack:
            new_shape = first.shape[:axis] + (2,) + first.shape[axis:]
        else:
            new_shape = tuple(a + b if index == axis else a for index, (a, b) in
                              enumerate(zip(first.shape, second.shape, strict=True)))
        if math.prod(new_shape) > self.max_numel:
            return None
        function = "stack" if stack else "cat"
        numpy_function = "np.stack" if stack else "np.concatenate"
        operands = f"[{self.as_numpy(first, dtype)}, {self.as_numpy(second, dtype)}]"
        return self.add(f"{first.name}.{function}({second.name}, dim={dim})",
                        f"{numpy_function}({operands}, axis={dim})", new_shape, dtype, max(first.bound, second.bound),
                        max(first.error, second.error))

    def materialize(self) -> Node | None:
        """contiguous() or a realize() in the middle of the graph."""
        node = self.pick()
        if node is None:
            return None
        method = "contiguous" if self.rng.random() < 0.7 else "realize"
        return self.add(f"{node.name}.{method}()", node.name, node.shape, node.dtype, node.bound, node.error)

    def build(self) -> list[Node]:
        """Inputs, then 3-12 operations; returns the nodes to check."""
        self.add_inputs()
        inputs = len(self.nodes)
        if self.large:
            self.widen()
        operations = [self.unary] * 5 + [self.binary] * 5 + [self.compare_where] * 2 + [self.reduce] * 4 + [
            self.reduce_broadcast] + [self.movement] * 6 + [self.join] * 2 + [self.materialize, self.cast_any]
        target = self.rng.randint(3, 12)
        applied, attempts = 0, 0
        while applied < target and attempts < 200:
            attempts += 1
            if self.rng.choice(operations)() is not None:
                applied += 1
        derived = self.nodes[inputs:] or self.nodes
        outputs = [derived[-1]]
        for _ in range(self.rng.choice((0, 0, 1, 2))):
            extra = self.rng.choice(derived)
            if extra not in outputs:
                outputs.append(extra)
        return outputs


def check_outputs(builder: GraphBuilder, outputs: list[Node], together: bool) -> str | None:
    """Realize `outputs` (together or one by one) and compare them with numpy; the first difference, or None."""
    if together:
        builder.lines.append(f"Tensor.realize({', '.join(node.name for node in outputs)})")
        builder.tensor_class.realize(*(node.tensor for node in outputs))
    for node in outputs:
        result = node.tensor.numpy()
        expected = node.expected
        if tuple(node.tensor.shape) != tuple(expected.shape) or tuple(result.shape) != tuple(expected.shape):
            return f"{node.name}: shape {node.tensor.shape} / numpy() {result.shape}, expected {expected.shape}"
        found_dtype = DTYPE_NAMES.get(np.dtype(result.dtype), str(result.dtype))
        tensor_dtype = str(node.tensor.dtype).split(".")[-1]
        if found_dtype != node.dtype or DTYPE_ALIASES.get(tensor_dtype, tensor_dtype) != node.dtype:
            return f"{node.name}: dtype {node.tensor.dtype} (numpy() {result.dtype}), expected {node.dtype}"
        if node.dtype != "float32":
            if not np.array_equal(result, expected):
                return f"{node.name}: values differ\nexpected {expected.tolist()}\n     got {result.tolist()}"
            continue
        magnitude = float(np.max(np.abs(expected))) if expected.size else 0.0
        tolerance = max(ABSOLUTE_TOLERANCE * max(1.0, magnitude), 8 * node.error)
        try:
            np.testing.assert_allclose(result, expected, rtol=RELATIVE_TOLERANCE, atol=tolerance)
        except AssertionError as error:
            return f"{node.name}: values differ (atol {tolerance:.3g}, error model {node.error:.3g})\n{error}"
    return None


def run_graph(tensor_class: Any, structure_seed: int, data_seed: int) -> tuple[int, int, Failure | None]:
    """Build and check one graph; (operations, outputs, failure or None)."""
    builder = GraphBuilder(tensor_class, structure_seed, data_seed)
    try:
        outputs = builder.build()
        together = len(outputs) > 1 and builder.rng.random() < 0.5
        message = check_outputs(builder, outputs, together)
    except Exception as error:  # noqa: BLE001 - any exception is a finding to report
        outputs, message = [], f"raised {type(error).__name__}: {error}"
    operations = len(builder.lines)
    if message is None:
        return operations, len(outputs), None
    return operations, len(outputs), Failure(structure_seed, data_seed, message, "\n".join(builder.lines))


def run_graphs(graphs: int, seed: int, data_per_structure: int = 1, tensor_class: Any = None,
               verbose: bool = False) -> RunStats:
    """Run `graphs` graphs: structures from `seed`, each checked on `data_per_structure` input data sets."""
    if tensor_class is None:
        from tinycore import Tensor
        tensor_class = Tensor
    stats = RunStats()
    started = time.perf_counter()
    structure = 0
    while stats.graphs < graphs:
        structure_seed = seed * 1_000_003 + structure
        for data_index in range(min(data_per_structure, graphs - stats.graphs)):
            operations, outputs, failure = run_graph(tensor_class, structure_seed, structure_seed * 31 + data_index)
            stats.graphs += 1
            stats.operations += operations
            stats.outputs += outputs
            if failure is not None:
                stats.failures.append(failure)
                if verbose:
                    print(f"FAIL {failure}\n", flush=True)
        structure += 1
        if verbose and structure % 50 == 0:
            print(f"{stats.graphs} graphs, {len(stats.failures)} failures, "
                  f"{time.perf_counter() - started:.1f}s", flush=True)
    stats.seconds = time.perf_counter() - started
    return stats


def main(arguments: list[str] | None = None) -> int:
    """Command line: run a fuzzing campaign and print every failing graph."""
    parser = argparse.ArgumentParser(description="Differential fuzzer of Tensor graphs against numpy")
    parser.add_argument("--graphs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-per-structure", type=int, default=1,
                        help="input data sets checked per graph structure (more reuses compiled kernels)")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--tinygrad", action="store_true", help="check tinygrad's Tensor instead (oracle check)")
    options = parser.parse_args(arguments)
    tensor_class = None
    if options.tinygrad:
        from tinygrad import Tensor as TinygradTensor
        tensor_class = TinygradTensor
    stats = run_graphs(options.graphs, options.seed, options.data_per_structure, tensor_class, options.verbose)
    if not options.verbose:
        for failure in stats.failures:
            print(f"FAIL {failure}\n")
    print(f"{stats.graphs} graphs ({stats.operations} operations, {stats.outputs} outputs checked), "
          f"{len(stats.failures)} mismatches, {stats.seconds:.1f}s")
    return 1 if stats.failures else 0


if __name__ == "__main__":
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2]))
    sys.exit(main())
