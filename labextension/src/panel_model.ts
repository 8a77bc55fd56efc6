/**
 * The runs panel's model: a tree of runs, steps, sub-calls and child runs,
 * built from the cells' `metadata.rlm` alone (pure functions, no widgets).
 *
 * The cells are the source of truth in a live notebook; the notebook's
 * `metadata.rlm.runs` records (written by headless runs) only add what cells
 * cannot say, such as the query and the run's wall time.
 */
import { asDict, asNumber, asString, type Dict } from './json';
import { AGENT_ROLES } from './protocol';

/** The one cell fact the tree is built from. */
export interface ICellFacts {
  id: string;
  type: string;
  /** The start of the cell's source (to recognise a `%%rlm` cell and its query). */
  source: string;
  rlm: Record<string, unknown> | null;
}

/** Tokens and cost of a set of model calls. */
export interface ITally {
  promptTokens: number;
  completionTokens: number;
  /** Sum of the known costs; null when no call had a known cost. */
  costUsd: number | null;
  /** True when some call's cost is unknown (so `costUsd` is a lower bound). */
  costPartial: boolean;
}

export type NodeKind = 'run' | 'step' | 'batch' | 'subcall';

export interface ITrajectoryNode {
  /** Stable across rebuilds, so expansion and selection survive live updates. */
  key: string;
  kind: NodeKind;
  label: string;
  model: string | null;
  status: string | null;
  /** A short description: a prompt preview, a child run's summary. */
  detail: string;
  tally: ITally;
  seconds: number | null;
  /** The notebook cell a click goes to (null when none is known). */
  cellId: string | null;
  children: ITrajectoryNode[];
}

/** One bar of a run's chart. */
export interface IStepPoint {
  step: number;
  rootTokens: number;
  subcallTokens: number;
  costUsd: number | null;
  cellId: string | null;
}

export interface IRunView {
  node: ITrajectoryNode;
  runId: string;
  query: string;
  points: IStepPoint[];
  /** The earlier run this one is a follow-up of (`metadata.rlm.follows`), or null. */
  follows: string | null;
}

/** How much of a cell's source the panel reads. */
export const SOURCE_CHARS = 400;

export function emptyTally(): ITally {
  return { promptTokens: 0, completionTokens: 0, costUsd: null, costPartial: false };
}

export function totalTokens(tally: ITally): number {
  return tally.promptTokens + tally.completionTokens;
}

/** Add `more` into `into` (in place) and return `into`. */
export function addTally(into: ITally, more: ITally): ITally {
  into.promptTokens += more.promptTokens;
  into.completionTokens += more.completionTokens;
  if (more.costUsd !== null) {
    into.costUsd = (into.costUsd ?? 0) + more.costUsd;
  }
  into.costPartial = into.costPartial || more.costPartial;
  return into;
}

/** The tally of one model call; a call without tokens has no cost to miss. */
function callTally(prompt: unknown, completion: unknown, cost: unknown): ITally {
  const promptTokens = asNumber(prompt) ?? 0;
  const completionTokens = asNumber(completion) ?? 0;
  const costUsd = asNumber(cost);
  return {
    promptTokens,
    completionTokens,
    costUsd,
    costPartial: costUsd === null && promptTokens + completionTokens > 0
  };
}

/**
 * The facts of a cell in nbformat JSON: a cell of a child run's record (the
 * same shape as a notebook cell), or of a saved notebook.
 */
export function cellFactsOf(cell: unknown): ICellFacts | null {
  const dict = asDict(cell);
  if (!dict) {
    return null;
  }
  const source = dict.source;
  const text = Array.isArray(source) ? source.join('') : asString(source) ?? '';
  return {
    id: asString(dict.id) ?? '',
    type: asString(dict.cell_type) ?? 'code',
    source: text.slice(0, SOURCE_CHARS),
    rlm: asDict(asDict(dict.metadata)?.rlm)
  };
}

interface IStepBuild {
  node: ITrajectoryNode;
  point: IStepPoint;
  pending: boolean;
}

/**
 * Build the steps of one run from its cells. `clickCell` overrides where a
 * click goes (a child run's cells are not notebook cells: its entries lead
 * to the parent's code cell that started it).
 */
