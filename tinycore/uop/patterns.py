"""Pattern matching and graph rewriting: UPat, PatternMatcher and graph_rewrite.

A `UPat` describes the shape of a UOp subgraph (op, dtype, sources, arg) and names the parts a rule needs. A
`PatternMatcher` is a list of `(UPat, callable)` rules; it indexes the rules by the op of their root so the cost of
matching one node does not grow with the number of rules, and compiles each pattern into a small Python function.
`graph_rewrite` applies a matcher to every node of a graph until nothing changes.

    rules = PatternMatcher([(UPat.var("x") + 0, lambda x: x)])
    graph_rewrite(expression, rules)
"""
from __future__ import annotations

import inspect
import itertools
import operator
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar, cast

from tinycore.dtype import ConstType, DType
from tinycore.uop.opcodes import GroupOp, Ops
from tinycore.uop.uop import UOp
from tinycore.viz import hook as _viz

RewriteFunction = Callable[..., "UOp | None"]
CompiledRule = Callable[["UOp", object], "UOp | None"]
"""A compiled rule: `rule(uop, ctx)` returns the replacement of `uop`, or None when the rule does not apply."""
_Item = TypeVar("_Item")

# permutation lists longer than this are matched by the interpreter instead of unrolled into compiled code
_MAX_UNROLLED_PERMUTATION = 3


def _as_tuple(value: _Item | Iterable[_Item] | None, kind: type[_Item]) -> tuple[_Item, ...] | None:
    """None, one `kind`, or an iterable of `kind` as a tuple (None stays None)."""
    if value is None:
        return None
    if isinstance(value, kind):
        return (value,)
    return tuple(cast("Iterable[_Item]", value))


