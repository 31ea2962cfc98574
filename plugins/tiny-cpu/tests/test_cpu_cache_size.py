"""The host's level-2 cache size, read from Linux's sysfs description of the first CPU, which the CPU renderers pass
to the codegen heuristics (RendererContract.core_cache_bytes) to size matmul row groups."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import tiny_cpu.target as target
from tiny_cpu.renderer import CRenderer


def _cache(directory: Path, index: int, level: str, kind: str, size: str) -> None:
    entry = directory / f"index{index}"
    entry.mkdir()
    (entry / "level").write_text(level + "\n")
    (entry / "type").write_text(kind + "\n")
    (entry / "size").write_text(size + "\n")


@pytest.mark.parametrize("entries, expected", [
    ([("1", "Data", "48K"), ("1", "Instruction", "32K"), ("2", "Unified", "2048K"), ("3", "Unified", "307200K")],
     2 * 1024 * 1024),
    ([("1", "Data", "32K"), ("2", "Unified", "512K")], 512 * 1024),
    ([("1", "Data", "64K"), ("2", "Data", "1M")], 1024 * 1024),
    ([("1", "Data", "32K"), ("3", "Unified", "8M")], None),  # no level 2: unknown
    ([("2", "Unified", "big")], None),  # a size that does not parse: unknown
])
def test_level_two_cache_is_read_from_sysfs(tmp_path: Path, entries: list[tuple[str, str, str]],
                                            expected: int | None) -> None:
    for index, (level, kind, size) in enumerate(entries):
        _cache(tmp_path, index, level, kind, size)
    assert target.host_core_cache_bytes(str(tmp_path)) == expected


def test_missing_sysfs_means_unknown(tmp_path: Path) -> None:
    assert target.host_core_cache_bytes(str(tmp_path / "absent")) is None


def test_host_renderer_carries_the_cache_size_and_a_cross_target_does_not() -> None:
    expected = target.host_core_cache_bytes()
    assert CRenderer().core_cache_bytes == expected
    if os.path.isdir(target.CACHE_DIRECTORY) and expected is not None:
        assert expected >= 64 * 1024  # no CPU with a level-2 cache smaller than that runs these kernels
    assert CRenderer(arch="x86-64-v3").core_cache_bytes is None


def test_llvm_renderer_carries_the_host_cache_size() -> None:
    pytest.importorskip("llvmlite")
    from tiny_cpu.llvm_compiler import make_llvm_renderer
    renderer, _ = make_llvm_renderer("CPU", None)
    assert renderer.core_cache_bytes == target.host_core_cache_bytes()
