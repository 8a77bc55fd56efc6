"""The RLM kernel: an IPython kernel with the ``%rlm`` magics, the comm the
labextension talks to, and ``%%rlm`` cells run as awaitable coroutines."""

from __future__ import annotations

import asyncio
import signal
import threading
from contextlib import contextmanager
from typing import Any

from ipykernel.ipkernel import IPythonKernel

from .._version import __version__


def _rlm_cell_to_await(lines: list[str]) -> list[str]:
    """Rewrite a ``%%rlm`` cell into an await of our coroutine, so ipykernel
    runs it asynchronously (comm messages keep flowing during the run)."""
    if not lines:
        return lines
    first = lines[0]
    if not (first.startswith("%%rlm") and (len(first.rstrip("\n")) == 5 or first[5] in " \t\n")):
        return lines
    line, body = first[5:].strip(), "".join(lines[1:])
    return [f"await get_ipython().rlm_magics.run_cell_async({line!r}, {body!r})\n"]


def _rlm_continue_to_await(lines: list[str]) -> list[str]:
    """``%rlm continue`` waits for the notebook's cells from the frontend, so
    it runs as an await too."""
    code = "".join(lines).strip()
    if not code.startswith("%rlm continue") or "\n" in code or not (len(code) == 13 or code[13] in " \t"):
        return lines
    return [f"await get_ipython().rlm_magics.continue_async({code[13:].strip()!r})\n"]


# Shell requests answered beside a running %%rlm cell instead of after it: a
# reloaded page waits for its kernel_info_reply (JupyterLab holds every other
# message until then, and shows the kernel as "Unknown"), and its widget
# manager asks which widget comms exist. Both only read the kernel's state.
_BESIDE_A_RUN = frozenset({"kernel_info_request", "comm_info_request"})

# What a kernel's first %%rlm imports besides litellm (the engine, the cell's
# output and sub-call views and their widgets, what litellm loads at its first
# call: its tokenizer, its async transport, its proxy types): imported after
# litellm in the background, so that cell starts at once too.
_RUN_MODULES = ("rlm_kernel.api", "rlm_kernel.kernel.executor", "rlm_kernel.engine.model.litellm_client",
                "rlm_kernel.sinks.display", "rlm_kernel.sinks.subcall_views", "ipywidgets",
                "litellm.litellm_core_utils.default_encoding", "anyio._backends._asyncio", "litellm.proxy._types")