class UPat:
    """A pattern over UOps.

    Args:
        op: an Ops, a tuple/set of Ops (any of them), or None (any op).
        dtype: a DType, a tuple/set of DTypes, or None. A scalar dtype also matches vectors of it.
        src: None (sources not checked); a tuple of UPats (sources matched in order); a list of UPats (the
            sources match in any order, for commutative ops); or one UPat (every source matches it).
        arg: the arg to match (compared with ==); None matches any arg.
        name: the keyword under which the matched UOp is passed to the rule. A name used twice in one pattern
            requires both places to be the same UOp.
        allow_any_len: with a tuple `src`, the UOp may have more sources than the pattern lists.
    """

    __slots__ = ("op", "dtype", "src_kind", "src", "arg", "name", "allow_any_len", "alternatives", "early_reject")

    def __init__(self, op: Ops | Iterable[Ops] | None = None, dtype: DType | Iterable[DType] | None = None,
                 src: tuple[UPat, ...] | list[UPat] | UPat | None = None, arg: object = None, name: str | None = None,
                 allow_any_len: bool = False, alternatives: tuple[UPat, ...] | None = None):
        self.op: tuple[Ops, ...] | None = _as_tuple(op, Ops)
        self.dtype: frozenset[DType] | None = None if dtype is None else frozenset(_as_tuple(dtype, DType) or ())
        self.arg, self.name, self.allow_any_len = arg, name, allow_any_len
        self.alternatives = alternatives
        self.src: tuple[UPat, ...] | UPat | None
        if src is None:
            self.src_kind, self.src = None, None
        elif isinstance(src, UPat):
            self.src_kind, self.src = "all", src
        elif isinstance(src, list):
            self.src_kind, self.src = "permutation", tuple(src)
        elif isinstance(src, tuple):
            self.src_kind, self.src = "sequence", src
        else:
            raise TypeError(f"UPat src must be a tuple, a list or a UPat, got {type(src).__name__}: {src!r}")
        if self.src_kind in ("sequence", "permutation"):
            for child in self.src:  # type: ignore[union-attr]
                if not isinstance(child, UPat):
                    raise TypeError(f"UPat src entries must be UPats, got {type(child).__name__}: {child!r}")
        if self.src_kind == "permutation" and allow_any_len:
            raise ValueError("allow_any_len is only supported with a tuple src (ordered sources)")
        # ops that must be among the direct sources of a matching UOp (a cheap test before the full match)
        required: set[Ops] = set()
        if self.src_kind in ("sequence", "permutation"):
            required = {child.op[0] for child in self.src  # type: ignore
                        if child.op is not None and len(child.op) == 1}
        self.early_reject = frozenset(required)

    # ---- constructors ----

    @staticmethod
    def var(name: str | None = None, dtype: DType | Iterable[DType] | None = None) -> UPat:
        """Any UOp (optionally of `dtype`), captured as `name`."""
        return UPat(dtype=dtype, name=name)

    @staticmethod
    def cvar(name: str | None = None, dtype: DType | Iterable[DType] | None = None) -> UPat:
        """Any scalar CONST (optionally of `dtype`), captured as `name`."""
        return UPat(Ops.CONST, dtype=dtype, name=name)

    @staticmethod
    def const(dtype: DType | Iterable[DType] | None, value: ConstType) -> UPat:
        """A CONST with value `value` (compared with ==) and dtype `dtype` (None: any dtype)."""
        return UPat(Ops.CONST, dtype=dtype, arg=value)

    @staticmethod
    def any(*patterns: UPat) -> UPat:
        """A pattern that matches when any one of `patterns` matches (tried in order)."""
        if not patterns:
            raise ValueError("UPat.any needs at least one pattern")
        ops = set()
        for pattern in patterns:
            ops |= set(pattern.op) if pattern.op is not None else set(Ops)
        result = UPat(op=tuple(sorted(ops, key=lambda op: op.value)), alternatives=tuple(patterns))
        return result

    def named(self, name: str) -> UPat:
        """This pattern, capturing its match as `name`."""
        copy = UPat(self.op, self.dtype, None, self.arg, name, self.allow_any_len, self.alternatives)
        copy.src_kind, copy.src, copy.early_reject = self.src_kind, self.src, self.early_reject
        return copy

    # ---- operator overloads: patterns written like the expressions they match ----

    def _binary(self, op: Ops, other: UPat | ConstType, reverse: bool = False) -> UPat:
        other_pattern = other if isinstance(other, UPat) else UPat.const(self.dtype, other)
        operands = [other_pattern, self] if reverse else [self, other_pattern]
        return UPat(op, src=operands if op in GroupOp.Commutative else tuple(operands))

    def __add__(self, other: UPat | ConstType) -> UPat:
        return self._binary(Ops.ADD, other)

    def __radd__(self, other: UPat | ConstType) -> UPat:
        return self._binary(Ops.ADD, other, True)

    def __mul__(self, other: UPat | ConstType) -> UPat:
        return self._binary(Ops.MUL, other)

    def __rmul__(self, other: UPat | ConstType) -> UPat:
        return self._binary(Ops.MUL, other, True)

    def __sub__(self, other: UPat | ConstType) -> UPat:
        return self._binary(Ops.SUB, other)

    def __floordiv__(self, other: UPat | ConstType) -> UPat:
        return self._binary(Ops.IDIV, other)

    def __mod__(self, other: UPat | ConstType) -> UPat:
        return self._binary(Ops.MOD, other)

    def __truediv__(self, other: UPat | ConstType) -> UPat:
        return self._binary(Ops.FDIV, other)

    def __and__(self, other: UPat | ConstType) -> UPat:
        return self._binary(Ops.AND, other)

    def __or__(self, other: UPat | ConstType) -> UPat:
        return self._binary(Ops.OR, other)

    def __xor__(self, other: UPat | ConstType) -> UPat:
        return self._binary(Ops.XOR, other)

    def __lt__(self, other: UPat | ConstType) -> UPat:
        return self._binary(Ops.CMPLT, other)

    def __gt__(self, other: UPat | ConstType) -> UPat:
        return self._binary(Ops.CMPLT, other, True)

    def __neg__(self) -> UPat:
        return UPat(Ops.NEG, src=(self,))

    def ne(self, other: UPat | ConstType) -> UPat:
        """A CMPNE pattern (sources in any order)."""
        return self._binary(Ops.CMPNE, other)

    def eq(self, other: UPat | ConstType) -> UPat:
        """A CMPEQ pattern (sources in any order)."""
        return self._binary(Ops.CMPEQ, other)

    def maximum(self, other: UPat | ConstType) -> UPat:
        """A MAX pattern (sources in any order)."""
        return self._binary(Ops.MAX, other)

    def where(self, if_true: UPat, if_false: UPat) -> UPat:
        """A WHERE pattern with this pattern as the condition."""
        return UPat(Ops.WHERE, src=(self, if_true, if_false))

    def cast(self, dtype: DType | None = None) -> UPat:
        """A CAST of this pattern (to `dtype`, or any dtype)."""
        return UPat(Ops.CAST, dtype=dtype, src=(self,))

    # ---- matching (the interpreter; PatternMatcher compiles patterns instead) ----

    def match(self, uop: UOp, store: dict[str, UOp] | None = None) -> list[dict[str, UOp]]:
        """Every way `uop` matches this pattern, as dicts of the named captures (empty list: no match)."""
        store = {} if store is None else store
        if self.alternatives is not None:
            return [found for alternative in self.alternatives for found in alternative.match(uop, store)]
        if self.op is not None and uop.op not in self.op:
            return []
        if self.dtype is not None and uop.dtype not in self.dtype and uop.dtype.scalar not in self.dtype:
            return []
        if self.arg is not None and not _arg_equal(uop.arg, self.arg):
            return []
        if self.name is not None:
            if self.name in store:
                if store[self.name] is not uop:
                    return []
            else:
                store = {**store, self.name: uop}
        if self.src_kind is None:
            return [store]
        if self.src_kind == "all":
            stores = [store]
            for source in uop.src:
                stores = [found for current in stores for found in self.src.match(source, current)]  # type: ignore
            return stores
        children: tuple[UPat, ...] = self.src  # type: ignore[assignment]
        if len(uop.src) != len(children) and not (self.allow_any_len and len(uop.src) >= len(children)):
            return []
        orders = itertools.permutations(children) if self.src_kind == "permutation" else (children,)
        results: list[dict[str, UOp]] = []
        for order in orders:
            stores = [store]
            for child, source in zip(order, uop.src, strict=False):
                stores = [found for current in stores for found in child.match(source, current)]
                if not stores:
                    break
            results.extend(stores)
        return results

    def names(self) -> set[str]:
        """Every capture name used in this pattern."""
        found = {self.name} if self.name is not None else set()
        if self.alternatives is not None:
            for alternative in self.alternatives:
                found |= alternative.names()
        if self.src_kind == "all":
            found |= self.src.names()  # type: ignore[union-attr]
        elif self.src_kind is not None:
            for child in self.src:  # type: ignore[union-attr]
                found |= child.names()
        return found

    def __repr__(self) -> str:
        parts = []
        if self.alternatives is not None:
            return f"UPat.any({', '.join(repr(alternative) for alternative in self.alternatives)})"
        if self.op is not None:
            parts.append("op=" + ("Ops." + self.op[0].name if len(self.op) == 1 else
                                  "(" + ", ".join("Ops." + op.name for op in self.op) + ")"))
        if self.dtype is not None:
            parts.append(f"dtype={sorted(self.dtype)!r}")
        if self.src_kind is not None:
            if self.src_kind == "permutation":
                parts.append(f"src={list(self.src)!r}")  # type: ignore[arg-type]
            else:
                parts.append(f"src={self.src!r}")
        if self.arg is not None:
            parts.append(f"arg={self.arg!r}")
        if self.name is not None:
            parts.append(f"name={self.name!r}")
        if self.allow_any_len:
            parts.append("allow_any_len=True")
        return f"UPat({', '.join(parts)})"


