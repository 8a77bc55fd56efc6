"""What a root run's model is told besides the context and the query, in
its first user message: the earlier runs a follow-up builds on
(``follow_up.py``), the person's tools (``tools.py``) and, for a root
model that takes images, what it is shown of them (``vision.py``). A resumed run or a
follow-up on a saved notebook is briefed once the recorded cells have run
again, so it finds the tools they define and the variables they leave; a
continued run's history gets the notes it lacks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ...errors import RLMError
from ..execution.namespace import is_answer_dict
from ..protocol import prompts
from ..steps.approval import OnCodeThread
from ..steps.step import Stop

if TYPE_CHECKING:
    from ..execution.namespace import Entries
    from ..execution.tools import Toolbox
    from .start import RunStart


async def brief(start: RunStart, messages: list[dict[str, Any]], *, tools: Toolbox, entries: Entries,
                namespace: Mapping[str, Any], vision_note: str, on_code_thread: OnCodeThread) -> list[dict[str, Any]]:
    """``messages`` with the notes in their first user message; a tool that
    cannot be found stops the run (before its first root call). A child run
    (``rlm_query``) is told of the tools alone. ``vision_note``: what a root
    model that takes images is told of them (``vision.briefing``)."""
    if start.depth > 0:
        return prompts.with_notes(messages, [tools.describe()])
    follow_up = start.follow_up

    def notes() -> list[str]:  # on the code thread: it reads the namespace
        current = namespace.get("answer")
        if follow_up is not None and start.rerun and is_answer_dict(current) and current.get("ready"):
            current.update(content="", ready=False)  # an earlier run's answer, given again by its re-run code
        if tools.bind_waiting(namespace):
            entries.forget()  # the tools it found are installed at the next restore
        earlier = follow_up.describe(namespace, skip=entries.values()) if follow_up else ""
        return [earlier, tools.describe(), vision_note]

    try:
        return prompts.with_notes(messages, await on_code_thread(notes))
    except RLMError as error:
        raise Stop("error", str(error)) from None


__all__ = ["brief"]
