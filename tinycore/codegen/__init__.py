"""Codegen: a kernel AST (SINK of STOREs over RANGEs) -> an optimized, linearized program -> a ProgramSpec.

    opts (heuristic or given) -> named passes (`_linearize_kernel`: renderer pre-rules, transcendentals, index folding,
    decided selects, reduce expansion, store expansion, int8 dot products, renderer extra-rules) -> linearize (loop
    tree, accumulators, devectorize, renderer post-rules, placement, order) -> renderer.to_program

See docs/architecture.md, "Codegen, pass by pass", for the passes and "Kernel-level graph" for the contracts.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from tinycore.codegen.atomics import resolve_combining_stores
from tinycore.codegen.expand import Expander, expand_stores, reduce_expansion_rules
from tinycore.codegen.gpu import gpu_optimize
from tinycore.codegen.indexing import IndexFolding, decided_select_rules, index_rules
from tinycore.codegen.int8_dot import int8_dot_rules
from tinycore.codegen.linearize import linearize_stores
from tinycore.codegen.opt import Kernel, KernelOptError, Opt, OptOps
from tinycore.codegen.optimize import choose_optimizations, vector_width
from tinycore.codegen.row_values import share_row_values
from tinycore.codegen.transcendental import fused_transcendental_rules, transcendental_rules
from tinycore.dtype import DType
from tinycore.helpers import DEBUG, NOOPT
from tinycore.plugins.contract import RendererContract
from tinycore.renderer.renderer import ProgramSpec, Renderer
from tinycore.uop.axis import AxisType
from tinycore.uop.patterns import graph_rewrite
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
    """Codegen's pipeline: each step a named pass over the kernel's graph (rules, or a graph algorithm where rules
    cannot say it), in order. docs/architecture.md lists them."""
    kernel = optimize_kernel(ast, renderer, opts)
    sink = kernel.ast
    if renderer.pre_matcher is not None:
        sink = graph_rewrite(sink, renderer.pre_matcher, renderer, name="renderer: pre")
    if renderer.decompose_transcendentals:
        sink = graph_rewrite(sink, fused_transcendental_rules if renderer.fused_multiply_add else
                             transcendental_rules, name="decompose transcendentals")
    sink = graph_rewrite(sink, index_rules, IndexFolding(), name="fold indices")
    sink = graph_rewrite(sink, decided_select_rules, name="decided selects")
    expander = Expander(lambda dtype: vector_width(renderer, dtype),
                        lambda dtype, width: renderer_supports_vector(renderer, dtype, width), renderer.vector_masks,
                        renderer.masked_load_dtypes)
    sink = graph_rewrite(sink, reduce_expansion_rules, expander, name="expand reduces")
    sink = _graph_step("expand stores", lambda stores: expand_stores(stores, expander), sink)
    if renderer.int8_dot_products:
        sink = graph_rewrite(sink, int8_dot_rules, name="int8 dot products")
    if renderer.extra_matcher is not None:
        sink = graph_rewrite(sink, renderer.extra_matcher, renderer, name="renderer: extra")
    # the rest (loop tree, accumulators, devectorize, renderer: post, placement, order) is linearize's
    return kernel, linearize_stores(list(sink.src), renderer, _kernel_name(ast, kernel))


def _graph_step(name: str, step: Callable[[UOp], UOp], sink: UOp) -> UOp:
    """`step(sink)`: a pass that is a graph algorithm, not rules (one store becoming many, grouped into vector
    stores), recorded under `name` with VIZ=1 as a graph_rewrite pass is."""
    result = step(sink)
    if _viz.ENABLED:
        _viz.step(name, result, sink)
    return result


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
        _viz.kernel_begin(ast)
    kernel, uops = _linearize_kernel(ast, renderer, opts)
    spec = renderer.to_program(uops, uops[-1].arg)
    if _viz.ENABLED:
        _viz.kernel_end(ast, kernel.ast, spec, uops, renderer)
    if kernel.recomputed != 1.0:
        # the estimates count the work the program does; GFLOPS figures divide the work the kernel needs
        estimates = spec.estimates
        spec.estimates = replace(estimates, ops=round(estimates.ops / kernel.recomputed),
                                 lds=round(estimates.lds / kernel.recomputed))
    return spec


__all__ = ["lower_to_program", "linearize", "optimize_kernel", "Kernel", "Opt", "OptOps", "AxisType"]
