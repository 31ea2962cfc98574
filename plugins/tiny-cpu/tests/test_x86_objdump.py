"""A second, independent oracle for the x86 encoder: GNU objdump (binutils), whose decoder shares nothing with
capstone's LLVM-derived tables. Every instruction form is encoded into one buffer, objdump disassembles it in one
run, and each instruction's mnemonic, registers, memory reference, immediate, opmask and zeroing must match."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from tiny_cpu.x86.assembler import Assembler
from tiny_cpu.x86.integer_ops import ALU, CONDITIONS, SHIFTS, UNARY
from tiny_cpu.x86.registers import GPR8, GPR16, GPR32, GPR64, MASK, ZMM
from tiny_cpu.x86.vector_ops import VECTOR_OPS

from tinycore.renderer.isa import Operand, Register

pytest.importorskip("capstone", reason="the case generators live with the capstone tests")
from test_x86_encoding import vector_cases  # noqa: E402
from x86_oracle import COMPARISON_PREDICATES, describe, memory_forms  # noqa: E402

OBJDUMP = shutil.which("objdump")
pytestmark = pytest.mark.skipif(OBJDUMP is None, reason="GNU objdump (binutils) is not installed")
SIZES = {"BYTE": 1, "WORD": 2, "DWORD": 4, "QWORD": 8, "XMMWORD": 16, "YMMWORD": 32, "ZMMWORD": 64}
GPRS = {64: GPR64, 32: GPR32, 16: GPR16, 8: GPR8}
Case = tuple[str, tuple[Operand, ...], Register | None, bool]


def _integer_cases() -> list[Case]:
    cases: list[Case] = []
    for bits, regs in GPRS.items():
        memories = memory_forms(bits)[::3]
        for op in [*ALU, "mov", "test"]:
            cases += [(op, (regs[i], regs[(i * 5 + 3) % 16]), None, False) for i in range(16)]
            cases += [(op, (m, regs[i % 16]), None, False) for i, m in enumerate(memories)]
            cases += [(op, (r, imm), None, False) for r in regs for imm in (1, -1, 100)]
        cases += [(op, (regs[i % 16], m), None, False) for op in [*ALU, "mov"] for i, m in enumerate(memories)]
        cases += [(op, (r,), None, False) for op in UNARY for r in regs]
        cases += [(op, (r, amount), None, False) for op in SHIFTS for r in regs for amount in (1, 5, GPR8[1])]
        if bits >= 32:
            cases += [("lea", (regs[i % 16], m), None, False) for i, m in enumerate(memories)]
            cases += [("imul", (a, b, 1000), None, False) for a, b in zip(regs, regs[3:] + regs[:3], strict=True)]
            cases += [
                ("cmov" + c, (regs[i % 16], m), None, False) for c in CONDITIONS for i, m in enumerate(memories[:8])
            ]
    cases += [("set" + c, (r,), None, False) for c in CONDITIONS for r in GPR8]
    cases += [(op, (GPR64[i], GPR8[(i + 3) % 16]), None, False) for op in ("movzx", "movsx") for i in range(16)]
    cases += [("movsxd", (GPR64[i], GPR32[(i + 3) % 16]), None, False) for i in range(16)]
    cases += [(op, (r,), None, False) for op in ("push", "pop", "call", "jmp") for r in GPR64]
    return cases + [(op, (), None, False) for op in ("ret", "cqo", "cdq", "vzeroupper", "nop")]


def _vector_cases() -> list[Case]:
    cases: list[Case] = []
    for name, op in sorted(VECTOR_OPS.items()):
        if op.has_vex:
            cases += [(name, operands, None, False) for _, operands in vector_cases(name, op, evex=False)[::4]]
        if op.has_evex and name != "vblendmps" and not name.startswith("vcmp"):
            cases += [(name, operands, None, False) for _, operands in vector_cases(name, op, evex=True)[1::4]]
    for i, k in enumerate(MASK[1:]):
        cases += [("vaddps", (ZMM[i], ZMM[i + 9], m), k, bool(j % 2)) for j, m in enumerate(memory_forms(512)[::9])]
        cases += [("vcmpps", (k, ZMM[i + 3], ZMM[i + 20], p), None, False) for p in range(8)]
    return cases


def _parse_operand(text: str) -> tuple[tuple[object, ...], str | None, bool]:
    """objdump's Intel-syntax operand as (kind, ...) like x86_oracle.describe, with its opmask and zeroing."""
    mask = re.search(r"\{(k[1-7])\}", text)
    zeroing = "{z}" in text
    text = re.sub(r"\{[^}]*\}", "", text).strip()
    memory = re.fullmatch(r"(?:(\w+) (?:PTR|BCST) )?(?:ds:(0x[0-9a-f]+)|\[([^\]]*)\])", text)
    if memory:
        size = SIZES.get(memory.group(1) or "")
        if memory.group(2):
            return ("mem", None, None, 1, int(memory.group(2), 16), size), None, False
        base = index = None
        scale, disp = 1, 0
        for sign, term in re.findall(r"([+-]?)([\w*]+)", memory.group(3)):
            if term.startswith("0x"):
                disp = -int(term, 16) if sign == "-" else int(term, 16)
                disp = disp - (1 << 64) if disp >= 1 << 63 else disp  # a negative RIP offset shows as 64-bit
            elif "*" in term:
                index, factor = term.split("*")
                scale = int(factor)
            else:
                base = term
        return ("mem", base, index, scale, disp, size), None, False
    if text.startswith("0x") or text.isdigit():
        return ("imm", int(text, 0)), mask.group(1) if mask else None, zeroing
    return ("reg", text), mask.group(1) if mask else None, zeroing


