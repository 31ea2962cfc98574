"""A Python interpreter of linear programs: runs the UOp list codegen produces, one thread id at a time (the
work-items of a work-group take turns between BARRIERs and share its DEFINE_LOCAL memory).

It is slow (one Python step per UOp executed) and meant for tests and as the core of a pure-Python device. ALU ops are
evaluated with `exec_alu`, so integer wrap-around and float32 rounding follow the generated code.
"""
from __future__ import annotations

import itertools
import math
import struct
from collections.abc import Generator, Mapping, Sequence
from typing import Any

from tinycore.dtype import ConstType, DType, PtrDType, dtypes, truncate
from tinycore.uop.ops import GroupOp, Ops
from tinycore.uop.uop import UOp, exec_alu


class InterpreterError(RuntimeError):
    """A linear program the interpreter cannot run (unknown op, out-of-bounds access, missing argument)."""


def cast_value(value: ConstType, dtype: DType) -> ConstType:
    """`value` converted to scalar `dtype` the way C converts (floats to ints truncate toward zero)."""
    if dtypes.is_bool(dtype):
        return bool(value)
    if dtypes.is_int(dtype):
        if isinstance(value, float):
            if not math.isfinite(value):
                return truncate(0, dtype)
            value = math.trunc(value)
        return truncate(int(value), dtype)
    return truncate(float(value), dtype)


def bitcast_value(value: ConstType, source: DType, target: DType) -> ConstType:
    """The bits of `value` (of scalar `source`) read as scalar `target`."""
    if source.fmt is None or target.fmt is None:
        raise InterpreterError(f"cannot bitcast {source} to {target} in the interpreter")
    return struct.unpack(target.fmt, struct.pack(source.fmt, value))[0]


def _lanes(value: ConstType | tuple[ConstType, ...], lane: int) -> ConstType:
    return value[lane] if isinstance(value, tuple) else value


def _zero(dtype: DType) -> ConstType | tuple[ConstType, ...]:
    zero = False if dtypes.is_bool(dtype) else 0 if dtypes.is_int(dtype) else 0.0
    return zero if dtype.count == 1 else (zero,) * dtype.count


