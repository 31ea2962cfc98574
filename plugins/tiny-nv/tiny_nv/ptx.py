"""The PTX renderer (DEV=NV:PTX): PTX assembly written straight from the linear program, no NVRTC.

Every value gets a virtual register of its class (%p predicates, %h 16-bit, %r 32-bit, %rd 64-bit, %f / %fd
floats); ptxas (or the driver, at load time) allocates the real ones. Buffers are kernel parameters converted to
global addresses; accumulators (DEFINE_REG) are .local arrays, which ptxas keeps in registers when their indices are
constant; group-reduce partials (DEFINE_LOCAL) are .shared arrays. Loops are a compare, a branch and a back edge.
Integers narrower than 32 bits live in 32-bit registers and are sign- or zero-extended after each op (per-op
wrap-around); half and bfloat16 values are 16-bit registers widened to float for arithmetic and rounded back after
each op (per-op rounding, as the IEEE types). Vectors are not used: codegen keeps this renderer's programs scalar.
Scatter reductions (a STORE whose arg is the reduce) update global memory atomically for 32- and 64-bit integers and
floats, half and bfloat16 (`atomic_dtypes`): red.global.add for sums (float64 from sm_60), red.global.max / min for
integers, and an atom.global.cas loop over the element's bits for the rest (products, float max/min; 16-bit floats
over the aligned 32-bit word that holds them).
exp2, log2 and sin use the hardware's approximations (ex2/lg2/sin.approx.f32), like CUDA's fast-math intrinsics.
"""
from __future__ import annotations

import struct
from typing import Any

from tinycore.device.compiler import CompileError, Compiler
from tinycore.dtype import DType, PtrDType, dtypes
from tinycore.renderer.renderer import Renderer, statement_rule, text_rules
from tinycore.uop.ops import GroupOp, Ops
from tinycore.uop.patterns import UPat
from tinycore.uop.uop import UOp

_AXES = "xyz"
# dtype -> (register class, arithmetic type suffix, memory type suffix)
_TYPES: dict[DType, tuple[str, str, str]] = {
    dtypes.bool: ("p", "pred", "u8"), dtypes.int8: ("r", "s32", "s8"), dtypes.uint8: ("r", "u32", "u8"),
    dtypes.int16: ("r", "s32", "s16"), dtypes.uint16: ("r", "u32", "u16"), dtypes.int32: ("r", "s32", "s32"),
    dtypes.uint32: ("r", "u32", "u32"), dtypes.int64: ("rd", "s64", "s64"), dtypes.uint64: ("rd", "u64", "u64"),
    dtypes.float16: ("h", "f16", "b16"), dtypes.bfloat16: ("h", "bf16", "b16"), dtypes.float32: ("f", "f32", "f32"),
    dtypes.float64: ("fd", "f64", "f64")}
_REGISTER_TYPES = {"p": "pred", "h": "b16", "r": "b32", "rd": "b64", "f": "f32", "fd": "f64"}
_NARROW = {dtypes.int8: "s8", dtypes.uint8: "u8", dtypes.int16: "s16", dtypes.uint16: "u16"}
_HALVES = (dtypes.float16, dtypes.bfloat16)
_ATOMIC_DTYPES = frozenset({dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64, dtypes.float32, dtypes.float64,
                            dtypes.float16, dtypes.bfloat16})


def _info(dtype: DType) -> tuple[str, str, str]:
    if dtype.count != 1:
        raise ValueError(f"the PTX renderer renders scalar programs only, got {dtype}: vectors should not reach it")
    found = _TYPES.get(dtype.scalar)
    if found is None:
        raise ValueError(f"the PTX renderer has no type for {dtype}")
    return found


