"""BEAM search: choose a kernel's opts by compiling and timing candidates on the device (BEAM=N keeps N per step).

The search starts from the hand-coded heuristic's kernel (codegen/optimize.py) and, unless the heuristic splits it
across CPU workers (then every candidate keeps a split), the unoptimized one; each step takes the neighbours of the
beam's kernels: one more opt (upcast, unroll, accumulators, worker split, loop nesting; `actions`), one opt's amount
changed (a split's share count among them), or one opt less (`children`). Candidates are rendered here, compiled in
parallel (the compiler of a CPU device is a separate process per batch of candidates), and timed on copies of the
kernel's real buffers, so a candidate never writes a buffer the program reads later. The N fastest (none over BEAM_PRUNE
times the best) form the next beam; the search ends when a step gains less than BEAM_MIN_PROGRESS, when no candidate is
left, or when BEAM_BUDGET seconds have passed. The finalists and the heuristic's choice are then timed again in turns,
and the fastest is kept. Opts never change what a kernel computes (only the order of a reduce's additions may differ),
so the choice only changes speed.

The winner's opts are kept on disk (`cache_dir()/beam`), keyed by the kernel's structure, the device family, the
renderer, the compiler with its flags and target CPU or architecture, the worker count and N; a later process
reuses them without searching. The heuristic's own opts for the kernel are part of the key too: a search that
began from another heuristic's kernel is done again. IGNORE_BEAM_CACHE=1 searches again (and rewrites the entry);
CACHELEVEL=0 neither reads nor writes it. GPU renderers (workgroups without CPU workers) keep their heuristic: their
launch shapes are chosen by codegen/gpu.py, which takes no opts yet.
"""
from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import pathlib
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tinycore.codegen import lower_to_program, optimize_kernel
from tinycore.codegen.opt import Kernel, KernelOptError, Opt, OptOps, default_worker_count
from tinycore.codegen.optimize import vector_width
from tinycore.device.buffer import Buffer
from tinycore.device.compiler import CompileError, Compiler
from tinycore.engine.runner import Runner, copy_buffers
from tinycore.helpers import (
    BEAM_BUDGET,
    BEAM_MIN_PROGRESS,
    BEAM_UPCAST_MAX,
    CACHELEVEL,
    DEBUG,
    DEV,
    IGNORE_BEAM_CACHE,
    cache_dir,
    write_atomically,
)
from tinycore.plugins.contract import RendererContract, compiles_in_batches
from tinycore.renderer.renderer import ProgramSpec
from tinycore.uop.axis import AxisType, range_size
from tinycore.uop.uop import UOp

SEARCH_FORMAT = 3
"""Version of the search and of its cache entries: a change to either makes earlier entries misses."""
UPCAST_AMOUNTS = (2, 3, 4, 6, 8, 10, 12, 16)
SHIFTED_AMOUNTS = (6, 8, 10, 12, 16)
"""SHIFTED_UPCAST amounts tried on output axes they do not divide (matmul tiles: 6 rows, one or two vectors)."""
UNROLL_AMOUNTS = (2, 4, 8)
THREAD_SHARE_FACTORS = (1, 2, 4, 8)
"""Shares per CPU worker a split may take in the search (the heuristic takes 1, or 4 for big kernels)."""
TIMING_RUNS = 3
"""Runs per candidate; the fastest counts (the machine may be shared)."""
EARLY_STOP = 2.0
"""A candidate whose first run takes this many times the best time so far is not run again."""
BEAM_PRUNE = 3.0
"""Candidates slower than this many times the best stay out of the beam (the unoptimized seed of a big kernel, whose
extensions would each take seconds to time)."""
CONFIRM_RUNS = 5
"""Rounds in which the finalists (the beam's best and the heuristic's choice) are timed again, taking turns, before
one is kept: a candidate that looked fast while another process held the cores must win again."""
BEAM_MIN_GAIN = 0.05
"""A finalist replaces the heuristic's choice only when its confirmed time is at least this fraction faster: a gain
of a few percent measured on a shared machine is noise, and a cached choice outlives the load it was timed under."""


