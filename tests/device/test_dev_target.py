"""DEV grammar: parsing, formatting round trips, every documented error, canonical device names, and the target
that applies to a device under `Context(DEV=...)`."""
from __future__ import annotations

import pytest

from tinycore.device.target import DevError, Target, canonicalize, find_target, format_dev, parse_dev, target_for
from tinycore.helpers import DEV, Context

PARSED = {
    "CPU": (Target(device="CPU"),),
    "cpu": (Target(device="CPU"),),
    "CPU:LLVM": (Target(device="CPU", renderer="LLVM"),),
    "cpu:llvm": (Target(device="CPU", renderer="LLVM"),),
    "CL:1": (Target(device="CL:1"),),
    "CL:0": (Target(device="CL"),),
    ":LLVM": (Target(renderer="LLVM"),),
    "MOCK+NV": (Target(device="NV", interface="MOCK"),),
    "mock+nv": (Target(device="NV", interface="MOCK"),),
    "NV::sm_90": (Target(device="NV", arch="sm_90"),),
    "NV:PTX:sm_90": (Target(device="NV", renderer="PTX", arch="sm_90"),),
    "NV:1:PTX:sm_80": (Target(device="NV:1", renderer="PTX", arch="sm_80"),),
    "PCI+AMD": (Target(device="AMD", interface="PCI"),),
    "PCI:0,1+AMD": (Target(device="AMD", interface="PCI", indices=(0, 1)),),
    "USB:1+AMD::gfx1100": (Target(device="AMD", arch="gfx1100", interface="USB", indices=(1,)),),
    "MOCK+": (Target(interface="MOCK"),),
    "CPU;CL:LLVM": (Target(device="CPU"), Target(device="CL", renderer="LLVM")),
    " CPU ; CL ": (Target(device="CPU"), Target(device="CL")),
    "CPU;:LLVM": (Target(device="CPU"), Target(renderer="LLVM")),
}

CANONICAL_TEXT = {"cpu": "CPU", "CL:0": "CL", "cpu:llvm": "CPU:LLVM", "mock+nv": "MOCK+NV", "CL:0:OPENCL": "CL:OPENCL",
                  " CPU ; CL ": "CPU;CL", "usb:01+amd::gfx1100": "USB:1+AMD::gfx1100"}


@pytest.mark.parametrize("text", sorted(PARSED))
def test_parse(text: str) -> None:
    assert parse_dev(text) == PARSED[text]


@pytest.mark.parametrize("text", sorted(PARSED))
def test_round_trip(text: str) -> None:
    targets = parse_dev(text)
    assert parse_dev(format_dev(targets)) == targets


@pytest.mark.parametrize("text, canonical", sorted(CANONICAL_TEXT.items()))
def test_format_is_canonical(text: str, canonical: str) -> None:
    assert format_dev(parse_dev(text)) == canonical


def test_single_target_parse_and_str() -> None:
    target = Target.parse("pci:3+amd:hip:gfx942")
    assert target == Target(device="AMD", renderer="HIP", arch="gfx942", interface="PCI", indices=(3,))
    assert str(target) == "PCI:3+AMD:HIP:gfx942"
    assert target.family == "AMD" and Target(device="CL:2").family == "CL"


def test_empty_dev_means_no_targets() -> None:
    assert parse_dev("") == ()
    assert parse_dev("   ") == ()


ERRORS = {
    "CPU;": "empty target",
    ";CPU": "empty target",
    "CPU;;CL": "empty target",
    "A+B+C": "too many '+'",
    "+NV": "interface name ''",
    "1X+NV": "interface name '1X'",
    "PCI:0:1+NV": "must be comma-separated numbers",
    "PCI:a+NV": "must be comma-separated numbers",
    "PCI:+NV": "must be comma-separated numbers",
    "NV:::": "too many ':'",
    "CPU:LLVM:x:y": "too many ':'",
    "NV:1:PTX:sm_80:extra": "too many ':'",
    "1CPU": "device name '1CPU'",
    "C-PU": "device name 'C-PU'",
    ":1": "device index '1' given without a device name",
    "CPU:LL-VM": "renderer name 'LL-VM'",
    "NV:PTX:": "arch ''",
    ":": "names no device, renderer, arch or interface",
    "CPU;cpu:llvm": "2 targets are for CPU",
    ":LLVM;:C": "2 targets are for (every device)",
}


