"""tinygrad's module name for the IR: the operations with the IR's classes and functions.

tinygrad programs import them from here (`from tinygrad.uop.ops import UOp, Ops, GroupOp, sym_infer`). The modules
of the IR import the operations from `tinycore.uop.opcodes` instead, and this module imports them all, so it sits
above the whole IR.
"""
from tinycore.uop.opcodes import FUSED, GroupOp, Ops
from tinycore.uop.patterns import PatternMatcher, UPat, graph_rewrite
from tinycore.uop.symbolic import Variable, resolve, sint, smax, smin, ssimplify, sym_infer
from tinycore.uop.uop import UOp, exec_alu

__all__ = ["Ops", "GroupOp", "FUSED", "UOp", "exec_alu", "UPat", "PatternMatcher", "graph_rewrite", "Variable",
           "sym_infer", "resolve", "smax", "smin", "ssimplify", "sint"]