@dataclass
class SearchStats:
    """Counts since the process started (or the last `reset`): searches run, candidates compiled, cache hits."""

    searches: int = 0
    compiled: int = 0
    cache_hits: int = 0

    def reset(self) -> None:
        """Set every count back to zero."""
        self.searches = self.compiled = self.cache_hits = 0


stats = SearchStats()


def searchable(renderer: RendererContract) -> bool:
    """True when BEAM searches kernels for this renderer (CPU-style code: workers, or no workgroups)."""
    return renderer.has_threads or not renderer.has_local


# ---- candidates ----

def _expansion(kernel: Kernel) -> int:
    kinds = (AxisType.UPCAST, AxisType.UNROLL, AxisType.ACCUMULATOR)
    total = 1
    for position in kernel.axes_of(*kinds):
        total *= range_size(kernel.axes[position]) or 1
    return total


def actions(kernel: Kernel, renderer: RendererContract) -> list[Opt]:
    """The opts that could extend `kernel` by one step (each still to be checked by applying it)."""
    found: list[Opt] = [Opt(OptOps.SPLIT_AXES, 0, 0)] if not kernel.applied else []
    for position, kind in enumerate(kernel.kinds):
        size = range_size(kernel.axes[position])
        if size is None or size < 2:
            continue
        if kind is AxisType.LOOP:
            found += [Opt(OptOps.UPCAST, position, amount) for amount in UPCAST_AMOUNTS if size % amount == 0]
            found += [Opt(OptOps.SHIFTED_UPCAST, position, amount) for amount in SHIFTED_AMOUNTS
                      if size % amount != 0 and size > amount]
            found.append(Opt(OptOps.NEST, position, 0))
            workers = default_worker_count()
            if renderer.has_threads and kernel.workers == 1 and workers > 1 and size >= workers:
                found.append(Opt(OptOps.THREAD, position, workers))
        elif kind is AxisType.REDUCE:
            found += [Opt(OptOps.UNROLL, position, amount) for amount in UNROLL_AMOUNTS if size % amount == 0]
            widths = {vector_width(renderer, node.dtype.scalar) for node in kernel.reduce_ops}
            found += [Opt(OptOps.ACCUMULATORS, position, amount) for width in sorted(widths) if width > 1
                      for amount in (width, 2 * width) if size % amount == 0]
    return found


def _amounts(opt: Opt, renderer: RendererContract) -> tuple[int, ...]:
    if opt.op is OptOps.UPCAST:
        return UPCAST_AMOUNTS
    if opt.op is OptOps.SHIFTED_UPCAST:
        return (4,) + SHIFTED_AMOUNTS
    if opt.op is OptOps.UNROLL:
        return UNROLL_AMOUNTS
    if opt.op is OptOps.THREAD:
        # shares the pool's threads claim as they finish (codegen/optimize.py, SHARES_PER_WORKER)
        return tuple(default_worker_count() * factor for factor in THREAD_SHARE_FACTORS)
    if opt.op is OptOps.ACCUMULATORS:
        return tuple(sorted({amount for widths in renderer.vector_widths.values() for width in widths if width > 1
                             for amount in (width, 2 * width)}))
    return ()


