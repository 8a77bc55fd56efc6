"""The ``rlm_run`` tool: one RLM run for an MCP client (a coding agent).

Its arguments are the question, the context (paths, folders, globs or URLs,
loaded as ``--context`` loads them; or the text itself) and the run options
a caller may set: the root and sub-model, among those the server allows,
and the run's limits, each only as tight as the server's or tighter
(``callers.py``, the rule ``rlm-kernel serve`` applies to a request). The
arguments' schema is derived from the options' declarations. The result is
the answer, the reason the run ended, its steps, sub-calls, usage and cost,
and the path of the trajectory notebook, which a person opens in
JupyterLab to see the run and take it over.
"""

from __future__ import annotations

import inspect
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from .._words import plural
from ..callers import CALLER_OPTIONS, LimitError, keep_context, tightened
from ..engine.runs.options import BY_NAME, resolve
from ..engine.trajectory.sink import Sink
from ..errors import RLMError
from ..sinks.stopper import RunStopper

TOOL = "rlm_run"
DESCRIPTION = (
    "Answer a question about a context too large to read at once, with a Recursive Language Model: a root model "
    "writes Python that reads slices of `context` and calls sub-models on them, step by step, until it answers. "
    "Give the context as paths (files, folders, globs) or URLs, or as text. Returns the answer, why the run "
    "ended, its usage and cost, and the trajectory notebook, which a person can open in JupyterLab and take over."
)
_TYPES = {"whole": int, "real": float, "flag": bool}


@dataclass
class ToolSettings:
    """What every call of a server shares: its run options (the ceilings),
    the models a caller may pick, and where trajectories go."""

    options: dict[str, Any] = field(default_factory=dict)
    models: tuple[str, ...] = ()  # more models a caller may name, besides the server's root and sub-model
    runs_dir: str = "rlm-runs"

    def allowed_models(self) -> list[str]:
        server = resolve(self.options)
        return list(dict.fromkeys(m for m in (server.model, server.sub_model, *self.models) if m))


@dataclass
class ToolCall:
    """A call read and checked: ready to run."""

    query: str
    context: Any
    sources: list[str] | None
    options: dict[str, Any]
    text: str | list[str] | None = None  # context given as text: kept beside the notebook


def parameters() -> list[inspect.Parameter]:
    """The tool's arguments (its input schema), from the options' declarations."""
    from pydantic import Field

    keyword = inspect.Parameter.KEYWORD_ONLY

    def param(name: str, kind: Any, description: str, default: Any = None, **bounds: Any) -> inspect.Parameter:
        return inspect.Parameter(name, keyword, default=default,
                                 annotation=Annotated[kind, Field(description=description, **bounds)])

    made = [
        param("question", str, "The question to answer about the context.", inspect.Parameter.empty),
        param("context", list[str] | None, "Files, folders, globs or http(s) URLs to load as the context, "
              "in order (paths are the server's: absolute, or relative to where it was started)."),
        param("context_text", str | None, "The context itself, as text (instead of, or besides, `context`)."),
        param("model", str | None, "The root model (a litellm name); one of the models the server allows."),
        param("sub_model", str | None, "The model for sub-calls; one of the models the server allows."),
    ]
    for name in CALLER_OPTIONS:
        option = BY_NAME[name]
        bounds = {} if option.kind == "flag" else {"gt" if option.above else "ge": option.lowest}
        made.append(param(name, _TYPES[option.kind] | None,
                          f"{option.help}; at most the server's own limit.".replace(" (default", " (server default"),
                          **bounds))
    return made


