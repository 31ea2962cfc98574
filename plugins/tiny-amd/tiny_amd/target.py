"""The AMD GPU targets tinycore compiles for, what each one is (wave size, matrix-core instructions, the oldest clang
that knows it) and which one a device uses: DEV's (DEV=AMD::gfx1100), the mock GPU's, or the GPU's own from KFD."""
from __future__ import annotations

import os
from dataclasses import dataclass

from tinycore.device.registry import target_for

KFD_TOPOLOGY = "/sys/devices/virtual/kfd/kfd/topology/nodes"


@dataclass(frozen=True)
class AMDTarget:
    """One gfx target: `wave_size` lanes per wavefront, `matrix_core` "wmma" (RDNA3), "wmma-gfx12" (RDNA4) or
    "mfma" (CDNA), and `min_clang`, the oldest clang major version whose AMDGPU backend builds the target's kernels
    (clang 15 knows gfx1100 but fails to assemble some of its own output for it: tiny_amd.compiler.TOO_OLD)."""

    name: str
    wave_size: int
    matrix_core: str
    min_clang: int
    family: str


TARGETS: dict[str, AMDTarget] = {
    "gfx90a": AMDTarget("gfx90a", 64, "mfma", 15, "CDNA2 (MI200)"),
    "gfx942": AMDTarget("gfx942", 64, "mfma", 17, "CDNA3 (MI300)"),
    "gfx1100": AMDTarget("gfx1100", 32, "wmma", 16, "RDNA3 (RX 7900)"),
    "gfx1201": AMDTarget("gfx1201", 32, "wmma-gfx12", 18, "RDNA4 (RX 9070)"),
}
MOCK_ARCH = "gfx1100"
"""The target the MOCK interface simulates (an RDNA3 GPU)."""


class NoAMDGPUError(RuntimeError):
    """There is no AMD GPU to ask for its target; the message says how to compile without one."""


def parse_target(name: str) -> AMDTarget:
    """The AMDTarget called `name`; ValueError listing the supported targets otherwise."""
    if name not in TARGETS:
        supported = ", ".join(f"{target.name} ({target.family})" for target in TARGETS.values())
        raise ValueError(f"unknown AMD target {name!r}: tinycore compiles for {supported}, e.g. DEV=AMD::gfx1100")
    return TARGETS[name]


def device_index(device: str) -> int:
    """The index of `device` ('AMD' -> 0, 'AMD:1' -> 1)."""
    parts = device.split(":")
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


def gfx_name(target_version: int) -> str:
    """KFD's gfx_target_version (e.g. 110000, 90010) as a gfx name ('gfx1100', 'gfx90a')."""
    major, minor, stepping = target_version // 10000, (target_version // 100) % 100, target_version % 100
    return f"gfx{major}{minor:x}{stepping:x}"


def kfd_gpu_targets(topology: str = KFD_TOPOLOGY) -> list[str]:
    """The gfx names of the GPU nodes in the KFD topology, in node order (empty without KFD)."""
    found: list[tuple[int, str]] = []
    for node in os.listdir(topology) if os.path.isdir(topology) else []:
        try:
            with open(os.path.join(topology, node, "properties")) as handle:
                properties = dict(line.split() for line in handle if len(line.split()) == 2)
        except OSError:
            continue
        version = int(properties.get("gfx_target_version", "0"))
        if version and node.isdigit():
            found.append((int(node), gfx_name(version)))
    return [name for _node, name in sorted(found)]


def device_target(device: str) -> str:
    """The target to compile for on `device`: DEV's when given, the mock's under DEV=MOCK+AMD, else the GPU's."""
    target = target_for(device)
    if target.arch:
        return target.arch
    if target.interface == "MOCK":
        return MOCK_ARCH
    gpus = kfd_gpu_targets()
    index = device_index(device)
    if index >= len(gpus):
        raise NoAMDGPUError(f"no AMD GPU {index} in the KFD topology ({KFD_TOPOLOGY}), so its target is unknown: name "
                            "one to compile only, e.g. DEV=AMD::gfx1100, or DEV=MOCK+AMD for the simulated GPU")
    return gpus[index]
