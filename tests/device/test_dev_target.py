"""DEV grammar: parsing, formatting round trips, every documented error, canonical device names, and the target
that applies to a device under `Context(DEV=...)`."""
from __future__ import annotations

import pytest

from tinycore.device.target import DevError, Target, canonicalize, format_dev, parse_dev, target_for
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


def test_target_for_follows_context() -> None:
    with Context(DEV="CPU:LLVM;CL:1;MOCK+NV::sm_90"):
        assert target_for("cpu") == Target(device="CPU", renderer="LLVM")
        assert target_for("CL:1") == Target(device="CL:1")
        assert target_for("CL") == Target(device="CL"), "no target for CL itself: an empty one"
        assert target_for("nv:3") == Target(device="NV:3", arch="sm_90", interface="MOCK")
        with Context(DEV=":LLVM"):
            assert target_for("CL:1") == Target(device="CL:1", renderer="LLVM")
            assert target_for("AMD") == Target(device="AMD", renderer="LLVM")
        assert target_for("AMD") == Target(device="AMD")
    with Context(DEV="CL:OPENCL;:LLVM"):
        assert target_for("CL:2") == Target(device="CL:2", renderer="OPENCL"), "family target beats the wildcard"
        assert target_for("CPU") == Target(device="CPU", renderer="LLVM")


def test_malformed_dev_in_context_raises_at_use() -> None:
    with Context(DEV="CPU;;"), pytest.raises(DevError, match="empty target"):
        target_for("CPU")


def test_dev_is_a_string_setting() -> None:
    assert isinstance(DEV.value, str)
