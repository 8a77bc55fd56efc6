"""One root step: the reply's cells in order (thinking folded into the
prose), its code run (after approval, when asked), the answer it gives under
the reply protocol's rules, and what the root model is told next."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import TYPE_CHECKING, Any, Protocol

from nbformat import NotebookNode, from_dict

from ..._words import plural
from ...errors import BudgetExceeded
from ..execution.executors import CellResult
from ..execution.guard import run_guarded
from ..execution.namespace import Final
from ..protocol.images import write_records
from ..protocol.reply import cell_feedback
from ..subcalls.background import Job
from ..trajectory import writing as trajectory
from .vision import StepImages, cell_label

Content = str | list[dict[str, Any]]  # a user message's content

if TYPE_CHECKING:
    from ..execution.executors import Executor
    from ..execution.namespace import Entries
    from ..execution.threads import CodeThread
    from ..model.tree import RunTree
    from ..subcalls.background import Jobs
    from ..subcalls.host import CellScope
    from ..trajectory.reporter import Reporter
    from .approval import Approver
    from .reply_stream import ReplyStream, WholeReply

NO_CODE = ("Your reply had no ```repl code block and no FINAL(...) or FINAL_VAR(...) line. "
           "Write code in a ```repl block to continue, or give the final answer on a line of its own.")


class StepHost(Protocol):
    """What a step uses of its run (``runs.run.Run`` is one)."""

    run_id: str
    tree: RunTree  # options, budget, the stop flag
    executor: Executor
    entries: Entries  # what the run installs in the namespace; the answer read from it
    code_thread: CodeThread
    approver: Approver | None
    scope: CellScope  # the cell running now, for its sub-calls
    report: Reporter
    owns_namespace: bool  # False in a person's own cell: nothing is installed
    root_usage: dict[str, Any] | None  # the step's root call's, once it has ended
    waiting: str | None  # "approval" while a cell waits for a person's answer (the status says so)

    @property
    def model(self) -> str: ...

    @property
    def jobs(self) -> Jobs: ...

    def add_cell(self, cell: NotebookNode) -> None: ...


class Stop(Exception):  # noqa: N818 - the run stops; not an error of the code's
    def __init__(self, reason: str, message: str | None = None) -> None:
        super().__init__(message or reason)
        self.reason = reason
        self.message = message


async def take_step(run: StepHost, step: int, source: WholeReply | ReplyStream) -> tuple[Content, Final | None]:
    """Write the reply's cells, run its code; return the feedback (the next
    user message's content: text, and the images the cells displayed when
    the root model takes them) and the answer if final. ``source`` gives the
    reply's segments as they settle (``reply_stream.py``); the protocol's
    rules read the whole reply."""
    cells = _Cells(run, step, source)
    entries = run.entries
    feedback: list[str] = []
    notes: list[str] = []
    images = StepImages(run.tree.options, run.model)
    ran = 0
    unsure: str | None = None  # why this step's code cannot be trusted for a FINAL_VAR in its prose
    entries.given = None
    async for segment in source.segments():
        if segment.kind == "thinking":
            cells.thinking.append(segment.text)
            continue
        if segment.kind == "prose":
            cells.thought(segment.text)
            continue
        cells.flush()
        cell = cells.code(segment.text)
        if not segment.closed or entries.given is not None:
            why = trajectory.NEVER_CLOSED if not segment.closed else trajectory.AFTER_ANSWER
            feedback.append(trajectory.skip(cell, why))
            run.add_cell(cell)
            run.report.cell_finished(cell)
            unsure = unsure or "a code block in the same reply did not run"
            continue
        run.add_cell(cell)
        if run.approver is not None:
            run.waiting = "approval"  # the status says so (not the root call's last phase)
            run.report.status(force=True)
            try:
                decision = await run.approver.decide(cell, run.code_thread.run)
            finally:
                run.waiting = None
                run.report.status(force=True)
            if decision.action == "stop":
                trajectory.skip(cell, trajectory.STOPPED)
                run.report.cell_finished(cell)
                raise Stop("interrupted", "The run was stopped at an approval prompt.")
            if decision.action == "skip":
                cell.metadata["rlm"]["approved"] = False
                feedback.append(trajectory.skip(cell, trajectory.REFUSED))
                run.report.cell_finished(cell)
                unsure = unsure or "a code block in the same reply did not run"
                continue
            if decision.source is not None and decision.source != cell.source:
                cell.source = decision.source
                cell.metadata["rlm"]["edited"] = True
                run.report.cell_edited(cell)
            cell.metadata["rlm"]["approved"] = True
        ran += 1
        result = await run_cell(run, cell)
        feedback.append(cell_feedback(result.execution_count, result.status, result.model_view, result.output_chars))
        shown = images.add(cell_label(result.execution_count), result.outputs)
        if shown:
            feedback.append(shown)
        if result.status != "ok":
            unsure = unsure or "a code block in the same reply raised an error"
        _stop_after(run, result)
        found, note = entries.check_answer()
        if note:
            notes.append(note)
        if found is not None and entries.given is None:
            entries.given = found
    reply = source.reply
    assert reply is not None
    cells.flush()
    if not reply.segments:
        cells.empty()
    cells.settle_usage()
    notes.extend(source.notes)
    final = entries.given
    marker = reply.final
    if final is None and marker is not None:
        if marker.kind == "var" and unsure:
            notes.append(f"{marker.shown()} was not taken: {unsure} (see above). Answer again once the code works.")
        else:
            final, note = entries.resolve(marker.kind, marker.value, marker.quoted, marker.shown())
            if note:
                notes.append(note)
    if final is not None and isinstance(final[1], Job):  # the handle is not its answers: never answer with it
        held = f"`{final[0]}`" if final[0] else "the value"
        notes.append(f"The answer was not taken: {held} is the handle of a background {final[1].helper}, not its "
                     "answer. Collect it first (`x = handle.result()`), then answer with FINAL_VAR(x).")
        final = entries.given = None
    restored = await run.code_thread.run(entries.restore)
    if restored:
        names = ", ".join(f"`{n}`" for n in restored)
        notes.append(f"Note: your code rebound or deleted {names}; restored before the next step.")
    if final is None and run.jobs.jobs:  # background sub-calls: which still run, which finished
        background = await run.code_thread.run(run.jobs.report)
        if background:
            notes.append(background)
    if final is None and not ran and not reply.markers:
        notes.append(NO_CODE)
    left = run.tree.options.max_iterations - step
    if final is None and 0 < left <= 2:
        notes.append(f"(You have {plural(left, 'step')} left; answer soon.)")
    return images.content("\n\n".join([*feedback, *reply.notes, *notes])), final


class _Cells:
    """The step's cells as they are written: the step's first cell carries
    the root call's usage (known once the reply has ended, so a streamed
    step's first cell gets it then); thinking waits for the prose after it;
    ids come from the reply's source (a streamed cell keeps its draft's)."""

    def __init__(self, run: StepHost, step: int, source: WholeReply | ReplyStream) -> None:
        self.run, self.step, self.source = run, step, source
        self.thinking: list[str] = []
        self.made: list[NotebookNode] = []

    def _usage(self) -> dict[str, object] | None:
        return self.run.root_usage if not self.made else None

    def _id(self, kind: str) -> str | None:
        return self.source.cell_id(len(self.made), kind)

    def thought(self, text: str) -> None:
        thinking = "\n\n".join(t for t in self.thinking if t) or None
        self.thinking.clear()
        if text or thinking:
            self._add(trajectory.thought_cell(self.run.run_id, self.step, text, thinking, cell_id=self._id("thought"),
                                              root_call=self._usage()))

    def empty(self) -> None:
        self._add(trajectory.thought_cell(self.run.run_id, self.step, "*(empty reply)*", cell_id=self._id("thought"),
                                          root_call=self._usage()))

    def _add(self, cell: NotebookNode) -> None:
        self.made.append(cell)
        self.run.add_cell(cell)

    def flush(self) -> None:
        if self.thinking:
            self.thought("")

    def code(self, source: str) -> NotebookNode:
        cell = trajectory.code_cell(self.run.run_id, self.step, source, cell_id=self._id("code"),
                                    root_call=self._usage())
        self.made.append(cell)
        return cell

    def settle_usage(self) -> None:
        """The reply has ended: its first cell gets the root call's usage."""
        usage = self.run.root_usage
        if self.made and usage is not None and self.made[0].metadata["rlm"].get("root_call") is None:
            self.made[0].metadata["rlm"]["root_call"] = usage
            self.run.report.cell_updated(self.made[0])


