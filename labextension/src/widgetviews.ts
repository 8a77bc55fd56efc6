/**
 * Renders again a saved run's widget view that ipywidgets gave up on.
 *
 * When a saved notebook is opened, the ipywidgets manager (jupyterlab-manager
 * 3.0) restores widgets twice: once from the kernel and the notebook, and once
 * from the kernel alone when the kernel connects. If the second ends first, it
 * marks the manager restored before the notebook's models are in, and a view
 * rendered in between shows "Error displaying widget: model not found" for
 * good (its renderer only retries while the manager is not restored). That
 * happens on a busy machine. A view whose model is in the notebook's saved
 * state is rendered again, a few times with growing waits, until its model is
 * found; one whose model was never saved is left as ipywidgets shows it.
 */
import type { NotebookPanel } from '@jupyterlab/notebook';

import { stateOf, WIDGETS_KEY } from './widgetstate';

export const LOST_VIEW = 'Error displaying widget: model not found';
const VIEW_MIME = 'application/vnd.jupyter.widget-view+json';
/** Waits before each new try, in ms: about 15 s in all. */
export const RETRY_MS = [150, 300, 600, 1200, 2500, 5000, 5000];
/** How long after the notebook opens lost views are looked for. */
const WATCH_MS = 120_000;

/** An output's mime model, as the renderer reads it. */
export interface IMimeModelLike {
  readonly data: Readonly<Record<string, unknown>>;
}

/** What is used of ipywidgets' renderer (a Lumino widget). */
export interface ILostView {
  readonly node: { textContent: string | null };
  readonly isDisposed: boolean;
  renderModel(model: IMimeModelLike): Promise<void>;
  removeClass(name: string): void;
}

function sleep(ms: number): Promise<void> {
  return new Promise(resolve => setTimeout(resolve, ms));
}

/**
 * Render `view` again until it no longer shows the lost-model error; true
 * when it did, false when it still does after the last try (or went away).
 */
export async function renderAgain(
  view: ILostView,
  model: IMimeModelLike,
  delays: readonly number[] = RETRY_MS,
  wait: (ms: number) => Promise<void> = sleep
): Promise<boolean> {
  for (const ms of delays) {
    await wait(ms);
    if (view.isDisposed) {
      return false;
    }
    if (view.node.textContent !== LOST_VIEW) {
      return true;
    }
    // ipywidgets adds the class with the error and drops it when it retries itself
    view.removeClass('jupyter-widgets');
    try {
      await view.renderModel(model);
    } catch {
      // the renderer shows its own error; try again
    }
    if (!view.isDisposed && view.node.textContent !== LOST_VIEW) {
      return true;
    }
  }
  return false;
}

interface IOutputItem {
  readonly node: HTMLElement;
  readonly widgets?: readonly unknown[];
}

interface IOutputArea {
  readonly widgets: readonly IOutputItem[];
  readonly model: { readonly length: number; get(index: number): IMimeModelLike };
}

/** The renderer inside an output area's item (a panel of prompt and output). */
function rendererOf(item: IOutputItem): ILostView | null {
  const children = (item.widgets ?? [item]) as unknown[];
  for (const child of children) {
    const view = child as Partial<ILostView> & { node?: HTMLElement };
    if (
      view.node?.classList?.contains('jp-OutputArea-output') &&
      typeof view.renderModel === 'function'
    ) {
      return view as ILostView;
    }
  }
  return null;
}

export function renderLostWidgetViews(panel: NotebookPanel): void {
  void panel.context.ready.then(() => {
    const saved = new Set(
      Object.keys(stateOf(panel.context.model.getMetadata(WIDGETS_KEY)))
    );
    if (saved.size === 0) {
      return;
    }
    const trying = new WeakSet<object>();
    const scan = (): void => {
      for (const cell of panel.content.widgets) {
        const area = (cell as unknown as { outputArea?: IOutputArea })
          .outputArea;
        if (!area || cell.model.type !== 'code') {
          continue;
        }
        const count = Math.min(area.widgets.length, area.model.length);
        for (let i = 0; i < count; i++) {
          const view = rendererOf(area.widgets[i]);
          if (!view || trying.has(view) || view.node.textContent !== LOST_VIEW) {
            continue;
          }
          const model = area.model.get(i);
          const id = (model.data[VIEW_MIME] as { model_id?: string } | undefined)
            ?.model_id;
          if (!id || !saved.has(id)) {
            continue;
          }
          trying.add(view);
          void renderAgain(view, model).then(shown => {
            trying.delete(view);
            console.info(
              shown
                ? `rlm-kernel: rendered the saved widget view ${id} again (ipywidgets had lost its model)`
                : `rlm-kernel: the saved widget view ${id} still has no model`
            );
          });
        }
      }
    };
    let due = false;
    const observer = new MutationObserver(records => {
      if (due) {
        return;
      }
      // only a text node reading the error starts a scan: cheap for every other change
      const lost = records.some(record =>
        Array.from(record.addedNodes).some(
          node => node.nodeType === Node.TEXT_NODE && node.nodeValue === LOST_VIEW
        )
      );
      if (lost) {
        due = true;
        setTimeout(() => {
          due = false;
          scan();
        }, 0);
      }
    });
    observer.observe(panel.content.node, { childList: true, subtree: true });
    scan();
    const stop = (): void => observer.disconnect();
    setTimeout(stop, WATCH_MS);
    panel.disposed.connect(stop);
  });
}
