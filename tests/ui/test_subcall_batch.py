"""Big batches of sub-calls in real JupyterLab.

A batch of 5,000 llm_query calls fills its widget while the page stays
responsive: the longest main-thread task is measured (a PerformanceObserver
of 'longtask' entries) and printed, never asserted (machines are noisy); the
list keeps a bounded number of row elements at every moment; it filters by
status and by text; a row's edit action opens the editor on that call.

A batch of 66 prompts, one per book of the King James Bible: the widget is
a summary with a progress bar and a scrollable list of ten rows' height;
rows and their tags stay on one line, also in a narrow window; a row's
prompt is shown folded around its own book; the editor opens on the row's
call without putting a 200,000-character prompt in a text box.
"""

from __future__ import annotations

import re

import pytest
from _batch_fill import (
    INSTRUCTIONS,
    LONG_TASKS,
    PROBE,
    batch_step,
    fast_sub,
    long_tasks,
    summary_line,
    watch_fill,
    write_long_tasks,
)
from _helpers import repl
from labdriver import (
    CELLS,
    cell_by_id,
    code_cell,
    open_notebook,
    rlm_magic,
    screenshot,
    start_cell,
    wait_cell_executed,
    wait_cell_idle,
)
from playwright.sync_api import Page, expect

from rlm_kernel.testing.server import Reply, Script, ScriptedServer

pytestmark = pytest.mark.usefixtures("fresh_kernels")

ROW_HEIGHT = 26  # labextension/src/subcall_list.ts
MAX_ROW_ELEMENTS = 100


def _frame_drawn(page: Page) -> None:
    """Until the page has drawn a frame since now (a resize's observers have run)."""
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r())))")


def _page_idle(page: Page) -> None:
    """Until the page's main thread has nothing left to do (or 10 s passed)."""
    page.evaluate("() => new Promise(r => requestIdleCallback(() => r(), {timeout: 10000}))")


def _row_heights(widget) -> dict:
    return widget.evaluate(
        """(w) => {
          const rows = [...w.querySelectorAll('.rlm-sc-list .rlm-sc-row')];
          const flags = [...w.querySelectorAll('.rlm-sc-list .rlm-sc-row .rlm-sc-flag')];
          return {
            rows: rows.map(r => r.getBoundingClientRect().height),
            flagsOutside: flags.filter(f => {
              const a = f.getBoundingClientRect(), b = f.closest('.rlm-sc-row').getBoundingClientRect();
              return a.height === 0 || a.top < b.top - 0.5 || a.bottom > b.bottom + 0.5;
            }).length,
            flags: flags.length,
            flagHeights: flags.map(f => f.getBoundingClientRect().height),
          };
        }""")


def _run(page: Page, lab_server, server: ScriptedServer, name: str, context_code: str, *options: str) -> float:
    """Open a notebook with a context cell and a %%rlm cell, run both; returns
    the page's clock (performance.now()) when the %%rlm cell started."""
    path = lab_server.write_notebook(
        name,
        [code_cell(context_code, "ctx"),
         code_cell(f"{rlm_magic(server.url, *options)}\nWhat is each part about?", "ask")],
        kernel="rlm",
    )
    page.add_init_script(LONG_TASKS)
    open_notebook(page, lab_server, path)
    assert page.evaluate("() => window.__rlmLongTasksError || ''") == ""
    start_cell(page, "ctx")
    wait_cell_executed(page, "ctx", timeout=60_000)
    started = page.evaluate("() => performance.now()")
    start_cell(page, "ask")
    return started


