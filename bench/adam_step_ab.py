"""Paired A/B of one fused Adam step of bench_torch.py's model (issue 47): old checkout against this one.

Run: `python bench/adam_step_ab.py BASE_CHECKOUT [--pairs N]` from the repository root, where BASE_CHECKOUT is a
worktree of the revision to compare with (`git worktree add --detach /tmp/base REV`). Each pair runs one process on
the base checkout (PYTHONPATH pointing at it; the script checks that tinycore and tiny_torch come from there) and one
on this checkout, in alternation. Per process: the DigitsNet of examples/torch_digits.py on the tiny device, one
backward for its gradients, 5 warm-up `optimizer.step()` calls of `torch.optim.Adam(..., fused=True)`, then 7 blocks
of 10 steps, each block ending with a read of a parameter; printed: the calling thread's CPU ms per step (median
block), each side's median over the pairs and the median (range) of the paired ratios before / after.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BLOCKS, STEPS = 7, 10


def measure(checkout: str) -> float:
    """Thread CPU ms per fused Adam step in this process, whose tinycore and tiny_torch come from `checkout`."""
    os.environ.setdefault("DEV", "CPU")
    sys.path.insert(0, f"{checkout}/examples")
    import tiny_torch
    import torch
    from torch import nn
    from torch_digits import DigitsNet, load_digits_split

    import tinycore
    for module in (tinycore, tiny_torch):
        if not str(module.__file__).startswith(checkout):
            raise SystemExit(f"{module.__name__} comes from {module.__file__}, not from {checkout}")
    torch.manual_seed(0)
    images, labels, _, _ = load_digits_split()
    model = DigitsNet().to("tiny")
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2, fused=True)
    loss = nn.functional.cross_entropy(model(images[:128].to("tiny")), labels[:128].to("tiny"))
    loss.backward()
    for _ in range(5):
        optimizer.step()
    first = next(model.parameters())
    first.sum().item()
    blocks = []
    for _ in range(BLOCKS):
        started = time.thread_time()
        for _ in range(STEPS):
            optimizer.step()
        first.sum().item()
        blocks.append((time.thread_time() - started) / STEPS * 1e3)
    return statistics.median(blocks)


def run_side(checkout: str) -> float:
    """The measure of one process on `checkout`."""
    path = os.pathsep.join(f"{checkout}{part}" for part in ("", "/plugins/tiny-cpu", "/plugins/tiny-torch"))
    output = subprocess.run([sys.executable, __file__, "--measure", checkout], env=dict(os.environ, PYTHONPATH=path),
                            cwd="/", capture_output=True, text=True, check=True).stdout
    return float(output.strip().splitlines()[-1])


def main() -> int:
    """Run the pairs and print the summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", help="a checkout of the revision to compare with")
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(measure(args.base))
        return 0
    base = str(Path(args.base).resolve())
    pairs = [(run_side(base), run_side(str(ROOT))) for _ in range(args.pairs)]
    ratios = [old / new for old, new in pairs]
    print(f"load average {os.getloadavg()[0]:.1f}, {len(pairs)} pairs (before, after ms): "
          + ", ".join(f"({old:.1f}, {new:.1f})" for old, new in pairs))
    print(f"fused Adam step, thread CPU ms: before {statistics.median(old for old, _ in pairs):.2f}, after "
          f"{statistics.median(new for _, new in pairs):.2f}, paired ratio {statistics.median(ratios):.2f} "
          f"({min(ratios):.2f}-{max(ratios):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
