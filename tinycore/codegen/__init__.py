"""Codegen: a kernel AST (SINK of STOREs over RANGEs) -> an optimized, linearized program -> a ProgramSpec.

    opts (heuristic or given) -> expand (upcast/unroll/accumulators, vector packing) -> linearize (loops, accumulators,
    placement, order) -> renderer.to_program

See docs/architecture.md, "Kernel-level graph", for the input and output contracts.
"""
from __future__ import annotations

from dataclasses import replace

from tinycore.codegen.atomics import resolve_combining_stores
from tinycore.codegen.expand import expand
from tinycore.codegen.gpu import gpu_optimize
from tinycore.codegen.linearize import linearize_stores
from tinycore.codegen.opt import Kernel, KernelOptError, Opt, OptOps
from tinycore.codegen.optimize import choose_optimizations, vector_width
from tinycore.codegen.row_values import share_row_values
from tinycore.codegen.transcendental import decompose_transcendentals
from tinycore.dtype import DType
from tinycore.helpers import DEBUG, NOOPT
from tinycore.plugins.contract import RendererContract
from tinycore.renderer.renderer import ProgramSpec, Renderer
from tinycore.uop.axis import AxisType
from tinycore.uop.ops import Ops
from tinycore.uop.symbolic import simplify, simplify_indices
from tinycore.uop.uop import UOp
from tinycore.viz import hook as _viz


def optimize_kernel(ast: UOp, renderer: RendererContract, opts: list[Opt] | None = None) -> Kernel:
    """The kernel of `ast` with `opts` applied, or the heuristic's choice when `opts` is None (none with NOOPT=1)."""
    kernel = Kernel(resolve_combining_stores(ast, renderer))
    if opts is not None:
        kernel.apply_opts(list(opts))
        notes = [repr(opt) for opt in opts]
    elif NOOPT:
        notes = []
    else:
        choices = choose_optimizations(kernel, renderer)
        notes = list(choices.notes)
        if renderer.has_threads and not choices.tiles:
            # no register tile: the axes its indices divide may hide one (a product over a merged axis)
            candidate = Kernel(kernel.original_ast)
            try:
                candidate.apply_opt(Opt(OptOps.SPLIT_AXES, 0, 0))  # recorded, so the opts replay the split
            except KernelOptError:
                pass
            else:
                candidate_choices = choose_optimizations(candidate, renderer)
                if candidate_choices.tiles:
                    kernel = candidate
                    notes = [*candidate_choices.notes, "axes split where their indices divide them"]
    if renderer.has_local and not renderer.has_threads:
        notes += gpu_optimize(kernel, renderer, choose=opts is None and not NOOPT)
    if renderer.has_threads:
        kernel, shared = share_row_values(kernel)
        notes += shared
    if DEBUG >= 3:
        print(f"{kernel.name()}: " + (", ".join(notes) if notes else "no optimizations"))
    return kernel


def linearize(ast: UOp, renderer: RendererContract, opts: list[Opt] | None = None) -> list[UOp]:
    """The linear program (list of UOps in execution order, ending in a SINK named after the kernel) of `ast`."""
    return _linearize_kernel(ast, renderer, opts)[1]


def _linearize_kernel(ast: UOp, renderer: RendererContract, opts: list[Opt] | None) -> tuple[Kernel, list[UOp]]:
    kernel = optimize_kernel(ast, renderer, opts)
    optimized = decompose_transcendentals(kernel.ast, renderer.fused_multiply_add) if \
        renderer.decompose_transcendentals else kernel.ast
    stores = expand(decided_selects(simplify_indices(optimized)), lambda dtype: vector_width(renderer, dtype),
                    lambda dtype, width: renderer_supports_vector(renderer, dtype, width), renderer.vector_masks,
                    renderer.masked_load_dtypes)
    return kernel, linearize_stores(stores, renderer, _kernel_name(ast, kernel))


def decided_selects(root: UOp) -> UOp:
    """`root` with every WHERE whose condition is index arithmetic that its bounds decide (a padding check that
    always holds, say `oy + 65*ky < 192` of a convolution) replaced by the branch taken. Opts can hide such a
    condition from the folding that expansion does (a SHIFTED_UPCAST's min() start), and a vector select per load
    would stay in the inner loop."""
    memo: dict[UOp, UOp] = {}
    for node in root.toposort:
        new_src = tuple(memo[source] for source in node.src)
        rebuilt = node if new_src == node.src else node.replace(src=new_src)
        if rebuilt.op is Ops.WHERE and rebuilt.src[0].dtype.count == 1 and \
                all(leaf.op not in (Ops.LOAD, Ops.REDUCE) for leaf in rebuilt.src[0].toposort):
            decided = simplify(rebuilt.src[0])
            if decided.op is Ops.CONST:
                rebuilt = rebuilt.src[1] if decided.arg else rebuilt.src[2]
        memo[node] = rebuilt
    return memo[root]


def renderer_supports_vector(renderer: RendererContract, dtype: DType, width: int) -> bool:
    """True when the renderer declares vectors of `width` lanes of scalar `dtype` (Renderer.supports_vector)."""
    return renderer.supports_vector(dtype, width)


def _kernel_name(ast: UOp, kernel: Kernel) -> str:
    arg = ast.arg
    given = arg if isinstance(arg, str) else getattr(arg, "name", None)
    return given if isinstance(given, str) and given else kernel.name()


def lower_to_program(ast: UOp, renderer: Renderer, opts: list[Opt] | None = None) -> ProgramSpec:
    """The ProgramSpec of the kernel `ast` rendered by `renderer` (see linearize for `opts`)."""
    if _viz.ENABLED:
        from tinycore.viz import record
        record.kernel_begin(ast)
    kernel, uops = _linearize_kernel(ast, renderer, opts)
    spec = renderer.to_program(uops, uops[-1].arg)
    if _viz.ENABLED:
        from tinycore.viz import record
        record.kernel_end(ast, kernel.ast, spec, uops, renderer)
    if kernel.recomputed != 1.0:
        # the estimates count the work the program does; GFLOPS figures divide the work the kernel needs
        estimates = spec.estimates
        spec.estimates = replace(estimates, ops=round(estimates.ops / kernel.recomputed),
                                 lds=round(estimates.lds / kernel.recomputed))
    return spec


__all__ = ["lower_to_program", "linearize", "optimize_kernel", "Kernel", "Opt", "OptOps", "AxisType"]
