"""Helpers for driving JupyterLab pages in UI tests (see conftest.py)."""

from __future__ import annotations

import json
import re
import subprocess
import time
import weakref
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
    collaboration: bool = True  # real-time collaboration on (one shared document per notebook)

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
        """The notebook file as saved. The server saves in place (jupyter_server's
        atomic writing keeps a backup, then rewrites the file), so a read while it
        saves can see a partial file: read again until it parses, for a few seconds."""
        deadline = time.monotonic() + 5
        while True:
            text = (self.root_dir / path).read_text()
            try:
                return json.loads(text)
            except json.JSONDecodeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def hellos(self, notebook_path: str) -> list[dict]:
        """The `hello` messages test kernels received from this notebook."""
        lines = self.hello_log.read_text().splitlines()
        return [h for h in map(json.loads, lines) if h.get("notebook_path") == notebook_path]

    def stop(self) -> None:
        """Stop the server (and with it its kernels)."""
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5)


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
    keep_waiting_for_slow_documents(page)
    page.goto(f"{lab.url}/lab/tree/{path}?reset")
    wait_notebook_ready(page)


def open_in_notebook7(page: Page, lab: LabServer, path: str) -> None:
    """Open `path` in Notebook 7's single-document page and wait for its kernel."""
    keep_waiting_for_slow_documents(page)
    page.goto(f"{lab.url}/notebooks/{path}")
    wait_notebook_ready(page)


_WAITING: weakref.WeakSet[Page] = weakref.WeakSet()


def keep_waiting_for_slow_documents(page: Page) -> None:
    """With collaboration, a page whose shared document has not synced 5 s after
    it asked (jupyter-collaboration's docprovider, a fixed timeout) asks "The
    document is taking some time to load": on a loaded machine it does, and the
    dialog then takes the test's next click. Answer it as a person would, with
    "Continue waiting" (the document goes on loading either way)."""
    if page in _WAITING:
        return
    _WAITING.add(page)
    dialog = page.locator(".jp-Dialog", has_text="taking some time to load")
    page.add_locator_handler(dialog, lambda d: d.get_by_role("button", name="Continue waiting").click())


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


def save_notebook(page: Page, attempts: int = 3) -> None:
    """Save the current notebook as Ctrl+S does, until it is no longer dirty.

    With collaboration, jupyter-collaboration 5.0.4 can leave a save unanswered:
    the server makes the save a task (``DocumentRoom._save_to_disc``), and a
    change to the document that comes before the task starts (an autosave's
    ``_maybe_save_document``) cancels it; the handler's ``await`` then raises
    ``CancelledError``, which its ``except Exception`` lets through, so no reply
    is sent and the page's save never resolves (a CI run hung here for 300 s).
    So each attempt waits at most 10 s for its reply, then saves again."""
    for attempt in range(attempts):
        answered = page.evaluate(
            """() => Promise.race([
                 window.jupyterapp.commands.execute('docmanager:save').then(() => true),
                 new Promise(done => setTimeout(() => done(false), 10000))])""")
        if answered or attempt == attempts - 1:
            break
    page.wait_for_function("() => !window.jupyterapp.shell.currentWidget.context.model.dirty")