def children(ast: UOp, renderer: RendererContract, parent: tuple[Opt, ...],
             min_workers: int = 1, max_expansion: int | None = None) -> list[tuple[Opt, ...]]:
    """The neighbours of `parent` within `max_expansion` (default BEAM_UPCAST_MAX) copies of the body and split
    across at least `min_workers` workers: `parent` extended by one applicable opt, `parent` with one opt's amount
    changed (another tile size under the same worker split), and `parent` less one opt."""
    limit = int(BEAM_UPCAST_MAX.value) if max_expansion is None else max_expansion
    base = optimize_kernel(ast, renderer, list(parent))
    proposals = [parent + (opt,) for opt in actions(base, renderer)]
    for position, opt in enumerate(parent):
        proposals += [parent[:position] + (Opt(opt.op, opt.axis, amount),) + parent[position + 1:]
                      for amount in _amounts(opt, renderer) if amount != opt.amount]
        proposals.append(parent[:position] + parent[position + 1:])
    result = []
    for proposal in dict.fromkeys(proposals):
        try:
            kernel = optimize_kernel(ast, renderer, list(proposal))
        except KernelOptError:
            continue
        if _expansion(kernel) <= limit and kernel.workers >= min_workers:
            result.append(proposal)
    return result


# ---- the on-disk cache ----

def kernel_key(ast: UOp) -> str:
    """A digest of the kernel AST's structure that is the same in every process."""
    numbering: dict[UOp, int] = {}
    lines = []
    for node in ast.toposort:
        numbering[node] = len(numbering)
        lines.append(f"{node.op.name}|{node.dtype!r}|{node.arg!r}|{','.join(str(numbering[s]) for s in node.src)}")
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def cache_key(ast: UOp, device: str, renderer: RendererContract, compiler: Compiler, width: int) -> str:
    """The beam cache key: kernel, device family, renderer, compiler and arch (its version and flags), workers, N,
    and the opts the heuristic chooses for the kernel.

    The search starts from the heuristic's kernel and keeps it unless a finalist beats it, so a result found beside
    another heuristic (an older tinycore, another cache size) may be slower than today's heuristic: such a
    kernel is searched again rather than read back."""
    family = device.split(":")[0]
    heuristic = ";".join(f"{opt.op.name},{opt.axis},{opt.amount}" for opt in optimize_kernel(ast, renderer).applied)
    renderer_name = f"{type(renderer).__module__}.{type(renderer).__qualname__}"
    compiler_identity = "\0".join((compiler.name, compiler.version(), *compiler.flags))
    parts = (str(SEARCH_FORMAT), kernel_key(ast), family, renderer_name, renderer.device, DEV.target(device).arch,
             compiler_identity, str(default_worker_count()), str(width), heuristic)
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def cache_path(key: str) -> pathlib.Path:
    """Where the search result for `key` is stored."""
    return cache_dir() / "beam" / f"{key}.json"


