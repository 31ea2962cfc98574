"""Packaging: the core's extras install every shipped backend pinned to the core's plugin API level, each backend
pins the core the other way, and `tiny conformance`'s requirements are the `testing` extra."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.version import Version
from plugin_builder import REPOSITORY_ROOT

from tinycore.plugins.install import KNOWN_DISTRIBUTIONS
from tinycore.testing.cli import TESTING_REQUIREMENTS


def project(path: Path) -> dict:
    """The [project] table of the pyproject.toml in `path`."""
    return tomllib.loads((path / "pyproject.toml").read_text())["project"]


CORE = project(REPOSITORY_ROOT)
EXTRAS = CORE["optional-dependencies"]


@pytest.mark.parametrize("family, distribution", sorted(KNOWN_DISTRIBUTIONS.items()))
def test_each_backend_is_an_extra_pinned_both_ways(family: str, distribution: str) -> None:
    plugin = project(REPOSITORY_ROOT / "plugins" / distribution)
    core_version, plugin_version = Version(CORE["version"]), Version(plugin["version"])
    requirements = [Requirement(text) for text in EXTRAS[family.lower()]]
    assert [requirement.name for requirement in requirements] == [distribution]
    pin = requirements[0].specifier
    assert plugin_version in pin, f"tinycore[{family.lower()}] must accept the plugin's own version"
    assert Version(f"{plugin_version.major}.{plugin_version.minor + 1}") not in pin, "the next API level is refused"
    back = [Requirement(text) for text in plugin["dependencies"] if Requirement(text).name == "tinycore"]
    assert len(back) == 1 and core_version in back[0].specifier
    assert Version(f"{core_version.major}.{core_version.minor + 1}") not in back[0].specifier
    assert str(pin) in {str(Requirement(text).specifier) for text in EXTRAS["all"]
                        if Requirement(text).name == distribution}, "tinycore[all] pins it the same way"


def test_all_is_every_backend() -> None:
    assert sorted(Requirement(text).name for text in EXTRAS["all"]) == sorted(KNOWN_DISTRIBUTIONS.values())


def test_testing_extra_holds_what_conformance_needs() -> None:
    assert sorted(Requirement(text).name for text in EXTRAS["testing"]) == sorted(TESTING_REQUIREMENTS)


@pytest.mark.parametrize("family, distribution", sorted(KNOWN_DISTRIBUTIONS.items()))
def test_each_plugin_readme_says_how_to_install_it(family: str, distribution: str) -> None:
    """From an index, from a wheel directory, from a checkout, and what the system must provide."""
    readme = (REPOSITORY_ROOT / "plugins" / distribution / "README.md").read_text()
    install = readme.split("## Install\n", 1)[1].split("\n## ", 1)[0]
    extra = f"'tinycore[{family.lower()}]'"
    assert f"pip install {extra}" in install and f"pip install --find-links dist {extra}" in install
    assert "System pieces:" in install
    assert family.lower() in EXTRAS, "the extra the README names exists"
    checkout = re.search(rf"pip install -e \. -e (plugins/{distribution}|'plugins/{distribution}\[([a-z,]+)\]')`",
                         install)
    assert checkout, f"the README of {distribution} names the checkout line"
    named = set(checkout.group(2).split(",")) if checkout.group(2) else set()
    assert requirement_names(distribution, named) >= requirement_names(distribution, core_extra_extras(family)), (
        f"the checkout line of {distribution} installs at least what tinycore[{family.lower()}] does")


def requirement_names(distribution: str, extras: set[str]) -> set[str]:
    """The names of the requirements that `distribution`'s extras `extras` add."""
    optional = project(REPOSITORY_ROOT / "plugins" / distribution).get("optional-dependencies", {})
    return {Requirement(text).name for extra in extras for text in optional[extra]}


def core_extra_extras(family: str) -> set[str]:
    """The extras of the backend that tinycore[family] asks for (tinycore[cl] -> {"driver"})."""
    return set(Requirement(EXTRAS[family.lower()][0]).extras)


def test_cl_checkout_line_gives_a_working_cl() -> None:
    """The README's checkout line for CL brings the OpenCL API and a driver that runs anywhere (PoCL, on the CPU):
    without them CL is "unavailable: no OpenCL ICD loader"."""
    for readme in (REPOSITORY_ROOT / "README.md", REPOSITORY_ROOT / "plugins" / "tiny-cl" / "README.md"):
        text = readme.read_text()
        assert "pip install -e . -e 'plugins/tiny-cl[pocl]'" in text, readme
        assert "pip install -e . -e plugins/tiny-cl`" not in text, f"{readme}: the line that leaves CL unavailable"
    assert requirement_names("tiny-cl", {"pocl"}) >= {"pyopencl", "pocl-binary-distribution"}
