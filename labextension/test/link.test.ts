/**
 * The link with a purpose-built fake kernel: what it sends, and where each
 * kind of message goes. No JupyterLab, no browser.
 */
import { Signal } from '@lumino/signaling';
import { beforeEach, describe, expect, it } from 'vitest';

import {
  type ILiveHandler,
  type ITakeoverHandler,
  type LinkSession,
  NotebookLink
} from '../src/link';
import {
  cellsReply,
  type FrontendOp,
  type KernelOp,
  type TakeoverOp
} from '../src/protocol';

class FakeComm {
  constructor(readonly target: string) {}
  opened: unknown[] = [];
  closed = false;
  isDisposed = false;
  onClose: (() => void) | null = null;
  open(data: unknown): void {
    this.opened.push(data);
  }
  close(): void {
    this.closed = true;
    this.isDisposed = true;
  }
  dispose(): void {
    this.isDisposed = true;
  }
}

class FakeKernel {
  readonly iopubMessage = new Signal<this, unknown>(this);
  readonly connectionStatusChanged = new Signal<this, string>(this);
  readonly statusChanged = new Signal<this, string>(this);
  connectionStatus = 'connected';
  isDisposed = false;
  readonly targets = new Set<string>();
  readonly comms: FakeComm[] = [];

  registerCommTarget(name: string): void {
    this.targets.add(name);
  }
  removeCommTarget(name: string): void {
    this.targets.delete(name);
  }
  createComm(target: string): FakeComm {
    const comm = new FakeComm(target);
    this.comms.push(comm);
    return comm;
  }

  /** The data of every comm the page opened, in order. */
  sent(): Array<Record<string, unknown>> {
    return this.comms.flatMap(c => c.opened) as Array<Record<string, unknown>>;
  }

  publish(msgType: string, content: unknown, parentMsgId = ''): void {
    this.iopubMessage.emit({
      header: { msg_type: msgType, msg_id: 'm' },
      parent_header: parentMsgId ? { msg_id: parentMsgId } : {},
      content,
      metadata: {},
      channel: 'iopub'
    });
  }
}

class FakeSession {
  readonly kernelChanged = new Signal<this, { newValue: FakeKernel | null }>(
    this
  );
  session: { kernel: FakeKernel | null } | null;

  constructor(kernel: FakeKernel | null) {
    this.session = { kernel };
  }

  change(kernel: FakeKernel | null): void {
    this.session = { kernel };
    this.kernelChanged.emit({ newValue: kernel });
  }
}

class Live implements ILiveHandler {
  batches: KernelOp[][] = [];
  routed: unknown[] = [];
  applyOps(ops: readonly KernelOp[]): void {
    this.batches.push([...ops]);
  }
  routeIOPub(msg: unknown): void {
    this.routed.push(msg);
  }
  flush(): void {
    this.flushes++;
  }
  setWriter(writer: string | null): void {
    this.writers.push(writer);
  }
  flushes = 0;
  writers: Array<string | null> = [];
}

class Takeover implements ITakeoverHandler {
  constructor(private readonly live: Live) {}
  ops: TakeoverOp[] = [];
  /** How many times the live handler had flushed when each op came. */
  flushesSeen: number[] = [];
  resets = 0;
  applyTakeover(op: TakeoverOp): FrontendOp | null {
    this.ops.push(op);
    this.flushesSeen.push(this.live.flushes);
    return op.op === 'get_cells' ? cellsReply(op.request_id, []) : null;
  }
  kernelReset(): void {
    this.resets++;
  }
  setWriter(writer: string | null): void {
    this.writers.push(writer);
  }
  writers: Array<string | null> = [];
}

const insert = {
  protocol: 'rlm/1',
  op: 'insert_cell',
  run_id: 'r',
  after_cell_id: 'a',
  cell: { id: 'c', cell_type: 'code', source: '' }
};
const started = {
  protocol: 'rlm/1',
  op: 'cell_started',
  run_id: 'r',
  cell_id: 'c',
  msg_id: 'rlm-c-1'
};

