"""tinycore.distributed in one plain process: the errors a user meets before any MPI job runs, and the data split.
The collectives themselves run under mpiexec in tests/distributed/mpi (nox -s distributed)."""
from __future__ import annotations

import sys

import pytest

from tinycore import Tensor, distributed


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No process group, no launcher variables."""
    monkeypatch.setattr(distributed, "_group", None)
    for name in distributed.LAUNCHER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_init_outside_a_launcher_says_how_to_run(fresh: pytest.MonkeyPatch) -> None:
    assert not distributed.launched()
    with pytest.raises(distributed.DistributedError, match=r"mpiexec -n 2 python .*pip install mpich mpi4py"):
        distributed.init()
    assert not distributed.is_initialized()


def test_missing_mpi4py_names_the_packages(fresh: pytest.MonkeyPatch) -> None:
    fresh.setenv("PMI_RANK", "0")
    fresh.setenv("PMI_SIZE", "2")
    fresh.setitem(sys.modules, "mpi4py", None)  # an import of mpi4py now fails as if it were not installed
    fresh.setitem(sys.modules, "mpi4py.MPI", None)
    with pytest.raises(ImportError, match="pip install mpich mpi4py") as caught:
        distributed.init()
    assert isinstance(caught.value, distributed.MPIUnavailableError)
    assert not distributed.is_initialized()


@pytest.mark.parametrize("call", [distributed.rank, distributed.world_size, distributed.barrier,
                                  lambda: distributed.allreduce(Tensor([1.0])),
                                  lambda: distributed.broadcast(Tensor([1.0]))])
def test_collectives_before_init_say_to_call_init(fresh: pytest.MonkeyPatch, call: object) -> None:
    assert callable(call)
    with pytest.raises(distributed.DistributedError, match=r"call distributed.init\(\) first"):
        call()


def test_gradients_missing_before_reduce(fresh: pytest.MonkeyPatch) -> None:
    fresh.setattr(distributed, "_group", object())  # a group is never reached: the check comes first
    with pytest.raises(distributed.DistributedError, match="call loss.backward"):
        distributed.allreduce_gradients([Tensor([1.0], requires_grad=True)])


@pytest.mark.parametrize("length,size", [(10, 3), (7, 7), (3, 4), (0, 2), (100, 1)])
def test_shard_indices_cover_the_data_once(length: int, size: int) -> None:
    parts = [distributed.shard_indices(length, rank, size) for rank in range(size)]
    assert [index for part in parts for index in part] == list(range(length))  # contiguous, in rank order
    assert max(map(len, parts)) - min(map(len, parts)) <= 1


def test_shard_indices_rejects_a_rank_outside_the_group() -> None:
    with pytest.raises(ValueError, match="not in a group of 2"):
        distributed.shard_indices(10, 2, 2)


def test_distributed_example_outside_mpiexec_says_how_to_launch() -> None:
    import os
    import subprocess
    from pathlib import Path
    environment = {name: value for name, value in os.environ.items() if name not in distributed.LAUNCHER_VARIABLES}
    script = Path(__file__).resolve().parents[2] / "examples" / "train_digits.py"
    result = subprocess.run([sys.executable, str(script), "--distributed", "--steps", "1"], capture_output=True,
                            text=True, env=environment, timeout=300)
    assert result.returncode == 2  # a usage mistake: one line, no traceback
    assert result.stderr.startswith("train_digits.py: ") and "mpiexec -n 2 python" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
