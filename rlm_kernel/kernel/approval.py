"""``%%rlm --approve`` in a shared notebook: the question before each
generated code cell is a row of buttons in the ``%%rlm`` cell, a widget
that every page of the notebook shows (real-time collaboration: the Jupyter
server writes the cell's outputs), so whoever has the notebook open answers
it, and the first answer is the one taken. A stdin prompt (``approval``'s
``PromptApprover``) reaches only the page whose request started the run: a
colleague, or the same person after a reload, could not answer it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..engine.steps.approval import Approver, Decision

if TYPE_CHECKING:
    from nbformat import NotebookNode

    from ..engine.steps.approval import OnCodeThread

# (label, action, button style) in the order shown
CHOICES = (("Run", "run", "success"), ("Run my edit", "edit", "info"), ("Skip", "skip", "warning"),
           ("Stop the run", "stop", "danger"))
SAID = {"run": "ran as written", "edit": "ran as edited in its cell", "skip": "skipped", "stop": "stopped the run"}


class WidgetApprover(Approver):
    """Asks with buttons in the notebook; ``fetch_source(cell_id)`` reads a
    cell as the notebook has it now (an edit a person made there)."""

    def __init__(self, fetch_source: Callable[[str], Awaitable[str | None]]) -> None:
        self.fetch_source = fetch_source

    async def decide(self, cell: NotebookNode, on_code_thread: OnCodeThread) -> Decision:
        loop = asyncio.get_running_loop()
        chosen: asyncio.Future[str] = loop.create_future()

        def answer(action: str) -> None:  # a click, on the kernel's main thread or a subshell's
            loop.call_soon_threadsafe(lambda: None if chosen.done() else chosen.set_result(action))

        step = cell.metadata.get("rlm", {}).get("step")
        shown = await on_code_thread(lambda: _ask(step, answer))
        try:
            action = await chosen
        except asyncio.CancelledError:  # the run was interrupted at its question: the buttons go
            asyncio.ensure_future(on_code_thread(lambda: _answered(shown, step, "not answered: the run was stopped")))
            raise
        await on_code_thread(lambda: _answered(shown, step, SAID[action]))
        if action != "edit":
            return Decision(action)
        return Decision("run", await self.fetch_source(cell.id))


def _ask(step: Any, answer: Callable[[str], None]) -> tuple[Any, Any]:
    """Main thread: the question, displayed (in the %%rlm cell's output)."""
    import ipywidgets as widgets
    from IPython.display import display

    buttons = [widgets.Button(description=label, button_style=style) for label, _, style in CHOICES]

    def clicked(action: str) -> Callable[[Any], None]:
        def handler(_: Any) -> None:
            for button in buttons:
                button.disabled = True  # one answer: the first click is the one taken
            answer(action)
        return handler

    for button, (_, action, _) in zip(buttons, CHOICES, strict=True):
        button.on_click(clicked(action))
    question = widgets.HTML(f"<b>Step {step}</b>: run its code (the cell below, as the model wrote it, or as you "
                            "edited it there), skip it, or stop the run?")
    box = widgets.VBox([question, widgets.HBox(buttons)])
    box.add_class("rlm-approval")
    handle = display(box, display_id=True)
    return box, handle


def _answered(shown: tuple[Any, Any], step: Any, said: str) -> None:
    """Main thread: the buttons give way to what was decided."""
    box, handle = shown
    text = f"Step {step}'s code: {said}."
    handle.update({"text/plain": text, "text/markdown": f"*{text}*"}, raw=True)
    box.close()


__all__ = ["WidgetApprover"]
