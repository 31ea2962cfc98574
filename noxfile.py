"""Sessions: lint (ruff), typecheck (mypy), tests (the core tests with tiny-cpu), plugin(NAME) for each
in-tree plugin (the core and that plugin only, in its own environment), conformance(NAME) for each plugin's device and
conformance_template for the PYTHON device of examples/plugin-template, wheels (install from built wheels only, run
the demo and `tiny conformance CPU`), vendor_template (a plugin made from the template README, with its C renderer),
distributed (tinycore.distributed under mpiexec) and build (wheels and sdists into dist/, not run by default). `nox`
runs the others; `nox -s tests`, `nox -s "plugin(cl)"` run one. tox.ini offers the same matrix to tox users."""
from __future__ import annotations

import functools
import os
import platform
import shutil
from collections.abc import Callable

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["lint", "typecheck", "tests", "plugin", "conformance", "conformance_template", "wheels",
                        "vendor_template", "plugin_torch", "distributed"]

PLUGINS = ["cpu", "disk", "cl", "webgpu", "nv", "amd"]
"""The in-tree plugins: plugins/tiny-NAME, distribution tiny-NAME. The one list every session reads."""

DEVICES = {"cpu": "CPU", "disk": "DISK", "cl": "CL", "webgpu": "WEBGPU", "nv": "NV", "amd": "AMD"}
"""The device each plugin provides, for its conformance session."""
MOCKS = {"nv": ("MOCK+NV", "MOCK+NV:PTX"), "amd": ("MOCK+AMD",)}
"""Plugins whose device has a simulated GPU: without the hardware, conformance runs on it once per renderer (each
kernel is also compiled: CUDA C by NVRTC, PTX by ptxas)."""

INSTANCES = {"cl": {"POCL_DEVICES": "pthread pthread"}}
"""Environment under which a plugin's software driver reports two devices, so conformance checks copies between two
instances and a tensor sharded over them (PoCL reads POCL_DEVICES; other OpenCL drivers ignore it)."""

OPENCL_BUILD_CHECK = """
import pyopencl
failures = []
for platform in pyopencl.get_platforms():
    for device in platform.get_devices():
        try:
            pyopencl.Program(pyopencl.Context([device]), "__kernel void k(__global int* a) { a[0] = 1; }").build()
        except Exception as error:
            lines = str(error).strip().splitlines()
            first_error = next((line for line in lines if "error:" in line), lines[-1] if lines else "")
            failures.append(f"{platform.name} / {device.name.strip()}: {first_error.strip()}")
print("ok" if not failures else "fails: " + "; ".join(failures))
"""
"""Builds one kernel on every OpenCL device; its last line is "ok", or "fails: " and each failing device's first
error line (drivers' warnings may come before it)."""

INTEL_OPENCL = ("intel-opencl-rt", "intel-cmplr-lib-rt")
"""Intel's OpenCL runtime for x86-64 CPUs (it runs on AMD's too) and the math libraries it links: the CL tests'
driver where PoCL cannot build kernels. PoCL 3.0, which pyopencl's wheels bundle, compiles with LLVM 14, and LLVM 14
names a CPU newer than it knows (AMD Zen 5, for one) "generic", a target its own clang then refuses."""


def _last_line(output: object) -> str:
    """The last non-empty line a silent `session.run` printed."""
    lines = [line.strip() for line in str(output).splitlines() if line.strip()]
    return lines[-1] if lines else ""


def opencl_environment(session: nox.Session) -> dict[str, str]:
    """The environment under which the session's OpenCL driver builds kernels: empty when PoCL does; else Intel's
    OpenCL CPU runtime, installed into the session and named to the ICD loader (with PoCL's devices turned off)."""
    verdict = _last_line(session.run("python", "-c", OPENCL_BUILD_CHECK, silent=True))
    if verdict.startswith("ok"):
        return {}
    if platform.machine().lower() not in ("x86_64", "amd64"):
        session.log(f"the OpenCL driver cannot build kernels here ({verdict}), and no other CPU driver is known")
        return {}
    session.log(f"the OpenCL driver cannot build kernels on this CPU ({verdict}): installing Intel's OpenCL CPU "
                "runtime for the CL tests")
    session.install(*INTEL_OPENCL)
    library_folder = os.path.join(str(session.virtualenv.location), "lib")
    vendors = os.path.join(session.create_tmp(), "opencl-vendors")
    os.makedirs(vendors, exist_ok=True)
    with open(os.path.join(vendors, "intel-cpu.icd"), "w", encoding="utf-8") as registration:
        registration.write(os.path.join(library_folder, "libintelocl.so") + "\n")
    environment = {"OCL_ICD_VENDORS": vendors, "LD_LIBRARY_PATH": library_folder, "POCL_DEVICES": "none"}
    verdict = _last_line(session.run("python", "-c", OPENCL_BUILD_CHECK, silent=True, env=environment))
    if not verdict.startswith("ok"):
        session.error(f"Intel's OpenCL CPU runtime cannot build kernels here either ({verdict})")
    return environment


