"""Background sub-calls: ``llm_query(..., wait=False)`` and the other three
helpers return a :class:`Job` at once while the calls go on on the engine
loop, so the code (and the root model's next steps) can go on too.

A job's records belong to the cell that started it. That cell usually
finishes before its job does: when the job settles, the cell's
``metadata.rlm.subcalls`` are written again with the final records and the
sinks are told (``Sink.subcalls_settled``), so the notebook, the journal, the
page and the replay book end with the answers. A run cancels its jobs still
running when it ends (``Jobs.stop_all``) and says so. Budgets, the shared
concurrency limit, the stop flag and replay are those of every sub-call: a
job's calls go through the same ``SubcallHelpers`` paths as waited ones.

An interrupt while code waits in :meth:`Job.result` raises KeyboardInterrupt
in that code and leaves the job running; an interrupted cell ends the run,
and the run's end cancels its jobs.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..._words import plural
from ..execution.engine_loop import engine_loop, submit
from ..protocol.images import write_records

if TYPE_CHECKING:
    from ..trajectory.records import SubcallRecord
    from .host import SubcallHost

_ENDED = "cancelled: the run ended while it was still running"


class Job:
    """The handle of sub-calls started with ``wait=False``: ``done()``,
    ``result(timeout=None)``, ``progress`` (done, total) and ``cancel()``."""

    def __init__(self, run: SubcallHost, helper: str, records: list[SubcallRecord],
                 collect: Callable[[], Any], cell_records: list[SubcallRecord] | None) -> None:
        self._run = run
        self.helper = helper  # llm_query, llm_query_batched, rlm_query, rlm_query_batched
        self._records = records
        self._collect = collect
        self._cell_records = cell_records  # every sub-call of the cell that started the job
        self._future: concurrent.futures.Future[Any] | None = None
        self._settled: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._cancel_reason = "cancelled"
        self.reported = False  # the root model was told that it finished

    # -- the handle -----------------------------------------------------------
    def done(self) -> bool:
        """True once every call has an answer or failed (or the job was cancelled)."""
        return self._settled.done()

    @property
    def progress(self) -> tuple[int, int]:
        """(calls finished, calls in the job)."""
        finished = sum(1 for r in self._records if r.status in ("done", "error"))
        return finished, len(self._records)

    def result(self, timeout: float | None = None) -> Any:
        """Wait for the job (at most ``timeout`` seconds) and return what the
        helper would have returned: a str for llm_query / rlm_query, the list
        of answers in order for the batched ones."""
        __tracebackhide__ = True
        if timeout is not None and (not isinstance(timeout, (int, float)) or timeout < 0):
            raise ValueError("timeout takes a number of seconds (0 or more), or None to wait until the job is done.")
        if not self.done():
            waiter: concurrent.futures.Future[None] = concurrent.futures.Future()
            timer = None
            self._settled.add_done_callback(lambda _: _resolve(waiter))
            if timeout is not None:
                timer = threading.Timer(timeout, _resolve, (waiter,))
                timer.daemon = True
                timer.start()
            try:
                # On the run's code thread this keeps serving posted jobs (widget
                # refreshes); an interrupt cancels the waiter, never the job.
                self._run.wait(waiter)
            finally:
                if timer is not None:
                    timer.cancel()
            if not self.done():
                finished, total = self.progress
                raise TimeoutError(f"The background {self.helper} was not done after {timeout:g} s "
                                   f"({finished}/{total} calls finished); call .result() again to wait longer.")
        return self._collect()

    def cancel(self) -> bool:
        """Stop the calls still queued or running (they become errors saying
        'cancelled'); False when the job was already done. The job is done
        when this returns."""
        cancelled = self._cancel("cancelled")
        if cancelled:
            with contextlib.suppress(concurrent.futures.TimeoutError):
                self._settled.result(timeout=5)  # settled on the engine loop, which never waits for us
        return cancelled

    def __repr__(self) -> str:
        finished, total = self.progress
        state = "done" if self.done() else "running"
        return f"<background {self.helper}: {state}, {finished}/{total} calls finished>"

    # -- bookkeeping ----------------------------------------------------------
    def _start(self, work: Any) -> None:
        self._future = future = submit(work)
        loop = engine_loop()
        future.add_done_callback(lambda _: loop.call_soon_threadsafe(self._settle))

    def _cancel(self, reason: str) -> bool:
        if self.done():
            return False
        self._cancel_reason = reason
        if self._future is not None and not self._future.cancel() and self._future.done():
            return False
        return True

    def _settle(self) -> None:
        """On the engine loop, once the calls are over: final records, the
        view's last refresh, the cell's metadata, then ``done()``."""
        if self._settled.done():
            return
        run = self._run
        for record in self._records:
            if record.status in ("queued", "running"):
                record.status, record.error = "error", self._cancel_reason
                run.report.subcall(record)
        records = self._records
        _on_code_thread(run, lambda: run.report.subcalls_finished(records))
        cell = _finished_cell(run, records[0].cell_id if records else None)
        if cell is not None and self._cell_records is not None:
            write_records(cell.metadata["rlm"], self._cell_records)
            run.report.subcalls_settled(cell)
        run.report.status(force=True)
        _resolve(self._settled)


class Jobs:
    """A run's background jobs."""

    def __init__(self, run: SubcallHost) -> None:
        self.run = run
        self.jobs: list[Job] = []
        self._lock = threading.Lock()

    def start(self, helper: str, records: list[SubcallRecord], work: Any, collect: Callable[[], Any]) -> Job:
        """Show the calls in the current cell and start them; return the handle."""
        run = self.run
        job = Job(run, helper, records, collect, run.scope.records)
        if not records:  # an empty batch: done at once
            work.close()
            _resolve(job._settled)
            return job
        run.report.subcalls_started(records)
        with self._lock:
            self.jobs.append(job)
        job._start(work)
        return job

    def running(self) -> list[Job]:
        with self._lock:
            return [j for j in self.jobs if not j.done()]

    def report(self) -> str | None:
        """What the root model is told after a step (on the code thread: it
        reads the namespace for the names that hold the handles)."""
        with self._lock:
            jobs = list(self.jobs)
        running = [j for j in jobs if not j.done()]
        finished = [j for j in jobs if j.done() and not j.reported]
        for job in finished:
            job.reported = True
        if not running and not finished:
            return None
        names = _names(self.run, jobs)
        lines = []
        if running:
            lines.append("Background jobs still running: " + "; ".join(_describe(j, names) for j in running)
                         + ". Go on with other work; call .result() on a handle when you need its answers.")
        if finished:
            lines.append("Background jobs finished since the last step: "
                         + "; ".join(_describe(j, names) for j in finished) + ". Collect them with .result().")
        return "\n".join(lines)

    async def stop_all(self) -> str | None:
        """The run ends: cancel the jobs still running, wait until their records
        are final, and return the sentence that reports them (None: none)."""
        running = self.running()
        if not running:
            return None
        names = _names(self.run, running)
        described = "; ".join(_describe(j, names) for j in running)  # how far they got
        for job in running:
            job._cancel(_ENDED)
        await asyncio.wait([asyncio.wrap_future(j._settled) for j in running], timeout=10)
        said = (f"{plural(len(running), 'background job')} still running when the run ended "
                f"{'was' if len(running) == 1 else 'were'} cancelled: {described}.")
        self.run.report.note(said)
        return said


