"""The VIZ page in a real headless Chromium (run by `nox -s viz_browser`, or directly with chromium, chromedriver
and selenium installed): `python tests/viz/browser_check.py [--screenshot docs/images/viz.png]`.

A small training step (a two-layer MLP, cross-entropy, one SGD step) runs under VIZ=1 PROFILE=1 in a subprocess;
its recording is served on an ephemeral port and the page is checked: no console errors, every kernel listed,
clicking a kernel and a pass draws a graph of that pass's UOp count, the source shows, the timeline has one bar per
launched kernel, the screenshot is not blank. Exits 0 when every check passes, 1 otherwise (each failure printed).
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TRAINING_STEP = """
import json
import numpy as np
from tinycore import Tensor, nn
from tinycore.counters import GlobalCounters
Tensor.manual_seed(0)
generator = np.random.default_rng(0)
images = Tensor(generator.standard_normal((16, 12), dtype=np.float32))
labels = Tensor(generator.integers(0, 4, 16).astype(np.int32))
first, second = nn.Linear(12, 8), nn.Linear(8, 4)
optimizer = nn.optim.SGD(nn.state.get_parameters([first, second]), lr=0.1)
with Tensor.train():
    loss = second(first(images).relu()).sparse_categorical_crossentropy(labels)
    optimizer.zero_grad()
    loss.backward()
    Tensor.realize(loss, *optimizer.schedule_step())
print(json.dumps({"loss": loss.item(), "kernels": GlobalCounters.kernel_count}))
"""


def record_training_step(path: str) -> dict[str, Any]:
    """Run the training step under VIZ=1 PROFILE=1, its recording written to `path`; what it printed."""
    environment = {**os.environ, "VIZ": "1", "PROFILE": "1", "VIZ_PATH": path, "VIZ_SERVE": "0", "DEV": "CPU"}
    finished = subprocess.run([sys.executable, "-c", TRAINING_STEP], env=environment, capture_output=True, text=True,
                              timeout=600, stdin=subprocess.DEVNULL, cwd=ROOT)
    if finished.returncode != 0:
        raise SystemExit(f"the training step failed:\n{finished.stderr}")
    result: dict[str, Any] = json.loads(finished.stdout.strip().splitlines()[-1])
    return result


def make_driver() -> Any:
    """A headless Chromium driven through /usr/bin/chromedriver, browser console logs kept."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1600,1000",
                     "--disable-gpu"):
        options.add_argument(argument)
    options.binary_location = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")),
                            options=options)


