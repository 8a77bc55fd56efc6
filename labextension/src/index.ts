/**
 * rlm-kernel frontend: live cells for Recursive Language Model runs.
 *
 * Works in JupyterLab and Notebook 7: it needs only the notebook tracker; the
 * status bar and the settings registry are used when present.
 */
import type {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { INotebookTracker, type NotebookPanel } from '@jupyterlab/notebook';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';

import { markAgentCells } from './badge';
import { LiveNotebook } from './live';
import { runsPanelPlugin } from './panel';
import { saveWidgetState } from './settings';
import { RunStatusItem } from './statusbar';
import { takeoverPlugin } from './takeover';
import { keepRestoredWidgetState } from './widgetstate';

const PLUGIN_ID = 'rlm-kernel:plugin';

type Context = NotebookPanel['context'];

function activate(
  app: JupyterFrontEnd,
  tracker: INotebookTracker,
  statusBar: IStatusBar | null,
  settings: ISettingRegistry | null
): void {
  // One live notebook per document context: several views of one notebook
  // share a model and a kernel, and must not insert or route twice.
  const lives = new Map<Context, LiveNotebook>();

  const liveFor = (panel: NotebookPanel): LiveNotebook => {
    const context = panel.context;
    let live = lives.get(context);
    if (!live) {
      const created = new LiveNotebook(context, () =>
        tracker.filter(p => p.context === context).map(p => p.content)
      );
      lives.set(context, created);
      context.disposed.connect(() => {
        lives.delete(context);
        created.dispose();
      });
      live = created;
    }
    return live;
  };

  const track = (panel: NotebookPanel) => {
    liveFor(panel);
    markAgentCells(panel);
    keepRestoredWidgetState(panel);
  };
  tracker.forEach(track);
  tracker.widgetAdded.connect((_, panel) => track(panel));

  if (statusBar) {
    const item = new RunStatusItem();
    const follow = () => {
      const panel = tracker.currentWidget;
      item.source = panel ? lives.get(panel.context) ?? null : null;
    };
    tracker.currentChanged.connect(follow);
    tracker.widgetAdded.connect(follow);
    follow();
    statusBar.registerStatusItem(PLUGIN_ID, {
      item,
      align: 'left',
      rank: 100,
      isActive: () => item.isActive,
      activeStateChanged: item.activeChanged
    });
  }

  if (settings) {
    void app.restored.then(() => saveWidgetState(app, settings));
  }

  console.log('rlm-kernel: extension activated');
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'Live cells and run status for rlm-kernel.',
  autoStart: true,
  requires: [INotebookTracker],
  optional: [IStatusBar, ISettingRegistry],
  activate
};

export default [plugin, runsPanelPlugin, takeoverPlugin];
