/**
 * The transport: one link per notebook session, following its kernel.
 *
 * On every kernel (re)connect the link registers the `rlm` comm target (so a
 * comm the kernel opens stays open) and opens its own comm carrying `hello`.
 * Ops are read from `kernel.iopubMessage`, not from a comm object, so a page
 * that never saw the kernel's `comm_open` (a reload mid-run) still gets them.
 */
import type { ISessionContext } from '@jupyterlab/apputils';
import type { Kernel, KernelMessage } from '@jupyterlab/services';
import { UUID } from '@lumino/coreutils';
import type { IDisposable } from '@lumino/disposable';

import {
  COMM_TARGET,
  FEATURES,
  type IHello,
  kernelOps,
  type KernelOp,
  PROTOCOL
} from './protocol';

/** What the link delivers. */
export interface ILinkSink {
  /** The protocol ops of one kernel message, in order. */
  onOps(ops: KernelOp[]): void;
  /** Any other iopub message (candidates for output routing). */
  onIOPub(msg: KernelMessage.IIOPubMessage): void;
}

/** One id per page, so the kernel can tell reloaded pages apart. */
const CLIENT_ID = UUID.uuid4();

export class KernelLink implements IDisposable {
  constructor(
    private readonly session: ISessionContext,
    private readonly sink: ILinkSink,
    private readonly notebookPath: () => string
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

  private onKernelChanged(
    _: ISessionContext,
    change: { newValue: Kernel.IKernelConnection | null }
  ): void {
    this.attach(change.newValue);
  }

  private attach(kernel: Kernel.IKernelConnection | null): void {
    const old = this.kernel;
    if (old && !old.isDisposed) {
      old.iopubMessage.disconnect(this.onIOPubMessage, this);
      old.connectionStatusChanged.disconnect(this.onConnectionStatus, this);
      old.removeCommTarget(COMM_TARGET, acceptKernelComm);
    }
    this.closeOwnComm();
    this.kernel = kernel;
    if (!kernel) {
      return;
    }
    kernel.registerCommTarget(COMM_TARGET, acceptKernelComm);
    kernel.iopubMessage.connect(this.onIOPubMessage, this);
    kernel.connectionStatusChanged.connect(this.onConnectionStatus, this);
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

  private sendHello(): void {
    const kernel = this.kernel;
    if (!kernel || kernel.isDisposed) {
      return;
    }
    this.closeOwnComm();
    const hello: IHello = {
      protocol: PROTOCOL,
      op: 'hello',
      notebook_path: this.notebookPath(),
      client_id: CLIENT_ID,
      features: FEATURES
    };
    const comm = kernel.createComm(COMM_TARGET);
    comm.onClose = () => {
      if (this.comm === comm) {
        this.comm = null;
      }
    };
    this.comm = comm;
    try {
      comm.open({ ...hello });
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
    if (type === 'comm_open' || type === 'comm_msg') {
      const ops = kernelOps((msg.content as { data?: unknown }).data);
      if (ops.length) {
        this.sink.onOps(ops);
      }
      return;
    }
    this.sink.onIOPub(msg);
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
