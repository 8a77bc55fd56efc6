/**
 * Message shapes of the live protocol `rlm/1` (docs/live-protocol.md).
 *
 * Kernel-to-frontend ops arrive as the `data` of `comm_open` / `comm_msg`
 * iopub messages; the extension reads them from `kernel.iopubMessage`.
 */
import type * as nbformat from '@jupyterlab/nbformat';
import type { JSONObject } from '@lumino/coreutils';

export const PROTOCOL = 'rlm/1';
export const COMM_TARGET = 'rlm';

/** Roles whose cells the root model wrote (they get the agent marker). */
export const AGENT_ROLES: ReadonlySet<string> = new Set([
  'thought',
  'code',
  'answer'
]);

interface IOpBase {
  protocol: typeof PROTOCOL;
  run_id: string;
}

export interface IRunStarted extends IOpBase {
  op: 'run_started';
  anchor_cell_id: string;
  parent_msg_id: string;
  query: string;
  max_iterations: number;
  depth: number;
}

/** A cell announced by the kernel; `source` may be a string or nbformat lines. */
export interface IAnnouncedCell {
  id: string;
  cell_type: nbformat.CellType;
  source: nbformat.MultilineString;
  metadata?: JSONObject;
}

export interface IInsertCell extends IOpBase {
  op: 'insert_cell';
  after_cell_id: string;
  cell: IAnnouncedCell;
}

export interface ICellStarted extends IOpBase {
  op: 'cell_started';
  cell_id: string;
  msg_id: string;
}

export type CellStatus = 'ok' | 'error' | 'interrupted' | 'skipped';

export interface ICellFinished extends IOpBase {
  op: 'cell_finished';
  cell_id: string;
  execution_count: number | null;
  status: CellStatus;
  /** The cell's final `metadata.rlm` value, merged into what the cell has. */
  metadata?: JSONObject;
}

export interface IStatus extends IOpBase {
  op: 'status';
  state: 'running' | 'ended';
  iteration: number;
  max_iterations: number;
  depth: number;
  subcalls: number;
  tokens: number;
  cost_usd: number | null;
  elapsed_s: number;
  reason?: string;
}

export interface IRunEnded extends IOpBase {
  op: 'run_ended';
  reason: string;
  answer_cell_id: string | null;
}

export interface IResync extends IOpBase {
  op: 'resync';
  anchor_cell_id: string;
  cells: nbformat.ICell[];
}

export type KernelOp =
  | IRunStarted
  | IInsertCell
  | ICellStarted
  | ICellFinished
  | IStatus
  | IRunEnded
  | IResync;

/**
 * Several ops of a run that the kernel queued (until a cell starts, the run
 * ends or a short window passes) and sent as one message; applied in order,
 * exactly as if they had come one by one.
 */
export interface IOps {
  protocol: typeof PROTOCOL;
  op: 'ops';
  ops: unknown[];
}

export interface IHello {
  protocol: typeof PROTOCOL;
  op: 'hello';
  notebook_path: string;
  client_id: string;
  /** Optional protocol additions this frontend understands. */
  features: string[];
}

/**
 * The kernel session's sub-call totals for cells run again (a person's
 * cells, re-run agent cells, Run All): answered from the notebook
 * (`replayed`) or by a model call (`fresh`). Sent with the `cell_metadata`
 * op of a cell's sub-call records.
 */
export interface IReplayCounts {
  replayed: number;
  fresh: number;
}

/** `ops`: this frontend reads several ops sent as one `ops` message. */
export const FEATURES = ['ops'];

const KERNEL_OPS: ReadonlySet<string> = new Set([
  'run_started',
  'insert_cell',
  'cell_started',
  'cell_finished',
  'status',
  'run_ended',
  'resync'
]);

/**
 * Return `data` as a kernel op when it speaks `rlm/1`, else null.
 *
 * Only the envelope is checked: the kernel is the single writer of these
 * messages, and unknown ops are ignored so that a newer kernel does not break
 * an older extension.
 */
export function asKernelOp(data: unknown): KernelOp | null {
  if (typeof data !== 'object' || data === null) {
    return null;
  }
  const record = data as Record<string, unknown>;
  if (
    record.protocol !== PROTOCOL ||
    typeof record.op !== 'string' ||
    !KERNEL_OPS.has(record.op) ||
    typeof record.run_id !== 'string'
  ) {
    return null;
  }
  return data as KernelOp;
}

/**
 * The kernel ops `data` carries, in order: one op, the members of an `ops`
 * message, or none.
 */
export function kernelOps(data: unknown): KernelOp[] {
  const record = data as Partial<IOps> | null;
  if (
    typeof record === 'object' &&
    record !== null &&
    record.protocol === PROTOCOL &&
    record.op === 'ops' &&
    Array.isArray(record.ops)
  ) {
    const ops: KernelOp[] = [];
    for (const member of record.ops) {
      const op = asKernelOp(member);
      if (op) {
        ops.push(op);
      }
    }
    return ops;
  }
  const op = asKernelOp(data);
  return op ? [op] : [];
}

const SYNTHETIC_MSG_ID = /^rlm-(.+)-(\d+)$/;

/**
 * The cell id named by a synthetic parent msg_id `rlm-<cell id>-<n>`, else
 * null. Cell ids may contain dashes, so only the last `-<n>` is stripped.
 */
export function cellIdFromMsgId(msgId: string): string | null {
  const match = SYNTHETIC_MSG_ID.exec(msgId);
  return match ? match[1] : null;
}
