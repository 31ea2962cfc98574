"""The VIZ recording: realized tensor graphs and their schedules, each kernel's named passes (graph after the pass,
rules fired, time, nodes changed), linear program and source, and with PROFILE=1 the launch timeline.

Everything here runs only while recording (tinycore.viz.hook.ENABLED): the core calls in through tinycore.viz.hook,
where this module installs itself, from graph_rewrite, lower_to_program and realize. A failure while recording is
kept in the recording's `errors`, never raised into the program being watched.
"""
from __future__ import annotations

import atexit
import enum
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, cast

from tinycore.helpers import PROFILE
from tinycore.uop.ops import Ops
from tinycore.uop.patterns import CompiledRule, PatternMatcher
from tinycore.uop.uop import UOp
from tinycore.viz import hook

FORMAT_VERSION = 1
ARG_LIMIT = 80  # characters of a node's argument kept in the recording
GraphJSON = dict[str, object]


class KernelSource(Protocol):
    """What the recording reads of a ProgramSpec."""

    @property
    def name(self) -> str: ...

    @property
    def device(self) -> str: ...

    @property
    def src(self) -> str: ...


class ScheduledKernel(Protocol):
    """What the recording reads of a ScheduleItem."""

    @property
    def ast(self) -> UOp: ...


class ScheduleLike(Protocol):
    """What the recording reads of a Schedule."""

    @property
    def items(self) -> Sequence[ScheduledKernel]: ...


class Launcher(Protocol):
    """What the recording reads of, and does with, a CompiledRunner."""

    name: str
    device: str

    def __call__(self, buffers: Sequence[object], var_vals: dict[UOp, int], wait: bool = False) -> float | None: ...


def _arg_text(arg: object) -> str:
    if arg is None:
        return ""
    text = arg.name if isinstance(arg, enum.Enum) else repr(arg)
    return text if len(text) <= ARG_LIMIT else text[:ARG_LIMIT - 3] + "..."


def _dtype_text(dtype: object) -> str:
    return str(dtype).removeprefix("dtypes.")


def graph_json(root: UOp, before: set[UOp] | None = None) -> GraphJSON:
    """The graph under `root` as {"nodes": [{id, op, dtype, arg, src}], "changed": [ids]}: one node per UOp, in
    toposort order (sources first); `changed` lists the nodes not in `before` (all of them when it is None)."""
    order = list(root.toposort)
    index = {node: position for position, node in enumerate(order)}
    nodes = [{"id": position, "op": node.op.name, "dtype": _dtype_text(node.dtype), "arg": _arg_text(node.arg),
              "src": [index[source] for source in node.src]} for position, node in enumerate(order)]
    changed = [] if before is None else [index[node] for node in order if node not in before]
    return {"nodes": nodes, "changed": changed}


def _rule_label(function: Callable[..., object]) -> str:
    code = getattr(function, "__code__", None)
    if code is None:
        return repr(function)
    where = f"{os.path.basename(code.co_filename)}:{code.co_firstlineno}"
    name = getattr(function, "__name__", "")
    return where if name in ("", "<lambda>") else f"{name} ({where})"


class CountingMatcher:
    """A stand-in for a PatternMatcher during a recorded pass: the same rules in the same order (as
    PatternMatcher.rewrite tries them), counting which rule fired how often."""

    def __init__(self, matcher: PatternMatcher):
        self.matcher = matcher
        self.counts: dict[CompiledRule, int] = {}

    def rewrite(self, uop: UOp, ctx: object = None) -> UOp | None:
        """PatternMatcher.rewrite, counting the rule whose result is used."""
        sources = uop.src
        for rule, early_reject in self.matcher.by_op[uop.op]:
            if early_reject and not all(any(source.op is required for source in sources)
                                        for required in early_reject):
                continue
            result = rule(uop, ctx)
            if result is not None:
                self.counts[rule] = self.counts.get(rule, 0) + 1
                return result
        return None

    def rule_counts(self) -> list[tuple[str, int]]:
        """(rule label, times fired), most fired first."""
        function_of = {rule.compiled(): rule.function for rule in self.matcher.rules if rule._compiled is not None}
        labels = [(_rule_label(function_of.get(rule, rule)), count) for rule, count in self.counts.items()]
        return sorted(labels, key=lambda pair: -pair[1])


@dataclass
class KernelRecord:
    """One kernel as codegen lowered it."""

    id: int
    name: str = ""
    device: str = ""
    passes: list[dict[str, object]] = field(default_factory=list)
    linear: list[str] = field(default_factory=list)
    source: str = ""
    language: str = ""

    def to_json(self) -> dict[str, object]:
        """The JSON form (see docs/architecture.md, "VIZ")."""
        return {"id": self.id, "name": self.name, "device": self.device, "passes": self.passes,
                "linear": self.linear, "source": self.source, "language": self.language}


