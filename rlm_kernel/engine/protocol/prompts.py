"""What the root model is told: the system prompt and the first user message,
which describes the context by its shape and never by its content."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...context.describe import describe as describe_documents

SYSTEM_PROMPT = """\
You answer a query about an input that is far too large to read at once. \
The input is loaded in a live Python session (a Jupyter kernel) as the variable \
`context`. You never see it directly: you write Python that looks at it, and you \
see what that code prints.

Work in steps. In each reply, think briefly, then write code in one or more \
fenced blocks tagged repl:

```repl
print(type(context), len(context))
print(context[:500])
```

The blocks run in order in the same session; variables persist between steps. \
After each step you get back the output of every block: its head and tail, with \
its total length, so print summaries rather than whole texts.

Available in the session besides `context`:
- `llm_query(prompt, model=None) -> str`: ask a language model (the sub-model) \
about a piece of text. It can read far more than you see in one output \
(hundreds of thousands of characters), so hand it large slices.
- `llm_query_batched(prompts, model=None) -> list[str]`: many llm_query calls \
at once, concurrently, answers in the same order. A failed prompt yields a string \
starting with "[sub-call error" in its slot; the others still succeed. Prefer \
this to a loop of llm_query.
- `rlm_query(prompt, model=None, context=None) -> str` and \
`rlm_query_batched(prompts, model=None)`: hand a sub-task to a recursive copy \
of yourself with its own session, where `context` is the prompt (or the \
`context` you pass). Use it for sub-tasks that themselves need code.
- `SHOW_VARS()`: list the variables you have made.

Each of the four query helpers also takes `wait=False`: it then returns at once \
with a handle `h` while the calls go on in the background: `h.done()`, \
`h.progress` (done, total), `h.result(timeout=None)` (the answer, or the list of \
answers in order), `h.cancel()`. Use it for a slow batch: start it, keep \
exploring in the next blocks and steps, and collect it with `h.result()` when \
you need it. After each step you are told which background jobs are still \
running; jobs still running when you answer are cancelled.

A good plan: look at the structure of `context` (type, length, separators), \
split it into chunks, use llm_query_batched on the chunks, keep the results in \
variables, combine them with code or one more sub-call, check the result, and \
answer.

When you are done, give the answer in exactly one of these ways:
- `FINAL(your answer)` on a line of its own outside code, for a short answer. \
The answer ends at the parenthesis that closes FINAL(: anything after it is ignored;
- `FINAL_VAR(name)` on a line of its own, or `FINAL_VAR('name')` in a repl block, \
to answer with the value of a variable you built (for long answers: it can be any size);
- `FINAL(value)` inside a repl block;
- or, in a repl block, `answer["content"] = value` then `answer["ready"] = True`: \
`answer` starts as the dict {"content": "", "ready": False} and is read when the \
block ends. If you assign `answer` to anything else it is simply your variable \
and this way of answering is off.

Rules the harness keeps:
- Only ```repl (or ```python) blocks run. Code in other fences, in `inline code`, \
or in your thinking (<think> or a reasoning field) never runs, and a FINAL there is \
not an answer.
- A FINAL(text) line in a reply that also has code is not taken: you have not \
seen that code's output yet. Answer in a later reply. A FINAL_VAR line after \
code is taken only if all of that reply's code ran without an error.
- Two different answers in one reply: neither is taken.
- FINAL(x) on a line, where x is also one of your variables, is not taken (the \
text "x" or its value?): write FINAL_VAR(x) for the value.

Only answer once you have checked the evidence.
"""


DOCUMENTS = """\
`context` was loaded from files: each document is a str that also has \
`.source` (its path or URL), `.kind`, `.metadata` and `.pages` (a PDF's pages, a \
deck's slides, a workbook's sheets, an e-book's chapters): `doc.pages[11]` is page \
12's text, `doc.page_at(m.start())` the page of a regex match, and each page starts \
with a marker line such as `[page 12]` or `[slide 3]`, so a slice you hand to a \
sub-call says where it comes from. Tables are pandas DataFrames \
(`df.attrs["source"]`); a SQLite file or a workbook is a dict of DataFrames by name. \
In your answer, cite the source and page of each fact, e.g. (report.pdf, page 12)."""


