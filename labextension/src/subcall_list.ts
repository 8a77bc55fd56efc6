/**
 * The rows of a batch of sub-calls as one widget: a windowed list (only the
 * rows in view are in the page), filterable by status and by text, a detail
 * pane for the row a person clicks, and an edit action on every row.
 *
 * The model keeps every row: they come in its state when it opens (and
 * when a reloaded page asks the kernel for it), then as `rows` custom
 * messages carrying only the rows that changed. Since the rows stay in the
 * model's state, saving the notebook saves them, and a reopened notebook
 * shows the list without a kernel. The kernel side is
 * rlm_kernel/widgets/batch_view.py; docs/live-protocol.md has the messages.
 */
import {
  DOMWidgetModel,
  DOMWidgetView,
  type WidgetModel
} from '@jupyter-widgets/base';

import { div, renderDetail, span } from './subcall_detail';
import { MODULE_NAME, MODULE_VERSION } from './subcall_module';
import {
  applyRows,
  asRow,
  countStatuses,
  filterRows,
  formatMeta,
  type IRow,
  STATUSES,
  visibleRange
} from './subcall_rows';


const ROW_HEIGHT = 26; // px; style/subcall_list.css gives rows this height
const VISIBLE_ROWS = 10; // past this many rows the list scrolls and can be filtered
const OVERSCAN = 8; // rows drawn above and below the ones in view

export class SubcallListModel extends DOMWidgetModel {
  defaults(): Record<string, unknown> {
    return {
      ...super.defaults(),
      _model_name: 'SubcallListModel',
      _model_module: MODULE_NAME,
      _model_module_version: MODULE_VERSION,
      _view_name: 'SubcallListView',
      _view_module: MODULE_NAME,
      _view_module_version: MODULE_VERSION,
      rows: [],
      prompts: 0,
      shared_head: '',
      shared_tail: '',
      editable: false,
      editing: -1,
      thumbs: {}
    };
  }

  initialize(
    attributes: Record<string, unknown>,
    options: Parameters<WidgetModel['initialize']>[1]
  ): void {
    super.initialize(attributes, options);
    this.normalize();
    this.on('change:rows', this.normalize, this);
    this.on('msg:custom', this.onCustom, this);
  }

  /** Every row; updated in place, so the saved state is always current. */
  get rows(): IRow[] {
    return this.get('rows') as IRow[];
  }

  private normalize(): void {
    const rows = this.get('rows');
    if (!Array.isArray(rows)) {
      this.set('rows', [], { silent: true });
      return;
    }
    for (let i = 0; i < rows.length; i++) {
      rows[i] = asRow(rows[i]);
    }
  }

  private onCustom(content: { type?: string; rows?: unknown }): void {
    if (content?.type === 'rows') {
      const changed = applyRows(this.rows, content.rows);
      if (changed.length > 0) {
        this.trigger('rows:changed', changed);
      }
    }
  }
}

interface IDrawn {
  row: IRow;
  pos: number;
  marks: string;
}

export class SubcallListView extends DOMWidgetView {
  render(): void {
    this.el.classList.add('rlm-sc-list');
    this.filters = this.el.appendChild(div('rlm-sc-filters'));
    this.chips = this.filters.appendChild(div('rlm-sc-chips'));
    for (const status of ['', ...STATUSES]) {
      const chip = document.createElement('button');
      chip.className = 'rlm-sc-chip';
      chip.dataset.status = status;
      chip.addEventListener('click', () => this.setStatus(status));
      this.chips.appendChild(chip);
    }
    this.search = document.createElement('input');
    this.search.type = 'search';
    this.search.className = 'rlm-sc-filter-text';
    this.search.placeholder = 'Filter by text';
    this.search.addEventListener('input', () => {
      this.text = this.search.value;
      this.refilter();
    });
    this.filters.appendChild(this.search);
    this.shownNote = this.filters.appendChild(div('rlm-sc-shown'));
    this.scroller = this.el.appendChild(div('rlm-sc-scroll'));
    this.spacer = this.scroller.appendChild(div('rlm-sc-spacer'));
    this.empty = this.el.appendChild(div('rlm-sc-empty'));
    this.empty.textContent = 'No sub-call matches the filter.';
    this.detail = this.el.appendChild(div('rlm-sc-detail'));
    this.scroller.addEventListener('scroll', () => this.schedule(), {
      passive: true
    });
    this.spacer.addEventListener('click', event => this.onClick(event));

    this.listenTo(this.model, 'rows:changed', () => this.rowsChanged());
    this.listenTo(this.model, 'change:rows', () => {
      this.clear();
      this.rowsChanged();
    });
    for (const name of ['change:editing', 'change:editable', 'comm_live_update']) {
      this.listenTo(this.model, name, () => {
        this.redrawAll = true;
        this.schedule();
      });
    }
    this.rowsChanged();
  }