def test_a_batch_of_5000_stays_responsive_with_a_bounded_list(page: Page, lab_server, request) -> None:
    n = 5_000
    script = Script(root=[batch_step(n), "FINAL(done)"], sub=fast_sub)
    with ScriptedServer(script) as server:
        started = _run(page, lab_server, server, "batch-5000.ipynb", "context = 'abcdefghij' * 5000",
                       "--concurrency 128")
        widget = page.locator(f"{CELLS} .rlm-subcall-widget").first
        widget.wait_for(timeout=120_000)
        mid: dict[str, int] = {}

        def half_way(count: int) -> None:
            if not mid and n * 0.3 <= count <= n * 0.8:
                widget.locator(".rlm-sc-scroll").evaluate("el => { el.scrollTop = 2000 * 26; }")
                widget.scroll_into_view_if_needed()
                screenshot(page, request, "-mid-fill")
                mid["count"] = count

        fill = watch_fill(widget, n, during=half_way)
        samples = fill.samples
        wait_cell_idle(page, "ask", timeout=120_000)
        _page_idle(page)  # the run's last work on the page is in the long tasks
        finished = page.evaluate("() => performance.now()")
        # The whole run: the cells going in, the widget opening with 5,000 rows
        # in its state, the fill, the batch's end and the run's last cells.
        tasks = long_tasks(page, started, finished)
        summary = summary_line(fill.figures(tasks))
        print("\n" + summary)
        write_long_tasks(page, "subcall_batch_5000_longtasks.txt", summary, tasks)
        assert mid, "no sample caught the batch half-way"
        assert mid["count"] < n
        # A bounded DOM at every moment, and a title that says what happened.
        assert max(s["rows"] for s in samples) <= MAX_ROW_ELEMENTS, samples
        assert max(s["nodes"] for s in samples) <= 30 * MAX_ROW_ELEMENTS, samples
        expect(widget.locator(".rlm-sc-title")).to_contain_text("5000 of 5000 done, 5 failed")
        widget.scroll_into_view_if_needed()
        screenshot(page, request, "-done")

        # Filter by status: the five failed calls.
        chips = widget.locator(".rlm-sc-chip")
        expect(chips.filter(has_text=re.compile(r"^done 4,995$"))).to_be_visible()
        chips.filter(has_text=re.compile(r"^error 5$")).click()
        rows = widget.locator(".rlm-sc-list .rlm-sc-row")
        expect(rows).to_have_count(5)
        assert rows.evaluate_all("rs => rs.map(r => r.dataset.status)") == ["error"] * 5
        assert rows.evaluate_all("rs => rs.map(r => r.querySelector('.rlm-sc-num').textContent)") == [
            "#8", "#1008", "#2008", "#3008", "#4008"]
        expect(widget.locator(".rlm-sc-shown")).to_have_text("5 of 5,000 shown")
        screenshot(page, request, "-errors")
        chips.filter(has_text=re.compile(r"^error 5$")).click()  # again: every status
        expect(widget.locator(".rlm-sc-shown")).to_have_text("")

        # Filter by text: one call.
        widget.locator(".rlm-sc-filter-text").fill("part 4321 of")
        expect(rows).to_have_count(1)
        row = rows.first
        expect(row.locator(".rlm-sc-num")).to_have_text("#4322")
        expect(row).to_contain_text("answer to part 4321")

        # Its own edit action opens the editor on that call.
        row.locator(".rlm-sc-row-edit").click()
        editor = widget.locator(".rlm-sc-editor")
        expect(editor.locator(".rlm-sc-edit-title")).to_contain_text("sub-call #4,322 of 5,000", timeout=15_000)
        expect(editor.locator(".rlm-sc-edit-text textarea")).to_have_value("answer to part 4321")
        expect(editor.locator(".rlm-sc-edit-prompt textarea")).to_have_value(re.compile(r"Part 4321 of 5000: "))
        expect(row).to_have_class(re.compile(r"rlm-sc-editing"))
        editor.scroll_into_view_if_needed()
        screenshot(page, request, "-editor")
        assert widget.evaluate(PROBE)["rows"] <= MAX_ROW_ELEMENTS


BOOK_STEP = repl(
    "books = context.split('\\n\\n=== ')[1:]\n"
    f"prompts = ['{INSTRUCTIONS}\\n\\n=== ' + book for book in books]\n"
    "answers = llm_query_batched(prompts)\n"
    "print(len(books), 'books,', max(map(len, prompts)), 'characters in the longest prompt')",
    prose="One sub-call per book.")


def _bible() -> str:
    from rlm_kernel.bench.suites.texts import kjv_verses

    books: dict[str, list[str]] = {}
    for verse in kjv_verses():
        books.setdefault(verse.book, []).append(verse.text)
    return "".join(f"\n\n=== {name} ===\n" + " ".join(texts) for name, texts in books.items())


def _book_sub(prompt: str) -> Reply:
    name = re.search(r"=== (.+?) ===", prompt)
    return Reply(text=f"A summary of {name.group(1) if name else '?'} in one line.", delay=0.05)


