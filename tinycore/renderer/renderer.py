"""Renderer base class and ProgramSpec: a rendered kernel with its launch dimensions, arguments and cost estimates."""
from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar, cast

from tinycore.dtype import DType, PtrDType, dtypes
from tinycore.helpers import prod, to_function_name
from tinycore.plugins.contract import DeviceContract, RendererContract
from tinycore.uop.ops import GroupOp, Ops
from tinycore.uop.patterns import PatternMatcher, RewriteFunction, UPat
from tinycore.uop.symbolic import sint, sym_infer
from tinycore.uop.uop import UOp, exec_alu

Sizes = tuple["int | UOp", ...]
ContextT = TypeVar("ContextT")
TextRule = Callable[..., "str | None"]
"""A rendering rule: given the renderer's context as `ctx` and its pattern's captures, it renders the UOp and returns
its text ("" for a statement), or None to leave the UOp to the next rule."""


def text_rules(rules: Sequence[tuple[UPat, TextRule]]) -> PatternMatcher:
    """A PatternMatcher of rendering rules (PatternMatcher types its rules as UOp rewrites; these return text)."""
    return PatternMatcher(cast(Sequence[tuple[UPat, RewriteFunction]], rules))


def statement_rule(function: Callable[[ContextT, UOp], object]) -> Callable[[ContextT, UOp], str]:
    """A renderer's PatternMatcher rule from `function(ctx, uop)`, which renders its UOp (captured as "uop") into the
    context: the rule answers "" (the UOp is handled) whatever the function returns, so none falls through."""
    def rule(ctx: ContextT, uop: UOp) -> str:
        function(ctx, uop)
        return ""
    return rule


class Renderer(RendererContract):
    """Turns a linearized kernel (a list of kernel-level UOps in execution order) into source code and describes it
    in a ProgramSpec. Every attribute the core reads, with its default, is declared in
    `tinycore.plugins.contract.RendererContract`."""

    string_rewrite: ClassVar[PatternMatcher | None] = None
    """The rules that render each UOp of a linear program (a PatternMatcher of `text_rules`, called with the
    renderer's per-program context as `ctx`), where the renderer is written as rules: the C-like family's
    (`cstyle.base_rendering` and each language's in front), PTX's and LLVM IR's. The extension point of a renderer: a
    subclass adds or overrides rules with `string_rewrite = its_rules + Parent.string_rewrite`, the first rule
    that returns text wins and one returning None leaves the UOp to the next."""

    def supported_dtypes(self) -> set[DType]:
        """The scalar dtypes this renderer's kernels can load, compute with and store (tinygrad's
        `Renderer.supported_dtypes`): the `dtypes` of the `capabilities` this renderer, or else the device it renders
        for, declares; without a declaration, those of `dtypes.all` its `type_map` spells (C-like renderers), or all
        of them."""
        declared = _declared_dtypes(self.capabilities)
        if declared is None:
            device_reference = self.__dict__.get("_opened_device")
            device: DeviceContract | None = device_reference() if device_reference is not None else None
            declared = _declared_dtypes(device.capabilities if device is not None else None)
        if declared is not None:
            return {dtype.scalar for dtype in declared}
        return self.spelled_dtypes()

    def spelled_dtypes(self) -> set[DType]:
        """The dtypes of `dtypes.all` this renderer has a type for (its `type_map`; all of them without one)."""
        type_map = self.type_map
        if type_map:
            return {dtype for dtype in dtypes.all if dtype in type_map}
        return set(dtypes.all)

    def to_program(self, uops: list[UOp], name: str | None = None) -> ProgramSpec:
        """Render `uops` and describe the result (launch sizes, arguments, estimates) in a ProgramSpec."""
        function_name = name if name is not None else kernel_name(uops)
        return ProgramSpec.from_uops(function_name, self.render_named(uops, function_name), self.device, uops)


def _declared_dtypes(capabilities: object) -> Any:
    """The `dtypes` field of a capabilities declaration (a DeviceCapabilities or a dict), or None."""
    if capabilities is None:
        return None
    if isinstance(capabilities, Mapping):
        return capabilities.get("dtypes")
    return getattr(capabilities, "dtypes", None)


def kernel_name(uops: list[UOp], default: str = "kernel") -> str:
    """The function name of a linear program: the SINK's arg (a string or an object with `.name`), else default."""
    for uop in reversed(uops):
        if uop.op is Ops.SINK:
            arg = uop.arg
            candidate = arg if isinstance(arg, str) else getattr(arg, "function_name", getattr(arg, "name", None))
            if isinstance(candidate, str) and candidate:
                return to_function_name(candidate)
    return default


