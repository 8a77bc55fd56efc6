import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

import {
  addTally,
  buildRuns,
  cellFactsOf,
  emptyTally,
  type ICellFacts,
  type ITrajectoryNode,
  totalTokens
} from '../src/panel_model';

function cell(
  id: string,
  rlm: Record<string, unknown> | null,
  source = '',
  type = 'code'
): ICellFacts {
  return { id, type, source, rlm };
}

const root = (
  prompt: number,
  completion: number,
  cost: number | null = null
) => ({
  model: 'openai/root',
  prompt_tokens: prompt,
  completion_tokens: completion,
  cost_usd: cost,
  latency_s: 1.5
});

const subcall = (id: string, extra: Record<string, unknown> = {}) => ({
  id,
  kind: 'llm',
  model: 'openai/sub',
  status: 'done',
  prompt_preview: `prompt ${id}`,
  usage: { prompt_tokens: 10, completion_tokens: 2 },
  cost_usd: 0.001,
  latency_s: 0.5,
  ...extra
});

/** A notebook with one finished run of two steps below its %%rlm cell. */
function finishedRun(): ICellFacts[] {
  return [
    cell('intro', null, '# Notes', 'markdown'),
    cell('anchor', null, '%%rlm --max-iterations 5\nHow many rows?\n'),
    cell(
      't1',
      {
        role: 'thought',
        run_id: 'r1',
        step: 1,
        root_call: root(100, 20, 0.01)
      },
      '',
      'markdown'
    ),
    cell('c1', {
      role: 'code',
      run_id: 'r1',
      step: 1,
      status: 'ok',
      duration_s: 0.25,
      subcalls: [subcall('1'), subcall('2', { cost_usd: null, replayed: true })]
    }),
    cell('human', { role: 'human', run_id: 'r1' }),
    cell(
      't2',
      {
        role: 'thought',
        run_id: 'r1',
        step: 2,
        root_call: root(200, 30, 0.02)
      },
      '',
      'markdown'
    ),
    cell('c2', {
      role: 'code',
      run_id: 'r1',
      step: 2,
      status: 'error',
      duration_s: 0.5
    }),
    cell(
      'a',
      { role: 'answer', run_id: 'r1', step: 2, reason: 'final' },
      '',
      'markdown'
    )
  ];
}

function find(node: ITrajectoryNode, key: string): ITrajectoryNode | undefined {
  if (node.key === key) {
    return node;
  }
  for (const child of node.children) {
    const found = find(child, key);
    if (found) {
      return found;
    }
  }
  return undefined;
}

describe('tallies', () => {
  it('add tokens and known costs; an unknown cost marks the sum partial', () => {
    const sum = emptyTally();
    addTally(sum, {
      promptTokens: 5,
      completionTokens: 1,
      costUsd: null,
      costPartial: true
    });
    expect(sum).toEqual({
      promptTokens: 5,
      completionTokens: 1,
      costUsd: null,
      costPartial: true
    });
    addTally(sum, {
      promptTokens: 10,
      completionTokens: 2,
      costUsd: 0.5,
      costPartial: false
    });
    expect(sum).toEqual({
      promptTokens: 15,
      completionTokens: 3,
      costUsd: 0.5,
      costPartial: true
    });
    expect(totalTokens(sum)).toBe(18);
  });
});