KEEP_ENVIRONMENTS = os.environ.get("TINYCORE_NOX_KEEP", "") == "1"
"""Each session's environment (1-2 GB: torch, compilers' wheels) is deleted when the session ends, so a full run
needs the disk of one environment, not of nineteen. TINYCORE_NOX_KEEP=1 keeps them, for quick reruns of one session
(`TINYCORE_NOX_KEEP=1 nox -s tests`)."""


def frees_environment(function: Callable[..., None]) -> Callable[..., None]:
    """Delete the session's virtual environment (and its scratch directory inside it) when the session ends, passed
    or failed, unless TINYCORE_NOX_KEEP=1."""
    @functools.wraps(function)
    def session_then_free(session: nox.Session, **parameters: str) -> None:
        try:
            function(session, **parameters)
        finally:
            location = getattr(session.virtualenv, "location", None)
            if not KEEP_ENVIRONMENTS and location and os.path.isdir(location):
                shutil.rmtree(location, ignore_errors=True)
    return session_then_free


TORCH = "torch==2.13.0"
"""The only torch the test environments may install (the core's and tiny-cpu's `test` extras pin the same)."""


@nox.session
@frees_environment
def lint(session: nox.Session) -> None:
    """ruff over the whole repository."""
    session.install("ruff")
    session.run("ruff", "check", ".")


@nox.session
@frees_environment
def typecheck(session: nox.Session) -> None:
    """mypy over the core package."""
    session.install("mypy", "-e", ".")
    session.run("mypy", "tinycore")


@nox.session
@frees_environment
def tests(session: nox.Session) -> None:
    """The core and cross-plugin tests, with the core and every in-tree plugin installed (CPU is the default device;
    the tests of CL and WEBGPU kernels run on PoCL and Mesa's software adapters).

    Arguments after `--` replace the test path: `nox -s tests -- tests/plugins/test_cli.py -x`."""
    plugin_arguments = [argument for name in PLUGINS for argument in ("-e", f"plugins/tiny-{name}[test]")]
    session.install("-e", ".[test]", *plugin_arguments, TORCH)
    session.run("pytest", *(session.posargs or ["-n", "auto", "tests"]), env=opencl_environment(session))


@nox.session
@nox.parametrize("name", PLUGINS, ids=PLUGINS)
@frees_environment
def plugin(session: nox.Session, name: str) -> None:
    """One plugin's own tests, with the core and that plugin installed, plus tiny-cpu as the host device that copy
    tests move data to and from (no other plugin)."""
    host = [] if name == "cpu" else ["-e", "plugins/tiny-cpu"]
    session.install("-e", ".", "-e", f"plugins/tiny-{name}[test]", *host)
    session.run("pytest", f"plugins/tiny-{name}/tests", *session.posargs,
                env=opencl_environment(session) if name == "cl" else {})


OTHER_RENDERERS = {"cpu": ["CPU:LLVM", *(["CPU:X86"] if platform.machine().lower() in ("x86_64", "amd64") else [])]}
"""Renderers besides a device's default that conformance(NAME) also runs the suite with (llvmlite comes with
tiny-cpu[test]; the X86 renderer's machine code runs on x86-64 hosts only)."""


