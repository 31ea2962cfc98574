"""The PTX renderer (DEV=NV:PTX): PTX assembly written straight from the scalar linear program, no NVRTC.

Values are virtual registers of their class (%p, %h 16-bit, %r, %rd, %f, %fd) that ptxas allocates; buffers are
parameters converted to global addresses, DEFINE_REG / DEFINE_LOCAL .local / .shared arrays. Narrow integers live in
32-bit registers and wrap after each op; codegen computes half and bfloat16 in float32. exp2, log2 and sin are the
hardware's approximations, as CUDA's fast math."""
from __future__ import annotations

import functools
import re

from tinycore.codegen.ssa_lowering import ssa_lowering
from tinycore.dtype import DType, PtrDType, dtypes
from tinycore.renderer.ssa import SSAContext, SSARenderer, fill_types, float_bits, identifier, ssa_rules
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp

# dtype -> (register class, arithmetic type suffix, memory type suffix)
_TYPES: dict[DType, tuple[str, str, str]] = {
    dtypes.bool: ("p", "pred", "u8"), dtypes.int8: ("r", "s32", "s8"), dtypes.uint8: ("r", "u32", "u8"),
    dtypes.int16: ("r", "s32", "s16"), dtypes.uint16: ("r", "u32", "u16"), dtypes.int32: ("r", "s32", "s32"),
    dtypes.uint32: ("r", "u32", "u32"), dtypes.int64: ("rd", "s64", "s64"), dtypes.uint64: ("rd", "u64", "u64"),
    dtypes.float16: ("h", "f16", "b16"), dtypes.bfloat16: ("h", "bf16", "b16"), dtypes.float32: ("f", "f32", "f32"),
    dtypes.float64: ("fd", "f64", "f64")}
_REGISTER_TYPES = {"p": "pred", "h": "b16", "r": "b32", "rd": "b64", "f": "f32", "fd": "f64"}
_NARROW = {dtypes.int8: "s8", dtypes.uint8: "u8", dtypes.int16: "s16", dtypes.uint16: "u16"}
_HALVES = frozenset({dtypes.float16, dtypes.bfloat16})
_ATOMIC_DTYPES = frozenset(_TYPES) - {dtypes.bool, *_NARROW}
# ALU op -> its instructions. Fields: r the result, a b c the operands, temporaries xp (a predicate) and xr (32-bit),
# t the arithmetic type, s its signed twin, w / bits the register type, lo ".lo" for integers, mad the multiply-add,
# ne the inequality, shift the move of a shift amount into a 32-bit register.
_ALU: dict[Ops, str] = {
    Ops.CMPLT: "setp.lt.{t} {r}, {a}, {b};", Ops.CMPEQ: "setp.eq.{t} {r}, {a}, {b};",
    Ops.CMPNE: "setp.{ne}.{t} {r}, {a}, {b};", Ops.WHERE: "selp.{w} {r}, {b}, {c}, {a};",
    Ops.AND: "and.{bits} {r}, {a}, {b};", Ops.OR: "or.{bits} {r}, {a}, {b};", Ops.XOR: "xor.{bits} {r}, {a}, {b};",
    Ops.NEG: "neg.{s} {r}, {a};", Ops.ADD: "add.{t} {r}, {a}, {b};", Ops.SUB: "sub.{t} {r}, {a}, {b};",
    Ops.MUL: "mul{lo}.{t} {r}, {a}, {b};", Ops.MULACC: "{mad}.{t} {r}, {a}, {b}, {c};",
    Ops.IDIV: "div.{t} {r}, {a}, {b};", Ops.MOD: "rem.{t} {r}, {a}, {b};",  # codegen selects 0 for a zero divisor
    Ops.SHL: "{shift} {xr}, {b}; shl.{bits} {r}, {a}, {xr};", Ops.SHR: "{shift} {xr}, {b}; shr.{t} {r}, {a}, {xr};",
    Ops.FDIV: "div.rn.{t} {r}, {a}, {b};", Ops.SQRT: "sqrt.rn.{t} {r}, {a};", Ops.RECIPROCAL: "rcp.rn.{t} {r}, {a};",
    Ops.TRUNC: "cvt.rzi.{t}.{t} {r}, {a};", Ops.EXP2: "ex2.approx.f32 {r}, {a};", Ops.LOG2: "lg2.approx.f32 {r}, {a};",
    Ops.SIN: "sin.approx.f32 {r}, {a};"}
