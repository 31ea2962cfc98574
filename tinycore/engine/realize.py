"""Realize: schedule tensor-level graphs, compile their kernels (once per AST) and run them in order.

DEBUG levels: 1 prints the kernel and copy counts of each realize, 2 one line per kernel (name, time, GFLOPS,
GB/s; kernels then run synchronously to be timed), 3 the optimizations applied, 4 each kernel's source and 5 its
AST when it is first compiled.
"""
from __future__ import annotations

import os
import sys
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tinycore.counters import totals as _counts
from tinycore.device.compiler import CompileError
from tinycore.engine import eager as _eager
from tinycore.engine.eager import eager_key
from tinycore.engine.eager import plans as eager_plans
from tinycore.engine.eager import remember_plan as remember_eager_plan
from tinycore.engine.eager import run_plan as run_eager_plan
from tinycore.engine.memory import _BUFFER_ATTRIBUTE, buffer_of, device_facts
from tinycore.engine.runner import Runner, copy_buffers
from tinycore.engine.runner import launch_expectations as _expectations
from tinycore.helpers import BEAM, CAPTURING, DEBUG, NUM_CPU_THREADS, collection_paused
from tinycore.plugins.contract import compiles_in_batches
from tinycore.schedule import cache as _schedule_cache  # the eager shortcut reads its generation without a call
from tinycore.schedule.cache import (
    cached_template,
    node_structure_key,
    schedule_cached,
    schedule_generation,
    structure_key,
    template_of,
)
from tinycore.schedule.nodes import is_contiguous_buffer_view, is_realized_view, strip_identity, view_base
from tinycore.schedule.scheduler import ScheduleItem
from tinycore.schedule.views import contiguous_range
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp
from tinycore.viz import hook as _viz

if TYPE_CHECKING:
    from tinycore.device.buffer import Buffer
    from tinycore.engine.linear import LinearSchedule
    from tinycore.schedule.cache import _Template
    from tinycore.schedule.scheduler import Schedule

_runners: dict[tuple[UOp, str, int], Runner] = {}
"""Compiled kernels by (AST, device, NUM_CPU_THREADS): the heuristic splits a CPU kernel across that many workers
and its launch runs them on that many threads, so a kernel compiled under another setting is compiled again."""
_beam_runners: dict[tuple[UOp, str, int, int], Runner] = {}
"""Kernels whose opts a BEAM search chose, by (AST, device, NUM_CPU_THREADS, BEAM width): a kernel compiled with
another BEAM setting (or none) is searched, or read from the search cache, again."""
_beam_generation = 0
"""Bumped by forget_searched_kernels, so that launch plans made with the dropped kernels are not run again."""


def _threads_setting() -> int:
    """The NUM_CPU_THREADS in effect (0: one worker per CPU), part of every runner's key."""
    return int(NUM_CPU_THREADS.value)


def get_runner(ast: UOp, device: str, buffers: Sequence[Buffer] | None = None,
               var_vals: dict[UOp, int] | None = None) -> Runner:
    """The compiled kernel for `ast` on `device` (compiled on first use, then cached by AST identity).

    With BEAM=N (N >= 1) and the kernel's Buffers given, its opts come from a BEAM search timed on copies of
    `buffers` (engine/search.py), or from the search's disk cache.
    """
    width = int(BEAM.value)
    if width >= 1 and buffers is not None:
        beam_key = (ast, device, _threads_setting(), width)
        found = _beam_runners.get(beam_key)
        if found is None:
            from tinycore.engine.search import beam_search
            opts = beam_search(ast, device, buffers, var_vals or {}, width)
            found = _beam_runners[beam_key] = Runner(ast, device, opts=opts)
        return found
    key = (ast, device, _threads_setting())
    runner = _runners.get(key)
    if runner is None:
        runner = _runners[key] = Runner(ast, device)
    return runner


def forget_runners() -> None:
    """Forget the compiled kernels held in this process (the disk cache stays), so the next realize of each kernel
    lowers it again. VIZ calls this when recording starts, so that every kernel realized while recording has its
    passes recorded, including kernels this process ran before."""
    _runners.clear()
    _beam_runners.clear()