function buildSteps(
  runId: string,
  cells: ICellFacts[],
  clickCell: string | null
): { steps: ITrajectoryNode[]; points: IStepPoint[]; reason: string | null } {
  const byStep = new Map<number, IStepBuild>();
  let reason: string | null = null;
  for (const cell of cells) {
    const meta = cell.rlm;
    const role = asString(meta?.role) ?? '';
    if (!meta || !AGENT_ROLES.has(role)) {
      continue;
    }
    if (role === 'answer') {
      reason = asString(meta.reason) ?? reason;
    }
    const step = asNumber(meta.step) ?? 0;
    const target = clickCell ?? cell.id;
    let build = byStep.get(step);
    if (!build) {
      build = {
        node: {
          key: `r:${runId}/s:${step}`,
          kind: 'step',
          label: `Step ${step}`,
          model: null,
          status: null,
          detail: '',
          tally: emptyTally(),
          seconds: null,
          cellId: target,
          children: []
        },
        point: { step, rootTokens: 0, subcallTokens: 0, costUsd: null, cellId: target },
        pending: false
      };
      byStep.set(step, build);
    }
    const { node, point } = build;
    const compaction = asDict(meta.compaction);
    if (compaction) {
      // The root model's history was compacted before this step: its
      // summarising call is part of the step's cost.
      const usage = asDict(compaction.usage) ?? {};
      const tally = callTally(usage.prompt_tokens, usage.completion_tokens, usage.cost_usd);
      addTally(node.tally, tally);
      point.rootTokens += totalTokens(tally);
      const steps = Array.isArray(compaction.steps) ? compaction.steps : [];
      const [first, last] = [asNumber(steps[0]), asNumber(steps[1])];
      node.label = `Step ${step} · compacted`;
      node.detail =
        first !== null && last !== null
          ? `history compacted (${first === last ? `step ${first}` : `steps ${first}-${last}`} summarised)`
          : 'history compacted';
      continue;
    }
    const root = asDict(meta.root_call);
    if (root) {
      const tally = callTally(root.prompt_tokens, root.completion_tokens, root.cost_usd);
      addTally(node.tally, tally);
      point.rootTokens += totalTokens(tally);
      node.model = asString(root.model) ?? node.model;
      node.seconds = (node.seconds ?? 0) + (asNumber(root.latency_s) ?? 0);
    }
    if (role === 'code') {
      const status = asString(meta.status);
      if (status === null) {
        build.pending = true;
      } else if (status !== 'ok' && status !== 'skipped') {
        node.status = node.status ?? status;
      }
      const duration = asNumber(meta.duration_s);
      if (duration !== null) {
        node.seconds = (node.seconds ?? 0) + duration;
      }
      const subcalls = Array.isArray(meta.subcalls) ? meta.subcalls : [];
      for (const entry of subcallNodes(subcalls, target)) {
        node.children.push(entry);
        addTally(node.tally, entry.tally);
        point.subcallTokens += totalTokens(entry.tally);
      }
    }
    if (role === 'answer') {
      const ending = reason === 'final' ? 'answer' : `ended: ${reason ?? '?'}`;
      node.detail = node.detail ? `${node.detail} · ${ending}` : ending;
    }
  }
  const builds = [...byStep.values()].sort((a, b) => a.point.step - b.point.step);
  for (const build of builds) {
    build.point.costUsd = build.node.tally.costUsd;
    build.node.status = build.node.status ?? (build.pending ? 'running' : 'ok');
  }
  return {
    steps: builds.map(b => b.node),
    points: builds.map(b => b.point),
    reason
  };
}

/** Sub-call entries of one code cell; the members of a batch are grouped. */
function subcallNodes(records: unknown[], cellId: string | null): ITrajectoryNode[] {
  const out: ITrajectoryNode[] = [];
  const batches = new Map<string, ITrajectoryNode>();
  for (const raw of records) {
    const record = asDict(raw);
    if (!record) {
      continue;
    }
    const node = subcallNode(record, cellId);
    const batch = asString(record.batch);
    if (!batch) {
      out.push(node);
      continue;
    }
    let group = batches.get(batch);
    if (!group) {
      group = {
        key: `b:${cellId ?? ''}:${node.key}`,
        kind: 'batch',
        label: `${asString(record.kind) === 'rlm' ? 'rlm' : 'llm'}_query_batched`,
        model: node.model,
        status: null,
        detail: '',
        tally: emptyTally(),
        seconds: null,
        cellId,
        children: []
      };
      batches.set(batch, group);
      out.push(group);
    }
    group.children.push(node);
    addTally(group.tally, node.tally);
    if (node.seconds !== null) {
      // Members run concurrently: the batch takes about as long as its slowest.
      group.seconds = Math.max(group.seconds ?? 0, node.seconds);
    }
    if (group.model !== node.model) {
      group.model = group.model === null ? node.model : 'several models';
    }
  }
  for (const group of batches.values()) {
    const count = group.children.length;
    const done = group.children.filter(c => c.status === 'done').length;
    const failed = group.children.filter(c => c.status === 'error').length;
    group.status = failed ? 'error' : done === count ? 'done' : 'running';
    group.detail =
      `${count} prompt${count === 1 ? '' : 's'}, ${done} done` +
      (failed ? `, ${failed} failed` : '');
  }
  return out;
}