class PTXContext:
    """The state of rendering one linear program into PTX."""

    def __init__(self, renderer: PTXRenderer, uops: list[UOp]):
        self.renderer, self.uops = renderer, uops
        self.counts: dict[str, int] = {name: 0 for name in _REGISTER_TYPES}
        self.values: dict[UOp, str] = {}
        self.addresses: dict[UOp, tuple[str, str | None, str]] = {}  # INDEX -> (address register, gate, space)
        self.lines: list[str] = []
        self.declarations: list[str] = []
        self.parameters: list[str] = []
        self.labels = 0
        self.loops: dict[UOp, tuple[str, str, str]] = {}  # RANGE -> (counter, head label, exit label)
        self.branches: list[str] = []  # IF exit labels, innermost last

    # ---- registers and instructions ----

    def new(self, kind: str) -> str:
        number = self.counts[kind]
        self.counts[kind] = number + 1
        return f"%{kind}{number}"

    def emit(self, line: str) -> None:
        self.lines.append(f"\t{line}")

    def label(self, prefix: str) -> str:
        self.labels += 1
        return f"{prefix.upper()}_{self.labels}"

    def constant(self, value: Any, dtype: DType) -> str:
        """A register holding the constant `value` of `dtype`."""
        kind, _arithmetic, _memory = _info(dtype)
        register = self.new(kind)
        scalar = dtype.scalar
        if scalar == dtypes.bool:
            self.emit(f"setp.ne.u32 {register}, {1 if value else 0}, 0;")
        elif scalar == dtypes.float32:
            self.emit(f"mov.b32 {register}, 0f{struct.unpack('<I', struct.pack('<f', float(value)))[0]:08X};")
        elif scalar == dtypes.float64:
            self.emit(f"mov.b64 {register}, 0d{struct.unpack('<Q', struct.pack('<d', float(value)))[0]:016X};")
        elif scalar == dtypes.float16:
            self.emit(f"mov.b16 {register}, 0x{struct.unpack('<H', struct.pack('<e', float(value)))[0]:04X};")
        elif scalar == dtypes.bfloat16:
            from tinycore.renderer.cstyle import bfloat16_bits
            self.emit(f"mov.b16 {register}, 0x{bfloat16_bits(float(value)):04X};")
        else:
            bits = 64 if kind == "rd" else 32
            self.emit(f"mov.b{bits} {register}, {int(value) & ((1 << bits) - 1)};")
        return register

    def value(self, uop: UOp) -> str:
        """The register holding `uop`'s value (constants are materialised where they are used)."""
        if uop in self.values:
            return self.values[uop]
        if uop.op is Ops.CONST:
            return self.constant(uop.arg, uop.dtype)
        raise ValueError(f"the PTX renderer met {uop.op} before it was rendered: the linear program is out of order")

    def widen(self, register: str, dtype: DType) -> str:
        """A float32 register holding the half or bfloat16 value in `register`."""
        widened = self.new("f")
        if dtype.scalar == dtypes.float16:
            self.emit(f"cvt.f32.f16 {widened}, {register};")
        else:
            bits = self.new("r")
            self.emit(f"cvt.u32.u16 {bits}, {register};")
            self.emit(f"shl.b32 {bits}, {bits}, 16;")
            self.emit(f"mov.b32 {widened}, {bits};")
        return widened

    def narrow(self, register: str, dtype: DType) -> str:
        """A 16-bit register holding the float32 in `register` rounded to half or bfloat16."""
        narrowed = self.new("h")
        self.emit(f"cvt.rn.{'f16' if dtype.scalar == dtypes.float16 else 'bf16'}.f32 {narrowed}, {register};")
        return narrowed

    def wrap(self, register: str, dtype: DType) -> str:
        """Sign- or zero-extend the low bits of a narrow integer result (per-op wrap-around)."""
        narrow = _NARROW.get(dtype.scalar)
        if narrow is None:
            return register
        self.emit(f"cvt.{'s' if narrow[0] == 's' else 'u'}32.{narrow} {register}, {register};")
        return register

    # ---- the program ----

    def run(self, name: str) -> str:
        """The PTX module: each UOp rendered by the first of the renderer's rules (`ptx_rendering`) that matches."""
        rules = self.renderer.string_rewrite
        assert rules is not None
        for uop in self.uops:
            if rules.rewrite(uop, self) is None:
                raise ValueError(f"the PTX renderer cannot render {uop.op} (dtype {uop.dtype})")
        registers = [f"\t.reg .{_REGISTER_TYPES[kind]} %{kind}<{count}>;" for kind, count in self.counts.items()
                     if count]
        header = [f".version {self.renderer.ptx_version}", f".target {self.renderer.arch}", ".address_size 64", "",
                  f".visible .entry {name}(", ",\n".join(f"\t{parameter}" for parameter in self.parameters), ")",
                  "{"]
        return "\n".join(header + registers + self.declarations + self.lines + ["\tret;", "}"]) + "\n"

    def array(self, uop: UOp, space: str, prefix: str) -> None:
        """DEFINE_REG / DEFINE_LOCAL: a byte array declared in `space` (.local or .shared), its address a register."""
        pointer = uop.dtype
        assert isinstance(pointer, PtrDType)
        name = f"{prefix}{len(self.declarations)}"
        size = max(pointer.size, 1) * max(pointer.base.itemsize, 1)
        self.declarations.append(f"\t.{space} .align 16 .b8 {name}[{size}];")
        register = self.new("rd")
        self.emit(f"mov.u64 {register}, {name};")
        self.values[uop] = register

    def cast(self, register: str, source: DType, target: DType) -> str:
        """`register` (of `source`) converted to `target` the way C converts."""
        if source == target:
            return register
        if source in _HALVES:
            return self.cast(self.widen(register, source), dtypes.float32, target)
        if target in _HALVES:
            return self.narrow(self.cast(register, source, dtypes.float32), target)
        source_kind, source_type, _ = _info(source)
        target_kind, target_type, _ = _info(target)
        result = self.new(target_kind)
        if target == dtypes.bool:
            zero = self.constant(0, source)
            self.emit(f"setp.ne.{source_type} {result}, {register}, {zero};" if source_kind != "p" else
                      f"mov.pred {result}, {register};")
            return result
        if source == dtypes.bool:
            self.emit(f"selp.{target_type} {result}, {self.constant(1, target)}, {self.constant(0, target)}, "
                      f"{register};")
            return result
        source_float, target_float = dtypes.is_float(source), dtypes.is_float(target)
        if source_float and target_float:
            rounding = ".rn" if target.itemsize < source.itemsize else ""
            self.emit(f"cvt{rounding}.{target_type}.{source_type} {result}, {register};")
        elif source_float:
            self.emit(f"cvt.rzi.{target_type}.{source_type} {result}, {register};")
            self.wrap(result, target)
        elif target_float:
            self.emit(f"cvt.rn.{target_type}.{source_type} {result}, {register};")
        else:
            if source_kind == target_kind:
                self.emit(f"mov.b{64 if source_kind == 'rd' else 32} {result}, {register};")
            else:
                self.emit(f"cvt.{target_type}.{source_type} {result}, {register};")
            self.wrap(result, target)
        return result

    # ---- arithmetic ----

    def atomic_store(self, uop: UOp, address: str, gate: str | None, space: str) -> None:
        """Combine the STORE's value into global memory with the reduce in its arg: a `red` instruction where PTX
        has one for the type, else a compare-and-swap loop over the element's bits."""
        value = uop.src[1]
        dtype, reduce = value.dtype.scalar, str(uop.arg)
        if space != "global" or dtype not in self.renderer.atomic_dtypes:
            raise ValueError(f"the PTX renderer updates global {sorted(map(str, self.renderer.atomic_dtypes))} "
                             f"atomically, got a combining store ({reduce}) of {dtype} in {space} memory")
        kind, arithmetic, _memory = _info(dtype)
        register = self.value(value)
        predicate = f"@{gate} " if gate is not None else ""
        if dtype in _HALVES:
            self.atomic_half(address, gate, register, dtype, reduce)
            return
        integer = dtypes.is_int(dtype)
        native = (reduce == "add" and (dtype != dtypes.float64 or self.renderer.arch_number >= 60)) or \
                 (reduce in ("max", "min") and integer)
        if native:
            type_name = "u64" if reduce == "add" and dtype == dtypes.int64 else arithmetic
            self.emit(f"{predicate}red.global.{reduce}.{type_name} [{address}], {register};")
            return
        bits = "b64" if dtype.itemsize == 8 else "b32"
        bits_kind = "rd" if dtype.itemsize == 8 else "r"
        skip = self.label("atomic_skip") if gate is not None else None
        if skip is not None:
            self.emit(f"@!{gate} bra {skip};")
        seen, expected = self.new(bits_kind), self.new(bits_kind)
        self.emit(f"ld.global.{bits} {seen}, [{address}];")
        retry = self.label("atomic_retry")
        self.lines.append(f"{retry}:")
        self.emit(f"mov.{bits} {expected}, {seen};")
        old = self.new(kind)
        self.emit(f"mov.{bits} {old}, {expected};")
        if reduce == "min":
            below = self.alu(Ops.CMPLT, [register, old], dtype, True)
            combined = self.alu(Ops.WHERE, [below, register, old], dtype, False)
        else:
            combined = self.alu({"add": Ops.ADD, "mul": Ops.MUL, "max": Ops.MAX}[reduce], [old, register], dtype, False)
        new_bits = self.new(bits_kind)
        self.emit(f"mov.{bits} {new_bits}, {combined};")
        self.emit(f"atom.global.cas.{bits} {seen}, [{address}], {expected}, {new_bits};")
        changed = self.new("p")
        self.emit(f"setp.ne.{bits} {changed}, {seen}, {expected};")
        self.emit(f"@{changed} bra {retry};")
        if skip is not None:
            self.lines.append(f"{skip}:")

    def atomic_half(self, address: str, gate: str | None, register: str, dtype: DType, reduce: str) -> None:
        """A half or bfloat16 scatter reduce: a compare-and-swap loop on the aligned 32-bit word holding the element,
        combined in float32 and rounded back (as every half op), the word's other half written back unchanged."""
        skip = self.label("atomic_skip") if gate is not None else None
        if skip is not None:
            self.emit(f"@!{gate} bra {skip};")
        word, low_bits, shift, keep = self.new("rd"), self.new("rd"), self.new("r"), self.new("r")
        self.emit(f"and.b64 {word}, {address}, -4;")
        self.emit(f"and.b64 {low_bits}, {address}, 2;")
        self.emit(f"cvt.u32.u64 {shift}, {low_bits};")
        self.emit(f"shl.b32 {shift}, {shift}, 3;")
        self.emit(f"shl.b32 {keep}, 65535, {shift};")
        self.emit(f"not.b32 {keep}, {keep};")
        seen, expected, element = self.new("r"), self.new("r"), self.new("r")
        self.emit(f"ld.global.b32 {seen}, [{word}];")
        retry = self.label("atomic_retry")
        self.lines.append(f"{retry}:")
        self.emit(f"mov.b32 {expected}, {seen};")
        self.emit(f"shr.b32 {element}, {expected}, {shift};")
        old = self.new("h")
        self.emit(f"cvt.u16.u32 {old}, {element};")
        wide_old, wide_value = self.widen(old, dtype), self.widen(register, dtype)
        if reduce == "min":
            below = self.alu(Ops.CMPLT, [wide_value, wide_old], dtypes.float32, True)
            combined = self.alu(Ops.WHERE, [below, wide_value, wide_old], dtypes.float32, False)
        else:
            op = {"add": Ops.ADD, "mul": Ops.MUL, "max": Ops.MAX}[reduce]
            combined = self.alu(op, [wide_old, wide_value], dtypes.float32, False)
        narrowed, placed, new_word = self.narrow(combined, dtype), self.new("r"), self.new("r")
        self.emit(f"cvt.u32.u16 {placed}, {narrowed};")
        self.emit(f"shl.b32 {placed}, {placed}, {shift};")
        self.emit(f"and.b32 {new_word}, {expected}, {keep};")
        self.emit(f"or.b32 {new_word}, {new_word}, {placed};")
        self.emit(f"atom.global.cas.b32 {seen}, [{word}], {expected}, {new_word};")
        changed = self.new("p")
        self.emit(f"setp.ne.b32 {changed}, {seen}, {expected};")
        self.emit(f"@{changed} bra {retry};")
        if skip is not None:
            self.lines.append(f"{skip}:")

    def alu(self, op: Ops, operands: list[str], dtype: DType, boolean_result: bool) -> str:
        """One scalar ALU op over registers of `dtype` (for WHERE, the value type); returns the result register."""
        kind, arithmetic, _ = _info(dtype)
        integer = not dtypes.is_float(dtype) and dtype != dtypes.bool
        result = self.new("p" if boolean_result else kind)
        a = operands[0]
        b = operands[1] if len(operands) > 1 else ""
        bits = {"p": "pred", "r": "b32", "rd": "b64"}.get(kind, "")
        if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ):
            if kind == "p":
                if op is Ops.CMPNE:
                    self.emit(f"xor.pred {result}, {a}, {b};")
                elif op is Ops.CMPEQ:
                    self.emit(f"xor.pred {result}, {a}, {b};")
                    self.emit(f"not.pred {result}, {result};")
                else:  # false < true
                    self.emit(f"not.pred {result}, {a};")
                    self.emit(f"and.pred {result}, {result}, {b};")
                return result
            comparison = {Ops.CMPLT: "lt", Ops.CMPEQ: "eq", Ops.CMPNE: "neu" if not integer else "ne"}[op]
            self.emit(f"setp.{comparison}.{arithmetic} {result}, {a}, {b};")
            return result
        if op is Ops.WHERE:
            condition, yes, no = operands
            if kind == "p":
                other = self.new("p")
                self.emit(f"and.pred {result}, {condition}, {yes};")
                self.emit(f"not.pred {other}, {condition};")
                self.emit(f"and.pred {other}, {other}, {no};")
                self.emit(f"or.pred {result}, {result}, {other};")
            else:
                self.emit(f"selp.{_REGISTER_TYPES[kind]} {result}, {yes}, {no}, {condition};")
            return result
        if op is Ops.MAX and kind == "p":
            self.emit(f"or.pred {result}, {a}, {b};")
            return result
        if op is Ops.MAX:  # C's (a<b)?b:a, which keeps a NaN first operand
            less = self.new("p")
            self.emit(f"setp.lt.{arithmetic} {less}, {a}, {b};")
            self.emit(f"selp.{_REGISTER_TYPES[kind]} {result}, {b}, {a}, {less};")
            return result
        if op in (Ops.AND, Ops.OR, Ops.XOR):
            self.emit(f"{op.name.lower()}.{bits} {result}, {a}, {b};")
            return result
        if op is Ops.NEG:
            signed = arithmetic.replace("u", "s")  # two's complement negation is the same bits for unsigned types
            self.emit(f"not.pred {result}, {a};" if kind == "p" else f"neg.{signed} {result}, {a};")
            return result
        if op in (Ops.IDIV, Ops.MOD) and integer:  # a zero divisor gives 0, as the constant folder does
            zero_divisor, quotient = self.new("p"), self.new(kind)
            self.emit(f"setp.eq.{arithmetic} {zero_divisor}, {b}, 0;")
            self.emit(f"{'div' if op is Ops.IDIV else 'rem'}.{arithmetic} {quotient}, {a}, {b};")
            self.emit(f"selp.{bits} {result}, 0, {quotient}, {zero_divisor};")
            return result
        simple = {Ops.ADD: "add", Ops.SUB: "sub", Ops.MUL: "mul.lo" if integer else "mul", Ops.SHL: "shl",
                  Ops.SHR: "shr"}
        if op in simple:
            type_name = bits if op is Ops.SHL else arithmetic
            if op in (Ops.SHL, Ops.SHR):
                shift = self.new("r")
                self.emit(f"cvt.u32.{arithmetic} {shift}, {b};" if kind == "rd" else f"mov.b32 {shift}, {b};")
                b = shift
            self.emit(f"{simple[op]}.{type_name} {result}, {a}, {b};")
            return result
        if op is Ops.MULACC:
            instruction = "mad.lo" if integer else "fma.rn"
            self.emit(f"{instruction}.{arithmetic} {result}, {a}, {b}, {operands[2]};")
            return result
        if integer:
            raise ValueError(f"the PTX renderer has no integer {op}")
        if op is Ops.FDIV:
            self.emit(f"div.rn.{arithmetic} {result}, {a}, {b};")
        elif op is Ops.SQRT:
            self.emit(f"sqrt.rn.{arithmetic} {result}, {a};")
        elif op is Ops.RECIPROCAL:
            self.emit(f"rcp.rn.{arithmetic} {result}, {a};")
        elif op is Ops.TRUNC:
            self.emit(f"cvt.rzi.{arithmetic}.{arithmetic} {result}, {a};")
        elif op in (Ops.EXP2, Ops.LOG2, Ops.SIN):
            if dtype != dtypes.float32:
                raise ValueError(f"the PTX renderer computes {op} in float32 only; cast {dtype} to float32 first or "
                                 "use the CUDA renderer (DEV=NV:CUDA)")
            instruction = {Ops.EXP2: "ex2", Ops.LOG2: "lg2", Ops.SIN: "sin"}[op]
            self.emit(f"{instruction}.approx.f32 {result}, {a};")
        else:
            raise ValueError(f"the PTX renderer cannot render {op} on {dtype}")
        return result