def _compile_workers() -> int:
    return max(1, min(8, os.cpu_count() or 1))


def prepare_runners(items: Sequence[ScheduleItem]) -> None:
    """Compile the kernels of `items` that have no runner yet, together where the device's compiler can.

    A compiler with `compile_batch` gets every new kernel of a device at once, split into one batch per CPU
    compiled in parallel threads (the compiler runs as a subprocess); other devices compile on first launch.
    """
    if BEAM >= 1:
        return  # each kernel is searched (or read from the search cache) at its first launch
    pending: dict[str, dict[UOp, None]] = {}
    threads = _threads_setting()
    for item in items:
        if item.ast.op is Ops.COPY or not item.buffers:
            continue
        device = buffer_of(item.buffers[0]).device
        if (item.ast, device, threads) not in _runners:
            pending.setdefault(device, {})[item.ast] = None
    for device, asts in pending.items():
        if len(asts) >= 2:
            _compile_together(device, list(asts))


def _compile_together(device: str, asts: list[UOp]) -> None:
    """Runners for `asts` on `device` compiled in batches, when its compiler has `compile_batch`."""
    from tinycore.device.registry import Device
    opened = Device[device]
    if not compiles_in_batches(opened.compiler):
        return
    batch = opened.compiler.compile_batch
    from tinycore.codegen import lower_to_program
    # sorted by source: the batches (and so their disk cache keys) do not depend on the schedule's order
    with collection_paused():
        specs = sorted(((ast, lower_to_program(ast, opened.renderer)) for ast in asts), key=lambda pair: pair[1].src)
    chunk_count = min(_compile_workers(), len(specs))
    chunks = [specs[start::chunk_count] for start in range(chunk_count)]
    sources = [[(spec.function_name, spec.src) for _, spec in chunk] for chunk in chunks]
    try:
        if chunk_count == 1:
            results = [batch(sources[0])]
        else:
            import concurrent.futures  # with logging: only a batch compile in threads needs it
            with concurrent.futures.ThreadPoolExecutor(chunk_count) as pool:
                results = list(pool.map(batch, sources))
    except CompileError:
        return  # each kernel compiles on its own at launch, so the error names the kernel that failed
    threads = _threads_setting()
    for chunk, (library, symbols) in zip(chunks, results, strict=True):
        for (ast, spec), symbol in zip(chunk, symbols, strict=True):
            _runners[(ast, device, threads)] = Runner(ast, device, (spec, library, symbol))


def _run_copy(item: ScheduleItem) -> None:
    destination, source = (buffer_of(node) for node in item.buffers)
    if _capturing and CAPTURING:
        _capturing[-1].append(CapturedCall(None, [destination.ensure_allocated(), source.ensure_allocated()], {}))
    copy_buffers(destination, source)
    _counts.global_mem += source.nbytes
    if DEBUG >= 2:
        print(f"copy   {source.nbytes:>10} bytes {source.device} -> {destination.device}")


def _release_points(items: Sequence[ScheduleItem], temporaries: Sequence[UOp]) -> dict[int, list[UOp]]:
    """For each item position, the temporary buffers whose last use it is."""
    temporary_set = set(temporaries)
    last_use: dict[UOp, int] = {}
    for position, item in enumerate(items):
        for node in item.buffers:
            if node in temporary_set:
                last_use[node] = position
    releases: dict[int, list[UOp]] = {}
    for node, position in last_use.items():
        releases.setdefault(position, []).append(node)
    return releases


class CapturedCall:
    """One launch recorded while TinyJit captures: a kernel runner or a copy, the Buffers it used, its variables."""

    __slots__ = ("runner", "buffers", "var_vals")

    def __init__(self, runner: Runner | None, buffers: list[Any], var_vals: dict[UOp, int]):
        self.runner, self.buffers, self.var_vals = runner, buffers, var_vals


_capturing: list[list[CapturedCall]] = []


