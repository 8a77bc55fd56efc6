"""What a root run's model is told besides the context and the query, in
its first user message: the person's tools (``tools.py``). A resumed run is
briefed once its recorded cells have run again, so it finds the tools they
define; a continued run's history gets the notes it lacks."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import RLMError
from . import prompts
from .step import Stop

if TYPE_CHECKING:
    from .run import Run


async def brief(run: Run, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with the notes in their first user message; a tool that
    cannot be found stops the run (before its first root call)."""

    def notes() -> list[str]:  # on the code thread: it reads the namespace
        if run.tools.bind_waiting(run.executor.namespace):
            run.entries.forget()  # the tools it found are installed at the next restore
        return [run.tools.describe()]

    try:
        return prompts.with_notes(messages, await run.code_thread.run(notes))
    except RLMError as error:
        raise Stop("error", str(error)) from None


__all__ = ["brief"]
