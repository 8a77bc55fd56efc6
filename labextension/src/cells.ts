/**
 * Cell edits on the notebook model: inserting announced cells with their ids,
 * and changes that should not clutter the undo history.
 */
import { type ICellModel, type ICodeCellModel, isCodeCellModel } from '@jupyterlab/cells';
import type * as nbformat from '@jupyterlab/nbformat';
import type { INotebookModel } from '@jupyterlab/notebook';

import { asDict } from './json';

/** A cell to insert: an nbformat cell whose id is required. */
export type NewCell = Partial<nbformat.ICell> & {
  id: string;
  cell_type: nbformat.CellType;
};

/**
 * Cell models found so far, by notebook and id. A live run looks cells up by
 * id for every op and routed output, so scanning the notebook each time
 * would cost O(cells) per message. A model stays valid until it is disposed
 * (its cell was deleted, moved or the notebook reloaded).
 */
const found = new WeakMap<INotebookModel, Map<string, ICellModel>>();

export function cellIndex(model: INotebookModel, cellId: string): number {
  const cell = cellById(model, cellId);
  return cell ? model.sharedModel.cells.indexOf(cell.sharedModel) : -1;
}

export function cellById(
  model: INotebookModel,
  cellId: string
): ICellModel | null {
  let byId = found.get(model);
  if (!byId) {
    byId = new Map();
    found.set(model, byId);
  }
  const known = byId.get(cellId);
  if (known && !known.isDisposed && known.id === cellId) {
    return known;
  }
  byId.delete(cellId);
  const cells = model.cells;
  for (let i = 0; i < cells.length; i++) {
    const cell = cells.get(i);
    if (cell.id === cellId) {
      byId.set(cellId, cell);
      return cell;
    }
  }
  return null;
}

export function codeCellById(
  model: INotebookModel,
  cellId: string
): ICodeCellModel | null {
  const cell = cellById(model, cellId);
  return cell && isCodeCellModel(cell) ? cell : null;
}

/**
 * Insert `cell` right after `afterId`, keeping its id, and trust it (an
 * untrusted cell shows widget views as plain text). Inserting a cell that is
 * already there returns the existing model. Returns null when `afterId` is not
 * in the notebook.
 *
 * Each insert is its own undo item: the undo manager would otherwise merge a
 * burst of inserts, and one undo would remove a whole run.
 */
export function insertCellAfter(
  model: INotebookModel,
  afterId: string,
  cell: NewCell
): ICellModel | null {
  const existing = cellById(model, cell.id);
  if (existing) {
    return existing;
  }
  const after = cellIndex(model, afterId);
  if (after < 0) {
    return null;
  }
  // Outputs are added after trusting the cell: trusting swaps every output
  // model, and a stream output swapped that way stops showing later appends.
  const { outputs, ...rest } = cell as Partial<nbformat.ICodeCell> & NewCell;
  const shared = model.sharedModel;
  stopCapturing(shared);
  shared.insertCell(after + 1, {
    ...rest,
    ...(rest.cell_type === 'code' ? { outputs: [] } : {}),
    metadata: rest.metadata ?? {}
  });
  stopCapturing(shared);
  const inserted = model.cells.get(after + 1);
  inserted.trusted = true;
  if (outputs?.length && isCodeCellModel(inserted)) {
    for (const output of outputs) {
      inserted.outputs.add(output);
    }
  }
  return inserted;
}

/**
 * Run a metadata change that should not become an undo item. Not for outputs:
 * a code cell model mirrors them into the shared model under a mutex, and a
 * surrounding transaction delays the echo past it (every output twice).
 */
export function untracked(model: INotebookModel, change: () => void): void {
  model.sharedModel.transact(change, false);
}

/** Merge `patch` into the cell's `metadata.rlm`. */
export function mergeRlmMetadata(
  cell: ICellModel,
  patch: Readonly<Record<string, unknown>>
): void {
  const base = asDict(cell.getMetadata('rlm')) ?? {};
  cell.setMetadata('rlm', { ...base, ...patch } as nbformat.IBaseCellMetadata);
}

/**
 * The notebook's shared model is a YNotebook at runtime; its undo manager is
 * not part of the public ISharedNotebook interface, so reach it defensively.
 */
function stopCapturing(shared: object): void {
  const manager = (shared as { undoManager?: { stopCapturing?: () => void } | null })
    .undoManager;
  manager?.stopCapturing?.();
}