def _arg_equal(found: object, wanted: object) -> bool:
    """Arg comparison used by matching: == but a bool never equals an int or float (True is not 1)."""
    if (found.__class__ is bool) != (wanted.__class__ is bool):
        return False
    return bool(found == wanted)


# ---- compiling patterns into Python functions ----

class _Compiler:
    """Turns one (UPat, callable) rule into a Python function `rule(uop, ctx) -> UOp | None`.

    The generated code is a tree of `if` statements: one branch per source ordering of commutative sources and
    per alternative of UPat.any, each ending in a call of the rule's callable with the named captures.
    """

    def __init__(self, pattern: UPat, function: RewriteFunction, passed_names: Sequence[str], wants_ctx: bool):
        self.pattern, self.function = pattern, function
        self.passed_names, self.wants_ctx = passed_names, wants_ctx
        self.lines: list[str] = []
        self.constants: dict[str, object] = {"_function": function}
        self.counter = 0

    def constant(self, value: object) -> str:
        """A global name for `value` in the generated code."""
        name = f"_k{len(self.constants)}"
        self.constants[name] = value
        return name

    def fresh(self) -> str:
        """A new local variable name."""
        self.counter += 1
        return f"v{self.counter}"

    def emit(self, depth: int, line: str) -> None:
        """Add one line of generated code at indentation `depth`."""
        self.lines.append("    " * depth + line)

    def compile(self) -> CompiledRule:
        """The compiled rule function."""
        self.emit(0, "def _rule(uop, ctx):")
        self.generate([(self.pattern, "uop")], 1, {}, root=True)
        self.emit(1, "return None")
        source = "\n".join(self.lines)
        namespace = dict(self.constants)
        exec(compile(source, f"<pattern {self.pattern!r}>"[:200], "exec"), namespace)  # noqa: S102
        rule = namespace["_rule"]
        rule.__dict__["source"] = source  # the generated code, for reading when a rule misbehaves
        return cast(CompiledRule, rule)

    def generate(self, todo: list[tuple[UPat, str]], depth: int, bound: dict[str, str], root: bool = False) -> None:
        """Emit the checks of the first (pattern, variable) pair of `todo`, then those of the rest, then the call."""
        if not todo:
            captures = ", ".join(f"{name}={bound[name]}" for name in self.passed_names)
            if self.wants_ctx:
                captures = captures + (", " if captures else "") + "ctx=ctx"
            self.emit(depth, f"result = _function({captures})")
            self.emit(depth, "if result is not None and result is not uop:")
            self.emit(depth + 1, "return result")
            return
        (pattern, variable), rest = todo[0], todo[1:]
        if pattern.alternatives is not None:
            for alternative in pattern.alternatives:
                self.generate([(alternative, variable)] + rest, depth, dict(bound), root=False)
            return
        conditions: list[str] = []
        if pattern.op is not None and not root:
            if len(pattern.op) == 1:
                conditions.append(f"{variable}.op is {self.constant(pattern.op[0])}")
            else:
                conditions.append(f"{variable}.op in {self.constant(frozenset(pattern.op))}")
        if pattern.dtype is not None:
            dtype_set = self.constant(pattern.dtype)
            conditions.append(f"({variable}.dtype in {dtype_set} or {variable}.dtype.scalar in {dtype_set})")
        if pattern.arg is not None:
            conditions.append(f"_arg_equal({variable}.arg, {self.constant(pattern.arg)})")
            self.constants["_arg_equal"] = _arg_equal
        bound = dict(bound)
        if pattern.name is not None:
            if pattern.name in bound:
                conditions.append(f"{variable} is {bound[pattern.name]}")
            else:
                bound[pattern.name] = variable
        children: tuple[UPat, ...] = ()
        if pattern.src_kind == "all":
            checker = self.constant(pattern.src)
            conditions.append(f"all({checker}.match(source) for source in {variable}.src)")
        elif pattern.src_kind is not None:
            children = pattern.src  # type: ignore[assignment]
            comparison = ">=" if pattern.allow_any_len else "=="
            conditions.append(f"len({variable}.src) {comparison} {len(children)}")
        if conditions:
            self.emit(depth, f"if {' and '.join(conditions)}:")
            depth += 1
        if not children:
            self.generate(rest, depth, bound)
            return
        child_variables = [self.fresh() for _ in children]
        if len(children) == 1:
            self.emit(depth, f"{child_variables[0]} = {variable}.src[0]")
        else:
            self.emit(depth, f"{', '.join(child_variables)}, *_ = {variable}.src" if pattern.allow_any_len else
                      f"{', '.join(child_variables)} = {variable}.src")
        if pattern.src_kind == "sequence":
            self.generate(list(zip(children, child_variables, strict=True)) + rest, depth, bound)
            return
        for order in itertools.permutations(range(len(children))):
            pairs = [(children[index], child_variables[position]) for position, index in enumerate(order)]
            self.generate(pairs + rest, depth, bound)