_PREDICATE_ALU: dict[Ops, str] = {  # bool values (codegen's "SSA lowering" makes the rest logic)
    Ops.WHERE: "and.pred {r}, {a}, {b}; not.pred {xp}, {a}; and.pred {xp}, {xp}, {c}; or.pred {r}, {r}, {xp};",
    Ops.NEG: "not.pred {r}, {a};"}
_FLOAT_ONLY = frozenset({Ops.FDIV, Ops.SQRT, Ops.RECIPROCAL, Ops.TRUNC, Ops.EXP2, Ops.LOG2, Ops.SIN})
_COMPARISONS = frozenset({Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ})
_MODULE = ".version {}\n.target {}\n.address_size 64\n\n.visible .entry {}(\n{}\n)\n{{\n{}\tret;\n}}\n"

def _info(dtype: DType) -> tuple[str, str, str]:
    if dtype.count != 1:
        raise ValueError(f"the PTX renderer renders scalar programs only, got {dtype}: vectors should not reach it")
    if (found := _TYPES.get(dtype.scalar)) is None:
        raise ValueError(f"the PTX renderer has no type for {dtype}")
    return found

@functools.cache
def _alu_plan(op: Ops, dtype: DType) -> tuple[str, tuple[tuple[str, str], ...], tuple[str, ...]]:
    """`dtype`'s register class, `op`'s temporaries (field, class) and instructions on `dtype`, registers left out."""
    kind, arithmetic, _ = _info(dtype)
    integer = not dtypes.is_float(dtype) and dtype != dtypes.bool
    template = (_PREDICATE_ALU.get(op) if kind == "p" else None) or _ALU.get(op)
    if template is None or (integer and op in _FLOAT_ONLY) or (not integer and op in (Ops.IDIV, Ops.MOD)):
        raise ValueError(f"the PTX renderer cannot render {op} on {dtype}")
    if op in (Ops.EXP2, Ops.LOG2, Ops.SIN) and dtype != dtypes.float32:
        raise ValueError(f"the PTX renderer computes {op} in float32 only; cast {dtype} to float32 first or use "
                         "the CUDA renderer (DEV=NV:CUDA)")
    fields = dict(t=arithmetic, w=_REGISTER_TYPES[kind], s=arithmetic.replace("u", "s"), lo=".lo" if integer else "",
                  bits={"p": "pred", "r": "b32", "rd": "b64"}.get(kind, ""), mad="mad.lo" if integer else "fma.rn",
                  ne="ne" if integer else "neu", shift=f"cvt.u32.{arithmetic}" if kind == "rd" else "mov.b32")
    temporaries = tuple((f"x{name}", name) for name in dict.fromkeys(re.findall(r"\{x([pr])\}", template)))
    instructions = fill_types(re.findall(r"\S[^;]*;", template), fields, ("r", "a", "b", "c", "xp", "xr"))
    return kind, temporaries, tuple("\t" + instruction for instruction in instructions)