describe('buildRuns', () => {
  it("puts a compaction in the step it came before, with its summarising call's cost", () => {
    const cells = finishedRun();
    const at = cells.findIndex(c => c.id === 't2');
    cells.splice(
      at,
      0,
      cell(
        'k',
        {
          role: 'thought',
          run_id: 'r1',
          step: 2,
          compaction: {
            steps: [1, 1],
            tokens_before: 5000,
            tokens_after: 900,
            by: 'openai/root',
            trigger: 'limit',
            usage: { prompt_tokens: 700, completion_tokens: 50, cost_usd: 0.005 }
          }
        },
        '**History compacted**: step 1 summarised',
        'markdown'
      )
    );
    const [run] = buildRuns(cells);
    const [, step2] = run.node.children;
    expect(run.node.children).toHaveLength(2);
    expect(step2.cellId).toBe('k');
    expect(step2.label).toBe('Step 2 · compacted');
    expect(step2.detail).toBe('history compacted (step 1 summarised) · answer');
    expect(step2.tally.promptTokens).toBe(900);
    expect(step2.tally.costUsd).toBeCloseTo(0.025);
    expect(run.points[1].rootTokens).toBe(980);
    expect(step2.model).toBe('openai/root');
  });

  it('builds one run per run id, leading to its %%rlm cell', () => {
    const [run, ...others] = buildRuns(finishedRun());
    expect(others).toEqual([]);
    expect(run.runId).toBe('r1');
    expect(run.query).toBe('How many rows?');
    expect(run.node).toMatchObject({
      key: 'r:r1',
      kind: 'run',
      label: 'Run r1',
      model: 'openai/root',
      status: 'final',
      cellId: 'anchor',
      detail: '2 steps, 2 sub-calls'
    });
  });

  it("groups a step's cells and adds the root call and sub-calls", () => {
    const [run] = buildRuns(finishedRun());
    const [step1, step2] = run.node.children;
    expect(step1).toMatchObject({
      key: 'r:r1/s:1',
      label: 'Step 1',
      status: 'ok',
      cellId: 't1'
    });
    expect(step1.tally).toEqual({
      promptTokens: 120,
      completionTokens: 24,
      costUsd: 0.011,
      costPartial: true
    });
    expect(step1.seconds).toBeCloseTo(1.75);
    expect(step1.children.map(c => c.label)).toEqual([
      'llm_query',
      'llm_query'
    ]);
    expect(step1.children[1].detail).toBe('replayed · prompt 2');
    expect(step2.status).toBe('error');
    expect(step2.detail).toBe('answer');
    expect(run.points).toEqual([
      {
        step: 1,
        rootTokens: 120,
        subcallTokens: 24,
        costUsd: 0.011,
        cellId: 't1'
      },
      {
        step: 2,
        rootTokens: 230,
        subcallTokens: 0,
        costUsd: 0.02,
        cellId: 't2'
      }
    ]);
    expect(run.node.tally.promptTokens).toBe(320);
    expect(run.node.tally.costUsd).toBeCloseTo(0.031);
  });

  it('shows a run without an answer as running, and a step without a status as running', () => {
    const cells = finishedRun().slice(0, 4);
    const code = cells[3].rlm as Record<string, unknown>;
    delete code.status;
    const [run] = buildRuns(cells);
    expect(run.node.status).toBe('running');
    expect(run.node.children[0].status).toBe('running');
  });

  it('says how a run ended without an answer', () => {
    const cells = finishedRun();
    cells[7] = cell('a', {
      role: 'answer',
      run_id: 'r1',
      step: 2,
      reason: 'max_iterations'
    });
    const [run] = buildRuns(cells);
    expect(run.node.status).toBe('max_iterations');
    expect(run.node.children[1].detail).toBe('ended: max_iterations');
  });

  it('takes the query, time and model a headless run recorded in the notebook', () => {
    const record = {
      run_id: 'r1',
      query: 'Recorded?',
      elapsed_s: 42,
      model: 'openai/big'
    };
    const [run] = buildRuns(finishedRun(), {
      runs: [record, 'junk', { query: 'no id' }]
    });
    expect(run.query).toBe('Recorded?');
    expect(run.node.seconds).toBe(42);
    expect(run.node.model).toBe('openai/big');
  });

  it('says which run a follow-up builds on, from its cells or the notebook record', () => {
    const cells = [
      ...finishedRun(),
      cell('anchor2', { follows: 'r1' }, '%%rlm\nAnd then?'),
      cell('f1', { role: 'thought', run_id: 'r2', step: 1, follows: 'r1' }, '', 'markdown'),
      cell('f2', { role: 'answer', run_id: 'r2', step: 1, follows: 'r1', reason: 'final' }, '', 'markdown'),
      cell('g1', { role: 'thought', run_id: 'r3', step: 1 }, '', 'markdown')
    ];
    const runs = buildRuns(cells, { runs: [{ run_id: 'r3', follows: 'r2' }] });
    expect(runs.map(r => [r.runId, r.follows])).toEqual([
      ['r1', null],
      ['r2', 'r1'],
      ['r3', 'r2']
    ]);
    expect(runs[1].query).toBe('And then?');
  });

  it('keeps runs in the order their first cells appear, without a %%rlm cell too', () => {
    const cells = [
      cell('b1', { role: 'thought', run_id: 'B', step: 1 }, '', 'markdown'),
      cell('anchor', null, '%%rlm\nSecond'),
      cell('a1', { role: 'thought', run_id: 'A', step: 1 }, '', 'markdown'),
      cell('b2', { role: 'code', run_id: 'B', step: 1, status: 'ok' })
    ];
    const runs = buildRuns(cells);
    expect(runs.map(r => r.runId)).toEqual(['B', 'A']);
    expect(runs[0].node.cellId).toBe('b1');
    expect(runs[0].query).toBe('');
    expect(runs[1].node.cellId).toBe('anchor');
    expect(runs[1].query).toBe('Second');
  });

  it('groups batched sub-calls and counts their outcomes', () => {
    const cells = [
      cell('c', {
        role: 'code',
        run_id: 'r',
        step: 1,
        status: 'ok',
        subcalls: [
          subcall('1', { batch: 'b', latency_s: 0.2 }),
          subcall('2', { batch: 'b', latency_s: 0.9, model: 'openai/other' }),
          subcall('3', { batch: 'b', status: 'error', error: 'timeout' }),
          subcall('4')
        ]
      })
    ];
    const [run] = buildRuns(cells);
    const [batch, single] = run.node.children[0].children;
    expect(batch).toMatchObject({
      kind: 'batch',
      label: 'llm_query_batched',
      status: 'error',
      detail: '3 prompts, 2 done, 1 failed',
      model: 'several models',
      seconds: 0.9
    });
    expect(batch.children.map(c => c.key)).toEqual(['sc:1', 'sc:2', 'sc:3']);
    expect(batch.children[2].detail).toBe('timeout');
    expect(batch.tally.promptTokens).toBe(30);
    expect(single.key).toBe('sc:4');
    expect(run.node.detail).toBe('1 step, 4 sub-calls');
  });

  it("shows a child run under its sub-call, with the child's own spend", () => {
    const child = {
      run_id: 'kid',
      depth: 1,
      reason: 'final',
      cells: [
        {
          id: 'k1',
          cell_type: 'markdown',
          source: ['Think'],
          metadata: {
            rlm: {
              role: 'thought',
              run_id: 'kid',
              step: 1,
              root_call: root(50, 5)
            }
          }
        },
        {
          id: 'k2',
          cell_type: 'code',
          source: 'y = llm_query("x")',
          metadata: {
            rlm: {
              role: 'code',
              run_id: 'kid',
              step: 1,
              status: 'ok',
              subcalls: [subcall('g1')]
            }
          }
        }
      ]
    };
    const cells = [
      cell('c', {
        role: 'code',
        run_id: 'r',
        step: 1,
        status: 'ok',
        subcalls: [
          subcall('9', {
            kind: 'rlm',
            child,
            usage: { prompt_tokens: 9999, completion_tokens: 0 }
          })
        ]
      })
    ];
    const [run] = buildRuns(cells);
    const node = find(run.node, 'sc:9');
    expect(node?.label).toBe('rlm_query');
    expect(node?.detail).toBe(
      'child run kid, depth 1, 1 step, answered · prompt 9'
    );
    expect(node?.tally.promptTokens).toBe(60);
    // The child's entries lead to the parent's code cell that started it.
    expect(node?.children[0]).toMatchObject({ key: 'r:kid/s:1', cellId: 'c' });
    expect(find(run.node, 'sc:g1')?.cellId).toBe('c');
    // Sub-calls of child runs count, as the status bar counts them.
    expect(run.node.detail).toBe('1 step, 2 sub-calls');
  });

  it("ignores cells without rlm metadata and a person's cells", () => {
    expect(
      buildRuns([
        cell('x', null, '%%rlm\nQ'),
        cell('h', { role: 'human', run_id: 'r' })
      ])
    ).toEqual([]);
  });
});

