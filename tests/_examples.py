"""Running the example notebooks against scripted models: what
test_examples.py (every example, in this environment) and test_binder.py
(the quickstart, in a fresh Binder venv) share."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat
from _helpers import ROOT, SUB, clean_env, repl

from rlm_kernel.testing.server import prompt_text

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
FAKE_KEY = "sk-examples-fake-0123456789abcdef"
PROBE_MARK = "RLM-EXAMPLE-PROBE "


def by_step(*replies: Any) -> Callable[[dict[str, Any]], Any]:
    """A root model that answers each request according to how far the run
    has got (the number of its own replies in the history); a reply may be
    a callable taking the request body."""

    def reply(body: dict[str, Any]) -> Any:
        step = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
        item = replies[step] if step < len(replies) else "FINAL(no more scripted replies)"
        return item(body) if callable(item) else item

    return reply


def scripted(root: Callable[[dict[str, Any]], Any], sub: Callable[[str], Any]) -> Callable[[dict[str, Any]], Any]:
    """The scripted server's responder: ``root(body)`` for the root model,
    ``sub(prompt)`` for every other model."""

    def respond(body: dict[str, Any]) -> Any:
        return root(body) if body.get("model") == ROOT.split("/", 1)[1] else sub(prompt_text(body))

    return respond


def probe_source(extra: dict[str, str] | None = None) -> str:
    """A cell that prints the run's result (and ``extra`` expressions) as JSON."""
    values = ", ".join(f"{name!r}: repr({expr})" for name, expr in (extra or {}).items())
    return (f"import json as _json\n"
            f"print({PROBE_MARK!r} + _json.dumps({{'result': rlm_result.to_json(), 'values': {{{values}}}}}))")


def read_probe(nb: Any) -> dict[str, Any]:
    text = "".join(o.get("text", "") for o in nb.cells[-1].get("outputs", []) if o.output_type == "stream")
    assert PROBE_MARK in text, f"the probe cell printed no result: {text!r}"
    return json.loads(text.split(PROBE_MARK, 1)[1])


def example_env(api_base: str, saved: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """What the kernel sees: the scripted models, a fake key, and the saved
    notebook's path (Jupyter's JPY_SESSION_NAME; runs write rlm-runs/ beside it)."""
    return clean_env(base, RLM_MODEL=ROOT, RLM_SUB_MODEL=SUB, RLM_API_BASE=api_base, OPENAI_API_KEY=FAKE_KEY,
                     JPY_SESSION_NAME=str(saved))


# The quickstart's scripted models: find the helpers' docstrings in the
# engine's source, then one line per helper from a sub-model.
QUICKSTART_ROOT = by_step(
    repl(r'''
import re
helpers = {}
for source in context:
    for name, doc in re.findall(r'def ((?:llm|rlm)_query\w*)\(self[^)]*\)[^:]*:\s*"""(.*?)"""', source, re.S):
        helpers[name] = " ".join(doc.split())
print(helpers)
''', "The helpers are methods in the engine's source: find their definitions and docstrings."),
    repl(r'''
lines = llm_query_batched([f"In one short line, what does `{name}` do? Its docstring: {doc}" for name, doc in helpers.items()])
summary = "\n".join(f"{name}: {line.strip()}" for name, line in zip(helpers, lines))
print(summary)
''', "One line per helper, from a sub-model."),
    "FINAL_VAR(summary)",
)


def quickstart_sub(prompt: str) -> str:
    doc = prompt.split("Its docstring: ", 1)[-1]
    return re.split(r"[;.] ", doc, maxsplit=1)[0].rstrip(".") + "."


def quickstart_responder() -> Callable[[dict[str, Any]], Any]:
    return scripted(QUICKSTART_ROOT, quickstart_sub)


RUN_TIMEOUT = 180  # per cell: kernel start, litellm's import, a scripted run


def execute(nb: Any, saved: Path, api_base: str, cwd: Path = EXAMPLES) -> None:
    """Save ``nb`` as ``saved`` (the kernel reads it for replay and continue),
    then run every cell in a kernel whose working directory is ``cwd``."""
    from nbclient import NotebookClient

    nbformat.write(nb, saved)
    client = NotebookClient(nb, kernel_name="rlm", timeout=RUN_TIMEOUT, resources={"metadata": {"path": str(cwd)}})
    client.execute(env=example_env(api_base, saved))