def _define_global(ctx: PTXContext, uop: UOp) -> None:
    parameter = f"data{uop.arg}"
    ctx.parameters.append(f".param .u64 {parameter}")
    register = ctx.new("rd")
    ctx.emit(f"ld.param.u64 {register}, [{parameter}];")
    ctx.emit(f"cvta.to.global.u64 {register}, {register};")
    ctx.values[uop] = register


def _define_var(ctx: PTXContext, uop: UOp) -> None:
    parameter = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in str(uop.arg[0]))
    ctx.parameters.append(f".param .s32 {parameter}")
    register = ctx.new("r")
    ctx.emit(f"ld.param.s32 {register}, [{parameter}];")
    ctx.values[uop] = register


def _define_reg(ctx: PTXContext, uop: UOp) -> None:
    ctx.array(uop, "local", "acc")


def _define_local(ctx: PTXContext, uop: UOp) -> None:
    ctx.array(uop, "shared", "temp")


def _special(ctx: PTXContext, uop: UOp) -> None:
    label = str(uop.arg)
    axis = _AXES[int(label[-1])]
    register = ctx.new("r")
    if label.startswith("gidx"):
        ctx.emit(f"mov.u32 {register}, %ctaid.{axis};")
    elif label.startswith("lidx"):
        ctx.emit(f"mov.u32 {register}, %tid.{axis};")
    else:
        raise ValueError(f"the PTX renderer has no thread index {label!r}: expected gidxN or lidxN")
    ctx.values[uop] = register


