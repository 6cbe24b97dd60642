"""JupyterLab, really opened: a real browser runs notebook 00 and we check what the page shows.

A JupyterLab server starts on localhost with a random token over a temp copy of
``notebooks/``; Debian's chromium, driven by Playwright, opens
``00_environment.ipynb``, runs all cells from the Run menu, waits for the kernel
to go idle, and the test asserts on the rendered page (execution counts,
outputs, the plot as a PNG, no traceback) and on the notebook saved through the
Jupyter REST API (no ``error`` output, the kernel was the venv's Python). The
screenshot lands in ``tests/browser/artifacts/jupyterlab-00.png``. Skipped only
where no chromium exists.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from mgtutor.support.records import MIME_TYPE
from tests.conftest import ROOT

NOTEBOOK = "00_environment.ipynb"
SCREENSHOT = ROOT / "tests" / "browser" / "artifacts" / "jupyterlab-00.png"
FAILURE_SCREENSHOT = SCREENSHOT.with_name("jupyterlab-00-failure.png")
# Without the background-networking flags chromium floods this closed network with refused connections.
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run", "--disable-quic",
]  # fmt: skip
SERVER_START_SECONDS = 90
RUN_ALL_SECONDS = 300  # TensorFlow's first import is slow on a busy 2-core machine
# Settings that keep JupyterLab from asking about news or updates: a pop-up over the page we check.
QUIET_LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
}

# True once the notebook has its kernel and the kernel is idle. The indicator alone says "idle" while the
# toolbar still reads "No Kernel": running cells then opens a kernel-selection dialog instead.
KERNEL_READY_JS = """
() => {
  const name = document.querySelector('.jp-NotebookPanel .jp-Toolbar-kernelName');
  const indicator = document.querySelector('.jp-Notebook-ExecutionIndicator');
  return name !== null && !['', 'No Kernel'].includes(name.textContent.trim())
    && indicator !== null && indicator.getAttribute('data-status') === 'idle';
}
"""
# True once every code cell shows an execution count ("[3]:", not "[ ]:" or "[*]:") and the kernel is idle.
ALL_CELLS_RAN_JS = """
() => {
  const indicator = document.querySelector('.jp-Notebook-ExecutionIndicator');
  const prompts = [...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputPrompt')]
    .map(e => e.textContent.trim());
  return indicator !== null && indicator.getAttribute('data-status') === 'idle'
    && prompts.length > 0 && prompts.every(p => /^\\[\\d+\\]:$/.test(p));
}
"""


def _chromium() -> str | None:
    for candidate in ("/usr/bin/chromium", shutil.which("chromium"), shutil.which("chromium-browser")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _api(base: str, token: str, path: str, method: str = "GET") -> dict:
    request = urllib.request.Request(
        f"{base}{path}", method=method, headers={"Authorization": f"token {token}"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        body = response.read()
    return json.loads(body) if body else {}


class LabServer:
    """A JupyterLab server in a child process, isolated from the user's Jupyter config and settings."""

    def __init__(self, root: Path, scratch: Path) -> None:
        self.token = secrets.token_hex(16)
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = scratch / "jupyterlab.log"
        settings = scratch / "lab-settings"
        for name, values in QUIET_LAB_SETTINGS.items():
            (settings / name).parent.mkdir(parents=True, exist_ok=True)
            (settings / name).write_text(json.dumps(values))
        env = {
            **os.environ,  # MGTUTOR_DATA_DIR and MGTUTOR_OFFLINE from tests/conftest.py
            "TF_CPP_MIN_LOG_LEVEL": "2",
            "MGTUTOR_OFFLINE": "1",
            "JUPYTER_CONFIG_DIR": str(scratch / "jupyter-config"),
            "JUPYTER_RUNTIME_DIR": str(scratch / "jupyter-runtime"),
            "IPYTHONDIR": str(scratch / "ipython"),
        }
        command = [
            sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={self.port}",
            "--ServerApp.ip=127.0.0.1", "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={root}",
            "--ServerApp.open_browser=False", "--ServerApp.allow_root=True",
            f"--LabApp.user_settings_dir={settings}", f"--LabApp.workspaces_dir={scratch / 'workspaces'}",
            "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--LabApp.extension_manager=readonly",
        ]  # fmt: skip
        self.log = self.log_path.open("w")
        self.process = subprocess.Popen(
            command, stdout=self.log, stderr=subprocess.STDOUT, env=env, cwd=root, start_new_session=True
        )

    def log_tail(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")[-3000:]

    def wait_ready(self) -> None:
        deadline = time.monotonic() + SERVER_START_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"JupyterLab exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                _api(self.base, self.token, "/api/status")
                return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.5)
        pytest.fail(f"JupyterLab did not answer /api/status in {SERVER_START_SECONDS} s:\n{self.log_tail()}")

    def stop(self) -> None:
        """Graceful shutdown (it stops the kernels too), then the whole process group if need be."""
        if self.process.poll() is None:
            try:
                _api(self.base, self.token, "/api/shutdown", method="POST")
                self.process.wait(timeout=20)
            except (urllib.error.URLError, ConnectionError, TimeoutError, subprocess.TimeoutExpired):
                pass
        if self.process.poll() is None:
            os.killpg(self.process.pid, 15)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, 9)
                self.process.wait()
        self.log.close()