active_captures = _capturing
"""capture_begin's recordings in progress, innermost last (empty while nothing captures): the same list, read directly
by TinyJit's call, which runs on every replay (a capturing() call is a Python frame there)."""


def capture_begin() -> list[CapturedCall]:
    """Start recording every launch run by realize (used by TinyJit); returns the list that fills up."""
    recorded: list[CapturedCall] = []
    _capturing.append(recorded)
    return recorded


def capture_end() -> None:
    """Stop the innermost recording started by capture_begin."""
    _capturing.pop()


def capturing() -> bool:
    """Whether a TinyJit capture is recording launches now."""
    return bool(_capturing)


def run_linear(linear: LinearSchedule, var_vals: dict[UOp, int] | None = None) -> None:
    """Run a schedule from `Tensor.linear_with_vars()` / `schedule_linear()` (a LinearSchedule), as tinygrad's
    run_linear runs its LINEAR program; `var_vals` overrides the Variables' values the calls were made with."""
    items = linear.items
    if var_vals:
        items = [item._replace(var_vals={variable: var_vals.get(variable, value)
                                         for variable, value in item.var_vals.items()}) for item in items]
    run_schedule(items, linear.temporaries)


def run_schedule(items: Sequence[ScheduleItem], temporaries: Sequence[UOp] = ()) -> None:
    """Run `items` in order: copies through host memory, kernels through their compiled programs.

    Each of `temporaries` (buffers only the schedule uses) goes back to its allocator after its last use, so a
    later item can reuse the memory.
    """
    timed = DEBUG >= 2
    prepare_runners(items)
    releases = _release_points(items, temporaries) if temporaries else None
    for position, item in enumerate(items):
        if item.ast.op is Ops.COPY:
            _run_copy(item)
        else:
            _run_kernel(item, timed)
        if releases is not None and position in releases:
            for node in releases.pop(position):
                buffer_of(node).deallocate()


def _run_kernel(item: ScheduleItem, timed: bool) -> None:
    """Launch one kernel item (timed and reported at DEBUG >= 2)."""
    device_buffers = [buffer_of(node).ensure_allocated() for node in item.buffers]
    runner = get_runner(item.ast, device_buffers[0].device, device_buffers, item.var_vals)
    if _capturing and CAPTURING:  # Context(CAPTURING=0): run, but leave out of the capture
        _capturing[-1].append(CapturedCall(runner, device_buffers, dict(item.var_vals)))
    if _viz.ENABLED:
        elapsed = _viz.launch(runner, [buffer._buf for buffer in device_buffers], item.var_vals, timed, item.ast)
    else:
        elapsed = runner([buffer._buf for buffer in device_buffers], item.var_vals, wait=timed)
    _counts.kernel_count += 1
    estimates = runner.spec.estimates
    _counts.global_ops += estimates.ops
    _counts.global_mem += estimates.mem
    if timed:
        seconds = float(elapsed or 0.0)
        _counts.time_sum_s += seconds
        rate = max(seconds, 1e-9)
        print(f"kernel {runner.name:<28} {seconds * 1e6:9.2f} us {estimates.ops / rate / 1e9:9.2f} GFLOPS "
              f"{estimates.mem / rate / 1e9:8.2f} GB/s")


# ---- realized results: a node realized once is read from its buffer by later graphs ----

_KNOWN_ATTRIBUTE = "_known_result"
"""The attribute of a computed node holding (generation, a weak reference to the realized view holding its value).
An entry counts only while its generation is the current one: a schedule that overwrote a buffer starts a new
generation, after which every remembered result may be stale. The reference is weak because a node lives as long as
any graph that holds it (and the same graph built again while it lives is that very node): a strong reference would
keep each result's buffer alive past its last Tensor, so a loop of eager calls would write every other call into a
second buffer (out of cache: softmax over (4096, 1024) 12% slower) and hold twice the memory. A result nobody holds
any more is simply computed again."""
_generation = 0
_remembered_references: set[weakref.ref[UOp]] = set()
"""Weak references to the live nodes that remember a result of the current generation (none: graphs are not walked
looking for them). A realized Tensor drops its graph for the result, so in eager code the set is mostly empty again
by the next call. Each reference's callback is the set's own `discard` (C: a node that dies leaves the set without a
Python call, where a WeakSet makes two per node); its truth is read on every realize and TinyJit call."""
_discard_reference = _remembered_references.discard


