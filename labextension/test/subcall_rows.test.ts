import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

import { MODULE_NAME, MODULE_VERSION } from '../src/subcall_module';
import {
  applyRows,
  asRow,
  countStatuses,
  filterRows,
  foldLabel,
  formatMeta,
  type IRow,
  visibleRange
} from '../src/subcall_rows';

function row(s: string, p: string, r = '', extra: Partial<IRow> = {}): IRow {
  return asRow({ s, p, r, v: [p], n: p.length, rn: r.length, ...extra });
}

describe('the rows of a batch', () => {
  it('take updates in place and ignore what is out of range', () => {
    const rows = [row('queued', 'a'), row('queued', 'b')];
    const changed = applyRows(rows, [
      [1, { s: 'done', p: 'b', r: 'B' }],
      [7, { s: 'done' }],
      ['x', {}]
    ]);
    expect(changed).toEqual([1]);
    expect(rows[1].s).toBe('done');
    expect(rows[1].r).toBe('B');
    expect(rows[1].g).toEqual([]);
    expect(applyRows(rows, 'nonsense')).toEqual([]);
  });

  it('count each status', () => {
    const counts = countStatuses([row('done', 'a'), row('done', 'b'), row('error', 'c')]);
    expect(counts).toMatchObject({ done: 2, error: 1, queued: 0, cancelled: 0 });
  });

  it('filter by status, by text (number, prompt, response), or both', () => {
    const rows = [
      row('done', 'Genesis', 'creation'),
      row('error', 'Exodus', 'ERROR: refused'),
      row('done', 'Psalms', 'songs')
    ];
    expect(filterRows(rows, '', '  ')).toBeNull();
    expect(filterRows(rows, 'done', '')).toEqual([0, 2]);
    expect(filterRows(rows, '', 'PSALMS')).toEqual([2]);
    expect(filterRows(rows, '', 'refused')).toEqual([1]);
    expect(filterRows(rows, '', '#2')).toEqual([1]);
    expect(filterRows(rows, 'error', 'genesis')).toEqual([]);
    // folded text is not searched: only what the row shows
    const folded = [asRow({ s: 'done', p: 'x', v: [['head', 500], 'own part'] })];
    expect(filterRows(folded, '', 'own part')).toEqual([0]);
    expect(filterRows(folded, '', 'head')).toEqual([]);
  });

  it('draw only the rows in view, and a few more', () => {
    expect(visibleRange(0, 260, 26, 5000, 8)).toEqual([0, 18]);
    expect(visibleRange(26 * 2000, 260, 26, 5000, 8)).toEqual([1992, 2018]);
    expect(visibleRange(26 * 4995, 260, 26, 5000, 8)).toEqual([4987, 5000]);
    expect(visibleRange(-40, 260, 26, 3, 8)).toEqual([0, 3]);
  });

  it('say what a fold holds', () => {
    expect(foldLabel('head', 1234, 66)).toBe(
      '1,234 characters shared with the other 65 prompts of this batch'
    );
    expect(foldLabel('tail', 10, 2)).toBe(
      '10 characters shared with the other 1 prompt of this batch'
    );
    expect(foldLabel('own', 222916, 66)).toBe(
      "222,916 more characters of this call's own part"
    );
    expect(foldLabel('middle', 5, 1)).toBe('5 more characters');
  });

  it('show tokens, time and cost once a call has started', () => {
    expect(formatMeta(row('queued', 'a'))).toBe('');
    expect(formatMeta(row('done', 'a', 'b', { k: [1200, 8], l: 0.5, c: null }))).toBe(
      '1.2k tok · 0.50 s · price unknown'
    );
    expect(formatMeta(row('running', 'a', '', { l: null, c: 0.000012 }))).toBe(
      '0 tok · … · $0.000012'
    );
  });
});

describe('the widget module', () => {
  it('is the one the kernel asks for', () => {
    const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
    const python = readFileSync(
      new URL('../../rlm_kernel/widgets/batch_view.py', import.meta.url),
      'utf8'
    );
    expect(MODULE_NAME).toBe(pkg.name);
    expect(MODULE_VERSION).toBe(pkg.version);
    const [, range] = /MODULE_VERSION = "\^([\d.]+)"/.exec(python) ?? [];
    expect(range?.split('.').slice(0, 2)).toEqual(pkg.version.split('.').slice(0, 2));
    expect(python).toContain(`MODULE = "${MODULE_NAME}"`);
  });
});
