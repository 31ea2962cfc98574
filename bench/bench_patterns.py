"""Training patterns on the CPU, eager forward + backward: tinycore beside torch, interleaved in one process, as ratios.

    python bench/bench_patterns.py [--rounds N] [--cases NAME ...]

Each case builds its graph from the same arrays in both libraries, backpropagates a loss and reads every gradient
back; the gradients are first checked against torch's. Then for `--rounds` rounds each library runs each case once
after `settle()` (bench/settle.py), the order of the libraries turning from round to round; printed are the median
milliseconds and the paired median of torch's time over tinycore's (above 1: tinycore is faster). The cases are the
shapes whose kernels this project's heuristics once got badly wrong (bench/README.md, "Weight gradients in parts"
and the sections after it): a mean loss through an MLP, a transposed convolution, an embedding tied to its
classifier, a transformer block, a residual convolution block, attention.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
import paired

os.environ.setdefault("DEV", "CPU")

RNG = np.random.default_rng(0)


def _array(*shape: int) -> np.ndarray:
    return (RNG.standard_normal(shape) * 0.1).astype(np.float32)


def _mlp_mean(lib: Any, arrays: dict[str, Any]) -> Any:
    x, w = arrays["x"], arrays["w"]
    return ((x @ w).relu() @ w).mean(), [x]


def _conv_transpose(lib: Any, arrays: dict[str, Any]) -> Any:
    x, w = arrays["x"], arrays["w"]
    transposed = x.conv_transpose2d(w, stride=2, padding=1) if lib == "tinycore" else \
        __import__("torch").nn.functional.conv_transpose2d(x, w, stride=2, padding=1)
    return transposed.square().mean(), [x, w]


def _embedding_ce(lib: Any, arrays: dict[str, Any]) -> Any:
    table, ids, labels = arrays["table"], arrays["ids"], arrays["labels"]
    logits = table[ids].reshape(-1, table.shape[1]) @ table.T
    if lib == "tinycore":
        return logits.sparse_categorical_crossentropy(labels), [table]
    return __import__("torch").nn.functional.cross_entropy(logits, labels.long()), [table]


def _attention(lib: Any, arrays: dict[str, Any]) -> Any:
    q, k, v = arrays["q"], arrays["k"], arrays["v"]
    return ((q @ k.transpose(-1, -2) / 8).softmax(-1) @ v).square().sum(), [q, k, v]


def _layernorm(lib: Any, x: Any) -> Any:
    if lib == "tinycore":
        return x.layernorm()
    return __import__("torch").nn.functional.layer_norm(x, (x.shape[-1],))


def _gpt_block(lib: Any, arrays: dict[str, Any]) -> Any:
    batch, positions, width, heads = 8, 128, 256, 4
    x, wq, wo, w1, w2 = (arrays[name] for name in ("x", "wq", "wo", "w1", "w2"))
    q, k, v = (_layernorm(lib, x) @ wq).reshape(batch, positions, 3, heads, width // heads).permute(2, 0, 3, 1, 4)
    if lib == "tinycore":
        attended = q.scaled_dot_product_attention(k, v, is_causal=True)
        gelu = (_layernorm(lib, x) @ w1).gelu()
    else:
        import torch
        attended = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        gelu = torch.nn.functional.gelu(_layernorm(lib, x) @ w1, approximate="tanh")
    residual = x + attended.transpose(1, 2).reshape(batch, positions, width) @ wo
    out = residual + gelu @ w2
    return out.square().mean(), [x, wq, wo, w1, w2]


def _res_block(lib: Any, arrays: dict[str, Any]) -> Any:
    x, w1, w2, g1, g2 = (arrays[name] for name in ("x", "w1", "w2", "g1", "g2"))

    def norm(h: Any, g: Any) -> Any:
        mean = h.mean((0, 2, 3), keepdim=True)
        variance = ((h - mean) ** 2).mean((0, 2, 3), keepdim=True)
        return (h - mean) * (variance + 1e-5).rsqrt() * g.reshape(1, -1, 1, 1)

    if lib == "tinycore":
        first = x.conv2d(w1, padding=1)
    else:
        import torch
        first = torch.nn.functional.conv2d(x, w1, padding=1)
    hidden = norm(first, g1).relu()
    second = hidden.conv2d(w2, padding=1) if lib == "tinycore" else \
        __import__("torch").nn.functional.conv2d(hidden, w2, padding=1)
    return (norm(second, g2) + x).relu().mean(), [x, w1, w2, g1, g2]


# name -> (builder, {input name: (shape, integer bound or None)})
CASES: dict[str, tuple[Callable[[Any, dict[str, Any]], Any], dict[str, tuple[tuple[int, ...], int | None]]]] = {
    "mlp-mean-loss": (_mlp_mean, {"x": ((512, 512), None), "w": ((512, 512), None)}),
    "conv-transpose": (_conv_transpose, {"x": ((16, 32, 16, 16), None), "w": ((32, 16, 4, 4), None)}),
    "embedding-tied": (_embedding_ce, {"table": ((5000, 256), None), "ids": ((32, 64), 5000),
                                       "labels": ((2048,), 5000)}),
    "attention": (_attention, {"q": ((8, 128, 64), None), "k": ((8, 128, 64), None), "v": ((8, 128, 64), None)}),
    "gpt-block": (_gpt_block, {"x": ((8, 128, 256), None), "wq": ((256, 768), None), "wo": ((256, 256), None),
                               "w1": ((256, 1024), None), "w2": ((1024, 256), None)}),
    "res-block": (_res_block, {"x": ((16, 64, 32, 32), None), "w1": ((64, 64, 3, 3), None),
                               "w2": ((64, 64, 3, 3), None), "g1": ((64,), None), "g2": ((64,), None)}),
}


def _calls(name: str) -> dict[str, Callable[[], list[np.ndarray]]]:
    """{library: one forward + backward of the case returning its gradients}, tinycore's checked against torch's."""
    import torch

    from tinycore import Tensor
    build, inputs = CASES[name]
    arrays = {key: (RNG.integers(0, bound, shape).astype(np.int32) if bound is not None else _array(*shape))
              for key, (shape, bound) in inputs.items()}

    def ours() -> list[np.ndarray]:
        held = {key: Tensor(array) for key, array in arrays.items()}
        for key, (_, bound) in inputs.items():
            if bound is None:
                held[key].requires_grad = True
        loss, leaves = build("tinycore", held)
        loss.backward()
        Tensor.realize(*[leaf.grad for leaf in leaves])
        return [leaf.grad.numpy() for leaf in leaves]

    def theirs() -> list[np.ndarray]:
        held = {key: torch.tensor(array, requires_grad=True) if inputs[key][1] is None else
                torch.from_numpy(array).long() for key, array in arrays.items()}
        loss, leaves = build("torch", held)
        loss.backward()
        return [leaf.grad.numpy() for leaf in leaves]

    for mine, reference in zip(ours(), theirs(), strict=True):
        # in norm: a relu whose input rounds to the other side of zero in one library (float32 either way) changes a
        # few elements wholesale, where a wrong kernel is off everywhere
        error = float(np.linalg.norm(mine - reference) / max(float(np.linalg.norm(reference)), 1e-30))
        if error > 1e-2:
            raise SystemExit(f"{name}: tinycore's gradients differ from torch's (relative error {error:.2e})")
    return {"tinycore": ours, "torch": theirs}


if __name__ == "__main__":
    paired.main(__doc__ or "", list(CASES), _calls, rounds=6)
