"""Printing UOp graphs: a readable multi-line listing, a compact infix expression, and Python code.

- `pretty_print(root)`: one line per node, shared nodes printed once and referred to by name.
- `render_expr(root)`: an infix string such as `(a*4+b)//4` for index and mask expressions.
- `print_uops_python(root)`: Python source that rebuilds the graph (hash-consing makes it the same object).
"""
from __future__ import annotations

import enum
import math

from tinycore.dtype import DType, dtypes
from tinycore.uop.opcodes import Ops
from tinycore.uop.uop import UOp, upper


def pretty_print(root: UOp) -> str:
    """A multi-line rendering of the graph under `root`, each shared node printed once and referenced after."""
    names: dict[UOp, str] = {}
    lines = []
    for node in root.toposort:
        names[node] = f"x{len(names)}"
        sources = ", ".join(names[source] for source in node.src)
        if len(node.src) == 1:
            sources += ","
        lines.append(f"{names[node]} = UOp(Ops.{node.op.name}, {node.dtype!r}, ({sources}), {node.arg!r})")
    return "\n".join(lines) if len(lines) > 1 else lines[0]


# ---- infix expressions ----

# binding strength of each rendered form (Python's precedence order): higher binds tighter
_ATOM = 100
_UNARY = 7
_BINARY_SYMBOLS: dict[Ops, tuple[str, int]] = {
    Ops.MUL: ("*", 6), Ops.IDIV: ("//", 6), Ops.MOD: ("%", 6), Ops.FDIV: ("/", 6),
    Ops.ADD: ("+", 5), Ops.SUB: ("-", 5), Ops.SHL: ("<<", 4), Ops.SHR: (">>", 4),
    Ops.AND: ("&", 3), Ops.XOR: ("^", 2), Ops.OR: ("|", 1),
    Ops.CMPLT: ("<", 0), Ops.CMPNE: ("!=", 0), Ops.CMPEQ: ("==", 0)}
_ADDITIVE_STRENGTH = 5


def _const_text(value: object) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
    return repr(value)


def _name_of(node: UOp) -> str | None:
    """The display name of a leaf node (variables, ranges, thread indices), or None."""
    if node.op is Ops.DEFINE_VAR:
        return str(node.arg[0])
    if node.op is Ops.BIND:
        return str(node.src[0].arg[0])
    if node.op is Ops.RANGE:
        axis = node.arg[0] if isinstance(node.arg, tuple) else node.arg
        return f"ridx{axis}"
    if node.op is Ops.SPECIAL:
        return str(node.arg)
    if node.op is Ops.DEFINE_GLOBAL:
        return f"data{node.arg}"
    return None


def _negative_constant(node: UOp) -> bool:
    return node.op is Ops.CONST and not isinstance(node.arg, bool) and node.arg < 0


def _wrap(text: str, strength: int, needed: int) -> str:
    return text if strength >= needed else f"({text})"


def render_expr(root: UOp) -> str:
    """A compact infix rendering of `root`, e.g. `(a*4+b)//4`, `ridx0*3+ridx1`, `(x<4)&(y<3)`.

    Sums of negative terms render as subtraction (`a-b*2`, `a-3`), multiplication by -1 as negation, boolean
    `x != True` as `!x`; other ops render as calls (`max(a,b)`, `where(c,a,b)`, `float(x)`).
    """
    rendered: dict[UOp, tuple[str, int]] = {}
    for node in root.toposort:
        rendered[node] = _render_node(node, rendered)
    return rendered[root][0]


