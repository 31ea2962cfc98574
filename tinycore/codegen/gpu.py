"""GPU codegen: the heuristic for renderers with work-groups (`has_local`) and the mapping of axes to SPECIALs.

Launch contract: a GPU program's `global_size` counts work-groups and `local_size` work-items per group; the kernel
runs over global x local work-items. SPECIAL "gidxN" is the work-group index along dimension N and "lidxN" the
index inside the group. A program without lidx indices runs groups of one work-item, so its gidx is also the global
index (renderers may read it as such).

The heuristic, in this order:
0. a renderer with matrix units may set `tensor_core_opt(kernel, notes) -> bool`: it gets the kernel first and, when
   it returns True, has rewritten it (e.g. into warps of tensor-core instructions) and nothing else is chosen;
1. reduce kernels with few outputs (at most the renderer's `group_max_outputs`, else GROUP_MAX_OUTPUTS) and a reduce
   axis of at least GROUP_MIN_REDUCE elements get a group reduce on their largest reduce axis: the group's work-items
   (the renderer's `group_size`, else DEFAULT_GROUP_SIZE, within the local limits) each reduce a strided slice and
   combine the partials through local memory (local_memory.py); no other opt is applied to them;
2. matmul-like kernels (a sum of a product of two loads) get a register tile: each work-item computes TILE_ROWS x
   TILE_COLUMNS outputs (the renderer's `register_tile` when it sets one), halved down to 4 where the size does not
   allow more (the column axis, contiguous in the output, becomes vector lanes);
3. output axes, innermost first, are split into a group index and a local index (LOCAL): the local size is the
   largest power of two dividing the axis within the renderer's `local_max` for that dimension and the work-group
   limit `max_local_total` (DEFAULT_MAX_LOCAL_TOTAL when the renderer has none), unless the innermost axis would
   still need more work-groups than a launch's x dimension takes (`innermost_group_limit`).
Remaining output axes become gidx0..2 (optimize.map_global_dims); LOCAL axes become lidx0..2.
"""
from __future__ import annotations

from tinycore.codegen.local_memory import GroupReduceError, lower_group_reduce, nested_reduces
from tinycore.codegen.opt import Kernel, KernelOptError
from tinycore.codegen.optimize import axis_stride, map_global_dims, strip_casts
from tinycore.codegen.split_ranges import replace_range
from tinycore.dtype import dtypes
from tinycore.helpers import getenv, prod
from tinycore.plugins.contract import RendererContract
from tinycore.uop.axis import AxisType, axis_id, range_size
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp

DEFAULT_MAX_LOCAL_TOTAL = 256
"""Work-items per work-group when the renderer sets no `max_local_total`."""
DEFAULT_LOCAL_MAX = (256, 256, 64)
"""Per-dimension work-group limits when the renderer sets no `local_max`."""
DEFAULT_GROUP_SIZE = 16
"""Work-items sharing one group reduce when the renderer sets no `group_size` (16 measured best on PoCL's CPU
device, where larger groups serialise the combine; GPUs may set more)."""
GROUP_MIN_REDUCE = 128
"""Reduce axes shorter than this are reduced by one work-item."""
MAX_GROUPS_PER_DIMENSION = 65535
"""Work-groups along one launch dimension when the renderer sets no `max_groups` (WebGPU's and CUDA's y/z limit):
kernels using local indices keep every gidx within it."""
GROUP_MAX_OUTPUTS = MAX_GROUPS_PER_DIMENSION
"""Kernels with more outputs than this have enough work-items without splitting their reduces."""
TILE_ROWS, TILE_COLUMNS = 8, 8
"""Rows and columns of the register tile of matmul-like kernels (8 x 8 measured fastest on PoCL's CPU device)."""
GROUP_REDUCE = getenv("GROUP_REDUCE", 1)
"""Set GROUP_REDUCE=0 to turn group reduces off (reduces then run one work-item per output)."""


def local_limits(renderer: RendererContract) -> tuple[tuple[int, ...], int]:
    """(per-dimension local size limits, work-items per group limit) of `renderer`."""
    per_axis = tuple(int(size) for size in (renderer.local_max or DEFAULT_LOCAL_MAX))
    total = int(renderer.max_local_total or DEFAULT_MAX_LOCAL_TOTAL)
    return per_axis, total


