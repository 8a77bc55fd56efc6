/**
 * One notebook's live view of RLM runs: applies the live ops its link hands
 * it to the notebook model and feeds the output router and the status bar.
 *
 * What the link hands over is applied once per animation frame, in the
 * order it came: a cell inserted, run and finished within one frame gets
 * its outputs and count before its widget is attached at the frame's end
 * (attach.ts), instead of each change re-laying out a cell already on the
 * page. A page that falls behind a fast run (messages waiting in the
 * websocket) catches up in fewer, larger frames; a page that keeps up shows
 * each change in the next frame.
 */
import { Notification } from '@jupyterlab/apputils';
import { isMarkdownCellModel, MarkdownCell } from '@jupyterlab/cells';
import type { DocumentRegistry } from '@jupyterlab/docregistry';
import type * as nbformat from '@jupyterlab/nbformat';
import type { INotebookModel, Notebook } from '@jupyterlab/notebook';
import type { KernelMessage } from '@jupyterlab/services';
import { JSONExt, type JSONObject } from '@lumino/coreutils';
import type { IDisposable } from '@lumino/disposable';
import { type ISignal, Signal } from '@lumino/signaling';

import { attachNow } from './attach';
import {
  cellById,
  cellIndex,
  codeCellById,
  insertCellAfter,
  mergeRlmMetadata,
  type NewCell,
  untracked
} from './cells';
import { RunFollower } from './follow';
import { asDict } from './json';
import type { ILiveHandler } from './link';
import type {
  ICellFinished,
  ICellStarted,
  ICellText,
  IInsertCell,
  IRemoveCells,
  IResync,
  IRunEnded,
  IRunStarted,
  IStatus,
  KernelOp,
  Writer
} from './protocol';
import { OutputRouter } from './router';
import { SharedRunView } from './sharedview';
import type { IRunStatusSource } from './statusbar';

interface IRun {
  anchorCellId: string | null;
  /** Ids of the cells this page inserted or saw for the run, in order. */
  cellIds: string[];
}

/** How many unplaceable inserts to keep while waiting for a `resync`. */
const MAX_PENDING = 500;

/** How many messages a page holds while it does not know who writes. */
const MAX_HELD = 20_000;

/**
 * The longest wait for a frame before what is queued is applied anyway: a
 * hidden page gets no animation frames (browsers throttle its timers to
 * about once a second instead).
 */
const FRAME_WAIT_MS = 100;

/** One message the link handed over: live ops, or an iopub message to route. */
type Queued =
  | { ops: readonly KernelOp[] }
  | { msg: KernelMessage.IIOPubMessage };

