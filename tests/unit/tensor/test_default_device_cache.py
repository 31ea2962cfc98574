"""A Tensor made without a device takes the default device; tensor/base.py keeps the registry's answer while DEV's
targets and the plugin manager stay the same objects. Each change of DEV (Context, Device.DEFAULT's setter) or of
the manager must show in the next Tensor's device, and a malformed DEV keeps raising."""
import numpy as np
import pytest

import tinycore.tensor.base as tensor_base
from tinycore import Device, Tensor
from tinycore.helpers import DEV, Context


def test_default_follows_context_changes() -> None:
    outside = Tensor([0.0]).device
    for _ in range(2):  # twice: the second round reads the kept answers
        with Context(DEV="CPU:1"):
            assert Tensor([1.0]).device == "CPU:1" and Tensor([2.0]).device == "CPU:1"
            with Context(DEV="CPU:2"):
                assert Tensor([3.0]).device == "CPU:2"
            assert Tensor([4.0]).device == "CPU:1"
        assert Tensor([5.0]).device == outside
    with Context(DEV="CPU:1"):
        result = (Tensor([1.5, 2.5]) + 1).realize()
        assert result.device == "CPU:1"
        np.testing.assert_array_equal(result.numpy(), np.array([2.5, 3.5], dtype=np.float32))


def test_default_follows_the_setter() -> None:
    with Context(DEV="CPU:1"):
        assert Tensor([1.0]).device == "CPU:1"
        Device.DEFAULT = "CPU:3"  # puts CPU:3 first in DEV: new targets
        assert Tensor([1.0]).device == "CPU:3" and Device.DEFAULT == "CPU:3"


def test_another_plugin_manager_asks_the_registry_again(monkeypatch: pytest.MonkeyPatch) -> None:
    with Context(DEV="CPU:1"):
        assert Tensor([1.0]).device == "CPU:1"
        asked: list[str] = []

        class Registry:
            @property
            def DEFAULT(self) -> str:  # noqa: N802 - the registry's name
                asked.append("DEFAULT")
                return "CPU:1"

        assert tensor_base._default_device(Registry()) == "CPU:1" and asked == [], "same targets and manager: kept"
        monkeypatch.setattr(tensor_base, "_PLUGIN_MANAGER", [object])  # a new object on every call: never the same
        assert tensor_base._default_device(Registry()) == "CPU:1" and asked == ["DEFAULT"]


def test_malformed_dev_still_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    from tinycore.target import DevError
    Tensor([1.0])
    monkeypatch.setattr(DEV, "_error", DevError("DEV from the environment is malformed"))
    with pytest.raises(DevError, match="malformed"):
        Tensor([1.0])