  remove(): void {
    if (this.frame) {
      cancelAnimationFrame(this.frame);
      this.frame = 0;
    }
    super.remove();
  }

  private get rows(): IRow[] {
    return (this.model as SubcallListModel).rows;
  }

  private get canEdit(): boolean {
    return !!this.model.get('editable') && this.model.comm_live;
  }

  private rowsChanged(): void {
    this.countsDirty = true;
    this.filterDirty = this.status !== '' || this.text.trim() !== '';
    this.schedule();
  }

  private setStatus(status: string): void {
    this.status = this.status === status ? '' : status;
    this.refilter();
  }

  private refilter(): void {
    this.filterDirty = true;
    this.shown = null;
    this.scroller.scrollTop = 0;
    this.schedule();
  }

  /** Draw on the next frame (however many changes come before it). */
  private schedule(): void {
    if (!this.frame) {
      this.frame = requestAnimationFrame(() => this.draw());
    }
  }

  private clear(): void {
    this.drawn.clear();
    this.spacer.textContent = '';
    this.pool = [];
  }

  private draw(): void {
    this.frame = 0;
    const rows = this.rows;
    const total = rows.length;
    const scrolls = total > VISIBLE_ROWS;
    this.el.classList.toggle('rlm-sc-list-long', scrolls);
    if (this.countsDirty) {
      this.countsDirty = false;
      this.drawChips(countStatuses(rows), total);
    }
    if (this.filterDirty) {
      this.filterDirty = false;
      this.shown = filterRows(rows, this.status, this.text);
    }
    const shown = this.shown;
    const count = shown ? shown.length : total;
    const viewport = Math.max(1, Math.min(count, VISIBLE_ROWS)) * ROW_HEIGHT;
    this.scroller.style.height = `${viewport}px`;
    this.spacer.style.height = `${count * ROW_HEIGHT}px`;
    this.empty.style.display = count === 0 && total > 0 ? '' : 'none';
    this.shownNote.textContent = shown
      ? `${count.toLocaleString('en')} of ${total.toLocaleString('en')} shown`
      : '';

    const [start, end] = visibleRange(
      this.scroller.scrollTop,
      viewport,
      ROW_HEIGHT,
      count,
      OVERSCAN
    );
    const editing = this.model.get('editing') as number;
    const canEdit = this.canEdit;
    const next = new Map<number, HTMLElement>();
    for (let pos = start; pos < end; pos++) {
      const index = shown ? shown[pos] : pos;
      const el = this.drawn.get(index);
      if (el) {
        next.set(index, el);
      }
    }
    for (const [index, el] of this.drawn) {
      if (!next.has(index)) {
        el.remove();
        this.pool.push(el);
      }
    }
    for (let pos = start; pos < end; pos++) {
      const index = shown ? shown[pos] : pos;
      let el = next.get(index);
      if (!el) {
        el = this.pool.pop() ?? this.makeRow();
        this.spacer.appendChild(el);
        next.set(index, el);
      }
      const marks = `${index === this.selected}${index === editing}${canEdit}`;
      const drawn = this.state.get(el);
      if (
        this.redrawAll ||
        !drawn ||
        drawn.row !== rows[index] ||
        drawn.pos !== pos ||
        drawn.marks !== marks ||
        el.dataset.index !== String(index)
      ) {
        this.fillRow(el, index, pos, rows[index], editing, canEdit);
        this.state.set(el, { row: rows[index], pos, marks });
      }
    }
    this.drawn = next;
    this.redrawAll = false;
    this.drawDetail();
  }

