"""Each clang the compiler's messages and README name builds every target it is said to cover: every shared kernel
case and the matrix-core matmuls assemble and link for each such target (clang 15 for gfx90a, clang 16 for gfx90a
and gfx1100, clang 19 for all four). A clang that is not installed here is reported as such; install it with
`apt-get install -y clang-N lld-N` to check it."""
from __future__ import annotations

import numpy
import pytest
from tiny_amd import compiler as amd_compiler
from tiny_amd.compiler import AMDCompiler, ToolchainMissingError, find_toolchain
from tiny_amd.matrix_core import matrix_core_matmul
from tiny_amd.renderer import HIPRenderer
from tiny_amd.target import TARGETS

from tinycore.codegen import lower_to_program
from tinycore.dtype import dtypes
from tinycore.testing.kernel_cases import CASES, case_kernels

NAMED_VERSIONS = (15, 16, 19)
"""The clang versions the messages and the README name (the newest, 19, is the one they tell to install)."""


def _only(version: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make clang-`version` the only toolchain the compiler sees (not installed: the check cannot run here)."""
    found = tuple(chain for chain in amd_compiler.toolchains() if chain[0] == version)
    if not found:
        pytest.skip(f"clang-{version} with ld.lld-{version} is not installed: apt-get install -y clang-{version} "
                    f"lld-{version}")
    monkeypatch.setattr(amd_compiler, "toolchains", lambda: found)


def _sources(arch: str) -> list[tuple[str, str]]:
    """(name, HIP source) of every shared kernel case and of the direct matrix-core matmuls, rendered for `arch`."""
    sources = []
    for case in CASES:
        _arrays, _ordered, items = case_kernels(case, numpy.random.default_rng(7))
        sources += [(case.name, lower_to_program(item.ast, HIPRenderer(arch)).src) for item in items]
    for dtype in (dtypes.float16, dtypes.bfloat16):
        sources.append((f"matrix core {dtype.name}", matrix_core_matmul(arch, dtype, 32, 48, 64)[0]))
    return sources


@pytest.mark.parametrize("version", NAMED_VERSIONS)
def test_each_target_a_clang_covers_builds(version: int, monkeypatch: pytest.MonkeyPatch) -> None:
    _only(version, monkeypatch)
    covered = [arch for arch, target in TARGETS.items() if target.min_clang <= version]
    assert covered, f"clang {version} covers no target"
    failures = []
    for arch in covered:
        compiler = AMDCompiler(arch)
        assert compiler.version_number == version
        for name, source in _sources(arch):
            try:
                compiler.compile(source)
            except Exception as error:  # noqa: BLE001 - every failure is listed with its first error line
                log = f"{error} {getattr(error, 'log', '')}"
                failures.append(f"{arch} {name}: " + next((line for line in log.splitlines() if "error" in line),
                                                          log[:300]))
    assert not failures, f"clang {version}:\n" + "\n".join(failures)


def test_clang_15_is_refused_for_gfx1100_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    """clang 15 knows gfx1100 but fails to assemble some of its own code for it: it is not used for gfx1100, and the
    message says why and what to install (the clang the message names builds gfx1100: the test above)."""
    monkeypatch.setattr(amd_compiler, "toolchains", lambda: ((15, "/usr/bin/clang-15", "/usr/bin/ld.lld-15"),))
    assert find_toolchain("gfx90a")[0] == 15
    with pytest.raises(ToolchainMissingError) as caught:
        find_toolchain("gfx1100")
    message = str(caught.value)
    assert message.startswith("compiling for gfx1100 (RDNA3 (RX 7900)) needs clang 16 or newer with its ld.lld, and "
                              "clang 15 is the newest here (clang 15 knows gfx1100 but fails to assemble")
    assert "destination must be different than all sources" in message
    assert message.endswith("apt-get install -y clang-19 lld-19 (it covers every target; clang 16 covers gfx90a and "
                            "gfx1100, clang 15 gfx90a only)")


def test_clang_15_builds_the_mock_gpus_kernels_without_a_code_object(monkeypatch: pytest.MonkeyPatch) -> None:
    """With only clang 15, DEV=MOCK+AMD (gfx1100) still runs: the MOCK code object then holds the program alone."""
    from tiny_amd.amd_mock import MockCompiler
    from tiny_amd.renderer import HIPRenderer as Renderer
    monkeypatch.setattr(amd_compiler, "toolchains", lambda: ((15, "/usr/bin/clang-15", "/usr/bin/ld.lld-15"),))
    case = next(case for case in CASES if case.name == "max_reduce")
    _arrays, _ordered, (item,) = case_kernels(case, numpy.random.default_rng(7))
    source = lower_to_program(item.ast, Renderer("gfx1100", embed_program=True)).src
    assert MockCompiler("gfx1100").compile(source)