@nox.session
@nox.parametrize("name", PLUGINS, ids=PLUGINS)
@frees_environment
def conformance(session: nox.Session, name: str) -> None:
    """`tiny conformance DEVICE` for one plugin's device, with the core, that plugin and the host devices installed.

    A device that cannot run on this machine (no GPU, no driver) is reported and the session ends without failing:
    its compile-only tests run in `plugin(NAME)`."""
    # tiny-cpu and tiny-disk are the host and file devices the copy checks move data to and from
    hosts = [argument for host in ("cpu", "disk") if host != name for argument in ("-e", f"plugins/tiny-{host}")]
    session.install("-e", ".", "-e", f"plugins/tiny-{name}[test]", *hosts)
    device = DEVICES[name]
    output = session.run("python", "-c", "import sys; from tinycore.device.registry import Device; "
                         f"ok, reason, _ = Device.probe({device!r}); print('ok' if ok else 'unavailable: ' + reason)",
                         silent=True)
    environments: list[dict[str, str]] = [{}]
    if not str(output).strip().startswith("ok") and name in MOCKS:
        session.log(f"{device} has no hardware here ({str(output).strip()}): checking its MOCK GPU, "
                    f"DEV={' and DEV='.join(MOCKS[name])}")
        environments = [{"DEV": dev} for dev in MOCKS[name]]
    elif not str(output).strip().startswith("ok"):
        session.log(f"{device} does not run on this machine ({str(output).strip()}); its plugin(NAME) tests ran")
        return
    session.install("-e", ".[testing]", TORCH)
    instances = {**INSTANCES.get(name, {}), **(opencl_environment(session) if name == "cl" else {})}
    if device == "DISK":  # DISK devices are files: check one in the session's scratch directory
        device = f"DISK:{session.create_tmp()}/conformance.bin"
    for environment in environments:
        session.run("tiny", "conformance", device, *session.posargs, env={**instances, **environment})
    for dev in OTHER_RENDERERS.get(name, []):  # the whole suite again with each renderer the device also offers
        session.run("tiny", "conformance", device, *session.posargs, env={**instances, "DEV": dev})


@nox.session
@frees_environment
def plugin_torch(session: nox.Session) -> None:
    """tiny-torch (tinycore as the PyTorch device `tiny`) in its own environment: it is the only distribution that
    needs torch at run time, and installing it makes every `import torch` there load the tiny device."""
    session.install("-e", ".", "-e", "plugins/tiny-cpu", "-e", "plugins/tiny-torch[test]", TORCH)
    session.run("pytest", "plugins/tiny-torch/tests", *session.posargs)


MPI_RUN_LIMIT = {"MPIEXEC_TIMEOUT": "300"}
"""Hydra's mpiexec ends the whole job after this many seconds: a rank left waiting in a collective cannot hang CI."""


@nox.session
@frees_environment
def distributed(session: nox.Session) -> None:
    """tinycore.distributed across processes (they stand in for hosts): MPICH and mpi4py from PyPI, the tests of
    tests/distributed/mpi once per rank under `mpiexec -n 2` and `-n 4`, then examples/train_digits.py --distributed
    under `mpiexec -n 2` to 90% test accuracy. About a minute on two cores, most of it installing."""
    session.install("-e", ".", "-e", "plugins/tiny-cpu", "pytest>=7", "mpich", "mpi4py", "scikit-learn", "tqdm")
    for processes in ("2", "4"):
        session.run("mpiexec", "-n", processes, "python", "-m", "pytest", "tests/distributed/mpi", "-q",
                    "-p", "no:randomly", "-p", "no:cacheprovider", *session.posargs, env=MPI_RUN_LIMIT)
    session.run("mpiexec", "-n", "2", "python", "examples/train_digits.py", "--distributed", "--steps", "150",
                "--min-accuracy", "0.9", env={**MPI_RUN_LIMIT, "NO_COLOR": "1"})


@nox.session
@frees_environment
def conformance_template(session: nox.Session) -> None:
    """`tiny conformance PYTHON`: the whole suite on the pure-Python device of examples/plugin-template, installed as a
    third-party plugin would be, with tiny-cpu and tiny-disk as the host and file devices the copy checks use.

    The template declares large_grids=False, so the million-element checks are "not applicable (declared)"; the rest
    runs (about 15 seconds on one core). No torch, as a vendor's environment may have none: the suite's oracles are
    numpy's."""
    session.install("-e", ".[testing]", "-e", "examples/plugin-template", "-e", "plugins/tiny-cpu",
                    "-e", "plugins/tiny-disk")
    session.run("tiny", "conformance", "PYTHON", *session.posargs)


