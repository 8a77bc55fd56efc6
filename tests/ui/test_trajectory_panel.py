"""The "RLM runs" side panel: the notebook's runs as a tree of steps,
sub-calls and child runs with model, tokens, cost and time, a chart per run,
live updates while a run writes cells, and clicks that go to the cells."""

from __future__ import annotations

from typing import Any

import pytest
from labdriver import (
    CELLS,
    code_cell,
    open_in_notebook7,
    open_notebook,
    screenshot,
    start_cell,
    wait_cell_executed,
    wait_cell_idle,
)
from playwright.sync_api import Page, expect

from rlm_kernel import RLM
from rlm_kernel._words import money, tokens_text
from rlm_kernel.engine.trajectory.result import RunResult
from rlm_kernel.testing.server import Reply, Script, ScriptedServer, prompt_text

pytestmark = pytest.mark.usefixtures("fresh_kernels")

PANEL = "#rlm-runs-panel"
COMMAND = "rlm-kernel:show-runs-panel"
# gpt-4o-mini is in litellm's local cost map, so root calls have a known cost;
# the sub-model is unknown to it, so sub-calls and the child run have none.
ROOT_MODEL = "openai/gpt-4o-mini"
SUB_MODEL = "openai/sub-model"
CHILD_QUERY = "`context` holds a task"  # what spawn_child asks when rlm_query gets no context

PARENT = [
    "Ask about three parts at once.\n```repl\n"
    "parts = [context[i:i + 700] for i in range(0, len(context), 700)][:3]\n"
    "answers = llm_query_batched([f'Count the needles in part {i}: ' + p[:40] for i, p in enumerate(parts)])\n"
    "print(answers)\n```",
    # Slow, so the test sees the panel after step 1 and before step 2.
    Reply(text="Hand the counts to a child run.\n```repl\n"
               "child = rlm_query('CHILD TASK: add up the counts ' + ' '.join(answers))\n"
               "print('child said:', child)\n```", delay=3.0),
    "The child answered.\nFINAL_VAR(child)",
]
CHILD = [
    "The child checks one part.\n```repl\ncheck = llm_query('Confirm the count in: ' + context[:60])\nprint(check)\n```",
    # Slow, so the test sees the parent's step 2 still running.
    Reply(text="```repl\ntotal = 'three needles'\n```\nFINAL_VAR(total)", delay=3.0),
]


class Conversations:
    """The root model follows PARENT; on the sub-model, the child run's
    conversation follows CHILD and plain sub-calls get a computed answer."""

    def __call__(self, body: dict[str, Any]) -> Reply | str:
        messages = body.get("messages", [])
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        if body.get("model") == ROOT_MODEL.split("/")[1]:
            return PARENT[turn] if turn < len(PARENT) else "FINAL(out of script)"
        first_user = next((m.get("content") or "" for m in messages if m.get("role") == "user"), "")
        if CHILD_QUERY in first_user:
            return CHILD[turn] if turn < len(CHILD) else "FINAL(out of script)"
        return f"one needle ({prompt_text(body)[:24]})"


# -- reading the panel and the notebook -------------------------------------------

def panel_entries(page: Page) -> list[dict]:
    """Every entry of the panel's tree, in order, with what its row shows."""
    return page.evaluate(
        """(panel) => Array.from(document.querySelectorAll(panel + ' .rlm-tree-item')).map(li => {
          const row = li.querySelector(':scope > .rlm-row');
          const text = (sel) => { const el = row.querySelector(sel); return el ? el.textContent : null; };
          const parent = li.parentElement.closest('.rlm-tree-item');
          const status = row.querySelector('.rlm-status-tag');
          return {key: li.dataset.key, kind: li.dataset.kind, parent: parent ? parent.dataset.key : null,
                  label: text('.rlm-label'), status: status ? status.dataset.status : null,
                  tokens: text('.rlm-tokens'), metrics: text('.rlm-metrics') || '',
                  model: text('.rlm-model'), detail: text('.rlm-detail-text') || '',
                  query: text('.rlm-run-query') || '',
                  prompt: Number(row.dataset.promptTokens), completion: Number(row.dataset.completionTokens),
                  cell: row.dataset.cellId || null};
        })""",
        PANEL,
    )


