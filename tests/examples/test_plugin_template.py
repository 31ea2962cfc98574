"""The plugin template and its README: the README describes the modules that are there, its setup commands make a
renamed plugin that says nothing of PYTHON, and the renamed plugin's C renderer runs kernels compiled by the system
C compiler that agree with numpy. (`nox -s vendor_template` runs the whole conformance suite on that plugin.)"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from plugin_builder import REPOSITORY_ROOT

TEMPLATE = REPOSITORY_ROOT / "examples" / "plugin-template"
README = (TEMPLATE / "README.md").read_text()
NUMBERS = {"four": 4, "five": 5, "six": 6, "seven": 7}


def setup_block() -> str:
    """The commands of README section 1, as the vendor_template nox session runs them."""
    section = README.split("\n## 1.", 1)[1].split("\n## 2.", 1)[0]
    return section.split("```bash\n", 1)[1].split("```", 1)[0]


def test_readme_lists_the_modules_that_are_there() -> None:
    modules = sorted(path.name for path in (TEMPLATE / "tiny_python_template").glob("*.py")
                     if path.name != "__init__.py")
    table = README.split("\n## 2.", 1)[1].split("\n### ", 1)[0]
    listed = sorted(re.findall(r"^\| `([a-z_]+\.py)` \|", table, flags=re.MULTILINE))
    assert listed == modules
    count = re.search(r"## 2\. The (\w+) modules", README)
    assert count is not None and NUMBERS[count.group(1)] == len(modules)
    assert not re.search(r"\d+ passed and \d+ not applicable", README), "counts that drift are not promised"


@pytest.fixture(scope="module")
def renamed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plugin README section 1 makes (its pip line replaced by distribution metadata written by hand)."""
    if shutil.which("sed") is None or shutil.which("bash") is None:
        pytest.fail("the template README's commands need bash and sed")
    work = tmp_path_factory.mktemp("vendor")
    block = setup_block().replace("path/to/tinycore", str(REPOSITORY_ROOT))
    assert block.strip().splitlines()[-1] == "pip install -e .", "the block ends by installing the plugin"
    block = "\n".join(block.strip().splitlines()[:-1])
    subprocess.run(["bash", "-euc", block], cwd=work, check=True, timeout=60)
    plugin = work / "tiny-mydev"
    info = plugin / "tiny_mydev-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tiny-mydev\nVersion: 0.1.0\n")
    entry_points = re.search(r'\[project\.entry-points\."tinycore\.plugins"\]\n(.*)\n', (plugin / "pyproject.toml")
                             .read_text())
    assert entry_points is not None and entry_points.group(1) == 'mydev = "tiny_mydev.hooks"'
    (info / "entry_points.txt").write_text("[tinycore.plugins]\nmydev = tiny_mydev.hooks\n")
    return plugin


def run_with(plugin: Path, arguments: list[str], **environment: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key not in ("DEV", "TINYCORE_PLUGINS")}
    env.update({"PYTHONPATH": os.pathsep.join([str(plugin), str(REPOSITORY_ROOT)]), "NO_COLOR": "1",
                "TINYCORE_DISABLE_PLUGINS": "python-template", **environment})
    return subprocess.run([sys.executable, *arguments], capture_output=True, text=True, env=env, timeout=600,
                          cwd=str(plugin))


def test_renamed_plugin_says_nothing_of_python(renamed: Path) -> None:
    """After the README's renaming, no module names PYTHON or the template; `tiny devices` shows MYDEV with the C
    renderer preferred and a probe that reports the C compiler."""
    for path in [renamed / "pyproject.toml", *(renamed / "tiny_mydev").glob("*.py")]:
        text = path.read_text()
        assert "PYTHON" not in text and "python_template" not in text and "python-template" not in text, path
    result = run_with(renamed, ["-m", "tinycore.cli", "devices", "--json"])
    assert result.returncode == 0, result.stderr
    row = next(device for device in json.loads(result.stdout)["devices"] if device["name"] == "MYDEV")
    assert row["status"] == "ok" and row["distribution"] == "tiny-mydev"
    assert [renderer["name"] for renderer in row["renderers"]] == ["C", "UOPS"] and row["renderers"][0]["selected"]
    assert row["reason"].startswith("C compiler ") and "Python" not in row["description"]


