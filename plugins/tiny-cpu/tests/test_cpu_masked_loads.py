"""Masked vector loads: a row of a padded copy whose lanes start or end in the padding is read with one masked load
(RendererContract.masked_load_dtypes) instead of a scalar loop, equal to numpy for every pad, with 8- and 16-lane
vectors, and the macro's portable fallback (no AVX) reads only the lanes its mask sets."""
from __future__ import annotations

import platform
import subprocess
from pathlib import Path

import numpy as np
import pytest
from cpu_vectors import VECTOR_BYTES, cpu_vector_bytes
from tiny_cpu.compiler import _find_compiler
from tiny_cpu.renderer import _masked_load_macro, _masked_load_name

from tinycore import Tensor, dtypes
from tinycore.codegen import lower_to_program
from tinycore.device import Device
from tinycore.engine.memory import device_facts
from tinycore.schedule import create_schedule


def _sources(tensor: Tensor) -> list[str]:
    renderer = Device["CPU"].renderer
    items = create_schedule([tensor.uop], device_facts).items
    return [lower_to_program(item.ast, renderer).src for item in items if not item.is_copy]


PADS = [((1, 1), (1, 1)), ((0, 0), (3, 0)), ((2, 5), (0, 7)), ((1, 1), (-1, 2)), ((0, 0), (17, 1))]


@pytest.mark.parametrize("vector_bytes", VECTOR_BYTES)
@pytest.mark.parametrize("pads", PADS)
def test_padded_rows_are_masked_loads_equal_to_numpy(vector_bytes: int, pads: tuple[tuple[int, int], ...]) -> None:
    data = np.random.default_rng(0).standard_normal((3, 4, 13, 30)).astype(np.float32)
    full = ((0, 0), (0, 0)) + pads
    positive = tuple((max(a, 0), max(b, 0)) for a, b in full)
    cropped = data[..., :, max(-pads[1][0], 0):data.shape[-1] - max(-pads[1][1], 0)]
    expected = np.pad(np.maximum(cropped, 0), positive)
    with cpu_vector_bytes(vector_bytes):
        result = Tensor(data).relu().pad(full).contiguous()
        sources = _sources(result)
        np.testing.assert_array_equal(result.numpy(), expected)
    assert any("TC_MASKED_LOAD_FLOAT" in source for source in sources), sources


@pytest.mark.parametrize("value", [2.5, float("-inf")])
def test_pad_value_fills_the_masked_lanes(value: float) -> None:
    data = np.random.default_rng(1).standard_normal((2, 3, 9, 21)).astype(np.float32)
    result = (Tensor(data) * 2).pad(((0, 0), (0, 0), (1, 2), (3, 1)), value=value).contiguous()
    expected = np.pad(data * 2, ((0, 0), (0, 0), (1, 2), (3, 1)), constant_values=value)
    np.testing.assert_array_equal(result.numpy(), expected)


@pytest.mark.parametrize("vector_bytes", VECTOR_BYTES)
@pytest.mark.parametrize("pad_value", [0.0, -1.5])
def test_a_per_channel_value_inside_the_border_is_one_load(vector_bytes: int, pad_value: float) -> None:
    # every lane of a padded row reads the same channel scale behind its own border gate: one scalar load gated by
    # any lane's gate, broadcast and selected by the lanes' mask, instead of a gated load (a branch) per lane
    from tinycore.uop.ops import Ops
    rng = np.random.default_rng(3)
    data, scale = rng.standard_normal((2, 8, 16, 16)).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    with cpu_vector_bytes(vector_bytes):
        padded = (Tensor(data) * Tensor(scale).reshape(1, -1, 1, 1)).pad(((0, 0), (0, 0), (1, 1), (1, 1)),
                                                                         value=pad_value)
        items = [item for item in create_schedule([padded.uop], device_facts).items if not item.is_copy]
        program = lower_to_program(items[-1].ast, Device["CPU"].renderer)
        assert program.uops is not None
        gated_scalar_loads = [uop for uop in program.uops
                              if uop.op is Ops.LOAD and uop.dtype.count == 1 and len(uop.src[0].src) > 2]
        assert len(gated_scalar_loads) == 1, gated_scalar_loads
        found = padded.numpy()
    expected = np.pad(data * scale.reshape(1, -1, 1, 1), ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=pad_value)
    np.testing.assert_array_equal(found, expected)


