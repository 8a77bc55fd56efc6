/**
 * The agent marker: cells whose `metadata.rlm.role` says the root model wrote
 * them get the class `rlm-agent-cell` and a small "RLM" badge; the answer cell
 * gets `rlm-answer-cell` as well. Driven by metadata alone, so it also marks
 * the cells of a saved notebook when it is reopened.
 */
import type { Cell, ICellModel } from '@jupyterlab/cells';
import type { INotebookModel, NotebookPanel } from '@jupyterlab/notebook';

import { AGENT_ROLES } from './protocol';

export const AGENT_CELL_CLASS = 'rlm-agent-cell';
export const ANSWER_CELL_CLASS = 'rlm-answer-cell';
const BADGE_CLASS = 'rlm-badge';

interface IRlmMetadata {
  role?: unknown;
  run_id?: unknown;
  step?: unknown;
}

function rlmMetadata(model: ICellModel): IRlmMetadata {
  const value = model.getMetadata('rlm');
  return typeof value === 'object' && value !== null ? (value as IRlmMetadata) : {};
}

/** Keep the marker of every cell in `panel` in step with its metadata. */
export function markAgentCells(panel: NotebookPanel): void {
  const notebook = panel.content;
  const watched = new WeakSet<ICellModel>();
  let scheduled = false;

  const refresh = () => {
    scheduled = false;
    if (panel.isDisposed) {
      return;
    }
    for (const cell of notebook.widgets) {
      if (!watched.has(cell.model)) {
        watched.add(cell.model);
        cell.model.metadataChanged.connect(schedule);
      }
      decorate(cell);
    }
  };
  // Cell widgets are created by the notebook's own handler of the same
  // signals, so decorate on the next frame, once they exist.
  const schedule = () => {
    if (!scheduled) {
      scheduled = true;
      requestAnimationFrame(refresh);
    }
  };

  let model: INotebookModel | null = null;
  const follow = () => {
    model?.cells.changed.disconnect(schedule);
    model = notebook.model;
    model?.cells.changed.connect(schedule);
    schedule();
  };
  notebook.modelChanged.connect(follow);
  void panel.context.ready.then(schedule);
  follow();
}

function decorate(cell: Cell): void {
  const meta = rlmMetadata(cell.model);
  const role = typeof meta.role === 'string' ? meta.role : '';
  const isAgent = AGENT_ROLES.has(role);
  cell.toggleClass(AGENT_CELL_CLASS, isAgent);
  cell.toggleClass(ANSWER_CELL_CLASS, role === 'answer');

  let badge = cell.node.querySelector<HTMLElement>(`:scope > .${BADGE_CLASS}`);
  if (!isAgent) {
    badge?.remove();
    return;
  }
  if (!badge) {
    badge = document.createElement('div');
    badge.className = BADGE_CLASS;
    cell.node.appendChild(badge);
  }
  badge.textContent = role === 'answer' ? 'RLM answer' : 'RLM';
  badge.dataset.role = role;
  const details = [`role ${role}`];
  if (meta.step !== undefined) {
    details.push(`step ${String(meta.step)}`);
  }
  if (typeof meta.run_id === 'string') {
    details.push(`run ${meta.run_id}`);
  }
  badge.title = `Written by the RLM root model (${details.join(', ')})`;
}
