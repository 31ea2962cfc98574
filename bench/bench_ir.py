"""IR benchmark: graph building and rewriting, and index simplification, side by side with tinygrad.

Run: `python bench/bench_ir.py` from the repository root. Both libraries build the same expressions (the same
ops, constants and structure) from one description and rewrite them with their own `symbolic` rules; the table
gives the best of several repeats and the ratio tinycore / tinygrad (below 1: tinycore is faster).
"""
from __future__ import annotations

import gc
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ELEMENTWISE_ITERATIONS = 2500  # four new nodes per iteration: a 10,000-node graph
INDEX_EXPRESSIONS = 10_000
REPEATS = 3


@dataclass
class Library:
    """What the benchmark needs from one library: leaves, constants, rewriting and its rule set."""

    name: str
    float_leaf: Callable[[], Any]
    float_const: Callable[[float], Any]
    index_range: Callable[[int, int], Any]
    rewrite: Callable[[Any], Any]
    count_nodes: Callable[[Any], int]


def tinycore_library() -> Library:
    """The tinycore side."""
    from tinycore.dtype import dtypes
    from tinycore.uop.ops import Ops
    from tinycore.uop.patterns import graph_rewrite
    from tinycore.uop.symbolic import symbolic
    from tinycore.uop.uop import UOp

    def float_leaf() -> Any:
        buffer = UOp(Ops.DEFINE_GLOBAL, dtypes.float.ptr(16), (), 0)
        return buffer.index(UOp.const(dtypes.int, 0)).load()

    return Library("tinycore", float_leaf, lambda value: UOp.const(dtypes.float, value),
                   lambda end, axis: UOp(Ops.RANGE, dtypes.int, (UOp.const(dtypes.int, end),), (axis, 0)),
                   lambda root: graph_rewrite(root, symbolic), lambda root: len(root.toposort))


def tinygrad_library() -> Library:
    """The tinygrad side (its own UOp, graph_rewrite and symbolic rules)."""
    from tinygrad import dtypes
    from tinygrad.uop.ops import UOp, graph_rewrite
    from tinygrad.uop.symbolic import symbolic

    def float_leaf() -> Any:
        buffer = UOp.placeholder((16,), dtypes.float, 0)
        return buffer.index(UOp.const(0, dtypes.int)).load()

    return Library("tinygrad", float_leaf, lambda value: UOp.const(value, dtypes.float),
                   lambda end, axis: UOp.range(end, axis), lambda root: graph_rewrite(root, symbolic),
                   lambda root: len(root.toposort()) if callable(root.toposort) else len(root.toposort))


def build_elementwise(library: Library) -> Any:
    """A 10,000-node float graph where every iteration has foldable constants and identities."""
    leaf = library.float_leaf()
    value = leaf
    for iteration in range(ELEMENTWISE_ITERATIONS):
        scale = library.float_const(float(iteration % 7 + 2)) * library.float_const(3.0)
        value = ((value + scale) * library.float_const(1.0) + library.float_const(0.0)).maximum(leaf)
    return value


def index_descriptions(count: int, seed: int = 0) -> list[tuple[Any, ...]]:
    """Descriptions of index expressions as movement ops produce them (reshape of reshape, permute, pad, ...)."""
    generator = random.Random(seed)
    descriptions = []
    for _ in range(count):
        sizes = [generator.randint(2, 9) for _ in range(3)]
        strides = [sizes[1] * sizes[2], sizes[2], 1]
        split = generator.choice([2, 3, 4, 6, 8])
        kind = generator.randrange(4)
        descriptions.append((kind, tuple(sizes), tuple(strides), split, generator.randint(0, 3)))
    return descriptions


def build_index(library: Library, description: tuple[Any, ...], ranges: dict[tuple[int, int], Any]) -> Any:
    """One index expression from its description."""
    kind, sizes, strides, split, offset = description
    axes = [ranges.setdefault((size, axis), library.index_range(size, axis)) for axis, size in enumerate(sizes)]
    flat = axes[0] * strides[0] + axes[1] * strides[1] + axes[2] * strides[2]
    if kind == 0:  # reshape of reshape: split the flat index and join it again
        return (flat // split) * split + flat % split
    if kind == 1:  # nested div/mod of a reshape
        return (flat // sizes[2]) % sizes[1]
    if kind == 2:  # a padded axis: shifted index and a bound check
        shifted = axes[2] + offset
        return ((shifted < sizes[2] + offset) & (axes[0] * strides[0] < 1000)).where(flat + offset, flat * 0)
    return (flat + offset * strides[1]) % (strides[0]) // strides[1]  # shrink then split


def best_of(function: Callable[[], Any]) -> tuple[float, Any]:
    """The best wall time of REPEATS calls, and the last result."""
    best, result = float("inf"), None
    for _ in range(REPEATS):
        result = None  # drop the previous graph so every repeat starts cold (no cached nodes or bounds)
        gc.collect()
        start = time.perf_counter()
        result = function()
        best = min(best, time.perf_counter() - start)
    return best, result


def measure(library: Library) -> dict[str, float]:
    """Times for one library."""
    descriptions = index_descriptions(INDEX_EXPRESSIONS)
    times: dict[str, float] = {}
    times["elementwise build"], graph = best_of(lambda: build_elementwise(library))
    times["elementwise rewrite"], rewritten = best_of(lambda: library.rewrite(build_elementwise(library)))
    times["elementwise rewrite"] -= times["elementwise build"]
    times["graph nodes before/after"] = (library.count_nodes(graph), library.count_nodes(rewritten))  # type: ignore

    def simplify_all() -> list[Any]:
        ranges: dict[tuple[int, int], Any] = {}
        return [library.rewrite(build_index(library, description, ranges)) for description in descriptions]

    def build_all() -> list[Any]:
        ranges: dict[tuple[int, int], Any] = {}
        return [build_index(library, description, ranges) for description in descriptions]
    times["index build"], _ = best_of(build_all)
    times["index build+simplify"], _ = best_of(simplify_all)
    return times


def main() -> None:
    """Measure both libraries and print a table."""
    results = {}
    for make in (tinycore_library, tinygrad_library):
        library = make()
        results[library.name] = measure(library)
    print(f"{'measure':28s} {'tinycore':>12s} {'tinygrad':>12s} {'ratio':>7s}")
    for key in results["tinycore"]:
        ours, theirs = results["tinycore"][key], results["tinygrad"][key]
        if isinstance(ours, tuple):
            print(f"{key:28s} {str(ours):>12s} {str(theirs):>12s}")
            continue
        print(f"{key:28s} {ours * 1000:10.1f}ms {theirs * 1000:10.1f}ms {ours / theirs:7.2f}")


if __name__ == "__main__":
    main()
