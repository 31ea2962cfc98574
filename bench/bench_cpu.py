"""CPU speed side by side: tinycore against torch, numpy and tinygrad (DEV=CPU) on the rows of the speed goals.

Run: `nox -s bench` (not in the default sessions), or `python bench/bench_cpu.py [--rounds N] [--kernel-rounds N]
[--steps N] [--out DIRECTORY]` from the repository root. Writes DIRECTORY/bench_cpu.md (a table) and
DIRECTORY/bench_cpu.json (every figure), DIRECTORY defaulting to bench/results/.

Rows: matmul 1024^2 and 2048^2 (GFLOPS), softmax over (4096, 1024) (ms), conv2d 32x16x64x64 * 32x16x3x3
(GFLOPS), an MLP 784-512-512-10 training step with SGD and with Adam (ms, from bench_train.py), fused
`relu(a*b+c)*d` and the same + sum over 16M floats, eager op, TinyJit replay and cold first op (from
bench_engine.py), and `import` time in fresh interpreters (from bench_import.py). Libraries take turns within each
round so that load from other processes hits all alike, each case after `settle()` (bench/settle.py: numpy's and
torch's threads spin after a call and would share the cores with the next case); the best round counts (medians
for the training steps). The kernel rows (matmul, softmax, conv2d) also give the paired median: in each round
tinycore's speed over the fastest peer's in that round, the median over the rounds, the ratio least moved by the
shared machine's slow phases.

Transcendental rows (issue 47): sin, cos and tanh of 4M and 16M float32 arguments uniform in [-10, 10] (ms), tinycore
against torch (its threads) and numpy, with the paired median; `--only transcendental` runs these rows alone.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_engine  # noqa: E402
import bench_import  # noqa: E402
import bench_train  # noqa: E402
import numpy as np  # noqa: E402
from settle import keep_freed_memory, settle  # noqa: E402

LIBRARIES = ("tinycore", "torch", "numpy", "tinygrad")
SOFTMAX_SHAPE = (4096, 1024)
CONV_INPUT, CONV_WEIGHT = (32, 16, 64, 64), (32, 16, 3, 3)
CONV_FLOPS = 2 * CONV_INPUT[0] * CONV_WEIGHT[0] * (CONV_INPUT[2] - 2) * (CONV_INPUT[3] - 2) * CONV_WEIGHT[1] * 9
HIGHER_IS_BETTER = ("GFLOPS", "Gelem/s")


def _tensor_cases(library: str, inputs: dict[str, np.ndarray]) -> dict[str, Callable[[], Any]]:
    """The kernel rows (matmul 1024 and 2048, softmax, conv2d) for tinycore or tinygrad: realized calls on
    realized inputs."""
    if library == "tinycore":
        from tinycore import Tensor
    else:
        from tinygrad import Tensor  # type: ignore[no-redef]
    held = {name: Tensor(array).realize() for name, array in inputs.items()}
    return {"matmul 1024 GFLOPS": lambda: (held["left1024"] @ held["right1024"]).realize(),
            "matmul 2048 GFLOPS": lambda: (held["left2048"] @ held["right2048"]).realize(),
            "softmax ms": lambda: held["logits"].softmax(-1).realize(),
            "conv2d GFLOPS": lambda: held["image"].conv2d(held["kernel"]).realize()}


def _torch_cases(inputs: dict[str, np.ndarray]) -> dict[str, Callable[[], Any]]:
    import torch
    held = {name: torch.from_numpy(array) for name, array in inputs.items()}
    return {"matmul 1024 GFLOPS": lambda: held["left1024"] @ held["right1024"],
            "matmul 2048 GFLOPS": lambda: held["left2048"] @ held["right2048"],
            "softmax ms": lambda: torch.softmax(held["logits"], -1),
            "conv2d GFLOPS": lambda: torch.nn.functional.conv2d(held["image"], held["kernel"])}


def _numpy_cases(inputs: dict[str, np.ndarray]) -> dict[str, Callable[[], Any]]:
    def softmax() -> np.ndarray:
        shifted = np.exp(inputs["logits"] - inputs["logits"].max(-1, keepdims=True))
        return shifted / shifted.sum(-1, keepdims=True)
    return {"matmul 1024 GFLOPS": lambda: inputs["left1024"] @ inputs["right1024"],
            "matmul 2048 GFLOPS": lambda: inputs["left2048"] @ inputs["right2048"], "softmax ms": softmax}


def _as_figure(measure: str, seconds: float) -> float:
    if measure.startswith("matmul "):
        size = int(measure.split()[1])
        return 2 * size ** 3 / seconds / 1e9
    if measure.startswith("conv2d"):
        return CONV_FLOPS / seconds / 1e9
    return seconds * 1e3


TINYGRAD_KERNEL_ROUNDS = 2
"""Rounds of the kernel rows tinygrad takes part in: its matmul 2048^2 takes seconds a call and its figures are far
from the other libraries', so more rounds would only lengthen the run."""


