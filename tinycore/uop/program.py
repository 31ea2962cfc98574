"""The description of a linear program: ProgramSpec (a rendered kernel with its launch sizes, arguments and costs)
and the cost estimates (`estimate`), an analysis of the linear program that every renderer's output shares."""
from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field

from tinycore.dtype import PtrDType, dtypes
from tinycore.helpers import prod, to_function_name
from tinycore.uop.ops import GroupOp, Ops
from tinycore.uop.symbolic import sint, sym_infer
from tinycore.uop.uop import UOp, exec_alu


def pointer_root(pointer: UOp) -> UOp:
    """The buffer (DEFINE_GLOBAL, DEFINE_LOCAL, ...) a chain of INDEX and pointer CAST starts from."""
    while pointer.op in (Ops.INDEX, Ops.CAST) and pointer.src:
        pointer = pointer.src[0]
    return pointer

@dataclass
class Estimates:
    """Costs of one launch: `ops` on values (not indices), `lds` bytes loaded and stored, `mem` bytes of buffers."""

    ops: int = 0
    lds: int = 0
    mem: int = 0

TRIP_COUNT_CASES = 1024  # at most this many values of the counters a loop bound depends on are tried, else it counts 1

def _trip_count(size: UOp | int) -> float:
    """Iterations of a loop of bound `size`: a bound over the CPU worker or enclosing loops (uneven splits) counts its
    mean over their values, so the total the caller multiplies in is right; bounds of variables count 1."""
    if isinstance(size, int) or size.op is Ops.CONST:
        return size if isinstance(size, int) else size.arg
    counters = [node for node in size.toposort if node.op in (Ops.SPECIAL, Ops.RANGE)]
    if not counters or not all(node.src and node.src[0].op is Ops.CONST for node in counters) or \
            (cases := prod(node.src[0].arg for node in counters)) > TRIP_COUNT_CASES:
        return 1
    bounds = [_evaluate(size, dict(zip(counters, values, strict=True)))
              for values in itertools.product(*(range(node.src[0].arg) for node in counters))]
    return 1 if None in bounds else sum(bound for bound in bounds if bound is not None) / cases

def _evaluate(expression: UOp, known: dict[UOp, int]) -> int | None:
    """The value of an integer expression of constants and the `known` values of some nodes, else None."""
    values = dict(known)
    for node in (node for node in expression.toposort if node not in values):
        if node.op is Ops.CONST:
            values[node] = node.arg
        elif node.op not in GroupOp.ALU or any(source not in values for source in node.src):
            return None
        else:
            try:
                values[node] = int(exec_alu(node.op, node.dtype, [values[source] for source in node.src]))
            except (TypeError, ValueError, ZeroDivisionError):
                return None
    return values[expression]

_INDEX_LEAVES = frozenset({Ops.RANGE, Ops.SPECIAL, Ops.CONST, Ops.VCONST, Ops.DEFINE_VAR})

def _index_arithmetic(uops: list[UOp]) -> set[UOp]:
    """Integer and boolean ops of loop counters, thread ids, variables and constants only: left out of FLOPs."""
    index_ops: set[UOp] = set()
    for uop in uops:  # sources come before their users in a linear program
        if (uop.op in (Ops.CAST, Ops.VECTORIZE, Ops.GEP) or uop.op in GroupOp.ALU) and \
                not dtypes.is_float(uop.dtype.scalar) and \
                all(source in index_ops or source.op in _INDEX_LEAVES for source in uop.src):
            index_ops.add(uop)
    return index_ops

def _is_read_mask(uop: UOp, index_ops: set[UOp]) -> bool:
    """A select on a bounds check between a value and a constant: the masking of a padded read, not arithmetic."""
    return uop.op is Ops.WHERE and (uop.src[0] in index_ops or uop.src[0].op in _INDEX_LEAVES) and \
        any(source.op in (Ops.CONST, Ops.VCONST) for source in uop.src[1:])