@nox.session
@frees_environment
def llm_reference(session: nox.Session) -> None:
    """tinycore.llm against transformers' GGUF loader: logits of llama, qwen2, qwen3 and qwen3moe files and the
    tokenization of SentencePiece and byte-level BPE vocabularies. Not run by default: transformers and accelerate
    take minutes to install (tests/llm/reference is collected only with TINYCORE_LLM_REFERENCE=1)."""
    session.install("-e", ".[test]", "-e", "plugins/tiny-cpu", "-e", "plugins/tiny-disk", TORCH, "transformers",
                    "accelerate")
    session.run("pytest", "tests/llm/reference", *session.posargs, env={"TINYCORE_LLM_REFERENCE": "1"})


@nox.session
@frees_environment
def bench_llm(session: nox.Session) -> None:
    """bench/bench_llm.py: a ~1B llama with random Q8_0 and Q4_0 weights, prefill and decode tokens/s and peak
    memory, beside llama.cpp when `llama-cpp-python` is installed (`nox -s bench_llm -- --size small` for a smaller
    model). Not run by default."""
    session.install("-e", ".[llm]", "-e", "plugins/tiny-cpu", "-e", "plugins/tiny-disk", "gguf")
    session.run("python", "bench/bench_llm.py", *session.posargs)


@nox.session
@frees_environment
def bench_indexing(session: nox.Session) -> None:
    """bench/bench_indexing.py: x[idx] over 1,000 to 1,000,000 rows and numpy's setitem example up to (10, 20, 30,
    40, 50), beside torch and tinygrad 0.14 (its CPU device needs `clang`). Not run by default."""
    session.install("-e", ".", "-e", "plugins/tiny-cpu", TORCH, "tinygrad==0.14.0")
    session.run("python", "bench/bench_indexing.py", *session.posargs)


@nox.session
@frees_environment
def bench(session: nox.Session) -> None:
    """bench/bench_cpu.py: the CPU speed rows (matmul, softmax, conv2d, MLP SGD/Adam step, fused elementwise and +sum,
    eager op, TinyJit replay, import time, cold first op) beside torch, numpy and tinygrad 0.14 (its CPU device needs
    `clang`); writes bench/results/bench_cpu.md and .json (`-- --out DIR` elsewhere). Not run by default."""
    session.install("-e", ".", "-e", "plugins/tiny-cpu", TORCH, "tinygrad==0.14.0")
    session.run("python", "bench/bench_cpu.py", *session.posargs)


@nox.session
@frees_environment
def onnx_backend(session: nox.Session) -> None:
    """onnx's backend test suite (node cases written once to a cache, simple and pytorch-converted/operator models)
    on tinycore's CPU, with a pass/fail line per case (`-- -k conv` for a part). Not run by default: ~2,000 cases
    take ~30 minutes on two cores; tests/onnx keeps a fast subset in the default tests."""
    session.install("-e", ".[test,onnx-test]", "-e", "plugins/tiny-cpu", "-e", "plugins/tiny-disk", TORCH)
    session.run("pytest", "-q", "-p", "no:randomly", "tests/onnx/run_backend_suite.py",
                *session.posargs, env={"DEV": "CPU"})


@nox.session
@frees_environment
def viz_browser(session: nox.Session) -> None:
    """The VIZ page in headless Chromium (tests/viz/browser_check.py): a training step recorded under VIZ=1
    PROFILE=1, then no console errors, every kernel listed, a clicked pass drawn with its UOp count, the source, one
    timeline bar per launched kernel, a screenshot that is not blank (saved to docs/images/viz.png). Installs
    Debian's chromium and chromium-driver with apt-get (root or sudo needed). Not run by default: about a minute,
    and a browser CI machines may lack."""
    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        session.run("apt-get", "install", "-y", "chromium", "chromium-driver", external=True)
    session.install("-e", ".", "-e", "plugins/tiny-cpu", "selenium")
    session.run("python", "tests/viz/browser_check.py", "--screenshot", "docs/images/viz.png", *session.posargs,
                env={"DEV": "CPU"})


DISTRIBUTIONS = [".", *(f"plugins/tiny-{name}" for name in PLUGINS)]
"""The source folders of every distribution built for release: tinycore and each in-tree plugin."""


def _build(session: nox.Session, output: str) -> None:
    """Build an sdist of each distribution and a wheel from that sdist (so a file missing from the sdist fails here)
    into `output`, emptied first."""
    shutil.rmtree(output, ignore_errors=True)
    session.install("build", "setuptools>=64", "wheel")
    for folder in DISTRIBUTIONS:
        session.run("python", "-m", "build", "--no-isolation", "--outdir", output, folder, silent=True)
    session.log(f"built into {output}: " + ", ".join(sorted(os.listdir(output))))


