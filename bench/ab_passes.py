"""Paired A/B of the kernels' speed for issue 42 ([passes]): the revision before the passes work against this
checkout, bench_cpu.py, bench_llm.py's decode and bench_indexing.py, old and new in alternation in one run.

Run from the repository root (the whole bench takes long: run it on a quiet machine):

    python bench/ab_passes.py                                  # base afb5e59, 3 pairs, the default settings
    python bench/ab_passes.py --smoke                          # the smallest settings: proves it works, no figures
    python bench/ab_passes.py --base REV --pairs 5 --benches cpu,llm

The base is a detached git worktree of REV in /tmp (made on first use, kept for later runs). Both sides run this
checkout's bench scripts, so only the library differs: each side is a child process whose PYTHONPATH starts with the
side's checkout (and its plugins/tiny-*), and which imports tinycore and tiny_cpu and checks where they come from
before it runs the script. In each pair the two sides run back to back, the order turning from pair to pair, so a
slow phase of the shared machine hits both alike. Printed: each measure's median over the pairs, old and new, and the
median (range) of the paired speed ratios new / old (above 1: the new revision is faster), as a markdown table.

Measures (tinycore's only; the peers bench_cpu.py times are left out):
- cpu: every tinycore row of bench_cpu.py (the kernel rows, the engine's, the training steps, import time);
- llm: decode tokens/s (all decoded tokens, and 1 / the median step) and CPU ms per token of bench_llm.py's
  tinycore runner on a random llama GGUF (`--llm-size`, default small: ~40M parameters);
- indexing: bench_indexing.py's getitem and setitem cases, ms.
"""
from __future__ import annotations

import argparse
import json
import os
import runpy
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
BASE_REVISION = "afb5e59"
"""The last commit before the passes work: the parent of its first commit, 4ffb8b9 (the kernel-source snapshots).
The four commits since ee1ef1c, where the issue was filed, touch no kernel (install hints, llm's test model, the
conformance suite without torch, renderer probes)."""
HIGHER_IS_BETTER = ("GFLOPS", "Gelem/s", "tok/s")

Figures = dict[str, float]


def run_script(checkout: str, script: str, arguments: list[str]) -> None:
    """In this (child) process: import tinycore and tiny_cpu, check that they come from `checkout`, then run
    `script` as __main__ with `arguments`. Importing them first keeps them: a script that puts its own repository on
    sys.path (bench_indexing.py does) still runs on `checkout`'s library."""
    import tiny_cpu

    import tinycore
    for module in (tinycore, tiny_cpu):
        if not str(module.__file__).startswith(checkout):
            raise SystemExit(f"{module.__name__} comes from {module.__file__}, not from {checkout}: is it installed in "
                             "a way that PYTHONPATH does not override?")
    sys.argv = [script, *arguments]
    runpy.run_path(script, run_name="__main__")


def clang_directory() -> str | None:
    """A folder with a `clang` that runs the newest versioned clang-N, when PATH has only versioned ones: tinygrad's
    CPU device (a peer in bench_cpu.py) calls `clang`. tinycore's CPU device prefers gcc, so this changes nothing
    for it (it reads $CC, which is left alone)."""
    if shutil.which("clang"):
        return None
    versions = sorted((int(name.name.split("-")[1]), name) for folder in os.get_exec_path() if os.path.isdir(folder)
                      for name in Path(folder).glob("clang-[0-9]*") if name.name.split("-")[1].isdigit())
    if not versions:
        return None
    folder = Path(tempfile.gettempdir()) / "tinycore_ab_clang"
    folder.mkdir(exist_ok=True)
    link = folder / "clang"
    if not link.exists():
        link.symlink_to(versions[-1][1])
    return str(folder)


def side(checkout: str, script: str, arguments: list[str]) -> str:
    """The standard output of `script` run with `arguments` on `checkout`'s library, in a fresh process."""
    # every plugin of the side's checkout: an installed plugin of the other revision may not load on this core
    plugins = sorted(str(folder) for folder in Path(checkout, "plugins").glob("tiny-*") if folder.is_dir())
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join([checkout, *plugins]))
    environment.setdefault("DEV", "CPU")
    clang = clang_directory()
    if clang is not None:
        environment["PATH"] = os.pathsep.join([clang, environment.get("PATH", "")])
    finished = subprocess.run([sys.executable, __file__, "--side", checkout, str(BENCH / script), *arguments],
                              env=environment, cwd=ROOT, capture_output=True, text=True)
    if finished.returncode != 0:
        raise SystemExit(f"{script} on {checkout} failed:\n{finished.stderr[-4000:]}")
    return finished.stdout


def cpu_figures(checkout: str, smoke: bool) -> Figures:
    """tinycore's rows of bench_cpu.py on `checkout`."""
    with tempfile.TemporaryDirectory() as directory:
        sizes = ["--rounds", "1", "--kernel-rounds", "1", "--steps", "2", "--import-runs", "1"] if smoke else []
        side(checkout, "bench_cpu.py", [*sizes, "--out", directory])
        results = json.loads((Path(directory) / "bench_cpu.json").read_text())
    return {f"cpu: {measure}": figure for measure, figure in results["tinycore"].items()}


