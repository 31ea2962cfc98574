"""Install hints that work: the pip command for a backend, matched to how tinycore itself was installed.

tinycore may come from a package index (`pip install tinycore`), from a directory of built wheels
(`pip install --find-links dist tinycore`) or from a checkout (`pip install -e .`). A hint that says
`pip install tiny-nv` is wrong for the last two, so every error naming a missing backend asks this module.

How tinycore was installed is read from its distribution's `direct_url.json` (PEP 610): a local wheel file means
a wheel directory, a directory (editable or not) means a checkout, none means an index (or `--find-links DIR`,
which pip does not record: the hint then mentions that form too). A tinycore imported from a source tree counts as
a checkout, however it was installed.
"""
from __future__ import annotations

import functools
import json
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

KNOWN_DISTRIBUTIONS = {"CPU": "tiny-cpu", "DISK": "tiny-disk", "CL": "tiny-cl", "WEBGPU": "tiny-webgpu",
                       "NV": "tiny-nv", "AMD": "tiny-amd"}
"""The distribution that provides each device family shipped with tinycore; each is also an extra of tinycore
(`tinycore[nv]` installs tiny-nv pinned to this core's plugin API level)."""


@dataclass(frozen=True)
class InstallSource:
    """Where tinycore came from: kind is "index", "wheels" or "checkout"; location is the wheel directory or the
    checkout's root (None for an index)."""

    kind: str
    location: Path | None = None


def _source_from_direct_url(text: str) -> InstallSource | None:
    """The install source described by a PEP 610 direct_url.json document, or None when it names none we use."""
    try:
        document = json.loads(text)
    except ValueError:
        return None
    parsed = urlparse(str(document.get("url", "")))
    if parsed.scheme != "file":
        return None
    path = Path(unquote(parsed.path))
    if "dir_info" in document:
        return InstallSource("checkout", path)
    if path.suffix == ".whl":
        return InstallSource("wheels", path.parent)
    return None


def _is_source_tree(root: Path) -> bool:
    """True when `root` is a tinycore checkout: its pyproject.toml declares the tinycore project."""
    pyproject = root / "pyproject.toml"
    if not pyproject.is_file() or not (root / "tinycore" / "__init__.py").is_file():
        return False
    try:
        text = pyproject.read_text()
    except OSError:
        return False
    # a regular expression, not tomllib: Python 3.10 has none, and this line's form is ours
    return re.search(r"""^name\s*=\s*["']tinycore["']""", text, re.MULTILINE) is not None


@functools.cache
def install_source() -> InstallSource:
    """How this tinycore was installed (read once per process).

    The code that runs decides first: a tinycore imported from a checkout (editable install, or the source tree on
    sys.path) is a checkout, whatever metadata is found. This matters because a checkout holds a
    `tinycore.egg-info` that importlib.metadata finds before the environment's own record whenever the checkout's
    root is on sys.path (`python -m`, pytest), and that one has no direct_url.json.
    """
    from importlib.metadata import distributions
    package_root = Path(__file__).resolve().parent.parent.parent
    if _is_source_tree(package_root):
        return InstallSource("checkout", package_root)
    for found in distributions(name="tinycore"):
        direct_url = found.read_text("direct_url.json")
        source = _source_from_direct_url(direct_url) if direct_url else None
        if source is not None:
            return source
    return InstallSource("index")


def _core_extra_extras(checkout: Path, extra: str) -> str:
    """The extras of a backend that the checkout's tinycore[extra] asks for ("[driver]" for tinycore[cl]), so that
    installing the plugin's folder gives what installing the core's extra from an index gives."""
    try:
        text = (checkout / "pyproject.toml").read_text()
    except OSError:
        return ""
    # `cl = ["tiny-cl[driver]>=0.1,<0.2"]` in [project.optional-dependencies] (a regular expression: see above)
    found = re.search(rf"""^{re.escape(extra)}\s*=\s*\[\s*["'][A-Za-z0-9_.-]+\s*(\[[^\]]*\])""", text,
                      re.MULTILINE)
    return found.group(1).replace(" ", "") if found else ""


def _pip() -> str:
    """The pip that installs into this interpreter's environment."""
    return f"{shlex.quote(sys.executable)} -m pip install"


def install_command(distribution: str, upgrade: bool = False, source: InstallSource | None = None) -> str:
    """The command that installs (or upgrades) `distribution` (extras allowed: "tinycore[testing]") for the way
    tinycore was installed.

    A distribution shipped with tinycore is installed through tinycore's extra from an index or a wheel directory
    (so its version matches the core's), and from its folder under plugins/ in a checkout.
    """
    source = source or install_source()
    name, _, extras = distribution.partition("[")
    extras = f"[{extras}" if extras else ""
    extra = next((family.lower() for family, known in KNOWN_DISTRIBUTIONS.items() if known == name), None)
    flag = " --upgrade" if upgrade else ""
    if source.kind == "checkout" and source.location is not None:
        folder = source.location if name == "tinycore" else source.location / "plugins" / name
        if (folder / "pyproject.toml").is_file():
            extras = extras or (_core_extra_extras(source.location, extra) if extra else "")
            return f"{_pip()}{flag} -e {shlex.quote(str(folder) + extras)}"
    requirement = f"tinycore[{extra}]" if extra and not extras else distribution
    if source.kind == "wheels" and source.location is not None:
        return f"{_pip()}{flag} --find-links {shlex.quote(str(source.location))} {shlex.quote(requirement)}"
    command = f"{_pip()}{flag} {shlex.quote(requirement)}"
    # pip records nothing for `--find-links DIR` installs, which then look like index installs
    return command + (" (from a directory of wheels, add --find-links DIR)" if extra else "")


def device_install_command(family: str) -> str | None:
    """The command that installs the distribution shipped with tinycore that provides device `family`, or None."""
    distribution = KNOWN_DISTRIBUTIONS.get(family.upper())
    return install_command(distribution) if distribution else None


__all__ = ["KNOWN_DISTRIBUTIONS", "InstallSource", "install_source", "install_command", "device_install_command"]