def test_a_batch_of_66_books_is_a_summary_with_a_scrollable_list(page: Page, lab_server, request) -> None:
    (lab_server.root_dir / "bible.txt").write_text(_bible(), encoding="utf-8")
    script = Script(root=[BOOK_STEP, "FINAL(done)"], sub=_book_sub)
    with ScriptedServer(script) as server:
        started = _run(page, lab_server, server, "batch-66.ipynb",
                       "context = open('bible.txt', encoding='utf-8').read()", "--concurrency 8")
        widget = page.locator(f"{CELLS} .rlm-subcall-widget").first
        widget.wait_for(timeout=120_000)
        first = widget.evaluate(PROBE)
        expect(widget.locator(".rlm-sc-title")).to_contain_text("66 of 66 done", timeout=120_000)
        end = widget.evaluate(PROBE)["now"]
        wait_cell_idle(page, "ask", timeout=120_000)
        _page_idle(page)  # the run's last work on the page is in the long tasks
        tasks = long_tasks(page, started, page.evaluate("() => performance.now()"))
        summary = (f"66-row batch: over the whole run {len(tasks)} long tasks, longest "
                   f"{max((d for _, d in tasks), default=0):.0f} ms; while the list filled, longest "
                   f"{max((d for s, d in tasks if first['now'] <= s <= end), default=0):.0f} ms")
        print("\n" + summary)
        write_long_tasks(page, "subcall_batch_66_longtasks.txt", summary, tasks)

        # A summary: the title, the progress bar, the filters, ten rows' height that scrolls.
        expect(widget.locator(".rlm-sc-title")).to_contain_text("llm_query_batched")
        expect(widget.locator(".widget-hprogress, .widget-progress, .progress-bar").first).to_be_visible()
        expect(widget.locator(".rlm-sc-filter-text")).to_be_visible()
        scroller = widget.locator(".rlm-sc-scroll")
        box = scroller.evaluate("el => ({client: el.clientHeight, scroll: el.scrollHeight})")
        assert box["client"] <= 10 * ROW_HEIGHT + 2 and box["scroll"] == 66 * ROW_HEIGHT, box
        assert widget.bounding_box()["height"] < 600, widget.bounding_box()
        rows = widget.locator(".rlm-sc-list .rlm-sc-row")
        assert rows.count() < 66
        scroller.evaluate("el => { el.scrollTop = el.scrollHeight; }")
        expect(widget.locator(".rlm-sc-row .rlm-sc-num", has_text=re.compile(r"^#66$"))).to_be_visible()
        scroller.evaluate("el => { el.scrollTop = 0; }")
        widget.scroll_into_view_if_needed()
        screenshot(page, request, "-summary")

        # A row's prompt, folded around its own book (found with the text filter: it is not in view).
        assert rows.filter(has_text="Psalms").count() == 0
        # typed key by key: the notebook's command-mode keys (a, m, s...) must not fire
        cells_before = page.evaluate("() => window.jupyterapp.shell.currentWidget.content.model.cells.length")
        widget.locator(".rlm-sc-filter-text").press_sequentially("psalms")
        assert page.evaluate("() => window.jupyterapp.shell.currentWidget.content.model.cells.length") == cells_before
        expect(rows).to_have_count(1)
        expect(widget.locator(".rlm-sc-shown")).to_have_text("1 of 66 shown")
        psalms = rows.first
        expect(psalms.locator(".rlm-sc-num")).to_have_text("#19")
        psalms.locator(".rlm-sc-preview").click()
        detail = widget.locator(".rlm-sc-detail")
        expect(detail).to_be_visible()
        expect(detail.locator(".rlm-sc-prompt")).to_contain_text("=== Psalms ===")
        expect(detail.locator(".rlm-sc-fold[data-kind='head']")).to_contain_text(
            "characters shared with the other 65 prompts of this batch")
        expect(detail.locator(".rlm-sc-fold[data-kind='own']")).to_contain_text("more characters of this call's own part")
        detail.locator(".rlm-sc-fold[data-kind='head']").click()
        expect(detail.locator(".rlm-sc-fold-text")).to_contain_text("You read one part of a long document.")
        detail.scroll_into_view_if_needed()
        screenshot(page, request, "-detail")

        # Its edit action: the editor shows that call, the prompt folded, no huge text box.
        psalms.locator(".rlm-sc-row-edit").click()
        editor = widget.locator(".rlm-sc-editor")
        number = int(psalms.locator(".rlm-sc-num").inner_text().lstrip("#"))
        expect(editor.locator(".rlm-sc-edit-title")).to_contain_text(f"sub-call #{number} of 66", timeout=15_000)
        expect(editor.locator(".rlm-sc-edit-text textarea")).to_have_value("A summary of Psalms in one line.")
        view = editor.locator(".rlm-sc-edit-prompt-view")
        expect(view).to_contain_text("=== Psalms ===")
        expect(view.locator("details.rlm-sc-fold").first).to_be_attached()
        longest = editor.locator("textarea").evaluate_all("ts => Math.max(...ts.map(t => t.value.length))")
        assert longest < 20_000, longest
        expect(editor.locator(".rlm-sc-edit-prompt-open")).to_contain_text("in a text box")
        editor.scroll_into_view_if_needed()
        screenshot(page, request, "-editor")

        # Pin it: the row gets its tag, on the same line.
        editor.locator(".rlm-sc-edit-text textarea").fill("Praise, lament and thanksgiving, in 150 songs.")
        editor.locator("button.rlm-sc-pin").click()
        expect(editor.locator(".rlm-sc-pinned-note")).to_be_visible(timeout=10_000)
        expect(psalms.locator(".rlm-sc-flag.rlm-sc-pinned")).to_be_visible(timeout=10_000)
        widget.locator(".rlm-sc-filter-text").fill("")
        scroller.evaluate("el => { el.scrollTop = 12 * 26; }")
        expect(widget.locator(".rlm-sc-row .rlm-sc-flag.rlm-sc-pinned")).to_be_visible()
        for width in (1400, 760):
            page.set_viewport_size({"width": width, "height": 900})
            _frame_drawn(page)
            # a resize may redraw the window of rows: bring the pinned row back into it
            scroller.evaluate("el => { el.scrollTop = 12 * 26; }")
            expect(widget.locator(".rlm-sc-row .rlm-sc-flag.rlm-sc-pinned")).to_be_visible()
            heights = _row_heights(widget)
            assert set(heights["rows"]) == {ROW_HEIGHT}, (width, heights)
            assert heights["flags"] >= 1 and heights["flagsOutside"] == 0, (width, heights)
            widget.scroll_into_view_if_needed()
            screenshot(page, request, f"-tags-{width}")
        page.set_viewport_size({"width": 1400, "height": 900})


