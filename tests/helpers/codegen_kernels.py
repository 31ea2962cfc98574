"""Hand-built kernel ASTs for the codegen tests, each with the numpy computation it must match."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from tinycore.dtype import DType, dtypes, to_numpy_dtype
from tinycore.renderer.renderer import Renderer
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp


class VectorCPURenderer(Renderer):
    """A renderer description like the CPU's (threads, AVX2-sized vectors) for tests that only linearize."""

    device = "TEST"
    has_local = False
    has_shared = False
    has_threads = True
    vector_widths = {dtypes.float32: (2, 4, 8), dtypes.int32: (2, 4, 8), dtypes.float64: (2, 4)}


class ScalarRenderer(Renderer):
    """A renderer without vectors or threads."""

    device = "TEST"
    has_local = False
    has_threads = False
    vector_widths: dict = {}


class GPURenderer(Renderer):
    """A renderer description like a GPU's (thread indices, no CPU workers)."""

    device = "TEST"
    has_local = True
    has_threads = False
    global_max = (256, 256, 256)


def const(value: int) -> UOp:
    """An int32 constant."""
    return UOp.const(dtypes.int32, value)


def loop(size: int | UOp, axis: int) -> UOp:
    """A RANGE over `size` with axis id `axis`."""
    end = size if isinstance(size, UOp) else const(size)
    return UOp(Ops.RANGE, dtypes.int32, (end,), (axis, None))


def buffer(position: int, dtype: DType, size: int) -> UOp:
    """DEFINE_GLOBAL number `position`."""
    return UOp(Ops.DEFINE_GLOBAL, dtype.ptr(size), (), position)


def flat_index(ranges: list[UOp], strides: list[int], offset: int = 0) -> UOp:
    """sum(range * stride) + offset (terms with stride 0 left out)."""
    index = const(offset)
    for range_node, stride in zip(ranges, strides, strict=True):
        if stride:
            index = index + range_node * stride
    return index


def contiguous_strides(shape: tuple[int, ...]) -> list[int]:
    """Row-major strides of `shape`."""
    strides, running = [], 1
    for size in reversed(shape):
        strides.append(running)
        running *= size
    return list(reversed(strides))


@dataclass
class Case:
    """A kernel AST, its input arrays (buffer 1...), the output shape/dtype and the numpy reference."""

    name: str
    ast: UOp
    inputs: list[np.ndarray]
    output_shape: tuple[int, ...]
    output_dtype: DType
    reference: Callable[..., np.ndarray]
    var_vals: dict[str, int] = field(default_factory=dict)

    def expected(self) -> np.ndarray:
        """The numpy result."""
        return np.asarray(self.reference(*self.inputs)).astype(to_numpy_dtype(self.output_dtype))


def random_array(shape: tuple[int, ...], dtype: DType, seed: int) -> np.ndarray:
    """Deterministic test data of `dtype`: floats in [-2, 2), ints in [-50, 50)."""
    generator = np.random.default_rng(seed)
    if dtypes.is_float(dtype):
        return generator.uniform(-2, 2, shape).astype(to_numpy_dtype(dtype))
    if dtypes.is_unsigned(dtype):
        return generator.integers(0, 100, shape).astype(to_numpy_dtype(dtype))
    return generator.integers(-50, 50, shape).astype(to_numpy_dtype(dtype))


def elementwise_broadcast(rows: int, columns: int, dtype: DType = dtypes.float32) -> Case:
    """out[i, j] = a[i, j] * b[j] + c[i]."""
    i, j = loop(rows, 0), loop(columns, 1)
    out, a, b, c = (buffer(0, dtype, rows * columns), buffer(1, dtype, rows * columns), buffer(2, dtype, columns),
                    buffer(3, dtype, rows))
    value = a.index(flat_index([i, j], [columns, 1])).load() * b.index(j * 1).load() + c.index(i * 1).load()
    ast = out.index(flat_index([i, j], [columns, 1])).store(value).sink()
    inputs = [random_array((rows, columns), dtype, 1), random_array((columns,), dtype, 2),
              random_array((rows,), dtype, 3)]
    return Case(f"broadcast_{rows}x{columns}_{dtype.name}", ast, inputs, (rows, columns), dtype,
                lambda x, y, z: x * y[None, :] + z[:, None])