def read_call(arguments: dict[str, Any], settings: ToolSettings) -> ToolCall:
    """The call's run, or an :class:`RLMError` saying in one sentence what is wrong."""
    from ..context.files import load_context

    query = arguments.get("question")
    if not isinstance(query, str) or not query.strip():
        raise RLMError("The question is empty; say what you want to know about the context.")
    server = resolve(settings.options)
    chosen: dict[str, Any] = {}
    allowed = settings.allowed_models()
    for name in ("model", "sub_model"):
        model = arguments.get(name)
        if model is not None:
            if model not in allowed:
                raise RLMError(f"{name} {model!r} is not one this server allows: {', '.join(allowed)} (start it "
                               "with --allow-model NAME for more).")
            chosen[name] = model
    for name in CALLER_OPTIONS:
        if arguments.get(name) is not None:
            try:
                chosen[name] = tightened(name, arguments[name], server)
            except LimitError as error:
                raise RLMError(f"{name} {error}.") from None
    paths, text = arguments.get("context") or [], arguments.get("context_text")
    if not paths and text is None:
        raise RLMError("Give the context: `context` (paths or URLs) or `context_text` (the text itself).")
    loaded = load_context(list(paths)) if paths else None
    if loaded is None:
        return ToolCall(query, text, None, chosen, text=text)
    if text is None:
        return ToolCall(query, loaded.value, list(loaded.sources), chosen)
    parts = [loaded.value] if isinstance(loaded.value, str) else list(loaded.value)
    return ToolCall(query, [text, *parts], list(loaded.sources), chosen, text=[text, *map(str, parts)])


def run_call(call: ToolCall, settings: ToolSettings, sink: Sink | None = None) -> Any:
    """Run it to the end (on the calling thread); the notebook goes to the runs folder."""
    from ..api import RLM

    folder = Path(settings.runs_dir)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        stem = folder / f"rlm-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"
        sources = keep_context(call.text, stem) if call.text is not None else call.sources
    except OSError as error:
        raise RLMError(f"Cannot write to the runs folder {str(folder)!r}: {error.strerror or error}.") from None
    rlm = RLM(**{**settings.options, **call.options})
    return rlm.completion(call.context, call.query, output=str(stem.resolve()) + ".ipynb", sources=sources,
                          sink=sink)


def result_object(result: Any) -> dict[str, Any]:
    """What the caller gets back."""
    record = result.to_json()
    return {
        "answer": record["answer"] if result.reason == "final" else None,
        "reason": result.reason,
        "error": result.error,
        "steps": result.iterations,
        "subcalls": result.subcalls,
        "usage": record["usage"],
        "cost_usd": result.cost_usd,
        "notebook": result.notebook_path,
        "run_id": result.run_id,
    }


def step_line(step: Any, status: dict[str, Any]) -> str:
    """``step 3: 40 sub-calls, $0.0200`` (the whole run's so far)."""
    cost = status.get("cost_usd")
    price = f"${cost:.4f}" if cost is not None else "price unknown"
    return f"step {step}: {plural(int(status.get('subcalls') or 0), 'sub-call')}, {price}"


class StepProgress(RunStopper):
    """The root run's progress, a line after each of its code cells (``step
    3: 40 sub-calls, $0.0200``) and one at its end, said through
    ``say(count, line)`` with ``count`` rising by one each time (MCP's
    progress must grow); stoppable from the caller's side."""

    def __init__(self, say: Callable[[int, str], None]) -> None:
        super().__init__()
        self.say = say
        self.count = 0

    def _tell(self, line: str) -> None:
        self.count += 1
        self.say(self.count, line)

    def cell_finished(self, run: Any, cell: Any) -> None:
        meta = cell.metadata.get("rlm", {})
        if run.depth == 0 and meta.get("role") == "code":
            self._tell(step_line(meta.get("step"), run.status()))

    def run_ended(self, run: Any, result: Any) -> None:
        if run.depth == 0:
            self._tell(f"run {result.run_id} ended ({result.reason}) after {plural(result.iterations, 'step')}")


__all__ = ["DESCRIPTION", "TOOL", "StepProgress", "ToolCall", "ToolSettings", "parameters", "read_call",
           "result_object", "run_call"]