def chart_bars(page: Page, run_id: str) -> list[dict]:
    return page.evaluate(
        """([panel, key]) => {
          const run = Array.from(document.querySelectorAll(panel + ' .rlm-node-run'))
            .find(li => li.dataset.key === key);
          if (!run) return [];
          return Array.from(run.querySelectorAll(':scope > .rlm-chart .rlm-chart-bar')).map(g => ({
            step: Number(g.dataset.step), tokens: Number(g.dataset.tokens),
            cost: g.dataset.cost === '' ? null : Number(g.dataset.cost),
            costBar: !!g.querySelector('.rlm-chart-cost'),
            rootHeight: Number((g.querySelector('.rlm-chart-root') || {getAttribute: () => 0}).getAttribute('height')),
            subHeight: Number((g.querySelector('.rlm-chart-sub') || {getAttribute: () => 0}).getAttribute('height'))}));
        }""",
        [PANEL, f"r:{run_id}"],
    )


def notebook_cells(page: Page) -> list[dict]:
    return page.evaluate(
        """() => {
          const model = window.jupyterapp.shell.currentWidget.content.model;
          return Array.from({length: model.cells.length}, (_, i) => {
            const c = model.cells.get(i);
            return {index: i, id: c.id, rlm: c.getMetadata('rlm') || null};
          });
        }"""
    )


def active_cell(page: Page) -> dict:
    """The current notebook's active cell: index, id, and whether its top is in view."""
    return page.evaluate(
        """() => {
          const notebook = window.jupyterapp.shell.currentWidget.content;
          const cell = notebook.activeCell;
          const box = cell.node.getBoundingClientRect();
          const view = notebook.node.getBoundingClientRect();
          return {index: notebook.activeCellIndex, id: cell.model.id,
                  inView: box.top >= view.top - 2 && box.top < view.bottom - 20};
        }"""
    )


def wait_active_cell_in_view(page: Page) -> None:
    """Until the top of the active cell is inside the notebook's viewport
    (scrolling is asynchronous)."""
    page.wait_for_function(
        """() => {
          const notebook = window.jupyterapp.shell.currentWidget.content;
          const box = notebook.activeCell.node.getBoundingClientRect();
          const view = notebook.node.getBoundingClientRect();
          return box.top >= view.top - 2 && box.top < view.bottom - 20;
        }""",
        timeout=10_000,
    )


def open_panel_from_palette(page: Page) -> None:
    page.keyboard.press("Control+Shift+C")
    palette = page.locator(".lm-CommandPalette-input")
    palette.fill("Show runs panel")
    item = page.locator(".lm-CommandPalette-item:has-text('RLM: Show runs panel')").first
    expect(item).to_be_visible()
    item.click()
    expect(page.locator(PANEL)).to_be_visible()


def set_theme(page: Page, theme: str, light: bool) -> None:
    page.evaluate("(theme) => window.jupyterapp.commands.execute('apputils:change-theme', {theme})", theme)
    page.wait_for_function("(light) => document.body.dataset.jpThemeLight === String(light)", arg=light)


def row(page: Page, key: str):
    return page.locator(f"{PANEL} .rlm-tree-item[data-key='{key}'] > .rlm-row")


# -- expected numbers, from the cells' metadata alone --------------------------------

def tokens(usage: dict) -> int:
    return usage["prompt_tokens"] + usage["completion_tokens"]


def step_tokens(metas: list[dict | None]) -> dict[int, int]:
    """Tokens per step: the root call plus its sub-calls (a child run counts
    what its own cells recorded)."""
    totals: dict[int, int] = {}
    for meta in metas:
        if not meta or meta.get("role") not in ("thought", "code", "answer"):
            continue
        step = meta["step"]
        totals.setdefault(step, 0)
        if "root_call" in meta:
            totals[step] += tokens(meta["root_call"])
        for record in meta.get("subcalls", []):
            totals[step] += child_tokens(record["child"]) if record.get("child") else tokens(record["usage"])
    return totals


