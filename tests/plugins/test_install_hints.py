"""Install hints that work: the command named for a missing backend matches how tinycore itself was installed
(from an index, from a directory of wheels, from a checkout), read from the distribution's direct_url.json."""
from __future__ import annotations

import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from plugin_builder import REPOSITORY_ROOT

from tinycore.plugins.install import InstallSource, _source_from_direct_url, install_command, install_source

PIP = f"{shlex.quote(sys.executable)} -m pip install"


def test_direct_url_kinds(tmp_path: Path) -> None:
    """PEP 610: a directory (editable or not) is a checkout, a local wheel a wheel directory, anything else none."""
    editable = json.dumps({"url": f"file://{tmp_path}/repo", "dir_info": {"editable": True}})
    assert _source_from_direct_url(editable) == InstallSource("checkout", tmp_path / "repo")
    wheel = json.dumps({"url": f"file://{tmp_path}/dist/tinycore-0.1.0-py3-none-any.whl",
                        "archive_info": {"hashes": {}}})
    assert _source_from_direct_url(wheel) == InstallSource("wheels", tmp_path / "dist")
    assert _source_from_direct_url(json.dumps({"url": "https://example.org/tinycore.tar.gz",
                                               "archive_info": {}})) is None
    assert _source_from_direct_url("not json") is None


def test_index_install_names_the_extra() -> None:
    """From an index, a shipped backend comes through the core's extra (pinned to the core's API level)."""
    index = InstallSource("index")
    assert install_command("tiny-nv", source=index) == \
        f"{PIP} 'tinycore[nv]' (from a directory of wheels, add --find-links DIR)"
    assert install_command("tinycore[testing]", source=index) == f"{PIP} 'tinycore[testing]'"
    assert install_command("tiny-vendor", upgrade=True, source=index) == f"{PIP} --upgrade tiny-vendor"


def test_wheel_directory_install_finds_links_there(tmp_path: Path) -> None:
    wheels = InstallSource("wheels", tmp_path / "dist")
    assert install_command("tiny-cl", source=wheels) == f"{PIP} --find-links {tmp_path / 'dist'} 'tinycore[cl]'"


def test_checkout_install_uses_the_plugin_folder(tmp_path: Path) -> None:
    """From a checkout, the plugin's folder is installed editable; a folder that is not there falls back to pip."""
    (tmp_path / "plugins" / "tiny-amd").mkdir(parents=True)
    (tmp_path / "plugins" / "tiny-amd" / "pyproject.toml").write_text("[project]\nname = 'tiny-amd'\n")
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'tinycore'\n")
    checkout = InstallSource("checkout", tmp_path)
    assert install_command("tiny-amd", source=checkout) == f"{PIP} -e {tmp_path / 'plugins' / 'tiny-amd'}"
    assert install_command("tinycore[testing]", source=checkout) == f"{PIP} -e '{tmp_path}[testing]'"
    assert install_command("tiny-nv", source=checkout).startswith(f"{PIP} 'tinycore[nv]'"), "no folder: the extra"


def test_checkout_install_brings_the_extras_of_the_core_extra(tmp_path: Path) -> None:
    """From a checkout, a backend's folder is installed with the extras tinycore[family] gives it, so the checkout
    line gives what the index line does (tinycore[cl] is tiny-cl[driver]: pyopencl); extras asked for win."""
    (tmp_path / "plugins" / "tiny-cl").mkdir(parents=True)
    (tmp_path / "plugins" / "tiny-cl" / "pyproject.toml").write_text("[project]\nname = 'tiny-cl'\n")
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'tinycore'\n[project.optional-dependencies]\n"
                                             "cl = ['tiny-cl[driver]>=0.1,<0.2']\n")
    checkout = InstallSource("checkout", tmp_path)
    folder = tmp_path / "plugins" / "tiny-cl"
    assert install_command("tiny-cl", source=checkout) == f"{PIP} -e '{folder}[driver]'"
    assert install_command("tiny-cl[pocl]", source=checkout) == f"{PIP} -e '{folder}[pocl]'"


def test_this_checkout_is_detected() -> None:
    """The test environments install tinycore editable from this repository (or run it from the source tree)."""
    source = install_source()
    assert source.kind == "checkout", source
    assert source.location is not None and (source.location / "plugins" / "tiny-cpu").is_dir()


HINT_PROBE = """
import tinycore
from tinycore.plugins.install import device_install_command
print(tinycore.__file__)
print(device_install_command('NV'))
"""
"""Prints where tinycore was imported from and the command it names to install the NV backend."""


def _hint_from(directory: Path, python_path: Path | None = None) -> tuple[str, str]:
    """(tinycore's file, the NV install hint) printed by a fresh interpreter whose working directory is `directory`
    (on sys.path, as `python -c` and `python -m` put it), with `python_path` as PYTHONPATH."""
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("DEV", "TINYCORE_DISABLE_PLUGINS", "TINYCORE_TRACE_PLUGINS", "PYTHONPATH")}
    if python_path is not None:
        environment["PYTHONPATH"] = str(python_path)
    finished = subprocess.run([sys.executable, "-c", HINT_PROBE], capture_output=True, text=True, timeout=120,
                              cwd=str(directory), env=environment, check=False)
    assert finished.returncode == 0, finished.stderr
    module_file, hint = finished.stdout.strip().splitlines()[-2:]
    return module_file, hint