class PTXContext(SSAContext):
    """The state of rendering one linear program into PTX: registers, lines, parameters, labels, open blocks."""

    language, emulated_floats = "PTX", _HALVES
    renderer: PTXRenderer

    def __init__(self, uops: list[UOp], renderer: PTXRenderer):
        super().__init__(uops, renderer)
        self.counts, self.labels, self.parameters = {name: 0 for name in _REGISTER_TYPES}, 0, list[str]()
        self.loops: dict[UOp, tuple[str, str, str]] = {}  # RANGE -> (counter, head label, exit label)

    def new(self, kind: str) -> str:
        """A fresh virtual register of class `kind`."""
        self.counts[kind] += 1
        return f"%{kind}{self.counts[kind] - 1}"

    def label(self, prefix: str) -> str:
        """A fresh label name."""
        self.labels += 1
        return f"{prefix.upper()}_{self.labels}"

    def constant(self, value: object, dtype: DType) -> str:
        """A register holding the constant `value` of `dtype` (materialised where it is used)."""
        register, scalar, size = self.new(_info(dtype)[0]), dtype.scalar, dtype.scalar.itemsize
        if scalar == dtypes.bool:
            self.emit(f"setp.ne.u32 {register}, {1 if value else 0}, 0;")
        elif dtypes.is_float(scalar):
            bits = float_bits(float(value), scalar)  # type: ignore[arg-type]
            self.emit(f"mov.b{8 * size} {register}, {({4: '0f', 8: '0d'}).get(size, '0x')}{bits:0{2 * size}X};")
        else:
            self.emit(f"mov.b{(size := 64 if size == 8 else 32)} {register}, "
                      f"{int(value) & ((1 << size) - 1)};")  # type: ignore[call-overload]
        return register

    def wrap(self, register: str, dtype: DType) -> str:
        """Sign- or zero-extend the low bits of a narrow integer result (per-op wrap-around)."""
        if (narrow := _NARROW.get(dtype.scalar)) is not None:
            self.emit(f"cvt.{narrow[0]}32.{narrow} {register}, {register};")
        return register

    def run(self, name: str) -> str:
        """The PTX module: the UOps rendered by the rules under the entry's header (a MOCK GPU's: its program too)."""
        self.render_uops(self.renderer.string_rewrite)
        body = [f"\t.reg .{_REGISTER_TYPES[kind]} %{kind}<{count}>;" for kind, count in self.counts.items() if count]
        parameters = ",\n".join(f"\t{parameter}" for parameter in self.parameters)
        source = _MODULE.format(self.renderer.ptx_version, self.renderer.arch, name, parameters,
                                "".join(f"{line}\n" for line in body + self.declarations + self.lines))
        if self.renderer.embed_program:
            from tiny_nv.mock import embed_program
            return embed_program(source, self.uops)
        return source

    def array(self, uop: UOp, space: str, prefix: str) -> str:
        """DEFINE_REG / DEFINE_LOCAL: a byte array declared in `space` (.local or .shared), its address a register."""
        assert isinstance(pointer := uop.dtype, PtrDType)
        name, register = f"{prefix}{len(self.declarations)}", self.new("rd")
        size = max(pointer.size, 1) * max(pointer.base.itemsize, 1)
        self.declarations.append(f"\t.{space} .align 16 .b8 {name}[{size}];")
        self.emit(f"mov.u64 {register}, {name};")
        return register

    def convert(self, register: str, source: DType, target: DType, count: int = 1) -> str:
        """`register` (of `source`) converted to `target` the way C converts (16-bit floats only to and from float32,
        never to or from bool: codegen's passes "narrow floats" and "SSA lowering" route the rest through them)."""
        (source_kind, source_type, _), (target_kind, target_type, _) = _info(source), _info(target)
        result = self.new(target_kind)
        if (source, target) == (dtypes.bfloat16, dtypes.float32):  # the upper half (cvt.f32.bf16 needs sm_90)
            bits = self.new("r")
            self.emit(f"cvt.u32.u16 {bits}, {register};", f"shl.b32 {bits}, {bits}, 16;", f"mov.b32 {result}, {bits};")
            return result
        source_float, target_float = dtypes.is_float(source), dtypes.is_float(target)
        if source_float and target_float:
            instruction = f"cvt{'.rn' if target.itemsize < source.itemsize else ''}.{target_type}.{source_type}"
        elif source_float or target_float:
            instruction = f"cvt.{'rzi' if source_float else 'rn'}.{target_type}.{source_type}"
        else:
            instruction = f"mov.b{64 if source_kind == 'rd' else 32}" if source_kind == target_kind else \
                f"cvt.{target_type}.{source_type}"
        self.emit(f"{instruction} {result}, {register};")
        return self.wrap(result, target)

    def atomic_store(self, uop: UOp, address: str, gate: str | None, space: str) -> None:
        """Combine the STORE's value into global memory with the reduce in its arg: `red` where PTX has it for the
        type, else a compare-and-swap loop over the element's bits (a 16-bit float's: over the aligned 32-bit word
        holding it, combined in float32, the other half written back unchanged)."""
        dtype, reduce, when = uop.src[1].dtype.scalar, str(uop.arg), "" if gate is None else f"@{gate} "
        if space != "global" or dtype not in self.renderer.atomic_dtypes:
            raise ValueError(f"the PTX renderer updates global {sorted(map(str, self.renderer.atomic_dtypes))} "
                             f"atomically, got a combining store ({reduce}) of {dtype} in {space} memory")
        (kind, arithmetic, _), register, half = _info(dtype), self.value(uop.src[1]), dtype in _HALVES
        if not half and ((reduce == "add" and (dtype != dtypes.float64 or self.renderer.arch_number >= 60)) or
                         (reduce in ("max", "min") and dtypes.is_int(dtype))):
            type_name = "u64" if reduce == "add" and dtype == dtypes.int64 else arithmetic
            return self.emit(f"{when}red.global.{reduce}.{type_name} [{address}], {register};")
        bits, bits_kind = ("b64", "rd") if dtype.itemsize == 8 else ("b32", "r")
        skip = None if gate is None else self.label("atomic_skip")
        self.emit(*([] if gate is None else [f"@!{gate} bra {skip};"]))
        word = address
        if half:  # the aligned word holding the element, the element's bit offset in it, the mask of the other half
            word, low_bits, shift, keep = self.new("rd"), self.new("rd"), self.new("r"), self.new("r")
            self.emit(f"and.b64 {word}, {address}, -4;", f"and.b64 {low_bits}, {address}, 2;",
                      f"cvt.u32.u64 {shift}, {low_bits};", f"shl.b32 {shift}, {shift}, 3;",
                      f"shl.b32 {keep}, 65535, {shift};", f"not.b32 {keep}, {keep};")
        seen, expected, element = self.new(bits_kind), self.new(bits_kind), self.new("r") if half else ""
        self.emit(f"ld.global.{bits} {seen}, [{word}];")
        self.lines.append(f"{(retry := self.label('atomic_retry'))}:")
        self.emit(f"mov.{bits} {expected}, {seen};", *([f"shr.b32 {element}, {expected}, {shift};"] if half else []),
                  f"{'cvt.u16.u32' if half else f'mov.{bits}'} {(old := self.new('h' if half else kind))}, "
                  f"{element if half else expected};")
        combined, placed = self.combine(reduce, old, register, dtype), self.new("r") if half else ""
        new_bits = self.new(bits_kind)
        if half:
            self.emit(f"cvt.u32.u16 {placed}, {combined};", f"shl.b32 {placed}, {placed}, {shift};",
                      f"and.b32 {new_bits}, {expected}, {keep};", f"or.b32 {new_bits}, {new_bits}, {placed};")
        else:
            self.emit(f"mov.{bits} {new_bits}, {combined};")
        self.emit(f"atom.global.cas.{bits} {seen}, [{word}], {expected}, {new_bits};",
                  f"setp.ne.{bits} {(changed := self.new('p'))}, {seen}, {expected};", f"@{changed} bra {retry};")
        self.lines += [] if gate is None else [f"{skip}:"]

    def arithmetic(self, op: Ops, operands: list[str], dtype: DType, count: int = 1) -> str:
        """`op` over registers of `dtype` (for WHERE, the values') by `_alu_plan`; a comparison's is a predicate."""
        kind, temporaries, instructions = _alu_plan(op, dtype)
        fields = dict(zip("abc", operands, strict=False), r=self.new("p" if op in _COMPARISONS else kind))
        for name, temporary in temporaries:
            fields[name] = self.new(temporary)
        self.lines += [instruction.format_map(fields) for instruction in instructions]
        return fields["r"]

    def compute(self, uop: UOp, operands: list[str], dtype: DType, count: int) -> str:
        """The ALU UOp `uop` over registers of `dtype`, a narrow integer result wrapped."""
        return self.wrap(self.arithmetic(uop.op, operands, dtype), uop.dtype.scalar)

    def _parameter(self, uop: UOp) -> str:  # DEFINE_GLOBAL: a buffer's global address, DEFINE_VAR: a variable
        buffer = uop.op is Ops.DEFINE_GLOBAL
        name, type_name = (f"data{uop.arg}", "u64") if buffer else (identifier(uop.arg[0]), "s32")
        self.parameters.append(f".param .{type_name} {name}")
        self.emit(f"ld.param.{type_name} {(register := self.new('rd' if buffer else 'r'))}, [{name}];")
        self.emit(*([f"cvta.to.global.u64 {register}, {register};"] if buffer else []))
        return register

    def _special(self, uop: UOp) -> str:
        if (source := {"gidx": "ctaid", "lidx": "tid"}.get(str(uop.arg)[:4])) is None:
            raise ValueError(f"the PTX renderer has no thread index {uop.arg!r}: expected gidxN or lidxN")
        self.emit(f"mov.u32 {(register := self.new('r'))}, %{source}.{'xyz'[int(str(uop.arg)[-1])]};")
        return register

    def _index(self, uop: UOp) -> None:  # its address, gate and state space, for the LOAD or STORE through it
        assert isinstance(pointer := uop.src[0].dtype, PtrDType)
        address = base = self.value(uop.src[0])
        if len(uop.src) > 1:
            offset, wide = self.new("rd"), uop.src[1].dtype.scalar in (dtypes.int64, dtypes.uint64)
            self.emit(f"mul.{'lo.s64' if wide else 'wide.s32'} {offset}, {self.value(uop.src[1])}, "
                      f"{pointer.base.itemsize};", f"add.s64 {(address := self.new('rd'))}, {base}, {offset};")
        gate = self.value(uop.src[2]) if len(uop.src) > 2 else None
        self.pointers[uop] = (address, gate, {"local": "shared", "reg": "local"}.get(pointer.addrspace, "global"))

    def _load(self, uop: UOp) -> str:
        (address, gate, space), (kind, _, memory) = self.pointer(uop), _info(uop.dtype)  # bools: bytes (SSA lowering)
        target = self.new(kind)
        if gate is not None:  # sources of dtype void only order the load; the first other is the alternative
            alternative = next((self.value(source) for source in uop.src[1:] if source.dtype != dtypes.void), None)
            self.emit(f"mov.{_REGISTER_TYPES[kind]} {target}, {alternative or self.constant(0, uop.dtype)};")
        self.emit(f"{'' if gate is None else f'@{gate} '}ld.{space}.{memory} {target}, [{address}];")
        return target

    def _store(self, uop: UOp) -> None:
        address, gate, space = self.pointer(uop)
        if uop.arg is not None:
            return self.atomic_store(uop, address, gate, space)
        memory, register = _info(uop.src[1].dtype)[2], self.value(uop.src[1])  # bools: bytes (SSA lowering)
        self.emit(f"{'' if gate is None else f'@{gate} '}st.{space}.{memory} [{address}], {register};")

    def _range(self, uop: UOp) -> str:
        counter, head, exit_, done = self.new("r"), self.label("loop"), self.label("end_loop"), self.new("p")
        self.emit(f"mov.u32 {counter}, 0;")
        self.lines.append(f"{head}:")
        self.emit(f"setp.ge.s32 {done}, {counter}, {self.value(uop.src[0])};", f"@{done} bra {exit_};")
        self.loops[uop] = (counter, head, exit_)
        return counter

    def _end(self, uop: UOp) -> None:
        for counter, head, exit_ in (self.loops[source] for source in uop.src if source.op is Ops.RANGE):
            self.emit(f"add.s32 {counter}, {counter}, 1;", f"bra {head};")
            self.lines.append(f"{exit_}:")

    def _if(self, uop: UOp) -> None:
        self.conditionals.append(exit_ := self.label("end_if"))
        self.emit(f"@!{self.value(uop.src[0])} bra {exit_};")

    def _bitcast(self, uop: UOp) -> str:
        if uop.src[0].dtype.itemsize != uop.dtype.itemsize:
            raise ValueError(f"BITCAST from {uop.src[0].dtype} to {uop.dtype}: the sizes differ")
        self.emit(f"mov.b{8 * max(uop.dtype.itemsize, 2)} {(target := self.new(_info(uop.dtype)[0]))}, "
                  f"{self.value(uop.src[0])};")
        return target