def child_tokens(child: dict) -> int:
    return sum(step_tokens([c["metadata"].get("rlm") for c in child["cells"]]).values())


def step_seconds(metas: list[dict | None]) -> dict[int, float]:
    """Time per step: the root call's latency plus the run time of the step's
    code cells (which includes their sub-calls and child runs)."""
    totals: dict[int, float] = {}
    for meta in metas:
        if not meta or meta.get("role") not in ("thought", "code", "answer"):
            continue
        totals.setdefault(meta["step"], 0.0)
        if "root_call" in meta:
            totals[meta["step"]] += meta["root_call"]["latency_s"]
        if meta["role"] == "code":
            totals[meta["step"]] += meta["duration_s"]
    return totals


def assert_time(entry: dict, seconds: float) -> None:
    """The time an entry shows (the last part of its metrics: "0.43 s", "2.5 s",
    "12 s", "1:05 min") is ``seconds``, rounded as the panel rounds."""
    shown = entry["metrics"].split(" · ")[-1]
    assert shown.endswith((" s", " min")), entry
    if shown.endswith(" min"):
        minutes, rest = shown.removesuffix(" min").split(":")
        value, unit = int(minutes) * 60 + int(rest), 1.0
    else:
        number = shown.removesuffix(" s")
        digits = len(number.split(".")[1]) if "." in number else 0
        assert digits == (2 if seconds < 1 else 1 if seconds < 10 else 0), (entry, seconds)
        value, unit = float(number), 10.0 ** -digits
    assert seconds > 0 and abs(value - seconds) <= unit / 2 + 1e-9, (entry, seconds)