def test_hint_from_the_checkout_root() -> None:
    """The checkout's tinycore.egg-info is on sys.path here and has no direct_url.json: it must not make the
    editable install look like an index install."""
    module_file, hint = _hint_from(REPOSITORY_ROOT)
    assert Path(module_file).is_relative_to(REPOSITORY_ROOT)
    assert hint == f"{PIP} -e '{REPOSITORY_ROOT / 'plugins' / 'tiny-nv'}[nvrtc]'"


def test_hint_from_another_directory(tmp_path: Path) -> None:
    module_file, hint = _hint_from(tmp_path)
    assert Path(module_file).is_relative_to(REPOSITORY_ROOT), "the editable install is imported"
    assert hint == f"{PIP} -e '{REPOSITORY_ROOT / 'plugins' / 'tiny-nv'}[nvrtc]'"


def test_hint_from_the_checkout_root_with_a_stale_egg_info(tmp_path: Path) -> None:
    """A copy of the source tree with an egg-info beside it (as setuptools leaves one): still a checkout."""
    shutil.copytree(REPOSITORY_ROOT / "tinycore", tmp_path / "tinycore", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPOSITORY_ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    info = tmp_path / "tinycore.egg-info"
    info.mkdir()
    (info / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: tinycore\nVersion: 0.1.0\n")
    (tmp_path / "plugins" / "tiny-nv").mkdir(parents=True)
    (tmp_path / "plugins" / "tiny-nv" / "pyproject.toml").write_text("[project]\nname = 'tiny-nv'\n")
    module_file, hint = _hint_from(tmp_path)
    assert Path(module_file).is_relative_to(tmp_path), "the copy is imported, not the editable install"
    assert hint == f"{PIP} -e '{tmp_path / 'plugins' / 'tiny-nv'}[nvrtc]'"


def test_hint_from_an_installed_wheel(tmp_path: Path) -> None:
    """tinycore built into a wheel and installed from it (pip records the wheel's path): the hint installs the
    backend through the core's extra from that wheel directory, whatever the working directory."""
    source = tmp_path / "source"
    source.mkdir()
    shutil.copytree(REPOSITORY_ROOT / "tinycore", source / "tinycore", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPOSITORY_ROOT / name, source / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    # the environment's setuptools builds it when there is one (fast, offline); else pip fetches one to build with
    isolation = ["--no-build-isolation"] if importlib.util.find_spec("setuptools") else []
    subprocess.run([*pip, "wheel", "--no-deps", *isolation, "-w", str(tmp_path / "dist"), str(source)],
                   check=True, capture_output=True, timeout=300)
    wheel = next((tmp_path / "dist").glob("tinycore-*.whl"))
    site = tmp_path / "site"
    subprocess.run([*pip, "install", "--no-deps", "--target", str(site), str(wheel)], check=True, capture_output=True,
                   timeout=300)
    run = tmp_path / "run"
    run.mkdir()
    module_file, hint = _hint_from(run, python_path=site)
    assert Path(module_file).is_relative_to(site), "the wheel's copy is imported"
    assert hint == f"{PIP} --find-links {tmp_path / 'dist'} 'tinycore[nv]'"


def test_cl_without_an_icd_loader_names_the_line_that_gives_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """CL's probe, with no libOpenCL to load, names the install line of pyopencl and PoCL for this checkout."""
    from tiny_cl import hooks
    monkeypatch.setattr(hooks, "load_library", lambda names: (None, "libOpenCL.so.1: cannot open shared object"))
    ok, reason, count = hooks._count_with_ctypes()
    assert (ok, count) == (False, 0)
    assert reason.startswith("no OpenCL ICD loader (libOpenCL) found (libOpenCL.so.1: cannot open shared object)")
    assert reason.endswith(f"{PIP} -e '{REPOSITORY_ROOT / 'plugins' / 'tiny-cl'}[pocl]'"), reason


HIDE_TINY_DISK = """
import importlib.metadata as metadata
original = metadata.entry_points
def entry_points(**selection):
    found = original(**selection)
    if selection.get("group") == "tinycore.plugins":
        return metadata.EntryPoints(point for point in found if point.name != "disk")
    return found
metadata.entry_points = entry_points
"""
"""A sitecustomize that makes tiny-disk look not installed (its entry point is not listed)."""


def test_conformance_disk_note_from_the_checkout_root(tmp_path: Path) -> None:
    """`tiny conformance CPU`, run at the checkout's root without tiny-disk, names the checkout's install line for it
    in the DISK check's note (it named `pip install 'tinycore[disk]'` there)."""
    (tmp_path / "sitecustomize.py").write_text(HIDE_TINY_DISK)
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("DEV", "TINYCORE_PLUGINS", "TINYCORE_DISABLE_PLUGINS", "PYTHONPATH")}
    environment.update({"PYTHONPATH": str(tmp_path), "CC": "gcc"} if shutil.which("gcc") else
                       {"PYTHONPATH": str(tmp_path)})
    finished = subprocess.run([sys.executable, "-m", "tinycore.cli", "conformance", "CPU", "--json", "-k",
                               "disk_both_ways"], capture_output=True, text=True, timeout=300,
                              cwd=str(REPOSITORY_ROOT), env=environment, check=False)
    summary = json.loads(finished.stdout)
    (note,) = [item["reason"] for item in summary["not_applicable"] if item["test"].endswith("test_disk_both_ways")]
    assert "the DISK device does not open here: no installed plugin provides device 'DISK'" in note, note
    assert note.endswith(f"to get DISK: {PIP} -e {REPOSITORY_ROOT / 'plugins' / 'tiny-disk'}"), note
