"""The int8 dot product of codegen (tinycore.codegen.int8_dot): dot4_bytes against numpy on every renderer that runs
here (the C renderer with and without the pass, LLVM, the interpreter behind a MOCK GPU), edge bytes included, and
the pass's rewrite: where the renderer declares int8 dot products, and only there."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy
import pytest

from tinycore import Tensor, dtypes
from tinycore.codegen import lower_to_program
from tinycore.codegen.int8_dot import DOT4_NAME, dot4_bytes, fuse_dot4
from tinycore.device import Device
from tinycore.engine.memory import device_facts
from tinycore.schedule import create_schedule
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp

EDGES_UNSIGNED = [0, 1, 127, 128, 254, 255]
EDGES_SIGNED = [-128, -127, -1, 0, 1, 127]


def _operands(lanes: int, seed: int) -> tuple[numpy.ndarray, numpy.ndarray, numpy.ndarray]:
    """Unsigned bytes, signed bytes (rows, lanes, 4) and int32 accumulators (rows, lanes): every pair of edge bytes
    in some byte position, then random bytes; two accumulators whose sums land on int32's edges."""
    pairs = numpy.array([(u, s) for u in EDGES_UNSIGNED for s in EDGES_SIGNED])
    rng = numpy.random.default_rng(seed)
    rows = 12
    unsigned = rng.integers(0, 256, (rows, lanes, 4))
    signed = rng.integers(-128, 128, (rows, lanes, 4))
    flat_u, flat_s = unsigned.reshape(-1), signed.reshape(-1)
    flat_u[:len(pairs)], flat_s[:len(pairs)] = pairs[:, 0], pairs[:, 1]
    unsigned[10, 0], signed[10, 0] = 255, -128  # the most negative lane, 4 * 255 * -128, onto int32's minimum
    unsigned[11, 0], signed[11, 0] = 255, 127  # the most positive one onto int32's maximum
    accumulator = rng.integers(-1000, 1000, (rows, lanes))
    accumulator[10, 0], accumulator[11, 0] = -2**31 + 4 * 255 * 128, 2**31 - 1 - 4 * 255 * 127
    return unsigned.astype(numpy.uint8), signed.astype(numpy.int8), accumulator.astype(numpy.int32)


def _expected(unsigned: numpy.ndarray, signed: numpy.ndarray, accumulator: numpy.ndarray) -> numpy.ndarray:
    return accumulator.astype(numpy.int64) + (unsigned.astype(numpy.int64) * signed.astype(numpy.int64)).sum(-1)


def _words(values: numpy.ndarray) -> numpy.ndarray:
    """(..., 4) bytes as int32 words, byte i at bits 8i (numpy's little-endian view, written out)."""
    unsigned = values.astype(numpy.int64) & 255
    return (unsigned[..., 0] | unsigned[..., 1] << 8 | unsigned[..., 2] << 16 | unsigned[..., 3] << 24).astype(
        numpy.uint32).view(numpy.int32)


_CHILD = """
import json, sys
import numpy
sys.path.insert(0, {here!r})
from test_int8_dot import _operands, _words
from tinycore import Device, Tensor
from tinycore.codegen.int8_dot import dot4_bytes
renderer = Device[Device.DEFAULT].renderer
if {declared} is not None:
    renderer.int8_dot_products = {declared}
results = {{}}
for lanes in (1, 8, 16):
    unsigned, signed, accumulator = _operands(lanes, seed=lanes)
    a, b = Tensor(_words(unsigned)), Tensor(_words(signed))
    lane_sums = (dot4_bytes(a, b) + Tensor(accumulator)).numpy()
    # a block's lanes summed by a reduce, the dot product inside it (int8_linear's form)
    block_sums = (dot4_bytes(a, b) + Tensor(accumulator)).sum(-1).numpy()
    results[lanes] = [lane_sums.tolist(), block_sums.tolist()]
print(json.dumps({{"renderer": type(renderer).__name__, "declared": renderer.int8_dot_products,
                   "results": results}}))
"""


@pytest.mark.parametrize("device, declared", [("CPU", None), ("CPU", True), ("CPU", False), ("CPU:LLVM", None),
                                              ("MOCK+NV", None)])
