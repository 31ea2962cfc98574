"""Queue-device launch overhead on CPU: an eager op, TinyJit replays of 10 and 100 tiny kernels (their difference
over 90 is the cost of one more kernel in a replay), a jitted MLP step, and the share of that step which is not
kernel time (launch overhead).

Kernel time comes from the queue timestamps: steps replayed with profiling on sum their kernels' device times, and
the rest of each step's wall time is launch overhead. `--tree PATH` measures another checkout of tinycore and
tiny-cpu (a before/after table); for a tree whose CPU is not a queue device `--kernel-ms` gives the kernel time
measured here (the kernels are the same). Not run by CI: `python bench/bench_hcq.py [--tree PATH] [--json]`.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("DEV", "CPU")
HERE = Path(__file__).resolve().parent


def best_us(function: Any, count: int, rounds: int = 7) -> float:
    """The best of `rounds` means of `count` calls, in microseconds (after a garbage collection, so that the garbage
    of an earlier measure is not collected during this one)."""
    gc.collect()
    results = []
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(count):
            function()
        results.append((time.perf_counter() - started) / count * 1e6)
    return min(results)


def measure() -> dict[str, float]:
    """Eager op, 10-kernel replay and MLP SGD step on the tinycore found on sys.path."""
    sys.path.insert(0, str(HERE))
    from bench_train import median_ms, tinycore_step

    from tinycore import Tensor, TinyJit
    (Tensor([1.0]) + 1).realize()
    eager = best_us(lambda: (Tensor([1.0]) + 1).realize(), 300)

    def chain(length: int) -> Any:
        @TinyJit
        def kernels(x: Any) -> Any:
            for _ in range(length):
                x = (x + 1).contiguous()
            return x.realize()
        return kernels

    x = Tensor([1.0]).realize()
    ten_kernels, hundred_kernels = chain(10), chain(100)
    for _ in range(5):
        ten_kernels(x)
        hundred_kernels(x)
    # alternated, so that a slow spell of the machine does not fall on one of them only
    replay, replay_100 = float("inf"), float("inf")
    for _ in range(5):
        replay = min(replay, best_us(lambda: ten_kernels(x), 200, rounds=2))
        replay_100 = min(replay_100, best_us(lambda: hundred_kernels(x), 200, rounds=2))
    step = tinycore_step("SGD")
    step_ms = median_ms(step, 40, warmup=5)
    return {"eager_us": eager, "replay_us_per_call": replay, "replay_us_per_kernel": replay / 10,
            "replay_100_us_per_call": replay_100, "replay_marginal_us_per_kernel": (replay_100 - replay) / 90,
            "mlp_sgd_step_ms": step_ms}


def kernel_share_of_step(steps: int = 20) -> tuple[float, float, int]:
    """Median over `steps` jitted SGD steps, timed with queue timestamps in this process: the kernels' device time
    (ms), the share of the step's wall time that is not kernel time (launch overhead), and the kernel count."""
    import statistics

    from bench_train import tinycore_step

    from tinycore.device.registry import Device
    from tinycore.hcq import profile
    Device["CPU"].profiling = True  # graphs built from now on time every kernel
    step = tinycore_step("SGD")
    for _ in range(4):
        step()
    kernel_ms, shares, counts = [], [], []
    for _ in range(steps):
        profile.EVENTS.clear()
        started = time.perf_counter()
        step()
        wall_ms = (time.perf_counter() - started) * 1000
        kernels = sum(event.end_us - event.start_us for event in profile.EVENTS) / 1000
        kernel_ms.append(kernels)
        shares.append(1 - kernels / wall_ms)
        counts.append(len(profile.EVENTS))
    Device["CPU"].profiling = False
    return statistics.median(kernel_ms), statistics.median(shares), max(counts)


def main() -> None:
    """Print (or write as JSON) the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", help="a tinycore checkout to measure instead of this one")
    parser.add_argument("--kernel-ms", type=float, help="kernel time of one step, when the tree cannot profile")
    parser.add_argument("--json", action="store_true")
    arguments = parser.parse_args()
    if arguments.tree:
        sys.path[:0] = [arguments.tree, str(Path(arguments.tree) / "plugins" / "tiny-cpu")]
    figures = measure()
    import tinycore
    try:
        from tinycore.device.registry import Device
        from tinycore.hcq import HCQCompiled
        if not isinstance(Device["CPU"], HCQCompiled):
            raise ImportError("CPU is not a queue device in this tree")
        kernel_ms, share, kernels = kernel_share_of_step()
    except ImportError:  # a tree without CPU queues: its step minus this tree's kernel time
        kernel_ms, kernels = arguments.kernel_ms or 0.0, 0
        share = 1 - kernel_ms / figures["mlp_sgd_step_ms"] if kernel_ms else -1.0
    figures["kernel_ms_per_step"] = kernel_ms
    figures["kernels_per_step"] = kernels
    figures["launch_overhead_share"] = share
    if arguments.json:
        print(json.dumps(figures))
        return
    print(f"tinycore from {Path(tinycore.__file__).parent}")
    for name, value in figures.items():
        print(f"{name:24} {value:10.3f}")


if __name__ == "__main__":
    main()
