"""One root step: the reply's cells in order, its code run (after approval,
when asked), and what the root model is told next."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import TYPE_CHECKING, Any

from nbformat import NotebookNode, from_dict

from ..errors import BudgetExceeded
from . import trajectory
from .execution import CellResult
from .guard import run_guarded
from .protocol import FinalMarker, cell_feedback, find_final, split_reply

if TYPE_CHECKING:
    from .run import Run

Final = tuple[str | None, Any]  # (the variable that holds the answer, the answer)


class Stop(Exception):  # noqa: N818 - the run stops; not an error of the code's
    def __init__(self, reason: str, message: str | None = None) -> None:
        super().__init__(message or reason)
        self.reason = reason
        self.message = message


async def take_step(run: Run, step: int, reply: str) -> tuple[str, Final | None]:
    """Write the reply's cells, run its code; return the feedback and the answer if final."""
    segments = split_reply(reply)
    usage: dict[str, Any] | None = run.root_usage
    feedback: list[str] = []
    marker = None
    ran = 0
    run.entries.given = None
    for segment in segments:
        if segment.kind == "prose":
            run.add_cell(trajectory.thought_cell(run.run_id, step, segment.text, root_call=usage))
            usage = None
            marker = marker or find_final(segment.text)
            continue
        cell = trajectory.code_cell(run.run_id, step, segment.text, root_call=usage)
        usage = None
        if not segment.closed or run.entries.given is not None:
            why = "its ``` fence was never closed" if not segment.closed else "FINAL was already called"
            cell.metadata["rlm"]["status"] = "skipped"
            run.add_cell(cell)
            run.sink.cell_finished(run, cell)
            feedback.append(f"A code block was not run: {why}.")
            continue
        run.add_cell(cell)
        if run.approver is not None:
            decision = await run.approver.decide(run, cell)
            if decision.action == "stop":
                cell.metadata["rlm"]["status"] = "skipped"
                run.sink.cell_finished(run, cell)
                raise Stop("interrupted", "The run was stopped at an approval prompt.")
            if decision.action == "skip":
                cell.metadata["rlm"].update(status="skipped", approved=False)
                run.sink.cell_finished(run, cell)
                feedback.append("The user chose not to run that code block.")
                continue
            if decision.source is not None and decision.source != cell.source:
                cell.source = decision.source
                cell.metadata["rlm"]["edited"] = True
                run.sink.cell_edited(run, cell)
            cell.metadata["rlm"]["approved"] = True
        ran += 1
        result = await run_cell(run, cell)
        feedback.append(cell_feedback(result.execution_count, result.status, result.model_view, result.output_chars))
        _stop_after(run, result)
        answer_now = run.executor.namespace.get("answer")
        if isinstance(answer_now, dict) and answer_now.get("ready") and run.entries.given is None:
            run.entries.given = (None, answer_now.get("content"))
    if not segments:
        run.add_cell(trajectory.thought_cell(run.run_id, step, "*(empty reply)*", root_call=usage))
    final = run.entries.given
    if final is None and marker is not None:
        final, problem_note = _resolve(run, marker)
        if problem_note:
            feedback.append(problem_note)
    restored = await run.code_thread.run(run.entries.restore)
    if restored:
        names = ", ".join(f"`{n}`" for n in restored)
        feedback.append(f"Note: your code rebound or deleted {names}; restored before the next step.")
    if final is None and not ran and marker is None:
        feedback.append(
            "Your reply had no ```repl code block and no FINAL(...) or FINAL_VAR(...) line. "
            "Write code in a ```repl block to continue, or give the final answer."
        )
    return "\n\n".join(feedback), final


def _stop_after(run: Run, result: CellResult) -> None:
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


def _resolve(run: Run, marker: FinalMarker) -> tuple[Final | None, str | None]:
    """The answer a FINAL / FINAL_VAR line in the prose gives, or why it gives none."""
    if marker.kind == "text":
        return (None, marker.value), None
    name = marker.value
    namespace = run.executor.namespace
    if name.isidentifier() and name in namespace:
        return (name, namespace[name]), None
    return None, f"FINAL_VAR({name}) failed: there is no variable named {name!r}. Create it in code first."


async def run_cell(run: Run, cell: NotebookNode) -> CellResult:
    """Run one code cell on the run's code thread, within the cell and run
    time limits; its outputs, count and sub-calls go into the cell."""
    options = run.tree.options
    subcalls = run.open_cell(cell.id)
    run.sink.cell_started(run, cell)
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

    try:
        result = await run.code_thread.run(execute)
    except KeyboardInterrupt:
        result = CellResult([], "interrupted", None, "KeyboardInterrupt", 0, 0.0, "KeyboardInterrupt")
    finally:
        if timer is not None:
            timer.cancel()
        run.close_cell()
    if result.status == "interrupted" and timed_out.is_set() and not run.tree.stopping:
        result.status = "error"
        result.error_name = "TimeoutError"
        result.model_view += f"\nTimeoutError: the cell ran longer than {options.cell_timeout:g} s and was interrupted."
    cell.outputs = [from_dict(o) for o in result.outputs if o.get("data") != {}]
    cell.execution_count = result.execution_count
    meta = cell.metadata["rlm"]
    meta["status"] = result.status
    meta["duration_s"] = round(result.duration_s, 4)
    if subcalls:
        meta["subcalls"] = [s.as_metadata() for s in subcalls]
    run.sink.cell_finished(run, cell)
    run.report_status(force=True)
    return result


__all__ = ["Final", "Stop", "run_cell", "take_step"]
