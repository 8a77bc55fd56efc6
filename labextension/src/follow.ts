/**
 * The page follows a run: while a run writes cells, each notebook view
 * scrolls to the newest one, unless the person has scrolled away from it;
 * then a "Jump to the latest step" control appears, which scrolls back and
 * follows again. Scrolling back to the newest cell by hand follows again too.
 */
import type { Notebook } from '@jupyterlab/notebook';
import type { IDisposable } from '@lumino/disposable';

/** How long after a wheel, touch or key press a scroll counts as the person's. */
const INTENT_MS = 800;

/**
 * The shortest time between two scrolls to the newest cell. Every scroll of
 * the notebook runs every code editor's scroll handler, so a run whose cells
 * come faster than this (a model that answers at once) is followed a few
 * times a second, not once a frame; its end is always shown.
 */
const SCROLL_EVERY_MS = 250;

interface IView {
  notebook: Notebook;
  following: boolean;
  intentAt: number;
  button: HTMLButtonElement;
  listeners: Array<[EventTarget, string, EventListener]>;
}

export class RunFollower implements IDisposable {
  constructor(private readonly views: () => Notebook[]) {}

  get isDisposed(): boolean {
    return this.disposed;
  }

  dispose(): void {
    if (this.disposed) {
      return;
    }
    this.disposed = true;
    this.stop();
  }

  /** A run began: follow it in every view. */
  start(): void {
    this.running = true;
    for (const view of this.attach()) {
      view.following = true;
      this.showButton(view);
    }
  }

  /** The run ended: nothing to follow. */
  stop(): void {
    if (this.frame !== null) {
      // The run's last cells (its answer) came with its end: show them.
      cancelAnimationFrame(this.frame);
      this.frame = null;
      window.clearTimeout(this.later);
      for (const view of this.attached.values()) {
        if (view.following) {
          this.scrollToNewest(view);
        }
      }
    }
    this.running = false;
    for (const view of this.attached.values()) {
      view.button.remove();
      for (const [target, type, listener] of view.listeners) {
        target.removeEventListener(type, listener);
      }
    }
    this.attached.clear();
  }

  /** `cellId` is the run's newest cell (inserted, or written into). */
  newest(cellId: string): void {
    this.newestId = cellId;
    if (!this.running || this.frame !== null) {
      return;
    }
    const scroll = () => {
      this.frame = requestAnimationFrame(() => {
        this.frame = null;
        this.scrolledAt = performance.now();
        for (const view of this.attach()) {
          if (view.following) {
            this.scrollToNewest(view);
          }
        }
      });
    };
    const wait = this.scrolledAt + SCROLL_EVERY_MS - performance.now();
    if (wait <= 0) {
      scroll();
    } else {
      this.frame = -1; // pending: a later frame scrolls to whichever cell is newest then
      this.later = window.setTimeout(scroll, wait);
    }
  }

  private attach(): IView[] {
    const views: IView[] = [];
    for (const notebook of this.views()) {
      let view = this.attached.get(notebook);
      if (!view) {
        view = this.makeView(notebook);
        this.attached.set(notebook, view);
      }
      views.push(view);
    }
    return views;
  }

  private makeView(notebook: Notebook): IView {
    const button = document.createElement('button');
    button.className = 'rlm-jump-latest jp-mod-styled';
    button.type = 'button';
    button.textContent = '↓ Jump to the latest step';
    button.title = 'Scroll to the newest cell of the run and follow it again';
    const view: IView = { notebook, following: true, intentAt: 0, button, listeners: [] };
    button.addEventListener('click', () => {
      view.following = true;
      this.showButton(view);
      this.scrollToNewest(view);
    });
    const intent = () => {
      view.intentAt = performance.now();
    };
    const onScroll = () => {
      if (performance.now() - view.intentAt > INTENT_MS) {
        return; // our own scrolling, or the notebook growing
      }
      view.following = this.newestInView(view);
      this.showButton(view);
    };
    const node = notebook.outerNode; // what scrolls
    for (const [type, listener] of [
      ['wheel', intent],
      ['touchmove', intent],
      ['keydown', intent],
      ['mousedown', intent],
      ['scroll', onScroll]
    ] as Array<[string, EventListener]>) {
      node.addEventListener(type, listener, { passive: true });
      view.listeners.push([node, type, listener]);
    }
    return view;
  }

  private showButton(view: IView): void {
    const show = this.running && !view.following && this.newestId !== null;
    const host = view.notebook.node; // positioned by its layout: the button floats over the cells
    if (show && view.button.parentElement !== host) {
      host.appendChild(view.button);
    } else if (!show) {
      view.button.remove();
    }
  }

  private newestIndex(notebook: Notebook): number {
    const id = this.newestId;
    if (id === null) {
      return -1;
    }
    return notebook.widgets.findIndex(widget => widget.model.id === id);
  }

  private newestInView(view: IView): boolean {
    const index = this.newestIndex(view.notebook);
    if (index < 0) {
      return false;
    }
    const cell = view.notebook.widgets[index].node;
    if (!cell.isConnected) {
      return false; // a windowed notebook leaves cells out of view unrendered
    }
    const outer = view.notebook.outerNode.getBoundingClientRect();
    const rect = cell.getBoundingClientRect();
    return rect.top < outer.bottom && rect.bottom > outer.top - 40 && rect.bottom <= outer.bottom + 120;
  }

  private scrollToNewest(view: IView): void {
    const index = this.newestIndex(view.notebook);
    if (index >= 0) {
      void view.notebook.scrollToItem(index, 'end').catch(() => undefined);
    }
  }

  private disposed = false;
  private running = false;
  private newestId: string | null = null;
  private frame: number | null = null;
  private later = 0;
  private scrolledAt = -Infinity;
  private readonly attached = new Map<Notebook, IView>();
}