def _needs_interpreter(pattern: UPat) -> bool:
    """True where a pattern has features the compiler leaves to the interpreter."""
    if pattern.alternatives is not None:
        return any(_needs_interpreter(alternative) for alternative in pattern.alternatives)
    if pattern.src_kind == "all":
        return bool(pattern.src.names())  # type: ignore[union-attr]
    if pattern.src_kind == "permutation" and len(pattern.src) > _MAX_UNROLLED_PERMUTATION:  # type: ignore[arg-type]
        return True
    if pattern.src_kind is not None:
        return any(_needs_interpreter(child) for child in pattern.src)  # type: ignore[union-attr]
    return False


def _signature_names(function: RewriteFunction) -> tuple[set[str], set[str], bool]:
    """(parameters, required parameters, accepts **kwargs) of a rule callable."""
    code = getattr(function, "__code__", None)
    if code is not None and not hasattr(function, "__self__"):  # plain functions and lambdas: read the code object
        positional = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
        defaults = len(function.__defaults__ or ())  # type: ignore[attr-defined]
        keyword_defaults = set(function.__kwdefaults__ or ())  # type: ignore[attr-defined]
        ordered = positional[:code.co_argcount]
        required = set(ordered[:len(ordered) - defaults]) | (set(positional[code.co_argcount:]) - keyword_defaults)
        return set(positional), required, bool(code.co_flags & inspect.CO_VARKEYWORDS)
    parameters = inspect.signature(function).parameters.values()
    names = {parameter.name for parameter in parameters
             if parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)}
    required = {parameter.name for parameter in parameters if parameter.default is parameter.empty and
                parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)}
    var_keyword = any(parameter.kind is parameter.VAR_KEYWORD for parameter in parameters)
    return names, required, var_keyword


