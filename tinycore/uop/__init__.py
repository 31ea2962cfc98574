"""The IR: Ops, the hash-consed UOp, pattern matching and rewriting, and the symbolic engine.

The rule sets live in `tinycore.uop.symbolic` (`from tinycore.uop.symbolic import symbolic`); they are not
re-exported here so that the module name `tinycore.uop.symbolic` keeps meaning the module.

opcodes, shape and uop define the node; printer, symbolic and multi, above it, fill the functions UOp's methods
call (`tinycore.uop.uop.upper`) when imported. Importing any part of the IR runs this file first, so they are all set.
"""
from tinycore.uop import multi  # noqa: F401 - fills UOp's multi-device entries
from tinycore.uop.opcodes import GroupOp, Ops
from tinycore.uop.patterns import PatternMatcher, UPat, graph_rewrite
from tinycore.uop.printer import pretty_print, print_uops_python, render_expr
from tinycore.uop.symbolic import Variable, resolve, sint, smax, smin, ssimplify, sym_infer
from tinycore.uop.uop import UOp, exec_alu

__all__ = ["GroupOp", "Ops", "PatternMatcher", "UPat", "graph_rewrite", "pretty_print", "print_uops_python",
           "render_expr", "Variable", "resolve", "sint", "smax", "smin", "ssimplify", "sym_infer", "UOp", "exec_alu"]