def estimate(uops: list[UOp]) -> Estimates:
    """Estimates for a linear program, each op times its loops' and threads' trip counts (matmul: 2*M*N*K ops)."""
    index_ops, open_ranges, touched = _index_arithmetic(uops), list[float](), dict[int, int]()
    multiplier = thread_count = 1.0
    ops = lds = 0.0
    for uop in uops:
        if uop.op is Ops.SPECIAL:
            thread_count *= _trip_count(uop.src[0]) if uop.src else 1
        elif uop.op is Ops.RANGE:
            open_ranges.append(trips := _trip_count(uop.src[0]))
            multiplier *= max(trips, 1)
        elif uop.op is Ops.END:
            for _ in range(min(sum(source.op is Ops.RANGE for source in uop.src), len(open_ranges))):
                multiplier /= max(open_ranges.pop(), 1)
        elif uop.op in GroupOp.ALU and uop not in index_ops and not _is_read_mask(uop, index_ops):
            ops += multiplier * (uop.src[0].dtype.count if uop.src else 1) * (2 if uop.op is Ops.MULACC else 1)
        elif uop.op in (Ops.LOAD, Ops.STORE):
            buffer = uop.src[0].src[0] if uop.src[0].op is Ops.INDEX else uop.src[0]
            if buffer.op is Ops.DEFINE_GLOBAL:
                value_dtype = uop.dtype if uop.op is Ops.LOAD else uop.src[1].dtype
                lds += multiplier * value_dtype.itemsize * value_dtype.count
                if isinstance(pointer := buffer.dtype, PtrDType) and pointer.size > 0:
                    touched[buffer.arg] = pointer.size * pointer.base.itemsize
    return Estimates(round(ops * thread_count), round(lds * thread_count), sum(touched.values()))

@dataclass
class ProgramSpec:
    """A rendered kernel: `name`, source `src` for `device`, launch sizes (three ints or UOps over DEFINE_VARs each;
    on CPU `global_size[0]` is the number of workers), the DEFINE_GLOBAL positions (`globals`, `outs` stored to, `ins`
    loaded from) and the DEFINE_VARs in parameter order (`vars`, sorted by name)."""

    name: str
    src: str
    device: str
    global_size: list[sint] = field(default_factory=lambda: list[sint]([1, 1, 1]))
    local_size: list[sint] | None = field(default_factory=lambda: list[sint]([1, 1, 1]))
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
        variables, buffers = {uop.arg[0]: uop for uop in uops if uop.op is Ops.DEFINE_VAR}, set[int]()
        outs, ins = set[int](), set[int]()
        for uop in uops:
            if uop.op is Ops.SPECIAL:
                size = uop.src[0] if uop.src else 1
                label: str = uop.arg
                (local_size if label.startswith("l") else global_size)[0 if label == "core_id" else int(label[-1])] = \
                    size.arg if isinstance(size, UOp) and size.op is Ops.CONST else size
            elif uop.op is Ops.DEFINE_GLOBAL:
                buffers.add(uop.arg)
            elif uop.op in (Ops.LOAD, Ops.STORE):
                if (buffer := pointer_root(uop.src[0])).op is Ops.DEFINE_GLOBAL:
                    (outs if uop.op is Ops.STORE else ins).add(buffer.arg)
        return ProgramSpec(name, src, device, global_size, local_size, [variables[key] for key in sorted(variables)],
                           sorted(buffers), sorted(outs), sorted(ins), estimate(uops), uops)

    def launch_dims(self, var_vals: Mapping[str, int] | Mapping[UOp, int] | None = None
                    ) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
        """The global and local sizes as ints, with symbolic sizes evaluated for `var_vals`."""
        values = var_vals or {}
        local_size = None if self.local_size is None else tuple(sym_infer(size, values) for size in self.local_size)
        return tuple(sym_infer(size, values) for size in self.global_size), local_size

    def vals(self, var_vals: Mapping[str, int] | Mapping[UOp, int] | None = None) -> tuple[int, ...]:
        """The integer arguments for `vars`, in parameter order, from `var_vals` (keyed by UOp or name)."""
        return tuple(sym_infer(variable, var_vals or {}) for variable in self.vars)

    @property
    def function_name(self) -> str:
        """The symbol of the kernel in the compiled binary."""
        return to_function_name(self.name)


__all__ = ["Estimates", "ProgramSpec", "estimate", "pointer_root"]