def system_prompt(context: Any) -> str:
    """The system prompt for a run on ``context``: with how to slice documents
    by page and cite them only when it holds documents loaded from files (a
    plain text's run pays no tokens for it)."""
    if describe_documents(context) is None:
        return SYSTEM_PROMPT
    return f"{SYSTEM_PROMPT}\n\n{DOCUMENTS}"


def describe_context(context: Any, sources: Sequence[str] | None = None) -> str:
    """One paragraph on the context's type and size; no content. Documents
    loaded from files are described by the loader (``context.describe``)."""
    held = getattr(context, "rlm_description", None)  # a context held in another kernel, described there by this
    if isinstance(held, str):
        return held
    documents = describe_documents(context)
    if documents is not None:
        return documents
    if isinstance(context, str):
        text = f"`context` is a str of {len(context):,} characters."
    elif isinstance(context, dict):
        keys = list(context)
        sizes = [_size(v) for v in context.values()]
        shown = ", ".join(repr(k) for k in keys[:20])
        more = f" and {len(keys) - 20:,} more" if len(keys) > 20 else ""
        text = (
            f"`context` is a dict with {len(keys):,} keys ({shown}{more}); "
            f"its values hold {sum(sizes):,} characters in total{_spread(sizes)}."
        )
    elif isinstance(context, (list, tuple)):
        sizes = [_size(item) for item in context]
        kinds = sorted({"str" if isinstance(item, str) else type(item).__name__ for item in context}) or ["nothing"]
        text = (
            f"`context` is a {'list' if isinstance(context, list) else 'tuple'} of {len(context):,} items "
            f"({'/'.join(kinds)}), {sum(sizes):,} characters in total{_spread(sizes)}."
        )
    else:
        text = f"`context` is a {type(context).__name__} of about {_size(context):,} characters when printed."
    if sources:
        listed = ", ".join(sources[:10]) + (f" and {len(sources) - 10:,} more" if len(sources) > 10 else "")
        text += f" It was loaded from: {listed}."
    return text


QUERY_MARK = "\n\nQuery: "


def first_message(context: Any, query: str, sources: Sequence[str] | None = None) -> str:
    return (
        f"{describe_context(context, sources)}{QUERY_MARK}{query}\n\n"
        "Start by writing code to look at `context`; you have not seen any of it yet."
    )


def with_notes(messages: list[dict[str, Any]], notes: Sequence[str]) -> list[dict[str, Any]]:
    """``messages`` with ``notes`` (the person's tools, earlier runs) in the
    first user message, between the context's description and the query;
    a note already there is not added again (a continued run's history)."""
    for index, message in enumerate(messages):
        content = message.get("content")
        if message.get("role") != "user" or not isinstance(content, str):
            continue
        new = [note for note in notes if note and note not in content]
        if not new:
            return messages
        head, mark, tail = content.partition(QUERY_MARK)
        block = "\n\n".join(new)
        content = f"{head}\n\n{block}{mark}{tail}" if mark else f"{block}\n\n{content}"
        return [*messages[:index], {**message, "content": content}, *messages[index + 1:]]
    return messages


def _size(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, (list, tuple)):
        return sum(_size(v) for v in value)
    if isinstance(value, dict):
        return sum(_size(v) for v in value.values())
    if isinstance(value, (bytes, bytearray)):
        return len(value)
    return len(repr(value)) if not hasattr(value, "__len__") else len(value)


def _spread(sizes: list[int]) -> str:
    if not sizes:
        return ""
    if len(sizes) <= 20:
        return f"; item lengths: {', '.join(f'{s:,}' for s in sizes)}"
    return (
        f"; item lengths: min {min(sizes):,}, max {max(sizes):,}, "
        f"mean {sum(sizes) // len(sizes):,} (first: {', '.join(f'{s:,}' for s in sizes[:10])})"
    )
