"""Harness for UI tests: a real JupyterLab driven by a real Chromium.

One `jupyter lab` per test session (see _lab.py), with its settings,
workspaces and notebooks in a temporary directory. The browser is Debian's
Chromium launched through pytest-playwright; `playwright install` is never
needed.

Run with:  python -m pytest tests/ui
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from _lab import CHROMIUM, CHROMIUM_ARGS, start_lab
from labdriver import LabServer, shutdown_all_sessions
from playwright.sync_api import Page


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "ui: drives a real JupyterLab in Chromium")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.ui)


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
    """The JupyterLab most tests share: real-time collaboration on when
    jupyter-collaboration is installed (as in many deployments)."""
    _require_labextension()
    server = start_lab(tmp_path_factory.mktemp("lab"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def lab_server_no_rtc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabServer]:
    """A second JupyterLab, with real-time collaboration turned off
    (``--YDocExtension.disable_rtc=True``): each page its own copy of a
    notebook. Started the first time a test asks for it."""
    _require_labextension()
    server = start_lab(tmp_path_factory.mktemp("lab-no-rtc"), "jupyter-lab-no-rtc.log", collaboration=False)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(params=["rtc", "no-rtc"])
def any_lab(request: pytest.FixtureRequest) -> LabServer:
    """Each test that takes it runs twice: collaboration on, then off."""
    return request.getfixturevalue("lab_server" if request.param == "rtc" else "lab_server_no_rtc")


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


@pytest.fixture
def fresh_kernels(page: Page) -> Iterator[None]:
    """Use in a test module (`pytestmark = pytest.mark.usefixtures(...)` or an
    autouse wrapper) to shut its kernels down when each test ends."""
    yield
    shutdown_all_sessions(page)
