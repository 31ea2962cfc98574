"""Loads the conformance suite's pytest plugin when pytest reaches these checks without it (`pytest tinycore/testing`
with TINY_DEVICE set): the fixtures and the summary work; `--tiny-device` needs the plugin loaded up front
(`-p tinycore.testing.plugin`, as `tiny conformance` does)."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest

PLUGIN_MODULE = "tinycore.testing.plugin"


def pytest_configure(config: pytest.Config) -> None:
    """Register the suite's plugin unless it is already loaded (by -p or an entry point)."""
    import tinycore.testing.plugin as plugin
    if not config.pluginmanager.is_registered(plugin):
        config.pluginmanager.register(plugin, PLUGIN_MODULE)
        plugin.pytest_configure(config)
