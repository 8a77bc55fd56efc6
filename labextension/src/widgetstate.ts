/**
 * Keeps a reopened run's widget state through the next save.
 *
 * When a new kernel connects, the ipywidgets manager drops the models it
 * restored from the notebook, and its next save would write an empty state:
 * the sub-call widgets of a saved run would then show "Loading widget..."
 * forever. The state read at load is merged back under whatever the manager
 * writes, so models it still has win and restored ones are kept.
 */
import type { NotebookPanel } from '@jupyterlab/notebook';

export const WIDGETS_KEY = 'widgets';
const STATE_MIME = 'application/vnd.jupyter.widget-state+json';

type WidgetState = Record<string, unknown>;

interface IWidgetsMetadata {
  [STATE_MIME]?: { state?: WidgetState; [key: string]: unknown };
}

/** The model states in a notebook's `widgets` metadata (a copy). */
export function stateOf(value: unknown): WidgetState {
  const meta = (value ?? {}) as IWidgetsMetadata;
  return { ...(meta[STATE_MIME]?.state ?? {}) };
}

export function keepRestoredWidgetState(panel: NotebookPanel): void {
  const context = panel.context;
  void context.ready.then(() => {
    const model = context.model;
    const restored = stateOf(model.getMetadata(WIDGETS_KEY));
    if (Object.keys(restored).length === 0) {
      return;
    }
    model.metadataChanged.connect((_, change) => {
      if (change.key !== WIDGETS_KEY) {
        return;
      }
      const current = stateOf(change.newValue);
      const missing = Object.keys(restored).filter(id => !(id in current));
      if (missing.length === 0) {
        return;
      }
      const meta = (change.newValue ?? {}) as IWidgetsMetadata;
      const entry = meta[STATE_MIME] ?? { version_major: 2, version_minor: 0 };
      model.setMetadata(WIDGETS_KEY, {
        ...meta,
        [STATE_MIME]: { ...entry, state: { ...restored, ...current } }
      });
    });
  });
}
