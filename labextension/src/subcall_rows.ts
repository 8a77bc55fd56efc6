/**
 * The rows of a batch of sub-calls, as the kernel sends them
 * (rlm_kernel/widgets/rows.py), and the pure parts of the list that shows
 * them: filtering by status and text, counting, the window of rows in view.
 */
import { formatCost, formatTokens } from './format';

/** A folded stretch of a prompt: what kind of text, how many characters. */
export type Fold = [kind: 'head' | 'tail' | 'own' | 'middle', chars: number];

export interface IRow {
  /** status as shown: queued, running, done, error, cancelled */
  s: string;
  /** tags: pinned, prompt-edited, replayed */
  g: string[];
  /** one-line preview of the call's own part of the prompt */
  p: string;
  /** the prompt's length */
  n: number;
  /** the prompt folded: shown text and folds, in order */
  v: (string | Fold)[];
  /** the response (or "ERROR: ..."), clipped */
  r: string;
  /** the response's full length */
  rn: number;
  /** prompt and completion tokens */
  k: [number, number];
  /** latency in seconds */
  l: number | null;
  /** cost in dollars, null when unknown */
  c: number | null;
  /** the hashes of the images sent with the prompt (the widget's thumbs has them) */
  i: string[];
}

export const STATUSES = ['queued', 'running', 'done', 'error', 'cancelled'];

/** A row the kernel has not described (never happens in a sane state). */
export const EMPTY_ROW: IRow = {
  s: 'queued',
  g: [],
  p: '',
  n: 0,
  v: [],
  r: '',
  rn: 0,
  k: [0, 0],
  l: null,
  c: null,
  i: []
};

export function asRow(value: unknown): IRow {
  if (!value || typeof value !== 'object') {
    return EMPTY_ROW;
  }
  return { ...EMPTY_ROW, ...(value as Partial<IRow>) };
}

/**
 * Apply a `rows` message: `[[index, row], ...]`. Returns the indices it
 * changed (out-of-range ones are ignored).
 */
export function applyRows(rows: IRow[], updates: unknown): number[] {
  const changed: number[] = [];
  if (!Array.isArray(updates)) {
    return changed;
  }
  for (const update of updates) {
    if (!Array.isArray(update) || typeof update[0] !== 'number') {
      continue;
    }
    const index = update[0];
    if (index >= 0 && index < rows.length) {
      rows[index] = asRow(update[1]);
      changed.push(index);
    }
  }
  return changed;
}

export function countStatuses(rows: IRow[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const status of STATUSES) {
    counts[status] = 0;
  }
  for (const row of rows) {
    counts[row.s] = (counts[row.s] ?? 0) + 1;
  }
  return counts;
}

/** The text a row is searched in: its number, prompt and response. */
export function searchText(row: IRow, index: number): string {
  const shown = row.v.filter(part => typeof part === 'string').join(' ');
  return `#${index + 1} ${row.p} ${shown} ${row.r}`.toLowerCase();
}

/**
 * The indices of the rows that pass the filter, or null when nothing is
 * filtered (every row).
 */
export function filterRows(
  rows: IRow[],
  status: string,
  text: string
): number[] | null {
  const needle = text.trim().toLowerCase();
  if (!status && !needle) {
    return null;
  }
  const out: number[] = [];
  for (let i = 0; i < rows.length; i++) {
    const row = rows[i];
    if (status && row.s !== status) {
      continue;
    }
    if (needle && !searchText(row, i).includes(needle)) {
      continue;
    }
    out.push(i);
  }
  return out;
}

/**
 * Which of `count` rows of `rowHeight` pixels to draw when the list is
 * scrolled to `scrollTop` and shows `viewport` pixels: [start, end), with
 * `overscan` rows more on each side.
 */
export function visibleRange(
  scrollTop: number,
  viewport: number,
  rowHeight: number,
  count: number,
  overscan: number
): [number, number] {
  const first = Math.floor(Math.max(0, scrollTop) / rowHeight);
  const last = Math.ceil((Math.max(0, scrollTop) + viewport) / rowHeight);
  return [Math.max(0, first - overscan), Math.min(count, last + overscan)];
}

export function formatMeta(row: IRow): string {
  if (row.s === 'queued') {
    return '';
  }
  const parts = [formatTokens(row.k[0] + row.k[1])];
  parts.push(row.l === null ? '…' : `${row.l.toFixed(2)} s`);
  parts.push(formatCost(row.c));
  return parts.join(' · ');
}

export function foldLabel(kind: Fold[0], chars: number, prompts: number): string {
  const n = chars.toLocaleString('en');
  const others = Math.max(0, prompts - 1);
  if (kind === 'head' || kind === 'tail') {
    const s = others === 1 ? '' : 's';
    return `${n} characters shared with the other ${others.toLocaleString('en')} prompt${s} of this batch`;
  }
  if (kind === 'own') {
    return `${n} more characters of this call's own part`;
  }
  return `${n} more characters`;
}