def _device_hint(uop: UOp) -> Any:
    """The device of `uop` as far as the nodes along its first sources know it already (their cached `device`),
    None when none does within a few steps. `uop.device` would compute it for every new node of the graph (24 us for
    a fresh matmul graph after a pause), before the device could start getting ready for the launches; a wrong
    answer (the source of a COPY) only wakes another device for nothing."""
    node = uop
    for _ in range(DEVICE_HINT_STEPS):
        known = node.__dict__.get("device", _UNKNOWN)
        if known is not _UNKNOWN:
            return known
        if not node.src:
            return None
        node = node.src[0]
    return None


_UNKNOWN = object()
DEVICE_HINT_STEPS = 32
"""How far `_device_hint` follows first sources (a fresh graph's chain down to a realized input is a few nodes)."""


def _with_known_results(uop: UOp) -> UOp:
    """`uop` with every node realized by an earlier call (since the last ASSIGN) replaced by its realized view.

    The root itself is never replaced: two tensors with identical graphs get buffers of their own, so writing into
    one (assign) never changes the other.
    """
    if not _remembered_references:
        return uop
    mapping = {}
    generation = _generation
    for node in uop.toposort:
        entry = node.__dict__.get(_KNOWN_ATTRIBUTE)
        if entry is not None and entry[0] == generation and node is not uop:
            result = entry[1]()
            if result is not None:
                mapping[node] = result
    return uop.substitute(mapping) if mapping else uop


def _remember(computed: Sequence[UOp], results: Sequence[UOp], has_assign: bool) -> None:
    """Record the results of `computed`; after a schedule that overwrote buffers, forget everything instead."""
    if has_assign:
        invalidate_known_results()
        return
    for node, result in zip(computed, results, strict=True):
        if result is not node:
            node.__dict__[_KNOWN_ATTRIBUTE] = (_generation, weakref.ref(result))
            _remembered_references.add(weakref.ref(node, _discard_reference))


remembered_results = _remembered_references
"""The same set as `_remembered_references`: a caller that invalidates after every step (a TinyJit replay) tests it
first and calls invalidate_known_results only when it holds something."""


def invalidate_known_results() -> None:
    """Forget every remembered result: buffers were written outside realize (a TinyJit replay)."""
    global _generation
    if _remembered_references:
        _generation += 1
        _remembered_references.clear()


def realize_uops(uops: Sequence[UOp]) -> list[UOp]:
    """Realize tensor-level graphs together (one schedule, shared subgraphs computed once).

    Returns for each input a realized node: `BUFFER.reshape(shape)`, or a view (movement ops over a BUFFER) when
    the input already was one. Nodes realized by earlier calls are read from their buffers, not recomputed, until
    a realize that runs an ASSIGN (after which any remembered result may be stale).
    """
    if len(uops) == 1:  # the eager shortcut's route, its result remembered on the node
        return [realize_one(uops[0], True)]
    return _realize_scheduled(uops, None)


def _sole_holders() -> int:
    """What sys.getrefcount reports inside realize_one for a node that only the calling Tensor holds: its `uop`
    attribute, Tensor.realize's local, realize_one's parameter and the call's own argument (measured here on an
    object held the same way, so that an interpreter that counts differently is measured, not assumed)."""
    def callee(node: object) -> int:
        return _getrefcount(node)

    class Holder:
        """Holds its node in an attribute, as a Tensor does."""

    holder = Holder()
    holder.uop = node = object()  # type: ignore[attr-defined]
    return callee(node)


_getrefcount = sys.getrefcount
_SOLE_HOLDERS = _sole_holders()


