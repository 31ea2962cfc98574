"""The x86-64 encoder checked instruction by instruction against capstone, a decoder we did not write.

Every mnemonic the encoder knows is encoded over operand sets that put each register number in each position and
use every addressing form (each base with each displacement size, each index with each scale, rbp/r13 and rsp/r12
bases, index without base, absolute and RIP-relative); capstone must read back the same mnemonic and operands.
"""

from __future__ import annotations

import pytest

capstone = pytest.importorskip("capstone", reason="the encoder's oracle; install tiny-cpu[test]")

from tiny_cpu.x86.assembler import BRANCHES, Assembler  # noqa: E402
from tiny_cpu.x86.encoding import EncodingError  # noqa: E402
from tiny_cpu.x86.integer_ops import ALU, CONDITIONS, SHIFTS, UNARY  # noqa: E402
from tiny_cpu.x86.registers import GPR8, GPR16, GPR32, GPR64, MASK, XMM, YMM, ZMM, rcx, view  # noqa: E402
from tiny_cpu.x86.vector_ops import VECTOR_OPS, VectorOp  # noqa: E402
from x86_oracle import COMPARISON_PREDICATES, decode, describe, memory_forms, same  # noqa: E402

from tinycore.renderer.isa import Label, Memory, Operand, Register  # noqa: E402

GPRS = {64: GPR64, 32: GPR32, 16: GPR16, 8: GPR8}
IMMEDIATES = [0, 1, -1, 5, 127, -128, 128, -129, 0x7FFFFFFF, -0x80000000]
Case = tuple[str, tuple[Operand, ...]]


def check(cases: list[Case], memory_size: bool = True, mask: Register | None = None, zeroing: bool = False) -> None:
    """Encode every case and compare capstone's reading with it; report all mismatches at once."""
    assert cases, "no cases generated"
    failures = []
    for mnemonic, operands in cases:
        encoded = Assembler.encode(mnemonic, operands, mask, zeroing).data
        decoded_mnemonic, decoded, text, length = decode(encoded)
        wanted_mnemonic, wanted = mnemonic, describe(operands, memory_size)
        if mnemonic.startswith("vcmp") and mnemonic in VECTOR_OPS:  # capstone names the predicate: vcmpltps, no imm
            predicate = operands[-1]
            assert isinstance(predicate, int)
            wanted_mnemonic, wanted = f"vcmp{COMPARISON_PREDICATES[predicate]}{mnemonic[4:]}", wanted[:-1]
        if mask is not None:  # capstone lists the opmask as a register after the destination
            wanted = wanted[:1] + [("reg", mask.name)] + wanted[1:]
        if decoded_mnemonic != wanted_mnemonic or not same(wanted, decoded) or length != len(encoded):
            failures.append(f"{mnemonic} {operands} -> {encoded.hex()} decodes as {text!r}")
    assert not failures, f"{len(failures)} of {len(cases)} wrong, e.g.:\n" + "\n".join(failures[:8])


def register_pairs(table: list[Register], other: list[Register] | None = None) -> list[tuple[Register, Register]]:
    """Every pairing of register numbers (16 x 16 for general registers)."""
    other = other or table
    return [(a, b) for a in table for b in other]


@pytest.mark.parametrize("mnemonic", sorted(ALU))
@pytest.mark.parametrize("bits", [64, 32, 16, 8])
def test_alu(mnemonic: str, bits: int) -> None:
    regs, memories = GPRS[bits], memory_forms(bits)
    cases: list[Case] = [(mnemonic, pair) for pair in register_pairs(regs)]
    cases += [(mnemonic, (regs[i % 16], m)) for i, m in enumerate(memories)]
    cases += [(mnemonic, (m, regs[(i * 7) % 16])) for i, m in enumerate(memories)]
    limit = 1 << (bits - 1)
    cases += [(mnemonic, (r, imm)) for r in regs for imm in IMMEDIATES if -limit <= imm < limit]
    cases += [(mnemonic, (m, IMMEDIATES[i % 8] if bits > 8 else 5)) for i, m in enumerate(memories)]
    check(cases)


