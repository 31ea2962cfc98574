"""Import time: `import tinycore` (with every installed plugin) side by side with `python -c pass` and
`import numpy`, each in fresh interpreters, interleaved so that machine noise hits all of them alike.

    python bench/bench_import.py            # 15 runs each
    python bench/bench_import.py --runs 31 --json

Also reports `import tinycore` followed by plugin discovery (`tinycore.plugins.manager.get_plugin_manager().records`),
which is what the first `Device[...]` pays on top of the import. The target for `import tinycore` is 150 ms wall.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPOSITORY_ROOT = Path(__file__).resolve().parent.parent
TARGET_MS = 150.0
CASES = {
    "python -c pass": "pass",
    "import numpy": "import numpy",
    "import tinycore": "import tinycore",
    "import tinycore + plugin discovery": ("import tinycore\nfrom tinycore.plugins.manager import get_plugin_manager\n"
                                           "get_plugin_manager().records"),
}


def time_once(code: str) -> float:
    """Wall seconds for one fresh `python -c code` run from the repository root."""
    # measure imports as an installed package sees them: from bytecode (pip compiles .pyc at install time)
    environment = {**os.environ, "PYTHONPATH": str(REPOSITORY_ROOT)}
    environment.pop("PYTHONDONTWRITEBYTECODE", None)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env=environment, cwd=str(REPOSITORY_ROOT),
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def installed_plugins() -> list[str]:
    """The `tinycore.plugins` entry points of this interpreter, as name=distribution."""
    from importlib.metadata import entry_points
    return sorted(f"{point.name}={point.dist.metadata['Name'] if point.dist else '?'}"
                  for point in entry_points(group="tinycore.plugins"))


def measure(runs: int) -> dict[str, list[float]]:
    """`runs` timings of every case, interleaved, after one warm-up round (file-system caches)."""
    for code in CASES.values():
        time_once(code)
    timings: dict[str, list[float]] = {name: [] for name in CASES}
    for _ in range(runs):
        for name, code in CASES.items():
            timings[name].append(time_once(code))
    return timings


def main() -> None:
    """Measure and print a table of medians (ms) and ratios to `python -c pass`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="fresh interpreters per case (default 15)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    arguments = parser.parse_args()
    timings = measure(arguments.runs)
    medians = {name: statistics.median(values) * 1000 for name, values in timings.items()}
    baseline = medians["python -c pass"]
    result = {"runs": arguments.runs, "python": sys.version.split()[0], "plugins": installed_plugins(),
              "median_ms": medians, "min_ms": {name: min(values) * 1000 for name, values in timings.items()},
              "target_ms": TARGET_MS, "import_cost_ms": medians["import tinycore"] - baseline,
              "meets_target": medians["import tinycore"] - baseline <= TARGET_MS}
    if arguments.json:
        print(json.dumps(result, indent=2))
        return
    print(f"python {result['python']}, {arguments.runs} runs each, plugins: {', '.join(result['plugins']) or 'none'}")
    print(f"{'case':40} {'median ms':>10} {'min ms':>8} {'x pass':>7}")
    for name, median in medians.items():
        print(f"{name:40} {median:10.1f} {result['min_ms'][name]:8.1f} {median / baseline:7.2f}")
    verdict = "meets" if result["meets_target"] else "MISSES"
    print(f"import tinycore: {medians['import tinycore'] - baseline:.1f} ms above bare python "
          f"({medians['import tinycore']:.1f} ms in all), {verdict} the {TARGET_MS:.0f} ms target for the import")


if __name__ == "__main__":
    main()
