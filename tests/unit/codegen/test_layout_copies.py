"""Copies between layouts (NCHW to NHWC and back, fused with elementwise math): the output's vector lanes gather one
element from each of several cache lines, so the heuristic also upcasts the output axis along which those lines
continue, a line of elements, and every gathered line is read once per tile (tinycore.codegen.optimize,
Heuristic._transpose_tile). Results match numpy."""
from __future__ import annotations

import numpy as np
import pytest
from cpu_vectors import VECTOR_BYTES, cpu_vector_bytes

from tinycore import Tensor
from tinycore.codegen.opt import Kernel
from tinycore.codegen.optimize import hand_coded_optimizations
from tinycore.device.registry import Device
from tinycore.engine.memory import device_facts
from tinycore.schedule import create_schedule


def _notes(tensor: Tensor) -> list[str]:
    """The heuristic's choices for the last kernel of `tensor`'s schedule."""
    items = [item for item in create_schedule([tensor.uop], device_facts).items if not item.is_copy]
    return hand_coded_optimizations(Kernel(items[-1].ast), Device["CPU"].renderer)


@pytest.mark.parametrize("vector_bytes", VECTOR_BYTES)
@pytest.mark.parametrize("shape", [(4, 64, 32, 32), (2, 32, 8, 24)])
def test_nchw_to_nhwc_reads_a_line_per_load(vector_bytes: int, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(sum(shape))
    x, y = rng.standard_normal(shape, dtype=np.float32), rng.standard_normal(shape, dtype=np.float32)
    with cpu_vector_bytes(vector_bytes) as lanes:
        nhwc = (Tensor(x) * 2 + Tensor(y).relu()).permute(0, 2, 3, 1).contiguous()
        notes = _notes(nhwc)
        # the channels are the output's lanes (one input line each); the width, along which each line continues,
        # takes a line of elements (16 float32), or half of one where 16 does not divide it
        tile = 16 if shape[3] % 16 == 0 else 8
        assert f"UPCAST {lanes} (contiguous output)" in notes and \
            f"UPCAST {tile} (transposed copy, a line per load)" in notes, notes
        np.testing.assert_allclose(nhwc.numpy(), (x * 2 + np.maximum(y, 0)).transpose(0, 2, 3, 1), rtol=1e-6)


@pytest.mark.parametrize("vector_bytes", VECTOR_BYTES)
def test_nhwc_to_nchw_reads_a_line_per_load(vector_bytes: int) -> None:
    x = np.random.default_rng(1).standard_normal((4, 32, 32, 64), dtype=np.float32)
    with cpu_vector_bytes(vector_bytes) as lanes:
        nchw = (Tensor(x) - 1).permute(0, 3, 1, 2).contiguous()
        notes = _notes(nchw)
        # the image's columns are the lanes, 64 channels (256 bytes) apart in the input; the channels continue
        assert f"UPCAST {lanes} (contiguous output)" in notes and \
            "UPCAST 16 (transposed copy, a line per load)" in notes, notes
        np.testing.assert_allclose(nchw.numpy(), (x - 1).transpose(0, 3, 1, 2), rtol=1e-6)


def test_lanes_under_a_line_apart_take_no_transpose_tile() -> None:
    # a stride-2 read (lanes 8 bytes apart) already shares its lines between lanes: no second upcast
    x = np.random.default_rng(2).standard_normal((64, 256), dtype=np.float32)
    with cpu_vector_bytes(64):
        strided = (Tensor(x)[:, ::2] + 1).contiguous()
        notes = _notes(strided)
        assert not any("transposed copy" in note for note in notes), notes
        np.testing.assert_allclose(strided.numpy(), x[:, ::2] + 1, rtol=1e-6)
