"""The shared part of the SSA-register renderers (`tinycore.renderer.ssa`): constants' bits as numpy stores them, the
rules table, and the ALU, cast and scatter-combine walk on a toy language that writes one instruction per line.
(Codegen computes an emulated float in float32 before a renderer sees it: tests/unit/codegen covers that pass.)"""
from __future__ import annotations

import warnings

import numpy
import pytest

from tinycore.dtype import DType, dtypes
from tinycore.renderer.ssa import SSAContext, SSARenderer, fill_types, float_bits, identifier, ssa_rules
from tinycore.uop.ops import GroupOp, Ops
from tinycore.uop.uop import UOp


@pytest.mark.parametrize("value", [0.0, -0.0, 1.0, -2.5, 1 / 3, 65504.0, 1e-8, 1e6, -1e39, float("inf")])
def test_float_bits_are_numpys(value: float) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy warns where a value overflows to infinity
        expected = {dtypes.float16: int(numpy.float16(value).view(numpy.uint16)),
                    dtypes.float32: int(numpy.float32(value).view(numpy.uint32)),
                    dtypes.float64: int(numpy.float64(value).view(numpy.uint64))}
    assert {dtype: float_bits(value, dtype) for dtype in expected} == expected


def test_float_bits_of_bfloat16_are_the_rounded_upper_half() -> None:
    assert float_bits(1.0, dtypes.bfloat16) == 0x3F80
    assert float_bits(1.00390625, dtypes.bfloat16) == 0x3F80  # halfway: to even
    assert float_bits(1.01171875, dtypes.bfloat16) == 0x3F82  # halfway: to even, upward


def test_identifier_and_type_fields() -> None:
    assert identifier("n.1-x") == "n_1_x"
    assert fill_types(["add.{t} {r}, {a}, {0}", "neg.{t} {r}, {1}"], {"t": "s32"}, "ra") == \
        ("add.s32 {r}, {a}, {0}", "neg.s32 {r}, {1}")


class ToyContext(SSAContext):
    """A language of `%N = op type operands` lines that stores float16 but computes it in float32."""

    language, indent, emulated_floats = "TOY", "", frozenset({dtypes.float16})

    def fresh(self, code: str) -> str:
        self.emit(f"%{len(self.lines)} = {code}")
        return f"%{len(self.lines) - 1}"

    def constant(self, value: object, dtype: DType) -> str:
        return f"{value}:{dtype.name}"

    def arithmetic(self, op: Ops, operands: list[str], dtype: DType, count: int = 1) -> str:
        return self.fresh(f"{op.name.lower()} {dtype.name} {' '.join(operands)}")

    def compute(self, uop: UOp, operands: list[str], dtype: DType, count: int) -> str:
        return self.arithmetic(uop.op, operands, dtype, count)

    def convert(self, text: str, source: DType, target: DType, count: int = 1) -> str:
        return self.fresh(f"convert {source.name}->{target.name} {text}")


TOY_RULES = ssa_rules({Ops.DEFINE_VAR: lambda ctx, uop: f"%{uop.arg[0]}", tuple(GroupOp.ALU): ToyContext.alu,
                       Ops.CAST: ToyContext.cast,
                       Ops.SINK: lambda ctx, uop: None})


def _render(*uops: UOp) -> list[str]:
    context = ToyContext(list(uops))
    context.render_uops(TOY_RULES)
    return context.lines


def test_alu_computes_on_the_operands_dtype_and_where_on_its_values() -> None:
    x, flag = UOp(Ops.DEFINE_VAR, dtypes.int32, (), ("x", 0, 1)), UOp(Ops.DEFINE_VAR, dtypes.bool, (), ("f", 0, 1))
    total = x + UOp.const(dtypes.int32, 2)
    below = total < x
    chosen = below.where(total, x)
    assert _render(x, flag, total, below, chosen, UOp(Ops.SINK, dtypes.void, (chosen,))) == [
        "%0 = add int %x 2:int", "%1 = cmplt int %0 %x", "%2 = where int %1 %0 %x"]


def test_cast_converts_by_value_and_skips_no_op_casts() -> None:
    n = UOp(Ops.DEFINE_VAR, dtypes.int32, (), ("n", 0, 9))
    wide, same = n.cast(dtypes.float32), UOp(Ops.CAST, dtypes.int32, (n,))
    assert _render(n, wide, wide.cast(dtypes.int64), same) == [
        "%0 = convert int->float %n", "%1 = convert float->long %0"]


def test_combine_spells_min_as_a_compare_and_select_and_refuses_an_unknown_reduce() -> None:
    context = ToyContext([])
    assert context.combine("min", "%old", "%new", dtypes.int32) == "%1"
    assert context.combine("add", "%old", "%new", dtypes.float16) == "%5"  # emulated: combined in float32
    assert context.lines == ["%0 = cmplt int %new %old", "%1 = where int %0 %new %old", "%2 = convert half->float %old",
                             "%3 = convert half->float %new", "%4 = add float %2 %3", "%5 = convert float->half %4"]
    with pytest.raises(ValueError, match="unknown scatter reduce 'xor': expected add, mul, max or min"):
        context.combine("xor", "%old", "%new", dtypes.int32)


def test_a_uop_no_rule_renders_and_a_value_used_before_it_is_rendered_are_refused() -> None:
    with pytest.raises(ValueError, match="the TOY renderer cannot render Ops.RANGE"):
        _render(UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, 4),), 0))
    x = UOp(Ops.DEFINE_VAR, dtypes.float32, (), ("x", 0, 1))
    with pytest.raises(ValueError, match="used before it is rendered"):
        _render(x + x)


class ToyModule(ToyContext):
    """The toy language's module: the kernel's name over its lines."""

    def run(self, name: str) -> str:
        self.render_uops(self.renderer.string_rewrite if self.renderer is not None else None)
        return "\n".join([f"{name}:", *self.lines])


class ToyRenderer(SSARenderer):
    """The toy language as a renderer."""

    string_rewrite, context = TOY_RULES, ToyModule


def test_shared_rules_pass_values_through_and_the_renderer_names_the_kernel_from_its_sink() -> None:
    x = UOp(Ops.DEFINE_VAR, dtypes.int32, (), ("x", 0, 9))
    bound = UOp(Ops.BIND, dtypes.int32, (x, UOp.const(dtypes.int32, 3)))
    twice = UOp(Ops.NOOP, dtypes.int32, (bound,)) * UOp.const(dtypes.int32, 2)
    program = [x, bound, twice.src[0], twice, UOp(Ops.SINK, dtypes.void, (twice,), "doubled")]
    assert ToyRenderer().render(program) == "doubled:\n%0 = mul int %x 2:int"


def test_a_load_needs_an_index_first() -> None:
    buffer = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(), (), 0)
    load = UOp(Ops.LOAD, dtypes.float32, (buffer,))
    with pytest.raises(ValueError, match="LOAD needs an INDEX"):
        ToyContext([buffer, load]).pointer(load)
