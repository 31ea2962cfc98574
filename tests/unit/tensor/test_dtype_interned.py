"""DTypes are interned and hash by identity (tinycore/dtype.py): every way of making a dtype equal to a live one must
give that very object, or a dict keyed by dtypes (every graph node's cache key) would miss."""
import copy
import dataclasses
import gc
import pickle
import threading

import numpy as np

from tinycore import Tensor
from tinycore.dtype import DType, PtrDType, dtypes


def test_every_way_of_making_an_equal_dtype_gives_the_same_object() -> None:
    float32 = dtypes.float32
    assert DType(13, 4, "float", "f") is float32
    assert DType(priority=13, itemsize=4, name="float", fmt="f", count=1) is float32
    assert dataclasses.replace(float32) is float32
    assert copy.copy(float32) is float32 and copy.deepcopy(float32) is float32
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        assert pickle.loads(pickle.dumps(float32, protocol)) is float32
    vector = float32.vec(4)
    assert DType(13, 4, "float4", None, 4, float32) is vector and pickle.loads(pickle.dumps(vector)) is vector
    pointer = float32.ptr(16)
    assert float32.ptr(16) is pointer and float32.ptr(size=16, addrspace="global") is pointer
    assert PtrDType(13, 4, "float", "f", 1, None, float32, "global", 16) is pointer
    assert copy.deepcopy({pointer: 1}) == {pointer: 1} and pickle.loads(pickle.dumps(pointer)) is pointer
    assert float32.ptr(16, "local") is not pointer and float32.ptr(16, "local") != pointer
    assert float32.ptr(17) != pointer and dtypes.int32 != float32


def test_hash_agrees_with_equality_in_dicts_and_sets() -> None:
    made = [DType(13, 4, "float", "f"), pickle.loads(pickle.dumps(dtypes.float32)), dtypes.float]
    assert len(set(made)) == 1 and {dtype: "x" for dtype in made}[dtypes.float32] == "x"
    keys = {(dtypes.float32.ptr(8), 1): "pointer"}
    assert keys[(dtypes.float32.ptr(8), 1)] == "pointer"


def test_a_dtype_made_after_its_equal_died_is_interned_again() -> None:
    made = dtypes.int16.ptr(12345, "local")
    del made
    gc.collect()
    again = dtypes.int16.ptr(12345, "local")
    assert again is dtypes.int16.ptr(12345, "local")
    assert {again: 1}[PtrDType(3, 2, "short", "h", 1, None, dtypes.int16, "local", 12345)] == 1


def test_threads_making_one_new_dtype_get_one_object() -> None:
    made: list[DType] = []
    start = threading.Barrier(8)

    def make() -> None:
        start.wait()
        made.append(dtypes.uint16.ptr(777, "reg"))

    threads = [threading.Thread(target=make) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(made) == 8 and all(dtype is made[0] for dtype in made)


def test_graphs_over_interned_dtypes_compute_like_numpy() -> None:
    values = np.array([1.5, -2.0, 3.25], dtype=np.float32)
    for _ in range(3):  # the general path, then the eager shortcut
        result = (Tensor(values) * 2 + 1).cast(DType(5, 4, "int", "i")).realize()
        assert result.dtype is dtypes.int32
        np.testing.assert_array_equal(result.numpy(), (values * 2 + 1).astype(np.int32))