def test_panel_shows_a_live_run_as_a_tree_and_goes_to_cells(page: Page, lab_server, request, console) -> None:
    filler = "\n".join(f"Filler line {i}, so the run sits below the fold." for i in range(40))
    with ScriptedServer(Conversations()) as server:
        path = lab_server.write_notebook(
            "panel-live.ipynb",
            [{"cell_type": "markdown", "id": "filler", "metadata": {}, "source": filler},
             code_cell("context = 'needle hay ' * 300", "ctx"),
             code_cell(f"%%rlm --model {ROOT_MODEL} --sub-model {SUB_MODEL} --api-base {server.url}\n"
                       "How many needles are there?", "ask")],
            kernel="rlm",
        )
        open_notebook(page, lab_server, path)
        open_panel_from_palette(page)
        expect(page.locator(PANEL)).to_contain_text("No RLM runs in this notebook yet")
        expect(page.locator(f"{PANEL} .rlm-runs-notebook")).to_have_text(path)

        start_cell(page, "ctx")
        wait_cell_executed(page, "ctx")
        start_cell(page, "ask")

        # Live: step 1 and its batch show while the root model is still writing step 2.
        batch = page.locator(f"{PANEL} .rlm-node-batch > .rlm-row")
        expect(batch.locator(".rlm-label")).to_have_text("llm_query_batched", timeout=60_000)
        expect(batch.locator(".rlm-detail-text")).to_have_text("3 prompts, 3 done")
        labels = [e["label"] for e in panel_entries(page) if e["kind"] == "step"]
        assert labels == ["Step 1"], labels
        assert page.locator(f"{PANEL} .rlm-chart-bar").count() == 1
        screenshot(page, request, "-live-step1")

        # Live: step 2 shows as running while its child run works.
        step2 = page.locator(f"{PANEL} .rlm-node-step:has(> .rlm-row .rlm-label:text-is('Step 2'))")
        expect(step2.locator(":scope > .rlm-row .rlm-status-tag")).to_have_attribute(
            "data-status", "running", timeout=30_000)
        assert page.locator(".rlm-answer-cell").count() == 0

        wait_cell_idle(page, "ask", timeout=60_000)
        expect(page.locator(".rlm-answer-cell")).to_contain_text("three needles")
        run_row = page.locator(f"{PANEL} .rlm-node-run > .rlm-row .rlm-status-tag")
        expect(run_row).to_have_attribute("data-status", "final", timeout=10_000)

    cells = notebook_cells(page)
    agent = [c for c in cells if c["rlm"] and c["rlm"].get("role") in ("thought", "code", "answer")]
    run_id = agent[0]["rlm"]["run_id"]
    first_of_step = {}
    for cell in agent:
        first_of_step.setdefault(cell["rlm"]["step"], cell)
    assert sorted(first_of_step) == [1, 2, 3]
    expected_steps = step_tokens([c["rlm"] for c in agent])
    expected_seconds = step_seconds([c["rlm"] for c in agent])
    entries = panel_entries(page)
    by_key = {e["key"]: e for e in entries}

    # The run: its id, root model, status; a click on it leads to the %%rlm cell.
    run = by_key[f"r:{run_id}"]
    assert run["label"] == f"Run {run_id}" and run["model"] == ROOT_MODEL and run["status"] == "final"
    assert run["query"] == "How many needles are there?" and run["detail"] == "3 steps, 5 sub-calls"
    assert run["cell"] == "ask"
    assert run["tokens"] == tokens_text(sum(expected_steps.values()))  # one token format, as the kernel writes it
    assert run["metrics"].endswith((" s", " min")), run  # the run's elapsed time

    # The steps: root model, tokens and cost as the cells' metadata say.
    steps = [e for e in entries if e["kind"] == "step" and e["parent"] == run["key"]]
    assert [s["label"] for s in steps] == ["Step 1", "Step 2", "Step 3"]
    for number, step in zip((1, 2, 3), steps, strict=True):
        root_call = first_of_step[number]["rlm"]["root_call"]
        assert step["model"] == root_call["model"] == ROOT_MODEL
        assert step["cell"] == first_of_step[number]["id"]
        assert step["prompt"] + step["completion"] == expected_steps[number]
        assert step["tokens"] == tokens_text(expected_steps[number]), step
        assert root_call["cost_usd"] > 0
        # Only the root call's cost is known; "+ unknown" says sub-calls had no known price.
        cost = money(root_call["cost_usd"]) + (" + unknown" if number < 3 else "")
        assert step["metrics"].split(" · ")[0] == cost, step
        assert_time(step, expected_seconds[number])
    assert steps[2]["detail"] == "answer"

    # Step 1: the batch and its three sub-calls, in order, with their own numbers.
    records = next(c for c in agent if c["rlm"].get("subcalls") and c["rlm"]["step"] == 1)["rlm"]["subcalls"]
    group = next(e for e in entries if e["kind"] == "batch")
    assert group["parent"] == steps[0]["key"] and group["model"] == SUB_MODEL
    assert group["detail"] == "3 prompts, 3 done"
    members = [e for e in entries if e["parent"] == group["key"]]
    assert [m["key"] for m in members] == [f"sc:{r['id']}" for r in records]
    for member, record in zip(members, records, strict=True):
        assert member["label"] == "llm_query" and member["model"] == record["model"] == SUB_MODEL
        assert (member["prompt"], member["completion"]) == (
            record["usage"]["prompt_tokens"], record["usage"]["completion_tokens"])
        assert member["tokens"] == tokens_text(tokens(record["usage"]))
        assert record["prompt_preview"][:30] in member["detail"]
        assert_time(member, record["latency_s"])
    # the members ran concurrently: the batch took as long as its slowest
    assert_time(group, max(r["latency_s"] for r in records))

    # Step 2: the rlm_query sub-call holds the child run's steps and sub-call.
    code2 = next(c for c in agent if c["rlm"].get("subcalls") and c["rlm"]["step"] == 2)
    record = code2["rlm"]["subcalls"][0]
    child = record["child"]
    rlm_entry = by_key[f"sc:{record['id']}"]
    assert rlm_entry["label"] == "rlm_query" and rlm_entry["parent"] == steps[1]["key"]
    assert f"child run {child['run_id']}" in rlm_entry["detail"] and "2 steps" in rlm_entry["detail"]
    assert rlm_entry["prompt"] + rlm_entry["completion"] == child_tokens(child)
    assert_time(rlm_entry, record["latency_s"])
    assert record["latency_s"] > 3  # the child's slow second step
    child_steps = [e for e in entries if e["parent"] == rlm_entry["key"]]
    assert [s["label"] for s in child_steps] == ["Step 1", "Step 2"]
    child_seconds = step_seconds([c["metadata"].get("rlm") for c in child["cells"]])
    for number, child_step in zip((1, 2), child_steps, strict=True):
        assert_time(child_step, child_seconds[number])
    assert all(s["model"] == SUB_MODEL and s["cell"] == code2["id"] for s in child_steps)
    child_metas = [c["metadata"]["rlm"] for c in child["cells"]]
    inner = next(m for m in child_metas if m.get("subcalls"))["subcalls"][0]
    inner_entry = by_key[f"sc:{inner['id']}"]
    assert inner_entry["parent"] == child_steps[0]["key"] and inner_entry["model"] == SUB_MODEL
    assert inner_entry["prompt"] + inner_entry["completion"] == tokens(inner["usage"])

    # The chart: one bar per step, as tall as the step's tokens, with cost bars.
    bars = chart_bars(page, run_id)
    assert [b["step"] for b in bars] == [1, 2, 3]
    assert [b["tokens"] for b in bars] == [expected_steps[n] for n in (1, 2, 3)]
    assert all(b["cost"] and b["costBar"] for b in bars), bars
    # Root and sub-call bars each have a scale of their own: the root model's
    # bars stay visible next to a step whose sub-calls took far more tokens.
    assert all(b["rootHeight"] >= 5 for b in bars), bars
    assert max(b["subHeight"] for b in bars) >= 15, bars
    screenshot(page, request, "-done")

    # Clicks go to cells: a step, a child run's step (its parent's code cell),
    # a chart bar, and the run (its %%rlm cell).
    row(page, steps[1]["key"]).click()
    page.wait_for_function("(id) => window.jupyterapp.shell.currentWidget.content.activeCell.model.id === id",
                           arg=first_of_step[2]["id"])
    wait_active_cell_in_view(page)
    active = active_cell(page)
    assert active["index"] == first_of_step[2]["index"] and active["inView"], active
    expect(row(page, steps[1]["key"])).to_have_class("rlm-row rlm-selected")
    screenshot(page, request, "-clicked-step2")

    row(page, child_steps[1]["key"]).click()
    page.wait_for_function("(id) => window.jupyterapp.shell.currentWidget.content.activeCell.model.id === id",
                           arg=code2["id"])
    wait_active_cell_in_view(page)

    page.locator(f"{PANEL} .rlm-chart-bar[data-step='3']").click()
    page.wait_for_function("(id) => window.jupyterapp.shell.currentWidget.content.activeCell.model.id === id",
                           arg=first_of_step[3]["id"])
    wait_active_cell_in_view(page)

    row(page, run["key"]).click()
    page.wait_for_function("() => window.jupyterapp.shell.currentWidget.content.activeCell.model.id === 'ask'")
    wait_active_cell_in_view(page)

    # Collapsing a step hides its entries; expanding shows them again.
    page.locator(f"{PANEL} .rlm-tree-item[data-key='{steps[0]['key']}'] > .rlm-row .rlm-caret").click()
    expect(page.locator(f"{PANEL} .rlm-node-batch")).to_have_count(0)
    page.locator(f"{PANEL} .rlm-tree-item[data-key='{steps[0]['key']}'] > .rlm-row .rlm-caret").click()
    expect(page.locator(f"{PANEL} .rlm-node-batch")).to_have_count(1)
    assert not [line for line in console if line.startswith("pageerror")], console