def _index(ctx: PTXContext, uop: UOp) -> None:
    buffer = uop.src[0]
    pointer = buffer.dtype
    assert isinstance(pointer, PtrDType)
    space = {"local": "shared", "reg": "local"}.get(pointer.addrspace, "global")
    base = ctx.value(buffer)
    address = base
    if len(uop.src) > 1:
        index = uop.src[1]
        offset = ctx.new("rd")
        if index.dtype.scalar in (dtypes.int64, dtypes.uint64):
            ctx.emit(f"mul.lo.s64 {offset}, {ctx.value(index)}, {pointer.base.itemsize};")
        else:
            ctx.emit(f"mul.wide.s32 {offset}, {ctx.value(index)}, {pointer.base.itemsize};")
        address = ctx.new("rd")
        ctx.emit(f"add.s64 {address}, {base}, {offset};")
    gate = ctx.value(uop.src[2]) if len(uop.src) > 2 else None
    ctx.addresses[uop] = (address, gate, space)


def _load(ctx: PTXContext, uop: UOp) -> None:
    if uop.src[0] not in ctx.addresses:
        raise ValueError(f"LOAD needs an INDEX as its first source, got {uop.src[0].op}")
    address, gate, space = ctx.addresses[uop.src[0]]
    kind, _arithmetic, memory = _info(uop.dtype)
    alternatives = [source for source in uop.src[1:] if source.dtype != dtypes.void]
    target = ctx.new("r" if kind == "p" else kind)
    if gate is not None:
        alternative = ctx.value(alternatives[0]) if alternatives else None
        if kind == "p":
            ctx.emit(f"selp.u32 {target}, 1, 0, {alternative};" if alternative else f"mov.u32 {target}, 0;")
        else:
            zero = alternative or ctx.constant(0, uop.dtype)
            ctx.emit(f"mov.{_REGISTER_TYPES[kind]} {target}, {zero};")
    predicate = f"@{gate} " if gate is not None else ""
    ctx.emit(f"{predicate}ld.{space}.{memory} {target}, [{address}];")
    if kind == "p":
        flag = ctx.new("p")
        ctx.emit(f"setp.ne.u32 {flag}, {target}, 0;")
        target = flag
    ctx.values[uop] = target


