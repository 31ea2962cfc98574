"""Convolution forward + backward on the CPU: tinycore beside torch, interleaved in one process, as ratios.

    python bench/bench_conv.py [--rounds N] [--cases NAME ...]

Each case is `(conv(x, w) * r).sum().backward()` with r a fixed random upstream gradient, so the input and weight
gradients are both computed (tinycore realizes them together). Every case is first checked against torch (result and
both gradients). Then for `--rounds` rounds each library runs each case once after `settle()` (bench/settle.py), the
order of the libraries turning from round to round; printed are the median milliseconds and the paired median of
torch's time over tinycore's (above 1: tinycore is faster). The cases are the ones bench/README.md reports for the
strided, grouped, dilated and narrow-image convolutions.
"""
from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np
import paired

os.environ.setdefault("DEV", "CPU")

# name -> (input shape, weight shape, stride, padding, groups, dilation)
CASES: dict[str, tuple[tuple[int, ...], tuple[int, ...], int, int, int, int]] = {
    "stride2": ((32, 16, 32, 32), (32, 16, 3, 3), 2, 1, 1, 1),
    "stride2-1x1": ((32, 16, 32, 32), (32, 16, 1, 1), 2, 0, 1, 1),
    "groups4": ((32, 32, 32, 32), (32, 8, 3, 3), 1, 1, 4, 1),
    "depthwise": ((32, 32, 32, 32), (32, 1, 3, 3), 1, 1, 32, 1),
    "dilation2": ((32, 16, 32, 32), (32, 16, 3, 3), 1, 2, 1, 2),
    "narrow8x8": ((32, 64, 8, 8), (128, 64, 3, 3), 1, 1, 1, 1),
    "narrow14x14": ((128, 16, 14, 14), (32, 16, 3, 3), 1, 1, 1, 1),
    "narrow7x7": ((128, 16, 7, 7), (32, 16, 3, 3), 1, 1, 1, 1),
    "plain64x64": ((32, 16, 64, 64), (32, 16, 3, 3), 1, 0, 1, 1),
}


def _calls(name: str) -> dict[str, Callable[[], object]]:
    """{library: one forward + backward of the case}, after checking tinycore's values against torch's."""
    import torch

    from tinycore import Tensor
    shape, weight_shape, stride, padding, groups, dilation = CASES[name]
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal(shape, dtype=np.float32), rng.standard_normal(weight_shape, dtype=np.float32)
    options = {"stride": stride, "padding": padding, "groups": groups, "dilation": dilation}
    upstream = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), **options)
    r = rng.standard_normal(tuple(upstream.shape), dtype=np.float32)
    held_x, held_w, held_r = Tensor(x).realize(), Tensor(w).realize(), Tensor(r).realize()
    torch_r = torch.from_numpy(r)

    def ours() -> tuple[np.ndarray, np.ndarray]:
        source, weight = held_x.detach(), held_w.detach()
        source.requires_grad, weight.requires_grad = True, True
        (source.conv2d(weight, **options) * held_r).sum().backward()
        assert source.grad is not None and weight.grad is not None
        Tensor.realize(source.grad, weight.grad)
        return source.grad.numpy(), weight.grad.numpy()

    def theirs() -> tuple[np.ndarray, np.ndarray]:
        source, weight = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
        (torch.nn.functional.conv2d(source, weight, **options) * torch_r).sum().backward()
        assert source.grad is not None and weight.grad is not None
        return source.grad.numpy(), weight.grad.numpy()

    for mine, reference in zip(ours(), theirs(), strict=True):
        error = float(np.abs(mine - reference).max() / max(float(np.abs(reference).max()), 1e-30))
        if error > 1e-4:
            raise SystemExit(f"{name}: tinycore's gradients differ from torch's (relative error {error:.2e})")
    return {"tinycore": ours, "torch": theirs}


if __name__ == "__main__":
    paired.main(__doc__ or "", list(CASES), _calls, rounds=10)