def test_renamed_plugin_c_kernels_match_numpy(renamed: Path) -> None:
    """Kernels rendered as C and built by the system compiler: elementwise, a reduction, int64 and a matmul."""
    code = """
import numpy as np
from tinycore import Device, Tensor, dtypes
a = np.arange(-6, 6, dtype=np.float32).reshape(3, 4) / 3
b = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
x, y = Tensor(a, device="MYDEV"), Tensor(b, device="MYDEV")
assert type(Device["MYDEV"].renderer).__name__ == "CRenderer"
np.testing.assert_allclose(((x * 2 + 1).exp2().sqrt()).numpy(), np.sqrt(np.exp2(a * 2 + 1)), rtol=1e-5)
np.testing.assert_allclose((x @ y).numpy(), a @ b, rtol=1e-5, atol=1e-6)
np.testing.assert_allclose(x.max(axis=1).numpy(), a.max(axis=1))
big = Tensor(np.arange(10, dtype=np.int64) * 3_000_000_000, device="MYDEV")
assert (big + 1).tolist() == [value * 3_000_000_000 + 1 for value in range(10)]
assert (x > 0).numpy().tolist() == (a > 0).tolist()
print("ok")
"""
    result = run_with(renamed, ["-c", code], DEV="MYDEV:C")
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stdout + result.stderr
    conformance = run_with(renamed, ["-m", "tinycore.cli", "conformance", "MYDEV", "-k", "test_binary"],
                           DEV="MYDEV:C")
    assert conformance.returncode == 0, conformance.stdout[-3000:] + conformance.stderr[-3000:]
    assert "MYDEV: CONFORMS" in conformance.stdout


def test_renamed_plugin_leaves_no_template_names(renamed: Path) -> None:
    """After the README's renaming, nothing a user sees or a file on disk is named after the template: the
    description, the distribution's summary, the compiler's name (a cache directory and key) and the prefixes of
    temporary files all carry the new name. (`template_rendering`, the C renderer's rule set, is a variable.)"""
    for path in [renamed / "pyproject.toml", *(renamed / "tiny_mydev").glob("*.py")]:
        text = re.sub(r"\btemplate_rendering\b", "", path.read_text())
        leftovers = [line for line in text.splitlines() if "template" in line.lower()]
        assert not leftovers, (path, leftovers)
    code = """
from tinycore import Device
device = Device["MYDEV"]
print(device.compiler.name)
"""
    result = run_with(renamed, ["-c", code], DEV="MYDEV:C")
    assert result.returncode == 0 and result.stdout.strip().startswith("mydev-c-"), result.stdout + result.stderr
    summary = re.search(r'^description = "(.*)"$', (renamed / "pyproject.toml").read_text(), re.MULTILINE)
    assert summary is not None and "MYDEV" in summary.group(1)
    sources = "".join((renamed / "tiny_mydev" / name).read_text() for name in ("c_renderer.py", "runtime.py"))
    assert 'prefix="tiny-mydev-c-"' in sources and 'prefix="tiny-mydev-"' in sources


def test_section_3_declares_capabilities_on_the_device_class_section_2_names() -> None:
    """Section 2 says the device subclasses HCQCompiled, and so does device.py: section 3's example must too."""
    device_source = (TEMPLATE / "tiny_python_template" / "device.py").read_text()
    base = re.search(r"^class PythonDevice\((\w+)\):", device_source, re.MULTILINE)
    assert base is not None
    section_2 = README.split("\n## 2.", 1)[1].split("\n## 3.", 1)[0]
    section_3 = README.split("\n## 3.", 1)[1].split("\n## 4.", 1)[0]
    assert f"subclass of `tinycore.hcq.{base.group(1)}`" in section_2
    example = section_3.split("```python\n", 1)[1].split("```", 1)[0]
    assert f"class MyDevice({base.group(1)}):" in example and f"import {base.group(1)}" in example
