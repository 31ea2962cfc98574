"""A jitted data-parallel step over two CPU instances, replayed without waiting for results, then dropped while
the second instance's queue may still run the last replay: the graph must outlive its in-flight work (this once
crashed the process at the next allocation). The parameters are checked against numpy's SGD."""
from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import numpy as np
    from tinycore import Context, Tensor, TinyJit, nn

    width, batch, steps, lr = 256, 128, 12, 0.01
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((width, width)).astype(np.float32) * 0.05
    w2 = rng.standard_normal((width, 10)).astype(np.float32) * 0.05
    x = rng.standard_normal((batch, width)).astype(np.float32)
    y = rng.standard_normal((batch, 10)).astype(np.float32)

    def train():
        devices = ("CPU:0", "CPU:1")
        first, second = Tensor(w1, requires_grad=True), Tensor(w2, requires_grad=True)
        first.to_(devices)
        second.to_(devices)
        inputs, targets = Tensor(x).shard(devices, 0), Tensor(y).shard(devices, 0)
        Tensor.realize(first, second, inputs, targets)
        optimizer = nn.optim.SGD([first, second], lr=lr)

        @TinyJit
        def step(inputs, targets):
            loss = ((inputs @ first).relu() @ second - targets).square().mean().realize()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            Tensor.realize(*optimizer.params)
            return loss

        with Context(TRAINING=1):
            for _ in range(steps):
                step(inputs, targets)
        return step, first, second

    step, first, second = train()
    del step  # the graph goes while its last replay may still run
    filler = [np.ones(1 << 20, np.float32) for _ in range(8)]  # allocations that reuse freed memory

    reference_first, reference_second = w1.copy(), w2.copy()
    for _ in range(steps):
        hidden = x @ reference_first
        active = np.maximum(hidden, 0)
        gradient_out = 2 * (active @ reference_second - y) / y.size
        gradient_second = active.T @ gradient_out
        gradient_first = x.T @ ((gradient_out @ reference_second.T) * (hidden > 0))
        reference_first -= lr * gradient_first
        reference_second -= lr * gradient_second
    np.testing.assert_allclose(second.numpy(), reference_second, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(first.numpy(), reference_first, rtol=1e-4, atol=1e-5)
    print("ok")
""")


def test_a_dropped_multi_device_graph_waits_for_its_last_replay():
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert result.stdout.strip().endswith("ok")