@pytest.mark.parametrize("text", sorted(ERRORS))
def test_malformed_dev_errors(text: str) -> None:
    with pytest.raises(DevError) as caught:
        parse_dev(text)
    message = str(caught.value)
    assert ERRORS[text] in message
    assert f"DEV={text!r}" in message, "the error repeats what was asked"
    assert "target = [IFACE[:INDICES]+]DEVICE" in message, "the error shows the grammar"


def test_dev_error_is_a_value_error() -> None:
    assert issubclass(DevError, ValueError)


@pytest.mark.parametrize("name, canonical", [("cpu", "CPU"), ("CPU", "CPU"), ("CL:0", "CL"), ("cl:1", "CL:1"),
                                             ("nv:02", "NV:2"), ("disk:/tmp/File", "DISK:/tmp/File"),
                                             (" webgpu ", "WEBGPU")])
def test_canonicalize(name: str, canonical: str) -> None:
    assert canonicalize(name) == canonical


@pytest.mark.parametrize("name", ["", "  ", "1CPU", ":1", "C PU"])
def test_canonicalize_rejects_bad_names(name: str) -> None:
    with pytest.raises(DevError, match="device name"):
        canonicalize(name)


def test_find_target_prefers_device_then_family_then_every_device() -> None:
    targets = parse_dev("CPU:LLVM;CL:1;MOCK+NV::sm_90")
    assert find_target(targets, "cpu") == Target(device="CPU", renderer="LLVM")
    assert find_target(targets, "CL:1") == Target(device="CL:1")
    assert find_target(targets, "CL") == Target(device="CL"), "no target for CL itself: an empty one"
    assert find_target(targets, "nv:3") == Target(device="NV:3", arch="sm_90", interface="MOCK")
    assert find_target(parse_dev(":LLVM"), "CL:1") == Target(device="CL:1", renderer="LLVM")
    assert find_target(parse_dev("CL:OPENCL;:LLVM"), "CL:2") == Target(device="CL:2", renderer="OPENCL")
    assert find_target(parse_dev("CL:OPENCL;:LLVM"), "CPU") == Target(device="CPU", renderer="LLVM")


def test_target_for_follows_context() -> None:
    with Context(DEV="CPU:C;CL:1"):
        assert target_for("cpu") == Target(device="CPU", renderer="C")
        assert target_for("CL:1") == Target(device="CL:1")
        with Context(DEV="CL"):
            assert target_for("CPU") == Target(device="CPU")
        assert target_for("CPU") == Target(device="CPU", renderer="C")
    assert target_for("CPU") == Target(device="CPU")


def test_malformed_dev_in_context_raises_when_set() -> None:
    """A malformed DEV is refused by Context itself (not at the next Tensor), and DEV keeps its old value."""
    with pytest.raises(DevError, match="empty target"), Context(DEV="CPU;;"):
        pytest.fail("a malformed DEV is refused when set")
    assert DEV.value == [] and DEV.text == ""
    with pytest.raises(DevError, match="too many ':'"):
        DEV.value = "CPU:C:x:y"
    with pytest.raises(RuntimeError):  # tinygrad raises RuntimeError for a malformed target: so does DevError
        DEV.value = "A+B+CPU"


def test_dev_naming_what_is_not_installed_raises_when_set() -> None:
    """A device no plugin provides, or a renderer or interface its device does not offer, fails at the Context."""
    from tinycore.device.registry import DeviceNotInstalledError, SelectionError
    with pytest.raises(SelectionError, match="CPU has no renderer 'NOPE'.*available: C"), Context(DEV="CPU:NOPE"):
        pytest.fail("checked when set")
    with pytest.raises(DeviceNotInstalledError, match="no installed plugin provides device 'NOSUCH'"), \
            Context(DEV="CPU;NOSUCH"):
        pytest.fail("checked when set")
    with pytest.raises(SelectionError, match="no installed device offers renderer 'NOPE'"), Context(DEV=":NOPE"):
        pytest.fail("checked when set")
    assert DEV.text == ""


