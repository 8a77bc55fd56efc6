import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

import {
  agentRunId,
  currentCellsAfter,
  type ICellRecord,
  isQueryCell,
  isSuperseded,
  notRunSentence,
  rlmMeta,
  runIdAt,
  skippedNote,
  sourceText
} from '../src/cellmeta';

function code(source: string, rlm?: Record<string, unknown>): ICellRecord {
  return { cell_type: 'code', source, metadata: rlm ? { rlm } : {} };
}

function markdown(source: string, rlm?: Record<string, unknown>): ICellRecord {
  return { cell_type: 'markdown', source, metadata: rlm ? { rlm } : {} };
}

const thought = (run: string, extra = {}) =>
  markdown('thinking', { role: 'thought', run_id: run, ...extra });
const step = (run: string, extra = {}) =>
  code('x = 1', { role: 'code', run_id: run, ...extra });
const answer = (run: string) =>
  markdown('**Final answer**', { role: 'answer', run_id: run });

describe('cell records', () => {
  it('rlmMeta reads metadata.rlm, else an empty object', () => {
    expect(rlmMeta(code('', { role: 'code', run_id: 'r' }))).toEqual({
      role: 'code',
      run_id: 'r'
    });
    expect(rlmMeta(code(''))).toEqual({});
    expect(rlmMeta({ cell_type: 'code', source: '' })).toEqual({});
    expect(rlmMeta({ cell_type: 'code', source: '', metadata: null })).toEqual(
      {}
    );
    expect(
      rlmMeta({ cell_type: 'code', source: '', metadata: { rlm: ['x'] } })
    ).toEqual({});
  });

  it('sourceText joins nbformat lines', () => {
    expect(sourceText(code('a\nb'))).toBe('a\nb');
    expect(sourceText({ cell_type: 'code', source: ['%%rlm\n', 'q'] })).toBe(
      '%%rlm\nq'
    );
  });

  it('isQueryCell: a %%rlm code cell, or a cell marked as a query', () => {
    expect(isQueryCell(code('%%rlm --max-iterations 3\nWhy?'))).toBe(true);
    expect(
      isQueryCell({ cell_type: 'code', source: ['%%rlm\n', 'Why?'] })
    ).toBe(true);
    expect(isQueryCell(code('Why?', { role: 'query' }))).toBe(true);
    expect(isQueryCell(markdown('%%rlm in prose'))).toBe(false);
    expect(isQueryCell(code(' %%rlm'))).toBe(false);
    expect(isQueryCell(code('%rlm continue --from x'))).toBe(false);
  });

  it('agentRunId: only cells the root model wrote', () => {
    expect(agentRunId(thought('r1'))).toBe('r1');
    expect(agentRunId(step('r1'))).toBe('r1');
    expect(agentRunId(answer('r1'))).toBe('r1');
    expect(agentRunId(code('', { role: 'human', run_id: 'r1' }))).toBeNull();
    expect(agentRunId(code('', { role: 'query', run_id: 'r1' }))).toBeNull();
    expect(agentRunId(code('', { role: 'code', run_id: '' }))).toBeNull();
    expect(agentRunId(code('', { role: 'code' }))).toBeNull();
  });
});

