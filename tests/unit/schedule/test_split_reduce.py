"""Large reduces into fewer outputs than a CPU device has workers are split in two kernels (split_reduce.py): which
reduces split and along which axis (scheduled with stated device facts, so the figures do not depend on this
machine's core count), and their values against numpy on the CPU device (sums in float64 by numpy, max exact)."""
from __future__ import annotations

import numpy as np
import pytest

from tinycore import GlobalCounters, Tensor
from tinycore.engine.memory import device_facts
from tinycore.helpers import Context
from tinycore.schedule import create_schedule
from tinycore.schedule.device_facts import DeviceFacts
from tinycore.uop.ops import Ops

pytest.importorskip("tiny_cpu", reason="the CPU device plugin (pip install -e plugins/tiny-cpu) runs these tests")


def _facts(workers: int, loops: bool = True):
    return lambda device: DeviceFacts(loops_over_rows=loops, workers=workers)


def _reduce_kernels(tensor: Tensor, facts) -> list[int]:
    """The output element count of each kernel that reduces, in schedule order."""
    schedule = create_schedule([tensor.uop], facts)
    return [item.buffers[0].arg[1] for item in schedule.items
            if not item.is_copy and any(node.op is Ops.REDUCE for node in item.ast.toposort)]


def _array(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_a_whole_tensor_sum_is_split_into_partials_the_workers_share() -> None:
    tensor = Tensor.empty(1 << 20)
    assert _reduce_kernels(tensor.sum(), _facts(workers=4)) == [256, 1]
    # 2 workers need at least 4 parts; the largest divisor up to 256 leaving 4096 elements a part is taken
    assert _reduce_kernels(Tensor.empty(3 * 5 * 4096 * 7).sum(), _facts(workers=2)) == [105, 1]


def test_reduces_that_stay_one_kernel() -> None:
    facts = _facts(workers=4)
    # enough outputs to share: rows of a matrix
    assert _reduce_kernels(Tensor.empty(4096, 1024).sum(1), facts) == [4096]
    # too little to reduce per output for a second launch to pay
    assert _reduce_kernels(Tensor.empty(1 << 14).sum(), facts) == [1]
    # a prime length has no divisor to cut it at
    assert _reduce_kernels(Tensor.empty(1_000_003).sum(), facts) == [1]
    # one worker, or a device whose kernels do not loop over rows (GPUs), or SPLIT_REDUCEOP=0
    assert _reduce_kernels(Tensor.empty(1 << 20).sum(), _facts(workers=1)) == [1]
    assert _reduce_kernels(Tensor.empty(1 << 20).sum(), _facts(workers=4, loops=False)) == [1]
    with Context(SPLIT_REDUCEOP=0):
        assert _reduce_kernels(Tensor.empty(1 << 20).sum(), facts) == [1]


def test_the_outermost_reduced_axis_that_divides_is_split() -> None:
    # two outputs (axis 0 kept), each reducing 4096 x 1024: axis 1 is cut into 256 parts of 16 x 1024
    assert _reduce_kernels(Tensor.empty(2, 4096, 1024).sum((1, 2)), _facts(workers=4)) == [2 * 256, 2]
    # a tall column sum: 4 outputs of 2^18 rows each, the long axis cut into 64 parts of 4096 rows
    assert _reduce_kernels(Tensor.empty(1 << 18, 4).sum(0), _facts(workers=4)) == [64 * 4, 4]


@pytest.mark.parametrize("build, reference", [
    (lambda t: t.sum(), lambda a: a.astype(np.float64).sum()),
    (lambda t: t.max(), lambda a: a.max()),
    (lambda t: t.min(), lambda a: a.min()),
    (lambda t: t.mean(), lambda a: a.astype(np.float64).mean()),
    (lambda t: (t * t).sum().sqrt(), lambda a: np.sqrt((a.astype(np.float64) ** 2).sum())),
    (lambda t: t.reshape(64, 4096).sum(0).max(), lambda a: a.reshape(64, 4096).astype(np.float64).sum(0).max()),
])
def test_split_reduces_match_numpy(build, reference) -> None:
    array = _array(1 << 18, seed=3)
    facts = device_facts("CPU")
    split = facts.workers >= 2
    GlobalCounters.reset()
    value = build(Tensor(array)).numpy()
    np.testing.assert_allclose(value, reference(array), rtol=2e-5, atol=1e-4)
    if split:
        assert GlobalCounters.kernel_count >= 2


def test_a_split_sum_of_an_expression_and_its_gradient_match_numpy() -> None:
    arrays = [_array(1 << 17, seed=seed) for seed in range(4)]
    a, b, c, d = (Tensor(array, requires_grad=True) for array in arrays)
    loss = ((a * b + c).relu() * d).sum()
    loss.backward()
    x, y, z, w = (array.astype(np.float64) for array in arrays)
    inner = x * y + z
    np.testing.assert_allclose(loss.numpy(), (np.maximum(inner, 0) * w).sum(), rtol=1e-5)
    np.testing.assert_allclose(a.grad.numpy(), np.where(inner > 0, w * y, 0), rtol=1e-6, atol=1e-7)


def test_integer_and_bool_reductions_stay_exact() -> None:
    values = np.random.default_rng(5).integers(-1000, 1000, size=1 << 18).astype(np.int32)
    assert Tensor(values).sum().item() == int(values.astype(np.int64).sum())
    flags = values > 990
    assert Tensor(flags).any().item() == bool(flags.any())
    assert Tensor(flags).sum().item() == int(flags.sum())