@nox.session
@frees_environment
def build(session: nox.Session) -> None:
    """Wheels and sdists of tinycore and every in-tree plugin into dist/ (`pip install --find-links dist
    'tinycore[all]'` installs from there)."""
    _build(session, session.posargs[0] if session.posargs else "dist")


@nox.session(reuse_venv=False)
@frees_environment
def wheels(session: nox.Session) -> None:
    """Install from the built wheels only, as a user would, and run the demo and `tiny conformance CPU`.

    A fresh environment; third-party requirements come from the index first, then tinycore[cpu,disk,testing] from
    the wheel directory alone (--no-index), so tinycore and its plugins can only come from the wheels. Everything
    runs in a temporary directory, so the source tree is not on sys.path: a module, entry point or data file missing
    from a wheel fails here. No torch: neither the demo nor the suite needs it. About a minute on two cores."""
    scratch = session.create_tmp()
    dist = f"{scratch}/dist"
    _build(session, dist)
    session.install("pluggy>=1.3", "numpy>=1.24", "pytest>=7", "scikit-learn", "tqdm")
    # the core by its wheel's path (pip records it, so install hints name this directory), the plugins through the
    # core's extras from the same directory
    core_wheel = next(name for name in os.listdir(dist) if name.startswith("tinycore-")
                      and name.endswith(".whl"))
    session.run("python", "-m", "pip", "install", "--no-index", "--find-links", dist,
                f"{dist}/{core_wheel}[cpu,disk,testing]", silent=True)
    run_directory = f"{scratch}/run"
    shutil.rmtree(run_directory, ignore_errors=True)
    os.makedirs(run_directory)
    shutil.copy("examples/train_digits.py", run_directory)
    with session.chdir(run_directory):
        session.run("python", "-c", "import tinycore, tiny_cpu, sys\n"
                    "from tinycore.plugins.install import install_source\n"
                    "for module in (tinycore, tiny_cpu):\n"
                    "    assert 'site-packages' in module.__file__, f'{module.__name__} is not the installed wheel: '"
                    " + module.__file__\n"
                    "source = install_source()\n"
                    "assert source.kind == 'wheels', source\n"
                    "print('installed from the wheels in', source.location)")
        session.run("python", "train_digits.py", "--steps", "150", "--min-accuracy", "0.9")
        session.run("tiny", "conformance", "CPU")


def readme_setup_block(readme: str) -> str:
    """The shell block of section 1 of the template README: the commands that copy, rename and install a plugin."""
    section = readme.split("\n## 1.", 1)[1].split("\n## 2.", 1)[0]
    return section.split("```bash\n", 1)[1].split("```", 1)[0]


@nox.session
@frees_environment
def vendor_template(session: nox.Session) -> None:
    """A vendor's plugin built from the template README alone: section 1's commands run in a temporary directory
    (copy examples/plugin-template, rename it to tiny-mydev providing MYDEV, enable the C renderer, pip install),
    then `tiny conformance MYDEV` with DEV=MYDEV:C, so every kernel is C compiled by the system compiler.

    About three minutes on two cores: one compiler call per kernel."""
    from pathlib import Path
    session.install("-e", ".[testing]", TORCH, "-e", "plugins/tiny-cpu", "-e", "plugins/tiny-disk")
    block = readme_setup_block(Path("examples/plugin-template/README.md").read_text())
    block = block.replace("path/to/tinycore", str(Path.cwd()))
    work = Path(session.create_tmp()) / "vendor"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    with session.chdir(str(work)):
        session.run("bash", "-euxc", block, external=True)
        row = session.run("python", "-c", "import json, subprocess; report = json.loads(subprocess.run(['tiny', "
                          "'devices', '--json'], capture_output=True, text=True, check=True).stdout); "
                          "row = next(d for d in report['devices'] if d['name'] == 'MYDEV'); "
                          "assert row['status'] == 'ok' and 'PYTHON' not in json.dumps(row), row; "
                          "assert [r['name'] for r in row['renderers']] == ['C', 'UOPS'], row; print(row)",
                          silent=True)
        session.log(str(row).strip())
        session.run("tiny", "conformance", "MYDEV", *session.posargs, env={"DEV": "MYDEV:C"})
