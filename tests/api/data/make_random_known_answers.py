"""Write tests/api/data/random_known_answers.json: tinygrad 0.14.0's random streams, for test_api_random.

Run once by hand, never in CI (it needs tinygrad==0.14.0 and a C compiler for its CPU device):

    pip install tinygrad==0.14.0
    DEV=CPU python tests/api/data/make_random_known_answers.py

Each case is a sequence of calls after one `Tensor.manual_seed`, so the table also pins how the counter advances
from call to call and how a second device gets its own stream.
"""
from __future__ import annotations

import json
import pathlib
from typing import Any

import numpy as np
from tinygrad import Context, Tensor, TinyJit, dtypes

OUTPUT = pathlib.Path(__file__).with_name("random_known_answers.json")


def encode(array: Any) -> dict[str, Any]:
    """Exact values: floats as their bit patterns (hex of the raw bytes), ints as lists."""
    array = np.asarray(array)
    if array.dtype.kind == "f":
        return {"dtype": str(array.dtype), "shape": list(array.shape), "hex": array.tobytes().hex()}
    return {"dtype": str(array.dtype), "shape": list(array.shape), "values": array.tolist()}


# (name, seed, [(call, args, kwargs)]); a call is a Tensor classmethod, or "weights.<method>" on a fixed tensor
CASES: list[tuple[str, int, list[tuple[str, list[Any], dict[str, Any]]]]] = [
    ("rand_calls", 0, [("rand", [5], {}), ("rand", [2, 3], {}), ("rand", [1], {})]),
    ("rand_seed_42", 42, [("rand", [4, 4], {})]),
    ("rand_seed_large", 2 ** 40 + 3, [("rand", [7], {})]),
    ("rand_seed_negative", -5, [("rand", [3], {})]),
    ("rand_odd_and_empty", 7, [("rand", [0], {}), ("rand", [9], {}), ("rand", [1], {})]),
    ("rand_dtypes", 1, [("rand", [5], {"dtype": "float16"}), ("rand", [3], {"dtype": "float64"}),
                        ("rand", [4], {"dtype": "bfloat16"}), ("rand", [3], {"dtype": "float32"})]),
    ("rand_second_device", 3, [("rand", [3], {}), ("rand", [3], {"device": "CPU:1"}), ("rand", [3], {}),
                               ("rand", [2], {"device": "CPU:1"})]),
    ("randn", 0, [("randn", [6], {}), ("randn", [2, 3], {})]),
    ("randn_half", 9, [("randn", [5], {"dtype": "float16"})]),
    ("randint", 5, [("randint", [10], {"low": 0, "high": 10}), ("randint", [2, 4], {"low": -7, "high": 100})]),
    ("randint_int64", 11, [("randint", [6], {"low": 3, "high": 1000, "dtype": "int64"})]),
    ("uniform", 2, [("uniform", [5], {"low": -2.0, "high": 3.0}), ("uniform", [3], {"low": 1, "high": 4,
                                                                                      "dtype": "float16"})]),
    ("normal", 4, [("normal", [4], {"mean": 10.0, "std": 2.0})]),
    ("randperm", 42, [("randperm", [10], {}), ("randperm", [50], {})]),
    ("initialisers", 8, [("kaiming_uniform", [4, 3], {}), ("glorot_uniform", [3, 5], {}),
                         ("scaled_uniform", [2, 3], {})]),
    ("multinomial_replacement", 42, [("weights.multinomial", [20], {"replacement": True})]),
    ("multinomial_2d", 6, [("weights2d.multinomial", [5], {"replacement": True}), ("weights.multinomial", [1], {})]),
    ("multinomial_no_replacement", 42, [("weights.multinomial", [3], {"replacement": False})]),
    ("dropout", 13, [("ones.dropout", [], {"p": 0.5}), ("ones.dropout", [], {"p": 0.25})]),
    ("random_bits", 0, [("random_bits_call", [], {})]),
    ("jit_replays", 21, [("rand", [2], {}), ("jit_calls", [], {}), ("rand", [3], {})]),
]

FIXED = {"weights": [1.0, 2.0, 3.0, 4.0], "weights2d": [[1.0, 0.0, 3.0], [0.5, 0.5, 1.0]], "ones": [[1.0] * 8] * 4}


def run_call(call: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """One call's realized numpy result."""
    kwargs = {key: getattr(dtypes, value) if key == "dtype" else value for key, value in kwargs.items()}
    if call == "jit_calls":  # random draws inside a jitted function: each replay draws new numbers
        @TinyJit
        def step(x: Tensor) -> list[Tensor]:
            with Context(TRAINING=1):
                return [x.dropout(0.5).realize(), Tensor.rand(4).realize()]
        results = [[part.numpy().copy() for part in step(Tensor.ones(6).contiguous())] for _ in range(5)]
        return np.concatenate([np.concatenate(parts) for parts in results])
    if call == "random_bits_call":
        key = Tensor([0x12345678, 0x9ABCDEF0], dtype=dtypes.uint32)
        counter = Tensor([0xFFFFFFFE, 3], dtype=dtypes.uint32)
        return Tensor.random_bits(key, counter, 7).numpy()
    if "." in call:
        tensor_name, method = call.split(".")
        with Context(TRAINING=1):
            return getattr(Tensor(FIXED[tensor_name]), method)(*args, **kwargs).numpy()
    return getattr(Tensor, call)(*args, **kwargs).numpy()


def main() -> None:
    """Run every case and write the table."""
    from importlib.metadata import version
    table: dict[str, Any] = {"generator": f"tinygrad {version('tinygrad')}", "fixed_tensors": FIXED, "cases": []}
    for name, seed, calls in CASES:
        Tensor.manual_seed(seed)
        results = [encode(run_call(call, args, kwargs)) for call, args, kwargs in calls]
        table["cases"].append({"name": name, "seed": seed,
                               "calls": [{"call": call, "args": args, "kwargs": kwargs, "result": result}
                                         for (call, args, kwargs), result in zip(calls, results, strict=True)]})
    OUTPUT.write_text(json.dumps(table, indent=1) + "\n")
    print(f"wrote {OUTPUT} ({len(table['cases'])} cases)")


if __name__ == "__main__":
    main()