@pytest.mark.parametrize("bits", [64, 32, 16, 8])
def test_mov_and_test(bits: int) -> None:
    regs, memories = GPRS[bits], memory_forms(bits)
    cases: list[Case] = []
    for mnemonic in ("mov", "test"):
        cases += [(mnemonic, pair) for pair in register_pairs(regs)]
        cases += [(mnemonic, (m, regs[i % 16])) for i, m in enumerate(memories)]
        cases += [(mnemonic, (r, imm)) for r in regs for imm in (0, 1, 100, -100)]
        cases += [(mnemonic, (m, 7)) for m in memories]
    cases += [("mov", (regs[i % 16], m)) for i, m in enumerate(memories)]
    if bits >= 32:
        cases += [("mov", (r, imm)) for r in regs for imm in (0x7FFFFFFF, -0x80000000)]
    check(cases)


def test_mov_wide_immediate() -> None:
    cases: list[Case] = [("movabs", (r, value)) for r in GPR64 for value in (1 << 40, -(1 << 40), 0x123456789ABCDEF0)]
    failures = []
    for _, (register, value) in cases:
        code = Assembler.encode("mov", (register, value)).data
        mnemonic, operands, text, _ = decode(code)
        if mnemonic != "movabs" or not same(describe((register, value)), operands):
            failures.append(text)
    assert not failures, failures[:5]


@pytest.mark.parametrize("bits", [64, 32])
def test_lea_and_multiply(bits: int) -> None:
    regs, memories = GPRS[bits], memory_forms(bits)
    cases: list[Case] = [("lea", (regs[i % 16], m)) for i, m in enumerate(memories)]
    check(cases, memory_size=False)
    cases = [("imul", pair) for pair in register_pairs(regs)]
    cases += [("imul", (regs[i % 16], m)) for i, m in enumerate(memories)]
    cases += [("imul", (a, b, imm)) for a, b in register_pairs(regs)[::7] for imm in (3, -7, 1000, -100000)]
    cases += [("imul", (regs[i % 16], m, 12345)) for i, m in enumerate(memories)]
    cases += [("imul", (r,)) for r in regs] + [("imul", (m,)) for m in memories]
    check(cases)


@pytest.mark.parametrize("mnemonic", sorted(UNARY))
def test_unary(mnemonic: str) -> None:
    cases: list[Case] = [(mnemonic, (r,)) for bits in (64, 32, 8) for r in GPRS[bits]]
    cases += [(mnemonic, (m,)) for bits in (64, 32) for m in memory_forms(bits)]
    check(cases)


@pytest.mark.parametrize("mnemonic", sorted(SHIFTS))
def test_shifts(mnemonic: str) -> None:
    cases: list[Case] = []
    for bits in (64, 32, 8):
        for r in GPRS[bits]:
            cases += [(mnemonic, (r, 1)), (mnemonic, (r, 5)), (mnemonic, (r, GPR8[1]))]
    cases += [(mnemonic, (m, 3)) for m in memory_forms(64)]
    check(cases)


@pytest.mark.parametrize("condition", sorted(CONDITIONS))
def test_setcc_and_cmov(condition: str) -> None:
    cases: list[Case] = [("set" + condition, (r,)) for r in GPR8] + [("set" + condition, (m,)) for m in memory_forms(8)]
    for bits in (64, 32):
        cases += [("cmov" + condition, pair) for pair in register_pairs(GPRS[bits])]
        cases += [("cmov" + condition, (GPRS[bits][i % 16], m)) for i, m in enumerate(memory_forms(bits))]
    check(cases)