PAIRED = "tinycore / best peer, paired median"
"""The key, beside the libraries in the results, of the kernel rows' paired ratios: in each round tinycore's speed
over the fastest peer's in that round (the calls of a round run within a second of each other, so a slow phase of the
shared machine hits them alike), the median over the rounds; above 1 means tinycore is faster."""


PAIRED_TORCH = "tinycore / torch, paired median"
"""The key of the transcendental rows' paired ratios against torch alone (issue 47's goal is stated against torch):
tinycore's speed over torch's in each round, the median over the rounds."""


def _speed_ratio(measure: str, ours: float, theirs: float) -> float:
    """tinycore's speed over a peer's for one figure of `measure` (above 1: tinycore is faster)."""
    return ours / theirs if measure.endswith(HIGHER_IS_BETTER) else theirs / max(ours, 1e-12)


def kernel_rows(rounds: int) -> dict[str, dict[str, float]]:
    """matmul 1024 and 2048, softmax and conv2d for every library (numpy has no conv2d), best of `rounds` interleaved
    (tinygrad in the first TINYGRAD_KERNEL_ROUNDS of them), and under PAIRED the paired median ratio of each row.
    The order of the libraries turns from round to round, so none always runs first after the settling pause."""
    generator = np.random.default_rng(1)
    inputs = {"left1024": generator.standard_normal((1024, 1024), dtype=np.float32),
              "right1024": generator.standard_normal((1024, 1024), dtype=np.float32),
              "left2048": generator.standard_normal((2048, 2048), dtype=np.float32),
              "right2048": generator.standard_normal((2048, 2048), dtype=np.float32),
              "logits": generator.standard_normal(SOFTMAX_SHAPE, dtype=np.float32),
              "image": generator.standard_normal(CONV_INPUT, dtype=np.float32),
              "kernel": generator.standard_normal(CONV_WEIGHT, dtype=np.float32)}
    cases = {"tinycore": _tensor_cases("tinycore", inputs), "torch": _torch_cases(inputs),
             "numpy": _numpy_cases(inputs), "tinygrad": _tensor_cases("tinygrad", inputs)}
    results: dict[str, dict[str, float]] = {library: {} for library in LIBRARIES}
    paired: dict[str, list[float]] = {measure: [] for measure in cases["tinycore"]}
    for round_number in range(rounds):
        turn = round_number % len(LIBRARIES)
        for measure in cases["tinycore"]:
            this_round: dict[str, float] = {}
            for library in LIBRARIES[turn:] + LIBRARIES[:turn]:
                if measure not in cases[library] or (library == "tinygrad" and round_number >= TINYGRAD_KERNEL_ROUNDS):
                    continue
                settle()
                figure = _as_figure(measure, bench_engine.best_time(cases[library][measure], 2))
                this_round[library] = figure
                previous = results[library].get(measure)
                better = measure.endswith(HIGHER_IS_BETTER)
                if previous is None or (figure > previous if better else figure < previous):
                    results[library][measure] = figure
            peers = [_speed_ratio(measure, this_round["tinycore"], figure)
                     for library, figure in this_round.items() if library != "tinycore"]
            paired[measure].append(min(peers))
    results[PAIRED] = {measure: statistics.median(ratios) for measure, ratios in paired.items()}
    return results


