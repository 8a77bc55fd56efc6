"""Harness for UI tests: a real JupyterLab driven by a real Chromium.

One `jupyter lab` per test session, started from the running Python
environment (so it sees the labextension and kernels installed there), with
its settings, workspaces and notebooks in a temporary directory. The browser
is Debian's Chromium launched through pytest-playwright; `playwright install`
is never needed.

Run with:  python -m pytest tests/ui
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from labdriver import ARTIFACTS, LabServer
from playwright.sync_api import Page

CHROMIUM = os.environ.get("RLM_UI_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

# Settings every test session starts from: no news toast, no update check.
SETTINGS_OVERRIDES = {
    "@jupyterlab/apputils-extension:notification": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
}


# IPython startup file for every test kernel: a comm target `rlm` that logs
# each frontend `hello` to a file, so tests can see hellos across kernel
# restarts (a restart wipes the namespace). Tests may register their own
# target over it.
HELLO_PROBE = """
import json, os
def _rlm_ui_hello_probe(comm, msg):
    with open(os.environ["RLM_UI_HELLO_LOG"], "a") as log:
        log.write(json.dumps(msg["content"]["data"]) + "\\n")
if not hasattr(get_ipython().kernel, "rlm_channel"):  # the RLM kernel has its own target
    get_ipython().kernel.comm_manager.register_target("rlm", _rlm_ui_hello_probe)
del _rlm_ui_hello_probe
"""


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "ui: drives a real JupyterLab in Chromium")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.ui)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_until_up(
    url: str, process: subprocess.Popen, log_path: Path, timeout: float = 90
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"jupyter lab exited with code {process.returncode}; see {log_path}:\n"
                + log_path.read_text()[-3000:]
            )
        try:
            with urllib.request.urlopen(f"{url}/api/status", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.25)
    raise RuntimeError(f"jupyter lab did not answer /api/status within {timeout}s; see {log_path}")


def _require_labextension() -> None:
    """Fail every UI test with one clear sentence when the extension is absent."""
    from jupyter_core.paths import jupyter_path

    places = [Path(base) / "rlm-kernel" for base in jupyter_path("labextensions")]
    if not any((place / "package.json").exists() for place in places):
        pytest.fail(
            f"The rlm-kernel labextension is not installed for {sys.executable} "
            "(looked in " + ", ".join(map(str, places)) + "). Install the package "
            "(pip install -e .), which builds labextension/ with jlpm."
        )


@pytest.fixture(scope="session")
def lab_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabServer]:
    _require_labextension()
    base = tmp_path_factory.mktemp("lab")
    root_dir = base / "notebooks"
    app_settings_dir = base / "app-settings"
    user_settings_dir = base / "user-settings"
    for directory in (root_dir, app_settings_dir, user_settings_dir, base / "workspaces"):
        directory.mkdir()
    (app_settings_dir / "overrides.json").write_text(json.dumps(SETTINGS_OVERRIDES))
    startup = base / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-rlm-hello-probe.py").write_text(HELLO_PROBE)
    hello_log = base / "hellos.jsonl"
    hello_log.touch()
    # Notebook 7 (when installed) serves /notebooks from the same server; it
    # exposes window.jupyterapp only when told to, like JupyterLab.
    config_dir = base / "config"
    config_dir.mkdir()
    (config_dir / "jupyter_notebook_config.json").write_text(
        json.dumps({"JupyterNotebookApp": {"expose_app_in_browser": True}})
    )

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    log_path = ARTIFACTS / "jupyter-lab.log"
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    command = [
        sys.executable,
        "-m",
        "jupyter",
        "lab",
        "--allow-root",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        "--IdentityProvider.token=",
        "--ServerApp.password=",
        "--LabApp.expose_app_in_browser=True",
        f"--ServerApp.root_dir={root_dir}",
        f"--LabApp.app_settings_dir={app_settings_dir}",
        f"--LabApp.user_settings_dir={user_settings_dir}",
        f"--LabApp.workspaces_dir={base / 'workspaces'}",
    ]
    env = dict(
        os.environ,
        JUPYTER_CONFIG_DIR=str(config_dir),
        IPYTHONDIR=str(base / "ipython"),
        RLM_UI_HELLO_LOG=str(hello_log),
        PYTHONUNBUFFERED="1",
    )
    with log_path.open("w") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=root_dir
        )
    server = LabServer(url, root_dir, user_settings_dir, hello_log, process, log_path)
    try:
        _wait_until_up(url, process, log_path)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict) -> dict:
    """Launch Debian's Chromium instead of a Playwright-downloaded browser."""
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"Chromium not found at {CHROMIUM}. Install it with `apt-get install -y chromium` "
            "or point RLM_UI_CHROMIUM at a Chromium binary (never `playwright install`)."
        )
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "args": CHROMIUM_ARGS}


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args: dict) -> dict:
    return {**browser_context_args, "viewport": {"width": 1400, "height": 900}}


@pytest.fixture
def console(page: Page) -> list[str]:
    """Console lines the page logged (collected from before the first load)."""
    lines: list[str] = []
    page.on("console", lambda message: lines.append(f"{message.type}: {message.text}"))
    page.on("pageerror", lambda error: lines.append(f"pageerror: {error}"))
    return lines
