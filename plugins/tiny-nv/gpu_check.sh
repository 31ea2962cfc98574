#!/usr/bin/env bash
# The NV check for a machine with an NVIDIA GPU (under 8 minutes on an H200):
#   1. installs tinycore, tiny-cpu, tiny-disk and tiny-nv (editable, from this checkout) and NVRTC when it can;
#   2. `tiny conformance NV` on the CUDA interface (DEV=CUDA+NV), then a smoke test and `tiny conformance NV` on the
#      kernel driver interface (DEV=NV+NV: /dev/nvidiactl, UVM, GPFIFO channels, QMD V04 on Hopper), which before
#      this has run only against the simulated driver (tiny_nv/mock_driver.py), with gpu_abi_check.py between them
#      (kernels that read the launch's constant buffer 0 head, stack, memory windows and constant banks 3 and 4);
#   3. gpu_bench.py: copy bandwidth host<->device and device<->device, elementwise GB/s against the device copy
#      bandwidth, fp16 and fp32 matmul TFLOPS at 8192^2, torch + cuBLAS beside them when torch has CUDA;
#   4. writes nv_gpu_check.json (and each step's output) under $OUT when it is set, else the current directory.
# Every step has its own time limit and a failing step does not stop the others; the report says what happened.
# Usage: bash plugins/tiny-nv/gpu_check.sh   (PYTHON=python3.12 to choose the interpreter)
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
REPORT_DIR=${OUT:-$PWD}
mkdir -p "$REPORT_DIR"
PYTHON=${PYTHON:-python3}
VENV=${NV_CHECK_VENV:-$ROOT/.venv-nv-check}
STARTED=$(date +%s)
declare -A STATUS

log() { printf '[gpu_check %3ss] %s\n' "$(($(date +%s) - STARTED))" "$*"; }

run_step() {  # run_step NAME SECONDS COMMAND...: output in $REPORT_DIR/NAME.log, exit status in STATUS[NAME]
    local name=$1 seconds=$2
    shift 2
    log "$name (limit ${seconds}s)"
    timeout "$seconds" "$@" >"$REPORT_DIR/$name.log" 2>&1
    STATUS[$name]=$?
    log "$name exited with ${STATUS[$name]}"
    tail -n 5 "$REPORT_DIR/$name.log"
}

# ---- 1. install ----
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv --system-site-packages "$VENV" || { log "cannot create a venv with $PYTHON"; exit 1; }
fi
PY=$VENV/bin/python
# the project itself needs no download (editable, no build isolation); the rest is tried, and may be present already
run_step install_project 120 "$PY" -m pip install --no-deps --no-build-isolation -e "$ROOT" -e "$ROOT/plugins/tiny-cpu" \
    -e "$ROOT/plugins/tiny-disk" -e "$ROOT/plugins/tiny-nv"
run_step install_dependencies 150 "$PY" -m pip install numpy pluggy pytest "nvidia-cuda-nvrtc-cu12>=12.0"
export PATH="$VENV/bin:$PATH"

run_step nvidia_smi 30 nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version,clocks.max.sm \
    --format=csv,noheader
run_step tiny_devices 60 env DEV=CUDA+NV tiny devices

# ---- 2. conformance on each interface ----
run_step conformance_cuda 210 env DEV=CUDA+NV tiny conformance NV --json
# the kernel driver interface has run only on the simulated driver before: first one small program against numpy
# (bring-up, memory, one QMD launch, copies), so a hang costs 45 s, not the conformance step's limit
run_step nv_interface_smoke 45 env DEV=NV+NV "$PY" -c '
import numpy
from tinycore import Tensor, Device
a = numpy.arange(4096, dtype=numpy.float32).reshape(64, 64) / 4096
print(Device["NV"].description)
print("elementwise", bool(numpy.allclose((Tensor(a) * 2 + 1).numpy(), a * 2 + 1)))
print("matmul", bool(numpy.allclose((Tensor(a) @ Tensor(a)).numpy(), a @ a, rtol=1e-4, atol=1e-4)))
'
# kernels whose answers depend on constant buffer 0's head, the stack, the memory windows and constant banks 3/4
run_step nv_interface_abi 45 env DEV=NV+NV "$PY" "$ROOT/plugins/tiny-nv/gpu_abi_check.py"
run_step conformance_nv 90 env DEV=NV+NV tiny conformance NV --json

# ---- 3. bench ----
run_step bench 150 env DEV=CUDA+NV "$PY" "$ROOT/plugins/tiny-nv/gpu_bench.py" --json "$REPORT_DIR/nv_bench.json"

# ---- 4. the report ----
status_json="{"
for name in "${!STATUS[@]}"; do
    status_json+="\"$name\": ${STATUS[$name]},"
done
status_json="${status_json%,}}"
"$PY" - "$REPORT_DIR" "$status_json" "$(($(date +%s) - STARTED))" <<'EOF'
import json, pathlib, sys

directory, statuses, seconds = pathlib.Path(sys.argv[1]), json.loads(sys.argv[2]), int(sys.argv[3])


def read_json(name):
    path = directory / name
    try:
        text = path.read_text()
        start = text.find("{")
        return json.loads(text[start:]) if start >= 0 else {"output": text[-4000:]}
    except (OSError, ValueError) as error:
        return {"error": f"{type(error).__name__}: {error}", "output": path.read_text()[-4000:] if path.exists() else ""}


report = {"seconds": seconds, "exit_status": statuses,
          "gpu": (directory / "nvidia_smi.log").read_text().strip() if (directory / "nvidia_smi.log").exists() else "",
          "conformance_cuda": read_json("conformance_cuda.log"), "conformance_nv": read_json("conformance_nv.log"),
          "nv_interface_smoke": read_json("nv_interface_smoke.log"),
          "nv_interface_abi": read_json("nv_interface_abi.log"),
          "bench": read_json("nv_bench.json")}
bench = report["bench"]
goals = {}
if isinstance(bench.get("elementwise"), dict) and "fraction_of_device_copy" in bench["elementwise"]:
    goals["elementwise_at_least_80_percent_of_device_copy"] = bench["elementwise"]["fraction_of_device_copy"] >= 0.8
if isinstance(bench.get("matmul_fp16"), dict) and "fraction_of_cublas" in bench["matmul_fp16"]:
    goals["fp16_matmul_at_least_50_percent_of_cublas"] = bench["matmul_fp16"]["fraction_of_cublas"] >= 0.5
report["goals"] = goals
(directory / "nv_gpu_check.json").write_text(json.dumps(report, indent=2))
print(json.dumps({key: report[key] for key in ("seconds", "exit_status", "gpu", "goals")}, indent=2))
EOF
log "report: $REPORT_DIR/nv_gpu_check.json"
