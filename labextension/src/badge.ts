/**
 * The agent marker: cells whose `metadata.rlm.role` says the root model wrote
 * them get the class `rlm-agent-cell` and a small "RLM" badge; the answer cell
 * gets `rlm-answer-cell` as well, and the closing cell of a run that ended
 * without an answer `rlm-ended-cell` instead; a cell that says the root model's
 * history was compacted (`metadata.rlm.compaction`) gets `rlm-compaction-cell`
 * and the state "compacted". Driven by metadata alone, so it also marks
 * the cells of a saved notebook when it is reopened.
 */
import type { Cell, ICellModel } from '@jupyterlab/cells';
import type { INotebookModel, NotebookPanel } from '@jupyterlab/notebook';

import { cellRecord, notRunSentence, rlmMeta } from './cellmeta';
import { AGENT_ROLES } from './protocol';

export const AGENT_CELL_CLASS = 'rlm-agent-cell';
export const ANSWER_CELL_CLASS = 'rlm-answer-cell';
export const ENDED_CELL_CLASS = 'rlm-ended-cell';
export const COMPACTION_CELL_CLASS = 'rlm-compaction-cell';
const BADGE_CLASS = 'rlm-badge';

interface IRlmMetadata {
  role?: unknown;
  reason?: unknown;
  run_id?: unknown;
  step?: unknown;
  superseded?: unknown;
  subcalls?: unknown;
  draft?: unknown;
  compaction?: unknown;
  status?: unknown;
  skipped?: unknown;
}

/** The steps a compaction cell summarised (`[first, last]`), else null. */
export function compactedSteps(meta: { compaction?: unknown }): [number, number] | null {
  const facts = meta.compaction;
  if (typeof facts !== 'object' || facts === null) {
    return null;
  }
  const steps = (facts as { steps?: unknown }).steps;
  return Array.isArray(steps) &&
    steps.length === 2 &&
    typeof steps[0] === 'number' &&
    typeof steps[1] === 'number'
    ? [steps[0], steps[1]]
    : null;
}

/** The model that wrote a compaction's summary. */
function summariser(meta: { compaction?: unknown }): string {
  const by = (meta.compaction as { by?: unknown } | undefined)?.by;
  return typeof by === 'string' ? by : 'a model';
}

/** `steps 1-5`, `step 3`. */
export function stepsText([first, last]: [number, number]): string {
  return first === last ? `step ${first}` : `steps ${first}-${last}`;
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
    meta.draft,
    compactedSteps(meta),
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
  // A cell of a streaming reply that the model is still writing.
  cell.toggleClass('rlm-draft-cell', meta.draft === true);
  const compacted = compactedSteps(meta);
  cell.toggleClass(COMPACTION_CELL_CLASS, compacted !== null);

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
    ...(meta.draft === true ? ['writing'] : []),
    ...(compacted ? ['compacted'] : []),
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
  if (meta.draft === true) {
    details.push('the model is still writing it');
  }
  if (compacted) {
    details.push(
      `the history was compacted here: ${stepsText(compacted)} summarised, the summary below ` +
        'is what the root model reads instead of them'
    );
  }
  badge.title = compacted
    ? `Written by the RLM run, the summary by ${summariser(meta)} (${details.join(', ')})`
    : `Written by the RLM root model (${details.join(', ')})`;
  if (notRun !== null) {
    badge.title += `\n${notRun}`;
  }
}
