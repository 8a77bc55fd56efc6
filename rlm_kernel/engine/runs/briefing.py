"""What a root run's model is told besides the context and the query, in
its first user message: the earlier runs a follow-up builds on
(``follow_up.py``), the person's tools (``tools.py``) and, for a root
model that takes images, what it is shown of them (``vision.py``). A resumed run or a
follow-up on a saved notebook is briefed once the recorded cells have run
again, so it finds the tools they define and the variables they leave; a
continued run's history gets the notes it lacks."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...errors import RLMError
from ..execution.namespace import is_answer_dict
from ..protocol import prompts
from ..steps import vision
from ..steps.step import Stop

if TYPE_CHECKING:
    from .run import Run


async def brief(run: Run, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with the notes in their first user message; a tool that
    cannot be found stops the run (before its first root call). A child run
    (``rlm_query``) is told of the tools alone."""
    if run.depth > 0:
        return prompts.with_notes(messages, [run.tools.describe()])

    def notes() -> list[str]:  # on the code thread: it reads the namespace
        namespace = run.executor.namespace
        current = namespace.get("answer")
        if run.follow_up is not None and run.prelude and is_answer_dict(current) and current.get("ready"):
            current.update(content="", ready=False)  # an earlier run's answer, given again by its re-run code
        if run.tools.bind_waiting(namespace):
            run.entries.forget()  # the tools it found are installed at the next restore
        earlier = run.follow_up.describe(namespace, skip=run.entries.values()) if run.follow_up else ""
        return [earlier, run.tools.describe(), vision.briefing(run.tree.options, run.endpoint.model)]

    try:
        return prompts.with_notes(messages, await run.code_thread.run(notes))
    except RLMError as error:
        raise Stop("error", str(error)) from None


__all__ = ["brief"]