@dataclass
class Estimates:
    """Rough costs of one launch: `ops` arithmetic operations on values (what GFLOPS figures divide; index and
    address arithmetic is not counted), `lds` bytes loaded and stored, `mem` bytes of the global buffers touched
    (each counted once). A loop whose bound depends on the CPU worker or on enclosing loops (uneven splits and row
    groups) counts its mean over their values; a bound of a variable counts once."""

    ops: int = 0
    lds: int = 0
    mem: int = 0


TRIP_COUNT_CASES = 1024
"""At most this many combinations of enclosing loop counters and worker ids are evaluated for a loop bound that
depends on them (`_trip_count`); past it the loop counts once."""


def _trip_count(size: UOp | int) -> float:
    """Iterations of a loop of bound `size`. A bound that depends on the worker (an uneven split of an axis across
    CPU workers) or on enclosing loops (row groups of uneven sizes, whose group counter sets the inner trip count)
    counts its mean over every combination of their values, so that the total over the workers and the enclosing
    loops, which the caller multiplies in, is right. Bounds of variables (DEFINE_VAR) count 1."""
    if isinstance(size, int):
        return size
    if size.op is Ops.CONST:
        return size.arg
    counters = [node for node in size.toposort if node.op in (Ops.SPECIAL, Ops.RANGE)]
    if not counters or not all(node.src and node.src[0].op is Ops.CONST for node in counters):
        return 1
    cases = prod(node.src[0].arg for node in counters)
    if cases > TRIP_COUNT_CASES:
        return 1
    total = 0
    for values in itertools.product(*(range(node.src[0].arg) for node in counters)):
        bound = _evaluate(size, dict(zip(counters, values, strict=True)))
        if bound is None:
            return 1
        total += bound
    return total / cases


def _evaluate(expression: UOp, known: dict[UOp, int] | None = None) -> int | None:
    """The value of an integer expression of constants and the `known` values of some nodes, else None."""
    values: dict[UOp, int] = dict(known or {})
    for node in expression.toposort:
        if node in values:
            continue
        if node.op is Ops.CONST:
            values[node] = node.arg
        elif node.op in GroupOp.ALU and all(source in values for source in node.src):
            try:
                values[node] = int(exec_alu(node.op, node.dtype, [values[source] for source in node.src]))
            except (TypeError, ValueError, ZeroDivisionError):
                return None
        else:
            return None
    return values[expression]


_INDEX_LEAVES = frozenset({Ops.RANGE, Ops.SPECIAL, Ops.CONST, Ops.VCONST, Ops.DEFINE_VAR})
_INDEX_CARRIERS = frozenset({Ops.CAST, Ops.VECTORIZE, Ops.GEP})


def _index_arithmetic(uops: list[UOp]) -> set[UOp]:
    """The integer and boolean ALU ops computed only from loop counters, thread ids, variables and constants: the
    address arithmetic and bounds checks around the values, which a FLOP count must leave out. An op that reads a
    loaded value (a gather's index, say) or yields a float is arithmetic on values."""
    index_ops: set[UOp] = set()
    for uop in uops:  # sources come before their users in a linear program
        if uop.op not in _INDEX_CARRIERS and uop.op not in GroupOp.ALU or dtypes.is_float(uop.dtype.scalar):
            continue
        if all(source in index_ops or source.op in _INDEX_LEAVES for source in uop.src):
            index_ops.add(uop)
    return index_ops


def _is_read_mask(uop: UOp, index_ops: set[UOp]) -> bool:
    """A select on a bounds check between a value and a constant: the masking of a padded or gated read (what a
    gated load does for free), not arithmetic on the value."""
    if uop.op is not Ops.WHERE or not (uop.src[0] in index_ops or uop.src[0].op in _INDEX_LEAVES):
        return False
    return any(source.op in (Ops.CONST, Ops.VCONST) for source in uop.src[1:])


