"""x86-64 registers: the 16 general registers at 64, 32, 16 and 8 bits, 32 vector registers at 128, 256 and 512
bits, and the 8 AVX-512 mask registers."""

from __future__ import annotations

from tinycore.renderer.isa import Register

_LEGACY = ["ax", "cx", "dx", "bx", "sp", "bp", "si", "di"]
GPR64 = [Register(f"r{n}", i, 64, "gpr") for i, n in enumerate(_LEGACY)] + [
    Register(f"r{i}", i, 64, "gpr") for i in range(8, 16)
]
GPR32 = [Register(f"e{n}", i, 32, "gpr") for i, n in enumerate(_LEGACY)] + [
    Register(f"r{i}d", i, 32, "gpr") for i in range(8, 16)
]
GPR16 = [Register(n, i, 16, "gpr") for i, n in enumerate(_LEGACY)] + [
    Register(f"r{i}w", i, 16, "gpr") for i in range(8, 16)
]
GPR8 = [Register(n, i, 8, "gpr") for i, n in enumerate(["al", "cl", "dl", "bl", "spl", "bpl", "sil", "dil"])] + [
    Register(f"r{i}b", i, 8, "gpr") for i in range(8, 16)
]
XMM = [Register(f"xmm{i}", i, 128, "vec") for i in range(32)]
YMM = [Register(f"ymm{i}", i, 256, "vec") for i in range(32)]
ZMM = [Register(f"zmm{i}", i, 512, "vec") for i in range(32)]
MASK = [Register(f"k{i}", i, 64, "mask") for i in range(8)]

_BY_WIDTH = {
    ("gpr", 64): GPR64,
    ("gpr", 32): GPR32,
    ("gpr", 16): GPR16,
    ("gpr", 8): GPR8,
    ("vec", 128): XMM,
    ("vec", 256): YMM,
    ("vec", 512): ZMM,
    ("mask", 64): MASK,
}
BY_NAME: dict[str, Register] = {r.name: r for regs in _BY_WIDTH.values() for r in regs}

(rax, rcx, rdx, rbx, rsp, rbp, rsi, rdi, r8, r9, r10, r11, r12, r13, r14, r15) = GPR64

# System V AMD64: where integer and float arguments arrive, and which registers a function must preserve
INTEGER_ARGUMENTS = [rdi, rsi, rdx, rcx, r8, r9]
FLOAT_ARGUMENTS = XMM[:8]
CALLEE_SAVED = [rbx, rbp, r12, r13, r14, r15]


def view(register: Register, bits: int) -> Register:
    """The same register at another width: view(rax, 32) is eax, view(xmm3, 256) is ymm3."""
    table = _BY_WIDTH.get((register.kind, bits))
    if table is None:
        raise ValueError(f"{register.kind} registers have no {bits}-bit form")
    return table[register.number]
