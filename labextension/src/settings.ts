/**
 * Saved notebooks keep their widget views only when the ipywidgets manager
 * saves widget state, which is off by default. Sub-call widgets are part of
 * the trajectory, so turn it on, unless the user chose a value themselves.
 */
import type { JupyterFrontEnd } from '@jupyterlab/application';
import type { ISettingRegistry } from '@jupyterlab/settingregistry';

export const WIDGET_MANAGER_PLUGIN = '@jupyter-widgets/jupyterlab-manager:plugin';

export async function saveWidgetState(
  app: JupyterFrontEnd,
  registry: ISettingRegistry
): Promise<void> {
  if (!app.hasPlugin(WIDGET_MANAGER_PLUGIN)) {
    return;
  }
  try {
    const settings = await registry.load(WIDGET_MANAGER_PLUGIN);
    const saveState = settings.get('saveState');
    if (saveState.user === undefined && saveState.composite !== true) {
      await settings.set('saveState', true);
    }
  } catch (error) {
    console.warn('rlm-kernel: could not turn on widget state saving', error);
  }
}
