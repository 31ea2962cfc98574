"""The pass "narrow floats": ops on a dtype the renderer only stores are computed in float32 (rules and results)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from tinycore import Tensor, dtypes
from tinycore.codegen.narrow_floats import compute_narrow_floats
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp

BF16, F32, I32 = dtypes.bfloat16, dtypes.float32, dtypes.int32
EMULATED = frozenset({BF16})


def _load(position: int, dtype=BF16) -> UOp:
    buffer = UOp(Ops.DEFINE_GLOBAL, dtype.ptr(4), (), position)
    return buffer.index(UOp.const(I32, 0)).load()


def _stored(value: UOp) -> UOp:
    """The value the one store of the rewritten program writes."""
    out = UOp(Ops.DEFINE_GLOBAL, value.dtype.ptr(4), (), 0)
    return compute_narrow_floats([out.index(UOp.const(I32, 0)).store(value)], EMULATED)[0].src[1]


def test_an_op_is_computed_in_float32_and_rounded_back_with_constants_as_float32():
    a, b = _load(1), _load(2)
    result = _stored(a.alu(Ops.MUL, b).alu(Ops.ADD, UOp.const(BF16, 1.5)))
    assert result.op is Ops.CAST and result.dtype == BF16
    add = result.src[0]
    assert add.op is Ops.ADD and add.dtype == F32
    assert add.src[1].op is Ops.CONST and add.src[1].dtype == F32 and add.src[1].arg == 1.5
    rounded_product = add.src[0]  # the product is rounded to bfloat16 before the sum, as torch rounds each op
    assert rounded_product.op is Ops.CAST and rounded_product.dtype == F32 and rounded_product.src[0].dtype == BF16
    multiply = rounded_product.src[0].src[0]
    assert multiply.op is Ops.MUL and multiply.dtype == F32
    assert [source.src[0] for source in multiply.src] == [a, b]


def test_comparisons_are_not_cast_back_and_selects_keep_their_bits():
    a, b = _load(1), _load(2)
    compared = _stored(a.alu(Ops.CMPLT, b))
    assert compared.op is Ops.CMPLT and compared.dtype == dtypes.bool
    assert all(source.op is Ops.CAST and source.dtype == F32 for source in compared.src)
    selected = _stored(UOp(Ops.WHERE, BF16, (_load(3, dtypes.bool), a, b)))
    assert selected.op is Ops.WHERE and selected.src[1:] == (a, b)


def test_casts_to_and_from_other_dtypes_go_through_float32_and_constants_become_float32_casts():
    to_int = _stored(_load(1).cast(I32))
    assert to_int.op is Ops.CAST and to_int.src[0].dtype == F32 and to_int.src[0].src[0].dtype == BF16
    from_int = _stored(_load(1, I32).cast(BF16))
    assert from_int.src[0].op is Ops.CAST and from_int.src[0].dtype == F32 and from_int.src[0].src[0].dtype == I32
    constant = _stored(UOp.const(BF16, 3.14159))
    assert constant.op is Ops.CAST and constant.src[0].op is Ops.CONST and constant.src[0].dtype == F32
    assert constant.src[0].arg == 3.140625  # the bfloat16 value (0x4049), exactly
    untouched = _stored(_load(1, F32).alu(Ops.ADD, _load(2, F32)))
    assert untouched.op is Ops.ADD and untouched.dtype == F32


@pytest.mark.parametrize("op", ["add", "mul", "sub", "div", "maximum", "__lt__", "sqrt", "neg", "sum"])
def test_bfloat16_results_match_torch(op):
    rng = np.random.default_rng(0)
    left, right = rng.uniform(0.5, 4.0, 37).astype(np.float32), rng.uniform(0.5, 4.0, 37).astype(np.float32)
    ours_l, ours_r = Tensor(left).cast(dtypes.bfloat16), Tensor(right).cast(dtypes.bfloat16)
    torch_l, torch_r = torch.tensor(left).bfloat16(), torch.tensor(right).bfloat16()
    unary = {"sqrt": lambda x: x.sqrt(), "neg": lambda x: -x, "sum": lambda x: x.sum()}
    if op in unary:
        ours, expected = unary[op](ours_l), unary[op](torch_l)
    else:
        ours, expected = getattr(ours_l, op)(ours_r), getattr(torch_l, op)(torch_r)
    got = ours.float().numpy() if ours.dtype != dtypes.bool else ours.numpy()
    wanted = expected.float().numpy() if expected.dtype != torch.bool else expected.numpy()
    # sum: torch accumulates in float32 and rounds once; ours rounds each partial sum to bfloat16
    np.testing.assert_allclose(got, wanted, rtol=0.02 if op == "sum" else 0, atol=0)


def test_a_c_style_renderer_refuses_an_op_on_an_emulated_dtype_left_unrewritten():
    from tinycore.renderer import CStyleLanguage
    renderer = CStyleLanguage()
    with pytest.raises(ValueError, match="narrow floats"):
        renderer.render_math(Ops.ADD, ["a", "b"], BF16)
    assert renderer.render_math(Ops.WHERE, ["c", "a", "b"], BF16) == "(c?a:b)"
    assert renderer.render_cast("x", BF16, F32) == "tc_bf16_to_f32(x)"


def test_codegen_runs_the_pass_for_a_renderer_that_declares_emulated_floats(monkeypatch: pytest.MonkeyPatch):
    from codegen_kernels import ScalarRenderer, buffer, loop

    from tinycore.codegen import linearize
    from tinycore.codegen.interpreter import run_linear
    from tinycore.viz import hook

    class Emulating(ScalarRenderer):
        emulated_floats = EMULATED
    names: list[str] = []

    def record(run, sink, matcher, ctx, bottom_up, name):
        names.append(name)
        return run(sink, matcher, ctx, bottom_up, name)
    monkeypatch.setattr(hook, "REWRITE", record)
    i = loop(8, 0)
    out, a = buffer(0, F32, 8), buffer(1, F32, 8)
    value = (a.index(i * 1).load().cast(BF16) * UOp.const(BF16, 3.0)).alu(Ops.ADD, UOp.const(BF16, 0.1)).cast(F32)
    uops = linearize(out.index(i * 1).store(value).sink(), Emulating(), [])
    order = [name for name in names if name in ("devectorize", "narrow floats", "renderer: post")]
    assert order[:2] == ["devectorize", "narrow floats"]
    assert not [uop for uop in uops if uop.op in (Ops.MUL, Ops.ADD) and uop.dtype.scalar == BF16]
    data, result = np.linspace(-2, 2, 8, dtype=np.float32), np.zeros(8, np.float32)
    run_linear(uops, [result, data])
    expected = ((torch.tensor(data).bfloat16() * 3) + torch.tensor(0.1).bfloat16()).float().numpy()
    np.testing.assert_array_equal(result, expected)
