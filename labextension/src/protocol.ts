/**
 * Message shapes of the protocol `rlm/1` (docs/live-protocol.md): every op
 * the kernel and the page exchange, declared once, and the parsers the link
 * reads kernel messages with. Pure: no JupyterLab code at runtime.
 *
 * Kernel-to-frontend ops arrive as the `data` of `comm_open` / `comm_msg`
 * iopub messages; the extension reads them from `kernel.iopubMessage`.
 * Two families share the comm: live ops (they carry a `run_id`, and may come
 * batched in an `ops` message) and take-over ops (no `run_id`, never batched).
 */
import type * as nbformat from '@jupyterlab/nbformat';
import type { JSONObject } from '@lumino/coreutils';

import { asDict, asString, type Dict } from './json';

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
  /** The run this one is a follow-up of (its `%%rlm` cell is marked with it). */
  follows?: string | null;
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

/**
 * More of a draft cell's text: a streaming root reply is being written into
 * it (the cell was inserted with `metadata.rlm.draft`).
 */
export interface ICellText extends IOpBase {
  op: 'cell_text';
  cell_id: string;
  source: string;
}

/** Drafts the reply took back (a retried reply; a draft that changed kind). */
export interface IRemoveCells extends IOpBase {
  op: 'remove_cells';
  cell_ids: string[];
}

/** The root call of the step, while it runs. */
export interface IRootPhase {
  /** `thinking`: no token yet; `writing`: the reply streams in. */
  phase: 'thinking' | 'writing';
  /** Seconds since the call began. */
  elapsed_s: number;
  /** About how many tokens were written so far. */
  tokens: number;
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
  /** Of a cell that did not run (`skipped`): its outputs (the note saying why). */
  outputs?: nbformat.IOutput[];
}

export interface IStatus extends IOpBase {
  op: 'status';
  state: 'running' | 'ended';
  iteration: number;
  max_iterations: number;
  depth: number;
  subcalls: number;
  /** Of `subcalls`: waiting for a place, and with a model call (or child run) going on. */
  subcalls_running?: number;
  subcalls_queued?: number;
  tokens: number;
  cost_usd: number | null;
  /** The sum of the known prices, when some call's price is unknown. */
  known_cost_usd?: number;
  /** Of the prompt tokens: read from the provider's prompt cache, and written to it. */
  cache_read_tokens?: number;
  cache_write_tokens?: number;
  /** How many times this run's history was compacted. */
  compactions?: number;
  elapsed_s: number;
  reason?: string;
  /** While the step's root call runs (else null or absent). */
  root?: IRootPhase | null;
  /** `approval` while a step's code waits for a person's answer (`--approve`). */
  waiting?: 'approval' | null;
}

export interface IRunEnded extends IOpBase {
  op: 'run_ended';
  reason: string;
  answer_cell_id: string | null;
}

/** An output as the kernel last showed it; a display's id is in `transient`. */
export type IShownOutput = nbformat.IOutput & {
  transient?: { display_id?: string };
};

/** The anchor cell as the kernel shows it: what a reload took from it. */
export interface IResyncAnchor {
  /** Its own execution count (the page sets it when its request ends). */
  execution_count: number | null;
  /** Its outputs so far (the run's status line...); null when unknown. */
  outputs: IShownOutput[] | null;
}

/** A code cell of the page as the run found it when it started. */
export interface IPageCell {
  id: string;
  source: string;
  execution_count: number | null;
  outputs: nbformat.IOutput[];
}

export interface IResync extends IOpBase {
  op: 'resync';
  anchor_cell_id: string;
  cells: nbformat.ICell[];
  /** The msg_id of the anchor's execute request (its outputs' parent). */
  parent_msg_id?: string | null;
  anchor?: IResyncAnchor | null;
  /** The page's other code cells as the run started (their outputs). */
  page_cells?: IPageCell[];
  /** The run's newest status (a reloaded page's status bar). */
  status?: IStatus | null;
  /**
   * The run has ended: this page missed it (closed mid-run, opened after).
   * It adds the cells it lacks, nothing more, and says so.
   */
  ended?: boolean;
  /** Where the cells come from: the kernel that ran it, or its journal on disk. */
  source?: 'kernel' | 'journal';
  /** How the run ended. */
  reason?: string | null;
}

/** A live op: kernel -> frontend, about one run (`run_id`). */
export type KernelOp =
  | IRunStarted
  | IInsertCell
  | ICellText
  | IRemoveCells
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

// -- Take-over ops (kernel -> frontend; no run_id, never batched) ----------

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

interface ITakeoverBase {
  protocol: typeof PROTOCOL;
}

/** Send the notebook's cells (answered with `cells`). */
export interface IGetCells extends ITakeoverBase {
  op: 'get_cells';
  request_id: string;
}

/**
 * Merge `rlm` into the `metadata.rlm` of the cells (sub-call records, a
 * pin, `superseded`). On the wire the cells are named by `cell_id` or
 * `cell_ids`; parsed, always by `cell_ids`.
 */
export interface ICellMetadata extends ITakeoverBase {
  op: 'cell_metadata';
  cell_ids: string[];
  rlm: Record<string, unknown> | null;
  /** With a cell's sub-call records: the kernel session's totals. */
  replay: IReplayCounts | null;
}

