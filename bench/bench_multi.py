"""Several CPU instances in one process: a data-parallel MLP step (not jitted: TinyJit's queue graph over several
CPU instances crashes on this step's sizes, see README) on 2 CPU instances against the same step
on one, and an allreduce (naive and ring) of a float32 buffer against a plain copy of the same bytes between two
instances. The CPU instances share the machine's cores, so this measures the multi-device machinery's overhead,
not a speed-up. Not run by CI: `python bench/bench_multi.py [--json]`.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import time
from typing import Any

os.environ.setdefault("DEV", "CPU")


def best_ms(function: Any, count: int, rounds: int = 5) -> float:
    """The best of `rounds` means of `count` calls, in milliseconds."""
    gc.collect()
    results = []
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(count):
            function()
        results.append((time.perf_counter() - started) / count * 1e3)
    return min(results)


def mlp_step_ms(devices: tuple[str, ...] | None, batch: int = 256, width: int = 512) -> float:
    """Milliseconds per SGD step of a 2-layer MLP, data-parallel over `devices` (None: one device)."""
    import numpy as np

    from tinycore import Context, Tensor, nn
    rng = np.random.default_rng(0)
    first = Tensor(rng.standard_normal((width, width)).astype(np.float32) * 0.05, requires_grad=True)
    second = Tensor(rng.standard_normal((width, 10)).astype(np.float32) * 0.05, requires_grad=True)
    x, y = Tensor(rng.standard_normal((batch, width)).astype(np.float32)), Tensor(np.zeros((batch, 10), np.float32))
    if devices is not None:
        first.to_(devices)
        second.to_(devices)
        x, y = x.shard(devices, 0), y.shard(devices, 0)
    Tensor.realize(first, second, x, y)
    optimizer = nn.optim.SGD([first, second], lr=0.01)

    def step(inputs: Tensor, targets: Tensor) -> Tensor:
        loss = ((inputs @ first).relu() @ second - targets).square().mean().realize()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        Tensor.realize(*optimizer.params)
        return loss

    with Context(TRAINING=1):
        return best_ms(lambda: step(x, y), 10)


def allreduce_gbs(method: str, numel: int = 4 << 20) -> float:
    """GB/s (buffer bytes per second) of a sum over 2 CPU instances, each holding `numel` float32 values."""
    import numpy as np

    from tinycore import Context, Tensor
    settings = {"naive": {"RING": 0, "ALL2ALL": 0}, "ring": {"RING": 2, "ALL2ALL": 0}}[method]
    data = Tensor(np.ones((2, numel), np.float32)).shard(("CPU:0", "CPU:1"), 0).realize()
    with Context(**settings):
        milliseconds = best_ms(lambda: data.sum(0).realize(), 5)
    return numel * 4 / milliseconds / 1e6


def copy_gbs(numel: int = 4 << 20) -> float:
    """GB/s of a plain copy of `numel` float32 values from CPU:0 to CPU:1."""
    import numpy as np

    from tinycore import Tensor
    data = Tensor(np.ones(numel, np.float32), device="CPU:0").realize()
    milliseconds = best_ms(lambda: data.to("CPU:1").realize(), 5)
    return numel * 4 / milliseconds / 1e6


def main() -> None:
    """Measure and print a table (or JSON)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    options = parser.parse_args()
    single, double = mlp_step_ms(None), mlp_step_ms(("CPU:0", "CPU:1"))
    copy, naive, ring = copy_gbs(), allreduce_gbs("naive"), allreduce_gbs("ring")
    figures = {"mlp_step_ms_one_device": single, "mlp_step_ms_two_instances": double,
               "mlp_two_over_one": double / single, "copy_gbs": copy, "allreduce_naive_gbs": naive,
               "allreduce_ring_gbs": ring, "naive_over_copy": naive / copy, "ring_over_copy": ring / copy}
    if options.json:
        print(json.dumps(figures, indent=2))
        return
    for name, value in figures.items():
        print(f"{name:<28} {value:8.3f}")


if __name__ == "__main__":
    main()
