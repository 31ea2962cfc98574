"""Codegen: a kernel AST (SINK of STOREs over RANGEs) -> an optimized, linearized program -> a ProgramSpec.

    opts (heuristic or given) -> expand (upcast/unroll/accumulators, vector packing) -> linearize (loops, accumulators,
    placement, order) -> renderer.to_program

See docs/architecture.md, "Kernel-level graph", for the input and output contracts.
"""
from __future__ import annotations

from tinycore.codegen.atomics import resolve_combining_stores
from tinycore.codegen.expand import expand
from tinycore.codegen.gpu import gpu_optimize
from tinycore.codegen.linearize import linearize_stores
from tinycore.codegen.opt import Kernel, Opt, OptOps
from tinycore.codegen.optimize import hand_coded_optimizations, vector_width
from tinycore.codegen.transcendental import decompose_transcendentals
from tinycore.dtype import DType
from tinycore.helpers import DEBUG, NOOPT
from tinycore.plugins.contract import RendererContract
from tinycore.renderer.renderer import ProgramSpec, Renderer
from tinycore.uop.axis import AxisType
from tinycore.uop.symbolic import simplify_indices
from tinycore.uop.uop import UOp


def optimize_kernel(ast: UOp, renderer: RendererContract, opts: list[Opt] | None = None) -> Kernel:
    """The kernel of `ast` with `opts` applied, or the heuristic's choice when `opts` is None (none with NOOPT=1)."""
    kernel = Kernel(resolve_combining_stores(ast, renderer))
    if opts is not None:
        kernel.apply_opts(list(opts))
        notes = [repr(opt) for opt in opts]
    elif NOOPT:
        notes = []
    else:
        notes = hand_coded_optimizations(kernel, renderer)
    if renderer.has_local and not renderer.has_threads:
        notes += gpu_optimize(kernel, renderer, choose=opts is None and not NOOPT)
    if DEBUG >= 3:
        print(f"{kernel.name()}: " + (", ".join(notes) if notes else "no optimizations"))
    return kernel


def linearize(ast: UOp, renderer: RendererContract, opts: list[Opt] | None = None) -> list[UOp]:
    """The linear program (list of UOps in execution order, ending in a SINK named after the kernel) of `ast`."""
    kernel = optimize_kernel(ast, renderer, opts)
    optimized = decompose_transcendentals(kernel.ast) if renderer.decompose_transcendentals else kernel.ast
    stores = expand(simplify_indices(optimized), lambda dtype: vector_width(renderer, dtype),
                    lambda dtype, width: renderer_supports_vector(renderer, dtype, width), renderer.vector_masks)
    return linearize_stores(stores, renderer, _kernel_name(ast, kernel))


def renderer_supports_vector(renderer: RendererContract, dtype: DType, width: int) -> bool:
    """True when the renderer declares vectors of `width` lanes of scalar `dtype` (Renderer.supports_vector)."""
    return renderer.supports_vector(dtype, width)


def _kernel_name(ast: UOp, kernel: Kernel) -> str:
    arg = ast.arg
    given = arg if isinstance(arg, str) else getattr(arg, "name", None)
    return given if isinstance(given, str) and given else kernel.name()


def lower_to_program(ast: UOp, renderer: Renderer, opts: list[Opt] | None = None) -> ProgramSpec:
    """The ProgramSpec of the kernel `ast` rendered by `renderer` (see linearize for `opts`)."""
    uops = linearize(ast, renderer, opts)
    return renderer.to_program(uops, uops[-1].arg)


__all__ = ["lower_to_program", "linearize", "optimize_kernel", "Kernel", "Opt", "OptOps", "AxisType"]
