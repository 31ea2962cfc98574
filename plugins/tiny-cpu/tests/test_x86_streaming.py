"""Streaming stores (tiny_cpu.x86.streaming): outputs of 16 MiB and more that a kernel only stores to, as aligned
vectors, are written with `vmovntps` behind an entry test of the base's alignment; the code is read back with
capstone and run on aligned and unaligned numpy buffers against numpy's result."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from tiny_cpu.x86.executable import ExecutableCode, host_is_x86_64
from tiny_cpu.x86.isel import VectorX86Contract, select_kernel
from tiny_cpu.x86.renderer import host_has_avx512
from tiny_cpu.x86.streaming import STREAM_BYTES, multiple_of, streamed_buffers

from tinycore import Tensor
from tinycore.codegen import linearize
from tinycore.dtype import dtypes
from tinycore.engine.memory import device_facts
from tinycore.schedule import create_schedule
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp

capstone = pytest.importorskip("capstone", reason="the oracle that reads the code back; install tiny-cpu[test]")
pytestmark = pytest.mark.skipif(not host_is_x86_64(), reason="x86-64 machine code runs only on x86-64 hosts")
needs_avx512 = pytest.mark.skipif(not host_is_x86_64() or not host_has_avx512(),
                                  reason="16-lane (zmm) code runs only on CPUs with AVX-512 F, VL and DQ")
LARGE = STREAM_BYTES // 4  # float32 elements: the smallest streamed output


class WideX86Contract(VectorX86Contract):
    """What the x86 renderer declares on an AVX-512 host: 16-lane float32 vectors."""

    vector_widths = {dtypes.float32: (8, 16)}
    preferred_vector_bytes = 64


def _kernel(expression: Tensor, contract: type) -> tuple[list[UOp], tuple]:
    items = [item for item in create_schedule([expression.uop], device_facts).items if not item.is_copy]
    assert len(items) == 1
    return linearize(items[0].ast, contract()), items[0].buffers


def _mnemonics(code: bytes) -> list[str]:
    decoder = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    return [f"{instruction.mnemonic} {instruction.op_str}".strip() for instruction in decoder.disasm(code, 0)]


def _aligned(elements: int, offset: int = 0) -> np.ndarray:
    """A float32 array of `elements` whose data starts `offset` floats after a 64-byte boundary."""
    raw = np.empty(elements + 32, np.float32)
    start = (-raw.ctypes.data % 64) // 4 + offset
    return raw[start:start + elements]


def test_multiple_of_proves_divisibility_of_index_sums() -> None:
    core, counter = UOp.variable("core", 0, 7), UOp.variable("i", 0, 1000)
    sixteen = UOp.const(dtypes.int32, 16)
    base = UOp(Ops.MUL, dtypes.int32, (core, UOp.const(dtypes.int32, 8388608)))
    index = UOp(Ops.ADD, dtypes.int32, (UOp(Ops.MUL, dtypes.int32, (counter, sixteen)), base))
    assert multiple_of(index, 16) and multiple_of(index, 8)
    assert not multiple_of(index, 32)  # counter * 16 is not a multiple of 32 for an odd counter
    assert not multiple_of(UOp(Ops.ADD, dtypes.int32, (index, UOp.const(dtypes.int32, 4))), 16)
    assert multiple_of(UOp(Ops.SHL, dtypes.int32, (counter, UOp.const(dtypes.int32, 4))), 16)
    assert not multiple_of(counter, 16)


@pytest.mark.parametrize("contract, lanes", [(VectorX86Contract, 8),
                                             pytest.param(WideX86Contract, 16, marks=needs_avx512)])
def test_large_outputs_are_streamed_and_match_numpy_at_any_alignment(contract: type, lanes: int) -> None:
    rng = np.random.default_rng(6)
    inputs = [rng.standard_normal(LARGE).astype(np.float32) for _ in range(3)]
    a, b, c = (Tensor(array).realize() for array in inputs)
    uops, buffers = _kernel((a * b + c).relu(), contract)
    assert [u.src[1].dtype.count for u in uops if u.op is Ops.STORE] == [lanes]
    code = select_kernel(uops, vector_registers=32 if lanes == 16 else 16)
    text = _mnemonics(code)
    width = "zmmword" if lanes == 16 else "ymmword"
    assert any(line.startswith(f"vmovntps {width} ptr") for line in text), text
    assert not any(line.startswith(f"vmovups {width} ptr [rdi") for line in text[:text.index("sfence")])
    # the entry test of the output's base (the first argument, rdi) comes before the prologue
    assert text[:4] == ["mov rax, rdi", "test eax, 0x3f", text[2], "push rbp"] and text[2].startswith("jne"), text[:4]
    assert text.count("ret") == 2 and text[text.index("ret") - 6:text.index("ret")].count("sfence") == 1
    function = ExecutableCode(code).function(None, *[ctypes.c_void_p] * 4)
    expected = np.maximum(inputs[0] * inputs[1] + inputs[2], 0)
    by_buffer = {tensor.uop.base: array for tensor, array in zip((a, b, c), inputs, strict=True)}
    for offset in (0, 1, 8):  # aligned: the streamed body; at 4 and 32 bytes past a line: plain stores
        output = _aligned(LARGE, offset)
        output.fill(np.nan)
        function(output.ctypes.data, *[by_buffer[buffer].ctypes.data for buffer in buffers[1:]])
        np.testing.assert_array_equal(output, expected)


def test_small_outputs_and_outputs_read_back_keep_plain_stores() -> None:
    rng = np.random.default_rng(7)
    small = Tensor(rng.standard_normal(LARGE // 4).astype(np.float32)).realize()
    uops, _ = _kernel(small * 2 + 1, VectorX86Contract)
    assert streamed_buffers(uops) == set()
    assert not any(line.startswith("vmovntps") for line in _mnemonics(select_kernel(uops)))
    large = Tensor(rng.standard_normal(LARGE).astype(np.float32)).realize()
    uops, _ = _kernel(large * 2 + 1, VectorX86Contract)
    assert len(streamed_buffers(uops)) == 1  # the same kernel at 16 MiB is streamed
    # an output the kernel also reads: the loads would wait on lines the streamed stores sent around the cache
    address = next(u for u in uops if u.op is Ops.STORE).src[0]
    assert streamed_buffers([*uops, UOp(Ops.LOAD, dtypes.float32.vec(8), (address,))]) == set()


def test_unaligned_vector_stores_keep_plain_stores() -> None:
    """A store at an index that is not a multiple of its lanes (a row of 8 starting at element 4) could cross a
    line: `vmovntps` would fault there whatever the base."""
    output = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(LARGE), (), 0)
    counter = UOp.variable("i", 0, LARGE // 8 - 2)
    index = UOp(Ops.ADD, dtypes.int32, (UOp(Ops.MUL, dtypes.int32, (counter, UOp.const(dtypes.int32, 8))),
                                        UOp.const(dtypes.int32, 4)))
    value = UOp.const(dtypes.float32, 1.0)
    vector = UOp(Ops.VECTORIZE, dtypes.float32.vec(8), (value,) * 8)
    address = UOp(Ops.INDEX, output.dtype, (output, index))
    store = UOp(Ops.STORE, dtypes.void, (address, vector))
    assert streamed_buffers([output, counter, value, vector, address, store]) == set()
    aligned_index = UOp(Ops.MUL, dtypes.int32, (counter, UOp.const(dtypes.int32, 8)))
    aligned = UOp(Ops.INDEX, output.dtype, (output, aligned_index))
    assert streamed_buffers([output, counter, value, vector, aligned,
                             UOp(Ops.STORE, dtypes.void, (aligned, vector))]) == {output}
