"""SSE/AVX/AVX2/FMA/F16C instructions through VEX, and their AVX-512 forms through EVEX.

`VECTOR_OPS` maps an Intel mnemonic to its encoding: opcode map and mandatory prefix, W, operand form, and which
prefixes can carry it. `encode_vector` picks VEX when it can (registers 0-15, at most 256 bits, no broadcast or
mask) and EVEX otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

from tiny_cpu.x86.encoding import Encoded, EncodingError, evex, immediate, vex
from tinycore.renderer.isa import Memory, Operand, Register

_PP = {"": 0, "66": 1, "F3": 2, "F2": 3}
_MAP = {"0F": 1, "0F38": 2, "0F3A": 3}


@dataclass(frozen=True)
class VectorOp:
    """One mnemonic's encoding.

    form: how operands map to fields: "rvm" (dst=reg, src1=vvvv, src2=r/m), "rmv" (dst=reg, src=r/m, count=vvvv),
    "rm" (dst=reg, src=r/m), "mr" (dst=r/m, src=reg), "vmi" (dst=vvvv, src=r/m, reg=digit), "rvmr" (fourth register
    in imm8[7:4]), "load_store" (rm when the destination is a vector register, else mr with `store_opcode`),
    "scalar_move" (rm/mr with memory, rvm with three registers); a trailing "i" takes an imm8. w=None takes W from
    the general-register operand's size.
    vex_w: W under VEX where it differs from W under EVEX.
    tuple: EVEX disp8 unit: "full" (the vector, or the element when broadcast), "vector" (the vector; no broadcast),
    "scalar" (one element), "half" (half the vector), "xmm" (128 bits at any length: vextractf32x4).
    """

    map_select: int
    pp: int
    opcode: int
    w: int | None
    form: str
    has_vex: bool = True
    has_evex: bool = False
    tuple: str = "full"
    element: int = 4
    digit: int = 0
    store_opcode: int = 0
    vex_w: int | None = None


VECTOR_OPS: dict[str, VectorOp] = {}


def _add(name: str, prefix: str, map_name: str, opcode: int, w: int | None, form: str, **options: object) -> None:
    VECTOR_OPS[name] = VectorOp(_MAP[map_name], _PP[prefix], opcode, w, form, **options)  # type: ignore[arg-type]


# float arithmetic in the four flavours: packed single/double, scalar single/double
_FLAVOURS = {
    "ps": ("", 0, "full", 4),
    "pd": ("66", 1, "full", 8),
    "ss": ("F3", 0, "scalar", 4),
    "sd": ("F2", 1, "scalar", 8),
}
for _base, _opcode in {"add": 0x58, "mul": 0x59, "sub": 0x5C, "min": 0x5D, "div": 0x5E, "max": 0x5F}.items():
    for _suffix, (_prefix, _w, _tuple, _element) in _FLAVOURS.items():
        _add(f"v{_base}{_suffix}", _prefix, "0F", _opcode, _w, "rvm", has_evex=True, tuple=_tuple, element=_element)
for _suffix, (_prefix, _w, _tuple, _element) in _FLAVOURS.items():
    _add(
        f"vsqrt{_suffix}",
        _prefix,
        "0F",
        0x51,
        _w,
        "rm" if _tuple == "full" else "rvm",
        has_evex=True,
        tuple=_tuple,
        element=_element,
    )
    _add(f"vcmp{_suffix}", _prefix, "0F", 0xC2, _w, "rvmi", has_evex=True, tuple=_tuple, element=_element)
for _suffix, (_prefix, _w, _, _element) in list(_FLAVOURS.items())[:2]:
    for _base, _opcode in {"and": 0x54, "andn": 0x55, "or": 0x56, "xor": 0x57, "unpckl": 0x14, "unpckh": 0x15}.items():
        _add(f"v{_base}{_suffix}", _prefix, "0F", _opcode, _w, "rvm", has_evex=True, element=_element)
    _add(f"vmovu{_suffix}", _prefix, "0F", 0x10, _w, "load_store", has_evex=True, element=_element, store_opcode=0x11)
    _add(f"vmova{_suffix}", _prefix, "0F", 0x28, _w, "load_store", has_evex=True, element=_element, store_opcode=0x29)
    _add(f"vshuf{_suffix}", _prefix, "0F", 0xC6, _w, "rvmi", has_evex=True, element=_element)
    _add(f"vhadd{_suffix}", "F2" if _suffix == "ps" else "66", "0F", 0x7C, 0, "rvm")
# a store around the cache (tiny_cpu.x86.streaming): memory destination only, aligned to the vector's size
_add("vmovntps", "", "0F", 0x2B, 0, "mr", has_evex=True)
_add("vmovss", "F3", "0F", 0x10, 0, "scalar_move", has_evex=True, tuple="scalar", store_opcode=0x11)
_add("vmovsd", "F2", "0F", 0x10, 1, "scalar_move", has_evex=True, tuple="scalar", element=8, store_opcode=0x11)
_add("vmovdqu", "F3", "0F", 0x6F, 0, "load_store", store_opcode=0x7F)
_add("vmovdqa", "66", "0F", 0x6F, 0, "load_store", store_opcode=0x7F)
_add("vmovdqu32", "F3", "0F", 0x6F, 0, "load_store", has_vex=False, has_evex=True, store_opcode=0x7F)
_add("vmovdqu64", "F3", "0F", 0x6F, 1, "load_store", has_vex=False, has_evex=True, element=8, store_opcode=0x7F)
_add("vmovd", "66", "0F", 0x6E, 0, "load_store", store_opcode=0x7E)
_add("vmovq", "66", "0F", 0x6E, 1, "load_store", store_opcode=0x7E)
_add("vmovmskps", "", "0F", 0x50, 0, "rm")
_add("vmovshdup", "F3", "0F", 0x16, 0, "rm", has_evex=True, tuple="vector")
_add("vmovhlps", "", "0F", 0x12, 0, "rvm")
_add("vbroadcastss", "66", "0F38", 0x18, 0, "rm", has_evex=True, tuple="scalar")
_add("vbroadcastsd", "66", "0F38", 0x19, 1, "rm", has_evex=True, tuple="scalar", element=8, vex_w=0)
_add("vpbroadcastd", "66", "0F38", 0x58, 0, "rm", has_evex=True, tuple="scalar")
_add("vpbroadcastq", "66", "0F38", 0x59, 1, "rm", has_evex=True, tuple="scalar", element=8, vex_w=0)
_add("vblendvps", "66", "0F3A", 0x4A, 0, "rvmr")
_add("vblendvpd", "66", "0F3A", 0x4B, 0, "rvmr")
_add("vpblendvb", "66", "0F3A", 0x4C, 0, "rvmr")
_add("vblendmps", "66", "0F38", 0x65, 0, "rvm", has_vex=False, has_evex=True)
_add("vptest", "66", "0F38", 0x17, 0, "rm")
_add("vroundps", "66", "0F3A", 0x08, 0, "rmi")
_add("vroundss", "66", "0F3A", 0x0A, 0, "rvmi", tuple="scalar")
_add("vroundsd", "66", "0F3A", 0x0B, 0, "rvmi", tuple="scalar", element=8)
_add("vpermilps", "66", "0F3A", 0x04, 0, "rmi", has_evex=True)
_add("vpshufd", "66", "0F", 0x70, 0, "rmi", has_evex=True)
_add("vextractf128", "66", "0F3A", 0x19, 0, "mri")
_add("vextracti128", "66", "0F3A", 0x39, 0, "mri")
_add("vinsertf128", "66", "0F3A", 0x18, 0, "rvmi")
_add("vinserti128", "66", "0F3A", 0x38, 0, "rvmi")
_add("vperm2f128", "66", "0F3A", 0x06, 0, "rvmi")
_add("vextractf32x8", "66", "0F3A", 0x1B, 0, "mri", has_vex=False, has_evex=True, tuple="half")
_add("vextractf32x4", "66", "0F3A", 0x19, 0, "mri", has_vex=False, has_evex=True, tuple="xmm")
_add("vinsertf32x8", "66", "0F3A", 0x1A, 0, "rvmi", has_vex=False, has_evex=True, tuple="half")
# 512-bit forms of what AVX2 spells otherwise: lane masks to and from mask registers (a compare writes one; there is
# no vblendvps on zmm), a bitwise select (vpternlogd 0xCA: dst ? b : c bit by bit), rounding (vroundps)
_add("vpmovm2d", "F3", "0F38", 0x38, 0, "rm", has_vex=False, has_evex=True, tuple="vector")
_add("vpmovd2m", "F3", "0F38", 0x39, 0, "rm", has_vex=False, has_evex=True, tuple="vector")
_add("vpternlogd", "66", "0F3A", 0x25, 0, "rvmi", has_vex=False, has_evex=True)
_add("vrndscaleps", "66", "0F3A", 0x08, 0, "rmi", has_vex=False, has_evex=True)
# fused multiply-add: 132, 213 and 231 orders of add, subtract and negated add
for _kind, _fma_opcode in {"fmadd": 0x98, "fmsub": 0x9A, "fnmadd": 0x9C}.items():
    for _order, _offset in {"132": 0, "213": 0x10, "231": 0x20}.items():
        for _suffix, (_, _w, _tuple, _element) in _FLAVOURS.items():
            _add(
                f"v{_kind}{_order}{_suffix}",
                "66",
                "0F38",
                _fma_opcode + _offset + (_tuple == "scalar"),
                _w,
                "rvm",
                has_evex=True,
                tuple=_tuple,
                element=_element,
            )
# BMI2 shifts by a register other than cl (VEX-encoded general-register instructions): dst, source, count
for _name, _prefix in {"shlx": "66", "shrx": "F2", "sarx": "F3"}.items():
    _add(_name, _prefix, "0F38", 0xF7, None, "rmv")
# conversions
_add("vcvtdq2ps", "", "0F", 0x5B, 0, "rm", has_evex=True)
_add("vcvtps2dq", "66", "0F", 0x5B, 0, "rm", has_evex=True)
_add("vcvttps2dq", "F3", "0F", 0x5B, 0, "rm", has_evex=True)
_add("vcvtps2pd", "", "0F", 0x5A, 0, "rm", has_evex=True, tuple="half")
_add("vcvtpd2ps", "66", "0F", 0x5A, 1, "rm", has_evex=True, element=8)
_add("vcvtdq2pd", "F3", "0F", 0xE6, 0, "rm", has_evex=True, tuple="half")
_add("vcvttpd2dq", "66", "0F", 0xE6, 1, "rm", has_evex=True, element=8)
_add("vcvtss2sd", "F3", "0F", 0x5A, 0, "rvm", has_evex=True, tuple="scalar")
_add("vcvtsd2ss", "F2", "0F", 0x5A, 1, "rvm", has_evex=True, tuple="scalar", element=8)
_add("vcvtsi2ss", "F3", "0F", 0x2A, None, "rvm", tuple="scalar")
_add("vcvtsi2sd", "F2", "0F", 0x2A, None, "rvm", tuple="scalar")
_add("vcvttss2si", "F3", "0F", 0x2C, None, "rm", tuple="scalar")
_add("vcvttsd2si", "F2", "0F", 0x2C, None, "rm", tuple="scalar", element=8)
_add("vcvtph2ps", "66", "0F38", 0x13, 0, "rm", has_evex=True, tuple="half")
_add("vcvtps2ph", "66", "0F3A", 0x1D, 0, "mri", has_evex=True, tuple="half")
# integer vectors
for _name, _opcode in {
    "vpaddb": 0xFC,
    "vpaddw": 0xFD,
    "vpaddd": 0xFE,
    "vpaddq": 0xD4,
    "vpsubb": 0xF8,
    "vpsubw": 0xF9,
    "vpsubd": 0xFA,
    "vpsubq": 0xFB,
    "vpmullw": 0xD5,
}.items():
    _add(
        _name,
        "66",
        "0F",
        _opcode,
        1 if _name.endswith("q") else 0,
        "rvm",
        has_evex=True,
        element=8 if _name.endswith("q") else 4,
        tuple="full" if _name[-1] in "dq" else "vector",
    )
for _name, _opcode in {
    "vpand": 0xDB,
    "vpandn": 0xDF,
    "vpor": 0xEB,
    "vpxor": 0xEF,
    "vpcmpeqb": 0x74,
    "vpcmpeqd": 0x76,
    "vpcmpgtd": 0x66,
}.items():
    _add(_name, "66", "0F", _opcode, 0, "rvm")
for _name, _opcode in {"vpandd": 0xDB, "vpord": 0xEB, "vpxord": 0xEF}.items():
    _add(_name, "66", "0F", _opcode, 0, "rvm", has_vex=False, has_evex=True)
    _add(_name[:-1] + "q", "66", "0F", _opcode, 1, "rvm", has_vex=False, has_evex=True, element=8)
_add("vpcmpeqq", "66", "0F38", 0x29, 0, "rvm")
_add("vpcmpgtq", "66", "0F38", 0x37, 0, "rvm")
_add("vpmulld", "66", "0F38", 0x40, 0, "rvm", has_evex=True)
_add("vpminsd", "66", "0F38", 0x39, 0, "rvm", has_evex=True)
_add("vpmaxsd", "66", "0F38", 0x3D, 0, "rvm", has_evex=True)
_add("vpsllvd", "66", "0F38", 0x47, 0, "rvm", has_evex=True)
_add("vpsrlvd", "66", "0F38", 0x45, 0, "rvm", has_evex=True)
_add("vpsravd", "66", "0F38", 0x46, 0, "rvm", has_evex=True)
for _name, (_opcode, _digit) in {
    "vpsrlw": (0x71, 2),
    "vpsraw": (0x71, 4),
    "vpsllw": (0x71, 6),
    "vpsrld": (0x72, 2),
    "vpsrad": (0x72, 4),
    "vpslld": (0x72, 6),
    "vpsrlq": (0x73, 2),
    "vpsllq": (0x73, 6),
}.items():
    _add(
        _name,
        "66",
        "0F",
        _opcode,
        1 if _name.endswith("q") else 0,
        "vmi",
        has_evex=_name[-1] in "dq",
        digit=_digit,
        element=8 if _name.endswith("q") else 4,
    )


def _vector_number(operand: Operand) -> int:
    if isinstance(operand, Register):
        return operand.number
    raise EncodingError(f"expected a register, not {operand!r}")


def _rm_operand(operand: Operand) -> Register | Memory:
    if isinstance(operand, (Register, Memory)):
        return operand
    raise EncodingError(f"expected a register or memory operand, not {operand!r}")


def _imm(operand: Operand) -> bytes:
    if not isinstance(operand, int):
        raise EncodingError(f"expected an 8-bit immediate, not {operand!r}")
    return immediate(operand, 1)


def encode_vector(
    name: str, operands: tuple[Operand, ...], mask: Register | None = None, zeroing: bool = False
) -> Encoded:
    """Encode vector instruction `name` with Intel-order `operands`, optionally under opmask `mask` (EVEX)."""
    op = VECTOR_OPS.get(name)
    if op is None:
        raise EncodingError(f"no vector instruction {name!r}; known: {', '.join(sorted(VECTOR_OPS))}")
    form, opcode = op.form, op.opcode
    if form == "load_store":
        loading = isinstance(operands[0], Register) and operands[0].kind == "vec"
        form, opcode = ("rm", op.opcode) if loading else ("mr", op.store_opcode)
    elif form == "scalar_move":
        if len(operands) == 3:
            form = "rvm"
        elif isinstance(operands[0], Memory):
            form, opcode = "mr", op.store_opcode
        else:
            form = "rm"
    expected = {"rvm": 3, "rvmi": 4, "rm": 2, "rmi": 3, "mr": 2, "mri": 3, "vmi": 3, "rvmr": 4, "rmv": 3}[form]
    if len(operands) != expected:
        raise EncodingError(f"{name} takes {expected} operands, got {len(operands)}")
    imm = b""
    shifts_memory = False
    if form == "rvm":
        reg, vvvv, rm = _vector_number(operands[0]), _vector_number(operands[1]), _rm_operand(operands[2])
    elif form == "rvmi":
        reg, vvvv, rm = _vector_number(operands[0]), _vector_number(operands[1]), _rm_operand(operands[2])
        imm = _imm(operands[3])
    elif form == "rvmr":
        reg, vvvv, rm = _vector_number(operands[0]), _vector_number(operands[1]), _rm_operand(operands[2])
        imm = bytes([_vector_number(operands[3]) << 4])
    elif form == "rmv":
        reg, rm, vvvv = _vector_number(operands[0]), _rm_operand(operands[1]), _vector_number(operands[2])
    elif form in ("rm", "rmi"):
        reg, vvvv, rm = _vector_number(operands[0]), 0, _rm_operand(operands[1])
        if form == "rmi":
            imm = _imm(operands[2])
    elif form in ("mr", "mri"):
        rm, reg, vvvv = _rm_operand(operands[0]), _vector_number(operands[1]), 0
        if form == "mri":
            imm = _imm(operands[2])
    else:  # vmi: the destination is in vvvv and the opcode extension in reg
        vvvv, rm, reg, imm = _vector_number(operands[0]), _rm_operand(operands[1]), op.digit, _imm(operands[2])
        if isinstance(rm, Memory) and not op.has_evex:
            raise EncodingError(f"{name} shifts a register, not memory")
        shifts_memory = isinstance(rm, Memory)  # only the EVEX form of a shift by an immediate reads memory
    registers = [o for o in operands if isinstance(o, Register)]
    memory = next((o for o in operands if isinstance(o, Memory)), None)
    widths = [r.bits for r in registers if r.kind == "vec"]
    if memory is not None and not memory.broadcast and op.tuple == "full" and memory.bits >= 128:
        widths.append(memory.bits)
    length = {128: 0, 256: 1, 512: 2}[max(widths, default=128)]
    general: list[Register | Memory] = [r for r in registers if r.kind == "gpr"] or ([memory] if memory else [])
    w = op.w if op.w is not None else int(any(g.bits == 64 for g in general))
    needs_evex = (
        length == 2
        or any(r.number >= 16 for r in registers if r.kind == "vec")
        or mask is not None
        or (memory is not None and memory.broadcast)
        or shifts_memory
        or any(r.kind == "mask" for r in registers)
    )
    if op.has_vex and not needs_evex:
        return vex(op.map_select, op.pp, w if op.vex_w is None else op.vex_w, length, opcode, reg, vvvv, rm, imm)
    if not op.has_evex:
        raise EncodingError(f"{name} has no EVEX (AVX-512) form for {operands!r}")
    if memory is not None and memory.broadcast and op.tuple != "full":
        raise EncodingError(f"{name} cannot broadcast a memory operand")
    element = op.element
    unit = {
        "full": element if memory is not None and memory.broadcast else 16 << length,
        "vector": 16 << length,
        "scalar": element,
        "half": 8 << length,
        "xmm": 16,
    }[op.tuple]
    return evex(
        op.map_select,
        op.pp,
        w,
        length,
        opcode,
        reg,
        vvvv,
        rm,
        disp8_scale=unit,
        broadcast=memory is not None and memory.broadcast,
        mask=0 if mask is None else mask.number,
        zeroing=zeroing,
        imm=imm,
    )
