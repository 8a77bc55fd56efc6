/**
 * Taking over a run: the frontend's side of pins, replay and "continue from
 * here" (docs/live-protocol.md, "Take-over ops").
 *
 * The kernel asks for the notebook's cells (`get_cells`) when a page says
 * hello and when it continues a run; it writes sub-call records and pins into
 * cell metadata (`cell_metadata`), replaces the source of a cell a person
 * edited at an approval (`cell_source`), removes an old continuation a
 * person chose to drop (`delete_cells`) and moves a kept one below the new
 * steps (`move_cells`). The command "RLM: Continue from here" inserts a
 * `%rlm continue --from <cell>` cell below the active cell and runs it. The
 * session's replayed / new sub-call totals, sent with sub-call records, are
 * kept here for a status bar item.
 */
import type {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { Dialog, ICommandPalette, showDialog } from '@jupyterlab/apputils';
import type { DocumentRegistry } from '@jupyterlab/docregistry';
import type * as nbformat from '@jupyterlab/nbformat';
import {
  type INotebookModel,
  INotebookTracker,
  NotebookActions,
  type NotebookPanel
} from '@jupyterlab/notebook';
import { fastForwardIcon } from '@jupyterlab/ui-components';
import type { IDisposable } from '@lumino/disposable';
import { type ISignal, Signal } from '@lumino/signaling';

import { cellRecords, currentCellsAfter, runIdAt } from './cellmeta';
import { cellById, cellIndex, mergeRlmMetadata, untracked } from './cells';
import type { ITakeoverHandler } from './link';
import {
  cellsReply,
  type ICells,
  type IMoveCells,
  type IReplayCounts,
  type TakeoverOp,
  type Writer
} from './protocol';
import type { IReplaySource } from './statusbar';

export const CONTINUE_COMMAND = 'rlm:continue-from-here';

/** One per notebook document: applies the kernel's take-over ops. */
export class Takeover implements ITakeoverHandler, IReplaySource, IDisposable {
  constructor(
    private readonly context: DocumentRegistry.IContext<INotebookModel>
  ) {}

  get isDisposed(): boolean {
    return this.disposed;
  }

  /** The kernel session's replay totals, as last sent (null: none yet). */
  get replay(): IReplayCounts | null {
    return this._replay;
  }

  get replayChanged(): ISignal<this, void> {
    return this._replayChanged;
  }

  dispose(): void {
    if (this.disposed) {
      return;
    }
    this.disposed = true;
    Signal.clearData(this);
  }

  /** Another kernel, or this one restarted: its totals start again. */
  kernelReset(): void {
    this.setReplay(null);
  }

  /**
   * `server`: the Jupyter server applies the ops that change the shared
   * notebook; null (not said yet): the server when the notebook is shared
   * and its kernel an RLM kernel (the only ones the server writes for).
   */
  setWriter(writer: Writer | null): void {
    this.writer = writer;
  }

  applyTakeover(op: TakeoverOp): ICells | null {
    const model = this.model;
    const kernel = this.context.sessionContext.session?.kernel?.name ?? '';
    const writer =
      this.writer ?? (model.collaborative && kernel.startsWith('rlm') ? 'server' : 'page');
    if (writer === 'server' && op.op !== 'get_cells') {
      if (op.op === 'cell_metadata' && op.replay) {
        this.setReplay(op.replay);
      }
      return null;
    }
    switch (op.op) {
      case 'get_cells':
        return this.cells(op.request_id);
      case 'cell_metadata': {
        const patch = op.rlm;
        if (patch) {
          untracked(model, () => {
            for (const id of op.cell_ids) {
              const cell = cellById(model, id);
              if (cell) {
                mergeRlmMetadata(cell, patch);
              }
            }
          });
        }
        if (op.replay) {
          this.setReplay(op.replay);
        }
        return null;
      }
      case 'cell_source':
        for (const id of op.cell_ids) {
          const cell = cellById(model, id);
          if (cell) {
            cell.sharedModel.setSource(op.source);
            if (op.metadata) {
              mergeRlmMetadata(cell, op.metadata);
            }
          }
        }
        return null;
      case 'delete_cells': {
        const indices = op.cell_ids
          .map(id => cellIndex(model, id))
          .filter(i => i >= 0)
          .sort((a, b) => b - a);
        model.sharedModel.transact(() => {
          for (const index of indices) {
            model.sharedModel.deleteCell(index);
          }
        });
        return null;
      }
      case 'move_cells':
        this.moveCells(op);
        return null;
    }
  }

  private get model(): INotebookModel {
    return this.context.model;
  }

  private setReplay(counts: IReplayCounts | null): void {
    if (
      this._replay?.replayed === counts?.replayed &&
      this._replay?.fresh === counts?.fresh
    ) {
      return;
    }
    this._replay = counts
      ? { replayed: counts.replayed, fresh: counts.fresh }
      : null;
    this._replayChanged.emit();
  }

  /**
   * Move the cells, in order, to right after `after_cell_id` ("continue
   * from here" typed further down: the old continuation goes below the
   * continue cell, so the new steps come between it and them). The cell
   * after which they go, the running continue cell, is never moved itself.
   */
  private moveCells(op: IMoveCells): void {
    const model = this.model;
    const shared = model.sharedModel;
    let after = op.after_cell_id;
    // One move at a time: the indices are read from the model, which sees a
    // move only once its transaction has ended.
    for (const id of op.cell_ids) {
      const from = cellIndex(model, id);
      const anchor = cellIndex(model, after);
      if (from < 0 || anchor < 0 || from === anchor) {
        continue;
      }
      // moveCell(from, to): `to` is the index the cell has once moved
      shared.moveCell(from, from < anchor ? anchor : anchor + 1);
      after = id;
    }
  }

  /** The answer to `get_cells`: every cell as nbformat JSON, outputs included. */
  private cells(requestId: string): ICells {
    const cells: nbformat.ICell[] = [];
    const model = this.model;
    for (let i = 0; i < model.cells.length; i++) {
      cells.push(model.cells.get(i).toJSON());
    }
    return cellsReply(requestId, cells);
  }

  private disposed = false;
  private writer: Writer | null = null;
  private _replay: IReplayCounts | null = null;
  private readonly _replayChanged = new Signal<this, void>(this);
}

/**
 * "RLM: Continue from here": ask what to do with the old continuation (if
 * any), then add `%rlm continue --from <id>` below the cell and run it.
 */
export async function continueFromHere(panel: NotebookPanel): Promise<void> {
  const notebook = panel.content;
  const index = notebook.activeCellIndex;
  const active = notebook.activeCell;
  if (!active || index < 0) {
    return;
  }
  if (active.model.sharedModel.getSource().startsWith('%rlm continue')) {
    await NotebookActions.run(notebook, panel.sessionContext);
    return;
  }
  const cells = cellRecords(panel.context.model.cells);
  const runId = runIdAt(cells, index);
  let old = 'keep';
  const count = currentCellsAfter(cells, index, runId);
  if (count) {
    const result = await showDialog({
      title: 'Continue from here',
      body:
        `${count} cell${count === 1 ? '' : 's'} of the run's old continuation ` +
        'follow this cell. Keep them (marked superseded, below the new steps) ' +
        'or remove them?',
      buttons: [
        Dialog.cancelButton(),
        Dialog.warnButton({ label: 'Remove' }),
        Dialog.okButton({ label: 'Keep' })
      ]
    });
    if (!result.button.accept) {
      return;
    }
    old = result.button.label === 'Remove' ? 'remove' : 'keep';
  }
  const model = panel.context.model;
  const source = `%rlm continue --from ${active.model.id} --old ${old}`;
  model.sharedModel.insertCell(index + 1, {
    cell_type: 'code',
    source,
    metadata: { rlm: { role: 'continue' } }
  });
  notebook.activeCellIndex = index + 1;
  await NotebookActions.run(notebook, panel.sessionContext);
}

function isRlmKernel(panel: NotebookPanel | null): boolean {
  const name = panel?.sessionContext.session?.kernel?.name ?? '';
  return name === 'rlm' || name.startsWith('rlm');
}

/**
 * The "Continue from here" command (palette, cell context menu, cell
 * toolbar). The take-over ops themselves are applied by each notebook's
 * `Takeover`, which the main plugin gives the notebook's link.
 */
export const takeoverPlugin: JupyterFrontEndPlugin<void> = {
  id: 'rlm-kernel:takeover',
  description: '"Continue from here" for RLM runs.',
  autoStart: true,
  requires: [INotebookTracker],
  optional: [ICommandPalette],
  activate: (
    app: JupyterFrontEnd,
    tracker: INotebookTracker,
    palette: ICommandPalette | null
  ) => {
    app.commands.addCommand(CONTINUE_COMMAND, {
      label: 'RLM: Continue from here',
      caption:
        'Continue the RLM run from this cell, with the notebook as it is now',
      icon: fastForwardIcon,
      isEnabled: () => !!tracker.currentWidget?.content.activeCell,
      isVisible: () => isRlmKernel(tracker.currentWidget),
      execute: async () => {
        const panel = tracker.currentWidget;
        if (panel) {
          await continueFromHere(panel);
        }
      }
    });
    palette?.addItem({ command: CONTINUE_COMMAND, category: 'RLM' });
    app.contextMenu.addItem({
      command: CONTINUE_COMMAND,
      selector: '.jp-Notebook .jp-Cell',
      rank: 30
    });
  }
};