@pytest.fixture
def chromium() -> str:
    """The browser's path; asked for before `lab`, so a machine without one skips before any work."""
    found = _chromium()
    if found is None:
        pytest.skip("chromium not installed: apt-get install -y chromium (as root; .ci/run does it)")
    return found


@pytest.fixture
def lab(tmp_path) -> Iterator[LabServer]:
    root = tmp_path / "notebooks"
    root.mkdir()
    for notebook in (ROOT / "notebooks").glob("*.ipynb"):
        shutil.copy(notebook, root)
    server = LabServer(root, tmp_path)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def _fail_showing_page(page, lab: LabServer, why: str) -> None:
    page.screenshot(path=str(FAILURE_SCREENSHOT))
    where = f"prompts {_prompts(page)}; page in {FAILURE_SCREENSHOT}"
    pytest.fail(f"{why}; {where}; server log:\n{lab.log_tail()}")


def _dismiss_dialogs(page) -> None:
    """Accept any dialog (e.g. kernel selection) and close any notification over the notebook."""
    for button in page.locator(".jp-Dialog .jp-mod-accept").all():
        button.click()
    for close in page.locator(".jp-toast-dismiss, .Toastify__close-button").all():
        close.click()


def _wait_for(page, lab: LabServer, condition_js: str, seconds: float, what: str, *, dialogs: str) -> None:
    """Poll `condition_js`; dialogs are dismissed (dialogs="dismiss") or end the wait at once ("fail")."""
    deadline = time.monotonic() + seconds
    while not page.evaluate(condition_js):
        if page.locator(".jp-Dialog").count():
            if dialogs == "fail":
                text = " | ".join(page.locator(".jp-Dialog").all_inner_texts())
                _fail_showing_page(page, lab, f"a dialog appeared while waiting for {what}: {text!r}")
            _dismiss_dialogs(page)
        if time.monotonic() > deadline:
            _fail_showing_page(page, lab, f"no {what} after {seconds} s")
        page.wait_for_timeout(500)


def _tracebacks_on_page(page) -> list[str]:
    """Error outputs as rendered: Lab shows stderr streams and errors alike, so look for a traceback."""
    texts = page.eval_on_selector_all(
        '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]',
        "els => els.map(e => e.textContent)",
    )
    return [text for text in texts if "Traceback (most recent call last)" in text]


def _prompts(page) -> list[str]:
    return page.eval_on_selector_all(
        ".jp-Notebook .jp-CodeCell .jp-InputPrompt", "els => els.map(e => e.textContent.trim())"
    )


def _save_and_fetch(page, lab: LabServer, want_counts: int) -> dict:
    """Save with the notebook's toolbar button; the notebook as the server then has it on disk.

    Waits until the saved copy carries `want_counts` execution counts, clicking save again now and
    then in case a click landed while the notebook was busy.
    """
    save = page.locator('.jp-NotebookPanel-toolbar [data-jp-item-name="save"]').first
    deadline = time.monotonic() + 30
    while True:
        save.click()
        for _ in range(10):
            time.sleep(0.5)
            try:
                content = _api(lab.base, lab.token, f"/api/contents/{NOTEBOOK}?content=1")["content"]
            except urllib.error.HTTPError as err:  # read while the save was being written: ask again
                if time.monotonic() > deadline:
                    raise AssertionError(f"cannot read the saved notebook: {err}\n{lab.log_tail()}") from err
                continue
            counts = [c["execution_count"] for c in content["cells"] if c["cell_type"] == "code"]
            if sum(count is not None for count in counts) >= want_counts or time.monotonic() > deadline:
                return content


