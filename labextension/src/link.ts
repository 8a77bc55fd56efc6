/**
 * The transport: one link per notebook document, following its session's
 * kernel. It is the only reader of the `rlm` comm on the page.
 *
 * On every kernel (re)connect the link registers the `rlm` comm target (so a
 * comm the kernel opens stays open) and opens its own comm carrying `hello`.
 * Ops are read from `kernel.iopubMessage`, not from a comm object, so a page
 * that never saw the kernel's `comm_open` (a reload mid-run) still gets them.
 * Each message is parsed once and handed on: live ops to the live handler,
 * take-over ops to the take-over handler, other iopub messages to the live
 * handler's output routing.
 */
import type { ISessionContext } from '@jupyterlab/apputils';
import type { Kernel, KernelMessage } from '@jupyterlab/services';
import { type JSONObject, UUID } from '@lumino/coreutils';
import type { IDisposable } from '@lumino/disposable';

import {
  COMM_TARGET,
  type FrontendOp,
  hello,
  type KernelOp,
  readKernelMessage,
  type TakeoverOp,
  type Writer
} from './protocol';

/** Where live ops and the messages they route go (LiveNotebook). */
export interface ILiveHandler {
  /** The live ops of one kernel message, in order. */
  applyOps(ops: readonly KernelOp[]): void;
  /** Any iopub message that is not a comm message (output routing). */
  routeIOPub(msg: KernelMessage.IIOPubMessage): void;
  /** Apply at once what the two above left for later. */
  flush(): void;
  /**
   * Who writes the runs' cells: this page, or the server (the page then only
   * shows them); null: not known yet (another kernel, until it says).
   */
  setWriter(writer: Writer | null): void;
}

/** Where take-over ops go (Takeover). */
export interface ITakeoverHandler {
  /** Apply one op; an op returned is the answer, sent to the kernel. */
  applyTakeover(op: TakeoverOp): FrontendOp | null;
  /** Another kernel, or this one restarting: what the old one said is void. */
  kernelReset(): void;
  /** Who writes the notebook: under `server`, ops that change it are the server's to apply. */
  setWriter(writer: Writer | null): void;
}

/** The part of a session the link follows. */
export type LinkSession = Pick<ISessionContext, 'session' | 'kernelChanged'>;

/** One id per page, so the kernel can tell reloaded pages apart. */
const CLIENT_ID = UUID.uuid4();

export class NotebookLink implements IDisposable {
  constructor(
    private readonly session: LinkSession,
    private readonly notebookPath: () => string,
    private readonly live: ILiveHandler,
    private readonly takeover: ITakeoverHandler
  ) {
    session.kernelChanged.connect(this.onKernelChanged, this);
    this.attach(session.session?.kernel ?? null);
  }

  get isDisposed(): boolean {
    return this.disposed;
  }

  dispose(): void {
    if (this.disposed) {
      return;
    }
    this.disposed = true;
    this.session.kernelChanged.disconnect(this.onKernelChanged, this);
    this.attach(null);
  }

  /**
   * Send `op` to the kernel on a comm of its own, closed at once (the
   * kernel reads the open's data). Dropped when no kernel is connected.
   */
  send(op: FrontendOp): void {
    const kernel = this.kernel;
    if (!kernel || kernel.isDisposed) {
      return;
    }
    const comm = kernel.createComm(COMM_TARGET);
    try {
      // nbformat's cell interfaces are JSON, though not typed as JSONObject
      comm.open(op as unknown as JSONObject);
      comm.close();
    } catch (error) {
      console.warn(`rlm-kernel: could not send ${op.op}`, error);
    }
  }

  private onKernelChanged(
    _: unknown,
    change: { newValue: Kernel.IKernelConnection | null }
  ): void {
    this.attach(change.newValue);
  }

  private attach(kernel: Kernel.IKernelConnection | null): void {
    const old = this.kernel;
    if (old && !old.isDisposed) {
      old.iopubMessage.disconnect(this.onIOPubMessage, this);
      old.connectionStatusChanged.disconnect(this.onConnectionStatus, this);
      old.statusChanged.disconnect(this.onKernelStatus, this);
      old.removeCommTarget(COMM_TARGET, acceptKernelComm);
    }
    this.closeOwnComm();
    this.kernel = kernel;
    if (!this.disposed) {
      this.takeover.kernelReset();
      this.setWriter(null); // until the new kernel says
    }
    if (!kernel) {
      return;
    }
    kernel.registerCommTarget(COMM_TARGET, acceptKernelComm);
    kernel.iopubMessage.connect(this.onIOPubMessage, this);
    kernel.connectionStatusChanged.connect(this.onConnectionStatus, this);
    kernel.statusChanged.connect(this.onKernelStatus, this);
    if (kernel.connectionStatus === 'connected') {
      this.sendHello();
    }
  }

  /** Restarts and dropped websockets both end in a fresh 'connected'. */
  private onConnectionStatus(
    _: Kernel.IKernelConnection,
    status: Kernel.ConnectionStatus
  ): void {
    if (status === 'connected') {
      this.sendHello();
    }
  }

  private onKernelStatus(
    _: Kernel.IKernelConnection,
    status: KernelMessage.Status
  ): void {
    if (status === 'restarting' || status === 'autorestarting') {
      this.takeover.kernelReset();
    }
  }

  private setWriter(writer: Writer | null): void {
    this.live.setWriter(writer);
    this.takeover.setWriter(writer);
  }

  /** Open the page's own comm with `hello` (the previous one is closed). */
  private sendHello(): void {
    const kernel = this.kernel;
    if (!kernel || kernel.isDisposed) {
      return;
    }
    this.closeOwnComm();
    const comm = kernel.createComm(COMM_TARGET);
    comm.onClose = () => {
      if (this.comm === comm) {
        this.comm = null;
      }
    };
    this.comm = comm;
    try {
      comm.open({ ...hello(this.notebookPath(), CLIENT_ID) });
    } catch (error) {
      // The kernel went away between the status change and now; the next
      // 'connected' sends hello again.
      console.warn('rlm-kernel: could not send hello', error);
    }
  }

  private closeOwnComm(): void {
    const comm = this.comm;
    this.comm = null;
    if (comm && !comm.isDisposed) {
      try {
        comm.close();
      } catch {
        comm.dispose();
      }
    }
  }

  private onIOPubMessage(
    _: Kernel.IKernelConnection,
    msg: KernelMessage.IIOPubMessage
  ): void {
    const type = msg.header.msg_type;
    if (type !== 'comm_open' && type !== 'comm_msg') {
      this.live.routeIOPub(msg);
      return;
    }
    const { live, takeover, writer } = readKernelMessage(
      (msg.content as { data?: unknown }).data
    );
    if (writer) {
      this.live.flush(); // what came before was for the writer it had then
      this.setWriter(writer);
    }
    if (live.length) {
      this.live.applyOps(live);
    }
    if (takeover) {
      // It reads or changes the notebook: the live ops before it go first.
      this.live.flush();
      const answer = this.takeover.applyTakeover(takeover);
      if (answer) {
        this.send(answer);
      }
    }
  }

  private kernel: Kernel.IKernelConnection | null = null;
  private comm: Kernel.IComm | null = null;
  private disposed = false;
}

/**
 * Target for comms the kernel opens. Accepting is all it does: the ops they
 * carry are read from iopub, and a registered target is what stops the
 * frontend from closing the kernel's comm straight away.
 */
function acceptKernelComm(): void {
  // Nothing to do; see the docstring.
}
