import { describe, expect, it } from 'vitest';

import {
  asKernelOp,
  asTakeoverOp,
  cellIdFromMsgId,
  cellsReply,
  FEATURES,
  hello,
  kernelOps,
  PROTOCOL,
  readKernelMessage
} from '../src/protocol';

const insert = {
  protocol: 'rlm/1',
  op: 'insert_cell',
  run_id: 'r1',
  after_cell_id: 'anchor',
  cell: { id: 'c1', cell_type: 'code', source: 'print(1)', metadata: {} }
};
const started = {
  protocol: 'rlm/1',
  op: 'cell_started',
  run_id: 'r1',
  cell_id: 'c1',
  msg_id: 'rlm-c1-1'
};
const status = {
  protocol: 'rlm/1',
  op: 'status',
  run_id: 'r1',
  state: 'running',
  iteration: 1,
  max_iterations: 20,
  depth: 0,
  subcalls: 0,
  tokens: 10,
  cost_usd: null,
  elapsed_s: 0.5
};

describe('asKernelOp', () => {
  it('returns every live op of rlm/1 as it came', () => {
    for (const op of [
      'run_started',
      'insert_cell',
      'cell_started',
      'cell_finished',
      'status',
      'run_ended',
      'resync'
    ]) {
      const data = { protocol: 'rlm/1', op, run_id: 'r1', extra: 3 };
      expect(asKernelOp(data)).toBe(data);
    }
  });

  it('refuses other protocols, unknown ops and ops without a run id', () => {
    expect(asKernelOp({ ...insert, protocol: 'rlm/2' })).toBeNull();
    expect(asKernelOp({ ...insert, protocol: undefined })).toBeNull();
    expect(asKernelOp({ ...insert, op: 'explode' })).toBeNull();
    expect(asKernelOp({ ...insert, op: 42 })).toBeNull();
    expect(asKernelOp({ ...insert, run_id: undefined })).toBeNull();
    expect(asKernelOp({ ...insert, run_id: 7 })).toBeNull();
  });

  it('refuses take-over ops, the batch and frontend ops', () => {
    expect(
      asKernelOp({ protocol: 'rlm/1', op: 'get_cells', run_id: 'r1' })
    ).toBeNull();
    expect(
      asKernelOp({ protocol: 'rlm/1', op: 'ops', run_id: 'r1', ops: [] })
    ).toBeNull();
    expect(asKernelOp(hello('a.ipynb', 'client'))).toBeNull();
  });

  it('refuses what is not an object', () => {
    for (const data of [null, undefined, 'insert_cell', 3, true]) {
      expect(asKernelOp(data)).toBeNull();
    }
  });
});

describe('kernelOps', () => {
  it('reads a single op as a list of one', () => {
    expect(kernelOps(insert)).toEqual([insert]);
  });

  it('reads the members of an ops batch in order', () => {
    const batch = {
      protocol: 'rlm/1',
      op: 'ops',
      ops: [insert, started, status]
    };
    const ops = kernelOps(batch);
    expect(ops.map(op => op.op)).toEqual([
      'insert_cell',
      'cell_started',
      'status'
    ]);
    expect(ops[0]).toBe(insert);
  });

  it('skips members it cannot read and keeps the others in order', () => {
    const batch = {
      protocol: 'rlm/1',
      op: 'ops',
      ops: [
        null,
        insert,
        { op: 'status' },
        { ...status, op: 'future_op' },
        started
      ]
    };
    expect(kernelOps(batch)).toEqual([insert, started]);
  });

  it('reads nothing from a batch of another protocol or without a list', () => {
    expect(kernelOps({ protocol: 'rlm/2', op: 'ops', ops: [insert] })).toEqual(
      []
    );
    expect(kernelOps({ protocol: 'rlm/1', op: 'ops', ops: insert })).toEqual(
      []
    );
    expect(kernelOps({ protocol: 'rlm/1', op: 'ops' })).toEqual([]);
  });

  it('reads nothing from take-over ops and non-objects', () => {
    expect(
      kernelOps({ protocol: 'rlm/1', op: 'get_cells', request_id: '1' })
    ).toEqual([]);
    expect(kernelOps(null)).toEqual([]);
    expect(kernelOps('ops')).toEqual([]);
  });
});

