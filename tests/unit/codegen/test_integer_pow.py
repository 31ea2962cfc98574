"""The pass "integer pow in floats": a POW of integers is computed in the renderer's float dtype and converted back."""
from __future__ import annotations

import numpy as np

from tinycore.codegen.integer_pow import integer_pow_rules
from tinycore.dtype import dtypes
from tinycore.uop.ops import Ops
from tinycore.uop.patterns import graph_rewrite
from tinycore.uop.uop import UOp

I32, F32, F64 = dtypes.int32, dtypes.float32, dtypes.float64


def _variable(name: str, dtype=I32) -> UOp:
    return UOp(Ops.DEFINE_VAR, dtype, (), (name, -8, 8))


def test_an_integer_pow_is_a_float_pow_converted_back():
    base, exponent = _variable("b"), _variable("e")
    lowered = graph_rewrite(base.alu(Ops.POW, exponent), integer_pow_rules(F32))
    assert lowered.op is Ops.CAST and lowered.dtype == I32
    assert lowered.src[0].op is Ops.POW and lowered.src[0].dtype == F32
    assert [(source.op, source.dtype, source.src[0]) for source in lowered.src[0].src] == \
        [(Ops.CAST, F32, base), (Ops.CAST, F32, exponent)]


def test_vector_lanes_are_kept_and_float_pows_are_left_alone():
    lanes = UOp(Ops.VECTORIZE, I32.vec(4), tuple(_variable(f"v{lane}") for lane in range(4)))
    lowered = graph_rewrite(lanes.alu(Ops.POW, lanes), integer_pow_rules(F64))
    assert lowered.dtype == I32.vec(4) and lowered.src[0].dtype == F64.vec(4)
    single = _variable("f", F32)
    assert graph_rewrite(single.alu(Ops.POW, single), integer_pow_rules(F64)) is single.alu(Ops.POW, single)


def test_the_lowered_program_computes_numpys_integer_powers():
    bases, exponents = np.array([2, -3, 5, 0, 7, -2], np.int32), np.array([3, 3, 0, 4, 2, 5], np.int32)
    base, exponent = _variable("b"), _variable("e")
    lowered = graph_rewrite(base.alu(Ops.POW, exponent), integer_pow_rules(F32))
    computed = [lowered.substitute({base: UOp.const(I32, int(b)), exponent: UOp.const(I32, int(e))}).simplify().arg
                for b, e in zip(bases, exponents, strict=True)]
    assert computed == (bases ** exponents).tolist()
