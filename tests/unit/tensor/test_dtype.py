"""DTypes: promotion against torch (tensor-tensor and tensor-scalar), limits, finfo, conversions, rounding.

Where torch has no answer (it refuses to promote uint16/uint32/uint64 with other types) the expected results are
tinygrad's lattice, written out by hand in UINT_PROMOTIONS. Known departures from torch, by design:
- a bool tensor with a Python int gives dtypes.default_int (int32) where torch gives its default int64;
- a signed integer with uint64 (no common integer type) gives dtypes.default_float.
"""
from __future__ import annotations

import itertools
import math
import subprocess
import sys

import numpy as np
import pytest
import torch

from tinycore.dtype import (
    DType,
    PtrDType,
    dtypes,
    from_numpy_dtype,
    from_torch_dtype,
    least_upper_dtype,
    least_upper_float,
    promote_with_scalar,
    sum_acc_dtype,
    to_dtype,
    to_numpy_dtype,
    to_torch_dtype,
    truncate,
)

TORCH_NAMES = {dtypes.bool: torch.bool, dtypes.int8: torch.int8, dtypes.int16: torch.int16,
               dtypes.int32: torch.int32, dtypes.int64: torch.int64, dtypes.uint8: torch.uint8,
               dtypes.uint16: torch.uint16, dtypes.uint32: torch.uint32, dtypes.uint64: torch.uint64,
               dtypes.float16: torch.float16, dtypes.bfloat16: torch.bfloat16, dtypes.float32: torch.float32,
               dtypes.float64: torch.float64, dtypes.fp8e4m3: torch.float8_e4m3fn, dtypes.fp8e5m2: torch.float8_e5m2}
TORCH_PROMOTABLE = [dtypes.bool, dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8,
                    dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64]
WIDE_UINTS = [dtypes.uint16, dtypes.uint32, dtypes.uint64]

# pairs torch refuses to promote, with tinygrad's lattice results (hand-written)
UINT_PROMOTIONS = {
    (dtypes.bool, dtypes.uint16): dtypes.uint16, (dtypes.bool, dtypes.uint32): dtypes.uint32,
    (dtypes.bool, dtypes.uint64): dtypes.uint64, (dtypes.uint8, dtypes.uint16): dtypes.uint16,
    (dtypes.uint8, dtypes.uint32): dtypes.uint32, (dtypes.uint8, dtypes.uint64): dtypes.uint64,
    (dtypes.uint16, dtypes.uint32): dtypes.uint32, (dtypes.uint16, dtypes.uint64): dtypes.uint64,
    (dtypes.uint32, dtypes.uint64): dtypes.uint64,
    (dtypes.int8, dtypes.uint16): dtypes.int32, (dtypes.int16, dtypes.uint16): dtypes.int32,
    (dtypes.int32, dtypes.uint16): dtypes.int32, (dtypes.int64, dtypes.uint16): dtypes.int64,
    (dtypes.int8, dtypes.uint32): dtypes.int64, (dtypes.int16, dtypes.uint32): dtypes.int64,
    (dtypes.int32, dtypes.uint32): dtypes.int64, (dtypes.int64, dtypes.uint32): dtypes.int64,
    (dtypes.int8, dtypes.uint64): dtypes.float32, (dtypes.int16, dtypes.uint64): dtypes.float32,
    (dtypes.int32, dtypes.uint64): dtypes.float32, (dtypes.int64, dtypes.uint64): dtypes.float32,
    (dtypes.uint16, dtypes.float16): dtypes.float16, (dtypes.uint32, dtypes.bfloat16): dtypes.bfloat16,
    (dtypes.uint64, dtypes.float32): dtypes.float32, (dtypes.uint64, dtypes.float64): dtypes.float64,
}


