"""Scatter reductions on the CPU: with enough workers (codegen.atomics.ATOMIC_MIN_WORKERS) the kernel splits the
values across workers and combines with GCC's __atomic builtins; every dtype's result equals numpy's ufunc.at."""
from __future__ import annotations

from atomic_scatter_check import run_in_child


def test_scatter_reductions_combine_atomically_across_workers() -> None:
    run_in_child("C")
