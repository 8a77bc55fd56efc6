import { describe, expect, it } from 'vitest';

import {
  formatCached,
  formatCompactions,
  formatCost,
  formatMoney,
  formatRoot,
  formatSubcalls,
  formatTokens
} from '../src/format';

// The same rows as tests/test_words.py: the page and the kernel write figures alike.
const TOKENS: Array<[number, string]> = [
  [0, '0 tok'],
  [950, '950 tok'],
  [1000, '1.0k tok'],
  [12_345, '12.3k tok'],
  [999_949, '999.9k tok'],
  [999_950, '1.00M tok'],
  [1_087_800, '1.09M tok']
];
const MONEY: Array<[number, string]> = [
  [0, '$0'],
  [0.00042, '$0.00042'],
  [0.0012, '$0.0012'],
  [0.0213, '$0.021'],
  [0.5, '$0.50'],
  [1.25, '$1.25'],
  [1234.5, '$1,234.50']
];

describe('format', () => {
  it.each(TOKENS)('writes %d tokens as %s', (count, text) => {
    expect(formatTokens(count)).toBe(text);
  });

  it.each(MONEY)('writes $%d as %s', (usd, text) => {
    expect(formatMoney(usd)).toBe(text);
  });

  it('says a price is unknown one way', () => {
    expect(formatCost(0.0213)).toBe('$0.021');
    expect(formatCost(null)).toBe('price unknown');
    expect(formatCost(null, 0.0213)).toBe('$0.021 + unknown');
  });

  it('counts sub-calls as done, running and queued until all are done', () => {
    expect(formatSubcalls(66, 50, 4)).toBe('66 sub-calls: 12 done, 50 running, 4 queued');
    expect(formatSubcalls(66, 2)).toBe('66 sub-calls: 64 done, 2 running');
    expect(formatSubcalls(1)).toBe('1 sub-call');
  });

  it('says what was cached and compacted as the kernel does (tests/test_words.py)', () => {
    expect(formatCached(91_000)).toBe(' (91.0k cached)');
    expect(formatCached(0)).toBe('');
    expect(formatCompactions(0)).toBe('');
    expect(formatCompactions(1)).toBe('history compacted');
    expect(formatCompactions(2)).toBe('history compacted 2×');
  });
});

describe('formatRoot', () => {
  const base = {
    protocol: 'rlm/1' as const,
    op: 'status' as const,
    run_id: 'r',
    state: 'running' as const,
    iteration: 1,
    max_iterations: 30,
    depth: 0,
    subcalls: 0,
    tokens: 0,
    cost_usd: null,
    elapsed_s: 3
  };
  it('ticks the thinking seconds between statuses', () => {
    const status = { ...base, root: { phase: 'thinking' as const, elapsed_s: 4.6, tokens: 0 } };
    expect(formatRoot(status, 0)).toBe('root model thinking · 4 s');
    expect(formatRoot(status, 1.5)).toBe('root model thinking · 6 s');
  });
  it('says how much the model has written', () => {
    const status = { ...base, root: { phase: 'writing' as const, elapsed_s: 9, tokens: 1234 } };
    expect(formatRoot(status, 0)).toBe('root model writing · 1.2k tok');
  });
  it('says the run waits for a person, not the root call it no longer makes', () => {
    const status = { ...base, waiting: 'approval' as const, root: { phase: 'thinking' as const, elapsed_s: 1, tokens: 0 } };
    expect(formatRoot(status, 0)).toBe('waiting for approval');
    expect(formatRoot({ ...status, state: 'ended' }, 0)).toBeNull();
  });
  it('says nothing without a root call or once the run ended', () => {
    expect(formatRoot(base, 0)).toBeNull();
    expect(formatRoot({ ...base, state: 'ended', root: { phase: 'writing', elapsed_s: 1, tokens: 5 } }, 0)).toBeNull();
  });
});