TRANSCENDENTAL_SIZES = {"4M": 1 << 22, "16M": 1 << 24}
TRANSCENDENTAL_FUNCTIONS = ("sin", "cos", "tanh")


def transcendental_rows(rounds: int) -> dict[str, dict[str, float]]:
    """sin, cos and tanh over TRANSCENDENTAL_SIZES float32 arguments (ms) for tinycore, torch and numpy, the best of
    `rounds` interleaved (the order of the libraries turning), and under PAIRED each row's paired median ratio."""
    import torch

    from tinycore import Tensor
    generator = np.random.default_rng(47)
    cases: dict[str, dict[str, Callable[[], Any]]] = {"tinycore": {}, "torch": {}, "numpy": {}}
    for size_name, size in TRANSCENDENTAL_SIZES.items():
        values = generator.uniform(-10.0, 10.0, size).astype(np.float32)
        ours, theirs = Tensor(values).realize(), torch.from_numpy(values)
        for function in TRANSCENDENTAL_FUNCTIONS:
            measure = f"{function} {size_name} ms"
            cases["tinycore"][measure] = lambda ours=ours, function=function: getattr(ours, function)().realize()
            cases["torch"][measure] = lambda theirs=theirs, function=function: getattr(torch, function)(theirs)
            cases["numpy"][measure] = lambda values=values, function=function: getattr(np, function)(values)
    libraries = tuple(cases)
    results: dict[str, dict[str, float]] = {library: {} for library in LIBRARIES}  # tinygrad's column stays empty
    paired: dict[str, list[float]] = {measure: [] for measure in cases["tinycore"]}
    against_torch: dict[str, list[float]] = {measure: [] for measure in cases["tinycore"]}
    for round_number in range(rounds):
        turn = round_number % len(libraries)
        for measure in cases["tinycore"]:
            this_round: dict[str, float] = {}
            for library in libraries[turn:] + libraries[:turn]:
                settle()
                this_round[library] = bench_engine.best_time(cases[library][measure], 2) * 1e3
                results[library][measure] = min(this_round[library], results[library].get(measure, math.inf))
            paired[measure].append(min(_speed_ratio(measure, this_round["tinycore"], figure)
                                       for library, figure in this_round.items() if library != "tinycore"))
            against_torch[measure].append(_speed_ratio(measure, this_round["tinycore"], this_round["torch"]))
    results[PAIRED] = {measure: statistics.median(ratios) for measure, ratios in paired.items()}
    results[PAIRED_TORCH] = {measure: statistics.median(ratios) for measure, ratios in against_torch.items()}
    return results


def training_rows(steps: int) -> dict[str, dict[str, float]]:
    """The MLP training step (SGD and Adam) in ms: tinycore and tinygrad jitted, torch eager (bench_train.py)."""
    results: dict[str, dict[str, float]] = {library: {} for library in LIBRARIES}
    for optimizer_name in ("SGD", "Adam"):
        figures = bench_train.interleaved_median_ms({
            "tinycore": bench_train.tinycore_step(optimizer_name), "torch": bench_train.torch_step(optimizer_name),
            "tinygrad": bench_train.tinygrad_step(optimizer_name)}, steps)
        for library, milliseconds in figures.items():
            results[library][f"MLP {optimizer_name} step ms"] = milliseconds
    return results


def import_rows(runs: int) -> dict[str, dict[str, float]]:
    """Median `import` time in fresh interpreters (bench_import.py), tinycore without and numpy for scale."""
    timings = bench_import.measure(runs)
    return {"tinycore": {"import ms": statistics.median(timings["import tinycore"]) * 1e3},
            "numpy": {"import ms": statistics.median(timings["import numpy"]) * 1e3}}


