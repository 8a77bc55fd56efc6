/**
 * A run the server writes (real-time collaboration: every page shares one
 * document, and the Jupyter server is its one writer, see
 * docs/live-protocol.md, "Who writes"). The page changes nothing; the run's
 * cells come in through the shared document. What the page still does for
 * them: attach each new cell of a run in the task that brought it in
 * (attach.ts, instead of a placeholder left until the page is idle), render
 * a markdown cell again as its text streams in (JupyterLab waits for a
 * second without change), and follow the newest one.
 */
import { type ICellModel, MarkdownCell } from '@jupyterlab/cells';
import type { INotebookModel, Notebook } from '@jupyterlab/notebook';
import type { IDisposable } from '@lumino/disposable';

import { attachNow } from './attach';
import type { RunFollower } from './follow';
import { asDict } from './json';
import { AGENT_ROLES } from './protocol';

/** How long a page that knows a run ended waits for its last cell to come in. */
const END_WAIT_MS = 5000;

export class SharedRunView implements IDisposable {
  constructor(
    private readonly model: () => INotebookModel,
    private readonly views: () => Notebook[],
    private readonly follower: RunFollower
  ) {}

  get isDisposed(): boolean {
    return this.disposed;
  }

  dispose(): void {
    if (!this.disposed) {
      this.disposed = true;
      this.stop();
    }
  }

  /**
   * The run ended with `cellId` its last cell: the page follows the run until
   * that cell is in (the document's update may come after the kernel's
   * `run_ended`), then stops; at most a few seconds.
   */
  endWith(cellId: string | null): void {
    window.clearTimeout(this.endTimer);
    const model = this.watched;
    const there =
      !cellId ||
      !model ||
      Array.from({ length: model.cells.length }, (_, i) => model.cells.get(i).id).includes(cellId);
    if (there) {
      if (cellId) {
        this.follower.newest(cellId);
      }
      this.follower.stop();
      return;
    }
    this.lastCell = cellId;
    this.endTimer = window.setTimeout(() => this.ended(), END_WAIT_MS);
  }

  private ended(): void {
    window.clearTimeout(this.endTimer);
    this.lastCell = null;
    this.follower.stop();
  }

  /** Watch the notebook for the cells the server writes. */
  start(): void {
    if (this.watched || this.disposed) {
      return;
    }
    this.watched = this.model();
    this.watched.cells.changed.connect(this.onCellsChanged, this);
  }

  stop(): void {
    const model = this.watched;
    this.watched = null;
    if (model && !model.isDisposed) {
      model.cells.changed.disconnect(this.onCellsChanged, this);
    }
    for (const cell of this.streaming) {
      if (!cell.isDisposed) {
        cell.contentChanged.disconnect(this.onContentChanged, this);
      }
    }
    this.streaming.clear();
    if (this.frame !== null) {
      cancelAnimationFrame(this.frame);
      this.frame = null;
    }
    this.pending.clear();
    window.clearTimeout(this.endTimer);
    this.lastCell = null;
  }

  private onCellsChanged(
    _: unknown,
    change: { type: string; newValues: readonly ICellModel[] }
  ): void {
    if (change.type !== 'add') {
      return;
    }
    for (const cell of change.newValues) {
      const rlm = asDict(cell.getMetadata('rlm'));
      if (!rlm || !AGENT_ROLES.has(String(rlm.role))) {
        continue;
      }
      if (!this.pending.size) {
        // once the document's update is applied: the notebook made the
        // cells' widgets (placeholders) in its own handler of this change
        queueMicrotask(() => this.attach());
      }
      this.pending.add(cell.id);
      this.follower.newest(cell.id);
      if (cell.id === this.lastCell) {
        queueMicrotask(() => this.ended()); // after it is attached: shown, then no more following
      }
      if (cell.type === 'markdown' && !this.streaming.has(cell)) {
        this.streaming.add(cell);
        cell.contentChanged.connect(this.onContentChanged, this);
      }
    }
  }

  private attach(): void {
    const ids = this.pending;
    this.pending = new Set();
    if (this.watched) {
      for (const notebook of this.views()) {
        attachNow(notebook, ids);
      }
    }
  }

  /** A markdown cell of the run got more text: shown at the next frame. */
  private onContentChanged(cell: ICellModel): void {
    this.rerender.add(cell.id);
    this.follower.newest(cell.id);
    this.schedule();
  }

  private schedule(): void {
    if (this.frame === null) {
      this.frame = requestAnimationFrame(() => this.flush());
    }
  }

  private flush(): void {
    this.frame = null;
    const rerender = this.rerender;
    this.rerender = new Set();
    for (const notebook of this.views()) {
      for (const widget of notebook.widgets) {
        if (
          widget instanceof MarkdownCell &&
          widget.rendered &&
          rerender.has(widget.model.id)
        ) {
          widget.update();
        }
      }
    }
  }

  private disposed = false;
  private lastCell: string | null = null;
  private endTimer = 0;
  private watched: INotebookModel | null = null;
  private frame: number | null = null;
  private pending = new Set<string>();
  private rerender = new Set<string>();
  private readonly streaming = new Set<ICellModel>();
}