def read_cached(key: str) -> list[Opt] | None:
    """The opts stored for `key`, or None (missing, unreadable or malformed entries are misses)."""
    try:
        entry = json.loads(cache_path(key).read_text())
        if entry.get("format") != SEARCH_FORMAT:
            return None
        return [Opt(OptOps[name], int(axis), int(amount)) for name, axis, amount in entry["opts"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_cached(key: str, opts: Sequence[Opt], seconds: float, heuristic_seconds: float | None) -> None:
    """Store `opts` for `key` (atomically; an unwritable cache directory only means nothing is stored)."""
    path = cache_path(key)
    entry = {"format": SEARCH_FORMAT, "opts": [[opt.op.name, opt.axis, opt.amount] for opt in opts],
             "seconds": seconds, "heuristic_seconds": heuristic_seconds}
    write_atomically(path, json.dumps(entry).encode(), "beam cache entry")


# ---- progress ----

class _Progress:
    """A progress bar on stderr: tqdm when installed, else one rewritten line; shown at DEBUG >= 1 or on a tty.
    Elsewhere (stderr a file or a pipe: CI logs, `2>log`) one line per kernel searched, when its search ends, so a
    long search is not silent and the log holds no carriage returns."""

    def __init__(self, name: str):
        self.name, self.shown = name, DEBUG >= 1 or sys.stderr.isatty()
        self.bar: Any = None
        self.done = self.total = 0
        self.best: float | None = None
        self.started = time.perf_counter()
        if self.shown:
            try:
                from tqdm import tqdm
                self.bar = tqdm(total=0, desc=f"BEAM {name}", file=sys.stderr, leave=False)
            except ImportError:
                self.bar = None

    def add(self, count: int) -> None:
        """`count` more candidates to time."""
        self.total += count
        if self.bar is not None:
            self.bar.total = self.total
            self.bar.refresh()

    def step(self, best: float) -> None:
        """One candidate timed; `best` is the fastest time so far (seconds)."""
        self.done += 1
        self.best = best
        if not self.shown:
            return
        if self.bar is not None:
            self.bar.set_postfix_str(f"best {best * 1e6:.1f} us", refresh=False)
            self.bar.update(1)
        else:
            print(f"\rBEAM {self.name}: {self.done}/{self.total} candidates, best {best * 1e6:.1f} us", end="",
                  file=sys.stderr, flush=True)

    def close(self) -> None:
        """Remove the bar (or, without one, print the kernel's line)."""
        if self.bar is not None:
            self.bar.close()
        elif self.shown:
            print(file=sys.stderr)
        else:
            best = f", best {self.best * 1e6:.1f} us" if self.best is not None and self.best != float("inf") else ""
            print(f"BEAM {self.name}: {self.done}/{self.total} candidates timed in "
                  f"{time.perf_counter() - self.started:.1f} s{best}", file=sys.stderr, flush=True)


# ---- the search ----

def _scratch_copies(buffers: Sequence[Buffer]) -> list[Buffer]:
    """Fresh buffers holding copies of `buffers` (one copy per distinct buffer, so aliasing is kept)."""
    copies: dict[int, Buffer] = {}
    for buffer in buffers:
        if id(buffer) not in copies:
            scratch = Buffer(buffer.device, buffer.size, buffer.dtype).ensure_allocated()
            copy_buffers(scratch, buffer)
            copies[id(buffer)] = scratch
    return [copies[id(buffer)] for buffer in buffers]


BATCH = 8
"""Candidates compiled by one compiler process where the compiler takes batches (its start costs more than a
small kernel's compile)."""


def _compile_all(compiler: Compiler, specs: list[ProgramSpec]) -> list[tuple[bytes, str] | None]:
    """(binary, symbol) of each of `specs`, compiled in parallel compiler processes (None where one fails)."""
    def compile_one(spec: ProgramSpec) -> tuple[bytes, str] | None:
        try:
            return compiler.compile_cached(spec.src), spec.function_name
        except CompileError as error:
            if DEBUG >= 3:
                print(f"BEAM candidate {spec.name} does not compile: {error}")
            return None

    def compile_chunk(chunk: list[ProgramSpec]) -> list[tuple[bytes, str] | None]:
        if len(chunk) == 1 or not compiles_in_batches(compiler):
            return [compile_one(spec) for spec in chunk]
        try:
            library, symbols = compiler.compile_batch([(spec.function_name, spec.src) for spec in chunk])
        except CompileError:
            return [compile_one(spec) for spec in chunk]  # find the candidate that fails, keep the others
        return [(library, symbol) for symbol in symbols]

    workers = max(1, os.cpu_count() or 1)
    size = max(1, min(BATCH, -(-len(specs) // workers))) if compiles_in_batches(compiler) else 1
    chunks = [specs[start:start + size] for start in range(0, len(specs), size)]
    if len(chunks) <= 1:
        return [result for chunk in chunks for result in compile_chunk(chunk)]
    with concurrent.futures.ThreadPoolExecutor(min(workers, len(chunks))) as pool:
        return [result for results in pool.map(compile_chunk, chunks) for result in results]


class _Search:
    def __init__(self, ast: UOp, device: str, buffers: Sequence[Buffer], var_vals: dict[UOp, int], width: int):
        from tinycore.device.registry import Device
        self.ast, self.device, self.width = ast, device, width
        opened = Device[device]
        self.renderer, self.compiler = opened.renderer, opened.compiler
        self.var_vals = var_vals
        self.scratch = _scratch_copies(buffers)
        self.handles = [buffer._buf for buffer in self.scratch]
        self.times: dict[tuple[Opt, ...], float] = {}
        self.by_source: dict[str, float] = {}
        self.best = float("inf")
        self.runners: dict[tuple[Opt, ...], Callable[..., float | None]] = {}
        self.runner_by_source: dict[str, Callable[..., float | None]] = {}

    def measure(self, candidates: list[tuple[Opt, ...]], progress: _Progress, deadline: float) -> None:
        """Render, compile and time `candidates` (those with a source already timed get its time)."""
        rendered: list[tuple[tuple[Opt, ...], ProgramSpec]] = []
        for opts in candidates:
            try:
                spec = lower_to_program(self.ast, self.renderer, list(opts))
            except KernelOptError:
                continue
            if spec.src in self.by_source:
                self.times[opts] = self.by_source[spec.src]
                self.runners[opts] = self.runner_by_source[spec.src]
            else:
                rendered.append((opts, spec))
        progress.add(len(rendered))
        # a round of compiles at a time, so the budget is checked between rounds
        round_size = max(1, (os.cpu_count() or 1) * BATCH)
        for start in range(0, len(rendered), round_size):
            if time.perf_counter() > deadline:
                return
            batch = rendered[start:start + round_size]
            binaries = _compile_all(self.compiler, [spec for _, spec in batch])
            stats.compiled += sum(binary is not None for binary in binaries)
            for (opts, spec), binary in zip(batch, binaries, strict=True):
                if binary is None or time.perf_counter() > deadline:
                    continue
                runner = Runner(self.ast, self.device, (spec, binary[0], binary[1]))
                self.runners[opts] = self.runner_by_source[spec.src] = runner
                elapsed = self._time(runner)
                self.times[opts] = self.by_source[spec.src] = elapsed
                self.best = min(self.best, elapsed)
                progress.step(self.best)

    def _time(self, runner: Callable[..., float | None]) -> float:
        fastest = float("inf")
        for run in range(TIMING_RUNS):
            elapsed = float(runner(self.handles, self.var_vals, wait=True) or 0.0)
            fastest = min(fastest, elapsed)
            if run == 0 and fastest > EARLY_STOP * self.best:
                break
        return fastest

    def confirm(self, finalists: list[tuple[Opt, ...]],
                heuristic: tuple[Opt, ...] | None = None) -> tuple[Opt, ...] | None:
        """Time `finalists` again, in turns for CONFIRM_RUNS rounds; each (and every candidate with its program)
        gets its fastest run of these rounds. Returns the fastest finalist, or `heuristic` (when it is a finalist)
        unless the fastest beats it by BEAM_MIN_GAIN; None when there are fewer than two."""
        seen: set[int] = set()
        present = []
        for opts in dict.fromkeys(finalists):
            if opts in self.runners and id(self.runners[opts]) not in seen:
                seen.add(id(self.runners[opts]))
                present.append(opts)
        if len(present) < 2:
            return None
        fastest = dict.fromkeys(present, float("inf"))
        for _ in range(CONFIRM_RUNS):
            for opts in present:
                elapsed = float(self.runners[opts](self.handles, self.var_vals, wait=True) or 0.0)
                fastest[opts] = min(fastest[opts], elapsed)
        by_program = {id(self.runners[opts]): seconds for opts, seconds in fastest.items()}
        for opts, runner in self.runners.items():
            if id(runner) in by_program:
                self.times[opts] = by_program[id(runner)]
        winner = min(present, key=lambda opts: (fastest[opts], len(opts)))
        # the heuristic's program may be listed under other opts that render the same source
        heuristic_seconds = (by_program.get(id(self.runners[heuristic]))
                             if heuristic is not None and heuristic in self.runners else None)
        if heuristic_seconds is not None and fastest[winner] > heuristic_seconds * (1 - BEAM_MIN_GAIN):
            return heuristic
        return winner

    def beam(self) -> list[tuple[Opt, ...]]:
        """The `width` fastest candidates, leaving out those over BEAM_PRUNE times the best."""
        return [opts for opts in self.ranked()[:self.width] if self.times[opts] <= BEAM_PRUNE * self.best]

    def ranked(self) -> list[tuple[Opt, ...]]:
        """Timed candidates, fastest first."""
        return sorted(self.times, key=lambda opts: (self.times[opts], len(opts)))

    def run(self, name: str) -> tuple[list[Opt], float, float | None]:
        """(best opts, their time, the heuristic's time)."""
        started = time.perf_counter()
        deadline = started + float(BEAM_BUDGET.value)
        heuristic_kernel = optimize_kernel(self.ast, self.renderer)
        heuristic = tuple(heuristic_kernel.applied)
        # a kernel the heuristic splits across the cores stays split: timed while other processes hold a core, one
        # worker can look faster, and the cached choice would then halve the speed on an idle machine
        min_workers = min(heuristic_kernel.workers, default_worker_count())
        # the heuristic's own tile may be larger than BEAM_UPCAST_MAX (12 rows x 32 columns with AVX-512's 16-lane
        # vectors): its neighbours of the same size are searched too
        limit = max(int(BEAM_UPCAST_MAX.value), _expansion(heuristic_kernel))
        progress = _Progress(name)
        winner = None
        try:
            self.measure([heuristic] + ([()] if min_workers == 1 else []), progress, float("inf"))
            beam = self.beam()
            while beam and time.perf_counter() < deadline:
                previous_best = self.best
                candidates: dict[tuple[Opt, ...], None] = {}
                for parent in beam:
                    neighbours = children(self.ast, self.renderer, parent, min_workers, limit)
                    candidates.update(dict.fromkeys(c for c in neighbours if c not in self.times))
                if not candidates:
                    break
                self.measure(list(candidates), progress, deadline)
                beam = self.beam()
                if self.best > previous_best * (1 - float(BEAM_MIN_PROGRESS.value)):
                    break
            winner = self.confirm(self.ranked()[:max(self.width, 2)] + [heuristic], heuristic)
        finally:
            progress.close()
            self.runners.clear()
            self.runner_by_source.clear()
            for buffer in self.scratch:
                buffer.deallocate()
        if not self.times:
            return list(heuristic), float("nan"), None
        best = winner if winner is not None else self.ranked()[0]
        return list(best), self.times[best], self.times.get(heuristic)


def beam_search(ast: UOp, device: str, buffers: Sequence[Buffer], var_vals: dict[UOp, int],
                width: int) -> list[Opt] | None:
    """The opts BEAM=`width` chooses for `ast` on `device`, timed on copies of `buffers` (the kernel's Buffers in
    DEFINE_GLOBAL order); None when the device's renderer is not searched (the heuristic then applies)."""
    from tinycore.device.registry import Device
    opened = Device[device]
    if not searchable(opened.renderer):
        return None
    key = cache_key(ast, device, opened.renderer, opened.compiler, width)
    use_disk = CACHELEVEL.value > 0
    if use_disk and not IGNORE_BEAM_CACHE:
        cached = read_cached(key)
        if cached is not None:
            stats.cache_hits += 1
            return cached
    stats.searches += 1
    search = _Search(ast, device, buffers, var_vals, width)
    name = Kernel(ast).name()
    started = time.perf_counter()
    opts, seconds, heuristic_seconds = search.run(name)
    if use_disk:
        write_cached(key, opts, seconds, heuristic_seconds)
    if DEBUG >= 2:
        speedup = f"{heuristic_seconds / seconds:.2f}x" if heuristic_seconds and seconds > 0 else "n/a"
        heuristic_text = f"{heuristic_seconds * 1e6:.1f} us" if heuristic_seconds else "untimed"
        print(f"BEAM {name}: {heuristic_text} (heuristic) -> {seconds * 1e6:.1f} us, {speedup} speedup, "
              f"{len(search.times)} candidates in {time.perf_counter() - started:.1f} s, opts {opts}")
    return opts