HEADLESS_STEPS = [
    "Let me measure the context.\n```repl\nprint(len(context))\n```",
    "```repl\nparts = llm_query_batched(['summarise: ' + context[:20], 'summarise: ' + context[20:40]])\n```",
    "```repl\nsummary = ' / '.join(parts)\n```\nFINAL_VAR(summary)",
]


def headless_run(lab_server, name: str) -> RunResult:
    """A headless run's trajectory notebook, written into the server's root."""
    with ScriptedServer(Script(root=HEADLESS_STEPS)) as server:
        rlm = RLM(model="openai/root-model", sub_model=SUB_MODEL, api_base=server.url)
        result = rlm.completion("a haystack of words " * 100, "Summarise the context.",
                                output=lab_server.root_dir / name)
    assert result.reason == "final"
    return result


def test_panel_follows_the_current_notebook(page: Page, lab_server, request) -> None:
    result = headless_run(lab_server, "panel-headless.ipynb")
    lab_server.write_notebook("panel-empty.ipynb", [code_cell("1 + 1", "plain")])

    open_notebook(page, lab_server, "panel-headless.ipynb")
    page.locator(CELLS).first.wait_for()
    page.evaluate(f"() => window.jupyterapp.commands.execute('{COMMAND}')")
    panel = page.locator(PANEL)
    expect(panel).to_be_visible()
    run_key = f"r:{result.run_id}"
    expect(row(page, run_key)).to_be_visible()
    entry = {e["key"]: e for e in panel_entries(page)}[run_key]
    # The query and wall time come from the notebook's run record.
    assert entry["query"] == "Summarise the context." and entry["status"] == "final"
    assert entry["model"] == "openai/root-model"
    assert "cost" not in entry["metrics"] and "$" not in entry["metrics"]  # no known cost
    saved = lab_server.read_notebook("panel-headless.ipynb")
    query_cell = next(c for c in saved["cells"] if c["metadata"].get("rlm", {}).get("role") == "query")
    assert entry["cell"] == query_cell["id"]
    assert [b["step"] for b in chart_bars(page, result.run_id)] == [1, 2, 3]
    assert not any(b["costBar"] for b in chart_bars(page, result.run_id))
    expect(panel.locator(".rlm-node-batch > .rlm-row .rlm-detail-text")).to_have_text("2 prompts, 2 done")
    screenshot(page, request, "-headless")
    set_theme(page, "JupyterLab Dark", light=False)
    try:
        screenshot(page, request, "-headless-dark")
    finally:
        set_theme(page, "JupyterLab Light", light=True)  # the setting outlives this test

    # Another notebook becomes current: the panel shows it (no runs) ...
    page.evaluate("() => window.jupyterapp.commands.execute('docmanager:open', {path: 'panel-empty.ipynb'})")
    expect(panel.locator(".rlm-runs-notebook")).to_have_text("panel-empty.ipynb", timeout=30_000)
    expect(panel).to_contain_text("No RLM runs in this notebook yet")
    expect(panel.locator(".rlm-tree-item")).to_have_count(0)

    # ... and back again.
    page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab:has-text('panel-headless.ipynb')").click()
    expect(panel.locator(".rlm-runs-notebook")).to_have_text("panel-headless.ipynb")
    expect(row(page, run_key)).to_be_visible()


def test_panel_in_notebook7(page: Page, lab_server, request) -> None:
    pytest.importorskip("notebook", minversion="7", reason="Notebook 7 is not installed")
    result = headless_run(lab_server, "panel-nb7.ipynb")
    open_in_notebook7(page, lab_server, "panel-nb7.ipynb")
    page.evaluate(f"() => window.jupyterapp.commands.execute('{COMMAND}')")
    expect(page.locator(PANEL)).to_be_visible()
    step3 = f"r:{result.run_id}/s:3"
    expect(row(page, step3)).to_be_visible()
    assert [b["step"] for b in chart_bars(page, result.run_id)] == [1, 2, 3]
    row(page, step3).click()
    target = {e["key"]: e for e in panel_entries(page)}[step3]["cell"]
    page.wait_for_function("(id) => window.jupyterapp.shell.currentWidget.content.activeCell.model.id === id",
                           arg=target)
    wait_active_cell_in_view(page)
    screenshot(page, request)
