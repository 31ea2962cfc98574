"""Output axes split where their indices divide them (tinycore/codegen/split_ranges.py): a product over an axis a
reshape merged (attention's heads and head width) gets its register tile on the split axes; values against numpy."""
from __future__ import annotations

import numpy as np
import pytest
from cpu_vectors import VECTOR_BYTES, cpu_vector_bytes

from tinycore import Tensor
from tinycore.codegen import optimize_kernel
from tinycore.codegen.opt import Kernel
from tinycore.codegen.optimize import hand_coded_optimizations
from tinycore.codegen.split_ranges import split_merged_axes
from tinycore.device.registry import Device
from tinycore.engine.memory import device_facts
from tinycore.schedule import create_schedule
from tinycore.uop.ops import Ops


def _attention_output(batch: int, heads: int, positions: int, width: int) -> tuple[Tensor, np.ndarray]:
    """(p @ v) with the heads moved next to the width and merged, plus a residual: the product sits under the merge
    inside an elementwise kernel; and the numpy value."""
    rng = np.random.default_rng(heads * width)
    p = rng.standard_normal((batch, heads, positions, positions), dtype=np.float32)
    v = rng.standard_normal((batch, heads, positions, width), dtype=np.float32)
    residual = rng.standard_normal((batch, positions, heads * width), dtype=np.float32)
    merged = (Tensor(p) @ Tensor(v)).transpose(1, 2).reshape(batch, positions, heads * width) + Tensor(residual)
    expected = (p.astype(np.float64) @ v).transpose(0, 2, 1, 3).reshape(batch, positions, heads * width) + residual
    return merged, expected


@pytest.mark.parametrize("vector_bytes", VECTOR_BYTES)
@pytest.mark.parametrize("heads, width", [(8, 32), (4, 64), (2, 48)])
def test_a_product_under_a_merged_axis_is_tiled_on_the_split_axes(vector_bytes: int, heads: int, width: int) -> None:
    with cpu_vector_bytes(vector_bytes):
        merged, expected = _attention_output(2, heads, 24, width)
        items = [item for item in create_schedule([merged.uop], device_facts).items if not item.is_copy]
        ast = items[-1].ast
        renderer = Device["CPU"].renderer
        before = hand_coded_optimizations(Kernel(ast), renderer)
        assert not any("(matmul" in note for note in before), before  # the merged axis hides the columns
        split = split_merged_axes(ast)
        ranges = {node for node in split.toposort if node.op is Ops.RANGE}
        assert len(ranges) > len({node for node in ast.toposort if node.op is Ops.RANGE})
        assert not any(node.op in (Ops.IDIV, Ops.MOD) for node in split.toposort), "an index still divides an axis"
        assert any("(matmul" in note for note in hand_coded_optimizations(Kernel(split), renderer))
        assert len(optimize_kernel(ast, renderer).axes) > len(Kernel(ast).axes)  # the split kernel is the one used
        np.testing.assert_allclose(merged.numpy(), expected, rtol=1e-4, atol=1e-4)


def test_axes_no_index_divides_are_left_alone() -> None:
    a, b = Tensor.empty(12, 20), Tensor.empty(20, 16)
    items = [item for item in create_schedule([(a @ b).uop], device_facts).items if not item.is_copy]
    plain = [item.ast for item in items if not any(node.op in (Ops.IDIV, Ops.MOD) for node in item.ast.toposort)]
    assert plain and all(split_merged_axes(ast) is ast for ast in plain)


def test_the_split_is_an_opt_that_replays_and_runs_under_beam(tmp_path, monkeypatch) -> None:
    """The heuristic's split is recorded as its first opt (SPLIT_AXES), so its opts rebuild its program (a BEAM
    search starts from them; applied to the unsplit axes they named the wrong ones and failed), and a grouped
    convolution's gradients searched with BEAM match torch."""
    torch = pytest.importorskip("torch")
    from tinycore.codegen import lower_to_program
    from tinycore.codegen.opt import KernelOptError, Opt, OptOps
    from tinycore.engine import realize
    from tinycore.helpers import Context
    merged, _ = _attention_output(2, 8, 24, 32)
    ast = [item for item in create_schedule([merged.uop], device_facts).items if not item.is_copy][-1].ast
    renderer = Device["CPU"].renderer
    applied = optimize_kernel(ast, renderer).applied
    assert applied[0] == Opt(OptOps.SPLIT_AXES, 0, 0)
    assert lower_to_program(ast, renderer, list(applied)).src == lower_to_program(ast, renderer).src
    with pytest.raises(KernelOptError, match="first opt"):
        optimize_kernel(ast, renderer, [applied[0], applied[0]])
    plain = [item.ast for item in create_schedule([(Tensor.empty(12, 20) @ Tensor.empty(20, 16)).uop],
                                                  device_facts).items if not item.is_copy][0]
    with pytest.raises(KernelOptError, match="no output axis"):
        optimize_kernel(plain, renderer, [Opt(OptOps.SPLIT_AXES, 0, 0)])

    monkeypatch.setenv("TINYCORE_CACHE_DIR", str(tmp_path))
    rng = np.random.default_rng(11)
    x = rng.standard_normal((4, 16, 8, 8), dtype=np.float32)
    w = rng.standard_normal((16, 4, 3, 3), dtype=np.float32)
    realize.forget_searched_kernels()
    with Context(BEAM=1, BEAM_BUDGET=2, BEAM_UPCAST_MAX=16):
        tx, tw = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
        tx.conv2d(tw, padding=1, groups=4).square().sum().backward()
        assert tx.grad is not None and tw.grad is not None
        found = (tx.grad.numpy(), tw.grad.numpy())
    realize.forget_searched_kernels()
    px, pw = torch.from_numpy(x).double().requires_grad_(), torch.from_numpy(w).double().requires_grad_()
    torch.nn.functional.conv2d(px, pw, padding=1, groups=4).square().sum().backward()
    np.testing.assert_allclose(found[0], px.grad.numpy(), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(found[1], pw.grad.numpy(), rtol=1e-4, atol=1e-3)