ptx_rendering = ssa_rules({
    (Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR): PTXContext._parameter, Ops.SPECIAL: PTXContext._special,
    Ops.LOAD: PTXContext._load, Ops.STORE: PTXContext._store, Ops.RANGE: PTXContext._range, Ops.END: PTXContext._end,
    Ops.DEFINE_REG: lambda ctx, uop: ctx.array(uop, "local", "acc"), Ops.INDEX: PTXContext._index,
    Ops.DEFINE_LOCAL: lambda ctx, uop: ctx.array(uop, "shared", "temp"), Ops.IF: PTXContext._if,
    Ops.ENDIF: lambda ctx, uop: ctx.lines.append(f"{ctx.conditionals.pop()}:"), Ops.CAST: PTXContext.cast,
    Ops.BARRIER: lambda ctx, uop: ctx.emit("bar.sync 0;"), Ops.CONST: lambda ctx, uop: None,
    Ops.BITCAST: PTXContext._bitcast})
"""PTX's rules: each UOp rendered into the PTXContext (virtual registers, labels, parameters)."""

class PTXRenderer(SSARenderer):
    """PTX assembly for one NVIDIA architecture, rendered from the linear program."""

    device, suffix, string_rewrite, emulated_floats, post_matcher = "NV", "ptx", ptx_rendering, _HALVES, ssa_lowering
    context, atomic_dtypes = PTXContext, _ATOMIC_DTYPES
    global_max, local_max, max_local_total = (2 ** 31 - 1, 65535, 65535), (1024, 1024, 64), 256
    shared_max, group_size, register_tile, max_buffers = 48 * 1024, 128, (4, 4), 500

    def __init__(self, arch: str = "sm_80", device: str = "NV", embed_program: bool = False):
        from tiny_nv.nvrtc import parse_arch
        self.arch, self.device, self.embed_program = arch, device, embed_program
        self.arch_number = parse_arch(arch)
        self.ptx_version = "7.8" if self.arch_number <= 90 else "8.6"
