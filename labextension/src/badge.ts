/**
 * The agent marker: cells whose `metadata.rlm.role` says the root model wrote
 * them get the class `rlm-agent-cell` and a small "RLM" badge; the answer cell
 * gets `rlm-answer-cell` as well, and the closing cell of a run that ended
 * without an answer `rlm-ended-cell` instead. Driven by metadata alone, so it also marks
 * the cells of a saved notebook when it is reopened.
 */
import type { Cell, ICellModel } from '@jupyterlab/cells';
import type { INotebookModel, NotebookPanel } from '@jupyterlab/notebook';

import { cellRecord, notRunSentence, rlmMeta } from './cellmeta';
import { AGENT_ROLES } from './protocol';

export const AGENT_CELL_CLASS = 'rlm-agent-cell';
export const ANSWER_CELL_CLASS = 'rlm-answer-cell';
export const ENDED_CELL_CLASS = 'rlm-ended-cell';
const BADGE_CLASS = 'rlm-badge';

interface IRlmMetadata {
  role?: unknown;
  reason?: unknown;
  run_id?: unknown;
  step?: unknown;
  superseded?: unknown;
  subcalls?: unknown;
  status?: unknown;
  skipped?: unknown;
}

/** A person pinned an edited sub-call response in this cell. */
function hasPin(meta: IRlmMetadata): boolean {
  return (
    Array.isArray(meta.subcalls) &&
    meta.subcalls.some(
      r => typeof r === 'object' && r !== null && (r as { pinned?: unknown }).pinned === true
    )
  );
}

function rlmMetadata(model: ICellModel): IRlmMetadata {
  return rlmMeta(cellRecord(model));
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

/**
 * What each cell was last decorated for. Every refresh visits every cell;
 * rewriting an unchanged badge would dirty the style and layout of all agent
 * cells on each frame of a live run.
 */
const decorated = new WeakMap<Cell, string>();

function decorate(cell: Cell): void {
  const meta = rlmMetadata(cell.model);
  const key = JSON.stringify([
    meta.role,
    meta.reason,
    meta.step,
    meta.run_id,
    meta.superseded,
    hasPin(meta),
    notRunSentence(meta)
  ]);
  if (decorated.get(cell) === key) {
    return;
  }
  decorated.set(cell, key);
  const role = typeof meta.role === 'string' ? meta.role : '';
  const isAgent = AGENT_ROLES.has(role);
  cell.toggleClass(AGENT_CELL_CLASS, isAgent);
  // The closing cell of a run that ended without an answer is not styled as
  // an answer: it says how the run ended.
  const ended = role === 'answer' && meta.reason !== undefined && meta.reason !== 'final';
  cell.toggleClass(ANSWER_CELL_CLASS, role === 'answer' && !ended);
  cell.toggleClass(ENDED_CELL_CLASS, ended);
  cell.toggleClass('rlm-superseded-cell', meta.superseded === true);
  cell.toggleClass('rlm-pinned-cell', hasPin(meta));

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
  // Each state on a line of its own, so the badge stays inside the column.
  const notRun = notRunSentence(meta);
  const states = [
    ...(meta.superseded === true ? ['superseded'] : []),
    ...(hasPin(meta) ? ['pinned'] : []),
    ...(notRun !== null ? ['not run'] : [])
  ];
  badge.textContent = ended ? 'RLM ended' : role === 'answer' ? 'RLM answer' : 'RLM';
  for (const state of states) {
    const line = document.createElement('span');
    line.className = 'rlm-badge-state';
    line.textContent = state;
    badge.appendChild(line);
  }
  badge.classList.toggle('rlm-badge-with-state', states.length > 0);
  badge.dataset.role = role;
  const details = [`role ${role}`];
  if (meta.step !== undefined) {
    details.push(`step ${String(meta.step)}`);
  }
  if (typeof meta.run_id === 'string') {
    details.push(`run ${meta.run_id}`);
  }
  if (hasPin(meta)) {
    details.push('a sub-call response edited and pinned by a person');
  }
  if (meta.superseded === true) {
    details.push('superseded by a later continuation');
  }
  badge.title = `Written by the RLM root model (${details.join(', ')})`;
  if (notRun !== null) {
    badge.title += `\n${notRun}`;
  }
}
