"""The plugin API level this tinycore supports and the core's installed version: what the manager checks a plugin
against and names in its messages (a leaf module, so the manager need not import the package it is lazily part of).
"""
from __future__ import annotations

PLUGIN_API_LEVEL = 1
"""The plugin API level this tinycore supports; a plugin declares the level it was written for as
`TINYCORE_PLUGIN_API` in its hooks module and is refused when the two differ."""


def core_version() -> str:
    """The installed tinycore distribution's version, or "(not installed)" when run from a source tree."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("tinycore")
    except PackageNotFoundError:
        return "(not installed)"
