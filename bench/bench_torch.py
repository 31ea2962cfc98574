"""tiny-torch benchmark: one training step (forward, cross-entropy, backward, Adam) of the digits CNN of
examples/torch_digits.py on the tiny device, eager and through torch.compile(backend="tiny"), next to PyTorch's
own CPU kernels in the same process.

Run: `python bench/bench_torch.py [--steps N] [--json]` from the repository root (needs tiny-torch, tiny-cpu and
scikit-learn). Warm-up steps (kernel compilation, graph capture) are reported apart; the step time is the median of
the timed steps, each ending with `loss.item()` so the work has run; they start after `settle()` (bench/settle.py),
so that no threads still spin from the warm-up. The ratio is tiny time / PyTorch CPU time (above 1: tiny is
slower). Each step's process CPU time (all threads) is reported too: on a machine shared with other jobs it moves
less than the wall time."""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import tiny_torch  # noqa: E402,F401  (registers the tiny device)
from settle import settle  # noqa: E402
from torch_digits import DigitsNet, load_digits_split  # noqa: E402


def measure(device: str, compile_model: bool, steps: int, warmup: int, batch_size: int) -> dict[str, float]:
    """Seconds of the warm-up steps and the median timed step for one configuration."""
    torch.manual_seed(0)
    images, labels, _, _ = load_digits_split()
    model = DigitsNet().to(device)
    # fused=True on both: one optimizer operator per step (PyTorch CPU has a fused kernel too; tiny-torch maps it)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2, fused=True)
    step_model = torch.compile(model, backend="tiny") if compile_model else model
    batch_x, batch_y = images[:batch_size].to(device), labels[:batch_size].to(device)

    def step() -> float:
        loss = nn.functional.cross_entropy(step_model(batch_x), batch_y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item()
    start = time.perf_counter()
    for _ in range(warmup):
        step()
    warm = time.perf_counter() - start
    settle()
    times, cpu_times = [], []
    for _ in range(steps):
        start, cpu_start = time.perf_counter(), time.process_time()
        step()
        times.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - cpu_start)
    return {"warmup_s": warm, "step_s": statistics.median(times), "step_cpu_s": statistics.median(cpu_times)}


def main() -> None:
    """Measure the three configurations and print the ratios."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    results = {
        "torch_cpu": measure("cpu", False, options.steps, options.warmup, options.batch_size),
        "tiny_eager": measure("tiny", False, options.steps, options.warmup, options.batch_size),
        "tiny_compiled": measure("tiny", True, options.steps, options.warmup, options.batch_size),
    }
    baseline = results["torch_cpu"]["step_s"]
    for name in ("tiny_eager", "tiny_compiled"):
        results[name]["ratio_vs_torch_cpu"] = results[name]["step_s"] / baseline
        results[name]["cpu_ratio_vs_torch_cpu"] = results[name]["step_cpu_s"] / results["torch_cpu"]["step_cpu_s"]
    if options.json:
        print(json.dumps(results, indent=2))
        return
    for name, figures in results.items():
        ratio = f"  {figures['ratio_vs_torch_cpu']:.1f}x torch CPU" if "ratio_vs_torch_cpu" in figures else ""
        print(f"{name:14s} step {figures['step_s'] * 1000:8.1f} ms (process CPU {figures['step_cpu_s'] * 1000:7.1f} ms)"
              f"  warm-up {figures['warmup_s']:.1f} s{ratio}")


if __name__ == "__main__":
    main()