describe('asTakeoverOp', () => {
  it('reads get_cells with its request id', () => {
    expect(
      asTakeoverOp({ protocol: 'rlm/1', op: 'get_cells', request_id: 'hello' })
    ).toEqual({ protocol: PROTOCOL, op: 'get_cells', request_id: 'hello' });
    expect(asTakeoverOp({ protocol: 'rlm/1', op: 'get_cells' })).toEqual({
      protocol: PROTOCOL,
      op: 'get_cells',
      request_id: ''
    });
  });

  it("folds cell_metadata's cell_id into cell_ids and keeps the replay totals", () => {
    const op = asTakeoverOp({
      protocol: 'rlm/1',
      op: 'cell_metadata',
      cell_id: 'c1',
      rlm: { subcalls: [{ id: '1', pinned: true }] },
      replay: { replayed: 3, fresh: 1, extra: 'x' }
    });
    expect(op).toEqual({
      protocol: PROTOCOL,
      op: 'cell_metadata',
      cell_ids: ['c1'],
      rlm: { subcalls: [{ id: '1', pinned: true }] },
      replay: { replayed: 3, fresh: 1 }
    });
  });

  it('prefers cell_ids, keeping only the strings in it', () => {
    const op = asTakeoverOp({
      protocol: 'rlm/1',
      op: 'cell_metadata',
      cell_id: 'ignored',
      cell_ids: ['a', 7, 'b', null],
      rlm: { superseded: true }
    });
    expect(op).toMatchObject({ cell_ids: ['a', 'b'], replay: null });
  });

  it('drops malformed parts of cell_metadata instead of applying them', () => {
    const op = asTakeoverOp({
      protocol: 'rlm/1',
      op: 'cell_metadata',
      rlm: ['not', 'a', 'dict'],
      replay: { replayed: '3', fresh: 1 }
    });
    expect(op).toEqual({
      protocol: PROTOCOL,
      op: 'cell_metadata',
      cell_ids: [],
      rlm: null,
      replay: null
    });
  });

  it('reads cell_source, delete_cells and move_cells', () => {
    expect(
      asTakeoverOp({
        protocol: 'rlm/1',
        op: 'cell_source',
        cell_id: 'c2',
        source: 'x = 2',
        metadata: { edited: true }
      })
    ).toEqual({
      protocol: PROTOCOL,
      op: 'cell_source',
      cell_ids: ['c2'],
      source: 'x = 2',
      metadata: { edited: true }
    });
    expect(
      asTakeoverOp({ protocol: 'rlm/1', op: 'cell_source', cell_id: 'c2' })
    ).toMatchObject({ source: '', metadata: null });
    expect(
      asTakeoverOp({
        protocol: 'rlm/1',
        op: 'delete_cells',
        cell_ids: ['a', 'b']
      })
    ).toEqual({ protocol: PROTOCOL, op: 'delete_cells', cell_ids: ['a', 'b'] });
    expect(
      asTakeoverOp({
        protocol: 'rlm/1',
        op: 'move_cells',
        cell_ids: ['a', 'b'],
        after_cell_id: 'here'
      })
    ).toEqual({
      protocol: PROTOCOL,
      op: 'move_cells',
      cell_ids: ['a', 'b'],
      after_cell_id: 'here'
    });
  });

  it('refuses live ops, unknown ops, other protocols and non-objects', () => {
    expect(asTakeoverOp(insert)).toBeNull();
    expect(
      asTakeoverOp({ protocol: 'rlm/1', op: 'cells', cells: [] })
    ).toBeNull();
    expect(asTakeoverOp({ protocol: 'rlm/2', op: 'get_cells' })).toBeNull();
    expect(asTakeoverOp({ op: 'delete_cells', cell_ids: ['a'] })).toBeNull();
    expect(asTakeoverOp(null)).toBeNull();
    expect(asTakeoverOp([])).toBeNull();
  });
});