def llm_model(size: str, type_name: str) -> str:
    """The path of bench_llm.py's random GGUF of `size` and `type_name`, written first when missing."""
    path = os.path.join(tempfile.gettempdir(), f"bench_llm_{size}_{type_name}.gguf")
    if not os.path.exists(path):
        sys.path.insert(0, str(BENCH))
        import bench_llm
        bench_llm.write_model(path + ".partial", size, type_name)
        os.replace(path + ".partial", path)
    return path


def llm_figures(checkout: str, path: str, type_name: str, decode: int) -> Figures:
    """Decode speed of bench_llm.py's tinycore runner on `checkout` (a prompt of 8 tokens)."""
    output = side(checkout, "bench_llm.py", ["--child", "tinycore", path, "--prompt", "8", "--decode", str(decode)])
    figures = json.loads(output.strip().splitlines()[-1])
    return {f"llm {type_name}: decode tok/s": figures["decode_tps"],
            f"llm {type_name}: decode median tok/s": figures["decode_median_tps"],
            f"llm {type_name}: decode CPU ms/token": figures["decode_cpu_ms"]}


def indexing_figures(checkout: str, smoke: bool) -> Figures:
    """tinycore's times of bench_indexing.py on `checkout`, in ms."""
    sizes = ["--rounds", "1", "--rows", "1000", "--sizes", "2"] if smoke else []
    results = json.loads(side(checkout, "bench_indexing.py", [*sizes, "--json"]))
    return {f"indexing: {case} ms": row["tinycore"] * 1e3 for case, row in results.items()}


def speed_ratio(measure: str, old: float, new: float) -> float:
    """The new revision's speed over the old one's for one figure of `measure` (above 1: new is faster)."""
    return new / old if measure.endswith(HIGHER_IS_BETTER) else old / max(new, 1e-12)


def base_checkout(revision: str) -> str:
    """A detached worktree of `revision` in /tmp, made when missing."""
    commit = subprocess.run(["git", "rev-parse", "--short", revision], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.strip()
    path = Path(tempfile.gettempdir()) / f"tinycore_ab_{commit}"
    if not (path / "tinycore").is_dir():
        subprocess.run(["git", "worktree", "add", "--detach", str(path), commit], cwd=ROOT, check=True,
                       capture_output=True)
    return str(path)


def main() -> int:
    """Run the pairs and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default=BASE_REVISION, help="the old revision (default: before the passes work)")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--benches", default="cpu,llm,indexing", help="which of cpu, llm, indexing")
    parser.add_argument("--llm-size", default="small", help="bench_llm.py's model size (tiny, small, 1b)")
    parser.add_argument("--llm-type", default="Q8_0")
    parser.add_argument("--decode", type=int, default=32, help="tokens to decode per llm run")
    parser.add_argument("--smoke", action="store_true",
                        help="the smallest settings (one pair, one round, the tiny model): checks that it runs")
    parser.add_argument("--side", nargs=2, metavar=("CHECKOUT", "SCRIPT"), help=argparse.SUPPRESS)
    arguments, rest = parser.parse_known_args()
    if arguments.side:
        run_script(arguments.side[0], arguments.side[1], rest)
        return 0
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if arguments.smoke:
        arguments.pairs, arguments.llm_size, arguments.decode = 1, "tiny", 4
    base, new = base_checkout(arguments.base), str(ROOT)
    benches = arguments.benches.split(",")
    model = llm_model(arguments.llm_size, arguments.llm_type) if "llm" in benches else ""

    def figures(checkout: str) -> Figures:
        found: Figures = {}
        if "cpu" in benches:
            found |= cpu_figures(checkout, arguments.smoke)
        if "llm" in benches:
            found |= llm_figures(checkout, model, arguments.llm_type, arguments.decode)
        if "indexing" in benches:
            found |= indexing_figures(checkout, arguments.smoke)
        return found

    pairs: list[tuple[Figures, Figures]] = []
    for number in range(arguments.pairs):
        loads = os.getloadavg()[0]
        if number % 2 == 0:
            old_figures = figures(base)
            new_figures = figures(new)
        else:
            new_figures = figures(new)
            old_figures = figures(base)
        pairs.append((old_figures, new_figures))
        print(f"pair {number + 1}/{arguments.pairs} done (load average {loads:.1f} at its start)", file=sys.stderr)
    print(f"old: {arguments.base} ({base}), new: {new}; {len(pairs)} pairs, load average {os.getloadavg()[0]:.1f}")
    print("| measure | old | new | new / old speed, paired median (range) |\n|---|---|---|---|")
    for measure in pairs[0][0]:
        if not all(measure in old and measure in new for old, new in pairs):
            continue
        olds, news = [old[measure] for old, _ in pairs], [new[measure] for _, new in pairs]
        ratios = [speed_ratio(measure, old, new) for old, new in zip(olds, news, strict=True)]
        print(f"| {measure} | {statistics.median(olds):.4g} | {statistics.median(news):.4g} | "
              f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
