"""The AMD plugin's registration: entry point, API level, device and renderer specs, opening AMD without a GPU and
the availability probe (checked against fakes of the driver, and on this machine for a quick, well-formed answer)."""
from __future__ import annotations

from pathlib import Path

import pytest
import tiny_amd.hooks as hooks

from tinycore.plugins import load_object
from tinycore.testing import registration

PLUGIN_ROOT = Path(__file__).resolve().parent.parent


def test_registration() -> None:
    """API level, pyproject.toml, the installed entry point and the device spec."""
    registration.check_registration(hooks, PLUGIN_ROOT, "AMD", "tiny_amd.device:AMDDevice")


def test_renderer_spec() -> None:
    (spec,) = hooks.tiny_renderers("AMD")
    assert spec.name == "HIP" and load_object(spec.factory).__name__ == "make_hip_renderer"
    assert hooks.tiny_renderers("NV") == []


def test_interface_and_queue_specs() -> None:
    kfd, hip, mock = hooks.tiny_interfaces("AMD")
    assert kfd.name == "KFD" and not kfd.is_mock and load_object(kfd.factory).__name__ == "open_kfd"
    assert hip.name == "HIP" and not hip.is_mock and load_object(hip.factory).__name__ == "open_hip"
    assert mock.name == "MOCK" and mock.is_mock and load_object(mock.factory).__name__ == "open_mock"
    assert hooks.tiny_interfaces("NV") == [] and hooks.tiny_hcq_queues(object()) is None


def test_opening_without_a_gpu_says_how_to_compile_only() -> None:
    if hooks.probe()[0]:
        pytest.skip("an AMD GPU is present")
    device_class = load_object(hooks.tiny_devices()[0].device_class)
    with pytest.raises(RuntimeError, match="DEV=AMD::gfx1100 .*renders and compiles kernels only, and DEV=MOCK\\+AMD"):
        device_class("AMD")


def test_real_probe_answers_quickly() -> None:
    registration.check_probe_is_quick(hooks.probe)


def test_tiny_devices_lists_the_device_consistently_with_its_probe() -> None:
    registration.check_tiny_devices_row("amd", "AMD", "tiny-amd", hooks.probe)


class FakeHip:
    """Stands in for libamdhip64: hipGetDeviceCount reports `count`."""

    def __init__(self, count: int) -> None:
        self.count = count

    def hipGetDeviceCount(self, pointer: object) -> int:
        pointer._obj.value = self.count  # type: ignore[attr-defined]
        return 0


def make_topology(root: Path, gpu_ids: list[str]) -> Path:
    """A fake KFD topology with one node per entry of `gpu_ids` ("0" is a CPU node)."""
    for index, gpu_id in enumerate(gpu_ids):
        node = root / "nodes" / str(index)
        node.mkdir(parents=True)
        (node / "gpu_id").write_text(gpu_id + "\n")
    return root / "nodes"


def test_probe_counts_kfd_gpu_nodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kfd = tmp_path / "kfd"
    kfd.write_text("")
    monkeypatch.setattr(hooks, "KFD_PATH", str(kfd))
    monkeypatch.setattr(hooks, "KFD_TOPOLOGY", str(make_topology(tmp_path, ["0", "4521", "9987"])))
    assert hooks.probe() == (True, f"2 GPU(s) through {kfd}", 2)


def test_probe_falls_back_to_hip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hooks, "KFD_PATH", str(tmp_path / "no-kfd"))
    monkeypatch.setattr(hooks, "load_library", lambda names: (FakeHip(3), "fake"))
    assert hooks.probe() == (True, "3 GPU(s) through the HIP runtime", 3)
    monkeypatch.setattr(hooks, "load_library", lambda names: (FakeHip(0), "fake"))
    ok, reason, count = hooks.probe()
    assert (ok, count) == (False, 0) and reason.startswith("the HIP runtime reports no device (hipGetDeviceCount "
                                                            "status 0); DEV=AMD::gfx1100")


def test_probe_with_neither(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hooks, "KFD_PATH", str(tmp_path / "no-kfd"))
    monkeypatch.setattr(hooks, "load_library", lambda names: (None, "amdhip64: not found"))
    ok, reason, count = hooks.probe()
    assert (ok, count) == (False, 0) and "HIP runtime (libamdhip64)" in reason and "amdhip64: not found" in reason
    assert "amdgpu kernel driver" in reason and "DEV=AMD::gfx1100" in reason


def test_probe_says_whether_kernels_can_be_compiled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tiny_amd import compiler
    monkeypatch.setattr(hooks, "KFD_PATH", str(tmp_path / "no-kfd"))
    monkeypatch.setattr(hooks, "load_library", lambda names: (None, "amdhip64: not found"))
    monkeypatch.setattr(compiler, "toolchains", lambda: ())
    assert "no clang-N with a matching ld.lld-N" in hooks.probe()[1]
    monkeypatch.setattr(compiler, "toolchains", lambda: ((19, "/usr/bin/clang-19", "/usr/bin/ld.lld-19"),))
    assert "clang 19 (/usr/bin/clang-19) compiles for gfx90a, gfx942, gfx1100, gfx1201" in hooks.probe()[1]
