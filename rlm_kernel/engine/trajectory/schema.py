"""The trajectory format as a published JSON Schema (``trajectory.schema.json``,
shipped in the package): checking a notebook's ``metadata.rlm`` against it,
and refusing, in one sentence, a notebook of a format newer than this
rlm-kernel reads.

The schema is the contract for other tools; the engine writes to it and a
test checks every fixture notebook and every notebook a test run writes
(``RLM_CHECK_TRAJECTORY=1`` makes every notebook written in the process
checked before it is written)."""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterator, Mapping
from importlib import resources
from typing import Any

from ...errors import RLMError

FORMAT = 1  # the trajectory format this rlm-kernel writes and reads
CHECK_ENV = "RLM_CHECK_TRAJECTORY"


@functools.lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    """The schema document (``$defs.notebook`` and ``$defs.cell`` are the two roots)."""
    text = resources.files(__package__).joinpath("trajectory.schema.json").read_text(encoding="utf-8")
    return json.loads(text)


@functools.lru_cache(maxsize=2)
def _validator(root: str) -> Any:
    import jsonschema  # nbformat's dependency

    document = schema()
    return jsonschema.Draft202012Validator({**document, "$ref": f"#/$defs/{root}"})


def problems(nb: Mapping[str, Any]) -> Iterator[str]:
    """Each way ``nb``'s ``rlm`` metadata breaks the schema, as a sentence naming where."""
    rlm = (nb.get("metadata") or {}).get("rlm")
    if rlm is not None:
        for error in _validator("notebook").iter_errors(rlm):
            yield f"metadata.rlm{_path(error)}: {error.message}"
    for index, cell in enumerate(nb.get("cells") or []):
        meta = (cell.get("metadata") or {}).get("rlm")
        if meta is None:
            continue
        for error in _validator("cell").iter_errors(meta):
            yield f"cell {index} ({cell.get('id')}) metadata.rlm{_path(error)}: {error.message}"


def _path(error: Any) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)


def check(nb: Mapping[str, Any]) -> None:
    """Raise ``RLMError`` naming the first break of the schema (at most three listed)."""
    found = []
    for problem in problems(nb):
        found.append(problem)
        if len(found) == 3:
            break
    if found:
        raise RLMError("The notebook's rlm metadata does not follow the trajectory schema "
                       f"(rlm_kernel/engine/trajectory/trajectory.schema.json): {'; '.join(found)}.")


def check_when_asked(nb: Mapping[str, Any]) -> None:
    """:func:`check` when ``$RLM_CHECK_TRAJECTORY`` is set (the test suite sets it)."""
    if os.environ.get(CHECK_ENV):
        check(nb)


def check_readable(nb: Mapping[str, Any], where: str = "The notebook") -> None:
    """Refuse, in one sentence naming the versions, a notebook whose
    trajectory format is newer than this rlm-kernel reads. A notebook
    without ``format`` predates versioning and reads as format 1."""
    rlm = (nb.get("metadata") or {}).get("rlm") or {}
    written = rlm.get("format", 1)
    if not isinstance(written, int) or written > FORMAT:
        by = f" by rlm-kernel {rlm['version']}" if rlm.get("version") else ""
        raise RLMError(f"{where} was written{by} in trajectory format {written}, and this rlm-kernel reads "
                       f"format {FORMAT} and older; upgrade rlm-kernel to open it.")


__all__ = ["CHECK_ENV", "FORMAT", "check", "check_readable", "check_when_asked", "problems", "schema"]
