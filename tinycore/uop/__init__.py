"""The IR: Ops, the hash-consed UOp, pattern matching and rewriting, and the symbolic engine."""
from tinycore.uop.ops import GroupOp, Ops
from tinycore.uop.patterns import PatternMatcher, UPat, graph_rewrite
from tinycore.uop.printer import pretty_print, print_uops_python, render_expr
from tinycore.uop.symbolic import Variable, resolve, sint, smax, smin, ssimplify, sym_infer, symbolic, symbolic_simple
from tinycore.uop.uop import UOp, exec_alu

__all__ = ["GroupOp", "Ops", "PatternMatcher", "UPat", "graph_rewrite", "pretty_print", "print_uops_python",
           "render_expr", "Variable", "resolve", "sint", "smax", "smin", "ssimplify", "sym_infer", "symbolic",
           "symbolic_simple", "UOp", "exec_alu"]