describe('runIdAt', () => {
  const cells = [
    markdown('# intro'), // 0
    code('%%rlm\nFirst?'), // 1
    thought('old'), // 2: an older run's cells, further down
    step('new'), // 3
    code('print(1)'), // 4: a person's cell
    answer('new'), // 5
    code('%%rlm\nSecond?', { role: 'query', run_id: 'second' }), // 6
    code('y = 2'), // 7
    code('%%rlm\nThird?') // 8: never ran
  ];

  it("is a cell's own run", () => {
    expect(runIdAt(cells, 2)).toBe('old');
    expect(runIdAt(cells, 3)).toBe('new');
  });

  it('is the run of the nearest agent cell above, below the query', () => {
    expect(runIdAt(cells, 4)).toBe('new');
  });

  it('on a query cell without a record: the first agent cell below it', () => {
    expect(runIdAt(cells, 1)).toBe('old');
  });

  it('on a query cell with a record, or below it with no agent cell: the record', () => {
    expect(runIdAt(cells, 6)).toBe('second');
    expect(runIdAt(cells, 7)).toBe('second');
  });

  it('stops looking below at the next query cell', () => {
    expect(runIdAt(cells, 8)).toBeNull();
    expect(
      runIdAt([code('%%rlm\nQ'), code('%%rlm\nR'), step('r')], 0)
    ).toBeNull();
  });

  it('is null above every query cell and on an empty notebook', () => {
    expect(runIdAt(cells, 0)).toBeNull();
    expect(runIdAt([], 0)).toBeNull();
  });

  it('reads an index past the end as the last cell', () => {
    expect(runIdAt(cells.slice(0, 8), 99)).toBe('second');
  });
});

describe('currentCellsAfter', () => {
  it("counts the run's agent cells below that are not superseded", () => {
    const cells = [
      code('%%rlm\nQ'),
      thought('r'),
      step('r'),
      code('person'),
      thought('r'),
      step('r', { superseded: true }),
      step('other'),
      answer('r')
    ];
    expect(currentCellsAfter(cells, 1, 'r')).toBe(3);
    expect(currentCellsAfter(cells, 4, 'r')).toBe(1);
    expect(currentCellsAfter(cells, 7, 'r')).toBe(0);
    expect(currentCellsAfter(cells, 0, 'other')).toBe(1);
    expect(currentCellsAfter(cells, 0, null)).toBe(0);
  });
});

describe('a saved notebook (examples/human_in_the_loop.ipynb)', () => {
  const notebook = JSON.parse(
    readFileSync(
      new URL('../../examples/human_in_the_loop.ipynb', import.meta.url),
      'utf8'
    )
  ) as { cells: Array<ICellRecord & { id: string }> };
  const cells = notebook.cells;
  const at = (id: string) => cells.findIndex(c => c.id === id);

  it('finds the run of the continue cell below the run, as the kernel does', () => {
    const runId = runIdAt(cells, at('ask'));
    expect(runId).toMatch(/^[0-9a-f]{12}$/);
    expect(runIdAt(cells, at('continue'))).toBe(runId);
    expect(runIdAt(cells, at('intro'))).toBeNull();
  });

  it("counts the run's cells below the step a person continues from", () => {
    const runId = runIdAt(cells, at('ask'));
    const agentCells = cells.filter(c => agentRunId(c) === runId);
    expect(agentCells.length).toBeGreaterThan(2);
    const first = at(agentCells[0].id);
    expect(currentCellsAfter(cells, first, runId)).toBe(agentCells.length - 1);
  });
});

describe('notRunSentence', () => {
  it('says why a skipped cell did not run, as its note and the feedback do', () => {
    expect(
      notRunSentence({ status: 'skipped', skipped: 'its ``` fence was never closed' })
    ).toBe('This code block was not run: its ``` fence was never closed.');
    expect(notRunSentence({ status: 'skipped' })).toBe('This code block was not run.');
    expect(notRunSentence({ status: 'ok', skipped: 'stale' })).toBeNull();
    expect(notRunSentence({})).toBeNull();
  });
});

describe('superseded cells', () => {
  it('isSuperseded reads metadata.rlm.superseded', () => {
    expect(isSuperseded(step('r1', { superseded: true }))).toBe(true);
    expect(isSuperseded(step('r1'))).toBe(false);
    expect(isSuperseded(code('x = 1'))).toBe(false);
  });

  it('skippedNote is one line, for one cell or several', () => {
    expect(skippedNote(1)).toBe(
      'Skipped a superseded cell: history of an earlier continuation, its recorded outputs kept. ' +
        'To run its code again, copy it into a new cell.'
    );
    expect(skippedNote(3)).toMatch(/^Skipped 3 superseded cells: .* their recorded outputs kept\. /);
    expect(skippedNote(3)).not.toContain('\n');
  });
});
