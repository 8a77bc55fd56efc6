"""Starting a real JupyterLab for the UI tests (conftest.lab_server) and the
live-speed benchmark (bench_live_speed.py), and the Chromium they drive.

The server runs from this Python environment (so it sees the labextension
and kernels installed there), with its settings, workspaces and notebooks in
a folder of its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from _helpers import free_port
from labdriver import ARTIFACTS, LabServer

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

# Settings every server starts from: no news toast, no update check.
SETTINGS_OVERRIDES = {
    "@jupyterlab/apputils-extension:notification": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
}

# IPython startup file for every kernel of the server: a comm target `rlm`
# that logs each frontend `hello` to a file, so tests can see hellos across
# kernel restarts (a restart wipes the namespace). Tests may register their
# own target over it.
HELLO_PROBE = """
import json, os
def _rlm_ui_hello_probe(comm, msg):
    with open(os.environ["RLM_UI_HELLO_LOG"], "a") as log:
        log.write(json.dumps(msg["content"]["data"]) + "\\n")
if not hasattr(get_ipython().kernel, "rlm_channel"):  # the RLM kernel has its own target
    get_ipython().kernel.comm_manager.register_target("rlm", _rlm_ui_hello_probe)
del _rlm_ui_hello_probe
"""


def start_lab(base: Path, log_name: str = "jupyter-lab.log", without_extension: bool = False,
              collaboration: bool = True) -> LabServer:
    """Start ``jupyter lab`` on 127.0.0.1 (no token) with everything it
    writes under ``base`` and its log in test-artifacts/ui/LOG_NAME; returns
    once it answers. ``without_extension`` disables rlm-kernel's labextension;
    ``collaboration`` False turns real-time collaboration off for this server
    (jupyter-collaboration, when installed, turns it on for every server)."""
    root_dir = base / "notebooks"
    app_settings_dir = base / "app-settings"
    user_settings_dir = base / "user-settings"
    config_dir = base / "config"
    for directory in (root_dir, app_settings_dir, user_settings_dir, base / "workspaces", config_dir):
        directory.mkdir(parents=True)
    (app_settings_dir / "overrides.json").write_text(json.dumps(SETTINGS_OVERRIDES))
    startup = base / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-rlm-hello-probe.py").write_text(HELLO_PROBE)
    hello_log = base / "hellos.jsonl"
    hello_log.touch()
    # Notebook 7 (when installed) serves /notebooks from the same server; it
    # exposes window.jupyterapp only when told to, like JupyterLab.
    (config_dir / "jupyter_notebook_config.json").write_text(
        json.dumps({"JupyterNotebookApp": {"expose_app_in_browser": True}})
    )
    if without_extension:
        (config_dir / "labconfig").mkdir()
        (config_dir / "labconfig" / "page_config.json").write_text(
            json.dumps({"disabledExtensions": {"rlm-kernel": True}}))

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    log_path = ARTIFACTS / log_name
    port = free_port()
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
        *([] if collaboration else ["--YDocExtension.disable_rtc=True"]),
    ]
    env = dict(
        os.environ,
        JUPYTER_CONFIG_DIR=str(config_dir),
        IPYTHONDIR=str(base / "ipython"),
        RLM_UI_HELLO_LOG=str(hello_log),
        # the file-id database and runtime files stay in the test's folder, not the home folder
        JUPYTER_DATA_DIR=str(base / "data"),
        JUPYTER_RUNTIME_DIR=str(base / "runtime"),
        PYTHONUNBUFFERED="1",
    )
    with log_path.open("w") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=root_dir
        )
    lab = LabServer(url, root_dir, user_settings_dir, hello_log, process, log_path, collaboration=collaboration)
    try:
        _wait_until_up(url, process, log_path)
    except BaseException:
        lab.stop()
        raise
    return lab


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