def innermost_group_limit(renderer: RendererContract) -> int:
    """Work-groups the innermost output axis (gidx0, a launch's x dimension) may take: the renderer's `max_groups`
    where it caps every dimension (WebGPU's maxComputeWorkgroupsPerDimension), else its `global_max` for x (CUDA's
    and HIP's 2^31 - 1), else MAX_GROUPS_PER_DIMENSION. With the y/z limit for x, a 2^28-element elementwise kernel on
    an H100 kept one work-item per group (the first hardware run: 19.9 GB/s where a copy moves 2996)."""
    if renderer.max_groups:
        return int(renderer.max_groups)
    if renderer.global_max:
        return min(int(renderer.global_max[0]), 2 ** 31 - 1)
    return MAX_GROUPS_PER_DIMENSION


def largest_power_of_two_divisor(size: int, limit: int) -> int:
    """The largest power of two dividing `size` and at most `limit` (1 when none above 1)."""
    amount = 1
    while amount * 2 <= limit and size % (amount * 2) == 0:
        amount *= 2
    return amount


def tile_sizes(preferred: int) -> list[int]:
    """Register tile sizes to try along one axis: `preferred`, then halved down to 4 (just 4 when it is smaller)."""
    sizes = [int(preferred)]
    while sizes[-1] // 2 >= 4:
        sizes.append(sizes[-1] // 2)
    return sizes if 4 in sizes else sizes + [4]


class GpuHeuristic:
    """Chooses GPU opts for one kernel; `apply` maps the axes to SPECIALs and lowers a chosen group reduce."""

    def __init__(self, kernel: Kernel, renderer: RendererContract):
        self.kernel, self.renderer = kernel, renderer
        self.notes: list[str] = []
        self.local_axes: list[UOp] = []  # LOCAL ranges, in lidx dimension order
        self.group: tuple[UOp, int] | None = None  # (reduce range, group size)

    def loop_axes(self) -> list[UOp]:
        """Output loop axes still open to opts, outermost first."""
        return [self.kernel.axes[i] for i in self.kernel.axes_of(AxisType.LOOP)]

    def split(self, range_node: UOp, amount: int, kind: AxisType, why: str) -> UOp | None:
        """Split off an inner axis of `amount` of kind `kind` from `range_node`; the new RANGE, None if it fails."""
        try:
            self.kernel._split(self.kernel.axes.index(range_node), amount, kind)
        except (KernelOptError, ValueError):
            return None
        self.notes.append(f"{kind.name} {amount} ({why})")
        return self.kernel.axes[-1]

    # ---- choices ----

    def choose(self) -> None:
        """Pick and apply the opts (see the module docstring)."""
        rewrite = self.renderer.tensor_core_opt
        if callable(rewrite) and rewrite(self.kernel, self.notes):
            return  # the renderer rewrote the kernel for its matrix units (it made its own thread indices)
        if not self.register_tile() and GROUP_REDUCE and self.choose_group():
            return
        self.locals()

    def choose_group(self) -> bool:
        """Pick a group reduce; True when one was chosen."""
        reduces = self.kernel.reduce_ops
        if not self.renderer.has_shared or not reduces or \
                any(node.dtype.count != 1 for node in reduces):
            return False
        outputs = prod(range_size(r) or 1 for r in self.loop_axes())
        output_limit = min(int(self.renderer.group_max_outputs or GROUP_MAX_OUTPUTS),
                           int(self.renderer.max_groups or GROUP_MAX_OUTPUTS))
        if outputs > output_limit or any(range_size(r) is None for r in self.loop_axes()):
            return False
        nested = nested_reduces(self.kernel.ast)
        candidates = [self.kernel.axes[i] for i in self.kernel.axes_of(AxisType.REDUCE)]
        candidates = [r for r in candidates if (range_size(r) or 0) >= GROUP_MIN_REDUCE and
                      not any(node in nested for node in reduces if r in node.src[1:])]
        if not candidates:
            return False
        grouped = max(candidates, key=lambda r: range_size(r) or 0)
        users = [node for node in reduces if grouped in node.src[1:]]
        per_axis, total = local_limits(self.renderer)
        size = range_size(grouped) or 0
        wanted = int(self.renderer.group_size or DEFAULT_GROUP_SIZE)
        group = 1
        while group * 2 <= min(per_axis[0], total, size, wanted):
            group *= 2
        itemsize = max(node.dtype.itemsize for node in users)
        shared = self.renderer.shared_max
        if group < 2 or (shared is not None and group * itemsize * len(users) > int(shared)):
            return False
        self.group = (grouped, group)
        self.notes.append(f"GROUP {group} (reduce axis {axis_id(grouped)} of {size})")
        return True

    def register_tile(self) -> bool:
        """TILE x TILE outputs per work-item for a sum over a product of two loads; True when applied."""
        ast, reduces = self.kernel.ast, self.kernel.reduce_ops
        if len(ast.src) != 1 or len(reduces) != 1 or reduces[0].arg is not Ops.ADD:
            return False
        product = strip_casts(reduces[0].src[0])
        if product.op is not Ops.MUL:
            return False
        loads = [strip_casts(source) for source in product.src]
        if any(load.op is not Ops.LOAD or load.src[0].op is not Ops.INDEX for load in loads):
            return False
        store_index = ast.src[0].src[0].src[1]
        for first, second in (loads, loads[::-1]):
            columns = rows = None
            for range_node in self.loop_axes():
                in_store = axis_stride(store_index, range_node)
                in_first = axis_stride(first.src[0].src[1], range_node)
                in_second = axis_stride(second.src[0].src[1], range_node)
                if in_store == 1 and in_first == 0 and in_second == 1:
                    columns = range_node
                elif in_store not in (0, None) and in_first not in (0, None) and in_second == 0:
                    rows = range_node
            if columns is None or rows is None:
                continue
            preferred_rows, preferred_columns = self.renderer.register_tile or (TILE_ROWS, TILE_COLUMNS)
            column_tile = next((t for t in tile_sizes(preferred_columns) if (range_size(columns) or 1) % t == 0), None)
            row_tile = next((t for t in tile_sizes(preferred_rows) if (range_size(rows) or 1) % t == 0), None)
            if column_tile is None or row_tile is None:
                continue
            self.split(columns, column_tile, AxisType.UPCAST, "register tile columns")
            self.split(rows, row_tile, AxisType.UPCAST, "register tile rows")
            return True
        return False

    def locals(self) -> None:
        """Split output axes, innermost first, into group and local indices."""
        per_axis, total = local_limits(self.renderer)
        budget = total
        max_groups = innermost_group_limit(self.renderer)
        loops = self.loop_axes()
        if loops and (range_size(loops[-1]) or 0) > max_groups * largest_power_of_two_divisor(
                range_size(loops[-1]) or 1, min(per_axis[0], total)):
            return  # gidx0 would exceed the work-group count of a dimension: one work-item per group instead
        for range_node in reversed(loops):
            dimension = len(self.local_axes)
            if dimension >= min(3, len(per_axis)) or budget < 2:
                break
            size = range_size(range_node)
            if size is None:
                continue
            amount = largest_power_of_two_divisor(size, min(per_axis[dimension], budget))
            if amount < 2:
                continue
            local = self.split(range_node, amount, AxisType.LOCAL, f"lidx{dimension}")
            if local is not None:
                self.local_axes.append(local)
                budget //= amount

    # ---- lowering ----

    def apply(self) -> None:
        """Map the output loops to gidx, the LOCAL axes to lidx, and lower the chosen group reduce."""
        map_global_dims(self.kernel, self.renderer)
        for dimension, local in enumerate(self.local_axes):
            special = UOp(Ops.SPECIAL, dtypes.int32, (UOp.const(dtypes.int32, range_size(local) or 1),),
                          f"lidx{dimension}")
            self.kernel.ast = replace_range(self.kernel.ast, local, special, ())
            self.kernel.axes.remove(local)
        if self.group is None:
            return
        if self.kernel.axes_of(AxisType.LOOP):
            self.notes.append("no group reduce: an output loop is left and its barrier would run in a loop")
            return
        grouped, group = self.group
        special = UOp(Ops.SPECIAL, dtypes.int32, (UOp.const(dtypes.int32, group),), "lidx0")
        try:
            ast, self.kernel.next_id = lower_group_reduce(self.kernel.ast, grouped, special, self.kernel.next_id)
        except GroupReduceError as error:
            self.notes.append(f"no group reduce: {error}")
            return
        self.kernel.ast = ast
        self.kernel.axes.remove(grouped)


def gpu_optimize(kernel: Kernel, renderer: RendererContract, choose: bool = True) -> list[str]:
    """Apply the GPU heuristic (when `choose`) and map `kernel`'s axes to SPECIALs; returns a note per choice."""
    heuristic = GpuHeuristic(kernel, renderer)
    if choose:
        heuristic.choose()
    heuristic.apply()
    return heuristic.notes
