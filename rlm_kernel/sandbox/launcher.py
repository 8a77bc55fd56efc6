"""Starting the confined execution kernel: an ordinary ipykernel under
bubblewrap, reached over jupyter_client's ipc transport (TCP cannot cross
``--unshare-net``).

What it may see: the whole file system read-only, except the sandbox folder
(read-write) and a private state folder (its sockets, its temp folder, a
context made in code; its inbox of context files read-only); ``/tmp``,
``/run`` and the home folder hidden behind empty tmpfs mounts (other
programs' files and unix sockets live there), but for the context files a
run named before the start, bound read-only at their own paths; a fresh
network namespace with only its own loopback; its own pid namespace; an
environment made only of :data:`ALLOWED_ENV` (no provider keys, no secrets).
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import RLMError
from .context_files import SandboxCourier, hidden_roots, under

BWRAP = "bwrap"
ALLOWED_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM")
INSTALL = ("bubblewrap is needed for sandboxed runs: install it (Debian/Ubuntu: apt-get install bubblewrap; "
           "Fedora: dnf install bubblewrap) and make sure user namespaces are enabled.")


@dataclass
class SandboxSpec:
    folder: Path  # the one folder the code may write
    memory_mb: int = 2048
    cpu_seconds: float = 300.0  # per cell
    state: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="rlm-sandbox-")))
    bound: list[str] = field(default_factory=list)  # files bound read-only at their own paths (a run's context)

    @property
    def tmp(self) -> Path:
        return self.state / "tmp"

    @property
    def inbox(self) -> Path:
        """Context files named after the start, linked or copied here; read-only inside."""
        return self.state / "inbox"

    # -- the sandbox as the home of a remote executor's kernel (remote.executor.KernelHome)
    label = "sandboxed"
    death_ends_run = False  # a kernel killed at a limit: the cell says so, the next one starts a new kernel

    def check(self) -> None:
        check_available()  # never a fallback to running unconfined

    def start_kernel(self) -> tuple[Any, Any]:
        manager, client = start_kernel(self)
        _silent(client, "import rlm_kernel.sandbox.inside as _rlm_inside\n_rlm_inside.install(get_ipython())\n"
                        "del _rlm_inside")
        return manager, client

    def stop_kernel(self, manager: Any, client: Any) -> None:
        stop_kernel(manager, client, self)

    def discard(self) -> None:
        shutil.rmtree(self.state, ignore_errors=True)

    def alive(self, manager: Any) -> bool:
        return alive(manager)

    def poll(self, client: Any, timeout_ms: int) -> list[Any]:
        import zmq

        channels = {c.socket: c for c in (client.iopub_channel, client.stdin_channel, client.shell_channel)}
        poller = zmq.Poller()
        for socket in channels:
            poller.register(socket, zmq.POLLIN)
        return [channels[socket] for socket in dict(poller.poll(timeout_ms))]

    def second_client(self, manager: Any) -> Any:
        """Another client of the running kernel, with a session of its own (the page's widget messages)."""
        from jupyter_client.blocking import BlockingKernelClient

        client = BlockingKernelClient()
        client.load_connection_info(manager.get_connection_info())
        client.start_channels(shell=True, iopub=True, stdin=False, hb=False, control=False)
        return client

    def limits(self, manager: Any) -> CPULimit:
        return CPULimit(manager, self.cpu_seconds)

    def courier(self, executor: Any) -> Any:
        return SandboxCourier(executor)

    def child(self) -> SandboxSpec:
        return SandboxSpec(folder=self.folder, memory_mb=self.memory_mb, cpu_seconds=self.cpu_seconds)

    def died(self) -> str:
        return ("the sandboxed execution kernel died during this cell (killed at its CPU or memory limit, or it "
                "crashed); its variables are gone, and the next cell starts a new one")

    def forced_options(self) -> dict[str, Any]:
        """What a run in the sandboxed kernel is, whatever its cell says."""
        return {"sandbox": True}


def sandbox_spec(options: Any, folder: str | os.PathLike[str] | None = None) -> SandboxSpec:
    where = options.sandbox_dir or folder or os.getcwd()
    return SandboxSpec(folder=Path(where).expanduser().resolve(), memory_mb=options.sandbox_memory,
                       cpu_seconds=options.sandbox_cpu)


def _silent(client: Any, code: str) -> None:
    """Run setup code in the new kernel; its failure is said in one sentence."""
    msg_id = client.execute(code, silent=True, store_history=False)
    while True:
        reply = client.get_shell_msg(timeout=60)
        if reply["parent_header"].get("msg_id") == msg_id:
            break
    if reply["content"].get("status") != "ok":
        raise RLMError(f"The sandboxed kernel refused a setup step: {reply['content'].get('ename')}: "
                       f"{reply['content'].get('evalue')}")


def check_available() -> str:
    """The bwrap executable, or RLMError with one sentence on how to get it.
    Never a fallback to running unconfined."""
    path = shutil.which(BWRAP)
    if path is None:
        raise RLMError(INSTALL)
    probe = subprocess.run([path, "--unshare-net", "--unshare-pid", "--ro-bind", "/", "/", "--dev", "/dev",
                            "--proc", "/proc", "--die-with-parent", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        why = (probe.stderr.strip().splitlines() or ["no reason given"])[-1]
        raise RLMError(f"bubblewrap cannot confine a process here ({why}); sandboxed runs need user namespaces "
                       "(sysctl kernel.unprivileged_userns_clone=1, or run where they are allowed).")
    return path


def bwrap_argv(bwrap: str, spec: SandboxSpec) -> list[str]:
    """The command line that starts the kernel confined; ``{connection_file}``
    is filled in by jupyter_client."""
    hidden = hidden_roots()
    argv = [bwrap, "--die-with-parent", "--new-session", "--unshare-net", "--unshare-pid", "--unshare-ipc",
            "--unshare-uts", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    for root in hidden:
        if os.path.isdir(root):
            argv += ["--tmpfs", root]
    # what the kernel needs from the hidden places, back in read-only: the
    # Python it runs, and this package when it is installed from a work tree
    needed = {os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix),
              str(Path(os.path.realpath(__file__)).parent.parent.parent)}
    for path in sorted(needed):
        if under(path, hidden):
            argv += ["--ro-bind", path, path]
    for path in spec.bound:
        argv += ["--ro-bind", path, path]
    folder, state = str(spec.folder.resolve()), str(spec.state.resolve())
    argv += ["--bind", state, state, "--ro-bind", str(spec.inbox.resolve()), str(spec.inbox.resolve()),
             "--bind", folder, folder, "--chdir", folder, "--clearenv"]
    env = {k: os.environ[k] for k in ALLOWED_ENV if k in os.environ}
    env.update(HOME=folder, TMPDIR=str(spec.tmp), IPYTHONDIR=str(spec.state / "ipython"),
               JUPYTER_RUNTIME_DIR=str(spec.state / "runtime"), MPLCONFIGDIR=str(spec.tmp / "matplotlib"),
               PYTHONDONTWRITEBYTECODE="1", LITELLM_LOCAL_MODEL_COST_MAP="True")
    for key, value in sorted(env.items()):
        argv += ["--setenv", key, value]
    argv += ["--", sys.executable, "-m", "rlm_kernel.sandbox.inside", "--memory-mb", str(spec.memory_mb),
             "--HistoryManager.hist_file=:memory:",  # no SQLite write per cell: the state folder ends with the kernel
             "-f", "{connection_file}"]
    return argv


class CPULimit:
    """The per-cell CPU limit, set on the confined kernel from outside
    (``prlimit``) before each cell: a soft limit ``cpu_seconds`` past what it
    has used (SIGXCPU: the inside stops the cell with an error) and a hard
    one a little further (SIGKILL), which nothing inside can raise (that
    takes CAP_SYS_RESOURCE outside its user namespace)."""

    GRACE_S = 5  # between the soft and the hard limit: the cell's error is raised and shown

    def __init__(self, manager: Any, cpu_seconds: float) -> None:
        self.cpu_seconds = cpu_seconds
        self.pid = _kernel_pid(manager) if manager is not None and cpu_seconds else None

    def before_cell(self) -> None:
        if self.pid is None:
            return
        try:
            with open(f"/proc/{self.pid}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
            used = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
            soft = int(used + self.cpu_seconds) + 1
            resource.prlimit(self.pid, resource.RLIMIT_CPU, (soft, soft + self.GRACE_S))
        except (OSError, ValueError, IndexError):
            self.pid = None  # gone (a death the request will see), or not ours to limit: the inside's own limit stays


def alive(manager: Any) -> bool:
    """Whether the confined kernel's bwrap still runs (it ends with the kernel)."""
    process = getattr(getattr(manager, "provisioner", None), "process", None)
    return process is not None and process.poll() is None


def _kernel_pid(manager: Any) -> int | None:
    """The host pid of the confined kernel: the first process under bwrap that is not bwrap itself."""
    process = getattr(getattr(manager, "provisioner", None), "process", None)
    todo = [process.pid] if process is not None else []
    while todo:
        pid = todo.pop(0)
        try:
            with open(f"/proc/{pid}/comm") as handle:
                if handle.read().strip() != "bwrap":
                    return pid
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as handle:
                    todo.extend(int(child) for child in handle.read().split())
        except OSError:
            continue
    return None


def start_kernel(spec: SandboxSpec, *, startup_timeout: float = 60.0) -> tuple[Any, Any]:
    """Start the confined kernel; return (KernelManager, BlockingKernelClient), ready."""
    bwrap = check_available()
    from jupyter_client.kernelspec import KernelSpec
    from jupyter_client.manager import KernelManager

    spec.folder.mkdir(parents=True, exist_ok=True)
    for part in ("tmp", "ipython", "runtime", "inbox"):
        (spec.state / part).mkdir(parents=True, exist_ok=True)
    manager = KernelManager(transport="ipc", ip=str(spec.state / "k"),
                            connection_file=str(spec.state / "kernel.json"))
    # interrupts as messages: the kernel is bwrap's child, a signal to bwrap would not reach it
    manager._kernel_spec = KernelSpec(argv=bwrap_argv(bwrap, spec), display_name="RLM sandbox",
                                      language="python", interrupt_mode="message")
    env = {k: os.environ[k] for k in ALLOWED_ENV if k in os.environ}
    with open(spec.state / "kernel.log", "wb") as log:  # the kernel's own chatter, read when it fails to start
        manager.start_kernel(env=env, stdout=subprocess.DEVNULL, stderr=log)
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=startup_timeout)
    except RuntimeError:
        said = (spec.state / "kernel.log").read_text(errors="replace").strip().splitlines()
        stop_kernel(manager, client, spec)
        raise RLMError("The sandboxed execution kernel did not start"
                       + (f": {said[-1]}" if said else ".")) from None
    return manager, client


def stop_kernel(manager: Any, client: Any, spec: SandboxSpec) -> None:
    try:
        client.stop_channels()
    finally:
        try:
            if manager.has_kernel:
                manager.shutdown_kernel(now=True)
        finally:
            shutil.rmtree(spec.state, ignore_errors=True)


__all__ = ["ALLOWED_ENV", "INSTALL", "CPULimit", "SandboxSpec", "alive", "bwrap_argv", "check_available", "hidden_roots",
           "sandbox_spec", "start_kernel", "stop_kernel", "under"]