def test_extensions() -> None:
    cases: list[Case] = []
    for mnemonic in ("movzx", "movsx"):
        for bits, source_bits in ((64, 8), (32, 8), (64, 16), (32, 16)):
            cases += [(mnemonic, pair) for pair in register_pairs(GPRS[bits], GPRS[source_bits])]
            cases += [(mnemonic, (GPRS[bits][i % 16], m)) for i, m in enumerate(memory_forms(source_bits))]
    cases += [("movsxd", pair) for pair in register_pairs(GPR64, GPR32)]
    cases += [("movsxd", (GPR64[i % 16], m)) for i, m in enumerate(memory_forms(32))]
    check(cases)


def test_stack_calls_and_fixed() -> None:
    cases: list[Case] = [(m, (r,)) for m in ("push", "pop") for r in GPR64]
    cases += [("push", (5,)), ("push", (100000,))]
    cases += [(m, (r,)) for m in ("call", "jmp") for r in GPR64] + [
        (m, (x,)) for m in ("call", "jmp") for x in memory_forms(64)
    ]
    cases += [(m, ()) for m in ("ret", "nop", "int3", "ud2", "cqo", "cdq", "vzeroupper", "sfence")]
    check(cases)


def test_branches_to_labels() -> None:
    assembler = Assembler()
    back, ahead = Label("back"), Label("ahead")
    assembler.bind(back)
    assembler.emit("nop")
    sites = []
    for mnemonic in BRANCHES:
        for label in (back, ahead):
            sites.append((len(assembler.code), mnemonic, label))
            assembler.emit(mnemonic, label)
    assembler.emit("nop")
    assembler.bind(ahead)
    rip_site = len(assembler.code)
    assembler.emit("vmovups", XMM[3], Memory(label=ahead, bits=128, disp=8))
    code = assembler.finish()
    targets = {back: 0, ahead: assembler.labels[ahead]}
    for where, mnemonic, label in sites:
        decoded_mnemonic, operands, text, _ = decode(code[where:], where)
        assert decoded_mnemonic == mnemonic and operands[0][:2] == ("imm", targets[label]), text
    _, operands, text, length = decode(code[rip_site:], rip_site)
    assert operands[1][1] == "rip" and rip_site + length + operands[1][4] == targets[ahead] + 8, text