def realize_one(uop: UOp, kept: bool) -> UOp:
    """`realize_uops([uop])[0]` for Tensor.realize of one tensor over the unrealized, single-device node `uop`, held
    in the tensor's `uop` attribute and the caller's local (eager code realizes every op this way).

    A result of the eager shortcut is remembered on `uop` (as realize_uops does) only when the node outlives this
    call: `kept` (the tensor keeps it as its graph for gradients) or something besides the tensor and its caller holds
    it (a reference count above theirs). Otherwise the node dies once the tensor takes its result, and the entry (a
    node attribute and two weak references) would die with it unread."""
    if not _capturing:
        eager = eager_key(uop)
        if eager is not None:
            shortcut = eager_plans.get(eager[0])
            if (shortcut is not None and shortcut.threads == _eager.shortcut_threads
                    and shortcut.generation == _schedule_cache._generation and not _viz.ENABLED):
                result = run_eager_plan(shortcut, eager[1])
                if kept or _getrefcount(uop) > _SOLE_HOLDERS:
                    uop.__dict__[_KNOWN_ATTRIBUTE] = (_generation, weakref.ref(result))
                    _remembered_references.add(weakref.ref(uop, _discard_reference))
                return result
    else:
        eager = None
    return _realize_scheduled([uop], eager)[0]


def _realize_scheduled(uops: Sequence[UOp], eager: tuple[tuple[object, ...], list[UOp]] | None) -> list[UOp]:
    """realize_uops past the eager shortcut (`eager`: the graph's eager key when it has one and nothing captures,
    else None): from the structure's launch plan, or through a schedule."""
    if len(uops) == 1:  # eager code realizes one tensor at a time: its checks without the loops
        only = uops[0]
        if only.op is Ops.MULTI:
            return _realize_multi(uops)
        if is_realized_view(only):
            return [only]
        pending = [only]
    else:
        if any(uop.op is Ops.MULTI for uop in uops):
            return _realize_multi(uops)
        pending = [uop for uop in uops if not is_realized_view(uop)]
        if not pending:
            return list(uops)
    if _expectations:  # first thing once there is work, so that the device has the rest of realize to get ready
        expect = _expectations.get(_device_hint(pending[0]))
        if expect is not None:
            expect()
    if len(uops) == 1:
        to_schedule = pending if _capturing or not _remembered_references else [_with_known_results(pending[0])]
    else:
        to_schedule = pending if _capturing else [_with_known_results(uop) for uop in pending]
    if len(to_schedule) == 1:
        keyed = node_structure_key(to_schedule[0])
        template = template_of(to_schedule[0], keyed[0])
    else:
        keyed = structure_key(to_schedule)
        template = cached_template(keyed[0])
    plan = None if template is None else template.plan
    if plan is not None and plan.setting != (setting := _plan_setting()):
        # its runners were compiled for another NUM_CPU_THREADS or BEAM: the plan made under this one, if any
        plan = plan.alternatives.get(setting)
    if plan is not None and template is not None and not _capturing and DEBUG.value < 1 and not _viz.ENABLED:
        outputs = _run_plan(plan, template, to_schedule, keyed[1])
        has_assign = plan.has_assign
    else:
        with collection_paused():
            schedule = schedule_cached(to_schedule, device_facts, keyed)
        if DEBUG >= 1:
            kernels = sum(1 for item in schedule.items if item.ast.op is not Ops.COPY)
            print(f"realize: {kernels} kernel{'s' if kernels != 1 else ''}, "
                  f"{len(schedule.items) - kernels} cop{'ies' if len(schedule.items) - kernels != 1 else 'y'}")
        run_schedule(schedule.items, schedule.temporaries)
        if _viz.ENABLED:  # after the run: the kernels it compiled are recorded by then
            _viz.schedule(to_schedule, schedule)
        if template is None:
            # a structure seen for the first time: schedule_cached has just made its template from this schedule
            # (None under SCACHE=0), so its launch plan is made now, from the kernels this run compiled, and the next
            # graph of the structure runs from it (and, when eager, takes the shortcut) instead of the third
            template = cached_template(keyed[0])
        if template is not None and plan is None:
            made = _make_plan(template, schedule)
            if made is not None and template.plan is not None:
                made.alternatives = template.plan.alternatives
                made.alternatives[made.setting] = made
            else:
                template.plan = made
        outputs, has_assign = schedule.outputs, schedule.has_assign
    if eager is not None and template is not None and template.plan is not None:
        # the first graph of this structure, or one whose eager plan is stale: the plan it ran becomes the eager one
        remember_eager_plan(eager[0], eager[1], template, template.plan.alternatives.get(_plan_setting()), keyed[1],
                            schedule_generation())
    _remember(pending, outputs, has_assign)
    if len(uops) == 1:
        return outputs
    replacement = dict(zip(pending, outputs, strict=True))
    return [replacement.get(uop, uop) for uop in uops]