@dataclass
class Recording:
    """All that VIZ recorded in this process."""

    kernels: list[KernelRecord] = field(default_factory=list)
    schedules: list[dict[str, object]] = field(default_factory=list)
    timeline: list[dict[str, object]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    kernel_of_ast: dict[UOp, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def to_json(self) -> dict[str, object]:
        """The recording as one JSON document."""
        return {"version": FORMAT_VERSION, "kernels": [kernel.to_json() for kernel in self.kernels],
                "schedules": self.schedules, "timeline": self.timeline + _queue_events(), "errors": self.errors}


RECORDING = Recording()
_current = threading.local()  # .kernel: the KernelRecord being lowered on this thread
_at_exit_registered: list[bool] = []


class _Recorder:
    """This module as the core's hook.Recorder. The hook sits below the IR, so it hands on objects: its callers
    (graph_rewrite, codegen, realize) pass the types each cast names."""

    def rewrite(self, run: Callable[..., UOp], sink: object, matcher: object, ctx: object, bottom_up: bool,
                name: str) -> UOp:
        """See hook.Recorder."""
        return recorded_rewrite(run, cast(UOp, sink), cast(PatternMatcher, matcher), ctx, bottom_up, name)

    def kernel_begin(self, ast: object) -> None:
        """See hook.Recorder."""
        kernel_begin(cast(UOp, ast))

    def kernel_end(self, ast: object, optimized: object, spec: object, uops: Sequence[object],
                   renderer: object) -> None:
        """See hook.Recorder."""
        kernel_end(cast(UOp, ast), cast(UOp, optimized), cast(KernelSource, spec), cast("Sequence[UOp]", uops),
                   renderer)

    def step(self, name: str, graph: object, before: object) -> None:
        """See hook.Recorder."""
        step(name, cast(UOp, graph), cast("UOp | None", before))

    def schedule(self, outputs: Sequence[object], schedule: object) -> None:
        """See hook.Recorder."""
        record_schedule(cast("Sequence[UOp]", outputs), cast(ScheduleLike, schedule))

    def launch(self, runner: Callable[..., float | None], buffers: list[object], var_vals: object, wait: bool,
               ast: object) -> float | None:
        """See hook.Recorder."""
        return timed_launch(cast(Launcher, runner), buffers, cast("dict[UOp, int]", var_vals), wait, cast(UOp, ast))


def enable(at_exit: bool = False) -> None:
    """Start recording (`import tinycore` does this with VIZ=1); with `at_exit`, write and serve the recording at
    exit. Kernels this process compiled before are lowered again when next realized, so they are recorded too."""
    from tinycore.engine.realize import forget_runners
    from tinycore.schedule.cache import clear_schedule_cache
    forget_runners()
    clear_schedule_cache()  # a cached schedule launches its kernels without lowering them
    hook.install(_Recorder())
    if at_exit and not _at_exit_registered:
        _at_exit_registered.append(True)
        atexit.register(write_and_serve)


def disable() -> None:
    """Stop recording (what was recorded stays in RECORDING)."""
    hook.install(None)


def reset() -> None:
    """Forget everything recorded."""
    global RECORDING
    RECORDING = Recording()


def _note_error(where: str, error: BaseException) -> None:
    RECORDING.errors.append(f"{where}: {type(error).__name__}: {error}")


# ---- passes ----

def recorded_rewrite(run: Callable[..., UOp], sink: UOp, matcher: PatternMatcher, ctx: object, bottom_up: bool,
                     name: str) -> UOp:
    """graph_rewrite's body `run`, recorded as a pass of the kernel being lowered when it rewrites a whole graph
    (a SINK); rewrites of single expressions (index simplification) and rewrites outside a kernel just run."""
    kernel: KernelRecord | None = getattr(_current, "kernel", None)
    if kernel is None or sink.op is not Ops.SINK:
        return run(sink, matcher, ctx, bottom_up, name)
    counting = CountingMatcher(matcher)
    start = time.perf_counter()
    result = run(sink, counting, ctx, bottom_up, name)
    elapsed = time.perf_counter() - start
    try:
        record_pass(kernel, name, result, set(sink.toposort), elapsed, counting.rule_counts())
    except Exception as error:  # a recording problem must not break the program being watched
        _note_error(f"pass {name}", error)
    return result


def record_pass(kernel: KernelRecord, name: str, graph: UOp, before: set[UOp] | None, seconds: float = 0.0,
                rules: Sequence[tuple[str, int]] = ()) -> None:
    """Add the pass `name` (the graph after it, what changed against the nodes `before`) to `kernel`."""
    kernel.passes.append({"name": name, "ms": round(seconds * 1e3, 4), "rules": [list(rule) for rule in rules],
                          **graph_json(graph, before)})


def kernel_begin(ast: UOp) -> KernelRecord:
    """A new kernel record for `ast`, current on this thread until kernel_end; its first pass is the AST."""
    with RECORDING.lock:
        kernel = KernelRecord(len(RECORDING.kernels))
        RECORDING.kernels.append(kernel)
    _current.kernel = kernel
    try:
        record_pass(kernel, "kernel AST", ast, None)
    except Exception as error:
        _note_error("kernel AST", error)
    return kernel


def step(name: str, graph: UOp, before: UOp | None = None) -> None:
    """Record a codegen step that is not a graph_rewrite (a graph algorithm) as a pass of the current kernel: the
    graph after it, and the nodes that are not in the graph `before` it marked as changed."""
    kernel: KernelRecord | None = getattr(_current, "kernel", None)
    if kernel is not None:
        record_pass(kernel, name, graph, None if before is None else set(before.toposort))


def kernel_end(ast: UOp, optimized: UOp, spec: KernelSource, uops: Sequence[UOp], renderer: object) -> None:
    """Finish the current kernel: the `optimized` AST (opts applied) as a pass, its name, device, linear program
    and source (from the ProgramSpec `spec`)."""
    kernel: KernelRecord | None = getattr(_current, "kernel", None)
    _current.kernel = None
    if kernel is None:
        return
    try:
        if optimized is not ast:
            record_pass(kernel, "optimized AST (opts applied)", optimized, set(ast.toposort))
            kernel.passes.insert(1, kernel.passes.pop())  # opts come before the passes codegen ran after them
        kernel.name, kernel.device, kernel.source = spec.name, str(spec.device), spec.src
        kernel.language = type(renderer).__name__
        position = {node: number for number, node in enumerate(uops)}
        kernel.linear = [f"{number:4d} {node.op.name:<14} {_dtype_text(node.dtype):<14} "
                         f"{[position.get(source, '?') for source in node.src]!s:<16} {_arg_text(node.arg)}"
                         for number, node in enumerate(uops)]
        with RECORDING.lock:
            RECORDING.kernel_of_ast[ast] = kernel.id
    except Exception as error:  # a recording problem must not break the program being watched
        _note_error("kernel_end", error)


# ---- schedules ----

def record_schedule(outputs: Sequence[UOp], schedule: ScheduleLike) -> None:
    """Record the tensor graph of `outputs` and the kernels and copies of its `schedule`, with each kernel's part
    of the graph (the nodes between its root and the roots it reads) outlined."""
    try:
        RECORDING.schedules.append(_schedule_json(len(RECORDING.schedules), outputs, schedule))
    except Exception as error:
        _note_error("record_schedule", error)


def _schedule_json(number: int, outputs: Sequence[UOp], schedule: ScheduleLike) -> dict[str, object]:
    from tinycore.dtype import dtypes
    from tinycore.engine.memory import device_facts  # what realize schedules with: fusion depends on the device
    from tinycore.schedule.empty import fold_empty
    from tinycore.schedule.factor import factor_reduces
    from tinycore.schedule.fusion import find_roots
    from tinycore.schedule.lower import lower_kernel
    from tinycore.schedule.scheduler import _output_view  # the scheduler's own buffers for its roots
    from tinycore.schedule.split_reduce import split_large_reduces
    prepared = split_large_reduces(factor_reduces(fold_empty(list(outputs))), device_facts)
    sink = UOp(Ops.SINK, dtypes.void, tuple(prepared))
    graph = graph_json(sink)
    order = list(sink.toposort)
    index = {node: position for position, node in enumerate(order)}
    roots = list(find_roots(prepared, (), device_facts))
    root_set = set(roots)
    groups: list[dict[str, object]] = []
    for root in roots:
        members, stack = [], [root]
        seen: set[UOp] = set()
        while stack:
            node = stack.pop()
            if node in seen or node not in index:
                continue
            seen.add(node)
            members.append(index[node])
            stack.extend(source for source in node.src if source not in root_set and source.op is not Ops.BUFFER)
        groups.append({"root": index.get(root), "nodes": sorted(members)})
    items: list[dict[str, object]] = []
    for item in schedule.items:
        if item.ast.op is Ops.COPY:
            items.append({"kind": "copy", "kernel": None, "name": "copy"})
        else:
            kernel_id = RECORDING.kernel_of_ast.get(item.ast)
            items.append({"kind": "kernel", "kernel": kernel_id,
                          "name": RECORDING.kernels[kernel_id].name if kernel_id is not None else "kernel"})
    # each root's kernel: its AST lowered as the scheduler lowers it (ASTs name no buffers, so the same AST)
    scheduled = {item.ast for item in schedule.items}
    realized = {root: _output_view(root) for root in roots}
    for group, root in zip(groups, roots, strict=True):
        group["kernel"] = None
        if root.op is Ops.COPY or root.size == 0:
            continue
        try:
            ast = lower_kernel(root, realized)[0]
        except Exception:  # a root the scheduler handles otherwise (an ASSIGN of a copy): left unnamed
            continue
        if ast in scheduled:
            group["kernel"] = RECORDING.kernel_of_ast.get(ast)
    kernels = sum(1 for item in items if item["kind"] == "kernel")
    return {"id": number, "name": f"schedule {number}: {kernels} kernel{'s' if kernels != 1 else ''}, "
                                  f"{len(items) - kernels} cop{'ies' if len(items) - kernels != 1 else 'y'}",
            "graph": graph, "groups": groups, "items": items}


# ---- timeline ----

def timed_launch(runner: Launcher, buffers: list[object], var_vals: dict[UOp, int], wait: bool,
                 ast: UOp) -> float | None:
    """Launch `runner` as realize does; with PROFILE=1, waited for and timed on the host, as a timeline bar."""
    if not PROFILE or _queue_profiled(str(runner.device)):
        result: float | None = runner(buffers, var_vals, wait=wait)
        return result
    start = time.perf_counter()
    elapsed: float | None = runner(buffers, var_vals, wait=True)
    end = time.perf_counter()
    RECORDING.timeline.append({"device": str(runner.device), "queue": "launch", "name": runner.name,
                               "start_us": (start - _EPOCH) * 1e6, "end_us": (end - _EPOCH) * 1e6,
                               "kernel": RECORDING.kernel_of_ast.get(ast)})
    return elapsed


_EPOCH = time.perf_counter()
_profiled_devices: dict[str, bool] = {}


def _queue_profiled(device: str) -> bool:
    """True when `device` times its own commands (a queue device under PROFILE=1): its bars come from there."""
    found = _profiled_devices.get(device)
    if found is None:
        from tinycore.device.registry import Device
        found = _profiled_devices[device] = bool(getattr(Device[device], "profiling", False))
    return found


def _queue_events() -> list[dict[str, object]]:
    """The queue devices' own timestamps (tinycore.hcq.profile), when any device profiled."""
    if "tinycore.hcq.profile" not in sys.modules:
        return []
    from tinycore.hcq import profile
    kernel_of_name = {kernel.name: kernel.id for kernel in RECORDING.kernels}
    return [{"device": event.device, "queue": event.queue, "name": event.name, "start_us": event.start_us,
             "end_us": event.end_us, "kernel": kernel_of_name.get(event.name)} for event in profile.EVENTS]


# ---- output ----

def write(path: str | None = None) -> str:
    """Write the recording as JSON to `path` (default: VIZ_PATH, else a new temporary file); the path."""
    target = path or hook.VIZ_PATH.value
    if not target:
        descriptor, target = tempfile.mkstemp(prefix="tinycore-viz-", suffix=".json")
        os.close(descriptor)
    with open(target, "w") as file:
        json.dump(RECORDING.to_json(), file)
    return target


def should_serve() -> bool:
    """Serve at exit: VIZ_SERVE=1 always, VIZ_SERVE=0 never, else only when stdout is a terminal (so tests and CI
    never wait on a server)."""
    setting = int(hook.VIZ_SERVE.value)
    if setting >= 0:
        return setting == 1
    return sys.stdout.isatty() and sys.stdin.isatty()


def write_and_serve() -> None:
    """At exit: write the recording, then serve it until Ctrl-C (see should_serve) or say how to serve it."""
    if not hook.ENABLED:
        return
    hook.install(None)
    path = write()
    kernels = len(RECORDING.kernels)
    schedules = len(RECORDING.schedules)
    print(f"VIZ: {kernels} kernel{'s' if kernels != 1 else ''}, {schedules} schedule{'s' if schedules != 1 else ''} "
          f"written to {path}", file=sys.stderr)
    if not should_serve():
        print(f"VIZ: view it with `tiny viz {path}`", file=sys.stderr)
        return
    from tinycore.viz.server import serve_file
    serve_file(path, int(hook.VIZ_PORT.value), open_browser=sys.stdout.isatty())
