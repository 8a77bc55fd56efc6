"""One batch task in a worker process: a local worker of a process pool, or
a Ray worker on any node of a cluster. :func:`run_task` is what both call;
it builds the run through ``RLM.completion`` like ``rlm-kernel run`` does."""

from __future__ import annotations

import os
import signal
import tempfile
from pathlib import Path
from typing import Any

from .._deferred_grammar import defer_iri_grammar

_busy = False  # a run is under way in this worker
_stopping = False  # Ctrl-C was pressed: start no more tasks
_clients: Any = None  # builder.ModelClients: one Router per router file for the tasks of this worker


def _on_sigint(signum: int, frame: Any) -> None:
    # Ctrl-C on the terminal reaches every worker: it stops a run (which then
    # ends "interrupted" and writes its notebook); an idle worker only stops
    # taking tasks (those the pool queued to it come back as not run).
    global _stopping
    _stopping = True
    if _busy:
        raise KeyboardInterrupt


def start_local_worker() -> None:
    """The initializer of a local worker process."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    defer_iri_grammar()
    signal.signal(signal.SIGINT, _on_sigint)


def run_task(task: dict[str, Any], options: dict[str, Any], notebook: str, *,
             return_notebook: bool = False, check: bool = False) -> dict[str, Any] | None:
    """Run one task; its results line. The trajectory is written to
    ``notebook``; with ``return_notebook`` (a Ray worker, maybe on another
    machine) it is written here to a temporary file and returned in the
    line as ``_notebook`` for the driver to write. ``check``: check the
    models here (the driver did not). None: not run (the batch is stopping)."""
    global _busy, _clients
    if _stopping:
        return None
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from ..api import RLM
    from ..builder import ModelClients
    from ..context.files import load_context
    from ..errors import RLMError
    from ..redaction import redact
    from .tasks import failed_line

    scratch = tempfile.mkdtemp(prefix="rlm-batch-") if return_notebook else None
    output = str(Path(scratch, "run.ipynb")) if scratch else notebook
    try:
        rlm = RLM(check=check, **options)
        if rlm.options.router:
            _clients = _clients or ModelClients()
            rlm.client = _clients.get(rlm.options)
        if task["paths"] is not None:
            loaded = load_context(task["paths"], workers=0)  # the batch runs tasks side by side already
            context, sources = loaded.value, loaded.sources
        else:
            context, sources = task["context_text"], None
        _busy = True
        try:
            result = rlm.completion(context, task["query"], output=output, sources=sources)
        finally:
            _busy = False
        line = {"id": task["id"], **result.to_json(), "notebook": notebook}
        if scratch:
            line["_notebook"] = Path(output).read_text(encoding="utf-8")
        return line
    except RLMError as error:
        return failed_line(task["id"], redact(str(error)))
    except Exception as error:  # noqa: BLE001 - one task's failure is its own
        return failed_line(task["id"], redact(f"{type(error).__name__}: {error}"))
    finally:
        if scratch:
            import shutil

            shutil.rmtree(scratch, ignore_errors=True)


__all__ = ["run_task", "start_local_worker"]