def estimate(uops: list[UOp]) -> Estimates:
    """Estimates for a linear program, multiplying each op by the trip counts of the loops and threads around it.
    `ops` counts only arithmetic on values (see `_index_arithmetic` and `_is_read_mask`): a matmul of (M, K) by
    (K, N) counts 2*M*N*K."""
    result = Estimates()
    index_ops = _index_arithmetic(uops)
    multiplier = 1.0
    ops = lds = 0.0
    open_ranges: list[float] = []
    thread_count = 1.0
    touched: dict[int, int] = {}
    for uop in uops:
        if uop.op is Ops.SPECIAL:
            thread_count *= _trip_count(uop.src[0]) if uop.src else 1
        elif uop.op is Ops.RANGE:
            trips = _trip_count(uop.src[0])
            open_ranges.append(trips)
            multiplier *= max(trips, 1)
        elif uop.op is Ops.END:
            for source in uop.src:
                if source.op is Ops.RANGE and open_ranges:
                    multiplier /= max(open_ranges.pop(), 1)
        elif uop.op in GroupOp.ALU and uop not in index_ops and not _is_read_mask(uop, index_ops):
            lanes = uop.src[0].dtype.count if uop.src else 1
            ops += multiplier * lanes * (2 if uop.op is Ops.MULACC else 1)
        elif uop.op in (Ops.LOAD, Ops.STORE):
            index = uop.src[0]
            buffer = index.src[0] if index.op is Ops.INDEX else index
            if buffer.op is Ops.DEFINE_GLOBAL:
                value_dtype = uop.dtype if uop.op is Ops.LOAD else uop.src[1].dtype
                lds += multiplier * value_dtype.itemsize * value_dtype.count
                pointer = buffer.dtype
                if isinstance(pointer, PtrDType) and pointer.size > 0:
                    touched[buffer.arg] = pointer.size * pointer.base.itemsize
    result.ops = round(ops * thread_count)
    result.lds = round(lds * thread_count)
    result.mem = sum(touched.values())
    return result


def _unit_dims() -> list[sint]:
    return [1, 1, 1]


@dataclass
class ProgramSpec:
    """A rendered kernel: `name`, source `src` for `device`, launch sizes, and what it reads and writes.

    `global_size` / `local_size` are three entries each (ints, or UOps over DEFINE_VARs; see `launch_dims`).
    On CPU, `global_size[0]` is the number of workers (the size of SPECIAL "core_id"). `globals` lists the
    DEFINE_GLOBAL positions, `outs` those stored to, `ins` those loaded from; `vars` the DEFINE_VARs in parameter
    order (sorted by name).
    """

    name: str
    src: str
    device: str
    global_size: list[sint] = field(default_factory=_unit_dims)
    local_size: list[sint] | None = field(default_factory=_unit_dims)
    vars: list[UOp] = field(default_factory=list)
    globals: list[int] = field(default_factory=list)
    outs: list[int] = field(default_factory=list)
    ins: list[int] = field(default_factory=list)
    estimates: Estimates = field(default_factory=Estimates)
    uops: list[UOp] | None = field(default=None, repr=False)

    @staticmethod
    def from_uops(name: str, src: str, device: str, uops: list[UOp]) -> ProgramSpec:
        """Describe the linear program `uops` rendered as `src`."""
        global_size: list[sint] = [1, 1, 1]
        local_size: list[sint] = [1, 1, 1]
        variables: dict[str, UOp] = {}
        globals_: list[int] = []
        outs: list[int] = []
        ins: list[int] = []
        for uop in uops:
            if uop.op is Ops.SPECIAL:
                size = uop.src[0] if uop.src else 1
                size = size.arg if isinstance(size, UOp) and size.op is Ops.CONST else size
                label: str = uop.arg
                if label == "core_id":
                    global_size[0] = size
                else:
                    axis = int(label[-1])
                    (local_size if label.startswith("l") else global_size)[axis] = size
            elif uop.op is Ops.DEFINE_VAR:
                variables[uop.arg[0]] = uop
            elif uop.op is Ops.DEFINE_GLOBAL:
                globals_.append(uop.arg)
            elif uop.op in (Ops.LOAD, Ops.STORE):
                index = uop.src[0]
                while index.op is not Ops.DEFINE_GLOBAL and index.src and index.op in (Ops.INDEX, Ops.CAST):
                    index = index.src[0]
                if index.op is Ops.DEFINE_GLOBAL:
                    (outs if uop.op is Ops.STORE else ins).append(index.arg)
        return ProgramSpec(name, src, device, global_size, local_size,
                           [variables[key] for key in sorted(variables)], sorted(set(globals_)),
                           sorted(set(outs)), sorted(set(ins)), estimate(uops), uops)

    def launch_dims(self, var_vals: Mapping[str, int] | Mapping[UOp, int] | None = None
                    ) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
        """The global and local sizes as ints, with symbolic sizes evaluated for `var_vals`."""
        values = var_vals or {}
        global_size = tuple(sym_infer(size, values) for size in self.global_size)
        local_size = None if self.local_size is None else tuple(sym_infer(size, values) for size in self.local_size)
        return global_size, local_size

    def vals(self, var_vals: Mapping[str, int] | Mapping[UOp, int] | None = None) -> tuple[int, ...]:
        """The integer arguments for `vars`, in parameter order, from `var_vals` (keyed by UOp or name)."""
        values = var_vals or {}
        return tuple(sym_infer(variable, values) for variable in self.vars)

    @property
    def function_name(self) -> str:
        """The symbol of the kernel in the compiled binary."""
        return to_function_name(self.name)


__all__ = ["Renderer", "ProgramSpec", "Estimates", "estimate", "kernel_name", "statement_rule", "text_rules"]
