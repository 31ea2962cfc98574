"""The FLOP count behind DEBUG=2's GFLOPS: only arithmetic on values, checked against counts worked out by hand."""
import numpy as np

from tinycore import Tensor
from tinycore.counters import GlobalCounters


def _ops_of(result: Tensor) -> int:
    """Operations counted for the kernels that realize `result` (its inputs realized beforehand)."""
    GlobalCounters.reset()
    result.realize()
    return GlobalCounters.global_ops


def _realized(*shape: int, seed: int = 0) -> Tensor:
    return Tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32)).realize()


def test_matmul_counts_a_multiply_and_an_add_per_term():
    m, k, n = 64, 96, 80
    a, b = _realized(m, k), _realized(k, n, seed=1)
    ops = _ops_of(a @ b)
    # 2*M*N*K by hand; vector accumulators may add a few partial sums per output at the end
    assert 2 * m * n * k <= ops <= 2 * m * n * k + 16 * m * n, ops


def test_conv2d_counts_the_multiply_adds_of_each_output():
    batch, cin, cout, size, kernel = 2, 8, 16, 20, 3
    x, w = _realized(batch, cin, size, size), _realized(cout, cin, kernel, kernel, seed=1)
    ops = _ops_of(x.conv2d(w))
    out = size - kernel + 1
    terms = batch * cout * out * out * cin * kernel * kernel
    assert 2 * terms <= ops <= 2 * terms + 16 * batch * cout * out * out, ops


def test_padded_conv2d_leaves_out_the_bounds_checks():
    batch, cin, cout, size, kernel = 1, 4, 8, 16, 3
    x, w = _realized(batch, cin, size, size), _realized(cout, cin, kernel, kernel, seed=1)
    ops = _ops_of(x.conv2d(w, padding=1))
    terms = batch * cout * size * size * cin * kernel * kernel
    # the padded reads are selects between the value and zero on bounds checks: masking, not arithmetic
    assert 2 * terms <= ops <= 2 * terms + 16 * batch * cout * size * size, ops


def test_elementwise_counts_each_value_op_once_per_element():
    size = 4096 + 3  # not a multiple of the vector width: the tail must count the same
    a, b, c, d = (_realized(size, seed=seed) for seed in range(4))
    # relu(a*b+c)*d: multiply, add, relu as a compare with zero and a select, multiply
    assert _ops_of((a * b + c).relu() * d) == 5 * size
    # 2-D, so the kernel has index arithmetic over two axes: a + b is one add per element
    x, y = _realized(37, 53), _realized(37, 53, seed=1)
    assert _ops_of(x + y) == 37 * 53