def transposed_copy(rows: int, columns: int) -> Case:
    """out[j, i] = a[i, j] + 1 (strided loads, contiguous stores)."""
    i, j = loop(columns, 0), loop(rows, 1)  # output axes: i over columns of a, j over rows of a
    out, a = buffer(0, dtypes.float32, rows * columns), buffer(1, dtypes.float32, rows * columns)
    value = a.index(flat_index([i, j], [1, columns])).load() + 1.0
    ast = out.index(flat_index([i, j], [rows, 1])).store(value).sink()
    return Case(f"transpose_{rows}x{columns}", ast, [random_array((rows, columns), dtypes.float32, 4)],
                (columns, rows), dtypes.float32, lambda x: x.T + 1)


def reduce_inner(rows: int, columns: int, op: Ops = Ops.ADD, dtype: DType = dtypes.float32) -> Case:
    """out[i] = reduce_j a[i, j]."""
    i, j = loop(rows, 0), loop(columns, 1)
    out, a = buffer(0, dtype, rows), buffer(1, dtype, rows * columns)
    value = UOp(Ops.REDUCE, dtype, (a.index(flat_index([i, j], [columns, 1])).load(), j), op)
    ast = out.index(i * 1).store(value).sink()
    numpy_reduce = {Ops.ADD: np.sum, Ops.MAX: np.max, Ops.MUL: np.prod}[op]
    data = random_array((rows, columns), dtype, 5)
    if op is Ops.MUL:
        data = (np.abs(data) % 2 + 1).astype(data.dtype) if not dtypes.is_float(dtype) else \
            np.random.default_rng(6).uniform(0.8, 1.2, (rows, columns)).astype(data.dtype)
    return Case(f"reduce_inner_{op.name}_{rows}x{columns}_{dtype.name}", ast, [data], (rows,), dtype,
                lambda x: numpy_reduce(x, axis=1))


def reduce_outer(rows: int, columns: int) -> Case:
    """out[j] = sum_i a[i, j] (the reduce axis is the strided one)."""
    j, i = loop(columns, 0), loop(rows, 1)
    out, a = buffer(0, dtypes.float32, columns), buffer(1, dtypes.float32, rows * columns)
    value = UOp(Ops.REDUCE, dtypes.float32, (a.index(flat_index([i, j], [columns, 1])).load(), i), Ops.ADD)
    ast = out.index(j * 1).store(value).sink()
    return Case(f"reduce_outer_{rows}x{columns}", ast, [random_array((rows, columns), dtypes.float32, 7)],
                (columns,), dtypes.float32, lambda x: x.sum(axis=0))


def full_reduce(size: int, dtype: DType = dtypes.float32) -> Case:
    """out[0] = sum(a)."""
    k = loop(size, 0)
    out, a = buffer(0, dtype, 1), buffer(1, dtype, size)
    value = UOp(Ops.REDUCE, dtype, (a.index(k * 1).load(), k), Ops.ADD)
    ast = out.index(const(0)).store(value).sink()
    return Case(f"full_reduce_{size}_{dtype.name}", ast, [random_array((size,), dtype, 8)], (1,), dtype,
                lambda x: np.array([x.sum()]))


def padded(size: int, before: int, after: int) -> Case:
    """out[i] = a[i - before] where 0 <= i - before < size, else 0 (a padding mask), times 2."""
    total = size + before + after
    i = loop(total, 0)
    out, a = buffer(0, dtypes.float32, total), buffer(1, dtypes.float32, size)
    valid = (i < const(before)).logical_not() & (i < const(before + size))
    value = a.index(i + (-before), valid=valid).load() * 2.0
    ast = out.index(i * 1).store(value).sink()
    return Case(f"pad_{size}_{before}_{after}", ast, [random_array((size,), dtypes.float32, 9)], (total,),
                dtypes.float32, lambda x: np.pad(x, (before, after)) * 2)


def matmul(rows: int, inner: int, columns: int, dtype: DType = dtypes.float32) -> Case:
    """out[i, j] = sum_k a[i, k] * b[k, j]."""
    i, j, k = loop(rows, 0), loop(columns, 1), loop(inner, 2)
    out, a, b = (buffer(0, dtype, rows * columns), buffer(1, dtype, rows * inner), buffer(2, dtype, inner * columns))
    product = a.index(flat_index([i, k], [inner, 1])).load() * b.index(flat_index([k, j], [columns, 1])).load()
    ast = out.index(flat_index([i, j], [columns, 1])).store(UOp(Ops.REDUCE, dtype, (product, k), Ops.ADD)).sink()
    inputs = [random_array((rows, inner), dtype, 10), random_array((inner, columns), dtype, 11)]
    return Case(f"matmul_{rows}x{inner}x{columns}_{dtype.name}", ast, inputs, (rows, columns), dtype,
                lambda x, y: x @ y)