describe('readKernelMessage', () => {
  it('gives live ops to the live side only', () => {
    const batch = { protocol: 'rlm/1', op: 'ops', ops: [insert, started] };
    expect(readKernelMessage(batch)).toEqual({
      live: [insert, started],
      takeover: null,
      writer: null
    });
  });

  it('reads who writes the runs from a writer op, and nothing else', () => {
    expect(
      readKernelMessage({ protocol: 'rlm/1', op: 'writer', writer: 'server' })
    ).toEqual({ live: [], takeover: null, writer: 'server' });
    expect(
      readKernelMessage({ protocol: 'rlm/1', op: 'writer', writer: 'page' })
        .writer
    ).toBe('page');
    expect(
      readKernelMessage({ protocol: 'rlm/1', op: 'anchor_started' })
    ).toEqual({ live: [], takeover: null, writer: null });
  });

  it('gives a take-over op to the take-over side only', () => {
    const message = readKernelMessage({
      protocol: 'rlm/1',
      op: 'delete_cells',
      cell_ids: ['a']
    });
    expect(message.live).toEqual([]);
    expect(message.takeover).toMatchObject({
      op: 'delete_cells',
      cell_ids: ['a']
    });
  });

  it('reads nothing from a widget comm message', () => {
    expect(readKernelMessage({ method: 'update', state: {} })).toEqual({
      live: [],
      takeover: null,
      writer: null
    });
  });
});

describe('frontend ops', () => {
  it('hello names the notebook, the page and the features it reads', () => {
    const op = hello('dir/a.ipynb', 'page-1');
    expect(op).toEqual({
      protocol: 'rlm/1',
      op: 'hello',
      notebook_path: 'dir/a.ipynb',
      client_id: 'page-1',
      features: ['ops']
    });
    // The op owns its list: editing it does not change what later pages say.
    op.features.push('other');
    expect(FEATURES).toEqual(['ops']);
  });

  it('cells answers a request with the cells', () => {
    const cells = [
      { id: 'a', cell_type: 'markdown' as const, source: 'hi', metadata: {} }
    ];
    expect(cellsReply('7', cells)).toEqual({
      protocol: 'rlm/1',
      op: 'cells',
      request_id: '7',
      cells
    });
  });
});

describe('cellIdFromMsgId', () => {
  it('reads the cell id of a synthetic msg_id', () => {
    expect(cellIdFromMsgId('rlm-abc-1')).toBe('abc');
    expect(cellIdFromMsgId('rlm-abc-12')).toBe('abc');
  });

  it('keeps dashes inside the cell id', () => {
    expect(cellIdFromMsgId('rlm-5f1e-22aa-bb-3')).toBe('5f1e-22aa-bb');
  });

  it('refuses msg_ids that are not synthetic', () => {
    expect(cellIdFromMsgId('d41c6a1e-5b2c-4a8e-9d51-1f5f3c2b7a10')).toBeNull();
    expect(cellIdFromMsgId('rlm-abc')).toBeNull();
    expect(cellIdFromMsgId('rlm--1')).toBeNull();
    expect(cellIdFromMsgId('xrlm-abc-1')).toBeNull();
    expect(cellIdFromMsgId('rlm-abc-1x')).toBeNull();
    expect(cellIdFromMsgId('')).toBeNull();
  });
});

describe('streaming ops', () => {
  it('reads cell_text and remove_cells, alone and batched', () => {
    const text = { protocol: 'rlm/1', op: 'cell_text', run_id: 'r1', cell_id: 'd1', source: 'Hel' };
    const gone = { protocol: 'rlm/1', op: 'remove_cells', run_id: 'r1', cell_ids: ['d1'] };
    expect(kernelOps(text)).toEqual([text]);
    expect(kernelOps({ protocol: 'rlm/1', op: 'ops', ops: [text, gone] })).toEqual([text, gone]);
  });
});