describe('NotebookLink', () => {
  let kernel: FakeKernel;
  let session: FakeSession;
  let live: Live;
  let takeover: Takeover;
  let link: NotebookLink;

  beforeEach(() => {
    kernel = new FakeKernel();
    session = new FakeSession(kernel);
    live = new Live();
    takeover = new Takeover(live);
    link = new NotebookLink(
      session as unknown as LinkSession,
      () => 'work/a.ipynb',
      live,
      takeover
    );
  });

  it('registers the comm target and says hello on a comm of its own', () => {
    expect(kernel.targets).toEqual(new Set(['rlm']));
    expect(kernel.comms).toHaveLength(1);
    expect(kernel.comms[0].target).toBe('rlm');
    const [hello] = kernel.sent();
    expect(hello).toMatchObject({
      protocol: 'rlm/1',
      op: 'hello',
      notebook_path: 'work/a.ipynb',
      features: ['ops']
    });
    expect(hello.client_id).toMatch(/^[0-9a-f-]{36}$/);
    expect(kernel.comms[0].closed).toBe(false);
  });

  it('hands live ops, a batch in order, to the live handler only', () => {
    kernel.publish('comm_open', { data: insert });
    kernel.publish('comm_msg', {
      data: { protocol: 'rlm/1', op: 'ops', ops: [insert, started] }
    });
    expect(live.batches.map(b => b.map(op => op.op))).toEqual([
      ['insert_cell'],
      ['insert_cell', 'cell_started']
    ]);
    expect(takeover.ops).toEqual([]);
    expect(live.routed).toEqual([]);
  });

  it('hands take-over ops to the take-over handler and sends its answer', () => {
    kernel.publish('comm_msg', {
      data: { protocol: 'rlm/1', op: 'cell_metadata', cell_id: 'x', rlm: {} }
    });
    kernel.publish('comm_msg', {
      data: { protocol: 'rlm/1', op: 'get_cells', request_id: 'hello' }
    });
    expect(takeover.ops.map(op => op.op)).toEqual([
      'cell_metadata',
      'get_cells'
    ]);
    expect(live.batches).toEqual([]);
    // hello, then the answer on a comm opened and closed for it
    expect(kernel.comms).toHaveLength(2);
    expect(kernel.comms[1].opened).toEqual([
      { protocol: 'rlm/1', op: 'cells', request_id: 'hello', cells: [] }
    ]);
    expect(kernel.comms[1].closed).toBe(true);
  });

  it('has the live handler apply what it queued before a take-over op', () => {
    kernel.publish('comm_msg', { data: insert });
    expect(live.flushes).toBe(0);
    kernel.publish('comm_msg', {
      data: { protocol: 'rlm/1', op: 'get_cells', request_id: 'q' }
    });
    expect(live.batches).toHaveLength(1);
    expect(takeover.flushesSeen).toEqual([1]);
  });

  it('routes other iopub messages, and no comm message', () => {
    kernel.publish('stream', { name: 'stdout', text: 'hi' }, 'rlm-c-1');
    kernel.publish('comm_msg', { data: { method: 'update', state: {} } });
    expect(live.routed).toHaveLength(1);
    expect(live.batches).toEqual([]);
    expect(takeover.ops).toEqual([]);
  });

  it('says hello again on every reconnect, closing its previous comm', () => {
    kernel.connectionStatusChanged.emit('connecting');
    kernel.connectionStatusChanged.emit('connected');
    expect(kernel.sent().map(d => d.op)).toEqual(['hello', 'hello']);
    expect(kernel.comms[0].closed).toBe(true);
    expect(kernel.comms[1].closed).toBe(false);
  });

  it('resets the take-over side when the kernel restarts', () => {
    const before = takeover.resets;
    kernel.statusChanged.emit('busy');
    kernel.statusChanged.emit('restarting');
    kernel.statusChanged.emit('autorestarting');
    expect(takeover.resets - before).toBe(2);
  });

  it('follows the session to a new kernel and leaves the old one', () => {
    const resets = takeover.resets;
    const next = new FakeKernel();
    session.change(next);
    expect(kernel.targets.size).toBe(0);
    expect(kernel.comms[0].closed).toBe(true);
    expect(takeover.resets).toBe(resets + 1);
    expect(next.sent().map(d => d.op)).toEqual(['hello']);

    kernel.publish('comm_msg', { data: insert });
    expect(live.batches).toEqual([]);
    next.publish('comm_msg', { data: insert });
    expect(live.batches).toHaveLength(1);
  });

  it('tells both sides who writes: unknown until the kernel says', () => {
    expect(live.writers).toEqual([null]);
    expect(takeover.writers).toEqual([null]);
    kernel.publish('comm_msg', {
      data: { protocol: 'rlm/1', op: 'writer', writer: 'server' }
    });
    expect(live.writers).toEqual([null, 'server']);
    expect(takeover.writers).toEqual([null, 'server']);
    expect(live.batches).toEqual([]);
    expect(takeover.ops).toEqual([]);
    // another kernel: unknown again until that one says
    session.change(new FakeKernel());
    expect(live.writers.at(-1)).toBe(null);
  });

  it('waits for a kernel that is not connected yet', () => {
    const next = new FakeKernel();
    next.connectionStatus = 'connecting';
    session.change(next);
    expect(next.comms).toEqual([]);
    next.connectionStatus = 'connected';
    next.connectionStatusChanged.emit('connected');
    expect(next.sent().map(d => d.op)).toEqual(['hello']);
  });

  it('sends nothing and hands nothing on once disposed', () => {
    link.dispose();
    expect(link.isDisposed).toBe(true);
    expect(kernel.targets.size).toBe(0);
    kernel.publish('comm_msg', { data: insert });
    kernel.connectionStatusChanged.emit('connected');
    link.send(cellsReply('1', []));
    expect(live.batches).toEqual([]);
    expect(kernel.comms).toHaveLength(1);
  });
});
