"""Install hints that work: the command named for a missing backend matches how tinycore itself was installed
(from an index, from a directory of wheels, from a checkout), read from the distribution's direct_url.json."""
from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

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


def test_this_checkout_is_detected() -> None:
    """The test environments install tinycore editable from this repository (or run it from the source tree)."""
    source = install_source()
    assert source.kind == "checkout", source
    assert source.location is not None and (source.location / "plugins" / "tiny-cpu").is_dir()