@pytest.mark.slow
@pytest.mark.browser
def test_jupyterlab_runs_notebook_00_in_a_real_browser(chromium, lab):
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("playwright is missing from the environment: run `make setup` (it is in the dev extra)")

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.goto(f"{lab.base}/lab/tree/{NOTEBOOK}?token={lab.token}")
            SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
            page.wait_for_selector(".jp-Notebook .jp-CodeCell", timeout=SERVER_START_SECONDS * 1000)
            _wait_for(page, lab, KERNEL_READY_JS, SERVER_START_SECONDS, "idle kernel", dialogs="dismiss")
            _dismiss_dialogs(page)

            page.locator(".lm-MenuBar-item", has_text="Run").first.click()
            page.locator(".lm-Menu-item", has_text="Run All Cells").first.click()
            _wait_for(page, lab, ALL_CELLS_RAN_JS, RUN_ALL_SECONDS, "run of all cells", dialogs="fail")

            prompts = _prompts(page)
            outputs_per_cell = page.eval_on_selector_all(
                ".jp-Notebook .jp-CodeCell",
                "els => els.map(e => e.querySelectorAll('.jp-OutputArea-output').length)",
            )
            images = page.eval_on_selector_all(".jp-OutputArea-output img", "els => els.map(e => e.src)")
            tracebacks = _tracebacks_on_page(page)

            plot = page.locator(".jp-CodeCell", has=page.locator(".jp-OutputArea-output img")).last
            plot.evaluate("cell => cell.scrollIntoView({block: 'center'})")
            page.screenshot(path=str(SCREENSHOT), full_page=True)

            saved = _save_and_fetch(page, lab, want_counts=len(prompts))

            # Control: the same two error checks do see a real error, typed in and run like a learner would.
            page.locator(".jp-Notebook .jp-Cell").last.click()
            for key in ("Escape", "b", "Enter"):  # command mode, new code cell below, edit it
                page.keyboard.press(key)
            page.keyboard.type("raise RuntimeError('planted by the browser test')")
            page.keyboard.press("Control+Enter")  # run in place (Shift+Enter would add an unrun cell)
            _wait_for(page, lab, ALL_CELLS_RAN_JS, 60, "the planted cell", dialogs="fail")
            planted = _tracebacks_on_page(page)
            saved_with_error = _save_and_fetch(page, lab, want_counts=len(prompts) + 1)
        finally:
            browser.close()

    saved_code = [c for c in saved["cells"] if c["cell_type"] == "code"]
    # What the page showed: every code cell ran once, in order; outputs and the plot are there.
    assert prompts == [f"[{n}]:" for n in range(1, len(prompts) + 1)] and len(prompts) >= 8
    # The page shows an output wherever the kernel produced one; only the imports, the parameters and
    # the parameter check after them (`lesson_plan`, silent when the values are fine) print nothing.
    assert [n > 0 for n in outputs_per_cell] == [bool(c["outputs"]) for c in saved_code]
    assert sum(n > 0 for n in outputs_per_cell) >= len(prompts) - 3, outputs_per_cell
    assert all(outputs_per_cell[3:]), outputs_per_cell
    assert images and all(src.startswith("data:image/png;base64,") for src in images)
    assert tracebacks == [], tracebacks[0][:2000] if tracebacks else ""
    assert SCREENSHOT.stat().st_size > 20_000  # a real page, not a blank one

    # What the server saved: no error output anywhere, the same counts, the plot as PNG.
    outputs = [o for c in saved_code for o in c["outputs"]]
    errors = [o for o in outputs if o["output_type"] == "error"]
    assert errors == [], [f"{e['ename']}: {e['evalue']}" for e in errors]
    assert [c["execution_count"] for c in saved_code] == list(range(1, len(prompts) + 1))
    assert any("image/png" in o.get("data", {}) for o in outputs)
    records = {k: v for o in outputs for k, v in o.get("data", {}).get(MIME_TYPE, {}).items()}
    assert records["n_devices"] == 4 and records["changing_n_refused"] is True
    # The notebooks ask for "python3"; run from the venv, Lab starts it with the venv's own Python.
    assert saved["metadata"]["kernelspec"]["name"] == "python3"
    assert Path(records["kernel_python"]).parent == Path(sys.executable).parent  # the venv's kernel

    # ...and the checks are not blind: the planted error shows as a traceback and is saved as an error.
    assert len(planted) == 1 and "RuntimeError: planted by the browser test" in planted[0]
    saved_errors = [
        o for c in saved_with_error["cells"] for o in c.get("outputs", []) if o["output_type"] == "error"
    ]
    assert [(e["ename"], e["evalue"]) for e in saved_errors] == [
        ("RuntimeError", "planted by the browser test")
    ]
