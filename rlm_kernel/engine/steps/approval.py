"""Approving steps: ask a person before each generated code cell runs.

``%%rlm --approve`` and ``rlm-kernel run --approve`` give a run an
:class:`PromptApprover`. Before a code cell runs it asks (a terminal prompt,
or the kernel's stdin request, which every Jupyter frontend shows) whether to
run it, edit it first, skip it, or stop the run. How an edit is made depends
on where the run is: an editor on a terminal, the inserted cell itself in a
live notebook, a line of input elsewhere.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nbformat import NotebookNode

OnCodeThread = Callable[[Callable[[], Any]], Awaitable[Any]]  # runs a function on the run's code thread

ACTIONS = {"": "run", "r": "run", "run": "run", "y": "run", "yes": "run",
           "e": "edit", "edit": "edit", "s": "skip", "skip": "skip", "n": "skip", "no": "skip",
           "t": "stop", "stop": "stop", "q": "stop", "quit": "stop"}
QUESTION = "Run this code? [r]un (Enter), [e]dit then run, [s]kip, s[t]op: "


@dataclass
class Decision:
    action: str  # run | skip | stop
    source: str | None = None  # the code to run, when a person edited it


class Approver:
    """Decides before each generated code cell runs. ``on_code_thread`` runs
    a function on the run's code thread (where a kernel's stdin request
    belongs to the cell that started the run) and awaits it."""

    async def decide(self, cell: NotebookNode, on_code_thread: OnCodeThread) -> Decision:
        return Decision("run")


Editor = Callable[["NotebookNode", OnCodeThread], Awaitable["str | None"]]


class PromptApprover(Approver):
    """Asks with ``ask`` (``input`` by default) on the run's code thread, so
    a kernel's stdin request goes to the cell that started the run."""

    def __init__(self, *, ask: Callable[[str], str] | None = None, show: Callable[[str], None] | None = print,
                 editor: Editor | None = None) -> None:
        self.ask = ask or _input
        self.show = show
        self.editor = editor or self.edit_as_line

    async def decide(self, cell: NotebookNode, on_code_thread: OnCodeThread) -> Decision:
        action = await on_code_thread(lambda: self._ask_action(cell))
        if action != "edit":
            return Decision(action)
        source = await self.editor(cell, on_code_thread)
        return Decision("run", source)

    def _ask_action(self, cell: NotebookNode) -> str:
        if self.show is not None:
            self.show(f"--- step code (cell {cell.id}) ---\n{cell.source}\n---")
        while True:
            try:
                answer = self.ask(QUESTION)
            except EOFError:
                return "stop"
            action = ACTIONS.get(answer.strip().lower())
            if action is not None:
                return action
            if self.show is not None:
                self.show("Please answer r, e, s or t.")

    async def edit_as_line(self, cell: NotebookNode, on_code_thread: OnCodeThread) -> str | None:
        """Where only one line of input is available: the new code on one
        line, ``\\n`` for a line break (empty keeps the code)."""
        text = await on_code_thread(
            lambda: self.ask("New code on one line (\\n for a line break; Enter keeps it): "))
        text = text.replace("\\n", "\n")
        return text if text.strip() else None


def _input(prompt: str) -> str:
    """``input`` as it is when asked, not when this module was imported: a
    kernel puts its own in place (a stdin request to the page) only while a
    cell runs, and this module may be imported before any cell ran."""
    return input(prompt)


def edit_in_editor(source: str) -> str | None:
    """Open ``$VISUAL`` / ``$EDITOR`` (else vi) on the code; the saved text.
    The editor draws on the terminal itself (``/dev/tty``), never on stdout,
    which may be the run's ``--json`` result."""
    command = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False, encoding="utf-8") as handle:
        handle.write(source)
        path = handle.name
    try:
        try:
            terminal: Any = open("/dev/tty", "r+b", buffering=0)  # noqa: SIM115 - closed below
        except OSError:
            terminal = None
        try:
            streams = {"stdin": terminal, "stdout": terminal} if terminal else {"stdout": sys.stderr}
            subprocess.run([*shlex.split(command), path], check=False, **streams)
        finally:
            if terminal is not None:
                terminal.close()
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    finally:
        os.unlink(path)


def ask_on_stderr(question: str) -> str:
    """Ask on stderr and read the answer line from stdin (a terminal or a
    pipe): stdout stays the run's result (``--json`` prints one object)."""
    print(question, end="", file=sys.stderr, flush=True)
    line = sys.stdin.readline()
    if not line:
        raise EOFError
    return line.rstrip("\r\n")


def show_on_stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def terminal_approver() -> PromptApprover:
    """For ``rlm-kernel run --approve`` on a terminal: the code and the
    question go to stderr, answers come from the terminal."""

    async def editor(cell: NotebookNode, on_code_thread: OnCodeThread) -> str | None:
        return await on_code_thread(lambda: edit_in_editor(cell.source))

    return PromptApprover(ask=ask_on_stderr, show=show_on_stderr, editor=editor)


def notebook_approver(fetch_source: Callable[[str], Awaitable[str | None]]) -> PromptApprover:
    """For a live notebook: the person edits the inserted cell, then answers."""
    approver = PromptApprover(show=None)

    async def editor(cell: NotebookNode, on_code_thread: OnCodeThread) -> str | None:
        await on_code_thread(lambda: approver.ask("Edit the cell in the notebook, then press Enter to run it: "))
        return await fetch_source(cell.id)

    approver.editor = editor
    return approver


__all__ = ["Approver", "Decision", "PromptApprover", "ask_on_stderr", "edit_in_editor", "notebook_approver",
           "show_on_stderr", "terminal_approver"]
