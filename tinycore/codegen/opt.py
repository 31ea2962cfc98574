"""Kernel optimizations as data: axis kinds, `Opt` (one transformation of one axis) and `Kernel` (an AST plus its axes).

A kernel's axes are its RANGEs: the output axes (sorted by axis id) followed by the reduce axes. An `Opt` names an
axis by its position in that list and splits it: the axis keeps its place with a smaller size and a new inner axis of
`amount` is appended with the kind the opt gives it. Opts are applied one after another, so a search (BEAM) can
enumerate candidate opts on a `Kernel`, apply them and time the results; the hand-coded heuristic in optimize.py
produces the same kind of list.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from enum import Enum, auto

from tinycore.codegen.gating import StoreGate, gated_store_rules
from tinycore.codegen.split_ranges import replace_range, split_merged_axes
from tinycore.dtype import dtypes
from tinycore.helpers import NUM_CPU_THREADS, prod
from tinycore.uop.axis import AxisType, axis_id, axis_kind, new_range, range_size
from tinycore.uop.opcodes import fast_member_access
from tinycore.uop.ops import Ops
from tinycore.uop.patterns import graph_rewrite
from tinycore.uop.symbolic import simplify
from tinycore.uop.uop import UOp


@fast_member_access
class OptOps(Enum):
    """The transformations a kernel axis can take."""

    UPCAST = auto()  # output axis: split off an inner axis of `amount` expanded into copies / vector lanes
    UNROLL = auto()  # reduce axis: split off an inner axis of `amount` unrolled into the loop body
    ACCUMULATORS = auto()  # reduce axis: split off `amount` independent (vectorizable) accumulators
    THREAD = auto()  # output axis: split across `amount` CPU workers
    NEST = auto()  # output axis: moved inside every other output loop (amount unused, 0)
    # output axis: UPCAST by an amount that need not divide the size: ceil(size / amount) blocks, the last one
    # shifted back to end at the axis end, so it recomputes (and stores again, the same values) outputs of the block
    # before it; only for kernels whose stores are plain; a kernel that reads a buffer it writes (an in-place update)
    # skips storing the recomputed outputs (gated stores)
    SHIFTED_UPCAST = auto()
    # output axis: split off an inner loop of `amount` that runs inside every other output loop (cache blocking: the
    # outer part keeps its place, so the loops between them run once per block of `amount`); an amount that does not
    # divide the size makes round(size / amount) blocks of near-equal sizes
    BLOCK = auto()
    # the whole kernel, first opt only (axis and amount 0): every output axis that the indices divide (`i // w`,
    # `i % w`: an axis a reshape merged from two) split into one axis per factor (codegen/split_ranges.py); the
    # heuristic takes it where only the split kernel has a register tile, and a search replays it from the opts
    SPLIT_AXES = auto()


@dataclass(frozen=True)
class Opt:
    """One optimization: `op` applied to axis number `axis` (position in Kernel.axes) with `amount`."""

    op: OptOps
    axis: int
    amount: int

    def __repr__(self) -> str:
        return f"Opt({self.op.name}, axis={self.axis}, amount={self.amount})"


class KernelOptError(ValueError):
    """An Opt that does not apply to the kernel (wrong axis kind, size not divisible, ...)."""


def _gate_stores(root: UOp, buffers: set[UOp], gate: UOp) -> UOp:
    """`root` (a kernel SINK) with its stores into `buffers` done only where `gate` holds (and their own gate)."""
    return graph_rewrite(root, gated_store_rules, StoreGate(gate, frozenset(buffers)), name="gate stores")


def default_worker_count() -> int:
    """The number of CPU workers a kernel may be split across: NUM_CPU_THREADS, else the number of cores."""
    return int(NUM_CPU_THREADS.value) if NUM_CPU_THREADS.value else (os.cpu_count() or 1)


class Kernel:
    """A kernel AST with its axes and the opts applied so far. Applying an opt returns nothing; it updates `ast`."""

    def __init__(self, ast: UOp):
        if ast.op is not Ops.SINK:
            raise ValueError(f"a kernel AST is a SINK of STOREs, got {ast.op}: build it as SINK(STORE(...), ...)")
        for store in ast.src:
            if store.op is not Ops.STORE:
                raise ValueError(f"a kernel AST's SINK holds STOREs, found {store.op}: wrap outputs in STORE")
        self.original_ast = ast
        self.ast = ast
        self.applied: list[Opt] = []
        self.workers = 1
        self.recomputed = 1.0
        """Work done over work needed: the outputs SHIFTED_UPCAST blocks compute twice (1.0 without them)."""
        reduce_ranges: dict[UOp, None] = {}
        for node in ast.toposort:
            if node.op is Ops.REDUCE:
                reduce_ranges.update(dict.fromkeys(node.src[1:]))
        all_ranges = [node for node in ast.toposort if node.op is Ops.RANGE]
        outputs = sorted((r for r in all_ranges if r not in reduce_ranges), key=axis_id)
        sequential = {r for r in outputs if axis_kind(r) is AxisType.SEQUENTIAL}
        reduces = sorted(reduce_ranges, key=axis_id)
        self.next_id = max((axis_id(r) for r in all_ranges), default=-1) + 1
        # normalise every range to the codegen form (axis id, AxisType)
        mapping: dict[UOp, UOp] = {}
        for range_node, kind in ([(r, AxisType.SEQUENTIAL if r in sequential else AxisType.LOOP) for r in outputs] +
                                 [(r, AxisType.REDUCE) for r in reduces]):
            mapping[range_node] = range_node.replace(arg=(axis_id(range_node), kind))
        self.ast = self.ast.substitute(mapping)
        self.axes: list[UOp] = [mapping[r] for r in outputs + reduces]

    # ---- queries ----

    @property
    def kinds(self) -> list[AxisType]:
        """The kind of every axis, in axis order."""
        return [axis_kind(r) or AxisType.LOOP for r in self.axes]

    @property
    def sizes(self) -> list[int | None]:
        """The constant size of every axis (None where symbolic)."""
        return [range_size(r) for r in self.axes]

    def axes_of(self, *kinds: AxisType) -> list[int]:
        """Positions of the axes of the given kinds."""
        return [i for i, kind in enumerate(self.kinds) if kind in kinds]

    @property
    def reduce_ops(self) -> list[UOp]:
        """The REDUCE nodes of the current AST."""
        return [node for node in self.ast.toposort if node.op is Ops.REDUCE]

    def work(self) -> int:
        """Elements of work: the product of all constant axis sizes (symbolic axes count as 1)."""
        return prod(size or 1 for size in self.sizes)

    # ---- transformations ----

    def _split(self, axis: int, amount: int, inner_kind: AxisType) -> None:
        old = self.axes[axis]
        size = range_size(old)
        if size is None or amount <= 0 or size % amount != 0:
            raise KernelOptError(f"cannot split axis {axis} of size {size} by {amount}: the size must be a constant "
                                 f"multiple of the amount")
        inner = new_range(amount, self.next_id, inner_kind)
        self.next_id += 1
        if amount == size:
            self.ast = replace_range(self.ast, old, inner, (inner,))
            self.axes[axis:axis + 1] = []
        else:
            outer = old.replace(src=(UOp.const(dtypes.int32, size // amount),))
            self.ast = replace_range(self.ast, old, outer * amount + inner, (outer, inner))
            self.axes[axis] = outer
        self.axes.append(inner)

    def _block(self, axis: int, amount: int) -> None:
        """BLOCK: a divisor splits evenly; any other amount makes round(size / amount) blocks of near-equal sizes,
        the inner loop's trip count read from the outer's."""
        old = self.axes[axis]
        size = range_size(old)
        if size is None or amount <= 0 or size % amount == 0 or amount > size:
            self._split(axis, amount, AxisType.LOOP)
            return
        blocks = max(2, round(size / amount))
        outer = old.replace(src=(UOp.const(dtypes.int32, blocks),))
        start = (outer * size) // blocks
        stop = ((outer + 1) * size) // blocks
        inner = new_range(simplify(stop - start), self.next_id, AxisType.LOOP)
        self.next_id += 1
        self.ast = replace_range(self.ast, old, start + inner, (outer, inner))
        self.axes[axis] = outer
        self.axes.append(inner)

    def _shifted_split(self, axis: int, amount: int) -> None:
        old = self.axes[axis]
        size = range_size(old)
        if size is None or amount < 2 or size < amount:
            raise KernelOptError(f"cannot shift-split axis {axis} of size {size} by {amount}: the size must be a "
                                 f"constant at least the amount, and the amount at least 2")
        if size % amount == 0:
            self._split(axis, amount, AxisType.UPCAST)
            return
        stored: set[UOp] = set()
        for store in self.ast.src:
            if store.arg is not None or store.src[0].op is not Ops.INDEX:
                raise KernelOptError("SHIFTED_UPCAST stores some outputs twice: the kernel's stores must be plain")
            stored.add(store.src[0].src[0])
        read_back = {node.src[0].src[0] for node in self.ast.toposort if node.op is Ops.LOAD and
                     node.src[0].op is Ops.INDEX and node.src[0].src[0] in stored}
        inner = new_range(amount, self.next_id, AxisType.UPCAST)
        self.next_id += 1
        blocks = -(-size // amount)
        self.recomputed *= blocks * amount / size
        outer = old.replace(src=(UOp.const(dtypes.int32, blocks),))
        start = (outer * amount).minimum(UOp.const(dtypes.int32, size - amount))
        self.ast = replace_range(self.ast, old, start + inner, (outer, inner))
        if read_back:
            # an in-place update (SGD's `w - lr * grad` fused into the gradient's matmul) reads what it overwrites:
            # the last block skips storing the outputs of the block before it, which that block already updated
            self.ast = _gate_stores(self.ast, read_back, (inner >= blocks * amount - size) | (outer < blocks - 1))
        self.axes[axis] = outer
        self.axes.append(inner)

    def _thread(self, axis: int, workers: int) -> None:
        old = self.axes[axis]
        size = range_size(old)
        if size is None or workers < 2 or size < workers:
            raise KernelOptError(f"cannot split axis {axis} of size {size} across {workers} workers: the size must "
                                 f"be a constant at least the worker count, and the count at least 2")
        if self.workers != 1:
            raise KernelOptError("this kernel is already split across workers: apply THREAD once")
        core = UOp(Ops.SPECIAL, dtypes.int32, (UOp.const(dtypes.int32, workers),), "core_id")
        if size % workers == 0:
            chunk = size // workers
            inner = new_range(chunk, axis_id(old), AxisType.THREAD)
            expression = core * chunk + inner
        else:
            start = (core * size) // workers
            stop = ((core + 1) * size) // workers
            # the trip count in its simplest form from the start: a later pass that simplified it in some uses of
            # the range and not in others would leave two loops of one axis (wrong results)
            inner = new_range(simplify(stop - start), axis_id(old), AxisType.THREAD)
            expression = start + inner
        self.ast = replace_range(self.ast, old, expression, (inner,))
        self.axes[axis] = inner
        self.workers = workers

    def apply_opt(self, opt: Opt) -> None:
        """Apply one opt; KernelOptError (and the kernel unchanged) when it does not fit."""
        if opt.op is OptOps.SPLIT_AXES:
            self._split_axes(opt)
            return
        if not 0 <= opt.axis < len(self.axes):
            raise KernelOptError(f"{opt} names axis {opt.axis}, the kernel has {len(self.axes)} axes")
        kind = self.kinds[opt.axis]
        output_axis = kind in (AxisType.LOOP, AxisType.GLOBAL)
        if any(other is not self.axes[opt.axis] and other.src[0].depends_on(self.axes[opt.axis])
               for other in self.axes):
            # the groups of an uneven BLOCK: the inner loop's trip count is computed from this index, which must stay
            # a plain loop outside it
            raise KernelOptError(f"{opt}: axis {opt.axis} sets the trip count of another axis and takes no opts")
        if opt.op is OptOps.UPCAST:
            if not output_axis:
                raise KernelOptError(f"{opt}: UPCAST applies to output loop axes, axis {opt.axis} is {kind.name}")
            self._split(opt.axis, opt.amount, AxisType.UPCAST)
        elif opt.op is OptOps.BLOCK:
            if kind is not AxisType.LOOP:
                raise KernelOptError(f"{opt}: BLOCK applies to output loop axes, axis {opt.axis} is {kind.name}")
            if range_size(self.axes[opt.axis]) == opt.amount:
                raise KernelOptError(f"{opt}: the block is the whole axis (NEST moves a whole axis inside)")
            self._block(opt.axis, opt.amount)
        elif opt.op is OptOps.SHIFTED_UPCAST:
            if not output_axis:
                raise KernelOptError(f"{opt}: SHIFTED_UPCAST applies to output loop axes, axis {opt.axis} is "
                                     f"{kind.name}")
            self._shifted_split(opt.axis, opt.amount)
        elif opt.op in (OptOps.UNROLL, OptOps.ACCUMULATORS):
            if kind is not AxisType.REDUCE:
                raise KernelOptError(f"{opt}: {opt.op.name} applies to reduce axes, axis {opt.axis} is {kind.name}")
            self._split(opt.axis, opt.amount,
                        AxisType.UNROLL if opt.op is OptOps.UNROLL else AxisType.ACCUMULATOR)
        elif opt.op is OptOps.THREAD:
            if not output_axis:
                raise KernelOptError(f"{opt}: THREAD applies to output loop axes, axis {opt.axis} is {kind.name}")
            self._thread(opt.axis, opt.amount)
        elif opt.op is OptOps.NEST:
            if kind is not AxisType.LOOP:
                raise KernelOptError(f"{opt}: NEST applies to output loop axes, axis {opt.axis} is {kind.name}")
            self._nest(opt.axis)
        else:
            raise KernelOptError(f"unknown opt {opt}")
        self.applied.append(opt)

    def _split_axes(self, opt: Opt) -> None:
        if self.applied or (opt.axis, opt.amount) != (0, 0):
            raise KernelOptError(f"{opt}: SPLIT_AXES is the first opt, with axis 0 and amount 0")
        split = split_merged_axes(self.original_ast)
        if split is self.original_ast:
            raise KernelOptError(f"{opt}: no output axis of this kernel is divided by its indices")
        original = self.original_ast
        Kernel.__init__(self, split)
        self.original_ast = original
        self.applied.append(opt)

    def nest_inside(self, axis: int) -> None:
        """Move output loop `axis` inside every other output loop (it gets the largest axis id): Opt NEST."""
        self.apply_opt(Opt(OptOps.NEST, axis, 0))

    def _nest(self, axis: int) -> None:
        old = self.axes[axis]
        moved = old.replace(arg=(self.next_id,) + tuple(old.arg[1:]))
        self.next_id += 1
        self.ast = replace_range(self.ast, old, moved, (moved,))
        self.axes[axis] = moved

    def apply_opts(self, opts: list[Opt]) -> Kernel:
        """Apply `opts` in order and return this kernel."""
        for opt in opts:
            self.apply_opt(opt)
        return self

    def name(self) -> str:
        """A display name: 'r' for kernels with a reduce, 'E' otherwise, then the original axis sizes."""
        reduces = any(node.op is Ops.REDUCE for node in self.original_ast.toposort)
        sizes = [str(range_size(r)) if range_size(r) is not None else "s" for r in
                 sorted((n for n in self.original_ast.toposort if n.op is Ops.RANGE), key=axis_id)]
        return ("r" if reduces else "E") + "_" + ("_".join(sizes) if sizes else "1")