class TestPromotion:
    @pytest.mark.parametrize("first,second", list(itertools.product(TORCH_PROMOTABLE, TORCH_PROMOTABLE)))
    def test_tensor_tensor_matches_torch(self, first: DType, second: DType) -> None:
        expected = torch.promote_types(TORCH_NAMES[first], TORCH_NAMES[second])
        assert TORCH_NAMES[least_upper_dtype(first, second)] == expected

    @pytest.mark.parametrize("wide", WIDE_UINTS)
    def test_wide_uint_with_itself_matches_torch(self, wide: DType) -> None:
        assert TORCH_NAMES[least_upper_dtype(wide, wide)] == torch.promote_types(TORCH_NAMES[wide], TORCH_NAMES[wide])

    def test_torch_refuses_wide_uint_promotion(self) -> None:
        with pytest.raises(RuntimeError, match="not supported"):
            torch.promote_types(torch.int8, torch.uint16)

    @pytest.mark.parametrize("pair,expected", list(UINT_PROMOTIONS.items()))
    def test_wide_uint_lattice(self, pair: tuple[DType, DType], expected: DType) -> None:
        assert least_upper_dtype(*pair) == expected
        assert least_upper_dtype(*reversed(pair)) == expected

    def test_every_pair_has_a_result_and_is_symmetric(self) -> None:
        for first, second in itertools.product(dtypes.all, dtypes.all):
            assert least_upper_dtype(first, second) == least_upper_dtype(second, first)
            assert least_upper_dtype(first, first) == first

    def test_fp8_promotion(self) -> None:
        assert least_upper_dtype(dtypes.fp8e4m3, dtypes.int64) == dtypes.fp8e4m3
        assert least_upper_dtype(dtypes.fp8e4m3, dtypes.fp8e5m2) == dtypes.float16
        assert least_upper_dtype(dtypes.fp8e5m2, dtypes.bfloat16) == dtypes.bfloat16

    def test_vectors_promote_by_scalar(self) -> None:
        assert least_upper_dtype(dtypes.int8.vec(4), dtypes.float16) == dtypes.float16

    def test_many_operands(self) -> None:
        assert least_upper_dtype(dtypes.bool, dtypes.int8, dtypes.uint8) == dtypes.int16
        with pytest.raises(ValueError):
            least_upper_dtype()

    @pytest.mark.parametrize("tensor_dtype", TORCH_PROMOTABLE + WIDE_UINTS)
    @pytest.mark.parametrize("scalar", [True, 3, -2, 2.5])
    def test_tensor_scalar_matches_torch(self, tensor_dtype: DType, scalar: bool | int | float) -> None:
        expected = torch.result_type(torch.zeros(1, dtype=TORCH_NAMES[tensor_dtype]), scalar)
        found = promote_with_scalar(tensor_dtype, scalar)
        if tensor_dtype == dtypes.bool and type(scalar) is int:
            # documented departure: torch's default integer is int64, tinycore's is int32
            assert expected == torch.int64 and found == dtypes.default_int == dtypes.int32
        else:
            assert TORCH_NAMES[found] == expected

    def test_tensor_scalar_bad_scalar(self) -> None:
        with pytest.raises(TypeError, match="Python bool, int or float"):
            promote_with_scalar(dtypes.float32, "1")  # type: ignore[arg-type]

    def test_least_upper_float_and_sum_acc(self) -> None:
        assert least_upper_float(dtypes.int8) == dtypes.float32
        assert least_upper_float(dtypes.float16) == dtypes.float16
        assert sum_acc_dtype(dtypes.uint8) == dtypes.uint32
        assert sum_acc_dtype(dtypes.int8) == dtypes.int32 and sum_acc_dtype(dtypes.bool) == dtypes.int32
        assert sum_acc_dtype(dtypes.int64) == dtypes.int64
        assert sum_acc_dtype(dtypes.float16) == dtypes.float32


class TestLimits:
    @pytest.mark.parametrize("dtype", dtypes.ints)
    def test_integer_limits_match_numpy(self, dtype: DType) -> None:
        info = np.iinfo(to_numpy_dtype(dtype))
        assert (dtype.min, dtype.max) == (int(info.min), int(info.max))

    @pytest.mark.parametrize("dtype", dtypes.floats)
    def test_float_limits_are_infinite(self, dtype: DType) -> None:
        assert dtype.min == -math.inf and dtype.max == math.inf

    def test_bool_limits(self) -> None:
        assert (dtypes.bool.min, dtypes.bool.max) == (False, True)

    @pytest.mark.parametrize("dtype", [d for d in dtypes.all])
    def test_itemsize_matches_torch(self, dtype: DType) -> None:
        assert dtype.itemsize == torch.zeros(1, dtype=TORCH_NAMES[dtype]).element_size()

    @pytest.mark.parametrize("dtype", dtypes.floats)
    def test_finfo_matches_torch(self, dtype: DType) -> None:
        info = torch.finfo(TORCH_NAMES[dtype])
        mantissa = round(-math.log2(info.eps))
        assert dtypes.finfo(dtype) == (info.bits - mantissa - 1, mantissa)

    def test_finfo_rejects_ints(self) -> None:
        with pytest.raises(ValueError, match="floating point"):
            dtypes.finfo(dtypes.int32)


class TestFromPy:
    @pytest.mark.parametrize("value,expected", [
        (1, dtypes.int32), (1.5, dtypes.float32), (True, dtypes.bool), ([1, 2], dtypes.int32),
        ([1, 2.0], dtypes.float32), ([True, 1], dtypes.int32), ([[True], [False]], dtypes.bool), ([], dtypes.float32),
        ((1, (2, 3.5)), dtypes.float32)])
    def test_from_py(self, value: object, expected: DType) -> None:
        assert dtypes.from_py(value) == expected

    def test_from_py_error(self) -> None:
        with pytest.raises(TypeError, match="pass dtype= explicitly"):
            dtypes.from_py("text")