def _resolve(future: concurrent.futures.Future[None]) -> None:
    if not future.done():
        try:
            future.set_result(None)
        except concurrent.futures.InvalidStateError:
            pass  # cancelled or resolved meanwhile


def _on_code_thread(run: SubcallHost, fn: Callable[[], None]) -> None:
    """The view's updates are published from the run's code thread when it
    takes posted jobs (the kernel's main thread); a child's worker thread
    takes none, and its sinks draw nothing."""
    post = getattr(run.code_thread, "post", None)
    if post is not None and run.code_thread.thread_id is not None:
        post(fn)
    else:
        fn()


def _finished_cell(run: SubcallHost, cell_id: str | None) -> Any:
    """The run's cell with this id once it has finished (its metadata has a status)."""
    if cell_id is None:
        return None
    for cell in reversed(run.cells):
        if cell.id == cell_id:
            return cell if "status" in cell.metadata.get("rlm", {}) else None
    return None


def _names(run: SubcallHost, jobs: list[Job]) -> dict[int, list[str]]:
    """The namespace's names (not IPython's `_` ones) that hold each handle."""
    wanted = {id(j) for j in jobs}
    found: dict[int, list[str]] = {}
    namespace = run.namespace
    if not isinstance(namespace, dict):  # a sandbox's: its values are copies, and fetching them all costs
        return found
    try:
        items = list(namespace.items())
    except RuntimeError:  # changed while read; the names are a courtesy
        return found
    for name, value in items:
        if id(value) in wanted and not name.startswith("_"):
            found.setdefault(id(value), []).append(name)
    return found


def _describe(job: Job, names: dict[int, list[str]]) -> str:
    finished, total = job.progress
    held = names.get(id(job))
    who = f"`{held[0]}`" if held else "an unnamed handle"
    failed = sum(1 for r in job._records if r.status == "error")
    errors = f", {failed} failed" if failed else ""
    return f"{who} ({job.helper}, {finished}/{total} done{errors})"


__all__ = ["Job", "Jobs"]
