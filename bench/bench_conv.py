"""Convolution forward + backward on the CPU: tinycore beside torch, interleaved in one process, as ratios.

    python bench/bench_conv.py [--rounds N] [--cases NAME ...] [--part both|forward|input|weight]
                                [--threads N]

Each case is `(conv(x, w) * r).sum().backward()` with r a fixed random upstream gradient, so the input and weight
gradients are both computed (tinycore realizes them together). `--part` times one direction alone instead: `forward`
the convolution (torch under no_grad), `input` the input gradient (only x requires a gradient; torch's
`torch.nn.grad.conv2d_input`), `weight` the weight gradient (only w; `torch.nn.grad.conv2d_weight`). With
`DEBUG=2` a part's kernels print alone, so the kernel that loses to torch is found per direction. Every case is
first checked against torch (the part's values). Then for `--rounds` rounds each library runs each case once after
`settle()` (bench/settle.py), the order of the libraries turning from round to round; printed are the median
milliseconds and the paired median of torch's time over tinycore's (above 1: tinycore is faster). The cases are the
ones bench/README.md reports for the strided, grouped, dilated and narrow-image convolutions. `--threads N` runs both
libraries on N threads (NUM_CPU_THREADS and torch.set_num_threads): on a machine shared with other jobs, torch's
OpenMP workers woken after `settle()` took 60 ms for a 1 ms convolution at load 4-5 on 2 cores, where one thread
each still compares.
"""
from __future__ import annotations

import argparse
import os
import sys
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


PARTS = ("both", "forward", "input", "weight")
"""What `--part` times: forward + both gradients, or one direction alone."""


def _calls(name: str, part: str = "both") -> dict[str, Callable[[], object]]:
    """{library: one run of `part` of the case (see PARTS)}, after checking tinycore's values against torch's."""
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

    def ours_forward() -> np.ndarray:
        return held_x.conv2d(held_w, **options).realize().numpy()

    def theirs_forward() -> np.ndarray:
        with torch.no_grad():
            return torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), **options).numpy()

    def ours_one_gradient(of_input: bool) -> np.ndarray:
        source, weight = held_x.detach(), held_w.detach()
        wanted = source if of_input else weight
        wanted.requires_grad = True
        (source.conv2d(weight, **options) * held_r).sum().backward()
        assert wanted.grad is not None
        return wanted.grad.realize().numpy()

    def theirs_input() -> np.ndarray:
        return torch.nn.grad.conv2d_input(x.shape, torch.from_numpy(w), torch_r, **options).numpy()

    def theirs_weight() -> np.ndarray:
        return torch.nn.grad.conv2d_weight(torch.from_numpy(x), w.shape, torch_r, **options).numpy()

    pairs: dict[str, tuple[Callable[[], object], Callable[[], object]]] = {
        "both": (ours, theirs), "forward": (ours_forward, theirs_forward),
        "input": (lambda: ours_one_gradient(True), theirs_input),
        "weight": (lambda: ours_one_gradient(False), theirs_weight)}
    mine_call, reference_call = pairs[part]
    def values(call: Callable[[], object]) -> tuple[np.ndarray, ...]:
        result = call()
        return tuple(result) if isinstance(result, tuple) else (np.asarray(result),)

    for mine, reference in zip(values(mine_call), values(reference_call), strict=True):
        error = float(np.abs(mine - reference).max() / max(float(np.abs(reference).max()), 1e-30))
        if error > 1e-4:
            raise SystemExit(f"{name} ({part}): tinycore's values differ from torch's (relative error {error:.2e})")
    return {"tinycore": mine_call, "torch": reference_call}


if __name__ == "__main__":
    part_parser = argparse.ArgumentParser(add_help=False)
    part_parser.add_argument("--part", choices=PARTS, default="both")
    part_parser.add_argument("--threads", type=int, default=None)
    known, rest = part_parser.parse_known_args()
    if known.threads is not None:
        os.environ["NUM_CPU_THREADS"] = str(known.threads)  # read when tinycore is first imported, in _calls
        import torch
        torch.set_num_threads(known.threads)
    sys.argv[1:] = rest  # the rest is paired.main's command line
    paired.main(__doc__ or "", list(CASES), lambda name: _calls(name, known.part), rounds=10)
