"""The CPU's x86 renderer (DEV=CPU:X86: selection, allocation and encoding in Python, no toolchain) against the C
renderer (gcc) and the LLVM renderer (llvmlite), side by side in one run, as ratios.

    python bench/bench_x86.py [--quick] [--rounds N] [--repeat N] [--steps N] [--cpu-time] [--json out.json]

Three parts, each renderer in child processes of its own (DEV is read once per process), the configurations taking
turns within each round so that the shared machine's load hits all alike:

- compile: every kernel of the bench programs (bench/kernel_sources.py's set, scheduled and linearized once per
  child, outside the clock) is rendered, compiled and loaded into the CPU runtime, each step timed per kernel. For
  X86 rendering is selection + register allocation + encoding and compiling only turns hex into bytes; for C it
  is the text and a gcc subprocess, for LLVM the IR text and llvmlite. Printed: the median and the 10th / 90th
  percentiles of the total per kernel, and the C and LLVM medians over X86's (> 1: X86 compiles faster).
  Kernels a renderer refuses (the x86 selection has no rule for the construct) are counted, not timed.
- cold start: `examples/train_digits.py --steps N` in a fresh interpreter with an empty kernel cache (a new
  TINYCORE_CACHE_DIR per run), the Python modules' bytecode written once before (as an installed package has it):
  wall time, C over X86 (the goal: >= 2).
- kernels: bench_cpu's rows that the x86 renderer runs (fused `relu(a*b+c)*d`, the same summed, softmax, matmul,
  conv2d). One child process per round schedules each row once (as DEV=CPU:X86 does), lowers and compiles its
  kernels with each of the three renderers and loads them side by side, then runs them on the same buffers taking
  turns, `--repeat` samples each (the order turning every sample); the outputs are checked against X86's first.
  Printed: each renderer's least time over all samples and rounds, C's over X86's (>= 1: X86 as fast as C), and
  the same ratio per round.

Paired in one process because separate processes per renderer, each timing its best of a few realizes, swung the
compute-bound rows up to 2x between runs of the same code: each configuration met a different moment of the
shared machine's load (on a 2-vCPU virtual machine another job on the other vCPU can share the core's execution
units or the caches whatever the guest's CPU time says), lay out its buffers differently, and timed the realize's
Python scheduling with the kernel. Here every sample of X86 has a sample of C next to it, on the same memory.

`--cpu-time` times the kernel rows by this thread's CPU time with one worker thread (NUM_CPU_THREADS=1: every
share of a kernel runs on the thread that launches it) instead of wall time on all of them: on a machine shared
with other jobs a wall time also counts the moments the kernel's thread waits for a core.

`--quick` shrinks everything (a subset of the programs, smaller kernel rows, one round, few steps) for a check
that the bench runs; its figures are rough. The goals are issue 45's: compile median <= 5 ms, cold start at most
half of C's, kernel speed >= 0.8x C's on every row and >= 1.0x on the elementwise and reduce rows.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
CONFIGURATIONS: dict[str, tuple[str, str | None]] = {"X86": ("CPU:X86", None), "C (gcc)": ("CPU:C", "gcc"),
                                                     "LLVM": ("CPU:LLVM", None)}
"""Label -> (DEV, CC) of each renderer measured; X86 is the one the others are compared with."""
QUICK_PROGRAMS = ("matmul_small", "matmul_256", "conv2d", "softmax", "reduce_sum_rows", "reduce_mean_all", "argmax",
                  "transcendental", "pad_gated", "where_compare", "mlp_sgd_step", "mlp_adam_step")
"""The programs `--quick` compiles (every program of bench/kernel_sources.py otherwise)."""


def _percentile(values: list[float], fraction: float) -> float:
    """The `fraction` quantile of `values` (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))]


