"""Snapshots of generated kernel source: every kernel of a bounded set of programs, rendered by every renderer
that can render here, one file per kernel, and a compare mode that lists the kernels whose source changed.

    python bench/kernel_sources.py save DIRECTORY [--only c,cl]
    python bench/kernel_sources.py compare BASELINE [--only c,cl] [--keep DIRECTORY] [--rerender] [--time]

A refactor of codegen or of a renderer must leave the kernels as they were (or say why each one changed): save a
baseline before it, compare after each step. Nothing runs on a device: each program's lazy graph is scheduled for
the device that DEV opens and each kernel AST is lowered by that device's renderer (MOCK interfaces for NV and
AMD, so no GPU is needed). Each renderer is rendered in its own process (DEV is read once per process); files are
DIRECTORY/RENDERER/PROGRAM.NN.KERNEL (NN: the kernel's position among the program's kernels). A program that a
renderer cannot lower (a dtype it lacks) is saved as the error's first line, so errors are compared too.
Codegen is not fully deterministic between processes (set iterations over UOps hashed by identity decide the order
of some independent statements, and of some of a training step's kernels), so a full compare of an unchanged tree
can list a few kernels. `compare --rerender` renders the linear programs the baseline saved (DIRECTORY/_uops) with
the current renderers: byte-identical output is then exactly what a renderer change must keep.
`--time` also prints the time the renderer takes to turn the linear programs into source (the best of five
renders of each kernel, summed): the hot path a renderer refactor must not slow down.
"""
from __future__ import annotations

import argparse
import dataclasses
import difflib
import io
import os
import pickle
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

RENDERERS: dict[str, str] = {
    "c": "CPU", "llvm": "CPU:LLVM", "cl": "CL", "wgsl": "WEBGPU", "cuda": "MOCK+NV", "ptx": "MOCK+NV:PTX",
    "amd": "MOCK+AMD"}
"""Snapshot label -> the DEV that selects the renderer."""


