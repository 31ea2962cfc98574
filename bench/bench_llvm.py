"""The CPU's LLVM renderer (DEV=CPU:LLVM, in-process llvmlite) against its C renderer (gcc and clang subprocesses):
cold compile latency per kernel, the cold first op, and kernel speed (best of the repeats), as ratios (C time / LLVM
time: > 1 means LLVM is faster). Each renderer runs in a child process of its own (a process opens CPU once), with
the disk cache off.

    python bench/bench_llvm.py [--repeat 5] [--rounds 3] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from typing import Any

CHILD = r"""
import json, statistics, sys, time
start = time.perf_counter()
import numpy as np
from tinycore import Tensor, Device
first = (Tensor(np.arange(16, dtype=np.float32)) * 2 + 1).numpy()  # the cold first op: open, compile, run
first_op = time.perf_counter() - start
from tinycore.codegen import lower_to_program
from tinycore.engine.memory import device_facts
from tinycore.schedule import create_schedule
device = Device["CPU"]
repeat = int(sys.argv[1])
rng = np.random.default_rng(0)
a, b, c, d = (Tensor(rng.standard_normal((1 << 22,)).astype(np.float32)).realize() for _ in range(4))
m = Tensor(rng.standard_normal((512, 512)).astype(np.float32)).realize()
s = Tensor(rng.standard_normal((2048, 1024)).astype(np.float32)).realize()
workloads = {
    "fused relu(a*b+c)*d, 4M": lambda: ((a * b + c).relu() * d),
    "sum of (a*b), 4M": lambda: (a * b).sum(),
    "matmul 512^2": lambda: m @ m,
    "softmax (2048, 1024)": lambda: s.softmax(axis=1),
    "exp, 4M": lambda: a.exp(),
}
sources = []
for build in workloads.values():
    for item in create_schedule([build().uop], device_facts).items:
        if not item.is_copy:
            spec = lower_to_program(item.ast, device.renderer)
            sources.append((spec.function_name, spec.src))
compile_times, load_times = [], []
for name, src in sources:
    begin = time.perf_counter()
    binary = device.compiler.compile(src)
    compile_times.append(time.perf_counter() - begin)
    begin = time.perf_counter()
    device.runtime(name, binary)
    load_times.append(time.perf_counter() - begin)
speeds = {}
for label, build in workloads.items():
    build().realize()
    times = []
    for _ in range(repeat):
        result = build()
        begin = time.perf_counter()
        result.realize()
        device.synchronize()
        times.append(time.perf_counter() - begin)
    speeds[label] = min(times)  # the best of the repeats: the kernel's speed, less the machine's other load
print(json.dumps({"first_op": first_op, "compile": compile_times, "load": load_times, "kernels": len(sources),
                  "speeds": speeds, "compiler": device.compiler.version()}))
"""


def run(dev: str, cc: str | None, repeat: int) -> dict[str, Any]:
    """The child's figures for DEV=`dev` (and CC=`cc`), cold: no disk cache."""
    environment = {**os.environ, "DEV": dev, "CACHELEVEL": "0"}
    if cc is not None:
        environment["CC"] = cc
    finished = subprocess.run([sys.executable, "-c", CHILD, str(repeat)], capture_output=True, text=True,
                              env=environment, timeout=1200)
    if finished.returncode != 0:
        raise RuntimeError(f"DEV={dev} CC={cc}: {finished.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(finished.stdout.splitlines()[-1])
    return result


def _medians(results: list[dict[str, Any]]) -> dict[str, Any]:
    """One child's figures from several: the median of each (per kernel compile and load times pooled)."""
    merged: dict[str, Any] = {"first_op": statistics.median(result["first_op"] for result in results),
                              "compile": [time for result in results for time in result["compile"]],
                              "load": [time for result in results for time in result["load"]],
                              "kernels": results[0]["kernels"], "compiler": results[0]["compiler"]}
    merged["speeds"] = {label: statistics.median(result["speeds"][label] for result in results)
                        for label in results[0]["speeds"]}
    return merged


def main() -> None:
    """Print the markdown table (and write JSON when asked)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3, help="child processes per configuration (medians)")
    parser.add_argument("--json", default=None)
    arguments = parser.parse_args()
    configurations = {"LLVM (llvmlite)": ("CPU:LLVM", None), "C (gcc)": ("CPU:C", "gcc"),
                      "C (clang)": ("CPU:C", "clang")}
    rounds: dict[str, list[dict[str, Any]]] = {label: [] for label in configurations}
    for _ in range(arguments.rounds):  # interleaved, so that machine noise hits every configuration alike
        for label, (dev, cc) in configurations.items():
            rounds[label].append(run(dev, cc, arguments.repeat))
    figures = {label: _medians(results) for label, results in rounds.items()}
    llvm = figures["LLVM (llvmlite)"]
    print(f"{os.cpu_count()} CPUs; compile and load per kernel are medians over {llvm['kernels']} kernels; kernel "
          f"times the best of {arguments.repeat}; every figure the median of {arguments.rounds} child processes; "
          "ratio = C time / LLVM time (> 1: LLVM faster)\n")
    print("| measure | LLVM | C (gcc) | ratio | C (clang) | ratio |")
    print("|---|---|---|---|---|---|")

    def row(label: str, values: dict[str, float]) -> None:
        base = values["LLVM (llvmlite)"]
        cells = [f"{values[name] * 1e3:.2f} ms | {values[name] / base:.2f}" for name in ("C (gcc)", "C (clang)")]
        print(f"| {label} | {base * 1e3:.2f} ms | {' | '.join(cells)} |")

    row("compile one kernel (median)", {name: statistics.median(f["compile"]) for name, f in figures.items()})
    row("load one kernel (median)", {name: statistics.median(f["load"]) for name, f in figures.items()})
    row("cold first op (import to result)", {name: f["first_op"] for name, f in figures.items()})
    for label in llvm["speeds"]:
        row(label, {name: f["speeds"][label] for name, f in figures.items()})
    if arguments.json:
        with open(arguments.json, "w") as file:
            json.dump(figures, file, indent=1)


if __name__ == "__main__":
    main()