def screenshot(page: Page, request: pytest.FixtureRequest, suffix: str = "") -> Path:
    """Save a full-page screenshot as test-artifacts/ui/<test name><suffix>.png."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.originalname)
    path = ARTIFACTS / f"{name}{suffix}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


# -- helpers for real %%rlm runs (the RLM kernel, the scripted model server) ---

_NOTEBOOK_ATTACHED = """() => {
  const app = window.jupyterapp;
  const panel = app && app.shell.currentWidget;
  if (!panel || !panel.context || !panel.sessionContext) return false;
  const kernel = panel.sessionContext.session && panel.sessionContext.session.kernel;
  return panel.context.isReady && panel.sessionContext.isReady && !!kernel
    && kernel.connectionStatus === 'connected';
}"""


def wait_notebook_attached(page: Page, timeout: float = 60_000) -> None:
    """Like wait_notebook_ready, but the kernel may be busy (a run that goes on
    across a page reload)."""
    page.wait_for_function("() => !!window.jupyterapp", timeout=timeout)
    page.wait_for_function(_NOTEBOOK_ATTACHED, timeout=timeout)


def code_cell(source: str, cell_id: str) -> dict:
    """An nbformat code cell with a fixed id, for LabServer.write_notebook."""
    return {"cell_type": "code", "id": cell_id, "source": source, "metadata": {},
            "outputs": [], "execution_count": None}


def rlm_magic(model_url: str, *options: str, sub_model: bool = True) -> str:
    """The first line of a %%rlm cell aimed at the scripted server."""
    parts = ["%%rlm --model openai/root-model"]
    if sub_model:
        parts.append("--sub-model openai/sub-model")
    parts.append(f"--api-base {model_url}")
    parts.extend(options)
    return " ".join(parts)


def open_run_notebook(page: Page, lab: LabServer, name: str, context: str, ask: str,
                      *more: dict, opener: Callable[[Page, LabServer, str], None] = open_notebook) -> str:
    """Write NAME with the RLM kernel: a cell `ctx` (``context``, code that
    sets it), the %%rlm cell `ask` (``ask``, its whole source) and ``more``
    cells; open it (with ``opener``) and run `ctx`. Returns its path; start
    the run with ``start_cell(page, "ask")``."""
    path = lab.write_notebook(name, [code_cell(context, "ctx"), code_cell(ask, "ask"), *more], kernel="rlm")
    opener(page, lab, path)
    start_cell(page, "ctx")
    wait_cell_executed(page, "ctx")
    return path


def start_cell(page: Page, cell_id: str) -> None:
    """Run the cell `cell_id` (as 'Run Selected Cell' does) without waiting."""
    page.evaluate(
        """(id) => {
          const app = window.jupyterapp;
          const notebook = app.shell.currentWidget.content;
          const model = notebook.model;
          for (let i = 0; i < model.cells.length; i++) {
            if (model.cells.get(i).id === id) { notebook.activeCellIndex = i; break; }
          }
          notebook.mode = 'command';
          void app.commands.execute('notebook:run-cell');
        }""",
        cell_id,
    )


def cell_state(page: Page, cell_id: str) -> dict | None:
    """The model-side state of one cell (None when the notebook lacks it)."""
    return page.evaluate(
        """(id) => {
          const model = window.jupyterapp.shell.currentWidget.content.model;
          for (let i = 0; i < model.cells.length; i++) {
            const c = model.cells.get(i);
            if (c.id !== id) continue;
            const code = c.type === 'code';
            return {index: i, id: c.id, type: c.type, source: c.sharedModel.getSource(),
                    metadata: c.getMetadata('rlm') || null,
                    count: code ? c.executionCount : null,
                    state: code ? c.executionState : null,
                    outputs: code ? c.outputs.toJSON() : []};
          }
          return null;
        }""",
        cell_id,
    )


def all_cells(page: Page) -> list[dict]:
    """Every cell of the current notebook, in order: id, type, rlm metadata,
    execution count and state, source, and the text of its outputs."""
    return page.evaluate(
        """() => {
          const model = window.jupyterapp.shell.currentWidget.content.model;
          const out = [];
          for (let i = 0; i < model.cells.length; i++) {
            const c = model.cells.get(i);
            const code = c.type === 'code';
            const meta = c.getMetadata('rlm') || null;
            const texts = code ? c.outputs.toJSON().map(o => {
              if (o.text !== undefined) return Array.isArray(o.text) ? o.text.join('') : o.text;
              if (o.data && o.data['text/plain'] !== undefined) {
                const t = o.data['text/plain']; return Array.isArray(t) ? t.join('') : t; }
              if (o.ename) return o.ename + ': ' + o.evalue;
              return '';
            }) : [];
            out.push({index: i, id: c.id, type: c.type, role: meta ? meta.role || null : null,
                      step: meta ? meta.step : null, status: meta ? meta.status || null : null,
                      count: code ? c.executionCount : null, state: code ? c.executionState : null,
                      source: c.sharedModel.getSource(), output: texts.join('')});
          }
          return out;
        }"""
    )


def wait_cell_idle(page: Page, cell_id: str, timeout: float = 30_000) -> None:
    """Until the cell has its execute reply (count set, no longer running);
    unlike wait_cell_executed this ignores the kernel's status."""
    page.wait_for_function(
        """(id) => {
          const model = window.jupyterapp.shell.currentWidget.content.model;
          for (let i = 0; i < model.cells.length; i++) {
            const c = model.cells.get(i);
            if (c.id === id) return c.executionCount !== null && c.executionState !== 'running';
          }
          return false;
        }""",
        arg=cell_id,
        timeout=timeout,
        polling=50,
    )


def status_bar_text(page: Page) -> str:
    """The RLM item of JupyterLab's status bar ('' when it is not shown)."""
    item = page.locator("#jp-main-statusbar .rlm-status")
    return item.first.inner_text() if item.count() else ""


def click_interrupt(page: Page) -> None:
    """Click the notebook toolbar's Interrupt button (the square)."""
    page.locator(
        ".jp-NotebookPanel:visible .jp-NotebookPanel-toolbar [data-jp-item-name='interrupt']"
    ).first.click()


def shutdown_session(page: Page, path: str) -> int:
    """Shut down the session (and kernel) of the notebook `path` through the
    page's session manager (the REST API wants the page's XSRF token);
    returns how many sessions were shut down."""
    return page.evaluate(
        """async (path) => {
          const sessions = window.jupyterapp.serviceManager.sessions;
          await sessions.refreshRunning();
          const found = Array.from(sessions.running()).filter(s => s.path === path);
          for (const model of found) { await sessions.shutdown(model.id); }
          return found.length;
        }""",
        path,
    )


def saved_cells_by_id(saved: dict) -> dict[str, dict]:
    return {c["id"]: c for c in saved["cells"]}


def output_text(output: dict) -> str:
    """The text of one nbformat output (stream, result/display text/plain, error)."""
    def join(value):
        return "".join(value) if isinstance(value, list) else (value or "")
    if "text" in output:
        return join(output["text"])
    if "data" in output:
        return join(output["data"].get("text/plain"))
    if "ename" in output:
        return f"{output['ename']}: {output.get('evalue', '')}"
    return ""


def append_code_cell(page: Page) -> None:
    """Add an empty code cell at the end of the notebook (then run_cell fills it)."""
    page.evaluate(
        """async () => {
          const app = window.jupyterapp;
          const notebook = app.shell.currentWidget.content;
          notebook.activeCellIndex = notebook.model.cells.length - 1;
          notebook.mode = 'command';
          await app.commands.execute('notebook:insert-cell-below');
          await app.commands.execute('notebook:change-cell-to-code');
        }"""
    )


def shutdown_all_sessions(page: Page) -> None:
    """Shut down every kernel session of the server (a test's teardown, so
    kernels don't pile up over a session); errors are ignored."""
    try:
        page.evaluate(
            """async () => {
              const app = window.jupyterapp;
              if (!app) return;
              await app.serviceManager.sessions.refreshRunning();
              await Promise.all(Array.from(app.serviceManager.sessions.running())
                .map(s => app.serviceManager.sessions.shutdown(s.id).catch(() => null)));
            }"""
        )
    except Exception:  # noqa: BLE001 - the page may be gone or elsewhere
        pass
