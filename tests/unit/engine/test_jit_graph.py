"""TinyJit finds how to replay a capture as one unit through the contract: the first call's device's `graph`
(DeviceContract.graph, a GraphFactory). None, or a factory that declines, means a replay call by call; results are
checked against numpy either way."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tinycore import Tensor, TinyJit
from tinycore.device.registry import Device


def _work(x: Tensor) -> Tensor:
    return ((x * 2 + 1).contiguous().exp().sum() + x.max()).realize()


def _expected(data: np.ndarray) -> float:
    return float(np.exp(data * 2 + 1).sum() + data.max())


def test_a_graph_that_declines_is_asked_once_with_every_call(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[int] = []

    def graph(calls: list[Any], input_buffers: list[Any], keep_alive: list[Any]) -> None:
        asked.append(len(calls))

    monkeypatch.setattr(Device["CPU"], "graph", graph)
    jitted = TinyJit(_work)
    for call in range(4):
        data = np.random.default_rng(call).standard_normal(16).astype(np.float32)
        np.testing.assert_allclose(jitted(Tensor(data).realize()).numpy(), _expected(data), rtol=1e-5)
    assert len(asked) == 1 and asked[0] >= 2  # at the capture, with every captured call
    from tinycore.engine.jit import _Replay
    assert isinstance(jitted._captured.replay, _Replay)  # type: ignore[attr-defined]


def test_the_cpu_queue_devices_graph_replays_the_capture() -> None:
    from tinycore.hcq.graph import HCQGraph, capture_graph
    assert Device["CPU"].graph is capture_graph
    jitted = TinyJit(_work)
    for call in range(4):
        data = np.random.default_rng(20 + call).standard_normal(16).astype(np.float32)
        np.testing.assert_allclose(jitted(Tensor(data).realize()).numpy(), _expected(data), rtol=1e-5)
    assert isinstance(jitted._captured.replay, HCQGraph)  # type: ignore[attr-defined]


def test_a_device_without_a_graph_replays_call_by_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Device["CPU"], "graph", None)
    jitted = TinyJit(_work)
    for call in range(3):
        data = np.random.default_rng(10 + call).standard_normal(16).astype(np.float32)
        np.testing.assert_allclose(jitted(Tensor(data).realize()).numpy(), _expected(data), rtol=1e-5)
    from tinycore.engine.jit import _Replay
    assert isinstance(jitted._captured.replay, _Replay)  # type: ignore[attr-defined]
