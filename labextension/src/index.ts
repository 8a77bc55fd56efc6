/**
 * rlm-kernel frontend: live cells for Recursive Language Model runs.
 *
 * Works in JupyterLab and Notebook 7: it needs only the notebook tracker; the
 * status bar and the settings registry are used when present.
 */
import { IJupyterWidgetRegistry } from '@jupyter-widgets/base';
import type {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import {
  INotebookTracker,
  type Notebook,
  type NotebookPanel
} from '@jupyterlab/notebook';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';
import type { IDisposable } from '@lumino/disposable';

import { markAgentCells } from './badge';
import { NotebookLink } from './link';
import { LiveNotebook } from './live';
import { runsPanelPlugin } from './panel';
import { cellExecutorPlugin } from './superseded';
import { saveWidgetState } from './settings';
import { ReplayStatusItem, RunStatusItem } from './statusbar';
import { Takeover, takeoverPlugin } from './takeover';
import { MODULE_NAME, MODULE_VERSION } from './subcall_module';
import { keepRestoredWidgetState } from './widgetstate';
import { renderLostWidgetViews } from './widgetviews';

const PLUGIN_ID = 'rlm-kernel:plugin';

type Context = NotebookPanel['context'];

/**
 * What the extension keeps for one notebook document: its link to the
 * kernel and the two handlers the link feeds.
 */
class RlmNotebook implements IDisposable {
  constructor(context: Context, views: () => Notebook[]) {
    this.live = new LiveNotebook(context, views);
    this.takeover = new Takeover(context);
    this.link = new NotebookLink(
      context.sessionContext,
      () => context.path,
      this.live,
      this.takeover
    );
  }

  readonly live: LiveNotebook;
  readonly takeover: Takeover;

  get isDisposed(): boolean {
    return this.link.isDisposed;
  }

  dispose(): void {
    this.link.dispose();
    this.live.dispose();
    this.takeover.dispose();
  }

  private readonly link: NotebookLink;
}

function activate(
  app: JupyterFrontEnd,
  tracker: INotebookTracker,
  statusBar: IStatusBar | null,
  settings: ISettingRegistry | null
): void {
  // One link per document context: several views of one notebook share a
  // model and a kernel, and must not insert, route or answer twice.
  const notebooks = new Map<Context, RlmNotebook>();

  const track = (panel: NotebookPanel) => {
    const context = panel.context;
    if (!notebooks.has(context)) {
      const notebook = new RlmNotebook(context, () =>
        tracker.filter(p => p.context === context).map(p => p.content)
      );
      notebooks.set(context, notebook);
      context.disposed.connect(() => {
        notebooks.delete(context);
        notebook.dispose();
      });
    }
    markAgentCells(panel);
    keepRestoredWidgetState(panel);
    renderLostWidgetViews(panel);
  };
  tracker.forEach(track);
  tracker.widgetAdded.connect((_, panel) => track(panel));

  if (statusBar) {
    const runItem = new RunStatusItem();
    const replayItem = new ReplayStatusItem();
    const follow = () => {
      const panel = tracker.currentWidget;
      const notebook = panel ? notebooks.get(panel.context) : undefined;
      runItem.source = notebook?.live ?? null;
      replayItem.source = notebook?.takeover ?? null;
    };
    tracker.currentChanged.connect(follow);
    tracker.widgetAdded.connect(follow);
    follow();
    statusBar.registerStatusItem(PLUGIN_ID, {
      item: runItem,
      align: 'left',
      rank: 100,
      isActive: () => runItem.isActive,
      activeStateChanged: runItem.activeChanged
    });
    statusBar.registerStatusItem('rlm-kernel:replay-status', {
      item: replayItem,
      align: 'left',
      rank: 101,
      isActive: () => replayItem.isActive,
      activeStateChanged: replayItem.activeChanged
    });
  }

  if (settings) {
    void app.restored.then(() => saveWidgetState(app, settings));
  }

  console.log('rlm-kernel: extension activated');
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'Live cells, take-over ops and run status for rlm-kernel.',
  autoStart: true,
  requires: [INotebookTracker],
  optional: [IStatusBar, ISettingRegistry],
  activate
};

/** The sub-call list, a widget model and view of our own (subcall_list.ts). */
const subcallListPlugin: JupyterFrontEndPlugin<void> = {
  id: 'rlm-kernel:subcall-list',
  description: 'The windowed, filterable list of a batch of sub-calls.',
  autoStart: true,
  requires: [IJupyterWidgetRegistry],
  activate: (_: JupyterFrontEnd, registry: IJupyterWidgetRegistry) => {
    registry.registerWidget({
      name: MODULE_NAME,
      version: MODULE_VERSION,
      exports: async () => {
        const { SubcallListModel, SubcallListView } = await import(
          './subcall_list'
        );
        return { SubcallListModel, SubcallListView };
      }
    });
  }
};

export default [
  plugin,
  runsPanelPlugin,
  takeoverPlugin,
  subcallListPlugin,
  cellExecutorPlugin
];
