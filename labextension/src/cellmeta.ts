/**
 * What a cell's `metadata.rlm` says: its role, its run, which run a cell
 * belongs to. Pure functions over plain nbformat-like cell records, so the
 * take-over side, the badge and the runs panel read cells one way, and tests
 * need no JupyterLab; `cellRecord` adapts a cell model.
 */
import type { ICellModel } from '@jupyterlab/cells';

import { asDict, type Dict } from './json';
import { AGENT_ROLES } from './protocol';

/** The parts of a cell these helpers read (an nbformat cell has them). */
export interface ICellRecord {
  readonly cell_type: string;
  readonly source: string | readonly string[];
  readonly metadata?: Readonly<Dict> | null;
}

/** A cell's `metadata.rlm`, or `{}` when it has none. */
export function rlmMeta(cell: ICellRecord): Dict {
  return asDict(cell.metadata?.rlm) ?? {};
}

export function sourceText(cell: ICellRecord): string {
  return typeof cell.source === 'string' ? cell.source : cell.source.join('');
}

/**
 * The sentence saying that a code cell the root model wrote did not run, and
 * why (`metadata.rlm.skipped`): the same as its note output and as what the
 * root model was told. Null for a cell that ran.
 */
export function notRunSentence(meta: {
  readonly status?: unknown;
  readonly skipped?: unknown;
}): string | null {
  if (meta.status !== 'skipped') {
    return null;
  }
  const why = meta.skipped;
  return typeof why === 'string' && why
    ? `This code block was not run: ${why}.`
    : 'This code block was not run.';
}

/** A cell of an old continuation, kept below the new steps as history. */
export function isSuperseded(cell: ICellRecord): boolean {
  return rlmMeta(cell).superseded === true;
}

/** The one-line note for superseded cells a run command left alone. */
export function skippedNote(count: number): string {
  const cells = count === 1 ? 'a superseded cell' : `${count} superseded cells`;
  const their = count === 1 ? 'its' : 'their';
  return (
    `Skipped ${cells}: history of an earlier continuation, ${their} recorded ` +
    `outputs kept. To run ${count === 1 ? 'its' : 'that'} code again, copy it into a new cell.`
  );
}

/** A `%%rlm` cell: marked as a run's query, or a code cell with the magic. */
export function isQueryCell(cell: ICellRecord): boolean {
  return (
    rlmMeta(cell).role === 'query' ||
    (cell.cell_type === 'code' && sourceText(cell).startsWith('%%rlm'))
  );
}

/** The run of a cell the root model wrote, else null. */
export function agentRunId(cell: ICellRecord): string | null {
  const meta = rlmMeta(cell);
  return AGENT_ROLES.has(String(meta.role)) &&
    typeof meta.run_id === 'string' &&
    meta.run_id
    ? meta.run_id
    : null;
}

/**
 * The run the cell at `index` belongs to, as the kernel finds it (`run_at`
 * in engine/runs/history.py): its own run id, else that of the nearest agent cell
 * above it below its `%%rlm` cell; on the `%%rlm` cell itself, or with no
 * agent cell in between, the run it recorded, else the run of the first
 * agent cell below it (the newest one: a run's cells go right below its
 * query).
 */
export function runIdAt(
  cells: readonly ICellRecord[],
  index: number
): string | null {
  const at = Math.min(index, cells.length - 1);
  let query = -1;
  for (let i = at; i >= 0; i--) {
    if (isQueryCell(cells[i])) {
      query = i;
      break;
    }
  }
  if (query < 0) {
    return null;
  }
  for (let i = at; i > query; i--) {
    const runId = agentRunId(cells[i]);
    if (runId) {
      return runId;
    }
  }
  const recorded = rlmMeta(cells[query]).run_id;
  if (typeof recorded === 'string' && recorded) {
    return recorded;
  }
  for (let j = query + 1; j < cells.length; j++) {
    const runId = agentRunId(cells[j]);
    if (runId) {
      return runId;
    }
    if (isQueryCell(cells[j])) {
      break;
    }
  }
  return null;
}

/**
 * How many agent cells of `runId` after `index` are still current (not
 * superseded): the old continuation "continue from here" replaces.
 */
export function currentCellsAfter(
  cells: readonly ICellRecord[],
  index: number,
  runId: string | null
): number {
  let count = 0;
  for (let i = index + 1; i < cells.length; i++) {
    const meta = rlmMeta(cells[i]);
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
 * A cell model seen as a record. Reads are lazy: a helper that only needs
 * the metadata never copies the source.
 */
export function cellRecord(model: ICellModel): ICellRecord {
  return {
    cell_type: model.type,
    get source() {
      return model.sharedModel.getSource();
    },
    get metadata() {
      return { rlm: model.getMetadata('rlm') };
    }
  };
}

/** The cells of a notebook model as records, in order. */
export function cellRecords(cells: {
  readonly length: number;
  get(index: number): ICellModel;
}): ICellRecord[] {
  const records: ICellRecord[] = [];
  for (let i = 0; i < cells.length; i++) {
    records.push(cellRecord(cells.get(i)));
  }
  return records;
}