def _stop_after(run: StepHost, result: CellResult) -> None:
    """End the run when the cell was interrupted or used up a budget."""
    tree = run.tree
    if result.status == "interrupted":
        tree.stopping = tree.stopping or "interrupted"
        if tree.stopping == "timeout":
            raise Stop("timeout", f"The run's time limit of {tree.options.timeout:g} s was reached during a cell.")
        raise Stop(tree.stopping, "The run was interrupted.")
    problem = tree.budget.exhausted()
    if result.error_name == "BudgetExceeded" or problem is not None:
        problem = problem or BudgetExceeded("A budget was used up during the cell.")
        raise Stop(problem.reason, str(problem))


async def run_cell(run: StepHost, cell: NotebookNode) -> CellResult:
    """Run one code cell on the run's code thread, within the cell and run
    time limits; its outputs, count and sub-calls go into the cell."""
    options = run.tree.options
    subcalls = run.scope.open(cell.id)
    run.report.cell_started(cell)
    timer = None
    timed_out = threading.Event()
    deadline = run.tree.budget.deadline
    run_left = None if deadline is None else max(0.0, deadline - time.monotonic())
    waits = [w for w in (options.cell_timeout, run_left) if w is not None]
    if waits:
        ends_run = run_left is not None and run_left <= (options.cell_timeout or run_left)

        def expire() -> None:
            if ends_run:
                run.tree.stopping = run.tree.stopping or "timeout"
            else:
                timed_out.set()
            run.code_thread.interrupt()

        timer = asyncio.get_running_loop().call_later(min(waits), expire)

    def execute() -> CellResult:
        if run.owns_namespace:
            run.entries.restore()
        return run_guarded(options.no_network_in_code, lambda: run.executor.execute(
            cell.source, cell_id=cell.id, view_limit=options.max_output_chars))

    cancelled = False
    try:
        result = await run.code_thread.run(execute)
    except KeyboardInterrupt:
        result = CellResult([], "interrupted", None, "KeyboardInterrupt", 0, 0.0, "KeyboardInterrupt")
    except asyncio.CancelledError:  # the run was stopped as the cell was about to run: it ends marked
        cancelled = True
        result = CellResult([], "interrupted", None, "KeyboardInterrupt", 0, 0.0, "KeyboardInterrupt")
    finally:
        if timer is not None:
            timer.cancel()
        run.scope.close()
    if result.status == "interrupted" and timed_out.is_set() and not run.tree.stopping:
        result.status = "error"
        result.error_name = "TimeoutError"
        result.model_view += f"\nTimeoutError: the cell ran longer than {options.cell_timeout:g} s and was interrupted."
    cell.outputs = [from_dict(o) for o in result.outputs if o.get("data") != {}]
    cell.execution_count = result.execution_count
    meta = cell.metadata.setdefault("rlm", {})  # a person's cell re-run by a resumed run has none
    meta["status"] = result.status
    meta["duration_s"] = round(result.duration_s, 4)
    if subcalls:
        write_records(meta, subcalls)
    run.report.cell_finished(cell)
    run.report.status(force=True)
    if cancelled:
        raise asyncio.CancelledError
    return result


__all__ = ["Final", "StepHost", "Stop", "run_cell", "take_step"]
