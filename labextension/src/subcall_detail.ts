/**
 * The pane below a batch's list: the clicked row's prompt, folded, and its
 * response. Folds of what the batch's prompts share open in place (the
 * widget's state has their text); the rest of a call's own part is in the
 * kernel only, so its fold opens the editor on that call.
 */
import { foldLabel, formatMeta, type Fold, type IRow } from './subcall_rows';

export interface IDetailOptions {
  /** how many prompts the batch has */
  prompts: number;
  /** the text of the shared folds */
  sharedHead: string;
  sharedTail: string;
  /** the batch's images as small data URLs, by hash */
  thumbs: Record<string, string>;
  /** a kernel is there to open the editor */
  canEdit: boolean;
  edit: () => void;
  close: () => void;
}

export function renderDetail(
  pane: HTMLElement,
  row: IRow,
  index: number,
  options: IDetailOptions
): void {
  pane.textContent = '';
  const head = pane.appendChild(div('rlm-sc-detail-head'));
  head.appendChild(span('rlm-sc-detail-title')).textContent =
    `#${index + 1} · ${row.s} · ${formatMeta(row)}`;
  const close = head.appendChild(document.createElement('button'));
  close.className = 'rlm-sc-detail-close';
  close.textContent = '✕';
  close.title = 'Close';
  close.addEventListener('click', options.close);
  if (row.i.length > 0) {
    pane.appendChild(div('rlm-sc-label')).textContent =
      `Images (${row.i.length})`;
    const images = pane.appendChild(div('rlm-sc-images'));
    for (const hash of row.i) {
      const img = images.appendChild(document.createElement('img'));
      img.className = 'rlm-sc-thumb';
      img.alt = `image ${hash}`;
      img.title = `image ${hash}`;
      const url = options.thumbs[hash] ?? '';
      if (url.startsWith('data:image/')) {
        img.src = url;
      }
    }
  }
  pane.appendChild(div('rlm-sc-label')).textContent =
    `Prompt (${row.n.toLocaleString('en')} characters)`;
  const prompt = pane.appendChild(div('rlm-sc-prompt'));
  for (const part of row.v) {
    if (typeof part === 'string') {
      prompt.appendChild(document.createTextNode(part));
    } else {
      prompt.appendChild(foldButton(part, options));
    }
  }
  pane.appendChild(div('rlm-sc-label')).textContent = 'Response';
  const response = pane.appendChild(document.createElement('pre'));
  response.className = 'rlm-sc-response';
  response.textContent = row.r;
  if (row.rn > row.r.length) {
    const more = pane.appendChild(div('rlm-sc-more'));
    more.textContent = `… ${(row.rn - row.r.length).toLocaleString('en')} more characters: the editor (✎ Edit) shows them all.`;
  }
}

function foldButton(part: Fold, options: IDetailOptions): HTMLElement {
  const [kind, chars] = part;
  const shared = kind === 'head' || kind === 'tail';
  const button = document.createElement('button');
  button.className = 'rlm-sc-fold';
  button.dataset.kind = kind;
  const where = shared ? '' : options.canEdit ? ' (open in the editor)' : '';
  button.textContent = `▸ ${foldLabel(kind, chars, options.prompts)}${where}`;
  button.addEventListener('click', () => {
    if (!shared) {
      if (options.canEdit) {
        options.edit();
      }
      return;
    }
    const text = kind === 'head' ? options.sharedHead : options.sharedTail;
    const opened = span('rlm-sc-fold-text');
    opened.textContent = text;
    if (chars > text.length) {
      opened.appendChild(span('rlm-sc-fold-more')).textContent =
        ` … ${(chars - text.length).toLocaleString('en')} more characters: the editor shows them all.`;
    }
    button.replaceWith(opened);
  });
  return button;
}

export function div(className: string): HTMLElement {
  const el = document.createElement('div');
  el.className = className;
  return el;
}

export function span(className: string): HTMLElement {
  const el = document.createElement('span');
  el.className = className;
  return el;
}