class Program:
    """A linear program prepared for repeated runs."""

    def __init__(self, uops: Sequence[UOp]):
        self.uops = list(uops)
        self.end_of: dict[int, int] = {}
        self.start_of: dict[int, int] = {}
        open_loops: dict[UOp, int] = {}
        for position, uop in enumerate(self.uops):
            if uop.op is Ops.RANGE:
                open_loops[uop] = position
            elif uop.op is Ops.END:
                start = open_loops.pop(uop.src[0], None)
                if start is None:
                    raise InterpreterError(f"END at {position} closes a range that is not open")
                self.end_of[start] = position
                self.start_of[position] = start
        if open_loops:
            raise InterpreterError(f"{len(open_loops)} RANGE(s) are never closed by an END")
        self.specials = [u for u in self.uops if u.op is Ops.SPECIAL]
        self.calls = {}

    calls: dict[UOp, str]
    """The UOps at which a work-item yields `(name, operands)` and waits for its value (none here; the wave
    interpreter's collective ops)."""

    def __call__(self, buffers: Sequence[object], var_vals: Mapping[str, int] | None = None) -> None:
        """Run every thread of the program on `buffers` (mutable lists or numpy arrays, by DEFINE_GLOBAL position)."""
        import numpy
        var_vals = dict(var_vals or {})
        lists = [numpy.asarray(b).reshape(-1).tolist() if isinstance(b, numpy.ndarray) else b for b in buffers]
        sizes = {special: range(self._evaluate_size(special.src[0], var_vals) if special.src else 1)
                 for special in self.specials}
        # the work-items of one work-group (its lidx values) run together: each runs up to its next BARRIER, and
        # none goes past it before all have reached it; DEFINE_LOCAL memory is shared by the group
        locals_ = [special for special in self.specials if str(special.arg).startswith("lidx")]
        groups = [special for special in self.specials if special not in locals_]
        self._check_work_group([len(sizes[special]) for special in locals_])
        for group in itertools.product(*(sizes[special] for special in groups)):
            shared: dict[UOp, list[Any]] = {}
            members = itertools.product(*(sizes[special] for special in locals_))
            self._run_group([self._run_thread(lists, var_vals, dict(zip(groups + locals_, group + local, strict=True)),
                                              shared) for local in members])
        for original, values in zip(buffers, lists, strict=True):
            if isinstance(original, numpy.ndarray):
                flat = original.reshape(-1)
                flat[:] = numpy.asarray(values, dtype=original.dtype)

    def _check_work_group(self, block: list[int]) -> None:
        """Raise InterpreterError when a work-group of `block` work-items (per lidx) cannot run this program."""

    def _run_group(self, threads: list[Generator[Any, Any, None]]) -> None:
        """Run the work-items of one work-group in turns, each up to its next BARRIER."""
        while threads:
            threads = [thread for thread in threads if next(thread, None) is not None]

    @staticmethod
    def _evaluate_size(node: UOp, var_vals: Mapping[str, int]) -> int:
        values: dict[UOp, ConstType] = {}
        for item in node.toposort:
            if item.op is Ops.CONST:
                values[item] = item.arg
            elif item.op is Ops.DEFINE_VAR:
                values[item] = var_vals[item.arg[0]]
            elif item.op in GroupOp.ALU:
                values[item] = exec_alu(item.op, item.dtype, [values[s] for s in item.src])
            else:
                raise InterpreterError(f"cannot evaluate {item.op} in a thread count")
        return int(values[node])

    def _run_thread(self, lists: list[Any], var_vals: Mapping[str, int], thread: dict[UOp, int],
                    shared: dict[UOp, list[Any]]) -> Generator[Any, Any, None]:
        """Run one work-item, yielding True at each BARRIER and `(name, operands)` at a UOp of `calls`, where it
        receives the UOp's value (a generator: the caller resumes it)."""
        values: dict[UOp, Any] = {}
        uops, position, count = self.uops, 0, len(self.uops)
        while position < count:
            uop = uops[position]
            op = uop.op
            if op is Ops.RANGE:
                if values[uop.src[0]] <= 0:
                    position = self.end_of[position] + 1
                    continue
                values[uop] = 0
            elif op is Ops.END:
                loop = uop.src[0]
                values[loop] += 1
                if values[loop] < values[loop.src[0]]:
                    position = self.start_of[position] + 1
                    continue
            elif op is Ops.DEFINE_LOCAL:
                size = uop.dtype.size if isinstance(uop.dtype, PtrDType) and uop.dtype.size > 0 else 1
                values[uop] = shared.setdefault(uop, [None] * size)
            elif uop in self.calls:
                values[uop] = yield (self.calls[uop], [float(values[source]) for source in uop.src])
            else:
                values[uop] = self._step(uop, values, lists, var_vals, thread)
                if op is Ops.BARRIER:
                    yield True
            position += 1

    def _step(self, uop: UOp, values: dict[UOp, Any], lists: list[Any], var_vals: Mapping[str, int],
              thread: dict[UOp, int]) -> Any:
        op, dtype = uop.op, uop.dtype
        if op is Ops.CONST:
            return uop.arg
        if op is Ops.DEFINE_GLOBAL:
            if uop.arg >= len(lists):
                raise InterpreterError(f"the program uses buffer {uop.arg}, only {len(lists)} were passed")
            return lists[uop.arg]
        if op is Ops.DEFINE_REG:
            size = dtype.size if isinstance(dtype, PtrDType) and dtype.size > 0 else 1
            return [None] * size
        if op is Ops.DEFINE_VAR:
            if uop.arg[0] not in var_vals:
                raise InterpreterError(f"no value for variable {uop.arg[0]!r}")
            return var_vals[uop.arg[0]]
        if op is Ops.SPECIAL:
            return thread[uop]
        if op is Ops.VECTORIZE:
            return tuple(values[source] for source in uop.src)
        if op is Ops.GEP:
            vector = values[uop.src[0]]
            picked = tuple(_lanes(vector, lane) for lane in uop.arg)
            return picked[0] if len(picked) == 1 else picked
        if op is Ops.INDEX:
            valid = values[uop.src[2]] if len(uop.src) > 2 else True
            return values[uop.src[0]], values[uop.src[1]], valid, uop.src[0].dtype
        if op is Ops.LOAD:
            return self._load(uop, values)
        if op is Ops.STORE:
            self._store(uop, values)
            return None
        if op in GroupOp.ALU:
            operands = [values[source] for source in uop.src]
            if dtype.count == 1 and not any(isinstance(value, tuple) for value in operands):
                return exec_alu(op, dtype, operands)
            lanes = max(len(value) for value in operands if isinstance(value, tuple))
            return tuple(exec_alu(op, dtype.scalar, [_lanes(value, lane) for value in operands])
                         for lane in range(lanes))
        if op is Ops.CAST:
            value = values[uop.src[0]]
            if isinstance(value, tuple):
                return tuple(cast_value(item, dtype.scalar) for item in value)
            return cast_value(value, dtype)
        if op is Ops.BITCAST:
            value = values[uop.src[0]]
            source = uop.src[0].dtype.scalar
            if isinstance(value, tuple):
                return tuple(bitcast_value(item, source, dtype.scalar) for item in value)
            return bitcast_value(value, source, dtype)
        if op in (Ops.SINK, Ops.NOOP, Ops.BARRIER, Ops.GROUP):
            return None
        raise InterpreterError(f"the interpreter does not run {op}")

    @staticmethod
    def _load(uop: UOp, values: dict[UOp, Any]) -> Any:
        memory, index, valid, pointer = values[uop.src[0]]
        if not valid:
            return values[uop.src[1]] if len(uop.src) > 1 else _zero(uop.dtype)
        base_count = pointer.base.count if isinstance(pointer, PtrDType) else 1
        lanes = uop.dtype.count
        if not 0 <= index <= len(memory) - (lanes if base_count == 1 else 1):
            raise InterpreterError(f"load of {lanes} element(s) at {index} outside a buffer of {len(memory)}")
        if lanes == 1 or base_count > 1:
            return memory[index]
        return tuple(memory[index:index + lanes])

    @staticmethod
    def _store(uop: UOp, values: dict[UOp, Any]) -> None:
        memory, index, valid, pointer = values[uop.src[0]]
        if not valid:
            return
        value = values[uop.src[1]]
        base_count = pointer.base.count if isinstance(pointer, PtrDType) else 1
        if isinstance(value, tuple) and base_count == 1:
            if not 0 <= index <= len(memory) - len(value):
                raise InterpreterError(f"store of {len(value)} elements at {index} outside a buffer of {len(memory)}")
            memory[index:index + len(value)] = list(value)
        else:
            if not 0 <= index < len(memory):
                raise InterpreterError(f"store at {index} outside a buffer of {len(memory)}")
            if uop.arg is not None:  # a combining store: one work-item at a time, so read-modify-write is atomic
                value = _combined(uop.arg, uop.src[1].dtype, memory[index], value)
            memory[index] = value


def _combined(reduce: str, dtype: DType, old: ConstType, new: ConstType) -> ConstType:
    """A scatter reduce of the stored `old` with `new` (as tinycore.uop.indexing.combine_scatter computes it)."""
    if reduce == "min":
        return new if exec_alu(Ops.CMPLT, dtypes.bool, [new, old]) else old
    boolean = dtype == dtypes.bool
    op = {"add": Ops.OR if boolean else Ops.ADD, "mul": Ops.AND if boolean else Ops.MUL, "max": Ops.MAX}[reduce]
    return exec_alu(op, dtype, [old, new])


def run_linear(uops: Sequence[UOp], buffers: Sequence[object], var_vals: Mapping[str, int] | None = None) -> None:
    """Run the linear program `uops` on `buffers` (numpy arrays are updated in place)."""
    Program(uops)(buffers, var_vals)