def wait_for(driver: Any, script: str, timeout_s: float = 30.0) -> Any:
    """The first truthy value of `script` (JavaScript returning a value), polled until `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = driver.execute_script(script)
        if value:
            return value
        time.sleep(0.1)
    raise TimeoutError(f"timed out waiting for: {script}")


def distinct_colours(driver: Any, png: bytes) -> int:
    """How many distinct colours the PNG has (decoded by the browser, every 7th pixel)."""
    script = """
        const done = arguments[arguments.length - 1];
        const image = new Image();
        image.onload = () => {
          const canvas = document.createElement("canvas");
          canvas.width = image.width; canvas.height = image.height;
          const context = canvas.getContext("2d");
          context.drawImage(image, 0, 0);
          const data = context.getImageData(0, 0, image.width, image.height).data;
          const colours = new Set();
          for (let at = 0; at < data.length; at += 28) {
            colours.add((data[at] << 16) | (data[at + 1] << 8) | data[at + 2]);
          }
          done(colours.size);
        };
        image.onerror = () => done(-1);
        image.src = "data:image/png;base64," + arguments[0];
    """
    return int(driver.execute_async_script(script, base64.b64encode(png).decode()))


def _shows_kernel(kernel: dict[str, Any]) -> str:
    """JavaScript true once `kernel` is the selected one and its passes are listed (not the previous kernel's)."""
    return (f"const s = document.querySelector('#kernels li.selected'); return !!s && s.dataset.id === "
            f"'{kernel['id']}' && document.querySelectorAll('#passes li.pass').length === {len(kernel['passes'])}")


def check_page(url: str, recording: dict[str, Any], launched: int, screenshot: str | None) -> list[str]:
    """Every check of the module docstring against the page at `url`; the failures."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    failures: list[str] = []

    def check(condition: bool, message: str) -> None:
        print(("ok   " if condition else "FAIL ") + message)
        if not condition:
            failures.append(message)

    driver = make_driver()
    try:
        driver.get(url)
        wait_for(driver, "return document.body.dataset.ready === '1'")
        kernels = recording["kernels"]
        listed = [item.get_attribute("data-name") for item in driver.find_elements(By.CSS_SELECTOR, "#kernels li")]
        check(listed == [kernel["name"] for kernel in kernels],
              f"every kernel listed ({len(listed)} listed, {len(kernels)} recorded)")
        # the kernel with the most passes, and its last pass
        chosen = max(kernels, key=lambda kernel: (len(kernel["passes"]), len(kernel["passes"][-1]["nodes"])))
        driver.find_element(By.CSS_SELECTOR, f"#kernels li[data-id='{chosen['id']}']").click()
        wait_for(driver, _shows_kernel(chosen))
        last = len(chosen["passes"]) - 1
        driver.find_element(By.CSS_SELECTOR, f"#passes li[data-index='{last}']").click()
        wanted = len(chosen["passes"][last]["nodes"])
        drawn = wait_for(driver, f"const c = document.getElementById('graph'); return c.dataset.state === 'ready' "
                                 f"&& c.dataset.nodes === '{wanted}' && c.dataset.nodes", 60)
        check(drawn == str(wanted), f"{chosen['name']} / {chosen['passes'][last]['name']}: graph of {drawn} nodes, "
                                    f"the pass has {wanted} UOps")
        canvas_colours = driver.execute_script(
            "const c = document.getElementById('graph'), d = c.getContext('2d').getImageData(0, 0, c.width, "
            "c.height).data, s = new Set(); for (let i = 0; i < d.length; i += 40) s.add(d[i] << 16 | d[i+1] << 8 "
            "| d[i+2]); return s.size;")
        check(canvas_colours > 10, f"the graph canvas is drawn ({canvas_colours} colours)")
        # keyboard: up goes to the previous pass
        if last > 0:
            driver.find_element(By.TAG_NAME, "body").send_keys(Keys.ARROW_UP)
            index = wait_for(driver, "const s = document.querySelector('#passes li.selected'); "
                                     "return s && s.dataset.index")
            check(index == str(last - 1), f"up arrow selects the previous pass (now {index})")
        driver.find_element(By.CSS_SELECTOR, "#tabs button[data-tab='source']").click()
        source = driver.find_element(By.ID, "source").text
        check(chosen["name"] in source and len(source) > 50, f"the source of {chosen['name']} shows")
        driver.find_element(By.CSS_SELECTOR, "#tabs button[data-tab='timeline']").click()
        bars = driver.find_elements(By.CSS_SELECTOR, "#timeline rect.bar")
        kernel_bars = [bar for bar in bars if bar.get_attribute("data-kernel")]
        check(len(kernel_bars) == launched, f"the timeline has {len(kernel_bars)} kernel bars for {launched} launched "
                                            f"kernels ({len(bars)} bars in all)")
        # a schedule: its tensor graph with each kernel's part outlined
        schedule = recording["schedules"][-1]
        driver.find_element(By.CSS_SELECTOR, f"#schedules li[data-id='{schedule['id']}']").click()
        wanted = len(schedule["graph"]["nodes"])
        drawn = wait_for(driver, f"const c = document.getElementById('graph'); return c.dataset.state === 'ready' "
                                 f"&& c.dataset.nodes === '{wanted}' && c.dataset.nodes", 60)
        check(drawn == str(wanted), f"{schedule['name']}: tensor graph of {drawn} nodes ({wanted} recorded)")
        # for the screenshot: a pass that fired rules on a graph small enough to read, its changes marked
        candidates = [(len(step["changed"]) if step["rules"] and 20 <= len(step["nodes"]) <= 70 else -1, -index,
                       kernel["id"], index) for kernel in kernels for index, step in enumerate(kernel["passes"])]
        _, _, shown_id, shown_pass = max(candidates)
        shown = kernels[shown_id]
        driver.find_element(By.CSS_SELECTOR, f"#kernels li[data-id='{shown_id}']").click()
        wait_for(driver, _shows_kernel(shown))
        driver.find_element(By.CSS_SELECTOR, f"#passes li[data-index='{shown_pass}']").click()
        wait_for(driver, "return document.getElementById('graph').dataset.state === 'ready'", 60)
        time.sleep(0.3)
        png = driver.get_screenshot_as_png()
        colours = distinct_colours(driver, png)
        check(colours > 20, f"the screenshot is not blank ({colours} colours)")
        if screenshot:
            Path(screenshot).parent.mkdir(parents=True, exist_ok=True)
            Path(screenshot).write_bytes(png)
            print(f"screenshot: {screenshot}")
        errors = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
        check(not errors, "no console errors" + (f": {errors}" if errors else ""))
    finally:
        driver.quit()
    return failures


def main() -> int:
    """Record, serve, check; 0 when every check passed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--screenshot", help="where to save the page's screenshot (PNG)")
    arguments = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from tinycore.viz import server as viz_server
    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, "recording.json")
        step = record_training_step(path)
        recording = viz_server.load_recording(path)
        print(f"training step: loss {step['loss']:.4f}, {step['kernels']} kernels launched (initialisation "
              f"included), "
              f"{len(recording['kernels'])} kernels recorded")
        served, thread = viz_server.start(recording, 0)
        try:
            failures = check_page(served.url, recording, step["kernels"], arguments.screenshot)
        finally:
            served.shutdown()
            served.server_close()
            thread.join(10)
    print("all checks passed" if not failures else f"{len(failures)} check(s) failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
