"""DEV=CPU:X86: kernels of every dtype selected, encoded and run through the CPU queue and its worker pool, with
results equal to numpy's. The device is opened with the x86 renderer in a child process (a process opens CPU once),
which saves each case's result; numpy computes the references here."""

from __future__ import annotations

import ctypes
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tiny_cpu.hooks import x86_probe
from tiny_cpu.x86.executable import host_is_x86_64
from tiny_cpu.x86.renderer import X86Compiler, machine_code, make_x86_renderer

from tinycore.device.compiler import CompileError
from tinycore.dtype import dtypes

RNG = np.random.default_rng(45)
INTEGER_RANGES = {"int8": (-128, 128), "int16": (-30000, 30000), "int32": (-10**9, 10**9),
                  "int64": (-10**15, 10**15), "uint8": (0, 256), "uint16": (0, 65536), "uint32": (0, 2**32),
                  "uint64": (0, 2**64)}
INPUTS: dict[str, np.ndarray] = {}
for _name, (_low, _high) in INTEGER_RANGES.items():
    INPUTS[f"{_name}_a"] = RNG.integers(_low, _high, 41, dtype=_name)
    _divisor = RNG.integers(_low, _high, 41, dtype=_name)
    INPUTS[f"{_name}_b"] = np.where(_divisor == 0, 3, _divisor).astype(_name)
for _name in ("float16", "float32", "float64"):
    INPUTS[f"{_name}_a"] = (RNG.standard_normal(41) * 40).astype(_name)
    INPUTS[f"{_name}_b"] = (RNG.standard_normal(41) + 0.5).astype(_name)
INPUTS["special"] = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, 3.4e38, -2.5, 2.5, 7.9, -7.9, 65519.0,
                              65521.0, 1e-8], np.float32)
INPUTS["large_u64"] = np.array([0, 1, 2**63 - 1, 2**63, 2**63 + 2**11, 2**64 - 1, 12345678901234567890], np.uint64)
INPUTS["large_f64"] = np.array([0.0, 1.5, 9.2e18, 9.3e18, 1.8e19, 2.0**63, 2.0**64 - 2**11], np.float64)
INPUTS["wide_f64"] = np.concatenate([np.linspace(-1100.0, 1100.0, 97), RNG.standard_normal(31) * 1e5,
                                      [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, 1e-310, 1e300, -1074.5]])
INPUTS["m"] = RNG.standard_normal((33, 47)).astype(np.float32)
INPUTS["n"] = RNG.standard_normal((47, 29)).astype(np.float32)
INPUTS["rows"] = RNG.integers(0, 33, 24).astype(np.int32)
INPUTS["g"] = RNG.standard_normal((40, 16)).astype(np.float32)  # rows of 16: its row sums are folded from vectors
INPUTS["bools"] = RNG.integers(0, 2, 41).astype(np.bool_)