describe('cellFactsOf', () => {
  it('reads an nbformat cell', () => {
    expect(
      cellFactsOf({
        id: 'a',
        cell_type: 'markdown',
        source: ['x', 'y'],
        metadata: { rlm: { role: 'thought' } }
      })
    ).toEqual({
      id: 'a',
      type: 'markdown',
      source: 'xy',
      rlm: { role: 'thought' }
    });
    expect(cellFactsOf({ source: 'x'.repeat(1000) })?.source.length).toBe(400);
    expect(cellFactsOf('not a cell')).toBeNull();
  });
});

describe('a saved notebook (examples/human_in_the_loop.ipynb)', () => {
  const notebook = JSON.parse(
    readFileSync(
      new URL('../../examples/human_in_the_loop.ipynb', import.meta.url),
      'utf8'
    )
  ) as { cells: unknown[]; metadata: Record<string, unknown> };
  const facts = notebook.cells
    .map(cellFactsOf)
    .filter((c): c is ICellFacts => c !== null);

  it('has one answered run of four steps below the %%rlm cell', () => {
    const runs = buildRuns(facts, notebook.metadata.rlm);
    expect(runs).toHaveLength(1);
    const [run] = runs;
    expect(run.node.cellId).toBe('ask');
    expect(run.query.startsWith('How many of these reviews')).toBe(true);
    expect(run.node.status).toBe('final');
    expect(run.node.children.map(s => s.label)).toEqual([
      'Step 1',
      'Step 2',
      'Step 3',
      'Step 4'
    ]);
    expect(run.node.detail).toBe('4 steps, 8 sub-calls');
  });

  it("shows step 2's eight batched sub-calls, one of them pinned", () => {
    const [run] = buildRuns(facts, notebook.metadata.rlm);
    const step2 = run.node.children[1];
    expect(step2.children).toHaveLength(1);
    const batch = step2.children[0];
    expect(batch.label).toBe('llm_query_batched');
    expect(batch.detail).toBe('8 prompts, 8 done');
    expect(
      batch.children.filter(c => c.detail.startsWith('pinned'))
    ).toHaveLength(1);
    expect(run.points[1]).toMatchObject({
      step: 2,
      rootTokens: 825,
      subcallTokens: 272,
      costUsd: null
    });
    expect(step2.tally.costPartial).toBe(true);
  });
});
