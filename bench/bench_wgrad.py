"""Weight gradients beside the forward product: GFLOPS of x @ W, x.T @ dout and dout @ W.T on a transformer block's
and an MLP's shapes, on the CPU with its default threads, tinycore beside torch.

    python bench/bench_wgrad.py [--rounds N] [--shapes block512 block768 ffn mlp1 mlp2]

For each shape (tokens or batch, inputs, outputs) it times, interleaved in one process, round by round:
- `forward`: x @ W;
- `weight`, `input`: the weight gradient x.T @ dout and the input gradient dout @ W.T as direct products of the
  transposed views;
- `backward`: `loss.backward()` of `((x @ W) * dout).sum()` with W (and x) requiring gradients, its FLOPs those of
  the two gradient products (the forward realized first and not timed).
Each call is timed by wall clock and by process CPU time (all threads; a machine shared with other jobs disturbs it
less); the best of the rounds counts. `DEBUG=2` prints per kernel times: in the backward the weight gradient is the
kernel named `r_<inputs>_<outputs>_<tokens>` (the reduce over the tokens last), the input gradient
`r_<tokens>_<inputs>_<outputs>`. Every result is first checked against torch in float64.
"""
from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

import numpy as np

os.environ.setdefault("DEV", "CPU")

SHAPES = {"block512": (512, 512, 512), "block768": (512, 768, 768), "ffn": (512, 768, 2048),
          "ffn_down": (512, 2048, 768), "mlp1": (128, 784, 512), "mlp2": (128, 512, 512)}


def _time(call: Callable[[], object]) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    call()
    return time.perf_counter() - wall, time.process_time() - cpu


def calls(tokens: int, inputs: int, outputs: int) -> dict[str, tuple[int, dict[str, Callable[[], object]]]]:
    """product -> (FLOPs, {library: call}) for one shape, after checking tinycore's results against torch."""
    import torch

    from tinycore import Tensor
    rng = np.random.default_rng(0)
    x, w, dout = (rng.standard_normal(shape, dtype=np.float32)
                  for shape in ((tokens, inputs), (inputs, outputs), (tokens, outputs)))
    tx, tw, tdout = (Tensor(array).realize() for array in (x, w, dout))
    px, pw, pdout = (torch.from_numpy(array) for array in (x, w, dout))
    reference = {"forward": px.double() @ pw.double(), "weight": px.double().T @ pdout.double(),
                 "input": pdout.double() @ pw.double().T}
    found = {"forward": (tx @ tw).numpy(), "weight": (tx.T @ tdout).numpy(), "input": (tdout @ tw.T).numpy()}

    def tinycore_backward() -> tuple[Tensor, Tensor]:
        gx, gw = Tensor(x, requires_grad=True).realize(), Tensor(w, requires_grad=True).realize()
        ((gx @ gw) * tdout).sum().backward()
        assert gx.grad is not None and gw.grad is not None
        return gx.grad.realize(), gw.grad.realize()

    grad_x, grad_w = tinycore_backward()
    found["backward"] = np.concatenate([grad_w.numpy().ravel(), grad_x.numpy().ravel()])
    reference["backward"] = torch.cat([reference["weight"].ravel(), reference["input"].ravel()])
    for name, value in found.items():
        expected = reference[name].numpy()
        error = float(np.abs(value.reshape(expected.shape) - expected).max() / np.abs(expected).max())
        if error > 1e-4:
            raise AssertionError(f"{name} {tokens}x{inputs}x{outputs}: relative error {error:.2e}")

    gx, gw = Tensor(x, requires_grad=True).realize(), Tensor(w, requires_grad=True).realize()
    forward = (gx @ gw) * tdout
    px_grad, pw_grad = px.clone().requires_grad_(), pw.clone().requires_grad_()
    torch_forward = (px_grad @ pw_grad) * pdout

    def tinycore_step() -> None:
        gx.grad = gw.grad = None
        loss = forward.sum()
        loss.backward()
        assert gx.grad is not None and gw.grad is not None
        Tensor.realize(gx.grad, gw.grad)

    def torch_step() -> None:
        px_grad.grad = pw_grad.grad = None
        torch_forward.sum().backward(retain_graph=True)

    flops = 2 * tokens * inputs * outputs
    return {"forward": (flops, {"tinycore": lambda: (tx @ tw).realize(), "torch": lambda: px @ pw}),
            "weight": (flops, {"tinycore": lambda: (tx.T @ tdout).realize(), "torch": lambda: px.T @ pdout}),
            "input": (flops, {"tinycore": lambda: (tdout @ tw.T).realize(), "torch": lambda: pdout @ pw.T}),
            "backward": (2 * flops, {"tinycore": tinycore_step, "torch": torch_step})}


def main() -> None:
    """Print a table of best wall and CPU-time GFLOPS per shape, product and library."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    arguments = parser.parse_args()
    import torch
    print(f"torch threads {torch.get_num_threads()}, load average {os.getloadavg()[0]:.1f}")
    print("| shape (tokens x in x out) | product | tinycore GFLOPS wall | CPU | torch wall | CPU | "
          "tinycore / forward (CPU) |")
    print("|---|---|---|---|---|---|---|")
    for shape_name in arguments.shapes:
        shape = SHAPES[shape_name]
        products = calls(*shape)
        best: dict[tuple[str, str], list[float]] = {}
        for call_round in range(arguments.rounds + 1):
            for product, (_, libraries) in products.items():
                order = list(libraries.items())
                for library, call in order if call_round % 2 else order[::-1]:
                    wall, cpu = _time(call)
                    if call_round == 0:
                        continue  # compiles and warms the caches
                    previous = best.setdefault((product, library), [float("inf"), float("inf")])
                    best[(product, library)] = [min(previous[0], wall), min(previous[1], cpu)]
        forward_cpu = products["forward"][0] / best[("forward", "tinycore")][1]
        for product, (flops, _) in products.items():
            ours, theirs = best[(product, "tinycore")], best[(product, "torch")]
            print(f"| {shape_name} {'x'.join(map(str, shape))} | {product} | {flops / ours[0] / 1e9:.0f} | "
                  f"{flops / ours[1] / 1e9:.0f} | {flops / theirs[0] / 1e9:.0f} | {flops / theirs[1] / 1e9:.0f} | "
                  f"{flops / ours[1] / forward_cpu:.2f} |")
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
