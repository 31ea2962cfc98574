"""The hand-coded optimization heuristic (no search) and the mapping of output axes to GPU thread indices.

CPU kernels, in this order:
1. matmul-like kernels (a sum of a product of two loads, with one output axis indexing each load) get a register
   tile: the axis contiguous in the output and in the second load is upcast to two vectors (one when the size does
   not allow two; a last block shifted back where no tile divides it), the other axis to MATMUL_ROWS (6) rows (12
   vector accumulators, two vectors of the second input and a broadcast: AVX2's 16 registers), and with a one-vector
   tile to up to 8 rows (7 or 5 along the innermost row axis, widened by a second row axis to at most 16 with 32
   registers) with the reduce unrolled by 4; a convolution (a stride-1 window along the columns) gets
   CONV_PIXEL_VECTORS (2) vectors of pixels x CONV_ROWS (4) channels, the window along the row unrolled, the pixel
   blocks innermost;
2. otherwise the innermost output axis is upcast to the vector width when every store is contiguous along it, and a
   reduce whose loads are contiguous along the innermost reduce axis gets vector accumulators (two vectors' worth);
3. kernels with at least MIN_THREAD_WORK elements of work (MIN_THREAD_ELEMENTWISE outputs without a reduce) are
   split across the CPU workers on the outermost axis that is big enough (of a product's, the one whose split makes
   the shares read again the fewest bytes of the inputs), in SHARES_PER_WORKER shares per worker when each share
   keeps at least MIN_SHARE_WORK (before that, a kernel of int8 dot products, where the renderer declares them, gets
   its small axis of rows upcast whole and DOT4_OUTPUTS of its outputs: a loaded word of either input serves
   several products);
4. small output axes are upcast and small reduce axes unrolled completely.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum, auto

from tinycore.codegen.int8_dot import dot4_words
from tinycore.codegen.opt import Kernel, KernelOptError, Opt, OptOps, default_worker_count
from tinycore.codegen.split_ranges import replace_range
from tinycore.dtype import DType, dtypes
from tinycore.helpers import prod
from tinycore.plugins.contract import RendererContract
from tinycore.uop.axis import AxisType, axis_id, range_size
from tinycore.uop.ops import Ops
from tinycore.uop.symbolic import fold, linear_terms, simplify
from tinycore.uop.uop import UOp

MIN_THREAD_WORK = 65536
"""Kernels with a reduce and less work than this many elements (all axes) stay on one CPU worker."""
MIN_THREAD_ELEMENTWISE = 1 << 17
"""Kernels without a reduce (memory-bound) and fewer output elements than this stay on one CPU worker: below it the
second core gained nothing (x * y + 1 over 256 x 256 floats: 0.94-0.99x split in two, launched back to back or after
a pause), above it more (362 x 362: 1.28x back to back; 600 x 600: 1.14x after a pause; 1000 x 1000: 1.64x; Adam's
three updates of a 784 x 512 weight, single-threaded below the 2^20 this was before: a whole MLP step 1.23-1.25x)."""
SHARES_PER_WORKER = 4
"""Shares per CPU worker of a big kernel's split (`Heuristic.threads`): the pool's threads claim shares as they
finish, so a core slowed by another job takes fewer of them, where equal halves made the launch wait for the slower
core (conv2d on 2 cores, back to back, median of 30: 79-119 GFLOPS in halves, 109-139 in 8 shares)."""
MIN_SHARE_WORK = 1 << 22
"""Elements of work each share must keep before a kernel is split into more shares than workers (claiming a share
takes the pool's lock)."""
SMALL_UPCAST = 4
"""Output axes up to this size are upcast completely."""
SMALL_UNROLL = 8
"""Reduce axes up to this size are unrolled completely."""
SMALL_AXES_EXPANSION = 32
"""Upcasting and unrolling small axes stops at this many copies of the kernel's body (counting earlier opts):
more copies cost codegen and compile time for little speed on axes this small."""


MATMUL_ROWS = 6
"""Rows of the register tile of a matmul whose second input is contiguous along the output's columns (A @ B)."""
SECOND_ROW_LIMIT = 9
"""Rows of a two-vector matmul tile widened by a second row axis (`Heuristic._second_row_axis`). A convolution's
weight gradient summed channels last has the 3 kernel columns as its row axis: 3 rows x 2 vectors of output channels,
5 loads for 6 multiply-adds. With the kernel rows too (9 rows, 18 accumulators), on a 2-core AVX-512 Xeon, kernels
replayed in alternation, forward + both gradients: 16x64x32x32 * 64x64x3x3 1.17x, bench/bench_conv.py's plain64x64
1.16x, stride2 1.18x, narrow8x8 1.18x, narrow14x14 and narrow7x7 1.11x, the others unchanged (6 rows 1.11x over all;
12 rows, 4 input channels x 3 columns, 1.01x: gcc keeps the columns' shifted scalars in registers across steps and
then spills). With 16 vector registers (32-byte vectors; gcc kept to ymm0-15 on that Xeon) the tile widens to
MATMUL_ROWS: 3 columns x 2 input channels, 12 accumulators, over bench_conv's shapes 1.08x (stride2 1.17x, res64
1.12x, plain64x64 and narrow14x14 1.10x, narrow8x8 0.97x, the others unchanged; 9 rows there spill: 1.03x)."""
WIDE_MATMUL_ROWS = 12
"""Those rows where vectors are WIDE_VECTOR_BYTES (32 registers): 24 accumulators, each loaded vector of the second
input used by twice as many rows, so half the bytes per multiply-add come from L2. On a 2-core AVX-512 Xeon, kernels
replayed back to back in rotation with 6, 8, 10 and 12 rows (paired medians against 6): the MLP SGD step of
bench/bench_train.py 1.05, 1.07, 1.09x; matmul 1024^2 1.03, 1.03, 1.04x; 1000^2 1.20x with 12 rows (14: 1.23x),
128x784 @ 784x512 1.14x (14: 1.09x); 2048^2 1.01x (14: 0.98x)."""
WIDE_PANEL_VECTORS = 4
"""Vectors across a packed panel's register tile where vectors are WIDE_VECTOR_BYTES (32 registers): the CPU
renderer packs panels that wide there (matmul_panel_bytes), and the tile takes WIDE_PANEL_ROWS rows of them."""
WIDE_PANEL_ROWS = (6, 5, 4)
"""Rows of that tile: 6 rows x 4 vectors is 24 accumulators, as 12 rows x 2 vectors, with 6 broadcasts and 4 loads
per reduce step instead of 12 and 2. On a 2-core AVX-512 Xeon (peak 490 GFLOPS on both cores), the 1024^2 kernel
replayed alternately: 12 x 2 448-453 GFLOPS, 6 x 4 463-466 (5 x 4 and 7 x 4 within 1% of it); a C replica of the
loops gave the same order (445 against 465)."""
WIDE_PANEL_GROUP_CACHES = 8
"""Row groups of the wide panels' tile (`Heuristic._group_rows_for_panels`) hold up to this many private caches of
the first input, at least two groups: that tile reads 6 floats of the first input per reduce step beside 4 vectors
of the panel, so the first input streaming from the shared cache costs little, while every group reloads the panels.
On a 2-core AVX-512 Xeon (2 MB L2, a 300 MB L3), kernels replayed alternately, groups of 1 MB (half the L2, the
two-vector tile's best) against 2 groups: 1024^2 463 -> 469 GFLOPS, 2048^2 453 -> 477, 4096^2 411 -> 473
(8 groups of 8 MB: 465), 1024x3072 @ 3072x768 438 -> 474. Panels of a short reduce leave room for a group in the
cache beside them, and then half-cache groups stay the better choice: 4096x768 @ 768x768 (192 KB panels) 464 GFLOPS
with them, 453 with 2 groups."""
WIDE_PANEL_SMALL = 8
"""Panels under 1 / WIDE_PANEL_SMALL of the private cache (256 KB of 2 MB) keep the half-cache row groups."""
GROUP_BYTES = 3 * 1024 * 1024
"""A matmul whose row blocks read more of the first input than this groups them (OptOps.BLOCK): every column panel
passes a group's rows while they are in cache, and the panels pass once per group. Measured on the 2-core Zen 3
(one thread, 2048^2): groups of 3 MB 81-84 GFLOPS, no groups 65, groups of 432 KB (within L2) 67 (the panels then
pass 38 times instead of 6)."""
PRIVATE_GROUP_MIN_CACHE = 2 * 1024 * 1024
"""A packed-panel matmul on a host whose cores each have at least this much private cache (L2) groups its row blocks
in half of it and splits the panels across the workers (`Heuristic._group_rows_for_panels`); with less, the
GROUP_BYTES groups. On a 2-core AVX-512 Xeon with 2 MB of L2 per core, 1024^2 kernels replayed alternately beside
numpy (paired ratios, one run): groups of 2 MB split by rows (GROUP_BYTES, as before) 0.99x numpy; split by panels
1.03x; groups of 1 MB split by panels 1.05x (1.4 MB 1.05x, 0.5 MB 1.03x)."""
SHIFTED_WASTE = 0.15
"""A matmul's rows take the MATMUL_ROWS tile with a shifted last block (SHIFTED_UPCAST) when it recomputes at most
this share of the rows; else a smaller tile that divides them."""
ROW_BLOCK_L1_BYTES = 16 * 1024
"""A matmul whose first input is strided along the reduce keeps its row blocks outermost when a row block's cache
lines (one per reduce step) take at most this much of L1 without crowding a set (`Heuristic._row_block_in_l1`).
Nested inside the column blocks instead, the weight gradient x.T @ dout of a 128-row batch (x 784 wide) reloads a
column panel of dout, 128 lines 2 KB apart that share two L1 sets, from L2 for every row block, and x's lines too
(one thread, interleaved, best of 40: 1.42 -> 1.30 ms)."""
L1_LINE_BYTES, L1_SETS, L1_WAYS = 64, 64, 8
"""The L1 data cache assumed for that choice: 32 KB, 8 ways of 64 sets of 64-byte lines (Zen, most x86 cores)."""
CONV_ROWS = 4
"""Output channels of a convolution's register tile (`Heuristic._convolution_tile`)."""
CONV_PIXEL_VECTORS = 2
"""Vectors of output pixels in a convolution's register tile: 2 x 4 = 8 accumulators, one window step's two input
vectors and one broadcast weight fit AVX2's 16 registers when the body runs window step by window step
(`codegen/linearize.py`, `_chain_keys`) and the input vectors stay in registers (tiny-cpu's renderer)."""
CONV_MIN_FILL = 0.75
"""A convolution whose rows of pixels fill less than this share of the convolution tile's vector lanes (17 columns
in two 16-lane vectors: 53%) takes the channels as the vector columns instead where a load allows it (the weight
contiguous along them): the input gradient of a stride-2 convolution's folded input, summed channels last and stored
in the input's layout (tensor/conv_layouts.py, input_gradient_channels_last)."""
ONE_VECTOR_ROWS_LIMIT = 16
"""Rows of a one-vector matmul tile whose first row axis took 7 or 5 rows (`Heuristic._innermost_odd_rows`), with 32
vector registers: 14 accumulators, the vector of the second input and a broadcast."""
DOT_TILE = 8
"""Rows of the larger input in the register tile of a matmul whose inputs are both contiguous along the reduce."""
DOT_SMALLER_ROWS = 2
"""Rows of the smaller input in that tile where vectors are WIDE_VECTOR_BYTES (x86's AVX-512, with 32 vector
registers): 8 x 2 accumulators. dout @ W.T, 128x512x512 on a 2-core AVX-512 Xeon, medians of 40: 390 -> 368 us
(8 x 4: 451, 4 x 4: 365-401); with AVX2's 16 registers the 8 x 2 tile would spill."""
DOT_WINDOW_SIZE = 3
"""Output axes up to this size that index only the smaller input of a dot tile are a convolution's window (kernel
rows and columns of a weight gradient), when together they are at least this size (two rows of a plain product keep
the plain tile): `dot_tile` upcasts them whole, so each vector of the larger input (the output gradient, read once
per window position before) serves every window position."""
DOT_WINDOW_ACCUMULATORS = {True: 18, False: 9}
"""Accumulators of a dot tile with window axes, by whether the registers are wide (32 vector registers): the larger
input's rows are cut to fit. A dilated 3x3 weight gradient (32x16x3x3 over 32x32x32, 2-core AVX-512 Xeon): 8 rows
of the larger input alone 7.0 ms, 2 x 3 x 3 accumulators 1.39 ms, 4 x 3 x 3 1.57, 8 x 3 x 3 1.63, 4 x 3 2.53."""
WIDE_VECTOR_BYTES = 64
"""Vectors of this size come with 32 vector registers (AVX-512), which larger register tiles may take."""
PREFERRED_VECTOR_BYTES = 32
"""The vector register size codegen aims for (AVX2) unless the renderer sets `preferred_vector_bytes`."""
BLOCK_VECTORS = 4
"""Vectors of accumulators an innermost reduce axis (below another reduce axis) may take whole: from one (the 8
lanes of a Q4_0/Q8_0 block's scaled partial sum) to BLOCK_VECTORS (a quantized block's 32 values)."""
GATHERED_ROWS_MAX_BYTES = 1 << 20
"""The most output bytes a kernel whose rows read every second element (a stride-2 convolution's folded input) takes
gathered vector lanes for: a batch-1 fold, 128x33x33, ran 597 -> 190 us against the scalar loop, but batch 8
(4.4 MB) 2567 -> 3532 us and batch 32 of 64x17x17 (2.4 MB) 337 -> 569 us (DEBUG=2 medians, old and new tree back to
back): past the caches the gathers only add work to a copy bound by memory."""
COLUMN_VECTORS = 4
"""Vectors of columns a reduce over a strided axis (a sum over rows) keeps as accumulators: 4 float8 read two whole
cache lines per row and pass over the input a quarter as often as one vector does."""

DOT4_OUTPUTS = 2
"""Outputs of an int8 dot product kernel that share each loaded signed word (Heuristic.dot4_tile). With 4 rows of 8
int32 lanes, 2 outputs make 8 float8 accumulators: a 4096 x 2048 Q8_0 slab times 64 rows, one thread, 12.1-13.1 ms
with 1 output, 9.3-10.4 ms with 2; run beside each other 9.4-9.6 ms with 2 and 10.2-10.4 ms with 4 (16
accumulators: all 16 ymm registers that gcc 12 may use without AVX512VL)."""


def vector_width(renderer: RendererContract, dtype: DType) -> int:
    """The widest vector of scalar `dtype` the renderer supports, up to one preferred-size register (1: none)."""
    if dtypes.is_bool(dtype) or dtype.count != 1:
        return 1
    widths = renderer.vector_widths or {}
    limit = max(1, (renderer.preferred_vector_bytes or PREFERRED_VECTOR_BYTES) // dtype.itemsize)
    return max((width for width in widths.get(dtype.scalar, ()) if width <= limit), default=1)


def axis_stride(index: UOp, range_node: UOp) -> int | None:
    """The coefficient of `range_node` in a linear index (0 if absent), None when it appears non-linearly."""
    terms, _ = linear_terms(fold(index))
    coefficient = terms.get(range_node, 0)
    for atom in terms:
        if atom is not range_node and atom.depends_on(range_node):
            return None
    return coefficient


def _global_accesses(ast: UOp) -> tuple[list[UOp], list[UOp]]:
    """(store INDEX nodes, load INDEX nodes) on DEFINE_GLOBALs."""
    stores = [s.src[0] for s in ast.src if s.src[0].op is Ops.INDEX]
    loads = [n.src[0] for n in ast.toposort if n.op is Ops.LOAD and n.src[0].op is Ops.INDEX and
             n.src[0].src[0].op is Ops.DEFINE_GLOBAL]
    return stores, loads


def strip_casts(node: UOp) -> UOp:
    """The value under CASTs and padding masks (WHERE(valid, x, 0))."""
    while node.op is Ops.CAST or (node.op is Ops.WHERE and node.src[2].op is Ops.CONST and node.src[2].arg == 0):
        node = node.src[0] if node.op is Ops.CAST else node.src[1]
    return node


def _product_loads_of(kernel: Kernel) -> tuple[UOp, UOp] | None:
    """The two loads of a kernel that is one sum over a product of two loads, else None."""
    reduces = kernel.reduce_ops
    if len(kernel.ast.src) != 1 or len(reduces) != 1 or reduces[0].arg is not Ops.ADD:
        return None
    product = strip_casts(reduces[0].src[0])
    if product.op is not Ops.MUL:
        return None
    left, right = (strip_casts(source) for source in product.src)
    if any(load.op is not Ops.LOAD or load.src[0].op is not Ops.INDEX for load in (left, right)):
        return None
    return left, right


class TileKind(Enum):
    """The register tiles the CPU heuristic builds."""

    MATMUL = auto()
    """A sum over a product of two loads, rows and columns upcast (A @ B, and the gathered dout @ W.T)."""
    DOT = auto()
    """A product whose two inputs are both contiguous along the reduce (A @ B.T, a weight gradient)."""
    CONVOLUTION = auto()
    """Output pixels along a row by output channels, the window along the columns unrolled."""


@dataclass(frozen=True)
class RegisterTile:
    """One register tile the heuristic applied: its kind and the opts that build it (in the order applied)."""

    kind: TileKind
    opts: tuple[Opt, ...]


@dataclass(frozen=True)
class Choices:
    """What the heuristic chose for a kernel: every opt applied, the register tiles among them, and a readable line
    per opt for DEBUG output (`notes`, which no code reads)."""

    opts: tuple[Opt, ...]
    tiles: tuple[RegisterTile, ...]
    notes: tuple[str, ...]

    def tile(self, kind: TileKind) -> RegisterTile | None:
        """The register tile of `kind`, or None when the heuristic built none."""
        return next((tile for tile in self.tiles if tile.kind is kind), None)


class Heuristic:
    """Chooses and applies opts to one kernel for one renderer; `applied` lists them."""

    def __init__(self, kernel: Kernel, renderer: RendererContract):
        self.kernel, self.renderer = kernel, renderer
        self.notes: list[str] = []
        self.tiles: dict[TileKind, list[Opt]] = {}
        self.original_sizes = {axis_id(r): range_size(r) for r in kernel.axes}
        self.panel_axis: UOp | None = None
        """The column panels' axis of a packed-panel matmul whose row groups fit a core's private cache: the workers
        split it (`threads`), each running every row group over its own panels."""

    def attempt(self, range_node: UOp, op: OptOps, amount: int, why: str, tile: TileKind | None = None) -> bool:
        """Apply `op` to the axis whose RANGE is `range_node`; False when it does not fit. `why` is for DEBUG notes;
        `tile` says which register tile the opt belongs to (what the code after the heuristic reads)."""
        if range_node not in self.kernel.axes:
            return False
        opt = Opt(op, self.kernel.axes.index(range_node), amount)
        try:
            self.kernel.apply_opt(opt)
        except KernelOptError:
            return False
        self.notes.append(f"{op.name} {amount} ({why})")
        if tile is not None:
            self.tiles.setdefault(tile, []).append(opt)
        return True

    def output_axes(self) -> list[UOp]:
        """The RANGEs of output loop axes still open to opts, outermost first."""
        return [self.kernel.axes[i] for i in self.kernel.axes_of(AxisType.LOOP)]

    def _block_positions(self, axis: UOp) -> list[int]:
        """Positions of the output loop axes sharing `axis`'s id (the blocks an upcast left), outermost first."""
        return [position for position in self.kernel.axes_of(AxisType.LOOP)
                if axis_id(self.kernel.axes[position]) == axis_id(axis)]

    def reduce_axes(self) -> list[UOp]:
        """The RANGEs of reduce loop axes still open to opts."""
        return [self.kernel.axes[i] for i in self.kernel.axes_of(AxisType.REDUCE)]

    def run(self) -> list[Opt]:
        """Choose and apply the opts; returns the applied list."""
        if self.renderer.has_local and not self.renderer.has_threads:
            return list(self.kernel.applied)
        if not self.matmul_tile() and not self.dot_tile() and not self.matmul_tile(gathered=True):
            self.vectorize()
        self.dot4_tile()
        self.threads()
        self.small_axes()
        return list(self.kernel.applied)

    def store_dtype(self) -> DType:
        """The element dtype of the first store."""
        return self.kernel.ast.src[0].src[1].dtype.scalar

    def matmul_tile(self, gathered: bool = False) -> bool:
        """Register-tile a sum over a product of two loads; True when applied.

        `gathered`: the columns may be strided in the second load (dout @ W.T with a reduce too short for the dot
        tile: W's lanes are gathered one by one); one vector of columns then serves several rows, so each gather is
        used by every row of the tile instead of once."""
        loads = self._product_loads()
        if loads is None:
            return False
        left, right = loads
        store_index = self.kernel.ast.src[0].src[0]
        width = vector_width(self.renderer, self.store_dtype())
        # the vector columns should also be contiguous in the output; failing that (x.T @ y with a narrow y), the
        # tile's vectors are stored lane by lane once after the whole reduce
        orders = [(first, second, contiguous_store) for contiguous_store in (True, False)
                  for first, second in ((left, right), (right, left))]
        poorly_filled: tuple[UOp, UOp, UOp, int] | None = None
        for first, second, contiguous_store in orders:
            columns = rows = panel_columns = None
            panel_width = 2 * width
            row_candidates: list[UOp] = []
            for range_node in self.output_axes():
                in_store = axis_stride(store_index.src[1], range_node)
                in_first = axis_stride(first.src[0].src[1], range_node)
                in_second = axis_stride(second.src[0].src[1], range_node)
                if (in_store == 1 if contiguous_store else in_store not in (0, None)) and in_first == 0 and \
                        (in_second == 1 or (gathered and contiguous_store and in_second not in (0, 1, None))):
                    columns = range_node
                elif in_store == 1 and in_first == 0 and in_second is None and \
                        (found_width := self._panel_width(range_node, width)) is not None:
                    panel_columns, panel_width = range_node, found_width
                elif in_store not in (0, None) and in_first not in (0, None) and in_second == 0:
                    rows = range_node
                    row_candidates.append(range_node)
            # fewer columns than one vector take the widest vector they fill (`_narrow_width`)
            narrow = width if columns is None else self._narrow_width(width, range_size(columns) or 0)
            if columns is None and panel_columns is not None and rows is not None and width >= 2:
                # the second input packed in panels (Tensor.dot): the columns split at the panel width are contiguous
                position = self.kernel.axes.index(panel_columns)
                if self.attempt(panel_columns, OptOps.UPCAST, panel_width, "matmul columns, packed panels",
                                tile=TileKind.MATMUL):
                    panel_columns = self.kernel.axes[position]
                column_tile, row_size = panel_width, range_size(rows) or 0
            elif columns is None or rows is None or width < 2:
                continue
            elif gathered:
                column_tile, row_size = width, range_size(rows) or 0
                if (range_size(columns) or 0) % width or not self.attempt(columns, OptOps.UPCAST, width,
                                                                            "matmul columns, gathered",
                                                                            tile=TileKind.MATMUL):
                    continue
            elif (window := self._window(first, second, columns)) is not None and \
                    (range_size(columns) or 0) >= narrow:
                if poorly_filled is None and self._pixels_fill(range_size(columns) or 0, narrow) < CONV_MIN_FILL:
                    # rows of pixels that fill their vectors poorly: a later order may take the channels as the
                    # vector columns (a channels-last input gradient stored in the input's layout)
                    poorly_filled = (columns, rows, window, narrow)
                    continue
                return self._convolution_tile(columns, rows, window, narrow)
            elif narrow != width:
                # fewer columns than one vector (a 10-class layer with 16-lane vectors): the widest vector that
                # fits them, its last block shifted, rather than no tile at all (a gather of the lanes per step)
                shifted = bool((range_size(columns) or 0) % narrow)
                if (shifted and self._in_place()) or not self.attempt(
                        columns, OptOps.SHIFTED_UPCAST if shifted else OptOps.UPCAST, narrow,
                        "matmul columns, narrower vectors", tile=TileKind.MATMUL):
                    continue
                width = column_tile = narrow
                row_size = range_size(rows) or 0
            else:
                column_size, row_size = range_size(columns) or 0, range_size(rows) or 0
                dividing = next((t for t in (2 * width, width) if column_size % t == 0), None)
                if dividing is None or (dividing == width and column_size >= 2 * width):
                    # a size no tile divides: the last block of columns overlaps the one before it (not in place:
                    # its stores would be gated lane by lane, and the whole tile would lose its vectors)
                    column_tile = 2 * width if column_size >= 2 * width else width
                    if column_size < width or self._in_place() or \
                            not self.attempt(columns, OptOps.SHIFTED_UPCAST, column_tile,
                                             "matmul columns, last block shifted", tile=TileKind.MATMUL):
                        if dividing is None:
                            continue
                        # in place (an update of 48 columns in 16-lane vectors): one vector that divides them
                        column_tile = dividing
                        self.attempt(columns, OptOps.UPCAST, column_tile, "matmul columns", tile=TileKind.MATMUL)
                else:
                    column_tile = dividing
                    self.attempt(columns, OptOps.UPCAST, column_tile, "matmul columns", tile=TileKind.MATMUL)
            if column_tile == 2 * width:
                # MATMUL_ROWS rows of two vectors: 12 accumulators, the two vectors of the second input and one
                # broadcast fit the 16 vector registers (8 rows spill accumulators to the stack); with 32 registers
                # WIDE_MATMUL_ROWS rows
                wide = self._wide_registers()
                tiles = (WIDE_MATMUL_ROWS, 10, 8, MATMUL_ROWS) if wide else (MATMUL_ROWS,)
                before = self.upcast_product()
                self._row_tile(rows, row_size, tiles)
                self._second_row_axis(rows, self.upcast_product() // before, row_candidates)
            elif column_tile == WIDE_PANEL_VECTORS * width:
                self._row_tile(rows, row_size, WIDE_PANEL_ROWS)
            else:
                rows = self._one_vector_rows(rows, row_candidates)
            row_blocks = self._block_positions(rows)
            grouped = bool(row_blocks) and panel_columns is not None and \
                self._group_rows_for_panels(row_blocks[0], first, column_tile, panel_columns)
            if row_blocks and not grouped and not gathered and not self._row_block_in_l1(first) and \
                    not self._block_rows(row_blocks[0], first, column_tile):
                # row blocks innermost: one column panel of the second input is reused from cache by every row block
                self.kernel.nest_inside(row_blocks[0])
                self.notes.append("row blocks inside column blocks")
            for reduce_range in self.reduce_axes()[-1:]:
                size = range_size(reduce_range)
                if column_tile == width and size is not None and size % 4 == 0 and size >= 8:
                    self.attempt(reduce_range, OptOps.UNROLL, 4, "matmul reduce", tile=TileKind.MATMUL)
            return True
        return poorly_filled is not None and self._convolution_tile(*poorly_filled)

    @staticmethod
    def _pixels_fill(columns: int, width: int) -> float:
        """The share of the convolution tile's vector lanes (`_convolution_tile`) that a row of `columns` output
        pixels fills."""
        pixels = CONV_PIXEL_VECTORS * width if columns >= CONV_PIXEL_VECTORS * width else width
        return columns / (-(-columns // pixels) * pixels)

    def _one_vector_rows(self, rows: UOp, candidates: list[UOp]) -> UOp:
        """Upcast the rows of a one-vector matmul tile; returns the row axis taken. The innermost row axis takes the
        first of 8, 6, 4 rows that divides it, else one of 7 or 5 that does (`_innermost_odd_rows`); failing that,
        another row axis that one of 8, 6, 4 divides (the images of a batch where each image has 7 rows), else a
        whole axis of 5 to 8 rows, else 3 or 2 rows. A single accumulator waits on its own multiply-adds: the input
        gradient of 128x16x7x7 * 32x16x3x3 summed channels last, one vector of 16 channels and rows of 7 pixels, ran
        at 44 GFLOPS untiled."""
        others = [node for node in reversed(candidates) if node is not rows]
        stages: tuple[tuple[tuple[int, ...] | None, list[UOp]], ...] = (
            ((8, 6, 4), [rows]), ((7, 5), [rows]), ((8, 6, 4), others), (None, [rows, *others]),
            ((3, 2), [rows, *others]))
        for tiles, stage_candidates in stages:
            innermost_only = tiles == (7, 5)
            for candidate in stage_candidates:
                size = range_size(candidate) or 0
                if tiles is None:
                    tile = size if 5 <= size <= 8 else None
                else:
                    tile = next((t for t in tiles if size % t == 0), None)
                if tile is not None and self.attempt(candidate, OptOps.UPCAST, tile, "matmul rows",
                                                     tile=TileKind.MATMUL):
                    if innermost_only:
                        self._innermost_odd_rows(rows, tile, candidates)
                    return candidate
        return rows

    def _innermost_odd_rows(self, rows: UOp, row_tile: int, candidates: list[UOp]) -> None:
        """After `row_tile` (7 or 5) rows of a one-vector tile along the innermost row axis: with 32 vector registers,
        a second row axis of up to ONE_VECTOR_ROWS_LIMIT // row_tile rows. Rows along the innermost axis broadcast
        neighbouring elements of one cache line, where rows along an outer axis read a line each; the images of a
        batch (8 rows, the first choice before) are a whole image apart, and an image of 16 x 16 x 32 floats puts 8
        such lines 32 KB apart in one L1 set. Input gradients of narrow images (128x16xHxW * 32x16x3x3, channels
        last, stored in the input's layout), kernels replayed in their sequence, one thread, best of 12-30 on a
        2-core AVX-512 Xeon under load: 14x14 8 images 19.5 ms, 7 pixels 2.1 ms, 7 pixels x 2 rows 1.6 ms; 7x7
        8 images 568 us, 7 pixels 412 us, 7 pixels x 2 images 330 us."""
        if not self._wide_registers():
            return
        limit = ONE_VECTOR_ROWS_LIMIT // row_tile
        best: tuple[UOp, int] | None = None
        for candidate in reversed(candidates):
            if candidate is rows or candidate not in self.kernel.axes:
                continue
            size = range_size(candidate) or 0
            tile = next((t for t in range(limit, 1, -1) if size % t == 0), None)
            if tile is not None and (best is None or tile > best[1]):
                best = (candidate, tile)
        if best is not None:
            self.attempt(best[0], OptOps.UPCAST, best[1], "matmul rows, second axis", tile=TileKind.MATMUL)

    def _second_row_axis(self, rows: UOp, row_tile: int, candidates: list[UOp]) -> None:
        """Widen a row tile of `row_tile` rows that its axis kept short (the 3 kernel columns of a convolution's
        weight gradient, in rows of 2 vectors of output channels) with a second row axis: the largest tile of another
        candidate that divides it and keeps the rows at most SECOND_ROW_LIMIT (MATMUL_ROWS with 16 vector
        registers)."""
        if row_tile >= MATMUL_ROWS:
            return
        limit = SECOND_ROW_LIMIT if self._wide_registers() else MATMUL_ROWS
        best: tuple[UOp, int] | None = None
        for candidate in candidates:
            if candidate is rows or candidate not in self.kernel.axes:
                continue
            size = range_size(candidate) or 0
            tile = next((t for t in range(limit // row_tile, 1, -1) if size % t == 0), None)
            if tile is not None and (best is None or tile > best[1]):
                best = (candidate, tile)
        if best is not None:
            self.attempt(best[0], OptOps.UPCAST, best[1], "matmul rows, second axis", tile=TileKind.MATMUL)

    def _wide_registers(self) -> bool:
        """True where vectors are WIDE_VECTOR_BYTES, which come with 32 vector registers for larger tiles."""
        return (self.renderer.preferred_vector_bytes or PREFERRED_VECTOR_BYTES) >= WIDE_VECTOR_BYTES

    def _row_tile(self, rows: UOp, row_size: int, tiles: tuple[int, ...]) -> None:
        """Upcast a matmul's rows to the first of `tiles` (largest first) that divides them or, shifting the last
        block back, recomputes at most SHIFTED_WASTE of them; else to a smaller tile that divides them; else shifted
        to the largest of `tiles` they hold."""
        for tile in tiles:
            if row_size % tile == 0:
                self.attempt(rows, OptOps.UPCAST, tile, "matmul rows", tile=TileKind.MATMUL)
                return
            recomputed = -(-row_size // tile) * tile - row_size
            if row_size >= tile and recomputed <= SHIFTED_WASTE * row_size and \
                    self.attempt(rows, OptOps.SHIFTED_UPCAST, tile, "matmul rows, last block shifted",
                                 tile=TileKind.MATMUL):
                return
        divisor = next((tile for tile in (5, 4, 3, 2) if tile < tiles[-1] and row_size % tile == 0), None)
        if divisor is not None:
            self.attempt(rows, OptOps.UPCAST, divisor, "matmul rows", tile=TileKind.MATMUL)
            return
        largest = next((tile for tile in tiles if tile <= row_size), None)
        if largest is not None:
            self.attempt(rows, OptOps.SHIFTED_UPCAST, largest, "matmul rows, last block shifted", tile=TileKind.MATMUL)

    def _narrow_width(self, width: int, size: int) -> int:
        """`width` when `size` columns fill a vector, else the widest supported vector of at least 4 lanes that
        they fill (unchanged when there is none)."""
        if size >= width:
            return width
        supported = (self.renderer.vector_widths or {}).get(self.store_dtype().scalar, ())
        return max((lanes for lanes in supported if 4 <= lanes <= size), default=width)

    def _window(self, first: UOp, second: UOp, columns: UOp) -> UOp | None:
        """The reduce axis of a convolution's window along the columns: a small reduce axis that moves the second
        load (the input) by the same step as the columns do and indexes the first (the weight), else None."""
        step = axis_stride(second.src[0].src[1], columns)
        for reduce_range in self.reduce_axes():
            size = range_size(reduce_range)
            if size is not None and 1 < size <= SMALL_UNROLL and \
                    axis_stride(second.src[0].src[1], reduce_range) == step and \
                    axis_stride(first.src[0].src[1], reduce_range) not in (0, None):
                return reduce_range
        return None

    def _convolution_tile(self, columns: UOp, rows: UOp, window: UOp, width: int) -> bool:
        """The register tile of a convolution (columns: output pixels along a row, rows: output channels):
        CONV_PIXEL_VECTORS vectors of pixels (one for rows narrower than that) times CONV_ROWS channels (8 with one
        vector), the window along the row unrolled (its loads are the tile's vectors shifted by one pixel each), the
        channel blocks inside the other output loops and the pixel blocks innermost, so one output row's input lines
        and one block of weights stay in L1 while the tile sweeps the row. conv2d 32x16x64x64 * 32x16x3x3, one
        thread: 8 channels x 1 vector 49-54 GFLOPS, 4 x 2 vectors 70-73 (each window step loads 2 vectors for 4
        broadcasts, against 1 for 8); 6 x 2 (12 accumulators) recomputes 4 of 32 channels and was no faster. With 32
        vector registers (64-byte vectors) 8 channels x 2 vectors: on a 2-core AVX-512 Xeon, paired against 4 x 2,
        that conv2d 1.17-1.21x, 16x64x32x32 * 64x64x3x3 1.14x, 128x16x14x14 * 32x16x3x3 1.08x (kernels replayed
        back to back in alternation)."""
        column_size, row_size = range_size(columns) or 0, range_size(rows) or 0
        pixels = CONV_PIXEL_VECTORS * width if column_size >= CONV_PIXEL_VECTORS * width else width
        if column_size % pixels == 0:
            self.attempt(columns, OptOps.UPCAST, pixels, "convolution pixels", tile=TileKind.CONVOLUTION)
        elif self._in_place() or not self.attempt(columns, OptOps.SHIFTED_UPCAST, pixels,
                                                    "convolution pixels, last block shifted",
                                                    tile=TileKind.CONVOLUTION):
            return False
        wide = self._wide_registers()
        channels = 2 * CONV_ROWS if wide else CONV_ROWS
        channel_tiles = (channels, 6, CONV_ROWS, 3, 2) if pixels > width else (2 * CONV_ROWS, 6, CONV_ROWS, 3, 2)
        row_tile = next((t for t in channel_tiles if row_size % t == 0), None)
        if row_tile is not None:
            self.attempt(rows, OptOps.UPCAST, row_tile, "convolution channels", tile=TileKind.CONVOLUTION)
        for axis in (rows, columns):
            blocks = self._block_positions(axis)
            if blocks:
                self.kernel.nest_inside(blocks[0])
        self.notes.append("channel blocks, then pixel blocks innermost")
        self.attempt(window, OptOps.UNROLL, range_size(window) or 1, "convolution window", tile=TileKind.CONVOLUTION)
        return True

    def _row_block_in_l1(self, first: UOp) -> bool:
        """True when the first input is strided along the reduce (x.T @ dout, a weight gradient) and a row block's
        cache lines, one per reduce step, fit in L1: at most ROW_BLOCK_L1_BYTES of them, and no more than half the
        ways of any set (lines 2 KB apart fall in 2 of the 64 sets). The row blocks then stay the outer loop, each
        keeping its lines in L1 across every column block, while the second input streams from L2."""
        reduces = self.reduce_axes()
        if not reduces:
            return False
        stride = axis_stride(first.src[0].src[1], reduces[-1])
        steps = prod(range_size(self.kernel.axes[i]) or 0 for i in self.kernel.axes_of(AxisType.REDUCE))
        if stride in (None, 0, 1) or not 0 < steps * L1_LINE_BYTES <= ROW_BLOCK_L1_BYTES:
            return False
        stride_bytes = abs(stride) * first.dtype.itemsize
        # lines `stride_bytes` apart visit every set when the stride is not a whole number of lines, else
        # L1_SETS / gcd(stride in lines, L1_SETS) of them
        sets = L1_SETS if stride_bytes % L1_LINE_BYTES else L1_SETS // math.gcd(stride_bytes // L1_LINE_BYTES, L1_SETS)
        return -(-steps // sets) <= L1_WAYS // 2

    def _in_place(self) -> bool:
        """True when the kernel reads a buffer it writes (an update in place, such as SGD's)."""
        stored = {store.src[0].src[0] for store in self.kernel.ast.src if store.src[0].op is Ops.INDEX}
        return any(node.op is Ops.LOAD and node.src[0].op is Ops.INDEX and node.src[0].src[0] in stored
                   for node in self.kernel.ast.toposort)

    def _reduce_steps(self) -> int:
        """The iterations of all reduce axes together."""
        return prod(range_size(self.kernel.axes[i]) or 1 for i in self.kernel.axes_of(AxisType.REDUCE))

    def _row_blocks(self, position: int, first: UOp, column_tile: int) -> tuple[int, int]:
        """The row blocks of a matmul tile at axis `position` and the bytes of the first input each one reads."""
        row_tile = max(1, self.upcast_product() // column_tile)
        return range_size(self.kernel.axes[position]) or 0, row_tile * self._reduce_steps() * first.dtype.itemsize

    def _block_rows(self, position: int, first: UOp, column_tile: int) -> bool:
        """Cache blocking of a matmul whose row blocks read more of the first input than GROUP_BYTES: the row blocks
        are split into groups that fit, every column block running over one group before the next group starts;
        True when applied."""
        blocks, bytes_per_block = self._row_blocks(position, first, column_tile)
        if blocks * bytes_per_block <= GROUP_BYTES:
            return False
        # the groups are what the workers split: a count they divide keeps the cores evenly loaded
        workers = default_worker_count() if self.renderer.has_threads else 1
        group = next((size for size in range(max(1, GROUP_BYTES // max(bytes_per_block, 1)), 1, -1)
                      if blocks % size == 0 and blocks // size >= 2 and (blocks // size) % workers == 0), None)
        return group is not None and self.attempt(self.kernel.axes[position], OptOps.BLOCK, group,
                                                  "matmul row blocks grouped for the cache", tile=TileKind.MATMUL)

    def _group_rows_for_panels(self, position: int, first: UOp, column_tile: int, panels: UOp) -> bool:
        """Cache blocking of a packed-panel matmul on a host whose cores have a large private cache
        (`RendererContract.core_cache_bytes` at least PRIVATE_GROUP_MIN_CACHE) whose first input does not fit half of
        it: the row blocks in groups of about half that cache (any count of groups: the workers split the panels, not
        the groups), and each worker runs every group over its own panels. The wide panels' tile takes groups of up
        to WIDE_PANEL_GROUP_CACHES caches instead (at least two), unless its panels are under 1 / WIDE_PANEL_SMALL of
        the cache. True when applied."""
        cache = self.renderer.core_cache_bytes
        workers = default_worker_count() if self.renderer.has_threads else 1
        if cache is None or cache < PRIVATE_GROUP_MIN_CACHE or workers < 2 or \
                (range_size(panels) or 0) < 2 * workers:
            return False
        blocks, bytes_per_block = self._row_blocks(position, first, column_tile)
        if blocks * bytes_per_block <= cache // 2:
            return False  # the first input stays in cache whole: the workers split what they would read again least
        wide = column_tile == WIDE_PANEL_VECTORS * vector_width(self.renderer, self.store_dtype())
        panel_bytes = self._reduce_steps() * column_tile * first.dtype.itemsize
        limit = WIDE_PANEL_GROUP_CACHES * cache if wide and panel_bytes * WIDE_PANEL_SMALL >= cache else cache // 2
        groups = max(2, round(blocks * bytes_per_block / limit))
        if not self.attempt(self.kernel.axes[position], OptOps.BLOCK, max(1, round(blocks / groups)),
                            "matmul row blocks grouped for the core's cache", tile=TileKind.MATMUL):
            return False
        self.panel_axis = panels
        return True

    def _packed_columns(self, range_node: UOp, amount: int) -> bool:
        """True when UPCAST `amount` of `range_node` makes its inner lanes contiguous in the store and in one of the
        product's loads and absent from the other (the columns of a panel, indexed by `j // amount` and
        `j % amount` before the split). Checked on a copy of the kernel."""
        size = range_size(range_node)
        if self.kernel.applied or size is None or size % amount or size < 2 * amount:
            return False
        probe = Kernel(self.kernel.ast)
        try:
            probe.apply_opt(Opt(OptOps.UPCAST, self.kernel.axes.index(range_node), amount))
        except KernelOptError:
            return False
        loads = _product_loads_of(probe)
        if loads is None:
            return False
        lanes = probe.axes[-1]
        strides = sorted(axis_stride(simplify(load.src[0].src[1]), lanes) or 0 for load in loads)
        return axis_stride(simplify(probe.ast.src[0].src[0].src[1]), lanes) == 1 and strides == [0, 1]

    def _panel_width(self, range_node: UOp, width: int) -> int | None:
        """The columns of the packed panels `range_node` indexes (`_packed_columns`): WIDE_PANEL_VECTORS vectors
        where vectors are wide (32 registers), else two; None when it is not a panel axis of either width."""
        for vectors in ((WIDE_PANEL_VECTORS, 2) if self._wide_registers() else (2,)):
            if self._packed_columns(range_node, vectors * width):
                return vectors * width
        return None

    def _product_loads(self) -> tuple[UOp, UOp] | None:
        """The two loads of a kernel that is one sum over a product of two loads, else None."""
        return _product_loads_of(self.kernel)

    def dot_tile(self) -> bool:
        """Register-tile a matmul whose two inputs are both contiguous along the reduce (A @ B.T); True when applied.

        DOT_TILE rows of the larger input get a vector accumulator each along the reduce; one vector of the smaller
        input's row serves all of them (with 64-byte vectors, DOT_SMALLER_ROWS rows of the smaller input do). The
        smaller input's rows are the innermost loop, so it stays in cache while the larger input is read from memory
        once (measured on AVX2: 75-95 GFLOPS where one dot product per output reached 45)."""
        loads = self._product_loads()
        reduces = self.reduce_axes()
        width = vector_width(self.renderer, self.store_dtype())
        if loads is None or not reduces or width < 2:
            return False
        reduce_range = reduces[-1]
        reduce_size = range_size(reduce_range)
        if reduce_size is None or reduce_size % width != 0 or \
                any(axis_stride(load.src[0].src[1], reduce_range) != 1 for load in loads):
            return False
        owners: list[UOp | None] = [None, None]  # the output axis indexing only the first / only the second load
        owned: list[list[UOp]] = [[], []]  # every output axis indexing only that load
        for range_node in self.output_axes():
            strides = [axis_stride(load.src[0].src[1], range_node) for load in loads]
            if range_size(range_node) is None or None in strides:
                continue
            if strides[0] != 0 and strides[1] == 0:
                owners[0] = range_node
                owned[0].append(range_node)
            elif strides[0] == 0 and strides[1] != 0:
                owners[1] = range_node
                owned[1].append(range_node)
        first_owner, second_owner = owners
        if first_owner is None or second_owner is None:
            return False
        larger, smaller = sorted((first_owner, second_owner), key=lambda node: -(range_size(node) or 0))
        wide = self._wide_registers()
        window = [axis for axis in owned[0 if smaller is first_owner else 1]
                  if 1 < (range_size(axis) or 0) <= DOT_WINDOW_SIZE]
        window_size = prod(range_size(axis) or 1 for axis in window)
        if DOT_WINDOW_SIZE <= window_size <= DOT_WINDOW_ACCUMULATORS[wide]:
            return self._window_dot_tile(larger, window, window_size, width, wide)
        tile = next((t for t in (DOT_TILE, DOT_TILE // 2) if (range_size(larger) or 0) % t == 0), None)
        if tile is None:
            return False
        self.attempt(larger, OptOps.UPCAST, tile, "dot tile", tile=TileKind.DOT)
        if wide and tile == DOT_TILE and (range_size(smaller) or 0) % DOT_SMALLER_ROWS == 0:
            # 32 registers: DOT_SMALLER_ROWS rows of the smaller input too, each loaded vector used twice as often
            self.attempt(smaller, OptOps.UPCAST, DOT_SMALLER_ROWS, "dot tile, smaller input", tile=TileKind.DOT)
        self.attempt(self.reduce_axes()[-1], OptOps.ACCUMULATORS, width, "dot reduce")
        blocks = self._block_positions(smaller)
        if blocks:  # none left when the smaller input's rows were upcast whole
            self.kernel.nest_inside(blocks[0])
            self.notes.append("smaller input innermost")
        return True

    def _window_dot_tile(self, larger: UOp, window: list[UOp], window_size: int, width: int, wide: bool) -> bool:
        """The dot tile of a weight gradient: the window axes upcast whole, as many rows of the larger input as the
        accumulators allow (DOT_WINDOW_ACCUMULATORS), vector accumulators along the reduce."""
        rows = next((t for t in (DOT_TILE, DOT_TILE // 2, 2) if (range_size(larger) or 0) % t == 0 and
                     t * window_size <= DOT_WINDOW_ACCUMULATORS[wide]), 1)
        if rows > 1:
            self.attempt(larger, OptOps.UPCAST, rows, "dot tile", tile=TileKind.DOT)
        for axis in window:
            self.attempt(axis, OptOps.UPCAST, range_size(axis) or 1, "dot tile, window", tile=TileKind.DOT)
        self.attempt(self.reduce_axes()[-1], OptOps.ACCUMULATORS, width, "dot reduce")
        return True

    def vectorize(self) -> None:
        """Vector lanes on the innermost contiguous output axis, else vector accumulators on the reduce axis.

        An output axis along which a load is strided would gather its lanes one by one; when the innermost reduce
        axis is contiguous in the loads instead, vector accumulators along it are chosen.
        """
        stores, loads = _global_accesses(self.kernel.ast)
        width = vector_width(self.renderer, self.store_dtype())
        outputs, reduces = self.output_axes(), self.reduce_axes()
        output_candidate = reduce_candidate = None
        if outputs and width > 1:
            innermost = outputs[-1]
            size = range_size(innermost)
            # a row the vector does not divide (5000 classes with 16 lanes) takes the widest narrower vector that
            # does rather than none
            narrowed = None if size is None else next(
                (lanes for lanes in (width, width // 2, width // 4) if lanes >= 4 and size % lanes == 0), None)
            if narrowed is not None and all(axis_stride(s.src[1], innermost) == 1 for s in stores):
                output_candidate, width = innermost, narrowed
        gathers = output_candidate is not None and \
            any(axis_stride(index.src[1], output_candidate) not in (0, 1) for index in loads)
        if reduces:
            innermost_reduce = reduces[-1]
            reduce_dtypes = [r.dtype.scalar for r in self.kernel.reduce_ops]
            accumulator_width = min((vector_width(self.renderer, d) for d in reduce_dtypes), default=1)
            size = range_size(innermost_reduce)
            if accumulator_width > 1 and size is not None and \
                    any(axis_stride(index.src[1], innermost_reduce) == 1 for index in loads):
                # the whole axis when an outer reduce loop remains (a quantized block's values under the loop over
                # blocks): up to BLOCK_VECTORS independent accumulators and no inner loop
                whole = size if len(reduces) > 1 and size in (accumulator_width * k for k in
                                                              range(1, BLOCK_VECTORS + 1)) else None
                amount = whole or next((a for a in (2 * accumulator_width, accumulator_width)
                                        if size % a == 0 and size > a), None)
                reduce_candidate = (innermost_reduce, amount) if amount is not None else None
                if reduce_candidate is None and gathers:
                    # a contiguous reduce narrower than a vector (a batchnorm's statistics over 8x8 images with
                    # 16-lane vectors): the widest vector that divides it beats gathering the output lanes one by
                    # one, and leaves the output axis to the workers (128x16x8x8: 121 -> 42 us, 128x32x4x4: 32
                    # -> 27 us, replayed back to back in alternation)
                    narrow = next((lanes for lanes in (8, 4) if lanes < accumulator_width and size % lanes == 0),
                                  None)
                    reduce_candidate = (innermost_reduce, narrow) if narrow is not None else None
        if output_candidate is None and not reduces and self._masked_rows(outputs, stores, loads, width):
            return
        if output_candidate is not None and not (gathers and reduce_candidate is not None):
            transposed = self._transpose_tile(output_candidate, loads) if gathers and not reduces else None
            self.attempt(output_candidate, OptOps.UPCAST, self._column_width(output_candidate, loads, width),
                         "contiguous output")
            if transposed is not None and transposed[0] in self.kernel.axes:
                self.attempt(transposed[0], OptOps.UPCAST, transposed[1], "transposed copy, a line per load")
        elif reduce_candidate is not None:
            self.attempt(reduce_candidate[0], OptOps.ACCUMULATORS, reduce_candidate[1], "contiguous reduce")
        self.row_reduce_accumulators()

    def _transpose_tile(self, lanes: UOp, loads: list[UOp]) -> tuple[UOp, int] | None:
        """For a copy between layouts (NCHW and NHWC), whose output's vector `lanes` gather a load with lanes a cache
        line or more apart: the output axis along which that load is contiguous and how far to upcast it (a line of
        elements, or a half or quarter line that divides it), so that each gathered line is read once for all of
        them instead of once per step; lines 4 KB apart (the channels of a 32x32 image) share one L1 set and evict
        each other before the next step. None when there is no such load or axis."""
        gathered = [index for index in loads
                    if abs(axis_stride(index.src[1], lanes) or 0) * index.src[0].dtype.itemsize >= L1_LINE_BYTES]
        if not gathered:
            return None
        line = L1_LINE_BYTES // gathered[0].src[0].dtype.itemsize
        for axis in reversed(self.output_axes()):
            if axis is lanes or axis_stride(gathered[0].src[1], axis) != 1:
                continue
            size = range_size(axis) or 0
            tile = next((amount for amount in (line, line // 2, line // 4) if amount >= 2 and size % amount == 0),
                        None)
            return None if tile is None else (axis, tile)
        return None

    def _masked_rows(self, outputs: list[UOp], stores: list[UOp], loads: list[UOp], width: int) -> bool:
        """Vectors along the innermost output axis when no vector divides it (the 34 columns of a padded 32-column
        image), the last block shifted back, where the renderer has masked loads for the dtype: a padded row's
        lanes each have their own gate, and one masked load reads them (RendererContract.masked_load_dtypes); True
        when applied. Only plain stores (the shifted block stores some outputs twice) and loads contiguous, constant
        or of step 2 along the axis: gathered lanes of other patterns, each behind its own gate, ran 2.5x slower
        than the scalar loop (the spread of a stride-2 gradient), but a step of 2 (a stride-2 convolution's folded
        input, 33 columns of a 66-column padded row) beat the scalar loop in small kernels (GATHERED_ROWS_MAX_BYTES)."""
        if not outputs or width < 2 or self.store_dtype() not in self.renderer.masked_load_dtypes or \
                not self.renderer.vector_masks:
            return False
        innermost = outputs[-1]
        size = range_size(innermost)
        if size is None or size <= width or any(axis_stride(store.src[1], innermost) != 1 for store in stores) or \
                any(axis_stride(index.src[1], innermost) not in (0, 1, 2) for index in loads) or self._in_place():
            return False
        if any(axis_stride(index.src[1], innermost) == 2 for index in loads):
            outputs_bytes = prod(range_size(axis) or 0 for axis in outputs) * self.store_dtype().itemsize
            if outputs_bytes > GATHERED_ROWS_MAX_BYTES:
                return False
            # gathered lanes cost a load each, so the shifted block's repeated lanes count: the vector that covers
            # the row in the fewest lanes (33 columns: 5 x 8 rather than 3 x 16, 336 -> 190 us)
            width = min((lanes for lanes in (width, width // 2, width // 4) if lanes >= 4 and size > lanes),
                        key=lambda lanes: (-(-size // lanes) * lanes, -lanes), default=width)
        return self.attempt(innermost, OptOps.SHIFTED_UPCAST, width, "contiguous output, last block shifted")

    def row_reduce_accumulators(self) -> None:
        """Vector accumulators for the reduces that the vector lanes of the output do not reach: reduces computed
        once per row and broadcast over it (softmax's max and sum, a layernorm's mean and variance) run before the
        row's vector loop, on their own axes, contiguous in memory along them."""
        upcast = {self.kernel.axes[i] for i in self.kernel.axes_of(AxisType.UPCAST)}
        for reduce_range in self.reduce_axes():
            users = [node for node in self.kernel.reduce_ops if reduce_range in node.src[1:]]
            split_already = range_size(reduce_range) != self.original_sizes.get(axis_id(reduce_range))
            # a reduce that already has vector accumulators on another axis (a quantized product's lanes) keeps
            # them alone: more on the outer axis multiply the body past the upcasts that share loads between rows
            vectorized = any(r.op is Ops.RANGE and r.arg[1] is AxisType.ACCUMULATOR for node in users
                             for r in node.src[1:])
            if split_already or vectorized or not users or any(upcast & set(node.toposort) for node in users):
                continue
            width = min(vector_width(self.renderer, node.dtype.scalar) for node in users)
            size = range_size(reduce_range)
            inner_loads = [n.src[0] for node in users for n in node.src[0].toposort if n.op is Ops.LOAD and
                           n.src[0].op is Ops.INDEX and n.src[0].src[0].op is Ops.DEFINE_GLOBAL]
            if width < 2 or size is None or not any(axis_stride(index.src[1], reduce_range) == 1
                                                     for index in inner_loads):
                continue
            # a row the vector does not divide (5000 classes with 16 lanes) takes the widest narrower vector that
            # does: one scalar chain per row ran the cross-entropy gradient's six row reduces at 5 GFLOPS
            amount = next((a for a in (2 * width, width, width // 2, width // 4) if a >= 4 and size % a == 0 and
                           size > a), None)
            if amount is not None:
                self.attempt(reduce_range, OptOps.ACCUMULATORS, amount, "row reduce")

    def _column_width(self, output: UOp, loads: list[UOp], width: int) -> int:
        """Lanes for the contiguous output axis: one vector, or COLUMN_VECTORS vectors when the kernel reduces along
        a strided axis (a sum over rows): each step of the reduce then reads whole cache lines, and every pass over
        the input serves that many more columns."""
        reduces = self.reduce_axes()
        size = range_size(output) or 0
        if not reduces or any(axis_stride(index.src[1], reduces[-1]) in (1, None) for index in loads):
            return width
        return next((lanes for lanes in (COLUMN_VECTORS * width, 2 * width) if size % lanes == 0), width)

    def upcast_product(self) -> int:
        """How many copies the UPCAST axes make."""
        return prod(range_size(self.kernel.axes[i]) or 1 for i in self.kernel.axes_of(AxisType.UPCAST))

    def unroll_product(self) -> int:
        """How many steps of the reduces the UNROLL and ACCUMULATOR axes put in one loop iteration."""
        return prod(range_size(self.kernel.axes[i]) or 1 for i in self.kernel.axes_of(AxisType.UNROLL,
                                                                                         AxisType.ACCUMULATOR))

    def small_axes(self) -> None:
        """Upcast small output axes and unroll small reduce axes completely (axes not split by earlier opts)."""
        for range_node in reversed(self.output_axes()):
            size = range_size(range_node)
            if size is not None and 1 < size <= SMALL_UPCAST and \
                    self.upcast_product() * self.unroll_product() * size <= SMALL_AXES_EXPANSION and \
                    size == self.original_sizes.get(axis_id(range_node)):
                self.attempt(range_node, OptOps.UPCAST, size, "small axis")
        for range_node in self.reduce_axes():
            size = range_size(range_node)
            if size is not None and 1 < size <= SMALL_UNROLL and size == self.original_sizes.get(axis_id(range_node)) \
                    and self.upcast_product() * self.unroll_product() * size <= SMALL_AXES_EXPANSION:
                self.attempt(range_node, OptOps.UNROLL, size, "small reduce")

    def dot4_tile(self) -> None:
        """A register tile for a kernel of int8 dot products (tinycore.codegen.int8_dot, where the renderer declares
        them): its small axis of rows (only the signed words follow it, at most SMALL_UPCAST) upcast whole, so each
        loaded unsigned word serves every row, and DOT4_OUTPUTS of its axis of outputs (only the unsigned words
        follow it), so each loaded signed word serves that many outputs. Before the split across workers, which
        takes an axis out of the loops that opts reach."""
        if not self.renderer.int8_dot_products or (words := dot4_words(self.kernel.ast)) is None:
            return
        unsigned, signed = (strip_casts(word) for word in words)
        if any(word.op is not Ops.LOAD or word.src[0].op is not Ops.INDEX for word in (unsigned, signed)):
            return

        def follows(load: UOp, axis: UOp) -> bool:
            return axis_stride(load.src[0].src[1], axis) != 0

        axes = [axis for axis in reversed(self.output_axes()) if range_size(axis) is not None]
        rows = next((axis for axis in axes if follows(signed, axis) and not follows(unsigned, axis)
                     and 1 < (range_size(axis) or 0) <= SMALL_UPCAST), None)
        outputs = next((axis for axis in axes if follows(unsigned, axis) and not follows(signed, axis)
                        and (range_size(axis) or 0) % DOT4_OUTPUTS == 0), None)
        if rows is None or outputs is None or not self.attempt(rows, OptOps.UPCAST, range_size(rows) or 1,
                                                                "int8 dot products, rows per unsigned word"):
            return
        self.attempt(outputs, OptOps.UPCAST, DOT4_OUTPUTS, "int8 dot products, outputs per signed word")

    def work(self) -> int:
        """Elements of work: the outputs, plus for each reduce the sizes of the loops it runs in (its own and the
        output loops its value depends on). Reduces that run one after another (a cross-entropy's gradient: four
        reduces of 10 per row) add up instead of multiplying as in Kernel.work."""
        reduces = self.kernel.reduce_ops
        if not reduces:
            return self.kernel.work()
        reduce_ranges = {r for node in reduces for r in node.src[1:]}
        outputs = prod(range_size(r) or 1 for r in self.kernel.axes if r not in reduce_ranges)
        return outputs + sum(prod(range_size(n) or 1 for n in node.toposort if n.op is Ops.RANGE)
                             for node in reduces)

    def threads(self) -> None:
        """Split the outermost big enough output axis across the CPU workers."""
        # atomic updates (a scatter reduction) cost a dependent load and a read-modify-write each, like a reduce
        atomic = any(store.op is Ops.STORE and store.arg is not None for store in self.kernel.ast.src)
        minimum = MIN_THREAD_WORK if self.kernel.reduce_ops or atomic else MIN_THREAD_ELEMENTWISE
        if not self.renderer.has_threads or self.work() < minimum:
            return
        workers = default_worker_count()
        candidates = [(r, range_size(r) or 0) for r in self.output_axes() if (range_size(r) or 0) >= 2]
        if workers < 2 or not candidates:
            return
        usable = [(r, size) for r, size in candidates if size >= workers]
        if self.panel_axis is not None and self.panel_axis in self.kernel.axes:
            # one share per worker: each share then reads all of the first input once per row group, and in
            # more shares that costs more than the balance gains (1024^2 1.03x numpy in 8 shares, 1.05x in 2)
            size = range_size(self.panel_axis) or 0
            self.attempt(self.panel_axis, OptOps.THREAD, min(workers, size), "multi-core, by column panels")
            return
        chosen = usable[0] if usable else max(candidates, key=lambda c: c[1])
        if len(usable) > 1 and self._product_loads() is not None:
            # among the axes that split into as many shares as the outermost (fewer would balance the cores worse),
            # the least re-read; the outermost wins a tie
            shares = self._shares(chosen[1], workers)
            _, loads = _global_accesses(self.kernel.ast)
            chosen = min((c for c in usable if self._shares(c[1], workers) >= shares),
                         key=lambda c: self._reread_bytes(c[0], loads))
        self.attempt(chosen[0], OptOps.THREAD, self._shares(chosen[1], workers), "multi-core")

    def _shares(self, size: int, workers: int) -> int:
        """The shares a split of an axis of `size` across `workers` takes."""
        if size >= workers * SHARES_PER_WORKER and self.work() >= workers * SHARES_PER_WORKER * MIN_SHARE_WORK:
            return workers * SHARES_PER_WORKER
        return min(workers, size)

    def _reread_bytes(self, axis: UOp, loads: list[UOp]) -> int:
        """Bytes that every share of a split along `axis` reads whole: the `loads` (INDEX nodes) whose index does not
        depend on it (the second input of a matmul split by rows). A matmul of 128 rows by 512 columns split by rows
        made each of the 8 shares stream all of a 784 x 512 weight from L3 for 2-3 row blocks; split by columns, the
        128 rows (400 KB) are what the shares share, and each reads its 64 columns of the weight once (that product
        1.06-1.18x, the MLP SGD step of bench/bench_train.py 1.18-1.19x, kernels replayed back to back in
        alternation)."""

        def footprint(index: UOp) -> int:
            return prod(range_size(r) or 1 for r in self.kernel.axes if axis_stride(index.src[1], r) != 0) * \
                index.src[0].dtype.itemsize

        return sum(footprint(index) for index in loads if axis_stride(index.src[1], axis) == 0)


def choose_optimizations(kernel: Kernel, renderer: RendererContract) -> Choices:
    """Apply the heuristic's opts to `kernel`; returns what it chose."""
    heuristic = Heuristic(kernel, renderer)
    opts = heuristic.run()
    tiles = tuple(RegisterTile(kind, tuple(tile_opts)) for kind, tile_opts in heuristic.tiles.items())
    return Choices(tuple(opts), tiles, tuple(heuristic.notes))


def hand_coded_optimizations(kernel: Kernel, renderer: RendererContract) -> list[str]:
    """Apply the heuristic's opts to `kernel`; returns a readable line per opt applied (for people: code reads
    `choose_optimizations`)."""
    return list(choose_optimizations(kernel, renderer).notes)


def map_global_dims(kernel: Kernel, renderer: RendererContract) -> None:
    """On GPUs: one thread per output element; output loop axes become SPECIAL gidx0..2 (innermost is gidx0).

    Axes beyond three are merged into gidx2; an axis larger than the renderer's `global_max` stays a loop.
    """
    limits = tuple(renderer.global_max or (2 ** 31 - 1,) * 3)
    axes = [kernel.axes[i] for i in kernel.axes_of(AxisType.LOOP)]
    axes = [r for r in axes if range_size(r) is not None]
    if not axes:
        return
    groups: list[list[UOp]] = [[r] for r in reversed(axes[-2:])] if len(axes) > 2 else [[r] for r in reversed(axes)]
    if len(axes) > 2:
        groups.append(axes[:-2])
    dimension = 0
    for group in groups:
        sizes = [range_size(r) or 1 for r in group]
        total = prod(sizes)
        if dimension >= min(3, len(limits)) or total > limits[dimension]:
            continue
        special = UOp(Ops.SPECIAL, dtypes.int32, (UOp.const(dtypes.int32, total),), f"gidx{dimension}")
        stride = total
        for range_node, size in zip(group, sizes, strict=True):
            stride //= size
            expression = special if len(group) == 1 else (special // stride) % size
            kernel.ast = replace_range(kernel.ast, range_node, expression, ())
            kernel.axes.remove(range_node)
        dimension += 1
