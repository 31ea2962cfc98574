"""TinyJit replays whose inputs are new whole buffers every call (a framework bridge's training step): the inputs'
Buffers are taken from the nodes' arguments without the general check, and a changed layout is still refused."""
from __future__ import annotations

import numpy as np
import pytest

from tinycore import Tensor, TinyJit, dtypes
from tinycore.engine.jit import JitInputError
from tinycore.engine.jit import TinyJit as EngineJit
from tinycore.uop import Ops


def _new_buffer(values: np.ndarray) -> Tensor:
    """A whole realized buffer holding `values` (a new buffer node each call, reshaped to their shape)."""
    tensor = Tensor(values).realize()
    node = tensor.uop
    while node.op is Ops.RESHAPE:
        node = node.src[0]
    assert node.op is Ops.BUFFER
    return tensor


def test_new_buffers_each_call_replay_with_their_values(monkeypatch: pytest.MonkeyPatch) -> None:
    @TinyJit
    def scaled_sum(a: Tensor, b: Tensor) -> Tensor:
        return (a * 2 + b).realize()

    generator = np.random.default_rng(0)
    for call in range(5):
        a_values = generator.standard_normal((3, 4)).astype(np.float32)
        b_values = generator.standard_normal(12).astype(np.float32)
        a, b = _new_buffer(a_values), _new_buffer(b_values).reshape(12)
        if call == 3:  # from here on only the whole-buffer path may answer
            monkeypatch.setattr(EngineJit, "_checked_input_buffers", _refuse)
        result = scaled_sum(a, b.reshape(3, 4))
        np.testing.assert_allclose(result.numpy(), a_values * 2 + b_values.reshape(3, 4), rtol=1e-6)


def _refuse(self: object, inputs: object) -> None:
    raise AssertionError("the general input check ran for whole-buffer inputs")


def test_whole_buffer_of_another_shape_or_dtype_is_refused() -> None:
    @TinyJit
    def doubled(a: Tensor) -> Tensor:
        return (a * 2).realize()

    for _ in range(3):
        doubled(Tensor.empty(3, 4, dtype=dtypes.float32))
    with pytest.raises(JitInputError, match="shape"):
        doubled(Tensor.empty(4, 3, dtype=dtypes.float32))
    with pytest.raises(JitInputError, match="dtype"):
        doubled(Tensor.empty(3, 4, dtype=dtypes.int32))
    with pytest.raises(JitInputError, match="shape"):
        doubled(Tensor.empty(12, dtype=dtypes.float32))
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_allclose(doubled(_new_buffer(values)).numpy(), values * 2)
