"""`tiny onnx MODEL.onnx`: describe an ONNX model, run it on DEV's device, time it, and compare with onnxruntime.

Prints the inputs, outputs, opsets and how often each op occurs; then runs the model on random inputs (or on
`--input name=file.npy`), printing the time per run and each output's shape. `--check` runs onnxruntime on the same
inputs and prints the largest difference of each output (exit status 1 beyond --rtol / --atol).
"""
from __future__ import annotations

import argparse
import collections
import time
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from tinycore.nn.onnx.runner import OnnxRunner


def add_onnx_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the `onnx` subcommand on the `tiny` command's subparsers."""
    parser = commands.add_parser("onnx", help="describe, run, time and check an ONNX model on DEV's device")
    parser.add_argument("model", help="path of the .onnx file (external data files next to it)")
    parser.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy",
                        help="an input from a .npy file (repeatable); the others are random")
    parser.add_argument("--dim", action="append", default=[], metavar="NAME=SIZE",
                        help="the size of a symbolic dimension for random inputs (default 1)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs after the first (default 3)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    parser.add_argument("--check", action="store_true", help="compare the outputs with onnxruntime's")
    parser.add_argument("--rtol", type=float, default=1e-3, help="relative tolerance of --check")
    parser.add_argument("--atol", type=float, default=1e-4, help="absolute tolerance of --check")


def _pairs(items: list[str], what: str) -> dict[str, str]:
    result = {}
    for item in items:
        name, separator, value = item.partition("=")
        if not separator or not name:
            raise SystemExit(f"tiny onnx: {what} {item!r} must look like NAME=VALUE")
        result[name] = value
    return result


def random_inputs(runner: OnnxRunner, dims: dict[str, int], seed: int) -> dict[str, np.ndarray]:
    """A random array for each graph input: normal floats, small non-negative integers, random booleans."""
    from tinycore.nn.onnx.common import dtype_label
    generator = np.random.default_rng(seed)
    arrays: dict[str, np.ndarray] = {}
    for info in runner.graph.inputs:
        value_type = info.type
        if value_type is None or value_type.kind != "tensor" or value_type.dtype is None:
            raise SystemExit(f"tiny onnx: input {info.name!r} is not a typed tensor; give it with --input")
        shape = tuple(dim if isinstance(dim, int) and dim > 0 else dims.get(str(dim), 1)
                      for dim in (value_type.shape or ()))
        name = dtype_label(value_type.dtype)
        if name == "bool":
            arrays[info.name] = generator.random(shape) < 0.5
        elif name.startswith(("int", "uint")):
            arrays[info.name] = generator.integers(0, 10, size=shape).astype(name)
        else:
            arrays[info.name] = generator.standard_normal(shape).astype(name)
    return arrays


def _onnxruntime_outputs(path: str, inputs: dict[str, np.ndarray]) -> list[np.ndarray] | None:
    try:
        import onnxruntime
    except ImportError:
        print("--check: onnxruntime is not installed (pip install onnxruntime); skipped")
        return None
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    return session.run(None, inputs)


def run_onnx(arguments: argparse.Namespace) -> int:
    """Run `tiny onnx` with parsed arguments; the exit status."""
    from tinycore.nn.onnx import OnnxRunner
    from tinycore.tensor import Tensor
    start = time.perf_counter()
    runner = OnnxRunner(arguments.model)
    build_seconds = time.perf_counter() - start
    graph = runner.graph
    print(f"model     {arguments.model} ({runner.model.producer or 'unknown producer'})")
    print("opsets    " + ", ".join(f"{domain or 'ai.onnx'} {version}" for domain, version in runner.opsets.items()))
    for info in graph.inputs:
        print(f"input     {info.name}: {info.type.describe() if info.type else '?'}")
    for info in graph.outputs:
        print(f"output    {info.name}: {info.type.describe() if info.type else '?'}")
    counts = collections.Counter(node.op if not node.domain else f"{node.domain}::{node.op}" for node in graph.nodes)
    print(f"nodes     {len(graph.nodes)}: " + ", ".join(f"{op} {count}" for op, count in counts.most_common()))
    print(f"weights   {len(graph.initializers)} initializers; runner built in {build_seconds * 1e3:.1f} ms on "
          f"{runner.device}")
    dims = {name: int(value) for name, value in _pairs(arguments.dim, "--dim").items()}
    inputs = random_inputs(runner, dims, arguments.seed)
    for name, path in _pairs(arguments.input, "--input").items():
        if name not in runner.graph_inputs:
            raise SystemExit(f"tiny onnx: --input {name!r} is not an input of the model ({list(runner.graph_inputs)})")
        inputs[name] = np.load(path)
    timings = []
    outputs: dict[str, Any] = {}
    for _ in range(max(arguments.runs, 0) + 1):
        start = time.perf_counter()
        outputs = runner(inputs)
        for value in outputs.values():
            for tensor in value if isinstance(value, list) else [value]:
                if isinstance(tensor, Tensor):
                    tensor.realize()
        timings.append(time.perf_counter() - start)
    steady = timings[1:] or timings
    print(f"time      first run {timings[0] * 1e3:.2f} ms, then {min(steady) * 1e3:.2f} ms per run "
          f"(best of {len(steady)})")
    arrays = {}
    for name, value in outputs.items():
        array = value.numpy() if isinstance(value, Tensor) else value
        arrays[name] = array
        print(f"result    {name}: shape {tuple(getattr(array, 'shape', ()))} {getattr(array, 'dtype', type(array))}")
    if not arguments.check:
        return 0
    expected = _onnxruntime_outputs(arguments.model, inputs)
    if expected is None:
        return 0
    status = 0
    for (name, actual), reference in zip(arrays.items(), expected, strict=False):
        actual_array, reference_array = np.asarray(actual), np.asarray(reference)
        difference = float(np.max(np.abs(actual_array.astype(np.float64) - reference_array))) \
            if actual_array.size else 0.0
        close = actual_array.shape == reference_array.shape and np.allclose(actual_array, reference_array,
                                                                            rtol=arguments.rtol, atol=arguments.atol)
        status |= 0 if close else 1
        print(f"check     {name}: {'ok' if close else 'MISMATCH'} (max |difference| {difference:.3g} vs onnxruntime)")
    return status