def run(rounds: int, steps: int, import_runs: int, kernel_rounds: int | None = None) -> dict[str, dict[str, float]]:
    """Every row for every library: {library: {measure: figure}}, and the kernel rows' paired ratios under PAIRED;
    the kernel rows take `kernel_rounds` (default `rounds`)."""
    results: dict[str, dict[str, float]] = {library: {} for library in LIBRARIES}
    kernels = kernel_rows(rounds if kernel_rounds is None else kernel_rounds)
    engine = bench_engine.run(rounds)
    for figures in engine.values():
        # the kernel rows time matmul 1024^2 in more rounds, with the paired ratio
        figures.pop("matmul GFLOPS", None)
    for part in (engine, kernels, transcendental_rows(rounds), training_rows(steps), import_rows(import_runs)):
        for library, figures in part.items():
            results.setdefault(library, {}).update(figures)
    return results


def table(results: dict[str, dict[str, float]]) -> str:
    """A markdown table: a row per measure, a column per library, tinycore against the best peer's best figure,
    and the paired median ratio where the row has one (the kernel rows)."""
    libraries = {library: figures for library, figures in results.items() if library not in (PAIRED, PAIRED_TORCH)}
    paired = results.get(PAIRED, {})
    torch_column = PAIRED_TORCH in results  # the transcendental rows' ratio against torch alone
    against_torch = results.get(PAIRED_TORCH, {})
    measures = list(dict.fromkeys(measure for figures in libraries.values() for measure in figures))
    lines = ["| measure | " + " | ".join(LIBRARIES) + " | best peer | tinycore / best peer | paired median |" +
             (" paired vs torch |" if torch_column else ""), "|---" * (9 if torch_column else 8) + "|"]
    for measure in measures:
        cells = [f"{results[library][measure]:.3g}" if measure in results[library] else "-" for library in LIBRARIES]
        better = measure.endswith(HIGHER_IS_BETTER)
        peers = {library: figures[measure] for library, figures in libraries.items()
                 if library != "tinycore" and measure in figures}
        ours = results["tinycore"].get(measure)
        pairing = f"{paired[measure]:.2f}" if measure in paired else "-"
        if torch_column:
            pairing += f" | {against_torch[measure]:.2f}" if measure in against_torch else " | -"
        if not peers or ours is None:
            lines.append(f"| {measure} | " + " | ".join(cells) + f" | - | - | {pairing} |")
            continue
        best = (max if better else min)(peers, key=lambda library: peers[library])
        # speed ratio: above 1 means tinycore is faster, whichever way the measure runs
        ratio = _speed_ratio(measure, ours, peers[best])
        lines.append(f"| {measure} | " + " | ".join(cells) + f" | {best} | {ratio:.2f} | {pairing} |")
    return "\n".join(lines)


def main() -> int:
    """Run every row and write the markdown and JSON reports."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--kernel-rounds", type=int, default=6,
                        help="rounds of the matmul 2048^2, softmax and conv2d rows (a call swings by 30%% on a shared "
                             "machine; the best of more rounds is steadier)")
    parser.add_argument("--steps", type=int, default=30, help="training steps per library and optimizer")
    parser.add_argument("--import-runs", type=int, default=7)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    parser.add_argument("--fresh-heap", action="store_true",
                        help="keep glibc's allocator defaults (torch's conv2d output then page-faults or not depending "
                             "on the allocator's history; see settle.keep_freed_memory)")
    parser.add_argument("--only", choices=("transcendental",),
                        help="run only these rows (transcendental: sin, cos and tanh, --kernel-rounds rounds)")
    arguments = parser.parse_args()
    if not arguments.fresh_heap:
        keep_freed_memory()
    started = time.perf_counter()
    if arguments.only == "transcendental":
        results = transcendental_rows(arguments.kernel_rounds)
    else:
        results = run(arguments.rounds, arguments.steps, arguments.import_runs, arguments.kernel_rounds)
    arguments.out.mkdir(parents=True, exist_ok=True)
    markdown = table(results)
    stem = "bench_cpu" if arguments.only is None else f"bench_cpu_{arguments.only}"
    (arguments.out / f"{stem}.md").write_text(markdown + "\n")
    (arguments.out / f"{stem}.json").write_text(json.dumps(results, indent=1) + "\n")
    print(markdown)
    print(f"wrote {arguments.out / stem}.md and {stem}.json in {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