def test_dev_is_an_object_like_tinygrads() -> None:
    """DEV.device, .renderer, .arch, .interface of the first target; DEV.value the list of targets; DEV.target()."""
    assert DEV.value == [] and not DEV and DEV.device == "" and DEV.renderer == ""
    with Context(DEV="GL+WEBGPU;CPU:C"):
        assert (DEV.device, DEV.interface, DEV.renderer, DEV.arch) == ("WEBGPU", "GL", "", "")
        assert DEV.value == [Target(device="WEBGPU", interface="GL"), Target(device="CPU", renderer="C")]
        assert isinstance(DEV.value, list) and DEV.value == "gl+webgpu;cpu:c" and str(DEV) == "GL+WEBGPU;CPU:C"
        assert DEV.target("CPU") == Target(device="CPU", renderer="C")
        assert DEV.target("CL:1", renderer="OPENCL") == Target(device="CL:1", renderer="OPENCL")
        assert DEV.target("CPU", renderer="LLVM") == Target(device="CPU", renderer="C"), "given fields stay"
    with Context(DEV=Target(device="CPU", renderer="C")):
        assert DEV.value == "CPU:C" and DEV.renderer == "C"
    with Context(DEV=[Target(device="CPU"), Target(device="CL")]):
        assert DEV.value == "CPU;CL"
    assert DEV.text == ""


def test_dev_from_the_environment_is_checked_at_import() -> None:
    """`DEV=... python -c "import tinycore"` fails at the import with the clear error, not at the first Tensor."""
    import subprocess
    import sys
    for value, expected in (("CPU;;", "DevError: malformed DEV='CPU;;': empty target"),
                            ("CPU:NOPE", "SelectionError: CPU has no renderer 'NOPE'"),
                            ("NOSUCH", "DeviceNotInstalledError: no installed plugin provides device 'NOSUCH'")):
        result = subprocess.run([sys.executable, "-c", "import tinycore"], capture_output=True, text=True,
                                timeout=120, env={**__import__("os").environ, "DEV": value})
        last = result.stderr.strip().splitlines()[-1]
        assert result.returncode == 1 and expected in last, result.stderr


def test_tensor_to_accepts_every_form_dev_accepts() -> None:
    """`Tensor.to()` takes an interface, renderer or arch with the device, as DEV does."""
    import subprocess
    import sys

    from tinycore import Device, Tensor
    assert Tensor([1.0, 2.0]).to("CPU:C").device == "CPU"
    assert Tensor([1.0, 2.0]).to("cpu:0:c").device == "CPU"
    assert Device["cpu:c"] is Device["CPU"], "Device[] takes them too"
    for path in ("disk:shm:name", "DISK:/tmp/a:b", "disk:file.bin"):  # a device without renderers keeps its path
        assert Device.canonicalize(path) == "DISK:" + path.split(":", 1)[1]
    # an interface is chosen when its device first opens, once per process: in a fresh one, so that no other test
    # in this process has opened WEBGPU with its default interface first
    script = """
import pytest
from tinycore import Device, Tensor
from tinycore.device.registry import SelectionError
moved = Tensor([1.0, 2.0]).to("GL+WEBGPU")
assert moved.device == "WEBGPU" and moved.tolist() == [1.0, 2.0]
assert Device.selected_interfaces["WEBGPU"] == "GL"
assert Device["GL+WEBGPU"] is Device["WEBGPU"]
with pytest.raises(SelectionError, match="WEBGPU is already open with interface GL"):
    Tensor([1.0]).to("VULKAN+WEBGPU")
print("ok")
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr
    from tinycore.device.registry import SelectionError
    with pytest.raises(SelectionError, match="CPU has no renderer 'NOPE'"):
        Tensor([1.0]).to("CPU:NOPE")
    with pytest.raises(DevError, match="names no device"):
        Tensor([1.0]).to(":C")


def test_dev_is_a_list_of_targets() -> None:
    assert isinstance(DEV.value, list)


def test_readme_dev_examples_work_or_say_what_is_available() -> None:
    """Every DEV example of README.md is accepted when set, or refused right there with what is installed or
    available (never accepted and then failing deep inside the first Tensor as "not built yet")."""
    import re
    from pathlib import Path

    from tinycore.device.registry import DeviceNotInstalledError, SelectionError
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    examples = re.findall(r"^\| `DEV=([^`]*)` \|", readme, flags=re.MULTILINE)
    assert len(examples) >= 5, examples
    for example in examples:
        try:
            with Context(DEV=example):
                assert DEV.value == example
        except (SelectionError, DeviceNotInstalledError) as error:
            assert "available" in str(error) or "offered" in str(error) or "install" in str(error), str(error)