def matmul_transposed(rows: int, inner: int, columns: int) -> Case:
    """out[i, j] = sum_k a[i, k] * b[j, k]: both inputs contiguous along the reduce (A @ B.T)."""
    i, j, k = loop(rows, 0), loop(columns, 1), loop(inner, 2)
    out, a = buffer(0, dtypes.float32, rows * columns), buffer(1, dtypes.float32, rows * inner)
    b = buffer(2, dtypes.float32, columns * inner)
    product = a.index(flat_index([i, k], [inner, 1])).load() * b.index(flat_index([j, k], [inner, 1])).load()
    ast = out.index(flat_index([i, j], [columns, 1])).store(UOp(Ops.REDUCE, dtypes.float32, (product, k),
                                                                   Ops.ADD)).sink()
    inputs = [random_array((rows, inner), dtypes.float32, 14), random_array((columns, inner), dtypes.float32, 15)]
    return Case(f"matmul_transposed_{rows}x{inner}x{columns}", ast, inputs, (rows, columns), dtypes.float32,
                lambda x, y: x @ y.T)


def softmax_numerator(rows: int, columns: int) -> Case:
    """out[i, j] = exp2(a[i, j] - max_k a[i, k]) (a reduce used by an elementwise consumer in one kernel)."""
    i, j, k = loop(rows, 0), loop(columns, 1), loop(columns, 2)
    out, a = buffer(0, dtypes.float32, rows * columns), buffer(1, dtypes.float32, rows * columns)
    maximum = UOp(Ops.REDUCE, dtypes.float32, (a.index(flat_index([i, k], [columns, 1])).load(), k), Ops.MAX)
    value = (a.index(flat_index([i, j], [columns, 1])).load() - maximum).exp2()
    ast = out.index(flat_index([i, j], [columns, 1])).store(value).sink()
    return Case(f"softmax_numerator_{rows}x{columns}", ast, [random_array((rows, columns), dtypes.float32, 12)],
                (rows, columns), dtypes.float32, lambda x: np.exp2(x - x.max(axis=1, keepdims=True)))