def _store(ctx: PTXContext, uop: UOp) -> None:
    if uop.src[0] not in ctx.addresses:
        raise ValueError(f"STORE needs an INDEX as its first source, got {uop.src[0].op}")
    address, gate, space = ctx.addresses[uop.src[0]]
    value = uop.src[1]
    if uop.arg is not None:
        ctx.atomic_store(uop, address, gate, space)
        return
    kind, _arithmetic, memory = _info(value.dtype)
    register = ctx.value(value)
    if kind == "p":
        byte = ctx.new("r")
        ctx.emit(f"selp.u32 {byte}, 1, 0, {register};")
        register = byte
    predicate = f"@{gate} " if gate is not None else ""
    ctx.emit(f"{predicate}st.{space}.{memory} [{address}], {register};")


def _range(ctx: PTXContext, uop: UOp) -> None:
    counter, head, exit_ = ctx.new("r"), ctx.label("loop"), ctx.label("end_loop")
    done = ctx.new("p")
    ctx.emit(f"mov.u32 {counter}, 0;")
    ctx.lines.append(f"{head}:")
    ctx.emit(f"setp.ge.s32 {done}, {counter}, {ctx.value(uop.src[0])};")
    ctx.emit(f"@{done} bra {exit_};")
    ctx.loops[uop] = (counter, head, exit_)
    ctx.values[uop] = counter


