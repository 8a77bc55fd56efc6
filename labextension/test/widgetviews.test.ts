import { describe, expect, it } from 'vitest';

import { type ILostView, LOST_VIEW, renderAgain } from '../src/widgetviews';

/** ipywidgets' renderer as the race leaves it: lost until its model is in. */
class View implements ILostView {
  node = { textContent: LOST_VIEW as string | null };
  isDisposed = false;
  classes = new Set(['jupyter-widgets']);
  renders = 0;
  constructor(private foundAfter: number) {}
  async renderModel(): Promise<void> {
    this.renders++;
    this.node.textContent = 'Loading widget...';
    await Promise.resolve();
    this.node.textContent = this.renders >= this.foundAfter ? 'six of six done' : LOST_VIEW;
    if (this.node.textContent === LOST_VIEW) {
      this.classes.add('jupyter-widgets');
    }
  }
  removeClass(name: string): void {
    this.classes.delete(name);
  }
}

const model = { data: { 'application/vnd.jupyter.widget-view+json': { model_id: 'm1' } } };
const waited: number[] = [];
const noWait = async (ms: number): Promise<void> => {
  waited.push(ms);
};

describe('a lost widget view', () => {
  it('is rendered again until its model is found', async () => {
    waited.length = 0;
    const view = new View(3);
    expect(await renderAgain(view, model, [1, 2, 3, 4, 5], noWait)).toBe(true);
    expect(view.renders).toBe(3);
    expect(waited).toEqual([1, 2, 3]);
    expect(view.node.textContent).toBe('six of six done');
    expect(view.classes.has('jupyter-widgets')).toBe(false);
  });

  it('is left as it is after the last try', async () => {
    const view = new View(99);
    expect(await renderAgain(view, model, [1, 2], noWait)).toBe(false);
    expect(view.renders).toBe(2);
    expect(view.node.textContent).toBe(LOST_VIEW);
  });

  it('is not rendered once ipywidgets has rendered it itself, or once it is gone', async () => {
    const shown = new View(1);
    shown.node.textContent = 'six of six done';
    expect(await renderAgain(shown, model, [1], noWait)).toBe(true);
    expect(shown.renders).toBe(0);
    const gone = new View(1);
    gone.isDisposed = true;
    expect(await renderAgain(gone, model, [1], noWait)).toBe(false);
    expect(gone.renders).toBe(0);
  });
});