def _same_immediate(mine: int, theirs: int) -> bool:
    return any((mine - theirs) % (1 << bits) == 0 and theirs < (1 << bits) for bits in (8, 16, 32, 64))


def test_every_form_against_objdump(tmp_path: object) -> None:
    cases = _integer_cases() + _vector_cases()
    code, starts = bytearray(), []
    for op, operands, mask, zeroing in cases:
        starts.append(len(code))
        code += Assembler.encode(op, operands, mask, zeroing).data
    binary = f"{tmp_path}/code.bin"
    with open(binary, "wb") as file:
        file.write(code)
    assert OBJDUMP is not None
    listing = subprocess.run(
        [OBJDUMP, "-D", "-b", "binary", "-m", "i386:x86-64", "-M", "intel", "--no-show-raw-insn", binary],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    decoded = {}
    for line in listing.splitlines():
        # "{evex}" marks an EVEX form objdump could also have shown as VEX; the instruction is the same
        found = re.match(r"\s*([0-9a-f]+):\s+(?:\{\w+\}\s+)?(\S+)\s*(.*?)\s*(?:#.*)?$", line)
        if found:
            decoded[int(found.group(1), 16)] = (found.group(2), found.group(3))
    failures = []
    for start, (op, operands, mask, zeroing) in zip(starts, cases, strict=True):
        if start not in decoded:
            failures.append(f"{op} {operands}: objdump did not start an instruction at {start:#x}")
            continue
        mnemonic, text = decoded[start]
        wanted_mnemonic, wanted = op, describe(operands, memory_size=op != "lea")
        if op.startswith("vcmp") and op in VECTOR_OPS:  # objdump names the predicate, as capstone does
            predicate = operands[-1]
            assert isinstance(predicate, int)
            wanted_mnemonic, wanted = f"vcmp{COMPARISON_PREDICATES[predicate]}{op[4:]}", wanted[:-1]
        parsed = [_parse_operand(part) for part in text.split(",")] if text else []
        got = [p[0] for p in parsed]
        got_mask = next((p[1] for p in parsed if p[1]), None)
        got_zeroing = any(p[2] for p in parsed)
        match = (
            mnemonic == wanted_mnemonic
            and len(got) == len(wanted)
            and got_mask == (mask.name if mask else None)
            and got_zeroing == zeroing
        )
        for w, g in zip(wanted, got, strict=False):
            if w[0] == "imm" and g[0] == "imm":
                match = match and _same_immediate(int(w[1]), int(g[1]))  # type: ignore[call-overload]
            elif w[0] == "mem" and g[0] == "mem":
                match = match and w[1:5] == g[1:5] and (w[5] is None or w[5] == g[5])
            else:
                match = match and w == g
        if not match:
            failures.append(f"{op} {operands} mask={mask} z={zeroing} -> objdump {mnemonic} {text}")
    assert len(cases) > 5000
    assert not failures, f"{len(failures)} of {len(cases)} differ, e.g.:\n" + "\n".join(
        failures[:: max(1, len(failures) // 12)]
    )
