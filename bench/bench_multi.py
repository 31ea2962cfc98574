"""Several CPU instances in one process: a data-parallel MLP step (not jitted: TinyJit's queue graph over several
CPU instances crashes on this step's sizes, see README) on 2 CPU instances against the same step
on one, and an allreduce (naive and ring) of a float32 buffer against a plain copy of the same bytes between two
instances. The CPU instances share the machine's cores, so this measures the multi-device machinery's overhead,
not a speed-up. Not run by CI: `python bench/bench_multi.py [--json]`.

`mpiexec -n 2 python bench/bench_multi.py --mpi [--json]`: the same step data-parallel over MPI processes
(tinycore.distributed: each rank half the batch, gradients averaged through MPI) against the step of one process on
the whole batch (timed by rank 0 while the other ranks sleep), with the share of the step spent in MPI calls, and
an MPI allreduce of 4 Mi float32 from tensors against a plain CPU:0 -> CPU:1 copy of the same bytes.
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


def _idle_until_rank_zero_is_done() -> None:
    """Ranks other than 0 wait here without spinning (a blocking MPI barrier polls a core) while rank 0 times."""
    from mpi4py import MPI
    request = MPI.COMM_WORLD.Ibarrier()
    while not request.Test():
        time.sleep(0.01)


def mpi_figures(batch: int = 256, width: int = 512, numel: int = 4 << 20) -> dict[str, float] | None:
    """The MPI rows (see the module docstring); None on ranks other than 0."""
    import numpy as np

    from tinycore import Context, Tensor, distributed, nn
    distributed.init()
    rank, world = distributed.rank(), distributed.world_size()
    single = copy = 0.0
    if rank == 0:
        single, copy = mlp_step_ms(None, batch, width), copy_gbs(numel)
        _idle_until_rank_zero_is_done()
    else:
        _idle_until_rank_zero_is_done()
    rng = np.random.default_rng(0)
    first = Tensor(rng.standard_normal((width, width)).astype(np.float32) * 0.05, requires_grad=True)
    second = Tensor(rng.standard_normal((width, 10)).astype(np.float32) * 0.05, requires_grad=True)
    part = distributed.shard_indices(batch)
    inputs = Tensor(rng.standard_normal((batch, width)).astype(np.float32)[part.start:part.stop]).realize()
    targets = Tensor(np.zeros((len(part), 10), np.float32)).realize()
    optimizer = nn.optim.SGD([first, second], lr=0.01)

    def step() -> None:
        loss = ((inputs @ first).relu() @ second - targets).square().mean()
        optimizer.zero_grad()
        loss.backward()
        distributed.allreduce_gradients(optimizer.params)
        optimizer.step()

    with Context(TRAINING=1):
        step()
        distributed.reset_stats()
        started = time.perf_counter()
        distributed_ms = best_ms(step, 10)
        share = distributed.stats.seconds / (time.perf_counter() - started)
    values = Tensor(np.ones(numel, np.float32)).realize()
    allreduce_ms = best_ms(lambda: distributed.allreduce(values).realize(), 5)
    if rank != 0:
        return None
    return {"mlp_step_ms_one_process": single, f"mlp_step_ms_{world}_mpi_processes": distributed_ms,
            "mpi_over_one": distributed_ms / single, "mpi_communication_share": share, "copy_gbs": copy,
            "mpi_allreduce_gbs": numel * 4 / allreduce_ms / 1e6, "mpi_allreduce_over_copy":
            numel * 4 / allreduce_ms / 1e6 / copy}


def main() -> None:
    """Measure and print a table (or JSON)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--mpi", action="store_true", help="the MPI rows, under mpiexec -n 2")
    options = parser.parse_args()
    if options.mpi:
        figures = mpi_figures()
        if figures is not None:
            print(json.dumps(figures, indent=2) if options.json else
                  "\n".join(f"{name:<34} {value:8.3f}" for name, value in figures.items()))
        return
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
