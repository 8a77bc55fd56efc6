/**
 * The status bar items: progress of the current notebook's run, and the
 * kernel session's replayed / new sub-calls once re-run cells replayed any.
 *
 *   RLM step 3/20 · 66 sub-calls: 12 done, 50 running, 4 queued · 48.2k tok (31.0k cached) · history compacted · $0.021 · 1:07
 *   RLM replay: 12 sub-calls replayed · 1 new
 */
import { type ISignal, Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';

import {
  formatCached,
  formatClock,
  formatCompactions,
  formatCost,
  formatRoot,
  formatSubcalls,
  formatTokens
} from './format';
import type { IReplayCounts, IStatus } from './protocol';

/** Where the item reads a notebook's latest status from. */
export interface IRunStatusSource {
  readonly status: IStatus | null;
  /** `performance.now()` when `status` arrived, to keep the clock ticking. */
  readonly statusReceivedAt: number;
  readonly statusChanged: ISignal<IRunStatusSource, void>;
}

export function formatStatus(status: IStatus, elapsedS: number, sinceReceiptS = 0): string {
  const root = formatRoot(status, sinceReceiptS);
  const parts = [
    `RLM step ${status.iteration}/${status.max_iterations}`,
    ...(root ? [root] : []),
    formatSubcalls(status.subcalls, status.subcalls_running ?? 0, status.subcalls_queued ?? 0),
    formatTokens(status.tokens) + formatCached(status.cache_read_tokens ?? 0),
    formatCompactions(status.compactions ?? 0),
    formatCost(status.cost_usd, status.known_cost_usd ?? 0),
    formatClock(elapsedS)
  ].filter(part => part !== '');
  if (status.state === 'ended') {
    parts.push(status.reason ? `ended: ${status.reason}` : 'ended');
  }
  return parts.join(' · ');
}

/** The item's tooltip: what the line abbreviates (the prompt cache's reads and writes). */
export function statusTitle(status: IStatus): string {
  const read = status.cache_read_tokens ?? 0;
  const written = status.cache_write_tokens ?? 0;
  const cache =
    read || written
      ? ` · prompt cache: ${formatTokens(read)} read, ${formatTokens(written)} written`
      : '';
  return `Recursive Language Model run${cache}`;
}

export class RunStatusItem extends Widget {
  constructor() {
    super();
    this.addClass('rlm-status');
    this.node.title = 'Recursive Language Model run';
  }

  /** Emitted when the item should be shown or hidden. */
  get activeChanged(): ISignal<this, void> {
    return this._activeChanged;
  }

  /** Shown only while the current notebook has a run status. */
  get isActive(): boolean {
    return (this._source?.status ?? null) !== null;
  }

  /** The current notebook's status source (null when no notebook). */
  set source(source: IRunStatusSource | null) {
    if (this._source === source) {
      return;
    }
    this._source?.statusChanged.disconnect(this.refresh, this);
    this._source = source;
    source?.statusChanged.connect(this.refresh, this);
    this.refresh();
  }

  dispose(): void {
    this.source = null;
    this.stopClock();
    super.dispose();
  }

  private refresh(): void {
    const wasActive = this.node.dataset.active === 'true';
    const status = this._source?.status ?? null;
    this.node.dataset.active = String(status !== null);
    if (status === null) {
      this.node.textContent = '';
      this.stopClock();
    } else {
      this.render();
      this.node.dataset.state = status.state;
      if (status.state === 'running') {
        this.startClock();
      } else {
        this.stopClock();
      }
    }
    if (wasActive !== (status !== null)) {
      this._activeChanged.emit();
    }
  }

  private render(): void {
    const source = this._source;
    const status = source?.status;
    if (!source || !status) {
      return;
    }
    const sinceReceipt =
      status.state === 'running'
        ? (performance.now() - source.statusReceivedAt) / 1000
        : 0;
    this.node.textContent = formatStatus(status, status.elapsed_s + sinceReceipt, sinceReceipt);
    this.node.title = statusTitle(status);
  }

  private startClock(): void {
    if (this.clock === null) {
      this.clock = window.setInterval(() => this.render(), 1000);
    }
  }

  private stopClock(): void {
    if (this.clock !== null) {
      window.clearInterval(this.clock);
      this.clock = null;
    }
  }

  private _source: IRunStatusSource | null = null;
  private clock: number | null = null;
  private readonly _activeChanged = new Signal<this, void>(this);
}

/** Where the replay item reads a notebook's kernel-session totals from. */
export interface IReplaySource {
  readonly replay: IReplayCounts | null;
  readonly replayChanged: ISignal<IReplaySource, void>;
}

export function formatReplay(counts: IReplayCounts): string {
  return (
    `RLM replay: ${counts.replayed} sub-call${counts.replayed === 1 ? '' : 's'} ` +
    `replayed · ${counts.fresh} new`
  );
}

/**
 * The status bar item for replay: how many sub-calls the current notebook's
 * kernel answered from the notebook and how many were new model calls, shown
 * once a re-run cell replayed any.
 *
 *   RLM replay: 12 sub-calls replayed · 1 new
 */
export class ReplayStatusItem extends Widget {
  constructor() {
    super();
    this.addClass('rlm-replay-status');
    this.node.title =
      'Sub-calls of re-run cells in this kernel session: answered from the ' +
      "notebook's recorded responses (replayed, no model call) or new";
  }

  get activeChanged(): ISignal<this, void> {
    return this._activeChanged;
  }

  /** Shown once the current notebook's kernel replayed a sub-call. */
  get isActive(): boolean {
    return (this._source?.replay?.replayed ?? 0) > 0;
  }

  set source(source: IReplaySource | null) {
    if (this._source === source) {
      return;
    }
    this._source?.replayChanged.disconnect(this.refresh, this);
    this._source = source;
    source?.replayChanged.connect(this.refresh, this);
    this.refresh();
  }

  dispose(): void {
    this.source = null;
    super.dispose();
  }

  private refresh(): void {
    const wasActive = this.node.dataset.active === 'true';
    const counts = this._source?.replay ?? null;
    const active = this.isActive;
    this.node.dataset.active = String(active);
    this.node.textContent = active && counts ? formatReplay(counts) : '';
    if (wasActive !== active) {
      this._activeChanged.emit();
    }
  }

  private _source: IReplaySource | null = null;
  private readonly _activeChanged = new Signal<this, void>(this);
}