def test_dot4_bytes_matches_numpy_on_each_renderer(device: str, declared: bool | None) -> None:
    """dot4_bytes plus an accumulator equals numpy's int64 sum (no lane overflows), its lanes summed numpy's int32,
    on the C renderer (as this host declares it, forced on: the op, through vpdpbusd where the host has VNNI, else the
    macro's plain C; forced off: the bytes' own ops), LLVM and the interpreter of a MOCK GPU."""
    if device == "CPU:LLVM":
        pytest.importorskip("llvmlite")
    here = os.path.dirname(os.path.abspath(__file__))
    environment = {**os.environ, "DEV": device}
    child = subprocess.run([sys.executable, "-c", _CHILD.format(here=here, declared=declared)], env=environment,
                           capture_output=True, text=True, timeout=600)
    assert child.returncode == 0, child.stderr[-3000:]
    report = json.loads(child.stdout.strip().splitlines()[-1])
    if declared is not None:
        assert report["declared"] is declared
    for lanes in (1, 8, 16):
        unsigned, signed, accumulator = _operands(lanes, seed=lanes)
        expected = _expected(unsigned, signed, accumulator)
        lane_sums, block_sums = report["results"][str(lanes)]
        numpy.testing.assert_array_equal(numpy.array(lane_sums, dtype=numpy.int64), expected)
        # the rows with edge accumulators wrap around in the block's int32 sum, as C's and numpy's int32 do
        numpy.testing.assert_array_equal(numpy.array(block_sums), expected.sum(-1).astype(numpy.int32))


def _product_source(declared: bool) -> str:
    """The C source of a kernel summing dot4_bytes over 8 lanes of 64 rows of words, with the C renderer's
    declaration set to `declared`."""
    renderer = Device["CPU"].renderer
    before = renderer.int8_dot_products
    a = Tensor.empty(64, 8, dtype=dtypes.int32, device="CPU")
    b = Tensor.empty(64, 8, dtype=dtypes.int32, device="CPU")
    total = (dot4_bytes(a, b) + Tensor.empty(64, 8, dtype=dtypes.int32, device="CPU")).sum(-1)
    kernels = [item.ast for item in create_schedule([total.uop], device_facts).items if not item.is_copy]
    try:
        renderer.int8_dot_products = declared
        return "\n".join(lower_to_program(ast, renderer).src for ast in kernels)
    finally:
        renderer.int8_dot_products = before


def test_the_pass_runs_only_where_the_renderer_declares_it() -> None:
    """Declared: the kernel calls tc_dot4_u8s8_N once per vector of lanes and takes no byte apart; not declared:
    the same graph renders as shifts, masks and multiplies, and no tc_dot4."""
    declared, plain = _product_source(True), _product_source(False)
    body = declared[declared.index("\nvoid "):]  # the kernel after its prelude of types and macros
    assert f"{DOT4_NAME}_" in body and ">>" not in body and "^" not in body
    assert DOT4_NAME not in plain and ">>" in plain and "^" in plain


def _variable(name: str) -> UOp:
    return UOp.variable(name, -2**31, 2**31 - 1, dtypes.int32)


def test_fuse_dot4_takes_the_four_products_and_keeps_the_rest_as_the_accumulator() -> None:
    """The four byte products of one word pair become one op whose accumulator is every other term; terms that pair
    different bytes, or bytes of different words, are no dot product."""
    a, b, c, d = (_variable(name) for name in "abcd")
    fused = fuse_dot4(dot4_bytes(a, b) + c)
    assert fused is not None and fused.op is Ops.CUSTOM and fused.src[1:] == (a, b) and fused.src[0] is c
    assert fuse_dot4(dot4_bytes(a, b) + dot4_bytes(c, d)) is not None  # one of them; the other stays a sum
    assert fuse_dot4(fused + d) is not None and fuse_dot4(fused + d).src[0].op is Ops.ADD  # type: ignore[union-attr]
    shifted = (a & 255) * (((b >> 8 & 255) ^ 128) + -128)  # byte 0 of a times byte 1 of b
    terms = shifted + (a >> 8 & 255) * (((b & 255) ^ 128) + -128)
    assert fuse_dot4(terms + terms + c) is None
    mixed = dot4_bytes(a, b).src[0] + dot4_bytes(c, b).src[1]  # three of a's products and one of c's
    assert fuse_dot4(mixed + c) is None