def _rule_arguments(pattern: UPat, function: RewriteFunction) -> tuple[list[str], bool]:
    """(capture names passed to `function`, whether it takes ctx); a clear error when it needs a missing capture."""
    names, required, var_keyword = _signature_names(function)
    captured = pattern.names()
    missing = required - captured - {"ctx"}
    if missing:
        raise ValueError(f"rule {getattr(function, '__name__', function)} needs {sorted(missing)} but the pattern "
                         f"{pattern!r} only captures {sorted(captured)}: add name=... to the pattern or a default")
    return sorted(captured if var_keyword else captured & names), "ctx" in names or var_keyword


def compile_rule(pattern: UPat, function: RewriteFunction) -> CompiledRule:
    """The function `rule(uop, ctx)` that returns `function`'s result for the first match of `pattern` on `uop`.

    `function` receives the named captures it declares as keyword arguments, and `ctx` if it declares it.
    """
    passed, wants_ctx = _rule_arguments(pattern, function)
    if not _needs_interpreter(pattern):
        return _Compiler(pattern, function, passed, wants_ctx).compile()

    def interpreted_rule(uop: UOp, ctx: object) -> UOp | None:
        for store in pattern.match(uop):
            arguments: dict[str, object] = {name: store[name] for name in passed}
            if wants_ctx:
                arguments["ctx"] = ctx
            result = function(**arguments)
            if result is not None and result is not uop:
                return result
        return None
    return interpreted_rule