# ---- launch plans: a schedule seen before runs straight from its template ----

class _Step:
    """One item of a launch plan: a kernel's runner (None for a copy), the template slots it takes in launch
    order, its variables, and the temporary slots whose last use it is."""

    __slots__ = ("runner", "launch", "slots", "var_vals", "release")

    def __init__(self, runner: Runner | None, slots: tuple[int, ...], var_vals: dict[UOp, int],
                 release: tuple[int, ...]):
        self.runner, self.slots, self.var_vals, self.release = runner, slots, var_vals, release
        self.launch = None if runner is None or var_vals else runner._fast


class _Plan:
    """What realize runs for a cached schedule: its steps, the counters they add, whether it assigns, and the
    setting its runners were compiled for (`_plan_setting`: NUM_CPU_THREADS, BEAM). The template keeps the first
    plan made; `alternatives` (shared by every plan of the template) holds each plan by its setting, so that a program
    switching settings (the default kernels and BEAM's in turn) keeps both."""

    __slots__ = ("steps", "has_assign", "kernel_count", "ops", "mem", "setting", "alternatives")

    def __init__(self, steps: list[_Step], has_assign: bool):
        self.steps, self.has_assign = steps, has_assign
        self.setting = _plan_setting()
        self.alternatives: dict[tuple[int, int, int], _Plan] = {self.setting: self}
        runners = [step.runner for step in steps if step.runner is not None]
        self.kernel_count = len(runners)
        self.ops = sum(runner.spec.estimates.ops for runner in runners)
        self.mem = sum(runner.spec.estimates.mem for runner in runners)


def _plan_setting() -> tuple[int, int, int]:
    """What a launch plan's runners depend on besides its template: NUM_CPU_THREADS, the BEAM width and, under BEAM,
    which generation of searched kernels they are (forget_searched_kernels starts a new one)."""
    width = int(BEAM.value)
    return (int(NUM_CPU_THREADS.value), width, _beam_generation if width >= 1 else 0)


def forget_searched_kernels() -> None:
    """Drop the kernels BEAM chose in this process, and the launch plans that hold them, as a new process starts: the
    next realize of each searches again (or reads the search's disk cache)."""
    global _beam_generation
    _beam_runners.clear()
    _beam_generation += 1


def _make_plan(template: _Template, schedule: Schedule) -> _Plan | None:
    """The launch plan of `template`, made after `schedule` (its first instance since it was cached) ran: the
    runners its kernels compiled to, looked up once. None when a kernel has no plain runner (symbolic launch
    counters are read per launch, so those are kept too) or a copy's counters depend on its buffers."""
    steps: list[_Step] = []
    last_use: dict[int, int] = {}
    for position, (_, buffer_slots, _) in enumerate(template.items):
        for slot in buffer_slots:
            last_use[slot] = position
    temporaries = set(template.temporaries)
    releases: dict[int, list[int]] = {}
    for slot, position in last_use.items():
        if slot in temporaries:
            releases.setdefault(position, []).append(slot)
    for position, ((ast, buffer_slots, var_vals), item) in enumerate(zip(template.items, schedule.items,
                                                                          strict=True)):
        release = tuple(releases.get(position, ()))
        if ast.op is Ops.COPY:
            steps.append(_Step(None, buffer_slots, {}, release))
            continue
        device, width = buffer_of(item.buffers[0]).device, int(BEAM.value)
        runner = (_beam_runners.get((ast, device, _threads_setting(), width)) if width >= 1
                  else _runners.get((ast, device, _threads_setting())))
        if runner is None:
            return None
        launch_slots = tuple(buffer_slots[index] for index in runner.globals) if runner.globals else buffer_slots
        steps.append(_Step(runner, launch_slots, var_vals, release))
    return _Plan(steps, template.has_assign)


