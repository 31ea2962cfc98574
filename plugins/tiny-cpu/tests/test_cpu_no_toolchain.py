"""The CPU device on a machine without a C compiler: the X86 renderer and the worker pool built when tiny-cpu was
installed need none, the C renderer says what to install, and `tiny devices` says which renderers run here and why
the others do not.

The subprocesses run with a PATH holding only the `tiny` script (no cc, gcc or clang), CC unset and an empty kernel
cache, so a kernel compiled earlier by a C compiler cannot stand in for one."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tiny_cpu.pool as pool_module
from tiny_cpu import hooks
from tiny_cpu.x86.executable import host_is_x86_64

import tinycore.device.registry as registry
from tinycore.cli import _renderer_rows

COMPILERS = ("cc", "gcc", "clang", "c99", "tcc")


def no_toolchain_environment(tmp_path: Path, dev: str) -> dict[str, str]:
    """The environment of a machine without a C compiler: PATH is a folder holding only a link to `tiny`."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    tiny = Path(sys.executable).parent / "tiny"
    if not (folder / "tiny").exists():
        (folder / "tiny").symlink_to(tiny)
    environment = {key: value for key, value in os.environ.items() if key not in ("CC", "PYTHONPATH")}
    environment.update(PATH=str(folder), DEV=dev, TINYCORE_CACHE_DIR=str(tmp_path / "cache"))
    return environment


def run(arguments: list[str], environment: dict[str, str], timeout: int) -> subprocess.CompletedProcess[str]:
    """Run a command of the no-toolchain machine from a neutral directory (not the source tree)."""
    return subprocess.run(arguments, env=environment, capture_output=True, text=True, timeout=timeout,
                          cwd=environment["TINYCORE_CACHE_DIR"].rsplit("/", 1)[0], check=False)


def test_the_environment_has_no_compiler(tmp_path: Path) -> None:
    environment = no_toolchain_environment(tmp_path, "CPU:X86")
    probe = run([sys.executable, "-c", "import shutil, sys; print([shutil.which(name) for name in sys.argv[1:]])",
                 *COMPILERS], environment, 60)
    assert probe.stdout.strip() == str([None] * len(COMPILERS)), probe.stderr


def test_the_pool_is_prebuilt_by_the_install() -> None:
    # the dev environment, nox and the wheels install tiny-cpu with pip, which builds tiny_cpu._pool from pool.c
    assert pool_module.prebuilt_path() is not None, "reinstall tiny-cpu: pip install -e plugins/tiny-cpu"
    assert pool_module.pool_origin() == "prebuilt"


@pytest.mark.skipif(not host_is_x86_64(), reason="the X86 renderer's machine code runs only on x86-64 hosts")
def test_x86_conformance_without_a_compiler(tmp_path: Path) -> None:
    environment = no_toolchain_environment(tmp_path, "CPU:X86")
    result = run(["tiny", "conformance", "CPU"], environment, 600)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert "CPU: CONFORMS" in output and " 0 failed" in output, output[-4000:]
    # the kernels were machine code from the X86 renderer (the renderers category also builds its graphs with LLVM,
    # in process); nothing was compiled from C, the pool included
    caches = sorted(path.name for path in (tmp_path / "cache").iterdir() if path.is_dir())
    assert "cpu-x86" in caches and "cpu-kernels" not in caches, caches


@pytest.mark.skipif(not host_is_x86_64(), reason="the X86 renderer's machine code runs only on x86-64 hosts")
def test_x86_kernels_on_the_prebuilt_pool_without_a_compiler(tmp_path: Path) -> None:
    environment = no_toolchain_environment(tmp_path, "CPU:X86")
    script = ("import numpy as np, json\nfrom tinycore import Tensor\nimport tiny_cpu.pool as pool\n"
              "a = np.arange(4096, dtype=np.float32).reshape(64, 64) / 32768\n"
              "out = (Tensor(a) @ Tensor(a)).exp2().sum(axis=1).numpy()\n"
              "print(json.dumps({'origin': pool.pool_origin(), 'result': out.tolist()}))")
    result = run([sys.executable, "-c", script], environment, 300)
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["origin"] == "prebuilt"
    array = np.arange(4096, dtype=np.float64).reshape(64, 64) / 32768
    expected = np.exp2(array @ array).sum(axis=1)
    assert report["result"] == pytest.approx(expected.tolist(), rel=1e-4)


def test_the_c_renderer_says_it_needs_a_compiler(tmp_path: Path) -> None:
    environment = no_toolchain_environment(tmp_path, "CPU:C")
    script = "from tinycore import Tensor\nprint((Tensor([1.0, 2.0]) + 1).numpy())"
    result = run([sys.executable, "-c", script], environment, 300)
    assert result.returncode != 0
    last_line = result.stderr.strip().splitlines()[-1]
    assert "renderer 'C' is unavailable here" in last_line and "no C compiler found: install gcc or clang" in last_line
    assert "DEV=CPU:X86" in last_line or not host_is_x86_64(), last_line


def test_tiny_devices_without_a_compiler(tmp_path: Path) -> None:
    environment = no_toolchain_environment(tmp_path, "CPU")
    result = run(["tiny", "devices", "--json"], environment, 300)
    assert result.returncode == 0, result.stderr[-4000:]
    cpu = next(device for device in json.loads(result.stdout)["devices"] if device["name"] == "CPU")
    renderers = {row["name"]: row for row in cpu["renderers"]}
    assert not renderers["C"]["available"]
    assert renderers["C"]["reason"] == "no C compiler found: install gcc or clang, or set CC"
    if host_is_x86_64():
        assert cpu["status"] == "ok" and "DEV=CPU:X86" in cpu["reason"]
        assert renderers["X86"]["available"] and renderers["X86"]["reason"] is None
    else:
        assert not renderers["X86"]["available"] and "not x86-64" in renderers["X86"]["reason"]


def test_tiny_devices_offers_x86_only_on_x86_64(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "_renderer_probes", {})
    rows = {row["name"]: row for row in _renderer_rows("CPU", None)}
    assert rows["X86"]["available"] is host_is_x86_64()
    monkeypatch.setattr(registry, "_renderer_probes", {})
    monkeypatch.setattr("platform.machine", lambda: "aarch64")
    rows = {row["name"]: row for row in _renderer_rows("CPU", None)}
    assert rows["X86"]["available"] is False
    assert rows["X86"]["reason"] == ("this host is aarch64, not x86-64: the X86 renderer emits x86-64 machine code "
                                     "only; use DEV=CPU (C) or DEV=CPU:LLVM")
    assert rows["C"]["available"] is (hooks.find_c_compiler() is not None)


def test_without_a_compiler_the_device_needs_the_x86_renderer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr("platform.machine", lambda: "x86_64")
    monkeypatch.setattr("tiny_cpu.target.host_cpu_flags", lambda: frozenset(hooks.X86_FEATURES))
    assert hooks.probe() == (True, "no C compiler found: install gcc or clang, or set CC (for the C renderer); the "
                                   "X86 renderer needs none: DEV=CPU:X86", 1)
    assert hooks.c_probe() == (False, "no C compiler found: install gcc or clang, or set CC")
    monkeypatch.setattr("platform.machine", lambda: "aarch64")
    assert hooks.probe() == (False, "no C compiler found: install gcc or clang, or set CC", 0)
