"""API surface tinygrad programs and test suites read: Context(BEAM=..., IGNORE_BEAM_CACHE=...) and
Renderer.supported_dtypes(), checked against numpy."""
from __future__ import annotations

import numpy as np
import pytest

from tinycore import Context, Device, helpers
from tinycore.dtype import DType, dtypes, to_numpy_dtype
from tinycore.tensor import Tensor
from tinycore.testing.capabilities import capabilities_of


def test_context_accepts_beam_settings_and_restores_them() -> None:
    before = (helpers.BEAM.value, helpers.IGNORE_BEAM_CACHE.value)
    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    with Context(BEAM=2, IGNORE_BEAM_CACHE=1):
        assert (helpers.BEAM.value, helpers.IGNORE_BEAM_CACHE.value) == (2, 1)
        result = (Tensor(values) @ Tensor(values.T)).numpy()
    np.testing.assert_allclose(result, values @ values.T)
    assert (helpers.BEAM.value, helpers.IGNORE_BEAM_CACHE.value) == before
    with pytest.raises(KeyError, match="NOT_A_SETTING"):
        with Context(NOT_A_SETTING=1):
            pass


def test_cpu_renderer_supported_dtypes_run() -> None:
    supported = Device["CPU"].renderer.supported_dtypes()
    assert isinstance(supported, set) and all(isinstance(dtype, DType) for dtype in supported)
    assert {dtypes.bool, dtypes.int32, dtypes.float32, dtypes.float16, dtypes.int64} <= supported
    assert not set(dtypes.fp8s) & supported  # the C renderer has no fp8 type
    assert supported == set(capabilities_of(Device["CPU"]).dtypes)
    for dtype in sorted(supported, key=lambda item: item.name):
        if dtype in (dtypes.bool, dtypes.bfloat16):
            continue  # no numpy dtype to compare with
        values = np.array([1, 2, 3, 7], dtype=to_numpy_dtype(dtype))
        np.testing.assert_array_equal((Tensor(values) * 2 + 1).numpy(), values * 2 + 1, err_msg=str(dtype))


def test_a_renderer_answers_from_its_device_declaration() -> None:
    from tinycore.device.compiled import Compiled
    from tinycore.renderer.renderer import Renderer

    class Declared(Compiled):
        capabilities = {"dtypes": frozenset({dtypes.int32, dtypes.float32})}

    renderer = Renderer()
    assert renderer.supported_dtypes() == set(dtypes.all)
    device = Declared("DECLARED", None, renderer, None, lambda name, lib: None)  # type: ignore[arg-type]
    assert device.renderer.supported_dtypes() == {dtypes.int32, dtypes.float32}