def _run_plan(plan: _Plan, template: _Template, outputs: Sequence[UOp], inputs: list[UOp]) -> list[UOp]:
    """Run `plan` on new graphs of its template's structure reading `inputs`; returns the realized outputs.

    The same launches run_schedule makes for the template's instance, without building schedule items: buffers
    are allocated at their first use and temporaries freed after their last."""
    slots = template.fill_slots(inputs) if template.new_buffers else inputs  # read only below
    handles: list[Any] = [None] * len(slots)
    for step in plan.steps:
        arguments = []
        for slot in step.slots:
            handle = handles[slot]
            if handle is None:
                # an allocated Buffer kept on its node (buffer_of's own lookup) without two calls per argument
                known = slots[slot].__dict__.get(_BUFFER_ATTRIBUTE)
                handle = known._buf if known is not None else None
                if handle is None:
                    handle = buffer_of(slots[slot]).ensure_allocated()._buf
                handles[slot] = handle
            arguments.append(handle)
        if step.launch is not None:
            step.launch(arguments)
        elif step.runner is not None:
            step.runner.program(*arguments, **_launch_arguments(step.runner, step.var_vals))
        else:
            destination, source = (buffer_of(slots[slot]) for slot in step.slots)
            copy_buffers(destination, source)
            _counts.global_mem += source.nbytes
        for slot in step.release:
            buffer_of(slots[slot]).deallocate()
    _counts.kernel_count += plan.kernel_count
    _counts.global_ops += plan.ops
    _counts.global_mem += plan.mem
    return template.outputs_for(outputs, slots)


def _launch_arguments(runner: Runner, var_vals: dict[UOp, int]) -> dict[str, Any]:
    """The sizes and values of a launch of `runner` with `var_vals` (as Runner.__call__ computes them)."""
    if runner.static_dims is not None:
        global_size, local_size = runner.static_dims
        return {"global_size": global_size, "local_size": local_size, "vals": (), "wait": False}
    global_size, local_size = runner.spec.launch_dims(var_vals)
    return {"global_size": global_size, "local_size": local_size, "vals": runner.spec.vals(var_vals),
            "wait": False}


def _realize_multi(uops: Sequence[UOp]) -> list[UOp]:
    """realize_uops where some inputs are MULTI nodes: every device's graph realized in one schedule."""
    flat: list[UOp] = []
    for uop in uops:
        flat.extend(uop.src if uop.op is Ops.MULTI else (uop,))
    realized = iter(realize_uops(flat))
    results = []
    for uop in uops:
        if uop.op is Ops.MULTI:
            results.append(UOp(Ops.MULTI, uop.dtype, tuple(next(realized) for _ in uop.src), uop.arg))
        else:
            results.append(next(realized))
    return results


def to_host(uop: UOp) -> memoryview:
    """The value of `uop` (realized first if needed) as host bytes in C order of its shape (a multi-device value
    is gathered onto its first device)."""
    if uop.op is Ops.MULTI:
        from tinycore.uop.multi import gather
        uop = gather(uop, uop.src[0].device)
    realized = strip_identity(realize_uops([uop])[0])
    if not is_contiguous_buffer_view(realized):
        found = contiguous_range(realized) if device_facts(realized.device).supports_views else None
        if found is not None and found[2] > 0 and found[0].op is Ops.BUFFER:
            # a range of a buffer (t[10:20]) is read where it lies: no kernel, so a device that runs none (DISK) too
            base, offset, count = found
            view = buffer_of(base).view(count, realized.dtype, offset)
            return view.copyout(memoryview(bytearray(view.nbytes)))
        realized = realize_uops([realized.clone()])[0]
    buffer = buffer_of(view_base(realized))
    return buffer.copyout(memoryview(bytearray(buffer.nbytes)))
