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
 * session's replayed / new sub-call totals, sent with sub-call records, go
 * to a status bar item.
 */
import type {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { Dialog, ICommandPalette, showDialog } from '@jupyterlab/apputils';
import type { ICellModel } from '@jupyterlab/cells';
import type * as nbformat from '@jupyterlab/nbformat';
import {
  INotebookTracker,
  NotebookActions,
  type NotebookPanel
} from '@jupyterlab/notebook';
import type { Kernel, KernelMessage } from '@jupyterlab/services';
import { IStatusBar } from '@jupyterlab/statusbar';
import { fastForwardIcon } from '@jupyterlab/ui-components';
import type { IDisposable } from '@lumino/disposable';
import { type ISignal, Signal } from '@lumino/signaling';

import { cellById, cellIndex, mergeRlmMetadata, untracked } from './cells';
import {
  AGENT_ROLES,
  COMM_TARGET,
  type IReplayCounts,
  PROTOCOL
} from './protocol';
import { type IReplaySource, ReplayStatusItem } from './statusbar';

export const CONTINUE_COMMAND = 'rlm:continue-from-here';

interface ITakeoverOp {
  protocol: typeof PROTOCOL;
  op:
    | 'cell_metadata'
    | 'cell_source'
    | 'delete_cells'
    | 'move_cells'
    | 'get_cells';
  cell_id?: string;
  cell_ids?: string[];
  /** `move_cells`: the cells go, in order, right after this one. */
  after_cell_id?: string;
  rlm?: Record<string, unknown>;
  metadata?: Record<string, unknown>;
  source?: string;
  request_id?: string;
  /** With a cell's sub-call records: the kernel session's totals. */
  replay?: IReplayCounts;
}

const TAKEOVER_OPS: ReadonlySet<string> = new Set([
  'cell_metadata',
  'cell_source',
  'delete_cells',
  'move_cells',
  'get_cells'
]);

function asTakeoverOp(data: unknown): ITakeoverOp | null {
  if (typeof data !== 'object' || data === null) {
    return null;
  }
  const record = data as Record<string, unknown>;
  if (
    record.protocol !== PROTOCOL ||
    typeof record.op !== 'string' ||
    !TAKEOVER_OPS.has(record.op)
  ) {
    return null;
  }
  return data as unknown as ITakeoverOp;
}

/** One per notebook document: applies the kernel's take-over ops. */
class TakeoverLink implements IDisposable, IReplaySource {
  constructor(private readonly panel: NotebookPanel) {
    const session = panel.sessionContext;
    session.kernelChanged.connect(this.onKernelChanged, this);
    this.attach(session.session?.kernel ?? null);
  }

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
    this.panel.sessionContext.kernelChanged.disconnect(
      this.onKernelChanged,
      this
    );
    this.attach(null);
    Signal.clearData(this);
  }

  private onKernelChanged(
    _: unknown,
    change: { newValue: Kernel.IKernelConnection | null }
  ): void {
    this.attach(change.newValue);
  }

  private attach(kernel: Kernel.IKernelConnection | null): void {
    if (this.kernel && !this.kernel.isDisposed) {
      this.kernel.iopubMessage.disconnect(this.onIOPub, this);
      this.kernel.statusChanged.disconnect(this.onKernelStatus, this);
    }
    this.kernel = kernel;
    kernel?.iopubMessage.connect(this.onIOPub, this);
    kernel?.statusChanged.connect(this.onKernelStatus, this);
    this.setReplay(null);
  }

  /** A restarted kernel starts its totals again. */
  private onKernelStatus(
    _: Kernel.IKernelConnection,
    status: KernelMessage.Status
  ): void {
    if (status === 'restarting' || status === 'autorestarting') {
      this.setReplay(null);
    }
  }

  private setReplay(counts: IReplayCounts | null): void {
    if (
      this._replay?.replayed === counts?.replayed &&
      this._replay?.fresh === counts?.fresh
    ) {
      return;
    }
    this._replay = counts ? { replayed: counts.replayed, fresh: counts.fresh } : null;
    this._replayChanged.emit();
  }

  private onIOPub(
    _: Kernel.IKernelConnection,
    msg: KernelMessage.IIOPubMessage
  ): void {
    const type = msg.header.msg_type;
    if (type !== 'comm_open' && type !== 'comm_msg') {
      return;
    }
    const op = asTakeoverOp((msg.content as { data?: unknown }).data);
    if (op) {
      this.apply(op);
    }
  }

  private apply(op: ITakeoverOp): void {
    const model = this.panel.context.model;
    const ids = op.cell_ids ?? (op.cell_id ? [op.cell_id] : []);
    switch (op.op) {
      case 'get_cells':
        return this.sendCells(op.request_id ?? '');
      case 'cell_metadata':
        untracked(model, () => {
          for (const id of ids) {
            const cell = cellById(model, id);
            if (cell && op.rlm) {
              mergeRlmMetadata(cell, op.rlm);
            }
          }
        });
        if (
          op.replay &&
          typeof op.replay.replayed === 'number' &&
          typeof op.replay.fresh === 'number'
        ) {
          this.setReplay(op.replay);
        }
        return;
      case 'cell_source':
        for (const id of ids) {
          const cell = cellById(model, id);
          if (cell) {
            cell.sharedModel.setSource(op.source ?? '');
            if (op.metadata) {
              mergeRlmMetadata(cell, op.metadata);
            }
          }
        }
        return;
      case 'delete_cells': {
        const indices = ids
          .map(id => cellIndex(model, id))
          .filter(i => i >= 0)
          .sort((a, b) => b - a);
        model.sharedModel.transact(() => {
          for (const index of indices) {
            model.sharedModel.deleteCell(index);
          }
        });
        return;
      }
      case 'move_cells':
        return this.moveCells(ids, op.after_cell_id ?? '');
    }
  }

  /**
   * Move the cells `ids`, in order, to right after `afterId` ("continue
   * from here" typed further down: the old continuation goes below the
   * continue cell, so the new steps come between it and them). The cell
   * after which they go, the running continue cell, is never moved itself.
   */
  private moveCells(ids: string[], afterId: string): void {
    const model = this.panel.context.model;
    const shared = model.sharedModel;
    let after = afterId;
    // One move at a time: the indices are read from the model, which sees a
    // move only once its transaction has ended.
    for (const id of ids) {
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

  /** Answer `get_cells` with every cell as nbformat JSON, outputs included. */
  private sendCells(requestId: string): void {
    const kernel = this.kernel;
    if (!kernel || kernel.isDisposed) {
      return;
    }
    const model = this.panel.context.model;
    const cells: nbformat.ICell[] = [];
    for (let i = 0; i < model.cells.length; i++) {
      cells.push(model.cells.get(i).toJSON());
    }
    const comm = kernel.createComm(COMM_TARGET);
    try {
      comm.open({
        protocol: PROTOCOL,
        op: 'cells',
        request_id: requestId,
        cells
      } as never);
      comm.close();
    } catch (error) {
      console.warn('rlm-kernel: could not send the cells', error);
    }
  }

  private kernel: Kernel.IKernelConnection | null = null;
  private disposed = false;
  private _replay: IReplayCounts | null = null;
  private readonly _replayChanged = new Signal<this, void>(this);
}

function rlmMeta(cell: ICellModel): Record<string, unknown> {
  const value = cell.getMetadata('rlm');
  return typeof value === 'object' && value !== null && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : {};
}

function sourceOf(cell: ICellModel): string {
  return cell.sharedModel.getSource();
}

function isQueryCell(cell: ICellModel): boolean {
  return (
    rlmMeta(cell).role === 'query' ||
    (cell.type === 'code' && sourceOf(cell).startsWith('%%rlm'))
  );
}

function agentRunId(cell: ICellModel): string | null {
  const meta = rlmMeta(cell);
  return AGENT_ROLES.has(String(meta.role)) &&
    typeof meta.run_id === 'string' &&
    meta.run_id
    ? meta.run_id
    : null;
}

/**
 * The run a cell belongs to, as the kernel finds it (`run_at` in
 * engine/history.py): its own run id, else that of the nearest agent cell
 * above it below its `%%rlm` cell; on the `%%rlm` cell itself, or with no
 * agent cell in between, the run it recorded, else the run of the first
 * agent cell below it (the newest one: a run's cells go right below its
 * query).
 */
function runIdAt(panel: NotebookPanel, index: number): string | null {
  const cells = panel.context.model.cells;
  let query = -1;
  for (let i = index; i >= 0; i--) {
    if (isQueryCell(cells.get(i))) {
      query = i;
      break;
    }
  }
  if (query < 0) {
    return null;
  }
  for (let i = index; i > query; i--) {
    const runId = agentRunId(cells.get(i));
    if (runId) {
      return runId;
    }
  }
  const recorded = rlmMeta(cells.get(query)).run_id;
  if (typeof recorded === 'string' && recorded) {
    return recorded;
  }
  for (let j = query + 1; j < cells.length; j++) {
    const runId = agentRunId(cells.get(j));
    if (runId) {
      return runId;
    }
    if (isQueryCell(cells.get(j))) {
      break;
    }
  }
  return null;
}

/** Agent cells of `runId` after `index` that are still current. */
function oldContinuation(
  panel: NotebookPanel,
  index: number,
  runId: string | null
): number {
  const cells = panel.context.model.cells;
  let count = 0;
  for (let i = index + 1; i < cells.length; i++) {
    const meta = rlmMeta(cells.get(i));
    if (
      meta.run_id === runId &&
      AGENT_ROLES.has(String(meta.role)) &&
      !meta.superseded
    ) {
      count++;
    }
  }
  return count;
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
  if (sourceOf(active.model).startsWith('%rlm continue')) {
    await NotebookActions.run(notebook, panel.sessionContext);
    return;
  }
  const runId = runIdAt(panel, index);
  let old = 'keep';
  const count = oldContinuation(panel, index, runId);
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

export const takeoverPlugin: JupyterFrontEndPlugin<void> = {
  id: 'rlm-kernel:takeover',
  description: 'Pins, replay and "continue from here" for RLM runs.',
  autoStart: true,
  requires: [INotebookTracker],
  optional: [ICommandPalette, IStatusBar],
  activate: (
    app: JupyterFrontEnd,
    tracker: INotebookTracker,
    palette: ICommandPalette | null,
    statusBar: IStatusBar | null
  ) => {
    const links = new Map<object, TakeoverLink>();
    const track = (panel: NotebookPanel) => {
      const context = panel.context;
      if (links.has(context)) {
        return;
      }
      const link = new TakeoverLink(panel);
      links.set(context, link);
      context.disposed.connect(() => {
        links.delete(context);
        link.dispose();
      });
    };
    tracker.forEach(track);
    tracker.widgetAdded.connect((_, panel) => track(panel));

    if (statusBar) {
      const item = new ReplayStatusItem();
      const follow = () => {
        const panel = tracker.currentWidget;
        item.source = panel ? links.get(panel.context) ?? null : null;
      };
      tracker.currentChanged.connect(follow);
      tracker.widgetAdded.connect(follow);
      follow();
      statusBar.registerStatusItem('rlm-kernel:replay-status', {
        item,
        align: 'left',
        rank: 101,
        isActive: () => item.isActive,
        activeStateChanged: item.activeChanged
      });
    }

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
