"""Small helpers shared by the test modules (plain functions; fixtures live in conftest.py)."""

from __future__ import annotations

from typing import Any

from rlm_kernel.testing.server import ScriptedServer, prompt_text

ROOT = "openai/root-model"
SUB = "openai/sub-model"


def repl(code: str, prose: str = "") -> str:
    """A root reply: optional prose, then one ```repl block."""
    head = f"{prose}\n\n" if prose else ""
    return f"{head}```repl\n{code.strip()}\n```"


def root_requests(server: ScriptedServer, model: str = "root-model") -> list[dict[str, Any]]:
    return server.calls(model)


def last_user(body: dict[str, Any]) -> str:
    """The last user message of a request: for a root request after step 1,
    the feedback on the previous step."""
    return prompt_text(body)


def feedback_after(server: ScriptedServer, step: int, model: str = "root-model") -> str:
    """What the root model was told after ``step`` (the last user message of
    root request number ``step + 1``)."""
    calls = server.calls(model)
    assert len(calls) > step, f"only {len(calls)} root requests were made"
    return last_user(calls[step])


def cells_by_role(nb: Any, role: str) -> list[Any]:
    return [c for c in nb.cells if c.metadata.get("rlm", {}).get("role") == role]


def cell_text(cell: Any) -> str:
    """What a code cell printed and returned (stdout/stderr, results, errors),
    in order. Display outputs (such as sub-call widgets) are left out."""
    parts = []
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            parts.append(out.text)
        elif out.output_type == "error":
            parts.append(f"{out.ename}: {out.evalue}\n" + "\n".join(out.traceback))
        elif out.output_type == "execute_result":
            parts.append(str(out.get("data", {}).get("text/plain", "")))
    return "".join(parts)


class Router:
    """A responder that scripts several "root" models at once (a run and its
    child runs each talk to their own model name); any other model gets
    ``sub(prompt)``. Items are strings, Replies or callables taking the body."""

    def __init__(self, scripts: dict[str, list[Any]], sub: Any = None,
                 default: str = "FINAL(no more scripted replies)") -> None:
        import threading

        self.scripts = {name: list(items) for name, items in scripts.items()}
        self.sub = sub or (lambda prompt: f"echo: {prompt[:80]}")
        self.default = default
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Any:
        model = body.get("model")
        if model in self.scripts:
            with self._lock:
                items = self.scripts[model]
                item = items.pop(0) if items else self.default
            return item(body) if callable(item) else item
        return self.sub(prompt_text(body))
