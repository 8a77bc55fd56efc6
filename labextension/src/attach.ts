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

/** Attach the placeholders among `cellIds` in `notebook` now. */
export function attachNow(
  notebook: Notebook,
  cellIds: ReadonlySet<string>
): void {
  if (!cellIds.size || !DEFERRING.has(notebook.notebookConfig.windowingMode)) {
    return;
  }
  const widgets = notebook.widgets;
  for (let index = 0; index < widgets.length; index++) {
    const cell = widgets[index];
    if (cellIds.has(cell.model.id) && cell.isPlaceholder()) {
      // Where the layout looks for the cell's place among attached siblings.
      cell.dataset.windowedListIndex = `${index}`;
      notebook.layout.insertWidget(index, cell);
    }
  }
}