def _end(ctx: PTXContext, uop: UOp) -> None:
    for source in uop.src:
        if source.op is not Ops.RANGE:
            continue
        counter, head, exit_ = ctx.loops[source]
        ctx.emit(f"add.s32 {counter}, {counter}, 1;")
        ctx.emit(f"bra {head};")
        ctx.lines.append(f"{exit_}:")


def _if(ctx: PTXContext, uop: UOp) -> None:
    exit_ = ctx.label("end_if")
    ctx.emit(f"@!{ctx.value(uop.src[0])} bra {exit_};")
    ctx.branches.append(exit_)


def _endif(ctx: PTXContext, uop: UOp) -> None:
    ctx.lines.append(f"{ctx.branches.pop()}:")


def _barrier(ctx: PTXContext, uop: UOp) -> None:
    ctx.emit("bar.sync 0;")


def _noop(ctx: PTXContext, uop: UOp) -> None:
    ctx.values[uop] = ctx.value(uop.src[0])


def _bitcast(ctx: PTXContext, uop: UOp) -> None:
    source = uop.src[0]
    if source.dtype.itemsize != uop.dtype.itemsize:
        raise ValueError(f"BITCAST from {source.dtype} to {uop.dtype}: the sizes differ")
    kind = _info(uop.dtype)[0]
    target = ctx.new(kind)
    ctx.emit(f"mov.b{8 * max(uop.dtype.itemsize, 2)} {target}, {ctx.value(source)};")
    ctx.values[uop] = target