export class LiveNotebook
  implements ILiveHandler, IDisposable, IRunStatusSource
{
  constructor(
    private readonly context: DocumentRegistry.IContext<INotebookModel>,
    private readonly views: () => Notebook[]
  ) {
    // The server writes only for RLM kernels (rlm_kernel/server/kernels.py):
    // a shared notebook on another kernel is written by its pages.
    this.router = new OutputRouter(cellId => codeCellById(this.model, cellId));
    this.follower = new RunFollower(views);
    this.shared = new SharedRunView(() => this.model, views, this.follower);
  }

  get statusChanged(): ISignal<this, void> {
    return this._statusChanged;
  }

  get status(): IStatus | null {
    return this._status;
  }

  get statusReceivedAt(): number {
    return this._statusReceivedAt;
  }

  get isDisposed(): boolean {
    return this.disposed;
  }

  dispose(): void {
    if (this.disposed) {
      return;
    }
    this.disposed = true;
    this.unschedule();
    this.queued = [];
    this.shared.dispose();
    this.follower.dispose();
    Signal.clearData(this);
  }

  /**
   * `server`: the Jupyter server writes the runs into the shared document
   * (real-time collaboration); this page changes nothing of them, it shows
   * them (sharedview.ts) and their status. null: the kernel has not said
   * yet; a page of a shared notebook then holds what comes until it does
   * (it must not write what the server writes), any other page writes.
   */
  setWriter(writer: Writer | null): void {
    this.writer = writer;
    const server = this.mode === 'server';
    if (server !== this.serverWrites) {
      this.serverWrites = server;
      if (server) {
        this.shared.start();
      } else {
        this.shared.stop();
      }
    }
    if (this.mode !== null && this.queued.length) {
      this.schedule();
    }
  }

  /** Who writes, as far as this page knows (null: wait). */
  private get mode(): Writer | null {
    if (this.writer) {
      return this.writer;
    }
    const kernel = this.context.sessionContext.session?.kernel?.name ?? '';
    return this.model.collaborative && kernel.startsWith('rlm') ? null : 'page';
  }

  applyOps(ops: readonly KernelOp[]): void {
    this.enqueue({ ops });
  }

  routeIOPub(msg: KernelMessage.IIOPubMessage): void {
    if (this.serverWrites) {
      return; // the server puts the run's outputs into the shared document
    }
    if (this.queued.length || this.concerns(msg) || this.mode === null) {
      this.enqueue({ msg });
    }
  }

  /**
   * Apply everything queued, now (the link calls this before a take-over op
   * reads or changes the notebook). A message whose ops fail is reported
   * and the ones after it are still applied, as when each had a task of its
   * own.
   */
  flush(): void {
    this.unschedule();
    if (this.mode === null) {
      // Who writes is not known yet: keep it all (the newest MAX_HELD).
      this.queued.splice(0, this.queued.length - MAX_HELD);
      return;
    }
    const queued = this.queued;
    this.queued = [];
    for (const item of queued) {
      try {
        if ('ops' in item) {
          for (const op of item.ops) {
            this.apply(op);
          }
        } else {
          this.route(item.msg);
        }
      } catch (error) {
        console.error('rlm-kernel: a live op could not be applied', error);
      }
    }
    this.attachInserted();
  }

  /** The cells this frame inserted are on the page in this frame (see attach.ts). */
  private attachInserted(): void {
    if (!this.inserted.size) {
      return;
    }
    const cellIds = this.inserted;
    this.inserted = new Set();
    for (const notebook of this.views()) {
      attachNow(notebook, cellIds);
    }
  }

  private enqueue(item: Queued): void {
    if (this.disposed) {
      return;
    }
    this.queued.push(item);
    this.schedule();
  }

  private schedule(): void {
    if (this.frame === null) {
      this.frame = requestAnimationFrame(() => this.flush());
      this.frameTimer = window.setTimeout(() => this.flush(), FRAME_WAIT_MS);
    }
  }

  private unschedule(): void {
    if (this.frame !== null) {
      cancelAnimationFrame(this.frame);
      window.clearTimeout(this.frameTimer);
      this.frame = null;
    }
  }

  /**
   * Whether an iopub message may go into a cell of a run, or end a restored
   * anchor's request: the others need no frame.
   */
  private concerns(msg: KernelMessage.IIOPubMessage): boolean {
    const msgId = (msg.parent_header as Partial<KernelMessage.IHeader>).msg_id;
    return !!msgId && (this.anchors.has(msgId) || this.router.routes(msgId));
  }

  private route(msg: KernelMessage.IIOPubMessage): void {
    if (msg.header.msg_type === 'status') {
      this.anchorStatus(msg as KernelMessage.IStatusMsg);
    }
    this.router.route(msg);
  }

  private get model(): INotebookModel {
    return this.context.model;
  }

  private apply(op: KernelOp): void {
    if (this.serverWrites) {
      return this.show(op);
    }
    switch (op.op) {
      case 'run_started':
        return this.runStarted(op);
      case 'insert_cell':
        return this.insertCell(op);
      case 'cell_text':
        return this.cellText(op);
      case 'remove_cells':
        return this.removeCells(op);
      case 'cell_started':
        return this.cellStarted(op);
      case 'cell_finished':
        return this.cellFinished(op);
      case 'status':
        return this.setStatus(op);
      case 'run_ended':
        return this.runEnded(op);
      case 'resync':
        return this.resync(op);
    }
  }

  /** With the server writing: the status bar and following, no change to the notebook. */
  private show(op: KernelOp): void {
    switch (op.op) {
      case 'run_started':
        this.trustAnchor(op.anchor_cell_id);
        return this.runStarted(op, false);
      case 'status':
        return this.setStatus(op);
      case 'run_ended':
        this.runEnded(op, false);
        return this.shared.endWith(op.answer_cell_id);
      case 'resync':
        this.trustAnchor(op.anchor_cell_id);
        if (op.status) {
          if (!op.ended) {
            this.follower.start();
          }
          this.setStatus(op.status);
        }
        return;
      default:
        return;
    }
  }

  /**
   * The `%%rlm` cell shows what its run displays (the status line, the
   * answer, an approval's buttons): the page that ran it trusted it, which
   * the shared document says, but another page's cell read that only when
   * it was made. Trusting it here changes nothing in the document.
   */
  private trustAnchor(cellId: string | null): void {
    const anchor = cellId ? codeCellById(this.model, cellId) : null;
    if (anchor && !anchor.trusted) {
      anchor.trusted = true;
    }
  }

  private run(runId: string): IRun {
    let run = this.runs.get(runId);
    if (!run) {
      run = { anchorCellId: null, cellIds: [] };
      this.runs.set(runId, run);
    }
    return run;
  }

  private runStarted(op: IRunStarted, write = true): void {
    const run = this.run(op.run_id);
    run.anchorCellId = op.anchor_cell_id;
    if (write) {
      this.markFollowUp(op);
    }
    this.follower.start();
    this.setStatus({
      protocol: op.protocol,
      op: 'status',
      run_id: op.run_id,
      state: 'running',
      iteration: 0,
      max_iterations: op.max_iterations,
      depth: op.depth,
      subcalls: 0,
      tokens: 0,
      cost_usd: null,
      elapsed_s: 0
    });
  }

  private insertCell(op: IInsertCell): void {
    if (!this.tryInsert(op)) {
      // Neither the cell it follows nor the run's anchor is here: a page
      // reloaded mid-run missed `run_started`. A `resync` brings the run
      // back, then this insert is retried.
      this.pending.push(op);
      this.pending.splice(0, this.pending.length - MAX_PENDING);
      return;
    }
    this.retryPending();
  }

  /**
   * A cell already here (a streamed step's draft becoming its cell, or a
   * cell announced again with its final metadata) is updated in place.
   */
  private updateCell(op: IInsertCell): boolean {
    const existing = cellById(this.model, op.cell.id);
    if (!existing) {
      return false;
    }
    if (existing.type !== op.cell.cell_type) {
      // A draft that turned out to be another kind of cell: replaced.
      this.deleteCell(op.cell.id);
      return false;
    }
    const source = joinSource(op.cell.source);
    if (existing.sharedModel.getSource() !== source) {
      existing.sharedModel.setSource(source);
      this.rerender(op.cell.id);
    }
    const rlm = asDict(op.cell.metadata?.rlm);
    if (rlm) {
      untracked(this.model, () => existing.setMetadata('rlm', rlm as JSONObject));
    }
    this.follower.newest(op.cell.id);
    return true;
  }

  /** A follow-up's `%%rlm` cell says which run it follows; a re-run that follows none loses the mark. */
  private markFollowUp(op: IRunStarted): void {
    const anchor = op.anchor_cell_id ? cellById(this.model, op.anchor_cell_id) : null;
    const follows = typeof op.follows === 'string' ? op.follows : null;
    if (anchor && (asDict(anchor.getMetadata('rlm'))?.follows ?? null) !== follows) {
      untracked(this.model, () => mergeRlmMetadata(anchor, { follows }));
    }
  }

  private cellText(op: ICellText): void {
    const cell = cellById(this.model, op.cell_id);
    if (cell && cell.sharedModel.getSource() !== op.source) {
      cell.sharedModel.setSource(op.source);
      this.rerender(op.cell_id);
      this.follower.newest(op.cell_id);
    }
  }

  private removeCells(op: IRemoveCells): void {
    for (const cellId of op.cell_ids) {
      const cell = cellById(this.model, cellId);
      if (cell && asDict(cell.getMetadata('rlm'))?.draft === true) {
        this.deleteCell(cellId);
      }
    }
  }

  private deleteCell(cellId: string): void {
    const index = cellIndex(this.model, cellId);
    if (index >= 0) {
      this.model.sharedModel.deleteCell(index);
    }
  }

  private tryInsert(op: IInsertCell): boolean {
    if (this.updateCell(op)) {
      return true;
    }
    const run = this.run(op.run_id);
    const cell: NewCell = { ...op.cell, source: joinSource(op.cell.source) };
    if (cell.cell_type === 'code') {
      cell.outputs = [];
      cell.execution_count = null;
    }
    const after = cellById(this.model, op.after_cell_id)
      ? op.after_cell_id
      : this.lastPlacedCell(run);
    const inserted = after ? insertCellAfter(this.model, after, cell) : null;
    if (!inserted) {
      return false;
    }
    this.remember(run, inserted.id);
    this.inserted.add(inserted.id);
    if (isMarkdownCellModel(inserted)) {
      this.showRendered(inserted.id);
    }
    this.follower.newest(inserted.id);
    return true;
  }

  /**
   * Where a run continues when the cell an insert names is missing: after the
   * run's last cell this page has, else after its anchor. A later `resync`
   * fills the gap in order, since it inserts each missing cell after its
   * predecessor.
   */
  private lastPlacedCell(run: IRun): string | null {
    for (let i = run.cellIds.length - 1; i >= 0; i--) {
      if (cellById(this.model, run.cellIds[i])) {
        return run.cellIds[i];
      }
    }
    const anchor = run.anchorCellId;
    return anchor && cellById(this.model, anchor) ? anchor : null;
  }

  private retryPending(): void {
    let progressed = true;
    while (progressed && this.pending.length) {
      progressed = false;
      for (const op of [...this.pending]) {
        if (this.tryInsert(op)) {
          this.pending.splice(this.pending.indexOf(op), 1);
          progressed = true;
        }
      }
    }
  }

  private cellStarted(op: ICellStarted): void {
    this.router.follow(op.msg_id, op.cell_id);
    this.remember(this.run(op.run_id), op.cell_id);
    const cell = codeCellById(this.model, op.cell_id);
    if (cell) {
      cell.executionState = 'running';
    }
  }

  private cellFinished(op: ICellFinished): void {
    const cell = cellById(this.model, op.cell_id);
    if (!cell) {
      return;
    }
    const patch = op.metadata;
    if (patch) {
      untracked(this.model, () => mergeRlmMetadata(cell, patch));
    }
    const code = codeCellById(this.model, op.cell_id);
    if (code) {
      if (op.outputs?.length && !code.outputs.length) {
        for (const output of op.outputs) {
          code.outputs.add(output);
        }
      }
      code.executionCount = op.execution_count;
      code.executionState = 'idle';
    }
  }

  private setStatus(op: IStatus): void {
    this._status = op;
    this._statusReceivedAt = performance.now();
    this._statusChanged.emit();
  }

  private runEnded(op: IRunEnded, write = true): void {
    const run = this.run(op.run_id);
    if (write) {
      this.follower.stop(); // (with the server writing, once its last cell is in: sharedview.ts)
    }
    this.pending = this.pending.filter(p => p.run_id !== op.run_id);
    this.router.stop(run.cellIds);
    for (const cellId of write ? run.cellIds : []) {
      const cell = codeCellById(this.model, cellId);
      if (cell && cell.executionState === 'running') {
        cell.executionState = 'idle';
      }
    }
    const last = this._status;
    const sameRun = last?.run_id === op.run_id;
    if (last && (sameRun ? last.state === 'ended' : last.state === 'running')) {
      // Already final, or another run (a nested one) still owns the display.
      return;
    }
    const base: IStatus = last && sameRun ? last : emptyStatus(op);
    this.setStatus({
      ...base,
      state: 'ended',
      reason: op.reason,
      elapsed_s:
        base.state === 'running'
          ? base.elapsed_s + (performance.now() - this._statusReceivedAt) / 1000
          : base.elapsed_s
    });
  }

  /**
   * A page that (re)connected mid-run: bring back what a reload lost. The
   * cells run before the run and the anchor's own output come back first,
   * then every listed cell the notebook lacks is inserted, in order, below
   * the anchor.
   */
  private resync(op: IResync): void {
    if (op.ended) {
      return this.catchUp(op);
    }
    const run = this.run(op.run_id);
    run.anchorCellId = op.anchor_cell_id;
    if (op.status) {
      this.setStatus(op.status);
    }
    this.restorePageCells(op);
    this.restoreAnchor(op);
    let previous = op.anchor_cell_id;
    for (const cell of op.cells) {
      const id = cell.id;
      if (typeof id !== 'string' || !id) {
        continue;
      }
      const inserted = insertCellAfter(this.model, previous, {
        ...cell,
        id,
        cell_type: cell.cell_type as NewCell['cell_type'],
        source: joinSource(cell.source)
      });
      if (!inserted) {
        // The anchor itself is missing (unsaved notebook reloaded): nothing
        // to hang the run on.
        console.warn(`rlm-kernel: resync could not place cell ${id}`);
        return;
      }
      this.remember(run, id);
      this.inserted.add(id);
      if (isMarkdownCellModel(inserted)) {
        this.showRendered(id);
      }
      previous = id;
    }
    this.retryPending();
  }

  /**
   * A run that ended while this page did not show it (closed mid-run,
   * opened after): the cells of it the notebook lacks go in, in order, below
   * its `%%rlm` cell; a cell of it that never finished here, and the `%%rlm`
   * cell without its count, get their outputs and counts. Nothing the page
   * already has is added again; a line says what came in.
   */
  private catchUp(op: IResync): void {
    if (op.status && (!this._status || this._status.run_id === op.run_id || this._status.state !== 'running')) {
      this.setStatus(op.status);
    }
    if (!cellById(this.model, op.anchor_cell_id)) {
      return;
    }
    this.restorePageCells(op); // the cells run before it, as the run found them
    let brought = 0;
    let previous = op.anchor_cell_id;
    for (const cell of op.cells) {
      const id = typeof cell.id === 'string' ? cell.id : '';
      if (!id) {
        continue;
      }
      const here = cellById(this.model, id);
      if (!here) {
        const inserted = insertCellAfter(this.model, previous, {
          ...cell,
          id,
          cell_type: cell.cell_type as NewCell['cell_type'],
          source: joinSource(cell.source)
        });
        if (!inserted) {
          return;
        }
        brought++;
        this.inserted.add(id);
        if (isMarkdownCellModel(inserted)) {
          this.showRendered(id);
        }
      } else if (this.finishCell(id, cell)) {
        brought++;
      }
      previous = id;
    }
    const anchor = codeCellById(this.model, op.anchor_cell_id);
    if (
      anchor &&
      op.anchor &&
      anchor.executionCount === null &&
      anchor.executionState !== 'running'
    ) {
      this.router.restore(op.anchor_cell_id, op.anchor.outputs ?? []);
      this.router.stop([op.anchor_cell_id]);
      anchor.executionCount = op.anchor.execution_count;
    }
    if (brought) {
      const from = op.source === 'journal' ? 'its journal on disk' : 'the kernel';
      Notification.info(
        `RLM: ${brought} cell${brought === 1 ? '' : 's'} of run ${op.run_id} ` +
          `that this page missed were brought in from ${from}.`,
        { autoClose: 10_000 }
      );
    }
  }

  /** A cell of an ended run that never finished on this page: its outputs and count. */
  private finishCell(id: string, cell: nbformat.ICell): boolean {
    const code = codeCellById(this.model, id);
    if (!code || cell.cell_type !== 'code' || code.executionCount !== null) {
      return false;
    }
    const done = cell as nbformat.ICodeCell;
    if (done.execution_count === null || done.execution_count === undefined) {
      return false;
    }
    code.trusted = true;
    this.router.restore(id, done.outputs ?? []);
    this.router.stop([id]);
    code.executionCount = done.execution_count;
    code.executionState = 'idle';
    const rlm = asDict(done.metadata?.rlm);
    if (rlm) {
      untracked(this.model, () => code.setMetadata('rlm', rlm as JSONObject));
    }
    return true;
  }

  /**
   * The page's code cells as the run found them: a cell whose source is
   * unchanged but whose outputs or count differ lost them in a reload
   * (nothing else runs while the run goes on), so they come back.
   */
  private restorePageCells(op: IResync): void {
    const ours = new Set(op.cells.map(cell => cell.id));
    for (const shown of op.page_cells ?? []) {
      const cell = ours.has(shown.id) ? null : codeCellById(this.model, shown.id);
      if (
        !cell ||
        cell.executionState === 'running' ||
        cell.sharedModel.getSource() !== shown.source ||
        (cell.executionCount === shown.execution_count &&
          JSONExt.deepEqual(cell.outputs.toJSON(), shown.outputs))
      ) {
        continue;
      }
      // The person ran it; trusted before its outputs are added (trusting
      // swaps every output model).
      cell.trusted = true;
      cell.outputs.clear();
      for (const output of shown.outputs) {
        cell.outputs.add(output);
      }
      cell.executionCount = shown.execution_count;
    }
  }

  /**
   * The anchor cell's own output, when this page no longer runs its request
   * (a reload): the kernel's copy replaces it, and until the request ends
   * its outputs (the status line's updates, the answer) are routed here.
   */
  private restoreAnchor(op: IResync): void {
    const msgId = op.parent_msg_id;
    const cell = codeCellById(this.model, op.anchor_cell_id);
    if (!op.anchor || !msgId || !cell || cell.executionState === 'running') {
      return;
    }
    cell.trusted = true;
    this.router.restore(op.anchor_cell_id, op.anchor.outputs ?? []);
    this.router.follow(msgId, op.anchor_cell_id);
    cell.executionState = 'running';
    this.anchors.set(msgId, {
      cellId: op.anchor_cell_id,
      count: op.anchor.execution_count
    });
  }

  /** A restored anchor's request ended: its count, and no more routing. */
  private anchorStatus(msg: KernelMessage.IStatusMsg): void {
    const msgId = (msg.parent_header as Partial<KernelMessage.IHeader>).msg_id;
    const anchor = msgId ? this.anchors.get(msgId) : undefined;
    if (!msgId || !anchor || msg.content.execution_state !== 'idle') {
      return;
    }
    this.anchors.delete(msgId);
    this.router.stop([anchor.cellId]);
    const cell = codeCellById(this.model, anchor.cellId);
    if (cell) {
      cell.executionCount = anchor.count;
      cell.executionState = 'idle';
    }
  }

  private remember(run: IRun, cellId: string): void {
    if (!run.cellIds.includes(cellId)) {
      run.cellIds.push(cellId);
    }
  }

  /**
   * Render a markdown cell's new text now: JupyterLab re-renders a rendered
   * markdown cell only once its text has stopped changing for a second,
   * which a streaming reply never does.
   */
  private rerender(cellId: string): void {
    for (const notebook of this.views()) {
      for (const widget of notebook.widgets) {
        if (widget.model.id === cellId && widget instanceof MarkdownCell && widget.rendered) {
          widget.update();
        }
      }
    }
  }

  private showRendered(cellId: string): void {
    for (const notebook of this.views()) {
      for (const widget of notebook.widgets) {
        if (widget.model.id === cellId && widget instanceof MarkdownCell) {
          widget.rendered = true;
        }
      }
    }
  }

  private disposed = false;
  private writer: Writer | null = null;
  private serverWrites = false;
  private readonly shared: SharedRunView;
  private readonly router: OutputRouter;
  private readonly follower: RunFollower;
  private readonly runs = new Map<string, IRun>();
  /** Anchors this page restored, by their request's msg_id. */
  private readonly anchors = new Map<
    string,
    { cellId: string; count: number | null }
  >();
  private pending: IInsertCell[] = [];
  private queued: Queued[] = [];
  /** Cells inserted since the last frame, to attach at its end. */
  private inserted = new Set<string>();
  private frame: number | null = null;
  private frameTimer = 0;
  private _status: IStatus | null = null;
  private _statusReceivedAt = 0;
  private readonly _statusChanged = new Signal<this, void>(this);
}

function joinSource(source: string | string[] | undefined): string {
  if (source === undefined) {
    return '';
  }
  return typeof source === 'string' ? source : source.join('');
}

function emptyStatus(op: IRunEnded): IStatus {
  return {
    protocol: op.protocol,
    op: 'status',
    run_id: op.run_id,
    state: 'ended',
    iteration: 0,
    max_iterations: 0,
    depth: 0,
    subcalls: 0,
    tokens: 0,
    cost_usd: null,
    elapsed_s: 0
  };
}