def test_padded_convolution_gradients_match_torch() -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((2, 5, 17, 19)).astype(np.float32), rng.standard_normal((6, 5, 3, 3)).astype(np.float32)
    tx, tw = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
    tx.conv2d(tw, padding=2).relu().square().sum().backward()
    px, pw = torch.from_numpy(x).double().requires_grad_(), torch.from_numpy(w).double().requires_grad_()
    torch.nn.functional.conv2d(px, pw, padding=2).relu().square().sum().backward()
    assert tx.grad is not None and tw.grad is not None and px.grad is not None and pw.grad is not None
    np.testing.assert_allclose(tx.grad.numpy(), px.grad.numpy(), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(tw.grad.numpy(), pw.grad.numpy(), rtol=1e-4, atol=1e-3)


def test_gathered_rows_keep_the_scalar_loop() -> None:
    # a stride-2 spread reads every other lane: its lanes would be gathered one by one behind their own gates, which
    # ran slower than the scalar loop, so no shifted vectors there
    data = np.random.default_rng(3).standard_normal((2, 3, 9, 9)).astype(np.float32)
    spread = Tensor(data).reshape(2, 3, 9, 1, 9, 1).pad(((0, 0), (0, 0), (0, 0), (0, 1), (0, 0), (0, 1)))
    result = spread.reshape(2, 3, 18, 18).pad(((0, 0), (0, 0), (1, 0), (1, 0))).contiguous()
    expected = np.zeros((2, 3, 19, 19), np.float32)
    expected[:, :, 1::2, 1::2] = data
    np.testing.assert_array_equal(result.numpy(), expected)
    assert not any("TC_MASKED_LOAD" in source for source in _sources(result))


X86 = platform.machine().lower() in ("x86_64", "amd64")


@pytest.mark.parametrize("march", ["x86-64", "native"] if X86 else [None])
@pytest.mark.parametrize("lanes", [2, 4, 8, 16])
def test_masked_loads_read_only_the_masked_lanes(tmp_path: Path, lanes: int, march: str | None) -> None:
    # the lanes outside the mask point into a guard page, so reading one would crash: only the set lanes may be read,
    # by the x86 masked load (-march=native there) and by the portable lane loop (plain x86-64, no AVX; other
    # machines always take the loop)
    dtype = dtypes.float32.vec(lanes)
    compiler = _find_compiler()[0]  # the CPU device's own compiler, with its clear error where there is none
    program = f"""
#include <stdio.h>
#include <sys/mman.h>
typedef float float{lanes} __attribute__((vector_size({4 * lanes})));
typedef int int{lanes} __attribute__((vector_size({4 * lanes})));
{_masked_load_macro(dtype)}
int main(void) {{
  char *page = mmap(0, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  mprotect(page + 4096, 4096, PROT_NONE);
  float *row = (float *)(page + 4096) - 3;
  row[0] = 1.5f; row[1] = -2.0f; row[2] = 4.0f;
  int{lanes} mask = {{{", ".join(["-1", "0", "-1"][:lanes])}}};
  float{lanes} value = {_masked_load_name(dtype)}(row, mask);
  for (int lane = 0; lane < {lanes}; lane++) printf("%g ", (double)value[lane]);
  return 0;
}}
"""
    source = tmp_path / "masked.c"
    source.write_text(program)
    binary = tmp_path / "masked"
    flags = [f"-march={march}"] if march else []
    subprocess.run([compiler, "-O2", *flags, str(source), "-o", str(binary)], check=True)
    output = subprocess.run([str(binary)], capture_output=True, text=True, check=True).stdout.split()
    assert [float(value) for value in output] == ([1.5, 0.0, 4.0] + [0.0] * (lanes - 3))[:lanes]


@pytest.mark.parametrize("lanes", [2, 4, 8])
def test_masked_rows_of_any_width_run(lanes: int) -> None:
    # BEAM tries every upcast amount: a two-lane shifted row (no x86 masked load of that width) once raised a
    # KeyError in the renderer; every width must render and read only its lanes
    from tinycore.codegen import optimize_kernel
    from tinycore.codegen.opt import Opt, OptOps
    from tinycore.engine.memory import buffer_of
    from tinycore.engine.realize import Runner
    data = np.random.default_rng(4).standard_normal((3, 4, 13, 30)).astype(np.float32)
    padded = Tensor(data).realize().relu().pad(((0, 0), (0, 0), (1, 1), (3, 2))).contiguous()
    items = [item for item in create_schedule([padded.uop], device_facts).items if not item.is_copy]
    assert len(items) == 1
    item = items[0]
    row_axis = len(optimize_kernel(item.ast, Device["CPU"].renderer, []).axes) - 1
    runner = Runner(item.ast, "CPU", opts=[Opt(OptOps.SHIFTED_UPCAST, row_axis, lanes)])
    assert f"TC_MASKED_LOAD_FLOAT{lanes}(" in runner.spec.src
    buffers = [buffer_of(node).ensure_allocated() for node in item.buffers]
    runner([buffer._buf for buffer in buffers], {})
    Device["CPU"].synchronize()
    found = np.frombuffer(buffers[0].tobytes(), np.float32).reshape(3, 4, 15, 35)
    np.testing.assert_array_equal(found, np.pad(np.maximum(data, 0), ((0, 0), (0, 0), (1, 1), (3, 2))))