def vector_cases(name: str, op: VectorOp, evex: bool) -> list[Case]:
    """Operand sets for one vector mnemonic: VEX over registers 0-15 at 128/256 bits, EVEX over 0-31 up to 512."""
    count = 32 if evex else 16
    widths = [128, 256, 512] if evex else [128, 256]
    element_bits = op.element * 8
    tables = {128: XMM[:count], 256: YMM[:count], 512: ZMM[:count]}
    scalar = op.tuple == "scalar" and not name.startswith(("vbroadcast", "vpbroadcast"))
    cases: list[Case] = []

    def triples(table: list[Register]) -> list[tuple[Register, Register, Register]]:
        return [(table[i], table[(i + 5) % count], table[(i + 11) % count]) for i in range(count)]

    if op.form == "rmv":  # BMI2 shifts of general registers
        for bits in (32, 64):
            regs = GPRS[bits]
            cases += [(name, (regs[i], regs[(i + 5) % 16], regs[(i + 11) % 16])) for i in range(16)]
            cases += [(name, (regs[i % 16], m, regs[(i + 3) % 16])) for i, m in enumerate(memory_forms(bits))]
        return cases
    imm: tuple[Operand, ...] = (3,) if op.form.endswith("i") else ()
    if name.startswith("vcmp"):
        imm = (1,)
    if name in ("vcvtsi2ss", "vcvtsi2sd"):
        for bits in (32, 64):
            cases += [(name, (a, b, GPRS[bits][a.number % 16])) for a, b, _ in triples(XMM[:count])]
            cases += [(name, (XMM[i % count], XMM[(i + 3) % count], m)) for i, m in enumerate(memory_forms(bits))]
        return cases
    if name in ("vcvttss2si", "vcvttsd2si"):
        for bits in (32, 64):
            cases += [(name, (GPRS[bits][i % 16], XMM[i])) for i in range(count)]
            cases += [(name, (GPRS[bits][i % 16], m)) for i, m in enumerate(memory_forms(element_bits))]
        return cases
    if name in ("vmovd", "vmovq"):
        bits = 32 if name == "vmovd" else 64
        for i in range(count):
            cases += [(name, (XMM[i], GPRS[bits][i % 16])), (name, (GPRS[bits][(i + 3) % 16], XMM[i]))]
        cases += [(name, (XMM[i % count], m)) for i, m in enumerate(memory_forms(bits))]
        return cases + [(name, (m, XMM[i % count])) for i, m in enumerate(memory_forms(bits))]
    if name == "vmovmskps":
        return [(name, (GPR32[i % 16], tables[w][i])) for w in widths for i in range(count)]
    if name in ("vmovss", "vmovsd"):
        cases += [(name, t) for t in triples(XMM[:count])]
        cases += [(name, (XMM[i % count], m)) for i, m in enumerate(memory_forms(element_bits))]
        return cases + [(name, (m, XMM[i % count])) for i, m in enumerate(memory_forms(element_bits))]
    if name.startswith(("vbroadcast", "vpbroadcast")):
        for w in widths:
            if name == "vbroadcastsd" and w == 128:
                continue
            cases += [(name, (tables[w][i], XMM[(i + 7) % count])) for i in range(count)]
            cases += [(name, (tables[w][i % count], m)) for i, m in enumerate(memory_forms(element_bits))]
        return cases
    if name == "vextractf32x4":  # a 128-bit block of a ymm or zmm (disp8 in units of 16 bytes at either length)
        cases += [(name, (XMM[i], tables[w][(i + 3) % count], i % (w // 128)))
                  for w in (256, 512) for i in range(count)]
        return cases + [(name, (m, tables[512][i % count], 3)) for i, m in enumerate(memory_forms(128))]
    if name in ("vextractf128", "vextracti128", "vextractf32x8"):
        small, big = (256, 512) if name == "vextractf32x8" else (128, 256)
        cases += [(name, (tables[small][i], tables[big][(i + 3) % count], 1)) for i in range(count)]
        return cases + [(name, (m, tables[big][i % count], 1)) for i, m in enumerate(memory_forms(small))]
    if name == "vinsertf32x8":
        cases += [(name, (a, b, YMM[c.number], 1)) for a, b, c in triples(ZMM[:count])]
        return cases + [(name, (ZMM[i % count], ZMM[(i + 2) % count], m, 1)) for i, m in enumerate(memory_forms(256))]
    if name in ("vpmovm2d", "vpmovd2m"):  # between a vector register and a mask register
        pairs = [(tables[w][i], MASK[(i + w // 128) % 8]) for w in widths for i in range(count)]
        return [(name, pair if name == "vpmovm2d" else pair[::-1]) for pair in pairs]
    if name in ("vinsertf128", "vinserti128"):
        cases += [(name, (a, b, XMM[c.number], 1)) for a, b, c in triples(YMM[:count])]
        return cases + [(name, (YMM[i % count], YMM[(i + 2) % count], m, 1)) for i, m in enumerate(memory_forms(128))]
    if name == "vperm2f128":
        cases += [(name, (*t, 0x21)) for t in triples(YMM[:count])]
        return cases + [(name, (YMM[i % 16], YMM[(i + 2) % 16], m, 0x31)) for i, m in enumerate(memory_forms(256))]
    if name in ("vmovhlps",):
        return [(name, t) for t in triples(XMM[:count])]
    narrowing = name in ("vcvtpd2ps", "vcvttpd2dq")
    widening = op.tuple == "half" and name != "vcvtps2ph"
    for w in widths:
        table, memory_bits = tables[w], (element_bits if scalar else w)
        if scalar and w != 128:
            continue
        if name == "vptest" and w == 512:
            continue
        if widening:
            half = tables[max(w // 2, 128)]
            cases += [(name, (table[i], half[(i + 9) % count])) for i in range(count)]
            cases += [(name, (table[i % count], m)) for i, m in enumerate(memory_forms(w // 2))]
            continue
        if narrowing:
            half = tables[max(w // 2, 128)]
            cases += [(name, (half[i], table[(i + 9) % count])) for i in range(count)]
            cases += [(name, (half[i % count], m)) for i, m in enumerate(memory_forms(w))]
            continue
        if name == "vcvtps2ph":
            half = tables[max(w // 2, 128)]
            cases += [(name, (half[i], table[(i + 9) % count], 4)) for i in range(count)]
            cases += [(name, (m, table[i % count], 4)) for i, m in enumerate(memory_forms(w // 2))]
            continue
        if op.form in ("rvm", "rvmi"):
            cases += [(name, (*t, *imm)) for t in triples(table)]
            cases += [
                (name, (table[i % count], table[(i + 3) % count], m, *imm))
                for i, m in enumerate(memory_forms(memory_bits))
            ]
        elif op.form == "rvmr":
            cases += [(name, (*t, table[(t[0].number + 2) % count])) for t in triples(table)]
            cases += [
                (name, (table[i % count], table[(i + 3) % count], m, table[(i + 6) % count]))
                for i, m in enumerate(memory_forms(memory_bits))
            ]
        elif op.form in ("rm", "rmi", "load_store"):
            cases += [(name, (table[i], table[(i + 9) % count], *imm)) for i in range(count)]
            cases += [(name, (table[i % count], m, *imm)) for i, m in enumerate(memory_forms(memory_bits))]
            if op.form == "load_store":
                cases += [(name, (m, table[i % count])) for i, m in enumerate(memory_forms(memory_bits))]
        elif op.form == "mr":  # a store only (vmovntps): memory destination, every register as the source
            cases += [(name, (m, table[i % count])) for i, m in enumerate(memory_forms(memory_bits))]
        elif op.form == "vmi":
            cases += [(name, (table[i], table[(i + 9) % count], 7)) for i in range(count)]
            if evex:  # only the EVEX form shifts a memory operand
                cases += [(name, (table[i % count], m, 7)) for i, m in enumerate(memory_forms(memory_bits))]
    return cases


@pytest.mark.parametrize("name", sorted(n for n, op in VECTOR_OPS.items() if op.has_vex))
def test_vex(name: str) -> None:
    check(vector_cases(name, VECTOR_OPS[name], evex=False))


EVEX_MASKED = {"vblendmps"}
NARROWING = {"vcvtpd2ps", "vcvttpd2dq"}


@pytest.mark.parametrize(
    "name",
    sorted(n for n, op in VECTOR_OPS.items() if op.has_evex and n not in EVEX_MASKED and not n.startswith("vcmp")),
)
def test_evex(name: str) -> None:
    cases = [
        case
        for case in vector_cases(name, VECTOR_OPS[name], evex=True)
        if any(isinstance(o, Register) and o.kind == "vec" and (o.number >= 16 or o.bits == 512) for o in case[1])
        or not VECTOR_OPS[name].has_vex
    ]
    check(cases)


@pytest.mark.parametrize(
    "name",
    sorted(
        n
        for n, op in VECTOR_OPS.items()
        if op.has_evex and op.tuple == "full" and op.form in ("rvm", "rm") and n not in EVEX_MASKED | NARROWING
    ),
)
def test_evex_broadcast(name: str) -> None:
    op, failures = VECTOR_OPS[name], []
    lanes = 512 // (op.element * 8)
    for i, memory in enumerate(memory_forms(op.element * 8, broadcast=True)):
        operands: tuple[Operand, ...] = (
            (ZMM[i % 32], ZMM[(i + 7) % 32], memory) if op.form == "rvm" else (ZMM[i % 32], memory)
        )
        code = Assembler.encode(name, operands).data
        mnemonic, decoded, text, _ = decode(code)
        if mnemonic != name or not same(describe(operands), decoded) or f"{{1to{lanes}}}" not in text:
            failures.append(f"{operands} -> {code.hex()} decodes as {text!r}")
    assert not failures, failures[:5]


def test_evex_masks() -> None:
    for k in MASK[1:]:
        check([("vblendmps", t) for t in [(ZMM[i], ZMM[(i + 5) % 32], ZMM[(i + 11) % 32]) for i in range(32)]], mask=k)
        check([("vaddps", (ZMM[i % 32], ZMM[(i + 5) % 32], m)) for i, m in enumerate(memory_forms(512))], mask=k)
        cases: list[Case] = [("vcmpps", (k, ZMM[i], ZMM[(i + 3) % 32], p)) for i in range(32) for p in range(8)]
        check(cases + [("vcmpps", (k, ZMM[i % 32], m, 2)) for i, m in enumerate(memory_forms(512))])


@pytest.mark.parametrize("name", sorted(n for n, op in VECTOR_OPS.items() if op.form == "vmi" and op.has_evex))
def test_shift_of_memory_by_an_immediate_takes_evex_even_for_low_registers(name: str) -> None:
    # VEX has no memory form of these shifts; an encoder choosing VEX for xmm0-15 wrote undefined instructions
    tables = {128: XMM, 256: YMM}
    check([(name, (tables[w][i % 16], m, 7)) for w in (128, 256) for i, m in enumerate(memory_forms(w))])


def test_evex_zeroing_masks() -> None:
    for k in MASK[1:]:
        for i in range(32):
            operands = (ZMM[i], ZMM[(i + 5) % 32], ZMM[(i + 11) % 32])
            text = decode(Assembler.encode("vaddps", operands, k, zeroing=True).data)[2]
            assert text == f"vaddps {operands[0].name} {{{k.name}}} {{z}}, {operands[1].name}, {operands[2].name}", text


def test_remembered_encodings_differ_in_everything_that_changes_the_bytes() -> None:
    # the assembler remembers encodings: the same instruction with an opmask, with zeroing, or with an immediate of
    # another type must not be served the entry of the first; capstone reads each
    operands = (ZMM[1], ZMM[2], ZMM[3])
    texts = [decode(Assembler.encode("vaddps", operands, mask, zeroing).data)[2]
             for mask, zeroing in [(None, False), (MASK[1], False), (MASK[1], True), (None, False)]]
    assert texts == ["vaddps zmm1, zmm2, zmm3", "vaddps zmm1 {k1}, zmm2, zmm3", "vaddps zmm1 {k1} {z}, zmm2, zmm3",
                     "vaddps zmm1, zmm2, zmm3"]
    assert decode(Assembler.encode("add", (GPR64[0], True)).data)[2] == "add rax, 1"
    assert decode(Assembler.encode("add", (GPR64[0], 1)).data)[2] == "add rax, 1"
    for _ in range(2):  # a refusal is not remembered as an encoding
        with pytest.raises(EncodingError, match="operand sizes differ"):
            Assembler.encode("add", (GPR64[0], GPR32[1]))


def test_bad_operands_are_refused() -> None:
    with pytest.raises(EncodingError, match="rsp cannot be a memory index"):
        Assembler.encode("mov", (GPR64[0], Memory(GPR64[1], GPR64[4], 2, 0, 64)))
    with pytest.raises(EncodingError, match="operand sizes differ"):
        Assembler.encode("add", (GPR64[0], GPR32[1]))
    with pytest.raises(EncodingError, match="no EVEX"):
        Assembler.encode("vblendvps", (XMM[16], XMM[1], XMM[2], XMM[3]))
    with pytest.raises(EncodingError, match="no instruction 'frobnicate'"):
        Assembler.encode("frobnicate", ())
    with pytest.raises(EncodingError, match="shift amount"):
        Assembler.encode("shl", (GPR64[0], GPR8[2]))
    with pytest.raises(EncodingError, match="physical register"):
        unallocated = Memory(view(rcx, 64), None, 1, 0, 64).with_registers(object(), None)  # type: ignore[arg-type]
        Assembler.encode("mov", (GPR64[0], unallocated))
