"""The pytest plugin of the conformance suite: `--tiny-device=DEVICE`, the device fixtures and the summary report.

Options: `--tiny-device=DEVICE` (default: $TINY_DEVICE, else the default device) and `--tiny-json=PATH` (write the
JSON summary there). Each test module marks its category with `pytest.mark.conformance_category(NAME)`.

The core declares it as a `pytest11` entry point, so `pytest --pyargs tinycore.testing --tiny-device=CPU`
loads it (where entry points are disabled, pass `-p tinycore.testing.plugin`). The summary report is registered
only for runs that collect the suite's checks, so the plugin is harmless in other test runs.
"""
from __future__ import annotations

import os

import pytest

from tinycore.testing.capabilities import DeviceCapabilities, capabilities_of
from tinycore.testing.report import ConformanceReport
from tinycore.testing.support import not_applicable

REPORT_PLUGIN_NAME = "tinycore-conformance-report"


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register --tiny-device and --tiny-json."""
    group = parser.getgroup("tinycore", "tinycore device conformance")
    group.addoption("--tiny-device", action="store", default=None, metavar="DEVICE",
                    help="the device to check (default: $TINY_DEVICE, else tinycore's default device)")
    group.addoption("--tiny-json", action="store", default=None, metavar="PATH",
                    help="write the conformance summary as JSON to PATH")


def _device_name(config: pytest.Config) -> str:
    """The canonical name of the device under test."""
    from tinycore.device.registry import Device
    from tinycore.device.target import canonicalize
    requested = config.getoption("--tiny-device", default=None) or os.environ.get("TINY_DEVICE") or Device.DEFAULT
    return canonicalize(requested)


def pytest_configure(config: pytest.Config) -> None:
    """Register the category marker."""
    config.addinivalue_line("markers", "conformance_category(name): the conformance summary category of a test")
    config.addinivalue_line("markers", "runs_kernels: a memory or copy check that also runs kernels on the device")


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """When the run collected conformance checks, register the summary report (once) and give it the items."""
    if not any(item.get_closest_marker("conformance_category") is not None for item in items):
        return
    report = config.pluginmanager.get_plugin(REPORT_PLUGIN_NAME)
    if report is None:
        try:
            device = _device_name(config)
            capabilities = _open(device).as_dict()
        except Exception as error:  # noqa: BLE001 - the device fixture fails every check with this error
            device = str(config.getoption("--tiny-device", default=None) or os.environ.get("TINY_DEVICE") or "?")
            capabilities = {"error": str(error)}
        report = ConformanceReport(device, capabilities, json_path=config.getoption("--tiny-json", default=None))
        config.pluginmanager.register(report, REPORT_PLUGIN_NAME)
    report.record_items(items)


def _open(device: str) -> DeviceCapabilities:
    """Open `device` and read its capabilities (raises a clear error when it cannot be opened)."""
    from tinycore.device.registry import Device
    return capabilities_of(Device[device])


@pytest.fixture(scope="session")
def device(pytestconfig: pytest.Config) -> str:
    """The canonical name of the device under test (opened once; an error here fails every check)."""
    name = _device_name(pytestconfig)
    _open(name)
    return name


@pytest.fixture(scope="session")
def capabilities(device: str) -> DeviceCapabilities:
    """The declared (or inferred) capabilities of the device under test."""
    return _open(device)


KERNEL_CATEGORIES = frozenset({"ops", "dtypes", "autograd", "indexing", "jit", "renderers"})
"""Categories whose every check runs kernels on the device under test."""


@pytest.fixture(autouse=True)
def _kernels_apply(request: pytest.FixtureRequest) -> None:
    """Checks that run kernels do not apply to a device that declares it runs none (DISK)."""
    marker = request.node.get_closest_marker("conformance_category")
    runs_kernels = request.node.get_closest_marker("runs_kernels") is not None
    if marker is None or (marker.args[0] not in KERNEL_CATEGORIES and not runs_kernels):
        return
    try:
        declared = _open(_device_name(request.config))
    except Exception:  # noqa: BLE001 - the device fixture reports the error itself
        return
    if not declared.kernels:
        not_applicable("the device runs no kernels (declared kernels=False)")
