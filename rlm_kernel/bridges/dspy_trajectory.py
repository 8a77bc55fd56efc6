"""A ``dspy.RLM`` trajectory read as an :class:`~.imported.ImportedRun`.

``dspy.RLM`` returns a prediction whose ``trajectory`` is a list of steps,
each ``{"reasoning", "code", "output"}`` (``REPLEntry.model_dump()``); the
last step's output is ``FINAL: {...}`` when its code called ``SUBMIT``. A
JSON dump of that list, or of an object holding it as ``trajectory``
beside the prediction's output fields (``answer``...) and
``final_reasoning``, is what this reads. dspy records neither the models,
the question nor the sub-calls in it: the import command takes the models
and the question from its flags, and a re-run makes the sub-calls afresh.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import RLMError
from .imported import ImportedBlock, ImportedRun, ImportedStep

FINAL = "FINAL: "


def read_trajectory(path: str, *, query: str | None, model: str | None, sub_model: str | None) -> ImportedRun:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except OSError as error:
        raise RLMError(f"Cannot read {path!r}: {error.strerror or error}.") from None
    except ValueError:
        raise RLMError(f"{path!r} is not a dspy.RLM trajectory: it is not JSON.") from None
    steps = data.get("trajectory") if isinstance(data, dict) else data
    if not isinstance(steps, list) or not steps or not all(isinstance(s, dict) and "code" in s for s in steps):
        raise RLMError(f"{path!r} is not a dspy.RLM trajectory: it needs a list of steps with reasoning, code "
                       "and output (a prediction's `trajectory`).")
    fields = {k: v for k, v in data.items() if k not in ("trajectory", "final_reasoning")} if isinstance(data, dict) \
        else {}
    last = str(steps[-1].get("output") or "")
    answer: str | None = None
    if last.startswith(FINAL):
        answer = str(fields["answer"]) if "answer" in fields else (
            str(next(iter(fields.values()))) if len(fields) == 1 else last[len(FINAL):])
    imported = [ImportedStep(prose=str(s.get("reasoning") or ""), blocks=[_block(s, s is steps[-1] and answer is not
                                                                                 None)]) for s in steps]
    return ImportedRun(query=query or "(the question was not in the dspy trajectory)",
                       model=model or "unknown", sub_model=sub_model, steps=imported, answer=answer,
                       reason="final" if answer is not None else "max_iterations",
                       limits={"max_iterations": max(len(steps), 1)}, library="dspy", source=path)


def _block(step: dict[str, Any], submitted: bool) -> ImportedBlock:
    output = str(step.get("output") or "")
    error = output.startswith(("[Error]", "[Type Error]"))
    if submitted:  # SUBMIT's record: the answer cell says it
        output = ""
    return ImportedBlock(code=str(step.get("code") or ""), stdout="" if error else output,
                         stderr=output if error else "", error=error)


__all__ = ["read_trajectory"]