function subcallNode(record: Dict, cellId: string | null): ITrajectoryNode {
  const kind = asString(record.kind) === 'rlm' ? 'rlm' : 'llm';
  const usage = asDict(record.usage) ?? {};
  const id = asString(record.id) ?? '';
  const node: ITrajectoryNode = {
    key: `sc:${id}`,
    kind: 'subcall',
    label: `${kind}_query`,
    model: asString(record.model),
    status: asString(record.status),
    detail: [
      record.pinned ? 'pinned' : record.replayed ? 'replayed' : null,
      asString(record.error) ?? asString(record.prompt_preview)
    ]
      .filter(Boolean)
      .join(' · '),
    tally: callTally(usage.prompt_tokens, usage.completion_tokens, record.cost_usd),
    seconds: asNumber(record.latency_s),
    cellId,
    children: []
  };
  const child = asDict(record.child);
  if (child) {
    const run = childRun(child, cellId);
    node.children = run.steps;
    // A child run's own cells say what it spent; the sub-call record's usage
    // is read off the tree-wide ledger and may include other calls.
    node.tally = run.tally;
    node.detail = run.summary + (node.detail ? ` · ${node.detail}` : '');
  }
  return node;
}

function childRun(
  child: Dict,
  cellId: string | null
): { steps: ITrajectoryNode[]; tally: ITally; summary: string } {
  const runId = asString(child.run_id) ?? 'child';
  const cells = (Array.isArray(child.cells) ? child.cells : [])
    .map(cellFactsOf)
    .filter((c): c is ICellFacts => c !== null);
  const { steps, reason } = buildSteps(runId, cells, cellId);
  const tally = steps.reduce((sum, s) => addTally(sum, s.tally), emptyTally());
  const depth = asNumber(child.depth);
  const ended = asString(child.reason) ?? reason;
  const summary = [
    `child run ${runId}`,
    depth !== null ? `depth ${depth}` : null,
    `${steps.length} step${steps.length === 1 ? '' : 's'}`,
    ended ? (ended === 'final' ? 'answered' : `ended: ${ended}`) : 'running'
  ]
    .filter(Boolean)
    .join(', ');
  return { steps, tally, summary };
}

/**
 * The runs of a notebook, in the order their first cells appear.
 *
 * A run's entry leads to the `%%rlm` cell right above its first cell when
 * there is one (the live notebook hides the query cell), else to the query
 * cell or the first cell.
 */
export function buildRuns(cells: ICellFacts[], notebookRlm: unknown = null): IRunView[] {
  const records = new Map<string, Dict>();
  const runs = asDict(notebookRlm)?.runs;
  for (const record of Array.isArray(runs) ? runs : []) {
    const dict = asDict(record);
    const id = asString(dict?.run_id);
    if (dict && id) {
      records.set(id, dict);
    }
  }

  const groups = new Map<
    string,
    { cells: ICellFacts[]; target: string; query: string; follows: string | null }
  >();
  cells.forEach((cell, index) => {
    const runId = asString(cell.rlm?.run_id);
    const role = asString(cell.rlm?.role);
    if (!runId || role === 'human') {
      return;
    }
    let group = groups.get(runId);
    if (!group) {
      const before = index > 0 ? cells[index - 1] : null;
      const anchor =
        before && before.type === 'code' && before.source.startsWith('%%rlm')
          ? before
          : null;
      group = {
        cells: [],
        target: anchor?.id ?? cell.id,
        query: anchor ? queryOf(anchor.source) : '',
        follows: null
      };
      groups.set(runId, group);
    }
    if (role === 'query' && !group.query) {
      group.query = queryOf(cell.source);
    }
    group.follows = group.follows ?? asString(cell.rlm?.follows);
    group.cells.push(cell);
  });

  const views: IRunView[] = [];
  for (const [runId, group] of groups) {
    const record = records.get(runId) ?? {};
    const { steps, points, reason } = buildSteps(runId, group.cells, null);
    const tally = steps.reduce((sum, s) => addTally(sum, s.tally), emptyTally());
    const ended = reason ?? asString(record.reason);
    const status = ended === null || ended === 'running' ? 'running' : ended;
    let seconds = asNumber(record.elapsed_s);
    if (seconds === null && steps.some(s => s.seconds !== null)) {
      seconds = steps.reduce((sum, s) => sum + (s.seconds ?? 0), 0);
    }
    const model = asString(record.model) ?? steps.find(s => s.model)?.model ?? null;
    const subcalls = steps.reduce((n, s) => n + countSubcalls(s), 0);
    views.push({
      runId,
      query: asString(record.query) ?? group.query,
      points,
      follows: group.follows ?? asString(record.follows),
      node: {
        key: `r:${runId}`,
        kind: 'run',
        label: `Run ${runId}`,
        model,
        status,
        detail:
          `${steps.length} step${steps.length === 1 ? '' : 's'}, ` +
          `${subcalls} sub-call${subcalls === 1 ? '' : 's'}`,
        tally,
        seconds,
        cellId: group.target,
        children: steps
      }
    });
  }
  return views;
}

/** The query of a `%%rlm` cell: the lines after the magic's line. */
function queryOf(source: string): string {
  const body = source.startsWith('%%rlm') ? source.split('\n').slice(1).join('\n') : source;
  return body.trim();
}

/** Sub-calls under `node`, those of child runs included (as the status bar counts). */
function countSubcalls(node: ITrajectoryNode): number {
  let count = 0;
  for (const child of node.children) {
    if (child.kind === 'subcall') {
      count += 1;
    }
    count += countSubcalls(child);
  }
  return count;
}