class RLMKernel(IPythonKernel):
    implementation = "rlm_kernel"
    implementation_version = __version__
    banner = (
        "RLM (Python 3): a Recursive Language Model workspace.\n"
        "%rlm context PATH loads the input as `context`; a %%rlm cell asks a question about it."
    )

    def __init__(self, **kwargs: Any) -> None:
        # %%rlm / %rlm continue cells executing now: their execute requests and own numbers
        self.rlm_requests: list[tuple[dict[str, Any], int]] = []
        self._runs_ending: set[str] = set()  # runs whose cell has returned, until their own 'idle'
        self._status_lock = threading.Lock()  # the check of those two and a status's send are one step
        super().__init__(**kwargs)
        from ..sinks.live import LiveChannel
        from .magics import RLMMagics

        magics = RLMMagics(self.shell)
        self.shell.register_magics(magics)
        self.shell.rlm_magics = magics
        self.shell.input_transformers_cleanup.append(_rlm_cell_to_await)
        self.shell.input_transformers_cleanup.append(_rlm_continue_to_await)
        self.rlm_channel = LiveChannel()
        from .session import KernelSession

        self.rlm_session = KernelSession(self)
        self._warm_up: threading.Thread | None = None  # litellm's import, once the kernel has answered

    async def kernel_info_request(self, stream: Any, ident: Any, parent: Any) -> None:
        """litellm takes seconds to import: once the kernel has answered its
        first kernel_info (the page then shows it ready), import it on a
        thread of its own, so a person who writes a question first never waits
        for it. Begun in the constructor, it slowed the start itself."""
        await super().kernel_info_request(stream, ident, parent)
        if self._warm_up is None:
            from ..engine.model.litellm_setup import load_in_background

            self._warm_up = load_in_background(then=_RUN_MODULES)

    async def _warmed_up(self) -> None:
        """A cell run while litellm is being imported waits for that import
        (off the loop, which goes on serving the page): two threads importing
        at once risk a module seen half-initialised, and the import freezes
        the objects alive at its end for the collector (``gc.freeze``)."""
        thread = self._warm_up
        if thread is None or not thread.is_alive():
            return
        # Requests handled meanwhile (the page's comm messages) set the kernel's
        # parent; the cell's own must be back before it runs, or its input()
        # (an approval) would go out under theirs, with stdin not allowed.
        ident, parent = self._parent_ident["shell"], self.get_parent("shell")
        while thread.is_alive():
            await asyncio.sleep(0.02)
        self.set_parent(ident, parent, "shell")

    async def do_execute(self, code: str, silent: bool, store_history: bool = True,
                         user_expressions: dict[str, Any] | None = None, allow_stdin: bool = False,
                         **kwargs: Any) -> dict[str, Any]:
        await self._warmed_up()
        number = self.shell.execution_count
        awaited = _rlm_cell_to_await([code]) != [code] or _rlm_continue_to_await([code]) != [code]
        # ipykernel's reply reads these, but only its synchronous run_cell sets
        # them: a first cell that is awaited and fails (a %%rlm with no context
        # yet) left the cell without a reply.
        self.shell._last_traceback = None
        self.shell._last_traceback_during_displayhook = False
        request = (self.get_parent("shell") or {}, number)
        if awaited:
            with self._status_lock:
                self.rlm_requests.append(request)
                # A request handled beside this one (on the control channel, a
                # subshell) may have ended with 'idle' between ipykernel's
                # 'busy' for this cell and the line above, and the page would
                # show the kernel idle for the whole run: say 'busy' again.
                super()._publish_status("busy", "shell", parent=request[0])
        anchor = self._anchor_cell(request) if awaited else None
        try:
            with self._anchored(anchor, number):
                reply = await super().do_execute(code, silent, store_history, user_expressions, allow_stdin,
                                                 **kwargs)
                if anchor is not None:
                    await self.rlm_channel.anchor_finished(anchor, number)
        finally:
            if awaited:
                with self._status_lock:
                    self.rlm_requests.remove(request)
                    msg_id = request[0].get("header", {}).get("msg_id")
                    if msg_id:  # still running until ipykernel publishes this request's own 'idle'
                        self._runs_ending.add(msg_id)
        # The generated cells used the numbers after this one; ipykernel would
        # report the last of them as the %%rlm cell's own.
        if store_history and not silent and awaited and "execution_count" in reply:
            reply["execution_count"] = number
        return reply

    def _anchor_cell(self, request: tuple[dict[str, Any], int]) -> str | None:
        """The %%rlm cell whose own outputs the Jupyter server's writer puts
        into the notebook (one is attached), else None: the page that ran it
        does (JupyterLab's own output area)."""
        cell_id = (request[0].get("metadata") or {}).get("cellId")
        return cell_id if cell_id and self.rlm_channel.writer else None

    def _anchored(self, cell_id: str | None, number: int) -> Any:
        """A %%rlm cell's own outputs, while the Jupyter server writes the
        notebook, go under a parent of their own that the server routes into
        the cell (the page that ran it then writes none of them: one writer,
        also after that page is reloaded or closed)."""
        from contextlib import nullcontext

        from .executor import anchor_parent

        return nullcontext() if cell_id is None else anchor_parent(self, cell_id, number, self.rlm_channel)

    async def shell_channel_thread_main(self, msg: Any) -> None:
        """ipykernel hands the main shell's requests to the main thread one at
        a time, so a kernel_info_request waited behind a running %%rlm cell: a
        page reloaded mid-run showed the kernel as "Unknown" and sent nothing
        (its hello included) until the run ended. While a run goes on, answer
        those read-only requests here, on the shell channel's own thread,
        which owns the shell socket and is free even while a step's code
        holds the main thread."""
        if self.rlm_requests and self.session is not None:
            idents, frames = self.session.feed_identities(msg, copy=False)
            try:
                # content=False only peeks: the signature is not yet recorded as seen
                header = self.session.deserialize(frames, content=False, copy=False)["header"]
            except Exception:  # noqa: BLE001 - the usual path reports a bad message
                header = {}
            if header.get("msg_type") in _BESIDE_A_RUN and not header.get("subshell_id"):
                self._answer_beside_the_run(idents, frames)
                return
        await super().shell_channel_thread_main(msg)

    def _answer_beside_the_run(self, idents: list[Any], frames: list[Any]) -> None:
        try:
            request = self.session.deserialize(frames, content=True, copy=False)
        except Exception:  # noqa: BLE001 - an unsigned or replayed message gets no answer
            self.log.error("Invalid message", exc_info=True)  # noqa: G201
            return
        if request["header"]["msg_type"] == "kernel_info_request":
            reply_type, content = "kernel_info_reply", {"status": "ok", **self.kernel_info}
        else:
            reply_type, content = "comm_info_reply", {"status": "ok", "comms": self._comms_of(
                request["content"].get("target_name"))}
        # A page's request is done when its reply and its 'idle' have come.
        super()._publish_status("busy", "shell", parent=request)
        self.session.send(self.shell_stream, reply_type, content, request, idents)
        with self._status_lock:
            super()._publish_status("idle", "shell", parent=request)
            if self.rlm_requests:
                # JupyterLab ignores the statuses of a kernel_info_request, so
                # a page that has just connected would show "Unknown" until the
                # run's end (and another page's would show its 'idle'): say
                # again that the run's request is busy. Under the lock, so a
                # run that has just ended is not said to be busy.
                super()._publish_status("busy", "shell", parent=self.rlm_requests[-1][0])

    def _comms_of(self, target: str | None) -> dict[str, dict[str, str]]:
        manager = getattr(self, "comm_manager", None)
        for _ in range(3):  # the main thread may open or close a comm meanwhile
            try:
                comms = list(manager.comms.items()) if manager is not None else []
                break
            except RuntimeError:
                continue
        else:
            comms = []
        return {k: {"target_name": v.target_name} for k, v in comms if target is None or v.target_name == target}

    def _publish_status(self, status: str, channel: str, parent: Any = None) -> None:
        """While a %%rlm cell runs, requests handled beside it (a subshell
        created for widget clicks, a widget's change or click, the page's
        control requests) each end with an 'idle'. The page needs it: its
        request is done only with it (JupyterLab's future for a subshell, and
        ipywidgets holds a widget's next change until the last one's idle).
        But JupyterLab also shows it as the kernel's state though the run
        goes on, so the run's own 'busy' is said again right after it, from
        the run's start to its own 'idle' (the cell's flushed output comes
        after the cell has returned)."""
        with self._status_lock:
            if status == "idle" and (self.rlm_requests or self._runs_ending):
                sent = parent or self.get_parent(channel) or {}
                msg_id = sent.get("header", {}).get("msg_id")
                if msg_id in self._runs_ending:
                    self._runs_ending.discard(msg_id)
                elif self.rlm_requests:
                    super()._publish_status("idle", channel, sent)
                    super()._publish_status("busy", "shell", parent=self.rlm_requests[-1][0])
                    return
                else:
                    return  # a run's cell has returned and its own 'idle' is on its way
            super()._publish_status(status, channel, parent)

    async def dispatch_shell(self, msg: Any, /, subshell_id: str | None = None, *, concurrent: bool = False) -> None:
        """ipykernel hands a comm message that comes while a %%rlm cell holds
        the main shell to its handler at once, with no 'busy' or 'idle'; the
        page's widget then never hears that its change was taken and holds
        every later one until a reload. Say both for it, as for any request."""
        if not concurrent or self.session is None:
            await super().dispatch_shell(msg, subshell_id, concurrent=concurrent)
            return
        try:
            _, frames = self.session.feed_identities(msg, copy=False)
            request = {"header": self.session.deserialize(frames, content=False, copy=False)["header"]}
        except Exception:  # noqa: BLE001 - ipykernel reports a bad message itself
            request = None
        if request is not None:
            super()._publish_status("busy", "shell", parent=request)
        try:
            await super().dispatch_shell(msg, subshell_id, concurrent=True)
        finally:
            if request is not None:
                self._publish_status("idle", "shell", parent=request)

    @contextmanager
    def _cancel_on_sigint(self, future: asyncio.Future[Any]) -> Any:
        """Interrupt cancels an awaiting cell. ipykernel 7.4 schedules the
        cancel with io_loop.add_callback, which does not wake the loop, so an
        interrupted await never stopped; call_soon_threadsafe does."""
        loop = asyncio.get_running_loop()

        def handle_sigint(*args: Any) -> None:
            loop.call_soon_threadsafe(lambda: None if future.done() else future.cancel())

        saved = signal.signal(signal.SIGINT, handle_sigint)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, saved)