class TestConversions:
    @pytest.mark.parametrize("dtype", [dtypes.bool, *dtypes.ints, dtypes.float16, dtypes.float32, dtypes.float64])
    def test_numpy_round_trip(self, dtype: DType) -> None:
        numpy_dtype = to_numpy_dtype(dtype)
        assert numpy_dtype.itemsize == dtype.itemsize
        assert from_numpy_dtype(numpy_dtype) == dtype
        assert np.zeros(1, dtype=numpy_dtype).dtype == numpy_dtype

    def test_numpy_missing_types(self) -> None:
        with pytest.raises(TypeError, match="numpy has no"):
            to_numpy_dtype(dtypes.bfloat16)
        with pytest.raises(TypeError, match="no tinycore equivalent"):
            from_numpy_dtype(np.complex64)

    @pytest.mark.parametrize("dtype", list(dtypes.all))
    def test_torch_round_trip(self, dtype: DType) -> None:
        assert to_torch_dtype(dtype) == TORCH_NAMES[dtype]
        assert from_torch_dtype(TORCH_NAMES[dtype]) == dtype

    def test_torch_missing_type(self) -> None:
        with pytest.raises(TypeError, match="no tinycore equivalent"):
            from_torch_dtype(torch.complex64)

    def test_names(self) -> None:
        assert to_dtype("float32") == dtypes.float32 and to_dtype("half") == dtypes.float16
        assert to_dtype(dtypes.int8) is dtypes.int8
        with pytest.raises(TypeError, match="unknown dtype 'float33'"):
            to_dtype("float33")


class TestTruncate:
    VALUES = [0.1, -2.7, 1e-8, 3.4e38, 65504.0, 65520.0, 1e5, 1.0000001, 448.0, 470.0, 1000.0, -1e6, 57344.0,
              61440.0, 2.5e-6, 7.0e-4, math.inf, -math.inf]

    @pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.fp8e4m3,
                                       dtypes.fp8e5m2])
    def test_float_rounding_matches_torch(self, dtype: DType) -> None:
        for value in self.VALUES:
            expected = torch.tensor(value, dtype=torch.float64).to(TORCH_NAMES[dtype]).double().item()
            assert truncate(value, dtype) == expected, (dtype, value)

    def test_nan_stays_nan(self) -> None:
        for dtype in dtypes.floats:
            assert math.isnan(truncate(math.nan, dtype))

    @pytest.mark.parametrize("dtype", dtypes.ints)
    def test_integer_wrap_matches_numpy(self, dtype: DType) -> None:
        for value in [0, 1, -1, 127, 128, 255, 256, -129, 2 ** 31, -(2 ** 31) - 1, 2 ** 63, 2 ** 64 - 1]:
            expected = int(np.array(value, dtype=object).astype(np.uint64 if value >= 0 else np.int64)
                           .astype(to_numpy_dtype(dtype)) if abs(value) < 2 ** 64 else 0)
            assert truncate(value, dtype) == expected, (dtype, value)

    def test_bool(self) -> None:
        assert truncate(3, dtypes.bool) is True and truncate(0, dtypes.bool) is False


class TestDTypeObjects:
    def test_vectors_and_pointers(self) -> None:
        vector = dtypes.float32.vec(4)
        assert vector.count == 4 and vector.scalar == dtypes.float32 and vector.nbytes == 16
        assert vector == dtypes.float32.vec(4) and hash(vector) == hash(dtypes.float32.vec(4))
        assert vector != dtypes.int32.vec(4)
        assert repr(vector) == "dtypes.float.vec(4)" or repr(vector) == "dtypes.float32.vec(4)"
        with pytest.raises(ValueError, match="already a vector"):
            vector.vec(2)
        pointer = dtypes.float32.ptr(16, "local")
        assert isinstance(pointer, PtrDType) and pointer.base == dtypes.float32 and pointer.size == 16
        assert pointer != dtypes.float32 and pointer == dtypes.float32.ptr(16, "local")
        assert pointer != dtypes.float32.ptr(16)

    def test_predicates(self) -> None:
        assert dtypes.is_float(dtypes.bfloat16) and dtypes.is_float(dtypes.float16.vec(2))
        assert dtypes.is_int(dtypes.uint8) and not dtypes.is_int(dtypes.bool)
        assert dtypes.is_unsigned(dtypes.uint64) and not dtypes.is_unsigned(dtypes.int64)
        assert dtypes.is_bool(dtypes.bool)

    def test_default_float_from_environment(self) -> None:
        code = "from tinycore.dtype import dtypes; print(dtypes.default_float, dtypes.default_int)"
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                env={"DEFAULT_FLOAT": "half", "DEFAULT_INT": "int64", "PATH": ""}, cwd=".")
        assert result.stdout.split() == ["dtypes.float16", "dtypes.int64"]
        bad = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env={"DEFAULT_FLOAT": "int8", "PATH": ""}, cwd=".")
        assert bad.returncode != 0 and "DEFAULT_FLOAT=int8" in bad.stderr
