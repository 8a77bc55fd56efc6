/**
 * Superseded cells are history: the cells of an old continuation that
 * `%rlm continue` or `rlm-kernel run --resume` kept below the new steps
 * (`metadata.rlm.superseded`). Running one again (Run All, or by hand) would
 * clear and overwrite the outputs the run recorded, and JupyterLab clears a
 * cell's outputs before the kernel sees the request, so the kernel cannot
 * refuse in time: the page must not send it.
 *
 * This plugin is the notebook's cell executor (JupyterLab's
 * `INotebookCellExecutor`, whose own providers the extension's package.json
 * disables: JupyterLab's, and jupyter-collaboration's, which is JupyterLab's
 * `runCell` unless its server-side execution is on, and otherwise won over
 * ours whenever jupyter-collaboration was installed): every cell runs
 * through JupyterLab's `runCell`, but a
 * superseded code cell is left as it is, and a note says so (one for all the
 * cells one command skipped).
 */
import type {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { Notification } from '@jupyterlab/apputils';
import { INotebookCellExecutor, runCell } from '@jupyterlab/notebook';

import { cellRecord, isSuperseded, skippedNote } from './cellmeta';

/** Cells skipped since the last note; the note waits for the rest of a Run All. */
let skipped = 0;

function noteSkipped(): void {
  if (skipped++ === 0) {
    // Run All asks for every cell in one go: say it once, for all of them.
    setTimeout(() => {
      const count = skipped;
      skipped = 0;
      Notification.info(skippedNote(count), { autoClose: 8000 });
    }, 0);
  }
}

export async function runCellUnlessSuperseded(
  options: INotebookCellExecutor.IRunCellOptions
): Promise<boolean> {
  const model = options.cell.model;
  if (model.type === 'code' && isSuperseded(cellRecord(model))) {
    noteSkipped();
    return true;
  }
  return runCell(options);
}

export const cellExecutorPlugin: JupyterFrontEndPlugin<INotebookCellExecutor> =
  {
    id: 'rlm-kernel:cell-executor',
    description:
      "Runs notebook cells as JupyterLab does, but leaves an old RLM continuation's superseded cells (history) as they are.",
    autoStart: true,
    provides: INotebookCellExecutor,
    activate: (_: JupyterFrontEnd): INotebookCellExecutor =>
      Object.freeze({ runCell: runCellUnlessSuperseded })
  };