/** A person edited a generated cell at an approval prompt. */
export interface ICellSource extends ITakeoverBase {
  op: 'cell_source';
  /** Parsed from the wire's `cell_id` (or `cell_ids`). */
  cell_ids: string[];
  source: string;
  /** Merged into the cell's `metadata.rlm`. */
  metadata: Record<string, unknown> | null;
}

/** Remove an old continuation a person chose to drop. */
export interface IDeleteCells extends ITakeoverBase {
  op: 'delete_cells';
  cell_ids: string[];
}

/** Move the cells, in order, to right after `after_cell_id`. */
export interface IMoveCells extends ITakeoverBase {
  op: 'move_cells';
  cell_ids: string[];
  after_cell_id: string;
}

export type TakeoverOp =
  IGetCells | ICellMetadata | ICellSource | IDeleteCells | IMoveCells;

/**
 * Who writes a run's cells into this notebook: each page its own copy
 * (`page`), or, under real-time collaboration, the Jupyter server into the
 * shared document (`server`), the pages then only showing them. The kernel
 * says so after every `hello`.
 */
export type Writer = 'server' | 'page';

// -- Frontend -> kernel ops --------------------------------------------------

/** Sent on every (re)connect, on a comm the page opens. */
export interface IHello {
  protocol: typeof PROTOCOL;
  op: 'hello';
  notebook_path: string;
  client_id: string;
  /** Optional protocol additions this frontend understands. */
  features: string[];
}

/** The answer to `get_cells`: every cell as nbformat JSON, outputs included. */
export interface ICells {
  protocol: typeof PROTOCOL;
  op: 'cells';
  request_id: string;
  cells: nbformat.ICell[];
}

export type FrontendOp = IHello | ICells;

/** `ops`: this frontend reads several ops sent as one `ops` message. */
export const FEATURES: readonly string[] = ['ops'];

export function hello(notebookPath: string, clientId: string): IHello {
  return {
    protocol: PROTOCOL,
    op: 'hello',
    notebook_path: notebookPath,
    client_id: clientId,
    features: [...FEATURES]
  };
}

export function cellsReply(requestId: string, cells: nbformat.ICell[]): ICells {
  return { protocol: PROTOCOL, op: 'cells', request_id: requestId, cells };
}

// -- Parsing -----------------------------------------------------------------

const KERNEL_OPS: ReadonlySet<string> = new Set([
  'run_started',
  'insert_cell',
  'cell_text',
  'remove_cells',
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

/** The cells an op names: its `cell_ids` (the strings in it), else `cell_id`. */
function cellIdsOf(record: Dict): string[] {
  if (Array.isArray(record.cell_ids)) {
    return record.cell_ids.filter((id): id is string => typeof id === 'string');
  }
  return typeof record.cell_id === 'string' && record.cell_id
    ? [record.cell_id]
    : [];
}

function replayOf(value: unknown): IReplayCounts | null {
  const dict = asDict(value);
  return dict &&
    typeof dict.replayed === 'number' &&
    typeof dict.fresh === 'number'
    ? { replayed: dict.replayed, fresh: dict.fresh }
    : null;
}

/**
 * Return `data` as a take-over op when it speaks `rlm/1`, else null. The op
 * comes back in its parsed form: missing fields get their neutral value (no
 * cells, empty strings, null), so the frontend applies what it can.
 */
export function asTakeoverOp(data: unknown): TakeoverOp | null {
  const record = asDict(data);
  if (!record || record.protocol !== PROTOCOL) {
    return null;
  }
  const protocol = PROTOCOL;
  switch (record.op) {
    case 'get_cells':
      return {
        protocol,
        op: 'get_cells',
        request_id: asString(record.request_id) ?? ''
      };
    case 'cell_metadata':
      return {
        protocol,
        op: 'cell_metadata',
        cell_ids: cellIdsOf(record),
        rlm: asDict(record.rlm),
        replay: replayOf(record.replay)
      };
    case 'cell_source':
      return {
        protocol,
        op: 'cell_source',
        cell_ids: cellIdsOf(record),
        source: asString(record.source) ?? '',
        metadata: asDict(record.metadata)
      };
    case 'delete_cells':
      return { protocol, op: 'delete_cells', cell_ids: cellIdsOf(record) };
    case 'move_cells':
      return {
        protocol,
        op: 'move_cells',
        cell_ids: cellIdsOf(record),
        after_cell_id: asString(record.after_cell_id) ?? ''
      };
    default:
      return null;
  }
}

/** What one kernel message's `data` carries for this frontend. */
export interface IKernelMessageOps {
  /** Live ops, in order: one op, or the members of an `ops` message. */
  live: KernelOp[];
  /** A take-over op (they are never batched). */
  takeover: TakeoverOp | null;
  /** Who writes the runs' cells (the `writer` op), else null. */
  writer: Writer | null;
}

/** The writer a `writer` op names, else null. */
export function writerOf(data: unknown): Writer | null {
  const record = asDict(data);
  if (!record || record.protocol !== PROTOCOL || record.op !== 'writer') {
    return null;
  }
  return record.writer === 'server' ? 'server' : 'page';
}

/** Read the `data` of a kernel's `comm_open` / `comm_msg`. */
export function readKernelMessage(data: unknown): IKernelMessageOps {
  const live = kernelOps(data);
  const writer = live.length ? null : writerOf(data);
  return {
    live,
    takeover: live.length || writer ? null : asTakeoverOp(data),
    writer
  };
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
