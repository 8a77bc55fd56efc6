"""Helpers for driving JupyterLab pages in UI tests (see conftest.py)."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.sync_api import Locator, Page

REPO_ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO_ROOT / "test-artifacts" / "ui"
PLUGIN_ID = "rlm-kernel:plugin"


@dataclass
class LabServer:
    """A running `jupyter lab` and the directories it uses."""

    url: str
    root_dir: Path
    user_settings_dir: Path
    hello_log: Path
    process: subprocess.Popen = field(repr=False)
    log_path: Path = field(repr=False)

    def write_notebook(self, path: str, cells: list[dict], kernel: str = "python3") -> str:
        """Write a notebook into the server's root directory; returns its path."""
        notebook = {
            "nbformat": 4,
            "nbformat_minor": 5,
            "metadata": {
                "kernelspec": {"name": kernel, "display_name": kernel, "language": "python"},
                "language_info": {"name": "python"},
            },
            "cells": cells,
        }
        (self.root_dir / path).write_text(json.dumps(notebook, indent=1))
        return path

    def read_notebook(self, path: str) -> dict:
        return json.loads((self.root_dir / path).read_text())

    def hellos(self, notebook_path: str) -> list[dict]:
        """The `hello` messages test kernels received from this notebook."""
        lines = self.hello_log.read_text().splitlines()
        return [h for h in map(json.loads, lines) if h.get("notebook_path") == notebook_path]


_NOTEBOOK_READY = """() => {
  const app = window.jupyterapp;
  const panel = app && app.shell.currentWidget;
  if (!panel || !panel.context || !panel.sessionContext) return false;
  const kernel = panel.sessionContext.session && panel.sessionContext.session.kernel;
  return panel.context.isReady && panel.sessionContext.isReady && !!kernel
    && kernel.status === 'idle' && kernel.connectionStatus === 'connected';
}"""


def open_notebook(page: Page, lab: LabServer, path: str) -> None:
    """Open `path` in a fresh workspace and wait until its kernel is idle.

    Waiting for the session context (not only the idle indicator) avoids a
    race where the first cell run right after load does nothing.
    """
    page.goto(f"{lab.url}/lab/tree/{path}?reset")
    wait_notebook_ready(page)


def open_in_notebook7(page: Page, lab: LabServer, path: str) -> None:
    """Open `path` in Notebook 7's single-document page and wait for its kernel."""
    page.goto(f"{lab.url}/notebooks/{path}")
    wait_notebook_ready(page)


def wait_notebook_ready(page: Page, timeout: float = 60_000) -> None:
    page.wait_for_function("() => !!window.jupyterapp", timeout=timeout)
    page.wait_for_function(_NOTEBOOK_READY, timeout=timeout)


def notebook_cell_ids(page: Page) -> list[str]:
    return page.evaluate(
        """() => {
          const model = window.jupyterapp.shell.currentWidget.content.model;
          return Array.from({length: model.cells.length}, (_, i) => model.cells.get(i).id);
        }"""
    )


CELLS = ".jp-NotebookPanel:visible .jp-Notebook .jp-Cell"


def cell_by_id(page: Page, cell_id: str, timeout: float = 10_000) -> Locator:
    """Locator of the cell widget whose model id is `cell_id`, once it exists."""
    page.wait_for_function(
        """(id) => {
          const model = window.jupyterapp.shell.currentWidget.content.model;
          return Array.from({length: model.cells.length}, (_, i) => model.cells.get(i).id)
            .includes(id);
        }""",
        arg=cell_id,
        timeout=timeout,
    )
    index = notebook_cell_ids(page).index(cell_id)
    return page.locator(CELLS).nth(index)


def run_cell(page: Page, code: str, index: int = -1, wait: bool = True) -> str:
    """Type `code` into a cell (the last one by default), run it with
    Shift+Enter and return the cell's id; with `wait`, until its reply."""
    cells = page.locator(CELLS)
    cell = cells.nth(index) if index >= 0 else cells.last
    editor = cell.locator(".cm-content")
    editor.click()
    editor.fill(code)
    cell_id = page.evaluate(
        "() => window.jupyterapp.shell.currentWidget.content.activeCell.model.id"
    )
    page.keyboard.press("Shift+Enter")
    if wait:
        wait_cell_executed(page, cell_id)
    return cell_id


def wait_cell_executed(page: Page, cell_id: str, timeout: float = 30_000) -> None:
    page.wait_for_function(
        """(id) => {
          const panel = window.jupyterapp.shell.currentWidget;
          const model = panel.content.model;
          for (let i = 0; i < model.cells.length; i++) {
            const cell = model.cells.get(i);
            if (cell.id === id) {
              return cell.executionCount !== null && cell.executionState !== 'running'
                && panel.sessionContext.session.kernel.status === 'idle';
            }
          }
          return false;
        }""",
        arg=cell_id,
        timeout=timeout,
    )


def cell_output_text(page: Page, cell_id: str) -> str:
    return cell_by_id(page, cell_id).locator(".jp-OutputArea").inner_text()


def save_notebook(page: Page) -> None:
    page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
    page.wait_for_function("() => !window.jupyterapp.shell.currentWidget.context.model.dirty")


def screenshot(page: Page, request: pytest.FixtureRequest, suffix: str = "") -> Path:
    """Save a full-page screenshot as test-artifacts/ui/<test name><suffix>.png."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.originalname)
    path = ARTIFACTS / f"{name}{suffix}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def wait_for(condition: Callable[[], bool], timeout: float = 20, what: str = "condition") -> None:
    """Poll a Python-side condition (e.g. a file the kernel writes)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)