class _Rule:
    """One rule of a PatternMatcher; its pattern is compiled on first use (keeps imports fast)."""

    __slots__ = ("pattern", "function", "early_reject", "_compiled")

    def __init__(self, pattern: UPat, function: RewriteFunction):
        _rule_arguments(pattern, function)  # reject a rule that needs captures its pattern lacks, right away
        self.pattern, self.function = pattern, function
        self.early_reject = tuple(pattern.early_reject)
        self._compiled: CompiledRule | None = None

    def compiled(self) -> CompiledRule:
        """The compiled rule function."""
        if self._compiled is None:
            self._compiled = compile_rule(self.pattern, self.function)
        return self._compiled


class _RulesByOp(dict):
    """op -> [(compiled rule, early-reject ops)], built for an op the first time a node of that op is rewritten."""

    def __init__(self, rules: list[_Rule]):
        super().__init__()
        self.rules = rules

    def __missing__(self, op: Ops) -> tuple[tuple[CompiledRule, tuple[Ops, ...]], ...]:
        found = tuple((rule.compiled(), rule.early_reject) for rule in self.rules
                      if rule.pattern.op is None or op in rule.pattern.op)
        self[op] = found
        return found


_op_of = operator.attrgetter("op")
"""A node's op, read in C (the key of PatternMatcher.by_shape is built for every node rewritten)."""


class PatternMatcher:
    """An ordered list of rewrite rules `(UPat, callable)`, indexed by the op at the pattern's root.

    `rewrite(uop, ctx)` returns the result of the first rule that matches `uop` and returns a UOp other than
    `uop`, or None. Matchers compose: `symbolic_simple + my_rules` tries the left rules first.
    """

    def __init__(self, rules: Sequence[tuple[UPat, RewriteFunction]], _rules: list[_Rule] | None = None):
        if _rules is None:
            _rules = []
            for entry in rules:
                if not (isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], UPat) and
                        callable(entry[1])):
                    raise TypeError(f"a PatternMatcher rule is a (UPat, callable) pair, got {entry!r}")
                _rules.append(_Rule(entry[0], entry[1]))
        self.rules = _rules
        self.patterns = [(rule.pattern, rule.function) for rule in _rules]
        # op -> the rules whose root can have that op, compiled and indexed on first use
        self.by_op: dict[Ops, tuple[tuple[CompiledRule, tuple[Ops, ...]], ...]] = \
            _RulesByOp(_rules)
        # (op, the sources' ops...) -> the rules of by_op[op] whose early-reject ops are all among the sources' ops
        self.by_shape: dict[tuple[Ops, ...], tuple[CompiledRule, ...]] = {}

    def __add__(self, other: PatternMatcher) -> PatternMatcher:
        if not isinstance(other, PatternMatcher):
            return NotImplemented
        return PatternMatcher([], _rules=self.rules + other.rules)

    def __len__(self) -> int:
        return len(self.rules)

    def rewrite(self, uop: UOp, ctx: object = None) -> UOp | None:
        """The first rule result for `uop` that is a different UOp, or None when no rule applies."""
        shape = (uop.op, *map(_op_of, uop.src))
        rules = self.by_shape.get(shape)
        if rules is None:
            rules = self._rules_for(shape)
        for rule in rules:
            result = rule(uop, ctx)
            if result is not None:
                return result
        return None

    def _rules_for(self, shape: tuple[Ops, ...]) -> tuple[CompiledRule, ...]:
        """The rules that can match a node of op `shape[0]` over sources of ops `shape[1:]`: a rule's early-reject
        ops (each must be some source's op) are tested once per shape, not once per node."""
        source_ops = set(shape[1:])
        found = tuple(rule for rule, early_reject in self.by_op[shape[0]]
                      if all(required in source_ops for required in early_reject))
        self.by_shape[shape] = found
        return found