def _programs() -> dict[str, Callable[[], list[Any]]]:
    """Program name -> a function building its lazy output tensors on the default device (nothing realized)."""
    from tinycore import Tensor, dtypes, nn

    def floats(*shape: int) -> Tensor:
        return Tensor.empty(*shape, dtype=dtypes.float32)

    def mlp_step(optimizer: str) -> list[Tensor]:
        from tinycore import Context
        weights = [Tensor.empty(64, 48, requires_grad=True), Tensor.empty(48, 10, requires_grad=True)]
        chosen = nn.optim.SGD(weights, lr=0.01) if optimizer == "sgd" else nn.optim.Adam(weights, lr=0.001)
        with Context(TRAINING=1):
            chosen.zero_grad()
            loss = (floats(16, 64) @ weights[0]).relu().matmul(weights[1]).sparse_categorical_crossentropy(
                Tensor.empty(16, dtype=dtypes.int32))
            loss.backward()
            return [loss, *chosen.schedule_step()]

    programs: dict[str, Callable[[], list[Any]]] = {
        "matmul_small": lambda: [floats(64, 96) @ floats(96, 80)],
        "matmul_256": lambda: [floats(256, 256) @ floats(256, 256)],
        "matmul_1024": lambda: [floats(1024, 1024) @ floats(1024, 1024)],
        "matvec": lambda: [floats(1, 512) @ floats(512, 384)],
        "conv2d": lambda: [floats(2, 8, 16, 16).conv2d(floats(16, 8, 3, 3), padding=1)],
        "conv2d_bench": lambda: [floats(32, 16, 64, 64).conv2d(floats(32, 16, 3, 3))],
        "softmax": lambda: [floats(32, 100).softmax(-1)],
        "softmax_bench": lambda: [floats(4096, 1024).softmax(-1)],
        "reduce_sum_rows": lambda: [floats(3, 4096).sum(axis=1)],
        "reduce_max_cols": lambda: [floats(1000, 7).max(axis=0)],
        "reduce_mean_all": lambda: [floats(65536).mean()],
        "argmax": lambda: [floats(16, 300).argmax(axis=1)],
        "transcendental": lambda: [(lambda x: x.exp() + x.log() * x.sin() + x.sqrt().reciprocal() + x.tanh()
                                    + x.sigmoid() + x.gelu() + x.pow(1.7) + x.exp2() + x.cos())(floats(4, 300))],
        "pad_gated": lambda: [floats(13, 17).pad(((1, 2), (3, 0))) + 1.0,
                              floats(8, 8).pad(((2, 2), (2, 2)), value=-1.0).flip(0)[1:9, 3:10]],
        "half": lambda: [(floats(5, 64).cast(dtypes.float16) * 3 - 1).cast(dtypes.float32),
                         (floats(16, 32).cast(dtypes.float16) @ floats(32, 16).cast(dtypes.float16)).float()],
        "bfloat16": lambda: [(floats(6, 40).cast(dtypes.bfloat16) + 1).cast(dtypes.float32)],
        "integer": lambda: [(Tensor.arange(64) * 7 // 3) % 5, (Tensor.arange(64) << 2) ^ (Tensor.arange(64) >> 1),
                            Tensor.arange(40).cast(dtypes.float32).cast(dtypes.uint8)],
        "gather": lambda: [floats(50, 8)[Tensor.empty(12, dtype=dtypes.int32)],
                           floats(6, 9).gather(1, Tensor.empty(6, 4, dtype=dtypes.int32))],
        "one_hot_embedding": lambda: [nn.Embedding(100, 16)(Tensor.empty(2, 7, dtype=dtypes.int32))],
        "scatter_add": lambda: [Tensor.zeros(10).contiguous().scatter_reduce(
            0, Tensor.empty(30, dtype=dtypes.int32), floats(30), reduce="sum")],
        "where_compare": lambda: [(floats(12) < 0.5).where(floats(12), -1.0)],
        "mlp_sgd_step": lambda: mlp_step("sgd"),
        "mlp_adam_step": lambda: mlp_step("adam"),
    }
    try:  # the conformance programs, where this core has them
        from tinycore.testing.test_renderers import GRAPHS
        for name, build in GRAPHS:
            programs[f"conformance_{name}"] = lambda build=build: [build(_default_device())]
    except ImportError:
        pass
    return programs


def _default_device() -> str:
    from tinycore import Device
    return str(Device.DEFAULT)


MOCK_PROGRAM_MARKER = "// tinycore-program "
"""The line a MOCK GPU's source carries its pickled linear program on (tinycore.hcq.mock.embed_program): the pickle
holds hash values that differ between processes, so the snapshot keeps only the marker."""


def _stable(source: str) -> str:
    """`source` without what differs between two renders of the same kernel (a MOCK GPU's embedded program)."""
    return "".join(MOCK_PROGRAM_MARKER + "(linear program)\n" if line.startswith(MOCK_PROGRAM_MARKER) else line
                   for line in source.splitlines(keepends=True))


def _worker(label: str, directory: Path, timing: bool, rerender: Path | None = None) -> None:
    """Render every program's kernels for the renderer DEV selects into directory/label (and their linear programs
    into directory/_uops/label); with `rerender`, render that baseline's saved linear programs instead."""
    from tinycore import Device
    from tinycore.codegen import linearize
    from tinycore.engine.memory import device_facts
    from tinycore.schedule.cache import create_schedule
    from tinycore.uop.ops import Ops
    renderer = Device[Device.DEFAULT].renderer
    target = directory / label
    target.mkdir(parents=True, exist_ok=True)
    totals = [0.0, 0.0]
    if rerender is not None:  # the baseline's linear programs again, through the current renderer only
        for pickled in sorted((rerender / "_uops" / label).iterdir()):
            uops = pickle.loads(pickled.read_bytes())
            source = _render_timed(renderer, uops, timing, totals)
            (target / pickled.name.removesuffix(".pkl")).write_text(_stable(source))
        _print_timing(label, timing, totals)
        return
    programs_dir = directory / "_uops" / label
    programs_dir.mkdir(parents=True, exist_ok=True)
    for program, build in _programs().items():
        try:
            outputs = build()
            items = create_schedule([tensor.uop for tensor in outputs], device_facts).items
            asts = [item.ast for item in items if item.ast.op is not Ops.COPY]
        except Exception as error:  # noqa: BLE001 - a program this device cannot schedule is recorded as such
            (target / f"{program}.error").write_text(f"{type(error).__name__}: {str(error).splitlines()[0]}\n")
            continue
        for position, ast in enumerate(asts):
            try:
                uops = linearize(ast, renderer)
                file_name = f"{program}.{position:02d}.{uops[-1].arg}"
                source = _render_timed(renderer, uops, timing, totals)
                (target / file_name).write_text(_stable(source))
                (programs_dir / f"{file_name}.pkl").write_bytes(_pickle_program(uops))
            except Exception as error:  # noqa: BLE001 - see above
                message = str(error).splitlines()[0] if str(error) else ""
                (target / f"{program}.{position:02d}.error").write_text(f"{type(error).__name__}: {message}\n")
    _print_timing(label, timing, totals)


class _ProgramPickler(pickle.Pickler):
    """Pickles DTypes by their fields: their stored hash covers their class's identity, which another process
    does not share, so they are built again (and hashed again) when loaded."""

    def reducer_override(self, obj: Any) -> Any:
        from tinycore.dtype import DType
        if isinstance(obj, DType):
            return type(obj), tuple(getattr(obj, field.name) for field in dataclasses.fields(obj))
        return NotImplemented


def _pickle_program(uops: list[Any]) -> bytes:
    """A linear program as bytes another process can load (see _ProgramPickler)."""
    buffer = io.BytesIO()
    _ProgramPickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(uops)
    return buffer.getvalue()


def _render_timed(renderer: Any, uops: list[Any], timing: bool, totals: list[float]) -> str:
    """The source of `uops`; with `timing`, the best of five renders is added to totals[0] and totals[1] counts."""
    name = str(uops[-1].arg)
    source: str = renderer.render_named(uops, name)
    if timing:
        best = float("inf")
        for _ in range(5):
            started = time.perf_counter()
            renderer.render_named(uops, name)
            best = min(best, time.perf_counter() - started)
        totals[0] += best
        totals[1] += 1
    return source


def _print_timing(label: str, timing: bool, totals: list[float]) -> None:
    if timing and totals[1]:
        print(f"{label}: {int(totals[1])} kernels, render {totals[0] * 1000:.1f} ms in all, "
              f"{totals[0] / totals[1] * 1e6:.0f} us per kernel")


def render_all(directory: Path, labels: list[str], timing: bool = False, rerender: Path | None = None) -> None:
    """Render the snapshot of each renderer in `labels` into `directory`, one process each (with `rerender`, the
    linear programs saved in that baseline)."""
    for label in labels:
        # set iteration orders the scheduler's ties fall back on, so a program's kernels come in the same order
        environment = dict(os.environ, DEV=RENDERERS[label], PYTHONHASHSEED="0")
        command = [sys.executable, __file__, "worker", str(directory), "--only", label] + (["--time"] if timing else [])
        command += ["--programs-from", str(rerender)] if rerender is not None else []
        result = subprocess.run(command, env=environment, capture_output=True, text=True, check=False)
        sys.stdout.write(result.stdout)
        if result.returncode != 0:
            tail = result.stderr.strip().splitlines()[-1:] or ["(no output)"]
            print(f"{label}: renderer unavailable here (DEV={RENDERERS[label]}): {tail[0]}")


def compare(baseline: Path, current: Path, labels: list[str], show_diff: int, rerendered: bool = False) -> int:
    """Print the kernels that changed, appeared or disappeared per renderer; the number of differences (programs
    that failed to lower are left out of a rerendered comparison: they saved no linear program)."""
    differences = 0
    for label in labels:
        old_dir, new_dir = baseline / label, current / label
        old = {path.name for path in old_dir.iterdir()
               if not (rerendered and path.name.endswith("error"))} if old_dir.is_dir() else set()
        new = {path.name for path in new_dir.iterdir()} if new_dir.is_dir() else set()
        changed = sorted(name for name in old & new
                         if (old_dir / name).read_bytes() != (new_dir / name).read_bytes())
        count = len(changed) + len(old ^ new)
        differences += count
        print(f"{label}: {len(old & new) - len(changed)} same, {len(changed)} changed, "
              f"{len(new - old)} new, {len(old - new)} gone")
        for name in changed:
            print(f"  changed {label}/{name}")
            if show_diff:
                diff = difflib.unified_diff((old_dir / name).read_text().splitlines(),
                                            (new_dir / name).read_text().splitlines(), lineterm="", n=0)
                for line in list(diff)[2:2 + show_diff]:
                    print(f"    {line}")
        for name in sorted(new - old):
            print(f"  new     {label}/{name}")
        for name in sorted(old - new):
            print(f"  gone    {label}/{name}")
    return differences


def main() -> None:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["save", "compare", "worker"])
    parser.add_argument("directory", type=Path, help="where to save (save) or the baseline (compare)")
    parser.add_argument("--only", default=",".join(RENDERERS), help="comma-separated renderers: " +
                        ", ".join(f"{label} (DEV={dev})" for label, dev in RENDERERS.items()))
    parser.add_argument("--keep", type=Path, help="compare: render into this directory instead of a temporary one")
    parser.add_argument("--diff", type=int, default=6, help="compare: diff lines shown per changed kernel")
    parser.add_argument("--rerender", action="store_true",
                        help="compare: render the baseline's saved linear programs (tests the renderers alone)")
    parser.add_argument("--programs-from", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--time", action="store_true", help="print each renderer's render time")
    arguments = parser.parse_args()
    labels = [label for label in arguments.only.split(",") if label]
    unknown = [label for label in labels if label not in RENDERERS]
    if unknown:
        raise SystemExit(f"unknown renderer {unknown}: choose from {', '.join(RENDERERS)}")
    if arguments.mode == "worker":
        _worker(labels[0], arguments.directory, arguments.time, arguments.programs_from)
    elif arguments.mode == "save":
        render_all(arguments.directory, labels, arguments.time)
        print(f"saved to {arguments.directory}")
    else:
        with tempfile.TemporaryDirectory() as scratch:
            current = arguments.keep or Path(scratch)
            render_all(current, labels, arguments.time, arguments.directory if arguments.rerender else None)
            differences = compare(arguments.directory, current, labels, arguments.diff, arguments.rerender)
        print("kernels unchanged" if differences == 0 else f"{differences} kernel differences")
        raise SystemExit(1 if differences else 0)


if __name__ == "__main__":
    main()
