/**
 * Attaching a live run's new cells in the frame that inserted them.
 *
 * JupyterLab adds an inserted cell as a placeholder and attaches it (creates
 * its editor, renders its outputs) when the page is idle. A fast run keeps the
 * page busy enough that placeholders pile up where the run is, blank, and are
 * all attached after it ends (in a 30-step run with an instant model, up to
 * half the run's cells). The same work, done as each cell arrives: what
 * `Notebook.renderCellOutputs` does for a code cell, for any cell.
 */
import type { Notebook } from '@jupyterlab/notebook';

/** Modes that attach placeholders when idle; 'full' attaches what is in view, 'none' has no placeholders. */
const DEFERRING = new Set(['defer', 'contentVisibility']);

/**
 * The most time one frame spends attaching (a cell takes a few ms): a frame
 * that brings many cells at once (a reloaded page's resync of a long run, a
 * page catching up) attaches the newest, and the next frames the rest,
 * instead of freezing the page.
 */
const BUDGET_MS = 40;

/**
 * Attach the placeholders among `cellIds` in `notebook` now, newest first,
 * within the frame's budget; the ids of those left for the next frame.
 */
export function attachNow(
  notebook: Notebook,
  cellIds: ReadonlySet<string>
): Set<string> {
  const left = new Set<string>();
  if (!cellIds.size || !DEFERRING.has(notebook.notebookConfig.windowingMode)) {
    return left;
  }
  const started = performance.now();
  const widgets = notebook.widgets;
  for (let index = widgets.length - 1; index >= 0; index--) {
    const cell = widgets[index];
    if (!cellIds.has(cell.model.id) || !cell.isPlaceholder()) {
      continue;
    }
    if (performance.now() - started > BUDGET_MS) {
      left.add(cell.model.id);
      continue;
    }
    // Where the layout looks for the cell's place among attached siblings.
    cell.dataset.windowedListIndex = `${index}`;
    notebook.layout.insertWidget(index, cell);
  }
  return left;
}