def child_compile(programs: list[str] | None) -> dict[str, Any]:
    """Per kernel render, compile and load seconds for the renderer DEV selects (run in a child process)."""
    sys.path.insert(0, str(BENCH))
    import kernel_sources

    from tinycore import Device
    from tinycore.codegen import linearize
    from tinycore.engine.memory import device_facts
    from tinycore.schedule.cache import create_schedule
    from tinycore.uop.ops import Ops
    device = Device[Device.DEFAULT]
    renderer = device.renderer
    builds = kernel_sources._programs()
    chosen = programs if programs is not None else list(builds)
    linear_programs = []
    for program in chosen:
        try:
            items = create_schedule([tensor.uop for tensor in builds[program]()], device_facts).items
        except Exception:  # noqa: BLE001 - a program this device cannot schedule is left out for every renderer
            continue
        for ast in (item.ast for item in items if item.ast.op is not Ops.COPY):
            try:
                linear_programs.append(linearize(ast, renderer))
            except Exception:  # noqa: BLE001 - counted below as refused
                linear_programs.append(None)
    render_times, compile_times, load_times, refused = [], [], [], 0
    for uops in linear_programs:
        if uops is None:
            refused += 1
            continue
        name = str(uops[-1].arg)
        try:
            started = time.perf_counter()
            source = renderer.render_named(uops, name)
            rendered = time.perf_counter()
            binary = device.compiler.compile(source)
            compiled = time.perf_counter()
            device.runtime(name, binary)
            loaded = time.perf_counter()
        except Exception:  # noqa: BLE001 - a construct the renderer refuses (x86: SelectionError)
            refused += 1
            continue
        render_times.append(rendered - started)
        compile_times.append(compiled - rendered)
        load_times.append(loaded - compiled)
    return {"render": render_times, "compile": compile_times, "load": load_times, "refused": refused,
            "compiler": device.compiler.version().split(" | ")[0]}  # the tool's name, not the target's flags


def _kernel_rows(quick: bool) -> dict[str, Any]:
    """bench_cpu's rows the x86 renderer runs: label -> a function building the lazy result (inputs realized)."""
    import numpy as np

    from tinycore import Tensor
    rng = np.random.default_rng(0)
    elements = 1 << (22 if quick else 24)
    size = 512 if quick else 1024
    rows_of_softmax = 1024 if quick else 4096
    image = (8, 16, 32, 32) if quick else (32, 16, 64, 64)

    def held(*shape: int) -> Tensor:
        return Tensor(rng.standard_normal(shape).astype(np.float32)).realize()

    a, b, c, d = (held(elements) for _ in range(4))
    left, right, logits = held(size, size), held(size, size), held(rows_of_softmax, 1024)
    picture, weight = held(*image), held(32, 16, 3, 3)
    mega = elements >> 20
    return {f"elementwise relu(a*b+c)*d, {mega}M": lambda: (a * b + c).relu() * d,
            f"reduce sum(relu(a*b+c)*d), {mega}M": lambda: ((a * b + c).relu() * d).sum(),
            f"softmax ({rows_of_softmax}, 1024)": lambda: logits.softmax(-1),
            f"matmul {size}^2": lambda: left @ right,
            f"conv2d {'x'.join(map(str, image))} * 32x16x3x3": lambda: picture.conv2d(weight)}


RENDERER_FACTORIES: dict[str, str] = {"X86": "tiny_cpu.x86.renderer:make_x86_renderer",
                                      "C (gcc)": "tiny_cpu.renderer:make_c_renderer",
                                      "LLVM": "tiny_cpu.llvm_compiler:make_llvm_renderer"}
"""Label -> the tiny-cpu factory of each renderer the kernel rows load side by side in one process."""