def test_a_replayed_batch_keeps_its_tags_on_one_line(page: Page, lab_server, request) -> None:
    """Re-running the batch's cell replays all 66 calls: every row carries
    the `replayed` tag, and still has the height of one line."""
    (lab_server.root_dir / "bible.txt").write_text(_bible(), encoding="utf-8")
    script = Script(root=[BOOK_STEP, "FINAL(done)"], sub=_book_sub)
    with ScriptedServer(script) as server:
        _run(page, lab_server, server, "batch-66-replay.ipynb",
             "context = open('bible.txt', encoding='utf-8').read()", "--concurrency 16")
        wait_cell_idle(page, "ask", timeout=120_000)
        cell = page.locator(f"{CELLS}:has(.rlm-subcall-widget)").first
        code_id = cell.evaluate(
            """(el) => {
              const notebook = window.jupyterapp.shell.currentWidget.content;
              return notebook.widgets.find(w => w.node === el).model.id;
            }""")
        calls = len(server.calls("sub-model"))
        start_cell(page, code_id)
        widget = cell_by_id(page, code_id).locator(".rlm-subcall-widget")
        expect(widget.locator(".rlm-sc-title")).to_contain_text("66 of 66 done", timeout=60_000)
        expect(widget.locator(".rlm-sc-row .rlm-sc-flag.rlm-sc-replayed").first).to_be_visible(timeout=30_000)
        assert len(server.calls("sub-model")) == calls, "the re-run called the model"
        page.set_viewport_size({"width": 700, "height": 900})
        _frame_drawn(page)
        heights = _row_heights(widget)
        assert set(heights["rows"]) == {ROW_HEIGHT}, heights
        assert heights["flags"] == len(heights["rows"]) and heights["flagsOutside"] == 0, heights
        widget.scroll_into_view_if_needed()
        screenshot(page, request, "-replayed-700")
        page.set_viewport_size({"width": 1400, "height": 900})