# each case: an expression over the tensors `t` (run in the child under DEV=CPU:X86) and its numpy reference
CASES: dict[str, tuple[str, object]] = {}
for _name in INTEGER_RANGES:
    _a, _b = f"t['{_name}_a']", f"t['{_name}_b']"
    CASES[f"{_name} wrapping arithmetic"] = (
        f"({_a} * {_b} + {_a} - {_b}).numpy()",
        lambda v, n=_name: v[f"{n}_a"] * v[f"{n}_b"] + v[f"{n}_a"] - v[f"{n}_b"])
    CASES[f"{_name} wrapped values feed compares, casts and divisions"] = (
        f"[({_a} * {_b} < 0).numpy(), ({_a} * {_b}).cast('int64').numpy(), (({_a} + {_b}) // 3).numpy()]",
        lambda v, n=_name: [v[f"{n}_a"] * v[f"{n}_b"] < 0, (v[f"{n}_a"] * v[f"{n}_b"]).astype(np.int64),
                            (v[f"{n}_a"] + v[f"{n}_b"]) // 3])
    CASES[f"{_name} floor division and modulo by a tensor"] = (
        f"[({_a} // {_b}).numpy(), ({_a} % {_b}).numpy()]",
        lambda v, n=_name: [v[f"{n}_a"] // v[f"{n}_b"], v[f"{n}_a"] % v[f"{n}_b"]])
    CASES[f"{_name} division by a constant"] = (
        f"[({_a} // 7).numpy(), ({_a} % 10).numpy()]", lambda v, n=_name: [v[f"{n}_a"] // 7, v[f"{n}_a"] % 10])
    CASES[f"{_name} max, compare, xor, shifts"] = (
        f"[{_a}.maximum({_b}).numpy(), ({_a} < {_b}).numpy(), ({_a} ^ {_b}).numpy(), ({_a} >> 3).numpy(), "
        f"({_a} << 2).numpy()]",
        lambda v, n=_name: [np.maximum(v[f"{n}_a"], v[f"{n}_b"]), v[f"{n}_a"] < v[f"{n}_b"],
                            v[f"{n}_a"] ^ v[f"{n}_b"], v[f"{n}_a"] >> 3, v[f"{n}_a"] << 2])
    CASES[f"{_name} casts to every other dtype"] = (
        f"[{_a}.cast(d).numpy() for d in ('bool', 'int8', 'uint8', 'int16', 'uint16', 'int32', 'uint32', 'int64', "
        "'uint64', 'float32', 'float64')]",
        lambda v, n=_name: [v[f"{n}_a"].astype(d) for d in ("bool", "int8", "uint8", "int16", "uint16", "int32",
                                                          "uint32", "int64", "uint64", "float32", "float64")])
for _name in ("float16", "float32", "float64"):
    _a, _b = f"t['{_name}_a']", f"t['{_name}_b']"
    CASES[f"{_name} arithmetic rounds to its precision"] = (
        f"[({_a} * {_b} + {_a} / {_b} - {_b}).numpy(), (-{_a}).maximum({_b}).numpy(), {_a}.abs().sqrt().numpy(), "
        f"{_a}.trunc().numpy(), {_b}.reciprocal().numpy(), ({_a} < {_b}).where({_a}, {_b}).numpy()]",
        lambda v, n=_name: [v[f"{n}_a"] * v[f"{n}_b"] + v[f"{n}_a"] / v[f"{n}_b"] - v[f"{n}_b"],
                            np.maximum(-v[f"{n}_a"], v[f"{n}_b"]), np.sqrt(np.abs(v[f"{n}_a"])), np.trunc(v[f"{n}_a"]),
                            np.reciprocal(v[f"{n}_b"]), np.where(v[f"{n}_a"] < v[f"{n}_b"], v[f"{n}_a"], v[f"{n}_b"])])
    CASES[f"{_name} casts to integers (truncating) and floats"] = (
        f"[{_a}.cast(d).numpy() for d in ('bool', 'int8', 'int16', 'int32', 'int64', 'float16', 'float32', "
        "'float64')]",
        lambda v, n=_name: [v[f"{n}_a"].astype(d) for d in ("bool", "int8", "int16", "int32", "int64", "float16",
                                                          "float32", "float64")])
CASES.update({
    "float32 specials to float16, bool and back": (
        "[t['special'].cast('float16').numpy(), t['special'].cast('bool').numpy(), "
        "t['special'].cast('float64').numpy()]",
        lambda v: [v["special"].astype(np.float16), v["special"].astype(np.bool_), v["special"].astype(np.float64)]),
    "uint64 above 2**63 to floats and back": (
        "[t['large_u64'].cast('float64').numpy(), t['large_u64'].cast('float32').numpy(), "
        "t['large_f64'].cast('uint64').numpy()]",
        lambda v: [v["large_u64"].astype(np.float64), v["large_u64"].astype(np.float32),
                   v["large_f64"].astype(np.uint64)]),
    "bitcasts": (
        "[t['float32_a'].bitcast('int32').numpy(), t['int32_a'].bitcast('float32').numpy(), "
        "t['float64_a'].bitcast('uint64').numpy(), t['float16_a'].bitcast('int16').numpy(), "
        "t['uint16_a'].bitcast('float16').numpy()]",
        lambda v: [v["float32_a"].view(np.int32), v["int32_a"].view(np.float32), v["float64_a"].view(np.uint64),
                   v["float16_a"].view(np.int16), v["uint16_a"].view(np.float16)]),
    "bool logic": (
        "[(t['bools'] & (t['int8_a'] > 0)).numpy(), (t['bools'] | (t['float32_a'] < 0)).numpy(), "
        "(t['bools'] ^ True).numpy(), t['bools'].where(t['int64_a'], 5).numpy()]",
        lambda v: [v["bools"] & (v["int8_a"] > 0), v["bools"] | (v["float32_a"] < 0), ~v["bools"],
                   np.where(v["bools"], v["int64_a"], 5)]),
    "gated loads of a padded convolution": (
        "t['m'].reshape(1, 1, 33, 47).conv2d(Tensor.ones(2, 1, 3, 3), padding=1).numpy()",
        lambda v: np.broadcast_to(sum(np.pad(v["m"], 1)[r:r + 33, c:c + 47] for r in range(3) for c in range(3)),
                                  (1, 2, 33, 47))),
    "reductions": (
        "[t['m'].sum(axis=0).numpy(), t['m'].max(axis=1).numpy(), t['m'].argmax(axis=1).numpy(), "
        "t['int32_a'].sum().numpy(), t['float64_a'].sum().numpy()]",
        lambda v: [v["m"].sum(0), v["m"].max(1), v["m"].argmax(1).astype(np.int32),
                   v["int32_a"].sum(dtype=np.int32), v["float64_a"].sum()]),
    "gathers in vector kernels (lanes taken and built)": (
        "[t['m'][t['rows']].numpy(), t['g'].sum(1)[t['rows']].numpy(), (t['m'][t['rows']] @ t['n']).numpy()]",
        lambda v: [v["m"][v["rows"]], v["g"].sum(1)[v["rows"]], v["m"][v["rows"]] @ v["n"]]),
    "scatter reduce": (
        "Tensor.zeros(33).scatter_reduce(0, t['rows'], t['float32_b'][:24], 'sum').numpy()",
        lambda v: np.bincount(v["rows"], v["float32_b"][:24].astype(np.float64), 33).astype(np.float32)),
    "matmul": ("(t['m'] @ t['n']).numpy()", lambda v: v["m"] @ v["n"]),
    "float32 transcendentals (the core's decomposition)": (
        "[t['m'].exp().numpy(), t['m'].abs().log().numpy(), t['m'].sin().numpy(), t['m'].softmax(1).numpy()]",
        lambda v: [np.exp(v["m"]), np.log(np.abs(v["m"])), np.sin(v["m"]),
                   np.exp(v["m"] - v["m"].max(1, keepdims=True)) /
                   np.exp(v["m"] - v["m"].max(1, keepdims=True)).sum(1, keepdims=True)]),
    "float16 transcendentals through float32": (
        "[t['float16_b'].exp().numpy(), t['float16_b'].abs().log2().numpy()]",
        lambda v: [np.exp(v["float16_b"].astype(np.float32)).astype(np.float16),
                   np.log2(np.abs(v["float16_b"]).astype(np.float32)).astype(np.float16)]),
    "float64 transcendentals (the renderer's own decomposition)": (
        "[t['wide_f64'].exp2().numpy(), t['wide_f64'].log2().numpy(), (t['wide_f64'][:135] / 1e3).sin().numpy(), "
        "t['float64_b'].exp().numpy(), t['float64_b'].abs().pow(1.7).numpy()]",
        lambda v: [np.exp2(v["wide_f64"]), np.log2(v["wide_f64"]), np.sin(v["wide_f64"][:135] / 1e3),
                   np.exp(v["float64_b"]), np.abs(v["float64_b"]) ** 1.7]),
    "symbolic shape": (
        "[(t['float32_a'][:Variable('n', 1, 41).bind(n)] * 2).sum().numpy() for n in (5, 17, 41)]",
        lambda v: [(v["float32_a"][:n] * 2).sum() for n in (5, 17, 41)]),
})
TOLERANT = {"float64 transcendentals (the renderer's own decomposition)",
            "matmul", "gathers in vector kernels (lanes taken and built)", "scatter reduce",
            "reductions", "float32 transcendentals (the core's decomposition)", "symbolic shape",
            "float16 transcendentals through float32"}

CHILD = """
import json, sys
import numpy as np
from tinycore import Tensor, Variable
from tinycore.device import Device
inputs = np.load(sys.argv[1])
t = {name: Tensor(inputs[name]) for name in inputs.files}
cases = json.loads(sys.argv[2])
results = {}
for number, (name, code) in enumerate(cases.items()):
    value = eval(code)
    for part, array in enumerate(value if isinstance(value, list) else [value]):
        results[f"{number}/{part}"] = np.asarray(array)
np.savez(sys.argv[3], **results)
device = Device["CPU"]
print(json.dumps({"renderer": type(device.renderer).__name__, "global_max": list(device.renderer.global_max)}))
"""


@pytest.fixture(scope="module")
def x86_results(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, object], dict[str, np.ndarray]]:
    """Every case run once in a child process under DEV=CPU:X86 with two worker threads."""
    folder = tmp_path_factory.mktemp("x86")
    inputs, outputs = folder / "inputs.npz", folder / "outputs.npz"
    np.savez(inputs, **INPUTS)
    environment = {**os.environ, "DEV": "CPU:X86", "NUM_CPU_THREADS": "2"}
    codes = {name: code for name, (code, _reference) in CASES.items()}
    done = subprocess.run([sys.executable, "-c", CHILD, str(inputs), json.dumps(codes), str(outputs)],
                          env=environment, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    with np.load(outputs) as saved:
        return report, {name: saved[name] for name in saved.files}


pytestmark = pytest.mark.skipif(not host_is_x86_64(), reason="x86-64 machine code runs only on x86-64 hosts")


def test_the_child_ran_the_x86_renderer_on_two_workers(x86_results: tuple[dict[str, object], dict]) -> None:
    report, _ = x86_results
    assert report == {"renderer": "X86Renderer", "global_max": [2, 1, 1]}


@pytest.mark.parametrize("name", sorted(CASES))
def test_case_matches_numpy(name: str, x86_results: tuple[dict[str, object], dict[str, np.ndarray]]) -> None:
    _, results = x86_results
    number = list(CASES).index(name)
    with np.errstate(all="ignore"):
        expected = CASES[name][1](INPUTS)  # type: ignore[operator]
    for part, reference in enumerate(expected if isinstance(expected, list) else [expected]):
        reference = np.asarray(reference)
        got = results[f"{number}/{part}"]
        assert got.dtype == reference.dtype and got.shape == reference.shape, (part, got.dtype, reference.dtype)
        if name in TOLERANT:
            tolerance = {np.dtype(np.float16): 2e-3, np.dtype(np.float64): 1e-14}.get(reference.dtype, 1e-5)
            np.testing.assert_allclose(got, reference, rtol=tolerance, atol=tolerance, err_msg=f"part {part}")
        else:
            np.testing.assert_array_equal(got, reference, err_msg=f"part {part}")


def test_x86_is_offered_only_on_x86_64_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    assert x86_probe()[0]
    monkeypatch.setattr("platform.machine", lambda: "aarch64")
    available, reason = x86_probe()
    assert not available and "aarch64" in reason and "DEV=CPU" in reason
    with pytest.raises(RuntimeError, match="not x86-64"):
        make_x86_renderer("CPU", None)


def test_x86_is_not_offered_without_the_features_its_code_uses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tiny_cpu.target.host_cpu_flags", lambda: frozenset({"sse2", "avx", "fma"}))
    available, reason = x86_probe()
    assert not available and "lacks avx2, f16c, bmi2" in reason and "DEV=CPU" in reason


def test_an_arch_is_refused() -> None:
    with pytest.raises(ValueError, match="leave the arch out"):
        make_x86_renderer("CPU", "znver3")


def test_the_compiler_takes_only_the_renderers_text() -> None:
    assert machine_code("; x86-64 machine code, tinycore x86 renderer: k\nc390\n") == b"\xc3\x90"
    with pytest.raises(CompileError, match="not a kernel rendered by the x86 renderer"):
        X86Compiler().compile("int main() {}")
    with pytest.raises(CompileError, match="damaged"):
        X86Compiler().compile("; x86-64 machine code, tinycore x86 renderer: k\nzz\n")


def test_inputs_are_what_the_cases_name() -> None:
    names = set(INPUTS)
    for code, _reference in CASES.values():
        for part in code.split("t['")[1:]:
            assert part.split("'")[0] in names
    assert Path(__file__).name.startswith("test_x86_")


def test_an_unencodable_kernel_is_refused_when_rendered(monkeypatch: pytest.MonkeyPatch) -> None:
    """An encoder or allocator failure surfaces as the renderer's refusal, naming the renderers to use instead."""
    from tiny_cpu.x86.encoding import EncodingError
    from tiny_cpu.x86.function import FunctionBuilder
    from tiny_cpu.x86.isel import SelectionError
    from tiny_cpu.x86.renderer import X86Renderer

    from tinycore import Tensor
    from tinycore.codegen import linearize
    from tinycore.engine.memory import device_facts
    from tinycore.schedule import create_schedule

    items = [item for item in create_schedule([(Tensor(INPUTS["m"]) * 2).uop], device_facts).items
             if not item.is_copy]
    uops = linearize(items[0].ast, X86Renderer())
    assert X86Renderer().render(uops).startswith("; x86-64 machine code")

    def unencodable(self: FunctionBuilder) -> bytes:
        raise EncodingError("vblendvps has no EVEX (AVX-512) form")

    monkeypatch.setattr(FunctionBuilder, "assemble", unencodable)
    with pytest.raises(SelectionError, match="cannot encode this kernel: vblendvps has no EVEX.*DEV=CPU:LLVM"):
        X86Renderer().render(uops)


@pytest.mark.parametrize("collecting", [True, False])
def test_rendering_pauses_the_garbage_collector_and_restores_it(collecting: bool,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The selection runs with the cyclic collector off (its collections walked every object the process tracks:
    40% of a large kernel's render), and leaves it as it found it, also when the kernel is refused."""
    import gc

    import tiny_cpu.x86.renderer as renderer_module
    from tiny_cpu.x86.isel import SelectionError
    from tiny_cpu.x86.renderer import X86Renderer

    from tinycore import Tensor
    from tinycore.codegen import linearize
    from tinycore.engine.memory import device_facts
    from tinycore.schedule import create_schedule

    items = [item for item in create_schedule([(Tensor(INPUTS["m"]) * 2).uop], device_facts).items
             if not item.is_copy]
    uops = linearize(items[0].ast, X86Renderer())
    seen: list[bool] = []
    selected = renderer_module.select_kernel

    def watched(*arguments: object, **options: object) -> bytes:
        seen.append(gc.isenabled())
        return selected(*arguments, **options)  # type: ignore[arg-type]

    def refused(*arguments: object, **options: object) -> bytes:
        seen.append(gc.isenabled())
        raise SelectionError("no rule")

    was = gc.isenabled()
    try:
        gc.enable() if collecting else gc.disable()
        monkeypatch.setattr(renderer_module, "select_kernel", watched)
        assert X86Renderer().render(uops).startswith("; x86-64 machine code")
        assert gc.isenabled() is collecting
        monkeypatch.setattr(renderer_module, "select_kernel", refused)
        with pytest.raises(SelectionError):
            X86Renderer().render(uops)
        assert gc.isenabled() is collecting
    finally:
        gc.enable() if was else gc.disable()
    assert seen == [False, False]


def test_thirty_two_registers_take_the_wide_matmul_tile_in_eight_lane_vectors() -> None:
    """With AVX-512's 32 registers codegen sizes the matmul tile for them (6 rows x 4 vectors, 24 accumulators) while
    the vectors stay the 8 lanes the selection has; with 16, the 6 x 2 tile. The wide tile's values match numpy's."""
    from tiny_cpu.x86.executable import ExecutableCode
    from tiny_cpu.x86.isel import select_kernel
    from tiny_cpu.x86.renderer import X86Renderer, host_vector_registers

    from tinycore import Tensor
    from tinycore.codegen import linearize
    from tinycore.engine.memory import device_facts
    from tinycore.schedule import create_schedule

    left, right = RNG.standard_normal((48, 96)).astype(np.float32), RNG.standard_normal((96, 64)).astype(np.float32)
    a, b = Tensor(left).realize(), Tensor(right).realize()
    items = [item for item in create_schedule([(a @ b).uop], device_facts).items if not item.is_copy]
    assert len(items) == 1
    inputs = [left if buffer is a.uop.base else right for buffer in items[0].buffers[1:]]
    assert [array is left for array in inputs].count(True) == 1
    counts = {}
    for registers in (16, 32):
        renderer = X86Renderer(vector_registers=registers, vector_lanes=8)
        renderer.global_max = None  # one call computes the whole output (no core_id split)
        renderer.has_threads = False
        uops = linearize(items[-1].ast, renderer)
        accumulators = [u for u in uops if u.op.name == "DEFINE_REG"]
        assert all(u.dtype.base.count == 8 for u in accumulators)
        counts[registers] = len(accumulators)
        if registers == 32 and host_is_x86_64():
            code = ExecutableCode(select_kernel(uops, vector_registers=host_vector_registers()))  # spills with 16
            output = np.zeros((48, 64), np.float32)
            code.function(None, *[ctypes.c_void_p] * 3)(output.ctypes.data, *[array.ctypes.data for array in inputs])
            np.testing.assert_allclose(output, left @ right, rtol=1e-4, atol=1e-4)
    assert counts == {16: 12, 32: 24}


AVX2_FLAGS = frozenset({"sse2", "avx", "avx2", "fma", "f16c", "bmi2"})


@pytest.mark.parametrize("avx512", [False, True], ids=["avx2", "avx512"])
def test_the_host_features_pick_sixteen_lane_zmm_code_or_todays_avx2(avx512: bool,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """With AVX-512 F, VL and DQ the renderer declares 16-lane float32 vectors and 32 registers, and a matmul's wide
    tile is 6 rows x 4 zmm; without them (CI's CPU may lack them) 8 lanes and 16 registers, the tile 6 rows x 2 ymm,
    and the code names no zmm, no register 16-31 and no mask register (capstone reads every instruction). The code
    matches numpy wherever this host runs it."""
    import capstone
    from tiny_cpu.x86.executable import ExecutableCode
    from tiny_cpu.x86.isel import select_kernel
    from tiny_cpu.x86.renderer import host_has_avx512

    from tinycore import Tensor
    from tinycore.codegen import linearize
    from tinycore.engine.memory import device_facts
    from tinycore.schedule import create_schedule

    runs_here = host_is_x86_64() and (host_has_avx512() or not avx512)
    flags = AVX2_FLAGS | ({"avx512f", "avx512vl", "avx512dq", "avx512bw"} if avx512 else set())
    monkeypatch.setattr("tiny_cpu.target.host_cpu_flags", lambda: flags)
    renderer, _ = make_x86_renderer("CPU", None)
    assert renderer.vector_widths == {dtypes.float32: (8, 16) if avx512 else (8,)}
    assert renderer.vector_registers == (32 if avx512 else 16)
    renderer.global_max, renderer.has_threads = None, False  # one call computes the whole output
    left, right = RNG.standard_normal((48, 96)).astype(np.float32), RNG.standard_normal((96, 128)).astype(np.float32)
    a, b = Tensor(left).realize(), Tensor(right).realize()
    expression = ((a @ b) < 0.5).where(a @ b, -1.0)
    items = [item for item in create_schedule([expression.uop], device_facts).items if not item.is_copy]
    assert len(items) == 1
    uops = linearize(items[0].ast, renderer)
    accumulators = [u for u in uops if u.op.name == "DEFINE_REG"]
    assert {u.dtype.base.count for u in accumulators} == {16 if avx512 else 8}
    assert len(accumulators) == (24 if avx512 else 12)  # 6 rows x 4 vectors, or 6 x 2
    code = select_kernel(uops, vector_registers=renderer.vector_registers)
    decoder = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    text = [f"{i.mnemonic} {i.op_str}" for i in decoder.disasm(code, 0)]
    assert sum(len(i.bytes) for i in decoder.disasm(code, 0)) == len(code)  # every byte read as an instruction
    high = [line for line in text if re.search(r"zmm|[xy]mm(1[6-9]|2[0-9]|3[01])\b|\bk[1-7]\b", line)]
    if avx512:
        assert any("zmm" in line for line in high) and any(line.startswith("vblendmps") for line in text)
        # each row's float broadcast straight from memory: a scalar load first took the 30th register, which spilled
        # an accumulator
        assert any(line.startswith("vbroadcastss zmm") and "ptr [" in line for line in text)
        assert not any(line.startswith("vmovss") for line in text)
    else:
        assert not high, high[:5]
    if runs_here:
        inputs = [left if buffer is a.uop.base else right for buffer in items[0].buffers[1:]]
        output = np.zeros((48, 128), np.float32)
        ExecutableCode(code).function(None, *[ctypes.c_void_p] * 3)(output.ctypes.data,
                                                                   *[array.ctypes.data for array in inputs])
        product = left @ right
        np.testing.assert_allclose(output, np.where(product < 0.5, product, -1), rtol=1e-4, atol=1e-4)


def test_sixteen_lanes_need_thirty_two_registers() -> None:
    from tiny_cpu.x86.renderer import X86Renderer

    with pytest.raises(ValueError, match="16 with 32 registers"):
        X86Renderer(vector_registers=16, vector_lanes=16)
