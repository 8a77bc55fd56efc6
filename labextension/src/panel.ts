/**
 * The "RLM runs" side panel: the current notebook's runs as a tree (steps,
 * sub-calls, child runs) with model, tokens, cost and time, and a small
 * chart per run. It reads the cells' `metadata.rlm` only, follows the
 * current notebook and updates as a run inserts and finishes cells.
 * Clicking an entry scrolls to its cell and makes it the active cell.
 */
import type {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ILayoutRestorer } from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import type { ICellModel } from '@jupyterlab/cells';
import {
  INotebookTracker,
  type INotebookModel,
  type NotebookPanel
} from '@jupyterlab/notebook';
import { LabIcon } from '@jupyterlab/ui-components';
import type { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { renderChart } from './chart';
import { asDict } from './json';
import {
  buildRuns,
  type ICellFacts,
  type ITrajectoryNode,
  type IRunView,
  SOURCE_CHARS,
  totalTokens
} from './panel_model';
import { formatCost, formatTokens } from './format';

export const RUNS_PANEL_ID = 'rlm-runs-panel';
export const SHOW_RUNS_COMMAND = 'rlm-kernel:show-runs-panel';
/** Rebuild at most this often while a run writes cells. */
const DEBOUNCE_MS = 150;
/** Entries shown under one node before "N more" (a 10,000-prompt batch). */
const MAX_CHILDREN = 200;
/** Batches with more prompts than this start collapsed. */
const OPEN_BATCH_LIMIT = 4;

const runsIcon = new LabIcon({
  name: 'rlm-kernel:runs',
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">' +
    '<g class="jp-icon3" fill="#616161">' +
    '<rect x="2" y="3" width="9" height="4" rx="1"/>' +
    '<rect x="7" y="10" width="9" height="4" rx="1"/>' +
    '<rect x="7" y="17" width="9" height="4" rx="1"/>' +
    '<rect x="4" y="7" width="1.6" height="13"/>' +
    '<rect x="4" y="11.2" width="3" height="1.6"/>' +
    '<rect x="4" y="18.2" width="3" height="1.6"/>' +
    '<rect x="18.5" y="13" width="2" height="8"/>' +
    '<rect x="21.3" y="9" width="2" height="12"/>' +
    '</g></svg>'
});

function formatSeconds(seconds: number): string {
  if (seconds < 60) {
    const digits = seconds < 1 ? 2 : seconds < 10 ? 1 : 0;
    return `${seconds.toFixed(digits)} s`;
  }
  const minutes = Math.floor(seconds / 60);
  return `${minutes}:${String(Math.round(seconds % 60)).padStart(2, '0')} min`;
}

function cellFacts(model: INotebookModel): ICellFacts[] {
  const facts: ICellFacts[] = [];
  for (let i = 0; i < model.cells.length; i++) {
    const cell = model.cells.get(i);
    // Only a code cell can be a `%%rlm` anchor; skip reading other sources.
    const source = cell.type === 'code' ? cell.sharedModel.getSource().slice(0, SOURCE_CHARS) : '';
    facts.push({
      id: cell.id,
      type: cell.type,
      source,
      rlm: asDict(cell.getMetadata('rlm'))
    });
  }
  return facts;
}

export class RunsPanel extends Widget {
  constructor(shell: JupyterFrontEnd.IShell) {
    super();
    this._shell = shell;
    this.id = RUNS_PANEL_ID;
    this.addClass('rlm-runs-panel');
    this.title.icon = runsIcon;
    this.title.caption = 'RLM runs';
    this.title.label = '';

    const header = document.createElement('header');
    header.className = 'rlm-runs-header';
    const heading = document.createElement('h2');
    heading.textContent = 'RLM runs';
    this._notebookName.className = 'rlm-runs-notebook';
    header.append(heading, this._notebookName);
    this._body.className = 'rlm-runs-body';
    this.node.append(header, this._body);
    this._body.addEventListener('click', this._onClick);
    this._body.addEventListener('keydown', this._onKeyDown);
  }

  /** The notebook shown (null for none). */
  get notebook(): NotebookPanel | null {
    return this._panel;
  }

  set notebook(panel: NotebookPanel | null) {
    if (panel === this._panel) {
      return;
    }
    this._unwatch();
    this._panel = panel;
    if (panel) {
      panel.content.modelChanged.connect(this._watchModel, this);
      panel.disposed.connect(this._onPanelDisposed, this);
      void panel.context.ready.then(() => this._schedule());
      this._watchModel();
    }
    this._schedule();
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._unwatch();
    window.clearTimeout(this._timer);
    super.dispose();
  }

  protected onAfterShow(_msg: Message): void {
    if (this._dirty) {
      this._schedule();
    }
  }

  private _onPanelDisposed(): void {
    this.notebook = null;
  }

  private _unwatch(): void {
    const panel = this._panel;
    if (panel) {
      panel.content.modelChanged.disconnect(this._watchModel, this);
      panel.disposed.disconnect(this._onPanelDisposed, this);
    }
    this._unwatchModel();
  }

  private _unwatchModel(): void {
    const model = this._model;
    if (model && !model.isDisposed) {
      model.cells.changed.disconnect(this._onCellsChanged, this);
      model.metadataChanged.disconnect(this._schedule, this);
    }
    for (const cell of this._watched) {
      if (!cell.isDisposed) {
        cell.metadataChanged.disconnect(this._schedule, this);
      }
    }
    this._watched.clear();
    this._model = null;
  }

  private _watchModel(): void {
    this._unwatchModel();
    const model = this._panel?.content.model ?? null;
    this._model = model;
    if (model) {
      model.cells.changed.connect(this._onCellsChanged, this);
      model.metadataChanged.connect(this._schedule, this);
      this._watchCells();
    }
    this._schedule();
  }

  private _onCellsChanged(): void {
    this._watchCells();
    this._schedule();
  }

  /** Listen to the metadata of cells not watched yet (a run's new cells). */
  private _watchCells(): void {
    const model = this._model;
    if (!model) {
      return;
    }
    const present = new Set<ICellModel>();
    for (let i = 0; i < model.cells.length; i++) {
      const cell = model.cells.get(i);
      present.add(cell);
      if (!this._watched.has(cell)) {
        this._watched.add(cell);
        cell.metadataChanged.connect(this._schedule, this);
      }
    }
    for (const cell of this._watched) {
      if (!present.has(cell)) {
        this._watched.delete(cell);
        if (!cell.isDisposed) {
          cell.metadataChanged.disconnect(this._schedule, this);
        }
      }
    }
  }

  private _schedule(): void {
    if (this._timer || this.isDisposed) {
      return;
    }
    this._timer = window.setTimeout(() => {
      this._timer = 0;
      if (this.isVisible) {
        this._render();
      } else {
        this._dirty = true;
      }
    }, DEBOUNCE_MS);
  }

  private _render(): void {
    this._dirty = false;
    const panel = this._panel;
    const model = this._model;
    this._notebookName.textContent = panel ? panel.context.localPath : '';
    this._notebookName.title = this._notebookName.textContent;
    const scrollTop = this._body.scrollTop;
    this._body.replaceChildren();
    if (!panel || !model) {
      this._body.appendChild(this._empty('Open a notebook to see its RLM runs.'));
      return;
    }
    this._runs = buildRuns(cellFacts(model), model.getMetadata('rlm'));
    this._nodes.clear();
    if (!this._runs.length) {
      this._body.appendChild(
        this._empty('No RLM runs in this notebook yet. They show here as a %%rlm cell writes them.')
      );
      return;
    }
    const tree = document.createElement('ul');
    tree.className = 'rlm-tree';
    tree.setAttribute('role', 'tree');
    tree.setAttribute('aria-label', 'RLM runs');
    for (const run of this._runs) {
      tree.appendChild(this._item(run.node, 0, run));
    }
    this._body.appendChild(tree);
    this._body.scrollTop = scrollTop;
  }

  private _empty(text: string): HTMLElement {
    const note = document.createElement('p');
    note.className = 'rlm-runs-empty';
    note.textContent = text;
    return note;
  }

  private _isOpen(node: ITrajectoryNode): boolean {
    const chosen = this._open.get(node.key);
    if (chosen !== undefined) {
      return chosen;
    }
    return !(node.kind === 'batch' && node.children.length > OPEN_BATCH_LIMIT);
  }

  private _item(node: ITrajectoryNode, level: number, run: IRunView | null): HTMLLIElement {
    this._nodes.set(node.key, node);
    const item = document.createElement('li');
    item.className = `rlm-tree-item rlm-node-${node.kind}`;
    item.setAttribute('role', 'treeitem');
    item.dataset.key = node.key;
    item.dataset.kind = node.kind;
    const open = this._isOpen(node);
    if (node.children.length) {
      item.setAttribute('aria-expanded', String(open));
    }

    const row = document.createElement('div');
    row.className = 'rlm-row';
    row.tabIndex = 0;
    row.style.paddingLeft = `${4 + level * 14}px`;
    if (node.key === this._selected) {
      row.classList.add('rlm-selected');
    }
    if (node.cellId) {
      row.dataset.cellId = node.cellId;
    }
    row.dataset.promptTokens = String(node.tally.promptTokens);
    row.dataset.completionTokens = String(node.tally.completionTokens);
    row.title = this._tooltip(node, run?.query ?? '');

    const line = document.createElement('div');
    line.className = 'rlm-row-main';
    const caret = document.createElement('span');
    caret.className = 'rlm-caret';
    if (node.children.length) {
      caret.textContent = open ? '▾' : '▸';
      caret.dataset.toggle = 'true';
    }
    const label = document.createElement('span');
    label.className = 'rlm-label';
    label.textContent = node.label;
    line.append(caret, label);
    if (node.status) {
      const status = document.createElement('span');
      status.className = 'rlm-status-tag';
      status.dataset.status = node.status;
      status.textContent = node.status;
      line.appendChild(status);
    }
    const tokens = totalTokens(node.tally);
    if (tokens || node.kind !== 'subcall' || node.status === 'done') {
      const count = document.createElement('span');
      count.className = 'rlm-tokens';
      count.textContent = formatTokens(tokens);
      line.appendChild(count);
    }
    row.appendChild(line);

    // The second line: model, cost and time, then what the entry is about.
    const detail = document.createElement('div');
    detail.className = 'rlm-row-detail';
    detail.style.paddingLeft = '18px';
    const parts: Array<[string, string]> = [
      ['rlm-model', node.model ?? ''],
      ['rlm-metrics', this._metrics(node)],
      ['rlm-detail-text', node.detail]
    ];
    for (const [className, text] of parts) {
      if (text) {
        const span = document.createElement('span');
        span.className = className;
        span.textContent = text;
        detail.appendChild(span);
      }
    }
    if (detail.childElementCount) {
      row.appendChild(detail);
    }
    if (run?.follows) {
      row.appendChild(this._followsLine(run.follows));
    }
    if (run?.query) {
      const query = document.createElement('div');
      query.className = 'rlm-run-query';
      query.style.paddingLeft = '18px';
      query.textContent = run.query;
      row.appendChild(query);
    }
    item.appendChild(row);

    if (run && run.points.length) {
      const chart = renderChart(run.points, point => {
        const step = run.node.children.find(s => s.key === `r:${run.runId}/s:${point.step}`);
        if (step) {
          void this._goTo(step);
        }
      });
      chart.style.marginLeft = `${18 + level * 14}px`;
      item.appendChild(chart);
    }

    if (node.children.length && open) {
      const group = document.createElement('ul');
      group.setAttribute('role', 'group');
      for (const child of node.children.slice(0, MAX_CHILDREN)) {
        group.appendChild(this._item(child, level + 1, null));
      }
      if (node.children.length > MAX_CHILDREN) {
        const more = document.createElement('li');
        more.className = 'rlm-more';
        more.style.paddingLeft = `${22 + (level + 1) * 14}px`;
        more.textContent = `… ${node.children.length - MAX_CHILDREN} more`;
        group.appendChild(more);
      }
      item.appendChild(group);
    }
    return item;
  }

  /** "follow-up of run X" under a run's row; a click goes to run X. */
  private _followsLine(earlier: string): HTMLElement {
    const line = document.createElement('div');
    line.className = 'rlm-run-follows';
    line.style.paddingLeft = '18px';
    line.dataset.follows = earlier;
    line.textContent = `follow-up of run ${earlier}`;
    const target = this._runs.find(r => r.runId === earlier);
    line.title = target
      ? `This run builds on run ${earlier}${target.query ? `: ${target.query}` : ''}. Click to go to it.`
      : `This run builds on run ${earlier} (not in this notebook).`;
    if (target) {
      line.addEventListener('click', event => {
        event.stopPropagation();
        void this._goTo(target.node);
      });
    }
    return line;
  }

  /** Cost (when known) and time of an entry. */
  private _metrics(node: ITrajectoryNode): string {
    const parts: string[] = [];
    if (node.tally.costUsd !== null) {
      parts.push(formatCost(node.tally.costPartial ? null : node.tally.costUsd, node.tally.costUsd ?? 0));
    }
    if (node.seconds !== null) {
      parts.push(formatSeconds(node.seconds));
    }
    return parts.join(' · ');
  }

  private _tooltip(node: ITrajectoryNode, query: string): string {
    const { promptTokens, completionTokens, costUsd, costPartial } = node.tally;
    const lines = [
      `${node.label}${node.model ? ` (${node.model})` : ''}`,
      ...(query ? [`Query: ${query}`] : []),
      `prompt ${formatTokens(promptTokens)} + completion ${formatTokens(completionTokens)}`,
      formatCost(costPartial ? null : costUsd, costUsd ?? 0)
    ];
    if (node.detail) {
      lines.push(node.detail);
    }
    if (node.cellId) {
      lines.push('Click to go to its cell.');
    }
    return lines.join('\n');
  }

  private _onClick = (event: MouseEvent): void => {
    const target = event.target as HTMLElement;
    const row = target.closest<HTMLElement>('.rlm-row');
    const key = row?.parentElement?.dataset.key;
    const node = key ? this._nodes.get(key) : undefined;
    if (!row || !node) {
      return;
    }
    if (target.dataset.toggle) {
      this._toggle(node);
      return;
    }
    void this._goTo(node);
  };

  private _onKeyDown = (event: KeyboardEvent): void => {
    const row = (event.target as HTMLElement).closest<HTMLElement>('.rlm-row');
    const key = row?.parentElement?.dataset.key;
    const node = key ? this._nodes.get(key) : undefined;
    if (!node) {
      return;
    }
    if (event.key === 'Enter') {
      void this._goTo(node);
    } else if ((event.key === 'ArrowRight' || event.key === 'ArrowLeft') && node.children.length) {
      const open = this._isOpen(node);
      if (open === (event.key === 'ArrowLeft')) {
        this._toggle(node);
      }
    } else {
      return;
    }
    event.preventDefault();
  };

  private _toggle(node: ITrajectoryNode): void {
    this._open.set(node.key, !this._isOpen(node));
    this._render();
    this._focusRow(node.key);
  }

  private _focusRow(key: string): void {
    const selector = `.rlm-tree-item[data-key="${CSS.escape(key)}"] > .rlm-row`;
    this._body.querySelector<HTMLElement>(selector)?.focus();
  }

  /** Scroll the notebook to the node's cell and make it the active cell. */
  private async _goTo(node: ITrajectoryNode): Promise<void> {
    const panel = this._panel;
    const model = this._model;
    this._selected = node.key;
    this._render();
    if (!panel || !model || !node.cellId) {
      return;
    }
    let index = -1;
    for (let i = 0; i < model.cells.length; i++) {
      if (model.cells.get(i).id === node.cellId) {
        index = i;
        break;
      }
    }
    if (index < 0) {
      return;
    }
    const notebook = panel.content;
    this._shell.activateById(panel.id);
    notebook.mode = 'command';
    notebook.activeCellIndex = index;
    notebook.deselectAll();
    try {
      await notebook.scrollToItem(index, 'start');
    } catch {
      // The notebook was closed or changed while scrolling; nothing to do.
    }
  }

  private readonly _shell: JupyterFrontEnd.IShell;
  private readonly _body = document.createElement('div');
  private readonly _notebookName = document.createElement('span');
  private readonly _watched = new Set<ICellModel>();
  private readonly _open = new Map<string, boolean>();
  private readonly _nodes = new Map<string, ITrajectoryNode>();
  private _panel: NotebookPanel | null = null;
  private _model: INotebookModel | null = null;
  private _runs: IRunView[] = [];
  private _selected: string | null = null;
  private _timer = 0;
  private _dirty = true;
}

function activate(
  app: JupyterFrontEnd,
  tracker: INotebookTracker,
  palette: ICommandPalette | null,
  restorer: ILayoutRestorer | null
): void {
  const panel = new RunsPanel(app.shell);
  const follow = () => {
    panel.notebook = tracker.currentWidget;
  };
  tracker.currentChanged.connect(follow);
  follow();

  try {
    app.shell.add(panel, 'right', { rank: 700 });
  } catch (error) {
    // A shell without side areas (some Notebook 7 pages): the command still
    // exists but has nothing to show.
    console.warn('rlm-kernel: no side area for the runs panel', error);
  }
  restorer?.add(panel, RUNS_PANEL_ID);

  app.commands.addCommand(SHOW_RUNS_COMMAND, {
    label: 'RLM: Show runs panel',
    caption: "Show the current notebook's RLM runs: steps, sub-calls and child runs",
    execute: () => {
      if (panel.isAttached) {
        app.shell.activateById(panel.id);
      }
    }
  });
  palette?.addItem({ command: SHOW_RUNS_COMMAND, category: 'RLM' });
}

export const runsPanelPlugin: JupyterFrontEndPlugin<void> = {
  id: 'rlm-kernel:runs-panel',
  description: "A side panel with the current notebook's RLM runs as a tree and a chart.",
  autoStart: true,
  requires: [INotebookTracker],
  optional: [ICommandPalette, ILayoutRestorer],
  activate
};
