"""Renderers as rules: a language's rules go in front of the C-style base's (`string_rewrite`), take the UOps they
match and leave the rest to the base by returning None; the plugin template's rule compiles and gives numpy's
answer."""
from __future__ import annotations

import ctypes
import sys
import tempfile
from pathlib import Path

import numpy
import pytest

from tinycore.dtype import dtypes
from tinycore.renderer.cstyle import CStyleLanguage, RenderContext, base_rendering
from tinycore.renderer.renderer import text_rules
from tinycore.uop.ops import Ops
from tinycore.uop.patterns import PatternMatcher, UPat
from tinycore.uop.uop import UOp

I32, F32 = dtypes.int32, dtypes.float32
TEMPLATE = Path(__file__).resolve().parents[3] / "examples" / "plugin-template"


def _float_multiply(ctx: RenderContext, x: UOp) -> str | None:
    if x.dtype.scalar != F32:
        return None
    return ctx.bind(x, f"fmul({ctx.expression(x.src[0])},{ctx.expression(x.src[1])})")


class FmulLanguage(CStyleLanguage):
    """A dialect that spells float products as a function call and everything else as the base does."""

    device = "TESTRULES"
    string_rewrite = text_rules([(UPat(Ops.MUL, name="x"), _float_multiply)]) + base_rendering


def _program() -> list[UOp]:
    """data0[i] = data1[i*3] * data1[i*3], for i in 0..7 (a loop)."""
    out, data = UOp(Ops.DEFINE_GLOBAL, F32.ptr(8), (), 0), UOp(Ops.DEFINE_GLOBAL, F32.ptr(24), (), 1)
    loop = UOp(Ops.RANGE, I32, (UOp.const(I32, 8),), 0)
    value = data.index(loop * 3).load()
    store = out.index(loop).store(value * value)
    order: dict[UOp, None] = {}
    for node in store.toposort:
        order.setdefault(node, None)
    return [*order, UOp(Ops.END, dtypes.void, (store, loop))]


def test_language_rule_takes_float_products_and_leaves_index_products_to_the_base() -> None:
    source = FmulLanguage().render_named(_program(), "square")
    assert source == ("void square(float* data0, const float* data1) {\n"
                      "  for (int ridx0 = 0; ridx0 < 8; ridx0++) {\n"
                      "    float val0 = data1[(ridx0*3)];\n"
                      "    data0[ridx0] = fmul(val0,val0);\n"
                      "  }\n"
                      "}\n")


def test_the_base_alone_renders_the_product_with_an_operator() -> None:
    assert "data0[ridx0] = (val0*val0);" in CStyleLanguage().render_named(_program(), "square")


def test_an_op_no_rule_renders_is_refused_with_its_name() -> None:
    class NoLoads(CStyleLanguage):
        string_rewrite = text_rules([(UPat(Ops.LOAD), lambda: None)]) + PatternMatcher(
            [rule for rule in base_rendering.patterns if rule[0].op != (Ops.LOAD,)])
    with pytest.raises(ValueError, match="NoLoads cannot render Ops.LOAD"):
        NoLoads().render_named(_program(), "square")


def test_plugin_template_rule_isnan_matches_numpy() -> None:
    """The template's rule writes x != x as isnan(x); the kernel built by the system compiler agrees with numpy."""
    sys.path.insert(0, str(TEMPLATE))
    try:
        from tiny_python_template.c_renderer import make_c_renderer
    finally:
        sys.path.remove(str(TEMPLATE))
    try:
        renderer, compiler = make_c_renderer("PYTHON", None)
    except RuntimeError as error:
        pytest.skip(str(error))  # no C compiler on this machine
    data = UOp(Ops.DEFINE_GLOBAL, F32.ptr(6), (), 1)
    out = UOp(Ops.DEFINE_GLOBAL, dtypes.bool.ptr(6), (), 0)
    loop = UOp(Ops.RANGE, I32, (UOp.const(I32, 6),), 0)
    value = data.index(loop).load()
    store = out.index(loop).store(value.ne(value))
    order: dict[UOp, None] = {}
    for node in store.toposort:
        order.setdefault(node, None)
    source = renderer.render_named([*order, UOp(Ops.END, dtypes.void, (store, loop))], "nan_test")
    assert "isnan(val0)" in source and "!=" not in source
    values = numpy.array([1.0, numpy.nan, -numpy.inf, 0.0, -numpy.nan, 3.5], dtype=numpy.float32)
    result = numpy.zeros(6, dtype=numpy.bool_)
    with tempfile.NamedTemporaryFile(suffix=".so") as library:
        library.write(compiler.compile(source))
        library.flush()
        kernel = ctypes.CDLL(library.name).nan_test
        kernel(ctypes.c_void_p(result.ctypes.data), ctypes.c_void_p(values.ctypes.data))
    numpy.testing.assert_array_equal(result, numpy.isnan(values))
