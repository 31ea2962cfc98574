"""The install commands the READMEs give for tiny-torch name things that exist: a folder with this distribution's
pyproject.toml, a wheel file named as pip names this distribution's wheel; none asks a package index for tiny-torch,
which no index has."""
from __future__ import annotations

import pathlib
import re

PLUGIN = pathlib.Path(__file__).resolve().parents[1]
ROOT = PLUGIN.parents[1]
READMES = [ROOT / "README.md", PLUGIN / "README.md"]
# read without tomllib, which Python 3.10 lacks
PROJECT = dict(re.findall(r'^(name|version) = "([^"]+)"', (PLUGIN / "pyproject.toml").read_text(), re.MULTILINE))


def _install_commands(text: str) -> list[str]:
    """Every `pip install ...` command in an inline code span (one line) that mentions tiny-torch."""
    spans = [span for line in text.splitlines() if not line.startswith("```") for span in line.split("`")[1::2]]
    commands = [part.strip() for span in spans for part in span.split("&&")]
    return [command for command in commands if "pip install" in command and re.search(r"tiny[-_]torch", command)]


def test_install_commands_name_a_checkout_folder_or_the_wheel() -> None:
    wheel = f"{PROJECT['name'].replace('-', '_')}-{PROJECT['version']}-py3-none-any.whl"
    for readme in READMES:
        commands = _install_commands(readme.read_text())
        assert any("-e plugins/tiny-torch" in command for command in commands), (readme, commands)
        assert any(command.endswith(f"dist/{wheel}") for command in commands), (readme, commands, wheel)
        for command in commands:
            targets = [word.strip("'\"") for word in command.split()[2:] if not word.startswith("-")]
            for target in targets:
                name = target.split("[")[0]
                assert name != PROJECT["name"], f"{readme}: `{command}` asks an index for {name}, which none has"
                if name.startswith("plugins/"):
                    assert (ROOT / name / "pyproject.toml").is_file(), (readme, command)