class RewriteCycleError(RuntimeError):
    """Raised when rules rewrite a node back into one that is still being rewritten (the rules loop)."""


_IN_PROGRESS: Any = object()  # marks a node whose rewrite has started but not finished


class _EveryOp(dict):
    """op -> a true value for every op: the rules index of a matcher that has none (each node is offered)."""

    def __missing__(self, op: Ops) -> bool:
        return True


_EVERY_OP = _EveryOp()


def _cycle_error(name: str | None, node: UOp) -> RewriteCycleError:
    label = f" {name}" if name else ""
    return RewriteCycleError(f"graph_rewrite{label}: the rules rewrite a node into one of its own ancestors "
                             f"({node.op}); check the rules for a loop")


def graph_rewrite(sink: UOp, matcher: PatternMatcher, ctx: object = None, bottom_up: bool = False,
                  name: str | None = None) -> UOp:
    """Rewrite every node of the graph under `sink` with `matcher` until no rule applies anywhere.

    Default order: a node's sources are rewritten first, then the node (rewritten again while rules apply; a
    replacement is itself rewritten completely). With `bottom_up=True` the rules are tried on a node before its
    sources are visited (and again after its sources changed). Work is memoized within the call, and the walk
    is iterative, so graphs of any depth work. `name` labels errors (and, with VIZ=1, the recorded pass).
    """
    if _viz.REWRITE is not None and name is not None:
        return _viz.REWRITE(_graph_rewrite, sink, matcher, ctx, bottom_up, name)
    return _graph_rewrite(sink, matcher, ctx, bottom_up, name)


def _graph_rewrite(sink: UOp, matcher: PatternMatcher, ctx: object, bottom_up: bool, name: str | None) -> UOp:
    done: dict[UOp, UOp] = {}
    rewrite = matcher.rewrite
    # op -> its rules: a node whose op has none is not rewritten, without the call (most nodes of most passes; a
    # stand-in matcher without the index, VIZ's counting one, is asked about every node)
    rules_of = getattr(matcher, "by_op", _EVERY_OP)
    # stack entries: (node, stage, current); stage 0 = visit, 1 = sources done, 2 = link node to its replacement
    stack: list[tuple[UOp, int, UOp]] = [(sink, 0, sink)]
    push, pop, lookup, result_of = stack.append, stack.pop, done.get, done.__getitem__
    while stack:
        node, stage, current = pop()
        if stage == 0:
            found = lookup(node)
            if found is not None:
                if found is _IN_PROGRESS:
                    raise _cycle_error(name, node)
                continue
            done[node] = _IN_PROGRESS
            if bottom_up and rules_of[current.op]:
                seen: set[UOp] = set()
                while (replacement := rewrite(current, ctx)) is not None:
                    if replacement in seen:
                        raise _cycle_error(name, replacement)
                    seen.add(current)
                    current = replacement
            push((node, 1, current))
            for source in reversed(current.src):
                found = lookup(source)
                if found is None:
                    if source.src or rules_of[source.op]:
                        push((source, 0, source))
                    else:  # a leaf no rule applies to is its own result: settled without a visit
                        done[source] = source
                elif found is _IN_PROGRESS:
                    raise _cycle_error(name, source)
        elif stage == 1:
            sources = current.src
            new_sources = tuple(map(result_of, sources))
            if new_sources != sources:
                rebuilt = current.replace(src=new_sources)
            elif bottom_up or not rules_of[current.op] or \
                    (rebuilt := rewrite(current, ctx)) is None:  # type: ignore[assignment]
                done[node] = current
                continue
            found = lookup(rebuilt)
            if found is not None and found is not _IN_PROGRESS:
                done[node] = found
                continue
            push((node, 2, rebuilt))
            push((rebuilt, 0, rebuilt))
        else:
            done[node] = done[current]
    return done[sink]