def _render_node(node: UOp, rendered: dict[UOp, tuple[str, int]]) -> tuple[str, int]:
    """(text, binding strength) of one node from its rendered sources."""
    op = node.op
    name = _name_of(node)
    if name is not None:
        return name, _ATOM
    if op is Ops.CONST:
        text = _const_text(node.arg)
        return text, _ATOM if not text.startswith("-") else _UNARY
    sources = [rendered[source] for source in node.src]
    if op is Ops.MUL and node.src[1].op is Ops.CONST and node.src[1].arg == -1 and node.dtype != dtypes.bool:
        return "-" + _wrap(sources[0][0], sources[0][1], _UNARY), _UNARY
    if op is Ops.NEG:
        return "-" + _wrap(sources[0][0], sources[0][1], _UNARY), _UNARY
    if op is Ops.CMPNE and node.dtype == dtypes.bool and node.src[1].op is Ops.CONST and node.src[1].arg is True:
        return "!" + _wrap(sources[0][0], sources[0][1], _ATOM), _UNARY
    if op is Ops.ADD:
        right = node.src[1]
        if right.op is Ops.NEG:
            left_text = _wrap(sources[0][0], sources[0][1], _ADDITIVE_STRENGTH)
            negated = rendered[right.src[0]]
            return f"{left_text}-{_wrap(negated[0], negated[1], _ADDITIVE_STRENGTH + 1)}", _ADDITIVE_STRENGTH
        if _negative_constant(right):
            left_text = _wrap(sources[0][0], sources[0][1], _ADDITIVE_STRENGTH)
            return f"{left_text}-{_const_text(-right.arg)}", _ADDITIVE_STRENGTH
        if right.op is Ops.MUL and _negative_constant(right.src[1]):
            left_text = _wrap(sources[0][0], sources[0][1], _ADDITIVE_STRENGTH)
            factor = rendered[right.src[0]]
            magnitude = -right.src[1].arg
            term = _wrap(factor[0], factor[1], 6) + ("" if magnitude == 1 else f"*{_const_text(magnitude)}")
            return f"{left_text}-{term}", _ADDITIVE_STRENGTH
    if op in _BINARY_SYMBOLS and len(sources) == 2:
        symbol, strength = _BINARY_SYMBOLS[op]
        left = _wrap(sources[0][0], sources[0][1], strength)
        right_text = _wrap(sources[1][0], sources[1][1], strength + 1)
        return f"{left}{symbol}{right_text}", strength
    if op is Ops.CAST:
        return f"{_dtype_word(node.dtype)}({sources[0][0]})", _ATOM
    arguments = ",".join(text for text, _ in sources)
    if op is Ops.WHERE:
        return f"where({arguments})", _ATOM
    if op is Ops.MAX:
        return f"max({arguments})", _ATOM
    suffix = "" if node.arg is None else (";" if arguments else "") + repr(node.arg)
    return f"{op.name.lower()}({arguments}{suffix})", _ATOM


def _dtype_word(dtype: DType) -> str:
    return repr(dtype).replace("dtypes.", "")


# ---- Python code ----

def _python_literal(value: object, imports: set[str]) -> str:
    """Python source evaluating to `value` (DTypes, Ops and other enums, infinities and nested tuples)."""
    if isinstance(value, DType):
        imports.add("from tinycore.dtype import dtypes")
        return repr(value)
    if isinstance(value, enum.Enum):
        imports.add(f"from {type(value).__module__} import {type(value).__name__}")
        return f"{type(value).__name__}.{value.name}"
    if isinstance(value, float) and not math.isfinite(value):
        imports.add("import math")
        return "math.nan" if math.isnan(value) else ("math.inf" if value > 0 else "-math.inf")
    if isinstance(value, tuple):
        items = [_python_literal(item, imports) for item in value]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    if isinstance(value, list):
        return "[" + ", ".join(_python_literal(item, imports) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_python_literal(key, imports)}: {_python_literal(item, imports)}"
                               for key, item in value.items()) + "}"
    text = repr(value)
    if value is not None and not isinstance(value, (int, str, bool, float, bytes)):
        raise TypeError(f"print_uops_python cannot write an arg of type {type(value).__name__} ({text}) as code")
    return text


def print_uops_python(root: UOp, result_name: str = "result") -> str:
    """Python source that rebuilds the graph under `root` and assigns it to `result_name`.

    Executing the code gives back the same UOp object (nodes are hash-consed), which makes it a faithful,
    copy-pasteable reproduction of a graph for bug reports and tests.
    """
    imports = {"from tinycore.uop.ops import Ops", "from tinycore.uop.uop import UOp",
               "from tinycore.dtype import dtypes"}
    names: dict[UOp, str] = {}
    body = []
    for node in root.toposort:
        names[node] = f"n{len(names)}"
        sources = ", ".join(names[source] for source in node.src) + ("," if len(node.src) == 1 else "")
        body.append(f"{names[node]} = UOp(Ops.{node.op.name}, {_python_literal(node.dtype, imports)}, ({sources}), "
                    f"{_python_literal(node.arg, imports)})")
    body.append(f"{result_name} = {names[root]}")
    return "\n".join(sorted(imports)) + "\n\n" + "\n".join(body) + "\n"


# UOp's repr and render() call these through the table in tinycore.uop.uop
upper.pretty_print, upper.render_expr = pretty_print, render_expr
