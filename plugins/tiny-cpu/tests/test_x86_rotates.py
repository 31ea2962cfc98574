"""Rotates (`(x << c) | (x >> (bits - c))`) selected as one `rol`, and copies the allocator makes unnecessary (a value
read last by `mov b, a` gives b its register): the kernels run as machine code and are compared with numpy, and
their code is read back with capstone."""

from __future__ import annotations

import ctypes

import capstone
import numpy as np
import pytest
from tiny_cpu.x86.executable import ExecutableCode, host_is_x86_64
from tiny_cpu.x86.function import FunctionBuilder
from tiny_cpu.x86.isel import ScalarX86Contract, select_kernel
from tiny_cpu.x86.rotates import rotate_of

from tinycore import Tensor
from tinycore.codegen import linearize
from tinycore.engine.memory import device_facts
from tinycore.renderer.isa import Memory
from tinycore.schedule import create_schedule
from tinycore.uop.ops import Ops

pytestmark = pytest.mark.skipif(not host_is_x86_64(), reason="x86-64 machine code runs only on x86-64 hosts")
_DECODER = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
RNG = np.random.default_rng(45)


def _selected(expression: Tensor) -> tuple[list, tuple, bytes]:
    items = [item for item in create_schedule([expression.uop], device_facts).items if not item.is_copy]
    assert len(items) == 1
    uops = linearize(items[0].ast, ScalarX86Contract())
    return uops, items[0].buffers, select_kernel(uops)


def _run(code: bytes, output: np.ndarray, *inputs: np.ndarray) -> np.ndarray:
    function = ExecutableCode(code).function(None, *[ctypes.c_void_p] * (1 + len(inputs)))
    function(output.ctypes.data, *[array.ctypes.data for array in inputs])
    return output


def _mnemonics(code: bytes) -> list[str]:
    return [instruction.mnemonic for instruction in _DECODER.disasm(code, 0)]


@pytest.mark.parametrize("numpy_dtype", [np.uint32, np.uint64])
@pytest.mark.parametrize("shift_right_first", [False, True])
def test_a_rotate_is_one_rol_and_matches_numpy(numpy_dtype: type, shift_right_first: bool) -> None:
    bits = 8 * np.dtype(numpy_dtype).itemsize
    values = RNG.integers(0, 2**bits - 1, size=29, dtype=numpy_dtype, endpoint=True)
    other = RNG.integers(0, 2**bits - 1, size=29, dtype=numpy_dtype, endpoint=True)
    x, y = Tensor(values).realize(), Tensor(other).realize()
    left, right = x << 13, x >> (bits - 13)
    rotated = (right | left) if shift_right_first else (left | right)
    uops, buffers, code = _selected(rotated ^ y)
    assert any(rotate_of(uop) is not None for uop in uops), "the linear program holds no rotate to select"
    expected = ((values << numpy_dtype(13)) | (values >> numpy_dtype(bits - 13))) ^ other
    first = values if buffers[1] is x.uop.base else other
    second = other if first is values else values
    got = _run(code, np.zeros_like(values), first, second)
    np.testing.assert_array_equal(got, expected)
    mnemonics = _mnemonics(code)
    assert "rol" in mnemonics and "shl" not in mnemonics and "shr" not in mnemonics


def test_a_shift_read_elsewhere_keeps_its_code_and_other_counts_are_no_rotate() -> None:
    values = RNG.integers(0, 2**32 - 1, size=23, dtype=np.uint32, endpoint=True)
    x = Tensor(values).realize()
    # the left shift is also added: it is computed on its own, the OR is still a rotate
    uops, _, code = _selected(((x << 7) | (x >> 25)) + (x << 7))
    assert any(rotate_of(uop) is not None for uop in uops)
    expected = ((values << np.uint32(7)) | (values >> np.uint32(25))) + (values << np.uint32(7))
    np.testing.assert_array_equal(_run(code, np.zeros_like(values), values), expected)
    assert {"rol", "shl"} <= set(_mnemonics(code))
    # 7 + 24 is not 32: two shifts and an OR, not a rotate
    uops, _, code = _selected((x << 7) | (x >> 24))
    assert not any(rotate_of(uop) is not None for uop in uops if uop.op is Ops.OR)
    expected = (values << np.uint32(7)) | (values >> np.uint32(24))
    np.testing.assert_array_equal(_run(code, np.zeros_like(values), values), expected)
    assert "rol" not in _mnemonics(code)


def test_a_copy_of_a_value_read_last_there_takes_its_register() -> None:
    # b = a + c where a is read for the last time by the copy into b: b gets a's register, and the copy is gone
    builder = FunctionBuilder(integer_arguments=1)
    pointer = builder.arguments[0]
    a, c, b = builder.value("gpr", 32), builder.value("gpr", 32), builder.value("gpr", 32)
    builder.emit("mov", a, Memory(pointer, None, 1, 0, 32))
    builder.emit("mov", c, Memory(pointer, None, 1, 4, 32))
    builder.emit("mov", b, a)
    builder.emit("add", b, c)
    builder.emit("imul", b, c)  # c read after b is written: it must keep a register of its own
    builder.ret(b)
    code = builder.assemble()
    assert builder.allocation.assigned[a] == builder.allocation.assigned[b]
    assert builder.allocation.assigned[c] != builder.allocation.assigned[b]
    data = np.array([123456, -789], np.int32)
    function = ExecutableCode(code).function(ctypes.c_int32, ctypes.c_void_p)
    assert function(data.ctypes.data) == int(np.int32((123456 - 789) * -789))
    copies = [i for i in _DECODER.disasm(code, 0) if i.mnemonic == "mov" and i.op_str.count("ptr") == 0
              and i.op_str.split(", ")[0] != "rbp"]
    # only the argument's copy out of rdi and the return value's into eax remain
    assert len(copies) <= 2, [f"{i.mnemonic} {i.op_str}" for i in copies]