  private drawChips(counts: Record<string, number>, total: number): void {
    for (const chip of Array.from(this.chips.children) as HTMLElement[]) {
      const status = chip.dataset.status ?? '';
      const n = status ? counts[status] ?? 0 : total;
      chip.textContent = `${status || 'all'} ${n.toLocaleString('en')}`;
      chip.classList.toggle('rlm-sc-chip-on', status === this.status);
      chip.style.display = n > 0 || status === this.status || !status ? '' : 'none';
    }
  }

  private makeRow(): HTMLElement {
    const el = div('rlm-sc-row');
    for (const name of ['num', 'status', 'flags', 'preview', 'answer', 'meta']) {
      el.appendChild(span(`rlm-sc-${name}`));
    }
    const edit = document.createElement('button');
    edit.className = 'rlm-sc-row-edit';
    edit.textContent = '✎ Edit';
    edit.title = 'Edit this response (and its prompt) and pin it';
    el.appendChild(edit);
    return el;
  }

  private fillRow(
    el: HTMLElement,
    index: number,
    pos: number,
    row: IRow,
    editing: number,
    canEdit: boolean
  ): void {
    el.dataset.index = String(index);
    el.dataset.status = row.s;
    el.style.top = `${pos * ROW_HEIGHT}px`;
    el.classList.toggle('rlm-sc-selected', index === this.selected);
    el.classList.toggle('rlm-sc-editing', index === editing);
    const [num, status, flags, preview, answer, meta, edit] = Array.from(
      el.children
    ) as HTMLElement[];
    num.textContent = `#${index + 1}`;
    status.textContent = row.s;
    flags.textContent = '';
    for (const name of row.g) {
      const flag = flags.appendChild(span(`rlm-sc-flag rlm-sc-${name}`));
      flag.textContent = name;
    }
    preview.textContent = row.i.length > 0 ? `[${row.i.length} image${row.i.length === 1 ? '' : 's'}] ${row.p}` : row.p;
    preview.title = row.p;
    answer.textContent = row.r ? `→ ${oneLine(row.r)}` : '';
    meta.textContent = formatMeta(row);
    edit.style.display = canEdit && row.s !== 'queued' && row.s !== 'running' ? '' : 'none';
  }

  private onClick(event: MouseEvent): void {
    const target = event.target as HTMLElement;
    const rowEl = target.closest('.rlm-sc-row') as HTMLElement | null;
    if (!rowEl) {
      return;
    }
    const index = Number(rowEl.dataset.index);
    if (target.closest('.rlm-sc-row-edit')) {
      this.selected = index;
      this.model.send({ type: 'edit', index }, {});
    } else {
      this.selected = this.selected === index ? -1 : index;
    }
    this.schedule();
  }

  /** The pane below the list: the clicked row's prompt (folded) and response. */
  private drawDetail(): void {
    const index = this.selected;
    const row = index >= 0 ? this.rows[index] : undefined;
    if (!row) {
      this.detail.style.display = 'none';
      this.detailOf = null;
      return;
    }
    this.detail.style.display = '';
    if (this.detailOf === row) {
      return;
    }
    this.detailOf = row;
    renderDetail(this.detail, row, index, {
      prompts: this.model.get('prompts') as number,
      sharedHead: String(this.model.get('shared_head')),
      sharedTail: String(this.model.get('shared_tail')),
      thumbs: (this.model.get('thumbs') ?? {}) as Record<string, string>,
      canEdit: this.canEdit,
      edit: () => this.model.send({ type: 'edit', index }, {}),
      close: () => {
        this.selected = -1;
        this.schedule();
      }
    });
  }

  private filters!: HTMLElement;
  private chips!: HTMLElement;
  private search!: HTMLInputElement;
  private shownNote!: HTMLElement;
  private scroller!: HTMLElement;
  private spacer!: HTMLElement;
  private empty!: HTMLElement;
  private detail!: HTMLElement;
  private frame = 0;
  private status = '';
  private text = '';
  private shown: number[] | null = null;
  private countsDirty = true;
  private filterDirty = false;
  private redrawAll = false;
  private selected = -1;
  private detailOf: IRow | null = null;
  private drawn = new Map<number, HTMLElement>();
  private pool: HTMLElement[] = [];
  private state = new WeakMap<HTMLElement, IDrawn>();
}

function oneLine(text: string): string {
  return text.slice(0, 300).replace(/\s+/g, ' ');
}