def _cast(ctx: PTXContext, uop: UOp) -> None:
    ctx.values[uop] = ctx.cast(ctx.value(uop.src[0]), uop.src[0].dtype.scalar, uop.dtype.scalar)


def _alu(ctx: PTXContext, uop: UOp) -> None:
    operand_dtype = (uop.src[1] if uop.op is Ops.WHERE else uop.src[0]).dtype.scalar
    registers = [ctx.value(source) for source in uop.src]
    if operand_dtype in _HALVES:  # computed in float32, rounded back to the 16-bit type
        widened = [register if source.dtype.scalar == dtypes.bool else ctx.widen(register, source.dtype)
                   for register, source in zip(registers, uop.src, strict=True)]
        result = ctx.alu(uop.op, widened, dtypes.float32, uop.dtype.scalar == dtypes.bool)
        ctx.values[uop] = result if uop.dtype.scalar == dtypes.bool else ctx.narrow(result, operand_dtype)
        return
    ctx.values[uop] = ctx.alu(uop.op, registers, operand_dtype, uop.dtype.scalar == dtypes.bool)
    if uop.dtype.scalar in _NARROW:
        ctx.wrap(ctx.values[uop], uop.dtype.scalar)


ptx_rendering = text_rules([
    (UPat(Ops.DEFINE_GLOBAL, name="uop"), statement_rule(_define_global)),
    (UPat(Ops.DEFINE_VAR, name="uop"), statement_rule(_define_var)),
    (UPat(Ops.DEFINE_REG, name="uop"), statement_rule(_define_reg)),
    (UPat(Ops.DEFINE_LOCAL, name="uop"), statement_rule(_define_local)),
    (UPat(Ops.SPECIAL, name="uop"), statement_rule(_special)),
    (UPat(Ops.INDEX, name="uop"), statement_rule(_index)),
    (UPat(Ops.LOAD, name="uop"), statement_rule(_load)),
    (UPat(Ops.STORE, name="uop"), statement_rule(_store)),
    (UPat(Ops.RANGE, name="uop"), statement_rule(_range)),
    (UPat(Ops.END, name="uop"), statement_rule(_end)),
    (UPat(Ops.IF, name="uop"), statement_rule(_if)),
    (UPat(Ops.ENDIF, name="uop"), statement_rule(_endif)),
    (UPat(Ops.BARRIER, name="uop"), statement_rule(_barrier)),
    (UPat((Ops.NOOP, Ops.PRECAST, Ops.BIND), name="uop"), statement_rule(_noop)),
    (UPat(Ops.BITCAST, name="uop"), statement_rule(_bitcast)),
    (UPat(Ops.CAST, name="uop"), statement_rule(_cast)),
    (UPat(GroupOp.ALU, name="uop"), statement_rule(_alu)),
    (UPat((Ops.SINK, Ops.GROUP, Ops.CONST)), lambda: ""),
])
"""PTX's rules: each UOp rendered into the PTXContext (virtual registers, labels, parameters)."""