def integer_arithmetic(size: int) -> Case:
    """out[i] = (a[i] * 3 + i) // 4 + (a[i] % 5) on int32 (C division semantics, numbers kept non-negative)."""
    i = loop(size, 0)
    out, a = buffer(0, dtypes.int32, size), buffer(1, dtypes.int32, size)
    x = a.index(i * 1).load()
    value = (x * 3 + i) // 4 + x % 5
    ast = out.index(i * 1).store(value).sink()
    data = np.random.default_rng(13).integers(0, 1000, size).astype(np.int32)
    return Case(f"int_arith_{size}", ast, [data], (size,), dtypes.int32,
                lambda x: (x * 3 + np.arange(size)) // 4 + x % 5)


def symbolic_elementwise(maximum: int, actual: int) -> Case:
    """out[i] = a[i] + 1 for i < n, with n a DEFINE_VAR."""
    n = UOp(Ops.DEFINE_VAR, dtypes.int32, (), ("n", 1, maximum))
    i = loop(n, 0)
    out, a = buffer(0, dtypes.float32, maximum), buffer(1, dtypes.float32, maximum)
    ast = out.index(i * 1).store(a.index(i * 1).load() + 1.0).sink()
    data = random_array((maximum,), dtypes.float32, 14)

    def reference(x: np.ndarray) -> np.ndarray:
        """x + 1 on the first `actual` elements, 0 after them."""
        result = np.zeros_like(x)
        result[:actual] = x[:actual] + 1
        return result
    return Case(f"symbolic_{actual}_of_{maximum}", ast, [data], (maximum,), dtypes.float32, reference,
                {"n": actual})


def two_outputs(size: int) -> Case:
    """out0[i] = a[i] + b[i], out1[i] = a[i] * b[i] (two stores in one kernel)."""
    i = loop(size, 0)
    out0, out1 = buffer(0, dtypes.float32, size), buffer(1, dtypes.float32, size)
    a, b = buffer(2, dtypes.float32, size), buffer(3, dtypes.float32, size)
    x, y = a.index(i * 1).load(), b.index(i * 1).load()
    ast = UOp(Ops.SINK, dtypes.void, (out0.index(i * 1).store(x + y), out1.index(i * 1).store(x * y)))
    return Case(f"two_outputs_{size}", ast, [random_array((size,), dtypes.float32, 15),
                                            random_array((size,), dtypes.float32, 16)],
                (size,), dtypes.float32, lambda p, q: p + q)


def padded_rows(rows: int, columns: int, before: int, after: int) -> Case:
    """out[i, j] = a[i - before, j] where row i - before exists, else 0: the mask is the same for a whole row."""
    total = rows + before + after
    i, j = loop(total, 0), loop(columns, 1)
    out, a = buffer(0, dtypes.float32, total * columns), buffer(1, dtypes.float32, rows * columns)
    valid = (i < const(before)).logical_not() & (i < const(before + rows))
    value = a.index((i + (-before)) * columns + j, valid=valid).load() + 1.0
    ast = out.index(i * columns + j).store(value).sink()
    return Case(f"pad_rows_{rows}x{columns}_{before}_{after}", ast, [random_array((rows, columns), dtypes.float32, 17)],
                (total, columns), dtypes.float32, lambda x: np.pad(x, ((before, after), (0, 0))) + 1)


def compare_to_bool(size: int) -> Case:
    """out[i] = a[i] < b[i] stored as bool."""
    i = loop(size, 0)
    out, a, b = buffer(0, dtypes.bool, size), buffer(1, dtypes.float32, size), buffer(2, dtypes.float32, size)
    ast = out.index(i * 1).store(a.index(i * 1).load() < b.index(i * 1).load()).sink()
    return Case(f"compare_{size}", ast, [random_array((size,), dtypes.float32, 18),
                                        random_array((size,), dtypes.float32, 19)],
                (size,), dtypes.bool, lambda x, y: x < y)


def cast_int_to_float(rows: int, columns: int) -> Case:
    """out[i, j] = float(a[i, j]) * 0.5 + float(i) (casts of loads and of an index)."""
    i, j = loop(rows, 0), loop(columns, 1)
    out, a = buffer(0, dtypes.float32, rows * columns), buffer(1, dtypes.int32, rows * columns)
    value = a.index(flat_index([i, j], [columns, 1])).load().cast(dtypes.float32) * 0.5 + i.cast(dtypes.float32)
    ast = out.index(flat_index([i, j], [columns, 1])).store(value).sink()
    return Case(f"cast_{rows}x{columns}", ast, [random_array((rows, columns), dtypes.int32, 20)], (rows, columns),
                dtypes.float32, lambda x: x.astype(np.float32) * 0.5 + np.arange(rows, dtype=np.float32)[:, None])


def symbolic_reduce(rows: int, maximum: int, actual: int) -> Case:
    """out[i] = sum_{j < n} a[i, j] with n a DEFINE_VAR (the row length stays `maximum`)."""
    n = UOp(Ops.DEFINE_VAR, dtypes.int32, (), ("n", 1, maximum))
    i, j = loop(rows, 0), loop(n, 1)
    out, a = buffer(0, dtypes.float32, rows), buffer(1, dtypes.float32, rows * maximum)
    value = UOp(Ops.REDUCE, dtypes.float32, (a.index(flat_index([i, j], [maximum, 1])).load(), j), Ops.ADD)
    ast = out.index(i * 1).store(value).sink()
    return Case(f"symbolic_reduce_{actual}_of_{maximum}", ast, [random_array((rows, maximum), dtypes.float32, 21)],
                (rows,), dtypes.float32, lambda x: x[:, :actual].sum(axis=1), {"n": actual})


CASES = [  # the kernels test_codegen and test_linearize run

    elementwise_broadcast(4, 16), elementwise_broadcast(3, 5), elementwise_broadcast(1, 1),
    elementwise_broadcast(6, 24, dtypes.int32), transposed_copy(8, 16), transposed_copy(3, 5),
    reduce_inner(4, 64), reduce_inner(3, 7), reduce_inner(5, 32, Ops.MAX), reduce_inner(2, 16, Ops.MUL),
    reduce_inner(4, 48, Ops.ADD, dtypes.int32), reduce_inner(3, 40, Ops.MAX, dtypes.int32),
    reduce_outer(16, 8), reduce_outer(7, 24), full_reduce(256), full_reduce(100, dtypes.int32),
    padded(10, 2, 3), padded(16, 8, 8), padded_rows(5, 16, 2, 1), matmul(8, 32, 16), matmul(5, 7, 3),
    matmul(12, 16, 8),
    matmul(6, 12, 16, dtypes.int32), matmul_transposed(16, 32, 64), matmul_transposed(64, 16, 8),
    matmul_transposed(5, 24, 7), matmul_transposed(12, 8, 4), softmax_numerator(4, 16), integer_arithmetic(64),
    symbolic_elementwise(40, 29), compare_to_bool(40), cast_int_to_float(6, 16), symbolic_reduce(4, 48, 37),
]
