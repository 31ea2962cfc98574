"""Finding NVIDIA's tools without a toolkit install: libnvrtc, ptxas, nvdisasm and cuobjdump from the pip wheels
(nvidia-cuda-nvrtc-cu12, nvidia-cuda-nvcc-cu12, nvidia-cuda-nvdisasm, nvidia-cuda-cuobjdump), then CUDA_PATH and the
system's search path.

The wheels install into the `nvidia` namespace package (nvidia/cuda_nvrtc/lib for CUDA 12, nvidia/cu13/lib for
CUDA 13), so each directory of that package is searched.
"""
from __future__ import annotations

import ctypes.util
import functools
import importlib.util
import os
import shutil
from pathlib import Path

NVRTC_INSTALL_HINT = "pip install 'tiny-nv[nvrtc]' (or: pip install nvidia-cuda-nvrtc-cu12)"
"""The command that adds NVRTC, shown wherever it is missing."""


def _wheel_roots() -> list[Path]:
    """The directories of the `nvidia` namespace package (where NVIDIA's pip wheels put their files)."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    if spec is None or spec.submodule_search_locations is None:
        return []
    return [Path(location) for location in spec.submodule_search_locations]


def _cuda_path_roots() -> list[Path]:
    """CUDA_PATH / CUDA_HOME and the usual install directory, when they exist."""
    candidates = [os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME"), "/usr/local/cuda"]
    return [Path(candidate) for candidate in candidates if candidate and Path(candidate).is_dir()]


@functools.cache
def find_nvrtc() -> tuple[str | None, str]:
    """(path of libnvrtc, where it was looked for): the wheel's library first, then CUDA_PATH, then the loader's
    search path. The path is None when none was found."""
    patterns = ("*/lib/libnvrtc.so.*", "*/lib/libnvrtc.so", "lib/libnvrtc.so.*")
    for root in _wheel_roots():
        for pattern in patterns:
            found = sorted(path for path in root.glob(pattern) if ".alt." not in path.name
                           and "builtins" not in path.name)
            if found:
                return str(found[-1]), f"the pip wheel in {root}"
    for root in _cuda_path_roots():
        found = sorted((root / "lib64").glob("libnvrtc.so*")) + sorted((root / "lib").glob("libnvrtc.so*"))
        if found:
            return str(found[0]), f"the CUDA toolkit in {root}"
    system = ctypes.util.find_library("nvrtc")
    if system:
        return system, "the system library path"
    return None, "no libnvrtc in the nvidia pip wheels, CUDA_PATH, /usr/local/cuda or the library path"


@functools.cache
def find_tool(name: str) -> str | None:
    """The path of the executable `name` (ptxas, nvdisasm, cuobjdump): a wheel's bin directory, CUDA_PATH/bin, then
    PATH; None when it is not installed."""
    for root in _wheel_roots():
        for candidate in sorted(root.glob(f"*/bin/{name}")):
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    for root in _cuda_path_roots():
        candidate = root / "bin" / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which(name)
