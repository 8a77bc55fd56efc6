"""The notebook is the trajectory: building its cells and the notebook."""

from __future__ import annotations

import re
import uuid
from typing import Any

import nbformat
from nbformat import NotebookNode

from ..._version import __version__
from ..._words import plural
from .cells import THINKING_OPEN
from .schema import FORMAT

ANSWER_PREVIEW_CHARS = 4000


def new_cell_id() -> str:
    return uuid.uuid4().hex[:16]


def new_cell(cell_type: str, source: str, cell_id: str, metadata: dict[str, Any]) -> NotebookNode:
    """A markdown or code cell as ``nbformat.v4.new_*_cell`` makes it, without
    checking each against the schema as it is made (a run makes a few a
    step; the notebook is validated whole when it is written)."""
    cell: dict[str, Any] = {"id": cell_id, "cell_type": cell_type, "metadata": metadata, "source": source}
    if cell_type == "code":
        cell.update(execution_count=None, outputs=[])
    return nbformat.from_dict(cell)


def _meta(run_id: str, step: int, role: str, **extra: Any) -> dict[str, Any]:
    return {"rlm": {"run_id": run_id, "step": step, "role": role, **{k: v for k, v in extra.items() if v is not None}}}


def query_cell(run_id: str, source: str) -> NotebookNode:
    """The ``%%rlm`` cell a run starts with (``source``: its flags and query)."""
    return nbformat.v4.new_code_cell(source, id=new_cell_id(), metadata=_meta(run_id, 0, "query"))


def thought_cell(run_id: str, step: int, text: str, thinking: str | None = None, *, cell_id: str | None = None,
                 **extra: Any) -> NotebookNode:
    """The model's prose; its thinking (if any) folded above it and kept whole
    in ``metadata.rlm.thinking``."""
    return new_cell("markdown", thought_source(text, thinking), cell_id or new_cell_id(),
                    _meta(run_id, step, "thought", thinking=thinking or None, **extra))


def thought_source(text: str, thinking: str | None = None) -> str:
    """A thought cell's source: the thinking folded above the prose."""
    if not thinking:
        return text
    return thinking_block(thinking) + (f"\n\n{text}" if text else "")


def thinking_block(thinking: str) -> str:
    """Thinking as a folded block (``cells.reply_text`` takes it off again)."""
    body = thinking.replace("</details>", "&lt;/details>")
    return f"{THINKING_OPEN}\n\n{body}\n\n</details>"


def code_cell(run_id: str, step: int, code: str, *, cell_id: str | None = None, **extra: Any) -> NotebookNode:
    return new_cell("code", code, cell_id or new_cell_id(), _meta(run_id, step, "code", **extra))


# Why a code cell of a step did not run, as ``metadata.rlm.skipped`` records it.
NEVER_CLOSED = "its ``` fence was never closed"
AFTER_ANSWER = "an answer was already given"
REFUSED = "the user chose not to run it"
STOPPED = "the run was stopped at its approval prompt"


def not_run(reason: str | None) -> str:
    """The sentence that says a code cell did not run, and why: in the cell
    and in what the root model is told."""
    return f"This code block was not run: {reason}." if reason else "This code block was not run."


def skip(cell: NotebookNode, reason: str) -> str:
    """Mark a code cell that will not run: its status, why, and a note as its
    output (a display, never a stream or a result: the code did not run).
    Returns the sentence, for the root model's feedback."""
    sentence = not_run(reason)
    cell.metadata["rlm"].update(status="skipped", skipped=reason)
    cell.outputs = [nbformat.v4.new_output(
        "display_data", data={"text/plain": sentence, "text/markdown": f"*{_markdown_text(sentence)}*"},
        metadata={"rlm": {"note": "not run"}})]
    return sentence


def _markdown_text(text: str) -> str:
    """Plain text that Markdown shows as written."""
    return re.sub(r"([\\`*_\[\]<>#|~])", r"\\\1", text)


def answer_cell(run_id: str, step: int, answer: Any, variable: str | None, reason: str) -> NotebookNode:
    text = answer_text(answer)
    if variable:
        head = f"**Final answer** (the value of `{variable}`, {plural(len(text), 'character')})"
    else:
        head = "**Final answer**"
    how, shown = answer_markdown(text[:ANSWER_PREVIEW_CHARS])
    if len(text) > ANSWER_PREVIEW_CHARS:
        shown += (f"\n\n*... {plural(len(text) - ANSWER_PREVIEW_CHARS, 'more character')}"
                  + (f" in `{variable}`" if variable else "") + "*")
    return nbformat.v4.new_markdown_cell(
        f"{head}\n\n{shown}", id=new_cell_id(),
        metadata=_meta(run_id, step, "answer", answer_var=variable, answer_chars=len(text), answer_format=how,
                       reason=reason),
    )


def ended_cell(run_id: str, step: int, reason: str, error: str | None) -> NotebookNode:
    """The closing cell of a run that ended without an answer."""
    text = f"**Run ended without an answer** (reason: `{reason}`)"
    if error:
        text += f"\n\n{error}"
    return nbformat.v4.new_markdown_cell(text, id=new_cell_id(), metadata=_meta(run_id, step, "answer", reason=reason))


def answer_text(answer: Any) -> str:
    if answer is None:
        return ""
    return answer if isinstance(answer, str) else str(answer)


def _quote(text: str) -> str:
    return "\n".join("> " + line if line else ">" for line in text.splitlines()) or ">"


# Lines that show the model wrote Markdown: headings, lists, tables, fences,
# quotes, emphasis, links.
_MARKDOWN = re.compile(r"^\s{0,3}(#{1,6}\s|[-*+]\s|\d+[.)]\s|\||```|~~~|>)|\*\*\S|__\S|\[[^\]]+\]\(", re.M)


def answer_markdown(text: str) -> tuple[str, str]:
    """(how, markdown): the answer as the answer cell shows it, as written:
    rendered where the model wrote Markdown ("markdown"), quoted when it is
    one line of plain text ("quoted"), preformatted with every line break kept
    when it is several ("preformatted")."""
    if _MARKDOWN.search(text):
        return "markdown", text
    if "\n" not in text.strip():
        return "quoted", _quote(text)
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return "preformatted", f"{fence}text\n{text.strip(chr(10))}\n{fence}"


def answer_from_markdown(body: str, how: str | None, chars: int | None = None) -> str:
    """The answer (its preview, when longer than the cell shows) back from an
    answer cell's body: :func:`answer_markdown` reversed; cells without
    ``answer_format`` quoted every answer."""
    if how is not None and chars is not None and chars > ANSWER_PREVIEW_CHARS:
        body = body.rpartition("\n\n*... ")[0] or body  # the note on what the cell leaves out
    lines = body.splitlines()
    if how == "markdown":
        return body
    if how == "preformatted" and len(lines) >= 2:
        return "\n".join(lines[1:-1])
    return "\n".join(line[2:] if line.startswith("> ") else line.lstrip(">") for line in lines)


def new_notebook(cells: list[NotebookNode], run_record: dict[str, Any]) -> NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata.update({
        "kernelspec": {"name": "rlm", "display_name": "RLM (Python 3)", "language": "python"},
        "language_info": {"name": "python"},
        "rlm": {"format": FORMAT, "version": __version__, "runs": [run_record]},
    })
    nb.cells = list(cells)
    return nb