def _row_programs(build: Any) -> tuple[list[Any], list[tuple[int, int]],
                                       dict[str, list[tuple[Any, list[int], int, tuple[int, ...]]]]]:
    """One kernel row's schedule, its buffers allocated, and each renderer's programs for it: (the Buffers, to be
    kept alive while the programs run, (address, float count) of every kernel's output, label -> [(program, argument
    addresses, workers, variable values)] in schedule order)."""
    from tinycore.codegen import lower_to_program
    from tinycore.engine.memory import buffer_of
    from tinycore.plugins.specs import load_object
    from tinycore.uop.ops import Ops
    items = [item for item in build().schedule_linear().items if item.ast.op is not Ops.COPY]
    held = [[buffer_of(node).ensure_allocated() for node in item.buffers] for item in items]
    programs: dict[str, list[tuple[Any, list[int], int, tuple[int, ...]]]] = {}
    outputs: list[tuple[int, int]] = []
    for label, factory in RENDERER_FACTORIES.items():
        renderer, compiler = load_object(factory)("CPU", None)
        loader = compiler.program_loader() if hasattr(compiler, "program_loader") else None
        if loader is None:
            from tiny_cpu.llvm_compiler import LLVMCompiler, LLVMProgram
            from tiny_cpu.runtime import CPUProgram
            loader = LLVMProgram if isinstance(compiler, LLVMCompiler) else CPUProgram
        programs[label] = []
        for item, buffers in zip(items, held, strict=True):
            spec = lower_to_program(item.ast, renderer)
            chosen = [buffers[position] for position in spec.globals] if spec.globals else list(buffers)
            arguments = [buffer._buf for buffer in chosen]
            program = loader(spec.function_name, compiler.compile(spec.src))
            programs[label].append((program, arguments, int(spec.launch_dims(item.var_vals)[0][0]),
                                    spec.vals(item.var_vals)))
            if label == "X86":
                outputs += [(buffers[position]._buf, min(4096, buffers[position].nbytes // 4))
                            for position in spec.outs]
    return [buffer for buffers in held for buffer in buffers], outputs, programs


def child_kernels(quick: bool, repeat: int, cpu_time: bool = False) -> dict[str, dict[str, list[float]]]:
    """Every kernel row's run time, seconds (wall, or this thread's CPU time), `repeat` samples per renderer: row ->
    label -> samples. All renderers run in this one process on the same buffers, their kernels loaded side by side
    (each renderer's lowering and compiler, as DEV would pick them), and take turns sample by sample (the order
    turning each time), so that the machine's load, the buffers' placement and the caches' state hit all alike.
    The outputs each renderer leaves are checked against X86's (a wrong kernel fails the bench)."""
    import ctypes

    import numpy as np
    clock = time.thread_time if cpu_time else time.perf_counter
    samples: dict[str, dict[str, list[float]]] = {}
    for row, build in _kernel_rows(quick).items():
        held, outputs, programs = _row_programs(build)
        labels = list(programs)

        def run(label: str, kernels: dict[str, list[tuple[Any, list[int], int, tuple[int, ...]]]] = programs) -> float:
            started = clock()
            for program, arguments, workers, values in kernels[label]:
                program(*arguments, global_size=(workers, 1, 1), vals=values)
            return clock() - started

        results = {}
        for label in labels:  # warm-up, and every renderer's answer
            run(label)
            results[label] = [np.ctypeslib.as_array((ctypes.c_float * count).from_address(address)).copy()
                              for address, count in outputs]
        for label in labels[1:]:
            for mine, reference in zip(results[label], results["X86"], strict=True):
                if not np.allclose(mine, reference, rtol=2e-3, atol=1e-3):
                    raise AssertionError(f"{row}: {label}'s output differs from X86's: {mine[:4]} {reference[:4]}")
        samples[row] = {label: [] for label in labels}
        for turn in range(repeat):
            for label in labels[turn % len(labels):] + labels[:turn % len(labels)]:
                samples[row][label].append(run(label))
        del held  # the row's buffers go back to the allocator
    return samples


def _child(mode: str, dev: str, cc: str | None, *extra: str, threads: int | None = None) -> dict[str, Any]:
    """Run this file's child `mode` with DEV=`dev` (CC=`cc`, NUM_CPU_THREADS=`threads`) and no disk cache; its JSON
    result."""
    environment = {**os.environ, "DEV": dev, "CACHELEVEL": "0"}
    if threads is not None:
        environment["NUM_CPU_THREADS"] = str(threads)
    if cc is not None:
        environment["CC"] = cc
    finished = subprocess.run([sys.executable, __file__, "--child", mode, *extra], capture_output=True, text=True,
                              env=environment, timeout=1800)
    if finished.returncode != 0:
        raise RuntimeError(f"DEV={dev} CC={cc} {mode}: {finished.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(finished.stdout.splitlines()[-1])
    return result


def compile_bytecode() -> None:
    """Write the bytecode of the Python modules a cold start imports (tinycore and the plugins), as an installed
    package has it. Where PYTHONDONTWRITEBYTECODE is set (it is on the development machine) every child would
    otherwise compile them from source again, a second or so shared by both renderers that is no kernel's."""
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    folders = [str(ROOT / "tinycore"), *(str(path) for path in (ROOT / "plugins").glob("tiny-*/tiny_*"))]
    subprocess.run([sys.executable, "-m", "compileall", "-q", *folders], env=environment, check=True,
                   capture_output=True, timeout=600)


def cold_start(dev: str, steps: int) -> float:
    """Seconds for examples/train_digits.py --steps `steps` in a fresh interpreter with an empty kernel cache (the
    modules' bytecode written first: compile_bytecode)."""
    with tempfile.TemporaryDirectory(prefix="tinycore-cold-") as cache:
        environment = {**os.environ, "DEV": dev, "TINYCORE_CACHE_DIR": cache}
        started = time.perf_counter()
        finished = subprocess.run([sys.executable, str(ROOT / "examples" / "train_digits.py"), "--steps", str(steps)],
                                  capture_output=True, text=True, env=environment, timeout=1800)
        elapsed = time.perf_counter() - started
    if finished.returncode != 0:
        raise RuntimeError(f"DEV={dev} train_digits: {finished.stderr[-3000:]}")
    return elapsed


def _met(condition: bool) -> str:
    return "met" if condition else "not met"


def report(compile_figures: dict[str, dict[str, Any]], cold: dict[str, list[float]],
           kernels: list[dict[str, dict[str, list[float]]]], cpu_time: bool = False) -> list[str]:
    """The markdown lines of the three tables with the goals."""
    lines = [f"{os.cpu_count()} CPUs; X86 is the reference of every ratio (> 1: X86 faster)", ""]
    lines += ["| compile per kernel (render + compile + load) | kernels | refused | median ms | p10 ms | p90 ms "
              "| median / X86's |", "|---|---|---|---|---|---|---|"]
    totals = {label: [r + c + load for r, c, load in zip(figures["render"], figures["compile"], figures["load"],
                                                         strict=True)]
              for label, figures in compile_figures.items()}
    base = statistics.median(totals["X86"])
    for label, values in totals.items():
        figures = compile_figures[label]
        lines.append(f"| {label} ({figures['compiler']}) | {len(values)} | {figures['refused']} | "
                     f"{statistics.median(values) * 1e3:.2f} | {_percentile(values, 0.1) * 1e3:.2f} | "
                     f"{_percentile(values, 0.9) * 1e3:.2f} | {statistics.median(values) / base:.1f} |")
    x86 = compile_figures["X86"]
    lines += ["", f"X86's median split: render (select, allocate, encode) {statistics.median(x86['render']) * 1e3:.2f}"
              f" ms, hex to bytes {statistics.median(x86['compile']) * 1e3:.3f} ms, load "
              f"{statistics.median(x86['load']) * 1e3:.3f} ms. Goal: median <= 5 ms: {_met(base <= 5e-3)}.", ""]
    if cold:
        x86_cold, c_cold = statistics.median(cold["X86"]), statistics.median(cold["C (gcc)"])
        lines += ["| cold start, train_digits, empty kernel cache | X86 s | C (gcc) s | C / X86 |", "|---|---|---|---|",
                  f"| median of {len(cold['X86'])} | {x86_cold:.1f} | {c_cold:.1f} | {c_cold / x86_cold:.2f} |", "",
                  f"Goal: X86 at most half of C's: {_met(x86_cold * 2 <= c_cold)}.", ""]
    measure = "thread CPU time, one worker thread" if cpu_time else "wall time"
    rounds, samples = len(kernels), len(kernels[0][next(iter(kernels[0]))]["X86"])
    lines += [f"| kernel ({measure}; min of {samples} paired samples x {rounds} rounds) | X86 ms | C (gcc) ms | "
              "LLVM ms | X86 speed / C's | per round | goal |", "|---|---|---|---|---|---|---|"]
    for row in kernels[0]:
        best = {label: min(min(result[row][label]) for result in kernels) for label in kernels[0][row]}
        ratio = best["C (gcc)"] / best["X86"]
        per_round = [min(result[row]["C (gcc)"]) / min(result[row]["X86"]) for result in kernels]
        goal = 1.0 if row.startswith(("elementwise", "reduce")) else 0.8
        lines.append(f"| {row} | {best['X86'] * 1e3:.2f} | {best['C (gcc)'] * 1e3:.2f} | {best['LLVM'] * 1e3:.2f} | "
                     f"{ratio:.2f} | {', '.join(f'{value:.2f}' for value in per_round)} | >= {goal}: "
                     f"{_met(min(per_round) >= goal)} |")
    return lines


def main() -> None:
    """Run the rounds and print the tables (and write every figure as JSON when asked)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a short run: fewer programs, smaller rows, 1 round")
    parser.add_argument("--rounds", type=int, default=None, help="child processes per configuration (default 3)")
    parser.add_argument("--repeat", type=int, default=None,
                        help="timed samples per renderer and kernel row (default 20)")
    parser.add_argument("--steps", type=int, default=None, help="train_digits steps of the cold start (default 60)")
    parser.add_argument("--no-cold-start", action="store_true", help="leave out the cold start of the digits demo")
    parser.add_argument("--cpu-time", action="store_true",
                        help="time kernel rows by CPU time on one worker thread (robust to the machine's load)")
    parser.add_argument("--json", default=None)
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.child:
        mode, *rest = arguments.child
        if mode == "compile":
            print(json.dumps(child_compile(rest or None)))
        else:
            print(json.dumps(child_kernels(rest[0] == "quick", int(rest[1]), rest[2:] == ["cpu"])))
        return
    quick = arguments.quick
    rounds = arguments.rounds or (1 if quick else 3)
    repeat = arguments.repeat or (10 if quick else 20)
    steps = arguments.steps or (10 if quick else 60)
    programs = list(QUICK_PROGRAMS) if quick else []
    compile_rounds: dict[str, list[dict[str, Any]]] = {label: [] for label in CONFIGURATIONS}
    kernels: list[dict[str, dict[str, list[float]]]] = []
    cold: dict[str, list[float]] = {"X86": [], "C (gcc)": []} if not arguments.no_cold_start else {}
    if cold:
        compile_bytecode()
    for round_number in range(rounds):  # interleaved, the order turning from round to round
        labels = list(CONFIGURATIONS)
        labels = labels[round_number % len(labels):] + labels[:round_number % len(labels)]
        for label in labels:
            dev, cc = CONFIGURATIONS[label]
            compile_rounds[label].append(_child("compile", dev, cc, *programs))
            if label in cold:
                cold[label].append(cold_start(dev, steps))
        kernels.append(_child("kernels", CONFIGURATIONS["X86"][0], CONFIGURATIONS["C (gcc)"][1],
                              "quick" if quick else "full", str(repeat), *(["cpu"] if arguments.cpu_time else []),
                              threads=1 if arguments.cpu_time else None))
    compile_figures = {label: {"render": [t for r in results for t in r["render"]],
                               "compile": [t for r in results for t in r["compile"]],
                               "load": [t for r in results for t in r["load"]],
                               "refused": results[0]["refused"], "compiler": results[0]["compiler"]}
                       for label, results in compile_rounds.items()}
    print(f"rounds {rounds}, kernel repeats {repeat}, cold start {steps} steps{', --quick' if quick else ''}"
          f"{', --cpu-time' if arguments.cpu_time else ''}\n")
    print("\n".join(report(compile_figures, cold, kernels, arguments.cpu_time)))
    if arguments.json:
        with open(arguments.json, "w") as file:
            json.dump({"compile": compile_figures, "cold": cold, "kernels": kernels}, file, indent=1)


if __name__ == "__main__":
    main()
