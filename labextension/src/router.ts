/**
 * Routing of iopub messages into agent cells.
 *
 * The kernel runs each agent cell's code under a synthetic parent header whose
 * msg_id names the cell. Nobody else owns those msg_ids, so the outputs would
 * be dropped unless this router puts them into the cell's output model, the
 * way an OutputArea does for its own execute request.
 */
import type { ICodeCellModel } from '@jupyterlab/cells';
import type * as nbformat from '@jupyterlab/nbformat';
import type { KernelMessage } from '@jupyterlab/services';

import { cellIdFromMsgId, type IShownOutput } from './protocol';

/** Finds the code cell model for a cell id, or null. */
export type CodeCellLookup = (cellId: string) => ICodeCellModel | null;

interface IDisplaySlot {
  cellId: string;
  index: number;
}

export class OutputRouter {
  constructor(private readonly lookup: CodeCellLookup) {}

  /** Route messages whose parent msg_id is `msgId` into `cellId`. */
  follow(msgId: string, cellId: string): void {
    this.byMsgId.set(msgId, cellId);
    this.stopped.delete(cellId);
  }

  /** Stop routing into these cells (their run ended). */
  stop(cellIds: Iterable<string>): void {
    for (const cellId of cellIds) {
      this.stopped.add(cellId);
      this.dropDisplays(cellId);
    }
    for (const [msgId, cellId] of this.byMsgId) {
      if (this.stopped.has(cellId)) {
        this.byMsgId.delete(msgId);
      }
    }
  }

  /**
   * Replace the outputs of `cellId` with `outputs` (a cell a reload emptied),
   * remembering where each display sits so its later updates land there.
   */
  restore(cellId: string, outputs: readonly IShownOutput[]): void {
    const cell = this.lookup(cellId);
    if (!cell) {
      return;
    }
    this.dropDisplays(cellId);
    this.clearPending.delete(cellId);
    cell.outputs.clear();
    for (const { transient, ...output } of outputs) {
      cell.outputs.add(output as nbformat.IOutput);
      const displayId = displayIdOf(transient);
      if (displayId) {
        const slots = this.displays.get(displayId) ?? [];
        slots.push({ cellId, index: cell.outputs.length - 1 });
        this.displays.set(displayId, slots);
      }
    }
  }

  /** Whether messages with this parent msg_id go into an agent cell (if it is here). */
  routes(msgId: string): boolean {
    const cellId = this.cellFor(msgId);
    return cellId !== null && !this.stopped.has(cellId);
  }

  /** Put `msg` into its agent cell; returns whether it was routed. */
  route(msg: KernelMessage.IIOPubMessage): boolean {
    const parent = msg.parent_header as Partial<KernelMessage.IHeader>;
    const msgId = parent.msg_id;
    const cellId = msgId ? this.cellFor(msgId) : null;
    if (cellId === null || this.stopped.has(cellId)) {
      return false;
    }
    const cell = this.lookup(cellId);
    if (!cell) {
      return false;
    }
    // Not inside a notebook transaction: the code cell model mirrors its
    // outputs into the shared model under a mutex, and a transaction would
    // delay the echo past it, adding every output twice. Output and count
    // changes are kept out of the undo history by the shared model itself.
    this.apply(cellId, cell, msg);
    return true;
  }

  private apply(
    cellId: string,
    cell: ICodeCellModel,
    msg: KernelMessage.IIOPubMessage
  ): void {
    const content = msg.content as Record<string, unknown>;
    switch (msg.header.msg_type) {
      case 'execute_input':
        // Show [*] while it runs; the count arrives with cell_finished
        // (setting it now would mark the cell idle).
        cell.executionState = 'running';
        break;
      case 'stream':
      case 'error':
        this.add(cellId, cell, {
          ...content,
          output_type: msg.header.msg_type
        } as nbformat.IOutput);
        break;
      case 'display_data':
      case 'execute_result': {
        const { transient, ...rest } = content;
        this.add(cellId, cell, {
          ...rest,
          output_type: msg.header.msg_type
        } as nbformat.IOutput);
        const displayId = displayIdOf(transient);
        if (displayId) {
          const slots = this.displays.get(displayId) ?? [];
          slots.push({ cellId, index: cell.outputs.length - 1 });
          this.displays.set(displayId, slots);
        }
        break;
      }
      case 'update_display_data': {
        const displayId = displayIdOf(content.transient);
        for (const slot of this.displays.get(displayId ?? '') ?? []) {
          const target = this.lookup(slot.cellId);
          if (target && slot.index < target.outputs.length) {
            target.outputs.set(slot.index, {
              output_type: 'display_data',
              data: content.data as nbformat.IMimeBundle,
              metadata: (content.metadata ?? {}) as nbformat.OutputMetadata
            });
          }
        }
        break;
      }
      case 'clear_output': {
        const wait = content.wait === true;
        cell.outputs.clear(wait);
        if (wait) {
          this.clearPending.add(cellId);
        } else {
          this.dropDisplays(cellId);
        }
        break;
      }
      default:
        break;
    }
  }

  /**
   * The cell a msg_id's messages go to. A page that missed `cell_started`
   * (reload mid-run) still routes by the msg_id's form.
   */
  private cellFor(msgId: string): string | null {
    return this.byMsgId.get(msgId) ?? cellIdFromMsgId(msgId);
  }

  private add(cellId: string, cell: ICodeCellModel, output: nbformat.IOutput) {
    // A waiting clear empties the outputs on this add, so the display slots
    // recorded for the cell point at nothing afterwards.
    if (this.clearPending.delete(cellId)) {
      this.dropDisplays(cellId);
    }
    cell.outputs.add(output);
  }

  private dropDisplays(cellId: string): void {
    for (const [displayId, slots] of this.displays) {
      const kept = slots.filter(slot => slot.cellId !== cellId);
      if (kept.length) {
        this.displays.set(displayId, kept);
      } else {
        this.displays.delete(displayId);
      }
    }
  }

  private readonly byMsgId = new Map<string, string>();
  private readonly stopped = new Set<string>();
  private readonly displays = new Map<string, IDisplaySlot[]>();
  private readonly clearPending = new Set<string>();
}

function displayIdOf(transient: unknown): string | null {
  if (typeof transient !== 'object' || transient === null) {
    return null;
  }
  const id = (transient as { display_id?: unknown }).display_id;
  return typeof id === 'string' && id ? id : null;
}
