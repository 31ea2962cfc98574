"""Tests that run once per MPI rank: collected only under an MPI launcher, as `nox -s distributed` runs them
(`mpiexec -n 2 python -m pytest tests/distributed/mpi -p no:randomly`). A plain `pytest` run has one process and
nothing to communicate with; tests/distributed/test_distributed.py covers what one process can check.

Every rank must run the same tests in the same order (the collectives pair up by order), so a failure on one rank
aborts the whole job at once instead of leaving the other ranks waiting in their next collective."""
from __future__ import annotations

import sys
from collections.abc import Generator

import pytest

from tinycore import distributed

collect_ignore_glob = [] if distributed.launched() else ["test_*.py"]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, None, None]:
    """Abort every rank when a test fails on one (after printing why), so the job ends instead of hanging."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and distributed.is_initialized():
        sys.stderr.write(f"\nrank {distributed.rank()}: {item.nodeid} failed:\n{report.longrepr}\n")
        sys.stderr.flush()
        from mpi4py import MPI
        MPI.COMM_WORLD.Abort(1)
