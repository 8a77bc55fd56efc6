"""Vision in real JupyterLab: an agent cell draws a chart (its output shows
it, and the root model's next request carries it), sends it to a sub-call
(the sub-call widget shows its thumbnail) and to a batch of two (a row, once
clicked, shows its thumbnail in the detail pane); the saved notebook keeps
the chart once for the cell's three calls."""

from __future__ import annotations

import pytest
from _helpers import repl
from labdriver import (
    CELLS,
    open_run_notebook,
    rlm_magic,
    save_notebook,
    screenshot,
    start_cell,
    wait_cell_idle,
)
from playwright.sync_api import Page, expect

from rlm_kernel.testing.server import Script, ScriptedServer

pytestmark = pytest.mark.usefixtures("fresh_kernels")

CHART = repl('''
import matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=(5, 3))
ax.bar(["Jan", "Feb", "Mar", "Apr"], [3, 4, 11, 5], color="tab:orange")
ax.set_title("Units per month")
display(fig)
plt.close(fig)
peak = llm_query("Which month's bar is highest?", images=[fig])
both = llm_query_batched([("Describe this chart.", [fig]), ("What is its title?", [fig])])
print(peak, both)
''', "A chart, then sub-calls that look at it.")


def test_a_sub_call_with_an_image_shows_its_thumbnail(page: Page, lab_server, request) -> None:
    script = Script(root=[CHART, "FINAL(Mar)"], sub=lambda prompt: "Mar" if "highest" in prompt else "a bar chart")
    with ScriptedServer(script, max_images=4) as server:
        path = open_run_notebook(page, lab_server, "vision.ipynb", "context = 'sales'",
                          f"{rlm_magic(server.url, '--vision on')}\nWhich month stands out?")
        start_cell(page, "ask")
        wait_cell_idle(page, "ask", timeout=120_000)
        images = [(i.model, i.mime) for i in server.images]
    # the chart went to both sub-calls of the batch, the single call, and the root model's next request
    assert images.count(("sub-model", "image/png")) == 3 and ("root-model", "image/png") in images, images

    code = page.locator(CELLS).filter(has=page.locator(".rlm-subcall-widget")).first
    expect(code.locator(".jp-OutputArea-output img").first).to_be_visible(timeout=20_000)  # the chart itself
    single, batch = code.locator(".rlm-subcall-widget").nth(0), code.locator(".rlm-subcall-widget").nth(1)
    thumb = single.locator("img.rlm-sc-thumb")
    expect(thumb).to_have_count(1)
    expect(thumb).to_be_visible()
    assert thumb.get_attribute("src").startswith("data:image/png;base64,")
    size = thumb.evaluate("img => [img.naturalWidth, img.naturalHeight, img.getBoundingClientRect().width]")
    assert 0 < size[0] <= 96 and 0 < size[1] <= 96 and 0 < size[2] <= 98, size  # a 1 px border
    expect(single).to_contain_text("Images (1)")

    # a batch row says it has an image; clicked, its detail pane shows the thumbnail
    row = batch.locator(".rlm-sc-list .rlm-sc-row").first
    expect(row).to_contain_text("[1 image] Describe this chart.")
    row.click()
    detail = batch.locator(".rlm-sc-detail")
    expect(detail.locator("img.rlm-sc-thumb")).to_have_count(1)
    expect(detail.locator("img.rlm-sc-thumb")).to_be_visible()
    assert detail.locator("img.rlm-sc-thumb").evaluate("img => img.naturalWidth") > 0
    code.scroll_into_view_if_needed()
    screenshot(page, request, "-thumbnails")

    # saved: the agent cell keeps the chart once for its three calls, which name it by hash
    save_notebook(page)
    [meta] = [c["metadata"]["rlm"] for c in lab_server.read_notebook(path)["cells"]
              if c["metadata"].get("rlm", {}).get("subcalls")]
    assert len(meta["images"]) == 1 and meta["images"][next(iter(meta["images"]))].startswith("data:image/png")
    assert [r["images"] for r in meta["subcalls"]] == [[*meta["images"]]] * 3
