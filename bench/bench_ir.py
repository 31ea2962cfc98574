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


def timed(function: Callable[[], Any]) -> float:
    """Wall time of one cold call (garbage collected before, result dropped after)."""
    gc.collect()
    start = time.perf_counter()
    result = function()
    elapsed = time.perf_counter() - start
    del result
    return elapsed


def tasks(library: Library, descriptions: list[tuple[Any, ...]]) -> dict[str, Callable[[], Any]]:
    """The measured pieces of work for one library."""
    def build_all() -> list[Any]:
        ranges: dict[tuple[int, int], Any] = {}
        return [build_index(library, description, ranges) for description in descriptions]

    def simplify_all() -> list[Any]:
        ranges: dict[tuple[int, int], Any] = {}
        return [library.rewrite(build_index(library, description, ranges)) for description in descriptions]
    return {"elementwise build": lambda: build_elementwise(library),
            "elementwise build+rewrite": lambda: library.rewrite(build_elementwise(library)),
            "index build": build_all, "index build+simplify": simplify_all}


def main() -> None:
    """Measure both libraries, alternating them within each repeat so machine load hits both alike."""
    libraries = [tinycore_library(), tinygrad_library()]
    descriptions = index_descriptions(INDEX_EXPRESSIONS)
    work = {library.name: tasks(library, descriptions) for library in libraries}
    best: dict[str, dict[str, float]] = {library.name: {} for library in libraries}
    for task in work["tinycore"]:
        for _ in range(REPEATS):
            for library in libraries:
                elapsed = timed(work[library.name][task])
                best[library.name][task] = min(best[library.name].get(task, float("inf")), elapsed)
    for library in libraries:
        times = best[library.name]
        times["elementwise rewrite"] = times["elementwise build+rewrite"] - times["elementwise build"]
        times["index simplify"] = times["index build+simplify"] - times["index build"]
    sizes = {library.name: (library.count_nodes(build_elementwise(library)),
                            library.count_nodes(library.rewrite(build_elementwise(library)))) for library in libraries}
    print(f"elementwise graph nodes before/after rewrite: tinycore {sizes['tinycore']}, tinygrad {sizes['tinygrad']}")
    print(f"{'measure':28s} {'tinycore':>12s} {'tinygrad':>12s} {'ratio':>7s}")
    for task in ("elementwise build", "elementwise rewrite", "index build", "index simplify"):
        ours, theirs = best["tinycore"][task], best["tinygrad"][task]
        print(f"{task:28s} {ours * 1000:10.1f}ms {theirs * 1000:10.1f}ms {ours / theirs:7.2f}")


if __name__ == "__main__":
    main()