class PTXRenderer(Renderer):
    """PTX assembly for one NVIDIA architecture, rendered from the linear program."""

    device = "NV"
    suffix = "ptx"
    string_rewrite = ptx_rendering
    has_local = True
    has_shared = True
    has_threads = False
    global_max = (2 ** 31 - 1, 65535, 65535)
    local_max = (1024, 1024, 64)
    max_local_total = 256
    shared_max = 48 * 1024
    group_size = 128
    register_tile = (4, 4)
    max_buffers = 500

    def __init__(self, arch: str = "sm_80", device: str = "NV", embed_program: bool = False):
        from tiny_nv.nvrtc import parse_arch
        self.arch, self.device, self.embed_program = arch, device, embed_program
        self.arch_number = parse_arch(arch)
        self.ptx_version = "7.8" if self.arch_number <= 90 else "8.6"
        self.atomic_dtypes = _ATOMIC_DTYPES
        self.vector_widths = {}

    def render(self, uops: list[UOp]) -> str:
        """The PTX of `uops` (entry named after the SINK)."""
        from tinycore.renderer.renderer import kernel_name
        return self.render_named(uops, kernel_name(uops))

    def render_named(self, uops: list[UOp], name: str) -> str:
        """The PTX module of the linear program `uops` with one entry called `name`."""
        source = PTXContext(self, uops).run(name)
        if self.embed_program:
            from tiny_nv.mock import embed_program
            source = embed_program(source, uops)
        return source


class PTXCompiler(Compiler):
    """The PTX text itself is the binary: the CUDA driver assembles it when the module is loaded."""

    def __init__(self, arch: str):
        super().__init__("nv-ptx")
        self.arch = arch
        self.name = f"ptx-{arch}"

    def compile(self, src: str) -> bytes:
        """The NUL-terminated PTX (checked to be one module for this arch)."""
        if f".target {self.arch}" not in src or ".entry" not in src:
            raise CompileError(f"not a PTX module for {self.arch} (no '.target {self.arch}' or no .entry)",
                               log=src[:2000])
        return src.encode() + b"\0"

    def compile_cached(self, src: str) -> bytes:
        """Nothing to cache: the driver assembles (and caches) PTX itself."""
        return self.compile(src)


def assemble_with_ptxas(source: str, arch: str) -> bytes | None:
    """The CUBIN ptxas (from the nvidia-cuda-nvcc wheel) makes of `source`, None when ptxas is not installed;
    CompileError with ptxas's messages when it refuses the PTX."""
    import subprocess
    import tempfile
    from pathlib import Path

    from tiny_nv.toolkit import find_tool
    ptxas = find_tool("ptxas")
    if ptxas is None:
        return None
    with tempfile.TemporaryDirectory() as directory:
        source_path, output = Path(directory) / "kernel.ptx", Path(directory) / "kernel.cubin"
        source_path.write_text(source)
        finished = subprocess.run([ptxas, f"-arch={arch}", str(source_path), "-o", str(output)], capture_output=True,
                                  text=True, timeout=120, check=False)
        if finished.returncode != 0:
            raise CompileError(f"ptxas refused the PTX for {arch} (exit {finished.returncode})",
                               log=finished.stderr + "\n--- source ---\n" + source)
        return output.read_bytes()


def make_ptx_renderer(device: str, arch: str | None) -> tuple[Any, Any]:
    """The PTX renderer and its (pass-through) compiler for `device` (DEV=NV:PTX, NV:PTX:sm_90)."""
    from tiny_nv.target import device_arch
    from tinycore.device.registry import target_for
    chosen = arch or device_arch(device)
    if target_for(device).interface == "MOCK":  # the MOCK GPU runs the linear program carried in the source
        from tiny_nv.mock import MockCompiler
        return PTXRenderer(chosen, device, embed_program=True), MockCompiler(chosen, language="ptx")
    return PTXRenderer(chosen, device), PTXCompiler(chosen)
